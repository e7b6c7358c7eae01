/**
 * Segment writing and sealing, WAL trimming and retention: a completed (or, under memory pressure or after
 * `segmentMs`, the open) segment of a tail goes to the object store as one object with an index (or the WAL's own
 * file becomes the object), is committed to the metastore with the producer state as of its end, and its batches
 * leave the tail for the recent batches; the WAL is then trimmed. Seals run `sealConcurrency` at a time, failed ones
 * are retried with a backoff. Also the background tick (seals by age and size, memory trim, retention) and Kafka's
 * DeleteRecords.
 */
import { FlowError, effectiveRetention, readBatchInfo } from '../../core/index.js';
import type { SegmentMeta } from '../metastore/types.js';
import type { SegmentFileSource, WriteAheadLog } from '../wal/types.js';
import { ProducerState } from './producer-state.js';
import { buildSegment, buildTrailer, segmentKey, type SegmentIndex } from './segment.js';
import { Partition, segmentReady, type TailBatch } from './partition.js';
import { backoffMs, LogState, MEMORY_TRIM_MS } from './log-state.js';
import { cacheIndex, readIndex } from './read.js';
import { cleanupPolicy, compactDue } from './compaction.js';

/**
 * Seals the partition's first segment (the tail up to its first cut; with no cut, the open segment is cut now)
 * into a segment object once it is durable: one seal per partition at a time, and at most `sealConcurrency`
 * across partitions (one more for a partition that is catching up; the segment is chosen when the seal's turn
 * comes). A partition that fell behind seals again at once while a completed segment is ready. A successful seal
 * trims the WAL.
 */
export function seal(lm: LogState, p: Partition, force = false): Promise<void> {
  if (p.sealing) return p.sealing;
  if (p.fenced !== null) return Promise.resolve(); // another writer owns it: it seals its own segments
  if (p.releasing) return Promise.resolve(); // handed over: the next owner seals what the WAL holds
  // After a failed seal, the next waits for its backoff (unless asked for explicitly: a flush, the shutdown).
  if (!force && Date.now() < p.sealRetryAt) return Promise.resolve();
  let sealed = false;
  const max = lm.segmentBytes(p);
  // A partition more than a segment behind its sealing point is catching up: it may take one more slot than
  // sealConcurrency, and its write may take the disk in larger steps (at some cost to the WAL's latency), or
  // under a sustained load it would never catch up.
  const catchingUp = p.tailBytes >= 2 * max;
  p.sealing = withSealSlot(lm, catchingUp ? lm.options.sealConcurrency + 1 : lm.options.sealConcurrency, async () => {
    if (lm.byKey.get(p.key) !== p || p.tail.length === 0) return; // the stream is gone, or nothing to seal
    if (p.cuts.length === 0) lm.cut(p);
    const end = p.cuts[0];
    // A cut made just now may wait a moment for the WAL (not a failed one: nothing more becomes durable there).
    if (p.highWatermark < end && p.failure === null) await lm.waitFor(p.def.name, p.partition, end - 1, 30_000);
    if (p.highWatermark < end || lm.byKey.get(p.key) !== p) return;
    let n = 0;
    while (n < p.tail.length && p.tail[n].endOffset <= end) n++;
    if (n === 0) return;
    await writeSegment(lm, p, p.tail.slice(0, n), catchingUp);
    sealed = true;
    requestTrim(lm);
  })
    .then(
      () => {
        if (sealed && p.sealFailures > 0) {
          lm.logger.info({ partition: p.key }, 'segment flush works again');
          p.sealFailures = 0;
          p.sealRetryAt = 0;
        }
      },
      (err: unknown) => {
        lm.fencedBy(p, err);
        if (p.fenced !== null) return; // never retried (logged once by fence())
        // The data is still in the WAL and in memory: a later check retries, after a backoff. One line when a
        // partition's seals start failing, debug lines while they go on failing.
        lm.stats.failedSeals++;
        const level = p.sealFailures === 0 ? 'warn' : 'debug';
        const wait = backoffMs(++p.sealFailures);
        p.sealRetryAt = Date.now() + wait;
        lm.logger[level]({ err, partition: p.key, retryInMs: wait }, 'segment flush failed; will retry');
      },
    )
    .finally(() => {
      p.sealing = null;
      if (lm.closed) return;
      if (sealed && segmentReady(p)) void seal(lm, p);
      else if (lm.unsealed > lm.options.maxUnsealedBytes) relieve(lm);
    });
  return p.sealing;
}

/**
 * Over maxUnsealedBytes, the largest tail not being sealed is sealed now, full segment or not: many partitions
 * can hold the limit between them with none of them at `segmentBytes`, and acknowledgements must not wait for
 * `segmentMs` to pass.
 */
