/**
 * The routing engine: one protocol-agnostic core that every adapter calls.
 *
 * - Live subscriptions (optionally shared in a group) receive matching publishes.
 * - Streams bound to topic filters capture matching publishes durably; a Kafka produce appends to a stream
 *   directly and is delivered to matching live subscriptions and to other bound streams as well.
 */
import { FlowError } from './errors.js';
import type { Message, QoS } from './message.js';
import { decodeBatch, encodeBatch, messageToRecord, recordToMessage } from './record-batch.js';
import {
  NO_STREAM_DEFAULTS,
  newStreamId,
  sameStreamDef,
  type AppendResult,
  type PartitionOffsets,
  type ProducerSnapshot,
  type ReadLease,
  type StreamDef,
  type StreamDefaults,
  type StreamSettings,
  type StreamStorage,
} from './streams.js';
import { RetainedIndex } from './retained.js';
import { decodeStoredMessage, encodeStoredMessage } from './sessions.js';
import type { CoreStore } from './store.js';
import type { QueueDef, QueueFactory, QueueHandle, QueueStore } from './queues.js';
import type { BindingDef, ExchangeDef, RouteResult, Router } from './exchanges.js';
import { mqttAccepts, parseBindingKey } from './matcher.js';
import { RouterCore } from './router.js';
import { createQueue as defaultCreateQueue } from './queue.js';
import { isValidStreamName, kafkaToUnified, matches, validateFilter, validateTopic } from './topic.js';
import { TopicTrie } from './trie.js';

/** A consumer of live messages: one per protocol connection or session. */
export interface Subscriber {
  /** Unique among live subscribers, e.g. "mqtt:client-7". */
  readonly id: string;
  /**
   * Called synchronously once per matching publish with every subscription of this subscriber that matched.
   * Must not throw and must not block: an adapter queues or drops according to its own flow control.
   */
  deliver(msg: Message, subs: Subscription[]): void;
  /**
   * Optional: false while the subscriber cannot take messages right away (e.g. an offline persistent
   * session). A shared group then prefers its available members.
   */
  isAvailable?(): boolean;
}

export interface SubscribeOptions {
  qos: QoS;
  /** Shared-subscription group: each message goes to one member of the group. */
  group?: string;
  /** Protocol-specific options (e.g. MQTT v5 no-local, subscription identifier); opaque to the core. */
  data?: unknown;
  /**
   * How the filter is written and matched (matcher.ts). 'mqtt' (default): an MQTT filter on unified topics, with
   * the `$` rule. 'nats': a NATS subject (`a.*.>`; `>` one or more tokens, so `a.>` does not match `a`), matched
   * against unified topics through the separator swap, without the `$` rule (NATS `>` matches `$JS.API.INFO`).
   */
  rule?: 'mqtt' | 'nats';
  /**
   * Set when authorization lets the subscriber receive only some of the topics its filter matches (a wildcard
   * reaching into a denied topic): a delivery on a topic it refuses is skipped for this subscription (a shared
   * group whose picked member refuses it skips that message). Unset: every match is delivered, at no cost.
   */
  admit?: (topic: string) => boolean;
  /**
   * Cluster mode: a service of this broker's own (the JetStream API), serving the clients of this broker only: not
   * announced to the other brokers, and messages forwarded from another broker are not delivered to it (the broker
   * they were published on serves them). Without effect on a single broker.
   */
  local?: boolean;
}

export interface Subscription {
  /** The filter as given (an MQTT filter, or a NATS subject with rule 'nats'). */
  readonly filter: string;
  readonly subscriber: Subscriber;
  readonly options: SubscribeOptions;
}

interface SharedGroup {
  key: string;
  members: Subscription[];
  next: number;
  /** The members' rule is 'nats': no MQTT `$` rule. */
  nats: boolean;
}

/**
 * What one publish reached, filled by Engine.publish when asked: NATS answers a request nobody receives with a
 * no-responders status, and a JetStream publish is acknowledged with the stream sequence its message got.
 */
export interface PublishInfo {
  /** Live subscribers that received it. */
  delivered: number;
  /**
   * Stream appends, with the offset each was given (assigned synchronously, before the write is durable). Cluster
   * mode, an append forwarded to the partition's owner: `offset` is -1 and `later` resolves with it once durable.
   */
  captured: Array<{ stream: string; partition: number; offset: number; later?: Promise<number> }>;
  /** Queues and exchange destinations reached through the unified topic space (amq.topic bindings). */
  queued: number;
}

export function newPublishInfo(): PublishInfo {
  return { delivered: 0, captured: [], queued: 0 };
}

/**
 * Cluster mode's live side (implemented in src/cluster/live.ts; null on a single broker, where nothing below costs
 * anything). The core stays free of I/O: it tells the hook which live interest exists here and hands it each message
 * published through this broker; the hook forwards (batched, over the brokers' channel) to the brokers that want it.
 * A message forwarded from another broker comes back in through Engine.deliverForwarded and never reaches the hook.
 */
