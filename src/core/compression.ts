/**
 * Record-batch decompressors for snappy, lz4 and zstd (gzip is zlib's, in record-batch.ts), which decodeBatch
 * uses for every protocol: an MQTT, AMQP or NATS consumer reads a compressed Kafka batch whether or not the Kafka
 * adapter runs. The broker never recompresses: produced batches are stored
 * and fetched exactly as the client compressed them; decompression is only needed to validate produced batches
 * (as Kafka's log validator does), to route their records to other protocols and to find timestamps.
 *
 * Codec ids are the RecordBatch attributes' low 3 bits: 1 gzip, 2 snappy, 3 lz4, 4 zstd (KIP-110); 5-7 are
 * undefined and produce UNSUPPORTED_COMPRESSION_TYPE.
 *
 * Pure-JavaScript libraries (snappyjs, lz4js, fzstd) keep installation free of native builds and downloads.
 */
import { createRequire } from 'node:module';

/**
 * The codecs are loaded on first use, synchronously (all three are CommonJS): together they were ~18 ms of a broker's
 * start, and most brokers never see a compressed batch (test/storage/open-imports.test.ts keeps them off the start
 * path).
 */
const requireCodec = createRequire(import.meta.url);
type Snappy = (typeof import('snappyjs'))['default'];
type Lz4 = (typeof import('lz4js'))['default'];
let snappyLib: Snappy | null = null;
let lz4Lib: Lz4 | null = null;
let zstdLib: typeof import('fzstd') | null = null;
const snappy = (): Snappy => (snappyLib ??= requireCodec('snappyjs') as Snappy);
const lz4 = (): Lz4 => (lz4Lib ??= requireCodec('lz4js') as Lz4);
const zstdDecompress = (b: Uint8Array): Uint8Array => (zstdLib ??= requireCodec('fzstd') as typeof import('fzstd')).decompress(b);

/**
 * Largest decompressed batch body accepted, by every codec: a small compressed batch must not make the broker
 * allocate gigabytes (a "decompression bomb"). Kafka's own bound is the segment size; 256 MiB is well above any
 * batch a client sends (message.max.bytes defaults to 1 MiB).
 */
export const MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024;

const asBuffer = (u: Uint8Array): Buffer => Buffer.from(u.buffer, u.byteOffset, u.byteLength);

/**
 * The most a snappy stream of `n` bytes can decompress to: the densest element is a copy of 64 bytes encoded in
 * 2 or 3 bytes (snappy format_description.txt, 2.2), so 22 bytes out per byte in. The uncompressed length at the
 * front is a varint the sender chooses, and snappyjs allocates it before decoding: it must not exceed what the
 * data can produce (a 6-byte stream claiming 256 MiB was allocated in full before it failed; found by `npm run fuzz`).
 */
const snappyBound = (n: number): number => 22 * n + 64;

/**
 * The most an LZ4 frame of `n` bytes can decompress to: a match length grows by 255 per extra length byte (LZ4
 * block format, "match length"), so 255 bytes out per byte in. lz4js otherwise allocates the frame's declared
 * content size, or 4 MiB per block of the declared block size, before decoding.
 */
const lz4Bound = (n: number): number => 255 * n + 64;

/**
 * The xerial snappy-java stream format, which the Java client and KafkaJS produce: an 8-byte magic, two version
 * ints, then blocks of (int32 length, raw snappy). librdkafka produces plain raw snappy. Both are accepted.
 */
const XERIAL_MAGIC = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00]);

/**
 * Walks the elements of a raw snappy stream (format_description.txt, 2.1 and 2.2: a varint length, then tagged
 * literals and copies) and throws when a literal's length runs past the data. snappyjs reads a 4-byte literal
 * length as a signed number: one of 2^31 or more moved its position backwards, and a 160-byte batch kept it busy
 * for 24 s (found by `npm run fuzz`).
 */
export function checkSnappyElements(b: Buffer): void {
  let pos = 0;
  while (pos < b.length && b[pos] >= 0x80) pos++;
  pos++;
  while (pos < b.length) {
    const c = b[pos++];
    const type = c & 3;
    if (type !== 0) {
      pos += type === 1 ? 1 : type === 2 ? 2 : 4;
      continue;
    }
    let len = (c >>> 2) + 1;
    if (len > 60) {
      const n = len - 60;
      if (pos + n > b.length) throw new Error('truncated snappy literal length');
      len = b.readUIntLE(pos, n) + 1;
      pos += n;
    }
    if (len > b.length - pos) throw new Error(`snappy literal of ${len} bytes does not fit`);
    pos += len;
  }
}

export function snappyDecompress(b: Buffer): Buffer {
  if (b.length >= 16 && b.subarray(0, 8).equals(XERIAL_MAGIC)) {
    const parts: Buffer[] = [];
    let total = 0;
    let pos = 16;
    while (pos < b.length) {
      if (pos + 4 > b.length) throw new Error('truncated xerial snappy block header');
      const len = b.readInt32BE(pos);
      pos += 4;
      if (len < 0 || pos + len > b.length) throw new Error('xerial snappy block does not fit');
      const block = b.subarray(pos, pos + len);
      checkSnappyElements(block);
      const part = asBuffer(snappy().uncompress(block, Math.min(MAX_DECOMPRESSED_BYTES - total, snappyBound(len))));
      total += part.length;
      parts.push(part);
      pos += len;
    }
    return Buffer.concat(parts, total);
  }
  checkSnappyElements(b);
  return asBuffer(snappy().uncompress(b, Math.min(MAX_DECOMPRESSED_BYTES, snappyBound(b.length))));
}

