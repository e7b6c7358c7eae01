/**
 * Streams, their partitions (epochs, log start) and segments, producer ids and producer state in the PostgreSQL
 * metastore: functions over its PostgresState (postgres-state.ts).
 */
import { FlowError } from '../../core/index.js';
import { checkInt, checkInt32, checkSegment, checkStreamDef, toSegment, toStream, type SegmentRow, type StreamRow, settingsColumn } from './rows.js';
import type { PartitionState, SegmentMeta, StreamDef } from './types.js';
import { PARTITION, partKey, STREAM, type PostgresState } from './postgres-state.js';

export async function createStream(pg: PostgresState, def: StreamDef): Promise<void> {
  checkStreamDef(def);
  await pg.keyed(STREAM, def.name, async () => {
    try {
      await pg.q(
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

export async function listStreams(pg: PostgresState): Promise<StreamDef[]> {
  return pg.afterAll(STREAM, async () => {
    const r = await pg.q<StreamRow & Record<string, unknown>>('listStreams', 'SELECT * FROM streams ORDER BY name');
    return r.rows.map(toStream);
  });
}

export async function updateStream(pg: PostgresState, def: StreamDef): Promise<void> {
  checkStreamDef(def);
  await pg.keyed(STREAM, def.name, async () => {
    // created_at is left alone: it names the stream's incarnation (segment object keys include it).
    const r = await pg.q('updateStream', 'UPDATE streams SET partitions = $1, bindings = $2, retention_ms = $3, settings = $4 WHERE name = $5', [
      def.partitions,
      JSON.stringify(def.bindings),
      def.retentionMs,
      settingsColumn(def),
      def.name,
    ]);
    if (r.rowCount === 0) throw new FlowError('NOT_FOUND', `stream "${def.name}" not found`);
  });
}

export async function deleteStream(pg: PostgresState, name: string): Promise<void> {
  // Partitions, segments, offsets and producer state go with it through ON DELETE CASCADE, in one statement.
  await pg.keyed(STREAM, name, async () => {
    const r = await pg.q('deleteStream', 'DELETE FROM streams WHERE name = $1', [name]);
    if (r.rowCount === 0) throw new FlowError('NOT_FOUND', `stream "${name}" not found`);
  });
}

export async function openPartition(pg: PostgresState, stream: string, partition: number): Promise<number> {
  checkInt32('partition', partition);
  return pg.keyed(PARTITION, partKey(stream, partition), async () => {
    // One statement: the bump is atomic, and it waits for a mutation holding the row's lock (the epoch check).
    const r = await pg.q<{ epoch: number }>(
      'openPartition',
      `INSERT INTO partitions AS p (stream, partition, epoch) VALUES ($1, $2, 1)
       ON CONFLICT (stream, partition) DO UPDATE SET epoch = p.epoch + 1 RETURNING p.epoch`,
      [stream, partition],
    );
    return r.rows[0].epoch;
  });
}

export async function getPartitionState(pg: PostgresState, stream: string, partition: number): Promise<PartitionState | null> {
  return pg.keyed(PARTITION, partKey(stream, partition), async () => {
    const r = await pg.q<{ log_start_offset: number; flushed_offset: number; epoch: number }>(
      'getPartitionState',
      'SELECT log_start_offset, flushed_offset, epoch FROM partitions WHERE stream = $1 AND partition = $2',
      [stream, partition],
    );
    if (r.rows.length === 0) return null;
    const row = r.rows[0];
    return { stream, partition, logStartOffset: row.log_start_offset, flushedOffset: row.flushed_offset, epoch: row.epoch };
  });
}

export async function setLogStartOffset(pg: PostgresState, stream: string, partition: number, offset: number, epoch: number): Promise<void> {
  checkInt32('partition', partition);
  checkInt('offset', offset);
  checkInt('epoch', epoch);
  await pg.keyed(PARTITION, partKey(stream, partition), () =>
    pg.q('setLogStartOffset', 'SELECT flowmq_set_log_start($1, $2, $3, $4)', [stream, partition, offset, epoch]),
  );
}

export async function commitSegment(pg: PostgresState, seg: SegmentMeta, epoch: number): Promise<void> {
  checkSegment(seg, epoch);
  await pg.keyed(PARTITION, partKey(seg.stream, seg.partition), () =>
    pg.q('commitSegment', 'SELECT flowmq_commit_segment($1, $2, $3, $4, $5, $6, $7, $8, $9)', [
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

export async function listSegments(pg: PostgresState, stream: string, partition: number): Promise<SegmentMeta[]> {
  return pg.keyed(PARTITION, partKey(stream, partition), async () => {
    const r = await pg.q<SegmentRow & Record<string, unknown>>(
      'listSegments',
      'SELECT * FROM segments WHERE stream = $1 AND partition = $2 ORDER BY base_offset',
      [stream, partition],
    );
    return r.rows.map(toSegment);
  });
}

export async function deleteSegment(pg: PostgresState, stream: string, partition: number, baseOffset: number, epoch: number): Promise<void> {
  checkInt('epoch', epoch);
  await pg.keyed(PARTITION, partKey(stream, partition), () =>
    pg.q('deleteSegment', 'SELECT flowmq_delete_segment($1, $2, $3, $4)', [stream, partition, baseOffset, epoch]),
  );
}

export async function replaceSegment(pg: PostgresState, seg: SegmentMeta, oldObjectKey: string, epoch: number): Promise<boolean> {
  checkSegment(seg, epoch);
  // One statement, so atomic: the CTE runs the epoch check (it raises FENCED) before the row is updated; no
  // migration of its own, the check functions of version 1 are enough.
  const r = await pg.keyed(PARTITION, partKey(seg.stream, seg.partition), () =>
    pg.q(
      'replaceSegment',
      `WITH chk AS (SELECT flowmq_check_epoch($1, $2, $7) AS ok)
       UPDATE segments SET object_key = $5, size = $6, max_timestamp = $8 FROM chk
       WHERE stream = $1 AND partition = $2 AND base_offset = $3 AND end_offset = $4 AND object_key = $9 RETURNING 1`,
      [seg.stream, seg.partition, seg.baseOffset, seg.endOffset, seg.objectKey, seg.size, epoch, seg.maxTimestamp, oldObjectKey],
    ),
  );
  return (r.rowCount ?? 0) === 1;
}

export async function putProducerState(pg: PostgresState, stream: string, partition: number, endOffset: number, state: string, epoch: number): Promise<void> {
  checkInt32('partition', partition);
  checkInt('endOffset', endOffset);
  checkInt('epoch', epoch);
  await pg.keyed(PARTITION, partKey(stream, partition), () =>
    pg.q('putProducerState', 'SELECT flowmq_put_producer_state($1, $2, $3, $4, $5)', [stream, partition, endOffset, state, epoch]),
  );
}

export async function getProducerState(pg: PostgresState, stream: string, partition: number): Promise<{ endOffset: number; state: string } | null> {
  return pg.keyed(PARTITION, partKey(stream, partition), async () => {
    const r = await pg.q<{ end_offset: number; state: string }>(
      'getProducerState',
      'SELECT end_offset, state FROM producer_state WHERE stream = $1 AND partition = $2',
      [stream, partition],
    );
    return r.rows.length > 0 ? { endOffset: r.rows[0].end_offset, state: r.rows[0].state } : null;
  });
}

export async function allocateProducerIds(pg: PostgresState, count: number): Promise<number> {
  checkInt('count', count, 1);
  pg.check();
  // One atomic UPDATE ... RETURNING: two brokers allocating at once get disjoint blocks.
  const r = await pg.q<{ first: number }>(
    'allocateProducerIds',
    'UPDATE producer_ids SET next_id = next_id + $1 WHERE id = 0 RETURNING next_id - $1 AS first',
    [count],
  );
  return r.rows[0].first;
}
