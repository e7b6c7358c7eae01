/**
 * The SQLite metastore's state (`SqliteState`, the base of `SqliteMetastore`): the database, its statements (each
 * prepared once) and the transactions that check a partition's epoch or a session queue's counter, the pending
 * JetStream consumer puts, and how a call runs: `run` (SQLite failures as FlowErrors), `write` (resolves once the
 * commit is durable: the -wal file's fdatasync, group-committed off the event loop by WalFileSync), `committed`.
 *
 * The resources are functions over it, mirrored by the PostgreSQL backend: sqlite-streams.ts (streams, partitions,
 * segments, producer ids and state), sqlite-groups.ts (consumer offsets, JetStream consumers), sqlite-sessions.ts
 * (sessions, session queues, retained messages), sqlite-catalog.ts (queues, exchanges, bindings, control documents).
 */
import { open, type FileHandle } from 'node:fs/promises';
import Database from 'better-sqlite3';
import { CoalescingTask, FlowError } from '../../core/index.js';
import type { QueueChanges } from '../../core/index.js';
import { isNoSpace, writeError } from '../fs-util.js';
import { consumerValues, type SegmentRow } from './rows.js';
import type { SegmentMeta } from './types.js';
import { bumpsVersion, type ControlKind } from './control-store.js';

export interface QueueStateRow {
  next_seq: number;
  length: number;
  marks: string | null;
}

export interface PartitionRow {
  stream: string;
  partition: number;
  log_start_offset: number;
  flushed_offset: number;
  epoch: number;
}

export function sqliteCode(err: unknown): string | undefined {
  return err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : undefined;
}

/** fdatasync of SQLite's -wal file off the event loop, shared by the commits that one sync covers. */
export class WalFileSync {
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

export class SqliteState {
  closed = false;

  readonly s: ReturnType<SqliteState['prepare']>;
  readonly txOpenPartition: (stream: string, partition: number) => number;
  readonly txCommitSegment: (seg: SegmentMeta, epoch: number) => void;
  readonly txSetLogStart: (stream: string, partition: number, offset: number, epoch: number) => void;
  readonly txDeleteSegment: (stream: string, partition: number, baseOffset: number, epoch: number) => void;
  readonly txReplaceSegment: (seg: SegmentMeta, oldObjectKey: string, epoch: number) => boolean;
  readonly txPutProducerState: (stream: string, partition: number, endOffset: number, state: string, epoch: number) => void;
  readonly txAckQueue: (clientId: string, upTo: number) => void;
  readonly txDeleteSession: (clientId: string) => void;
  readonly txUpdateQueue: (clientId: string, changes: QueueChanges, maxLength: number) => { seqs: number[]; dropped: number };
  readonly txPutConsumers: (rows: ReturnType<typeof consumerValues>[]) => void;
  /** A control document change and the version bump, in one transaction (see ControlStore). */
  readonly txControl: (op: 'put' | 'insert' | 'delete', kind: ControlKind, name: string, json: string) => boolean;
  /** The consumer puts made in this turn of the event loop, not written yet (see putConsumer). */
  consumerBatch: {
    /** Row values by (stream, name): the latest put of each consumer. */
    recs: Map<string, ReturnType<typeof consumerValues>>;
    done: Promise<void>;
    resolve(): void;
    reject(err: unknown): void;
  } | null = null;
  /** putConsumer calls, and the transactions that wrote them (fewer when puts were coalesced); for tests. */
  readonly consumerStats = { puts: 0, writes: 0 };

  /** null for an in-memory database, which has nothing to make durable. */
  readonly walSync: WalFileSync | null;

  protected constructor(
    readonly db: Database.Database,
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
      this.s.insertSegment.run(seg.stream, seg.partition, seg.baseOffset, seg.endOffset, seg.objectKey, seg.size, seg.maxTimestamp, seg.createdAt);
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
    this.txReplaceSegment = db.transaction((seg: SegmentMeta, oldObjectKey: string, epoch: number) => {
      checkEpoch(seg.stream, seg.partition, epoch);
      const r = this.s.replaceSegment.run(seg.objectKey, seg.size, seg.maxTimestamp, seg.stream, seg.partition, seg.baseOffset, seg.endOffset, oldObjectKey);
      return r.changes === 1;
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
      if (changes.marks !== undefined) {
        const marks = { ...(st?.marks ? (JSON.parse(st.marks) as Record<string, number>) : {}), ...changes.marks };
        this.s.queueMarksPut.run(JSON.stringify(marks), clientId);
      }
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

  /** Every statement is prepared once; better-sqlite3 statements are reusable and this keeps calls cheap. */
  prepare() {
    const db = this.db;
    return {
      insertStream: db.prepare('INSERT INTO streams (name, partitions, bindings, retention_ms, created_at, settings, stream_id) VALUES (?, ?, ?, ?, ?, ?, ?)'),
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
      replaceSegment: db.prepare(
        'UPDATE segments SET object_key = ?, size = ?, max_timestamp = ? WHERE stream = ? AND partition = ? AND base_offset = ? AND end_offset = ? AND object_key = ?',
      ),
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
      sessionGet: db.prepare('SELECT c.*, q.marks FROM client_sessions c LEFT JOIN session_queues q ON q.client_id = c.client_id WHERE c.client_id = ?'),
      sessionPut: db.prepare(
        `INSERT INTO client_sessions (client_id, protocol, state, expires_at, updated_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (client_id) DO UPDATE SET protocol = excluded.protocol, state = excluded.state,
           expires_at = excluded.expires_at, updated_at = excluded.updated_at`,
      ),
      sessionDelete: db.prepare('DELETE FROM client_sessions WHERE client_id = ?'),
      sessionList: db.prepare(
        'SELECT c.*, q.marks FROM client_sessions c LEFT JOIN session_queues q ON q.client_id = c.client_id WHERE c.protocol = ? ORDER BY c.client_id',
      ),
      queueState: db.prepare('SELECT next_seq, length, marks FROM session_queues WHERE client_id = ?'),
      queueMarksPut: db.prepare('UPDATE session_queues SET marks = ? WHERE client_id = ?'),
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

  check(): void {
    if (this.closed) throw new FlowError('CLOSED', 'metastore is closed');
  }

  /** Runs one write and resolves once its commit is durable. */
  async write<T>(what: string, fn: () => T): Promise<T> {
    const result = this.run(what, fn);
    if (this.walSync) await this.walSync.sync();
    return result;
  }

  /** Runs one write that resolves at commit; the sync that makes it durable is started, not waited for. */
  committed<T>(what: string, fn: () => T): T {
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
  run<T>(what: string, fn: () => T): T {
    this.check();
    try {
      return fn();
    } catch (err) {
      if (err instanceof FlowError) throw err;
      const code = sqliteCode(err);
      if (code === 'SQLITE_CONSTRAINT_FOREIGNKEY') throw new FlowError('NOT_FOUND', `${what}: stream not found`, { cause: err });
      // A full disk (SQLITE_FULL, or an I/O error whose errno was ENOSPC) is retriable once space returns.
      if (code === 'SQLITE_FULL' || isNoSpace(err))
        throw new FlowError('STORAGE_FULL', `${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      throw new FlowError('STORAGE_ERROR', `${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }
}
