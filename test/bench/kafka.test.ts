import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BatchFactory, BufferPool } from '../../bench/kafka.js';
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
      const got = factory.make(n, stamp, ts);
      assert.ok(got.equals(expected), `batch of ${n} differs`);
      assert.equal(verifyBatchCrc(got), true);
      const records = decodeBatch(got);
      assert.equal(records.length, n);
      assert.equal(records[0].value!.readDoubleBE(0), stamp);
      assert.equal(records[n - 1].timestamp, ts);
    }
  });

  it('writes into a pooled buffer given back after use, and allocates when the buffer is too short', () => {
    const factory = new BatchFactory(1024);
    const pool = new BufferPool(64 * 1024);
    const a = factory.make(10, 1.5, 1_700_000_000_000, pool.take(20_000));
    pool.give(a);
    const b = factory.make(10, 2.5, 1_700_000_000_001, pool.take(20_000));
    assert.equal(b.buffer, a.buffer, 'the same memory again');
    assert.ok(b.equals(factory.make(10, 2.5, 1_700_000_000_001)));
    const big = factory.make(100, 3.5, 1_700_000_000_002, pool.take(200_000) ?? Buffer.alloc(10));
    assert.equal(decodeBatch(big).length, 100);
    assert.equal(verifyBatchCrc(big), true);
  });
});
