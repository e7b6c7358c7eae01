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

/** a(x)·b(x) mod the CRC-32C polynomial, in the reflected bit order the CRC uses. */
function multModP(a: number, b: number): number {
  let m = 0x80000000;
  let p = 0;
  for (;;) {
    if ((a & m) !== 0) {
      p ^= b;
      if ((a & (m - 1)) === 0) break;
    }
    m >>>= 1;
    b = b & 1 ? (b >>> 1) ^ POLY : b >>> 1;
  }
  return p >>> 0;
}

/** X2N[k] = x^(2^k) mod P. */
const X2N = new Uint32Array(32);
X2N[0] = 0x40000000; // x^1
for (let k = 1; k < 32; k++) X2N[k] = multModP(X2N[k - 1], X2N[k - 1]);

/**
 * The CRC-32C of A followed by B, from crc32c(A), crc32c(B) and B's length, in O(log n): a CRC a buffer already
 * carries (a verified Kafka batch's) can stand for its bytes inside a larger checksum without reading them again.
 * Same chaining as crc32c(): crc32c(B, 0, n, crc32c(A)) === crc32cCombine(crc32c(A), crc32c(B), n).
 */
export function crc32cCombine(crcA: number, crcB: number, lengthB: number): number {
  // x^(8n) mod P, by the bits of n.
  let xn = 0x80000000; // x^0
  let k = 3;
  for (let n = lengthB; n > 0; n = Math.floor(n / 2), k++) {
    if (n % 2 === 1) xn = multModP(X2N[k & 31], xn);
  }
  return (multModP(xn, crcA >>> 0) ^ crcB) >>> 0;
}
