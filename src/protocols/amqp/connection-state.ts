/**
 * An AMQP connection's state (`AmqpConnectionState`, the base of `AmqpConnection`): who it is and what it
 * negotiated, its channels, and what every part of it uses: output (corked writes, unsent bytes, drain), flow
 * (what stops the socket being read: backlog, alarms, store writes in flight, quotas, unsent bytes, the partly
 * received bodies' budget; the bytes-out quota holding deliveries back), hard errors (connection.close) and the life
 * cycle (the listener's sweep: handshake deadline, heartbeats, send timeout; close, teardown). connection.ts adds the
 * input (framing) and the connection class (handshake, login, tune, open) on top.
 */
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import type { Access, ClientEntry, Principal, QuotaLease } from '../../control/index.js';
import { ANONYMOUS } from '../../control/index.js';
import { logKey } from '../../util/log-limit.js';
import type { AmqpAdapter } from './adapter.js';
import type { AmqpChannel } from './channel.js';
import type { ClientCapabilities, WriteCallbacks } from './types.js';
import { AmqpError, replyText, toAmqpError } from './errors.js';
import type { Gather } from './intake.js';
import { PublishCredit } from './credit.js';
import { CloseSignal } from '../listener.js';
import { DEFAULT_NAMESPACE, namespaceNames, type NamespaceNames } from '../../core/namespaces.js';
import { stripMethod } from './vhost.js';
import { AmqpCodecError, FRAME_MIN_SIZE, HEARTBEAT_FRAME, methodFrame, type AmqpMethod } from './wire.js';

/** Methods waiting behind asynchronous operations, over all channels, before the socket stops being read. */
const MAX_BACKLOG = 1024;
/** How long a connection.close we sent waits for close-ok. */
const CLOSE_OK_TIMEOUT_MS = 1000;

export const enum St {
  /** Waiting for the 8-byte protocol header. */
  Header,
  /** connection.start sent; waiting for start-ok. */
  StartOk,
  /** Checking the credentials. */
  Authenticating,
  /** connection.tune sent; waiting for tune-ok. */
  TuneOk,
  /** Tuned; waiting for connection.open. */
  Open,
  Opened,
  /** connection.close sent; waiting for close-ok. */
  Closing,
  Done,
}

export interface AmqpConnectionInit {
  id: string;
  remoteAddress?: string;
  remotePort?: number;
  /** The listener's name in the client registry ("amqp", "amqps"). */
  listener?: string;
  /** See KafkaConnectionInit.attachInput: read into a shared buffer; bytes are valid during the call only. */
  attachInput?: (receive: (bytes: Buffer) => void) => boolean;
}

const NO_CAPABILITIES: ClientCapabilities = Object.freeze({ blocked: false, cancelNotify: false });

export abstract class AmqpConnectionState {
  readonly id: string;
  readonly remoteAddress: string | undefined;
  readonly remotePort: number | undefined;
  /** The listener's name in the client registry ("amqp", "amqps"). */
  readonly listener: string;
  /** Tells the listener (and whoever asks for `closed`) that the connection is gone and its exclusive queues too. */
  readonly closeSignal = new CloseSignal();
  /** Resolves once the connection is gone (the promise is made when first asked for). */
  get closed(): Promise<void> {
    return this.closeSignal.closed;
  }
  protected st = St.Header;
  /** Frame-max for frames we receive and send (negotiated at tune-ok). */
  frameMax: number;
  protected channelMax: number;
  protected heartbeatMs = 0;
  /** The authenticated user (null: anonymous). */
  user: string | null = null;
  /** Who the connection acts as, and its view of the policies (set at login). */
  principal: Principal = ANONYMOUS;
  /** A connection.update-secret is being checked (update-secret.ts). */
  secretChecking = false;
  access!: Access;
  /** The name the client logged in with, for refusal texts ("guest" for anonymous, as RabbitMQ's default user). */
  loginName = 'guest';
  /** The virtual host the client opened, as it named it (refusal texts say "in vhost '<this>'"). */
  vhost = '/';
  /** The vhost's namespace names (vhost.ts): its methods' names are qualified in, stripped out. */
  names: NamespaceNames = namespaceNames(DEFAULT_NAMESPACE);
  /** The namespace's quota lease, from connection.open to close. */
  protected lease: QuotaLease | null = null;
  /** This connection in the client registry. */
  protected entry: ClientEntry | null = null;
  /** Deliveries are held back (bytes-out quota) until this time. */
  protected sendHoldUntil = 0;
  protected sendHoldTimer: NodeJS.Timeout | null = null;
  protected readTimer: NodeJS.Timeout | null = null;
  protected readUntil = 0;
  /** Capabilities the client announced in start-ok (set then: until login nobody looks). */
  capabilities: ClientCapabilities = NO_CAPABILITIES;
  /**
   * Open channels: the first in a field of its own (most connections use one), the others in a map made when a
   * second one opens.
   */
  protected firstChannel: AmqpChannel | null = null;
  protected moreChannels: Map<number, AmqpChannel> | null = null;
  protected logger: Logger | null = null;

