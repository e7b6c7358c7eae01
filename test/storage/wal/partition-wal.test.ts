import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isFlowError } from '../../../src/core/index.js';
import { PartitionWal, type WalEntry } from '../../../src/storage/wal/index.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'flowmq-pwal-'));
  dirs.push(d);
  return d;
}

function data(base: number, len: number): Buffer {
  const b = Buffer.alloc(len);
  for (let i = 0; i < len; i++) b[i] = (base * 7 + i * 13 + 1) & 0xff;
  return b;
}

const entry = (key: string, base: number, len = 100, startsFile?: boolean): WalEntry => ({
  key,
  baseOffset: base,
  endOffset: base + 1,
  epoch: 1,
  data: data(base, len),
  ...(startsFile === undefined ? {} : { startsFile }),
});

async function replayed(wal: PartitionWal): Promise<WalEntry[]> {
  const out: WalEntry[] = [];
  await wal.replay((e) => out.push(e));
  return out;
}

/** The files of one key's directory, oldest first. */
function keyFiles(dir: string): string[] {
  const [kdir] = readdirSync(dir);
  return readdirSync(join(dir, kdir))
    .sort()
    .map((f) => join(dir, kdir, f));
}

// Both write paths: O_DIRECT (the default, where the filesystem takes it) and the page cache.
for (const directIo of [true, false]) {
  describe(`PartitionWal (${directIo ? 'direct I/O' : 'page cache'})`, () => {
    const open = (dir: string, logger?: { warn(obj: object, msg: string): void }) => PartitionWal.open(dir, { directIo, logger });

    it("starts a file where the caller says, and marks each file's first entry on replay", async () => {
      const dir = tmp();
      const wal = await open(dir);
      await wal.append(entry('s@1/0', 0, 100, true));
      await wal.append(entry('s@1/0', 1));
      await wal.append(entry('s@1/0', 2, 100, true));
      await wal.append(entry('s@1/0', 3, 100, false));
      assert.equal(wal.fileCount('s@1/0'), 2);
      await wal.close();
      const again = await open(dir);
      const got = await replayed(again);
      assert.deepEqual(
        got.map((e) => [e.baseOffset, e.startsFile]),
        [
          [0, true],
          [1, false],
          [2, true],
          [3, false],
        ],
      );
      for (const e of got) assert.ok(e.data.equals(data(e.baseOffset, 100)));
      // A restart never appends to a recovered file.
      await again.append(entry('s@1/0', 4));
      assert.equal(again.fileCount('s@1/0'), 3);
      await again.close();
    });

    it('keeps entries byte-exact across many small groups (the last partial block rewritten each time)', async () => {
      const dir = tmp();
      const wal = await open(dir);
      const written: WalEntry[] = [];
      // Sizes around and across the 4 KiB block, one group each (awaited one by one).
      for (let i = 0; i < 120; i++) {
        const e = entry('k/0', i, [1, 17, 100, 4000, 4096, 4097, 9000][i % 7], i === 0);
        await wal.append(e);
        written.push(e);
      }
      if (directIo) assert.ok(wal.directWrites > 0, 'written with O_DIRECT');
      await wal.close();
      const again = await open(dir);
      assert.equal(again.recoveryTruncatedBytes, 0, 'a clean close leaves nothing to cut');
      const got = await replayed(again);
      assert.equal(got.length, written.length);
      for (let i = 0; i < got.length; i++) assert.ok(got[i].data.equals(written[i].data), `entry ${i}`);
      await again.close();
    });

    it('after a crash, keeps every acknowledged entry (the zeros after the last frame are its end)', async () => {
      const dir = tmp();
      const wal = await open(dir);
      for (let i = 0; i < 10; i++) await wal.append(entry('k/0', i, 300, i === 0));
      // No close: the file still ends in the block padding of the last direct write.
      const again = await open(dir);
      assert.equal(again.recoveryTruncatedBytes, 0);
      assert.deepEqual(
        (await replayed(again)).map((e) => e.baseOffset),
        Array.from({ length: 10 }, (_, i) => i),
      );
      await again.close();
      await wal.close();
    });

    it("cuts a torn write off the key's last file, logs it, and drops a newer file that never got a frame", async () => {
      const dir = tmp();
      const wal = await open(dir);
      for (let i = 0; i < 5; i++) await wal.append(entry('k/0', i, 200, i === 0));
      await wal.close();
      const [file] = keyFiles(dir);
      appendFileSync(file, Buffer.from([0, 0, 1, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3])); // a frame cut short
      writeFileSync(join(file, '..', `${'9'.padStart(20, '0')}.wal`), Buffer.from('FMQPWL01')); // a torn header
      const warnings: string[] = [];
      const again = await open(dir, { warn: (_o, msg) => warnings.push(msg) });
      assert.ok(again.recoveryTruncatedBytes > 0);
      assert.ok(warnings.length >= 1, 'the cut is logged');
      assert.deepEqual(
        (await replayed(again)).map((e) => e.baseOffset),
        [0, 1, 2, 3, 4],
      );
      assert.equal(keyFiles(dir).length, 1, 'the empty newer file is gone');
      await again.append(entry('k/0', 5));
      await again.close();
      const third = await open(dir);
      assert.equal((await replayed(third)).length, 6);
      await third.close();
    });

    it("refuses to open over corruption before a key's last entry (CORRUPT_DATA)", async () => {
      const dir = tmp();
      const wal = await open(dir);
      await wal.append(entry('k/0', 0, 500, true));
      await wal.append(entry('k/0', 1, 500, true));
      await wal.close();
      const [first] = keyFiles(dir);
      const b = readFileSync(first);
      b[b.length - 10] ^= 0xff; // inside the first file's only frame
      writeFileSync(first, b);
      await assert.rejects(open(dir), (e: unknown) => isFlowError(e, 'CORRUPT_DATA'));
    });

    it('hands over a closed file whole, with its entries where it says, and forgets it once moved', async () => {
      const dir = tmp();
      const wal = await open(dir);
      await wal.append(entry('k/0', 0, 1000, true));
      await wal.append(entry('k/0', 1, 3000));
      await wal.append(entry('k/0', 2, 10, true));
      const sizeBefore = wal.size();
      assert.equal(await wal.takeFile('k/0', 0, 1, () => Buffer.alloc(0)), null, 'no file holds exactly [0, 1)');
      assert.equal(await wal.takeFile('k/0', 5, 6, () => Buffer.alloc(0)), null);
      let seen: { positions: number[]; trailerPos: number } | null = null;
      const trailer = Buffer.from('index+footer');
      const taken = await wal.takeFile('k/0', 0, 2, (layout) => {
        seen = layout;
        return trailer;
      });
      assert.ok(taken !== null && seen !== null);
      const layout = seen as { positions: number[]; trailerPos: number };
      const bytes = readFileSync(taken.path);
      assert.equal(bytes.length, taken.size);
      assert.ok(bytes.subarray(layout.positions[0], layout.positions[0] + 1000).equals(data(0, 1000)));
      assert.ok(bytes.subarray(layout.positions[1], layout.positions[1] + 3000).equals(data(1, 3000)));
      assert.ok(bytes.subarray(layout.trailerPos).equals(trailer), 'the trailer ends the file');
      // With direct I/O the trailer is padded to end on a block boundary, where the file's zeros ended: no truncate.
      if (directIo && wal.directWrites > 0) assert.equal(taken.size % 4096, 0);
      // Moved away by the caller (here: a rename, as the fs object store does).
      const moved = join(dir, '..', `${dir.split('/').pop()}-object`);
      dirs.push(moved);
      writeFileSync(moved, bytes);
      rmSync(taken.path);
      taken.release(true);
      assert.equal(wal.filesHandedOver, 1);
      assert.ok(wal.size() < sizeBefore);
      await wal.append(entry('k/0', 3));
      await wal.close();
      const again = await open(dir);
      assert.deepEqual(
        (await replayed(again)).map((e) => e.baseOffset),
        [2, 3],
      );
      await again.close();
    });

    it('a file whose handover was not finished is replayed without its trailer, and can be handed over again', async () => {
      const dir = tmp();
      const wal = await open(dir);
      await wal.append(entry('k/0', 0, 700, true));
      await wal.append(entry('k/0', 1, 700));
      const taken = await wal.takeFile('k/0', 0, 2, () => Buffer.from('a trailer the object store never took'));
      assert.ok(taken !== null);
      taken.release(false);
      // Still the log's: a trim keeps it while unflushed, and a restart replays its entries.
      assert.equal(await wal.trim(() => 1), 0);
      await wal.close();
      const again = await open(dir);
      assert.deepEqual(
        (await replayed(again)).map((e) => e.baseOffset),
        [0, 1],
      );
      const second = await again.takeFile('k/0', 0, 2, () => Buffer.from('second'));
      assert.ok(second !== null);
      assert.ok(readFileSync(second.path).subarray(-6).equals(Buffer.from('second')));
      second.release(false);
      assert.ok((await again.trim(() => 2)) > 0, 'deleted by trim once flushed');
      assert.equal(again.fileCount(), 0);
      await again.close();
    });

    it('hands over a file while appends to its key keep coming', { timeout: 20_000 }, async () => {
      const dir = tmp();
      const wal = await open(dir);
      await wal.append(entry('k/0', 0, 2000, true));
      let next = 1;
      let stop = false;
      const acks: Promise<void>[] = [];
      // Appends arriving on every turn of the event loop, whatever the WAL is doing, as from busy producers'
      // sockets: whenever a group write ends, the next group is already waiting.
      const pump = () => {
        if (stop) return;
        acks.push(wal.append(entry('k/0', next, 2000, next === 1)));
        next++;
        setImmediate(pump);
      };
      pump();
      await new Promise((r) => setTimeout(r, 30));
      const taken = await wal.takeFile('k/0', 0, 1, () => Buffer.from('t'));
      stop = true;
      await Promise.all(acks);
      assert.ok(taken !== null, 'handed over under load');
      rmSync(taken.path);
      taken.release(true);
      await wal.close();
      const again = await open(dir);
      const got = await replayed(again);
      assert.deepEqual(
        got.map((e) => e.baseOffset),
        Array.from({ length: next - 1 }, (_, i) => i + 1),
      );
      await again.close();
    });

    it("names a key's directory safely, whatever the key, and reads the key back from its files", async () => {
      const dir = tmp();
      const wal = await open(dir);
      const keys = ['a/b@1/0', 'ünï/ključ@2/3', `${'x'.repeat(300)}@5/1`, '../../etc@1/0'];
      for (const k of keys) await wal.append(entry(k, 0, 50, true));
      await wal.close();
      for (const name of readdirSync(dir)) {
        assert.ok(name.length <= 200 && !name.includes('/') && name !== '..', `directory name ${name}`);
        assert.ok(statSync(join(dir, name)).isDirectory());
      }
      const again = await open(dir);
      assert.deepEqual((await replayed(again)).map((e) => e.key).sort(), [...keys].sort());
      await again.close();
    });
  });
}
