/**
 * What every WriteAheadLog backend must do. A backend's test file calls `walConformance` with a factory that
 * opens (or reopens) the log kept in `dir`; a networked backend may map `dir` to its own namespace. A factory
 * that declares a second parameter, `io`, opens the files it writes through it (see test/helpers/faulty-disk.ts:
 * writes that fail on demand); the cases about failing writes run only for such a factory (a file backend), the
 * others for every backend.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isFlowError } from '../../src/core/index.js';
import type { WalEntry, WriteAheadLog } from '../../src/storage/wal/index.js';
import type { FileOpener } from '../../src/storage/fs-util.js';
import { FaultyDisk } from '../helpers/faulty-disk.js';

async function collect(wal: WriteAheadLog): Promise<WalEntry[]> {
  const out: WalEntry[] = [];
  await wal.replay((e) => out.push(e));
  return out;
}

/** Deterministic payload so a replayed entry can be checked byte for byte. */
function payload(key: string, base: number, len: number): Buffer {
  const b = Buffer.alloc(len);
  for (let i = 0; i < len; i++) b[i] = (base * 31 + i + key.length) & 0xff;
  return b;
}

function entry(key: string, base: number, count = 1, len = 64, epoch = 1): WalEntry {
  return { key, baseOffset: base, endOffset: base + count, epoch, data: payload(key, base, len) };
}

/** Same entries, in the same order per key (the interface orders a replay per key only). */
function assertSameEntries(actual: WalEntry[], expected: WalEntry[]): void {
  assert.equal(actual.length, expected.length, 'entry count');
  const byKey = (list: WalEntry[]): Map<string, WalEntry[]> => {
    const m = new Map<string, WalEntry[]>();
    for (const e of list) {
      let l = m.get(e.key);
      if (!l) m.set(e.key, (l = []));
      l.push(e);
    }
    return m;
  };
  const got = byKey(actual);
  for (const [key, want] of byKey(expected)) {
    const have = got.get(key) ?? [];
    assert.equal(have.length, want.length, `entry count of ${key}`);
    for (let i = 0; i < want.length; i++) {
      const a = have[i];
      const e = want[i];
      assert.equal(a.baseOffset, e.baseOffset, `baseOffset of ${key} entry ${i}`);
      assert.equal(a.endOffset, e.endOffset, `endOffset of ${key} entry ${i}`);
      assert.ok(a.data.equals(e.data), `data of ${key} entry ${i}`);
    }
  }
}

