/**
 * ProducerState (src/storage/log/producer-state.ts): contiguous batches kept as one range (a retry inside it gets
 * its own offset), and forwarded batches (stamped by a forwarding broker) checked with gaps allowed.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { BatchInfo } from '../../../src/core/index.js';
import { isFlowError } from '../../../src/core/index.js';
import { ProducerState } from '../../../src/storage/log/producer-state.js';

const info = (pid: number, seq: number, n: number, epoch = 0): BatchInfo => ({
  baseOffset: 0,
  size: 0,
  magic: 2,
  attributes: 0,
  compression: 0,
  lastOffsetDelta: n - 1,
  baseTimestamp: 0,
  maxTimestamp: 0,
  producerId: BigInt(pid),
  producerEpoch: epoch,
  baseSequence: seq,
  recordCount: n,
});

describe('producer state', () => {
  it('keeps contiguous batches as one range; a retried batch inside it gets its own offset', () => {
    const s = new ProducerState();
    s.record(info(1, 0, 2), 10); // offsets 10..11
    s.record(info(1, 2, 3), 12); // contiguous: 12..14
    s.record(info(1, 5, 1), 20); // another producer wrote 15..19 in between
    assert.equal(s.producers.get(1)!.batches.length, 2);
    assert.equal(s.check(info(1, 2, 3))?.baseOffset, 12);
    assert.equal(s.check(info(1, 0, 2))?.baseOffset, 10);
    assert.equal(s.check(info(1, 5, 1))?.baseOffset, 20);
    assert.equal(s.check(info(1, 6, 1)), null);
    assert.throws(
      () => s.check(info(1, 8, 1)),
      (e: unknown) => isFlowError(e, 'OUT_OF_ORDER_SEQUENCE'),
    );
    assert.deepEqual(s.snapshot(), [{ producerId: 1, producerEpoch: 0, lastSequence: 5, lastTimestamp: 0 }]);
  });

  it('checks forwarded batches: after the last is new (gaps too), a kept one is a duplicate, an older one a duplicate of unknown offset', () => {
    const s = new ProducerState();
    assert.equal(s.checkForwarded(info(9, 40, 1)), null, 'never seen: new');
    for (let i = 0; i < 10; i++) s.record(info(9, i * 2, 1), 100 + i * 10); // sequences 0, 2, .., 18: gaps, not contiguous
    assert.equal(s.checkForwarded(info(9, 19, 1)), null);
    assert.equal(s.checkForwarded(info(9, 1000, 1)), null, 'a gap is allowed');
    assert.equal(s.checkForwarded(info(9, 18, 1))?.baseOffset, 190);
    assert.equal(s.checkForwarded(info(9, 10, 1))?.baseOffset, 150);
    assert.equal(s.checkForwarded(info(9, 2, 1))?.baseOffset, -1, 'older than the kept ranges: stored, offset unknown');
    // Across the wrap of the sequence space.
    const w = new ProducerState();
    w.record(info(3, 0x7ffffffe, 2), 0);
    assert.equal(w.checkForwarded(info(3, 0, 1)), null);
    assert.equal(w.checkForwarded(info(3, 0x7ffffffe, 2))?.baseOffset, 0);
    assert.equal(w.checkForwarded(info(3, 0x70000000, 1))?.baseOffset, -1);
  });
});
