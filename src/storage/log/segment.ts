/**
 * Segment object format (version 1). A sealed run of record batches of one partition, written to the object
 * store as one object:
 *
 *   [batch 0][batch 1]...[batch n-1] [index: n × 24 bytes] [footer: 32 bytes]
 *
 * A segment adopted from a per-partition write-ahead log file (see ../wal/partition-wal.ts) is that file: its
 * header and frame headers sit before and between the batches, and the index and footer end its last frame. Only
 * the index says where batches are, so readers never assume they are back to back.
 *
 * index entry: baseOffset delta from the segment base (u32) | byte position (u32) | last offset delta of the
 *              batch (u32) | batch size (u32; 0 in early segments, whose batches are back to back) |
 *              max timestamp (i64)
 * footer:      index position (u32) | entry count (u32) | CRC-32 of the index (u32) | version (u32) |
 *              segment base offset (i64) | magic "FMQSEG\0\1"
 *
 * Batches keep their own CRC-32C, so data corruption is caught per batch on read; the index has its own CRC.
 * A reader fetches the footer, then the index (cached), then only the byte range it needs.
 */
import { crc32 } from 'node:zlib';
import { FlowError, readBatchInfo } from '../../core/index.js';

export const FOOTER_SIZE = 32;
export const INDEX_ENTRY_SIZE = 24;
const MAGIC = Buffer.from([0x46, 0x4d, 0x51, 0x53, 0x45, 0x47, 0x00, 0x01]);
const VERSION = 1;

export interface IndexEntry {
  /** Absolute base offset of the batch. */
  baseOffset: number;
  /** One past the batch's last offset. */
  endOffset: number;
  position: number;
  size: number;
  maxTimestamp: number;
}

export interface SegmentIndex {
  baseOffset: number;
  entries: IndexEntry[];
  /** Bytes of batch data (the index starts here). */
  dataSize: number;
}

/**
 * Builds the segment object for consecutive batches starting at `baseOffset`, as parts to be written in order:
 * the batches themselves (not copied) and one buffer holding the index and the footer.
 */
export function buildSegment(baseOffset: number, batches: Buffer[]): { parts: Buffer[]; size: number; index: SegmentIndex } {
  const positions: number[] = [];
  let pos = 0;
  for (const b of batches) {
    positions.push(pos);
    pos += b.length;
  }
  const { trailer, index } = buildTrailer(baseOffset, batches, positions, pos);
  return { parts: [...batches, trailer], size: pos + trailer.length, index };
}

/**
 * The index and footer of a segment whose batches lie at `positions` of the object (in order, not overlapping,
 * not necessarily back to back: a segment adopted from a write-ahead log file keeps the log's frame headers
 * between them), with the index starting at `indexPos`. Each entry stores its batch's size, so gaps are fine.
 */
export function buildTrailer(baseOffset: number, batches: Buffer[], positions: number[], indexPos: number): { trailer: Buffer; index: SegmentIndex } {
  const n = batches.length;
  const tail = Buffer.allocUnsafe(n * INDEX_ENTRY_SIZE + FOOTER_SIZE);
  const entries: IndexEntry[] = [];
  let ip = 0;
  for (let i = 0; i < n; i++) {
    const b = batches[i];
    const info = readBatchInfo(b);
    const e: IndexEntry = {
      baseOffset: info.baseOffset,
      endOffset: info.baseOffset + info.lastOffsetDelta + 1,
      position: positions[i],
      size: b.length,
      maxTimestamp: info.maxTimestamp,
    };
    entries.push(e);
    tail.writeUInt32BE(e.baseOffset - baseOffset, ip);
    tail.writeUInt32BE(e.position, ip + 4);
    tail.writeUInt32BE(info.lastOffsetDelta, ip + 8);
    tail.writeUInt32BE(e.size, ip + 12);
    tail.writeBigInt64BE(BigInt(info.maxTimestamp), ip + 16);
    ip += INDEX_ENTRY_SIZE;
  }
  const f = ip;
  tail.writeUInt32BE(indexPos, f);
  tail.writeUInt32BE(n, f + 4);
  tail.writeUInt32BE(crc32(tail.subarray(0, ip)), f + 8);
  tail.writeUInt32BE(VERSION, f + 12);
  tail.writeBigInt64BE(BigInt(baseOffset), f + 16);
  MAGIC.copy(tail, f + 24);
  return { trailer: tail, index: { baseOffset, entries, dataSize: indexPos } };
}

