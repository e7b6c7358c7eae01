/**
 * The JetStream API over FlowMQ streams: a subscriber on the core that answers `$JS.API.>` requests and
 * `$JS.ACK.>` acknowledgements the way nats-server 2.9 does, so the `nats` client's JetStream API (jsm.streams,
 * js.publish, consumers.get/fetch/consume) works on FlowMQ streams.
 *
 * Requests and acks travel through the core like any message: the service subscribes with the NATS rule and
 * answers with engine.publish to the request's response topic, so they work the same whichever listener or broker
 * the client is on. A JetStream stream is a FlowMQ stream (its subjects are its bindings); consumers are pull
 * consumers on single-partition streams, their state in the metastore's ConsumerStateStore (engine.store).
 *
 * JetStream publishes (a NATS publish with a reply subject) come through `publish`, called by the NATS connection:
 * duplicate detection by Nats-Msg-Id within the stream's duplicate window (kept in memory: empty again after a
 * restart), then the core's publish, then a PubAck to the reply subject once every capturing stream has the message
 * durably.
 */
import type { Logger } from 'pino';
import type { Cluster } from '../../../cluster/index.js';
import { call, cast, decodeMessage, encodeMessage, listen, RPC, serve } from '../../../cluster/index.js';
import type { Access, AccessControl, Action, ResourceKind } from '../../../control/index.js';
import type { ConsumerGroupAdmin, GroupDetail, GroupSummary } from '../../../control/index.js';
import { LogLimiter } from '../../../util/log-limit.js';
import {
  decodeBatch,
  dotsToUnified,
  FlowError,
  makeMessage,
  matches,
  newPublishInfo,
  recordToMessage,
  type Engine,
  type Message,
  type PublishInfo,
  type StreamDef,
  type StreamEntry,
  type Subscriber,
  type Subscription,
} from '../../../core/index.js';
import {
  consumerKey,
  decodeDelivery,
  encodeDelivery,
  pause,
  retriable,
  retryWindowMs,
  splitConsumerKey,
  targetOf,
} from './cluster.js';
import { checkConsumerUpdate, normalizeConsumerConfig, type ConsumerConfig } from './config.js';
import { Consumer, type ConsumerHost, type PullRequest } from './consumer.js';
import { JsErr, type ApiError } from './errors.js';
import {
  DEFAULT_DUPLICATE_WINDOW_NS,
  isoTime,
  lastMatching,
  parseStreamConfig,
  sameBindings,
  streamConfigJson,
  streamState,
  streamSubjects,
} from './stream-info.js';
import { filterToSubject, isValidApiName, levelsToTokens, subjectMatches, subjectsCollide } from './subjects.js';

export interface JetStreamOptions {
  /** How often ack deadlines, pull request expiry, heartbeats and inactive consumers are looked at. Default 100 ms. */
  tickMs?: number;
  /** Consumer state writes are coalesced for this long. Default 20 ms. */
  flushDelayMs?: number;
  /** Consumers over all streams; more are refused (10026). Default MAX_CONSUMERS. */
  maxConsumers?: number;
  /** Nats-Msg-Ids remembered per stream within its duplicate window; past it the oldest go early. Default 200,000. */
  maxDedupIds?: number;
  /**
   * Cluster mode (see cluster.ts): consumers are owned by one broker each, loaded when acquired (never all at
   * start), requests for them forwarded to their owner, their state writes fenced by the owner epoch.
   */
  cluster?: Cluster | null;
}

/**
 * What the NATS connection calls for a publish with a reply subject (adapter.ts's NatsPublisher): `reply` is the
 * reply's unified topic (also in msg.responseTopic).
 */
export interface JetStreamPublisher {
  publish(msg: Message, reply: string): PublishInfo;
}

const T = 'io.nats.jetstream.api.v1.';
/**
 * Consumers over all streams. nats-server's account default is unlimited, but every consumer holds memory here and
 * ephemeral ones can be created by any client in a loop: past this, creation answers nats-server's 10026.
 */
export const MAX_CONSUMERS = 10_000;
const NAMES_LIMIT = 1024;
const LIST_LIMIT = 256;

type Json = Record<string, unknown>;

/**
 * How the service authorizes a request (set by the NATS module once its adapter exists): the Access of the
 * request's origin (a NATS connection of this broker), `'gone'` when that connection has closed, null for origins
 * that are not NATS clients (another protocol's publish, checked on its topic by that protocol, or the broker).
 */
export interface JetStreamAuthorizer {
  control: AccessControl;
  accessOf(origin: string | undefined): Access | 'gone' | null;
}

/** One condition of a JetStream API request: one of `actions` on the resource. */
interface ApiCheck {
  actions: readonly Action[];
  kind: ResourceKind;
  name: string;
}

export class JetStream implements Subscriber, ConsumerHost, JetStreamPublisher {
  readonly id = 'nats:jetstream';
  private readonly consumers = new Map<string, Map<string, Consumer>>();
  private readonly subs: Subscription[] = [];
  /** Per stream: Nats-Msg-Id → stream sequence and when it was stored, oldest first. */
  private readonly dedup = new Map<string, Map<string, { seq: number; at: number }>>();
  private readonly duplicateWindowNs = new Map<string, number>();
  private readonly api = { total: 0, errors: 0, denied: 0 };
  private readonly dirty = new Set<Consumer>();
  private flushTimer: NodeJS.Timeout | null = null;
  private readonly writes = new Set<Promise<void>>();
  private ticker: NodeJS.Timeout | null = null;
  private readonly tickMs: number;
  private readonly flushDelayMs: number;
  private readonly maxConsumers: number;
  private readonly maxDedupIds: number;
  private storeWarned = false;
  private closed = false;
  /** Failures a client can trigger are logged rate limited. */
  private readonly logLimit: LogLimiter;
  /** Policies on the API (null: every request is served, as before the control plane). */
  authorizer: JetStreamAuthorizer | null = null;
  private readonly cluster: Cluster | null;
  /** Cluster mode: consumers ("<stream>/<name>") being created here (claimed before they exist in the store). */
  private readonly creating = new Set<string>();
  private readonly clusterStats = { forwarded: 0, served: 0, acksForwarded: 0, deliveriesSent: 0, deliveriesReceived: 0, fenced: 0, forwardFailures: 0, publishesForwarded: 0 };

  constructor(
    readonly engine: Engine,
    private readonly logger: Logger,
    options: JetStreamOptions = {},
  ) {
    this.logLimit = new LogLimiter(logger);
    this.tickMs = options.tickMs ?? 100;
    this.maxConsumers = options.maxConsumers ?? MAX_CONSUMERS;
    this.maxDedupIds = options.maxDedupIds ?? 200_000;
    this.flushDelayMs = options.flushDelayMs ?? 20;
    this.cluster = options.cluster ?? null;
  }

  /** Loads durable consumers from the store, then starts answering the API. */
  async start(): Promise<void> {
    if (this.cluster !== null) this.joinCluster(this.cluster);
    let recs: Awaited<ReturnType<Engine['store']['listConsumers']>> = [];
    try {
      // Cluster mode: no broker loads every consumer; each is loaded by the broker that acquires it.
      if (this.cluster === null) recs = await this.engine.store.listConsumers();
    } catch (err) {
      this.warnStore(err);
    }
    for (const r of recs) {
      const def = this.engine.getStream(r.stream);
      if (!def || def.def.partitions !== 1) continue;
      let config: ConsumerConfig;
      try {
        config = JSON.parse(r.config) as ConsumerConfig;
      } catch {
        this.logger.warn({ stream: r.stream, consumer: r.name }, 'JetStream consumer with unreadable config skipped');
        continue;
      }
      this.add(new Consumer(this, r.stream, r.name, config, r.createdAt, true, r));
    }
    // This broker's clients only (`local`): in cluster mode every broker answers its own clients' requests and
    // forwards what another broker serves (see cluster.ts), so requests are never answered twice.
    this.subs.push(this.engine.subscribe('$JS.API.>', this, { qos: 0, rule: 'nats', local: true }));
    this.subs.push(this.engine.subscribe('$JS.ACK.>', this, { qos: 0, rule: 'nats', local: true }));
    this.ticker = setInterval(() => this.tick(), this.tickMs);
    this.ticker.unref();
  }

  /** Stops answering and writes every consumer's state. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.subs) this.engine.unsubscribe(s);
    this.subs.length = 0;
    if (this.ticker) clearInterval(this.ticker);
    this.logLimit.stop();
    for (const m of this.consumers.values()) for (const c of m.values()) c.close(false);
    this.flush();
    await Promise.all([...this.writes]);
  }

  /** Figures for /api/v1/broker. */
  figures(): Json {
    let consumers = 0;
    for (const m of this.consumers.values()) consumers += m.size;
    return {
      apiRequests: this.api.total,
      apiErrors: this.api.errors,
      apiDenied: this.api.denied,
      consumers,
      ...(this.cluster !== null ? { cluster: { ...this.clusterStats } } : {}),
    };
  }

