/**
 * Log compaction (Kafka's cleanup.policy=compact): the cleaner rewrites a partition's sealed segments keeping the
 * last record of each key, as Kafka's LogCleaner does, but over segment objects:
 *
 * - what it cleans: the committed segments (never the tail, Kafka's active segment), from the first on, up to the
 *   first one younger than min.compaction.lag.ms (its largest timestamp); it runs when the bytes sealed since its
 *   last pass are at least min.cleanable.dirty.ratio of them, or when a segment waited longer than
 *   max.compaction.lag.ms;
 * - what it keeps: per key, the record with the highest offset among those segments; records without a key (the
 *   Kafka Produce handler refuses them on compacted topics, other protocols may write some); tombstones (a null
 *   value) until delete.retention.ms after their segment was sealed;
 * - transactions, as Kafka's cleaner (once the transaction state is loaded: at start on a single broker, by the
 *   partition's leader when it takes it over in cluster mode, TxnPartitions.isLoaded; a partition holding
 *   transactional batches waits until then): it cleans only below the last stable offset (an open transaction's records
 *   are not judged before its end); the records of aborted transactions go, and never count as a key's last record;
 *   a transaction's control marker stays while any batch of its transaction is in the cleaned segments, and goes,
 *   once a pass finds none (the records went in an earlier pass), past delete.retention.ms like tombstones. An
 *   aborted transaction with no batch left leaves the partition's aborted list (stored before any marker goes), so
 *   that no fetch names an aborted transaction whose marker is gone;
 * - how: each segment whose content changes becomes a new object (its key carries the owner's epoch and a
 *   generation, `<base>-<epoch>-c<gen>.seg`, so it collides neither with a sealed segment nor with another pass),
 *   holding the same offsets: batches keep their base offsets and last offset deltas, records their offsets
 *   (filterBatch). The metastore row then names the new object, in one epoch-checked step (replaceSegment): a
 *   fenced owner (cluster mode: the partition moved) cannot swap anything. The old object is deleted after
 *   `compactionDeleteDelayMs` (Kafka's file.delete.delay.ms): a reader that looked the segment up before the swap
 *   reads the old object, whole and consistent, in the meantime;
 * - its cost: reads and writes are paced to `compactionBytesPerSec` (both counted), and the key map is in memory
 *   (a key's bytes and an offset per distinct key of the cleaned segments).
 *
 * Limits (docs/storage.md): a crash between the new object's write and the swap leaves that object behind, and a
 * crash before the delayed delete leaves the old one (neither is ever read); cleaned offsets are not persisted, so
 * the first pass after a restart reads every segment again.
 */
import { ATTR_TRANSACTIONAL, filterBatch, readBatchInfo, type AbortedTxn, type StreamDef, type TxnPartitions } from '../../core/index.js';
import type { SegmentMeta } from '../metastore/types.js';
import { buildSegment, compactedKey } from './segment.js';
import type { Partition } from './partition.js';
import type { LogState } from './log-state.js';
import { cacheIndex, loadIndex } from './read.js';
import { checkBatches } from './verify.js';

/** A stream's cleanup.policy as the log applies it (Kafka's default: delete only). */
export function cleanupPolicy(def: StreamDef): { compact: boolean; delete: boolean } {
  const v = def.configs?.['cleanup.policy'];
  if (v === undefined) return { compact: false, delete: true };
  const items = v.split(',').map((x) => x.trim());
  return { compact: items.includes('compact'), delete: items.includes('delete') };
}

interface CompactionSettings {
  dirtyRatio: number;
  minLagMs: number;
  maxLagMs: number;
  deleteRetentionMs: number;
}

const num = (v: string | undefined, d: number): number => {
  if (v === undefined) return d;
  const n = Number(v);
  return Number.isFinite(n) ? Math.min(n, Number.MAX_SAFE_INTEGER) : d;
};

/** Kafka's defaults: ratio 0.5, no minimum lag, no maximum lag, tombstones kept a day. */
function settingsOf(def: StreamDef): CompactionSettings {
  const c = def.configs ?? {};
  return {
    dirtyRatio: num(c['min.cleanable.dirty.ratio'], 0.5),
    minLagMs: num(c['min.compaction.lag.ms'], 0),
    maxLagMs: num(c['max.compaction.lag.ms'], Number.MAX_SAFE_INTEGER),
    deleteRetentionMs: num(c['delete.retention.ms'], 86_400_000),
  };
}

/**
 * The segments a pass may clean: committed ones from the first on, up to the first younger than min.compaction.lag.ms
 * or reaching past the last stable offset (records of an open transaction).
 */
function cleanable(p: Partition, s: CompactionSettings, now: number, txns: TxnPartitions | null): SegmentMeta[] {
  const out: SegmentMeta[] = [];
  const lso = txns === null ? Number.MAX_SAFE_INTEGER : txns.lso(p.def.name, p.partition, Number.MAX_SAFE_INTEGER);
  for (const seg of p.segments) {
    if (seg.maxTimestamp > now - s.minLagMs || seg.endOffset > lso) break;
    out.push(seg);
  }
  return out;
}