export interface Footer {
  indexPos: number;
  count: number;
  indexCrc: number;
  baseOffset: number;
}

export function parseFooter(buf: Buffer): Footer {
  if (buf.length !== FOOTER_SIZE || !buf.subarray(24).equals(MAGIC)) {
    throw new FlowError('CORRUPT_DATA', 'segment footer missing or bad magic');
  }
  const version = buf.readUInt32BE(12);
  if (version !== VERSION) throw new FlowError('CORRUPT_DATA', `unknown segment version ${version}`);
  return {
    indexPos: buf.readUInt32BE(0),
    count: buf.readUInt32BE(4),
    indexCrc: buf.readUInt32BE(8),
    baseOffset: Number(buf.readBigInt64BE(16)),
  };
}

export function parseIndex(footer: Footer, raw: Buffer): SegmentIndex {
  if (raw.length !== footer.count * INDEX_ENTRY_SIZE || crc32(raw) !== footer.indexCrc) {
    throw new FlowError('CORRUPT_DATA', 'segment index checksum mismatch');
  }
  const entries: IndexEntry[] = [];
  for (let i = 0; i < footer.count; i++) {
    const p = i * INDEX_ENTRY_SIZE;
    const baseOffset = footer.baseOffset + raw.readUInt32BE(p);
    const position = raw.readUInt32BE(p + 4);
    // Segments written before batch sizes were stored (0 there) hold their batches back to back.
    const stored = raw.readUInt32BE(p + 12);
    const next = i + 1 < footer.count ? raw.readUInt32BE(p + INDEX_ENTRY_SIZE + 4) : footer.indexPos;
    entries.push({
      baseOffset,
      endOffset: baseOffset + raw.readUInt32BE(p + 8) + 1,
      position,
      size: stored !== 0 ? stored : next - position,
      maxTimestamp: Number(raw.readBigInt64BE(p + 16)),
    });
  }
  return { baseOffset: footer.baseOffset, entries, dataSize: footer.indexPos };
}

/** Index of the entry holding `offset`, or of the first entry after it; entries.length when none. */
export function findEntry(entries: { baseOffset: number; endOffset: number }[], offset: number): number {
  let lo = 0;
  let hi = entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (entries[mid].endOffset <= offset) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * The object key of a segment: its base offset and the epoch of the writer that sealed it. A writer fenced by a
 * later epoch may still be writing an object when the partition's new owner seals the same offsets: with the epoch
 * in the key they can never overwrite each other, and the new owner can tell the other's object from its own.
 */
export function segmentKey(prefix: string, baseOffset: number, epoch: number): string {
  return `${prefix}/${String(baseOffset).padStart(20, '0')}-${epoch}.seg`;
}

/** The key of a compacted copy of a segment (compaction.ts): `<20-digit base>-<epoch>-c<generation>.seg`. */
export function compactedKey(prefix: string, baseOffset: number, epoch: number, generation: number): string {
  return `${prefix}/${String(baseOffset).padStart(20, '0')}-${epoch}-c${generation}.seg`;
}
export function isCompactedKey(key: string): boolean {
  return /\/\d{20}-\d{1,16}-c\d{1,16}\.seg$/.test(key);
}

/**
 * The base offset and writer epoch a segment key names (the epoch is null in keys written before epochs existed,
 * `<20-digit base>.seg`), or null for a key that is no segment's.
 */
export function parseSegmentKey(key: string): { baseOffset: number; epoch: number | null } | null {
  const m = /\/(\d{20})(?:-(\d{1,16}))?\.seg$/.exec(key);
  if (m === null) return null;
  const baseOffset = Number(m[1]);
  if (!Number.isSafeInteger(baseOffset)) return null;
  return { baseOffset, epoch: m[2] === undefined ? null : Number(m[2]) };
}