export function relieve(lm: LogState): void {
  let largest: Partition | null = null;
  const now = Date.now();
  for (const p of lm.parts.values()) {
    if (p.sealing === null && p.fenced === null && p.tailBytes > 0 && now >= p.sealRetryAt && (largest === null || p.tailBytes > largest.tailBytes))
      largest = p;
  }
  if (largest !== null) void seal(lm, largest);
}

/** Bytes at the head of the tail that are durable (what a seal could take now). */
export function durableTailBytes(p: Partition): number {
  let bytes = 0;
  for (const b of p.tail) {
    if (b.endOffset > p.highWatermark) break;
    bytes += b.data.length;
  }
  return bytes;
}

export async function withSealSlot(lm: LogState, slots: number, fn: () => Promise<void>): Promise<void> {
  while (lm.activeSeals >= Math.max(1, slots)) {
    await new Promise<void>((resolve) => lm.sealWaiters.push(resolve));
  }
  lm.activeSeals++;
  try {
    await fn();
  } finally {
    lm.activeSeals--;
    // Every waiter looks again: they wait for different numbers of slots (see seal).
    for (const wake of lm.sealWaiters.splice(0)) wake();
  }
}

/**
 * What a batch kept in memory costs beyond its data: its entry, the Buffer and its backing store, its places in the
 * queues (heap snapshots of one-record Kafka batches, 2026-12-07: ~470 bytes). The read cache counts it with the
 * data against its budget, so that many small batches cannot hold several times the budget.
 */
export const BATCH_OVERHEAD_BYTES = 512;

/** What an evicted slot of LogState.recentQueue holds until the queue is compacted. */
const EVICTED = { p: null, b: null, at: 0 } as unknown as { p: Partition; b: TailBatch; at: number };

/** What a recent batch counts against the read cache's budget. */
export function recentCost(b: TailBatch): number {
  return b.data.length + BATCH_OVERHEAD_BYTES;
}

/**
 * A sealed batch stays readable from memory until the recent batches of all partitions outgrow their budget, or
 * for recentMaxAgeMs at most (expireRecent).
 */
export function keepRecent(lm: LogState, p: Partition, b: TailBatch, now = Date.now()): void {
  if (lm.recentBudget <= 0) {
    b.chunk?.unpin();
    return;
  }
  p.recent.push(b);
  lm.recentQueue.push({ p, b, at: now });
  lm.recentTotal += recentCost(b);
  evictRecent(lm, now);
}

/** Lets go of the read cache's batches kept longer than recentMaxAgeMs (the background task, between seals). */
export function expireRecent(lm: LogState, now = Date.now()): void {
  if (lm.recentHead < lm.recentQueue.length) evictRecent(lm, now);
}

function evictRecent(lm: LogState, now: number): void {
  const oldest = lm.recentMaxAgeMs > 0 ? now - lm.recentMaxAgeMs : -Infinity;
  while (lm.recentHead < lm.recentQueue.length && (lm.recentTotal > lm.recentBudget || lm.recentQueue[lm.recentHead].at <= oldest)) {
    // The queue holds each partition's recent batches in their order: this one is first in its partition's.
    const { p: q, b: old } = lm.recentQueue[lm.recentHead];
    // The slot lets go of the batch now, not when the queue is next compacted.
    lm.recentQueue[lm.recentHead++] = EVICTED;
    q.recent.shift();
    old.chunk?.unpin();
    lm.recentTotal -= recentCost(old);
  }
  if (lm.recentHead > 1024 && lm.recentHead * 2 > lm.recentQueue.length) {
    lm.recentQueue = lm.recentQueue.slice(lm.recentHead);
    lm.recentHead = 0;
  }
}

/** Trims the WAL in the background (after a seal). */
export function requestTrim(lm: LogState): void {
  if (lm.closed) return;
  lm.trimTask.run().catch((err: unknown) => lm.logger.warn({ err }, 'WAL trim failed; will retry'));
}

