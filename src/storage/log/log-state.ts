/**
 * The log manager's shared state (`LogState`, the base of `LogManager`) and the options it runs with: the partitions
 * by name and WAL key, the recovery hand-off, the segment index cache, the memory of the tails (unsealed bytes, the
 * throttled acknowledgements, the recent sealed batches, the batch memory), the seal slots and WAL trims, the
 * counters; and what every room uses: finding a partition, fencing it, cutting its open segment, adding to its
 * tail, waking readers waiting for its high watermark, letting throttled acknowledgements go, trimming the WAL.
 *
 * The rooms are functions over it (log-manager.ts lists them).
 */
import type { Logger } from 'pino';
import { CoalescingTask, FlowError, NO_STREAM_DEFAULTS, type StreamDef, type StreamDefaults, type TxnPartitions } from '../../core/index.js';
import type { Metastore } from '../metastore/types.js';
import type { ObjectStore } from '../objects/types.js';
import type { WalEntry, WriteAheadLog } from '../wal/types.js';
import { backoffDelay } from '../../util/backoff.js';
import { BatchMemory } from './batch-memory.js';
import { IndexCache } from './index-cache.js';
import { Partition, type TailBatch, type Waiter } from './partition.js';

export interface LogOptions {
  /** Seal the tail into a segment object once it holds this many bytes. */
  segmentBytes: number;
  /** ...or once its oldest batch is this old. */
  segmentMs: number;
  /** How often the background task looks for tails to seal and retention to apply. */
  checkIntervalMs: number;
  /** Segment indexes kept in memory (index-cache.ts)... */
  indexCacheEntries: number;
  /** ...and their entries (one per batch) together, at most. */
  indexCacheBatches: number;
  /**
   * Segment objects written at the same time, across all partitions. One by default: partitions fill up together
   * under an even load, and several 16 MiB writes with their fsyncs at once make the WAL's fsyncs (what every
   * acks=all producer waits for) queue behind them at the disk and in libuv's thread pool.
   */
  sealConcurrency: number;
  /**
   * Bytes the partitions' tails may hold together (appended, not yet in segment objects) before appends are
   * acknowledged only as seals bring it back under this. Producing faster than segments can be written would
   * otherwise grow memory and the WAL without bound.
   */
  maxUnsealedBytes: number;
  /**
   * Memory the tails' large batches are copied into and reused from (see batch-memory.ts); beyond it batches get
   * buffers of their own. Default: maxUnsealedBytes plus a chunk per partition's worth of slack.
   */
  batchMemoryBytes?: number;
  /**
   * Sealed batches kept in memory after their seal, across all partitions, for consumers a little behind: without
   * them, a consumer that falls one segment behind reads from the object store (the disk, in embedded mode) and
   * tends to stay behind. Oldest sealed first out. Default: a quarter of maxUnsealedBytes, at most 64 MiB.
   */
  recentBytes?: number;
  /**
   * How long a sealed batch stays in the read cache at most (ms; 0: until the budget pushes it out). A consumer
   * further behind reads from the object store (through its block cache); the cache then holds what the last
   * minutes brought, not whatever filled its budget hours ago. Default 2 minutes.
   */
  recentMaxAgeMs?: number;
  /** Compacted streams: bytes per second the cleaner reads and writes at most (0: unpaced). */
  compactionBytesPerSec?: number;
  /** Compacted streams: how long a replaced segment object stays for readers that looked it up before (ms). */
  compactionDeleteDelayMs?: number;
}

/**
 * The free-space reserve as the log sees it (see ../disk-space.ts): appends are refused while `refusal()` says why,
 * and `written()` is told the bytes appended, so the estimate of free space follows between two looks at the disk.
 */
export interface SpaceGuard {
  refusal(): FlowError | null;
  written(bytes: number): void;
}

