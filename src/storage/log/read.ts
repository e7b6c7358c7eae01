/**
 * Reads: from memory when hot (the recent sealed batches, then the tail, only below the high watermark; batches in
 * reused memory are pinned by the reader's lease, or copied without one), else from segment objects by ranged reads
 * through their index (cached, least recently used out); and the offset for a timestamp (Kafka ListOffsets).
 */
import { decodeBatch, type ReadLease } from '../../core/index.js';
import type { SegmentMeta } from '../metastore/types.js';
import { findEntry, FOOTER_SIZE, parseFooter, parseIndex, type SegmentIndex } from './segment.js';
import { Partition, type TailBatch } from './partition.js';
import { LogState } from './log-state.js';
import { checkBatches, reportingCorruption } from './verify.js';

export async function read(lm: LogState, stream: string, partition: number, offset: number, maxBytes: number, lease?: ReadLease): Promise<Buffer[]> {
  const p = lm.part(stream, partition);
  if (offset < p.logStartOffset || offset >= p.highWatermark) return [];
  const inMemory = p.recent.length > 0 ? p.recent[0].baseOffset : p.tail.length > 0 ? p.tail[0].baseOffset : p.nextOffset;
  // Below the cleaner's mark, the (compacted) segments answer, not the recent batches kept as they were sealed.
  if (offset >= inMemory && offset >= p.cleanedOffset) return readTail(p, offset, maxBytes, lease);
  return readSegments(lm, p, offset, maxBytes, lease);
}

/**
 * A tail batch for a reader: a batch in reused memory is pinned by the reader's lease until it releases it, or
 * copied for a reader without one.
 */
export function handOut(b: TailBatch, lease: ReadLease | undefined): Buffer {
  if (b.chunk === null) return b.data;
  if (lease === undefined) return Buffer.from(b.data);
  lease.hold(b.chunk.pin());
  return b.data;
}

/** Reads batches in memory: the recent (sealed) ones, then the tail, from the one holding `offset`. */
export function readTail(p: Partition, offset: number, maxBytes: number, lease: ReadLease | undefined): Buffer[] {
  const out: Buffer[] = [];
  let bytes = 0;
  const fromRecent = p.recent.length > 0 && offset < p.recent[p.recent.length - 1].endOffset;
  for (const list of fromRecent ? [p.recent, p.tail] : [p.tail]) {
    for (let i = list === p.tail && fromRecent ? 0 : findEntry(list, offset); i < list.length; i++) {
      const b = list[i];
      if (b.endOffset > p.highWatermark) return out; // not durable yet: not visible
      if (out.length > 0 && bytes + b.data.length > maxBytes) return out;
      out.push(handOut(b, lease));
      bytes += b.data.length;
    }
  }
  return out;
}

export async function readSegments(lm: LogState, p: Partition, offset: number, maxBytes: number, lease: ReadLease | undefined): Promise<Buffer[]> {
  const si = findEntry(
    p.segments.map((s) => ({ baseOffset: s.baseOffset, endOffset: s.endOffset })),
    offset,
  );
  if (si >= p.segments.length) return readTail(p, offset, maxBytes, lease);
  const seg = p.segments[si];
  const index = await loadIndex(lm, seg);
  let i = findEntry(index.entries, offset);
  // A compacted segment may end in a gap (its last records removed, or all of them): the next segment goes on.
  if (i >= index.entries.length) return seg.endOffset > offset ? read(lm, p.def.name, p.partition, seg.endOffset, maxBytes, lease) : [];
  const first = i;
  let end = index.entries[i].position + index.entries[i].size;
  for (i++; i < index.entries.length; i++) {
    const e = index.entries[i];
    if (e.position + e.size - index.entries[first].position > maxBytes) break;
    end = e.position + e.size;
  }
  const start = index.entries[first].position;
  lm.stats.objectReads++;
  const raw = await lm.objects.get(seg.objectKey, { start, end });
  // Batches are where the index says (an adopted WAL file has frame headers between them).
  const out: Buffer[] = [];
  let k = first;
  for (; k < index.entries.length && index.entries[k].position + index.entries[k].size <= end; k++) {
    const e = index.entries[k];
    out.push(raw.subarray(e.position - start, e.position - start + e.size));
  }
  // Every batch is checked before it is served (verify.ts): a corrupt object is reported and refused.
  checkBatches(lm, seg.objectKey, out, index.entries.slice(first, k));
  return out;
}

export async function loadIndex(lm: LogState, seg: SegmentMeta): Promise<SegmentIndex> {
  const cached = lm.indexCache.get(seg.objectKey);
  if (cached) return cached;
  const index = await readIndex(lm, seg.objectKey, seg.size);
  cacheIndex(lm, seg.objectKey, index);
  return index;
}

/** A segment object's index, read through its footer (a bad one is reported as corruption, see verify.ts). */
export function readIndex(lm: LogState, objectKey: string, size: number): Promise<SegmentIndex> {
  return reportingCorruption(lm, objectKey, async () => {
    const footer = parseFooter(await lm.objects.get(objectKey, { start: size - FOOTER_SIZE, end: size }));
    return parseIndex(footer, await lm.objects.get(objectKey, { start: footer.indexPos, end: size - FOOTER_SIZE }));
  });
}

/** Keeps an index for later reads (index-cache.ts: the least recently used go beyond its bounds). */
export function cacheIndex(lm: LogState, objectKey: string, index: SegmentIndex): void {
  lm.indexCache.set(objectKey, index);
}

export async function offsetForTimestamp(lm: LogState, stream: string, partition: number, ts: number): Promise<number> {
  const p = lm.part(stream, partition);
  for (const seg of p.segments) {
    if (seg.endOffset <= p.logStartOffset || seg.maxTimestamp < ts) continue;
    const index = await loadIndex(lm, seg);
    for (const e of index.entries) {
      if (e.maxTimestamp < ts) continue;
      const raw = await lm.objects.get(seg.objectKey, { start: e.position, end: e.position + e.size });
      checkBatches(lm, seg.objectKey, [raw], [e]);
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

function firstAtOrAfter(batch: Buffer, ts: number, minOffset: number): number | null {
  for (const r of decodeBatch(batch)) if (r.timestamp >= ts && r.offset >= minOffset) return r.offset;
  return null;
}
