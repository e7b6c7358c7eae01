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
 */
import { mkdirSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { checkConsumerRecord, CoalescingTask, FlowError } from '../../core/index.js';
import type { BindingDef, ConsumerRecord, ExchangeDef, OffsetCommit, QueueChanges, QueueDef, QueuedEntry, RetainedEntry, SessionRecord } from '../../core/index.js';
import { isNoSpace, writeError } from '../fs-util.js';
import { migrations, type Migration } from './migrations.js';
import {
  bindingValues,
  checkExchangeDef,
  checkInt,
  checkQueueDef,
  checkSegment,
  checkStreamDef,
  consumerValues,
  toBindingDef,
  toConsumer,
  toExchangeDef,
  toJson,
  toOffset,
  toQueueDef,
  toSegment,
  toSession,
  toStream,
  type BindingDefRow,
  type ConsumerRow,
  type ExchangeDefRow,
  type OffsetRow,
  type QueueDefRow,
  type SegmentRow,
  type SessionRow,
  type StreamRow,
  settingsColumn,
} from './rows.js';
import type { ConsumerOffset, Metastore, PartitionState, SegmentMeta, StreamDef } from './types.js';
import { bumpsVersion, checkControl, type ControlKind, type ControlRecord } from './control-store.js';

interface QueueStateRow {
  next_seq: number;
  length: number;
}

interface PartitionRow {
  stream: string;
  partition: number;
  log_start_offset: number;
  flushed_offset: number;
  epoch: number;
}

function sqliteCode(err: unknown): string | undefined {
  return err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : undefined;
}

/**
 * Brings the schema up to date, all pending migrations in one transaction so a failure leaves the database as
 * it was. Exported for tests.
 */
export function migrate(db: Database.Database, list: readonly Migration[] = migrations): number {
  list.forEach((m, i) => {
    if (m.version !== i + 1) throw new Error(`metastore migration list out of order at ${m.name}`);
  });
  const latest = list.length;
  const run = db.transaction(() => {
    db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version    INTEGER PRIMARY KEY,
      name       TEXT    NOT NULL,
      applied_at INTEGER NOT NULL
    )`);
    const row = db.prepare('SELECT MAX(version) AS v FROM schema_migrations').get() as { v: number | null };
    const current = row.v ?? 0;
    if (current > latest) {
      throw new FlowError(
        'STORAGE_ERROR',
        `metastore schema version ${current} is newer than this FlowMQ knows (${latest}); upgrade FlowMQ or use another data directory`,
      );
    }
    const record = db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)');
    for (const m of list.slice(current)) {
      db.exec(m.sql);
      record.run(m.version, m.name, Date.now());
    }
    return latest;
  });
  // IMMEDIATE takes the write lock up front, so two processes opening one file cannot both migrate it.
  return run.immediate();
}

/** fdatasync of SQLite's -wal file off the event loop, shared by the commits that one sync covers. */
class WalFileSync {
  private fh: FileHandle | null = null;
  private readonly task = new CoalescingTask(() => this.once());
  syncs = 0;

  constructor(private readonly path: string) {}

  /** Resolves once everything committed before the call is durable. */
  sync(): Promise<void> {
    return this.task.run();
  }

  private async once(): Promise<void> {
    try {
      this.fh ??= await open(this.path, 'r+');
      await this.fh.datasync();
      this.syncs++;
    } catch (err) {
      throw writeError(`cannot sync metastore journal ${this.path}`, err);
    }
  }

  async close(): Promise<void> {
    await this.task.idle();
    await this.fh?.close().catch(() => undefined);
    this.fh = null;
  }
}

interface ControlRow {
  kind: ControlKind;
  name: string;
  data: string;
  updated_at: number;
}

function toControl(r: ControlRow): ControlRecord {
  return { kind: r.kind, name: r.name, data: JSON.parse(r.data) as Record<string, unknown>, updatedAt: r.updated_at };
}

export class SqliteMetastore implements Metastore {
  readonly kind = 'sqlite';
  private closed = false;

  private readonly s: ReturnType<SqliteMetastore['prepare']>;
  private readonly txOpenPartition: (stream: string, partition: number) => number;
  private readonly txCommitSegment: (seg: SegmentMeta, epoch: number) => void;
  private readonly txSetLogStart: (stream: string, partition: number, offset: number, epoch: number) => void;
  private readonly txDeleteSegment: (stream: string, partition: number, baseOffset: number, epoch: number) => void;
  private readonly txPutProducerState: (stream: string, partition: number, endOffset: number, state: string, epoch: number) => void;
  private readonly txAckQueue: (clientId: string, upTo: number) => void;
  private readonly txDeleteSession: (clientId: string) => void;
  private readonly txUpdateQueue: (clientId: string, changes: QueueChanges, maxLength: number) => { seqs: number[]; dropped: number };
  private readonly txPutConsumers: (rows: ReturnType<typeof consumerValues>[]) => void;
  /** A control document change and the version bump, in one transaction (see ControlStore). */
  private readonly txControl: (op: 'put' | 'insert' | 'delete', kind: ControlKind, name: string, json: string) => boolean;
  /** The consumer puts made in this turn of the event loop, not written yet (see putConsumer). */
  private consumerBatch: {
    /** Row values by (stream, name): the latest put of each consumer. */
    recs: Map<string, ReturnType<typeof consumerValues>>;
    done: Promise<void>;
    resolve(): void;
    reject(err: unknown): void;
  } | null = null;
  /** putConsumer calls, and the transactions that wrote them (fewer when puts were coalesced); for tests. */
  readonly consumerStats = { puts: 0, writes: 0 };

  /** null for an in-memory database, which has nothing to make durable. */
  private readonly walSync: WalFileSync | null;

  private constructor(
    private readonly db: Database.Database,
    file: string,
  ) {
    this.walSync = file === ':memory:' || file.startsWith('file:') ? null : new WalFileSync(`${file}-wal`);
    this.s = this.prepare();
    // Every partition mutation checks the writer's epoch in its own transaction, before it changes anything: a
    // writer fenced by a later openPartition (another broker, or this one reopening) changes nothing any more.
    const checkEpoch = (stream: string, partition: number, epoch: number, p?: PartitionRow): void => {
      const row = p ?? (this.s.getPartition.get(stream, partition) as PartitionRow | undefined);
      const current = row?.epoch ?? 0;
      if (epoch < current) {
        throw new FlowError('FENCED', `partition ${stream}/${partition} is owned by epoch ${current}; a write of epoch ${epoch} is refused`);
      }
    };
    this.txOpenPartition = db.transaction((stream: string, partition: number) => {
      if (this.s.streamExists.get(stream) === undefined) throw new FlowError('NOT_FOUND', `stream "${stream}" not found`);
      return (this.s.bumpEpoch.get(stream, partition) as { epoch: number }).epoch;
    });
    this.txCommitSegment = db.transaction((seg: SegmentMeta, epoch: number) => {
      if (this.s.streamExists.get(seg.stream) === undefined) {
        throw new FlowError('NOT_FOUND', `stream "${seg.stream}" not found`);
      }
      const p = this.s.getPartition.get(seg.stream, seg.partition) as PartitionRow | undefined;
      checkEpoch(seg.stream, seg.partition, epoch, p);
      // A partition without a row has flushed nothing yet.
      const flushed = p?.flushed_offset ?? 0;
      if (flushed === seg.endOffset) {
        // The same segment again: a retry whose first commit landed but whose promise failed (its journal sync
        // did, on a full or failing disk). Committing is idempotent, or the partition could never seal again.
        const same = (this.s.listSegments.all(seg.stream, seg.partition) as SegmentRow[]).some(
          (r) => r.base_offset === seg.baseOffset && r.end_offset === seg.endOffset && r.object_key === seg.objectKey,
        );
        if (same) return;
      }
      if (seg.baseOffset !== flushed) {
        throw new FlowError(
          'INVALID_ARGUMENT',
          `segment [${seg.baseOffset}, ${seg.endOffset}) of ${seg.stream}/${seg.partition} does not start at the flushed offset ${flushed}`,
        );
      }
      this.s.insertSegment.run(
        seg.stream,
        seg.partition,
        seg.baseOffset,
        seg.endOffset,
        seg.objectKey,
        seg.size,
        seg.maxTimestamp,
        seg.createdAt,
      );
      this.s.upsertFlushed.run(seg.stream, seg.partition, seg.endOffset);
    });
    this.txSetLogStart = db.transaction((stream: string, partition: number, offset: number, epoch: number) => {
      if (this.s.streamExists.get(stream) === undefined) throw new FlowError('NOT_FOUND', `stream "${stream}" not found`);
      checkEpoch(stream, partition, epoch);
      this.s.upsertLogStart.run(stream, partition, offset);
    });
    this.txDeleteSegment = db.transaction((stream: string, partition: number, baseOffset: number, epoch: number) => {
      checkEpoch(stream, partition, epoch);
      this.s.deleteSegment.run(stream, partition, baseOffset);
    });
    this.txPutProducerState = db.transaction((stream: string, partition: number, endOffset: number, state: string, epoch: number) => {
      checkEpoch(stream, partition, epoch);
      this.s.producerStatePut.run(stream, partition, endOffset, state);
    });
    // A queue's seqs come from its counter row (session_queues), which also keeps its length: a batch of changes is
    // one transaction that neither reads MAX(seq) nor counts the queue's rows.
    this.txUpdateQueue = db.transaction((clientId: string, changes: QueueChanges, maxLength: number) => {
      const st = this.s.queueState.get(clientId) as QueueStateRow | undefined;
      if (st === undefined && (changes.append ?? []).length === 0) return { seqs: [], dropped: 0 }; // an empty queue
      let nextSeq = st?.next_seq ?? 1;
      let length = st?.length ?? 0;
      for (const r of changes.replace ?? []) this.s.queueUpdate.run(r.data, clientId, r.seq);
      for (const seq of changes.remove ?? []) length -= this.s.queueDeleteOne.run(clientId, seq).changes;
      const seqs: number[] = [];
      for (const data of changes.append ?? []) {
        this.s.queueInsert.run(clientId, nextSeq, data);
        seqs.push(nextSeq++);
        length++;
      }
      let dropped = 0;
      if (length > maxLength) {
        dropped = this.s.queueTrim.run(clientId, clientId, length - maxLength).changes;
        length -= dropped;
      }
      this.s.queueStatePut.run(clientId, nextSeq, length);
      return { seqs, dropped };
    });
    this.txAckQueue = db.transaction((clientId: string, upTo: number) => {
      const gone = this.s.queueAck.run(clientId, upTo).changes;
      if (gone > 0) this.s.queueShrink.run(gone, clientId);
    });
    this.txPutConsumers = db.transaction((rows: ReturnType<typeof consumerValues>[]) => {
      for (const r of rows) this.s.consumerPut.run(...r);
    });
    this.txControl = db.transaction((op: 'put' | 'insert' | 'delete', kind: ControlKind, name: string, json: string) => {
      const changes =
        op === 'delete'
          ? this.s.controlDelete.run(kind, name).changes
          : (op === 'put' ? this.s.controlPut : this.s.controlInsert).run(kind, name, json, Date.now()).changes;
      if (changes > 0 && bumpsVersion(kind)) this.s.controlBump.run();
      return changes > 0;
    });
    this.txDeleteSession = db.transaction((clientId: string) => {
      this.s.sessionDelete.run(clientId);
      this.s.queueClear.run(clientId);
      this.s.queueStateDelete.run(clientId);
    });
  }

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

  /** Every statement is prepared once; better-sqlite3 statements are reusable and this keeps calls cheap. */
  private prepare() {
    const db = this.db;
    return {
      insertStream: db.prepare(
        'INSERT INTO streams (name, partitions, bindings, retention_ms, created_at, settings, stream_id) VALUES (?, ?, ?, ?, ?, ?, ?)',
      ),
      streamExists: db.prepare('SELECT 1 FROM streams WHERE name = ?'),
      listStreams: db.prepare('SELECT * FROM streams ORDER BY name'),
      // created_at is left alone: it names the stream's incarnation (segment object keys include it), and a
      // definition edited and written back must not be able to move it.
      updateStream: db.prepare('UPDATE streams SET partitions = ?, bindings = ?, retention_ms = ?, settings = ? WHERE name = ?'),
      deleteStream: db.prepare('DELETE FROM streams WHERE name = ?'),
      getPartition: db.prepare('SELECT * FROM partitions WHERE stream = ? AND partition = ?'),
      bumpEpoch: db.prepare(
        `INSERT INTO partitions (stream, partition, log_start_offset, flushed_offset, epoch) VALUES (?, ?, 0, 0, 1)
         ON CONFLICT (stream, partition) DO UPDATE SET epoch = epoch + 1 RETURNING epoch`,
      ),
      // The log start offset only moves forward: a late or repeated retention pass must not undo a later one.
      upsertLogStart: db.prepare(
        `INSERT INTO partitions (stream, partition, log_start_offset, flushed_offset) VALUES (?, ?, ?, 0)
         ON CONFLICT (stream, partition) DO UPDATE SET log_start_offset = MAX(log_start_offset, excluded.log_start_offset)`,
      ),
      upsertFlushed: db.prepare(
        `INSERT INTO partitions (stream, partition, log_start_offset, flushed_offset) VALUES (?, ?, 0, ?)
         ON CONFLICT (stream, partition) DO UPDATE SET flushed_offset = excluded.flushed_offset`,
      ),
      insertSegment: db.prepare(
        `INSERT INTO segments (stream, partition, base_offset, end_offset, object_key, size, max_timestamp, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
      ),
      listSegments: db.prepare('SELECT * FROM segments WHERE stream = ? AND partition = ? ORDER BY base_offset'),
      deleteSegment: db.prepare('DELETE FROM segments WHERE stream = ? AND partition = ? AND base_offset = ?'),
      upsertOffset: db.prepare(
        `INSERT INTO consumer_offsets (group_id, stream, partition, "offset", metadata, committed_at)
         VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (group_id, stream, partition)
         DO UPDATE SET "offset" = excluded."offset", metadata = excluded.metadata, committed_at = excluded.committed_at`,
      ),
      fetchOffset: db.prepare('SELECT * FROM consumer_offsets WHERE group_id = ? AND stream = ? AND partition = ?'),
      listOffsets: db.prepare('SELECT * FROM consumer_offsets WHERE group_id = ? ORDER BY stream, partition'),
      listGroups: db.prepare('SELECT DISTINCT group_id FROM consumer_offsets ORDER BY group_id'),
      deleteGroup: db.prepare('DELETE FROM consumer_offsets WHERE group_id = ?'),
      deleteOffset: db.prepare('DELETE FROM consumer_offsets WHERE group_id = ? AND stream = ? AND partition = ?'),
      producerIdNext: db.prepare('SELECT next_id FROM producer_ids WHERE id = 0'),
      producerIdAdvance: db.prepare('UPDATE producer_ids SET next_id = next_id + ? WHERE id = 0'),
      producerStatePut: db.prepare(
        `INSERT INTO producer_state (stream, partition, end_offset, state) VALUES (?, ?, ?, ?)
         ON CONFLICT (stream, partition) DO UPDATE SET end_offset = excluded.end_offset, state = excluded.state`,
      ),
      producerStateGet: db.prepare('SELECT end_offset, state FROM producer_state WHERE stream = ? AND partition = ?'),
      sessionGet: db.prepare('SELECT * FROM client_sessions WHERE client_id = ?'),
      sessionPut: db.prepare(
        `INSERT INTO client_sessions (client_id, protocol, state, expires_at, updated_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (client_id) DO UPDATE SET protocol = excluded.protocol, state = excluded.state,
           expires_at = excluded.expires_at, updated_at = excluded.updated_at`,
      ),
      sessionDelete: db.prepare('DELETE FROM client_sessions WHERE client_id = ?'),
      sessionList: db.prepare('SELECT * FROM client_sessions WHERE protocol = ? ORDER BY client_id'),
      queueState: db.prepare('SELECT next_seq, length FROM session_queues WHERE client_id = ?'),
      queueStatePut: db.prepare(
        `INSERT INTO session_queues (client_id, next_seq, length) VALUES (?, ?, ?)
         ON CONFLICT (client_id) DO UPDATE SET next_seq = excluded.next_seq, length = excluded.length`,
      ),
      queueShrink: db.prepare('UPDATE session_queues SET length = length - ? WHERE client_id = ?'),
      queueStateDelete: db.prepare('DELETE FROM session_queues WHERE client_id = ?'),
      queueInsert: db.prepare('INSERT INTO session_queue (client_id, seq, data) VALUES (?, ?, ?)'),
      queueTrim: db.prepare(
        'DELETE FROM session_queue WHERE client_id = ? AND seq IN (SELECT seq FROM session_queue WHERE client_id = ? ORDER BY seq LIMIT ?)',
      ),
      queueRead: db.prepare('SELECT seq, data FROM session_queue WHERE client_id = ? ORDER BY seq LIMIT ?'),
      queueAck: db.prepare('DELETE FROM session_queue WHERE client_id = ? AND seq <= ?'),
      queueClear: db.prepare('DELETE FROM session_queue WHERE client_id = ?'),
      queueUpdate: db.prepare('UPDATE session_queue SET data = ? WHERE client_id = ? AND seq = ?'),
      queueDeleteOne: db.prepare('DELETE FROM session_queue WHERE client_id = ? AND seq = ?'),
      retainedPut: db.prepare(
        `INSERT INTO retained_messages (topic, data, updated_at) VALUES (?, ?, ?)
         ON CONFLICT (topic) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
      ),
      retainedDelete: db.prepare('DELETE FROM retained_messages WHERE topic = ?'),
      retainedList: db.prepare('SELECT topic, data FROM retained_messages ORDER BY topic'),
      queueDefPut: db.prepare(
        `INSERT INTO queue_defs (name, durable, exclusive_owner, auto_delete, arguments, raw_arguments, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET durable = excluded.durable, exclusive_owner = excluded.exclusive_owner,
           auto_delete = excluded.auto_delete, arguments = excluded.arguments, raw_arguments = excluded.raw_arguments,
           created_at = excluded.created_at`,
      ),
      queueDefDelete: db.prepare('DELETE FROM queue_defs WHERE name = ?'),
      queueDefList: db.prepare('SELECT * FROM queue_defs ORDER BY name'),
      exchangeDefPut: db.prepare(
        `INSERT INTO exchange_defs (name, type, durable, auto_delete, internal, alternate_exchange, raw_arguments, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET type = excluded.type, durable = excluded.durable, auto_delete = excluded.auto_delete,
           internal = excluded.internal, alternate_exchange = excluded.alternate_exchange,
           raw_arguments = excluded.raw_arguments, created_at = excluded.created_at`,
      ),
      exchangeDefDelete: db.prepare('DELETE FROM exchange_defs WHERE name = ?'),
      exchangeDefList: db.prepare('SELECT * FROM exchange_defs ORDER BY name'),
      bindingPut: db.prepare(
        `INSERT INTO binding_defs (binding_key, source, destination_kind, destination, key, rule, arguments)
         VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (binding_key) DO UPDATE SET rule = excluded.rule, arguments = excluded.arguments`,
      ),
      bindingDelete: db.prepare('DELETE FROM binding_defs WHERE binding_key = ?'),
      bindingsDeleteTo: db.prepare('DELETE FROM binding_defs WHERE destination_kind = ? AND destination = ?'),
      bindingsDeleteFrom: db.prepare('DELETE FROM binding_defs WHERE source = ?'),
      bindingList: db.prepare('SELECT * FROM binding_defs ORDER BY source, destination_kind, destination, key, binding_key'),
      consumerPut: db.prepare(
        `INSERT INTO jetstream_consumers (stream, name, config, created_at, delivered_seq, delivered_consumer_seq, ack_floor, acked)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (stream, name) DO UPDATE SET config = excluded.config, created_at = excluded.created_at,
           delivered_seq = excluded.delivered_seq, delivered_consumer_seq = excluded.delivered_consumer_seq,
           ack_floor = excluded.ack_floor, acked = excluded.acked`,
      ),
      consumerGet: db.prepare('SELECT * FROM jetstream_consumers WHERE stream = ? AND name = ?'),
      consumerListStream: db.prepare('SELECT * FROM jetstream_consumers WHERE stream = ? ORDER BY name'),
      consumerListAll: db.prepare('SELECT * FROM jetstream_consumers ORDER BY stream, name'),
      consumerDelete: db.prepare('DELETE FROM jetstream_consumers WHERE stream = ? AND name = ?'),
      consumerDeleteStream: db.prepare('DELETE FROM jetstream_consumers WHERE stream = ?'),
      controlList: db.prepare('SELECT kind, name, data, updated_at FROM control_docs WHERE kind = ? ORDER BY name'),
      controlGet: db.prepare('SELECT kind, name, data, updated_at FROM control_docs WHERE kind = ? AND name = ?'),
      controlPut: db.prepare(
        `INSERT INTO control_docs (kind, name, data, updated_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (kind, name) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
      ),
      controlInsert: db.prepare('INSERT INTO control_docs (kind, name, data, updated_at) VALUES (?, ?, ?, ?) ON CONFLICT (kind, name) DO NOTHING'),
      controlDelete: db.prepare('DELETE FROM control_docs WHERE kind = ? AND name = ?'),
      controlBump: db.prepare('UPDATE control_version SET version = version + 1 WHERE id = 0'),
      controlVersion: db.prepare('SELECT version FROM control_version WHERE id = 0'),
    };
  }

  private check(): void {
    if (this.closed) throw new FlowError('CLOSED', 'metastore is closed');
  }

  /** Runs one write and resolves once its commit is durable. */
  private async write<T>(what: string, fn: () => T): Promise<T> {
    const result = this.run(what, fn);
    if (this.walSync) await this.walSync.sync();
    return result;
  }

  /** Runs one write that resolves at commit; the sync that makes it durable is started, not waited for. */
  private committed<T>(what: string, fn: () => T): T {
    const result = this.run(what, fn);
    // A failed sync is reported to the next write that waits for one.
    this.walSync?.sync().catch(() => undefined);
    return result;
  }

  /** fdatasyncs of the journal made so far (commits share them); for tests. */
  get journalSyncs(): number {
    return this.walSync?.syncs ?? 0;
  }

  /** Runs one synchronous database call, turning SQLite failures into FlowErrors. */
  private run<T>(what: string, fn: () => T): T {
    this.check();
    try {
      return fn();
    } catch (err) {
      if (err instanceof FlowError) throw err;
      const code = sqliteCode(err);
      if (code === 'SQLITE_CONSTRAINT_FOREIGNKEY') throw new FlowError('NOT_FOUND', `${what}: stream not found`, { cause: err });
      // A full disk (SQLITE_FULL, or an I/O error whose errno was ENOSPC) is retriable once space returns.
      if (code === 'SQLITE_FULL' || isNoSpace(err)) throw new FlowError('STORAGE_FULL', `${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      throw new FlowError('STORAGE_ERROR', `${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }

  async createStream(def: StreamDef): Promise<void> {
    checkStreamDef(def);
    await this.write('createStream', () => {
      try {
        this.s.insertStream.run(def.name, def.partitions, JSON.stringify(def.bindings), def.retentionMs, def.createdAt, settingsColumn(def), def.id ?? null);
      } catch (err) {
        if (sqliteCode(err) === 'SQLITE_CONSTRAINT_PRIMARYKEY') {
          throw new FlowError('ALREADY_EXISTS', `stream "${def.name}" already exists`, { cause: err });
        }
        throw err;
      }
    });
  }

  async listStreams(): Promise<StreamDef[]> {
    return this.run('listStreams', () => (this.s.listStreams.all() as StreamRow[]).map(toStream));
  }

  async updateStream(def: StreamDef): Promise<void> {
    checkStreamDef(def);
    await this.write('updateStream', () => {
      const r = this.s.updateStream.run(def.partitions, JSON.stringify(def.bindings), def.retentionMs, settingsColumn(def), def.name);
      if (r.changes === 0) throw new FlowError('NOT_FOUND', `stream "${def.name}" not found`);
    });
  }

  async deleteStream(name: string): Promise<void> {
    // Partitions, segments and offsets go with it through ON DELETE CASCADE, in the same statement.
    await this.write('deleteStream', () => {
      const r = this.s.deleteStream.run(name);
      if (r.changes === 0) throw new FlowError('NOT_FOUND', `stream "${name}" not found`);
    });
  }

  async getPartitionState(stream: string, partition: number): Promise<PartitionState | null> {
    return this.run('getPartitionState', () => {
      const r = this.s.getPartition.get(stream, partition) as PartitionRow | undefined;
      return r
        ? { stream: r.stream, partition: r.partition, logStartOffset: r.log_start_offset, flushedOffset: r.flushed_offset, epoch: r.epoch }
        : null;
    });
  }

  async openPartition(stream: string, partition: number): Promise<number> {
    checkInt('partition', partition);
    return this.write('openPartition', () => this.txOpenPartition(stream, partition));
  }

  /** Never moves the log start offset backwards (see upsertLogStart); NOT_FOUND if the stream is absent. */
  async setLogStartOffset(stream: string, partition: number, offset: number, epoch: number): Promise<void> {
    checkInt('partition', partition);
    checkInt('offset', offset);
    checkInt('epoch', epoch);
    await this.write('setLogStartOffset', () => this.txSetLogStart(stream, partition, offset, epoch));
  }

  async commitSegment(seg: SegmentMeta, epoch: number): Promise<void> {
    checkSegment(seg, epoch);
    await this.write('commitSegment', () => this.txCommitSegment(seg, epoch));
  }

  async listSegments(stream: string, partition: number): Promise<SegmentMeta[]> {
    return this.run('listSegments', () => (this.s.listSegments.all(stream, partition) as SegmentRow[]).map(toSegment));
  }

  async deleteSegment(stream: string, partition: number, baseOffset: number, epoch: number): Promise<void> {
    checkInt('epoch', epoch);
    await this.write('deleteSegment', () => this.txDeleteSegment(stream, partition, baseOffset, epoch));
  }

  async fetchOffset(group: string, stream: string, partition: number): Promise<ConsumerOffset | null> {
    return this.run('fetchOffset', () => {
      const r = this.s.fetchOffset.get(group, stream, partition) as OffsetRow | undefined;
      return r ? toOffset(r) : null;
    });
  }

  /** `_fence` is for cluster mode, which needs PostgreSQL: an embedded metastore has a single writer. */
  async commitOffsets(group: string, offsets: OffsetCommit[], _fence?: number): Promise<void> {
    for (const o of offsets) {
      checkInt('partition', o.partition);
      // Kafka clients commit -1 to mean "no position"; anything lower is nonsense.
      checkInt('offset', o.offset, -1);
    }
    const now = Date.now();
    await this.write('commitOffsets', () =>
      this.db.transaction(() => {
        for (const o of offsets) this.s.upsertOffset.run(group, o.stream, o.partition, o.offset, o.metadata, now);
      })(),
    );
  }

  async listGroups(): Promise<string[]> {
    return this.run('listGroups', () => (this.s.listGroups.all() as Array<{ group_id: string }>).map((r) => r.group_id));
  }

  async deleteGroup(group: string): Promise<void> {
    await this.write('deleteGroup', () => this.s.deleteGroup.run(group));
  }

  async deleteOffsets(group: string, partitions: ReadonlyArray<{ stream: string; partition: number }>, _fence?: number): Promise<void> {
    for (const p of partitions) checkInt('partition', p.partition);
    await this.write('deleteOffsets', () =>
      this.db.transaction(() => {
        for (const p of partitions) this.s.deleteOffset.run(group, p.stream, p.partition);
      })(),
    );
  }

  async allocateProducerIds(count: number): Promise<number> {
    checkInt('count', count, 1);
    return this.write('allocateProducerIds', () =>
      this.db.transaction(() => {
        const first = (this.s.producerIdNext.get() as { next_id: number }).next_id;
        this.s.producerIdAdvance.run(count);
        return first;
      }).immediate(),
    );
  }

  async putProducerState(stream: string, partition: number, endOffset: number, state: string, epoch: number): Promise<void> {
    checkInt('epoch', epoch);
    await this.write('putProducerState', () => this.txPutProducerState(stream, partition, endOffset, state, epoch));
  }

  async getProducerState(stream: string, partition: number): Promise<{ endOffset: number; state: string } | null> {
    return this.run('getProducerState', () => {
      const r = this.s.producerStateGet.get(stream, partition) as { end_offset: number; state: string } | undefined;
      return r ? { endOffset: r.end_offset, state: r.state } : null;
    });
  }

  async listOffsets(group: string): Promise<ConsumerOffset[]> {
    return this.run('listOffsets', () => (this.s.listOffsets.all(group) as OffsetRow[]).map(toOffset));
  }

  // ---------------------------------------------------------------- sessions (SessionStore)

  async getSession(clientId: string): Promise<SessionRecord | null> {
    return this.run('getSession', () => {
      const r = this.s.sessionGet.get(clientId) as SessionRow | undefined;
      return r ? toSession(r) : null;
    });
  }

  async putSession(rec: SessionRecord): Promise<void> {
    if (typeof rec.clientId !== 'string') throw new FlowError('INVALID_ARGUMENT', 'session client id must be a string');
    if (rec.expiresAt !== null) checkInt('expiresAt', rec.expiresAt);
    await this.write('putSession', () => this.s.sessionPut.run(rec.clientId, rec.protocol, rec.state, rec.expiresAt, rec.updatedAt));
  }

  async deleteSession(clientId: string): Promise<void> {
    await this.write('deleteSession', () => this.txDeleteSession(clientId));
  }

  async listSessions(protocol: string): Promise<SessionRecord[]> {
    return this.run('listSessions', () => (this.s.sessionList.all(protocol) as SessionRow[]).map(toSession));
  }

  async readQueue(clientId: string, limit: number): Promise<QueuedEntry[]> {
    checkInt('limit', limit);
    return this.run('readQueue', () => this.s.queueRead.all(clientId, limit) as QueuedEntry[]);
  }

  async ackQueue(clientId: string, upTo: number): Promise<void> {
    this.committed('ackQueue', () => this.txAckQueue(clientId, upTo));
  }

  async updateQueue(clientId: string, changes: QueueChanges, maxLength: number): Promise<{ seqs: number[]; dropped: number }> {
    checkInt('maxLength', maxLength, 1);
    return this.committed('updateQueue', () => this.txUpdateQueue(clientId, changes, maxLength));
  }

  // ---------------------------------------------------------------- retained messages (RetainedStore)

  async putRetained(topic: string, data: Buffer): Promise<void> {
    await this.write('putRetained', () => this.s.retainedPut.run(topic, data, Date.now()));
  }

  async deleteRetained(topic: string): Promise<void> {
    await this.write('deleteRetained', () => this.s.retainedDelete.run(topic));
  }

  async listRetained(): Promise<RetainedEntry[]> {
    return this.run('listRetained', () => this.s.retainedList.all() as RetainedEntry[]);
  }

  // ---------------------------------------------------------------- JetStream consumer state (ConsumerStateStore)
  // Write coalescing: JetStream acks move consumers' positions often. The puts made within one turn of the event
  // loop are written at its end (setImmediate) in one transaction, the latest record per consumer: on this VM an
  // upsert committed on its own cost ~63 us (each commit appends to the -wal file), ~8 us inside a transaction.
  // Every other consumer call first writes the pending puts, synchronously, so calls still take effect in the
  // order they were made (per-key order) and reads see every put made before them. Puts resolve once durable.

  async putConsumer(rec: ConsumerRecord): Promise<void> {
    checkConsumerRecord(rec);
    this.check();
    this.consumerStats.puts++;
    let batch = this.consumerBatch;
    if (batch === null) {
      let resolve!: () => void;
      let reject!: (err: unknown) => void;
      const done = new Promise<void>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      batch = this.consumerBatch = { recs: new Map(), done, resolve, reject };
      setImmediate(() => this.flushConsumers());
    }
    batch.recs.set(`${rec.stream}\u0000${rec.name}`, consumerValues(rec));
    return batch.done;
  }

  /** Writes the pending puts (if any) in one transaction; their promise settles once the commit is durable. */
  private flushConsumers(): void {
    const batch = this.consumerBatch;
    if (batch === null) return;
    this.consumerBatch = null;
    this.consumerStats.writes++;
    try {
      this.run('putConsumer', () => this.txPutConsumers([...batch.recs.values()]));
    } catch (err) {
      batch.reject(err);
      return;
    }
    if (this.walSync) this.walSync.sync().then(batch.resolve, batch.reject);
    else batch.resolve();
  }

  async getConsumer(stream: string, name: string): Promise<ConsumerRecord | null> {
    this.flushConsumers();
    return this.run('getConsumer', () => {
      const r = this.s.consumerGet.get(stream, name) as ConsumerRow | undefined;
      return r ? toConsumer(r) : null;
    });
  }

  async listConsumers(stream?: string): Promise<ConsumerRecord[]> {
    this.flushConsumers();
    return this.run('listConsumers', () =>
      ((stream === undefined ? this.s.consumerListAll.all() : this.s.consumerListStream.all(stream)) as ConsumerRow[]).map(toConsumer),
    );
  }

  async deleteConsumer(stream: string, name: string): Promise<void> {
    this.flushConsumers();
    await this.write('deleteConsumer', () => this.s.consumerDelete.run(stream, name));
  }

  async deleteConsumers(stream: string): Promise<void> {
    this.flushConsumers();
    await this.write('deleteConsumers', () => this.s.consumerDeleteStream.run(stream));
  }

  // ---------------------------------------------------------------- queue catalog (QueueCatalog)

  async putQueue(def: QueueDef): Promise<void> {
    checkQueueDef(def);
    await this.write('putQueue', () =>
      this.s.queueDefPut.run(def.name, def.durable ? 1 : 0, def.exclusiveOwner, def.autoDelete ? 1 : 0, toJson(def.arguments), toJson(def.rawArguments), def.createdAt),
    );
  }

  async deleteQueue(name: string): Promise<void> {
    // The bindings to it go in the same transaction: a restart never finds a binding to a queue that is gone.
    await this.write('deleteQueue', () =>
      this.db.transaction(() => {
        this.s.bindingsDeleteTo.run('queue', name);
        this.s.queueDefDelete.run(name);
      })(),
    );
  }

  async listQueues(): Promise<QueueDef[]> {
    return this.run('listQueues', () => (this.s.queueDefList.all() as QueueDefRow[]).map(toQueueDef));
  }

  async putExchange(def: ExchangeDef): Promise<void> {
    checkExchangeDef(def);
    await this.write('putExchange', () =>
      this.s.exchangeDefPut.run(
        def.name,
        def.type,
        def.durable ? 1 : 0,
        def.autoDelete ? 1 : 0,
        def.internal ? 1 : 0,
        def.alternateExchange ?? null,
        toJson(def.rawArguments),
        def.createdAt,
      ),
    );
  }

  async deleteExchange(name: string): Promise<void> {
    await this.write('deleteExchange', () =>
      this.db.transaction(() => {
        this.s.bindingsDeleteFrom.run(name);
        this.s.bindingsDeleteTo.run('exchange', name);
        this.s.exchangeDefDelete.run(name);
      })(),
    );
  }

  async listExchanges(): Promise<ExchangeDef[]> {
    return this.run('listExchanges', () => (this.s.exchangeDefList.all() as ExchangeDefRow[]).map(toExchangeDef));
  }

  async putBinding(b: BindingDef): Promise<void> {
    const values = bindingValues(b);
    await this.write('putBinding', () => this.s.bindingPut.run(...values));
  }

  async deleteBinding(b: BindingDef): Promise<void> {
    const [key] = bindingValues(b);
    await this.write('deleteBinding', () => this.s.bindingDelete.run(key));
  }

  async listBindings(): Promise<BindingDef[]> {
    return this.run('listBindings', () => (this.s.bindingList.all() as BindingDefRow[]).map(toBindingDef));
  }

  // ---------------------------------------------------------------- control plane documents (ControlStore)

  async listControl(kind: ControlKind): Promise<ControlRecord[]> {
    checkControl(kind, '-');
    return this.run('listControl', () => (this.s.controlList.all(kind) as ControlRow[]).map(toControl));
  }

  async getControl(kind: ControlKind, name: string): Promise<ControlRecord | null> {
    checkControl(kind, name);
    const row = this.run('getControl', () => this.s.controlGet.get(kind, name) as ControlRow | undefined);
    return row ? toControl(row) : null;
  }

  async putControl(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<void> {
    const json = checkControl(kind, name, data);
    await this.write('putControl', () => this.txControl('put', kind, name, json));
  }

  async putControlIfAbsent(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<boolean> {
    const json = checkControl(kind, name, data);
    // INSERT ... ON CONFLICT DO NOTHING decides under SQLite's write lock: two processes seeding one name cannot
    // both create it.
    return this.write('putControlIfAbsent', () => this.txControl('insert', kind, name, json));
  }

  async deleteControl(kind: ControlKind, name: string): Promise<boolean> {
    checkControl(kind, name);
    return this.write('deleteControl', () => this.txControl('delete', kind, name, ''));
  }

  async controlVersion(): Promise<number> {
    return this.run('controlVersion', () => (this.s.controlVersion.get() as { version: number }).version);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.flushConsumers();
    this.closed = true;
    await this.walSync?.close();
    this.db.close();
  }
}
