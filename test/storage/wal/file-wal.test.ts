import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { appendFile, mkdir, mkdtemp, readdir, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { crc32 } from 'node:zlib';
import type { FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32c, isFlowError } from '../../../src/core/index.js';
import { DirectWriter } from '../../../src/storage/direct-io.js';
import { FileWal, WAL_FILE_HEADER_BYTES, type FileWalOptions, type WalEntry } from '../../../src/storage/wal/index.js';

/** Bytes one entry takes on disk: 8-byte header, u16 key length, key, two u64 offsets, data. */
const frameSize = (e: WalEntry): number => 8 + 2 + Buffer.byteLength(e.key) + 16 + e.data.length;

const entry = (key: string, base: number, len = 100): WalEntry => ({
  key,
  baseOffset: base,
  endOffset: base + 1,
  epoch: 1,
  data: Buffer.alloc(len, base & 0xff),
});

async function collect(wal: FileWal): Promise<WalEntry[]> {
  const out: WalEntry[] = [];
  await wal.replay((e) => out.push(e));
  return out;
}

const walFiles = async (dir: string): Promise<string[]> => (await readdir(dir)).filter((f) => f.endsWith('.log')).sort();

describe('FileWal', () => {
  let root = '';
  let n = 0;
  const freshDir = (): string => join(root, `t-${n++}`);

  /** A log holding `count` entries of key k/0, closed again; returns the directory and the entries. */
  async function written(count: number, opts: FileWalOptions = {}): Promise<{ dir: string; entries: WalEntry[] }> {
    const dir = freshDir();
    const wal = await FileWal.open(dir, opts);
    await collect(wal);
    const entries = Array.from({ length: count }, (_, i) => entry('k/0', i, 100 + i));
    for (const e of entries) await wal.append(e);
    await wal.close();
    return { dir, entries };
  }

  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'flowmq-filewal-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('names files wal-<20 digits>.log and ignores other files in the directory', async () => {
    const { dir, entries } = await written(3);
    await writeFile(join(dir, 'README'), 'not a log');
    await writeFile(join(dir, 'wal-1.log'), 'wrong name pattern');
    const files = await walFiles(dir);
    assert.deepEqual(files.filter((f) => /^wal-\d{20}\.log$/.test(f)).length, 1);
    const wal = await FileWal.open(dir);
    assert.equal((await collect(wal)).length, entries.length);
    await wal.close();
  });

  describe('torn tail of the last file', () => {
    const cases: Array<[string, (file: string, size: number) => Promise<void>, number]> = [
      ['a few bytes chopped off the last frame', (f, size) => truncate(f, size - 5), 9],
      ['only part of the last header left', async (f, size) => truncate(f, size - frameSize(entry('k/0', 9, 109)) + 3), 9],
      ['random garbage appended', (f) => appendFile(f, Buffer.from('a7f3c2d19e', 'hex')), 10],
      ['zeros appended (extended but unwritten blocks)', (f) => appendFile(f, Buffer.alloc(4096)), 10],
      [
        'a frame whose length runs past the end',
        (f) => {
          const h = Buffer.alloc(20);
          h.writeUInt32BE(1_000_000, 0);
          return appendFile(f, h);
        },
        10,
      ],
      [
        'a complete last frame with a bad CRC',
        async (f, size) => {
          const buf = await readFile(f);
          buf[size - 1] ^= 0xff;
          await writeFile(f, buf);
        },
        9,
      ],
    ];
    for (const [what, damage, survivors] of cases) {
      it(`drops ${what} and truncates the file to the last good frame`, async () => {
        const { dir, entries } = await written(10);
        const [file] = await walFiles(dir);
        const path = join(dir, file);
        const good = WAL_FILE_HEADER_BYTES + entries.slice(0, survivors).reduce((s, e) => s + frameSize(e), 0);
        const sizeBefore = (await stat(path)).size;
        await damage(path, sizeBefore);
        const damagedSize = (await stat(path)).size;

        const wal = await FileWal.open(dir);
        const got = await collect(wal);
        assert.deepEqual(
          got.map((e) => e.baseOffset),
          entries.slice(0, survivors).map((e) => e.baseOffset),
        );
        assert.equal((await stat(path)).size, good, 'file truncated to the last good frame');
        assert.equal(wal.lastReplayTruncatedBytes, damagedSize - good);
        assert.equal(wal.size(), good);

        // Appending after recovery continues cleanly, and a second recovery finds nothing to cut.
        await wal.append(entry('k/0', 100));
        await wal.close();
        const again = await FileWal.open(dir);
        const all = await collect(again);
        assert.equal(again.lastReplayTruncatedBytes, 0);
        assert.deepEqual(
          all.map((e) => e.baseOffset),
          [...entries.slice(0, survivors).map((e) => e.baseOffset), 100],
        );
        await again.close();
      });
    }

    it('also recovers when appends come before any replay', async () => {
      const { dir } = await written(5);
      const [file] = await walFiles(dir);
      await appendFile(join(dir, file), Buffer.from('torn'));
      const wal = await FileWal.open(dir);
      await wal.append(entry('k/0', 5)); // no replay first: the torn tail must still be cut before this lands
      await wal.close();
      const again = await FileWal.open(dir);
      assert.deepEqual(
        (await collect(again)).map((e) => e.baseOffset),
        [0, 1, 2, 3, 4, 5],
      );
      await again.close();
    });
  });

  describe('corruption before the tail', () => {
    it('throws CORRUPT_DATA for a bad frame followed by good ones in the last file, and changes nothing', async () => {
      const { dir } = await written(10);
      const [file] = await walFiles(dir);
      const path = join(dir, file);
      const buf = await readFile(path);
      buf[40] ^= 0x01; // inside the data of the first frame
      await writeFile(path, buf);
      const wal = await FileWal.open(dir);
      await assert.rejects(collect(wal), (e: unknown) => isFlowError(e, 'CORRUPT_DATA'));
      assert.equal((await stat(path)).size, buf.length, 'nothing truncated');
      // Appends refuse to build on a log that failed recovery.
      await assert.rejects(wal.append(entry('k/0', 10)), (e: unknown) => isFlowError(e, 'CORRUPT_DATA'));
      await wal.close();
    });

    it('throws CORRUPT_DATA for a bad frame in an earlier file', async () => {
      const { dir } = await written(40, { maxFileBytes: 1024 });
      const files = await walFiles(dir);
      assert.ok(files.length >= 3);
      const first = join(dir, files[0]);
      const buf = await readFile(first);
      buf[buf.length - 1] ^= 0xff; // the last frame of a closed file
      await writeFile(first, buf);
      const wal = await FileWal.open(dir);
      await assert.rejects(collect(wal), (e: unknown) => isFlowError(e, 'CORRUPT_DATA'));
      await wal.close();
    });

    it('throws CORRUPT_DATA for a torn-looking tail on an earlier file', async () => {
      const { dir } = await written(40, { maxFileBytes: 1024 });
      const files = await walFiles(dir);
      await appendFile(join(dir, files[1]), Buffer.from('xyz'));
      const wal = await FileWal.open(dir);
      await assert.rejects(collect(wal), (e: unknown) => isFlowError(e, 'CORRUPT_DATA'));
      await wal.close();
    });
  });

  describe('group commit', () => {
    it('makes 1000 concurrent appends durable with far fewer than 1000 fdatasyncs', async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir);
      await collect(wal);
      const entries = Array.from({ length: 1000 }, (_, i) => entry(`g/${i % 8}`, i, 200));
      await Promise.all(entries.map((e) => wal.append(e)));
      assert.ok(wal.syncCount >= 1);
      assert.ok(wal.syncCount <= 10, `expected batching, got ${wal.syncCount} fdatasyncs for 1000 appends`);
      assert.equal(wal.groupCount, wal.syncCount);
      await wal.close();
      const again = await FileWal.open(dir);
      assert.equal((await collect(again)).length, 1000);
      await again.close();
    });

    it('syncs before resolving: an awaited append is one group and one fdatasync', async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir);
      await collect(wal);
      for (let i = 0; i < 5; i++) {
        await wal.append(entry('s/0', i));
        assert.equal(wal.syncCount, i + 1);
      }
      await wal.close();
    });

    it('forms the next group from appends that arrive while one is in flight', async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir);
      await collect(wal);
      const first = wal.append(entry('s/0', 0)); // starts a group on its own
      await new Promise((r) => setImmediate(r));
      const rest = Array.from({ length: 100 }, (_, i) => wal.append(entry('s/0', i + 1)));
      await Promise.all([first, ...rest]);
      assert.ok(wal.syncCount <= 3, `got ${wal.syncCount} syncs`);
      await wal.close();
    });

    it('does not fdatasync with fsync: false', async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir, { fsync: false });
      await collect(wal);
      await Promise.all(Array.from({ length: 10 }, (_, i) => wal.append(entry('n/0', i))));
      assert.equal(wal.syncCount, 0);
      await wal.close();
      const again = await FileWal.open(dir);
      assert.equal((await collect(again)).length, 10);
      await again.close();
    });

    it('rejects a failed group with STORAGE_FULL, cuts its partial bytes and carries on where the key resumes', async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir);
      await collect(wal);
      await wal.append(entry('w/0', 0));
      // Make the next write land half of its bytes and then fail, as a full disk would.
      const internals = wal as unknown as { activeFh: FileHandle };
      const fh = internals.activeFh;
      const realWritev = fh.writev.bind(fh);
      let fail = true;
      fh.writev = (async (buffers: Buffer[], position?: number) => {
        if (!fail) return realWritev(buffers, position);
        fail = false;
        const all = Buffer.concat(buffers);
        await fh.write(all, 0, Math.floor(all.length / 2), position);
        throw Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' });
      }) as FileHandle['writev'];
      const failed = [wal.append(entry('w/0', 1)), wal.append(entry('w/0', 2))];
      for (const p of failed) await assert.rejects(p, (e: unknown) => isFlowError(e, 'STORAGE_FULL'));
      // Past the hole the key is refused; it resumes where its durable entries end.
      await assert.rejects(wal.append(entry('w/0', 3)), (e: unknown) => isFlowError(e, 'STORAGE_FULL'));
      await wal.append(entry('w/0', 1));
      await wal.append(entry('w/0', 2));
      await wal.close();
      const again = await FileWal.open(dir);
      assert.deepEqual(
        (await collect(again)).map((e) => e.baseOffset),
        [0, 1, 2],
      );
      assert.equal(again.lastReplayTruncatedBytes, 0, 'the partial write was already cut off');
      await again.close();
    });

    it('rejects invalid entries without writing anything', async () => {
      const wal = await FileWal.open(freshDir());
      await collect(wal);
      const bad = (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT');
      await assert.rejects(wal.append({ key: 'x'.repeat(70_000), baseOffset: 0, endOffset: 1, epoch: 1, data: Buffer.alloc(0) }), bad);
      await assert.rejects(wal.append({ key: 'x', baseOffset: -1, endOffset: 1, epoch: 1, data: Buffer.alloc(0) }), bad);
      await assert.rejects(wal.append({ key: 'x', baseOffset: 1.5, endOffset: 2, epoch: 1, data: Buffer.alloc(0) }), bad);
      await assert.rejects(wal.append({ key: 'x', baseOffset: 0, endOffset: 2 ** 53, epoch: 1, data: Buffer.alloc(0) }), bad);
      assert.equal(wal.size(), 0);
      await wal.close();
    });
  });

  describe('files and trimming', () => {
    it('rolls to a new file before a group would exceed maxFileBytes', async () => {
      const { dir, entries } = await written(100, { maxFileBytes: 4096 });
      const files = await walFiles(dir);
      assert.ok(files.length > 3, `expected several files, got ${files.length}`);
      for (const f of files) assert.ok((await stat(join(dir, f))).size <= 4096, `${f} within maxFileBytes`);
      const wal = await FileWal.open(dir, { maxFileBytes: 4096 });
      assert.deepEqual(
        (await collect(wal)).map((e) => e.baseOffset),
        entries.map((e) => e.baseOffset),
      );
      assert.equal(wal.fileCount(), files.length);
      await wal.close();
    });

    it('puts a group larger than maxFileBytes in a file of its own', async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir, { maxFileBytes: 1000 });
      await collect(wal);
      await wal.append(entry('b/0', 0, 10));
      await wal.append(entry('b/0', 1, 5000));
      await wal.append(entry('b/0', 2, 10));
      assert.equal(wal.fileCount(), 3);
      await wal.close();
    });

    it('deletes exactly the closed files whose every key is flushed', async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir, { maxFileBytes: 2048 });
      await collect(wal);
      // a fills the first files alone; then a and b share files; then c alone.
      for (let i = 0; i < 30; i++) await wal.append(entry('a/0', i, 200));
      for (let i = 0; i < 20; i++) {
        await wal.append(entry('a/0', 30 + i, 200));
        await wal.append(entry('b/0', i, 200));
      }
      for (let i = 0; i < 30; i++) await wal.append(entry('c/0', i, 200));
      const filesBefore = await walFiles(dir);
      const sizeBefore = wal.size();

      // Only a is flushed: files holding nothing but a go; shared and c files stay.
      const released = await wal.trim((k) => (k === 'a/0' ? 50 : 0));
      assert.ok(released > 0);
      assert.equal(wal.size(), sizeBefore - released);
      const after1 = await walFiles(dir);
      assert.ok(after1.length < filesBefore.length);
      let freed = 0;
      for (const f of filesBefore) if (!after1.includes(f)) freed++;
      assert.ok(freed >= 3, `files freed: ${freed}`);
      await wal.close();

      const again = await FileWal.open(dir, { maxFileBytes: 2048 });
      const got = await collect(again);
      assert.equal(got.filter((e) => e.key === 'b/0').length, 20, 'every b entry kept');
      assert.equal(got.filter((e) => e.key === 'c/0').length, 30, 'every c entry kept');
      // a flushed only partly is kept where it shares files with b, but in order.
      const as = got.filter((e) => e.key === 'a/0').map((e) => e.baseOffset);
      assert.deepEqual(
        as,
        [...as].sort((x, y) => x - y),
      );

      // Flushing b frees the shared files; the active c file stays while c is unflushed.
      await again.trim((k) => (k === 'c/0' ? 0 : 1000));
      const left = await collect(again);
      assert.equal(left.filter((e) => e.key === 'c/0').length, 30, 'every c entry kept');
      // Only a file shared with the first c entries may still hold a or b.
      assert.ok(left.length < got.length && left.length - 30 < 2048 / 229, `${left.length - 30} others left`);
      await again.close();
    });

    it('retires the active file once it is fully flushed, so it can be deleted', async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir);
      await collect(wal);
      for (let i = 0; i < 10; i++) await wal.append(entry('x/0', i));
      const size = wal.size();
      assert.equal(await wal.trim(() => 5), 0, 'not flushed: kept');
      assert.equal(await wal.trim(() => 10), size);
      assert.equal(wal.size(), 0);
      assert.deepEqual(await walFiles(dir), []);
      await wal.append(entry('x/0', 10));
      assert.equal((await walFiles(dir)).length, 1);
      await wal.close();
      const again = await FileWal.open(dir);
      assert.deepEqual(
        (await collect(again)).map((e) => e.baseOffset),
        [10],
      );
      await again.close();
    });

    it('retires a flushed active file after the group in flight when trimmed during a write', async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir);
      await collect(wal);
      for (let i = 0; i < 10; i++) await wal.append(entry('y/0', i));
      const inflight = wal.append(entry('y/0', 10));
      const released = await wal.trim((k) => (k === 'y/0' ? 10 : 0));
      await inflight;
      // Whatever was released now, the entry at 10 (not flushed) must survive a later trim.
      const released2 = await wal.trim(() => 10);
      assert.ok(released + released2 > 0);
      await wal.close();
      const again = await FileWal.open(dir);
      const got = (await collect(again)).map((e) => e.baseOffset);
      assert.ok(got.includes(10));
      await again.close();
    });

    it('counts the files of earlier runs in size() and trims them after replay', async () => {
      const { dir } = await written(20, { maxFileBytes: 1024 });
      const onDisk = (await Promise.all((await walFiles(dir)).map((f) => stat(join(dir, f))))).reduce((s, st) => s + st.size, 0);
      const wal = await FileWal.open(dir, { maxFileBytes: 1024 });
      assert.equal(wal.size(), onDisk);
      assert.equal(await wal.trim(() => 1000), 0, 'not trimmed before replay: contents unknown');
      await collect(wal);
      assert.equal(await wal.trim(() => 1000), onDisk);
      assert.deepEqual(await walFiles(dir), []);
      await wal.close();
    });
  });

  describe('file reuse', () => {
    const spares = async (dir: string): Promise<string[]> => (await readdir(dir)).filter((f) => /^spare-\d+\.wal$/.test(f)).sort();

    /** A log whose flushed files became spares and whose newest files were started from them. */
    async function withReusedFiles(dir: string): Promise<{ wal: FileWal; kept: number[] }> {
      const wal = await FileWal.open(dir, { maxFileBytes: 4096 });
      await collect(wal);
      for (let i = 0; i < 40; i++) await wal.append(entry('r/0', i, 400));
      await wal.trim(() => 40);
      assert.equal((await spares(dir)).length, 2, 'two flushed files kept as spares');
      const kept: number[] = [];
      for (let i = 40; i < 50; i++) {
        await wal.append(entry('r/0', i, 100));
        kept.push(i);
      }
      assert.ok(wal.reusedFiles >= 1, 'a new file was started from a spare');
      return { wal, kept };
    }

    it('keeps flushed files as spares, starts new files from them and replays only the new entries', async () => {
      const dir = freshDir();
      const { wal, kept } = await withReusedFiles(dir);
      await wal.close();
      // Retiring a reused file cut it to its length, so a clean restart finds nothing to drop.
      const again = await FileWal.open(dir, { maxFileBytes: 4096 });
      assert.deepEqual(
        (await collect(again)).map((e) => e.baseOffset),
        kept,
      );
      assert.equal(again.lastReplayTruncatedBytes, 0);
      const onDisk = (await Promise.all((await walFiles(dir)).map((f) => stat(join(dir, f))))).reduce((n, st) => n + st.size, 0);
      assert.equal(again.size(), onDisk);
      await again.close();
    });

    it('after a crash, drops the stale rest of a reused file and never replays its old frames', async () => {
      const dir = freshDir();
      const { wal, kept } = await withReusedFiles(dir);
      // No close: the process dies with a reused file active (its old frames beyond the new ones).
      const [last] = (await walFiles(dir)).slice(-1);
      const staleFrom = (wal as unknown as { active: { size: number } }).active.size;
      assert.ok((await stat(join(dir, last))).size > staleFrom, 'the active file still holds stale bytes');
      const again = await FileWal.open(dir, { maxFileBytes: 4096 });
      const got = await collect(again);
      assert.deepEqual(
        got.map((e) => e.baseOffset),
        kept,
      );
      assert.ok(again.lastReplayTruncatedBytes > 0);
      assert.equal((await stat(join(dir, last))).size, staleFrom);
      await again.close();
      await wal.close();
    });

    it('treats a reused file whose header never landed as holding nothing', async () => {
      const dir = freshDir();
      const { wal } = await withReusedFiles(dir);
      await wal.close();
      // A spare renamed into place (the crash came before its first group was written).
      const files = await walFiles(dir);
      const [spare] = await spares(dir);
      assert.ok(spare, 'a spare left');
      const nextSeq = Number(/\d{20}/.exec(files[files.length - 1])![0]) + 1;
      const name = `wal-${String(nextSeq).padStart(20, '0')}.log`;
      await writeFile(join(dir, name), await readFile(join(dir, spare)));
      const again = await FileWal.open(dir, { maxFileBytes: 4096 });
      const got = await collect(again);
      assert.deepEqual(
        got.map((e) => e.baseOffset),
        [40, 41, 42, 43, 44, 45, 46, 47, 48, 49],
      );
      assert.equal((await stat(join(dir, name))).size, 0);
      await again.close();
    });

    it('reads files of the previous format (no header, zlib CRC-32)', async () => {
      const dir = freshDir();
      await mkdir(dir, { recursive: true });
      const frames = [0, 1, 2].map((i) => {
        const key = Buffer.from('old/0');
        const data = Buffer.alloc(50, i);
        const body = Buffer.alloc(2 + key.length + 16 + data.length);
        body.writeUInt16BE(key.length, 0);
        key.copy(body, 2);
        body.writeUInt32BE(i, 2 + key.length + 4);
        body.writeUInt32BE(i + 1, 2 + key.length + 12);
        data.copy(body, 2 + key.length + 16);
        const head = Buffer.alloc(8);
        head.writeUInt32BE(body.length, 0);
        head.writeUInt32BE(crc32(body), 4);
        return Buffer.concat([head, body]);
      });
      await writeFile(join(dir, `wal-${'1'.padStart(20, '0')}.log`), Buffer.concat(frames));
      const wal = await FileWal.open(dir);
      const got = await collect(wal);
      assert.deepEqual(
        got.map((e) => [e.key, e.baseOffset, e.endOffset, e.data[0]]),
        [
          ['old/0', 0, 1, 0],
          ['old/0', 1, 2, 1],
          ['old/0', 2, 3, 2],
        ],
      );
      // New appends go to a new file of the current format, after the old one.
      await wal.append(entry('old/0', 3));
      await wal.close();
      const again = await FileWal.open(dir);
      assert.deepEqual(
        (await collect(again)).map((e) => e.baseOffset),
        [0, 1, 2, 3],
      );
      await again.close();
    });
  });

  describe('frame checksums from a CRC the caller holds', () => {
    /** Entries whose data looks like a big Kafka batch: a CRC-32C of everything after byte 21 at bytes 17..21. */
    const withOwnCrc = (base: number, len: number): WalEntry => {
      const data = Buffer.alloc(len);
      for (let i = 0; i < len; i += 997) data[i] = (i + base) & 0xff;
      data.writeUInt32BE(crc32c(data, 21, len), 17);
      return { key: 'c/0', baseOffset: base, endOffset: base + 1, epoch: 1, data, dataCrc: { from: 21, crc: data.readUInt32BE(17) } };
    };

    it('writes exactly the bytes it writes without it, and replays them', async () => {
      const entries = [withOwnCrc(0, 300_000), withOwnCrc(1, 70_000), withOwnCrc(2, 500), withOwnCrc(3, 1_000_000)];
      const files: Buffer[] = [];
      for (const hinted of [true, false]) {
        const dir = freshDir();
        const wal = await FileWal.open(dir);
        await collect(wal);
        for (const e of entries) await wal.append(hinted ? e : { ...e, dataCrc: undefined });
        await wal.close();
        const [file] = await walFiles(dir);
        files.push(await readFile(join(dir, file)));
        const again = await FileWal.open(dir);
        assert.deepEqual(
          (await collect(again)).map((e) => e.data.length),
          entries.map((e) => e.data.length),
        );
        assert.equal(again.lastReplayTruncatedBytes, 0);
        await again.close();
      }
      assert.ok(files[0].equals(files[1]), 'the same file either way');
    });

    it('cannot read back an entry given a wrong CRC (why only a verified one may be given)', async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir);
      await collect(wal);
      await wal.append(withOwnCrc(0, 100_000));
      await wal.append({ ...withOwnCrc(1, 100_000), dataCrc: { from: 21, crc: 12345 } });
      await wal.close();
      const again = await FileWal.open(dir);
      assert.deepEqual(
        (await collect(again)).map((e) => e.baseOffset),
        [0],
      );
      assert.ok(again.lastReplayTruncatedBytes > 0);
      await again.close();
    });
  });

  describe('direct I/O', () => {
    /** Whether O_DIRECT works in `dir` (not on tmpfs, for one): the WAL then falls back to the page cache. */
    const directWorks = async (dir: string): Promise<boolean> => {
      await mkdir(dir, { recursive: true });
      return (await DirectWriter.open(dir)) !== null;
    };
    const sizes = async (dir: string): Promise<number[]> => Promise.all((await walFiles(dir)).map(async (f) => (await stat(join(dir, f))).size));

    it('writes groups in whole blocks, padding included, and replays exactly the entries', async () => {
      const dir = freshDir();
      const direct = await directWorks(dir);
      const wal = await FileWal.open(dir, { directIo: true });
      await collect(wal);
      // Key k/0: a frame is 29 bytes plus the data. 4041 bytes after the 16-byte file header leave 10 bytes to the
      // block's end, too few for a padding frame (26): the pad runs into the next block. 4051 fill it exactly.
      const entries = [entry('k/0', 0, 4041), entry('k/0', 1, 4051 - 16), entry('k/0', 2, 1), entry('k/0', 3, 70_000)];
      for (const e of entries) await wal.append(e);
      // Several at once: one group.
      const more = Array.from({ length: 20 }, (_, i) => entry(`k/${i % 3}`, 4 + i, 1000 + 37 * i));
      await Promise.all(more.map((e) => wal.append(e)));
      const all = [...entries, ...more];
      assert.equal(wal.directGroups > 0, direct, `direct groups: ${wal.directGroups}`);
      if (direct) for (const size of await sizes(dir)) assert.equal(size % 4096, 0, `file size ${size}`);
      assert.deepEqual(
        (await collect(wal)).map((e) => [e.key, e.baseOffset, e.data.length]),
        all.map((e) => [e.key, e.baseOffset, e.data.length]),
      );
      await wal.close();
      const again = await FileWal.open(dir, { directIo: true });
      const got = await collect(again);
      assert.equal(got.length, all.length);
      got.forEach((e, i) => assert.ok(e.data.equals(all[i].data) && e.key === all[i].key && e.endOffset === all[i].endOffset, `entry ${i}`));
      assert.equal(again.lastReplayTruncatedBytes, 0);
      await again.close();
    });

    it('cuts a group torn by a crash off the end of the last file, keeping the groups before it', async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir, { directIo: true });
      await collect(wal);
      await wal.append(entry('t/0', 0, 5000));
      await wal.append(entry('t/0', 1, 300));
      const [file] = await walFiles(dir);
      const before = (await stat(join(dir, file))).size;
      await wal.append(entry('t/0', 2, 50_000));
      await wal.close();
      // The crash left only the first 1000 bytes of the last group.
      await truncate(join(dir, file), before + 1000);
      const again = await FileWal.open(dir, { directIo: true });
      assert.deepEqual(
        (await collect(again)).map((e) => e.baseOffset),
        [0, 1],
      );
      assert.equal(again.lastReplayTruncatedBytes, 1000);
      assert.equal((await stat(join(dir, file))).size, before);
      // New appends follow in a new file.
      await again.append(entry('t/0', 2, 10));
      await again.close();
      const third = await FileWal.open(dir, { directIo: true });
      assert.deepEqual(
        (await collect(third)).map((e) => e.baseOffset),
        [0, 1, 2],
      );
      await third.close();
    });

    it("reuses spare files and, after a crash, never replays a reused file's old frames", async () => {
      const dir = freshDir();
      const wal = await FileWal.open(dir, { maxFileBytes: 64 * 1024, directIo: true });
      await collect(wal);
      for (let i = 0; i < 60; i++) await wal.append(entry('r/0', i, 3000));
      await wal.trim(() => 60);
      const kept: number[] = [];
      for (let i = 60; i < 70; i++) {
        await wal.append(entry('r/0', i, 2000));
        kept.push(i);
      }
      assert.ok(wal.reusedFiles >= 1, 'a new file was started from a spare');
      // No close: the process dies with a reused file active.
      const again = await FileWal.open(dir, { maxFileBytes: 64 * 1024, directIo: true });
      assert.deepEqual(
        (await collect(again)).map((e) => e.baseOffset),
        kept,
      );
      assert.ok(again.lastReplayTruncatedBytes > 0, 'the stale rest was cut');
      await again.close();
      await wal.close();
    });
  });
});