/** First wait after a failed WAL write or seal, doubled per failure in a row up to MAX_BACKOFF_MS. */
export const FIRST_BACKOFF_MS = 100;
export const MAX_BACKOFF_MS = 5000;
export const backoffMs = (failures: number): number => backoffDelay(failures, FIRST_BACKOFF_MS, MAX_BACKOFF_MS);

/**
 * Smallest segment a stream's own segment size (Kafka's segment.bytes) makes: Kafka 3.x accepts 14 bytes, but here
 * a segment is an object in the object store and a row in the metastore, so one per batch would cost a write and a
 * row per batch. 1 MiB is the floor Kafka 4.0 sets for segment.bytes itself (KIP-1030).
 */
export const MIN_STREAM_SEGMENT_BYTES = 1024 * 1024;

export const DEFAULT_LOG_OPTIONS: LogOptions = {
  segmentBytes: 16 * 1024 * 1024,
  segmentMs: 60_000,
  checkIntervalMs: 1000,
  indexCacheEntries: 1024,
  // ~100 bytes each in memory: ~25 MiB.
  indexCacheBatches: 262_144,
  sealConcurrency: 1,
  maxUnsealedBytes: 256 * 1024 * 1024,
};

/** How long a sealed batch stays in the read cache at most, by default (LogOptions.recentMaxAgeMs). */
export const RECENT_MAX_AGE_MS = 120_000;

/** How often free batch memory that went unused is let go. */
export const MEMORY_TRIM_MS = 10_000;

/** The log engine's counters (each one a `flowmq_log_<name>_total` metric); they only grow. */
export function newLogStats() {
  return {
    sealedSegments: 0,
    sealedBytes: 0,
    objectReads: 0,
    walTrimmedBytes: 0,
    recoveredBatches: 0,
    /** Segments that became objects by moving the WAL's file (no second write). */
    adoptedSegments: 0,
    /**
     * Uncommitted segment objects in the key format before epochs found at open and committed (a crash between
     * object and metastore of a broker that renamed WAL files into objects before committing them).
     */
    recoveredSegments: 0,
    /** Uncommitted segment objects deleted at open (a writer crashed or was fenced before committing them). */
    garbageObjects: 0,
    /**
     * Cluster mode: what deleted streams left where no broker held them, collected (garbage.ts): WAL keys, the bytes
     * of their entries, segment objects.
     */
    deletedStreamWalKeys: 0,
    deletedStreamWalBytes: 0,
    deletedStreamObjects: 0,
    /** Partitions that stopped taking writes because another writer took them (a later epoch). */
    fencedPartitions: 0,
    /** Appends whose acknowledgement waited for seals to bring the tails under maxUnsealedBytes. */
    throttledAppends: 0,
    /** Appends refused at once: below the free-space reserve, or while a partition backs off after a failure. */
    refusedAppends: 0,
    /** Retries of idempotent or forwarded batches answered with their first append's offset, not appended. */
    duplicateAppends: 0,
    /** WAL appends that failed (a full disk, an I/O error), and tails rewound after them. */
    failedAppends: 0,
    rewinds: 0,
    /** Seals (segment object or metastore commit) that failed and were retried later. */
    failedSeals: 0,
    /** Compaction: cleaner passes done, bytes of segments it read, segments it rewrote, records it removed, bytes saved. */
    compactionRuns: 0,
    compactedBytes: 0,
    compactedSegments: 0,
    compactedRecords: 0,
    compactionSavedBytes: 0,
    /** Batches (or segment indexes) that failed their checksum when read back: reported and never served (verify.ts). */
    corruptBatches: 0,
  };
}

