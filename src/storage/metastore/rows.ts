/**
 * What the SQL metastores (SQLite, PostgreSQL) have in common: their tables have the same columns, so their rows
 * map to the interface's types the same way, and arguments are checked the same way before anything is written.
 */
import { FlowError, type SessionRecord } from '../../core/index.js';
import type { ConsumerOffset, SegmentMeta, StreamDef } from './types.js';

export interface StreamRow {
  name: string;
  partitions: number;
  bindings: string;
  retention_ms: number | null;
  created_at: number;
}

export interface SegmentRow {
  stream: string;
  partition: number;
  base_offset: number;
  end_offset: number;
  object_key: string;
  size: number;
  max_timestamp: number;
  created_at: number;
}

export interface OffsetRow {
  group_id: string;
  stream: string;
  partition: number;
  offset: number;
  metadata: string | null;
  committed_at: number;
}

export interface SessionRow {
  client_id: string;
  protocol: string;
  state: string;
  expires_at: number | null;
  updated_at: number;
}

export const toStream = (r: StreamRow): StreamDef => ({
  name: r.name,
  partitions: r.partitions,
  bindings: JSON.parse(r.bindings) as string[],
  retentionMs: r.retention_ms,
  createdAt: r.created_at,
});

export const toSegment = (r: SegmentRow): SegmentMeta => ({
  stream: r.stream,
  partition: r.partition,
  baseOffset: r.base_offset,
  endOffset: r.end_offset,
  objectKey: r.object_key,
  size: r.size,
  maxTimestamp: r.max_timestamp,
  createdAt: r.created_at,
});

export const toOffset = (r: OffsetRow): ConsumerOffset => ({
  group: r.group_id,
  stream: r.stream,
  partition: r.partition,
  offset: r.offset,
  metadata: r.metadata,
  committedAt: r.committed_at,
});

export const toSession = (r: SessionRow): SessionRecord => ({
  clientId: r.client_id,
  protocol: r.protocol,
  state: r.state,
  expiresAt: r.expires_at,
  updatedAt: r.updated_at,
});

export function checkInt(what: string, n: number, min = 0): void {
  if (!Number.isSafeInteger(n) || n < min) throw new FlowError('INVALID_ARGUMENT', `${what} must be an integer >= ${min}, got ${n}`);
}

/** Partition numbers and counts are 32-bit columns (PostgreSQL `integer`), as in Kafka. */
export function checkInt32(what: string, n: number, min = 0): void {
  checkInt(what, n, min);
  if (n > 0x7fffffff) throw new FlowError('INVALID_ARGUMENT', `${what} must be below 2^31, got ${n}`);
}

export function checkStreamDef(def: StreamDef): void {
  if (typeof def.name !== 'string' || def.name.length === 0) throw new FlowError('INVALID_ARGUMENT', 'stream name is empty');
  checkInt32('partitions', def.partitions, 1);
  if (!Array.isArray(def.bindings) || !def.bindings.every((b) => typeof b === 'string')) {
    throw new FlowError('INVALID_ARGUMENT', 'stream bindings must be an array of strings');
  }
  if (def.retentionMs !== null) checkInt('retentionMs', def.retentionMs);
  checkInt('createdAt', def.createdAt);
}

/** What commitSegment checks before it touches the store: whole numbers in range, a non-empty segment. */
export function checkSegment(seg: SegmentMeta, epoch: number): void {
  checkInt('epoch', epoch);
  checkInt32('partition', seg.partition);
  checkInt('baseOffset', seg.baseOffset);
  checkInt('endOffset', seg.endOffset);
  checkInt('size', seg.size);
  checkInt('maxTimestamp', seg.maxTimestamp, -1);
  checkInt('createdAt', seg.createdAt);
  if (seg.endOffset <= seg.baseOffset) {
    throw new FlowError('INVALID_ARGUMENT', `empty segment [${seg.baseOffset}, ${seg.endOffset})`);
  }
}