/** Whether the partition is due a pass (dirty ratio, or max.compaction.lag.ms passed for a dirty segment). */
function due(p: Partition, segs: SegmentMeta[], s: CompactionSettings, now: number, force: boolean): boolean {
  let total = 0;
  let dirty = 0;
  let overdue = false;
  for (const seg of segs) {
    total += seg.size;
    if (seg.endOffset > p.cleanedOffset) {
      dirty += seg.size;
      if (seg.createdAt < now - s.maxLagMs) overdue = true;
    }
  }
  if (dirty === 0) return false;
  return force || overdue || dirty / total >= s.dirtyRatio;
}

/** Pacing to compactionBytesPerSec: waits until `bytes` more fit in the rate since the pass began. */
class Pace {
  private bytes = 0;
  private readonly start = Date.now();
  constructor(private readonly perSec: number) {}
  async take(n: number): Promise<void> {
    this.bytes += n;
    if (this.perSec <= 0) return;
    const ahead = (this.bytes / this.perSec) * 1000 - (Date.now() - this.start);
    if (ahead > 0) await new Promise((r) => setTimeout(r, ahead).unref());
  }
}

/** The batches of a segment object, in order (its whole object read once). */
async function segmentBatches(lm: LogState, seg: SegmentMeta): Promise<Buffer[]> {
  const index = await loadIndex(lm, seg);
  if (index.entries.length === 0) return [];
  const raw = await lm.objects.get(seg.objectKey, { start: 0, end: index.dataSize });
  const batches = index.entries.map((e) => raw.subarray(e.position, e.position + e.size));
  // A corrupt batch must not be rewritten under a fresh CRC: the pass stops, reported (verify.ts).
  checkBatches(lm, seg.objectKey, batches, index.entries);
  return batches;
}

const CONTROL = 0x20;
const ATTRIBUTES = 21;
const keyOf = (k: Buffer): string => k.toString('latin1');

/**
 * One cleaner pass over a partition (see the file header); resolves when done. `force` ignores the dirty ratio
 * (the admin API's and the tests' explicit compaction). A pass at a time per partition.
 */
export function compactPartition(lm: LogState, p: Partition, force = false): Promise<void> {
  if (p.compacting !== null) return p.compacting;
  if (p.fenced !== null || p.releasing || !cleanupPolicy(p.def).compact) return Promise.resolve();
  p.compacting = runPass(lm, p, force)
    .catch((err: unknown) => {
      lm.fencedBy(p, err);
      if (p.fenced === null) lm.logger.warn({ err, partition: p.key }, 'compaction pass failed; will retry');
    })
    .finally(() => {
      p.compacting = null;
    });
  return p.compacting;
}

