import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BatchFactory } from '../../bench/kafka.js';
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