  // input assembly
  /** The protocol header, or a frame header split over reads (taken when first needed). */
  protected head: Buffer | null = null;
  protected headHave = 0;
  /** A frame taken whole when its size arrived, `frameHave` bytes of it received... */
  protected frame: Buffer | null = null;
  protected frameHave = 0;
  /** ...with this many bytes still counted in the broker's budget of memory ahead of arrival; */
  protected reserved = 0;
  /** or a frame growing with the bytes that arrive. */
  protected gather: Gather | null = null;
  /** Memory held by this connection's partly received message bodies (see intake.ts). */
  protected bodyHeld = 0;

  // flow
  protected corked = false;
  protected backlog = 0;
  protected pausedFor = 0; // bit 1: backlog, 2: alarm, 4: store writes in flight, 8: quota, 16: unsent bytes, 32: body budget, 64: secret check
  /** Set once the client published: an alarm stops its reading. */
  publisher = false;
  protected alarmReason: string | null = null;
  /** A consumer was refused a delivery for the socket's sake: resume consumers on 'drain'. */
  starved = false;

  // sweep
  protected readonly openedAt = Date.now();
  protected inCount = 0;
  protected outCount = 0;
  /** inCount / outCount when the sweep last saw them change, and when that was. */
  protected seenIn = -1;
  protected seenOut = -1;
  protected seenInAt: number;
  protected seenOutAt: number;
  protected closeSentAt = 0;
  protected admitted = false;

  protected constructor(
    readonly stream: Duplex,
    readonly adapter: AmqpAdapter,
    init: AmqpConnectionInit,
  ) {
    this.id = init.id;
    this.remoteAddress = init.remoteAddress;
    this.remotePort = init.remotePort;
    this.listener = init.listener ?? 'amqp';
    // §4.2.3: until tune-ok, frames up to frame-min-size (a stranger cannot make us buffer more before logging in).
    this.frameMax = FRAME_MIN_SIZE;
    this.channelMax = adapter.options.channelMax;
    this.seenInAt = this.seenOutAt = this.openedAt;
  }

  protected static uncork(c: AmqpConnectionState): void {
    c.corked = false;
    c.stream.uncork();
  }

  /** ClientRegistration: the protocol. */
  get protocol(): string {
    return 'amqp';
  }

  /** ClientRegistration: bytes in and out (a net.Socket's counters). */
  get socket(): { readonly bytesRead: number; readonly bytesWritten: number } | undefined {
    return 'bytesRead' in this.stream ? (this.stream as unknown as { bytesRead: number; bytesWritten: number }) : undefined;
  }

  /** The connection's logger (made when first needed: most connections never log). */
  get log(): Logger {
    return (this.logger ??= this.adapter.logger.child({ conn: this.id, remote: `${this.remoteAddress ?? '?'}:${this.remotePort ?? '?'}` }));
  }

  get isOpen(): boolean {
    return this.st === St.Opened;
  }

  // ------------------------------------------------------------------ output

