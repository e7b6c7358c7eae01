/**
 * Partitions coming in and going out of the log: at open, every partition defined is taken with a new epoch (its WAL
 * key fenced) before the WAL is replayed; opening a stream loads its partitions (committed segments and state from
 * the metastore, uncommitted objects of a crashed or fenced writer swept, the producer state, the WAL's entries past
 * the committed segments as the tail). In cluster mode partitions are acquired (and read back from the shared WAL)
 * and released one at a time, as the cluster's ownership hands them in and out.
 */
import { FlowError, readBatchInfo, type StreamDef } from '../../core/index.js';
import type { SegmentMeta } from '../metastore/types.js';
import type { WalEntry } from '../wal/types.js';
import { ProducerState } from './producer-state.js';
import { isCompactedKey, parseSegmentKey, type SegmentIndex } from './segment.js';
import { Partition, partitionKey } from './partition.js';
import { LogState } from './log-state.js';
import { cacheIndex, readIndex, readSegments } from './read.js';
import { batchProblem, reportCorruption } from './verify.js';
import { recentCost } from './seal.js';

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

/**
 * At open (a single broker): every partition defined now is taken (a new epoch) and its WAL key fenced before the
 * WAL is read, so that a writer that owned it before can add nothing to it afterwards that this replay would miss (a
 * shared WAL); then the WAL is replayed into `recovered`, where openStream finds each partition's entries.
 */
export async function recoverAtOpen(lm: LogState): Promise<void> {
  const parts: Array<{ def: StreamDef; partition: number }> = [];
  for (const def of await lm.meta.listStreams()) {
    for (let i = 0; i < def.partitions; i++) parts.push({ def, partition: i });
  }
  await forEachLimited(parts, OPEN_CONCURRENCY, async ({ def, partition }) => {
    lm.taken.set(partitionKey(def, partition), await takePartition(lm, def, partition));
  });
  await lm.wal.replay((e) => {
    let list = lm.recovered!.get(e.key);
    if (!list) lm.recovered!.set(e.key, (list = []));
    list.push(e);
  });
}

/** Called once every stream is open: WAL entries of streams that no longer exist can go. */
export function finishRecovery(lm: LogState): void {
  if (lm.recovered && lm.recovered.size > 0) {
    lm.logger.info({ keys: [...lm.recovered.keys()] }, 'WAL entries of deleted streams discarded');
  }
  lm.recovered = null;
  lm.taken.clear();
}

/** Takes a partition for writing: a new ownership epoch, with which the WAL's key is fenced. */
export async function takePartition(lm: LogState, def: StreamDef, partition: number): Promise<number> {
  const epoch = await lm.meta.openPartition(def.name, partition);
  await lm.wal.fence(partitionKey(def, partition), epoch);
  return epoch;
}

export async function openStream(lm: LogState, def: StreamDef): Promise<void> {
  if (lm.defs !== null) {
    // Cluster mode: the definition only; partitions come with acquirePartition. A redefinition (retention,
    // bindings, partitions added) reaches the partitions held here.
    lm.defs.set(def.name, def);
    for (const p of lm.parts.values()) if (p.def.name === def.name && p.def.createdAt === def.createdAt) p.def = def;
    return;
  }
  // The partitions new here are taken first (those of the streams defined at open already were), together:
  // each take is a durable metastore write, and concurrent ones share their syncs.
  const fresh: number[] = [];
  for (let i = 0; i < def.partitions; i++) {
    const existing = lm.parts.get(`${def.name}/${i}`);
    if (existing) existing.def = def;
    else fresh.push(i);
  }
  const epochs = new Map<number, number>();
  await forEachLimited(fresh, OPEN_CONCURRENCY, async (i) => {
    const key = partitionKey(def, i);
    const early = lm.taken.get(key);
    lm.taken.delete(key);
    epochs.set(i, early ?? (await takePartition(lm, def, i)));
  });
  for (const i of fresh) {
    const key = partitionKey(def, i);
    const entries = lm.recovered?.get(key);
    if (entries) lm.recovered!.delete(key);
    await loadPartition(lm, def, i, epochs.get(i)!, entries);
  }
}

/**
 * Opens a partition taken with `epoch`: its committed segments and state from the metastore, the objects a
 * crashed or fenced writer left swept, the producer state, and the WAL's entries past the committed segments as
 * its tail.
 */
