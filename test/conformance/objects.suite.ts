/**
 * What every ObjectStore backend must do. The factory opens (or reopens) the store kept in `dir`; a service
 * backend may map `dir` to a bucket prefix of its own.
 *
 * Sizes are checked exactly everywhere (read back and listed): an S3 client that sends aws-chunked bodies to a
 * server that does not decode them stores the framing inside the object (100,000 bytes became 100,060 with s3rver).
 * A service backend should be opened with parts of at most 6 MiB (S3's minimum is 5 MiB) so that the large-object
 * case crosses its multipart threshold, and with small list pages so that listing crosses pages.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isFlowError } from '../../src/core/index.js';
import type { ObjectStore } from '../../src/storage/objects/index.js';

const bytes = (n: number, seed = 1): Buffer => {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = (i * 7 + seed) & 0xff;
  return b;
};

export function objectStoreConformance(name: string, open: (dir: string) => Promise<ObjectStore>): void {
  describe(`ObjectStore conformance: ${name}`, () => {
    let root = '';
    let n = 0;
    const freshDir = (): string => join(root, `case-${n++}`);

    before(async () => {
      root = await mkdtemp(join(tmpdir(), 'flowmq-objects-conformance-'));
    });
    after(async () => {
      await rm(root, { recursive: true, force: true });
    });

    it('has a kind', async () => {
      const s = await open(freshDir());
      assert.equal(typeof s.kind, 'string');
      assert.ok(s.kind.length > 0);
      await s.close();
    });

    it('returns what was put, byte for byte', async () => {
      const s = await open(freshDir());
      const data = bytes(300_000);
      await s.put('streams/a/0/00000000000000000000.seg', data);
      assert.ok((await s.get('streams/a/0/00000000000000000000.seg')).equals(data));
      await s.put('top-level', Buffer.from('x'));
      assert.equal((await s.get('top-level')).toString(), 'x');
      await s.put('empty/object', Buffer.alloc(0));
      assert.equal((await s.get('empty/object')).length, 0);
      await s.close();
    });

    it('stores an object given as parts as their concatenation', async () => {
      const s = await open(freshDir());
      // Many small parts, an empty one, and parts that straddle 1 MiB boundaries (where a backend may flush).
      const parts = [
        bytes(100, 1),
        Buffer.alloc(0),
        bytes(1_500_000, 2),
        ...Array.from({ length: 3000 }, (_, i) => bytes(200 + (i % 7), i)),
        bytes(900_000, 9),
      ];
      await s.put('parts/obj', parts);
      const whole = Buffer.concat(parts);
      const got = await s.get('parts/obj');
      assert.equal(got.length, whole.length);
      assert.ok(got.equals(whole));
      assert.ok((await s.get('parts/obj', { start: 1_400_000, end: 1_700_000 })).equals(whole.subarray(1_400_000, 1_700_000)));
      await s.put('parts/none', []);
      assert.equal((await s.get('parts/none')).length, 0);
      await s.close();
    });

    it('throws NOT_FOUND for an absent object', async () => {
      const s = await open(freshDir());
      await assert.rejects(s.get('no/such/object'), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
      await assert.rejects(s.get('no/such/object', { start: 0, end: 1 }), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
      await s.put('dir/child', Buffer.from('c'));
      // "dir" is only a prefix of another key, not an object.
      await assert.rejects(s.get('dir'), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
      await s.close();
    });

    it('reads byte ranges [start, end)', async () => {
      const s = await open(freshDir());
      const data = bytes(10_000, 3);
      await s.put('r/obj', data);
      assert.ok((await s.get('r/obj', { start: 0, end: 5 })).equals(data.subarray(0, 5)));
      assert.ok((await s.get('r/obj', { start: 1234, end: 5678 })).equals(data.subarray(1234, 5678)));
      assert.ok((await s.get('r/obj', { start: 9_990, end: 10_000 })).equals(data.subarray(9_990)));
      assert.ok((await s.get('r/obj', { start: 0, end: 10_000 })).equals(data));
      // A range running past the end stops at the end.
      assert.ok((await s.get('r/obj', { start: 9_000, end: 20_000 })).equals(data.subarray(9_000)));
      await assert.rejects(s.get('r/obj', { start: 10, end: 5 }), (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT'));
      await assert.rejects(s.get('r/obj', { start: -1, end: 5 }), (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT'));
      await s.close();
    });

    it('stores odd-sized objects given as parts byte for byte, and lists their exact size', async () => {
      const s = await open(freshDir());
      // 100,000 bytes in three parts is where chunk framing inside the object was first seen.
      const cases: Array<[string, Buffer[]]> = [
        ['odd/100000', [bytes(33_333, 1), bytes(33_334, 2), bytes(33_333, 3)]],
        ['odd/1', [bytes(1, 4)]],
        ['odd/4095', [bytes(4095, 5)]],
        ['odd/65537', [bytes(65_536, 6), bytes(1, 7)]],
        ['odd/1000001', [bytes(500_000, 8), Buffer.alloc(0), bytes(3, 9), bytes(499_998, 10)]],
      ];
      for (const [key, parts] of cases) await s.put(key, parts);
      for (const [key, parts] of cases) {
        const whole = Buffer.concat(parts);
        const got = await s.get(key);
        assert.equal(got.length, whole.length, `${key}: size read back`);
        assert.ok(got.equals(whole), `${key}: bytes read back`);
        assert.ok((await s.get(key, { start: 0, end: 1 })).equals(whole.subarray(0, 1)), `${key}: first byte`);
        assert.ok((await s.get(key, { start: whole.length - 1, end: whole.length })).equals(whole.subarray(-1)), `${key}: last byte`);
      }
      assert.deepEqual(
        await s.list('odd/'),
        cases.map(([key, parts]) => ({ key, size: Buffer.concat(parts).length })).sort((a, b) => (a.key < b.key ? -1 : 1)),
      );
      await s.close();
    });

    it('stores a large object (past a multipart threshold) byte for byte, and reads ranges across its boundaries', async () => {
      const s = await open(freshDir());
      const MiB = 1024 * 1024;
      const size = 12 * MiB + 12_345;
      // Parts of an odd size, so that no part boundary of the caller meets a block or upload part boundary.
      const parts: Buffer[] = [];
      for (let off = 0, i = 0; off < size; off += 1_000_003, i++) parts.push(bytes(Math.min(1_000_003, size - off), i));
      const whole = Buffer.concat(parts);
      await s.put('big/obj', parts);
      assert.deepEqual(await s.list('big/'), [{ key: 'big/obj', size }]);
      const got = await s.get('big/obj');
      assert.equal(got.length, size);
      assert.ok(got.equals(whole));
      const ranges: Array<[number, number]> = [
        [0, 1],
        [size - 1, size],
        [MiB - 10, MiB + 10], // a block boundary of a 1 MiB cache
        [5 * MiB - 100, 5 * MiB + 100], // the first part boundary of 5 MiB parts
        [6 * MiB - 1, 6 * MiB + 1],
        [8 * MiB - 3, 8 * MiB + 3], // 8 MiB parts
        [3 * MiB + 17, 11 * MiB + 5], // many blocks and parts
        [size - 2 * MiB - 7, size],
      ];
      for (const [start, end] of ranges) {
        const r = await s.get('big/obj', { start, end });
        assert.equal(r.length, end - start, `[${start}, ${end}) length`);
        assert.ok(r.equals(whole.subarray(start, end)), `[${start}, ${end}) bytes`);
      }
      // Past the end: cut at the end, or nothing.
      assert.ok((await s.get('big/obj', { start: size - 5, end: size + MiB })).equals(whole.subarray(size - 5)));
      assert.equal((await s.get('big/obj', { start: size, end: size + 10 })).length, 0);
      // Overwritten by a small object, then by a large one again (one Buffer this time).
      await s.put('big/obj', bytes(10, 42));
      assert.ok((await s.get('big/obj')).equals(bytes(10, 42)));
      assert.deepEqual(await s.list('big/'), [{ key: 'big/obj', size: 10 }]);
      const again = bytes(7 * MiB + 1, 43);
      await s.put('big/obj', again);
      assert.ok((await s.get('big/obj', { start: 7 * MiB - 1, end: 7 * MiB + 1 })).equals(again.subarray(7 * MiB - 1)));
      assert.ok((await s.get('big/obj')).equals(again));
      await s.delete('big/obj');
      await assert.rejects(s.get('big/obj', { start: 0, end: 1 }), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
      assert.deepEqual(await s.list('big/'), []);
      await s.close();
    });

    it('reads ranges at the edges: empty, at and past the end, of an empty object', async () => {
      const s = await open(freshDir());
      const data = bytes(1000, 11);
      await s.put('e/obj', data);
      await s.put('e/empty', Buffer.alloc(0));
      assert.equal((await s.get('e/obj', { start: 5, end: 5 })).length, 0);
      assert.equal((await s.get('e/obj', { start: 1000, end: 1000 })).length, 0);
      assert.equal((await s.get('e/obj', { start: 1000, end: 2000 })).length, 0);
      assert.equal((await s.get('e/obj', { start: 5000, end: 6000 })).length, 0);
      assert.ok((await s.get('e/obj', { start: 999, end: 5000 })).equals(data.subarray(999)));
      assert.equal((await s.get('e/empty', { start: 0, end: 10 })).length, 0);
      assert.equal((await s.get('e/empty', { start: 0, end: 0 })).length, 0);
      assert.deepEqual(await s.list('e/'), [
        { key: 'e/empty', size: 0 },
        { key: 'e/obj', size: 1000 },
      ]);
      // An empty range of an absent object is still NOT_FOUND.
      await assert.rejects(s.get('e/none', { start: 0, end: 0 }), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
      await s.close();
    });

    it('lists many keys, in order, across pages', async () => {
      const s = await open(freshDir());
      const keys = Array.from({ length: 37 }, (_, i) => `many/${String(i).padStart(3, '0')}/obj`);
      // Put in a shuffled order: the listing's order must not be the order of the puts.
      const order = keys.map((k, i) => ({ k, r: (i * 7919) % 37 })).sort((a, b) => a.r - b.r);
      for (const { k } of order) await s.put(k, bytes(keys.indexOf(k) + 1, 3));
      await s.put('many-not/x', bytes(1));
      assert.deepEqual(
        await s.list('many/'),
        keys.map((key, i) => ({ key, size: i + 1 })),
      );
      assert.deepEqual(
        await s.list('many/01'),
        keys.slice(10, 20).map((key, i) => ({ key, size: i + 11 })),
      );
      await s.close();
    });

    it('replaces an object on overwrite', async () => {
      const s = await open(freshDir());
      await s.put('o/k', bytes(5000, 1));
      await s.put('o/k', bytes(10, 2));
      assert.ok((await s.get('o/k')).equals(bytes(10, 2)));
      assert.deepEqual(await s.list('o/'), [{ key: 'o/k', size: 10 }]);
      await s.close();
    });

    it('lists by prefix, recursively, in key order, with sizes', async () => {
      const s = await open(freshDir());
      const keys = [
        'streams/b/1/00000000000000000010.seg',
        'streams/a/0/00000000000000000100.seg',
        'streams/a/0/00000000000000000000.seg',
        'streams/a/1/00000000000000000000.seg',
        'streams/ab/0/00000000000000000000.seg',
        'other/x',
      ];
      for (const [i, k] of keys.entries()) await s.put(k, bytes(i + 1));
      const sizeOf = (k: string): number => keys.indexOf(k) + 1;
      const expect = (ks: string[]) => ks.map((k) => ({ key: k, size: sizeOf(k) }));

      assert.deepEqual(
        await s.list('streams/a/'),
        expect(['streams/a/0/00000000000000000000.seg', 'streams/a/0/00000000000000000100.seg', 'streams/a/1/00000000000000000000.seg']),
      );
      // A prefix need not end at a segment boundary.
      assert.deepEqual(
        await s.list('streams/a'),
        expect([
          'streams/a/0/00000000000000000000.seg',
          'streams/a/0/00000000000000000100.seg',
          'streams/a/1/00000000000000000000.seg',
          'streams/ab/0/00000000000000000000.seg',
        ]),
      );
      assert.deepEqual(await s.list('streams/a/0/000000000000000001'), expect(['streams/a/0/00000000000000000100.seg']));
      assert.deepEqual(await s.list(''), expect([...keys].sort()));
      assert.deepEqual(await s.list('nothing/here/'), []);
      assert.deepEqual(await s.list('other/x'), expect(['other/x']));
      await s.close();
    });

    it('deletes objects, and deleting an absent one is no error', async () => {
      const s = await open(freshDir());
      await s.put('d/1', Buffer.from('one'));
      await s.put('d/2', Buffer.from('two'));
      await s.delete('d/1');
      await assert.rejects(s.get('d/1'), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
      assert.deepEqual(await s.list('d/'), [{ key: 'd/2', size: 3 }]);
      await s.delete('d/1');
      await s.delete('never/existed');
      await s.delete('d/2');
      assert.deepEqual(await s.list('d/'), []);
      // The key can be used again.
      await s.put('d/1', Buffer.from('again'));
      assert.equal((await s.get('d/1')).toString(), 'again');
      await s.close();
    });

    it('handles concurrent puts: distinct keys all land, one key ends whole', async () => {
      const s = await open(freshDir());
      await Promise.all(Array.from({ length: 50 }, (_, i) => s.put(`c/${i % 5}/obj-${i}`, bytes(1000 + i, i))));
      const listed = await s.list('c/');
      assert.equal(listed.length, 50);
      for (const { key, size } of listed) {
        const i = Number(key.split('-')[1]);
        assert.equal(size, 1000 + i);
        assert.ok((await s.get(key)).equals(bytes(1000 + i, i)));
      }
      const versions = Array.from({ length: 20 }, (_, i) => bytes(2000 + i * 10, i));
      await Promise.all(versions.map((v) => s.put('same/key', v)));
      const got = await s.get('same/key');
      assert.ok(
        versions.some((v) => v.equals(got)),
        'the object is exactly one of the versions written',
      );
      await s.close();
    });

    it('keeps objects across reopen', async () => {
      const dir = freshDir();
      const s = await open(dir);
      await s.put('p/q', bytes(777));
      await s.close();
      const s2 = await open(dir);
      assert.ok((await s2.get('p/q')).equals(bytes(777)));
      assert.deepEqual(await s2.list('p/'), [{ key: 'p/q', size: 777 }]);
      await s2.close();
    });
  });
}