  // ------------------------------------------------------------ cluster mode (see cluster.ts)

  private joinCluster(cl: Cluster): void {
    cl.register('consumer', {
      acquire: (key, epoch) => this.acquireConsumer(key, epoch),
      release: (key, lost) => this.releaseConsumer(key, lost),
    });
    // Claimed but nothing to serve (an ephemeral consumer of a dead broker, a consumer deleted meanwhile, a request
    // naming a consumer that never existed): its owner row goes.
    cl.on('owned', (kind: string, key: string) => {
      if (kind !== 'consumer' || this.creating.has(key)) return;
      const [stream, name] = splitConsumerKey(key);
      if (this.getConsumer(stream, name) === undefined) void cl.forget('consumer', key).catch(() => undefined);
    });
    const ch = cl.channel;
    if (ch === null) throw new FlowError('CONFIG_ERROR', 'JetStream in cluster mode needs the internal channel');
    serve(ch, RPC.jsRequest, async (from, head) => {
      this.clusterStats.served++;
      const out = await this.serveConsumer(from, head.t, head.body, head.reply);
      return out === NO_ANSWER ? { none: true } : { out };
    });
    listen(ch, RPC.jsAck, (from, head) => this.onAck(head.l, head.b, head.r ?? undefined, from));
    ch.on(RPC.jsDeliver.name, (_from, body) => {
      this.clusterStats.deliveriesReceived++;
      // A delivery or status for a client of this broker, from the consumer's owner.
      this.sendLocal(decodeDelivery(body));
    });
    serve(ch, RPC.jsPublish, (_from, _head, tail) => {
      const msg = decodeMessage(tail);
      return new Promise<Json | null>((resolve) => {
        const info = this.publishWith(msg, (ack) => resolve(ack), false);
        // No stream here captured it (deleted meanwhile): no PubAck, as on a single broker.
        if (info.captured.length === 0 && info.delivered === 0) resolve(null);
      });
    });
    serve(ch, RPC.jsConsumers, (_from, head) => ({ infos: this.sortedConsumers(head.stream).map((c) => this.consumerInfoJson(c)) }));
  }

  /** This broker owns the consumer now: load it from the metastore (nothing yet when it is being created here). */
  private async acquireConsumer(key: string, epoch: number): Promise<void> {
    const [stream, name] = splitConsumerKey(key);
    const here = this.getConsumer(stream, name);
    if (here !== undefined) {
      here.epoch = epoch;
      return;
    }
    const e = await this.streamKnown(stream);
    if (!e || e.def.partitions !== 1) return;
    const r = await this.engine.store.getConsumer(stream, name);
    if (r === null || this.getConsumer(stream, name) !== undefined) return;
    let config: ConsumerConfig;
    try {
      config = JSON.parse(r.config) as ConsumerConfig;
    } catch {
      this.logger.warn({ stream, consumer: name }, 'JetStream consumer with unreadable config skipped');
      return;
    }
    const c = new Consumer(this, stream, name, config, r.createdAt, true, r);
    c.epoch = epoch;
    this.add(c);
    if (c.isPush) c.pump();
  }

  /**
   * This broker lets the consumer go: stop serving it (pull requests waiting here end without an answer: their
   * clients' next requests reach the new owner), and unless ownership is already lost, write its state last.
   */
  private async releaseConsumer(key: string, lost: boolean): Promise<void> {
    const [stream, name] = splitConsumerKey(key);
    const c = this.getConsumer(stream, name);
    if (c === undefined) return;
    c.close(false);
    this.dirty.delete(c);
    const m = this.consumers.get(stream);
    if (m?.get(name) === c) m.delete(name);
    if (m?.size === 0) this.consumers.delete(stream);
    if (!lost && c.durable) await this.engine.store.putConsumer(c.record(), c.epoch);
  }

  /**
   * The stream's definition, waiting a little for it when this broker has not heard of it yet: a stream created
   * on another broker reaches this one's catalog by notification, maybe after a request that names it.
   */
  private async streamKnown(stream: string): Promise<StreamEntry | undefined> {
    for (let i = 0; i < 20; i++) {
      const e = this.engine.getStream(stream);
      if (e !== undefined || this.closed) return e;
      await new Promise((r) => setTimeout(r, 50));
    }
    return this.engine.getStream(stream);
  }

  /** The consumer a CONSUMER request names ("<stream>/<name>"), or null (NAMES, LIST, malformed). */
  private consumerKeyOf(t: string[], body: string): { key: string; body: string } | null {
    const [, b, c] = t;
    if (b === 'DURABLE' && c === 'CREATE' && t.length === 5) return { key: consumerKey(t[3], t[4]), body };
    if (b === 'CREATE' && t.length >= 3) {
      if (t.length >= 4) return { key: consumerKey(t[2], t[3]), body };
      // An ephemeral consumer named only in the body, or not at all: the name is chosen here, so that every
      // broker agrees where the consumer lives.
      const raw = parseJson(body);
      if (raw === BAD_JSON || raw === null || typeof raw !== 'object' || Array.isArray(raw)) return null;
      const req = raw as Json;
      const cfg = (req.config ?? {}) as Json;
      if (typeof cfg !== 'object' || cfg === null || Array.isArray(cfg)) return null;
      const given = typeof cfg.name === 'string' && cfg.name !== '' ? cfg.name : typeof cfg.durable_name === 'string' && cfg.durable_name !== '' ? cfg.durable_name : undefined;
      if (given !== undefined) return isValidApiName(given) ? { key: consumerKey(t[2], given), body } : null;
      const name = randomName();
      return { key: consumerKey(t[2], name), body: JSON.stringify({ ...req, config: { ...cfg, name } }) };
    }
    if ((b === 'INFO' || b === 'DELETE') && t.length === 4) return { key: consumerKey(c, t[3]), body };
    if (b === 'MSG' && c === 'NEXT' && t.length === 5) return { key: consumerKey(t[3], t[4]), body };
    return null;
  }

  /** A consumer request at the broker its client is on: served here if this broker owns it, else forwarded. */
  private async routeConsumer(cl: Cluster, t: string[], body: string, reply: string): Promise<Json> {
    const target0 = this.consumerKeyOf(t, body);
    // Malformed: answered here, the way a single broker answers it (nothing is created).
    if (target0 === null) return this.routeLocal(t, body, reply, undefined);
    const { key } = target0;
    body = target0.body;
    const deadline = Date.now() + retryWindowMs(cl);
    let fresh = false;
    for (let attempt = 0; ; attempt++) {
      try {
        const to = await targetOf(cl, key, fresh);
        if (to === cl.id) return await this.serveConsumer(cl.id, t, body, reply);
        this.clusterStats.forwarded++;
        const { head } = await call(cl.channel!, to, RPC.jsRequest, { t, body, reply });
        return head.none === true || head.out === undefined ? NO_ANSWER : head.out;
      } catch (err) {
        if (!retriable(err) || Date.now() >= deadline || this.closed) {
          this.clusterStats.forwardFailures++;
          throw err;
        }
        fresh = true;
        await pause(attempt);
      }
    }
  }

  /**
   * Serves a consumer request here (from this broker's client, or forwarded by broker `from`): claims the consumer
   * first when this broker does not own it yet (NOT_OWNER when another broker should: the requester retries).
   */
  private async serveConsumer(from: number, t: string[], body: string, reply: string): Promise<Json> {
    const cl = this.cluster!;
    const target = this.consumerKeyOf(t, body);
    if (target === null) return this.routeLocal(t, body, reply, from);
    const { key } = target;
    const create = t[1] === 'CREATE' || t[1] === 'DURABLE';
    if (create) this.creating.add(key);
    try {
      if (cl.owns('consumer', key) === null) {
        const [stream] = splitConsumerKey(key);
        // The stream must be known here before its consumer can be loaded or made.
        if ((await this.streamKnown(stream)) === undefined) return this.routeLocal(t, target.body, reply, from);
        await cl.ensure('consumer', key);
      }
      return await this.routeLocal(t, target.body, reply, from);
    } finally {
      if (create) {
        this.creating.delete(key);
        const [stream, name] = splitConsumerKey(key);
        // A create that made nothing (refused) leaves no owner row behind.
        if (cl.owns('consumer', key) !== null && this.getConsumer(stream, name) === undefined) void cl.forget('consumer', key).catch(() => undefined);
      }
    }
  }

