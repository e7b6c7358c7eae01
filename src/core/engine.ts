/**
 * The routing engine: one protocol-agnostic core that every adapter calls.
 *
 * - Live subscriptions (optionally shared in a group) receive matching publishes.
 * - Streams bound to topic filters capture matching publishes durably; a Kafka produce appends to a stream
 *   directly and is delivered to matching live subscriptions and to other bound streams as well.
 *
 * The engine keeps the streams, the publish paths (capture, retain, produce) and the reads; live subscriptions and
 * delivery are in subscriptions.ts, stream specs and partitioning in stream-defs.ts, exchanges and queues in
 * router.ts.
 */
import { FlowError } from './errors.js';
import type { Message } from './message.js';
import { ATTR_TRANSACTIONAL, OFF_ATTRIBUTES, decodeBatch, encodeBatch, messageToRecord, recordToMessage, setProducer } from './record-batch.js';
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
import type { QueueArguments, QueueDef, QueueFactory, QueueHandle, QueueStore } from './queues.js';
import type { BindingDef, ExchangeDef, RouteResult, Router } from './exchanges.js';
import { RouterCore } from './router.js';
import { TxnPartitions } from './transactions.js';
import { createQueue as defaultCreateQueue } from './queue.js';
import {
  DEFAULT_NAMESPACE,
  isQualifiedStream,
  isReservedTopic,
  isValidInternalStreamName,
  namespaceNames,
  NS_PREFIX,
  splitTopic,
  streamOwnTopic,
  validateStreamBinding,
} from './namespaces.js';
import { isValidStreamName, validateTopic } from './topic.js';
import { TopicTrie } from './trie.js';
import { NamespaceLinks } from './links.js';
import {
  deliverLive,
  hasLiveSubscribers,
  liveKey,
  redeliverShared,
  subscribe,
  unsubscribe,
  type LiveHook,
  type DurableSubscribers,
  type ForwardedDurable,
  type PublishInfo,
  type SharedGroup,
  type Subscriber,
  type SubscribeOptions,
  type Subscription,
} from './subscriptions.js';
import { canCapture, MAX_PARTITIONS, partitionFor, streamSettings, type StreamEntry, type StreamSpec } from './stream-defs.js';

/**
 * A topic prefix reserved for one handler (AMQP direct reply-to: `amq/rabbitmq/reply-to/<token>`). A message published
 * into the topic space (MQTT, NATS, a topic-space publish) on a topic under it goes to `deliver` only: no live
 * subscription (wildcards included), no stream, no queue or exchange binding and no retained slot sees it, so an
 * address under it cannot be tapped by subscribing. Cluster mode: the handler's addresses are watched on the broker that
 * holds them (Engine.watchDirect), and a message no one here takes goes to that broker only (Engine.forwardDirect).
 */
export interface DirectTopics {
  readonly prefix: string;
  /**
   * Takes a message published on a topic under the prefix; true when it reached someone. `forwarded`: it comes from
   * another broker (Engine.deliverForwarded), which is not to be forwarded again.
   */
  deliver(msg: Message, forwarded?: boolean): boolean;
}

/** A direct address as the cluster's interest tables hold it: the namespace's core topic (`$ns/<ns>/...`). */
function directWireTopic(topic: string, namespace: string | undefined): string {
  return namespace === undefined ? topic : namespaceNames(namespace).topic(topic);
}

/** Where a topic of `namespace` starts inside its core topic `$ns/<namespace>/...` (0 for any other topic, -1 for one of another namespace). */
function namespacedAt(topic: string, namespace: string): number {
  if (!topic.startsWith(NS_PREFIX)) return 0;
  const at = NS_PREFIX.length + namespace.length;
  return topic.startsWith(namespace, NS_PREFIX.length) && topic.charCodeAt(at) === 0x2f ? at + 1 : -1;
}

/** Retained messages of these topics (broker statistics) are kept in memory only: they are rewritten often. */
const VOLATILE_RETAINED_PREFIX = '$SYS/';

