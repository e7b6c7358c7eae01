/**
 * The metastore: the source of truth for metadata (stream definitions and bindings, partition state and
 * ownership epochs, the segment index, consumer offsets, producer ids, client sessions and their queues,
 * retained messages, queue/exchange/binding definitions, JetStream consumer state, the control plane's documents:
 * users, groups, tokens, policies, namespaces, login sessions). One object covers every role; the broker opens one and hands it around.
 * Embedded backend: SQLite; cluster backend: PostgreSQL.
 *
 * Contract every backend keeps (test/conformance/*.suite.ts checks it):
 * - All methods are async, so that a networked backend fits the same interface.
 * - Per-key order: calls that name the same key take effect in the order they were issued, whether or not the
 *   caller awaited the earlier ones, and a read sees every write issued before it on its key. The keys are a
 *   client id (putSession, deleteSession and every queue call), a topic (retained messages), a partition
 *   (openPartition and every call that carries an epoch), a group (offsets), a stream name (definitions) and a
 *   JetStream consumer (stream, name) (ConsumerStateStore; deleteConsumers and listConsumers of a stream come
 *   after every call issued before them on that stream's consumers), and a control document (kind, name)
 *   (ControlStore; listControl and controlVersion come after every control write issued before them). Calls on different keys may take effect in
 *   any order. (SQLite runs each call when it is made; a pooled
 *   PostgreSQL client must chain calls per key to keep this.)
 * - Fencing: a partition has an ownership epoch, bumped by openPartition. Every partition mutation carries
 *   the writer's epoch, and one whose epoch is lower than the partition's current epoch is refused with
 *   FlowError FENCED and changes nothing.
 * - A write resolves only once it is durable (session-queue writes: see SessionStore).
 * - Queue, exchange and binding definitions (QueueCatalog) are keyed by their name; deleting a queue or an exchange
 *   deletes the bindings that name it. Queue messages are not here but in a QueueStore (src/storage/queues).
 */

import type {
  ConsumerStateStore,
  QueueCatalog,
  CommittedOffset,
  OffsetStore,
  ProducerIdStore,
  RetainedStore,
  SessionStore,
  StreamCatalog,
  StreamDef,
} from '../../core/index.js';
import type { ControlStore } from './control-store.js';
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
  /** The current ownership epoch (0 until the partition is first opened). */
  epoch: number;
}

/** A consumer group's committed position: the core's CommittedOffset, stored here. */
export type ConsumerOffset = CommittedOffset;

export interface Metastore extends StreamCatalog, OffsetStore, ProducerIdStore, SessionStore, RetainedStore, QueueCatalog, ConsumerStateStore, ControlStore {
  readonly kind: string;

  createStream(def: StreamDef): Promise<void>; // throws FlowError ALREADY_EXISTS
  listStreams(): Promise<StreamDef[]>;
  updateStream(def: StreamDef): Promise<void>; // throws NOT_FOUND
  deleteStream(name: string): Promise<void>; // removes its partitions, segments and offsets; NOT_FOUND if absent

  /**
   * Takes a partition for writing: bumps its ownership epoch and returns the new one (1 the first time). From
   * then on the mutations below carrying an older epoch are refused with FENCED: a broker that opens a
   * partition fences every writer that opened it before. NOT_FOUND if the stream is absent.
   */
  openPartition(stream: string, partition: number): Promise<number>;
  getPartitionState(stream: string, partition: number): Promise<PartitionState | null>;
  /** Never moves the log start offset backwards; NOT_FOUND if the stream is absent; FENCED for a stale epoch. */
  setLogStartOffset(stream: string, partition: number, offset: number, epoch: number): Promise<void>;

  /**
   * Records a segment as durable in the object store and advances the partition's flushedOffset to its
   * endOffset, atomically. Throws INVALID_ARGUMENT if the segment does not start at the current flushedOffset
   * (committing the very segment that ended there again is a no-op), FENCED for a stale epoch.
   */
  commitSegment(seg: SegmentMeta, epoch: number): Promise<void>;
  /** Segments of a partition, ordered by baseOffset. */
  listSegments(stream: string, partition: number): Promise<SegmentMeta[]>;
  /** No error when absent; FENCED for a stale epoch. */
  deleteSegment(stream: string, partition: number, baseOffset: number, epoch: number): Promise<void>;
  /**
   * Swaps the object of a committed segment for another holding the same offsets (the log's cleaner: a compacted
   * copy), in one atomic step: the row of [seg.baseOffset, seg.endOffset) that names `oldObjectKey` takes seg's
   * object key, size and max timestamp. False when no such row is there any more (retention or DeleteRecords
   * deleted it, or another cleaner swapped it); FENCED for a stale epoch.
   */
  replaceSegment(seg: SegmentMeta, oldObjectKey: string, epoch: number): Promise<boolean>;

  /**
   * Idempotent-producer state of a partition as of `endOffset` (opaque JSON of the log engine); FENCED for a
   * stale epoch.
   */
  putProducerState(stream: string, partition: number, endOffset: number, state: string, epoch: number): Promise<void>;
  getProducerState(stream: string, partition: number): Promise<{ endOffset: number; state: string } | null>;

  close(): Promise<void>;
  /** Optional: the backend's own counters (its connection pool, queries, errors), for the admin API. */
  figures?(): Record<string, unknown>;
}
