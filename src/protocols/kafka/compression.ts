/**
 * Record-batch decompressors for the codecs the core does not carry itself (it has gzip): snappy, lz4 and zstd,
 * registered with the core's decodeBatch on import. The broker never recompresses: produced batches are stored
 * and fetched exactly as the client compressed them; decompression is only needed to validate produced batches
 * (as Kafka's log validator does), to route their records to other protocols and to find timestamps.
 *
 * Codec ids are the RecordBatch attributes' low 3 bits: 1 gzip, 2 snappy, 3 lz4, 4 zstd (KIP-110); 5-7 are
 * undefined and produce UNSUPPORTED_COMPRESSION_TYPE.
 *
 * Pure-JavaScript libraries (snappyjs, lz4js, fzstd) keep installation free of native builds and downloads.
 */
import snappy from 'snappyjs';
import lz4 from 'lz4js';
import { decompress as zstdDecompress } from 'fzstd';
import { Compression, registerDecompressor } from '../../core/index.js';

/**
 * Largest decompressed batch body accepted: a small compressed batch must not make the broker allocate
 * gigabytes (a "decompression bomb"). Kafka's own bound is the segment size; 256 MiB is well above any
 * batch a client sends (message.max.bytes defaults to 1 MiB).
 */
export const MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024;

const asBuffer = (u: Uint8Array): Buffer => Buffer.from(u.buffer, u.byteOffset, u.byteLength);

/**
 * The xerial snappy-java stream format, which the Java client and KafkaJS produce: an 8-byte magic, two version
 * ints, then blocks of (int32 length, raw snappy). librdkafka produces plain raw snappy. Both are accepted.
 */
const XERIAL_MAGIC = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00]);

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
      const part = asBuffer(snappy.uncompress(b.subarray(pos, pos + len), MAX_DECOMPRESSED_BYTES - total));
      total += part.length;
      parts.push(part);
      pos += len;
    }
    return Buffer.concat(parts, total);
  }
  return asBuffer(snappy.uncompress(b, MAX_DECOMPRESSED_BYTES));
}

export function lz4Decompress(b: Buffer): Buffer {
  const bound = lz4.decompressBound(b);
  if (!Number.isFinite(bound) || bound > MAX_DECOMPRESSED_BYTES) throw new Error(`lz4 frame too large (${bound} bytes)`);
  return asBuffer(lz4.decompress(b, bound));
}

export function zstdDecompressBuffer(b: Buffer): Buffer {
  return asBuffer(zstdDecompress(b));
}

registerDecompressor(Compression.Snappy, snappyDecompress);
registerDecompressor(Compression.Lz4, lz4Decompress);
registerDecompressor(Compression.Zstd, zstdDecompressBuffer);