export class Engine implements Router {
  /** Live subscriptions and shared groups (subscriptions.ts). */
  readonly subs = new TopicTrie<Subscription | SharedGroup>();
  readonly groups = new Map<string, SharedGroup>();
  private readonly bindings = new TopicTrie<StreamEntry>();
  private readonly streams = new Map<string, StreamEntry>();
  /** Messages delivered to live subscribers / captured by streams, for metrics. */
  readonly stats = { published: 0, delivered: 0, captured: 0, dropped: 0 };
  /** Kafka transactions' state of each partition (last stable offset, aborted transactions), for every reader. */
  readonly transactions = new TxnPartitions();
  /** Last retained message per topic, any protocol's publish with retain=true sets it. */
  readonly retained = new RetainedIndex();
  /**
   * Cluster mode: live interest and forwarding across brokers (src/cluster/live.ts). Set before the first
   * subscription (the broker does it right after creating the engine); null on a single broker.
   */
  live: LiveHook | null = null;
  /**
   * Cluster mode: this broker's storing subscribers (MQTT persistent sessions, set by the MQTT adapter), which the live
   * side asks when another broker's publish waits for them. null: none.
   */
  durable: DurableSubscribers | null = null;
  /**
   * A reserved topic prefix and the one handler its messages go to (DirectTopics); null: no prefix is reserved. Set
   * by the adapter that owns it (AMQP's direct reply-to).
   */
  direct: DirectTopics | null = null;
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
    storage.useTransactions?.(this.transactions);
    this.router = new RouterCore(
      {
        publishUnified: (msg) => this.publishUnified(msg),
        hasStream: (name) => this.streams.has(name),
        appendToStream: (name, msg, partition) => this.appendToStream(name, msg, partition),
        writeRefusal: () => this.writeRefusal(),
      },
      store,
      queueStore ?? null,
      createQueue,
    );
  }

  /** Exchanges, bindings and queues (the Router methods below delegate to it; cluster mode attaches to it). */
  readonly router: RouterCore;

  /** Exports and imports between namespaces (links.ts): subscriptions of the core's own, none until configured. */
  readonly links: NamespaceLinks = new NamespaceLinks(this);

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
    if (spec.namespaced === true ? !isValidInternalStreamName(spec.name) : !isValidStreamName(spec.name)) {
      throw new FlowError('INVALID_ARGUMENT', `invalid stream name "${spec.name}": use 1-249 of [a-zA-Z0-9._-] (dots are topic levels)`);
    }
    if (!Number.isInteger(spec.partitions) || spec.partitions < 1 || spec.partitions > MAX_PARTITIONS) {
      throw new FlowError('INVALID_ARGUMENT', `partitions must be an integer in 1..${MAX_PARTITIONS}`);
    }
    if (this.streams.has(spec.name)) throw new FlowError('ALREADY_EXISTS', `stream "${spec.name}" already exists`);
    const bindings = spec.bindings && spec.bindings.length > 0 ? [...new Set(spec.bindings)] : [streamOwnTopic(spec.name)];
    for (const b of bindings) validateStreamBinding(spec.name, b);
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
    await this.transactions.streamDeleted(name, e.def.partitions);
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
    const list = bindings.length > 0 ? [...new Set(bindings)] : [streamOwnTopic(name)];
    for (const b of list) validateStreamBinding(name, b);
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

  /**
   * A stream of the `default` namespace's names. Namespaces (namespaces.ts): a stream of another namespace
   * (`<ns>~<name>`) is not found here, so an adapter that does not isolate namespaces yet (AMQP stream queues,
   * JetStream) cannot reach a tenant's stream by spelling its internal name. Isolating adapters (Kafka), the admin
   * API and the broker use getAnyStream.
   */
  getStream(name: string): StreamEntry | undefined {
    return isQualifiedStream(name) ? undefined : this.streams.get(name);
  }

  /** A stream of any namespace, by its internal name. */
  getAnyStream(name: string): StreamEntry | undefined {
    return this.streams.get(name);
  }

  /** The `default` stream whose identity (StreamDef.id) this is; undefined for one deleted (or never made). */
  getStreamById(id: string): StreamEntry | undefined {
    const e = this.streamsById.get(id);
    return e === undefined || isQualifiedStream(e.def.name) ? undefined : e;
  }

  /** The stream of any namespace whose identity this is. */
  getAnyStreamById(id: string): StreamEntry | undefined {
    return this.streamsById.get(id);
  }
  private readonly streamsById = new Map<string, StreamEntry>();

  /** The `default` namespace's streams (see getStream). */
  listStreams(): StreamDef[] {
    return this.listAllStreams().filter((d) => !isQualifiedStream(d.name));
  }

  /** Every namespace's streams, by internal name. */
  listAllStreams(): StreamDef[] {
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
    const entry: StreamEntry = { def, ownTopic: streamOwnTopic(def.name) };
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
    return subscribe(this, filter, subscriber, options);
  }

  unsubscribe(sub: Subscription): void {
    unsubscribe(this, sub);
  }

  /**
   * Cluster mode: a message published on another broker and forwarded here (src/cluster/live.ts) goes to the live
   * subscribers only: no capture by streams or queues, no retain, no forwarding (the publishing broker did all that).
   * `groups`: the shared groups (liveKey) this broker serves for this message; other groups' members skip it.
   */
  deliverForwarded(msg: Message, groups: ReadonlySet<string>, durable?: ForwardedDurable): number {
    const d = this.direct;
    if (d !== null) {
      // A direct message (forwardDirect) for a requester here, its namespace carried in its topic (`$ns/<ns>/...`
      // outside `default`); other topics pay a prefix test and a first-character test.
      if (msg.topic.startsWith(d.prefix)) return d.deliver(msg, true) ? 1 : 0;
      if (msg.topic.charCodeAt(0) === 0x24) {
        const { namespace, topic } = splitTopic(msg.topic);
        if (namespace !== DEFAULT_NAMESPACE && topic.startsWith(d.prefix)) {
          msg.topic = topic;
          msg.namespace = namespace;
          return d.deliver(msg, true) ? 1 : 0;
        }
      }
    }
    return deliverLive(this, msg, groups, durable);
  }

  /**
   * Cluster mode: a direct address (DirectTopics) of a requester on this broker appeared (`on`) or went away; other
   * brokers forward what is published on it here (forwardDirect). A no-op on a single broker.
   */
  watchDirect(topic: string, namespace: string | undefined, on: boolean): void {
    const live = this.live;
    if (live === null) return;
    const t = directWireTopic(topic, namespace);
    const key = liveKey('mqtt', undefined, t);
    if (on) live.subscribed(key, t, 'mqtt', undefined);
    else live.unsubscribed(key, t, 'mqtt', undefined);
  }

  /** Cluster mode: whether another broker watches the direct address `topic` (false on a single broker). */
  directWatched(topic: string, namespace: string | undefined): boolean {
    return this.live !== null && this.live.remote > 0 && this.live.wants(directWireTopic(topic, namespace));
  }

  /**
   * Cluster mode: a direct message that reached no one here goes to the broker watching its address (one-way, best
   * effort, like live delivery). True when some broker watches it.
   */
  forwardDirect(msg: Message): boolean {
    const live = this.live;
    if (live === null || live.remote === 0) return false;
    const t = directWireTopic(msg.topic, msg.namespace);
    return live.forward(t === msg.topic ? msg : { ...msg, topic: t }, false) > 0;
  }

  /**
   * Hands a message that one member of a shared group received but will not process (its connection went
   * away) to another available member of the same group. Returns false when there is none.
   */
  redeliverShared(sub: Subscription, msg: Message): boolean {
    return redeliverShared(this, sub, msg);
  }

  hasLiveSubscribers(topic: string): boolean {
    return hasLiveSubscribers(this, topic);
  }

  // ---------------------------------------------------------------- publish paths

  /**
   * Publishes one message: live delivery to matching subscriptions and capture by every bound stream.
   * Returns a promise that resolves when every capturing stream has it durably, or null when no stream
   * captured it (nothing to wait for).
   */
  publish(msg: Message, info?: PublishInfo, acked = false): Promise<void> | null {
    validateTopic(msg.topic);
    // A namespace's topics (namespaces.ts) take only its own adapters' publishes: not a NATS or AMQP client of
    // another namespace spelling `$ns.<ns>.x`. Topics not starting with `$` pay one comparison.
    if (
      msg.topic.charCodeAt(0) === 0x24 &&
      isReservedTopic(msg.topic) &&
      !(msg.namespace !== undefined && msg.topic.startsWith(`${NS_PREFIX}${msg.namespace}/`))
    ) {
      throw new FlowError('INVALID_TOPIC', `topic "${msg.topic}" is in the reserved $ns space`);
    }
    this.stats.published++;
    // A reserved prefix (AMQP direct reply-to): its one handler, and nothing else sees the message. A tenant's
    // responder publishes it as `$ns/<ns>/<prefix>...`: the handler gets the topic inside the namespace, and the
    // namespace (a requester of another one is not reached).
    const d = this.direct;
    if (d !== null) {
      const at = msg.namespace === undefined ? 0 : namespacedAt(msg.topic, msg.namespace);
      if (at >= 0 && msg.topic.startsWith(d.prefix, at)) {
        const reached = d.deliver(at === 0 ? msg : { ...msg, topic: msg.topic.slice(at) });
        if (info !== undefined && reached) info.delivered++;
        return null;
      }
    }
    // No stream bound anywhere: skip the bindings trie (its split and closure were ~half of a publish's ~550 ns with
    // one subscriber, measured for NATS's 16-byte benchmark).
    let durable = this.bindings.size === 0 ? null : this.capture(msg, undefined, info);
    if (msg.retain) {
      const kept = this.retain(msg);
      if (kept !== null) durable = durable === null ? kept : Promise.all([durable, kept]).then(() => undefined);
    }
    const delivered = deliverLive(this, msg, undefined, undefined, acked);
    if (info !== undefined) info.delivered += delivered;
    if (acked && this.live !== null) {
      // Cluster mode: the persistent sessions of other brokers it reached have stored it (or hold it for their next owner).
      const stored = this.live.takeAcked();
      if (stored !== null) durable = durable === null ? stored : Promise.all([durable, stored]).then(() => undefined);
    }
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
    const count = this.stats.captured - before + deliverLive(this, msg);
    return { count, durable };
  }

  /** A message routed to a stream by an exchange binding (to the partition it pins, when the stream has it). */
  private appendToStream(name: string, msg: Message, partition = -1): Promise<void> | null {
    const e = this.streams.get(name);
    if (!e) return null;
    const p = partition >= 0 && partition < e.def.partitions ? partition : partitionFor(msg, e.def.partitions);
    const { durable } = this.storage.append(name, p, encodeBatch([messageToRecord(msg, e.ownTopic)]));
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
    delete kept.pubKey; // a retained copy is a message of its own, not the MQTT QoS 2 publish (Message.pubKey)
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
   * Appends a batch to one partition without routing it anywhere: a transaction marker (a control batch, KIP-98),
   * which is log data for Kafka readers and never a message.
   */
  appendControl(stream: string, partition: number, batch: Buffer): AppendResult {
    this.partitionEntry(stream, partition);
    return this.storage.append(stream, partition, batch);
  }

  /** The stream of an append; NOT_FOUND when it or the partition does not exist. */
  private partitionEntry(stream: string, partition: number): StreamEntry {
    const e = this.streams.get(stream);
    if (!e) throw new FlowError('NOT_FOUND', `stream "${stream}" does not exist`);
    if (partition < 0 || partition >= e.def.partitions) {
      throw new FlowError('NOT_FOUND', `stream "${stream}" has no partition ${partition}`);
    }
    return e;
  }

  /**
   * Appends a Kafka record batch to one partition of a stream, then routes its records to live subscribers
   * and to other streams whose bindings match the stream's topic. The batch is borrowed for the duration of the
   * call, as by StreamStorage.append.
   *
   * A transactional batch (KIP-98) is only appended: its records are routed when its transaction commits
   * (routeCommitted), and never when it aborts, so that no other protocol sees uncommitted data live.
   */
  produce(stream: string, partition: number, batch: Buffer): AppendResult {
    const e = this.partitionEntry(stream, partition);
    const res = this.storage.append(stream, partition, batch);
    // A retried idempotent batch was routed when it was first appended.
    if (res.duplicate) return res;
    this.stats.captured++;
    if ((batch.readInt16BE(OFF_ATTRIBUTES) & ATTR_TRANSACTIONAL) !== 0) return res;
    const extra = this.routeBatch(e, batch);
    if (extra.length > 0) {
      const durable = Promise.all([res.durable, ...extra]).then(() => undefined);
      return res.offset !== undefined ? { baseOffset: res.baseOffset, offset: res.offset, durable } : { baseOffset: res.baseOffset, durable };
    }
    return res;
  }

  /**
   * Routes the records of a stored batch whose transaction committed (see produce): to live subscribers, queues and
   * other streams, as produce routes any other batch. Resolves once the copies into queues and streams are durable.
   */
  routeCommitted(stream: string, batch: Buffer): Promise<void> | null {
    const e = this.streams.get(stream);
    if (!e) return null;
    const extra = this.routeBatch(e, batch);
    return extra.length === 0 ? null : Promise.all(extra).then(() => undefined);
  }

  /** Routes a batch's records; answers the durability of the copies made into queues and streams. */
  private routeBatch(e: StreamEntry, batch: Buffer): Promise<void>[] {
    const extra: Promise<void>[] = [];
    const toQueues = this.router.topicBindings > 0;
    if (this.subs.size > 0 || this.bindings.size > e.def.bindings.length || toQueues || (this.live !== null && this.live.remote > 0)) {
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
        deliverLive(this, msg);
        if (toQueues) {
          const q = this.router.routeTopicSpace(msg).durable;
          if (q) extra.push(q);
        }
      }
    }
    return extra;
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
      const key = msg.pubKey; // an MQTT QoS 2 publish key: the partition's producer state knows a retry (Message.pubKey)
      if (key !== undefined) setProducer(batch, key.producer, 0, key.seq);
      const { baseOffset, durable, offset } = this.storage.append(e.def.name, p, batch, key !== undefined);
      this.stats.captured++;
      if (info !== undefined)
        info.captured.push(
          offset === undefined
            ? { stream: e.def.name, partition: p, offset: baseOffset }
            : { stream: e.def.name, partition: p, offset: baseOffset, later: offset },
        );
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
  /**
   * Sets what decides the arguments queues act on beyond their declared ones (the RabbitMQ management API's
   * policies; null: none) and applies it to every queue now; queues opened later get it as they open.
   */
  setQueuePolicy(policy: ((def: QueueDef) => QueueArguments | null) | null): void {
    this.router.queuePolicy = policy;
    this.router.applyQueuePolicies();
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
    // The unified topic space's `$ns` level (namespaces.ts) is no AMQP client's to publish on: no route.
    // A vhost's own keys (`$ns.<ns>.`, set by the AMQP adapter with Message.namespace) are its own.
    if (
      routingKey.charCodeAt(0) === 0x24 &&
      exchange === 'amq.topic' &&
      (routingKey === '$ns' || routingKey.startsWith('$ns.')) &&
      !(msg.namespace !== undefined && routingKey.startsWith(`$ns.${msg.namespace}.`))
    ) {
      return { routed: 0, durable: null, rejected: false };
    }
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

  /** Bytes every stream held here holds (hot tier, segment objects); empty when the storage does not say. */
  streamSizes(): Map<string, { hot: number; objects: number }> {
    return this.storage.streamSizes?.() ?? new Map<string, { hot: number; objects: number }>();
  }

  /** Idempotent producers with state in a partition; null when not held here or unknown. */
  producers(stream: string, partition: number): ProducerSnapshot[] | null {
    this.partitionOf(stream, partition);
    return this.storage.producers?.(stream, partition) ?? null;
  }
}
