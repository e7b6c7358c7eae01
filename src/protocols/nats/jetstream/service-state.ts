/**
 * The state of the JetStream service (service.ts) and what every part of its API uses: the consumers this broker
 * serves (the registry, their coalesced state writes, the tick that runs their deadlines and ends inactive ones),
 * the duplicate windows of the streams, the API's counters and authorizer, cluster mode's figures, and the
 * ConsumerHost side (a consumer's deliveries and statuses go out through `send()`). The API families are functions
 * over it, as nats-server's jetstream_api.go, stream.go and consumer.go are over its server and account:
 *
 *   service.ts          JetStream: start/close, the `$JS.API.>` / `$JS.ACK.>` subscriber, authorization, dispatch
 *   stream-api.ts       STREAM.CREATE / UPDATE / NAMES / LIST / INFO / DELETE / PURGE
 *   message-api.ts      the JetStream publish (PubAck, Nats-Msg-Id duplicates, expectations), STREAM.MSG.GET / DELETE
 *   consumer-api.ts     CONSUMER.CREATE / NAMES / LIST / INFO / DELETE, pull requests, acks, consumer groups
 *   account.ts          $JS.API.INFO, the account's limits (the namespace's quotas) and usage, overlapping subjects
 *   service-cluster.ts  cluster mode: consumer ownership, requests routed to a consumer's owner, the channel
 */
import type { Logger } from 'pino';
import type { Cluster } from '../../../cluster/index.js';
import { RPC } from '../../../cluster/index.js';
import type { Access, AccessControl } from '../../../control/index.js';
import { LogLimiter } from '../../../util/log-limit.js';
import {
  dotsToUnified,
  FlowError,
  isReservedTopic,
  makeMessage,
  splitTopic,
  type Engine,
  type Message,
  type StreamDef,
  type Subscription,
} from '../../../core/index.js';
import { namesOf, ownStream } from './names.js';
import { consumerKey, encodeDelivery } from './cluster.js';
import type { ConsumerConfig } from './config.js';
import { Consumer, consumedPartitions, type ConsumerHost } from './consumer.js';
import type { ApiError } from './errors.js';
import { SubjectTally } from './subject-tally.js';
import type { JwtJetStreamLimits } from './jwt-limits.js';
import { ageLimitMs, jsOptions, MAX_DELETE_RULES, needsView, StreamView, type DeleteRule } from './stream-view.js';
import { consumedBy, trimConsumed, workqueueLegacy } from './retention.js';
import { SourceCopier } from './sources.js';
import { Republisher } from './republish.js';

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
  /** JetStream domain (nats-server's jetstream.domain): the API answers on $JS.<domain>.API.> too. */
  domain?: string | null;
  /** Whether the API answers NATS clients (default true; false: --nats-jetstream false). */
  enabled?: boolean;
}

const T = 'io.nats.jetstream.api.v1.';
/**
 * Consumers over all streams. nats-server's account default is unlimited, but every consumer holds memory here and
 * ephemeral ones can be created by any client in a loop: past this, creation answers nats-server's 10026.
 */
export const MAX_CONSUMERS = 10_000;
export const NAMES_LIMIT = 1024;
export const LIST_LIMIT = 256;

export type Json = Record<string, unknown>;

/**
 * How the service authorizes a request (set by the NATS module once its adapter exists): the Access of the
 * request's origin (a NATS connection of this broker), `'gone'` when that connection has closed, null for origins
 * that are not NATS clients (another protocol's publish, checked on its topic by that protocol, or the broker).
 */
/** An account's bytes of one storage type and the most it may hold (account.ts checkAccounts). */
export interface AccountUsage {
  used: number;
  limit: number;
  memory: boolean;
}

export interface JetStreamAuthorizer {
  control: AccessControl;
  accessOf(origin: string | undefined): Access | 'gone' | null;
  /**
   * Operator mode: the JetStream limits of the account JWT whose namespace this is, null when that JWT enables none
   * (jwt-limits.ts), undefined when no account JWT has this namespace.
   */
  jwtLimits?(namespace: string): JwtJetStreamLimits | null | undefined;
}