  send(buf: Buffer | Buffer[]): void {
    if (this.st === St.Done) return;
    if (!this.corked) {
      this.corked = true;
      this.stream.cork();
      process.nextTick(AmqpConnectionState.uncork, this);
    }
    if (Array.isArray(buf)) for (const b of buf) this.stream.write(b);
    else this.stream.write(buf);
    this.outCount++;
    // Every byte queued for the client counts: replies, confirms and heartbeats as well as deliveries. Above the
    // allowance the client is not read (it cannot make us queue more) until its socket drains.
    if (this.stream.writableLength > this.adapter.options.socketHighWater && (this.pausedFor & 16) === 0) this.outputBlocked();
  }

  /** When the socket went over socketHighWater without draining since, and how much it held when last looked at. */
  protected stalledAt = 0;
  protected stalledBytes = 0;

  protected outputBlocked(): void {
    // 'drain' comes only after a write that returned false (an allowance below the stream's own high-water mark).
    if (!this.stream.writableNeedDrain) return;
    this.adapter.stats.outputPauses++;
    this.pauseReading(16);
    this.stalledAt = Date.now();
    this.stalledBytes = this.stream.writableLength;
  }

  sendMethod(channel: number, m: AmqpMethod): void {
    this.send(methodFrame(channel, this.names.isDefault ? m : stripMethod(this.names, m)));
  }

  /** True when the socket holds more unsent bytes than consumers may add to. */
  get congested(): boolean {
    return this.stream.writableLength > this.adapter.options.socketHighWater;
  }

  /** Resolves once the socket's unsent bytes are below socketHighWater (at once if they are). */
  uncongested(): Promise<void> {
    if (!this.congested || !this.stream.writableNeedDrain || this.st === St.Done) return Promise.resolve();
    return new Promise<void>((resolve) => (this.drainWaiters ??= []).push(resolve));
  }

  protected drainWaiters: Array<() => void> | null = null;

  protected drained(): void {
    if ((this.pausedFor & 16) !== 0) {
      this.stalledAt = 0;
      this.resumeReading(16);
    }
    if (this.drainWaiters !== null) {
      const w = this.drainWaiters;
      this.drainWaiters = null;
      for (const f of w) f();
    }
    if (!this.starved || this.st !== St.Opened) return;
    this.starved = false;
    for (const ch of this.channelList()) ch.resumeConsumers();
  }

  /** A hard error: logged (rate limited) and the connection closed with its code. */
  protocolError(err: unknown): void {
    if (this.st === St.Done || this.st === St.Closing) return;
    let e: AmqpError;
    if (err instanceof AmqpCodecError) e = new AmqpError(err.replyCode, err.message, err.classId, err.methodId);
    else e = toAmqpError(err);
    this.adapter.stats.connectionErrors++;
    if (e.code === 541) this.log.error({ err }, 'amqp: internal error');
    else
      this.adapter.logLimit.log(
        'info',
        logKey('amqp connection error', this.remoteAddress),
        { remote: this.remoteAddress, conn: this.id, code: e.code, err: e.message },
        'amqp: connection error',
      );
    this.closeWith(e.code, e.message, e.classId, e.methodId);
  }

  /** Sends connection.close and waits (briefly) for close-ok; before the handshake got far, just closes. */
  closeWith(code: number, text: string, classId = 0, methodId = 0): void {
    if (this.st === St.Done || this.st === St.Closing) return;
    if (this.st === St.Header) return this.destroy();
    this.sendMethod(0, { name: 'connection.close', replyCode: code, replyText: replyText(code, text), classId, methodId } as AmqpMethod);
    this.st = St.Closing;
    this.closeSentAt = Date.now();
    // Channels stop now: their consumers are cancelled and unacked deliveries requeued.
    this.teardownChannels();
    // Only close-ok is read from now on: whatever stopped reading stops no more.
    this.resumeReading(this.pausedFor);
  }

  protected channel(ch: number): AmqpChannel | undefined {
    const c = this.firstChannel;
    if (c !== null && c.ch === ch) return c;
    return this.moreChannels?.get(ch);
  }