async function runPass(lm: LogState, p: Partition, force: boolean): Promise<void> {
  const now = Date.now();
  const s = settingsOf(p.def);
  const txns = lm.transactions;
  const segs = cleanable(p, s, now, txns);
  if (!due(p, segs, s, now, force)) return;
  const pace = new Pace(lm.options.compactionBytesPerSec ?? 0);
  const stream = p.def.name;
  const aborted = (b: Buffer): boolean => txns !== null && txns.isAborted(stream, p.partition, readBatchInfo(b));
  // The offset map: the last offset of each key over the segments cleaned (Kafka's SkimpyOffsetMap, here exact),
  // aborted records left out. And the markers whose transaction has no batch left here (by offset).
  const last = new Map<string, number>();
  const emptied = new Set<number>();
  const abortedAt = new Map<number, number[]>(); // producer id -> offsets of its aborted batches still here
  const open = new Set<bigint>(); // producers with a batch seen since their last marker
  for (const seg of segs) {
    for (const b of await segmentBatches(lm, seg)) {
      const attributes = b.readInt16BE(ATTRIBUTES);
      // Transaction state not loaded yet (a broker starting): this partition waits for a later pass.
      if ((attributes & ATTR_TRANSACTIONAL) !== 0 && txns !== null && !txns.isLoaded(stream, p.partition)) return;
      if ((attributes & CONTROL) !== 0) {
        const info = readBatchInfo(b);
        if (!open.delete(info.producerId)) emptied.add(info.baseOffset);
        continue;
      }
      if ((attributes & ATTR_TRANSACTIONAL) !== 0) {
        const info = readBatchInfo(b);
        open.add(info.producerId);
        if (aborted(b)) {
          const pid = Number(info.producerId);
          const l = abortedAt.get(pid);
          if (l) l.push(info.baseOffset);
          else abortedAt.set(pid, [info.baseOffset]);
          continue;
        }
      }
      filterBatch(b, (r) => {
        if (r.key !== null) last.set(keyOf(r.key), r.offset);
        return true;
      });
    }
    await pace.take(seg.size);
  }
  // Aborted transactions with no record left leave the list (stored) before any marker may go: those ending in the
  // cleaned segments of which no batch was found (a marker written twice, by a coordinator completing an abort again
  // after a crash, leaves the list entry to whichever batches remain).
  if (txns !== null && segs.length > 0) {
    const end = segs[segs.length - 1].endOffset;
    const holds = (a: AbortedTxn) => (abortedAt.get(a.producerId) ?? []).some((o) => a.firstOffset <= o && o < a.lastOffset);
    await txns.dropAborted(stream, p.partition, (a) => a.lastOffset < end && !holds(a));
  }
  let removed = 0;
  for (const seg of segs) {
    if (lm.closed || p.fenced !== null) return;
    const tombstonesGo = seg.createdAt <= now - s.deleteRetentionMs; // 0: at once, even within the millisecond of the seal
    const kept: Buffer[] = [];
    let changed = false;
    for (const b of await segmentBatches(lm, seg)) {
      const attributes = b.readInt16BE(ATTRIBUTES);
      if ((attributes & CONTROL) !== 0) {
        if (tombstonesGo && emptied.has(readBatchInfo(b).baseOffset)) {
          changed = true;
          removed++;
        } else kept.push(b);
        continue;
      }
      if ((attributes & ATTR_TRANSACTIONAL) !== 0 && aborted(b)) {
        changed = true;
        removed += readBatchInfo(b).recordCount;
        continue;
      }
      const out = filterBatch(b, (r) => {
        const keep = r.key === null || (last.get(keyOf(r.key)) === r.offset && !(r.value === null && tombstonesGo));
        if (!keep) removed++;
        return keep;
      });
      if (out !== b) changed = true;
      if (out !== null) kept.push(out);
    }
    await pace.take(seg.size);
    lm.stats.compactedBytes += seg.size;
    if (!changed) continue;
    const objectKey = compactedKey(lm.objectPrefix(p), seg.baseOffset, p.epoch, ++p.compactions);
    const built = buildSegment(seg.baseOffset, kept);
    await lm.objects.put(objectKey, built.parts);
    await pace.take(built.size);
    let maxTimestamp = -1;
    for (const e of built.index.entries) if (e.maxTimestamp > maxTimestamp) maxTimestamp = e.maxTimestamp;
    // The segment keeps its createdAt: tombstones' delete.retention.ms counts from the seal.
    const next: SegmentMeta = { ...seg, objectKey, size: built.size, maxTimestamp: kept.length > 0 ? maxTimestamp : seg.maxTimestamp };
    if (seg.endOffset <= p.logStartOffset || p.segments.indexOf(seg) < 0) {
      // DeleteRecords or retention took the segment meanwhile: the copy is nobody's.
      await lm.objects.delete(objectKey);
      continue;
    }
    let swapped: boolean;
    try {
      swapped = await lm.meta.replaceSegment(next, seg.objectKey, p.epoch);
    } catch (err) {
      await lm.objects.delete(objectKey).catch(() => undefined);
      throw err;
    }
    const at = p.segments.indexOf(seg);
    if (!swapped || at < 0) {
      // Retention or DeleteRecords took the segment meanwhile: the copy is nobody's.
      await lm.objects.delete(objectKey);
      continue;
    }
    p.segments[at] = next;
    cacheIndex(lm, objectKey, built.index);
    lm.stats.compactedSegments++;
    lm.stats.compactionSavedBytes += Math.max(0, seg.size - built.size);
    deleteLater(lm, seg.objectKey);
  }
  if (segs.length > 0) p.cleanedOffset = Math.max(p.cleanedOffset, segs[segs.length - 1].endOffset);
  lm.stats.compactionRuns++;
  lm.stats.compactedRecords += removed;
  lm.logger.debug({ partition: p.key, segments: segs.length, removed }, 'partition compacted');
}

/** Deletes a replaced segment object once readers that looked it up before the swap are done (see the header). */
function deleteLater(lm: LogState, objectKey: string): void {
  const run = (): void => {
    lm.pendingDeletes.delete(objectKey);
    lm.indexCache.delete(objectKey);
    lm.objects.delete(objectKey).catch((err: unknown) => lm.logger.warn({ err, objectKey }, 'replaced segment object not deleted'));
  };
  const delay = lm.options.compactionDeleteDelayMs ?? 60_000;
  if (delay <= 0) return run();
  lm.pendingDeletes.set(objectKey, setTimeout(run, delay).unref());
}

/** At close: the replaced objects waiting for readers go now (this process has no reader left). */
export async function flushPendingDeletes(lm: LogState): Promise<void> {
  const keys = [...lm.pendingDeletes.keys()];
  for (const t of lm.pendingDeletes.values()) clearTimeout(t);
  lm.pendingDeletes.clear();
  await Promise.all(keys.map((k) => lm.objects.delete(k).catch(() => undefined)));
}

/** The background tick's share: a pass for each compacted partition that is due one (one partition at a time). */
export async function compactDue(lm: LogState): Promise<void> {
  if (lm.compactionRunning) return;
  lm.compactionRunning = true;
  try {
    for (const p of lm.parts.values()) {
      if (lm.closed) return;
      if (cleanupPolicy(p.def).compact) await compactPartition(lm, p);
    }
  } finally {
    lm.compactionRunning = false;
  }
}