  /** CONSUMER.NAMES / LIST over the cluster: every broker's consumers of the stream, and stored ones served nowhere. */
  private async clusterConsumers(cl: Cluster, stream: string): Promise<Json[]> {
    const byName = new Map<string, Json>();
    const asked = cl
      .brokers()
      .filter((b) => b.alive && b.id !== cl.id)
      .map(async (b) => {
        try {
          const { head } = await call(cl.channel!, b.id, RPC.jsConsumers, { stream });
          for (const i of head.infos) byName.set(String(i.name), i);
        } catch {
          // A broker that cannot answer now: its consumers are listed from their stored state below.
        }
      });
    await Promise.all(asked);
    for (const c of this.sortedConsumers(stream)) byName.set(c.name, this.consumerInfoJson(c));
    for (const r of await this.engine.store.listConsumers(stream)) {
      if (byName.has(r.name)) continue;
      try {
        const c = new Consumer(this, stream, r.name, JSON.parse(r.config) as ConsumerConfig, r.createdAt, true, r);
        c.closed = true;
        byName.set(r.name, this.consumerInfoJson(c));
      } catch {
        // unreadable config: skipped, as at load
      }
    }
    return [...byName.values()].sort((a, b) => (String(a.name) < String(b.name) ? -1 : String(a.name) > String(b.name) ? 1 : 0));
  }

  // ------------------------------------------------------------ consumer groups (admin API)

  /**
   * Durable consumers as consumer groups for the admin API: a group is a durable name, over every stream that has
   * a durable consumer of that name (as a Kafka group spans topics). Its committed offset on a stream is the ack
   * floor; its lag is what the consumer has not delivered yet (its filter applied) plus what waits for an ack. A
   * pull consumer with waiting requests, or a bound push consumer, is a member. Offsets are not reset here: a
   * JetStream consumer's position is its config (deliver policy) and its acks.
   */
  groupAdmin(): ConsumerGroupAdmin {
    const byName = (): Map<string, Consumer[]> => {
      const out = new Map<string, Consumer[]>();
      for (const m of this.consumers.values()) {
        for (const c of m.values()) {
          if (!c.durable || c.closed) continue;
          const l = out.get(c.name);
          if (l) l.push(c);
          else out.set(c.name, [c]);
        }
      }
      return out;
    };
    const members = (c: Consumer) => (c.isPush ? (c.pushBound ? 1 : 0) : c.waiting.length > 0 ? 1 : 0);
    const lagOf = (c: Consumer): number | null => {
      try {
        return c.numPending() + c.pending.size;
      } catch {
        return null;
      }
    };
    const summary = (name: string, cs: Consumer[]): GroupSummary => {
      let n = 0;
      let lag: number | null = 0;
      for (const c of cs) {
        n += members(c);
        const l = lagOf(c);
        lag = lag === null || l === null ? null : lag + l;
      }
      return { name, protocol: 'jetstream', state: n > 0 ? 'active' : 'idle', members: n, lag };
    };
    const detail = (name: string, cs: Consumer[]): GroupDetail => ({
      ...summary(name, cs),
      memberDetails: cs
        .filter((c) => members(c) > 0)
        .map((c) => ({ id: `${c.stream}/${c.name}`, clientId: c.isPush ? (c.config.deliver_subject ?? '') : 'pull', host: '', assignments: [{ stream: c.stream, partition: 0 }] })),
      offsets: cs.map((c) => {
        let end = 0;
        try {
          end = this.engine.offsets(c.stream, 0).highWatermark;
        } catch {
          // stream gone
        }
        return { stream: c.stream, partition: 0, committed: c.ackFloor, end, lag: lagOf(c) };
      }),
    });
    const unsupported = () => new FlowError('INVALID_ARGUMENT', 'resetting offsets is not supported for JetStream consumers: delete the consumer and create it with a deliver policy');
    return {
      list: async () => [...byName()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([n, cs]) => summary(n, cs)),
      describe: async (name) => {
        const cs = byName().get(name);
        return cs === undefined ? null : detail(name, cs);
      },
      resetOffsets: async () => {
        throw unsupported();
      },
      delete: async (name) => {
        const cs = byName().get(name);
        if (cs === undefined) throw new FlowError('NOT_FOUND', `JetStream consumer "${name}" not found`);
        if (cs.some((c) => members(c) > 0)) throw new FlowError('INVALID_ARGUMENT', 'group has active members');
        for (const c of cs) await this.deleteConsumer(c, true);
      },
    };
  }

  // ------------------------------------------------------------ ConsumerHost

  send(msg: Message, to?: number): void {
    if (to !== undefined && this.cluster !== null && to !== this.cluster.id) {
      // A request forwarded by another broker: its client's inbox is there.
      this.clusterStats.deliveriesSent++;
      this.cluster.channel?.send(to, RPC.jsDeliver.name, encodeDelivery(msg));
      return;
    }
    this.sendLocal(msg);
  }

  /** Publishes to this broker's engine (the client is here, or the topic is for anyone listening). */
  private sendLocal(msg: Message): void {
    try {
      this.engine.publish(msg);
    } catch (err) {
      this.logger.debug({ err, topic: msg.topic }, 'JetStream delivery not published');
    }
  }

  changed(c: Consumer): void {
    if (!c.durable || c.closed) return;
    this.dirty.add(c);
    if (this.flushTimer === null) {
      this.flushTimer = setTimeout(() => this.flush(), this.flushDelayMs);
    }
  }

  failed(c: Consumer, err: unknown): void {
    if (!this.engine.getStream(c.stream)) {
      this.removeConsumersOf(c.stream);
      return;
    }
    this.logLimit.log('warn', `jetstream-read|${c.stream}`, { err, stream: c.stream, consumer: c.name }, 'JetStream consumer read failed');
  }

  private flush(): void {
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    for (const c of this.dirty) {
      const w = this.engine.store.putConsumer(c.record(), c.epoch).catch((err: unknown) => this.writeFailed(c, err));
      this.writes.add(w);
      void w.finally(() => this.writes.delete(w));
    }
    this.dirty.clear();
  }

  /** A state write failed: FENCED means another broker owns the consumer now (stop serving it), else warn. */
  private writeFailed(c: Consumer, err: unknown): void {
    if (this.cluster !== null && err instanceof FlowError && err.code === 'FENCED') {
      this.clusterStats.fenced++;
      this.cluster.fenced('consumer', consumerKey(c.stream, c.name));
      return;
    }
    this.warnStore(err);
  }

  private warnStore(err: unknown): void {
    if (this.storeWarned) return;
    this.storeWarned = true;
    this.logger.warn({ err }, 'JetStream consumer state could not be read or written (further failures are not logged)');
  }

  private tick(): void {
    const now = Date.now();
    for (const [stream, m] of this.consumers) {
      if (!this.engine.getStream(stream)) {
        this.removeConsumersOf(stream);
        continue;
      }
      for (const c of m.values()) {
        c.tick(now);
        const thr = c.config.inactive_threshold;
        const idle = c.isPush ? !c.pushBound : c.waiting.length === 0;
        if (thr !== undefined && thr > 0 && idle && now - c.lastActive > thr / 1e6) {
          this.deleteConsumer(c, false);
        }
      }
    }
  }

  private add(c: Consumer): void {
    let m = this.consumers.get(c.stream);
    if (!m) this.consumers.set(c.stream, (m = new Map()));
    m.set(c.name, c);
  }

  private getConsumer(stream: string, name: string): Consumer | undefined {
    return this.consumers.get(stream)?.get(name);
  }

  private deleteConsumer(c: Consumer, notify: boolean): Promise<void> {
    c.close(notify);
    this.dirty.delete(c);
    const m = this.consumers.get(c.stream);
    if (m?.get(c.name) === c) m.delete(c.name);
    if (m?.size === 0) this.consumers.delete(c.stream);
    if (this.cluster !== null) {
      // The record first (fenced by the owner row), then the owner row itself.
      const cl = this.cluster;
      const key = consumerKey(c.stream, c.name);
      const gone = c.durable ? this.engine.store.deleteConsumer(c.stream, c.name, c.epoch) : Promise.resolve();
      return gone.then(() => cl.forget('consumer', key));
    }
    if (!c.durable) return Promise.resolve();
    return this.engine.store.deleteConsumer(c.stream, c.name);
  }

  private removeConsumersOf(stream: string): void {
    const m = this.consumers.get(stream);
    if (!m) return;
    for (const c of m.values()) {
      c.close(true);
      this.dirty.delete(c);
      // Its stream is gone: so is its owner row (the deleting broker removed the records).
      if (this.cluster !== null) void this.cluster.forget('consumer', consumerKey(c.stream, c.name)).catch(() => undefined);
    }
    this.consumers.delete(stream);
    this.dedup.delete(stream);
  }

