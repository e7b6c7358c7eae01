/**
 * What the SQL metastores (SQLite, PostgreSQL) have in common: their tables have the same columns, so their rows
 * map to the interface's types the same way, and arguments are checked the same way before anything is written.
 */
import { bindingKey, FlowError, type BindingDef, type ConsumerRecord, type ExchangeDef, type QueueDef, type SessionRecord } from '../../core/index.js';
import type { ConsumerOffset, SegmentMeta, StreamDef } from './types.js';

export interface StreamRow {
  name: string;
  partitions: number;
  bindings: string;
  retention_ms: number | null;
  created_at: number;
  /** JSON of the settings beyond retention (retentionBytes, segmentBytes, segmentMs, configs); null: none. */
  settings: string | null;
  /** StreamDef.id (32 hex digits); the engine gives every stream one, migration 9 (SQLite) / 6 (PostgreSQL) those made before. */
  stream_id: string | null;
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
  /** The session queue's publish-key marks (SessionRecord.marks): JSON text (SQLite) or jsonb (PostgreSQL). */
  marks?: string | Record<string, number> | null;
}

/** What the `settings` column holds: the optional settings of a StreamDef that are set. */
type StoredSettings = Pick<StreamDef, 'retentionBytes' | 'segmentBytes' | 'segmentMs' | 'configs'>;

export const toStream = (r: StreamRow): StreamDef => ({
  name: r.name,
  partitions: r.partitions,
  bindings: JSON.parse(r.bindings) as string[],
  retentionMs: r.retention_ms,
  createdAt: r.created_at,
  ...(r.settings ? (JSON.parse(r.settings) as StoredSettings) : {}),
  ...(r.stream_id ? { id: r.stream_id } : {}),
});

/** The `settings` column of a definition: null when it has none of them (every stream made before they existed). */
export function settingsColumn(def: StreamDef): string | null {
  const s: StoredSettings = {};
  if (def.retentionBytes != null) s.retentionBytes = def.retentionBytes;
  if (def.segmentBytes != null) s.segmentBytes = def.segmentBytes;
  if (def.segmentMs != null) s.segmentMs = def.segmentMs;
  if (def.configs !== undefined && Object.keys(def.configs).length > 0) s.configs = def.configs;
  return Object.keys(s).length > 0 ? JSON.stringify(s) : null;
}

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

export const toSession = (r: SessionRow): SessionRecord => {
  const rec: SessionRecord = {
    clientId: r.client_id,
    protocol: r.protocol,
    state: r.state,
    expiresAt: r.expires_at,
    updatedAt: r.updated_at,
  };
  if (r.marks != null) rec.marks = typeof r.marks === 'string' ? (JSON.parse(r.marks) as Record<string, number>) : r.marks;
  return rec;
};

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
  if (def.id !== undefined && (typeof def.id !== 'string' || !/^[0-9a-f]{32}$/.test(def.id))) {
    throw new FlowError('INVALID_ARGUMENT', 'stream id must be 32 lowercase hex digits');
  }
  if (def.retentionBytes != null) checkInt('retentionBytes', def.retentionBytes);
  if (def.segmentBytes != null) checkInt('segmentBytes', def.segmentBytes, 1);
  if (def.segmentMs != null) checkInt('segmentMs', def.segmentMs, 1);
  if (
    def.configs !== undefined &&
    (typeof def.configs !== 'object' || def.configs === null || !Object.values(def.configs).every((v) => typeof v === 'string'))
  ) {
    throw new FlowError('INVALID_ARGUMENT', 'stream configs must map names to strings');
  }
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

// ---------------------------------------------------------------- queue catalog (QueueCatalog)

/**
 * Arguments are kept as JSON text (not PostgreSQL's jsonb, which would reorder keys and rewrite numbers). A
 * Buffer in them (an AMQP byte array) is written as {"type":"Buffer","data":[...]} by JSON.stringify and comes
 * back as a Buffer.
 */
export const toJson = (v: unknown): string => JSON.stringify(v ?? {});
export function fromJson<T>(text: string): T {
  return JSON.parse(text, (_k, v: unknown) => {
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
      const o = v as Record<string, unknown>;
      const keys = Object.keys(o);
      if (keys.length === 2 && o.type === 'Buffer' && Array.isArray(o.data)) return Buffer.from(o.data as number[]);
    }
    return v;
  }) as T;
}

