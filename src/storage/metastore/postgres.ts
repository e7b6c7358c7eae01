/**
 * The cluster metastore: PostgreSQL through a node-postgres pool. Same tables and semantics as the SQLite
 * backend (see postgres-migrations.ts), shared by every broker that points at the database.
 *
 * - Per-key order (the contract in types.ts): a pool runs statements on several connections, so two calls made
 *   one after the other could otherwise commit in the other order (a deleteSession overtaking the putSession
 *   issued before it). Calls naming the same key are chained (KeyedSerializer), calls on different keys run in
 *   parallel; reads over every key of a kind (listRetained, listSessions, listStreams, listGroups) first wait for
 *   the writes of that kind already issued.
 * - Atomicity: every call is one statement (partition mutations and queue writes are PL/pgSQL functions that
 *   check the epoch, or take the queue's counter row, and write in the same transaction), so a call either
 *   happened or did not, even when the connection dies under it.
 * - Durability: a call resolves after its COMMIT with synchronous_commit on (forced per connection).
 * - Failures: the server down or restarting gives STORAGE_ERROR naming host:port, retriable: the pool opens new
 *   connections by itself once the server is back, with no broker restart. An idle connection dropped by the
 *   server is handled by the pool's 'error' listener (it would otherwise crash the process).
 *
 * This file opens the pool and migrates the schema; the state and how a call runs are in postgres-state.ts, the
 * resources in postgres-streams.ts, postgres-groups.ts, postgres-sessions.ts and postgres-catalog.ts (mirroring
 * sqlite-*.ts).
 */
import type {
  BindingDef,
  ConsumerRecord,
  ExchangeDef,
  OffsetCommit,
  QueueChanges,
  QueueDef,
  QueuedEntry,
  RetainedEntry,
  SessionRecord,
} from '../../core/index.js';
import { connectPool, migratePostgres, type PostgresOptions } from '../postgres-util.js';
import { postgresMigrations } from './postgres-migrations.js';
import type { ConsumerOffset, Metastore, PartitionState, SegmentMeta, StreamDef } from './types.js';
import { type ControlFence, type ControlKind, type ControlRecord } from './control-store.js';
import { PostgresState } from './postgres-state.js';
import {
  allocateProducerIds,
  commitSegment,
  createStream,
  deleteSegment,
  replaceSegment,
  deleteStream,
  getPartitionState,
  getProducerState,
  listSegments,
  listStreams,
  openPartition,
  putProducerState,
  setLogStartOffset,
  updateStream,
} from './postgres-streams.js';
import {
  commitOffsets,
  deleteConsumer,
  deleteConsumers,
  deleteGroup,
  deleteOffsets,
  fetchOffset,
  getConsumer,
  listConsumers,
  listGroups,
  listOffsets,
  putConsumer,
} from './postgres-groups.js';
import {
  ackQueue,
  deleteRetained,
  deleteSession,
  getSession,
  listRetained,
  listSessions,
  putRetained,
  putSession,
  readQueue,
  updateQueue,
} from './postgres-sessions.js';
import {
  controlVersion,
  deleteBinding,
  deleteControl,
  deleteExchange,
  deleteQueue,
  getControl,
  listBindings,
  listControl,
  listExchanges,
  listQueues,
  putBinding,
  putControl,
  putControlIfAbsent,
  putExchange,
  putQueue,
} from './postgres-catalog.js';

export type { PostgresOptions };

export class PostgresMetastore extends PostgresState implements Metastore {
  readonly kind = 'postgres' as const;

  /**
   * Connects and brings the schema up to date (once, under an advisory lock, however many brokers start
   * together). An unreachable server fails with STORAGE_ERROR naming host:port and the cause.
   */
  static async open(opts: PostgresOptions): Promise<PostgresMetastore> {
    const db = await connectPool(opts, 'metastore');
    try {
      const m = new PostgresMetastore(db);
      m.migrationsApplied = await migratePostgres(db, postgresMigrations, 'flowmq_schema_migrations', 'metastore');
      return m;
    } catch (err) {
      await db.end().catch(() => undefined);
      throw err;
    }
  }

  /** Pool size / idle / waiting, statements run, failures, reconnects. */
  figures(): Record<string, unknown> {
    return {
      ...this.db.poolFigures(),
      keysInFlight: this.chain.activeKeys,
      consumerPuts: this.consumerStats.puts,
      consumerWrites: this.consumerStats.writes,
    };
  }

  // ---------------------------------------------------------------- streams (postgres-streams.ts)

  createStream(def: StreamDef): Promise<void> {
    return createStream(this, def);
  }

  listStreams(): Promise<StreamDef[]> {
    return listStreams(this);
  }

  updateStream(def: StreamDef): Promise<void> {
    return updateStream(this, def);
  }

  deleteStream(name: string): Promise<void> {
    return deleteStream(this, name);
  }

  openPartition(stream: string, partition: number): Promise<number> {
    return openPartition(this, stream, partition);
  }

  getPartitionState(stream: string, partition: number): Promise<PartitionState | null> {
    return getPartitionState(this, stream, partition);
  }

  setLogStartOffset(stream: string, partition: number, offset: number, epoch: number): Promise<void> {
    return setLogStartOffset(this, stream, partition, offset, epoch);
  }

  commitSegment(seg: SegmentMeta, epoch: number): Promise<void> {
    return commitSegment(this, seg, epoch);
  }

  listSegments(stream: string, partition: number): Promise<SegmentMeta[]> {
    return listSegments(this, stream, partition);
  }