export function walConformance(
  name: string,
  open: (dir: string, io?: FileOpener) => Promise<WriteAheadLog>,
  /** `shared`: several writers (brokers of a cluster) may open the same log at once; it has replayKey. */
  opts: { shared?: boolean } = {},
): void {
  describe(`WriteAheadLog conformance: ${name}`, () => {
    let root = '';
    let n = 0;
    const freshDir = (): string => join(root, `case-${n++}`);
    /** Opens the log and replays it, as a broker does at start. */
    const openReplayed = async (dir: string): Promise<{ wal: WriteAheadLog; entries: WalEntry[] }> => {
      const wal = await open(dir);
      return { wal, entries: await collect(wal) };
    };

    before(async () => {
      root = await mkdtemp(join(tmpdir(), 'flowmq-wal-conformance-'));
    });
    after(async () => {
      await rm(root, { recursive: true, force: true });
    });

    it('starts empty', async () => {
      const { wal, entries } = await openReplayed(freshDir());
      assert.deepEqual(entries, []);
      assert.equal(wal.size(), 0);
      await wal.close();
    });

    it('replays appended entries in order with their exact content', async () => {
      const dir = freshDir();
      const { wal } = await openReplayed(dir);
      const written: WalEntry[] = [
        entry('telemetry/0', 0, 3),
        entry('telemetry/1', 0, 1),
        entry('telemetry/0', 3, 2),
        { key: 'ünïcødé/ключ/0', baseOffset: 7, endOffset: 8, epoch: 1, data: Buffer.from('héllo') },
        { key: 'empty/0', baseOffset: 5, endOffset: 6, epoch: 1, data: Buffer.alloc(0) },
        entry('big/0', 0, 10, 1024 * 1024 + 13),
        { key: 'far/0', baseOffset: 2 ** 40 + 5, endOffset: Number.MAX_SAFE_INTEGER, epoch: 1, data: Buffer.from([1, 2, 3]) },
      ];
      for (const e of written) await wal.append(e);
      assert.ok(wal.size() > 1024 * 1024, 'size() counts the bytes held');
      await wal.close();

      const again = await openReplayed(dir);
      assertSameEntries(again.entries, written);
      await again.wal.close();
    });

    it('keeps acknowledged entries across several reopen cycles', async () => {
      const dir = freshDir();
      const all: WalEntry[] = [];
      for (let round = 0; round < 3; round++) {
        const { wal, entries } = await openReplayed(dir);
        assertSameEntries(entries, all);
        for (let i = 0; i < 20; i++) {
          const e = entry(`k/${i % 3}`, round * 100 + i, 1, 100 + i);
          await wal.append(e);
          all.push(e);
        }
        await wal.close();
      }
      const { wal, entries } = await openReplayed(dir);
      assertSameEntries(entries, all);
      await wal.close();
    });

    it('resolves many concurrent appends and replays them all in append order per key', async () => {
      const dir = freshDir();
      const { wal } = await openReplayed(dir);
      const written: WalEntry[] = [];
      const next = [0, 0, 0, 0];
      for (let i = 0; i < 1000; i++) {
        const p = i % 4;
        written.push(entry(`s/${p}`, next[p], 2, 50 + (i % 200)));
        next[p] += 2;
      }
      await Promise.all(written.map((e) => wal.append(e)));
      await wal.close();
      const again = await openReplayed(dir);
      assertSameEntries(again.entries, written);
      await again.wal.close();
    });

    it('finishes appends already accepted when closed', async () => {
      const dir = freshDir();
      const { wal } = await openReplayed(dir);
      const written = Array.from({ length: 50 }, (_, i) => entry('c/0', i));
      const acks = written.map((e) => wal.append(e));
      await wal.close();
      await Promise.all(acks);
      const again = await openReplayed(dir);
      assertSameEntries(again.entries, written);
      await again.wal.close();
    });

    it('rejects appends after close with CLOSED', async () => {
      const { wal } = await openReplayed(freshDir());
      await wal.close();
      await assert.rejects(wal.append(entry('x/0', 0)), (e: unknown) => isFlowError(e, 'CLOSED'));
    });

    it('rejects an entry whose endOffset is below its baseOffset', async () => {
      const { wal } = await openReplayed(freshDir());
      await assert.rejects(wal.append({ key: 'x/0', baseOffset: 5, endOffset: 4, epoch: 1, data: Buffer.alloc(1) }), (e: unknown) =>
        isFlowError(e, 'INVALID_ARGUMENT'),
      );
      await wal.close();
    });

    it('trims nothing while nothing is flushed', async () => {
      const dir = freshDir();
      const { wal } = await openReplayed(dir);
      const written = Array.from({ length: 200 }, (_, i) => entry(`t/${i % 2}`, Math.floor(i / 2), 1, 300));
      for (const e of written) await wal.append(e);
      const before = wal.size();
      assert.equal(await wal.trim(() => 0), 0);
      assert.equal(wal.size(), before);
      await wal.close();
      const again = await openReplayed(dir);
      assertSameEntries(again.entries, written);
      await again.wal.close();
    });

    it('never trims an entry that is not flushed yet', async () => {
      const dir = freshDir();
      const { wal } = await openReplayed(dir);
      // Key a is written first and fully flushed; b is interleaved later and flushed only up to offset 40.
      const written: WalEntry[] = [];
      for (let i = 0; i < 100; i++) written.push(entry('a/0', i, 1, 500));
      for (let i = 0; i < 100; i++) {
        written.push(entry('b/0', i, 1, 500));
        written.push(entry('a/0', 100 + i, 1, 500));
      }
      for (const e of written) await wal.append(e);
      const flushed = (key: string): number => (key === 'a/0' ? 200 : 40);
      const before = wal.size();
      const released = await wal.trim(flushed);
      assert.ok(released >= 0);
      assert.equal(wal.size(), before - released, 'size() drops by what trim released');
      await wal.close();

      const again = await openReplayed(dir);
      const must = written.filter((e) => e.endOffset > flushed(e.key));
      const got = new Set(again.entries.map((e) => `${e.key}@${e.baseOffset}`));
      for (const e of must) assert.ok(got.has(`${e.key}@${e.baseOffset}`), `unflushed ${e.key}@${e.baseOffset} kept`);
      // Whatever survives keeps its relative order.
      const order = again.entries.filter((e) => e.key === 'b/0').map((e) => e.baseOffset);
      assert.deepEqual(
        order,
        [...order].sort((x, y) => x - y),
      );
      await again.wal.close();
    });

    it('releases space once everything is flushed, and keeps working afterwards', async () => {
      const dir = freshDir();
      const { wal } = await openReplayed(dir);
      for (let i = 0; i < 200; i++) await wal.append(entry(`f/${i % 3}`, i, 1, 400));
      const before = wal.size();
      // A second trim may be needed: a backend may first retire the file it is appending to.
      let released = await wal.trim(() => Number.MAX_SAFE_INTEGER);
      released += await wal.trim(() => Number.MAX_SAFE_INTEGER);
      assert.ok(released > 0, 'something was released');
      assert.equal(wal.size(), before - released);

      const later = [entry('f/0', 1000), entry('f/1', 1000)];
      for (const e of later) await wal.append(e);
      await wal.close();
      const again = await openReplayed(dir);
      // Only the later entries are unflushed; what else a backend still holds was flushed (and may be replayed).
      for (const e of later) {
        const last = again.entries.filter((x) => x.key === e.key).at(-1);
        assert.ok(last !== undefined, `${e.key} replayed`);
        assertSameEntries([last], [e]);
      }
      await again.wal.close();
    });

    if (opts.shared)
      it("replayKey (a WAL shared by brokers): one key's entries past an offset, in order, whoever wrote them", async () => {
        const dir = freshDir();
        const { wal: a } = await openReplayed(dir);
        assert.equal(typeof a.replayKey, 'function', 'a shared WAL has replayKey');
        // Two writers of one log (two brokers): the first writes k/0 and k/1, hands k/0 over; the second fences k/0
        // with a later epoch, reads it back and goes on.
        const b = await open(dir);
        const first = [entry('k/0', 0, 2, 64, 1), entry('k/1', 0, 1, 64, 1), entry('k/0', 2, 3, 64, 1)];
        for (const e of first) await a.append(e);
        await b.fence('k/0', 2);
        const got: WalEntry[] = [];
        await b.replayKey!('k/0', (e) => got.push(e));
        assertSameEntries(got, [first[0], first[2]]);
        assert.ok(got.every((e) => e.key === 'k/0' && e.epoch === 1));
        await assert.rejects(a.append(entry('k/0', 5, 1, 64, 1)), (e: unknown) => isFlowError(e, 'FENCED'), 'the old writer is fenced');
        const next = entry('k/0', 5, 2, 64, 2);
        await b.append(next);
        const after2: WalEntry[] = [];
        await b.replayKey!('k/0', (e) => after2.push(e), 2);
        assertSameEntries(after2, [first[2], next]);
        // Trimming k/0 on the second writer leaves the first writer's k/1 alone.
        await b.trim((key) => (key === 'k/0' ? 7 : 0));
        const rest: WalEntry[] = [];
        await a.replayKey!('k/1', (e) => rest.push(e));
        assertSameEntries(rest, [first[1]]);
        const none: WalEntry[] = [];
        await a.replayKey!('k/0', (e) => none.push(e));
        assert.deepEqual(none, []);
        await a.close();
        await b.close();
      });

    describe('ownership epochs (fencing)', () => {
      const fenced = (e: unknown) => isFlowError(e, 'FENCED');

      it('refuses with FENCED an append whose epoch is below the highest given for its key (by fence or append), writing nothing', async () => {
        const dir = freshDir();
        const { wal } = await openReplayed(dir);
        const acked: WalEntry[] = [entry('e/0', 0, 1, 64, 1)];
        await wal.append(acked[0]);
        await wal.fence('e/0', 3);
        await assert.rejects(wal.append(entry('e/0', 1, 1, 64, 2)), fenced, 'below the fence');
        await assert.rejects(wal.append(entry('e/0', 1, 1, 64, 1)), fenced, 'the old owner');
        acked.push(entry('e/0', 1, 1, 64, 3));
        await wal.append(acked[1]);
        // An append with a higher epoch raises the key's epoch too.
        acked.push(entry('e/0', 2, 1, 64, 5));
        await wal.append(acked[2]);
        await assert.rejects(wal.append(entry('e/0', 3, 1, 64, 4)), fenced, 'below an epoch given by an append');
        // fence() never lowers an epoch; other keys have epochs of their own.
        await wal.fence('e/0', 2);
        await assert.rejects(wal.append(entry('e/0', 3, 1, 64, 4)), fenced, 'fence() did not lower it');
        acked.push(entry('e/1', 0, 1, 64, 1));
        await wal.append(acked[3]);
        await wal.close();
        const again = await openReplayed(dir);
        assertSameEntries(again.entries, acked);
        await again.wal.close();
      });

      it('fences appends issued without awaiting in the order they were issued', async () => {
        const { wal } = await openReplayed(freshDir());
        const before = wal.append(entry('o/0', 0, 1, 64, 1));
        const fence = wal.fence('o/0', 2);
        await Promise.all([before, fence]);
        await assert.rejects(wal.append(entry('o/0', 1, 1, 64, 1)), fenced);
        await wal.append(entry('o/0', 1, 1, 64, 2));
        await wal.close();
      });

      it('refuses fence() after close with CLOSED', async () => {
        const { wal } = await openReplayed(freshDir());
        await wal.close();
        await assert.rejects(wal.fence('x/0', 1), (e: unknown) => isFlowError(e, 'CLOSED'));
      });
    });

    if (open.length >= 2)
      describe('when writes fail (a full disk, an I/O error)', () => {
        const full = (e: unknown) => isFlowError(e, 'STORAGE_FULL');
        // Large enough that a failing write lands whole blocks of it first (a torn tail to cut off).
        const big = (key: string, base: number) => entry(key, base, 1, 20_000);

        it('fails the appends, refuses a key past the hole, and takes it again where it resumes once writes work', async () => {
          const dir = freshDir();
          const disk = new FaultyDisk();
          const wal = await open(dir, disk);
          await collect(wal);
          const acked: WalEntry[] = [big('a/0', 0), big('b/0', 0)];
          for (const e of acked) await wal.append(e);
          disk.full = true;
          const failing = [wal.append(big('a/0', 1)), wal.append(big('a/0', 2)), wal.append(big('b/0', 1))];
          await Promise.all(failing.map((p) => assert.rejects(p, full)));
          assert.ok(disk.failedWrites > 0, 'the writes were tried');
          disk.full = false;
          // a/0 lost offsets 1 and 2: an entry at 3 would follow a hole.
          await assert.rejects(wal.append(big('a/0', 3)), full);
          for (const e of [big('a/0', 1), big('a/0', 2), big('b/0', 1), big('a/0', 3)]) {
            await wal.append(e);
            acked.push(e);
          }
          await wal.close();
          const again = await openReplayed(dir);
          assertSameEntries(again.entries, acked);
          await again.wal.close();
        });

        it('cuts off a failed write it could not cut at once before writing anything else, then goes on', async () => {
          const dir = freshDir();
          const disk = new FaultyDisk();
          const wal = await open(dir, disk);
          await collect(wal);
          const acked = [big('c/0', 0)];
          await wal.append(acked[0]);
          disk.full = true;
          disk.failCuts = true;
          await assert.rejects(wal.append(big('c/0', 1)), full);
          // The disk has room again, but the torn write still cannot be cut: nothing may be written after it.
          disk.full = false;
          await assert.rejects(wal.append(big('c/0', 1)), (e: unknown) => isFlowError(e, 'STORAGE_ERROR'));
          disk.failCuts = false;
          for (const e of [big('c/0', 1), big('c/0', 2)]) {
            await wal.append(e);
            acked.push(e);
          }
          await wal.close();
          const again = await openReplayed(dir);
          assertSameEntries(again.entries, acked);
          await again.wal.close();
        });

        it('after a crash with a failed write not cut off, recovers exactly the acknowledged entries', async () => {
          const dir = freshDir();
          const disk = new FaultyDisk();
          const wal = await open(dir, disk);
          await collect(wal);
          const acked = [big('d/0', 0), big('d/0', 1)];
          for (const e of acked) await wal.append(e);
          disk.full = true;
          disk.failCuts = true;
          await assert.rejects(wal.append(big('d/0', 2)), full);
          // "Crash": another instance opens the same files while the torn write is still there.
          const again = await openReplayed(dir);
          assertSameEntries(again.entries, acked);
          await again.wal.append(big('d/0', 2));
          await again.wal.close();
          const third = await openReplayed(dir);
          assertSameEntries(third.entries, [...acked, big('d/0', 2)]);
          await third.wal.close();
          // The crashed instance's descriptors (it writes nothing more).
          disk.full = false;
          disk.failCuts = false;
          await wal.close();
        });

        it("a fenced writer's append does not lift the key's fence after a failed write", async () => {
          const dir = freshDir();
          const disk = new FaultyDisk();
          const wal = await open(dir, disk);
          await collect(wal);
          const acked = [big('h/0', 0)];
          await wal.append(acked[0]);
          disk.full = true;
          await assert.rejects(wal.append(big('h/0', 1)), full);
          disk.full = false;
          await wal.fence('h/0', 2);
          // The old owner (epoch 1) resumes where the durable entries end: refused, and the hole stays fenced.
          await assert.rejects(wal.append(big('h/0', 1)), (e: unknown) => isFlowError(e, 'FENCED'));
          await assert.rejects(wal.append({ ...big('h/0', 2), epoch: 2 }), full, 'still refused past the hole');
          const resumed = { ...big('h/0', 1), epoch: 2 };
          await wal.append(resumed);
          acked.push(resumed);
          await wal.close();
          const again = await openReplayed(dir);
          assertSameEntries(again.entries, acked);
          await again.wal.close();
        });
      });
  });
}