  /** What the management API reports (admin.ts) of what is otherwise this class's own. */
  managementFigures(): {
    state: string;
    channelMax: number;
    heartbeatSec: number;
    openedAt: number;
    frames: { in: number; out: number };
    channels: AmqpChannel[];
  } {
    const state =
      this.st === St.Opened
        ? (this.pausedFor & 2) !== 0
          ? 'blocked'
          : this.alarmReason !== null
            ? 'blocking'
            : 'running'
        : this.st >= St.Closing
          ? 'closing'
          : 'starting';
    return {
      state,
      channelMax: this.channelMax,
      heartbeatSec: Math.round(this.heartbeatMs / 1000),
      openedAt: this.openedAt,
      frames: { in: this.inCount, out: this.outCount },
      channels: this.channelList(),
    };
  }

  protected channelList(): AmqpChannel[] {
    const out = this.moreChannels === null ? [] : [...this.moreChannels.values()];
    if (this.firstChannel !== null) out.push(this.firstChannel);
    return out;
  }

  // ------------------------------------------------------------------ flow

  backlogChanged(delta: number): void {
    this.backlog += delta;
    if (this.backlog > MAX_BACKLOG) this.pauseReading(1);
    else if (this.backlog === 0) this.resumeReading(1);
  }

  protected pauseReading(bit: number): void {
    if (this.pausedFor === 0) this.stream.pause();
    this.pausedFor |= bit;
  }

  protected resumeReading(bit: number): void {
    if ((this.pausedFor & bit) === 0) return;
    this.pausedFor &= ~bit;
    if (this.pausedFor === 0 && this.st !== St.Done) this.stream.resume();
  }

  /**
   * This connection's partly received bodies hold `delta` bytes more (or less). Over the connection's own cap
   * (maxPartialBodyBytes) it is closed with 506 RESOURCE_ERROR; while the broker's partly received bodies are over
   * their budget (partialBodyBudget) it is not read until bodies complete or connections close. Should every
   * connection holding such bodies be waiting, none could finish one: the one that would wait last is closed (506)
   * instead, and its bodies' memory goes back to the others.
   */
  bodyBytes(delta: number): void {
    const was = this.bodyHeld;
    this.bodyHeld += delta;
    const b = this.adapter.input;
    b.partial(delta, was, this.bodyHeld);
    if (delta <= 0) {
      if (this.bodyHeld === 0 && (this.pausedFor & 32) !== 0) {
        b.unwait(this);
        this.resumeReading(32);
      }
      return;
    }
    if (this.st !== St.Opened) return;
    const max = this.adapter.options.maxPartialBodyBytes;
    if (this.bodyHeld > max) {
      b.refusals++;
      this.protocolError(new AmqpError(506, `partly received message bodies hold ${this.bodyHeld} bytes, above the connection's limit of ${max}`));
      return;
    }
    if (!b.overPartial || (this.pausedFor & 32) !== 0) return;
    if (b.waiting + 1 >= b.holders) {
      b.refusals++;
      this.protocolError(new AmqpError(506, `the broker's memory for partly received message bodies (${b.maxPartialBytes} bytes) is used up`));
      return;
    }
    this.pauseReading(32);
    b.wait(this);
  }

  /** The broker's partly received bodies are under their budget again (InputBudget.wait). */
  bodyBudgetFreed(): void {
    this.resumeReading(32);
  }

  /** Publishes whose store writes have not settled (made at the first one: see credit.ts). */
  protected credit: PublishCredit | null = null;
  protected writeCallbacks: WriteCallbacks | null = null;

  /**
   * A publish's write of `bytes` started: past maxPendingWrites unsettled writes (or maxPendingWriteBytes) the socket
   * is not read until half of them settled, so that a publisher without confirms cannot queue writes faster than
   * storage takes them, nor ahead of other connections' (RabbitMQ's credit flow does the same between its processes).
   */
  writeStarted(bytes: number): void {
    const o = this.adapter.options;
    const c = (this.credit ??= new PublishCredit(o.maxPendingWrites, o.maxPendingWriteBytes));
    const out = c.started(bytes);
    this.adapter.writeStarted(bytes, c);
    if (out) this.pauseReading(4);
  }

  writeSettled(): void {
    const c = this.credit!;
    const bytes = c.bytes;
    const back = c.settled();
    this.adapter.writeSettled(bytes - c.bytes);
    if (back) this.resumeReading(4);
  }

