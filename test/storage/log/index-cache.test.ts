import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { IndexCache } from '../../../src/storage/log/index-cache.js';
import type { SegmentIndex } from '../../../src/storage/log/segment.js';

/** An index of `n` one-record batches from `base`. */
function index(base: number, n: number): SegmentIndex {
  const entries = Array.from({ length: n }, (_, i) => ({ baseOffset: base + i, endOffset: base + i + 1, position: i * 80, size: 80, maxTimestamp: 0 }));
  return { baseOffset: base, entries, dataSize: n * 80 };
}

describe('IndexCache', () => {
  it('is bounded by the entries of its indexes together, not only by their number', () => {
    const c = new IndexCache(1024, 1000);
    for (let s = 0; s < 50; s++) c.set(`seg-${s}`, index(s * 100, 100));
    assert.equal(c.size, 10, 'ten indexes of 100 entries fit in 1,000');
    assert.equal(c.entries, 1000);
    assert.equal(c.get('seg-39'), undefined, 'the least recently used went first');
    assert.ok(c.get('seg-40') !== undefined);
  });

  it('a read makes an index the most recently used; a replaced or deleted one no longer counts', () => {
    const c = new IndexCache(3, 1_000_000);
    c.set('a', index(0, 10));
    c.set('b', index(10, 10));
    c.set('c', index(20, 10));
    assert.ok(c.get('a') !== undefined);
    c.set('d', index(30, 10));
    assert.equal(c.get('b'), undefined, 'b was the least recently used');
    assert.deepEqual([c.size, c.entries], [3, 30]);
    c.set('a', index(0, 5));
    assert.equal(c.entries, 25, 'the replaced index counts its own entries only');
    assert.equal(c.delete('a'), true);
    assert.equal(c.delete('a'), false);
    assert.deepEqual([c.size, c.entries], [2, 20]);
  });

  it('the newest index is kept even when it alone is over the bound', () => {
    const c = new IndexCache(1024, 100);
    c.set('small', index(0, 50));
    c.set('huge', index(50, 500));
    assert.deepEqual([c.size, c.entries], [1, 500]);
    assert.ok(c.get('huge') !== undefined);
  });
});
