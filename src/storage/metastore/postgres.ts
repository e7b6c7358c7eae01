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
 */
import { checkConsumerRecord, FlowError } from '../../core/index.js';
import type { BindingDef, ConsumerRecord, ExchangeDef, OffsetCommit, QueueChanges, QueueDef, QueuedEntry, RetainedEntry, SessionRecord } from '../../core/index.js';
import {
  connectPool,
  KeyedSerializer,
  migratePostgres,
  type PgPool,
  type PostgresOptions,
} from '../postgres-util.js';
import { postgresMigrations } from './postgres-migrations.js';
import {
  bindingValues,
  checkExchangeDef,
  checkInt,
  checkInt32,
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

interface ControlRow extends Record<string, unknown> {
  kind: ControlKind;
  name: string;
  data: string;
  updated_at: number;
}

function toControl(r: ControlRow): ControlRecord {
  return { kind: r.kind, name: r.name, data: JSON.parse(r.data) as Record<string, unknown>, updatedAt: Number(r.updated_at) };
}

export type { PostgresOptions };

// Key categories of the serializer (see KeyedSerializer); one per kind of key named in the contract.
const STREAM = 's';
const PARTITION = 'p';
const GROUP = 'g';
const CLIENT = 'c';
const TOPIC = 't';
/**
 * Queue, exchange and binding definitions: one key for all of them. Deleting a queue or an exchange deletes
 * bindings, so the calls must keep their order across the three kinds; declarations are rare enough for that.
 */
const CATALOG = 'd';
/**
 * JetStream consumer state: keyed by the stream, not by (stream, consumer), so that deleteConsumers and
 * listConsumers of a stream are ordered with the writes of all its consumers. The puts queued behind a stream's
 * running call are one batch (see putConsumer), so the key costs no round trips.
 */
const CONSUMERS = 'j';

/** The puts of one stream's consumers waiting behind that stream's running call: written as one statement. */
interface ConsumerBatch {
  /** Latest record per consumer name, with the owner epoch its put was fenced by (cluster mode), if any. */
  readonly recs: Map<string, { rec: ConsumerRecord; epoch: number | undefined }>;
  /** Settles when the batch is written: the puts refused as fenced, by name (the others were written). */
  done: Promise<Map<string, unknown>>;
}

/**
 * Control plane documents, keyed by (kind, name); listControl and controlVersion wait for every control write
 * issued before them (a broker that just wrote reads its own write back).
 */
const CONTROL = 'k';

const partKey = (stream: string, partition: number): string => `${partition}\u0000${stream}`;

/**
 * A session write fenced by the session's owner epoch (cluster mode): the writes as data-modifying CTEs (`ctes`,
 * "name AS (...)" each) and the owner check (`flowmq_owner_check`, src/cluster/pg-store.ts: FENCED unless the
 * 'session' row of $1 holds the epoch in `$<epochParam>`) as the statement's own result, so all run in one statement,
 * one transaction: a refused check rolls the writes back. Whichever runs first, the check's FOR SHARE lock either
 * makes a concurrent claim wait for these writes to commit (the new owner then loads them) or, the claim committed,
 * sees the new epoch and refuses.
 */
function sessionFenced(ctes: string[], epochParam: number): string {
  return `WITH ${ctes.join(',\n     ')}\n SELECT flowmq_owner_check('session', $1, $${epochParam})`;
}

export class PostgresMetastore implements Metastore {
  readonly kind = 'postgres' as const;
  private closed = false;
  private readonly chain = new KeyedSerializer();
  /** Per stream: the consumer batch queued and not started yet, which later puts join (see putConsumer). */
  private readonly consumerBatches = new Map<string, ConsumerBatch>();
  /** putConsumer calls, and the statements that wrote them (fewer when puts were coalesced); for figures. */
  private readonly consumerStats = { puts: 0, writes: 0 };
  /** Migrations this open applied (0 when another broker had already done them); for tests. */
  migrationsApplied = 0;

  private constructor(private readonly db: PgPool) {}

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

  private check(): void {
    if (this.closed) throw new FlowError('CLOSED', 'metastore is closed');
  }

  /** Runs `fn` after the calls issued before it on the same key. */
  private keyed<T>(category: string, key: string, fn: () => Promise<T>): Promise<T> {
    this.check();
    return this.chain.run(category, key, fn);
  }

  /** A read over every key of a category: waits for the calls of that category issued before it. */
  private async afterAll<T>(category: string, fn: () => Promise<T>): Promise<T> {
    this.check();
    await this.chain.settled(category);
    return fn();
  }

  private q<R extends Record<string, unknown>>(what: string, text: string, values?: unknown[]) {
    // Named statements are parsed and planned once per connection.
    return this.db.query<R>(what, { name: `fm_${what}`, text }, values);
  }

  // ---------------------------------------------------------------- streams

  async createStream(def: StreamDef): Promise<void> {
    checkStreamDef(def);
    await this.keyed(STREAM, def.name, async () => {
      try {
        await this.q(
          'createStream',
          'INSERT INTO streams (name, partitions, bindings, retention_ms, created_at, settings, stream_id) VALUES ($1, $2, $3, $4, $5, $6, $7)',
          [def.name, def.partitions, JSON.stringify(def.bindings), def.retentionMs, def.createdAt, settingsColumn(def), def.id ?? null],
        );
      } catch (err) {
        const cause = err instanceof FlowError ? err.cause : undefined;
        if (cause instanceof Error && 'code' in cause && cause.code === '23505') {
          throw new FlowError('ALREADY_EXISTS', `stream "${def.name}" already exists`, { cause });
        }
        throw err;
      }
    });
  }

  async listStreams(): Promise<StreamDef[]> {
    return this.afterAll(STREAM, async () => {
      const r = await this.q<StreamRow & Record<string, unknown>>('listStreams', 'SELECT * FROM streams ORDER BY name');
      return r.rows.map(toStream);
    });
  }

  async updateStream(def: StreamDef): Promise<void> {
    checkStreamDef(def);
    await this.keyed(STREAM, def.name, async () => {
      // created_at is left alone: it names the stream's incarnation (segment object keys include it).
      const r = await this.q('updateStream', 'UPDATE streams SET partitions = $1, bindings = $2, retention_ms = $3, settings = $4 WHERE name = $5', [
        def.partitions,
        JSON.stringify(def.bindings),
        def.retentionMs,
        settingsColumn(def),
        def.name,
      ]);
      if (r.rowCount === 0) throw new FlowError('NOT_FOUND', `stream "${def.name}" not found`);
    });
  }

  async deleteStream(name: string): Promise<void> {
    // Partitions, segments, offsets and producer state go with it through ON DELETE CASCADE, in one statement.
    await this.keyed(STREAM, name, async () => {
      const r = await this.q('deleteStream', 'DELETE FROM streams WHERE name = $1', [name]);
      if (r.rowCount === 0) throw new FlowError('NOT_FOUND', `stream "${name}" not found`);
    });
  }

  // ---------------------------------------------------------------- partitions

  async openPartition(stream: string, partition: number): Promise<number> {
    checkInt32('partition', partition);
    return this.keyed(PARTITION, partKey(stream, partition), async () => {
      // One statement: the bump is atomic, and it waits for a mutation holding the row's lock (the epoch check).
      const r = await this.q<{ epoch: number }>(
        'openPartition',
        `INSERT INTO partitions AS p (stream, partition, epoch) VALUES ($1, $2, 1)
         ON CONFLICT (stream, partition) DO UPDATE SET epoch = p.epoch + 1 RETURNING p.epoch`,
        [stream, partition],
      );
      return r.rows[0].epoch;
    });
  }

  async getPartitionState(stream: string, partition: number): Promise<PartitionState | null> {
    return this.keyed(PARTITION, partKey(stream, partition), async () => {
      const r = await this.q<{ log_start_offset: number; flushed_offset: number; epoch: number }>(
        'getPartitionState',
        'SELECT log_start_offset, flushed_offset, epoch FROM partitions WHERE stream = $1 AND partition = $2',
        [stream, partition],
      );
      if (r.rows.length === 0) return null;
      const row = r.rows[0];
      return { stream, partition, logStartOffset: row.log_start_offset, flushedOffset: row.flushed_offset, epoch: row.epoch };
    });
  }

  async setLogStartOffset(stream: string, partition: number, offset: number, epoch: number): Promise<void> {
    checkInt32('partition', partition);
    checkInt('offset', offset);
    checkInt('epoch', epoch);
    await this.keyed(PARTITION, partKey(stream, partition), () =>
      this.q('setLogStartOffset', 'SELECT flowmq_set_log_start($1, $2, $3, $4)', [stream, partition, offset, epoch]),
    );
  }

  async commitSegment(seg: SegmentMeta, epoch: number): Promise<void> {
    checkSegment(seg, epoch);
    await this.keyed(PARTITION, partKey(seg.stream, seg.partition), () =>
      this.q('commitSegment', 'SELECT flowmq_commit_segment($1, $2, $3, $4, $5, $6, $7, $8, $9)', [
        seg.stream,
        seg.partition,
        seg.baseOffset,
        seg.endOffset,
        seg.objectKey,
        seg.size,
        seg.maxTimestamp,
        seg.createdAt,
        epoch,
      ]),
    );
  }

  async listSegments(stream: string, partition: number): Promise<SegmentMeta[]> {
    return this.keyed(PARTITION, partKey(stream, partition), async () => {
      const r = await this.q<SegmentRow & Record<string, unknown>>(
        'listSegments',
        'SELECT * FROM segments WHERE stream = $1 AND partition = $2 ORDER BY base_offset',
        [stream, partition],
      );
      return r.rows.map(toSegment);
    });
  }

  async deleteSegment(stream: string, partition: number, baseOffset: number, epoch: number): Promise<void> {
    checkInt('epoch', epoch);
    await this.keyed(PARTITION, partKey(stream, partition), () =>
      this.q('deleteSegment', 'SELECT flowmq_delete_segment($1, $2, $3, $4)', [stream, partition, baseOffset, epoch]),
    );
  }

  async putProducerState(stream: string, partition: number, endOffset: number, state: string, epoch: number): Promise<void> {
    checkInt32('partition', partition);
    checkInt('endOffset', endOffset);
    checkInt('epoch', epoch);
    await this.keyed(PARTITION, partKey(stream, partition), () =>
      this.q('putProducerState', 'SELECT flowmq_put_producer_state($1, $2, $3, $4, $5)', [stream, partition, endOffset, state, epoch]),
    );
  }

  async getProducerState(stream: string, partition: number): Promise<{ endOffset: number; state: string } | null> {
    return this.keyed(PARTITION, partKey(stream, partition), async () => {
      const r = await this.q<{ end_offset: number; state: string }>(
        'getProducerState',
        'SELECT end_offset, state FROM producer_state WHERE stream = $1 AND partition = $2',
        [stream, partition],
      );
      return r.rows.length > 0 ? { endOffset: r.rows[0].end_offset, state: r.rows[0].state } : null;
    });
  }

  // ---------------------------------------------------------------- offsets and producer ids

  async commitOffsets(group: string, offsets: OffsetCommit[], fence?: number): Promise<void> {
    for (const o of offsets) {
      checkInt32('partition', o.partition);
      // Kafka clients commit -1 to mean "no position"; anything lower is nonsense.
      checkInt('offset', o.offset, -1);
    }
    if (fence !== undefined) checkInt('fence', fence);
    if (offsets.length === 0) return;
    // One statement, so all or none (a foreign-key failure on one stream fails the whole batch). A partition
    // named twice keeps its last value, as a loop of upserts would (ON CONFLICT cannot touch a row twice).
    const last = new Map<string, OffsetCommit>();
    for (const o of offsets) last.set(partKey(o.stream, o.partition), o);
    const list = [...last.values()];
    const params: unknown[] = [
      group,
      list.map((o) => o.stream),
      list.map((o) => o.partition),
      list.map((o) => o.offset),
      list.map((o) => o.metadata),
      Date.now(),
    ];
    // Cluster mode: the group's owner row must still hold the coordinator's epoch, checked in the same statement
    // (flowmq_owner_check, src/cluster/pg-store.ts: it raises FMF01 = FENCED, and its row lock makes a claim wait
    // for this commit), so a coordinator whose group moved can never overwrite what the new one committed.
    let fenced = '';
    if (fence !== undefined) {
      params.push(fence);
      fenced = `WITH fence AS (SELECT flowmq_owner_check('group', $1, $7))`;
    }
    await this.keyed(GROUP, group, () =>
      this.q(
        // Named statements: one name per text.
        fence !== undefined ? 'commitOffsetsFenced' : 'commitOffsets',
        `${fenced}
         INSERT INTO consumer_offsets (group_id, stream, partition, "offset", metadata, committed_at)
         SELECT $1, s, p, o, m, $6 FROM ${fence !== undefined ? 'fence, ' : ''}unnest($2::text[], $3::integer[], $4::bigint[], $5::text[]) AS t(s, p, o, m)
         ON CONFLICT (group_id, stream, partition)
         DO UPDATE SET "offset" = excluded."offset", metadata = excluded.metadata, committed_at = excluded.committed_at`,
        params,
      ),
    );
  }

  async fetchOffset(group: string, stream: string, partition: number): Promise<ConsumerOffset | null> {
    return this.keyed(GROUP, group, async () => {
      const r = await this.q<OffsetRow & Record<string, unknown>>(
        'fetchOffset',
        'SELECT * FROM consumer_offsets WHERE group_id = $1 AND stream = $2 AND partition = $3',
        [group, stream, partition],
      );
      return r.rows.length > 0 ? toOffset(r.rows[0]) : null;
    });
  }

  async listOffsets(group: string): Promise<ConsumerOffset[]> {
    return this.keyed(GROUP, group, async () => {
      const r = await this.q<OffsetRow & Record<string, unknown>>(
        'listOffsets',
        'SELECT * FROM consumer_offsets WHERE group_id = $1 ORDER BY stream, partition',
        [group],
      );
      return r.rows.map(toOffset);
    });
  }

  async listGroups(): Promise<string[]> {
    return this.afterAll(GROUP, async () => {
      const r = await this.q<{ group_id: string }>('listGroups', 'SELECT DISTINCT group_id FROM consumer_offsets ORDER BY group_id');
      return r.rows.map((x) => x.group_id);
    });
  }

  async deleteGroup(group: string): Promise<void> {
    await this.keyed(GROUP, group, () => this.q('deleteGroup', 'DELETE FROM consumer_offsets WHERE group_id = $1', [group]));
  }

  async deleteOffsets(group: string, partitions: ReadonlyArray<{ stream: string; partition: number }>, fence?: number): Promise<void> {
    for (const p of partitions) checkInt32('partition', p.partition);
    if (fence !== undefined) checkInt('fence', fence);
    if (partitions.length === 0) return;
    const params: unknown[] = [group, partitions.map((p) => p.stream), partitions.map((p) => p.partition)];
    // One statement (all or none); fenced like commitOffsets, so a coordinator whose group moved deletes nothing.
    let fenced = '';
    if (fence !== undefined) {
      params.push(fence);
      fenced = `WITH fence AS (SELECT flowmq_owner_check('group', $1, $4))`;
    }
    await this.keyed(GROUP, group, () =>
      this.q(
        fence !== undefined ? 'deleteOffsetsFenced' : 'deleteOffsets',
        `${fenced}
         DELETE FROM consumer_offsets o USING ${fence !== undefined ? 'fence, ' : ''}unnest($2::text[], $3::integer[]) AS t(s, p)
         WHERE o.group_id = $1 AND o.stream = t.s AND o.partition = t.p`,
        params,
      ),
    );
  }

  async allocateProducerIds(count: number): Promise<number> {
    checkInt('count', count, 1);
    this.check();
    // One atomic UPDATE ... RETURNING: two brokers allocating at once get disjoint blocks.
    const r = await this.q<{ first: number }>(
      'allocateProducerIds',
      'UPDATE producer_ids SET next_id = next_id + $1 WHERE id = 0 RETURNING next_id - $1 AS first',
      [count],
    );
    return r.rows[0].first;
  }

  // ---------------------------------------------------------------- sessions (SessionStore)

  async getSession(clientId: string): Promise<SessionRecord | null> {
    return this.keyed(CLIENT, clientId, async () => {
      const r = await this.q<SessionRow & Record<string, unknown>>('getSession', 'SELECT * FROM client_sessions WHERE client_id = $1', [clientId]);
      return r.rows.length > 0 ? toSession(r.rows[0]) : null;
    });
  }

  async putSession(rec: SessionRecord, fence?: number): Promise<void> {
    if (typeof rec.clientId !== 'string') throw new FlowError('INVALID_ARGUMENT', 'session client id must be a string');
    if (rec.expiresAt !== null) checkInt('expiresAt', rec.expiresAt);
    checkInt('updatedAt', rec.updatedAt);
    if (fence !== undefined) checkInt('fence', fence, 1);
    const upsert = `INSERT INTO client_sessions (client_id, protocol, state, expires_at, updated_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (client_id) DO UPDATE SET protocol = excluded.protocol, state = excluded.state,
           expires_at = excluded.expires_at, updated_at = excluded.updated_at`;
    const values: unknown[] = [rec.clientId, rec.protocol, rec.state, rec.expiresAt, rec.updatedAt];
    await this.keyed(CLIENT, rec.clientId, () =>
      fence === undefined ? this.q('putSession', upsert, values) : this.q('putSession', sessionFenced([`w AS (${upsert})`], 6), [...values, fence]),
    );
  }

  async deleteSession(clientId: string, fence?: number): Promise<void> {
    if (fence !== undefined) checkInt('fence', fence, 1);
    // The record, its queue and its queue counter in one statement (data-modifying CTEs share one transaction).
    const q = 'q AS (DELETE FROM session_queue WHERE client_id = $1)';
    const m = 'm AS (DELETE FROM session_queue_meta WHERE client_id = $1)';
    const c = 'DELETE FROM client_sessions WHERE client_id = $1';
    await this.keyed(CLIENT, clientId, () =>
      fence === undefined
        ? this.q('deleteSession', `WITH ${q}, ${m} ${c}`, [clientId])
        : this.q('deleteSession', sessionFenced([q, m, `c AS (${c})`], 2), [clientId, fence]),
    );
  }

  async listSessions(protocol: string): Promise<SessionRecord[]> {
    return this.afterAll(CLIENT, async () => {
      const r = await this.q<SessionRow & Record<string, unknown>>(
        'listSessions',
        'SELECT * FROM client_sessions WHERE protocol = $1 ORDER BY client_id',
        [protocol],
      );
      return r.rows.map(toSession);
    });
  }

  async readQueue(clientId: string, limit: number): Promise<QueuedEntry[]> {
    checkInt('limit', limit);
    return this.keyed(CLIENT, clientId, async () => {
      const r = await this.q<{ seq: number; data: Buffer }>(
        'readQueue',
        'SELECT seq, data FROM session_queue WHERE client_id = $1 ORDER BY seq LIMIT $2',
        [clientId, limit],
      );
      return r.rows.map((x) => ({ seq: x.seq, data: x.data }));
    });
  }

  async ackQueue(clientId: string, upTo: number, fence?: number): Promise<void> {
    if (fence !== undefined) checkInt('fence', fence, 1);
    const d = 'd AS (DELETE FROM session_queue WHERE client_id = $1 AND seq <= $2 RETURNING 1)';
    const u = 'UPDATE session_queue_meta SET length = length - (SELECT count(*) FROM d) WHERE client_id = $1';
    await this.keyed(CLIENT, clientId, () =>
      fence === undefined
        ? this.q('ackQueue', `WITH ${d} ${u}`, [clientId, upTo])
        : this.q('ackQueue', sessionFenced([d, `u AS (${u})`], 3), [clientId, upTo, fence]),
    );
  }

  async updateQueue(clientId: string, changes: QueueChanges, maxLength: number, fence?: number): Promise<{ seqs: number[]; dropped: number }> {
    checkInt('maxLength', maxLength, 1);
    if (fence !== undefined) checkInt('fence', fence, 1);
    const replace = changes.replace ?? [];
    const remove = changes.remove ?? [];
    const append = changes.append ?? [];
    const values: unknown[] = [clientId, replace.map((e) => e.seq), replace.map((e) => e.data), remove, append, maxLength];
    return this.keyed(CLIENT, clientId, async () => {
      const r = await this.q<{ first_seq: number | null; dropped: number }>(
        'updateQueue',
        fence === undefined
          ? 'SELECT first_seq, dropped FROM flowmq_queue_update($1, $2::bigint[], $3::bytea[], $4::bigint[], $5::bytea[], $6)'
          : // The function yields one row, so the check in the select list runs exactly once, in the same statement.
            `SELECT first_seq, dropped, flowmq_owner_check('session', $1, $7) FROM flowmq_queue_update($1, $2::bigint[], $3::bytea[], $4::bigint[], $5::bytea[], $6)`,
        fence === undefined ? values : [...values, fence],
      );
      const { first_seq: first, dropped } = r.rows[0];
      const seqs = first === null ? [] : append.map((_, i) => first + i);
      return { seqs, dropped };
    });
  }

  // ---------------------------------------------------------------- retained messages (RetainedStore)

  async putRetained(topic: string, data: Buffer): Promise<void> {
    await this.keyed(TOPIC, topic, () =>
      this.q(
        'putRetained',
        `INSERT INTO retained_messages (topic, data, updated_at) VALUES ($1, $2, $3)
         ON CONFLICT (topic) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
        [topic, data, Date.now()],
      ),
    );
  }

  async deleteRetained(topic: string): Promise<void> {
    await this.keyed(TOPIC, topic, () => this.q('deleteRetained', 'DELETE FROM retained_messages WHERE topic = $1', [topic]));
  }

  async listRetained(): Promise<RetainedEntry[]> {
    return this.afterAll(TOPIC, async () => {
      const r = await this.q<{ topic: string; data: Buffer }>('listRetained', 'SELECT topic, data FROM retained_messages ORDER BY topic');
      return r.rows.map((x) => ({ topic: x.topic, data: x.data }));
    });
  }

  // ---------------------------------------------------------------- JetStream consumer state (ConsumerStateStore)

  /**
   * Write coalescing: JetStream acks move a consumer's position often, and every write of a record replaces it
   * whole. A put made while a call on the same stream is running joins the batch queued behind it, if there is
   * one, replacing the record it holds for the same consumer; the batch is then one upsert of one row per
   * consumer. So a stream's consumer writes cost one round trip at a time however many are made, and a put
   * superseded before it started is never sent. Joining is safe because the batch is the last call queued on the
   * stream's key: any other call on the key closes it (later puts start a new one), so the order seen by reads
   * and deletes is the order the calls were made. Every put of a batch resolves when the batch commits.
   */
  async putConsumer(rec: ConsumerRecord, epoch?: number): Promise<void> {
    checkConsumerRecord(rec);
    this.check();
    this.consumerStats.puts++;
    const copy = { rec: { ...rec, acked: rec.acked.slice() }, epoch };
    const refusedOf = (refused: Map<string, unknown>): void => {
      const err = refused.get(rec.name);
      if (err !== undefined) throw err;
    };
    const open = this.consumerBatches.get(rec.stream);
    if (open) {
      open.recs.set(rec.name, copy);
      return open.done.then(refusedOf);
    }
    const batch: ConsumerBatch = { recs: new Map([[rec.name, copy]]), done: Promise.resolve(new Map<string, unknown>()) };
    this.consumerBatches.set(rec.stream, batch);
    batch.done = this.keyed(CONSUMERS, rec.stream, () => {
      // Started: later puts form the next batch. (With nothing running on the key this runs at once, within
      // keyed(), so a lone put goes out without waiting.)
      if (this.consumerBatches.get(rec.stream) === batch) this.consumerBatches.delete(rec.stream);
      return this.writeConsumers([...batch.recs.values()]);
    });
    return batch.done.then(refusedOf);
  }

  /**
   * Writes a batch; resolves with the puts refused as FENCED (cluster mode: the broker no longer owns that consumer).
   * A fenced batch of several consumers is written again one by one, so that one consumer that moved away does not
   * fail the writes of the others (rare: it happens once per change of hands).
   */
  private async writeConsumers(entries: Array<{ rec: ConsumerRecord; epoch: number | undefined }>): Promise<Map<string, unknown>> {
    const refused = new Map<string, unknown>();
    try {
      await this.writeConsumerRows(entries);
    } catch (err) {
      if (!(err instanceof FlowError && err.code === 'FENCED')) throw err;
      if (entries.length === 1) refused.set(entries[0].rec.name, err);
      else {
        for (const e of entries) {
          try {
            await this.writeConsumerRows([e]);
          } catch (one) {
            if (!(one instanceof FlowError && one.code === 'FENCED')) throw one;
            refused.set(e.rec.name, one);
          }
        }
      }
    }
    return refused;
  }

  private async writeConsumerRows(entries: Array<{ rec: ConsumerRecord; epoch: number | undefined }>): Promise<void> {
    this.consumerStats.writes++;
    const cols: unknown[][] = [[], [], [], [], [], [], [], []];
    const epochs: Array<number | null> = [];
    for (const e of entries) {
      consumerValues(e.rec).forEach((v, i) => cols[i].push(v));
      epochs.push(e.epoch ?? null);
    }
    const upsert = `INSERT INTO jetstream_consumers (stream, name, config, created_at, delivered_seq, delivered_consumer_seq, ack_floor, acked)`;
    const conflict = `ON CONFLICT (stream, name) DO UPDATE SET config = excluded.config, created_at = excluded.created_at,
         delivered_seq = excluded.delivered_seq, delivered_consumer_seq = excluded.delivered_consumer_seq,
         ack_floor = excluded.ack_floor, acked = excluded.acked`;
    if (epochs.every((e) => e === null)) {
      // One statement for the batch (all rows or none); ON CONFLICT touches each row once: names are distinct.
      await this.q(
        'putConsumers',
        `${upsert}
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::text[])
         ${conflict}`,
        cols,
      );
      return;
    }
    // Cluster mode: every fenced row's owner check (flowmq_owner_check, which raises FENCED and holds the owner row
    // FOR SHARE until the commit) runs in the same statement, before any row is written (the cross join with the
    // one-row \`checked\` makes the planner evaluate it first; a volatile call is never pruned from a subquery).
    await this.q(
      'putConsumersFenced',
      `WITH input AS (
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::text[], $9::bigint[])
           AS x(stream, name, config, created_at, delivered_seq, delivered_consumer_seq, ack_floor, acked, epoch)
       ), checked AS (
         SELECT count(*) AS n FROM (SELECT flowmq_owner_check('consumer', i.stream || '/' || i.name, i.epoch) FROM input i WHERE i.epoch IS NOT NULL) c
       )
       ${upsert}
       SELECT i.stream, i.name, i.config, i.created_at, i.delivered_seq, i.delivered_consumer_seq, i.ack_floor, i.acked FROM input i, checked
       ${conflict}`,
      [...cols, epochs],
    );
  }

  /** Runs a call on a stream's consumer key, after the puts issued before it; later puts queue after it. */
  private consumerCall<T>(stream: string, fn: () => Promise<T>): Promise<T> {
    this.consumerBatches.delete(stream);
    return this.keyed(CONSUMERS, stream, fn);
  }

  async getConsumer(stream: string, name: string): Promise<ConsumerRecord | null> {
    return this.consumerCall(stream, async () => {
      const r = await this.q<ConsumerRow & Record<string, unknown>>(
        'getConsumer',
        'SELECT * FROM jetstream_consumers WHERE stream = $1 AND name = $2',
        [stream, name],
      );
      return r.rows.length > 0 ? toConsumer(r.rows[0]) : null;
    });
  }

  async listConsumers(stream?: string): Promise<ConsumerRecord[]> {
    if (stream === undefined) {
      // Puts made after this call must not join a batch the listing waits for.
      this.consumerBatches.clear();
      return this.afterAll(CONSUMERS, async () => {
        const r = await this.q<ConsumerRow & Record<string, unknown>>('listAllConsumers', 'SELECT * FROM jetstream_consumers ORDER BY stream, name');
        return r.rows.map(toConsumer);
      });
    }
    return this.consumerCall(stream, async () => {
      const r = await this.q<ConsumerRow & Record<string, unknown>>(
        'listConsumers',
        'SELECT * FROM jetstream_consumers WHERE stream = $1 ORDER BY name',
        [stream],
      );
      return r.rows.map(toConsumer);
    });
  }

  async deleteConsumer(stream: string, name: string, epoch?: number): Promise<void> {
    if (epoch === undefined) {
      await this.consumerCall(stream, () => this.q('deleteConsumer', 'DELETE FROM jetstream_consumers WHERE stream = $1 AND name = $2', [stream, name]));
      return;
    }
    // Cluster mode: fenced by the consumer's owner row in the same statement (see writeConsumerRows).
    await this.consumerCall(stream, () =>
      this.q(
        'deleteConsumerFenced',
        `WITH checked AS (SELECT count(*) AS n FROM (SELECT flowmq_owner_check('consumer', $1 || '/' || $2, $3::bigint)) c)
         DELETE FROM jetstream_consumers WHERE stream = $1 AND name = $2 AND (SELECT n FROM checked) > 0`,
        [stream, name, epoch],
      ),
    );
  }

  async deleteConsumers(stream: string): Promise<void> {
    await this.consumerCall(stream, () => this.q('deleteConsumers', 'DELETE FROM jetstream_consumers WHERE stream = $1', [stream]));
  }

  // ---------------------------------------------------------------- queue catalog (QueueCatalog)

  async putQueue(def: QueueDef): Promise<void> {
    checkQueueDef(def);
    await this.keyed(CATALOG, '', () =>
      this.q(
        'putQueue',
        `INSERT INTO queue_defs (name, durable, exclusive_owner, auto_delete, arguments, raw_arguments, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (name) DO UPDATE SET durable = excluded.durable, exclusive_owner = excluded.exclusive_owner,
           auto_delete = excluded.auto_delete, arguments = excluded.arguments, raw_arguments = excluded.raw_arguments,
           created_at = excluded.created_at`,
        [def.name, def.durable, def.exclusiveOwner, def.autoDelete, toJson(def.arguments), toJson(def.rawArguments), def.createdAt],
      ),
    );
  }

  async deleteQueue(name: string): Promise<void> {
    // With the bindings to it, in one statement.
    await this.keyed(CATALOG, '', () =>
      this.q(
        'deleteQueue',
        `WITH b AS (DELETE FROM binding_defs WHERE destination_kind = 'queue' AND destination = $1)
         DELETE FROM queue_defs WHERE name = $1`,
        [name],
      ),
    );
  }

  async listQueues(): Promise<QueueDef[]> {
    return this.keyed(CATALOG, '', async () => {
      const r = await this.q<QueueDefRow & Record<string, unknown>>('listQueues', 'SELECT * FROM queue_defs ORDER BY name');
      return r.rows.map(toQueueDef);
    });
  }

  async putExchange(def: ExchangeDef): Promise<void> {
    checkExchangeDef(def);
    await this.keyed(CATALOG, '', () =>
      this.q(
        'putExchange',
        `INSERT INTO exchange_defs (name, type, durable, auto_delete, internal, alternate_exchange, raw_arguments, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (name) DO UPDATE SET type = excluded.type, durable = excluded.durable, auto_delete = excluded.auto_delete,
           internal = excluded.internal, alternate_exchange = excluded.alternate_exchange,
           raw_arguments = excluded.raw_arguments, created_at = excluded.created_at`,
        [def.name, def.type, def.durable, def.autoDelete, def.internal, def.alternateExchange ?? null, toJson(def.rawArguments), def.createdAt],
      ),
    );
  }

  async deleteExchange(name: string): Promise<void> {
    await this.keyed(CATALOG, '', () =>
      this.q(
        'deleteExchange',
        `WITH b AS (DELETE FROM binding_defs WHERE source = $1 OR (destination_kind = 'exchange' AND destination = $1))
         DELETE FROM exchange_defs WHERE name = $1`,
        [name],
      ),
    );
  }

  async listExchanges(): Promise<ExchangeDef[]> {
    return this.keyed(CATALOG, '', async () => {
      const r = await this.q<ExchangeDefRow & Record<string, unknown>>('listExchanges', 'SELECT * FROM exchange_defs ORDER BY name');
      return r.rows.map(toExchangeDef);
    });
  }

  async putBinding(b: BindingDef): Promise<void> {
    const values = bindingValues(b);
    await this.keyed(CATALOG, '', () =>
      this.q(
        'putBinding',
        `INSERT INTO binding_defs (binding_key, source, destination_kind, destination, key, rule, arguments)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (binding_key) DO UPDATE SET rule = excluded.rule, arguments = excluded.arguments`,
        values,
      ),
    );
  }

  async deleteBinding(b: BindingDef): Promise<void> {
    const [key] = bindingValues(b);
    await this.keyed(CATALOG, '', () => this.q('deleteBinding', 'DELETE FROM binding_defs WHERE binding_key = $1', [key]));
  }

  async listBindings(): Promise<BindingDef[]> {
    return this.keyed(CATALOG, '', async () => {
      const r = await this.q<BindingDefRow & Record<string, unknown>>(
        'listBindings',
        'SELECT * FROM binding_defs ORDER BY source, destination_kind, destination, key, binding_key',
      );
      return r.rows.map(toBindingDef);
    });
  }

  // ---------------------------------------------------------------- control plane documents (ControlStore)

  async listControl(kind: ControlKind): Promise<ControlRecord[]> {
    checkControl(kind, '-');
    return this.afterAll(CONTROL, async () => {
      const r = await this.q<ControlRow>('listControl', 'SELECT kind, name, data, updated_at FROM control_docs WHERE kind = $1 ORDER BY name', [kind]);
      return r.rows.map(toControl);
    });
  }

  async getControl(kind: ControlKind, name: string): Promise<ControlRecord | null> {
    checkControl(kind, name);
    return this.keyed(CONTROL, `${kind}\u0000${name}`, async () => {
      const r = await this.q<ControlRow>('getControl', 'SELECT kind, name, data, updated_at FROM control_docs WHERE kind = $1 AND name = $2', [kind, name]);
      return r.rows.length > 0 ? toControl(r.rows[0]) : null;
    });
  }

  // Each change is one statement: the document's change and, in a data-modifying CTE of the same statement (so the
  // same transaction), the version bump that other brokers poll. The bump happens only when a row changed.

  async putControl(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<void> {
    const json = checkControl(kind, name, data);
    await this.keyed(CONTROL, `${kind}\u0000${name}`, () =>
      bumpsVersion(kind)
        ? this.q(
            'putControl',
            `WITH d AS (INSERT INTO control_docs (kind, name, data, updated_at) VALUES ($1, $2, $3, $4)
                        ON CONFLICT (kind, name) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at)
             UPDATE control_version SET version = version + 1 WHERE id = 0`,
            [kind, name, json, Date.now()],
          )
        : this.q(
            'putControlQuiet',
            `INSERT INTO control_docs (kind, name, data, updated_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (kind, name) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
            [kind, name, json, Date.now()],
          ),
    );
  }

  async putControlIfAbsent(kind: ControlKind, name: string, data: Record<string, unknown>): Promise<boolean> {
    const json = checkControl(kind, name, data);
    // ON CONFLICT DO NOTHING decides atomically, also against another broker inserting the same name at once.
    return this.keyed(CONTROL, `${kind}\u0000${name}`, async () => {
      const r = await this.q<{ n: number }>(
        'putControlIfAbsent',
        `WITH d AS (INSERT INTO control_docs (kind, name, data, updated_at) VALUES ($1, $2, $3, $4)
                    ON CONFLICT (kind, name) DO NOTHING RETURNING 1),
              v AS (UPDATE control_version SET version = version + 1 WHERE id = 0 AND $5::boolean AND EXISTS (SELECT 1 FROM d))
         SELECT count(*)::int AS n FROM d`,
        [kind, name, json, Date.now(), bumpsVersion(kind)],
      );
      return r.rows[0].n > 0;
    });
  }

  async deleteControl(kind: ControlKind, name: string): Promise<boolean> {
    checkControl(kind, name);
    return this.keyed(CONTROL, `${kind}\u0000${name}`, async () => {
      const r = await this.q<{ n: number }>(
        'deleteControl',
        `WITH d AS (DELETE FROM control_docs WHERE kind = $1 AND name = $2 RETURNING 1),
              v AS (UPDATE control_version SET version = version + 1 WHERE id = 0 AND $3::boolean AND EXISTS (SELECT 1 FROM d))
         SELECT count(*)::int AS n FROM d`,
        [kind, name, bumpsVersion(kind)],
      );
      return r.rows[0].n > 0;
    });
  }

  async controlVersion(): Promise<number> {
    return this.afterAll(CONTROL, async () => {
      const r = await this.q<{ version: number }>('controlVersion', 'SELECT version FROM control_version WHERE id = 0');
      return Number(r.rows[0].version);
    });
  }

  /** Finishes the calls already made, then closes the pool. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.chain.idle();
    await this.db.end();
  }
}
