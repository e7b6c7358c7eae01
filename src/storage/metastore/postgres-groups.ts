/**
 * Consumer groups' committed offsets, and JetStream consumer state (with its write coalescing) in the PostgreSQL
 * metastore: functions over its PostgresState (postgres-state.ts).
 */
import { checkConsumerRecord, FlowError } from '../../core/index.js';
import type { ConsumerRecord, OffsetCommit } from '../../core/index.js';
import { checkInt, checkInt32, consumerValues, toConsumer, toOffset, type ConsumerRow, type OffsetRow } from './rows.js';
import type { ConsumerOffset } from './types.js';
import { CONSUMERS, GROUP, partKey, type ConsumerBatch, type PostgresState } from './postgres-state.js';

export async function commitOffsets(pg: PostgresState, group: string, offsets: OffsetCommit[], fence?: number): Promise<void> {
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
  await pg.keyed(GROUP, group, () =>
    pg.q(
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

export async function fetchOffset(pg: PostgresState, group: string, stream: string, partition: number): Promise<ConsumerOffset | null> {
  return pg.keyed(GROUP, group, async () => {
    const r = await pg.q<OffsetRow & Record<string, unknown>>(
      'fetchOffset',
      'SELECT * FROM consumer_offsets WHERE group_id = $1 AND stream = $2 AND partition = $3',
      [group, stream, partition],
    );
    return r.rows.length > 0 ? toOffset(r.rows[0]) : null;
  });
}

export async function listOffsets(pg: PostgresState, group: string): Promise<ConsumerOffset[]> {
  return pg.keyed(GROUP, group, async () => {
    const r = await pg.q<OffsetRow & Record<string, unknown>>('listOffsets', 'SELECT * FROM consumer_offsets WHERE group_id = $1 ORDER BY stream, partition', [
      group,
    ]);
    return r.rows.map(toOffset);
  });
}

export async function listGroups(pg: PostgresState): Promise<string[]> {
  return pg.afterAll(GROUP, async () => {
    const r = await pg.q<{ group_id: string }>('listGroups', 'SELECT DISTINCT group_id FROM consumer_offsets ORDER BY group_id');
    return r.rows.map((x) => x.group_id);
  });
}

export async function deleteGroup(pg: PostgresState, group: string): Promise<void> {
  await pg.keyed(GROUP, group, () => pg.q('deleteGroup', 'DELETE FROM consumer_offsets WHERE group_id = $1', [group]));
}

export async function deleteOffsets(
  pg: PostgresState,
  group: string,
  partitions: ReadonlyArray<{ stream: string; partition: number }>,
  fence?: number,
): Promise<void> {
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
  await pg.keyed(GROUP, group, () =>
    pg.q(
      fence !== undefined ? 'deleteOffsetsFenced' : 'deleteOffsets',
      `${fenced}
       DELETE FROM consumer_offsets o USING ${fence !== undefined ? 'fence, ' : ''}unnest($2::text[], $3::integer[]) AS t(s, p)
       WHERE o.group_id = $1 AND o.stream = t.s AND o.partition = t.p`,
      params,
    ),
  );
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
export async function putConsumer(pg: PostgresState, rec: ConsumerRecord, epoch?: number): Promise<void> {
  checkConsumerRecord(rec);
  pg.check();
  pg.consumerStats.puts++;
  const copy = { rec: { ...rec, acked: rec.acked.slice() }, epoch };
  const refusedOf = (refused: Map<string, unknown>): void => {
    const err = refused.get(rec.name);
    if (err !== undefined) throw err;
  };
  const open = pg.consumerBatches.get(rec.stream);
  if (open) {
    open.recs.set(rec.name, copy);
    return open.done.then(refusedOf);
  }
  const batch: ConsumerBatch = { recs: new Map([[rec.name, copy]]), done: Promise.resolve(new Map<string, unknown>()) };
  pg.consumerBatches.set(rec.stream, batch);
  batch.done = pg.keyed(CONSUMERS, rec.stream, () => {
    // Started: later puts form the next batch. (With nothing running on the key this runs at once, within
    // keyed(), so a lone put goes out without waiting.)
    if (pg.consumerBatches.get(rec.stream) === batch) pg.consumerBatches.delete(rec.stream);
    return writeConsumers(pg, [...batch.recs.values()]);
  });
  return batch.done.then(refusedOf);
}

/**
 * Writes a batch; resolves with the puts refused as FENCED (cluster mode: the broker no longer owns that consumer).
 * A fenced batch of several consumers is written again one by one, so that one consumer that moved away does not
 * fail the writes of the others (rare: it happens once per change of hands).
 */
async function writeConsumers(pg: PostgresState, entries: Array<{ rec: ConsumerRecord; epoch: number | undefined }>): Promise<Map<string, unknown>> {
  const refused = new Map<string, unknown>();
  try {
    await writeConsumerRows(pg, entries);
  } catch (err) {
    if (!(err instanceof FlowError && err.code === 'FENCED')) throw err;
    if (entries.length === 1) refused.set(entries[0].rec.name, err);
    else {
      for (const e of entries) {
        try {
          await writeConsumerRows(pg, [e]);
        } catch (one) {
          if (!(one instanceof FlowError && one.code === 'FENCED')) throw one;
          refused.set(e.rec.name, one);
        }
      }
    }
  }
  return refused;
}

async function writeConsumerRows(pg: PostgresState, entries: Array<{ rec: ConsumerRecord; epoch: number | undefined }>): Promise<void> {
  pg.consumerStats.writes++;
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
    await pg.q(
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
  await pg.q(
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
function consumerCall<T>(pg: PostgresState, stream: string, fn: () => Promise<T>): Promise<T> {
  pg.consumerBatches.delete(stream);
  return pg.keyed(CONSUMERS, stream, fn);
}

export async function getConsumer(pg: PostgresState, stream: string, name: string): Promise<ConsumerRecord | null> {
  return consumerCall(pg, stream, async () => {
    const r = await pg.q<ConsumerRow & Record<string, unknown>>('getConsumer', 'SELECT * FROM jetstream_consumers WHERE stream = $1 AND name = $2', [
      stream,
      name,
    ]);
    return r.rows.length > 0 ? toConsumer(r.rows[0]) : null;
  });
}

export async function listConsumers(pg: PostgresState, stream?: string): Promise<ConsumerRecord[]> {
  if (stream === undefined) {
    // Puts made after this call must not join a batch the listing waits for.
    pg.consumerBatches.clear();
    return pg.afterAll(CONSUMERS, async () => {
      const r = await pg.q<ConsumerRow & Record<string, unknown>>('listAllConsumers', 'SELECT * FROM jetstream_consumers ORDER BY stream, name');
      return r.rows.map(toConsumer);
    });
  }
  return consumerCall(pg, stream, async () => {
    const r = await pg.q<ConsumerRow & Record<string, unknown>>('listConsumers', 'SELECT * FROM jetstream_consumers WHERE stream = $1 ORDER BY name', [stream]);
    return r.rows.map(toConsumer);
  });
}

export async function deleteConsumer(pg: PostgresState, stream: string, name: string, epoch?: number): Promise<void> {
  if (epoch === undefined) {
    await consumerCall(pg, stream, () => pg.q('deleteConsumer', 'DELETE FROM jetstream_consumers WHERE stream = $1 AND name = $2', [stream, name]));
    return;
  }
  // Cluster mode: fenced by the consumer's owner row in the same statement (see writeConsumerRows).
  await consumerCall(pg, stream, () =>
    pg.q(
      'deleteConsumerFenced',
      `WITH checked AS (SELECT count(*) AS n FROM (SELECT flowmq_owner_check('consumer', $1 || '/' || $2, $3::bigint)) c)
       DELETE FROM jetstream_consumers WHERE stream = $1 AND name = $2 AND (SELECT n FROM checked) > 0`,
      [stream, name, epoch],
    ),
  );
}

export async function deleteConsumers(pg: PostgresState, stream: string): Promise<void> {
  await consumerCall(pg, stream, () => pg.q('deleteConsumers', 'DELETE FROM jetstream_consumers WHERE stream = $1', [stream]));
}
