/**
 * Stream definitions and the storage interface the core sees streams through. The core never imports a
 * storage backend: the broker hands it an implementation of `StreamStorage` (the partition log engine) and a
 * `StreamCatalog` (the metastore).
 */
import { randomUUID } from 'node:crypto';
import type { TxnPartitions } from './transactions.js';

export interface StreamDef {
  /** Stream name; also its Kafka topic name (`a.b.c` is the unified topic `a/b/c`). */
  name: string;
  partitions: number;
  /** Topic filters whose publishes the stream captures. */
  bindings: string[];
  /** Retention in ms; null keeps data forever. */
  retentionMs: number | null;
  createdAt: number;
  /**
   * Retention by size, per partition (Kafka's retention.bytes): the oldest segments are deleted, whole, while the
   * partition would still hold at least this many bytes without them. Absent or null: no bound.
   */
  retentionBytes?: number | null;
  /** Bytes at which a partition's open segment is cut (Kafka's segment.bytes); absent or null: the log's default. */
  segmentBytes?: number | null;
  /** Age at which a partition's open segment is sealed (Kafka's segment.ms); absent or null: the log's default. */
  segmentMs?: number | null;
  /**
   * Settings the core keeps for the protocols without reading them: Kafka's other topic configs, by their names
   * (what a client set, reported back by DescribeConfigs). Absent: none.
   */
  configs?: Readonly<Record<string, string>>;
  /**
   * The stream's identity, 32 lowercase hex digits (a random UUID): made when the stream is created, kept by every
   * redefinition, new for a stream deleted and created again under the same name (Kafka's topic id, KIP-516). The
   * metastore keeps it, so every broker of a cluster knows the same one. Absent only in definitions made by hand.
   */
  id?: string;
}

/** A new stream identity (StreamDef.id): a random (version 4) UUID as 32 lowercase hex digits. */
export function newStreamId(): string {
  return randomUUID().replace(/-/g, '');
}

/**
 * Broker-wide defaults for the streams that set none of their own, changed at run time (Kafka's dynamic broker
 * configs log.retention.ms, log.retention.bytes, log.segment.bytes, log.roll.ms). null: none (retention: forever;
 * segments: the log's own --segment-bytes / --segment-ms).
 */
export interface StreamDefaults {
  readonly retentionMs: number | null;
  readonly retentionBytes: number | null;
  readonly segmentBytes: number | null;
  readonly segmentMs: number | null;
}

export const NO_STREAM_DEFAULTS: StreamDefaults = Object.freeze({ retentionMs: null, retentionBytes: null, segmentBytes: null, segmentMs: null });

/**
 * The retention in force for a stream: its own, else the broker's default, unless the stream says "no bound"
 * explicitly. That explicit "forever" is what a Kafka client sets with retention.ms=-1 or a negative
 * retention.bytes: it has no field value (null is "not set"), so it is read from the stream's stored configs,
 * where the Kafka adapter keeps it (topic-configs.ts), as a Kafka topic override beats the broker default.
 */
export function effectiveRetention(def: StreamDef, d: StreamDefaults): { ms: number | null; bytes: number | null } {
  const c = def.configs;
  const ms = def.retentionMs ?? (c?.['retention.ms'] === '-1' ? null : d.retentionMs);
  const rb = c?.['retention.bytes'];
  const bytes = def.retentionBytes ?? (rb !== undefined && rb.startsWith('-') ? null : d.retentionBytes);
  return { ms, bytes };
}

/** The settings of a stream besides its name, partitions and bindings (what Kafka calls its topic configs). */
export type StreamSettings = Pick<StreamDef, 'retentionMs' | 'retentionBytes' | 'segmentBytes' | 'segmentMs' | 'configs'>;

function sameConfigs(a: Readonly<Record<string, string>> | undefined, b: Readonly<Record<string, string>> | undefined): boolean {
  const ka = Object.keys(a ?? {});
  if (ka.length !== Object.keys(b ?? {}).length) return false;
  return ka.every((k) => b !== undefined && Object.hasOwn(b, k) && b[k] === a![k]);
}

/** Same definition (as the catalog holds it): a broker that hears of a change applies only real ones. */
export function sameStreamDef(a: StreamDef, b: StreamDef): boolean {
  return (
    a.name === b.name &&
    a.partitions === b.partitions &&
    a.retentionMs === b.retentionMs &&
    a.createdAt === b.createdAt &&
    (a.id ?? null) === (b.id ?? null) &&
    a.bindings.length === b.bindings.length &&
    a.bindings.every((x, i) => x === b.bindings[i]) &&
    (a.retentionBytes ?? null) === (b.retentionBytes ?? null) &&
    (a.segmentBytes ?? null) === (b.segmentBytes ?? null) &&
    (a.segmentMs ?? null) === (b.segmentMs ?? null) &&
    sameConfigs(a.configs, b.configs)
  );
}

export interface PartitionOffsets {
  /** First readable offset. */
  logStartOffset: number;
  /** One past the last durable (acknowledged, readable) offset. */
  highWatermark: number;
}

export interface AppendResult {
  /**
   * The batch's first offset, known synchronously for a partition written here. -1 for an append forwarded to the
   * partition's owner in cluster mode: the offset is then known only once the owner has made the batch durable
   * (`offset`).
   */
  baseOffset: number;
  /**
   * Cluster mode, an append forwarded to the partition's owner (see ClusterStreams): resolves with the batch's
   * first offset once it is durable at the owner (rejects as `durable` does). Absent for a local append, where
   * `baseOffset` is final.
   */
  offset?: Promise<number>;
  /**
   * True when the batch repeats one an idempotent producer already appended (same producer id, epoch and
   * sequence range): nothing was appended and `baseOffset` is the original one.
   */
  duplicate?: boolean;
  /** Resolves once the batch is durable in the hot tier. */
  durable: Promise<void>;
}