/** Messages a STREAM.INFO without subjects_filter (or LIST, /jsz) reads to count subjects before answering. */
const TALLY_BACKLOG = 100_000;

/** The service's state (see the file header); `JetStream` (service.ts) is its one subclass. */
/** Deleted consumers of multi-partition streams kept for an ordered consumer's reset (JetStreamState.ended). */
const ENDED_KEPT = 64;

export abstract class JetStreamState implements ConsumerHost {
  readonly id = 'nats:jetstream';
  readonly consumers = new Map<string, Map<string, Consumer>>();
  readonly subs: Subscription[] = [];
  /** Per stream: Nats-Msg-Id → stream sequence and when it was stored, oldest first. */
  readonly dedup = new Map<string, Map<string, { seq: number; at: number }>>();
  /**
   * Cluster mode: per stream, the ownership (epoch) of its partition for which this broker rebuilt `dedup` from the
   * log, and the rebuild while it runs (dedup.ts windowLoad).
   */
  readonly dedupEpochs = new Map<string, { epoch: number; loading: Promise<void> | null }>();
  readonly duplicateWindowNs = new Map<string, number>();
  /** Streams with per-subject limits, rollups or deletes (stream-view.ts), by name. */
  readonly views = new Map<string, StreamView>();
  /** Messages per subject of streams without a view (subject-tally.ts), by name. */
  readonly tallies = new Map<string, SubjectTally>();
  /** Streams whose view refuses publishes at a limit (discard new): every JetStream publish must look for them. */
  readonly refusing = new Set<string>();
  /** Streams that refuse some JetStream publishes outright (sealed, max_msg_size): refreshGuards(). */
  readonly guards = new Map<string, { sealed: boolean; maxMsgSize: number; noAck: boolean }>();
  /** Streams whose stored messages are republished (republish.ts), with the configuration they follow. */
  readonly republishers = new Map<string, { key: string; r: Republisher }>();
  /** Streams whose account has storage limits, to their account's usage (account.ts checkAccounts). */
  readonly accountUsage = new Map<string, AccountUsage>();
  /** Mirrors and sources being copied, by target stream (sources.ts), with the configuration they copy. */
  readonly copiers = new Map<string, { key: string; copiers: SourceCopier[] }>();
  /** Streams whose consumed prefix is being deleted from the log (trimStreams). */
  private readonly trimming = new Set<string>();
  private lastSlowTick = 0;
  /** A look at the push consumers waiting for interest is queued (subscribed). */
  private interestLook = false;
  /** Per stream: the last rule addition (they are serialized: each rewrites the stream's rule list). */
  private readonly ruleChain = new Map<string, Promise<unknown>>();
  /** Per stream with a view: JetStream publishes appended but not durable yet (expectations wait for them). */
  readonly inflight = new Map<string, Set<Promise<unknown>>>();
  /** Per stream: the last publish waiting for its subject checks (message-api.ts subjectChecked). */
  readonly expectChain = new Map<string, Promise<void>>();
  readonly api = { total: 0, errors: 0, denied: 0 };
  readonly dirty = new Set<Consumer>();
  /**
   * Consumers of multi-partition streams deleted lately, newest last (at most ENDED_KEPT): a new consumer may continue
   * one of them (an ordered consumer's reset deletes its consumer, then makes one from its last sequence + 1).
   */
  readonly ended: Array<{ c: Consumer; at: number }> = [];
  private flushTimer: NodeJS.Timeout | null = null;
  private soonFlush: Promise<void> | null = null;
  readonly writes = new Set<Promise<void>>();
  ticker: NodeJS.Timeout | null = null;
  readonly tickMs: number;
  private readonly flushDelayMs: number;
  readonly maxConsumers: number;
  readonly maxDedupIds: number;
  private storeWarned = false;
  closed = false;
  /** Failures a client can trigger are logged rate limited. */
  readonly logLimit: LogLimiter;
  /** The JetStream domain, named in PubAcks and account info; null: none. */
  readonly domain: string | null;
  readonly enabled: boolean;
  /** Policies on the API (null: every request is served, as before the control plane). */
  authorizer: JetStreamAuthorizer | null = null;
  readonly cluster: Cluster | null;
  /** Cluster mode: consumers ("<stream>/<name>") being created here (claimed before they exist in the store). */
  readonly creating = new Set<string>();
  /** Cluster mode: owner rows being given up because nothing was served (service-cluster.ts forgetUnserved). */
  readonly forgetting = new Map<string, Promise<void>>();
  /**
   * Cluster mode: workqueue and interest streams whose removals this broker decides now: it owns the stream's
   * partition and serves every consumer of it (service-cluster.ts checkRetention). Elsewhere their views remove
   * nothing by retention, and their STREAM.INFO is answered by the owner.
   */
  readonly retentionHere = new Set<string>();
  /** Run with the once-a-second part of the tick (cluster mode's retention check). */
  readonly slowTicks: Array<() => void> = [];
  readonly clusterStats = {
    forwarded: 0,
    served: 0,
    acksForwarded: 0,
    deliveriesSent: 0,
    deliveriesReceived: 0,
    fenced: 0,
    forwardFailures: 0,
    publishesForwarded: 0,
  };

