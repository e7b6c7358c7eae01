/**
 * The one store the core is given: every durable role the core and the protocol adapters need (stream
 * definitions, consumer offsets and producer ids, client sessions and their queues, retained messages). The
 * broker opens one metastore, which covers them all, and passes it once, to the Engine; adapters take what they
 * need from `engine.store`. The core sees it only through these interfaces, never a storage backend.
 *
 * Order: calls naming the same key (a client id, a topic, a group, a stream name) take effect in the order they
 * were issued, whether or not the caller awaited the earlier ones (see src/storage/metastore/types.ts). Callers
 * may rely on that and on nothing more: calls on different keys may be reordered.
 */
import { FlowError } from './errors.js';
import { MemoryOffsetStore, type CommittedOffset, type OffsetCommit, type OffsetStore, type ProducerIdStore } from './offsets.js';
import {
  MemoryRetainedStore,
  MemorySessionStore,
  type QueueChanges,
  type QueuedEntry,
  type RetainedEntry,
  type RetainedStore,
  type SessionRecord,
  type SessionStore,
} from './sessions.js';
import type { StreamCatalog, StreamDef } from './streams.js';
import type { BindingDef, ExchangeDef, QueueCatalog } from './exchanges.js';
import type { QueueDef } from './queues.js';
import { MemoryConsumerStore, type ConsumerRecord, type ConsumerStateStore } from './consumers.js';

export interface CoreStore extends StreamCatalog, OffsetStore, ProducerIdStore, SessionStore, RetainedStore, QueueCatalog, ConsumerStateStore {}

/**
 * Every role in process memory (lost at exit): for tests, and for a broker started without a metastore. The
 * parts may be given, so that a test can keep sessions or retained messages across engines.
 */
export class MemoryStore implements CoreStore {
  readonly defs = new Map<string, StreamDef>();
  readonly sessionStore: SessionStore;
  readonly retainedStore: RetainedStore;
  readonly offsetStore: OffsetStore & ProducerIdStore;
  readonly queueDefs = new Map<string, QueueDef>();
  readonly exchangeDefs = new Map<string, ExchangeDef>();
  readonly bindingDefs = new Map<string, BindingDef>();
  readonly consumerStore = new MemoryConsumerStore();

  constructor(parts: { sessions?: SessionStore; retained?: RetainedStore; offsets?: OffsetStore & ProducerIdStore } = {}) {
    this.sessionStore = parts.sessions ?? new MemorySessionStore();
    this.retainedStore = parts.retained ?? new MemoryRetainedStore();
    this.offsetStore = parts.offsets ?? new MemoryOffsetStore((s) => this.defs.has(s));
  }

