/**
 * Streams, their partitions (epochs, log start) and segments, producer ids and producer state in the SQLite
 * metastore: functions over its SqliteState (sqlite-state.ts).
 */
import { FlowError } from '../../core/index.js';
import { checkInt, checkSegment, checkStreamDef, toSegment, toStream, type SegmentRow, type StreamRow, settingsColumn } from './rows.js';
import type { PartitionState, SegmentMeta, StreamDef } from './types.js';

import { type PartitionRow, sqliteCode, type SqliteState } from './sqlite-state.js';

export async function createStream(m: SqliteState, def: StreamDef): Promise<void> {
  checkStreamDef(def);
  await m.write('createStream', () => {
    try {
      m.s.insertStream.run(def.name, def.partitions, JSON.stringify(def.bindings), def.retentionMs, def.createdAt, settingsColumn(def), def.id ?? null);
    } catch (err) {
      if (sqliteCode(err) === 'SQLITE_CONSTRAINT_PRIMARYKEY') {
        throw new FlowError('ALREADY_EXISTS', `stream "${def.name}" already exists`, { cause: err });
      }
      throw err;
    }
  });
}

export async function listStreams(m: SqliteState): Promise<StreamDef[]> {
  return m.run('listStreams', () => (m.s.listStreams.all() as StreamRow[]).map(toStream));
}

export async function updateStream(m: SqliteState, def: StreamDef): Promise<void> {
  checkStreamDef(def);
  await m.write('updateStream', () => {
    const r = m.s.updateStream.run(def.partitions, JSON.stringify(def.bindings), def.retentionMs, settingsColumn(def), def.name);
    if (r.changes === 0) throw new FlowError('NOT_FOUND', `stream "${def.name}" not found`);
  });
}

export async function deleteStream(m: SqliteState, name: string): Promise<void> {
  // Partitions, segments and offsets go with it through ON DELETE CASCADE, in the same statement.
  await m.write('deleteStream', () => {
    const r = m.s.deleteStream.run(name);
    if (r.changes === 0) throw new FlowError('NOT_FOUND', `stream "${name}" not found`);
  });
}

export async function getPartitionState(m: SqliteState, stream: string, partition: number): Promise<PartitionState | null> {
  return m.run('getPartitionState', () => {
    const r = m.s.getPartition.get(stream, partition) as PartitionRow | undefined;
    return r ? { stream: r.stream, partition: r.partition, logStartOffset: r.log_start_offset, flushedOffset: r.flushed_offset, epoch: r.epoch } : null;
  });
}

export async function openPartition(m: SqliteState, stream: string, partition: number): Promise<number> {
  checkInt('partition', partition);
  return m.write('openPartition', () => m.txOpenPartition(stream, partition));
}

/** Never moves the log start offset backwards (see upsertLogStart); NOT_FOUND if the stream is absent. */
export async function setLogStartOffset(m: SqliteState, stream: string, partition: number, offset: number, epoch: number): Promise<void> {
  checkInt('partition', partition);
  checkInt('offset', offset);
  checkInt('epoch', epoch);
  await m.write('setLogStartOffset', () => m.txSetLogStart(stream, partition, offset, epoch));
}

export async function commitSegment(m: SqliteState, seg: SegmentMeta, epoch: number): Promise<void> {
  checkSegment(seg, epoch);
  await m.write('commitSegment', () => m.txCommitSegment(seg, epoch));
}

export async function listSegments(m: SqliteState, stream: string, partition: number): Promise<SegmentMeta[]> {
  return m.run('listSegments', () => (m.s.listSegments.all(stream, partition) as SegmentRow[]).map(toSegment));
}

export async function deleteSegment(m: SqliteState, stream: string, partition: number, baseOffset: number, epoch: number): Promise<void> {
  checkInt('epoch', epoch);
  await m.write('deleteSegment', () => m.txDeleteSegment(stream, partition, baseOffset, epoch));
}

export async function replaceSegment(m: SqliteState, seg: SegmentMeta, oldObjectKey: string, epoch: number): Promise<boolean> {
  checkSegment(seg, epoch);
  return m.write('replaceSegment', () => m.txReplaceSegment(seg, oldObjectKey, epoch));
}

export async function allocateProducerIds(m: SqliteState, count: number): Promise<number> {
  checkInt('count', count, 1);
  return m.write('allocateProducerIds', () =>
    m.db
      .transaction(() => {
        const first = (m.s.producerIdNext.get() as { next_id: number }).next_id;
        m.s.producerIdAdvance.run(count);
        return first;
      })
      .immediate(),
  );
}

export async function putProducerState(m: SqliteState, stream: string, partition: number, endOffset: number, state: string, epoch: number): Promise<void> {
  checkInt('epoch', epoch);
  await m.write('putProducerState', () => m.txPutProducerState(stream, partition, endOffset, state, epoch));
}

export async function getProducerState(m: SqliteState, stream: string, partition: number): Promise<{ endOffset: number; state: string } | null> {
  return m.run('getProducerState', () => {
    const r = m.s.producerStateGet.get(stream, partition) as { end_offset: number; state: string } | undefined;
    return r ? { endOffset: r.end_offset, state: r.state } : null;
  });
}
