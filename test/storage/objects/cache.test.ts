/**
 * CachedObjectStore's own behaviour, over a FsObjectStore whose reads are logged (and can be held back): one GET
 * for concurrent reads of a block, the LRU bound, read-ahead for a sequential reader and none for a random one,
 * invalidation by writes. The ObjectStore contract itself is checked by test/conformance/objects-s3.test.ts.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FlowError, isFlowError } from '../../../src/core/index.js';
import { CachedObjectStore, FsObjectStore, type ObjectStore } from '../../../src/storage/objects/index.js';

const B = 1000; // block size in these tests

/** Logs every ranged read as "key@start" (block-aligned here); `hold()` makes reads wait until `release()`. */
class LoggedStore implements ObjectStore {
  readonly kind = 'logged';
  readonly reads: string[] = [];
  failAt: ((key: string, start: number) => boolean) | null = null;
  private gate: Promise<void> | null = null;
  private open: (() => void) | null = null;
  constructor(readonly fs: FsObjectStore) {}
  hold(): void {
    this.gate = new Promise((resolve) => (this.open = resolve));
  }
  release(): void {
    this.open?.();
    this.gate = null;
  }
  readsOf(key: string): number[] {
    return this.reads.filter((r) => r.startsWith(`${key}@`)).map((r) => Number(r.slice(key.length + 1)) / B);
  }
  put(key: string, data: Buffer | readonly Buffer[]): Promise<void> {
    return this.fs.put(key, data);
  }
  async get(key: string, range?: { start: number; end: number }): Promise<Buffer> {
    this.reads.push(`${key}@${range?.start ?? 'all'}`);
    if (this.gate !== null) await this.gate;
    if (range !== undefined && this.failAt?.(key, range.start)) throw new FlowError('STORAGE_ERROR', 'injected');
    return this.fs.get(key, range);
  }
  list(prefix: string) {
    return this.fs.list(prefix);
  }
  delete(key: string): Promise<void> {
    return this.fs.delete(key);
  }
  close(): Promise<void> {
    return this.fs.close();
  }
  figures(): Record<string, unknown> {
    return { reads: this.reads.length };
  }
}

const bytes = (n: number, seed = 1): Buffer => {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed) & 0xff;
  return b;
};

interface CacheFigures {
  hits: number;
  misses: number;
  shared: number;
  readAhead: number;
  readAheadUsed: number;
  evictions: number;
  bytesHeld: number;
  blocksHeld: number;
  retried: number;
  bypassed: number;
  inner: { reads: number };
}
const fig = (c: CachedObjectStore): CacheFigures => c.figures() as unknown as CacheFigures;

