/**
 * The embedded metastore: one SQLite file through better-sqlite3.
 *
 * better-sqlite3 is synchronous; the Metastore interface is async so that a networked backend fits it too.
 * Each statement here is short (a primary-key lookup or a small transaction), so running it inline is cheaper
 * than a worker hop would be.
 *
 * Durability: WAL journal mode. A write's promise resolves only once its commit is on disk (above all
 * commitSegment, after which the WAL files holding those offsets may be deleted), but the fsync that makes it so
 * is not SQLite's own: with synchronous=FULL every commit would fdatasync the -wal file on the event loop, which
 * on a busy disk stalls every connection of the broker for milliseconds. Instead commits run with
 * synchronous=NORMAL (SQLite then syncs only around checkpoints, which keeps the database consistent) and each
 * write awaits an fdatasync of the -wal file done on libuv's thread pool; commits made while one is in flight
 * share the next one (group commit). Session-queue writes are the exception (see SessionStore): they resolve at
 * commit, which a crash of the broker process cannot undo, and their sync follows at once without being waited
 * for, because the MQTT adapter needs their seqs to issue the next change (an acknowledgement's removal).
 *
 * This file opens and migrates the database; the state and how a call runs are in sqlite-state.ts, the resources in
 * sqlite-streams.ts, sqlite-groups.ts, sqlite-sessions.ts and sqlite-catalog.ts (mirrored by postgres-*.ts).
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { FlowError } from '../../core/index.js';
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
import { migrate } from './sqlite-migrate.js';

export { migrate };
import type { ConsumerOffset, Metastore, PartitionState, SegmentMeta, StreamDef } from './types.js';
import { type ControlKind, type ControlRecord } from './control-store.js';
import { SqliteState } from './sqlite-state.js';
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
} from './sqlite-streams.js';
import {
  commitOffsets,
  deleteConsumer,
  deleteConsumers,
  deleteGroup,
  deleteOffsets,
  fetchOffset,
  flushConsumers,
  getConsumer,
  listConsumers,
  listGroups,
  listOffsets,
  putConsumer,
} from './sqlite-groups.js';
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
} from './sqlite-sessions.js';
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
} from './sqlite-catalog.js';

export class SqliteMetastore extends SqliteState implements Metastore {
  readonly kind = 'sqlite';

  /** Opens (creating if needed) the database file and migrates it. `:memory:` gives a throwaway store. */
  static open(file: string): SqliteMetastore {
    if (file !== ':memory:' && !file.startsWith('file:')) mkdirSync(dirname(file), { recursive: true });
    let db: Database.Database;
    try {
      db = new Database(file);
    } catch (err) {
      throw new FlowError('STORAGE_ERROR', `cannot open metastore ${file}`, { cause: err });
    }
    try {
      db.pragma('journal_mode = WAL');
      // Commits are made durable by WalFileSync, off the event loop (see the top of this file).
      db.pragma('synchronous = NORMAL');
      db.pragma('foreign_keys = ON');
      // Another process (an admin tool, a second broker by mistake) holding the lock briefly is not an error.
      db.pragma('busy_timeout = 5000');
      migrate(db);
      return new SqliteMetastore(db, file);
    } catch (err) {
      db.close();
      if (err instanceof FlowError) throw err;
      throw new FlowError('STORAGE_ERROR', `cannot open metastore ${file}`, { cause: err });
    }
  }

  /** Schema version of the open database. */
  schemaVersion(): number {
    this.check();
    const row = this.db.prepare('SELECT MAX(version) AS v FROM schema_migrations').get() as { v: number | null };
    return row.v ?? 0;
  }

  // ---------------------------------------------------------------- streams (sqlite-streams.ts)

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

  getPartitionState(stream: string, partition: number): Promise<PartitionState | null> {
    return getPartitionState(this, stream, partition);
  }

  openPartition(stream: string, partition: number): Promise<number> {
    return openPartition(this, stream, partition);
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

  allocateProducerIds(count: number): Promise<number> {
    return allocateProducerIds(this, count);
  }

  putProducerState(stream: string, partition: number, endOffset: number, state: string, epoch: number): Promise<void> {
    return putProducerState(this, stream, partition, endOffset, state, epoch);
  }

  getProducerState(stream: string, partition: number): Promise<{ endOffset: number; state: string } | null> {
    return getProducerState(this, stream, partition);
  }

  // ---------------------------------------------------------------- groups and consumers (sqlite-groups.ts)

  fetchOffset(group: string, stream: string, partition: number): Promise<ConsumerOffset | null> {
    return fetchOffset(this, group, stream, partition);
  }

  commitOffsets(group: string, offsets: OffsetCommit[], _fence?: number): Promise<void> {
    return commitOffsets(this, group, offsets, _fence);
  }

  listGroups(): Promise<string[]> {
    return listGroups(this);
  }

  deleteGroup(group: string): Promise<void> {
    return deleteGroup(this, group);
  }

  deleteOffsets(group: string, partitions: ReadonlyArray<{ stream: string; partition: number }>, _fence?: number): Promise<void> {
    return deleteOffsets(this, group, partitions, _fence);
  }

  listOffsets(group: string): Promise<ConsumerOffset[]> {
    return listOffsets(this, group);
  }

  putConsumer(rec: ConsumerRecord): Promise<void> {
    return putConsumer(this, rec);
  }

  getConsumer(stream: string, name: string): Promise<ConsumerRecord | null> {
    return getConsumer(this, stream, name);
  }

  listConsumers(stream?: string): Promise<ConsumerRecord[]> {
    return listConsumers(this, stream);
  }

  deleteConsumer(stream: string, name: string): Promise<void> {
    return deleteConsumer(this, stream, name);
  }

  deleteConsumers(stream: string): Promise<void> {
    return deleteConsumers(this, stream);
  }

  // ---------------------------------------------------------------- sessions, retained (sqlite-sessions.ts)

  getSession(clientId: string): Promise<SessionRecord | null> {
    return getSession(this, clientId);
  }

  putSession(rec: SessionRecord): Promise<void> {
    return putSession(this, rec);
  }

  deleteSession(clientId: string): Promise<void> {
    return deleteSession(this, clientId);
  }

  listSessions(protocol: string): Promise<SessionRecord[]> {
    return listSessions(this, protocol);
  }

  readQueue(clientId: string, limit: number): Promise<QueuedEntry[]> {
    return readQueue(this, clientId, limit);
  }

  ackQueue(clientId: string, upTo: number): Promise<void> {
    return ackQueue(this, clientId, upTo);
  }

  updateQueue(clientId: string, changes: QueueChanges, maxLength: number): Promise<{ seqs: number[]; dropped: number }> {
    return updateQueue(this, clientId, changes, maxLength);
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

  // ---------------------------------------------------------------- catalog, control (sqlite-catalog.ts)

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

  putControl(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<void> {
    return putControl(this, kind, name, data);
  }

  putControlIfAbsent(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<boolean> {
    return putControlIfAbsent(this, kind, name, data);
  }

  deleteControl(kind: ControlKind, name: string): Promise<boolean> {
    return deleteControl(this, kind, name);
  }

  controlVersion(): Promise<number> {
    return controlVersion(this);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    flushConsumers(this);
    this.closed = true;
    await this.walSync?.close();
    this.db.close();
  }
}
