/**
 * Compressed record batches: kcat (librdkafka) produces with every codec, KafkaJS produces with the codecs it can
 * compress here (gzip, and snappy and lz4 through pure-JS codecs registered on the client); both read everything
 * back. The broker stores batches as produced (no recompression) and validates them by decompressing.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import kafkajs from 'kafkajs';
import snappy from 'snappyjs';
import lz4 from 'lz4js';
import { decompress as zstdDecompress } from 'fzstd';
import { Engine, crc32c, decodeBatch, encodeBatch, readBatchInfo } from '../../../src/core/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { lz4Decompress, snappyDecompress } from '../../../src/core/compression.js';
import { KafkaErrorCode, ProduceApi } from '../../../src/protocols/kafka/codec/index.js';
import { RawClient, kcat, startMemoryKafka } from './helpers.js';

const { Kafka, logLevel, CompressionTypes, CompressionCodecs } = kafkajs;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

const u8 = (x: Uint8Array): Buffer => Buffer.from(x.buffer, x.byteOffset, x.byteLength);

/** KafkaJS client-side codecs (its own packages for these need native builds); zstd can only be read here. */
interface Encoder {
  buffer: Buffer;
}
CompressionCodecs[CompressionTypes.Snappy] = () => ({
  compress: async (e: Encoder) => u8(snappy.compress(e.buffer)),
  decompress: async (b: Buffer) => snappyDecompress(b),
});
CompressionCodecs[CompressionTypes.LZ4] = () => ({
  compress: async (e: Encoder) => u8(lz4.compress(e.buffer)),
  decompress: async (b: Buffer) => lz4Decompress(b),
});
CompressionCodecs[CompressionTypes.ZSTD] = () => ({
  compress: async () => {
    throw new Error('no zstd compressor in this test');
  },
  decompress: async (b: Buffer) => u8(zstdDecompress(b)),
});

const FAST = ['-X', 'fetch.wait.max.ms=50', '-m', '10'];