/** The log manager's state (see the file header); `LogManager` (log-manager.ts) is its one subclass. */
export abstract class LogState {
  readonly parts = new Map<string, Partition>();
  readonly byKey = new Map<string, Partition>();
  /** WAL entries replayed at open, waiting for their partition to be opened. */
  recovered: Map<string, WalEntry[]> | null = new Map();
  /** Epochs taken at open (before the WAL was read) for the partitions of the streams defined then, by WAL key. */
  readonly taken = new Map<string, number>();
  readonly indexCache: IndexCache;
  /**
   * Cluster mode: definitions of every stream (openStream), whose partitions are taken one by one by
   * acquirePartition; null on a single broker, where openStream takes them all.
   */
  readonly defs: Map<string, StreamDef> | null;
  /** Cluster mode: WAL keys of streams deleted here, which trim may clear (every other unknown key is another broker's). */
  readonly droppedKeys = new Set<string>();
  /** Cluster mode: told when a partition is fenced (another broker took it), so that its ownership is let go. */
  onFenced: ((stream: string, partition: number) => void) | null = null;
  timer: NodeJS.Timeout | null = null;
  closed = false;
  /** WAL trims, one at a time; a trim asked for during one runs again after it. */
  readonly trimTask = new CoalescingTask(() => this.trimOnce());
  activeSeals = 0;
  readonly sealWaiters: Array<() => void> = [];
  /** Sum of the partitions' tailBytes. */
  unsealed = 0;
  /** Acknowledgements held back while `unsealed` is above maxUnsealedBytes. */
  throttled: Array<() => void> = [];
  readonly memory: BatchMemory;
  /** Every partition's recent batches, in the order they were sealed (the oldest goes first). */
  recentQueue: Array<{ p: Partition; b: TailBatch; at: number }> = [];
  recentHead = 0;
  recentTotal = 0;
  /** Compaction: replaced segment objects waiting for their readers, by key; whether a cleaner round runs. */
  readonly pendingDeletes = new Map<string, NodeJS.Timeout>();
  compactionRunning = false;
  /** The retention pass running, if one is (seal.ts applyRetention: one at a time). */
  retentionPass: Promise<void> | null = null;
  /** The engine's Kafka transaction state (useTransactions): the cleaner drops aborted records with it. */
  transactions: TxnPartitions | null = null;
  readonly recentBudget: number;
  readonly recentMaxAgeMs: number;
  memoryTrimmedAt = Date.now();
  readonly stats = newLogStats();

  protected constructor(
    readonly wal: WriteAheadLog,
    readonly objects: ObjectStore,
    readonly meta: Metastore,
    readonly logger: Logger,
    readonly options: LogOptions,
    readonly space: SpaceGuard | undefined,
    owned: boolean,
  ) {
    this.defs = owned ? new Map() : null;
    this.indexCache = new IndexCache(options.indexCacheEntries, options.indexCacheBatches);
    this.recentBudget = options.recentBytes ?? Math.min(64 * 1024 * 1024, Math.floor(options.maxUnsealedBytes / 4));
    this.recentMaxAgeMs = options.recentMaxAgeMs ?? RECENT_MAX_AGE_MS;
    this.memory = new BatchMemory(options.batchMemoryBytes ?? options.maxUnsealedBytes + this.recentBudget + 64 * 1024 * 1024);
  }

  /** StreamStorage.useTransactions: the engine hands its transaction state over at its creation. */
  useTransactions(txns: TxnPartitions): void {
    this.transactions = txns;
  }

  /**
   * A mutation of `p` was refused with FENCED: another writer took the partition (a later epoch). From now on it
   * takes no writes here, for good: appends are refused with FENCED and seals stop. Its tail no longer holds back
   * other partitions' acknowledgements (it will never be sealed here).
   */
  fence(p: Partition, err: FlowError): void {
    if (p.fenced !== null) return;
    p.fenced = err;
    this.stats.fencedPartitions++;
    this.logger.error({ partition: p.key, epoch: p.epoch, err }, 'partition fenced: another writer owns it now (a later epoch); it takes no more writes here');
    this.onFenced?.(p.def.name, p.partition);
    if (this.byKey.get(p.key) === p) this.unsealed -= p.tailBytes;
    for (const w of p.waiters.splice(0)) {
      clearTimeout(w.timer);
      w.resolve();
    }
    this.releaseThrottled();
  }