export async function loadPartition(lm: LogState, def: StreamDef, i: number, epoch: number, entries: readonly WalEntry[] | undefined): Promise<Partition> {
  const p = new Partition(def, i, partitionKey(def, i));
  p.epoch = epoch;
  const state = await lm.meta.getPartitionState(def.name, i);
  p.segments = await lm.meta.listSegments(def.name, i);
  p.flushedOffset = state?.flushedOffset ?? 0;
  p.logStartOffset = state?.logStartOffset ?? 0;
  await sweepObjects(lm, p);
  p.nextOffset = p.flushedOffset;
  await loadProducerState(lm, p);
  if (entries) {
    for (const e of entries) {
      if (e.endOffset <= p.flushedOffset) continue; // already in a committed segment
      if (e.baseOffset !== p.nextOffset) {
        // Offsets are assigned contiguously and the WAL keeps append order, so this means lost data.
        throw new FlowError('CORRUPT_DATA', `WAL gap in ${p.key}: expected offset ${p.nextOffset}, found ${e.baseOffset}`);
      }
      // The WAL's own frame checksum (file WALs) does not cover a PostgreSQL WAL row: the batch's CRC does.
      const problem = batchProblem(e.data, { baseOffset: e.baseOffset, endOffset: e.endOffset, size: e.data.length });
      if (problem !== null) throw reportCorruption(lm, p.key, `WAL entry at offset ${e.baseOffset}: ${problem}`, { offset: e.baseOffset });
      // Segment boundaries as they were: where the WAL started files, else by size as append does.
      const len = e.data.length;
      const starts = e.startsFile ?? (p.openBytes > 0 && p.openBytes + len > lm.segmentBytes(p));
      if (starts) lm.cut(p);
      p.openBytes += len;
      const info = readBatchInfo(e.data);
      lm.pushTail(p, { baseOffset: e.baseOffset, endOffset: e.endOffset, maxTimestamp: info.maxTimestamp, data: e.data, chunk: null });
      if (ProducerState.isIdempotent(info)) p.producers.record(info, e.baseOffset);
      lm.stats.recoveredBatches++;
    }
  }
  // The WAL appends to none of its recovered files: what was recovered ends a segment.
  lm.cut(p);
  p.highWatermark = p.nextOffset;
  lm.parts.set(`${def.name}/${i}`, p);
  lm.byKey.set(p.key, p);
  return p;
}

/**
 * Cluster mode: takes a partition this broker was given (Cluster ownership): a new epoch (which fences the
 * previous owner's metastore writes), the WAL's key fenced with it (its late appends are refused from now on),
 * then the key's entries read back (what the previous owner acknowledged and had not sealed, whether it handed
 * the partition over or died) and the idempotent-producer state. Returns the epoch.
 */
export async function acquirePartition(lm: LogState, def: StreamDef, partition: number): Promise<number> {
  if (lm.defs === null) throw new FlowError('INVALID_ARGUMENT', 'acquirePartition is for cluster mode');
  if (lm.closed) throw new FlowError('CLOSED', 'log is closed');
  lm.defs.set(def.name, def);
  const existing = lm.parts.get(`${def.name}/${partition}`);
  if (existing && !existing.releasing && existing.fenced === null && existing.def.createdAt === def.createdAt) return existing.epoch;
  if (existing) await releasePartition(lm, def.name, partition, true);
  const epoch = await takePartition(lm, def, partition);
  const key = partitionKey(def, partition);
  const state = await lm.meta.getPartitionState(def.name, partition);
  const entries: WalEntry[] = [];
  await lm.wal.replayKey!(key, (e) => entries.push(e), state?.flushedOffset ?? 0);
  lm.droppedKeys.delete(key);
  await loadPartition(lm, def, partition, epoch, entries);
  return epoch;
}

/**
 * Cluster mode: stops serving a partition. Appends are refused at once (NOT_OWNER: the caller finds the new
 * owner); for a handover (`lost` false) the appends in flight are waited for, so that everything acknowledged is
 * in the WAL for the next owner, which reads it back (nothing is sealed here: the handover stays quick). Then
 * the partition's memory goes; its WAL entries and objects stay.
 */
