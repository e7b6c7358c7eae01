/**
 * What every ObjectStore backend must do. The factory opens (or reopens) the store kept in `dir`; a service
 * backend may map `dir` to a bucket prefix of its own.
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
      const parts = [bytes(100, 1), Buffer.alloc(0), bytes(1_500_000, 2), ...Array.from({ length: 3000 }, (_, i) => bytes(200 + (i % 7), i)), bytes(900_000, 9)];
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
        expect([
          'streams/a/0/00000000000000000000.seg',
          'streams/a/0/00000000000000000100.seg',
          'streams/a/1/00000000000000000000.seg',
        ]),
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
      assert.ok(versions.some((v) => v.equals(got)), 'the object is exactly one of the versions written');
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
