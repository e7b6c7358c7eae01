/**
 * CRC-32C (Castagnoli), the checksum of Kafka record batches, computed over every produced and stored batch.
 * The hardware-accelerated implementation of @node-rs/crc32 (SSE4.2 / ARMv8 CRC instructions, ~6 GB/s) is used
 * when its prebuilt binary loads; otherwise a slicing-by-8 table implementation in plain JS (~1 GB/s), which
 * profiling showed to be the largest single CPU cost of a Kafka produce.
 */
import { createRequire } from 'node:module';

type NativeCrc = (input: Uint8Array, initialState?: number) => number;

function loadNative(): NativeCrc | null {
  if (process.env.FLOWMQ_CRC32C === 'js') return null;
  try {
    const mod = createRequire(import.meta.url)('@node-rs/crc32') as { crc32c?: NativeCrc };
    return typeof mod.crc32c === 'function' ? mod.crc32c : null;
  } catch {
    return null;
  }
}

const native = loadNative();
/** Which implementation is in use, for logs and tests. */
export const crc32cImplementation: 'native' | 'js' = native ? 'native' : 'js';

const POLY = 0x82f63b78;
const T = new Int32Array(8 * 256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
  T[n] = c;
}
for (let n = 0; n < 256; n++) {
  let c = T[n];
  for (let k = 1; k < 8; k++) {
    c = T[c & 0xff] ^ (c >>> 8);
    T[k * 256 + n] = c;
  }
}

export function crc32c(buf: Uint8Array, start = 0, end = buf.length, seed = 0): number {
  if (native !== null) return native(start === 0 && end === buf.length ? buf : buf.subarray(start, end), seed) >>> 0;
  return crc32cJs(buf, start, end, seed);
}

/** The portable implementation (exported so tests can hold both to the same answers). */
export function crc32cJs(buf: Uint8Array, start = 0, end = buf.length, seed = 0): number {
  let crc = ~seed;
  let i = start;
  const end8 = end - ((end - start) & 7);
  while (i < end8) {
    const a = (buf[i] | (buf[i + 1] << 8) | (buf[i + 2] << 16) | (buf[i + 3] << 24)) ^ crc;
    crc =
      T[7 * 256 + (a & 0xff)] ^
      T[6 * 256 + ((a >>> 8) & 0xff)] ^
      T[5 * 256 + ((a >>> 16) & 0xff)] ^
      T[4 * 256 + (a >>> 24)] ^
      T[3 * 256 + buf[i + 4]] ^
      T[2 * 256 + buf[i + 5]] ^
      T[256 + buf[i + 6]] ^
      T[buf[i + 7]];
    i += 8;
  }
  while (i < end) crc = T[(crc ^ buf[i++]) & 0xff] ^ (crc >>> 8);
  return ~crc >>> 0;
}
