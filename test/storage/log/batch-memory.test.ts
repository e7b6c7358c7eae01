import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BatchMemory, CHUNK_BYTES, MIN_POOLED_BYTES, type ChunkCursor } from '../../../src/storage/log/batch-memory.js';

const batch = (n: number, fill: number): Buffer => Buffer.alloc(n, fill);

describe('BatchMemory', () => {
  it('copies large batches one after another into a chunk, small and oversized ones into buffers of their own', () => {
    const mem = new BatchMemory(64 * CHUNK_BYTES);
    const p: ChunkCursor = { chunk: null };
    const src = batch(100_000, 1);
    const a = mem.copy(p, src);
    src.fill(9); // the caller's buffer is only borrowed
    assert.ok(a.data.equals(batch(100_000, 1)));
    assert.ok(a.chunk !== null);
    const b = mem.copy(p, batch(100_001, 2));
    assert.equal(b.chunk, a.chunk, 'same chunk');
    assert.equal(b.data.byteOffset - a.data.byteOffset, 100_000, 'next 8-byte boundary');
    assert.equal((b.data.byteOffset - a.data.byteOffset) % 8, 0);
    const small = mem.copy(p, batch(MIN_POOLED_BYTES - 1, 3));
    const huge = mem.copy(p, batch(CHUNK_BYTES + 1, 4));
    assert.equal(small.chunk, null);
    assert.equal(huge.chunk, null);
    assert.ok(small.data.equals(batch(MIN_POOLED_BYTES - 1, 3)));
    assert.deepEqual({ pooled: mem.pooledBatches, own: mem.ownBatches, bytes: mem.bytes }, { pooled: 2, own: 2, bytes: CHUNK_BYTES });
  });

  it('reuses a full chunk only once every batch in it is unpinned', () => {
    const mem = new BatchMemory(64 * CHUNK_BYTES);
    const p: ChunkCursor = { chunk: null };
    const size = CHUNK_BYTES / 4;
    const first = [1, 2, 3, 4].map((i) => mem.copy(p, batch(size, i)));
    const chunk = first[0].chunk!;
    assert.ok(
      first.every((x) => x.chunk === chunk),
      'four fill the chunk',
    );
    // The next batch does not fit: the partition moves on; the old chunk is still held by its batches.
    const fifth = mem.copy(p, batch(size, 5));
    assert.notEqual(fifth.chunk, chunk);
    for (const x of first.slice(0, 3)) x.chunk!.unpin();
    const other: ChunkCursor = { chunk: null };
    const elsewhere = mem.copy(other, batch(size, 6));
    assert.notEqual(elsewhere.chunk, chunk, 'one batch still holds it');
    assert.ok(first[3].data.equals(batch(size, 4)), 'the held batch is intact');
    first[3].chunk!.unpin();
    const third: ChunkCursor = { chunk: null };
    const reused = mem.copy(third, batch(size, 7));
    assert.equal(reused.chunk, chunk, 'free again, and reused');
    assert.equal(reused.data.byteOffset, chunk.buf.byteOffset, 'from its start');
    assert.equal(mem.bytes, 3 * CHUNK_BYTES);
  });

  it('keeps a chunk a reader pinned until the reader lets go', () => {
    const mem = new BatchMemory(64 * CHUNK_BYTES);
    const p: ChunkCursor = { chunk: null };
    const size = CHUNK_BYTES / 2;
    const a = mem.copy(p, batch(size, 1));
    const b = mem.copy(p, batch(size, 2));
    const chunk = a.chunk!;
    chunk.pin(); // a reader
    a.chunk!.unpin(); // sealed
    b.chunk!.unpin();
    mem.copy(p, batch(size, 3)); // moves on: the chunk is retired
    const q: ChunkCursor = { chunk: null };
    assert.notEqual(mem.copy(q, batch(size, 4)).chunk, chunk);
    assert.ok(a.data.equals(batch(size, 1)), 'what the reader holds is intact');
    chunk.unpin();
    const r: ChunkCursor = { chunk: null };
    assert.equal(mem.copy(r, batch(size, 5)).chunk, chunk);
  });

  it('lets go of free chunks that went unused between two trims', () => {
    const mem = new BatchMemory(64 * CHUNK_BYTES);
    const size = CHUNK_BYTES / 2;
    // Three partitions fill a chunk each, then everything is sealed: three free chunks.
    const held = [0, 1, 2].map((i) => {
      const cursor: ChunkCursor = { chunk: null };
      const got = [mem.copy(cursor, batch(size, i)), mem.copy(cursor, batch(size, i))];
      mem.copy(cursor, batch(MIN_POOLED_BYTES, i)).chunk!.unpin(); // moves on to another chunk
      return got;
    });
    for (const x of held.flat()) x.chunk!.unpin();
    const total = mem.bytes;
    mem.trim(); // starts the count: nothing was idle for a whole interval yet
    assert.equal(mem.bytes, total);
    const cursor: ChunkCursor = { chunk: null };
    mem.copy(cursor, batch(size, 9)); // one free chunk is needed again
    mem.trim();
    assert.equal(mem.bytes, total - 2 * CHUNK_BYTES, 'the two never needed are let go');
    // A chunk let go is allocated anew when needed.
    const again: ChunkCursor = { chunk: null };
    assert.ok(mem.copy(again, batch(size, 10)).chunk !== null);
    assert.equal(mem.bytes, total - CHUNK_BYTES);
  });

  it('gives batches buffers of their own once the chunks reach the limit, and never reuses an abandoned chunk', () => {
    const mem = new BatchMemory(2 * CHUNK_BYTES);
    const cursors: ChunkCursor[] = [{ chunk: null }, { chunk: null }, { chunk: null }];
    const a = mem.copy(cursors[0], batch(MIN_POOLED_BYTES, 1));
    const b = mem.copy(cursors[1], batch(MIN_POOLED_BYTES, 2));
    const c = mem.copy(cursors[2], batch(MIN_POOLED_BYTES, 3));
    assert.ok(a.chunk !== null && b.chunk !== null);
    assert.equal(c.chunk, null, 'over the limit');
    assert.ok(c.data.equals(batch(MIN_POOLED_BYTES, 3)));
    // A deleted partition's chunk is abandoned: never reused, and no longer counted.
    a.chunk!.abandon();
    a.chunk!.unpin();
    assert.equal(mem.bytes, CHUNK_BYTES);
    const d = mem.copy(cursors[2], batch(MIN_POOLED_BYTES, 4));
    assert.ok(d.chunk !== null && d.chunk !== a.chunk, 'a new chunk in its place');
    assert.ok(a.data.equals(batch(MIN_POOLED_BYTES, 1)), 'the abandoned memory is untouched');
  });
});
