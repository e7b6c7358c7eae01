/**
 * The partition log engine: implements the core's StreamStorage over the three storage roles.
 *
 *   append  -> offset assigned synchronously, a copy of the batch (the caller's buffer is only borrowed; large
 *              batches go into reused chunks, see batch-memory.ts) kept in the partition's in-memory tail and
 *              appended to the WAL;
 *              the high watermark (what readers see and what producers are acked for) moves only when the
 *              WAL says the batch is durable.
 *   cut     -> segments are delimited as batches are appended: a batch that would take the open segment past
 *              `segmentBytes` starts the next one (so does the first append after a seal of a partial segment,
 *              and after a restart), and the WAL is told (WalEntry.startsFile).
 *   seal    -> a completed segment, once durable (or, after `segmentMs` or under memory pressure, the open one,
 *              cut there) goes to the object store as one segment object with an index, is committed to the
 *              metastore and leaves the tail for the read cache (`recentBytes`), and the WAL is trimmed of files no partition needs any more.
 *              Where the WAL keeps a file per segment (PartitionWal) and the object store can take a local
 *              file (the fs store), the WAL's file itself becomes the object (a hard link): no byte is written twice.
 *   throttle-> while the tails together hold more than `maxUnsealedBytes`, acknowledgements wait for seals to
 *              catch up: producers that wait for acks slow down to what the object store absorbs, and memory
 *              (and the WAL) stay bounded under any sustained load.
 *   read    -> from memory (read cache, then tail) when hot, else from segment objects by ranged reads (index
 *              cached). Batches in reused chunks are pinned by the reader's lease, or copied without one.
 *   own     -> every partition is taken with a new ownership epoch (Metastore.openPartition) when it is opened, and
 *              the WAL is fenced with it before what the WAL holds is read; every mutation carries the epoch (WAL
 *              appends, segment commits, log-start moves, producer state). One refused with FENCED means another
 *              writer took the partition since (until cluster mode: another broker opened it on the same
 *              metastore): the partition then takes no more writes here, for good (appends are refused with
 *              FENCED, seals stop), logged once. Segment object keys carry the epoch of the writer that sealed
 *              them (segment.ts segmentKey), so a fenced writer can neither overwrite a segment of the new owner
 *              nor pass for one.
 *   recover -> on open the WAL is replayed; entries past each partition's committed segments form its tail. Objects
 *              under a partition's prefix that the metastore does not list, at or past its flushed offset, are left
 *              over by a writer that crashed or was fenced between writing an object and committing it: the data
 *              is still in the WAL (a WAL file becomes an object by a link or a copy, and leaves the WAL only once
 *              the segment is committed), so they are deleted.
 *   cluster -> (`owned: true`, cluster mode) the log takes no partition at open and replays nothing: openStream only
 *              learns definitions, and the cluster's ownership hands partitions in and out one at a time.
 *              acquirePartition takes a new epoch, fences the WAL's key, reads back only that key's entries (what
 *              the previous owner left unsealed, whether it handed over or died) and the producer state;
 *              releasePartition stops appends (NOT_OWNER), waits until those in flight are durable (a handover)
 *              and lets go of the memory, leaving the rest in the WAL for the next owner. The WAL is shared by every
 *              broker: trim only ever names keys this log holds (or streams it deleted), never another broker's.
 *   fail    -> a WAL append that fails (a full disk, EIO) fails to its producer, and so do the partition's appends
 *              behind it (the WAL refuses them: see WriteAheadLog.append). Once they have all settled, the tail is
 *              rewound to the high watermark (what is durable), the offsets of the failed batches are given out
 *              again, and the next append starts a new segment (and WAL file) there. Meanwhile, and for a backoff
 *              of 100 ms doubling to 5 s per failure in a row, appends are refused at once with the failure's code
 *              (STORAGE_FULL or STORAGE_ERROR, retriable for producers); after it the partition takes appends again
 *              by itself, no restart. Failed seals (object store, metastore) are retried with the same backoff; the
 *              data stays in the WAL and in memory until they succeed. With a `space` guard (the free-space reserve),
 *              appends are refused before the disk is full.
 */
import type { Logger } from 'pino';
import {
  CoalescingTask,
  FlowError,
  NO_STREAM_DEFAULTS,
  effectiveRetention,
  decodeBatch,
  readBatchInfo,
  setBaseOffset,
  OFF_ATTRIBUTES,
  OFF_CRC,
  type AppendResult,
  type PartitionOffsets,
  type ReadLease,
  type ProducerSnapshot,
  type StreamDef,
  type StreamDefaults,
  type StreamStorage,
} from '../../core/index.js';
import type { Metastore, SegmentMeta } from '../metastore/types.js';
import type { ObjectStore } from '../objects/types.js';
import type { SegmentFileSource, WalEntry, WriteAheadLog } from '../wal/types.js';
import { backoffDelay } from '../../util/backoff.js';
import { ProducerState } from './producer-state.js';
import { BatchMemory, type Chunk, type ChunkCursor } from './batch-memory.js';
import { buildSegment, buildTrailer, findEntry, FOOTER_SIZE, parseFooter, parseIndex, parseSegmentKey, segmentKey, type SegmentIndex } from './segment.js';

export interface LogOptions {
  /** Seal the tail into a segment object once it holds this many bytes. */
  segmentBytes: number;
  /** ...or once its oldest batch is this old. */
  segmentMs: number;
  /** How often the background task looks for tails to seal and retention to apply. */
  checkIntervalMs: number;
  /** Segment indexes kept in memory. */
  indexCacheEntries: number;
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
const FIRST_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 5000;
const backoffMs = (failures: number): number => backoffDelay(failures, FIRST_BACKOFF_MS, MAX_BACKOFF_MS);

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
  sealConcurrency: 1,
  maxUnsealedBytes: 256 * 1024 * 1024,
};

/** Partitions taken (a durable metastore write each) at the same time when streams are opened. */
const OPEN_CONCURRENCY = 64;

/** Runs `fn` over `items`, at most `limit` at a time. */
async function forEachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) await fn(items[next++]);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/** How often free batch memory that went unused is let go. */
const MEMORY_TRIM_MS = 10_000;

interface TailBatch {
  baseOffset: number;
  endOffset: number;
  maxTimestamp: number;
  data: Buffer;
  /** The reused memory `data` lies in (pinned by this entry until it leaves the tail); null for its own buffer. */
  chunk: Chunk | null;
}

interface Waiter {
  offset: number;
  resolve: () => void;
  timer: NodeJS.Timeout;
}

class Partition implements ChunkCursor {
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
    /** Partitions that stopped taking writes because another writer took them (a later epoch). */
    fencedPartitions: 0,
    /** Appends whose acknowledgement waited for seals to bring the tails under maxUnsealedBytes. */
    throttledAppends: 0,
    /** Appends refused at once: below the free-space reserve, or while a partition backs off after a failure. */
    refusedAppends: 0,
    /** WAL appends that failed (a full disk, an I/O error), and tails rewound after them. */
    failedAppends: 0,
    rewinds: 0,
    /** Seals (segment object or metastore commit) that failed and were retried later. */
    failedSeals: 0,
  };
}

/** The partition's first completed segment is durable: a seal can take it. */
function segmentReady(p: Partition): boolean {
  return p.cuts.length > 0 && p.highWatermark >= p.cuts[0];
}