  constructor(
    readonly engine: Engine,
    readonly logger: Logger,
    options: JetStreamOptions = {},
  ) {
    this.logLimit = new LogLimiter(logger);
    this.tickMs = options.tickMs ?? 100;
    this.maxConsumers = options.maxConsumers ?? MAX_CONSUMERS;
    this.maxDedupIds = options.maxDedupIds ?? 200_000;
    this.flushDelayMs = options.flushDelayMs ?? 20;
    this.cluster = options.cluster ?? null;
    this.domain = options.domain ?? null;
    this.enabled = options.enabled ?? true;
  }

  /** Serves a request here (service.ts). `origin`: the broker a consumer request came from (cluster mode). */
  abstract routeLocal(t: string[], body: string, reply: string, origin: number | undefined, access?: Access | null): Promise<Json>;

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
  sendLocal(msg: Message): void {
    // An answer into a namespace (a tenant's inbox, deliver subject, advisory: names.ts) is that namespace's message.
    if (isReservedTopic(msg.topic)) msg.namespace = splitTopic(msg.topic).namespace;
    try {
      // A stream bound to the inbox's topic captures the delivery too; its append failing (disk full, fenced) must
      // not become an unhandled rejection, which would end the process.
      this.engine.publish(msg)?.catch((err: unknown) => this.deliveryNotStored(msg, err));
    } catch (err) {
      this.logger.debug({ err, topic: msg.topic }, 'JetStream delivery not published');
    }
  }

  private deliveryNotStored(msg: Message, err: unknown): void {
    this.logLimit.log('warn', 'jetstream-delivery-capture', { err, topic: msg.topic }, 'JetStream delivery not stored by a stream bound to its topic');
  }

  /**
   * Whether the consumer's state is kept in the store: every durable one, and on a single broker every ephemeral one
   * too but those in memory (`mem_storage`): nats-server 2.9 keeps an ephemeral consumer of a file stream across its
   * restart (a KV watcher or an ordered consumer goes on where it was once its client reconnected). In cluster mode
   * an ephemeral consumer ends with its owner (docs/nats.md).
   */
  stores(c: Consumer): boolean {
    return c.durable || (this.cluster === null && c.config.mem_storage !== true);
  }

  changed(c: Consumer): void {
    if (!this.stores(c) || c.closed) return;
    this.dirty.add(c);
    if (this.flushTimer === null) {
      this.flushTimer = setTimeout(() => this.flush(), this.flushDelayMs);
    }
  }

  failed(c: Consumer, err: unknown): void {
    if (!this.engine.getAnyStream(c.stream)) {
      this.removeConsumersOf(c.stream);
      return;
    }
    this.logLimit.log('warn', `jetstream-read|${c.stream}`, { err, stream: c.stream, consumer: c.name }, 'JetStream consumer read failed');
  }

