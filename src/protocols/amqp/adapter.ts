/**
 * The state every AMQP listener of a broker shares: options, the router, authentication, the connection count
 * against amqp-max-connections, rate-limited logs, figures, and the resource alarms behind connection.blocked.
 *
 * Alarms (RabbitMQ's memory and disk alarms, as clients see them): while one is raised, every connection that
 * has published stops reading its socket before its next publish is taken (TCP back-pressure reaches the
 * publisher), and connections whose client announced the `connection.blocked` capability are told
 * connection.blocked with the reason; connection.unblocked when the last alarm clears. Consumers keep consuming
 * (that is what frees memory and disk).
 * - memory: the process's RSS above `memoryHighWatermark`, looked at once a second (one timer for all
 *   connections, only while connections are open).
 * - disk: the broker's free-space reserve refusing durable queue writes (engine.writeRefusal(), looked at with
 *   memory), or a publish's write refused for lack of space (STORAGE_FULL: a stream's reserve or a full disk, the
 *   way MQTT and Kafka learn of it). The alarm clears `diskBlockMs` after the last refusal seen; publishers then
 *   try again and a further refusal raises it again.
 */
import type { Logger } from 'pino';
import { isFlowError, type Router } from '../../core/index.js';
import { ANONYMOUS, type AccessControl, type Principal } from '../../control/index.js';
import { LogLimiter } from '../../util/log-limit.js';
import type { AdapterContext } from '../types.js';
import type { ResolvedAmqpOptions } from './options.js';
import { InputBudget } from './intake.js';
import { DirectReplies } from './reply-registry.js';

/** What a connection needs from the adapter for alarms. */
export interface AlarmListener {
  /** Called when the blocked state changes (reason null: unblocked). */
  alarm(reason: string | null): void;
}

export type AuthOutcome = { ok: true; principal: Principal } | { ok: false; busy: boolean; reason: string; user?: string };

export class AmqpAdapter {
  readonly logger: Logger;
  readonly logLimit: LogLimiter;
  readonly router: Router;
  /** Open connections over every listener (amqp-max-connections), and those to tell of alarms. */
  readonly connections = new Set<AlarmListener>();
  private memoryAlarm = false;
  private diskAlarmUntil = 0;
  private blockedReason: string | null = null;
  private timer: NodeJS.Timeout | null = null;
  private refs = 0;
  readonly stats = {
    connectionsRefused: 0,
    authFailures: 0,
    published: 0,
    delivered: 0,
    confirmsAcked: 0,
    confirmsNacked: 0,
    returned: 0,
    /** Publishes that reached nothing and were not mandatory (dropped, as RabbitMQ's drop_unroutable). */
    droppedUnroutable: 0,
    channelErrors: 0,
    connectionErrors: 0,
    blockedEvents: 0,
    /** Times a connection stopped being read because the bytes queued for it passed socketHighWater. */
    outputPauses: 0,
    /** Connections closed because the bytes queued for them did not go down for sendTimeoutMs. */
    sendTimeouts: 0,
    /** connection.update-secret accepted, and refused (the connection closed with 530). */
    secretUpdates: 0,
    secretRefusals: 0,
  };
  /** Memory of input not fully arrived: frames spanning reads, bodies spanning frames (intake.ts). */
  readonly input: InputBudget;
  /** Direct reply-to consumers by token (direct-reply.ts). */
  readonly replies = new DirectReplies();

  constructor(
    readonly ctx: AdapterContext,
    readonly options: ResolvedAmqpOptions,
    /** The control plane: logins, policies, quotas and the client registry. */
    readonly access: AccessControl,
    private readonly rss: () => number = () => process.memoryUsage.rss(),
  ) {
    this.logger = ctx.logger;
    this.input = new InputBudget(options.frameAheadBudget, options.partialBodyBudget);
    this.logLimit = new LogLimiter(ctx.logger);
    // The Engine implements Router (src/core/exchanges.ts).
    this.router = ctx.engine as unknown as Router;
  }

  /** The resource alarms raised now (the management API's mem_alarm / disk_free_alarm). */
  get alarms(): { memory: boolean; disk: boolean } {
    return { memory: this.memoryAlarm, disk: this.diskAlarmUntil !== 0 };
  }

  /** The reason publishers are blocked now, or null. */
  get blocked(): string | null {
    return this.blockedReason;
  }

  /**
   * Checks a login. PLAIN and AMQPLAIN carry a clear-text password, checked through the control plane (the
   * directory's users through the guard, then the webhook for users it does not know). An empty username is
   * anonymous. While nobody could log in at all (no users, no webhook), a username is not checked either: clients
   * send guest/guest by default, and a zero-setup broker lets them in anonymously when anonymous AMQP is allowed.
   * Once a user exists (added live too), every username is checked.
   */
  async authenticate(username: string, password: Buffer, remoteAddress: string | undefined): Promise<AuthOutcome> {
    const a = this.access;
    if (username === '' || !a.hasUsers) {
      if (a.anonymousAllowed('amqp')) return { ok: true, principal: ANONYMOUS };
      this.stats.authFailures++;
      return {
        ok: false,
        busy: false,
        reason: a.hasUsers ? 'anonymous access is not allowed' : 'anonymous access is not allowed and no user exists',
        user: username,
      };
    }
    const v = await a.password(username, password, remoteAddress, 'amqp');
    if (v.verdict === 'ok') return { ok: true, principal: v.principal };
    this.stats.authFailures++;
    return { ok: false, busy: v.verdict === 'busy', reason: v.verdict === 'busy' ? 'too many login attempts, try later' : 'bad credentials', user: username };
  }

