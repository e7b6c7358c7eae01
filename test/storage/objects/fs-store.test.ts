import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isFlowError } from '../../../src/core/index.js';
import { FsObjectStore } from '../../../src/storage/objects/index.js';

/** Every file under `dir`, as paths relative to it. */
async function allFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) out.push(join(e.parentPath ?? e.path, e.name).slice(dir.length + 1));
  }
  return out.sort();
}

describe('FsObjectStore', () => {
  let root = '';
  let n = 0;
  const freshDir = (): string => join(root, `t-${n++}`);

  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'flowmq-fsstore-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('is of kind "fs" and stores an object as the file named by its key', async () => {
    const dir = freshDir();
    const s = new FsObjectStore(dir);
    assert.equal(s.kind, 'fs');
    await s.put('streams/orders/0/00000000000000000000.seg', Buffer.from('segment'));
    assert.equal(await readFile(join(dir, 'streams', 'orders', '0', '00000000000000000000.seg'), 'utf8'), 'segment');
  });

  for (const directIo of [true, false]) {
    it(`writes an object of many parts byte for byte, in small steps or in bulk ones (directIo: ${directIo})`, async () => {
      const s = new FsObjectStore(freshDir(), { directIo });
      await s.put('tiny', Buffer.from('x'));
      // On Linux's usual filesystems (ext4, xfs, btrfs) writes go around the page cache; tmpfs has no O_DIRECT.
      if (!directIo) assert.equal(await s.usesDirectIo(), false);
      await assertManyParts(s);
      assert.equal((await s.get('tiny')).toString(), 'x');
      const keys = (await s.list('')).map((o) => o.key);
      assert.deepEqual(keys, ['big/bulk', 'big/deep', 'big/default', 'big/latency', 'sizes/x', 'tiny'], 'no probe or temporary file is left or listed');
      assert.deepEqual(
        await allFiles(s.rootDir),
        keys.map((k) => join(...k.split('/'))),
      );
    });
  }

  async function assertManyParts(s: FsObjectStore): Promise<void> {
    // Parts of odd sizes, so that the flush steps (256 KiB and 2 MiB) fall inside parts, and 5 MiB in all.
    const parts = Array.from({ length: 40 }, (_, i) => Buffer.alloc(131_072 + 7 * i, i));
    const whole = Buffer.concat(parts);
    await s.put('big/latency', parts, { yieldToLatency: true });
    await s.put('big/bulk', parts, { yieldToLatency: false });
    await s.put('big/default', parts);
    for (const key of ['big/latency', 'big/bulk', 'big/default']) assert.ok((await s.get(key)).equals(whole), key);
    assert.ok((await s.get('big/bulk', { start: 2_097_000, end: 2_098_000 })).equals(whole.subarray(2_097_000, 2_098_000)));
    // Objects of sizes around the 4 KiB block and the 256 KiB step, overwritten by shorter ones.
    for (const size of [0, 1, 4095, 4096, 4097, 262_143, 262_144, 262_145, 3 * 262_144 + 5]) {
      const b = Buffer.alloc(size, size % 251);
      await s.put('sizes/x', b, { yieldToLatency: true });
      assert.ok((await s.get('sizes/x')).equals(b), `size ${size}`);
    }
    // More bulk steps than staging windows: windows are reused once their writes are done.
    const deep = Buffer.alloc(11 * 1024 * 1024 + 123);
    for (let i = 0; i < deep.length; i += 4096) deep.writeUInt32BE(i, i);
    await s.put('big/deep', [deep.subarray(0, 5_000_000), deep.subarray(5_000_000)]);
    assert.ok((await s.get('big/deep')).equals(deep), 'big/deep');
    await s.put('sizes/x', Buffer.from('short'));
    assert.equal((await s.get('sizes/x')).toString(), 'short');
  }

  it('rejects keys that could escape the root or alias another key', async () => {
    const s = new FsObjectStore(freshDir());
    const badKeys = ['', '/etc/passwd', 'a//b', 'a/', '..', '../x', 'a/../../x', 'a/./b', '.', 'a\\..\\b', 'nul\0byte', '.tmp-1234'];
    const invalid = (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT');
    for (const key of badKeys) {
      await assert.rejects(s.put(key, Buffer.from('x')), invalid, `put ${JSON.stringify(key)}`);
      await assert.rejects(s.get(key), invalid, `get ${JSON.stringify(key)}`);
      await assert.rejects(s.delete(key), invalid, `delete ${JSON.stringify(key)}`);
    }
    await assert.rejects(s.list('../'), invalid);
    await assert.rejects(s.list('/abs'), invalid);
    // Dots inside a segment are ordinary characters.
    await s.put('a..b/.hidden/x.y', Buffer.from('ok'));
    assert.equal((await s.get('a..b/.hidden/x.y')).toString(), 'ok');
  });

  it('leaves no temporary files behind after puts, overwrites and concurrent puts', async () => {
    const dir = freshDir();
    const s = new FsObjectStore(dir);
    for (let i = 0; i < 5; i++) await s.put('k/one', Buffer.alloc(1000 * i, i));
    await Promise.all(Array.from({ length: 30 }, (_, i) => s.put(`k/${i % 3}`, Buffer.alloc(100 + i, i))));
    assert.deepEqual(await allFiles(dir), [join('k', '0'), join('k', '1'), join('k', '2'), join('k', 'one')]);
  });

  it('never shows a half-written object: temp files from a crash are ignored', async () => {
    const dir = freshDir();
    const s = new FsObjectStore(dir);
    await s.put('seg/a', Buffer.from('whole'));
    // What a crash between write and rename leaves.
    await writeFile(join(dir, 'seg', '.tmp-deadbeef'), 'half');
    assert.deepEqual(await s.list(''), [{ key: 'seg/a', size: 5 }]);
    assert.deepEqual(await s.list('seg/.tmp'), []);
  });

  it('refuses a key that collides with the directory of another key', async () => {
    const s = new FsObjectStore(freshDir());
    await s.put('a/b', Buffer.from('1'));
    await assert.rejects(s.put('a', Buffer.from('2')), (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT'));
    await s.put('file', Buffer.from('3'));
    await assert.rejects(s.put('file/child', Buffer.from('4')), (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT'));
    assert.deepEqual(
      (await s.list('')).map((o) => o.key),
      ['a/b', 'file'],
    );
  });

  it('removes directories a delete leaves empty, and not the root', async () => {
    const dir = freshDir();
    const s = new FsObjectStore(dir);
    await s.put('streams/x/0/seg1', Buffer.from('1'));
    await s.put('streams/x/1/seg1', Buffer.from('1'));
    await s.delete('streams/x/0/seg1');
    await assert.rejects(stat(join(dir, 'streams', 'x', '0')), { code: 'ENOENT' });
    assert.ok((await stat(join(dir, 'streams', 'x', '1'))).isDirectory());
    await s.delete('streams/x/1/seg1');
    assert.deepEqual(await readdir(dir), []);
    // And the emptied tree can be written again at once.
    await s.put('streams/x/0/seg2', Buffer.from('2'));
    assert.equal((await s.get('streams/x/0/seg2')).toString(), '2');
  });

  it('survives deletes racing puts in the same directory', async () => {
    const s = new FsObjectStore(freshDir());
    for (let round = 0; round < 20; round++) {
      await s.put('race/dir/a', Buffer.from('a'));
      await Promise.all([s.delete('race/dir/a'), s.put('race/dir/b', Buffer.from('b'))]);
      assert.equal((await s.get('race/dir/b')).toString(), 'b');
      await s.delete('race/dir/b');
    }
  });

  it('lists nothing under a root that does not exist yet', async () => {
    const s = new FsObjectStore(join(freshDir(), 'not', 'created'));
    assert.deepEqual(await s.list(''), []);
    await assert.rejects(s.get('x'), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
    await s.delete('x');
  });

  it('does not list directories, only objects', async () => {
    const dir = freshDir();
    const s = new FsObjectStore(dir);
    await mkdir(join(dir, 'empty', 'dir'), { recursive: true });
    await s.put('full/obj', Buffer.from('o'));
    assert.deepEqual(await s.list(''), [{ key: 'full/obj', size: 1 }]);
  });

  it('refuses work after close with CLOSED', async () => {
    const s = new FsObjectStore(freshDir());
    await s.close();
    const closed = (e: unknown) => isFlowError(e, 'CLOSED');
    await assert.rejects(s.put('a', Buffer.from('x')), closed);
    await assert.rejects(s.get('a'), closed);
    await assert.rejects(s.list(''), closed);
    await assert.rejects(s.delete('a'), closed);
  });
});