function jsonLines(out: string): Array<Record<string, unknown>> {
  return out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe('kafka compression codecs', () => {
  let engine: Engine;
  let listener: ProtocolListener;
  let broker: string;
  let port: number;

  before(async () => {
    ({ engine, listener, port, broker } = await startMemoryKafka());
  });
  after(async () => {
    await listener.close();
  });

  for (const codec of ['gzip', 'snappy', 'lz4', 'zstd'] as const) {
    it(`kcat -z ${codec}: stored compressed as produced, read back by kcat and KafkaJS with keys and headers`, async () => {
      const topic = `z.${codec}`;
      const lines = Array.from({ length: 50 }, (_, i) => `k${i}:${'value-'.repeat(20)}${i}`).join('\n') + '\n';
      const p = await kcat(['-b', broker, '-P', '-t', topic, '-p', '0', '-z', codec, '-K', ':', '-H', `codec=${codec}`, '-X', 'linger.ms=50', ...FAST], {
        input: lines,
      });
      assert.equal(p.code, 0, p.stderr);
      // The batches are stored compressed with the codec kcat chose.
      const stored = await engine.read(topic, 0, 0, 1 << 20);
      const codecId = { gzip: 1, snappy: 2, lz4: 3, zstd: 4 }[codec];
      assert.ok(stored.length >= 1);
      for (const b of stored) assert.equal(readBatchInfo(b).compression, codecId);
      assert.equal(stored.flatMap((b) => decodeBatch(b)).length, 50);

      const c = await kcat(['-b', broker, '-C', '-t', topic, '-o', 'beginning', '-e', '-J', ...FAST]);
      assert.equal(c.code, 0, c.stderr);
      const msgs = jsonLines(c.stdout);
      assert.deepEqual(
        msgs.map((x) => x.offset),
        Array.from({ length: 50 }, (_, i) => i),
      );
      assert.equal(msgs[7].key, 'k7');
      assert.equal(msgs[7].payload, `${'value-'.repeat(20)}7`);
      assert.deepEqual(msgs[7].headers, ['codec', codec]);

      const kafka = new Kafka({ brokers: [broker], clientId: `z-${codec}`, logLevel: logLevel.NOTHING });
      const consumer = kafka.consumer({ groupId: `zg-${codec}`, maxWaitTimeInMs: 100 });
      const got: string[] = [];
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await consumer.run({ eachMessage: async ({ message }) => void got.push(`${String(message.key)}:${String(message.value)}`) });
      const deadline = Date.now() + 15_000;
      while (got.length < 50 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      await consumer.disconnect();
      assert.equal(got.length, 50);
      assert.equal(got[49], `k49:${'value-'.repeat(20)}49`);
    });
  }

  for (const [name, type] of [
    ['gzip', CompressionTypes.GZIP],
    ['snappy', CompressionTypes.Snappy],
    ['lz4', CompressionTypes.LZ4],
  ] as const) {
    it(`KafkaJS produces ${name}; kcat reads it`, async () => {
      const topic = `kz.${name}`;
      const kafka = new Kafka({ brokers: [broker], clientId: `kz-${name}`, logLevel: logLevel.NOTHING });
      const producer = kafka.producer();
      await producer.connect();
      await producer.send({
        topic,
        compression: type,
        messages: Array.from({ length: 20 }, (_, i) => ({
          key: `k${i}`,
          value: `v${i}`.repeat(10),
          headers: { h: `x${i}` },
          timestamp: String(1_700_000_000_000 + i),
        })),
      });
      await producer.disconnect();
      const [b] = await engine.read(topic, 0, 0, 1 << 20);
      assert.equal(readBatchInfo(b).compression, type);
      const c = await kcat(['-b', broker, '-C', '-t', topic, '-o', 'beginning', '-e', '-J', ...FAST]);
      const msgs = jsonLines(c.stdout);
      assert.equal(msgs.length, 20);
      assert.deepEqual([msgs[3].key, msgs[3].payload, msgs[3].headers, msgs[3].ts], ['k3', 'v3'.repeat(10), ['h', 'x3'], 1_700_000_000_003]);
    });
  }

  it('refuses undefined codec ids 5-7 and an undecodable body with the protocol errors, storing nothing', async () => {
    await engine.createStream({ name: 'zbad', partitions: 1 });
    const c = await RawClient.connect(port);
    try {
      for (const codec of [5, 6, 7]) {
        const batch = encodeBatch([{ key: null, value: Buffer.from('x'), headers: [], timestamp: Date.now() }]);
        batch.writeInt16BE(codec, 21);
        batch.writeUInt32BE(crc32c(batch, 21, batch.length), 17);
        const res = await c.call(ProduceApi, 7, {
          transactionalId: null,
          acks: -1,
          timeoutMs: 1000,
          topics: [{ name: 'zbad', partitions: [{ index: 0, records: batch }] }],
        });
        assert.equal(res.topics[0].partitions[0].errorCode, KafkaErrorCode.UNSUPPORTED_COMPRESSION_TYPE, `codec ${codec}`);
      }
      // Codec 2 (snappy) with a body that is not snappy: a valid CRC over garbage is still refused.
      const bad = encodeBatch([{ key: null, value: Buffer.from('x'), headers: [], timestamp: Date.now() }]);
      bad.writeInt16BE(2, 21);
      bad.fill(0xff, 61);
      bad.writeUInt32BE(crc32c(bad, 21, bad.length), 17);
      const res = await c.call(ProduceApi, 7, {
        transactionalId: null,
        acks: -1,
        timeoutMs: 1000,
        topics: [{ name: 'zbad', partitions: [{ index: 0, records: bad }] }],
      });
      assert.equal(res.topics[0].partitions[0].errorCode, KafkaErrorCode.CORRUPT_MESSAGE);
      assert.equal(engine.offsets('zbad', 0).highWatermark, 0);
    } finally {
      c.close();
    }
  });
});