  private consumerCount(stream?: string): number {
    if (stream !== undefined) return this.consumers.get(stream)?.size ?? 0;
    let n = 0;
    for (const m of this.consumers.values()) n += m.size;
    return n;
  }

  // ------------------------------------------------------------ publish (PubAck, dedup)

  publish(msg: Message, reply: string): PublishInfo {
    return this.publishWith(msg, msg.responseTopic ?? reply);
  }

  /** A JetStream publish whose PubAck (or error) goes to `to`: a reply topic, or (cluster mode) a callback. */
  private publishWith(msg: Message, to: string | ((body: Json) => void), forward = true): PublishInfo {
    const info = newPublishInfo();
    // Plain requests (no headers: request/reply traffic, acks, API calls) skip the header look-ups.
    const plain = msg.headers.length === 0;
    const msgId = msg.messageId ?? (plain ? undefined : headerValue(msg, 'Nats-Msg-Id'));
    const expStream = plain ? undefined : headerValue(msg, 'Nats-Expected-Stream');
    const expLastSeq = plain ? undefined : headerValue(msg, 'Nats-Expected-Last-Sequence');
    const expLastId = plain ? undefined : headerValue(msg, 'Nats-Expected-Last-Msg-Id');
    const expLastSubj = plain ? undefined : headerValue(msg, 'Nats-Expected-Last-Subject-Sequence');
    if (msgId !== undefined || expStream !== undefined || expLastSeq !== undefined || expLastId !== undefined || expLastSubj !== undefined) {
      const targets = this.capturing(msg.topic);
      if (targets.length > 0) {
        const t = targets[0];
        // Cluster mode: ids and expectations are checked where the stream's partition is written, so that a
        // publish retried through another broker is still found a duplicate.
        if (forward && this.cluster !== null && t.partitions === 1) {
          const where = this.engine.storage.locate?.(t.name, 0);
          if (where !== undefined && !where.local && where.broker !== null) {
            this.forwardPublish(this.cluster, where.broker, msg, to);
            info.delivered++;
            return info;
          }
        }
        let refusal: ApiError | null = null;
        if (expStream !== undefined && expStream !== t.name) refusal = JsErr.expectedStreamMismatch();
        else if (expLastSeq !== undefined) {
          const last = this.engine.offsets(t.name, 0).highWatermark;
          if (String(last) !== expLastSeq.trim()) refusal = JsErr.wrongLastSequence(last);
        } else if (expLastId !== undefined) {
          const ids = this.dedup.get(t.name);
          let last = '';
          if (ids) for (const k of ids.keys()) last = k;
          if (last !== expLastId) refusal = JsErr.wrongLastMsgId(last);
        } else if (expLastSubj !== undefined) {
          refusal = JsErr.badRequest('Nats-Expected-Last-Subject-Sequence is not supported by FlowMQ');
        }
        if (refusal !== null) {
          this.answer(to, { error: refusal, stream: t.name, seq: 0 });
          // Answered: not a request nobody heard.
          info.delivered++;
          return info;
        }
        if (msgId !== undefined) {
          const now = Date.now();
          const seen = targets.map((d) => this.seen(d.name, msgId, now));
          if (seen.every((s) => s !== undefined)) {
            for (let i = 0; i < targets.length; i++) info.captured.push({ stream: targets[i].name, partition: 0, offset: seen[i]! - 1 });
            this.answer(to, { stream: t.name, seq: seen[0], duplicate: true });
            return info;
          }
        }
      }
    }
    const durable = this.engine.publish(msg, info);
    if (info.captured.length === 0) return info;
    const first = info.captured[0];
    if (msgId !== undefined) {
      const now = Date.now();
      for (const c of info.captured) {
        if (c.later === undefined) this.remember(c.stream, msgId, c.offset + 1, now);
        else c.later.then((o) => this.remember(c.stream, msgId, o + 1, now), () => undefined);
      }
    }
    if (first.later !== undefined) {
      // Cluster mode: the partition's owner assigned the sequence; it is known once the owner made it durable.
      const later = first.later;
      Promise.all([durable, later]).then(
        ([, o]) => this.answer(to, { stream: first.stream, seq: o + 1 }),
        (err: unknown) => this.answer(to, { error: JsErr.streamStoreFailed(errText(err)), stream: first.stream, seq: 0 }),
      );
      return info;
    }
    const ack = { stream: first.stream, seq: first.offset + 1 };
    if (durable === null) this.answer(to, ack);
    else {
      durable.then(
        () => this.answer(to, ack),
        (err: unknown) => this.answer(to, { error: JsErr.streamStoreFailed(errText(err)), stream: first.stream, seq: 0 }),
      );
    }
    return info;
  }

  /**
   * Cluster mode: a publish carrying a Nats-Msg-Id or an expectation, sent to the broker writing the stream's
   * partition (`js.publish`), which checks and publishes it there and answers the PubAck. If that broker cannot be
   * reached, the publish is made here (its id checked against this broker's window only).
   */
  private forwardPublish(cl: Cluster, broker: number, msg: Message, to: string | ((body: Json) => void)): void {
    // The origin names a connection of this broker: meaningless (or someone else's) at the other one.
    const { origin: _o, ...rest } = msg;
    this.clusterStats.publishesForwarded++;
    call(cl.channel!, broker, RPC.jsPublish, null, { tail: encodeMessage({ ...rest, payload: Buffer.from(msg.payload) }) }).then(
      ({ head: ack }) => {
        if (ack !== null) this.answer(to, ack);
      },
      (err: unknown) => {
        if (!retriable(err)) return this.answer(to, { error: JsErr.streamStoreFailed(errText(err)), stream: '', seq: 0 });
        this.publishWith(msg, to, false);
      },
    );
  }

  private answer(to: string | ((body: Json) => void), body: Json): void {
    if (typeof to === 'string') this.reply(to, body);
    else to(body);
  }

  private capturing(topic: string): StreamDef[] {
    return this.engine.listStreams().filter((d) => d.bindings.some((b) => matches(b, topic)));
  }

  private windowMs(stream: string): number {
    return (this.duplicateWindowNs.get(stream) ?? DEFAULT_DUPLICATE_WINDOW_NS) / 1e6;
  }

  private seen(stream: string, id: string, now: number): number | undefined {
    const ids = this.dedup.get(stream);
    if (!ids) return undefined;
    this.prune(stream, ids, now);
    return ids.get(id)?.seq;
  }

  private remember(stream: string, id: string, seq: number, now: number): void {
    let ids = this.dedup.get(stream);
    if (!ids) this.dedup.set(stream, (ids = new Map()));
    ids.delete(id);
    ids.set(id, { seq, at: now });
    this.prune(stream, ids, now);
    // A publisher sending unique ids fast would grow the window without bound (12 million ids in 2 minutes at
    // 100k/s): past the cap the oldest ids are forgotten early, so dedup is best effort for them.
    if (ids.size > this.maxDedupIds) {
      for (const k of ids.keys()) {
        ids.delete(k);
        if (ids.size <= this.maxDedupIds) break;
      }
    }
  }

  private prune(stream: string, ids: Map<string, { seq: number; at: number }>, now: number): void {
    const horizon = now - this.windowMs(stream);
    for (const [k, v] of ids) {
      if (v.at >= horizon) break;
      ids.delete(k);
    }
  }

  // ------------------------------------------------------------ requests

  deliver(msg: Message, _subs: Subscription[]): void {
    if (this.closed) return;
    // The payload may be a view into a socket buffer: read it now.
    const body = msg.payload.toString('utf8');
    const levels = msg.topic.split('/');
    // Who asks, looked up now: the connection may close while the request is served.
    let access: Access | null = null;
    if (this.authorizer !== null) {
      const a = this.authorizer.accessOf(msg.origin);
      if (a === 'gone') return;
      if (a !== null && !a.open) access = a;
    }
    if (levels[1] === 'ACK') {
      // $JS/ACK/<stream>/<consumer>/...: acknowledging moves the consumer, as consuming does.
      if (access !== null && levels.length >= 4) {
        const t = levelsToTokens(levels.slice(2, 4));
        if (this.denied(access, [{ actions: ['subscribe'], kind: 'group', name: t[1] }]) !== null) return;
      }
      this.onAck(levels, body, msg.responseTopic);
      return;
    }
    const reply = msg.responseTopic;
    if (reply === undefined) return;
    const tokens = levelsToTokens(levels.slice(2));
    void this.onApi(tokens, body, reply, access);
  }