export interface QueueDefRow {
  name: string;
  durable: number | boolean;
  exclusive_owner: string | null;
  auto_delete: number | boolean;
  arguments: string;
  raw_arguments: string;
  created_at: number;
}

export interface ExchangeDefRow {
  name: string;
  type: string;
  durable: number | boolean;
  auto_delete: number | boolean;
  internal: number | boolean;
  alternate_exchange: string | null;
  raw_arguments: string;
  created_at: number;
}

export interface BindingDefRow {
  binding_key: string;
  source: string;
  destination_kind: string;
  destination: string;
  key: string;
  rule: string | null;
  arguments: string;
}

export const toQueueDef = (r: QueueDefRow): QueueDef => ({
  name: r.name,
  durable: Boolean(r.durable),
  exclusiveOwner: r.exclusive_owner,
  autoDelete: Boolean(r.auto_delete),
  arguments: fromJson(r.arguments),
  rawArguments: fromJson(r.raw_arguments),
  createdAt: r.created_at,
});

export const toExchangeDef = (r: ExchangeDefRow): ExchangeDef => ({
  name: r.name,
  type: r.type as ExchangeDef['type'],
  durable: Boolean(r.durable),
  autoDelete: Boolean(r.auto_delete),
  internal: Boolean(r.internal),
  ...(r.alternate_exchange !== null ? { alternateExchange: r.alternate_exchange } : {}),
  rawArguments: fromJson(r.raw_arguments),
  createdAt: r.created_at,
});

export const toBindingDef = (r: BindingDefRow): BindingDef => ({
  source: r.source,
  destinationKind: r.destination_kind as BindingDef['destinationKind'],
  destination: r.destination,
  key: r.key,
  ...(r.rule !== null ? { rule: r.rule as NonNullable<BindingDef['rule']> } : {}),
  arguments: fromJson(r.arguments),
});

/** A binding's row values in column order (binding_key, source, destination_kind, destination, key, rule, arguments). */
export const bindingValues = (b: BindingDef): [string, string, string, string, string, string | null, string] => [
  bindingKey(b),
  b.source,
  b.destinationKind,
  b.destination,
  b.key,
  b.rule ?? null,
  toJson(b.arguments),
];

export function checkQueueDef(def: QueueDef): void {
  if (typeof def.name !== 'string') throw new FlowError('INVALID_ARGUMENT', 'queue name must be a string');
  checkInt('createdAt', def.createdAt);
}

export function checkExchangeDef(def: ExchangeDef): void {
  if (typeof def.name !== 'string') throw new FlowError('INVALID_ARGUMENT', 'exchange name must be a string');
  if (!['direct', 'fanout', 'topic', 'headers'].includes(def.type))
    throw new FlowError('INVALID_ARGUMENT', `exchange type "${String(def.type)}" is not one of direct, fanout, topic, headers`);
  checkInt('createdAt', def.createdAt);
}

// ---------------------------------------------------------------- JetStream consumer state (ConsumerStateStore)

/**
 * One row per consumer. `acked` (the sequences acknowledged above the floor) is a JSON array in a text column:
 * both backends read it the same way, and node-postgres would hand a bigint[] back as strings. It stays short:
 * the JetStream service moves the floor up as acks close the gaps, and a consumer's acks pending are bounded
 * (max_ack_pending).
 */
export interface ConsumerRow {
  stream: string;
  name: string;
  config: string;
  created_at: number;
  delivered_seq: number;
  delivered_consumer_seq: number;
  ack_floor: number;
  acked: string;
}

export const toConsumer = (r: ConsumerRow): ConsumerRecord => ({
  stream: r.stream,
  name: r.name,
  config: r.config,
  createdAt: r.created_at,
  deliveredSeq: r.delivered_seq,
  deliveredConsumerSeq: r.delivered_consumer_seq,
  ackFloor: r.ack_floor,
  acked: JSON.parse(r.acked) as number[],
});

/** A record's row values in column order (stream, name, config, created_at, delivered_seq, delivered_consumer_seq, ack_floor, acked). */
export const consumerValues = (r: ConsumerRecord): [string, string, string, number, number, number, number, string] => [
  r.stream,
  r.name,
  r.config,
  r.createdAt,
  r.deliveredSeq,
  r.deliveredConsumerSeq,
  r.ackFloor,
  JSON.stringify(r.acked),
];