export interface StreamStorage {
  /** Prepares the partitions of a stream (idempotent; also used when partitions are added). */
  openStream(def: StreamDef): Promise<void>;
  /** Removes a stream's data. */
  dropStream(name: string): Promise<void>;
  /**
   * Appends one record batch (Kafka RecordBatch v2) to a partition. The offset is assigned synchronously,
   * before this returns, and written into the batch. Batches with a producer id are idempotent (KIP-98): a
   * repeated sequence range is not appended again (`duplicate`), a gap throws OUT_OF_ORDER_SEQUENCE, an older
   * producer epoch throws PRODUCER_FENCED.
   *
   * The batch is borrowed for the duration of the call: the storage keeps a copy of what it needs, and the caller
   * may reuse the buffer once this returns (the Kafka adapter reuses its request frames).
   *
   * `stamped`: the batch carries an MQTT QoS 2 publish key as its producer id and sequence (Message.pubKey), checked
   * as a forwarded batch (gaps allowed; at or below the producer's last sequence is a duplicate, never an error).
   */
  append(stream: string, partition: number, batch: Buffer, stamped?: boolean): AppendResult;
  /**
   * Durable batches from the one holding `offset` onwards, up to about `maxBytes` (always at least one batch
   * when one is available, as Kafka requires).
   *
   * With a `lease`, the buffers may point into storage memory that is reused once the lease is released, so the
   * reader must release it only when it no longer needs them (e.g. once they are written to a socket). Without
   * one, the buffers are the reader's to keep.
   */
  read(stream: string, partition: number, offset: number, maxBytes: number, lease?: ReadLease): Promise<Buffer[]>;
  offsets(stream: string, partition: number): PartitionOffsets;
  /** First offset whose record timestamp is >= ts; the high watermark when there is none. */
  offsetForTimestamp(stream: string, partition: number, ts: number): Promise<number>;
  /** Resolves when the high watermark passes `offset`, or after `timeoutMs`. */
  waitFor(stream: string, partition: number, offset: number, timeoutMs: number): Promise<void>;
  /**
   * Makes every offset below `offset` unreadable (Kafka DeleteRecords): moves the log start offset forward,
   * durably, never backward; `offset` must be <= the high watermark. Returns the new log start offset.
   */
  deleteRecordsBefore(stream: string, partition: number, offset: number): Promise<number>;
  /**
   * Cluster mode only (absent on a single broker): who serves the partition as far as this broker knows now.
   * `local`: this broker owns it and writes it; `broker`: the owner's id (this broker's when local; null while
   * nobody live owns it: ownership is moving); `epoch`: the owner row's epoch (0 when unknown), the Kafka leader
   * epoch.
   */
  locate?(stream: string, partition: number): PartitionLocation;
  /**
   * Cluster mode: the partition's offsets as its owner has them now (offsets() answers those of partitions written
   * elsewhere from a cache); absent on a single broker, where offsets() is always current.
   */
  fetchOffsets?(stream: string, partition: number): Promise<PartitionOffsets>;
  /**
   * The engine's Kafka transaction state, handed over at its creation: the log cleaner of compacted streams removes
   * aborted transactions' records and, past delete.retention.ms, the markers of transactions it emptied.
   */
  useTransactions?(txns: TxnPartitions): void;
  /** Broker-wide defaults for streams without settings of their own (retention, segments); absent: not supported. */
  setDefaults?(defaults: StreamDefaults): void;
  /**
   * Bytes the partition holds, hot tier and segment objects together (Kafka DescribeLogDirs' partition size); null
   * when this broker does not hold the partition (cluster mode: another broker owns it). Absent: unknown.
   */
  partitionSize?(stream: string, partition: number): number | null;
  /**
   * Bytes every stream held here holds, split into the hot tier (unsealed tails in the WAL) and segment objects:
   * one walk over the partitions (per-namespace usage and the storage quota fold it by namespace). Absent: unknown.
   */
  streamSizes?(): Map<string, { hot: number; objects: number }>;
  /**
   * Idempotent producers with state in the partition (Kafka DescribeProducers): id, epoch, last sequence and the
   * last batch's timestamp; null when this broker does not hold the partition. Absent: unknown.
   */
  producers?(stream: string, partition: number): ProducerSnapshot[] | null;
}

/** An idempotent producer's state in a partition (StreamStorage.producers). */
export interface ProducerSnapshot {
  producerId: number;
  producerEpoch: number;
  lastSequence: number;
  /** Largest timestamp of its last batch (ms), -1 when unknown. */
  lastTimestamp: number;
}

/** Where a partition is served (StreamStorage.locate). */
export interface PartitionLocation {
  local: boolean;
  broker: number | null;
  epoch: number;
}

export interface StreamCatalog {
  createStream(def: StreamDef): Promise<void>;
  updateStream(def: StreamDef): Promise<void>;
  deleteStream(name: string): Promise<void>;
  listStreams(): Promise<StreamDef[]>;
}

/** Storage memory held on behalf of a reader (see ReadLease). */
export interface Pin {
  unpin(): void;
}

/**
 * What a reader holds while it uses buffers that point into storage memory (StreamStorage.read). Releasing it
 * gives every pin back; pins added after the release are given back at once (the reader is gone and will not
 * look at the bytes).
 */
export class ReadLease {
  private pins: Pin[] = [];
  private released = false;

  hold(pin: Pin): void {
    if (this.released) pin.unpin();
    else this.pins.push(pin);
  }

  get empty(): boolean {
    return this.pins.length === 0;
  }

  release(): void {
    this.released = true;
    const pins = this.pins;
    this.pins = [];
    for (const p of pins) p.unpin();
  }
}