  /**
   * What a request needs, by the design's mapping: streams are created, altered (UPDATE), described (INFO, and
   * listed), deleted (DELETE, PURGE, MSG.DELETE) and read (MSG.GET: subscribe); a consumer is created and pulled
   * from with `subscribe` on its stream and on its name as a group, described with `describe` or `subscribe`, and
   * deleted with `delete group:`. STREAM.NAMES/LIST are filtered instead (see listable).
   */
  private checksFor(t: string[], body: string): ApiCheck[] {
    const [a, b, c] = t;
    const stream = (actions: readonly Action[], name: string | undefined): ApiCheck[] => (name === undefined ? [] : [{ actions, kind: 'stream', name }]);
    const group = (actions: readonly Action[], name: string | undefined): ApiCheck[] => (name === undefined || name === '' ? [] : [{ actions, kind: 'group', name }]);
    const read: readonly Action[] = ['subscribe', 'describe'];
    if (a === 'STREAM') {
      if (b === 'CREATE') return stream(['create'], c);
      if (b === 'UPDATE') return stream(['alter'], c);
      if (b === 'INFO') return stream(['describe'], c);
      if (b === 'DELETE' || b === 'PURGE') return stream(['delete'], c);
      if (b === 'MSG' && c === 'GET') return stream(['subscribe'], t[3]);
      if (b === 'MSG' && c === 'DELETE') return stream(['delete'], t[3]);
      return [];
    }
    if (a === 'CONSUMER') {
      if (b === 'DURABLE' && c === 'CREATE') return [...stream(['subscribe'], t[3]), ...group(['subscribe'], t[4])];
      if (b === 'CREATE') {
        // The name is in the subject (2.9 clients) or only in the body (an ephemeral consumer may carry one).
        let name: string | undefined = t[3];
        if (name === undefined) {
          const raw = parseJson(body);
          const cfg = raw !== BAD_JSON && raw !== null && typeof raw === 'object' ? ((raw as Json).config as Json | undefined) : undefined;
          const n = cfg && typeof cfg === 'object' ? (cfg.durable_name ?? cfg.name) : undefined;
          if (typeof n === 'string') name = n;
        }
        return [...stream(['subscribe'], c), ...group(['subscribe'], name)];
      }
      if (b === 'NAMES' || b === 'LIST') return stream(read, c);
      if (b === 'INFO') return [...stream(read, c), ...group(read, t[3])];
      if (b === 'DELETE') return group(['delete'], t[3]);
      if (b === 'MSG' && c === 'NEXT') return [...stream(['subscribe'], t[3]), ...group(['subscribe'], t[4])];
    }
    return [];
  }

  /** The first check `access` fails (its denial logged), or null when all pass. */
  private denied(access: Access, checks: ApiCheck[]): ApiCheck | null {
    const control = this.authorizer!.control;
    const p = access.principal;
    for (const ch of checks) {
      if (ch.actions.some((act) => control.allows(p, act, ch.kind, ch.name))) continue;
      this.authorizer!.control.logDenial(access, ch.actions[0]!, ch.kind, ch.name);
      this.api.denied++;
      return ch;
    }
    return null;
  }

  /** Whether a stream appears in STREAM.NAMES/LIST for `access` (describe; not logged: a list is not a request for it). */
  private listable(access: Access | null, name: string): boolean {
    if (access === null) return true;
    return this.authorizer!.control.directory.policies.allows(access.principal, 'describe', 'stream', name);
  }

  /** `guard`: the answer carries a stored message of this topic (see Message.guardTopic). */
  private reply(topic: string, body: unknown, guard?: string): void {
    this.send(makeMessage(topic, Buffer.from(JSON.stringify(body)), guard === undefined ? {} : { guardTopic: guard }));
  }

  private async onApi(t: string[], body: string, reply: string, access: Access | null): Promise<void> {
    this.api.total++;
    let out: Json;
    try {
      const refused = access === null ? null : this.denied(access, this.checksFor(t, body));
      if (refused !== null) {
        const user = access!.principal.user;
        const text = `Permissions Violation for ${refused.actions[0]} on ${refused.kind} ${JSON.stringify(refused.name)}${user === null ? '' : ` for user ${JSON.stringify(user)}`}`;
        // A pull request is answered with a status on its inbox, never JSON (400: nats.js ends the fetch with it).
        if (t[0] === 'CONSUMER' && t[1] === 'MSG') {
          this.send(makeMessage(reply, Buffer.alloc(0), { status: `400 ${text}` }));
          return;
        }
        out = { error: JsErr.accessDenied(text) };
      } else out = await this.route(t, body, reply, access);
    } catch (err) {
      this.logLimit.log('warn', `jetstream-api|${t[0]}.${t[1] ?? ''}`, { err, request: t.join('.') }, 'JetStream API request failed');
      out = { error: JsErr.streamGeneral(errText(err)) };
    }
    if (out === NO_ANSWER) return;
    if (out.error !== undefined) this.api.errors++;
    this.reply(reply, out, t[0] === 'STREAM' && t[1] === 'MSG' && t[2] === 'GET' ? storedTopic(out) : undefined);
  }

  private async route(t: string[], body: string, reply: string, access: Access | null): Promise<Json> {
    const cl = this.cluster;
    if (cl !== null && t[0] === 'CONSUMER') {
      if ((t[1] === 'NAMES' || t[1] === 'LIST') && t.length === 3) return this.routeLocal(t, body, reply, undefined, access);
      if (t[1] === 'MSG') {
        try {
          return await this.routeConsumer(cl, t, body, reply);
        } catch (err) {
          // A pull request is answered with a status, never JSON: nobody could serve it now.
          this.logLimit.log('warn', `jetstream-forward|${t.join('.')}`, { err, request: t.join('.') }, 'JetStream pull request could not reach the consumer\'s owner');
          this.sendLocal(makeMessage(reply, Buffer.alloc(0), { status: '503' }));
          return NO_ANSWER;
        }
      }
      return this.routeConsumer(cl, t, body, reply);
    }
    return this.routeLocal(t, body, reply, undefined, access);
  }

  /** Serves a request here. `origin`: the broker a consumer request came from (cluster mode). */
  private async routeLocal(t: string[], body: string, reply: string, origin: number | undefined, access: Access | null = null): Promise<Json> {
    const [a, b, c] = t;
    if (a === 'INFO' && t.length === 1) return this.accountInfo();
    if (a === 'STREAM') {
      if (b === 'NAMES' && t.length === 2) return this.streamNames(body, access);
      if (b === 'LIST' && t.length === 2) return this.streamList(body, access);
      if (t.length === 3) {
        if (b === 'CREATE') return this.streamCreate(c, body, access);
        if (b === 'UPDATE') return this.streamUpdate(c, body, access);
        if (b === 'INFO') return this.streamInfo(c);
        if (b === 'DELETE') return this.streamDelete(c);
        if (b === 'PURGE') return this.streamPurge(c, body);
      }
      if (b === 'MSG' && t.length === 4) {
        if (c === 'GET') return this.msgGet(t[3], body);
        if (c === 'DELETE') {
          return typed('stream_msg_delete_response', { error: JsErr.msgDeleteFailed('deleting single messages is not supported by FlowMQ streams') });
        }
      }
    }
    if (a === 'CONSUMER') {
      if ((b === 'CREATE' && t.length >= 3) || (b === 'DURABLE' && c === 'CREATE' && t.length === 5)) {
        return this.consumerCreate(t, body);
      }
      if (b === 'NAMES' && t.length === 3) return this.consumerNames(c, body);
      if (b === 'LIST' && t.length === 3) return this.consumerList(c, body);
      if (t.length === 4) {
        if (b === 'INFO') {
          await this.freshen(c);
          return this.consumerInfoReq(c, t[3]);
        }
        if (b === 'DELETE') return this.consumerDelete(c, t[3]);
      }
      if (b === 'MSG' && c === 'NEXT' && t.length === 5) {
        this.pullRequest(t[3], t[4], body, reply, origin);
        return NO_ANSWER;
      }
    }
    return { error: JsErr.badRequest(`JetStream API $JS.API.${t.join('.')} is not supported by FlowMQ`) };
  }

  private accountInfo(): Json {
    return typed('account_info_response', {
      memory: 0,
      storage: 0,
      streams: this.engine.listStreams().length,
      consumers: this.consumerCount(),
      limits: {
        max_memory: -1,
        max_storage: -1,
        max_streams: -1,
        max_consumers: -1,
        max_ack_pending: -1,
        memory_max_stream_bytes: -1,
        storage_max_stream_bytes: -1,
        max_bytes_required: false,
      },
      api: { total: this.api.total, errors: this.api.errors },
    });
  }

  /**
   * Cluster mode: the offsets of the stream's partitions written elsewhere as their owners have them now (offsets()
   * answers those from a cache a few hundred ms old), before an answer that shows or uses them. Nothing on a single
   * broker.
   */
  private async freshen(stream: string): Promise<void> {
    if (this.cluster === null) return;
    const storage = this.engine.storage as { fetchOffsets?(stream: string, partition: number): Promise<unknown> };
    const e = this.engine.getStream(stream);
    if (storage.fetchOffsets === undefined || e === undefined) return;
    const parts: Array<Promise<unknown>> = [];
    for (let p = 0; p < e.def.partitions; p++) parts.push(storage.fetchOffsets(stream, p).catch(() => undefined));
    await Promise.all(parts);
  }