  flush(): void {
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    for (const c of this.dirty) {
      const w = this.engine.store.putConsumer(c.record(), c.epoch).catch((err: unknown) => this.writeFailed(c, err));
      this.writes.add(w);
      void w.finally(() => this.writes.delete(w));
    }
    this.dirty.clear();
  }

  /**
   * Settles once the consumer's state as of now is written (or its write failed), written at the end of this turn
   * of the event loop: the acks that arrive together are stored in one write per consumer.
   */
  async written(c: Consumer): Promise<void> {
    if (this.dirty.has(c)) {
      this.soonFlush ??= new Promise<void>((resolve) =>
        setImmediate(() => {
          this.soonFlush = null;
          this.flush();
          resolve();
        }),
      );
      await this.soonFlush;
    }
    await Promise.all([...this.writes]);
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

  warnStore(err: unknown): void {
    if (this.storeWarned) return;
    this.storeWarned = true;
    this.logger.warn({ err }, 'JetStream consumer state could not be read or written (further failures are not logged)');
  }

  /**
   * A client subscribed (a NATS SUB on this broker): the push consumers that stopped for want of interest look again,
   * once for all the subscriptions read in this turn of the event loop (setImmediate: a flood of connections
   * subscribing costs one pass per turn, not one per SUB; Consumer.interestMaybe's first checks are cheap); the
   * ticker still looks every tickMs for interest that arrives otherwise (another protocol, another broker).
   */
  subscribed(): void {
    if (this.interestLook || this.consumers.size === 0) return;
    this.interestLook = true;
    setImmediate(() => {
      this.interestLook = false;
      for (const m of this.consumers.values()) for (const c of m.values()) if (c.isPush) c.interestMaybe();
    });
  }

  tick(): void {
    const now = Date.now();
    if (now - this.lastSlowTick >= 1000) {
      this.lastSlowTick = now;
      this.expireAged();
      this.trimStreams();
      this.syncSources();
      // Cluster mode: another broker may have sealed a stream or set its max_msg_size.
      if (this.cluster !== null) this.refreshGuards();
      for (const f of this.slowTicks) f();
    }
    for (const [stream, m] of this.consumers) {
      if (!this.engine.getAnyStream(stream)) {
        this.removeConsumersOf(stream);
        continue;
      }
      const def = this.engine.getAnyStream(stream)?.def;
      const partitions = def === undefined ? 1 : consumedPartitions(def);
      for (const was of [...m.values()]) {
        const c = was.partitions === partitions ? was : this.regrown(was);
        c.tick(now);
        const thr = c.config.inactive_threshold;
        const idle = c.isPush ? !c.pushBound : c.waiting.length === 0;
        if (thr !== undefined && thr > 0 && idle && now - c.lastActive > thr / 1e6) {
          this.deleteConsumer(c, false).catch((err: unknown) => this.warnStore(err));
        }
      }
    }
  }

  /**
   * The consumer's stream grew (Kafka CreatePartitions): the consumer is made again from its record, over the new
   * partition count (its positions are per partition: consumer.ts PARTS_KEY). Its pull requests carry over; what
   * waited for an ack is delivered again under its new number (an ack naming the old one is ignored).
   */
  private regrown(c: Consumer): Consumer {
    const r = c.record();
    const n = new Consumer(this, c.stream, c.name, JSON.parse(r.config) as ConsumerConfig, c.created, c.durable, r);
    n.epoch = c.epoch;
    n.lastActive = c.lastActive;
    const pulls = c.waiting.filter((req) => req.push !== true);
    c.close(false);
    this.dirty.delete(c);
    n.waiting.push(...pulls);
    this.consumers.get(c.stream)?.set(c.name, n);
    this.changed(n);
    n.pump();
    return n;
  }

  add(c: Consumer): void {
    let m = this.consumers.get(c.stream);
    if (!m) this.consumers.set(c.stream, (m = new Map<string, Consumer>()));
    m.set(c.name, c);
  }

  getConsumer(stream: string, name: string): Consumer | undefined {
    return this.consumers.get(stream)?.get(name);
  }

  deleteConsumer(c: Consumer, notify: boolean): Promise<void> {
    c.close(notify);
    this.dirty.delete(c);
    const m = this.consumers.get(c.stream);
    if (m?.get(c.name) === c) {
      m.delete(c.name);
      if (c.partitions > 1 && c.config.ack_policy === 'none') {
        this.ended.push({ c, at: Date.now() });
        if (this.ended.length > ENDED_KEPT) this.ended.shift();
      }
      this.retentionAfterDelete(c);
      this.consumerAction(c, 'delete');
    }
    if (m?.size === 0) this.consumers.delete(c.stream);
    if (this.cluster !== null) {
      // The record first (fenced by the owner row), then the owner row itself.
      const cl = this.cluster;
      const key = consumerKey(c.stream, c.name);
      const gone = c.durable ? this.engine.store.deleteConsumer(c.stream, c.name, c.epoch) : Promise.resolve();
      return gone.then(() => cl.forget('consumer', key));
    }
    if (!this.stores(c)) return Promise.resolve();
    return this.engine.store.deleteConsumer(c.stream, c.name);
  }

  /**
   * A JetStream advisory as nats-server 2.9 publishes it on `$JS.EVENT.ADVISORY.<what>`: JSON with its `type`
   * (`io.nats.jetstream.advisory.v1.<type>`), a unique `id` and the `timestamp`, then `body`.
   */
  advise(what: string, type: string, body: Json, stream?: string): void {
    if (this.closed) return;
    const json = { type: `io.nats.jetstream.advisory.v1.${type}`, id: randomId(22), timestamp: new Date().toISOString(), ...body };
    // A stream's advisories are its namespace's (names.ts): published in its `$JS.EVENT.>`.
    const prefix = stream === undefined ? '' : namesOf(stream).topicPrefix;
    this.sendLocal(makeMessage(prefix + dotsToUnified(`$JS.EVENT.ADVISORY.${what}`), Buffer.from(JSON.stringify(json))));
  }

  consumerAction(c: Consumer, action: 'create' | 'delete'): void {
    const own = ownStream(c.stream);
    this.advise(
      `CONSUMER.${action === 'create' ? 'CREATED' : 'DELETED'}.${own}.${c.name}`,
      'consumer_action',
      {
        stream: own,
        consumer: c.name,
        action,
      },
      c.stream,
    );
  }

  streamAction(name: string, action: 'create' | 'modify' | 'delete'): void {
    const what = action === 'create' ? 'CREATED' : action === 'modify' ? 'UPDATED' : 'DELETED';
    const own = ownStream(name);
    this.advise(`STREAM.${what}.${own}`, 'stream_action', { stream: own, action }, name);
  }

  /** A consumer of a workqueue or interest stream went away (retention.ts). */
  private retentionAfterDelete(c: Consumer): void {
    const def = this.engine.getAnyStream(c.stream)?.def;
    if (def === undefined) return;
    const retention = jsOptions(def).retention;
    if (retention === 'workqueue') {
      // What it consumed stays consumed (the view forgets its acks with it): kept as a rule of the stream.
      const legacy = workqueueLegacy(c);
      if (legacy !== null) {
        this.addRule(c.stream, () => ({ ...legacy, at: 0 })).catch((err: unknown) =>
          this.logLimit.log('warn', `jetstream-wq-rule|${c.stream}`, { err, stream: c.stream }, 'JetStream workqueue consumer acks not kept'),
        );
      }
    } else if (retention === 'interest') {
      // Its interest goes with it: what only it was waiting for is gone.
      this.views.get(c.stream)?.recheckFrom(c.ackFloor + 1);
    }
  }

  /** ConsumerHost: `c` is done with `seq` (workqueue and interest streams drop it when nobody else needs it). */
  consumed(c: Consumer, seq: number): void {
    const v = this.views.get(c.stream);
    if (v !== undefined && v.opts.retention !== 'limits') v.recheck(seq);
  }

  /**
   * Streams with a per-message max_age (stream-view.ts ageLimitMs): their views drop the aged messages, and the log
   * start moves past them, so Kafka readers of the stream lose them too (once a second: by the owner of the stream's
   * partition in cluster mode; other brokers' views expire them as they read).
   */
  private expireAged(): void {
    for (const d of this.engine.listAllStreams()) {
      const name = d.name;
      if (ageLimitMs(d) <= 0 || this.trimming.has(name) || !this.copiesHere(name)) continue;
      const v = this.viewOf(name);
      if (v === null) continue;
      this.trimming.add(name);
      v.catchUp()
        .then(() => trimConsumed(this.engine, name, v))
        .catch((err: unknown) => this.logLimit.log('warn', `jetstream-age|${name}`, { err, stream: name }, 'JetStream aged messages not trimmed'))
        .finally(() => this.trimming.delete(name));
    }
  }

  /** Deletes from the log what no consumer of a workqueue or interest stream needs (retention.ts), one at a time. */
  private trimStreams(): void {
    for (const [name, v] of this.views) {
      if (v.opts.retention === 'limits' || this.trimming.has(name)) continue;
      if (this.cluster !== null && !this.retentionHere.has(name)) continue;
      const p = trimConsumed(this.engine, name, v);
      if (p === null) continue;
      this.trimming.add(name);
      p.catch((err: unknown) => this.logLimit.log('warn', `jetstream-trim|${name}`, { err, stream: name }, 'JetStream consumed messages not trimmed')).finally(
        () => this.trimming.delete(name),
      );
    }
  }

  removeConsumersOf(stream: string): void {
    const m = this.consumers.get(stream);
    if (!m) return;
    for (const c of m.values()) {
      c.close(true);
      this.dirty.delete(c);
      this.consumerAction(c, 'delete');
      // Its stream is gone: so is its owner row (the deleting broker removed the records).
      if (this.cluster !== null) void this.cluster.forget('consumer', consumerKey(c.stream, c.name)).catch(() => undefined);
    }
    this.consumers.delete(stream);
    for (let i = this.ended.length - 1; i >= 0; i--) if (this.ended[i].c.stream === stream) this.ended.splice(i, 1);
    this.dedup.delete(stream);
    this.dedupEpochs.delete(stream);
    this.dropView(stream);
  }

  consumerCount(stream?: string): number {
    if (stream !== undefined) return this.consumers.get(stream)?.size ?? 0;
    let n = 0;
    for (const m of this.consumers.values()) n += m.size;
    return n;
  }

  /**
   * A stream's consumer_count: on a single broker those held here; in cluster mode also the durable consumers the
   * other brokers hold (their stored records), so that every broker answers the same (ephemeral consumers of other
   * brokers are not counted: they are stored nowhere).
   */
  async streamConsumerCount(stream: string): Promise<number> {
    if (this.cluster === null) return this.consumerCount(stream);
    const names = new Set(this.consumers.get(stream)?.keys() ?? []);
    for (const r of await this.engine.store.listConsumers(stream)) names.add(r.name);
    return names.size;
  }

  // ------------------------------------------------------------ answers

  /** `guard`: the answer carries a stored message of this topic (see Message.guardTopic). */
  reply(topic: string, body: unknown, guard?: string): void {
    this.send(makeMessage(topic, Buffer.from(JSON.stringify(body)), guard === undefined ? {} : { guardTopic: guard }));
  }

  /**
   * Cluster mode: the offsets of the stream's partitions written elsewhere as their owners have them now (offsets()
   * answers those from a cache a few hundred ms old), before an answer that shows or uses them. Nothing on a single
   * broker.
   */
  async freshen(stream: string): Promise<void> {
    if (this.cluster === null) return;
    const storage = this.engine.storage;
    const e = this.engine.getAnyStream(stream);
    if (storage.fetchOffsets === undefined || e === undefined) return;
    const parts: Array<Promise<unknown>> = [];
    for (let p = 0; p < e.def.partitions; p++) parts.push(storage.fetchOffsets(stream, p).catch(() => undefined));
    await Promise.all(parts);
  }

  private setView(name: string, v: StreamView): void {
    this.views.set(name, v);
    if (v.refusesNew) this.refusing.add(name);
    else this.refusing.delete(name);
  }

  private dropView(name: string): void {
    this.views.delete(name);
    this.refusing.delete(name);
  }

  /** The stream's view (stream-view.ts), or null when it needs none; not caught up (see freshView). */
  viewOf(name: string): StreamView | null {
    const e = this.engine.getAnyStream(name);
    if (e === undefined) {
      this.dropView(name);
      return null;
    }
    const have = this.views.get(name);
    if (have !== undefined && have.def === e.def) return have;
    if (!needsView(jsOptions(e.def))) {
      this.dropView(name);
      return null;
    }
    const v = this.newView(e.def);
    this.setView(name, v);
    return v;
  }

  private newView(def: StreamDef): StreamView {
    const name = def.name;
    return new StreamView(
      def,
      this.engine,
      (seq, topic, retention) =>
        (this.cluster === null || this.retentionHere.has(name)) && consumedBy(this.consumers.get(name)?.values() ?? [], seq, topic, retention),
    );
  }

  /**
   * Messages per subject (unified topics) of partition 0's live messages: the view's, or a tally of the log; with
   * `wait` false, null while the tally has more than TALLY_BACKLOG messages left to read (it reads on meanwhile).
   */
  async subjectCounts(def: StreamDef, view: StreamView | null, wait: boolean): Promise<Iterable<[string, number]> | null> {
    if (view !== null) {
      this.tallies.delete(def.name);
      return [...view.bySubject].map(([s, l]): [string, number] => [s, l.length]);
    }
    let t = this.tallies.get(def.name);
    if (t === undefined || t.def.createdAt !== def.createdAt) {
      // Tallies of streams deleted meanwhile (by any protocol) go when a new one starts.
      for (const k of this.tallies.keys()) if (this.engine.getAnyStream(k) === undefined) this.tallies.delete(k);
      this.tallies.set(def.name, (t = new SubjectTally(def, this.engine)));
    }
    return wait ? t.current() : t.soon(TALLY_BACKLOG);
  }

  /** The stream's view caught up with its log, or null. */
  async freshView(name: string): Promise<StreamView | null> {
    const v = this.viewOf(name);
    if (v !== null) await v.catchUp();
    return v;
  }

  /**
   * Applies an explicit delete (STREAM.MSG.DELETE, a filtered purge) and stores it with the stream's definition;
   * returns how many messages it removed, or an error text.
   */
  addRule(name: string, make: (v: StreamView) => DeleteRule): Promise<number | string> {
    const prev = this.ruleChain.get(name) ?? Promise.resolve();
    const next = prev.then(async () => {
      const e = this.engine.getAnyStream(name);
      if (e === undefined) return 'stream not found';
      const opts = jsOptions(e.def);
      const start = this.engine.offsets(name, 0).logStartOffset;
      if (opts.rules.filter((r) => r.at > start).length >= MAX_DELETE_RULES) return `too many deletes on this stream (${MAX_DELETE_RULES}): purge it whole`;
      // The view as it will be with a rule: built (and caught up) before the rule is stored.
      const v = this.views.get(name)?.def === e.def ? this.views.get(name)! : this.newView(e.def);
      this.setView(name, v);
      await v.catchUp();
      // Applied where the log is now (what is appended meanwhile is not touched), then stored.
      const rule = { ...make(v), at: v.scanned };
      const removed = v.apply(rule);
      const now = this.engine.getAnyStream(name)?.def ?? e.def;
      // Rules wholly below the log start remove nothing any more (their messages are gone from the log): dropped.
      const lso = this.engine.offsets(name, 0).logStartOffset;
      const rules = [...jsOptions(now).rules.filter((r) => r.at > lso), rule];
      const { name: _n, partitions: _p, bindings: _b, createdAt: _c, id: _i, ...settings } = now;
      let def: StreamDef;
      try {
        def = await this.engine.setSettings(name, { ...settings, configs: { ...(now.configs ?? {}), 'nats.deletes': JSON.stringify(rules) } });
      } catch (err) {
        // Not stored: the view must not keep it.
        this.dropView(name);
        throw err;
      }
      if (this.views.get(name) === v) v.adopt(def);
      return removed;
    });
    const settled = next.catch(() => undefined);
    this.ruleChain.set(name, settled);
    void settled.then(() => {
      if (this.ruleChain.get(name) === settled) this.ruleChain.delete(name);
    });
    return next;
  }

  /** Looks the streams' sealed and max_msg_size settings up again (after a stream request, and on the tick). */
  refreshGuards(): void {
    this.guards.clear();
    for (const d of this.engine.listAllStreams()) {
      const o = jsOptions(d);
      if (o.sealed || o.maxMsgSize >= 0 || o.noAck) this.guards.set(d.name, { sealed: o.sealed, maxMsgSize: o.maxMsgSize, noAck: o.noAck });
    }
  }

  /** Starts and stops the copiers of mirrors and sources as the streams' configurations say (sources.ts). */
  syncSources(): void {
    const seen = new Set<string>();
    if (!this.closed) {
      for (const d of this.engine.listAllStreams()) {
        const o = jsOptions(d);
        if (o.mirror === null && o.sources.length === 0) continue;
        // Cluster mode: copied by the owner of the stream's partition only (it follows the partition).
        if (!this.copiesHere(d.name)) continue;
        seen.add(d.name);
        const key = JSON.stringify([o.mirror, o.sources]);
        const have = this.copiers.get(d.name);
        if (have?.key === key) continue;
        for (const c of have?.copiers ?? []) c.stop();
        const specs = o.mirror !== null ? [o.mirror] : o.sources;
        this.copiers.set(d.name, { key, copiers: specs.map((spec) => new SourceCopier(this, d.name, spec, o.mirror !== null)) });
      }
    }
    for (const [name, have] of this.copiers) {
      if (seen.has(name)) continue;
      for (const c of have.copiers) c.stop();
      this.copiers.delete(name);
    }
    this.syncRepublish();
  }

  /** Starts and stops the republishers as the streams' configurations say (republish.ts). */
  private syncRepublish(): void {
    const seen = new Set<string>();
    if (!this.closed) {
      for (const d of this.engine.listAllStreams()) {
        const spec = jsOptions(d).republish;
        if (spec === null) continue;
        seen.add(d.name);
        const key = JSON.stringify(spec);
        const have = this.republishers.get(d.name);
        if (have?.key === key) continue;
        have?.r.stop();
        this.republishers.set(d.name, { key, r: new Republisher(this, d.name, spec) });
      }
    }
    for (const [name, have] of this.republishers) {
      if (seen.has(name)) continue;
      have.r.stop();
      this.republishers.delete(name);
    }
  }

  republishFailed(stream: string, err: unknown): void {
    this.logLimit.log('warn', `jetstream-republish|${stream}`, { err, stream }, 'JetStream republish failed');
  }

  /** Whether this broker copies into `target` (SourceHost): the owner of its partition in cluster mode. */
  copiesHere(target: string): boolean {
    return this.cluster === null || this.cluster.owns('partition', `${target}/0`) !== null;
  }

  sourceFailed(target: string, origin: string, err: unknown): void {
    this.logLimit.log('warn', `jetstream-source|${target}|${origin}`, { err, stream: target, origin }, 'JetStream mirror or source copy failed');
  }

  sortedConsumers(stream: string): Consumer[] {
    return [...(this.consumers.get(stream)?.values() ?? [])].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }
}

export const NO_ANSWER: Json = {};
export const BAD_JSON = Symbol('bad json');

export function parseJson(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    return BAD_JSON;
  }
}

export function typed(type: string, body: Json): Json {
  return { type: T + type, ...body };
}

export function isApiError(v: unknown): v is ApiError {
  return typeof v === 'object' && v !== null && 'err_code' in v && 'code' in v;
}

export function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

export function pageOffset(body: string): number {
  if (body.trim() === '') return 0;
  const raw = parseJson(body);
  const o = raw !== null && typeof raw === 'object' ? (raw as Json).offset : undefined;
  return isCount(o) ? o : 0;
}

export function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function randomName(): string {
  return randomId(8);
}

export function randomId(n: number): string {
  const a = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  let s = '';
  for (let i = 0; i < n; i++) s += a[Math.floor(Math.random() * a.length)];
  return s;
}
