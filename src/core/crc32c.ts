/**
 * CRC-32C (Castagnoli), the checksum of Kafka record batches. Slicing-by-8 table implementation: pure JS,
 * roughly 1 GB/s on current V8, so no native dependency is needed.
 */
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