  private async streamInfoJson(def: StreamDef): Promise<Json> {
    await this.freshen(def.name);
    return {
      config: streamConfigJson(def, this.duplicateWindowNs.get(def.name) ?? DEFAULT_DUPLICATE_WINDOW_NS),
      created: isoTime(def.createdAt),
      state: await streamState(this.engine, def, this.consumerCount(def.name)),
    };
  }

  private async streamCreate(name: string, body: string, access: Access | null): Promise<Json> {
    const T_ = 'stream_create_response';
    const raw = parseJson(body);
    if (raw === BAD_JSON) return typed(T_, { error: JsErr.invalidJson() });
    const spec = parseStreamConfig(raw, name);
    if (isApiError(spec)) return typed(T_, { error: spec });
    const unbindable = this.unbindable(access, spec.bindings);
    if (unbindable !== null) return typed(T_, { error: unbindable });
    const existing = this.engine.getStream(name);
    if (existing) {
      if (!sameBindings(existing.def.bindings, spec.bindings) || existing.def.retentionMs !== spec.retentionMs) {
        return typed(T_, { error: JsErr.streamNameExist() });
      }
      return typed(T_, { ...(await this.streamInfoJson(existing.def)), did_create: true });
    }
    let def: StreamDef;
    try {
      def = await this.engine.createStream({ name, partitions: 1, bindings: spec.bindings, retentionMs: spec.retentionMs });
    } catch (err) {
      if (err instanceof FlowError && err.code === 'ALREADY_EXISTS') return typed(T_, { error: JsErr.streamNameExist() });
      return typed(T_, { error: JsErr.streamCreate(errText(err)) });
    }
    this.duplicateWindowNs.set(name, spec.duplicateWindowNs);
    return typed(T_, { ...(await this.streamInfoJson(def)), did_create: true });
  }

  private async streamUpdate(name: string, body: string, access: Access | null): Promise<Json> {
    const T_ = 'stream_update_response';
    const raw = parseJson(body);
    if (raw === BAD_JSON) return typed(T_, { error: JsErr.invalidJson() });
    const spec = parseStreamConfig(raw, name);
    if (isApiError(spec)) return typed(T_, { error: spec });
    const e = this.engine.getStream(name);
    if (!e) return typed(T_, { error: JsErr.streamNotFound() });
    const unbindable = this.unbindable(
      access,
      spec.bindings.filter((f) => !e.def.bindings.includes(f)),
    );
    if (unbindable !== null) return typed(T_, { error: unbindable });
    let def = e.def;
    try {
      // New subjects are new bindings: the stream captures what they match from the next publish on.
      if (!sameBindings(def.bindings, spec.bindings)) def = await this.engine.setBindings(name, spec.bindings);
      if (def.retentionMs !== spec.retentionMs) def = await this.engine.setRetention(name, spec.retentionMs);
    } catch (err) {
      return typed(T_, { error: JsErr.streamUpdate(errText(err)) });
    }
    this.duplicateWindowNs.set(name, spec.duplicateWindowNs);
    return typed(T_, await this.streamInfoJson(def));
  }

  /**
   * A stream's subjects are bindings: each needs subscribe on every topic it matches (Access.mayBind), or the stream
   * would collect a denied topic for whoever reads it. The refusal names the subject, as nats-server's permission
   * errors do.
   */
  private unbindable(access: Access | null, filters: readonly string[]): ApiError | null {
    if (access === null) return null;
    for (const f of filters) {
      if (access.mayBind(f)) continue;
      const user = access.principal.user;
      this.api.denied++;
      return JsErr.accessDenied(`Permissions Violation for subscribe on subject ${JSON.stringify(filterToSubject(f))}${user === null ? '' : ` for user ${JSON.stringify(user)}`}`);
    }
    return null;
  }

  private matchingStreams(body: string, access: Access | null): StreamDef[] | ApiError {
    const raw = body.trim() === '' ? {} : parseJson(body);
    if (raw === BAD_JSON || raw === null || typeof raw !== 'object') return JsErr.invalidJson();
    const subject = (raw as Json).subject;
    const defs = this.engine.listStreams().filter((d) => this.listable(access, d.name));
    if (typeof subject !== 'string' || subject === '') return defs;
    return defs.filter((d) => streamSubjects(d).some((s) => subjectsCollide(s, subject)));
  }

  private streamNames(body: string, access: Access | null): Json {
    const defs = this.matchingStreams(body, access);
    if (isApiError(defs)) return typed('stream_names_response', { error: defs });
    const offset = pageOffset(body);
    return typed('stream_names_response', {
      total: defs.length,
      offset,
      limit: NAMES_LIMIT,
      streams: defs.slice(offset, offset + NAMES_LIMIT).map((d) => d.name),
    });
  }

  private async streamList(body: string, access: Access | null): Promise<Json> {
    const defs = this.matchingStreams(body, access);
    if (isApiError(defs)) return typed('stream_list_response', { error: defs });
    const offset = pageOffset(body);
    const streams: Json[] = [];
    for (const d of defs.slice(offset, offset + LIST_LIMIT)) streams.push(await this.streamInfoJson(d));
    return typed('stream_list_response', { total: defs.length, offset, limit: LIST_LIMIT, streams });
  }

  private async streamInfo(name: string): Promise<Json> {
    const e = this.engine.getStream(name);
    if (!e) return typed('stream_info_response', { error: JsErr.streamNotFound(), total: 0, offset: 0, limit: 0 });
    return typed('stream_info_response', { total: 0, offset: 0, limit: 0, ...(await this.streamInfoJson(e.def)) });
  }

  private async streamDelete(name: string): Promise<Json> {
    const T_ = 'stream_delete_response';
    if (!this.engine.getStream(name)) return typed(T_, { error: JsErr.streamNotFound() });
    this.removeConsumersOf(name);
    this.duplicateWindowNs.delete(name);
    try {
      await this.engine.deleteStream(name);
    } catch (err) {
      if (err instanceof FlowError && err.code === 'NOT_FOUND') return typed(T_, { error: JsErr.streamNotFound() });
      return typed(T_, { error: JsErr.streamDelete(errText(err)) });
    }
    await this.engine.store.deleteConsumers(name).catch((err: unknown) => this.warnStore(err));
    return typed(T_, { success: true });
  }

  private async streamPurge(name: string, body: string): Promise<Json> {
    await this.freshen(name);
    const T_ = 'stream_purge_response';
    const e = this.engine.getStream(name);
    if (!e) return typed(T_, { error: JsErr.streamNotFound() });
    const raw = body.trim() === '' ? {} : parseJson(body);
    if (raw === BAD_JSON || raw === null || typeof raw !== 'object') return typed(T_, { error: JsErr.invalidJson() });
    const r = raw as Json;
    if (r.filter !== undefined && r.filter !== '' && r.filter !== '>') {
      return typed(T_, { error: JsErr.streamPurge('purging by subject is not supported by FlowMQ streams') });
    }
    if ((r.seq !== undefined && r.seq !== 0 && r.keep !== undefined && r.keep !== 0) || (r.seq !== undefined && !isCount(r.seq)) || (r.keep !== undefined && !isCount(r.keep))) {
      return typed(T_, { error: JsErr.badRequest() });
    }
    let purged = 0;
    try {
      for (let p = 0; p < e.def.partitions; p++) {
        const { logStartOffset, highWatermark } = this.engine.offsets(name, p);
        let to = highWatermark;
        // seq: everything below that sequence (partition 0's numbering); keep: all but the last n.
        if (typeof r.seq === 'number' && r.seq > 0) to = Math.min(highWatermark, r.seq - 1);
        else if (typeof r.keep === 'number' && r.keep > 0) to = Math.max(0, highWatermark - r.keep);
        if (to <= logStartOffset) continue;
        await this.engine.deleteRecords(name, p, to);
        purged += to - logStartOffset;
      }
    } catch (err) {
      return typed(T_, { error: JsErr.streamPurge(errText(err)) });
    }
    return typed(T_, { success: true, purged });
  }