  /** The promise callbacks of a write without a confirm (one pair per connection). */
  get onWrite(): WriteCallbacks {
    return (this.writeCallbacks ??= {
      settled: () => this.writeSettled(),
      failed: (err: unknown) => {
        this.writeSettled();
        this.adapter.storeWriteFailed(err);
      },
    });
  }

  /** A publish arrived: under an alarm the socket is not read further until it clears. */
  published(): void {
    this.publisher = true;
    if (this.alarmReason !== null) this.pauseReading(2);
  }

  /**
   * A publish of `bytes` body bytes was taken: counted in the client registry and charged to the namespace's
   * publish and bytes-in quotas; over them the socket is not read for the time the quota asks (TCP pushes back on
   * the publisher, as RabbitMQ's flow control does).
   */
  chargeIn(bytes: number): void {
    if (this.entry !== null) this.entry.messagesIn++;
    if (this.lease === null) return;
    const wait = this.lease.chargeIn(1, bytes);
    if (wait > 0) this.holdReading(wait);
  }

  storageFull(): string | null {
    return this.lease === null ? null : this.lease.storageFull();
  }

  protected holdReading(ms: number): void {
    const until = Date.now() + ms;
    if (until <= this.readUntil) return;
    this.readUntil = until;
    this.pauseReading(8);
    if (this.readTimer !== null) clearTimeout(this.readTimer);
    this.readTimer = setTimeout(() => {
      this.readTimer = null;
      this.readUntil = 0;
      this.resumeReading(8);
    }, ms);
  }

  /** A delivery of `bytes` body bytes went out: counted, and charged to the namespace's bytes-out quota. */
  chargeOut(bytes: number): void {
    if (this.entry !== null) this.entry.messagesOut++;
    if (this.lease === null) return;
    const wait = this.lease.chargeOut(bytes);
    if (wait <= 0) return;
    const until = Date.now() + wait;
    if (until <= this.sendHoldUntil) return;
    this.sendHoldUntil = until;
    if (this.sendHoldTimer !== null) clearTimeout(this.sendHoldTimer);
    this.sendHoldTimer = setTimeout(() => {
      this.sendHoldTimer = null;
      this.sendHoldUntil = 0;
      if (this.st !== St.Opened) return;
      for (const ch of this.channelList()) ch.resumeConsumers();
    }, wait);
  }

  /** Consumers get no deliveries while the bytes-out quota holds them back. */
  get sendsHeld(): boolean {
    return this.sendHoldUntil !== 0;
  }

  /** An administrator kicked the client: connection.close 320 CONNECTION_FORCED (before open: the socket). */
  kick(reason: string): void {
    this.log.info({ user: this.principal.user, reason }, 'amqp: connection kicked');
    if (this.st === St.Opened || this.st === St.Open || this.st === St.TuneOk) this.closeWith(320, reason);
    else this.destroy();
  }

  alarm(reason: string | null): void {
    this.alarmReason = reason;
    if (this.st === St.Opened && this.capabilities.blocked) {
      this.sendMethod(0, reason === null ? ({ name: 'connection.unblocked' } as AmqpMethod) : ({ name: 'connection.blocked', reason } as AmqpMethod));
    }
    if (reason === null) this.resumeReading(2);
    else if (this.publisher) this.pauseReading(2);
  }

  // ------------------------------------------------------------------ life cycle