  /** Passes `err` on, fencing `p` first when it says another writer owns the partition now. */
  fencedBy(p: Partition, err: unknown): unknown {
    if (err instanceof FlowError && err.code === 'FENCED') this.fence(p, err);
    return err;
  }

  part(stream: string, partition: number): Partition {
    const p = this.parts.get(`${stream}/${partition}`);
    if (!p) {
      const def = this.defs?.get(stream);
      if (def !== undefined && partition >= 0 && partition < def.partitions) {
        throw new FlowError('NOT_OWNER', `partition ${stream}/${partition} is not served by this broker`);
      }
      throw new FlowError('NOT_FOUND', `stream "${stream}" has no partition ${partition}`);
    }
    return p;
  }

  objectPrefix(p: Partition): string {
    return `streams/${p.def.name}/${p.def.createdAt}/${p.partition}`;
  }

  /** Ends the open segment at the next offset; the next append starts another (in a new WAL file). */
  cut(p: Partition): void {
    if (p.openBytes > 0) {
      p.cuts.push(p.nextOffset);
      p.openBytes = 0;
    }
    p.cutPending = true;
  }

  pushTail(p: Partition, b: TailBatch): void {
    if (p.tail.length === 0) p.tailSince = Date.now();
    p.tail.push(b);
    p.tailBytes += b.data.length;
    this.unsealed += b.data.length;
    p.nextOffset = b.endOffset;
  }

  waitFor(stream: string, partition: number, offset: number, timeoutMs: number): Promise<void> {
    const p = this.part(stream, partition);
    if (p.highWatermark > offset || timeoutMs <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const w: Waiter = {
        offset,
        resolve,
        timer: setTimeout(() => {
          const i = p.waiters.indexOf(w);
          if (i >= 0) p.waiters.splice(i, 1);
          resolve();
        }, timeoutMs),
      };
      p.waiters.push(w);
    });
  }

  wake(p: Partition): void {
    if (p.waiters.length === 0) return;
    const keep: Waiter[] = [];
    for (const w of p.waiters) {
      if (p.highWatermark > w.offset) {
        clearTimeout(w.timer);
        w.resolve();
      } else keep.push(w);
    }
    p.waiters = keep;
  }

  /** Lets held-back acknowledgements go once the tails are under maxUnsealedBytes again (or the log closes). */
  releaseThrottled(): void {
    if (this.throttled.length === 0 || (this.unsealed > this.options.maxUnsealedBytes && !this.closed)) return;
    const go = this.throttled;
    this.throttled = [];
    for (const resolve of go) resolve();
  }

  /** Deletes the WAL files whose entries are all in committed segments (or belong to deleted streams). */
  trimWal(): Promise<void> {
    return this.trimTask.run();
  }

  private async trimOnce(): Promise<void> {
    // A key unknown here belongs to a deleted stream: nothing needs its entries. In cluster mode the WAL is shared:
    // an unknown key is most likely a partition of another broker (or one handed over), never trimmed from here.
    const dropped = this.defs === null ? null : this.droppedKeys;
    const clearing = dropped === null ? [] : [...dropped];
    const released = await this.wal.trim((key) => {
      const p = this.byKey.get(key);
      if (p !== undefined) return p.flushedOffset;
      return dropped === null || dropped.has(key) ? Number.MAX_SAFE_INTEGER : 0;
    });
    for (const k of clearing) dropped!.delete(k);
    this.stats.walTrimmedBytes += released;
  }

  /** Broker-wide defaults for streams without settings of their own (Engine.setStreamDefaults). */
  defaults: StreamDefaults = NO_STREAM_DEFAULTS;

  /**
   * The size at which a partition's open segment is cut: its stream's own, else the broker-wide default set at run
   * time (either at least 1 MiB), else the log's.
   */
  segmentBytes(p: Partition): number {
    const own = p.def.segmentBytes ?? this.defaults.segmentBytes;
    return own == null ? this.options.segmentBytes : Math.max(own, MIN_STREAM_SEGMENT_BYTES);
  }
}
