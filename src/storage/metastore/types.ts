/**
 * The metastore: the source of truth for metadata (stream definitions and bindings, partition state, the
 * segment index, consumer offsets). Embedded backend: SQLite; cluster backend: PostgreSQL (later).
 * All methods are async so that a networked backend fits the same interface.
 */

import type { CommittedOffset, OffsetCommit, OffsetStore, ProducerIdStore, StreamDef } from '../../core/index.js';
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

/** A consumer group's committed position: the core's CommittedOffset, stored here. */
export type ConsumerOffset = CommittedOffset;

export interface Metastore extends OffsetStore, ProducerIdStore {
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
  /** Several offsets of one group in one transaction (the core's OffsetStore); NOT_FOUND for unknown streams. */
  commitOffsets(group: string, offsets: OffsetCommit[]): Promise<void>;
  /** Groups with at least one committed offset, ordered. */
  listGroups(): Promise<string[]>;
  /** Removes a group's offsets; no error when it has none. */
  deleteGroup(group: string): Promise<void>;

  /** Reserves `count` never-used producer ids and returns the first (the core's ProducerIdStore). */
  allocateProducerIds(count: number): Promise<number>;
  /** Idempotent-producer state of a partition as of `endOffset` (opaque JSON of the log engine). */
  putProducerState(stream: string, partition: number, endOffset: number, state: string): Promise<void>;
  getProducerState(stream: string, partition: number): Promise<{ endOffset: number; state: string } | null>;

  close(): Promise<void>;
}