  /**
   * The listener's periodic check: the handshake deadline, heartbeats both ways, and a close-ok that never came.
   */
  sweep(now: number): void {
    if (this.st === St.Done) return;
    if (this.stalledAt !== 0) {
      // Over its allowance of unsent bytes: the client must be taking them. A socket whose unsent bytes have not gone
      // down for sendTimeoutMs is closed (as RabbitMQ's send_timeout does).
      const w = this.stream.writableLength;
      if (w < this.stalledBytes) {
        this.stalledBytes = w;
        this.stalledAt = now;
      } else if (now - this.stalledAt > this.adapter.options.sendTimeoutMs) {
        this.adapter.stats.sendTimeouts++;
        this.adapter.logLimit.log(
          'info',
          logKey('amqp send timeout', this.remoteAddress),
          { remote: this.remoteAddress, unsent: w, timeoutMs: this.adapter.options.sendTimeoutMs },
          'amqp: client takes none of what is sent to it, closing',
        );
        this.destroy();
        return;
      }
    }
    if (this.st === St.Closing) {
      if (now - this.closeSentAt > CLOSE_OK_TIMEOUT_MS) this.destroy();
      return;
    }
    if (this.st !== St.Opened) {
      if (now - this.openedAt > this.adapter.options.handshakeTimeoutMs) {
        this.adapter.logLimit.log('info', logKey('amqp handshake timeout', this.remoteAddress), { remote: this.remoteAddress }, 'amqp: handshake timed out');
        this.destroy();
      }
      return;
    }
    // An OIDC token's session ends at its expiry unless connection.update-secret renewed it (RabbitMQ's OAuth 2
    // backend closes such a connection likewise): the client is told why in connection.close.
    const exp = this.principal.expiresAt;
    if (exp !== undefined && now >= exp && !this.secretChecking) {
      this.adapter.logLimit.log(
        'info',
        logKey('amqp credential expired', this.remoteAddress),
        { remote: this.remoteAddress, user: this.principal.user },
        'amqp: credential expired, closing',
      );
      this.closeWith(320, 'credential expired: renew it with connection.update-secret before it expires');
      return;
    }
    if (this.inCount !== this.seenIn) {
      this.seenIn = this.inCount;
      this.seenInAt = now;
    }
    if (this.outCount !== this.seenOut) {
      this.seenOut = this.outCount;
      this.seenOutAt = now;
    }
    if (this.heartbeatMs === 0) return;
    // Paused by us (back-pressure, alarm): the silence is ours, not the peer's.
    if (this.pausedFor === 0 && now - this.seenInAt > 2 * this.heartbeatMs) {
      this.adapter.logLimit.log(
        'info',
        logKey('amqp missed heartbeats', this.remoteAddress),
        { remote: this.remoteAddress, heartbeatSec: this.heartbeatMs / 1000 },
        'amqp: missed heartbeats from client, closing',
      );
      this.destroy();
      return;
    }
    if (now - this.seenOutAt >= this.heartbeatMs / 2) {
      this.send(HEARTBEAT_FRAME);
      this.seenOut = this.outCount;
      this.seenOutAt = now;
    }
  }

  /** Broker shutdown: connection.close 320 (CONNECTION_FORCED), then the socket, within a second. */
  close(): Promise<void> {
    if (this.st === St.Opened) {
      this.closeWith(320, "broker forced connection closure with reason 'shutdown'");
    } else {
      this.destroy();
    }
    return this.closed;
  }

  /** Our close-ok went out (the client closed): end the socket once it is written. */
  protected finish(): void {
    this.st = St.Done;
    this.teardownChannels();
    this.stream.end();
    setTimeout(() => this.stream.destroy(), CLOSE_OK_TIMEOUT_MS).unref();
  }

  destroy(): void {
    this.st = St.Done;
    this.stream.destroy();
  }

  protected teardownChannels(): void {
    const all = this.channelList();
    this.firstChannel = null;
    this.moreChannels = null;
    for (const c of all) c.teardown();
  }

  protected tornDown = false;

  protected teardown(): void {
    if (this.tornDown) return;
    this.tornDown = true;
    this.st = St.Done;
    this.teardownChannels();
    if (this.admitted) this.adapter.leave(this);
    this.lease?.release();
    this.lease = null;
    const input = this.adapter.input;
    if (this.reserved > 0) input.unreserve(this.reserved);
    this.reserved = 0;
    this.frame = null;
    this.gather = null;
    input.unwait(this);
    if (this.drainWaiters !== null) {
      const w = this.drainWaiters;
      this.drainWaiters = null;
      for (const f of w) f();
    }
    this.entry?.close();
    if (this.readTimer !== null) clearTimeout(this.readTimer);
    if (this.sendHoldTimer !== null) clearTimeout(this.sendHoldTimer);
    // Exclusive queues go with their connection.
    this.adapter.router.dropExclusive(this.id).then(
      () => this.closeSignal.fire(this),
      (err: unknown) => {
        this.log.warn({ err }, 'amqp: dropping exclusive queues failed');
        this.closeSignal.fire(this);
      },
    );
  }
}
