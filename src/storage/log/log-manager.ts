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
 *
 * The log manager is split in rooms, functions over its state:
 *
 *   log-state.ts   LogState, the base of LogManager: the partitions, memory accounting, options, counters, and what
 *                  every room uses (fence, cut, pushTail, waitFor / wake, releaseThrottled, WAL trims)
 *   partition.ts   Partition: one partition's state (segments, tail, cuts, offsets, producers, failures)
 *   append.ts      append (the hot path), WAL failures and the rewind after them
 *   seal.ts        segment writing and sealing, the throttle's relief, WAL trim, retention, DeleteRecords, the
 *                  background tick
 *   recovery.ts    open (WAL replay), openStream / loadPartition, cluster mode's acquire / release, object sweep
 *   read.ts        reads from memory and from segment objects, the index cache, offsets for timestamps
 *   compaction.ts  the cleaner of compacted streams (cleanup.policy=compact): segments rewritten keeping the last
 *                  record per key, swapped in the metastore (epoch-checked), replaced objects deleted after a delay
 *   log-manager.ts LogManager: StreamStorage over the rooms (each method calls its room's function), open and close
 */
import type { Logger } from 'pino';
import {
  FlowError,
  type AppendResult,
  type PartitionOffsets,
  type ProducerSnapshot,
  type ReadLease,
  type StreamDef,
  type StreamDefaults,
  type StreamStorage,
} from '../../core/index.js';
import type { Metastore } from '../metastore/types.js';
import type { ObjectStore } from '../objects/types.js';
import type { WriteAheadLog } from '../wal/types.js';
import { DEFAULT_LOG_OPTIONS, type LogOptions, LogState, type SpaceGuard } from './log-state.js';
import { append } from './append.js';
import { background, deleteRecordsBefore, flushAll } from './seal.js';
import { acquirePartition, finishRecovery, forgetPartitions, openStream, recoverAtOpen, releasePartition } from './recovery.js';
import { offsetForTimestamp, read } from './read.js';
import { compactPartition, flushPendingDeletes } from './compaction.js';
import { collectDeleted, type Collected } from './garbage.js';

export { DEFAULT_LOG_OPTIONS, MIN_STREAM_SEGMENT_BYTES, newLogStats, type LogOptions, type SpaceGuard } from './log-state.js';

export class LogManager extends LogState implements StreamStorage {
  /** The tails' reused batch memory (batch-memory.ts): chunk bytes in existence, batches copied in or not. */
  get memoryStats(): { chunkBytes: number; pooledBatches: number; ownBatches: number } {
    return { chunkBytes: this.memory.bytes, pooledBatches: this.memory.pooledBatches, ownBatches: this.memory.ownBatches };
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
      lm.timer = setInterval(() => background(lm), lm.options.checkIntervalMs);
      lm.timer.unref();
      return lm;
    }
    await recoverAtOpen(lm);
    lm.timer = setInterval(() => background(lm), lm.options.checkIntervalMs);
    lm.timer.unref();
    return lm;
  }

  openStream(def: StreamDef): Promise<void> {
    return openStream(this, def);
  }

  /** Called once every stream is open: WAL entries of streams that no longer exist can go. */
  finishRecovery(): void {
    finishRecovery(this);
  }

  /**
   * Cluster mode: takes a partition this broker was given (Cluster ownership): a new epoch (which fences the
   * previous owner's metastore writes), the WAL's key fenced with it (its late appends are refused from now on),
   * then the key's entries read back (what the previous owner acknowledged and had not sealed, whether it handed
   * the partition over or died) and the idempotent-producer state. Returns the epoch.
   */
  acquirePartition(def: StreamDef, partition: number): Promise<number> {
    return acquirePartition(this, def, partition);
  }

  /**
   * Cluster mode: stops serving a partition. Appends are refused at once (NOT_OWNER: the caller finds the new
   * owner); for a handover (`lost` false) the appends in flight are waited for, so that everything acknowledged is
   * in the WAL for the next owner, which reads it back (nothing is sealed here: the handover stays quick). Then
   * the partition's memory goes; its WAL entries and objects stay.
   */
  releasePartition(stream: string, partition: number, lost: boolean): Promise<void> {
    return releasePartition(this, stream, partition, lost);
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

  async dropStream(name: string): Promise<void> {
    const victims = [...this.parts.values()].filter((p) => p.def.name === name);
    if (this.defs !== null) {
      this.defs.delete(name);
      // Their WAL entries are nobody's now: trim may clear them.
      for (const p of victims) this.droppedKeys.add(p.key);
    }
    forgetPartitions(this, victims);
    // Sealing may still be running; wait so no object is written after the delete below.
    await Promise.allSettled(victims.flatMap((p) => [p.sealing, p.compacting]));
    for (const p of victims) {
      for (const s of p.segments) {
        await this.objects.delete(s.objectKey);
        this.indexCache.delete(s.objectKey);
      }
    }
  }

  /**
   * Cluster mode: deletes what deleted streams left in the shared WAL and the object store where no broker held
   * their partitions (garbage.ts).
   */
  collectDeleted(): Promise<Collected> {
    return collectDeleted(this);
  }

  /**
   * `forwarded`: stamped by the broker that forwarded it (cluster/stream-appends.ts), or with an MQTT QoS 2 publish's
   * key (StreamStorage.append's `stamped`); see ProducerState.checkForwarded.
   */
  append(stream: string, partition: number, batch: Buffer, forwarded = false): AppendResult {
    return append(this, stream, partition, batch, forwarded);
  }

  offsets(stream: string, partition: number): PartitionOffsets {
    const p = this.part(stream, partition);
    return { logStartOffset: p.logStartOffset, highWatermark: p.highWatermark };
  }

  read(stream: string, partition: number, offset: number, maxBytes: number, lease?: ReadLease): Promise<Buffer[]> {
    return read(this, stream, partition, offset, maxBytes, lease);
  }

  offsetForTimestamp(stream: string, partition: number, ts: number): Promise<number> {
    return offsetForTimestamp(this, stream, partition, ts);
  }

  /**
   * Kafka DeleteRecords: the log start offset moves to `offset` (persisted first, so a restart never exposes the
   * deleted records again), and segments wholly below it are deleted. Tail batches below it stay in memory until
   * sealed, unreadable.
   */
  deleteRecordsBefore(stream: string, partition: number, offset: number): Promise<number> {
    return deleteRecordsBefore(this, stream, partition, offset);
  }

  /** Seals every tail now (used at shutdown, and by tests and the admin API to force a flush). */
  flushAll(): Promise<void> {
    return flushAll(this);
  }

  /** A cleaner pass now over the compacted partitions of `stream` held here (see compaction.ts). */
  async compact(stream: string): Promise<void> {
    for (const p of [...this.parts.values()]) if (p.def.name === stream) await compactPartition(this, p, true);
  }

  /** Stops background work; seals what it can within `graceMs`. The WAL and stores are closed by their owner. */
  async close(graceMs = 5000): Promise<void> {
    if (this.closed) return;
    if (this.timer) clearInterval(this.timer);
    let t: NodeJS.Timeout | undefined;
    await Promise.race([
      flushAll(this).catch((err: unknown) => this.logger.warn({ err }, 'final flush failed; data stays in the WAL')),
      new Promise((r) => (t = setTimeout(r, graceMs))),
    ]);
    clearTimeout(t);
    this.closed = true;
    for (const p of this.parts.values()) await p.compacting;
    await flushPendingDeletes(this);
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

  /** Bytes of every stream held here: hot tails and committed segment objects (one walk over the partitions). */
  streamSizes(): Map<string, { hot: number; objects: number }> {
    const out = new Map<string, { hot: number; objects: number }>();
    for (const p of this.parts.values()) {
      let e = out.get(p.def.name);
      if (e === undefined) out.set(p.def.name, (e = { hot: 0, objects: 0 }));
      e.hot += p.tailBytes;
      for (const seg of p.segments) e.objects += seg.size;
    }
    return out;
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