  deleteSegment(stream: string, partition: number, baseOffset: number, epoch: number): Promise<void> {
    return deleteSegment(this, stream, partition, baseOffset, epoch);
  }

  replaceSegment(seg: SegmentMeta, oldObjectKey: string, epoch: number): Promise<boolean> {
    return replaceSegment(this, seg, oldObjectKey, epoch);
  }

  putProducerState(stream: string, partition: number, endOffset: number, state: string, epoch: number): Promise<void> {
    return putProducerState(this, stream, partition, endOffset, state, epoch);
  }

  getProducerState(stream: string, partition: number): Promise<{ endOffset: number; state: string } | null> {
    return getProducerState(this, stream, partition);
  }

  allocateProducerIds(count: number): Promise<number> {
    return allocateProducerIds(this, count);
  }

  // ---------------------------------------------------------------- groups and consumers (postgres-groups.ts)

  commitOffsets(group: string, offsets: OffsetCommit[], fence?: number): Promise<void> {
    return commitOffsets(this, group, offsets, fence);
  }

  fetchOffset(group: string, stream: string, partition: number): Promise<ConsumerOffset | null> {
    return fetchOffset(this, group, stream, partition);
  }

  listOffsets(group: string): Promise<ConsumerOffset[]> {
    return listOffsets(this, group);
  }

  listGroups(): Promise<string[]> {
    return listGroups(this);
  }

  deleteGroup(group: string): Promise<void> {
    return deleteGroup(this, group);
  }

  deleteOffsets(group: string, partitions: ReadonlyArray<{ stream: string; partition: number }>, fence?: number): Promise<void> {
    return deleteOffsets(this, group, partitions, fence);
  }

  putConsumer(rec: ConsumerRecord, epoch?: number): Promise<void> {
    return putConsumer(this, rec, epoch);
  }

  getConsumer(stream: string, name: string): Promise<ConsumerRecord | null> {
    return getConsumer(this, stream, name);
  }

  listConsumers(stream?: string): Promise<ConsumerRecord[]> {
    return listConsumers(this, stream);
  }

  deleteConsumer(stream: string, name: string, epoch?: number): Promise<void> {
    return deleteConsumer(this, stream, name, epoch);
  }

  deleteConsumers(stream: string): Promise<void> {
    return deleteConsumers(this, stream);
  }

  // ---------------------------------------------------------------- sessions, retained (postgres-sessions.ts)

  getSession(clientId: string): Promise<SessionRecord | null> {
    return getSession(this, clientId);
  }

  putSession(rec: SessionRecord, fence?: number): Promise<void> {
    return putSession(this, rec, fence);
  }

  deleteSession(clientId: string, fence?: number): Promise<void> {
    return deleteSession(this, clientId, fence);
  }

  listSessions(protocol: string): Promise<SessionRecord[]> {
    return listSessions(this, protocol);
  }

  readQueue(clientId: string, limit: number): Promise<QueuedEntry[]> {
    return readQueue(this, clientId, limit);
  }

  ackQueue(clientId: string, upTo: number, fence?: number): Promise<void> {
    return ackQueue(this, clientId, upTo, fence);
  }

  updateQueue(clientId: string, changes: QueueChanges, maxLength: number, fence?: number): Promise<{ seqs: number[]; dropped: number }> {
    return updateQueue(this, clientId, changes, maxLength, fence);
  }

  putRetained(topic: string, data: Buffer): Promise<void> {
    return putRetained(this, topic, data);
  }

  deleteRetained(topic: string): Promise<void> {
    return deleteRetained(this, topic);
  }

  listRetained(): Promise<RetainedEntry[]> {
    return listRetained(this);
  }

  // ---------------------------------------------------------------- catalog, control (postgres-catalog.ts)

  putQueue(def: QueueDef): Promise<void> {
    return putQueue(this, def);
  }

  deleteQueue(name: string): Promise<void> {
    return deleteQueue(this, name);
  }

  listQueues(): Promise<QueueDef[]> {
    return listQueues(this);
  }

  putExchange(def: ExchangeDef): Promise<void> {
    return putExchange(this, def);
  }

  deleteExchange(name: string): Promise<void> {
    return deleteExchange(this, name);
  }

  listExchanges(): Promise<ExchangeDef[]> {
    return listExchanges(this);
  }

  putBinding(b: BindingDef): Promise<void> {
    return putBinding(this, b);
  }

  deleteBinding(b: BindingDef): Promise<void> {
    return deleteBinding(this, b);
  }

  listBindings(): Promise<BindingDef[]> {
    return listBindings(this);
  }

  listControl(kind: ControlKind): Promise<ControlRecord[]> {
    return listControl(this, kind);
  }

  getControl(kind: ControlKind, name: string): Promise<ControlRecord | null> {
    return getControl(this, kind, name);
  }

  putControl(kind: ControlKind, name: string, data: Record<string, unknown>, fence?: number | ControlFence): Promise<void> {
    return putControl(this, kind, name, data, fence);
  }

  putControlIfAbsent(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<boolean> {
    return putControlIfAbsent(this, kind, name, data);
  }

  deleteControl(kind: ControlKind, name: string, fence?: number | ControlFence): Promise<boolean> {
    return deleteControl(this, kind, name, fence);
  }

  controlVersion(): Promise<number> {
    return controlVersion(this);
  }

  /** Finishes the calls already made, then closes the pool. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.chain.idle();
    await this.db.end();
  }
}
