/**
 * Consumer groups' committed offsets, and JetStream consumer state (with its write coalescing) in the SQLite
 * metastore: functions over its SqliteState (sqlite-state.ts).
 */
import { checkConsumerRecord } from '../../core/index.js';
import type { ConsumerRecord, OffsetCommit } from '../../core/index.js';
import { checkInt, consumerValues, toConsumer, toOffset, type ConsumerRow, type OffsetRow } from './rows.js';
import type { ConsumerOffset } from './types.js';
import type { SqliteState } from './sqlite-state.js';

export async function fetchOffset(m: SqliteState, group: string, stream: string, partition: number): Promise<ConsumerOffset | null> {
  return m.run('fetchOffset', () => {
    const r = m.s.fetchOffset.get(group, stream, partition) as OffsetRow | undefined;
    return r ? toOffset(r) : null;
  });
}

/** `_fence` is for cluster mode, which needs PostgreSQL: an embedded metastore has a single writer. */
export async function commitOffsets(m: SqliteState, group: string, offsets: OffsetCommit[], _fence?: number): Promise<void> {
  for (const o of offsets) {
    checkInt('partition', o.partition);
    // Kafka clients commit -1 to mean "no position"; anything lower is nonsense.
    checkInt('offset', o.offset, -1);
  }
  const now = Date.now();
  await m.write('commitOffsets', () =>
    m.db.transaction(() => {
      for (const o of offsets) m.s.upsertOffset.run(group, o.stream, o.partition, o.offset, o.metadata, now);
    })(),
  );
}

export async function listGroups(m: SqliteState): Promise<string[]> {
  return m.run('listGroups', () => (m.s.listGroups.all() as Array<{ group_id: string }>).map((r) => r.group_id));
}

export async function deleteGroup(m: SqliteState, group: string): Promise<void> {
  await m.write('deleteGroup', () => m.s.deleteGroup.run(group));
}

export async function deleteOffsets(
  m: SqliteState,
  group: string,
  partitions: ReadonlyArray<{ stream: string; partition: number }>,
  _fence?: number,
): Promise<void> {
  for (const p of partitions) checkInt('partition', p.partition);
  await m.write('deleteOffsets', () =>
    m.db.transaction(() => {
      for (const p of partitions) m.s.deleteOffset.run(group, p.stream, p.partition);
    })(),
  );
}

export async function listOffsets(m: SqliteState, group: string): Promise<ConsumerOffset[]> {
  return m.run('listOffsets', () => (m.s.listOffsets.all(group) as OffsetRow[]).map(toOffset));
}

// ---------------------------------------------------------------- JetStream consumer state (ConsumerStateStore)
// Write coalescing: JetStream acks move consumers' positions often. The puts made within one turn of the event
// loop are written at its end (setImmediate) in one transaction, the latest record per consumer: on this VM an
// upsert committed on its own cost ~63 us (each commit appends to the -wal file), ~8 us inside a transaction.
// Every other consumer call first writes the pending puts, synchronously, so calls still take effect in the
// order they were made (per-key order) and reads see every put made before them. Puts resolve once durable.

export async function putConsumer(m: SqliteState, rec: ConsumerRecord): Promise<void> {
  checkConsumerRecord(rec);
  m.check();
  m.consumerStats.puts++;
  let batch = m.consumerBatch;
  if (batch === null) {
    let resolve!: () => void;
    let reject!: (err: unknown) => void;
    const done = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    batch = m.consumerBatch = { recs: new Map(), done, resolve, reject };
    setImmediate(() => flushConsumers(m));
  }
  batch.recs.set(`${rec.stream}\u0000${rec.name}`, consumerValues(rec));
  return batch.done;
}

/** Writes the pending puts (if any) in one transaction; their promise settles once the commit is durable. */
export function flushConsumers(m: SqliteState): void {
  const batch = m.consumerBatch;
  if (batch === null) return;
  m.consumerBatch = null;
  m.consumerStats.writes++;
  try {
    m.run('putConsumer', () => m.txPutConsumers([...batch.recs.values()]));
  } catch (err) {
    batch.reject(err);
    return;
  }
  if (m.walSync) m.walSync.sync().then(batch.resolve, batch.reject);
  else batch.resolve();
}

export async function getConsumer(m: SqliteState, stream: string, name: string): Promise<ConsumerRecord | null> {
  flushConsumers(m);
  return m.run('getConsumer', () => {
    const r = m.s.consumerGet.get(stream, name) as ConsumerRow | undefined;
    return r ? toConsumer(r) : null;
  });
}

export async function listConsumers(m: SqliteState, stream?: string): Promise<ConsumerRecord[]> {
  flushConsumers(m);
  return m.run('listConsumers', () =>
    ((stream === undefined ? m.s.consumerListAll.all() : m.s.consumerListStream.all(stream)) as ConsumerRow[]).map(toConsumer),
  );
}

export async function deleteConsumer(m: SqliteState, stream: string, name: string): Promise<void> {
  flushConsumers(m);
  await m.write('deleteConsumer', () => m.s.consumerDelete.run(stream, name));
}

export async function deleteConsumers(m: SqliteState, stream: string): Promise<void> {
  flushConsumers(m);
  await m.write('deleteConsumers', () => m.s.consumerDeleteStream.run(stream));
}