/**
 * Checks that every block of the LZ4 frame lies within the data, walking it as lz4js's decoder does (LZ4 Frame
 * Format 1.6: magic, FLG, BD, optional content size, header checksum, then blocks of a 4-byte size and data,
 * ending with a zero size; lz4js ignores the dictionary-id flag and reads a block checksum before the block
 * rather than after it, and only a size of exactly 0 ends its loop). lz4js trusts the block sizes: a 90-byte
 * frame declaring a 2 GiB block kept it decoding past the end for seconds per batch (found by `npm run fuzz`).
 */
export function checkLz4Frame(b: Buffer): void {
  if (b.length < 7 || b.readUInt32LE(0) !== 0x184d2204) throw new Error('bad lz4 frame header');
  const flg = b[4];
  let p = 6 + ((flg & 0x08) !== 0 ? 8 : 0) + 1;
  const blockChecksum = (flg & 0x10) !== 0 ? 4 : 0;
  for (;;) {
    if (p + 4 > b.length) throw new Error('truncated lz4 frame');
    const raw = b.readUInt32LE(p);
    p += 4;
    if (raw === 0) return;
    p += blockChecksum;
    const size = raw & 0x7fffffff;
    if (size > b.length - p) throw new Error(`lz4 block of ${size} bytes does not fit the frame`);
    p += size;
  }
}

export function lz4Decompress(b: Buffer): Buffer {
  checkLz4Frame(b);
  const bound = lz4().decompressBound(b);
  if (!Number.isFinite(bound) || bound > MAX_DECOMPRESSED_BYTES) throw new Error(`lz4 frame too large (${bound} bytes)`);
  return asBuffer(lz4().decompress(b, Math.min(bound, lz4Bound(b.length))));
}

/** Block_Maximum_Size (RFC 8878 3.1.1.2.3): no block decompresses to more. */
const ZSTD_MAX_BLOCK = 128 * 1024;
/**
 * Walks the frames of a zstd stream (RFC 8878 3.1) without decoding them, and returns it ready for fzstd, which
 * allocates each frame's declared size up front: Frame_Content_Size, or the Window_Size when there is none. A
 * 20-byte frame declaring 2 GiB made it allocate 2 GiB (found by `npm run fuzz`). So a frame must not declare a
 * content size its blocks cannot produce (raw and RLE blocks their size, compressed ones at most
 * Block_Maximum_Size), and a window larger than what the frame's blocks can produce is lowered to that, in a copy:
 * back-references never reach further than the data already produced, so the result is the same (streaming
 * encoders, such as the Java client's, write no content size and a window of a few MiB for small batches).
 */
export function checkZstdFrames(input: Buffer): Buffer {
  let b = input;
  let pos = 0;
  let total = 0;
  while (pos < b.length) {
    if (pos + 8 > b.length) throw new Error('truncated zstd frame');
    const magic = b.readUInt32LE(pos);
    if ((magic & 0xfffffff0) === 0x184d2a50) {
      // Skippable frame (3.1.2): magic, 4-byte size, data.
      pos += 8 + b.readUInt32LE(pos + 4);
      continue;
    }
    if (magic !== 0xfd2fb528) throw new Error('bad zstd magic');
    const fhd = b[pos + 4];
    const singleSegment = (fhd >> 5) & 1;
    const fcsFlag = fhd >> 6;
    const dictBytes = [0, 1, 2, 4][fhd & 3];
    const fcsBytes = fcsFlag === 0 ? singleSegment : 1 << fcsFlag;
    let p = pos + 5;
    const windowAt = singleSegment ? -1 : p;
    let window = 0;
    if (!singleSegment) {
      const wd = b[p++];
      const base = 2 ** (10 + (wd >> 3));
      window = base + (base / 8) * (wd & 7);
    }
    p += dictBytes;
    if (p + fcsBytes > b.length) throw new Error('truncated zstd frame header');
    let fcs = 0;
    for (let i = 0; i < fcsBytes; i++) fcs += b[p + i] * 2 ** (8 * i);
    if (fcsBytes === 2) fcs += 256;
    p += fcsBytes;
    let produced = 0;
    for (let last = 0; !last;) {
      if (p + 3 > b.length) throw new Error('truncated zstd block header');
      const h = b[p] | (b[p + 1] << 8) | (b[p + 2] << 16);
      last = h & 1;
      const type = (h >> 1) & 3;
      const size = h >>> 3;
      p += 3;
      if (type === 3) throw new Error('reserved zstd block type');
      if (size > ZSTD_MAX_BLOCK) throw new Error('zstd block above Block_Maximum_Size');
      produced += type === 2 ? ZSTD_MAX_BLOCK : size;
      p += type === 1 ? 1 : size;
    }
    if ((fhd >> 2) & 1) p += 4; // Content_Checksum
    if (fcs > produced) throw new Error(`zstd frame declares ${fcs} bytes, more than its blocks can hold`);
    let declared = fcs;
    if (fcs === 0 && window > produced) {
      // The smallest power-of-two window (mantissa 0) that holds everything the frame can produce.
      const exponent = Math.max(0, Math.ceil(Math.log2(Math.max(produced, 1))) - 10);
      if (b === input) b = Buffer.from(input);
      b[windowAt] = exponent << 3;
      window = 2 ** (10 + exponent);
    }
    if (fcs === 0) declared = window;
    total += declared;
    if (total > MAX_DECOMPRESSED_BYTES) throw new Error(`zstd data too large (${total} bytes)`);
    pos = p;
  }
  return b;
}

export function zstdDecompressBuffer(b: Buffer): Buffer {
  return asBuffer(zstdDecompress(checkZstdFrames(b)));
}