describe('CachedObjectStore', () => {
  let root = '';
  let n = 0;
  // One block per GET unless a test says otherwise, so that reads are logged block by block.
  const setup = async (opts: { maxBytes: number; readAheadBlocks?: number; maxBlocksPerGet?: number }) => {
    const inner = new LoggedStore(new FsObjectStore(join(root, `c-${n++}`)));
    const cache = new CachedObjectStore(inner, { blockBytes: B, maxBlocksPerGet: 1, ...opts });
    return { inner, cache };
  };

  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'flowmq-objcache-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('serves ranges from aligned blocks, the last one short', async () => {
    const { inner, cache } = await setup({ maxBytes: 100 * B, readAheadBlocks: 0 });
    const data = bytes(3500);
    await cache.put('o', data);
    assert.ok((await cache.get('o', { start: 1500, end: 2700 })).equals(data.subarray(1500, 2700)));
    assert.deepEqual(inner.readsOf('o'), [1, 2]);
    // Served from the blocks held: no read.
    assert.ok((await cache.get('o', { start: 1000, end: 3000 })).equals(data.subarray(1000, 3000)));
    assert.deepEqual(inner.readsOf('o'), [1, 2]);
    // The last block is short, and tells where the object ends.
    assert.ok((await cache.get('o', { start: 3400, end: 3500 })).equals(data.subarray(3400)));
    assert.deepEqual(inner.readsOf('o'), [1, 2, 3]);
    assert.ok((await cache.get('o', { start: 3400, end: 9000 })).equals(data.subarray(3400)));
    assert.equal((await cache.get('o', { start: 3500, end: 9000 })).length, 0);
    assert.equal((await cache.get('o', { start: 8000, end: 9000 })).length, 0);
    assert.deepEqual(inner.readsOf('o'), [1, 2, 3], 'past the known end: nothing to read');
    assert.equal(kindOf(cache), 'logged');
    const f = fig(cache);
    assert.equal(f.misses, 3);
    assert.equal(f.hits, 3);
    assert.equal(f.bytesHeld, 2500);
    assert.equal(f.blocksHeld, 3);
    assert.deepEqual(f.inner, { reads: 3 });
    // A whole-object read goes to the inner store.
    assert.ok((await cache.get('o')).equals(data));
    assert.equal(fig(cache).bypassed, 1);
  });

  it('shares one read among concurrent reads of a block', async () => {
    const { inner, cache } = await setup({ maxBytes: 100 * B, readAheadBlocks: 0 });
    const data = bytes(5000, 2);
    await cache.put('o', data);
    inner.hold();
    const reads = [
      cache.get('o', { start: 2100, end: 2200 }),
      cache.get('o', { start: 2000, end: 3000 }),
      cache.get('o', { start: 2999, end: 3000 }),
      cache.get('o', { start: 2500, end: 3500 }), // blocks 2 and 3
    ];
    inner.release();
    const got = await Promise.all(reads);
    assert.ok(got[0].equals(data.subarray(2100, 2200)));
    assert.ok(got[1].equals(data.subarray(2000, 3000)));
    assert.ok(got[2].equals(data.subarray(2999, 3000)));
    assert.ok(got[3].equals(data.subarray(2500, 3500)));
    assert.deepEqual(inner.readsOf('o'), [2, 3], 'one read per block');
    assert.equal(fig(cache).shared, 3);
    assert.equal(fig(cache).misses, 2);
  });

  it('keeps at most maxBytes, dropping the least recently used block', async () => {
    const { inner, cache } = await setup({ maxBytes: 4 * B, readAheadBlocks: 0 });
    const data = bytes(20 * B, 3);
    await cache.put('o', data);
    // Non-consecutive blocks: no read-ahead.
    for (const b of [10, 3, 7, 15]) await cache.get('o', { start: b * B + 1, end: b * B + 2 });
    await cache.get('o', { start: 10 * B, end: 10 * B + 5 }); // 10 is now the most recent
    await cache.get('o', { start: 18 * B, end: 18 * B + 5 }); // evicts 3, the least recently used
    assert.equal(fig(cache).evictions, 1);
    assert.ok(fig(cache).bytesHeld <= 4 * B);
    const before = inner.readsOf('o').length;
    await cache.get('o', { start: 10 * B + 100, end: 10 * B + 200 });
    assert.equal(inner.readsOf('o').length, before, 'block 10 was kept');
    await cache.get('o', { start: 3 * B, end: 3 * B + 1 });
    assert.deepEqual(inner.readsOf('o').slice(before), [3], 'block 3 was dropped');
    // Many more blocks than fit.
    for (let b = 0; b < 20; b += 2) await cache.get('o', { start: b * B, end: b * B + B });
    const f = fig(cache);
    assert.ok(f.bytesHeld <= 4 * B, `held ${f.bytesHeld}`);
    assert.equal(f.blocksHeld, 4);
  });

  it('reads ahead of a sequential reader, not of a random one, and not past the end', async () => {
    const { inner, cache } = await setup({ maxBytes: 100 * B, readAheadBlocks: 3 });
    const data = bytes(10 * B + 300, 4);
    await cache.put('seq', data);
    await cache.put('rnd', data);
    // The log reads a segment's footer first: the short last block tells the cache where the object ends.
    assert.ok((await cache.get('seq', { start: data.length - 10, end: data.length })).equals(data.subarray(-10)));
    assert.deepEqual(inner.readsOf('seq'), [10]);
    // A read at the start of an object begins a scan: the next three blocks are asked for at once.
    assert.ok((await cache.get('seq', { start: 0, end: 700 })).equals(data.subarray(0, 700)));
    assert.deepEqual(inner.readsOf('seq'), [10, 0, 1, 2, 3]);
    // Reads that continue the scan find the blocks ready and move the window on.
    assert.ok((await cache.get('seq', { start: 700, end: 1700 })).equals(data.subarray(700, 1700)));
    assert.deepEqual(inner.readsOf('seq'), [10, 0, 1, 2, 3, 4]);
    assert.ok((await cache.get('seq', { start: 1700, end: 2900 })).equals(data.subarray(1700, 2900)));
    assert.deepEqual(inner.readsOf('seq'), [10, 0, 1, 2, 3, 4, 5]);
    for (let pos = 2900; pos < data.length; pos += 1200) {
      assert.ok((await cache.get('seq', { start: pos, end: pos + 1200 })).equals(data.subarray(pos, pos + 1200)));
    }
    // Every block read once, none past the end.
    assert.deepEqual(
      inner.readsOf('seq').sort((a, b) => a - b),
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
    );
    const f = fig(cache);
    assert.equal(f.readAhead, 9); // blocks 1 to 9
    assert.equal(f.misses, 2, 'the reader itself waited for a read of blocks 10 and 0 only');
    // Jumping around: no read-ahead.
    for (const b of [5, 2, 8, 12 /* right after none of them */]) await cache.get('rnd', { start: b * B + 10, end: b * B + 20 });
    assert.deepEqual(inner.readsOf('rnd'), [5, 2, 8, 12]);
  });

  it('keeps reading ahead for two readers scanning one object at different positions', async () => {
    const { inner, cache } = await setup({ maxBytes: 100 * B, readAheadBlocks: 2 });
    const data = bytes(40 * B + 1, 13);
    await cache.put('o', data);
    await cache.get('o', { start: data.length - 1, end: data.length }); // the footer: size known
    // Reader A from block 0, reader B from block 20, their reads interleaved.
    for (let k = 0; k < 6; k++) {
      for (const base of [0, 20 * B]) {
        const pos = base + k * B;
        assert.ok((await cache.get('o', { start: pos, end: pos + B })).equals(data.subarray(pos, pos + B)));
      }
    }
    // Both scans were recognised (B's by its second read): from then on each found its blocks read ahead. Misses:
    // the footer's block, A's first, B's first two.
    assert.equal(fig(cache).misses, 4, `${inner.readsOf('o')}`);
    assert.ok(inner.readsOf('o').includes(27), 'B read ahead');
  });

  it('fetches consecutive missing blocks with one GET each run of maxBlocksPerGet, and keeps them as blocks', async () => {
    const { inner, cache } = await setup({ maxBytes: 100 * B, readAheadBlocks: 0, maxBlocksPerGet: 4 });
    const data = bytes(10 * B + 500, 13);
    await cache.put('o', data);
    // Blocks 0-6: a run of four, then one of three.
    assert.ok((await cache.get('o', { start: 10, end: 6 * B + 500 })).equals(data.subarray(10, 6 * B + 500)));
    assert.deepEqual(inner.readsOf('o'), [0, 4]);
    let f = fig(cache);
    assert.equal(f.blocksHeld, 7);
    assert.equal(f.bytesHeld, 7 * B);
    assert.equal(f.misses, 7);
    assert.equal((f as unknown as { gets: number }).gets, 2);
    // Each block is served on its own from then on.
    assert.ok((await cache.get('o', { start: 2 * B + 1, end: 3 * B + 2 })).equals(data.subarray(2 * B + 1, 3 * B + 2)));
    assert.deepEqual(inner.readsOf('o'), [0, 4]);
    // A held block splits a run: 7 alone, 8 held, then 9 and the short 10, which shows where the object ends.
    await cache.get('o', { start: 8 * B, end: 8 * B + 1 });
    assert.deepEqual(inner.readsOf('o'), [0, 4, 8]);
    assert.ok((await cache.get('o', { start: 7 * B, end: data.length })).equals(data.subarray(7 * B)));
    assert.deepEqual(inner.readsOf('o'), [0, 4, 8, 7, 9]);
    assert.equal((await cache.get('o', { start: 11 * B, end: 12 * B })).length, 0);
    assert.deepEqual(inner.readsOf('o'), [0, 4, 8, 7, 9], 'the end is known');
    f = fig(cache);
    assert.equal(f.bytesHeld, data.length);
    assert.equal(f.blocksHeld, 11);
  });

  it('reads ahead in runs of maxBlocksPerGet blocks', async () => {
    const { inner, cache } = await setup({ maxBytes: 100 * B, readAheadBlocks: 8, maxBlocksPerGet: 4 });
    const data = bytes(12 * B + 300, 14);
    await cache.put('o', data);
    // The footer read (block 12, short: the end is known), then a scan from the start.
    await cache.get('o', { start: data.length - 10, end: data.length });
    assert.ok((await cache.get('o', { start: 0, end: 1000 })).equals(data.subarray(0, 1000)));
    assert.deepEqual(inner.readsOf('o'), [12, 0, 1, 5]);
    for (let pos = 1000; pos < data.length; pos += 1000) {
      assert.ok((await cache.get('o', { start: pos, end: pos + 1000 })).equals(data.subarray(pos, pos + 1000)));
    }
    assert.deepEqual(inner.readsOf('o'), [12, 0, 1, 5, 9], 'blocks 9-11 in one GET, 12 already held');
    const f = fig(cache);
    assert.equal(f.readAhead, 11);
    assert.equal(f.misses, 2, 'the reader itself waited for a read of blocks 12 and 0 only');
    // A read-ahead block is found cached (used) or still on its way (shared).
    assert.equal(f.readAheadUsed + f.shared, 11);
  });

  it('reads nothing ahead of an object that its first read shows to end in that block', async () => {
    const { inner, cache } = await setup({ maxBytes: 100 * B, readAheadBlocks: 8 });
    const small = bytes(B / 2, 12);
    await cache.put('small', small);
    // A segment smaller than a block: its footer read (block 0) is also the start of a scan.
    assert.ok((await cache.get('small', { start: B / 2 - 10, end: B / 2 })).equals(small.subarray(-10)));
    assert.ok((await cache.get('small', { start: 0, end: 100 })).equals(small.subarray(0, 100)));
    assert.deepEqual(inner.readsOf('small'), [0]);
    assert.equal(fig(cache).readAhead, 0);
  });

  it('read-ahead failures are not reported, and a later read tries the block again', async () => {
    const { inner, cache } = await setup({ maxBytes: 100 * B, readAheadBlocks: 2 });
    const data = bytes(5 * B, 5);
    await cache.put('o', data);
    inner.failAt = (_k, start) => start === 2 * B;
    assert.ok((await cache.get('o', { start: 0, end: B })).equals(data.subarray(0, B)));
    assert.deepEqual(inner.readsOf('o'), [0, 1, 2]);
    // Block 2's failure belongs to the read that needs it.
    await assert.rejects(cache.get('o', { start: 2 * B, end: 2 * B + 10 }), (e: unknown) => isFlowError(e, 'STORAGE_ERROR'));
    inner.failAt = null;
    assert.ok((await cache.get('o', { start: 2 * B, end: 3 * B })).equals(data.subarray(2 * B, 3 * B)));
    // An absent object is NOT_FOUND, and leaves nothing behind.
    await assert.rejects(cache.get('none', { start: 0, end: 10 }), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
    await assert.rejects(cache.get('none', { start: 0, end: 0 }), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
  });

  it("drops a key's blocks when it is written or deleted", async () => {
    const { cache } = await setup({ maxBytes: 100 * B, readAheadBlocks: 0 });
    await cache.put('o', bytes(3 * B, 6));
    await cache.get('o', { start: 0, end: 3 * B });
    await cache.put('o', bytes(2 * B + 5, 7));
    assert.ok((await cache.get('o', { start: 0, end: 3 * B })).equals(bytes(2 * B + 5, 7)), 'the new version, and its size');
    await cache.delete('o');
    await assert.rejects(cache.get('o', { start: 0, end: 10 }), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
    assert.equal(fig(cache).bytesHeld, 0);
  });

  it('keeps nothing read while the key was being written, and never mixes two versions', async () => {
    const { inner, cache } = await setup({ maxBytes: 100 * B, readAheadBlocks: 0 });
    const v1 = bytes(3 * B, 8);
    const v2 = bytes(3 * B, 9);
    await cache.put('o', v1);
    await cache.get('o', { start: 0, end: 10 }); // block 0 of v1 held
    inner.hold();
    const read = cache.get('o', { start: 500, end: 2500 }); // block 0 held, blocks 1 and 2 held back
    await cache.put('o', v2);
    inner.release();
    const got = await read;
    assert.ok(got.equals(v1.subarray(500, 2500)) || got.equals(v2.subarray(500, 2500)), 'one version, whole');
    assert.equal(fig(cache).bytesHeld, 0, 'nothing of the old version kept');
    assert.ok((await cache.get('o', { start: 0, end: 3 * B })).equals(v2));
  });

  it('offers adopt only when the inner store has it, and refuses a cache smaller than a block', async () => {
    const fs = new FsObjectStore(join(root, 'adopt'));
    assert.equal(typeof new CachedObjectStore(fs, { maxBytes: B, blockBytes: B }).adopt, 'function');
    assert.equal(new CachedObjectStore(new LoggedStore(fs), { maxBytes: B, blockBytes: B }).adopt, undefined);
    assert.throws(
      () => new CachedObjectStore(fs, { maxBytes: 10, blockBytes: B }),
      (e: unknown) => isFlowError(e, 'CONFIG_ERROR'),
    );
  });
});

const kindOf = (s: ObjectStore): string => s.kind;