export interface LiveHook {
  /**
   * A live subscription appeared here (called once per subscription, the hook counts): its filter as given, its rule
   * and its shared group. `key` identifies the interest (liveKey): equal for subscriptions that match alike.
   */
  subscribed(key: string, filter: string, rule: 'mqtt' | 'nats', group: string | undefined): void;
  unsubscribed(key: string, filter: string, rule: 'mqtt' | 'nats', group: string | undefined): void;
  /** How many interest entries other brokers hold: 0 means no forwarding at all (checked before every forward). */
  readonly remote: number;
  /**
   * A message published through this broker (once, before local delivery): queues it for every broker that wants it
   * and returns how many. Shared groups with members on several brokers are served by one broker per message; the
   * groups given to another broker are left in `skip` (their liveKey) until the next call, for local delivery to pass.
   */
  forward(msg: Message): number;
  readonly skip: ReadonlySet<string> | null;
  /** True when another broker has live interest matching `topic` (NATS no-responders, JetStream push consumers). */
  wants(topic: string): boolean;
  /** The retained message of `topic` was written to (or, null, deleted from) the store. */
  retainedChanged(topic: string, msg: Message | null): void;
}

/**
 * The identity of live interest: rule, shared group (empty: none) and filter. A shared group's members on every
 * broker share it, so it names the group cluster-wide.
 */
export function liveKey(rule: 'mqtt' | 'nats' | undefined, group: string | undefined, filter: string): string {
  return `${rule === 'nats' ? 'n' : 'm'}${group === undefined ? '-' : `g${group}`}\u0000${filter}`;
}

export interface StreamSpec {
  name: string;
  partitions: number;
  bindings?: string[];
  retentionMs?: number | null;
  retentionBytes?: number | null;
  segmentBytes?: number | null;
  segmentMs?: number | null;
  configs?: Readonly<Record<string, string>>;
}

/**
 * Checks a stream's settings and returns them as a definition holds them: the optional ones only when set, so a
 * stream with none has the same definition as before they existed.
 */
