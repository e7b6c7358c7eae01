/** Pieces shared by the WAL backends' file formats: 64-bit integers, frame checksums, errno codes. */
import { crc32 } from 'node:zlib';
import { crc32c, crc32cCombine } from '../../core/index.js';

/** A frame starts with u32 body length | u32 crc. */
export const FRAME_HEADER = 8;
const TWO32 = 0x1_0000_0000;

/** Below this much data a frame's CRC is computed over it even when a CRC of it is given (as fast, and simpler). */
const COMBINE_MIN_BYTES = 64 * 1024;

/**
 * The frame CRC: over the body (head's part after the 8-byte frame header, then the data). A known CRC-32C of the
 * data's tail stands for those bytes (see WalEntry.dataCrc). A null seed means the oldest format (zlib CRC-32).
 */
export function frameCrc(seed: number | null, head: Buffer, data: Buffer, known?: { from: number; crc: number }): number {
  if (seed === null) return crc32(data, crc32(head.subarray(FRAME_HEADER)));
  const headCrc = crc32c(head, FRAME_HEADER, head.length, seed);
  if (known === undefined || data.length < COMBINE_MIN_BYTES || known.from < 0 || known.from > data.length) {
    return crc32c(data, 0, data.length, headCrc);
  }
  return crc32cCombine(crc32c(data, 0, known.from, headCrc), known.crc, data.length - known.from);
}

export function isSafeOffset(n: number): boolean {
  return Number.isSafeInteger(n) && n >= 0;
}

/** u64 big-endian as two u32 halves (covers every safe integer). */
export function writeU64(buf: Buffer, n: number, at: number): void {
  buf.writeUInt32BE(Math.floor(n / TWO32), at);
  buf.writeUInt32BE(n >>> 0, at + 4);
}

export function readU64(buf: Buffer, at: number): number {
  return buf.readUInt32BE(at) * TWO32 + buf.readUInt32BE(at + 4);
}

export function errnoCode(err: unknown): string | undefined {
  return err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : undefined;
}