  private async msgGet(name: string, body: string): Promise<Json> {
    await this.freshen(name);
    const T_ = 'stream_msg_get_response';
    const e = this.engine.getStream(name);
    if (!e) return typed(T_, { error: JsErr.streamNotFound() });
    const raw = parseJson(body);
    if (raw === BAD_JSON || raw === null || typeof raw !== 'object') return typed(T_, { error: JsErr.invalidJson() });
    const r = raw as Json;
    if (r.next_by_subj !== undefined) {
      return typed(T_, { error: JsErr.badRequest('next_by_subj is not supported by FlowMQ streams') });
    }
    let seq: number;
    if (r.last_by_subj !== undefined) {
      const subj = r.last_by_subj;
      if (typeof subj !== 'string' || subj === '') return typed(T_, { error: JsErr.badRequest() });
      const last = await lastMatching(this.engine, name, (m) => subjectMatches(subj, m.topic));
      if (last < 0) return typed(T_, { error: JsErr.noMessageFound() });
      seq = last + 1;
    } else {
      if (!isCount(r.seq) || r.seq === 0) return typed(T_, { error: JsErr.badRequest() });
      seq = r.seq;
    }
    const { logStartOffset, highWatermark } = this.engine.offsets(name, 0);
    if (seq - 1 < logStartOffset || seq - 1 >= highWatermark) return typed(T_, { error: JsErr.noMessageFound() });
    const batches = await this.engine.read(name, 0, seq - 1, 1);
    for (const b of batches) {
      for (const rec of decodeBatch(b)) {
        if (rec.offset !== seq - 1) continue;
        const m = recordToMessage(rec, name.split('.').join('/'));
        const hdrs = encodeHeaderBlock(m);
        return typed(T_, {
          message: {
            subject: dotsSubject(m.topic),
            seq,
            ...(hdrs !== null ? { hdrs: hdrs.toString('base64') } : {}),
            data: m.payload.toString('base64'),
            time: isoTime(m.timestamp),
          },
        });
      }
    }
    return typed(T_, { error: JsErr.noMessageFound() });
  }

  // ------------------------------------------------------------ consumers

  private async consumerCreate(t: string[], body: string): Promise<Json> {
    const T_ = 'consumer_create_response';
    const legacyDurable = t[1] === 'DURABLE';
    const stream = legacyDurable ? t[3] : t[2];
    const subjectName = legacyDurable ? t[4] : t[3];
    const subjectFilter = !legacyDurable && t.length > 4 ? t.slice(4).join('.') : undefined;
    const raw = parseJson(body);
    if (raw === BAD_JSON || raw === null || typeof raw !== 'object' || Array.isArray(raw)) return typed(T_, { error: JsErr.invalidJson() });
    const req = raw as Json;
    if (req.stream_name !== undefined && req.stream_name !== stream) return typed(T_, { error: JsErr.streamMismatch() });
    const e = this.engine.getStream(stream);
    if (!e) return typed(T_, { error: JsErr.streamNotFound() });
    const rc = (req.config ?? {}) as Json;
    if (typeof rc !== 'object' || Array.isArray(rc)) return typed(T_, { error: JsErr.invalidJson() });
    if (subjectName === undefined && typeof rc.durable_name === 'string' && rc.durable_name !== '') {
      return typed(T_, { error: JsErr.ephemeralWithDurable() });
    }
    if (subjectName !== undefined) {
      if (!isValidApiName(subjectName)) return typed(T_, { error: JsErr.consumerNameInvalid() });
      const given = legacyDurable ? rc.durable_name : (rc.name || rc.durable_name);
      if (given !== subjectName) return typed(T_, { error: JsErr.durableNameMismatch() });
      if (subjectFilter !== undefined && rc.filter_subject !== subjectFilter) return typed(T_, { error: JsErr.filterMismatch() });
    }
    const ephemeral = typeof rc.durable_name !== 'string' || rc.durable_name === '';
    const cfg = normalizeConsumerConfig(rc, ephemeral, streamSubjects(e.def));
    if (isApiError(cfg)) return typed(T_, { error: cfg });
    if (e.def.partitions !== 1) {
      return typed(T_, {
        error: JsErr.badRequest(`stream has ${e.def.partitions} partitions: JetStream consumers need a single-partition stream`),
      });
    }
    const name = cfg.name ?? randomName();
    if (cfg.name === undefined) cfg.name = name;
    const existing = this.getConsumer(stream, name);
    if (existing) {
      const refusal = checkConsumerUpdate(existing.config, cfg);
      if (refusal) return typed(T_, { error: refusal });
      existing.setConfig(cfg);
      existing.pump();
      this.changed(existing);
      return typed(T_, this.consumerInfoJson(existing));
    }
    if (this.consumerCount() >= this.maxConsumers) return typed(T_, { error: JsErr.maximumConsumers() });
    const floor = await this.startFloor(stream, cfg);
    const c = new Consumer(this, stream, name, cfg, Date.now(), !ephemeral, {
      deliveredSeq: floor,
      deliveredConsumerSeq: 0,
      ackFloor: floor,
      acked: [],
    });
    // A name may have been taken while the start position was looked up.
    const raced = this.getConsumer(stream, name);
    if (raced) return typed(T_, this.consumerInfoJson(raced));
    if (!this.engine.getStream(stream)) return typed(T_, { error: JsErr.streamNotFound() });
    if (this.cluster !== null) {
      // Claimed by serveConsumer before this create; a create that lost it meanwhile makes nothing.
      const epoch = this.cluster.owns('consumer', consumerKey(stream, name));
      if (epoch === null) throw new FlowError('NOT_OWNER', `the consumer ${stream}/${name} is not served by this broker`);
      c.epoch = epoch;
    }
    this.add(c);
    if (c.isPush) c.pump();
    if (c.durable) {
      try {
        await this.engine.store.putConsumer(c.record(), c.epoch);
      } catch (err) {
        this.warnStore(err);
        await this.deleteConsumer(c, false).catch(() => undefined);
        return typed(T_, { error: JsErr.consumerCreate(`consumer state could not be stored: ${errText(err)}`) });
      }
    }
    return typed(T_, this.consumerInfoJson(c));
  }

  /** The ack floor a new consumer starts from (its deliver policy). */
  private async startFloor(stream: string, cfg: ConsumerConfig): Promise<number> {
    await this.freshen(stream);
    const { logStartOffset, highWatermark } = this.engine.offsets(stream, 0);
    switch (cfg.deliver_policy) {
      case 'new':
        return highWatermark;
      case 'by_start_sequence':
        return Math.max(0, (cfg.opt_start_seq ?? 1) - 1);
      case 'by_start_time':
        return this.engine.offsetForTimestamp(stream, 0, Date.parse(cfg.opt_start_time ?? ''));
      case 'last': {
        if (highWatermark <= logStartOffset) return highWatermark;
        if (cfg.filter_subject === undefined) return highWatermark - 1;
        const filter = cfg.filter_subject;
        const last = await lastMatching(this.engine, stream, (m) => subjectMatches(filter, m.topic));
        return last < 0 ? highWatermark : last;
      }
      default:
        return 0;
    }
  }

  private consumerInfoJson(c: Consumer): Json {
    const delivered: Json = { consumer_seq: c.cseq, stream_seq: c.deliveredSeq };
    if (c.lastDelivered > 0) delivered.last_active = isoTime(c.lastActive);
    const ackFloor: Json = { consumer_seq: c.floorCseq, stream_seq: c.ackFloor };
    if (c.lastAcked > 0) ackFloor.last_active = isoTime(c.lastAcked);
    let numPending = 0;
    try {
      numPending = c.numPending();
    } catch {
      // stream gone
    }
    return {
      stream_name: c.stream,
      name: c.name,
      created: isoTime(c.created),
      config: c.config,
      delivered,
      ack_floor: ackFloor,
      num_ack_pending: c.pending.size,
      num_redelivered: c.rdc.size,
      num_waiting: c.isPush ? 0 : c.waiting.length,
      num_pending: numPending,
      ...(c.isPush && c.pushBound ? { push_bound: true } : {}),
    };
  }

  private consumerInfoReq(stream: string, name: string): Json {
    const T_ = 'consumer_info_response';
    if (!this.engine.getStream(stream)) return typed(T_, { error: JsErr.streamNotFound() });
    const c = this.getConsumer(stream, name);
    if (!c) return typed(T_, { error: JsErr.consumerNotFound() });
    return typed(T_, this.consumerInfoJson(c));
  }