function streamSettings(s: Partial<StreamSettings>): StreamSettings {
  const retentionMs = s.retentionMs ?? null;
  if (retentionMs !== null && (!Number.isFinite(retentionMs) || retentionMs <= 0)) {
    throw new FlowError('INVALID_ARGUMENT', 'retention must be a positive duration');
  }
  const out: StreamSettings = { retentionMs };
  const whole = (what: string, v: number | null | undefined, min: number): number | null => {
    if (v === null || v === undefined) return null;
    if (!Number.isSafeInteger(v) || v < min) throw new FlowError('INVALID_ARGUMENT', `${what} must be an integer >= ${min}`);
    return v;
  };
  const retentionBytes = whole('retention bytes', s.retentionBytes, 0);
  const segmentBytes = whole('segment bytes', s.segmentBytes, 1);
  const segmentMs = whole('segment age', s.segmentMs, 1);
  if (retentionBytes !== null) out.retentionBytes = retentionBytes;
  if (segmentBytes !== null) out.segmentBytes = segmentBytes;
  if (segmentMs !== null) out.segmentMs = segmentMs;
  if (s.configs !== undefined) {
    const entries = Object.entries(s.configs);
    if (!entries.every(([k, v]) => typeof k === 'string' && typeof v === 'string')) throw new FlowError('INVALID_ARGUMENT', 'stream configs must map names to strings');
    if (entries.length > 0) out.configs = Object.fromEntries(entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }
  return out;
}

export interface StreamEntry {
  def: StreamDef;
  /** The stream's own unified topic (its name with dots as levels). */
  ownTopic: string;
}

export const MAX_PARTITIONS = 10000;

/** Retained messages of these topics (broker statistics) are kept in memory only: they are rewritten often. */
const VOLATILE_RETAINED_PREFIX = '$SYS/';

export class Engine implements Router {
  private readonly subs = new TopicTrie<Subscription | SharedGroup>();
  private readonly groups = new Map<string, SharedGroup>();
  private readonly bindings = new TopicTrie<StreamEntry>();
  private readonly streams = new Map<string, StreamEntry>();
  /** Messages delivered to live subscribers / captured by streams, for metrics. */
  readonly stats = { published: 0, delivered: 0, captured: 0, dropped: 0 };
  /** Last retained message per topic, any protocol's publish with retain=true sets it. */
  readonly retained = new RetainedIndex();
  /**
   * Cluster mode: live interest and forwarding across brokers (src/cluster/live.ts). Set before the first
   * subscription (the broker does it right after creating the engine); null on a single broker.
   */
  live: LiveHook | null = null;
  constructor(
    readonly storage: StreamStorage,
    /**
     * Every durable role in one (stream definitions, retained messages here; offsets, producer ids and sessions
     * for the adapters, which take them from here): the broker's metastore, or a MemoryStore.
     */
    readonly store: CoreStore,
    /** Where durable queues keep their messages (the broker passes its backend; tests may leave the memory one). */
    readonly queueStore?: QueueStore,
    /** Makes queue runtimes; src/core/queue.ts's createQueue unless a test brings its own. */
    createQueue: QueueFactory = defaultCreateQueue,
  ) {
    this.router = new RouterCore(
      {
        publishUnified: (msg) => this.publishUnified(msg),
        hasStream: (name) => this.streams.has(name),
        appendToStream: (name, msg) => this.appendToStream(name, msg),
        writeRefusal: () => this.writeRefusal(),
      },
      store,
      queueStore ?? null,
      createQueue,
    );
  }

  /** Exchanges, bindings and queues (the Router methods below delegate to it; cluster mode attaches to it). */
  readonly router: RouterCore;

  // ---------------------------------------------------------------- streams

  /** Loads stream definitions (at start). */
  async load(): Promise<void> {
    for (const def of await this.store.listStreams()) {
      await this.storage.openStream(def);
      this.index(def);
    }
    for (const r of await this.store.listRetained()) this.retained.set(decodeStoredMessage(r.data));
    await this.router.load();
  }

  /**
   * Why durable writes are refused now (the broker sets it to its free-space reserve where queues and the WAL are on
   * the local disk), or null. Streams learn it from their log; queues from here.
   */
  writeRefusal: () => FlowError | null = () => null;

  /** Stops queue timers (broker shutdown); deletes nothing. */
  close(): void {
    this.router.close();
  }

  async createStream(spec: StreamSpec): Promise<StreamDef> {
    if (!isValidStreamName(spec.name)) {
      throw new FlowError(
        'INVALID_ARGUMENT',
        `invalid stream name "${spec.name}": use 1-249 of [a-zA-Z0-9._-] (dots are topic levels)`,
      );
    }
    if (!Number.isInteger(spec.partitions) || spec.partitions < 1 || spec.partitions > MAX_PARTITIONS) {
      throw new FlowError('INVALID_ARGUMENT', `partitions must be an integer in 1..${MAX_PARTITIONS}`);
    }
    if (this.streams.has(spec.name)) throw new FlowError('ALREADY_EXISTS', `stream "${spec.name}" already exists`);
    const bindings = spec.bindings && spec.bindings.length > 0 ? [...new Set(spec.bindings)] : [kafkaToUnified(spec.name)];
    for (const b of bindings) validateFilter(b);
    const { retentionMs, ...settings } = streamSettings(spec);
    const def: StreamDef = { name: spec.name, partitions: spec.partitions, bindings, retentionMs, createdAt: Date.now(), ...settings, id: newStreamId() };
    await this.store.createStream(def);
    await this.storage.openStream(def);
    this.index(def);
    return def;
  }

  async deleteStream(name: string): Promise<void> {
    const e = this.streams.get(name);
    if (!e) throw new FlowError('NOT_FOUND', `stream "${name}" does not exist`);
    this.unindex(e);
    await this.store.deleteStream(name);
    // Its JetStream consumers go with it: a stream created later under the same name starts without them. After
    // the definition (not before): a failed delete leaves the stream with its consumers, and the store keeps no
    // tie between the two (no foreign key) that would do it for us.
    await this.store.deleteConsumers(name);
    await this.router.streamDeleted(name);
    await this.storage.dropStream(name);
  }

  /**
   * Grows a stream to `partitions` partitions (Kafka CreatePartitions). Never shrinks: records already stored
   * stay where they are, only new keys may map to the new partitions.
   */
  async addPartitions(name: string, partitions: number): Promise<StreamDef> {
    const e = this.streams.get(name);
    if (!e) throw new FlowError('NOT_FOUND', `stream "${name}" does not exist`);
    if (!Number.isInteger(partitions) || partitions <= e.def.partitions || partitions > MAX_PARTITIONS) {
      throw new FlowError('INVALID_ARGUMENT', `partitions must be an integer in ${e.def.partitions + 1}..${MAX_PARTITIONS}`);
    }
    return this.redefine(e, { ...e.def, partitions });
  }

  /** Changes a stream's retention (null keeps data forever). */
  async setRetention(name: string, retentionMs: number | null): Promise<StreamDef> {
    const e = this.streams.get(name);
    if (!e) throw new FlowError('NOT_FOUND', `stream "${name}" does not exist`);
    if (retentionMs !== null && (!Number.isFinite(retentionMs) || retentionMs <= 0)) {
      throw new FlowError('INVALID_ARGUMENT', 'retention must be a positive duration');
    }
    return this.redefine(e, { ...e.def, retentionMs });
  }

  /**
   * Replaces a stream's settings, all of them (Kafka AlterConfigs; IncrementalAlterConfigs computes the whole set):
   * those left out go back to their defaults. The log applies them from its next cut, seal or retention pass.
   */
  async setSettings(name: string, settings: Partial<StreamSettings>): Promise<StreamDef> {
    const e = this.streams.get(name);
    if (!e) throw new FlowError('NOT_FOUND', `stream "${name}" does not exist`);
    const { name: n, partitions, bindings, createdAt, id } = e.def;
    return this.redefine(e, { name: n, partitions, bindings, createdAt, ...streamSettings(settings), ...(id !== undefined ? { id } : {}) });
  }

  /**
   * Replaces the topic filters a stream captures (live: the next publish is matched against the new ones). Records
   * already stored stay; an empty list binds the stream's own name, as at creation.
   */
  async setBindings(name: string, bindings: string[]): Promise<StreamDef> {
    const e = this.streams.get(name);
    if (!e) throw new FlowError('NOT_FOUND', `stream "${name}" does not exist`);
    const list = bindings.length > 0 ? [...new Set(bindings)] : [kafkaToUnified(name)];
    for (const b of list) validateFilter(b);
    return this.redefine(e, { ...e.def, bindings: list });
  }

  private async redefine(e: StreamEntry, def: StreamDef): Promise<StreamDef> {
    await this.store.updateStream(def);
    await this.storage.openStream(def);
    // The entry is replaced only if the stream was not deleted or redefined meanwhile.
    if (this.streams.get(def.name) === e) {
      this.unindex(e);
      this.index(def);
    }
    return def;
  }

  /**
   * Cluster mode: applies the stream catalog as another broker changed it (the `streams` notify, see
   * src/cluster/streams.ts): streams deleted there are unindexed and dropped here, new or redefined ones opened
   * and indexed. Nothing is written to the store (the other broker did that).
   */
  async syncStreams(defs: readonly StreamDef[]): Promise<void> {
    const next = new Map(defs.map((d) => [d.name, d]));
    for (const [name, e] of [...this.streams]) {
      const d = next.get(name);
      if (d !== undefined && d.createdAt === e.def.createdAt) continue;
      // Deleted (or deleted and created again: a new incarnation with data of its own).
      this.unindex(e);
      await this.storage.dropStream(name);
    }
    for (const def of defs) {
      const e = this.streams.get(def.name);
      if (e !== undefined && sameStreamDef(e.def, def)) continue;
      await this.storage.openStream(def);
      const now = this.streams.get(def.name);
      if (now !== undefined) this.unindex(now);
      this.index(def);
    }
  }

  /** Makes offsets below `offset` of a partition unreadable; returns the new log start offset. */
  deleteRecords(stream: string, partition: number, offset: number): Promise<number> {
    this.partitionOf(stream, partition);
    return this.storage.deleteRecordsBefore(stream, partition, offset);
  }

  getStream(name: string): StreamEntry | undefined {
    return this.streams.get(name);
  }

  /** The stream whose identity (StreamDef.id) this is; undefined for one deleted (or never made). */
  getStreamById(id: string): StreamEntry | undefined {
    return this.streamsById.get(id);
  }
  private readonly streamsById = new Map<string, StreamEntry>();

  listStreams(): StreamDef[] {
    return [...this.streams.values()].map((e) => e.def).sort((a, b) => a.name.localeCompare(b.name));
  }

  /**
   * Changes of what feeds streams and queues (stream bindings here, exchange bindings in the router): authorization
   * verdicts that depend on topicFiltersFeeding are taken again when it moves.
   */
  get sourcesVersion(): number {
    return this.streamsVersion + this.router.version;
  }
  private streamsVersion = 0;

  /**
   * The unified topic filters whose messages a stream or queue can hold: a stream's own topic and bindings and, for
   * both, the exchange bindings that route into it (RouterCore.topicFiltersFeeding). Reading it is judged by these.
   */
  topicFiltersFeeding(kind: 'stream' | 'queue', name: string): string[] {
    const viaExchanges = this.router.topicFiltersFeeding(kind, name);
    if (kind === 'queue') return viaExchanges;
    const e = this.streams.get(name);
    if (e === undefined) return viaExchanges;
    // Its own topic too: a Kafka produce into the stream is published on it (to live subscribers and other streams).
    return [...new Set([e.ownTopic, ...e.def.bindings, ...viaExchanges])];
  }

  private index(def: StreamDef): void {
    this.streamsVersion++;
    const entry: StreamEntry = { def, ownTopic: kafkaToUnified(def.name) };
    this.streams.set(def.name, entry);
    if (def.id !== undefined) this.streamsById.set(def.id, entry);
    for (const b of def.bindings) this.bindings.add(b, entry);
  }

  private unindex(e: StreamEntry): void {
    this.streamsVersion++;
    this.streams.delete(e.def.name);
    if (e.def.id !== undefined && this.streamsById.get(e.def.id) === e) this.streamsById.delete(e.def.id);
    for (const b of e.def.bindings) this.bindings.remove(b, e);
  }

  // ---------------------------------------------------------------- live subscriptions

  subscribe(filter: string, subscriber: Subscriber, options: SubscribeOptions): Subscription {
    const nats = options.rule === 'nats';
    // A NATS subject is parsed into unified levels once here (and again at unsubscribe): `>` is the trie's REST.
    const pattern = nats ? parseBindingKey(filter, 'nats', true) : (validateFilter(filter), filter);
    const sub: Subscription = { filter, subscriber, options };
    if (this.live !== null && options.local !== true) this.live.subscribed(liveKey(options.rule, options.group, filter), filter, nats ? 'nats' : 'mqtt', options.group);
    if (options.group === undefined) {
      this.subs.add(pattern, sub);
      return sub;
    }
    const key = groupKey(sub);
    let g = this.groups.get(key);
    if (!g) {
      g = { key, members: [], next: 0, nats };
      this.groups.set(key, g);
      this.subs.add(pattern, g);
    }
    g.members.push(sub);
    return sub;
  }

  unsubscribe(sub: Subscription): void {
    const pattern = sub.options.rule === 'nats' ? parseBindingKey(sub.filter, 'nats', true) : sub.filter;
    if (sub.options.group === undefined) {
      if (this.subs.remove(pattern, sub) && this.live !== null && sub.options.local !== true) this.live.unsubscribed(liveKey(sub.options.rule, undefined, sub.filter), sub.filter, sub.options.rule === 'nats' ? 'nats' : 'mqtt', undefined);
      return;
    }
    const key = groupKey(sub);
    const g = this.groups.get(key);
    if (!g) return;
    const i = g.members.indexOf(sub);
    if (i < 0) return;
    g.members.splice(i, 1);
    if (this.live !== null && sub.options.local !== true) this.live.unsubscribed(key, sub.filter, sub.options.rule === 'nats' ? 'nats' : 'mqtt', sub.options.group);
    if (g.members.length === 0) {
      this.groups.delete(key);
      this.subs.remove(pattern, g);
    }
  }

  /**
   * Delivers a message to matching live subscriptions; each subscriber is called once. Returns how many, plus the
   * brokers it was forwarded to (cluster mode). `forwarded`: the message was published on another broker, which
   * forwarded it here with the shared groups this broker serves for it (their liveKey); it goes no further.
   */
  private deliverLive(msg: Message, forwarded?: ReadonlySet<string>): number {
    // Cluster mode, a message published here: the brokers that want it get it (batched by the hook); shared groups
    // spanning brokers are served by the one broker the hook picked. Nothing at all while no other broker has interest.
    let skip: ReadonlySet<string> | null = null;
    let remote = 0;
    const hook = this.live;
    if (forwarded === undefined && hook !== null && hook.remote > 0) {
      remote = hook.forward(msg);
      skip = hook.skip;
    }
    let single: Subscription | undefined;
    let many: Map<Subscriber, Subscription[]> | undefined;
    const add = (s: Subscription) => {
      if (single === undefined && many === undefined) {
        single = s;
        return;
      }
      if (many === undefined) {
        many = new Map([[single!.subscriber, [single!]]]);
        single = undefined;
      }
      const list = many.get(s.subscriber);
      if (list) list.push(s);
      else many.set(s.subscriber, [s]);
    };
    // [MQTT-4.7.2-1]: live subscriptions are MQTT filters; their first-level wildcards do not match `$` topics.
    const dollar = msg.topic.charCodeAt(0) === 0x24;
    this.subs.match(msg.topic, (v, firstWild) => {
      if (firstWild && dollar && !('members' in v ? v.nats : v.options.rule === 'nats')) return;
      if ('members' in v) {
        if (forwarded !== undefined ? !forwarded.has(v.key) : skip !== null && skip.has(v.key)) return;
        const s = pickMember(v, undefined);
        if (s !== undefined && admitted(s.options, msg)) add(s);
      } else if (admitted(v.options, msg) && (forwarded === undefined || v.options.local !== true)) add(v);
    });
    if (single !== undefined) {
      this.stats.delivered++;
      single.subscriber.deliver(msg, [single]);
      return 1 + remote;
    } else if (many !== undefined) {
      for (const [subscriber, list] of many) {
        this.stats.delivered++;
        subscriber.deliver(msg, list);
      }
      return (many as Map<Subscriber, Subscription[]>).size + remote;
    }
    return remote;
  }

  /**
   * Cluster mode: a message published on another broker and forwarded here (src/cluster/live.ts) goes to the live
   * subscribers only: no capture by streams or queues, no retain, no forwarding (the publishing broker did all that).
   * `groups`: the shared groups (liveKey) this broker serves for this message; other groups' members skip it.
   */
  deliverForwarded(msg: Message, groups: ReadonlySet<string>): number {
    return this.deliverLive(msg, groups);
  }

  /**
   * Hands a message that one member of a shared group received but will not process (its connection went
   * away) to another available member of the same group. Returns false when there is none.
   */
  redeliverShared(sub: Subscription, msg: Message): boolean {
    if (sub.options.group === undefined) return false;
    const g = this.groups.get(groupKey(sub));
    if (!g) return false;
    const other = pickMember(g, sub.subscriber);
    if (other === undefined || other.subscriber.isAvailable?.() === false) return false;
    if (!admitted(other.options, msg)) return false;
    this.stats.delivered++;
    other.subscriber.deliver(msg, [other]);
    return true;
  }

  hasLiveSubscribers(topic: string): boolean {
    if (this.subs.hasMatch(topic, (v, firstWild) => ('members' in v ? v.nats : v.options.rule === 'nats') || mqttAccepts(topic, firstWild))) return true;
    return this.live !== null && this.live.remote > 0 && this.live.wants(topic);
  }

  // ---------------------------------------------------------------- publish paths

  /**
   * Publishes one message: live delivery to matching subscriptions and capture by every bound stream.
   * Returns a promise that resolves when every capturing stream has it durably, or null when no stream
   * captured it (nothing to wait for).
   */
  publish(msg: Message, info?: PublishInfo): Promise<void> | null {
    validateTopic(msg.topic);
    this.stats.published++;
    // No stream bound anywhere: skip the bindings trie (its split and closure were ~half of a publish's ~550 ns with
    // one subscriber, measured for NATS's 16-byte benchmark).
    let durable = this.bindings.size === 0 ? null : this.capture(msg, undefined, info);
    if (msg.retain) {
      const kept = this.retain(msg);
      if (kept !== null) durable = durable === null ? kept : Promise.all([durable, kept]).then(() => undefined);
    }
    const delivered = this.deliverLive(msg);
    if (info !== undefined) info.delivered += delivered;
    // Queues and exchanges bound on the unified topic space (amq.topic); skipped while there are none.
    if (this.router.topicBindings > 0) {
      const r = this.router.routeTopicSpace(msg);
      if (info !== undefined) info.queued += r.routed;
      const q = r.durable;
      if (q !== null) durable = durable === null ? q : Promise.all([durable, q]).then(() => undefined);
    }
    return durable;
  }

  /** An AMQP publish on amq.topic (or one routed there): live subscribers and bound streams, no retain. */
  private publishUnified(msg: Message): { count: number; durable: Promise<void> | null } {
    this.stats.published++;
    const before = this.stats.captured;
    const durable = this.capture(msg, undefined);
    const count = this.stats.captured - before + this.deliverLive(msg);
    return { count, durable };
  }

  /** A message routed to a stream by an exchange binding. */
  private appendToStream(name: string, msg: Message): Promise<void> | null {
    const e = this.streams.get(name);
    if (!e) return null;
    const { durable } = this.storage.append(name, partitionFor(msg, e.def.partitions), encodeBatch([messageToRecord(msg, e.ownTopic)]));
    this.stats.captured++;
    return durable;
  }

  /**
   * Sets, replaces or (empty payload) clears the retained message of the topic [MQTT-3.3.1-5]
   * [MQTT-3.3.1-10]; returns the store write to wait for, if any.
   */
  private retain(msg: Message): Promise<void> | null {
    const volatile = msg.topic.startsWith(VOLATILE_RETAINED_PREFIX);
    if (msg.payload.length === 0) {
      const had = this.retained.delete(msg.topic);
      // Cluster mode: the other brokers drop it too (deleted here only: another broker's copy may be the one to clear).
      if (volatile) return null;
      if (!had && this.live === null) return null;
      const del = this.store.deleteRetained(msg.topic);
      return this.live === null ? del : this.announceRetained(del, msg.topic, null);
    }
    // The index keeps its own copy: the payload may be a view into a socket buffer.
    const kept: Message = { ...msg, payload: Buffer.from(msg.payload), headers: msg.headers.slice() };
    this.retained.set(kept);
    if (volatile) return null;
    const put = this.store.putRetained(msg.topic, encodeStoredMessage(kept));
    return this.live === null ? put : this.announceRetained(put, msg.topic, kept);
  }

  /** Cluster mode: once the store has the change, every other broker's index follows (the `retained` notify). */
  private announceRetained(write: Promise<void>, topic: string, msg: Message | null): Promise<void> {
    return write.then(() => this.live?.retainedChanged(topic, msg));
  }

  /**
   * Clears the retained message of a topic (the admin API); false when there is none. In cluster mode the other
   * brokers drop it too.
   */
  async clearRetained(topic: string): Promise<boolean> {
    if (!this.retained.delete(topic)) return false;
    const del = this.store.deleteRetained(topic);
    await (this.live === null ? del : this.announceRetained(del, topic, null));
    return true;
  }

  /**
   * Cluster mode: applies a retained message another broker wrote to the store (or, null, deleted), in memory only.
   */
  applyRetained(topic: string, msg: Message | null): void {
    if (msg === null) this.retained.delete(topic);
    else this.retained.set(msg);
  }

  /**
   * Appends a Kafka record batch to one partition of a stream, then routes its records to live subscribers
   * and to other streams whose bindings match the stream's topic. The batch is borrowed for the duration of the
   * call, as by StreamStorage.append.
   */
  produce(stream: string, partition: number, batch: Buffer): AppendResult {
    const e = this.streams.get(stream);
    if (!e) throw new FlowError('NOT_FOUND', `stream "${stream}" does not exist`);
    if (partition < 0 || partition >= e.def.partitions) {
      throw new FlowError('NOT_FOUND', `stream "${stream}" has no partition ${partition}`);
    }
    const res = this.storage.append(stream, partition, batch);
    // A retried idempotent batch was routed when it was first appended.
    if (res.duplicate) return res;
    this.stats.captured++;
    const toQueues = this.router.topicBindings > 0;
    if (this.subs.size > 0 || this.bindings.size > e.def.bindings.length || toQueues || (this.live !== null && this.live.remote > 0)) {
      const extra: Promise<void>[] = [];
      // The batch is only borrowed (see StreamStorage.append), and decoded records point into it: the messages
      // delivered live get memory of their own.
      for (const rec of decodeBatch(Buffer.from(batch))) {
        const msg = recordToMessage(rec, e.ownTopic);
        // A produced record may carry a topic header (e.g. copied from a stream that captured MQTT traffic), but
        // it may only claim a topic this stream could have captured: a Kafka producer must not be able to
        // publish to arbitrary MQTT topics through a header.
        if (msg.topic !== e.ownTopic && !canCapture(e, msg.topic)) msg.topic = e.ownTopic;
        this.stats.published++;
        const d = this.capture(msg, e);
        if (d) extra.push(d);
        this.deliverLive(msg);
        if (toQueues) {
          const q = this.router.routeTopicSpace(msg).durable;
          if (q) extra.push(q);
        }
      }
      if (extra.length > 0) {
        const durable = Promise.all([res.durable, ...extra]).then(() => undefined);
        return res.offset !== undefined ? { baseOffset: res.baseOffset, offset: res.offset, durable } : { baseOffset: res.baseOffset, durable };
      }
    }
    return res;
  }

  private capture(msg: Message, except: StreamEntry | undefined, info?: PublishInfo): Promise<void> | null {
    let first: Promise<void> | null = null;
    let all: Promise<void>[] | null = null;
    let seen: Set<StreamEntry> | null = null;
    // Stream bindings are MQTT filters: the `$` rule applies ([MQTT-4.7.2-1]).
    const dollar = msg.topic.charCodeAt(0) === 0x24;
    // Stored data re-published to an inbox is captured only by a stream whose bindings reach its own topic too: a
    // stream bound to `_INBOX/#` must not become a copy of a denied topic's data (see Message.guardTopic).
    const guard = msg.guardTopic === undefined ? null : this.bindingsOf(msg.guardTopic);
    this.bindings.match(msg.topic, (e, firstWild) => {
      if (e === except || (firstWild && dollar) || (guard !== null && !guard.has(e))) return;
      // A stream with several matching bindings captures the message once.
      if (seen === null) seen = new Set();
      if (seen.has(e)) return;
      seen.add(e);
      const p = partitionFor(msg, e.def.partitions);
      const batch = encodeBatch([messageToRecord(msg, e.ownTopic)]);
      const { baseOffset, durable, offset } = this.storage.append(e.def.name, p, batch);
      this.stats.captured++;
      if (info !== undefined) info.captured.push(offset === undefined ? { stream: e.def.name, partition: p, offset: baseOffset } : { stream: e.def.name, partition: p, offset: baseOffset, later: offset });
      if (first === null) first = durable;
      else (all ??= [first]).push(durable);
    });
    if (all !== null) return Promise.all(all as Promise<void>[]).then(() => undefined);
    return first;
  }

  /** The streams whose bindings match `topic` (with the `$` rule). */
  private bindingsOf(topic: string): Set<StreamEntry> {
    const out = new Set<StreamEntry>();
    const dollar = topic.charCodeAt(0) === 0x24;
    this.bindings.match(topic, (e, firstWild) => {
      if (!(firstWild && dollar)) out.add(e);
    });
    return out;
  }

  // ---------------------------------------------------------------- exchanges, queues, bindings (Router)

  declareExchange(def: Omit<ExchangeDef, 'createdAt'>, opts?: { passive?: boolean }): Promise<ExchangeDef> {
    return this.router.declareExchange(def, opts);
  }
  deleteExchange(name: string, opts?: { ifUnused?: boolean }): Promise<void> {
    return this.router.deleteExchange(name, opts);
  }
  getExchange(name: string): ExchangeDef | undefined {
    return this.router.getExchange(name);
  }
  listExchanges(): ExchangeDef[] {
    return this.router.listExchanges();
  }
  declareQueue(def: Omit<QueueDef, 'createdAt'>, opts?: { passive?: boolean; owner?: string }): Promise<QueueHandle> {
    return this.router.declareQueue(def, opts);
  }
  deleteQueue(name: string, opts?: { ifUnused?: boolean; ifEmpty?: boolean }): Promise<number> {
    return this.router.deleteQueue(name, opts);
  }
  purgeQueue(name: string): Promise<number> {
    return this.router.purgeQueue(name);
  }
  getQueue(name: string): QueueHandle | undefined {
    return this.router.getQueue(name);
  }
  listQueues(): QueueDef[] {
    return this.router.listQueues();
  }
  dropExclusive(owner: string): Promise<void> {
    return this.router.dropExclusive(owner);
  }
  bind(b: BindingDef): Promise<void> {
    return this.router.bind(b);
  }
  unbind(b: BindingDef): Promise<void> {
    return this.router.unbind(b);
  }
  listBindings(): BindingDef[] {
    return this.router.listBindings();
  }
  publishTo(exchange: string, routingKey: string, msg: Message): RouteResult {
    return this.router.publishTo(exchange, routingKey, msg);
  }

  // ---------------------------------------------------------------- reads

  private partitionOf(stream: string, partition: number): StreamEntry {
    const e = this.streams.get(stream);
    if (!e) throw new FlowError('NOT_FOUND', `stream "${stream}" does not exist`);
    if (partition < 0 || partition >= e.def.partitions) {
      throw new FlowError('NOT_FOUND', `stream "${stream}" has no partition ${partition}`);
    }
    return e;
  }

  offsets(stream: string, partition: number): PartitionOffsets {
    this.partitionOf(stream, partition);
    return this.storage.offsets(stream, partition);
  }

  read(stream: string, partition: number, offset: number, maxBytes: number, lease?: ReadLease): Promise<Buffer[]> {
    this.partitionOf(stream, partition);
    return this.storage.read(stream, partition, offset, maxBytes, lease);
  }

  offsetForTimestamp(stream: string, partition: number, ts: number): Promise<number> {
    this.partitionOf(stream, partition);
    return this.storage.offsetForTimestamp(stream, partition, ts);
  }

  waitFor(stream: string, partition: number, offset: number, timeoutMs: number): Promise<void> {
    this.partitionOf(stream, partition);
    return this.storage.waitFor(stream, partition, offset, timeoutMs);
  }

  /** The defaults in force for streams without settings of their own (see setStreamDefaults). */
  streamDefaults: StreamDefaults = NO_STREAM_DEFAULTS;

  /**
   * Broker-wide defaults for streams that set no retention or segment size/age of their own (Kafka's dynamic
   * log.retention.ms & co.): handed to the storage, which applies them from its next pass.
   */
  setStreamDefaults(d: StreamDefaults): void {
    this.streamDefaults = d;
    this.storage.setDefaults?.(d);
  }

  /** Bytes a partition holds (hot tier and segment objects); null when not held here or unknown. */
  partitionSize(stream: string, partition: number): number | null {
    this.partitionOf(stream, partition);
    return this.storage.partitionSize?.(stream, partition) ?? null;
  }

  /** Idempotent producers with state in a partition; null when not held here or unknown. */
  producers(stream: string, partition: number): ProducerSnapshot[] | null {
    this.partitionOf(stream, partition);
    return this.storage.producers?.(stream, partition) ?? null;
  }
}


/** True when `topic` is a valid topic that one of the stream's bindings matches. */
/**
 * Whether a live subscription takes a message: its admit predicate (set when authorization filters its deliveries)
 * accepts the message's topic and, for stored data re-published to an inbox, the topic the data was stored under.
 */
function admitted(o: SubscribeOptions, msg: Message): boolean {
  const admit = o.admit;
  if (admit === undefined) return true;
  return admit(msg.topic) && (msg.guardTopic === undefined || admit(msg.guardTopic));
}

function canCapture(e: StreamEntry, topic: string): boolean {
  try {
    validateTopic(topic);
  } catch {
    return false;
  }
  return e.def.bindings.some((b) => matches(b, topic));
}

/**
 * Next member of a shared group in round-robin order, preferring members that are available; skips `except`.
 */
/** A shared group's identity: its name, rule and filter (a NATS queue group and an MQTT $share group differ). */
function groupKey(sub: Subscription): string {
  return liveKey(sub.options.rule, sub.options.group, sub.filter);
}

function pickMember(g: SharedGroup, except: Subscriber | undefined): Subscription | undefined {
  const n = g.members.length;
  let fallback: Subscription | undefined;
  for (let k = 0; k < n; k++) {
    const s = g.members[(g.next + k) % n];
    if (s.subscriber === except) continue;
    if (s.subscriber.isAvailable?.() === false) {
      fallback ??= s;
      continue;
    }
    g.next = (g.next + k + 1) % n;
    return s;
  }
  if (fallback !== undefined) g.next = (g.next + 1) % n;
  return fallback;
}

/**
 * Partition of a message captured by a stream: by key when there is one (murmur2, as Kafka's default
 * partitioner, so keys land where Kafka clients would put them), else by topic, so one device's messages
 * stay in order.
 */
export function partitionFor(msg: Message, partitions: number): number {
  if (partitions === 1) return 0;
  const h = murmur2(msg.key ?? Buffer.from(msg.topic));
  return (h & 0x7fffffff) % partitions;
}

/** Kafka's murmur2 (seed 0x9747b28c). */
export function murmur2(data: Uint8Array): number {
  const m = 0x5bd1e995;
  const len = data.length;
  let h = 0x9747b28c ^ len;
  let i = 0;
  for (; i + 4 <= len; i += 4) {
    let k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  const rest = len - i;
  if (rest >= 3) h ^= data[i + 2] << 16;
  if (rest >= 2) h ^= data[i + 1] << 8;
  if (rest >= 1) {
    h ^= data[i];
    h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}
