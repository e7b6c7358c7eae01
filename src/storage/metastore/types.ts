/**
 * The metastore: the source of truth for metadata (stream definitions and bindings, partition state, the
 * segment index, consumer offsets). Embedded backend: SQLite; cluster backend: PostgreSQL (later).
 * All methods are async so that a networked backend fits the same interface.
 */

import type { StreamDef } from '../../core/index.js';
export type { StreamDef };

export interface SegmentMeta {
  stream: string;
  partition: number;
  /** First offset in the segment. */
  baseOffset: number;
  /** One past the last offset in the segment. */
  endOffset: number;
  /** Object-store key of the segment data. */
  objectKey: string;
  /** Bytes of the segment data object. */
  size: number;
  /** Largest record timestamp in the segment (ms). */
  maxTimestamp: number;
  createdAt: number;
}

export interface PartitionState {
  stream: string;
  partition: number;
  /** First offset still readable (moves with retention / DeleteRecords). */
  logStartOffset: number;
  /** One past the last offset committed to the object store. */
  flushedOffset: number;
}

export interface ConsumerOffset {
  group: string;
  stream: string;
  partition: number;
  offset: number;
  metadata: string | null;
  committedAt: number;
}

export interface Metastore {
  readonly kind: string;

  createStream(def: StreamDef): Promise<void>; // throws FlowError ALREADY_EXISTS
  getStream(name: string): Promise<StreamDef | null>;
  listStreams(): Promise<StreamDef[]>;
  updateStream(def: StreamDef): Promise<void>; // throws NOT_FOUND
  deleteStream(name: string): Promise<void>; // removes its partitions, segments and offsets; NOT_FOUND if absent

  getPartitionState(stream: string, partition: number): Promise<PartitionState | null>;
  setLogStartOffset(stream: string, partition: number, offset: number): Promise<void>;

  /**
   * Records a segment as durable in the object store and advances the partition's flushedOffset to its
   * endOffset, atomically. Throws INVALID_ARGUMENT if the segment does not start at the current flushedOffset.
   */
  commitSegment(seg: SegmentMeta): Promise<void>;
  /** Segments of a partition, ordered by baseOffset. */
  listSegments(stream: string, partition: number): Promise<SegmentMeta[]>;
  deleteSegment(stream: string, partition: number, baseOffset: number): Promise<void>;

  commitOffset(o: Omit<ConsumerOffset, 'committedAt'>): Promise<void>;
  fetchOffset(group: string, stream: string, partition: number): Promise<ConsumerOffset | null>;
  listOffsets(group: string): Promise<ConsumerOffset[]>;

  close(): Promise<void>;
}