function partitionKey(def: StreamDef, partition: number): string {
  return `${def.name}@${def.createdAt}/${partition}`;
}

export class LogManager implements StreamStorage {
  private readonly parts = new Map<string, Partition>();
  private readonly byKey = new Map<string, Partition>();
  /** WAL entries replayed at open, waiting for their partition to be opened. */
  private recovered: Map<string, WalEntry[]> | null = new Map();
  /** Epochs taken at open (before the WAL was read) for the partitions of the streams defined then, by WAL key. */
  private readonly taken = new Map<string, number>();
  private readonly indexCache = new Map<string, SegmentIndex>();
  /**
   * Cluster mode: definitions of every stream (openStream), whose partitions are taken one by one by
   * acquirePartition; null on a single broker, where openStream takes them all.
   */
  private readonly defs: Map<string, StreamDef> | null;
  /** Cluster mode: WAL keys of streams deleted here, which trim may clear (every other unknown key is another broker's). */
  private readonly droppedKeys = new Set<string>();
  /** Cluster mode: told when a partition is fenced (another broker took it), so that its ownership is let go. */
  onFenced: ((stream: string, partition: number) => void) | null = null;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  /** WAL trims, one at a time; a trim asked for during one runs again after it. */
  private readonly trimTask = new CoalescingTask(() => this.trimOnce());
  private activeSeals = 0;
  private readonly sealWaiters: Array<() => void> = [];
  /** Sum of the partitions' tailBytes. */
  private unsealed = 0;
  /** Acknowledgements held back while `unsealed` is above maxUnsealedBytes. */
  private throttled: Array<() => void> = [];
  private readonly memory: BatchMemory;
  /** Every partition's recent batches, in the order they were sealed (the oldest goes first). */
  private recentQueue: Array<{ p: Partition; b: TailBatch }> = [];
  private recentHead = 0;
  private recentTotal = 0;
  private readonly recentBudget: number;
  private memoryTrimmedAt = Date.now();
  readonly stats = newLogStats();


  /** The tails' reused batch memory (batch-memory.ts): chunk bytes in existence, batches copied in or not. */
  get memoryStats(): { chunkBytes: number; pooledBatches: number; ownBatches: number } {
    return { chunkBytes: this.memory.bytes, pooledBatches: this.memory.pooledBatches, ownBatches: this.memory.ownBatches };
  }

  private constructor(
    private readonly wal: WriteAheadLog,
    private readonly objects: ObjectStore,
    private readonly meta: Metastore,
    private readonly logger: Logger,
    readonly options: LogOptions,
    private readonly space: SpaceGuard | undefined,
    owned: boolean,
  ) {
    this.defs = owned ? new Map() : null;
    this.recentBudget = options.recentBytes ?? Math.min(64 * 1024 * 1024, Math.floor(options.maxUnsealedBytes / 4));
    this.memory = new BatchMemory(options.batchMemoryBytes ?? options.maxUnsealedBytes + this.recentBudget + 64 * 1024 * 1024);
  }

  /** Opens the engine and replays the WAL; streams are then opened by the core with openStream(). */
  static async open(deps: {
    wal: WriteAheadLog;
    objects: ObjectStore;
    metastore: Metastore;
    logger: Logger;
    options?: Partial<LogOptions>;
    /** The free-space reserve; none: appends are refused only when a write fails. */
    space?: SpaceGuard;
    /**
     * Cluster mode: partitions are taken one at a time by acquirePartition (the cluster's ownership), none at open;
     * the WAL must be shared (replayKey).
     */
    owned?: boolean;
  }): Promise<LogManager> {
    const lm = new LogManager(
      deps.wal,
      deps.objects,
      deps.metastore,
      deps.logger,
      { ...DEFAULT_LOG_OPTIONS, ...deps.options },
      deps.space,
      deps.owned === true,
    );
    if (deps.owned === true) {
      if (typeof deps.wal.replayKey !== 'function') throw new FlowError('CONFIG_ERROR', 'cluster mode needs a WAL shared by the brokers (--wal postgres)');
      lm.recovered = null;
      lm.timer = setInterval(() => lm.background(), lm.options.checkIntervalMs);
      lm.timer.unref();
      return lm;
    }
    // Every partition defined now is taken (a new epoch) and its WAL key fenced before the WAL is read: a writer
    // that owned it before can add nothing to it afterwards that this replay would miss (a shared WAL).
    const parts: Array<{ def: StreamDef; partition: number }> = [];
    for (const def of await deps.metastore.listStreams()) {
      for (let i = 0; i < def.partitions; i++) parts.push({ def, partition: i });
    }
    await forEachLimited(parts, OPEN_CONCURRENCY, async ({ def, partition }) => {
      lm.taken.set(partitionKey(def, partition), await lm.takePartition(def, partition));
    });
    await deps.wal.replay((e) => {
      let list = lm.recovered!.get(e.key);
      if (!list) lm.recovered!.set(e.key, (list = []));
      list.push(e);
    });
    lm.timer = setInterval(() => lm.background(), lm.options.checkIntervalMs);
    lm.timer.unref();
    return lm;
  }

  /** Called once every stream is open: WAL entries of streams that no longer exist can go. */
  finishRecovery(): void {
    if (this.recovered && this.recovered.size > 0) {
      this.logger.info({ keys: [...this.recovered.keys()] }, 'WAL entries of deleted streams discarded');
    }
    this.recovered = null;
    this.taken.clear();
  }

  /** Takes a partition for writing: a new ownership epoch, with which the WAL's key is fenced. */
  private async takePartition(def: StreamDef, partition: number): Promise<number> {
    const epoch = await this.meta.openPartition(def.name, partition);
    await this.wal.fence(partitionKey(def, partition), epoch);
    return epoch;
  }

