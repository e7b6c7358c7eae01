/**
 * The core decodes batches compressed with every Kafka codec by itself: the decompressors are part of
 * record-batch.ts, not registered by the Kafka adapter, so an MQTT, AMQP or NATS consumer of a stream reads a
 * compressed batch on a broker that runs no Kafka listener. This file imports the core only, never the adapter.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import snappy from 'snappyjs';
import lz4 from 'lz4js';
import {
  BATCH_HEADER_SIZE,
  Compression,
  OFF_ATTRIBUTES,
  OFF_CRC,
  crc32c,
  decodeBatch,
  encodeBatch,
  isCompressionSupported,
  readBatchInfo,
  recordToMessage,
  verifyBatchCrc,
  type RecordInput,
} from '../../src/core/index.js';

const recs: RecordInput[] = [
  { key: Buffer.from('k1'), value: Buffer.from('hello hello hello hello'), headers: [{ key: 'h', value: Buffer.from('x') }], timestamp: 1700000000000 },
  { key: null, value: Buffer.from('second record'), headers: [], timestamp: 1700000000001 },
];

/** The records section of `recs` compressed by the zstd command-line tool (`zstd -19`): fzstd only decompresses. */
const ZSTD_BODY = Buffer.from('28b52ffd2438750100740246000000046b312e68656c6c6f20020268027826000202011a7365636f6e64207265636f7264000100998b127f1c86b4', 'hex');

/** The batch of `recs` with its records section replaced by `body`, compressed with `codec`; length and CRC fixed. */
function compressedBatch(codec: Compression, body: Buffer): Buffer {
  const head = Buffer.from(encodeBatch(recs).subarray(0, BATCH_HEADER_SIZE));
  const out = Buffer.concat([head, body]);
  out.writeInt32BE(out.length - 12, 8); // batch length: everything after the base offset and itself
  out.writeInt16BE(codec, OFF_ATTRIBUTES);
  out.writeUInt32BE(crc32c(out, OFF_ATTRIBUTES, out.length), OFF_CRC);
  return out;
}

const plainBody = (): Buffer => encodeBatch(recs).subarray(BATCH_HEADER_SIZE);
const u8 = (x: Uint8Array): Buffer => Buffer.from(x.buffer, x.byteOffset, x.byteLength);

describe('compressed batches decode in the core alone', () => {
  const cases: Array<[string, Compression, () => Buffer]> = [
    ['snappy', Compression.Snappy, () => u8(snappy.compress(plainBody()))],
    ['lz4', Compression.Lz4, () => u8(lz4.compress(plainBody()))],
    ['zstd', Compression.Zstd, () => ZSTD_BODY],
  ];
  for (const [name, codec, body] of cases) {
    it(`${name}: supported and decoded to the records produced`, () => {
      assert.ok(isCompressionSupported(codec));
      const batch = compressedBatch(codec, body());
      assert.ok(verifyBatchCrc(batch));
      assert.equal(readBatchInfo(batch).compression, codec);
      const out = decodeBatch(batch);
      assert.deepEqual(
        out.map((r) => [r.key?.toString() ?? null, r.value?.toString() ?? null, r.timestamp]),
        [
          ['k1', 'hello hello hello hello', 1700000000000],
          [null, 'second record', 1700000000001],
        ],
      );
      assert.deepEqual(out[0].headers, [{ key: 'h', value: Buffer.from('x') }]);
      // What a non-Kafka consumer gets: a message with the record's payload.
      assert.equal(recordToMessage(out[1], 't').payload.toString(), 'second record');
    });
  }

  it('a corrupt compressed body is CORRUPT_DATA, not a crash', () => {
    const body = u8(lz4.compress(plainBody()));
    const batch = compressedBatch(Compression.Lz4, body.subarray(0, body.length - 6));
    assert.throws(() => decodeBatch(batch), { code: 'CORRUPT_DATA' });
  });
});