  /** A connection opened: counted against maxConnections; false when over (the caller closes it). */
  admit(c: AlarmListener): boolean {
    if (this.connections.size >= this.options.maxConnections) {
      this.stats.connectionsRefused++;
      return false;
    }
    this.connections.add(c);
    // One timer for every connection, while there are any: memory and the free-space reserve are looked at once a
    // second.
    if (this.timer === null) {
      this.timer = setInterval(() => this.check(), 1000);
      this.timer.unref();
    }
    return true;
  }

  leave(c: AlarmListener): void {
    this.connections.delete(c);
    if (this.connections.size === 0 && this.timer !== null && !this.memoryAlarm && this.diskAlarmUntil === 0) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }

  /** Store writes of publishes not settled yet, over every connection, and the most one connection had. */
  private readonly inFlight = { writes: 0, bytes: 0, peakWrites: 0, peakBytes: 0 };

  /** A connection started a write of `bytes`; `c` is its credit after it (for the peaks). */
  writeStarted(bytes: number, c: { writes: number; bytes: number }): void {
    const f = this.inFlight;
    f.writes++;
    f.bytes += bytes;
    if (c.writes > f.peakWrites) f.peakWrites = c.writes;
    if (c.bytes > f.peakBytes) f.peakBytes = c.bytes;
  }

  writeSettled(bytes: number): void {
    this.inFlight.writes--;
    this.inFlight.bytes -= bytes;
  }

  /** A publish's store write failed: a full disk raises the alarm; other failures are logged (rate limited). */
  readonly storeWriteFailed = (err: unknown): void => {
    this.writeFailed(err);
    if (!isFlowError(err, 'STORAGE_FULL'))
      this.logLimit.log('warn', 'amqp publish write failed', { err: err instanceof Error ? err.message : String(err) }, 'amqp: a publish could not be stored');
  };

  /** A write was refused: a STORAGE_FULL raises the disk alarm. */
  writeFailed(err: unknown): void {
    if (!isFlowError(err, 'STORAGE_FULL')) return;
    const first = this.diskAlarmUntil === 0;
    this.diskAlarmUntil = Date.now() + this.options.diskBlockMs;
    if (first) this.logger.warn({ err: (err as Error).message }, 'amqp: disk alarm, publishers blocked');
    if (this.timer === null) {
      this.timer = setInterval(() => this.check(), 1000);
      this.timer.unref();
    }
    this.update();
  }

  /** The periodic look at memory and the disk alarm's age (also called by tests). */
  check(now = Date.now()): void {
    const limit = this.options.memoryHighWatermark;
    if (limit > 0) {
      const rss = this.rss();
      if (!this.memoryAlarm && rss > limit) {
        this.memoryAlarm = true;
        this.logger.warn({ rss, limit }, 'amqp: memory alarm, publishers blocked');
      } else if (this.memoryAlarm && rss < limit * 0.95) {
        this.memoryAlarm = false;
        this.logger.info({ rss, limit }, 'amqp: memory alarm cleared');
      }
    }
    // The free-space reserve, asked directly: the disk alarm holds while durable queue writes are refused, even when
    // no publish has failed yet (a refused write raises it too, see writeFailed).
    const refusal = this.ctx.engine.writeRefusal();
    if (refusal !== null) {
      if (this.diskAlarmUntil === 0) this.logger.warn({ err: refusal.message }, 'amqp: disk alarm, publishers blocked');
      this.diskAlarmUntil = now + this.options.diskBlockMs;
    } else if (this.diskAlarmUntil !== 0 && now >= this.diskAlarmUntil) this.diskAlarmUntil = 0;
    this.update();
  }

  private update(): void {
    const reason = this.memoryAlarm ? 'low on memory' : this.diskAlarmUntil !== 0 ? 'low on disk' : null;
    if (reason === this.blockedReason) return;
    const was = this.blockedReason;
    this.blockedReason = reason;
    if (reason !== null && was === null) this.stats.blockedEvents++;
    // A change of reason while blocked is not news to clients; a change between blocked and not is.
    if ((was === null) !== (reason === null)) for (const c of this.connections) c.alarm(reason);
  }

  retain(): void {
    this.refs++;
  }

  release(): void {
    if (--this.refs > 0) return;
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.logLimit.stop();
  }

  figures(): Record<string, unknown> {
    return {
      connections: this.connections.size,
      blocked: this.blockedReason,
      ...this.stats,
      ...this.input.figures(),
      writesInFlight: this.inFlight.writes,
      writeBytesInFlight: this.inFlight.bytes,
      peakWritesInFlightPerConnection: this.inFlight.peakWrites,
      peakWriteBytesInFlightPerConnection: this.inFlight.peakBytes,
      logLinesSuppressed: this.logLimit.suppressedTotal,
      directReplyConsumers: this.replies.size,
      directRepliesDelivered: this.replies.stats.delivered,
      directRepliesDropped: this.replies.stats.dropped,
      directRepliesForwarded: this.replies.stats.forwarded,
    };
  }
}
