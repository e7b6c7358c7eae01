/**
 * The state of one partition of the log (the Partition) as the log manager keeps it: its committed segments, the
 * tail of batches not yet in one (with the cuts that delimit the segments to come), the recent sealed batches kept
 * for readers, its offsets, its idempotent-producer state, and what its WAL writes, seals, failures, fencing and
 * readers waiting for data stand at. The operations on it are log-manager.ts's rooms (append.ts, seal.ts,
 * recovery.ts, read.ts).
 */
import { FlowError, type StreamDef } from '../../core/index.js';
import type { SegmentMeta } from '../metastore/types.js';
import { ProducerState } from './producer-state.js';
import type { Chunk, ChunkCursor } from './batch-memory.js';

export interface TailBatch {
  baseOffset: number;
  endOffset: number;
  maxTimestamp: number;
  data: Buffer;
  /** The reused memory `data` lies in (pinned by this entry until it leaves the tail); null for its own buffer. */
  chunk: Chunk | null;
}

export interface Waiter {
  offset: number;
  resolve: () => void;
  timer: NodeJS.Timeout;
}

export class Partition implements ChunkCursor {
  /** Where this partition's next large batch is copied (BatchMemory). */
  chunk: Chunk | null = null;
  /** Committed segments, ordered. */
  segments: SegmentMeta[] = [];
  /** Sealed batches still in memory (see LogOptions.recentBytes), ordered; they end where the tail begins. */
  recent: TailBatch[] = [];
  /** Batches not yet in a committed segment (including those being sealed), ordered. */
  tail: TailBatch[] = [];
  tailBytes = 0;
  tailSince = 0;
  nextOffset = 0;
  highWatermark = 0;
  logStartOffset = 0;
  flushedOffset = 0;
  sealing: Promise<void> | null = null;
  /** Compacted streams: the cleaner's pass under way, the offset its last pass cleaned to, passes (object generations). */
  compacting: Promise<void> | null = null;
  cleanedOffset = 0;
  compactions = 0;
  /** Bytes appended since the last cut: the open segment. */
  openBytes = 0;
  /** Offsets where completed segments end, ascending, all above flushedOffset: a seal takes the tail up to the first. */
  cuts: number[] = [];
  /** The next append starts a segment (and a WAL file): true after a cut, and after opening. */
  cutPending = true;
  /** Idempotent-producer state including the tail, and as of flushedOffset (what the metastore holds). */
  producers = new ProducerState();
  flushedProducers = new ProducerState();
  /** The latest WAL failure while appends are refused (draining, then the backoff); null when writing normally. */
  failure: FlowError | null = null;
  /** A WAL append failed and appends made before it are still settling: the tail is rewound once they have. */
  draining = false;
  /** Appends are refused until then (Date.now()) after a failure. */
  retryAt = 0;
  /** WAL failures in a row (the backoff's attempt). */
  walFailures = 0;
  /** WAL appends not settled yet. */
  inflight = 0;
  /** Times the tail was rewound after a failure: a batch's offsets may have been given to another since. */
  rewinds = 0;
  /** Seals: when the next may be tried after failures, and the failures in a row (the backoff's attempt). */
  sealRetryAt = 0;
  sealFailures = 0;
  /** Object key of a segment whose metastore commit failed: it may have landed all the same (see writeSegment). */
  unsureCommit: string | null = null;
  waiters: Waiter[] = [];
  /** Why the partition takes no more writes here: a mutation was refused with FENCED (see LogManager.fence). */
  fenced: FlowError | null = null;
  /** This writer's ownership epoch of the partition (Metastore.openPartition), carried by every mutation. */
  epoch = 0;
  /** Cluster mode: the partition is being handed over (appends are refused with NOT_OWNER). */
  releasing = false;
  /** The latest WAL append (they settle in order): a handover waits for it. */
  lastWrite: Promise<unknown> | null = null;
  constructor(
    /** Replaced when the stream is redefined (retention changed, partitions added); never its incarnation. */
    public def: StreamDef,
    readonly partition: number,
    /** WAL key and object prefix: stream name plus incarnation, so a re-created stream never sees old data. */
    readonly key: string,
  ) {}
}

/** The partition's first completed segment is durable: a seal can take it. */
export function segmentReady(p: Partition): boolean {
  return p.cuts.length > 0 && p.highWatermark >= p.cuts[0];
}

export function partitionKey(def: StreamDef, partition: number): string {
  return `${def.name}@${def.createdAt}/${partition}`;
}