  private sortedConsumers(stream: string): Consumer[] {
    return [...(this.consumers.get(stream)?.values() ?? [])].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  private async consumerNames(stream: string, body: string): Promise<Json> {
    const T_ = 'consumer_names_response';
    if (!this.engine.getStream(stream)) return typed(T_, { error: JsErr.streamNotFound() });
    const all = this.cluster !== null ? (await this.clusterConsumers(this.cluster, stream)).map((i) => String(i.name)) : this.sortedConsumers(stream).map((c) => c.name);
    const offset = pageOffset(body);
    return typed(T_, { total: all.length, offset, limit: NAMES_LIMIT, consumers: all.slice(offset, offset + NAMES_LIMIT) });
  }

  private async consumerList(stream: string, body: string): Promise<Json> {
    const T_ = 'consumer_list_response';
    if (!this.engine.getStream(stream)) return typed(T_, { error: JsErr.streamNotFound() });
    const all = this.cluster !== null ? await this.clusterConsumers(this.cluster, stream) : this.sortedConsumers(stream).map((c) => this.consumerInfoJson(c));
    const offset = pageOffset(body);
    return typed(T_, {
      total: all.length,
      offset,
      limit: LIST_LIMIT,
      consumers: all.slice(offset, offset + LIST_LIMIT),
    });
  }

  private async consumerDelete(stream: string, name: string): Promise<Json> {
    const T_ = 'consumer_delete_response';
    if (!this.engine.getStream(stream)) return typed(T_, { error: JsErr.streamNotFound() });
    const c = this.getConsumer(stream, name);
    if (!c) return typed(T_, { error: JsErr.consumerNotFound() });
    await this.deleteConsumer(c, true);
    return typed(T_, { success: true });
  }

  /** CONSUMER.MSG.NEXT: a pull request; answered with messages and statuses on the reply inbox, never with JSON. */
  private pullRequest(stream: string, name: string, body: string, reply: string, origin: number | undefined): void {
    const status = (s: string) => this.send(makeMessage(reply, Buffer.alloc(0), { status: s }), origin);
    const c = this.getConsumer(stream, name);
    // No such consumer: what a NATS client sees when nobody serves a request (nats.js stops a fetch on it).
    if (!c) return status('503');
    if (c.isPush) return status('409 Consumer is push based');
    const req = parsePullRequest(body, reply);
    if (typeof req === 'string') return status(req);
    if (c.config.max_batch !== undefined && req.batch > c.config.max_batch) return status(`409 Exceeded MaxRequestBatch of ${c.config.max_batch}`);
    if (c.config.max_expires !== undefined && req.expiresAt > 0 && req.expiresAt - Date.now() > c.config.max_expires / 1e6) {
      return status(`409 Exceeded MaxRequestExpires of ${c.config.max_expires / 1e6}ms`);
    }
    if (c.config.max_bytes !== undefined && req.maxBytes > c.config.max_bytes) return status(`409 Exceeded MaxRequestMaxBytes of ${c.config.max_bytes}`);
    if (c.waiting.length >= (c.config.max_waiting ?? 512)) return status('409 Exceeded MaxWaiting');
    if (origin !== undefined && origin !== this.cluster?.id) req.origin = origin;
    c.addRequest(req);
  }

  private onAck(levels: string[], body: string, reply: string | undefined, origin?: number): void {
    // $JS/ACK/<stream>/<consumer>/<delivered>/<sseq>/<cseq>/<ts>/<pending>
    if (levels.length < 9) return;
    const tokens = levelsToTokens(levels);
    const c = this.getConsumer(tokens[2], tokens[3]);
    const seq = Number(tokens[5]);
    if (c === undefined && this.cluster !== null && origin === undefined && Number.isSafeInteger(seq) && seq >= 1) {
      // Served by another broker: the ack goes there (one-way; a lost ack means a redelivery).
      this.forwardAck(this.cluster, consumerKey(tokens[2], tokens[3]), levels, body, reply);
      return;
    }
    if (!c || !Number.isSafeInteger(seq) || seq < 1) return;
    const r = c.ack(seq, body.trim());
    if (!r.ok) {
      this.logger.debug({ stream: c.stream, consumer: c.name, body: body.slice(0, 64) }, 'unknown JetStream ack ignored');
      return;
    }
    if (r.next !== undefined) {
      if (reply === undefined) return;
      const req = parsePullRequest(r.next, reply);
      if (typeof req === 'string') this.send(makeMessage(reply, Buffer.alloc(0), { status: req }), origin);
      else {
        if (origin !== undefined && origin !== this.cluster?.id) req.origin = origin;
        c.addRequest(req);
      }
      return;
    }
    // An ack with a reply subject (nats.js ackAck) is confirmed with an empty message, a repeated one too.
    if (reply !== undefined) this.send(makeMessage(reply, Buffer.alloc(0)), origin);
  }

  private forwardAck(cl: Cluster, key: string, levels: string[], body: string, reply: string | undefined): void {
    const ack = { l: levels, b: body, r: reply ?? null };
    const to = cl.owner('consumer', key);
    if (to !== null) {
      if (to.broker === cl.id) return;
      this.clusterStats.acksForwarded++;
      if (cl.channel) cast(cl.channel, to.broker, RPC.jsAck, ack);
      return;
    }
    void targetOf(cl, key, true)
      .then((b) => {
        if (b === cl.id) return;
        this.clusterStats.acksForwarded++;
        if (cl.channel) cast(cl.channel, b, RPC.jsAck, ack);
      })
      .catch(() => undefined);
  }
}

const NO_ANSWER: Json = {};
const BAD_JSON = Symbol('bad json');

function parseJson(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    return BAD_JSON;
  }
}

function typed(type: string, body: Json): Json {
  return { type: T + type, ...body };
}

function isApiError(v: unknown): v is ApiError {
  return typeof v === 'object' && v !== null && 'err_code' in v && 'code' in v;
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

function pageOffset(body: string): number {
  if (body.trim() === '') return 0;
  const raw = parseJson(body);
  const o = raw !== null && typeof raw === 'object' ? (raw as Json).offset : undefined;
  return isCount(o) ? o : 0;
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function headerValue(msg: Message, key: string): string | undefined {
  for (const h of msg.headers) if (h.key === key) return h.value === null ? '' : h.value.toString('utf8');
  return undefined;
}

function dotsSubject(topic: string): string {
  return dotsToUnified(topic);
}

/** The unified topic of the stored message a STREAM.MSG.GET answer carries (the separator swap is its own inverse). */
function storedTopic(out: Json): string | undefined {
  const m = out.message;
  if (m === null || typeof m !== 'object' || Array.isArray(m)) return undefined;
  const subject = (m as Json).subject;
  return typeof subject === 'string' ? dotsToUnified(subject) : undefined;
}

/** NATS/1.0 header block of a stored message's headers (STREAM.MSG.GET `hdrs`), or null when it has none. */
function encodeHeaderBlock(m: Message): Buffer | null {
  const entries: Array<[string, string]> = m.headers.map((h) => [h.key, h.value === null ? '' : h.value.toString('utf8')]);
  if (m.messageId !== undefined && !entries.some(([k]) => k === 'Nats-Msg-Id')) entries.push(['Nats-Msg-Id', m.messageId]);
  if (entries.length === 0) return null;
  let s = 'NATS/1.0\r\n';
  for (const [k, v] of entries) s += `${k}: ${v.replace(/[\r\n]/g, ' ')}\r\n`;
  return Buffer.from(s + '\r\n');
}

/**
 * A pull request body: empty (one message, no expiry), a number (a batch), or nats-server's JSON
 * {batch, expires (ns), no_wait, max_bytes, idle_heartbeat (ns)}. Returns the request or a 400 status.
 */
function parsePullRequest(body: string, reply: string): PullRequest | string {
  const now = Date.now();
  const req: PullRequest = { reply, batch: 1, bytesLeft: 0, maxBytes: 0, expiresAt: 0, noWait: false, heartbeatMs: 0, nextHeartbeat: 0, delivered: 0 };
  const text = body.trim();
  if (text === '') return req;
  if (/^\d+$/.test(text)) {
    req.batch = Math.max(1, Number(text));
    return req;
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return `400 Bad Request - ${errText(err)}`;
  }
  if (raw === null || typeof raw !== 'object') return '400 Bad Request';
  const r = raw as Json;
  const int = (v: unknown) => (v === undefined || v === null ? 0 : typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : NaN);
  const batch = int(r.batch);
  const expires = int(r.expires);
  const maxBytes = int(r.max_bytes);
  const hb = int(r.idle_heartbeat);
  if ([batch, expires, maxBytes, hb].some(Number.isNaN)) return '400 Bad Request';
  req.batch = batch > 0 ? batch : 1;
  req.noWait = r.no_wait === true;
  if (expires > 0) req.expiresAt = now + expires / 1e6;
  if (maxBytes > 0) req.maxBytes = req.bytesLeft = maxBytes;
  if (hb > 0) {
    if (expires > 0 && hb > expires) return '400 Bad Request - heartbeat value too large';
    req.heartbeatMs = hb / 1e6;
    req.nextHeartbeat = now + req.heartbeatMs;
  }
  return req;
}

function randomName(): string {
  const a = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  let s = '';
  for (let i = 0; i < 8; i++) s += a[Math.floor(Math.random() * a.length)];
  return s;
}