  async createStream(def: StreamDef): Promise<void> {
    if (this.defs.has(def.name)) throw new FlowError('ALREADY_EXISTS', `stream "${def.name}" already exists`);
    this.defs.set(def.name, def);
  }
  async updateStream(def: StreamDef): Promise<void> {
    if (!this.defs.has(def.name)) throw new FlowError('NOT_FOUND', `stream "${def.name}" not found`);
    this.defs.set(def.name, def);
  }
  async deleteStream(name: string): Promise<void> {
    if (!this.defs.delete(name)) throw new FlowError('NOT_FOUND', `stream "${name}" not found`);
  }
  async listStreams(): Promise<StreamDef[]> {
    return [...this.defs.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  commitOffsets(group: string, offsets: OffsetCommit[], fence?: number): Promise<void> {
    return this.offsetStore.commitOffsets(group, offsets, fence);
  }
  fetchOffset(group: string, stream: string, partition: number): Promise<CommittedOffset | null> {
    return this.offsetStore.fetchOffset(group, stream, partition);
  }
  listOffsets(group: string): Promise<CommittedOffset[]> {
    return this.offsetStore.listOffsets(group);
  }
  listGroups(): Promise<string[]> {
    return this.offsetStore.listGroups();
  }
  deleteGroup(group: string): Promise<void> {
    return this.offsetStore.deleteGroup(group);
  }
  deleteOffsets(group: string, partitions: ReadonlyArray<{ stream: string; partition: number }>, fence?: number): Promise<void> {
    return this.offsetStore.deleteOffsets(group, partitions, fence);
  }
  allocateProducerIds(count: number): Promise<number> {
    return this.offsetStore.allocateProducerIds(count);
  }

  getSession(clientId: string): Promise<SessionRecord | null> {
    return this.sessionStore.getSession(clientId);
  }
  putSession(rec: SessionRecord, fence?: number): Promise<void> {
    return this.sessionStore.putSession(rec, fence);
  }
  deleteSession(clientId: string, fence?: number): Promise<void> {
    return this.sessionStore.deleteSession(clientId, fence);
  }
  listSessions(protocol: string): Promise<SessionRecord[]> {
    return this.sessionStore.listSessions(protocol);
  }
  readQueue(clientId: string, limit: number): Promise<QueuedEntry[]> {
    return this.sessionStore.readQueue(clientId, limit);
  }
  ackQueue(clientId: string, upTo: number, fence?: number): Promise<void> {
    return this.sessionStore.ackQueue(clientId, upTo, fence);
  }
  updateQueue(clientId: string, changes: QueueChanges, maxLength: number, fence?: number): Promise<{ seqs: number[]; dropped: number }> {
    return this.sessionStore.updateQueue(clientId, changes, maxLength, fence);
  }

  putRetained(topic: string, data: Buffer): Promise<void> {
    return this.retainedStore.putRetained(topic, data);
  }
  deleteRetained(topic: string): Promise<void> {
    return this.retainedStore.deleteRetained(topic);
  }
  listRetained(): Promise<RetainedEntry[]> {
    return this.retainedStore.listRetained();
  }

  putConsumer(rec: ConsumerRecord, epoch?: number): Promise<void> {
    return this.consumerStore.putConsumer(rec, epoch);
  }
  getConsumer(stream: string, name: string): Promise<ConsumerRecord | null> {
    return this.consumerStore.getConsumer(stream, name);
  }
  listConsumers(stream?: string): Promise<ConsumerRecord[]> {
    return this.consumerStore.listConsumers(stream);
  }
  deleteConsumer(stream: string, name: string, epoch?: number): Promise<void> {
    return this.consumerStore.deleteConsumer(stream, name, epoch);
  }
  deleteConsumers(stream: string): Promise<void> {
    return this.consumerStore.deleteConsumers(stream);
  }

  async putQueue(def: QueueDef): Promise<void> {
    this.queueDefs.set(def.name, def);
  }
  async deleteQueue(name: string): Promise<void> {
    this.queueDefs.delete(name);
    for (const [k, b] of this.bindingDefs) if (b.destinationKind === 'queue' && b.destination === name) this.bindingDefs.delete(k);
  }
  async listQueues(): Promise<QueueDef[]> {
    return [...this.queueDefs.values()];
  }
  async putExchange(def: ExchangeDef): Promise<void> {
    this.exchangeDefs.set(def.name, def);
  }
  async deleteExchange(name: string): Promise<void> {
    this.exchangeDefs.delete(name);
    for (const [k, b] of this.bindingDefs) {
      if (b.source === name || (b.destinationKind === 'exchange' && b.destination === name)) this.bindingDefs.delete(k);
    }
  }
  async listExchanges(): Promise<ExchangeDef[]> {
    return [...this.exchangeDefs.values()];
  }
  async putBinding(b: BindingDef): Promise<void> {
    this.bindingDefs.set(bindingKey(b), b);
  }
  async deleteBinding(b: BindingDef): Promise<void> {
    this.bindingDefs.delete(bindingKey(b));
  }
  async listBindings(): Promise<BindingDef[]> {
    return [...this.bindingDefs.values()];
  }
}

/**
 * A binding's identity: source, destination, key, rule and arguments (AMQP: two bindings differing only in
 * arguments are distinct). Arguments are serialized with sorted keys, so equal tables give equal keys.
 */
export function bindingKey(b: BindingDef): string {
  return JSON.stringify([b.source, b.destinationKind, b.destination, b.key, b.rule ?? 'amqp', sortedJson(b.arguments)]);
}

function sortedJson(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortedJson);
  if (v !== null && typeof v === 'object' && !Buffer.isBuffer(v)) {
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, sortedJson((v as Record<string, unknown>)[k])]),
    );
  }
  return v;
}
