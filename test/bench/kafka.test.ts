// test-runner: alone (scripts/test.mjs): a latency benchmark
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createStream, startFlowmq } from '../../bench/brokers.js';
import { BatchFactory, kafkaLatency } from '../../bench/kafka.js';
import { decodeBatch, encodeBatch, verifyBatchCrc } from '../../src/core/index.js';

describe('bench: BatchFactory', () => {
  it('makes exactly the batch encodeBatch makes for the same records, stamp and timestamp', () => {
    const factory = new BatchFactory(1024);
    for (const [n, stamp, ts] of [
      [1, 12.5, 1_700_000_000_000],
      [171, 98765.4321, 1_800_000_000_123],
      [171, 98766.1, 1_800_000_000_124], // from the cached template
    ] as const) {
      const first = Buffer.alloc(1024, 0x62);
      first.writeDoubleBE(stamp, 0);
      const value = Buffer.alloc(1024, 0x62);
      const expected = encodeBatch(Array.from({ length: n }, (_, i) => ({ key: null, value: i === 0 ? first : value, headers: [], timestamp: ts })));
      const parts = factory.make(n, stamp, ts);
      const got = Buffer.concat(parts);
      assert.ok(got.equals(expected), `batch of ${n} differs`);
      assert.ok(parts[0].length < 100, 'the head made per batch is small');
      assert.equal(factory.make(n, stamp + 1, ts)[1], parts[1], 'the rest is shared');
      assert.equal(verifyBatchCrc(got), true);
      const records = decodeBatch(got);
      assert.equal(records.length, n);
      assert.equal(records[0].value!.readDoubleBE(0), stamp);
      assert.equal(records[n - 1].timestamp, ts);
    }
  });
});

describe('bench: kafkaLatency', () => {
  it('sends a batch per partition every linger interval, holding the records that interval brings, and measures after a warm-up', async () => {
    const b = await startFlowmq();
    try {
      await createStream(b, 'bench-latency-test', 2);
      // 4,000 records/s over 2 partitions, every 5 ms: 10 records per batch, 400 batches in the measured second.
      const r = await kafkaLatency(b.kafkaPort, {
        topic: 'bench-latency-test',
        partitions: 2,
        connections: 1,
        inflight: 5,
        recordBytes: 1024,
        bytesPerSec: 4_096_000,
        lingerMs: 5,
        warmupS: 0.5,
        seconds: 1,
        consume: true,
      });
      assert.equal(r.errors, 0);
      assert.ok(Math.abs(r.recordsPerBatch - 10) <= 1, `${r.recordsPerBatch} records per batch`);
      assert.ok(r.produceAck.count >= 300 && r.produceAck.count <= 420, `${r.produceAck.count} batches measured`);
      assert.ok(Math.abs(r.achievedMbPerSec - 4.096) < 0.5, `${r.achievedMbPerSec} MB/s acknowledged`);
      assert.equal(r.consumed, r.produced, 'the consumer got everything');
      assert.ok(r.endToEnd.count >= r.produceAck.count * 0.9, 'end-to-end samples for the measured batches');
      assert.ok(r.warmupS >= 0.5);
    } finally {
      await b.stop();
    }
  });
});