export async function writeSegment(lm: LogState, p: Partition, batches: TailBatch[], catchingUp: boolean): Promise<void> {
  const base = batches[0].baseOffset;
  const end = batches[batches.length - 1].endOffset;
  const objectKey = segmentKey(lm.objectPrefix(p), base, p.epoch);
  // A commit of this segment failed last time, but may have landed (its journal sync failed, say): then the object
  // it names must not be written again (a rebuilt one can differ in size from what the metastore says), and it is
  // taken as it is.
  let landed: SegmentMeta | undefined;
  if (p.unsureCommit === objectKey) {
    landed = (await lm.meta.listSegments(p.def.name, p.partition)).find((x) => x.baseOffset === base && x.endOffset === end && x.objectKey === objectKey);
    p.unsureCommit = null;
  }
  let written: { size: number; index: SegmentIndex; release?: (moved: boolean) => void } | null = null;
  if (landed !== undefined) written = { size: landed.size, index: await readIndex(lm, objectKey, landed.size) };
  written ??= await adoptWalFile(lm, p, objectKey, base, end, batches);
  if (written === null) {
    const built = buildSegment(
      base,
      batches.map((b) => b.data),
    );
    await lm.objects.put(objectKey, built.parts, { yieldToLatency: !catchingUp });
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
  if (!lm.parts.has(`${p.def.name}/${p.partition}`)) {
    written.release?.(false);
    await lm.objects.delete(objectKey); // the stream was deleted meanwhile
    return;
  }
  if (landed === undefined) {
    try {
      await lm.meta.commitSegment(seg, p.epoch);
    } catch (err) {
      // An adopted WAL file stays in the WAL: until a commit lands, the object is only a copy of it.
      written.release?.(false);
      p.unsureCommit = objectKey;
      throw lm.fencedBy(p, err);
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
    await lm.meta.putProducerState(p.def.name, p.partition, end, flushed.toJSON(), p.epoch);
  } catch (err) {
    // The segment is committed: the retry takes it as it is (see unsureCommit) rather than writing it again.
    p.unsureCommit = objectKey;
    throw lm.fencedBy(p, err);
  }
  p.flushedProducers = flushed;
  cacheIndex(lm, objectKey, index);
  p.segments.push(seg);
  p.flushedOffset = end;
  // Drop the sealed batches from memory; appends that came meanwhile stay.
  let dropped = 0;
  while (p.tail.length > 0 && p.tail[0].endOffset <= end) {
    const b = p.tail.shift()!;
    p.tailBytes -= b.data.length;
    if (p.fenced === null) lm.unsealed -= b.data.length; // a fenced tail is out of the count (see fence)
    keepRecent(lm, p, b);
    dropped++;
  }
  while (p.cuts.length > 0 && p.cuts[0] <= end) p.cuts.shift();
  lm.releaseThrottled();
  if (p.tail.length > 0) p.tailSince = Date.now();
  lm.stats.sealedSegments++;
  lm.stats.sealedBytes += size;
  lm.logger.debug({ partition: p.key, base, end, batches: dropped, bytes: size }, 'segment sealed');
}

/**
 * Makes the WAL's file holding exactly these batches the segment object, where the WAL keeps such files and the
 * object store can take one: the WAL ends the file with the segment's index and footer, and the store links (or
 * copies) it. The file stays in the WAL until the caller calls `release`: true once the segment is committed (the
 * WAL deletes the file), false if it is not (it stays an ordinary WAL file). Null when that is not possible (the
 * caller writes the segment itself).
 */
export async function adoptWalFile(
  lm: LogState,
  p: Partition,
  objectKey: string,
  base: number,
  end: number,
  batches: TailBatch[],
): Promise<{ size: number; index: SegmentIndex; release: (moved: boolean) => void } | null> {
  const source = lm.wal as WriteAheadLog & Partial<SegmentFileSource>;
  if (typeof source.takeFile !== 'function' || typeof lm.objects.adopt !== 'function') return null;
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
    lm.logger.warn({ err, partition: p.key, base }, 'WAL file could not become a segment; writing the segment instead');
    return null;
  }
  if (taken === null || index === null) return null;
  try {
    await lm.objects.adopt(objectKey, taken.path);
  } catch (err) {
    taken.release(false);
    lm.logger.warn({ err, partition: p.key, base }, 'object store could not take the WAL file; writing the segment instead');
    return null;
  }
  lm.stats.adoptedSegments++;
  return { size: taken.size, index, release: taken.release };
}

/** Seals every tail now (used at shutdown, and by tests and the admin API to force a flush). */
export async function flushAll(lm: LogState): Promise<void> {
  await Promise.all(
    [...lm.parts.values()].map(async (p) => {
      // A seal takes at most a segment's worth: seal until what is durable is all in segments (or a seal fails).
      for (let before = -1; p.flushedOffset !== before && durableTailBytes(p) > 0;) {
        await p.sealing;
        before = p.flushedOffset;
        await seal(lm, p, true);
      }
    }),
  );
  await lm.trimWal();
}

export function background(lm: LogState): void {
  if (lm.closed) return;
  const now = Date.now();
  if (now - lm.memoryTrimmedAt >= MEMORY_TRIM_MS) {
    lm.memory.trim();
    lm.memoryTrimmedAt = now;
  }
  expireRecent(lm, now);
  const seals: Promise<void>[] = [];
  for (const p of lm.parts.values()) {
    if (p.tail.length > 0 && (p.tailBytes >= lm.segmentBytes(p) || now - p.tailSince >= (p.def.segmentMs ?? lm.defaults.segmentMs ?? lm.options.segmentMs))) {
      seals.push(seal(lm, p));
    }
  }
  // Held-back acknowledgements whose seals failed are helped again once the backoff allows.
  if (lm.unsealed > lm.options.maxUnsealedBytes) relieve(lm);
  const retention = applyRetention(lm, now);
  void compactDue(lm).catch((err: unknown) => lm.logger.warn({ err }, 'compaction failed'));
  void Promise.all([...seals, retention])
    .then(() => (seals.length > 0 ? lm.trimWal() : undefined))
    .catch((err: unknown) => lm.logger.warn({ err }, 'background log maintenance failed'));
}

/**
 * Kafka DeleteRecords: the log start offset moves to `offset` (persisted first, so a restart never exposes the
 * deleted records again), and segments wholly below it are deleted. Tail batches below it stay in memory until
 * sealed, unreadable.
 */
export async function deleteRecordsBefore(lm: LogState, stream: string, partition: number, offset: number): Promise<number> {
  const p = lm.part(stream, partition);
  if (!Number.isInteger(offset) || offset < 0 || offset > p.highWatermark) {
    throw new FlowError('INVALID_ARGUMENT', `offset ${offset} is outside [0, ${p.highWatermark}]`);
  }
  if (offset <= p.logStartOffset) return p.logStartOffset;
  if (p.fenced !== null) throw new FlowError('FENCED', `partition ${p.key} is owned by another writer now`, { cause: p.fenced });
  // A cleaner pass swapping this partition's segments finishes first (compaction.ts checks the log start offset
  // before each swap, so one starting meanwhile leaves alone what goes below).
  await p.compacting;
  try {
    await lm.meta.setLogStartOffset(p.def.name, p.partition, offset, p.epoch);
    p.logStartOffset = Math.max(p.logStartOffset, offset);
    while (p.segments.length > 0 && p.segments[0].endOffset <= p.logStartOffset) {
      const seg = p.segments[0];
      await lm.meta.deleteSegment(p.def.name, p.partition, seg.baseOffset, p.epoch);
      p.segments.shift();
      await lm.objects.delete(seg.objectKey);
      lm.indexCache.delete(seg.objectKey);
    }
  } catch (err) {
    throw lm.fencedBy(p, err);
  }
  return p.logStartOffset;
}

/**
 * Deletes whole segments older than the stream's retention, or beyond its size retention, and moves the log
 * start offset past them. By size as Kafka's retention.bytes (UnifiedLog.deleteRetentionSizeBreachedSegments):
 * the oldest segment goes while the partition (its segments and its tail) would still hold at least
 * `retentionBytes` without it; the tail, like Kafka's active segment, is never deleted.
 */
export function applyRetention(lm: LogState, now: number): Promise<void> {
  // One pass at a time: the background task starts one every checkIntervalMs, and a pass outlasts that when the
  // metastore or the object store is slow. Two at once would both take the same first segment, each shift one, and
  // so drop a segment still kept from the list (its records unreadable, its object and metadata never deleted).
  if (lm.retentionPass !== null) return lm.retentionPass;
  const pass = retentionPass(lm, now).finally(() => {
    lm.retentionPass = null;
  });
  lm.retentionPass = pass;
  return pass;
}

async function retentionPass(lm: LogState, now: number): Promise<void> {
  for (const p of lm.parts.values()) {
    const { ms: r, bytes: rb } = effectiveRetention(p.def, lm.defaults);
    if ((r === null && rb === null) || p.segments.length === 0 || p.fenced !== null) continue;
    // Kafka: retention deletes segments of "delete" and "compact,delete" topics, never of "compact" ones; and not
    // while the cleaner is swapping this partition's segments.
    if (!cleanupPolicy(p.def).delete || p.compacting !== null) continue;
    let size = p.tailBytes;
    if (rb !== null) for (const seg of p.segments) size += seg.size;
    try {
      for (;;) {
        const seg = p.segments[0];
        if (seg === undefined) break;
        const expired = r !== null && seg.maxTimestamp < now - r;
        const tooBig = rb !== null && size - seg.size >= rb;
        if (!expired && !tooBig) break;
        await lm.meta.setLogStartOffset(p.def.name, p.partition, seg.endOffset, p.epoch);
        p.logStartOffset = Math.max(p.logStartOffset, seg.endOffset);
        p.segments.shift();
        size -= seg.size;
        await lm.meta.deleteSegment(p.def.name, p.partition, seg.baseOffset, p.epoch);
        await lm.objects.delete(seg.objectKey);
        lm.indexCache.delete(seg.objectKey);
        lm.logger.info({ partition: p.key, base: seg.baseOffset, end: seg.endOffset, by: expired ? 'time' : 'size' }, 'segment expired by retention');
      }
    } catch (err) {
      lm.fencedBy(p, err);
      if (p.fenced === null) throw err; // other failures: retried at the next pass
    }
  }
}