export async function releasePartition(lm: LogState, stream: string, partition: number, lost: boolean): Promise<void> {
  const id = `${stream}/${partition}`;
  const p = lm.parts.get(id);
  if (!p) return;
  p.releasing = true;
  if (!lost) {
    await p.lastWrite?.catch(() => undefined);
    // A seal in progress finishes (or fails) before the memory it reads goes.
    await p.sealing?.catch(() => undefined);
  }
  if (lm.parts.get(id) !== p) return;
  forgetPartitions(lm, [p]);
}

/**
 * The idempotent-producer state as of flushedOffset: the snapshot stored with the last segment, plus the batch
 * headers of any segment committed after it (a crash between the two writes).
 */
export async function loadProducerState(lm: LogState, p: Partition): Promise<void> {
  const snap = await lm.meta.getProducerState(p.def.name, p.partition);
  if (snap === null) return; // no snapshot: nothing idempotent was ever sealed (or sealed before snapshots)
  const state = ProducerState.fromJSON(snap.state);
  let pos = snap.endOffset;
  while (pos < p.flushedOffset) {
    const batches = await readSegments(lm, p, pos, 1 << 20, undefined);
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
 * A compacted copy (`…-<epoch>-c<generation>.seg`, compaction.ts) the metastore does not name is garbage too,
 * wherever it lies: the cleaner crashed or was fenced before its swap, or a later pass replaced it.
 */
export async function sweepObjects(lm: LogState, p: Partition): Promise<void> {
  const prefix = lm.objectPrefix(p);
  const known = new Set(p.segments.map((s) => s.objectKey));
  for (const o of await lm.objects.list(`${prefix}/`)) {
    if (known.has(o.key)) continue;
    const k = parseSegmentKey(o.key);
    if (k === null && isCompactedKey(o.key)) {
      await lm.objects.delete(o.key);
      lm.stats.garbageObjects++;
      lm.logger.warn({ partition: p.key, object: o.key }, 'compacted segment object the metastore does not name deleted (a cleaner stopped before its swap)');
      continue;
    }
    if (k === null || k.baseOffset < p.flushedOffset) continue;
    if (k.epoch === null && k.baseOffset === p.flushedOffset && (await adoptLegacy(lm, p, o.key, o.size))) continue;
    await lm.objects.delete(o.key);
    lm.stats.garbageObjects++;
    lm.logger.warn(
      { partition: p.key, object: o.key, epoch: k.epoch, ownEpoch: p.epoch },
      'uncommitted segment object of a crashed or fenced writer deleted (its data is in the WAL, or was never acknowledged)',
    );
  }
}

/** Commits a pre-epoch uncommitted segment object that continues the committed ones (see sweepObjects). */
export async function adoptLegacy(lm: LogState, p: Partition, key: string, size: number): Promise<boolean> {
  let index: SegmentIndex;
  try {
    index = await readIndex(lm, key, size);
  } catch (err) {
    lm.logger.warn({ err, object: key }, 'uncommitted segment object unreadable');
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
  await lm.meta.commitSegment(seg, p.epoch);
  p.segments.push(seg);
  p.flushedOffset = seg.endOffset;
  cacheIndex(lm, key, index);
  lm.stats.recoveredSegments++;
  lm.logger.info({ partition: p.key, base: seg.baseOffset, end: seg.endOffset }, 'uncommitted segment object committed at recovery');
  return true;
}

/** Takes partitions out of the log and lets go of their memory (a dropped stream, a handover). */
export function forgetPartitions(lm: LogState, victims: Partition[]): void {
  for (const p of victims) {
    lm.parts.delete(`${p.def.name}/${p.partition}`);
    lm.byKey.delete(p.key);
    if (p.fenced === null) lm.unsealed -= p.tailBytes; // a fenced partition's tail is out of the count already
    for (const w of p.waiters.splice(0)) {
      clearTimeout(w.timer);
      w.resolve();
    }
  }
  lm.releaseThrottled();
  // The batches' memory is not reused: WAL appends or a seal may still be reading it.
  for (const p of victims) {
    for (const b of p.tail) b.chunk?.abandon();
    for (const b of p.recent) {
      b.chunk?.abandon();
      lm.recentTotal -= recentCost(b);
    }
    p.recent = [];
    p.chunk?.abandon();
    p.chunk = null;
  }
  if (victims.length > 0) {
    lm.recentQueue = lm.recentQueue.slice(lm.recentHead).filter((e) => !victims.includes(e.p));
    lm.recentHead = 0;
  }
}