  /**
   * A mutation of `p` was refused with FENCED: another writer took the partition (a later epoch). From now on it
   * takes no writes here, for good: appends are refused with FENCED and seals stop. Its tail no longer holds back
   * other partitions' acknowledgements (it will never be sealed here).
   */
  private fence(p: Partition, err: FlowError): void {
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
  private fencedBy(p: Partition, err: unknown): unknown {
    if (err instanceof FlowError && err.code === 'FENCED') this.fence(p, err);
    return err;
  }

  private part(stream: string, partition: number): Partition {
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

  async openStream(def: StreamDef): Promise<void> {
    if (this.defs !== null) {
      // Cluster mode: the definition only; partitions come with acquirePartition. A redefinition (retention,
      // bindings, partitions added) reaches the partitions held here.
      this.defs.set(def.name, def);
      for (const p of this.parts.values()) if (p.def.name === def.name && p.def.createdAt === def.createdAt) p.def = def;
      return;
    }
    // The partitions new here are taken first (those of the streams defined at open already were), together:
    // each take is a durable metastore write, and concurrent ones share their syncs.
    const fresh: number[] = [];
    for (let i = 0; i < def.partitions; i++) {
      const existing = this.parts.get(`${def.name}/${i}`);
      if (existing) existing.def = def;
      else fresh.push(i);
    }
    const epochs = new Map<number, number>();
    await forEachLimited(fresh, OPEN_CONCURRENCY, async (i) => {
      const key = partitionKey(def, i);
      const early = this.taken.get(key);
      this.taken.delete(key);
      epochs.set(i, early ?? (await this.takePartition(def, i)));
    });
    for (const i of fresh) {
      const key = partitionKey(def, i);
      const entries = this.recovered?.get(key);
      if (entries) this.recovered!.delete(key);
      await this.loadPartition(def, i, epochs.get(i)!, entries);
    }
  }

  /**
   * Opens a partition taken with `epoch`: its committed segments and state from the metastore, the objects a
   * crashed or fenced writer left swept, the producer state, and the WAL's entries past the committed segments as
   * its tail.
   */
  private async loadPartition(def: StreamDef, i: number, epoch: number, entries: readonly WalEntry[] | undefined): Promise<Partition> {
    const p = new Partition(def, i, partitionKey(def, i));
    p.epoch = epoch;
    const state = await this.meta.getPartitionState(def.name, i);
    p.segments = await this.meta.listSegments(def.name, i);
    p.flushedOffset = state?.flushedOffset ?? 0;
    p.logStartOffset = state?.logStartOffset ?? 0;
    await this.sweepObjects(p);
    p.nextOffset = p.flushedOffset;
    await this.loadProducerState(p);
    if (entries) {
      for (const e of entries) {
        if (e.endOffset <= p.flushedOffset) continue; // already in a committed segment
        if (e.baseOffset !== p.nextOffset) {
          // Offsets are assigned contiguously and the WAL keeps append order, so this means lost data.
          throw new FlowError(
            'CORRUPT_DATA',
            `WAL gap in ${p.key}: expected offset ${p.nextOffset}, found ${e.baseOffset}`,
          );
        }
        // Segment boundaries as they were: where the WAL started files, else by size as append does.
        const len = e.data.length;
        const starts = e.startsFile ?? (p.openBytes > 0 && p.openBytes + len > this.segmentBytes(p));
        if (starts) this.cut(p);
        p.openBytes += len;
        const info = readBatchInfo(e.data);
        this.pushTail(p, { baseOffset: e.baseOffset, endOffset: e.endOffset, maxTimestamp: info.maxTimestamp, data: e.data, chunk: null });
        if (ProducerState.isIdempotent(info)) p.producers.record(info, e.baseOffset);
        this.stats.recoveredBatches++;
      }
    }
    // The WAL appends to none of its recovered files: what was recovered ends a segment.
    this.cut(p);
    p.highWatermark = p.nextOffset;
    this.parts.set(`${def.name}/${i}`, p);
    this.byKey.set(p.key, p);
    return p;
  }

  // ------------------------------------------------------------------ cluster mode: partitions handed in and out

  /**
   * Cluster mode: takes a partition this broker was given (Cluster ownership): a new epoch (which fences the
   * previous owner's metastore writes), the WAL's key fenced with it (its late appends are refused from now on),
   * then the key's entries read back (what the previous owner acknowledged and had not sealed, whether it handed
   * the partition over or died) and the idempotent-producer state. Returns the epoch.
   */
  async acquirePartition(def: StreamDef, partition: number): Promise<number> {
    if (this.defs === null) throw new FlowError('INVALID_ARGUMENT', 'acquirePartition is for cluster mode');
    if (this.closed) throw new FlowError('CLOSED', 'log is closed');
    this.defs.set(def.name, def);
    const existing = this.parts.get(`${def.name}/${partition}`);
    if (existing && !existing.releasing && existing.fenced === null && existing.def.createdAt === def.createdAt) return existing.epoch;
    if (existing) await this.releasePartition(def.name, partition, true);
    const epoch = await this.takePartition(def, partition);
    const key = partitionKey(def, partition);
    const state = await this.meta.getPartitionState(def.name, partition);
    const entries: WalEntry[] = [];
    await this.wal.replayKey!(key, (e) => entries.push(e), state?.flushedOffset ?? 0);
    this.droppedKeys.delete(key);
    await this.loadPartition(def, partition, epoch, entries);
    return epoch;
  }

  /**
   * Cluster mode: stops serving a partition. Appends are refused at once (NOT_OWNER: the caller finds the new
   * owner); for a handover (`lost` false) the appends in flight are waited for, so that everything acknowledged is
   * in the WAL for the next owner, which reads it back (nothing is sealed here: the handover stays quick). Then
   * the partition's memory goes; its WAL entries and objects stay.
   */
  async releasePartition(stream: string, partition: number, lost: boolean): Promise<void> {
    const id = `${stream}/${partition}`;
    const p = this.parts.get(id);
    if (!p) return;
    p.releasing = true;
    if (!lost) {
      await p.lastWrite?.catch(() => undefined);
      // A seal in progress finishes (or fails) before the memory it reads goes.
      await p.sealing?.catch(() => undefined);
    }
    if (this.parts.get(id) !== p) return;
    this.forgetPartitions([p]);
  }

  /** Cluster mode: true when this log holds the partition and takes appends for it. */
  holds(stream: string, partition: number): boolean {
    const p = this.parts.get(`${stream}/${partition}`);
    return p !== undefined && !p.releasing && p.fenced === null;
  }

  /** Cluster mode: the partitions held here, as `stream/partition`. */
  held(): string[] {
    return [...this.parts.keys()];
  }

  /**
   * The idempotent-producer state as of flushedOffset: the snapshot stored with the last segment, plus the batch
   * headers of any segment committed after it (a crash between the two writes).
   */
  private async loadProducerState(p: Partition): Promise<void> {
    const snap = await this.meta.getProducerState(p.def.name, p.partition);
    if (snap === null) return; // no snapshot: nothing idempotent was ever sealed (or sealed before snapshots)
    const state = ProducerState.fromJSON(snap.state);
    let pos = snap.endOffset;
    while (pos < p.flushedOffset) {
      const batches = await this.readSegments(p, pos, 1 << 20, undefined);
      if (batches.length === 0) break;
      const before = pos;
      for (const b of batches) {
        const info = readBatchInfo(b);
        if (info.baseOffset >= pos && ProducerState.isIdempotent(info)) state.record(info, info.baseOffset);
        pos = Math.max(pos, info.baseOffset + info.lastOffsetDelta + 1);
      }
      if (pos <= before) break;
    }
    p.flushedProducers = state;
    p.producers = state.clone();
  }

  /**
   * Objects under the partition's prefix that the metastore does not list, at or past its flushed offset: a writer
   * crashed or was fenced between writing a segment object and committing it. Their data is still in the WAL (a WAL
   * file leaves the WAL only once its segment is committed), so they are garbage and deleted; nothing is adopted
   * that a fenced writer may have written. One exception, for data directories written before epochs: an object
   * in the key format without an epoch that continues the committed segments is committed, because brokers then
   * moved a WAL file into the object store before committing it, so its data may be nowhere else.
   */
  private async sweepObjects(p: Partition): Promise<void> {
    const prefix = this.objectPrefix(p);
    const known = new Set(p.segments.map((s) => s.objectKey));
    for (const o of await this.objects.list(`${prefix}/`)) {
      if (known.has(o.key)) continue;
      const k = parseSegmentKey(o.key);
      if (k === null || k.baseOffset < p.flushedOffset) continue;
      if (k.epoch === null && k.baseOffset === p.flushedOffset && (await this.adoptLegacy(p, o.key, o.size))) continue;
      await this.objects.delete(o.key);
      this.stats.garbageObjects++;
      this.logger.warn(
        { partition: p.key, object: o.key, epoch: k.epoch, ownEpoch: p.epoch },
        'uncommitted segment object of a crashed or fenced writer deleted (its data is in the WAL, or was never acknowledged)',
      );
    }
  }

  /** Commits a pre-epoch uncommitted segment object that continues the committed ones (see sweepObjects). */
  private async adoptLegacy(p: Partition, key: string, size: number): Promise<boolean> {
    let index: SegmentIndex;
    try {
      index = await this.readIndex(key, size);
    } catch (err) {
      this.logger.warn({ err, object: key }, 'uncommitted segment object unreadable');
      return false;
    }
    if (index.entries.length === 0 || index.baseOffset !== p.flushedOffset) return false;
    const seg: SegmentMeta = {
      stream: p.def.name,
      partition: p.partition,
      baseOffset: index.baseOffset,
      endOffset: index.entries[index.entries.length - 1].endOffset,
      objectKey: key,
      size,
      maxTimestamp: index.entries.reduce((m, e) => Math.max(m, e.maxTimestamp), -1),
      createdAt: Date.now(),
    };
    await this.meta.commitSegment(seg, p.epoch);
    p.segments.push(seg);
    p.flushedOffset = seg.endOffset;
    this.cacheIndex(key, index);
    this.stats.recoveredSegments++;
    this.logger.info({ partition: p.key, base: seg.baseOffset, end: seg.endOffset }, 'uncommitted segment object committed at recovery');
    return true;
  }

  private objectPrefix(p: Partition): string {
    return `streams/${p.def.name}/${p.def.createdAt}/${p.partition}`;
  }

  /** Ends the open segment at the next offset; the next append starts another (in a new WAL file). */
  private cut(p: Partition): void {
    if (p.openBytes > 0) {
      p.cuts.push(p.nextOffset);
      p.openBytes = 0;
    }
    p.cutPending = true;
  }

  async dropStream(name: string): Promise<void> {
    const victims = [...this.parts.values()].filter((p) => p.def.name === name);
    if (this.defs !== null) {
      this.defs.delete(name);
      // Their WAL entries are nobody's now: trim may clear them.
      for (const p of victims) this.droppedKeys.add(p.key);
    }
    this.forgetPartitions(victims);
    // Sealing may still be running; wait so no object is written after the delete below.
    await Promise.allSettled(victims.map((p) => p.sealing));
    for (const p of victims) {
      for (const s of p.segments) {
        await this.objects.delete(s.objectKey);
        this.indexCache.delete(s.objectKey);
      }
    }
  }

  /** Takes partitions out of the log and lets go of their memory (a dropped stream, a handover). */
  private forgetPartitions(victims: Partition[]): void {
    for (const p of victims) {
      this.parts.delete(`${p.def.name}/${p.partition}`);
      this.byKey.delete(p.key);
      if (p.fenced === null) this.unsealed -= p.tailBytes; // a fenced partition's tail is out of the count already
      for (const w of p.waiters.splice(0)) {
        clearTimeout(w.timer);
        w.resolve();
      }
    }
    this.releaseThrottled();
    // The batches' memory is not reused: WAL appends or a seal may still be reading it.
    for (const p of victims) {
      for (const b of p.tail) b.chunk?.abandon();
      for (const b of p.recent) {
        b.chunk?.abandon();
        this.recentTotal -= b.data.length;
      }
      p.recent = [];
      p.chunk?.abandon();
      p.chunk = null;
    }
    if (victims.length > 0) {
      this.recentQueue = this.recentQueue.slice(this.recentHead).filter((e) => !victims.includes(e.p));
      this.recentHead = 0;
    }
  }

  private pushTail(p: Partition, b: TailBatch): void {
    if (p.tail.length === 0) p.tailSince = Date.now();
    p.tail.push(b);
    p.tailBytes += b.data.length;
    this.unsealed += b.data.length;
    p.nextOffset = b.endOffset;
  }

  append(stream: string, partition: number, batch: Buffer): AppendResult {
    if (this.closed) throw new FlowError('CLOSED', 'log is closed');
    const p = this.part(stream, partition);
    if (p.fenced !== null) {
      this.stats.refusedAppends++;
      throw new FlowError('FENCED', `partition ${p.key} is owned by another writer now (a later epoch than ${p.epoch})`, { cause: p.fenced });
    }
    if (p.releasing) throw new FlowError('NOT_OWNER', `partition ${p.key} is being handed over to another broker`);
    const refused = this.refusal(p);
    if (refused !== null) {
      this.stats.refusedAppends++;
      throw refused;
    }
    const info = readBatchInfo(batch);
    const idempotent = ProducerState.isIdempotent(info);
    if (idempotent) {
      const dup = p.producers.check(info);
      if (dup) {
        // A retry of a batch already appended: answer with its offset once it is durable, append nothing. If the
        // first append fails meanwhile (the waiter is woken then), so does this one.
        if (p.highWatermark >= dup.endOffset) return { baseOffset: dup.baseOffset, durable: Promise.resolve(), duplicate: true };
        const rewinds = p.rewinds;
        const durable = this.waitFor(stream, partition, dup.endOffset - 1, 60_000).then(() => {
          if (p.highWatermark < dup.endOffset || p.rewinds !== rewinds || p.draining) {
            throw new FlowError(p.failure?.code ?? 'STORAGE_ERROR', `the first append of this batch to ${p.key} did not become durable`);
          }
        });
        return { baseOffset: dup.baseOffset, durable, duplicate: true };
      }
    }
    const baseOffset = p.nextOffset;
    const endOffset = baseOffset + info.lastOffsetDelta + 1;
    setBaseOffset(batch, baseOffset);
    // The caller's buffer is only borrowed (StreamStorage.append): the tail and the WAL get the log's own copy
    // (made before any state changes, so a failure leaves the partition as it was).
    const { data, chunk } = this.memory.copy(p, batch);
    if (p.openBytes > 0 && p.openBytes + batch.length > this.segmentBytes(p)) this.cut(p);
    const startsFile = p.cutPending;
    p.cutPending = false;
    p.openBytes += batch.length;
    if (idempotent) p.producers.record(info, baseOffset);
    this.pushTail(p, { baseOffset, endOffset, maxTimestamp: info.maxTimestamp, data, chunk });
    // The batch's own CRC (checked by the Kafka adapter, computed by the core's encoder) covers all but its first
    // 21 bytes: the WAL combines it into its frame checksum instead of reading the batch once more.
    const dataCrc = { from: OFF_ATTRIBUTES, crc: data.readUInt32BE(OFF_CRC) };
    p.inflight++;
    this.space?.written(data.length);
    const written = this.wal.append({ key: p.key, baseOffset, endOffset, epoch: p.epoch, data, dataCrc, startsFile });
    if (this.defs !== null) p.lastWrite = written;
    const durable = written.then(
      () => {
        p.inflight--;
        // Group commits resolve in append order, so the watermark only moves forward.
        if (endOffset > p.highWatermark) p.highWatermark = endOffset;
        if (p.draining) {
          if (p.inflight === 0) this.rewind(p);
        } else if (p.failure !== null) {
          this.logger.info({ partition: p.key }, 'partition writes again after a storage failure');
          p.failure = null;
          p.walFailures = 0;
        }
        this.wake(p);
        if (segmentReady(p)) void this.seal(p);
        if (this.unsealed > this.options.maxUnsealedBytes && !this.closed) {
          this.stats.throttledAppends++;
          this.relieve();
          return new Promise<void>((resolve) => this.throttled.push(resolve));
        }
        return undefined;
      },
      (err: unknown) => {
        p.inflight--;
        if (err instanceof FlowError && err.code === 'FENCED') {
          this.fence(p, err);
          throw err;
        }
        const e = err instanceof FlowError && (err.code === 'STORAGE_FULL' || err.code === 'CLOSED') ? err : new FlowError('STORAGE_ERROR', 'write-ahead log append failed', { cause: err });
        this.walFailed(p, e);
        throw e;
      },
    );
    return { baseOffset, durable };
  }

  /** Why an append to `p` is refused right now (the free-space reserve, or a failure being backed off), or null. */
  private refusal(p: Partition): FlowError | null {
    if (p.failure !== null && (p.draining || Date.now() < p.retryAt)) {
      return new FlowError(p.failure.code, `partition ${p.key} takes no writes for now after a storage failure: ${p.failure.message}`);
    }
    return this.space?.refusal() ?? null;
  }

  /**
   * A WAL append of `p` failed: appends are refused from now on; once every append made before has settled, the
   * tail is rewound (see rewind) and the backoff starts.
   */
  private walFailed(p: Partition, err: FlowError): void {
    this.stats.failedAppends++;
    if (this.byKey.get(p.key) !== p || err.code === 'CLOSED' || p.fenced !== null) return;
    if (!p.draining) {
      p.draining = true;
      p.walFailures++;
      // One line when a partition starts failing; while it keeps failing, each retry that fails is a debug line.
      const level = p.failure === null ? 'warn' : 'debug';
      this.logger[level]({ err, partition: p.key, retryInMs: backoffMs(p.walFailures) }, 'WAL append failed; partition refuses writes until a retry succeeds');
      p.failure = err;
      // Readers and seals waiting for offsets that will not come now stop waiting.
      for (const w of p.waiters.splice(0)) {
        clearTimeout(w.timer);
        w.resolve();
      }
    }
    if (p.inflight === 0) this.rewind(p);
  }

  /**
   * After a failure, once no append of `p` is in flight: the batches past the high watermark (they all failed) leave
   * the tail, their offsets will be given out again, and the next append starts a new segment and WAL file at the
   * high watermark (the WAL takes the key again from there). Appends are refused for the backoff.
   */
  private rewind(p: Partition): void {
    p.draining = false;
    p.retryAt = Date.now() + backoffMs(p.walFailures);
    p.rewinds++;
    this.stats.rewinds++;
    const hw = p.highWatermark;
    while (p.tail.length > 0 && p.tail[p.tail.length - 1].endOffset > hw) {
      const b = p.tail.pop()!;
      p.tailBytes -= b.data.length;
      if (p.fenced === null) this.unsealed -= b.data.length; // a fenced tail is out of the count (see fence)
      b.chunk?.unpin();
    }
    p.nextOffset = hw;
    p.cuts = p.cuts.filter((c) => c <= hw);
    const lastCut = p.cuts.length > 0 ? p.cuts[p.cuts.length - 1] : -1;
    p.openBytes = 0;
    for (const b of p.tail) if (b.baseOffset >= lastCut) p.openBytes += b.data.length;
    this.cut(p);
    // The idempotent-producer state forgets the failed batches: their retries are new appends, not duplicates.
    const producers = p.flushedProducers.clone();
    for (const b of p.tail) {
      const info = readBatchInfo(b.data);
      if (ProducerState.isIdempotent(info)) producers.record(info, b.baseOffset);
    }
    p.producers = producers;
    this.releaseThrottled();
  }

  offsets(stream: string, partition: number): PartitionOffsets {
    const p = this.part(stream, partition);
    return { logStartOffset: p.logStartOffset, highWatermark: p.highWatermark };
  }

  async read(stream: string, partition: number, offset: number, maxBytes: number, lease?: ReadLease): Promise<Buffer[]> {
    const p = this.part(stream, partition);
    if (offset < p.logStartOffset || offset >= p.highWatermark) return [];
    const inMemory = p.recent.length > 0 ? p.recent[0].baseOffset : p.tail.length > 0 ? p.tail[0].baseOffset : p.nextOffset;
    if (offset >= inMemory) return this.readTail(p, offset, maxBytes, lease);
    return this.readSegments(p, offset, maxBytes, lease);
  }

  /**
   * A tail batch for a reader: a batch in reused memory is pinned by the reader's lease until it releases it, or
   * copied for a reader without one.
   */
  private handOut(b: TailBatch, lease: ReadLease | undefined): Buffer {
    if (b.chunk === null) return b.data;
    if (lease === undefined) return Buffer.from(b.data);
    lease.hold(b.chunk.pin());
    return b.data;
  }

  /** Reads batches in memory: the recent (sealed) ones, then the tail, from the one holding `offset`. */
  private readTail(p: Partition, offset: number, maxBytes: number, lease: ReadLease | undefined): Buffer[] {
    const out: Buffer[] = [];
    let bytes = 0;
    const fromRecent = p.recent.length > 0 && offset < p.recent[p.recent.length - 1].endOffset;
    for (const list of fromRecent ? [p.recent, p.tail] : [p.tail]) {
      for (let i = list === p.tail && fromRecent ? 0 : findEntry(list, offset); i < list.length; i++) {
        const b = list[i];
        if (b.endOffset > p.highWatermark) return out; // not durable yet: not visible
        if (out.length > 0 && bytes + b.data.length > maxBytes) return out;
        out.push(this.handOut(b, lease));
        bytes += b.data.length;
      }
    }
    return out;
  }

  private async readSegments(p: Partition, offset: number, maxBytes: number, lease: ReadLease | undefined): Promise<Buffer[]> {
    const si = findEntry(
      p.segments.map((s) => ({ baseOffset: s.baseOffset, endOffset: s.endOffset })),
      offset,
    );
    if (si >= p.segments.length) return this.readTail(p, offset, maxBytes, lease);
    const seg = p.segments[si];
    const index = await this.loadIndex(seg);
    let i = findEntry(index.entries, offset);
    if (i >= index.entries.length) return [];
    const first = i;
    let end = index.entries[i].position + index.entries[i].size;
    for (i++; i < index.entries.length; i++) {
      const e = index.entries[i];
      if (e.position + e.size - index.entries[first].position > maxBytes) break;
      end = e.position + e.size;
    }
    const start = index.entries[first].position;
    this.stats.objectReads++;
    const raw = await this.objects.get(seg.objectKey, { start, end });
    // Batches are where the index says (an adopted WAL file has frame headers between them).
    const out: Buffer[] = [];
    for (let k = first; k < index.entries.length && index.entries[k].position + index.entries[k].size <= end; k++) {
      const e = index.entries[k];
      out.push(raw.subarray(e.position - start, e.position - start + e.size));
    }
    return out;
  }

  private async loadIndex(seg: SegmentMeta): Promise<SegmentIndex> {
    const cached = this.indexCache.get(seg.objectKey);
    if (cached) {
      // Refresh LRU position.
      this.indexCache.delete(seg.objectKey);
      this.indexCache.set(seg.objectKey, cached);
      return cached;
    }
    const index = await this.readIndex(seg.objectKey, seg.size);
    this.cacheIndex(seg.objectKey, index);
    return index;
  }

  /** A segment object's index, read through its footer. */
  private async readIndex(objectKey: string, size: number): Promise<SegmentIndex> {
    const footer = parseFooter(await this.objects.get(objectKey, { start: size - FOOTER_SIZE, end: size }));
    return parseIndex(footer, await this.objects.get(objectKey, { start: footer.indexPos, end: size - FOOTER_SIZE }));
  }

  /** Keeps an index for later reads, the least recently used going beyond `indexCacheEntries`. */
  private cacheIndex(objectKey: string, index: SegmentIndex): void {
    this.indexCache.set(objectKey, index);
    if (this.indexCache.size > this.options.indexCacheEntries) {
      this.indexCache.delete(this.indexCache.keys().next().value as string);
    }
  }

  async offsetForTimestamp(stream: string, partition: number, ts: number): Promise<number> {
    const p = this.part(stream, partition);
    for (const seg of p.segments) {
      if (seg.endOffset <= p.logStartOffset || seg.maxTimestamp < ts) continue;
      const index = await this.loadIndex(seg);
      for (const e of index.entries) {
        if (e.maxTimestamp < ts) continue;
        const raw = await this.objects.get(seg.objectKey, { start: e.position, end: e.position + e.size });
        const hit = firstAtOrAfter(raw, ts, p.logStartOffset);
        if (hit !== null) return hit;
      }
    }
    for (const b of p.tail) {
      if (b.endOffset > p.highWatermark) break;
      if (b.maxTimestamp < ts) continue;
      const hit = firstAtOrAfter(b.data, ts, p.logStartOffset);
      if (hit !== null) return hit;
    }
    return p.highWatermark;
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

  private wake(p: Partition): void {
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

  // ------------------------------------------------------------------ sealing, trimming, retention

  /**
   * Seals the partition's first segment (the tail up to its first cut; with no cut, the open segment is cut now)
   * into a segment object once it is durable: one seal per partition at a time, and at most `sealConcurrency`
   * across partitions (one more for a partition that is catching up; the segment is chosen when the seal's turn
   * comes). A partition that fell behind seals again at once while a completed segment is ready. A successful seal
   * trims the WAL.
   */
  private seal(p: Partition, force = false): Promise<void> {
    if (p.sealing) return p.sealing;
    if (p.fenced !== null) return Promise.resolve(); // another writer owns it: it seals its own segments
    if (p.releasing) return Promise.resolve(); // handed over: the next owner seals what the WAL holds
    // After a failed seal, the next waits for its backoff (unless asked for explicitly: a flush, the shutdown).
    if (!force && Date.now() < p.sealRetryAt) return Promise.resolve();
    let sealed = false;
    const max = this.segmentBytes(p);
    // A partition more than a segment behind its sealing point is catching up: it may take one more slot than
    // sealConcurrency, and its write may take the disk in larger steps (at some cost to the WAL's latency), or
    // under a sustained load it would never catch up.
    const catchingUp = p.tailBytes >= 2 * max;
    p.sealing = this.withSealSlot(catchingUp ? this.options.sealConcurrency + 1 : this.options.sealConcurrency, async () => {
      if (this.byKey.get(p.key) !== p || p.tail.length === 0) return; // the stream is gone, or nothing to seal
      if (p.cuts.length === 0) this.cut(p);
      const end = p.cuts[0];
      // A cut made just now may wait a moment for the WAL (not a failed one: nothing more becomes durable there).
      if (p.highWatermark < end && p.failure === null) await this.waitFor(p.def.name, p.partition, end - 1, 30_000);
      if (p.highWatermark < end || this.byKey.get(p.key) !== p) return;
      let n = 0;
      while (n < p.tail.length && p.tail[n].endOffset <= end) n++;
      if (n === 0) return;
      await this.writeSegment(p, p.tail.slice(0, n), catchingUp);
      sealed = true;
      this.requestTrim();
    })
      .then(
        () => {
          if (sealed && p.sealFailures > 0) {
            this.logger.info({ partition: p.key }, 'segment flush works again');
            p.sealFailures = 0;
            p.sealRetryAt = 0;
          }
        },
        (err: unknown) => {
          this.fencedBy(p, err);
          if (p.fenced !== null) return; // never retried (logged once by fence())
          // The data is still in the WAL and in memory: a later check retries, after a backoff. One line when a
          // partition's seals start failing, debug lines while they go on failing.
          this.stats.failedSeals++;
          const level = p.sealFailures === 0 ? 'warn' : 'debug';
          const wait = backoffMs(++p.sealFailures);
          p.sealRetryAt = Date.now() + wait;
          this.logger[level]({ err, partition: p.key, retryInMs: wait }, 'segment flush failed; will retry');
        },
      )
      .finally(() => {
        p.sealing = null;
        if (this.closed) return;
        if (sealed && segmentReady(p)) void this.seal(p);
        else if (this.unsealed > this.options.maxUnsealedBytes) this.relieve();
      });
    return p.sealing;
  }

  /**
   * Over maxUnsealedBytes, the largest tail not being sealed is sealed now, full segment or not: many partitions
   * can hold the limit between them with none of them at `segmentBytes`, and acknowledgements must not wait for
   * `segmentMs` to pass.
   */
  private relieve(): void {
    let largest: Partition | null = null;
    const now = Date.now();
    for (const p of this.parts.values()) {
      if (p.sealing === null && p.fenced === null && p.tailBytes > 0 && now >= p.sealRetryAt && (largest === null || p.tailBytes > largest.tailBytes)) largest = p;
    }
    if (largest !== null) void this.seal(largest);
  }

  /** Bytes at the head of the tail that are durable (what a seal could take now). */
  private durableTailBytes(p: Partition): number {
    let bytes = 0;
    for (const b of p.tail) {
      if (b.endOffset > p.highWatermark) break;
      bytes += b.data.length;
    }
    return bytes;
  }

  /** Lets held-back acknowledgements go once the tails are under maxUnsealedBytes again (or the log closes). */
  private releaseThrottled(): void {
    if (this.throttled.length === 0 || (this.unsealed > this.options.maxUnsealedBytes && !this.closed)) return;
    const go = this.throttled;
    this.throttled = [];
    for (const resolve of go) resolve();
  }

  private async withSealSlot(slots: number, fn: () => Promise<void>): Promise<void> {
    while (this.activeSeals >= Math.max(1, slots)) {
      await new Promise<void>((resolve) => this.sealWaiters.push(resolve));
    }
    this.activeSeals++;
    try {
      await fn();
    } finally {
      this.activeSeals--;
      // Every waiter looks again: they wait for different numbers of slots (see seal).
      for (const wake of this.sealWaiters.splice(0)) wake();
    }
  }

  /** A sealed batch stays readable from memory until the recent batches of all partitions outgrow their budget. */
  private keepRecent(p: Partition, b: TailBatch): void {
    if (this.recentBudget <= 0) {
      b.chunk?.unpin();
      return;
    }
    p.recent.push(b);
    this.recentQueue.push({ p, b });
    this.recentTotal += b.data.length;
    while (this.recentTotal > this.recentBudget && this.recentHead < this.recentQueue.length) {
      // The queue holds each partition's recent batches in their order: this one is first in its partition's.
      const { p: q, b: old } = this.recentQueue[this.recentHead++];
      q.recent.shift();
      old.chunk?.unpin();
      this.recentTotal -= old.data.length;
    }
    if (this.recentHead > 1024 && this.recentHead * 2 > this.recentQueue.length) {
      this.recentQueue = this.recentQueue.slice(this.recentHead);
      this.recentHead = 0;
    }
  }

  /** Trims the WAL in the background (after a seal). */
  private requestTrim(): void {
    if (this.closed) return;
    this.trimTask.run().catch((err: unknown) => this.logger.warn({ err }, 'WAL trim failed; will retry'));
  }

  private async writeSegment(p: Partition, batches: TailBatch[], catchingUp: boolean): Promise<void> {
    const base = batches[0].baseOffset;
    const end = batches[batches.length - 1].endOffset;
    const objectKey = segmentKey(this.objectPrefix(p), base, p.epoch);
    // A commit of this segment failed last time, but may have landed (its journal sync failed, say): then the object
    // it names must not be written again (a rebuilt one can differ in size from what the metastore says), and it is
    // taken as it is.
    let landed: SegmentMeta | undefined;
    if (p.unsureCommit === objectKey) {
      landed = (await this.meta.listSegments(p.def.name, p.partition)).find((x) => x.baseOffset === base && x.endOffset === end && x.objectKey === objectKey);
      p.unsureCommit = null;
    }
    let written: { size: number; index: SegmentIndex; release?: (moved: boolean) => void } | null = null;
    if (landed !== undefined) written = { size: landed.size, index: await this.readIndex(objectKey, landed.size) };
    written ??= await this.adoptWalFile(p, objectKey, base, end, batches);
    if (written === null) {
      const built = buildSegment(
        base,
        batches.map((b) => b.data),
      );
      await this.objects.put(objectKey, built.parts, { yieldToLatency: !catchingUp });
      written = built;
    }
    const { size, index } = written;
    let maxTimestamp = -1;
    for (const b of batches) if (b.maxTimestamp > maxTimestamp) maxTimestamp = b.maxTimestamp;
    const seg: SegmentMeta = {
      stream: p.def.name,
      partition: p.partition,
      baseOffset: base,
      endOffset: end,
      objectKey,
      size,
      maxTimestamp,
      createdAt: Date.now(),
    };
    if (!this.parts.has(`${p.def.name}/${p.partition}`)) {
      written.release?.(false);
      await this.objects.delete(objectKey); // the stream was deleted meanwhile
      return;
    }
    if (landed === undefined) {
      try {
        await this.meta.commitSegment(seg, p.epoch);
      } catch (err) {
        // An adopted WAL file stays in the WAL: until a commit lands, the object is only a copy of it.
        written.release?.(false);
        p.unsureCommit = objectKey;
        throw this.fencedBy(p, err);
      }
    }
    // Committed: a WAL file that became the object leaves the WAL now (a crash before this line leaves it in both,
    // and the WAL trims it at the next open, the segment being committed).
    written.release?.(true);
    // The producer state as of the segment's end goes with it, so a restart only replays what follows.
    const flushed = p.flushedProducers.clone();
    for (const b of batches) {
      const info = readBatchInfo(b.data);
      if (ProducerState.isIdempotent(info)) flushed.record(info, b.baseOffset);
    }
    try {
      await this.meta.putProducerState(p.def.name, p.partition, end, flushed.toJSON(), p.epoch);
    } catch (err) {
      // The segment is committed: the retry takes it as it is (see unsureCommit) rather than writing it again.
      p.unsureCommit = objectKey;
      throw this.fencedBy(p, err);
    }
    p.flushedProducers = flushed;
    this.cacheIndex(objectKey, index);
    p.segments.push(seg);
    p.flushedOffset = end;
    // Drop the sealed batches from memory; appends that came meanwhile stay.
    let dropped = 0;
    while (p.tail.length > 0 && p.tail[0].endOffset <= end) {
      const b = p.tail.shift()!;
      p.tailBytes -= b.data.length;
      if (p.fenced === null) this.unsealed -= b.data.length; // a fenced tail is out of the count (see fence)
      this.keepRecent(p, b);
      dropped++;
    }
    while (p.cuts.length > 0 && p.cuts[0] <= end) p.cuts.shift();
    this.releaseThrottled();
    if (p.tail.length > 0) p.tailSince = Date.now();
    this.stats.sealedSegments++;
    this.stats.sealedBytes += size;
    this.logger.debug({ partition: p.key, base, end, batches: dropped, bytes: size }, 'segment sealed');
  }

  /**
   * Makes the WAL's file holding exactly these batches the segment object, where the WAL keeps such files and the
   * object store can take one: the WAL ends the file with the segment's index and footer, and the store links (or
   * copies) it. The file stays in the WAL until the caller calls `release`: true once the segment is committed (the
   * WAL deletes the file), false if it is not (it stays an ordinary WAL file). Null when that is not possible (the
   * caller writes the segment itself).
   */
  private async adoptWalFile(
    p: Partition,
    objectKey: string,
    base: number,
    end: number,
    batches: TailBatch[],
  ): Promise<{ size: number; index: SegmentIndex; release: (moved: boolean) => void } | null> {
    const source = this.wal as WriteAheadLog & Partial<SegmentFileSource>;
    if (typeof source.takeFile !== 'function' || typeof this.objects.adopt !== 'function') return null;
    let index: SegmentIndex | null = null;
    let taken: Awaited<ReturnType<SegmentFileSource['takeFile']>>;
    try {
      taken = await source.takeFile(p.key, base, end, ({ positions, trailerPos }) => {
        if (positions.length !== batches.length) {
          throw new FlowError('CORRUPT_DATA', `WAL file of ${p.key} at ${base} holds ${positions.length} entries, the tail ${batches.length}`);
        }
        const t = buildTrailer(
          base,
          batches.map((b) => b.data),
          positions,
          trailerPos,
        );
        index = t.index;
        return t.trailer;
      });
    } catch (err) {
      this.logger.warn({ err, partition: p.key, base }, 'WAL file could not become a segment; writing the segment instead');
      return null;
    }
    if (taken === null || index === null) return null;
    try {
      await this.objects.adopt(objectKey, taken.path);
    } catch (err) {
      taken.release(false);
      this.logger.warn({ err, partition: p.key, base }, 'object store could not take the WAL file; writing the segment instead');
      return null;
    }
    this.stats.adoptedSegments++;
    return { size: taken.size, index, release: taken.release };
  }

  /** Seals every tail now (used at shutdown, and by tests and the admin API to force a flush). */
  async flushAll(): Promise<void> {
    await Promise.all(
      [...this.parts.values()].map(async (p) => {
        // A seal takes at most a segment's worth: seal until what is durable is all in segments (or a seal fails).
        for (let before = -1; p.flushedOffset !== before && this.durableTailBytes(p) > 0; ) {
          await p.sealing;
          before = p.flushedOffset;
          await this.seal(p, true);
        }
      }),
    );
    await this.trimWal();
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

  private background(): void {
    if (this.closed) return;
    const now = Date.now();
    if (now - this.memoryTrimmedAt >= MEMORY_TRIM_MS) {
      this.memory.trim();
      this.memoryTrimmedAt = now;
    }
    const seals: Promise<void>[] = [];
    for (const p of this.parts.values()) {
      if (p.tail.length > 0 && (p.tailBytes >= this.segmentBytes(p) || now - p.tailSince >= (p.def.segmentMs ?? this.defaults.segmentMs ?? this.options.segmentMs))) {
        seals.push(this.seal(p));
      }
    }
    // Held-back acknowledgements whose seals failed are helped again once the backoff allows.
    if (this.unsealed > this.options.maxUnsealedBytes) this.relieve();
    const retention = this.applyRetention(now);
    void Promise.all([...seals, retention])
      .then(() => (seals.length > 0 ? this.trimWal() : undefined))
      .catch((err: unknown) => this.logger.warn({ err }, 'background log maintenance failed'));
  }

  /**
   * Kafka DeleteRecords: the log start offset moves to `offset` (persisted first, so a restart never exposes the
   * deleted records again), and segments wholly below it are deleted. Tail batches below it stay in memory until
   * sealed, unreadable.
   */
  async deleteRecordsBefore(stream: string, partition: number, offset: number): Promise<number> {
    const p = this.part(stream, partition);
    if (!Number.isInteger(offset) || offset < 0 || offset > p.highWatermark) {
      throw new FlowError('INVALID_ARGUMENT', `offset ${offset} is outside [0, ${p.highWatermark}]`);
    }
    if (offset <= p.logStartOffset) return p.logStartOffset;
    if (p.fenced !== null) throw new FlowError('FENCED', `partition ${p.key} is owned by another writer now`, { cause: p.fenced });
    try {
      await this.meta.setLogStartOffset(p.def.name, p.partition, offset, p.epoch);
      p.logStartOffset = Math.max(p.logStartOffset, offset);
      while (p.segments.length > 0 && p.segments[0].endOffset <= p.logStartOffset) {
        const seg = p.segments[0];
        await this.meta.deleteSegment(p.def.name, p.partition, seg.baseOffset, p.epoch);
        p.segments.shift();
        await this.objects.delete(seg.objectKey);
        this.indexCache.delete(seg.objectKey);
      }
    } catch (err) {
      throw this.fencedBy(p, err);
    }
    return p.logStartOffset;
  }

  /**
   * The size at which a partition's open segment is cut: its stream's own, else the broker-wide default set at run
   * time (either at least 1 MiB), else the log's.
   */
  private segmentBytes(p: Partition): number {
    const own = p.def.segmentBytes ?? this.defaults.segmentBytes;
    return own == null ? this.options.segmentBytes : Math.max(own, MIN_STREAM_SEGMENT_BYTES);
  }

  /**
   * Deletes whole segments older than the stream's retention, or beyond its size retention, and moves the log
   * start offset past them. By size as Kafka's retention.bytes (UnifiedLog.deleteRetentionSizeBreachedSegments):
   * the oldest segment goes while the partition (its segments and its tail) would still hold at least
   * `retentionBytes` without it; the tail, like Kafka's active segment, is never deleted.
   */
  private async applyRetention(now: number): Promise<void> {
    for (const p of this.parts.values()) {
      const { ms: r, bytes: rb } = effectiveRetention(p.def, this.defaults);
      if ((r === null && rb === null) || p.segments.length === 0 || p.fenced !== null) continue;
      let size = p.tailBytes;
      if (rb !== null) for (const seg of p.segments) size += seg.size;
      try {
        for (;;) {
          const seg = p.segments[0];
          if (seg === undefined) break;
          const expired = r !== null && seg.maxTimestamp < now - r;
          const tooBig = rb !== null && size - seg.size >= rb;
          if (!expired && !tooBig) break;
          await this.meta.setLogStartOffset(p.def.name, p.partition, seg.endOffset, p.epoch);
          p.logStartOffset = Math.max(p.logStartOffset, seg.endOffset);
          p.segments.shift();
          size -= seg.size;
          await this.meta.deleteSegment(p.def.name, p.partition, seg.baseOffset, p.epoch);
          await this.objects.delete(seg.objectKey);
          this.indexCache.delete(seg.objectKey);
          this.logger.info({ partition: p.key, base: seg.baseOffset, end: seg.endOffset, by: expired ? 'time' : 'size' }, 'segment expired by retention');
        }
      } catch (err) {
        this.fencedBy(p, err);
        if (p.fenced === null) throw err; // other failures: retried at the next pass
      }
    }
  }

  /** Stops background work; seals what it can within `graceMs`. The WAL and stores are closed by their owner. */
  async close(graceMs = 5000): Promise<void> {
    if (this.closed) return;
    if (this.timer) clearInterval(this.timer);
    let t: NodeJS.Timeout | undefined;
    await Promise.race([
      this.flushAll().catch((err: unknown) => this.logger.warn({ err }, 'final flush failed; data stays in the WAL')),
      new Promise((r) => (t = setTimeout(r, graceMs))),
    ]);
    clearTimeout(t);
    this.closed = true;
    // Whatever is still unsealed is durable in the WAL: nothing is held back any longer.
    this.releaseThrottled();
    // A background trim still running must finish before the owner closes the WAL under it.
    await this.trimTask.idle();
    for (const p of this.parts.values()) {
      for (const w of p.waiters.splice(0)) {
        clearTimeout(w.timer);
        w.resolve();
      }
    }
  }

  /** Broker-wide defaults for streams without settings of their own (Engine.setStreamDefaults). */
  private defaults: StreamDefaults = NO_STREAM_DEFAULTS;

  setDefaults(d: StreamDefaults): void {
    this.defaults = d;
  }

  /** Bytes a partition held here holds: its committed segments' objects plus its hot tail; null if not held here. */
  partitionSize(stream: string, partition: number): number | null {
    const p = this.parts.get(`${stream}/${partition}`);
    if (p === undefined || p.def.name !== stream) return null;
    let size = p.tailBytes;
    for (const seg of p.segments) size += seg.size;
    return size;
  }

  /** The idempotent producers of a partition held here (tail included); null if not held here. */
  producers(stream: string, partition: number): ProducerSnapshot[] | null {
    const p = this.parts.get(`${stream}/${partition}`);
    if (p === undefined || p.def.name !== stream) return null;
    return p.producers.snapshot();
  }

  /** Per-partition figures for the admin API. */
  describe(stream: string): Array<{
    partition: number;
    logStartOffset: number;
    highWatermark: number;
    flushedOffset: number;
    segments: number;
    tailBytes: number;
  }> {
    return [...this.parts.values()]
      .filter((p) => p.def.name === stream)
      .sort((a, b) => a.partition - b.partition)
      .map((p) => ({
        partition: p.partition,
        logStartOffset: p.logStartOffset,
        highWatermark: p.highWatermark,
        flushedOffset: p.flushedOffset,
        segments: p.segments.length,
        tailBytes: p.tailBytes,
      }));
  }
}

function firstAtOrAfter(batch: Buffer, ts: number, minOffset: number): number | null {
  for (const r of decodeBatch(batch)) if (r.timestamp >= ts && r.offset >= minOffset) return r.offset;
  return null;
}
