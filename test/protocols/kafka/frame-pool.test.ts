import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FramePool, MAX_FRAME_BYTES, MIN_FRAME_BYTES } from '../../../src/protocols/kafka/frame-pool.js';

describe('FramePool', () => {
  it('hands a given-back frame out again for any size of its class, and counts both', () => {
    const pool = new FramePool();
    const a = pool.take(600_000);
    assert.equal(a.length, 600_000);
    assert.equal(a.buffer.byteLength, 1 << 20, 'a power-of-two buffer');
    pool.give(a);
    const b = pool.take(700_000);
    assert.equal(b.buffer, a.buffer, 'the same memory again');
    assert.equal(b.length, 700_000);
    const c = pool.take(700_000);
    assert.notEqual(c.buffer, a.buffer, 'a frame is never handed out twice at once');
    assert.deepEqual({ reused: pool.reused, allocated: pool.allocated }, { reused: 1, allocated: 2 });
  });

  it('allocates frames outside the pooled range and never keeps them', () => {
    const pool = new FramePool();
    const small = pool.take(MIN_FRAME_BYTES - 1);
    const huge = pool.take(MAX_FRAME_BYTES + 1);
    assert.equal(small.length, MIN_FRAME_BYTES - 1);
    assert.equal(huge.length, MAX_FRAME_BYTES + 1);
    pool.give(small);
    pool.give(huge);
    assert.notEqual(pool.take(MIN_FRAME_BYTES - 1).buffer, small.buffer);
    assert.notEqual(pool.take(MAX_FRAME_BYTES + 1).buffer, huge.buffer);
    assert.equal(pool.reused, 0);
  });

  it('ignores buffers that are not whole pooled buffers', () => {
    const pool = new FramePool();
    const slab = Buffer.alloc(1 << 20);
    pool.give(slab.subarray(4096)); // not at the start of its memory
    pool.give(Buffer.alloc(300_000)); // not a power of two
    assert.notEqual(pool.take(100_000).buffer, slab.buffer);
    assert.equal(pool.reused, 0);
  });

  it('keeps at most its budget, dropping the largest free frames to make room for smaller ones', () => {
    const budget = 4 << 20;
    const pool = new FramePool(budget);
    // A burst of big frames fills the budget...
    const big = [pool.take(3 << 20)];
    for (const f of big) pool.give(f); // 4 MiB class: exactly the budget
    // ...and the usual size still gets pooled: the big one is dropped for it.
    const usual = [pool.take(600_000), pool.take(600_000)];
    for (const f of usual) pool.give(f);
    assert.equal(pool.take(600_000).buffer, usual[1].buffer);
    assert.equal(pool.take(600_000).buffer, usual[0].buffer);
    assert.notEqual(pool.take(3 << 20).buffer, big[0].buffer, 'the big frame was let go');
    // Over budget with nothing larger to drop, a frame is left to the garbage collector.
    const many = Array.from({ length: 6 }, () => pool.take(600_000));
    for (const f of many) pool.give(f);
    const again = Array.from({ length: 6 }, () => pool.take(600_000));
    const kept = again.filter((f) => many.some((m) => m.buffer === f.buffer)).length;
    assert.equal(kept, 4, 'four 1 MiB frames fit a 4 MiB budget');
  });

  it('counts memory reserved ahead of arrival up to its limit, and nothing for a reservation that does not fit', () => {
    const pool = new FramePool(undefined, 3 << 20);
    assert.ok(pool.reserve(2 << 20));
    assert.ok(!pool.reserve(2 << 20), 'over the limit');
    assert.equal(pool.aheadBytes, 2 << 20);
    assert.ok(pool.reserve(1 << 20), 'exactly the limit fits');
    pool.unreserve(3 << 20);
    assert.deepEqual([pool.stats().aheadBytes, pool.stats().aheadLimit], [0, 3 << 20]);
  });

  it('lets the allocation error through (the connection closes on it) and counts nothing allocated', () => {
    const pool = new FramePool();
    pool.allocate = () => {
      throw new RangeError('Array buffer allocation failed');
    };
    assert.throws(() => pool.take(1 << 20), RangeError);
    assert.throws(() => pool.take(MAX_FRAME_BYTES + 1), RangeError);
    assert.equal(pool.allocated, 0);
    assert.equal(pool.take(100).length, 100, 'small frames are not pooled');
  });
});
