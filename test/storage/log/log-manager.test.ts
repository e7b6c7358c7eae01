import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { linkSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { decodeBatch, encodeBatch, Engine, ReadLease, setBaseOffset, type StreamDef } from '../../../src/core/index.js';
import { LogManager, type LogOptions } from '../../../src/storage/log/index.js';
import { buildSegment } from '../../../src/storage/log/segment.js';
import { SqliteMetastore } from '../../../src/storage/metastore/index.js';
import { FsObjectStore } from '../../../src/storage/objects/index.js';
import { FileWal, PartitionWal, type WriteAheadLog } from '../../../src/storage/wal/index.js';
import type { FileOpener } from '../../../src/storage/fs-util.js';
import { FaultyDisk } from '../../helpers/faulty-disk.js';
import { FlowError, isFlowError } from '../../../src/core/index.js';
import type { SegmentMeta } from '../../../src/storage/metastore/index.js';
import { openLogEngine } from '../../helpers/log-engine.js';

async function until(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const logger = pino({ level: process.env.LOG_LEVEL ?? 'silent' });
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

type Layout = 'shared' | 'partition';

function openWal(dir: string, layout: Layout, io?: FileOpener): Promise<WriteAheadLog> {
  return layout === 'shared' ? FileWal.open(join(dir, 'wal'), { io }) : PartitionWal.open(join(dir, 'wal-partitions'), { io });
}

async function openAll(dir: string, options: Partial<LogOptions> = {}, layout: Layout = 'shared', io?: FileOpener) {
  const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
  const objects = new FsObjectStore(join(dir, 'objects'));
  const wal = await openWal(dir, layout, io);
  const { log, engine } = await openLogEngine({ wal, objects, metastore }, logger, options);
  return {
    dir,
    metastore,
    objects,
    wal,
    log,
    engine,
    async close() {
      await log.close();
      await wal.close();
      await metastore.close();
    },
  };
}

function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'flowmq-log-'));
  dirs.push(d);
  return d;
}

const rec = (i: number, ts = 1_000_000 + i) => ({ key: null, value: Buffer.from(`m${i}`), headers: [], timestamp: ts });

async function values(engine: Engine, stream: string, partition: number, from = 0): Promise<string[]> {
  const out: string[] = [];
  let offset = from;
  for (;;) {
    const batches = await engine.read(stream, partition, offset, 1024);
    if (batches.length === 0) return out;
    for (const b of batches) {
      for (const r of decodeBatch(b)) {
        if (r.offset >= offset) out.push(r.value!.toString());
        offset = r.offset + 1;
      }
    }
  }
}

// Every test runs over both WAL layouts, except those about how segments are written with put (the partition
// layout moves the WAL's files instead).
for (const layout of ['shared', 'partition'] as const)
  describe(`LogManager (${layout} WAL)`, () => {
    const open = (dir: string, options: Partial<LogOptions> = {}) => openAll(dir, options, layout);

    it('assigns offsets synchronously and exposes data only once durable', async () => {
      const s = await open(tmp());
      await s.engine.createStream({ name: 't', partitions: 1 });
      const a = s.engine.produce('t', 0, encodeBatch([rec(0), rec(1)]));
      const b = s.engine.produce('t', 0, encodeBatch([rec(2)]));
      assert.equal(a.baseOffset, 0);
      assert.equal(b.baseOffset, 2);
      await Promise.all([a.durable, b.durable]);
      assert.deepEqual(s.engine.offsets('t', 0), { logStartOffset: 0, highWatermark: 3 });
      assert.deepEqual(await values(s.engine, 't', 0), ['m0', 'm1', 'm2']);
      assert.deepEqual(await values(s.engine, 't', 0, 1), ['m1', 'm2']);
      await s.close();
    });

    it('fails appends while the WAL cannot write, backs off, and takes them again by itself once it can', async () => {
      const dir = tmp();
      const disk = new FaultyDisk();
      const s = await openAll(dir, {}, layout, disk);
      await s.engine.createStream({ name: 't', partitions: 1 });
      const big = (i: number) => encodeBatch([{ ...rec(i), value: Buffer.alloc(20_000, i) }]);
      const acked: number[] = [];
      for (let i = 0; i < 3; i++) {
        await s.engine.produce('t', 0, big(i)).durable;
        acked.push(i);
      }
      disk.full = true;
      const full = (e: unknown) => isFlowError(e, 'STORAGE_FULL');
      const failing = [s.engine.produce('t', 0, big(3)), s.engine.produce('t', 0, big(4))];
      assert.deepEqual(
        failing.map((r) => r.baseOffset),
        [3, 4],
      );
      await Promise.all(failing.map((r) => assert.rejects(r.durable, full)));
      // Backing off: refused at once, with the failure's (retriable) code.
      assert.throws(() => s.engine.produce('t', 0, big(5)), full);
      disk.full = false;
      // By itself, with no restart: appends are taken again after the backoff, at the offsets that failed.
      let r: ReturnType<Engine['produce']> | null = null;
      const deadline = Date.now() + 20_000;
      while (r === null) {
        try {
          r = s.engine.produce('t', 0, big(5));
        } catch (err) {
          assert.ok(full(err), String(err));
          assert.ok(Date.now() < deadline, 'the partition takes appends again');
          await new Promise((res) => setTimeout(res, 20));
        }
      }
      assert.equal(r.baseOffset, 3, 'the failed offsets are given out again');
      await r.durable;
      acked.push(5);
      for (const i of [6, 7]) {
        await s.engine.produce('t', 0, big(i)).durable;
        acked.push(i);
      }
      const value = (i: number) => Buffer.alloc(20_000, i).toString();
      assert.deepEqual(await values(s.engine, 't', 0), acked.map(value));
      assert.ok(s.log.stats.failedAppends >= 2 && s.log.stats.rewinds >= 1);
      // Restart: exactly the acknowledged batches, in order, at contiguous offsets.
      await s.close();
      const s2 = await openAll(dir, {}, layout);
      assert.deepEqual(await values(s2.engine, 't', 0), acked.map(value));
      assert.equal(s2.engine.offsets('t', 0).highWatermark, acked.length);
      await s2.close();
    });

    it('retries failed seals (object store full, a metastore commit whose sync failed) with backoff, losing nothing', async () => {
      const dir = tmp();
      const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
      const realObjects = new FsObjectStore(join(dir, 'objects'));
      const full = { objects: true, commitLandsThenFails: false };
      const noSpace = () => new FlowError('STORAGE_FULL', 'cannot write object: ENOSPC');
      const objects = new Proxy(realObjects, {
        get(target, prop) {
          if ((prop === 'put' || prop === 'adopt') && full.objects) return async () => Promise.reject(noSpace());
          const v = Reflect.get(target, prop, target) as unknown;
          return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        },
      });
      const meta = new Proxy(metastore, {
        get(target, prop) {
          if (prop === 'commitSegment' && full.commitLandsThenFails) {
            return async (seg: SegmentMeta, epoch: number) => {
              await target.commitSegment(seg, epoch);
              full.commitLandsThenFails = false;
              throw new FlowError('STORAGE_FULL', 'cannot sync metastore journal: ENOSPC');
            };
          }
          const v = Reflect.get(target, prop, target) as unknown;
          return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        },
      });
      const wal = await openWal(dir, layout);
      const log = await LogManager.open({ wal, objects, metastore: meta, logger, options: { checkIntervalMs: 20, segmentBytes: 300 } });
      const engine = new Engine(log, metastore);
      await engine.load();
      log.finishRecovery();
      await engine.createStream({ name: 't', partitions: 1 });
      const acked: string[] = [];
      for (let i = 0; i < 20; i++) {
        await engine.produce('t', 0, encodeBatch([rec(i)])).durable;
        acked.push(`m${i}`);
      }
      await until(() => log.stats.failedSeals >= 3, 'seals tried and failed again after their backoff');
      assert.equal(log.describe('t')[0].flushedOffset, 0, 'nothing sealed while the object store is full');
      full.objects = false;
      full.commitLandsThenFails = true;
      // The complete segments are sealed by the background checks, the first of them through a commit that landed but
      // was reported failed (and is retried); a flush then seals the rest.
      await until(() => log.stats.sealedSegments >= 2, `segments sealed once space returned (${JSON.stringify(log.stats)})`, 20_000);
      assert.equal(full.commitLandsThenFails, false, 'a commit landed and was reported failed');
      await log.flushAll();
      assert.equal(log.describe('t')[0].flushedOffset, 20);
      const segs = await metastore.listSegments('t', 0);
      for (let i = 1; i < segs.length; i++) assert.equal(segs[i].baseOffset, segs[i - 1].endOffset, 'segments are contiguous');
      assert.deepEqual(await values(engine, 't', 0), acked);
      await log.close();
      await wal.close();
      await metastore.close();
      const s2 = await openAll(dir, {}, layout);
      assert.deepEqual(await values(s2.engine, 't', 0), acked);
      await s2.close();
    });

    it('seals segments by size into the object store and reads across objects and memory', async () => {
      // No sealed batches kept in memory: reads below the tail go to the objects.
      const s = await open(tmp(), { segmentBytes: 300, recentBytes: 0 });
      await s.engine.createStream({ name: 't', partitions: 1 });
      for (let i = 0; i < 40; i++) await s.engine.produce('t', 0, encodeBatch([rec(i)])).durable;
      await s.log.flushAll();
      const segs = await s.metastore.listSegments('t', 0);
      assert.ok(segs.length >= 3, `several segments (${segs.length})`);
      assert.equal(segs[0].baseOffset, 0);
      for (let i = 1; i < segs.length; i++) assert.equal(segs[i].baseOffset, segs[i - 1].endOffset, 'segments are contiguous');
      for (let i = 40; i < 45; i++) await s.engine.produce('t', 0, encodeBatch([rec(i)])).durable;
      const before = s.log.stats.objectReads;
      assert.deepEqual(
        await values(s.engine, 't', 0),
        Array.from({ length: 45 }, (_, i) => `m${i}`),
      );
      assert.ok(s.log.stats.objectReads > before);
      assert.equal(await s.engine.offsetForTimestamp('t', 0, 1_000_000 + 17), 17);
      assert.equal(await s.engine.offsetForTimestamp('t', 0, 1_000_000 + 42), 42);
      assert.equal(await s.engine.offsetForTimestamp('t', 0, 9_000_000), 45);
      await s.close();
    });

    it('recovers acknowledged data from the WAL after a crash, and from objects after a flush', async () => {
      const dir = tmp();
      const s1 = await open(dir, { segmentBytes: 1 << 20 });
      await s1.engine.createStream({ name: 't', partitions: 2 });
      for (let i = 0; i < 10; i++) await s1.engine.produce('t', i % 2, encodeBatch([rec(i)])).durable;
      await s1.log.flushAll(); // offsets 0..4 of each partition go to objects
      for (let i = 10; i < 20; i++) await s1.engine.produce('t', i % 2, encodeBatch([rec(i)])).durable;
      // "Crash": no close, no flush. A second instance opens the same files.
      const s2 = await open(dir);
      assert.deepEqual(await values(s2.engine, 't', 0), ['m0', 'm2', 'm4', 'm6', 'm8', 'm10', 'm12', 'm14', 'm16', 'm18']);
      assert.deepEqual(await values(s2.engine, 't', 1), ['m1', 'm3', 'm5', 'm7', 'm9', 'm11', 'm13', 'm15', 'm17', 'm19']);
      assert.equal(s2.log.stats.recoveredBatches, 10);
      const r = s2.engine.produce('t', 0, encodeBatch([rec(99)]));
      assert.equal(r.baseOffset, 10, 'offsets continue after recovery');
      await r.durable;
      await s2.close();
      await s1.close().catch(() => undefined);
    });

    it('trims the WAL once its data is in the object store', async () => {
      const dir = tmp();
      const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
      const wal = await FileWal.open(join(dir, 'wal'), { maxFileBytes: 2048 });
      const log = await LogManager.open({ wal, objects: new FsObjectStore(join(dir, 'objects')), metastore, logger, options: { checkIntervalMs: 60_000 } });
      const engine = new Engine(log, metastore);
      await engine.createStream({ name: 't', partitions: 1 });
      for (let i = 0; i < 100; i++) await engine.produce('t', 0, encodeBatch([rec(i)])).durable;
      const full = wal.size();
      await log.flushAll();
      await log.flushAll(); // the active WAL file rolls on the first pass and goes on the second
      assert.ok(wal.size() < full / 4, `WAL shrank from ${full} to ${wal.size()}`);
      assert.equal((await values(engine, 't', 0)).length, 100);
      await log.close();
      await wal.close();
      await metastore.close();
    });

    if (layout === 'shared') {
      /** An object store whose puts are watched (and may be held back) by the test. */
      function watchedObjects(dir: string, delayMs = 0) {
        const inner = new FsObjectStore(join(dir, 'objects'));
        const w = {
          active: 0,
          /** Per put: whether it was asked to yield to latency, and how many other puts were running as it began. */
          puts: [] as Array<{ yieldToLatency: boolean; others: number }>,
          gate: Promise.resolve() as Promise<void>,
          objects: Object.create(inner) as FsObjectStore,
        };
        w.objects.put = async (key, data, options) => {
          w.puts.push({ yieldToLatency: options?.yieldToLatency === true, others: w.active });
          w.active++;
          try {
            await w.gate;
            if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
            await inner.put(key, data, options);
          } finally {
            w.active--;
          }
        };
        return w;
      }

      /** A log over an object store the test watches; with `gated`, puts wait until `release()`. */
      async function openWatched(options: Partial<LogOptions>, o: { delayMs?: number; gated?: boolean; maxFileBytes?: number } = {}) {
        const dir = tmp();
        const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
        const w = watchedObjects(dir, o.delayMs);
        let release: () => void = () => undefined;
        if (o.gated) w.gate = new Promise<void>((r) => (release = r));
        const wal = await FileWal.open(join(dir, 'wal'), { maxFileBytes: o.maxFileBytes });
        const log = await LogManager.open({ wal, objects: w.objects, metastore, logger, options: { checkIntervalMs: 60_000, ...options } });
        const engine = new Engine(log, metastore);
        return {
          dir,
          metastore,
          w,
          wal,
          log,
          engine,
          release: () => release(),
          async close() {
            await log.close();
            await wal.close();
            await metastore.close();
          },
        };
      }

      it('writes one segment object at a time across partitions (two while one catches up), sealing what became durable while it waited', async () => {
        const { w, wal, log, engine, close } = await openWatched({ segmentBytes: 512 }, { delayMs: 20, maxFileBytes: 4096 });
        await engine.createStream({ name: 't', partitions: 4 });
        for (let i = 0; i < 200; i++) await engine.produce('t', i % 4, encodeBatch([rec(i)])).durable;
        await log.flushAll();
        const puts = w.puts.length;
        assert.ok(puts >= 4 && puts < 200, `${puts} segments for 200 batches over 4 partitions`);
        for (const put of w.puts) {
          // A partition keeping up seals alone; one catching up may run beside one other seal.
          assert.ok(put.others <= (put.yieldToLatency ? 0 : 1), `a seal began with ${put.others} others running`);
        }
        assert.ok(
          w.puts.some((put) => put.yieldToLatency),
          'seals of partitions keeping up yield to latency',
        );
        for (let p = 0; p < 4; p++) assert.equal((await values(engine, 't', p)).length, 50);
        // Every seal trims the WAL by itself: nothing but the active file's remains.
        assert.ok(wal.fileCount() <= 2, `${wal.fileCount()} WAL files left`);
        await close();
      });

      it('seals a backlog in segments of at most segmentBytes each, in bulk steps', async () => {
        const batchBytes = encodeBatch([rec(0)]).length;
        const { metastore, w, log, engine, release, close } = await openWatched({ segmentBytes: 10 * batchBytes }, { gated: true });
        await engine.createStream({ name: 'b', partitions: 1 });
        // The first seal is held at the object store while 95 more batches arrive: a backlog of ~9 segments.
        for (let i = 0; i < 100; i++) await engine.produce('b', 0, encodeBatch([rec(i)])).durable;
        release();
        await log.flushAll();
        const segs = await metastore.listSegments('b', 0);
        assert.equal(segs[segs.length - 1].endOffset, 100);
        for (const seg of segs) {
          assert.ok(seg.endOffset - seg.baseOffset <= 10, `segment [${seg.baseOffset}, ${seg.endOffset}) holds more than segmentBytes`);
        }
        assert.ok(segs.length >= 10, `${segs.length} segments`);
        assert.ok(
          w.puts.some((put) => !put.yieldToLatency),
          'a partition catching up writes in bulk steps',
        );
        assert.deepEqual(
          await values(engine, 'b', 0),
          Array.from({ length: 100 }, (_, i) => `m${i}`),
        );
        await close();
      });

      it('holds acknowledgements back while the tails exceed maxUnsealedBytes, and lets them go as seals catch up', async () => {
        // Batches of one size, so that the limit falls between two appends.
        const fixed = (n: number) => ({ ...rec(n), value: Buffer.from(`m${String(n).padStart(3, '0')}`) });
        const batchBytes = encodeBatch([fixed(0)]).length;
        const { log, engine, release, close } = await openWatched({ segmentBytes: 4 * batchBytes, maxUnsealedBytes: 20 * batchBytes }, { gated: true });
        await engine.createStream({ name: 'h', partitions: 2 });
        // Under the limit: acknowledged as soon as durable, although the first seal is stuck.
        for (let i = 0; i < 20; i++) await engine.produce('h', i % 2, encodeBatch([fixed(i)])).durable;
        assert.equal(log.stats.throttledAppends, 0);
        // Over it: durable (readers see it) but not acknowledged.
        let acked = 0;
        const held = Array.from({ length: 6 }, (_, i) => engine.produce('h', i % 2, encodeBatch([fixed(20 + i)])).durable.then(() => acked++));
        await new Promise((r) => setTimeout(r, 200));
        assert.equal(acked, 0, 'no acknowledgement while over the limit');
        assert.equal(log.stats.throttledAppends, 6);
        assert.equal(engine.offsets('h', 0).highWatermark, 13, 'the held batches are durable and readable');
        release();
        await Promise.all(held);
        assert.equal(acked, 6);
        const tail = log.describe('h').reduce((n, p) => n + p.tailBytes, 0);
        assert.ok(tail <= 20 * batchBytes, `${tail} bytes left unsealed`);
        await close();
      });

      it('seals tails below segmentBytes when together they exceed maxUnsealedBytes, so acknowledgements do not wait for segmentMs', async () => {
        const batchBytes = encodeBatch([rec(100)]).length;
        const { w, log, engine, close } = await openWatched({ segmentBytes: 1 << 20, segmentMs: 60_000, maxUnsealedBytes: 10 * batchBytes });
        await engine.createStream({ name: 'many', partitions: 8 });
        const acks = Array.from({ length: 40 }, (_, i) => engine.produce('many', i % 8, encodeBatch([rec(100 + i)])).durable);
        await Promise.all(acks);
        assert.ok(log.stats.throttledAppends > 0, 'the limit was reached');
        assert.ok(w.puts.length > 0, 'small tails were sealed to make room');
        for (let p = 0; p < 8; p++) assert.equal((await values(engine, 'many', p)).length, 5);
        await close();
      });

      it('lets held-back acknowledgements go at close: their data is durable in the WAL', async () => {
        const batchBytes = encodeBatch([rec(0)]).length;
        // Gated and never released: the object store never answers.
        const { dir, wal, log, engine, metastore } = await openWatched({ segmentBytes: 2 * batchBytes, maxUnsealedBytes: 3 * batchBytes }, { gated: true });
        await engine.createStream({ name: 'c', partitions: 1 });
        const acks = Array.from({ length: 6 }, (_, i) => engine.produce('c', 0, encodeBatch([rec(i)])).durable);
        while (engine.offsets('c', 0).highWatermark < 6) await new Promise((r) => setTimeout(r, 5));
        await log.close(50);
        await Promise.all(acks);
        assert.ok(log.stats.throttledAppends > 0);
        await wal.close();
        await metastore.close();
        const reopened = await open(dir);
        assert.deepEqual(await values(reopened.engine, 'c', 0), ['m0', 'm1', 'm2', 'm3', 'm4', 'm5']);
        await reopened.close();
      });
    }

    it('applies retention by deleting whole expired segments', async () => {
      const s = await open(tmp(), { segmentBytes: 200 });
      await s.engine.createStream({ name: 'r', partitions: 1, retentionMs: 60_000 });
      const old = Date.now() - 3_600_000;
      for (let i = 0; i < 10; i++) await s.engine.produce('r', 0, encodeBatch([rec(i, old)])).durable;
      await s.log.flushAll();
      for (let i = 10; i < 12; i++) await s.engine.produce('r', 0, encodeBatch([rec(i, Date.now())])).durable;
      await s.log.flushAll();
      // A safety net only: each expired segment costs synced metastore writes, slow on a busy disk (5 s was once not enough).
      const deadline = Date.now() + 30_000;
      while (s.engine.offsets('r', 0).logStartOffset < 10 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.equal(s.engine.offsets('r', 0).logStartOffset, 10);
      assert.deepEqual(await values(s.engine, 'r', 0, 10), ['m10', 'm11']);
      const keys = (await s.objects.list('streams/r/')).map((o) => o.key);
      assert.equal(keys.length, (await s.metastore.listSegments('r', 0)).length, 'expired objects are deleted');
      await s.close();
    });

    it('retention passes do not overlap: a slow metastore (each write 60 ms, the pass every 20 ms) loses no kept segment', async () => {
      const dir = tmp();
      const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
      const slow = new Proxy(metastore, {
        get(target, prop, receiver) {
          const v = Reflect.get(target, prop, receiver) as unknown;
          if (prop !== 'setLogStartOffset' && prop !== 'deleteSegment') return typeof v === 'function' ? v.bind(target) : v;
          return async (...args: unknown[]) => {
            await new Promise((r) => setTimeout(r, 60));
            return (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          };
        },
      });
      const objects = new FsObjectStore(join(dir, 'objects'));
      const wal = await openWal(dir, layout);
      const { log, engine } = await openLogEngine({ wal, objects, metastore: slow }, logger, { segmentBytes: 200 });
      // Made without retention: the pass starts once every segment is sealed.
      await engine.createStream({ name: 'ro', partitions: 1 });
      const old = Date.now() - 3_600_000;
      for (let i = 0; i < 6; i++) await engine.produce('ro', 0, encodeBatch([rec(i, old)])).durable;
      await log.flushAll();
      for (let i = 6; i < 9; i++) {
        await engine.produce('ro', 0, encodeBatch([rec(i, Date.now())])).durable;
        await log.flushAll();
      }
      const kept = (await metastore.listSegments('ro', 0)).filter((seg) => seg.baseOffset >= 6).length;
      assert.ok(kept >= 1);
      await engine.setSettings('ro', { retentionMs: 60_000 });
      await until(() => engine.offsets('ro', 0).logStartOffset >= 6, 'retention of the six old records', 30_000);
      // The pass moves the log start first, then deletes the segment's metadata, then its object.
      const deadline = Date.now() + 30_000;
      const oldObjects = async () => (await objects.list('streams/ro/')).filter((o) => /\/0000000000000000000[0-5]-/.test(o.key));
      let segs = await metastore.listSegments('ro', 0);
      while (segs.some((seg) => seg.baseOffset < 6) || (await oldObjects()).length > 0) {
        assert.ok(Date.now() < deadline, 'every expired segment deleted from the metastore and the object store');
        await new Promise((r) => setTimeout(r, 20));
        segs = await metastore.listSegments('ro', 0);
      }
      // Two passes at once would each shift a segment for one deletion: a kept one would leave the log's list.
      assert.equal(engine.offsets('ro', 0).logStartOffset, 6);
      assert.equal(log.describe('ro')[0].segments, segs.length, 'the log lists the segments the metastore keeps');
      assert.deepEqual(await values(engine, 'ro', 0, 6), ['m6', 'm7', 'm8']);
      assert.equal((await objects.list('streams/ro/')).length, segs.length, 'expired objects deleted, kept ones not');
      await log.close();
      await wal.close();
      await metastore.close();
    });

    it('applies retention by size (retention.bytes): the oldest whole segments go while the rest holds enough', async () => {
      const s = await open(tmp(), { segmentBytes: 200, checkIntervalMs: 50 });
      const rb = 600;
      await s.engine.createStream({ name: 'rb', partitions: 1, retentionBytes: rb });
      for (let i = 0; i < 30; i++) await s.engine.produce('rb', 0, encodeBatch([rec(i, Date.now())])).durable;
      await s.log.flushAll();
      const size = async () => (await s.metastore.listSegments('rb', 0)).reduce((n, seg) => n + seg.size, 0);
      // Kafka's rule: delete the oldest while what remains without it still holds retention.bytes.
      const settled = async () => {
        const segs = await s.metastore.listSegments('rb', 0);
        const total = segs.reduce((n, seg) => n + seg.size, 0);
        return segs.length > 0 && total - segs[0].size < rb;
      };
      const deadline = Date.now() + 30_000;
      while (!(await settled()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.ok(await settled(), 'retention by size applied');
      assert.ok((await size()) >= rb, 'no more than needed is deleted');
      const start = s.engine.offsets('rb', 0).logStartOffset;
      assert.ok(start > 0);
      assert.equal((await s.metastore.listSegments('rb', 0))[0].baseOffset, start);
      assert.deepEqual((await values(s.engine, 'rb', 0, start)).at(-1), 'm29', 'the newest records stay');
      await s.close();
    });

    it("cuts and seals by a stream's own segment size and age (segment.bytes, segment.ms)", async () => {
      const s = await open(tmp(), { segmentBytes: 200, segmentMs: 3_600_000, checkIntervalMs: 50 });
      await s.engine.createStream({ name: 'small', partitions: 1 });
      await s.engine.createStream({ name: 'big', partitions: 1, segmentBytes: 2 * 1024 * 1024 });
      // Below the 1 MiB floor: taken as 1 MiB, not as one segment per batch.
      await s.engine.createStream({ name: 'tiny', partitions: 1, segmentBytes: 14 });
      await s.engine.createStream({ name: 'aged', partitions: 1, segmentBytes: 2 * 1024 * 1024, segmentMs: 100 });
      for (const name of ['small', 'big', 'tiny', 'aged']) {
        for (let i = 0; i < 10; i++) await s.engine.produce(name, 0, encodeBatch([rec(i, Date.now())])).durable;
      }
      await until(() => s.log.describe('small')[0].segments >= 2, 'the log\'s own segment size seals "small"');
      await until(() => s.log.describe('aged')[0].segments >= 1, 'segment.ms seals "aged"');
      assert.equal(s.log.describe('big')[0].segments, 0, 'nothing of "big" reached its segment size');
      assert.equal(s.log.describe('tiny')[0].segments, 0, 'the floor holds');
      // Back to the log's default: sealed by size at the next pass.
      await s.engine.setSettings('big', { retentionMs: null });
      await until(() => s.log.describe('big')[0].segments >= 1, 'the default applies again');
      assert.deepEqual(
        await values(s.engine, 'big', 0),
        Array.from({ length: 10 }, (_, i) => `m${i}`),
      );
      await s.close();
    });

    it('never resurrects the data of a deleted stream in a new stream of the same name', async () => {
      const dir = tmp();
      const s1 = await open(dir);
      await s1.engine.createStream({ name: 'x', partitions: 1 });
      await s1.engine.produce('x', 0, encodeBatch([rec(1)])).durable;
      await s1.engine.deleteStream('x');
      await new Promise((r) => setTimeout(r, 2)); // a new incarnation has a new createdAt
      const def: StreamDef = await s1.engine.createStream({ name: 'x', partitions: 1 });
      assert.ok(def.createdAt > 0);
      await s1.close();
      const s2 = await open(dir);
      assert.deepEqual(s2.engine.offsets('x', 0), { logStartOffset: 0, highWatermark: 0 });
      await s2.close();
    });

    // Large batches (>= 64 KiB) are copied into reused chunks (batch-memory.ts).
    const big = (i: number, n = 8) =>
      encodeBatch(
        Array.from({ length: n }, (_, k) => ({ key: null, value: Buffer.alloc(16 * 1024, (i * 8 + k) % 251), headers: [], timestamp: 1_000_000 + i })),
      );
    const firstValue = (b: Buffer) => decodeBatch(b)[0].value![0];

    it('keeps its own copy of an appended batch: the caller may reuse its buffer at once', async () => {
      const s = await open(tmp());
      await s.engine.createStream({ name: 'c', partitions: 1 });
      for (const batch of [big(1), encodeBatch([rec(5)])]) {
        const { durable } = s.engine.produce('c', 0, batch);
        batch.fill(0xee); // e.g. the Kafka adapter's request frame, given to the next request
        await durable;
      }
      const [a, b] = await s.engine.read('c', 0, 0, 1 << 20);
      assert.equal(firstValue(a), 8);
      assert.equal(decodeBatch(b)[0].value!.toString(), 'm5');
      assert.ok(s.log.memoryStats.pooledBatches >= 1 && s.log.memoryStats.ownBatches >= 1);
      await s.close();
    });

    it('reuses tail memory after seals, but never while a reader holds it through a lease', async () => {
      const s = await open(tmp(), { segmentBytes: 512 * 1024, recentBytes: 1024 * 1024 });
      await s.engine.createStream({ name: 'm', partitions: 1 });
      const n = 40; // ~5 MiB: more than a chunk
      for (let i = 0; i < n; i++) await s.engine.produce('m', 0, big(i)).durable;
      const lease = new ReadLease();
      const leased = await s.engine.read('m', 0, (n - 3) * 8, 1 << 20, lease);
      assert.ok(!lease.empty, 'the tail batches handed out are pinned');
      const copies = await s.engine.read('m', 0, (n - 3) * 8, 1 << 20);
      assert.ok(
        copies.every((c, i) => c.equals(leased[i]) && c.buffer !== leased[i].buffer),
        'without a lease: copies',
      );
      const expected = leased.map((b) => Buffer.from(b));
      // Seal everything and keep producing: sealed chunks are reused by new batches...
      await s.log.flushAll();
      for (let i = n; i < 3 * n; i++) {
        await s.engine.produce('m', 0, big(i)).durable;
        if (i % 8 === 0) await s.log.flushAll();
      }
      // ...but not the one the lease holds.
      assert.ok(
        leased.every((b, i) => b.equals(expected[i])),
        'leased batches intact',
      );
      lease.release();
      for (let i = 3 * n; i < 4 * n; i++) await s.engine.produce('m', 0, big(i)).durable;
      // Everything reads back right, from segments and from the tail.
      let offset = 0;
      let batchNo = 0;
      while (offset < 4 * n * 8) {
        const batches = await s.engine.read('m', 0, offset, 1 << 20);
        for (const b of batches) {
          const recs = decodeBatch(b);
          assert.equal(recs[0].value![0], (batchNo * 8) % 251, `batch ${batchNo}`);
          assert.equal(recs[7].value![100], (batchNo * 8 + 7) % 251);
          batchNo++;
          offset = recs[recs.length - 1].offset + 1;
        }
      }
      assert.equal(batchNo, 4 * n);
      assert.ok(s.log.memoryStats.chunkBytes <= 4 * 4 * 1024 * 1024, `chunks are reused, not piled up: ${s.log.memoryStats.chunkBytes}`);
      await s.close();
    });

    it('keeps the most recently sealed batches readable from memory, within its budget', async () => {
      // Room for ~11 of these batches: each partition's last segment (~4 batches each), not the first ones.
      const s = await open(tmp(), { segmentBytes: 512 * 1024, recentBytes: 1536 * 1024 });
      await s.engine.createStream({ name: 'r', partitions: 2 });
      for (let i = 0; i < 24; i++) await s.engine.produce('r', i % 2, big(i)).durable; // ~1.5 MiB per partition
      await s.log.flushAll();
      assert.equal(s.engine.offsets('r', 0).highWatermark, 12 * 8);
      const reads = () => s.log.stats.objectReads;
      const before = reads();
      // The last batches sealed (of both partitions together) are still in memory: the newest of each.
      const latest = await s.engine.read('r', 1, 11 * 8, 1 << 20);
      assert.equal(firstValue(latest[0]), (23 * 8) % 251);
      const sinceBefore = await s.engine.read('r', 0, 10 * 8, 1 << 20);
      assert.deepEqual(sinceBefore.map(firstValue), [(20 * 8) % 251, (22 * 8) % 251], 'recent batches, then the tail (empty)');
      assert.equal(reads(), before, 'no object read');
      // Older ones come from the segment objects.
      const old = await s.engine.read('r', 0, 0, 1 << 20);
      assert.equal(firstValue(old[0]), 0);
      assert.ok(reads() > before);
      // A recent batch read with a lease is pinned like a tail batch; one without is a copy.
      const lease = new ReadLease();
      const [pinned] = await s.engine.read('r', 1, 11 * 8, 1 << 20, lease);
      assert.ok(!lease.empty);
      const [copy] = await s.engine.read('r', 1, 11 * 8, 1 << 20);
      assert.ok(copy.equals(pinned) && copy.buffer !== pinned.buffer);
      lease.release();
      await s.close();
    });

    it("gives a deleted stream's share of the read cache to the others", async () => {
      const s = await open(tmp(), { segmentBytes: 512 * 1024, recentBytes: 1536 * 1024 });
      await s.engine.createStream({ name: 'old', partitions: 1 });
      for (let i = 0; i < 12; i++) await s.engine.produce('old', 0, big(i)).durable;
      await s.log.flushAll();
      await s.engine.deleteStream('old');
      await s.engine.createStream({ name: 'new', partitions: 1 });
      for (let i = 0; i < 6; i++) await s.engine.produce('new', 0, big(i)).durable;
      await s.log.flushAll();
      const before = s.log.stats.objectReads;
      const batches = await s.engine.read('new', 0, 0, 8 << 20);
      assert.deepEqual(batches.map(firstValue), [0, 8, 16, 24, 32, 40]);
      assert.equal(s.log.stats.objectReads, before, 'all six from memory');
      await s.close();
    });

    it("does not reuse the memory of a deleted stream's batches", async () => {
      const s = await open(tmp());
      await s.engine.createStream({ name: 'gone', partitions: 1 });
      for (let i = 0; i < 4; i++) await s.engine.produce('gone', 0, big(i)).durable;
      const lease = new ReadLease();
      const held = await s.engine.read('gone', 0, 0, 1 << 20, lease);
      const expected = held.map((b) => Buffer.from(b));
      await s.engine.deleteStream('gone');
      lease.release();
      await s.engine.createStream({ name: 'next', partitions: 1 });
      for (let i = 10; i < 20; i++) await s.engine.produce('next', 0, big(i)).durable;
      assert.ok(held.every((b, i) => b.equals(expected[i])));
      await s.close();
    });
  });

describe('LogManager over the partition WAL layout', () => {
  it("makes the WAL's files the segment objects, writing no segment itself", async () => {
    const s = await openAll(tmp(), { segmentBytes: 2000, recentBytes: 0 }, 'partition');
    let puts = 0;
    const put = s.objects.put.bind(s.objects);
    s.objects.put = (...args) => {
      puts++;
      return put(...args);
    };
    await s.engine.createStream({ name: 'a', partitions: 2 });
    for (let i = 0; i < 200; i++) await s.engine.produce('a', i % 2, encodeBatch([rec(i)])).durable;
    await s.log.flushAll();
    assert.equal(puts, 0, 'no segment written with put');
    const segs = [...(await s.metastore.listSegments('a', 0)), ...(await s.metastore.listSegments('a', 1))];
    assert.ok(segs.length >= 4, `${segs.length} segments`);
    assert.equal(s.log.stats.adoptedSegments, segs.length);
    assert.equal(s.wal.size(), 0, 'nothing left in the WAL');
    const before = s.log.stats.objectReads;
    assert.deepEqual(
      await values(s.engine, 'a', 0),
      Array.from({ length: 100 }, (_, i) => `m${2 * i}`),
    );
    assert.ok(s.log.stats.objectReads > before, 'read from the adopted objects');
    assert.equal(await s.engine.offsetForTimestamp('a', 1, 1_000_000 + 101), 50);
    await s.close();
    const again = await openAll(s.dir, {}, 'partition');
    assert.deepEqual(
      await values(again.engine, 'a', 1),
      Array.from({ length: 100 }, (_, i) => `m${2 * i + 1}`),
    );
    await again.close();
  });

  it('keeps a WAL file whose segment was linked but never committed (a crash in between): its object is deleted at the next open, the data replayed', async () => {
    const dir = tmp();
    const s1 = await openAll(dir, { segmentBytes: 1 << 20 }, 'partition');
    await s1.engine.createStream({ name: 'o', partitions: 1 });
    for (let i = 0; i < 30; i++) await s1.engine.produce('o', 0, encodeBatch([rec(i)])).durable;
    // The metastore fails the commit once: the WAL file is already linked as the object.
    const commit = s1.metastore.commitSegment.bind(s1.metastore);
    let failed = 0;
    s1.metastore.commitSegment = async (seg, epoch) => {
      if (failed++ === 0) throw new Error('metastore unavailable');
      return commit(seg, epoch);
    };
    await s1.log.flushAll();
    assert.equal(failed, 1);
    assert.equal((await s1.metastore.listSegments('o', 0)).length, 0);
    const objects = await s1.objects.list('streams/o/');
    assert.equal(objects.length, 1, 'the linked file is an object');
    assert.match(objects[0].key, /\/0{20}-1\.seg$/, "named by its base offset and the writer's epoch");
    assert.ok(s1.wal.size() > 0, 'and still in the WAL');
    // "Crash": a second instance opens the same files.
    const s2 = await openAll(dir, {}, 'partition');
    assert.equal(s2.log.stats.garbageObjects, 1);
    assert.equal(s2.log.stats.recoveredBatches, 30);
    assert.deepEqual(await s2.objects.list('streams/o/'), [], 'the uncommitted object is gone');
    assert.deepEqual(
      await values(s2.engine, 'o', 0),
      Array.from({ length: 30 }, (_, i) => `m${i}`),
    );
    const r = s2.engine.produce('o', 0, encodeBatch([rec(30)]));
    assert.equal(r.baseOffset, 30, 'offsets continue after the recovered entries');
    await r.durable;
    await s2.log.flushAll();
    const segs = await s2.metastore.listSegments('o', 0);
    assert.deepEqual(
      segs.map((x) => [x.baseOffset, x.endOffset]),
      [
        [0, 30],
        [30, 31],
      ],
    );
    assert.ok(
      segs.every((x) => x.objectKey.endsWith('-2.seg')),
      'sealed under the new epoch',
    );
    await s2.close();
    await s1.close().catch(() => undefined);
    const s3 = await openAll(dir, {}, 'partition');
    assert.deepEqual(
      await values(s3.engine, 'o', 0),
      Array.from({ length: 31 }, (_, i) => `m${i}`),
    );
    await s3.close();
  });

  it('leaves a WAL file whose segment was committed before the WAL deleted it (a crash in between) byte for byte, and trims it', async () => {
    const dir = tmp();
    const s1 = await openAll(dir, { segmentBytes: 1 << 20 }, 'partition');
    await s1.engine.createStream({ name: 'c', partitions: 1 });
    for (let i = 0; i < 20; i++) await s1.engine.produce('c', 0, encodeBatch([rec(i)])).durable;
    // The WAL's own delete of the handed-over file is what a crash prevents: keep the file by a second link.
    const walFiles = (): string[] => {
      const out: string[] = [];
      const walk = (d: string): void => {
        for (const e of readdirSync(d, { withFileTypes: true })) {
          if (e.isDirectory()) walk(join(d, e.name));
          else if (e.name.endsWith('.wal')) out.push(join(d, e.name));
        }
      };
      walk(join(dir, 'wal-partitions'));
      return out;
    };
    const kept = walFiles().filter((f) => statSync(f).size > 0);
    assert.equal(kept.length, 1);
    linkSync(kept[0], `${kept[0]}.keep`);
    await s1.log.flushAll();
    const [seg] = await s1.metastore.listSegments('c', 0);
    assert.equal(s1.log.stats.adoptedSegments, 1);
    const object = readFileSync(join(dir, 'objects', ...seg.objectKey.split('/')));
    await s1.close();
    // Put the file back where the WAL had it, as if the process had died before deleting it.
    renameSync(`${kept[0]}.keep`, kept[0]);
    const s2 = await openAll(dir, {}, 'partition');
    assert.ok(readFileSync(join(dir, 'objects', ...seg.objectKey.split('/'))).equals(object), 'the committed object is unchanged');
    assert.deepEqual(
      await values(s2.engine, 'c', 0),
      Array.from({ length: 20 }, (_, i) => `m${i}`),
    );
    await s2.log.trimWal();
    assert.equal(s2.wal.size(), 0, 'the flushed file is trimmed');
    assert.ok(readFileSync(join(dir, 'objects', ...seg.objectKey.split('/'))).equals(object), 'and the object still unchanged');
    await s2.close();
  });
});

describe('LogManager: uncommitted segment objects at open', () => {
  it('deletes objects the metastore does not list at or past the flushed offset, leaves the others, and commits a pre-epoch one that continues the segments', async () => {
    const dir = tmp();
    const s1 = await openAll(dir, { segmentBytes: 1 << 20 });
    const def = await s1.engine.createStream({ name: 'g', partitions: 1 });
    for (let i = 0; i < 10; i++) await s1.engine.produce('g', 0, encodeBatch([rec(i)])).durable;
    await s1.log.flushAll();
    const [committed] = await s1.metastore.listSegments('g', 0);
    assert.match(committed.objectKey, /\/0{20}-1\.seg$/);
    await s1.close();
    const prefix = `streams/g/${def.createdAt}/0`;
    const batches = (from: number, n: number) =>
      Array.from({ length: n }, (_, k) => {
        const b = encodeBatch([rec(from + k)]);
        setBaseOffset(b, from + k);
        return b;
      });
    // A segment of a broker from before epochs, never committed: the data is nowhere else.
    const legacy = buildSegment(10, batches(10, 5));
    await s1.objects.put(`${prefix}/${String(10).padStart(20, '0')}.seg`, legacy.parts);
    // Objects of crashed or fenced writers past the flushed offset; one below it (a retention delete cut short).
    await s1.objects.put(`${prefix}/${String(15).padStart(20, '0')}-7.seg`, buildSegment(15, batches(15, 1)).parts);
    await s1.objects.put(`${prefix}/${String(10).padStart(20, '0')}-1.seg`, Buffer.from('half written'));
    await s1.objects.put(`${prefix}/${String(0).padStart(20, '0')}-0.seg`, Buffer.from('old'));
    await s1.objects.put(`${prefix}/notes.txt`, Buffer.from('not a segment'));
    const s2 = await openAll(dir);
    assert.equal(s2.log.stats.recoveredSegments, 1);
    assert.equal(s2.log.stats.garbageObjects, 2);
    assert.deepEqual(
      (await s2.objects.list(`${prefix}/`)).map((o) => o.key.slice(prefix.length + 1)),
      [`${String(0).padStart(20, '0')}-0.seg`, `${String(0).padStart(20, '0')}-1.seg`, `${String(10).padStart(20, '0')}.seg`, 'notes.txt'],
    );
    assert.deepEqual(
      await values(s2.engine, 'g', 0),
      Array.from({ length: 15 }, (_, i) => `m${i}`),
    );
    assert.equal(s2.engine.produce('g', 0, encodeBatch([rec(15)])).baseOffset, 15);
    await s2.close();
  });
});

describe('LogManager: partition ownership epochs', () => {
  /** Two log managers over one metastore and one object store, as two brokers would be. */
  async function twoWriters(layout: Layout, sharedWal: boolean) {
    const dir = tmp();
    const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
    const objects = new FsObjectStore(join(dir, 'objects'));
    const lines: Array<{ level: number; msg: string; partition?: string }> = [];
    const capture = pino({ level: 'info' }, { write: (x: string) => void lines.push(JSON.parse(x) as { level: number; msg: string }) });
    const wal1 = await openWal(join(dir, 'one'), layout);
    const log1 = await LogManager.open({ wal: wal1, objects, metastore, logger: capture, options: { checkIntervalMs: 60_000, segmentBytes: 1 << 20 } });
    const e1 = new Engine(log1, metastore);
    await e1.load();
    log1.finishRecovery();
    await e1.createStream({ name: 'f', partitions: 2 });
    for (let i = 0; i < 10; i++) await e1.produce('f', 0, encodeBatch([rec(i)])).durable;
    await log1.flushAll();
    for (let i = 10; i < 20; i++) await e1.produce('f', 0, encodeBatch([rec(i)])).durable;
    // The second opens the partitions: new epochs.
    const wal2 = sharedWal ? wal1 : await openWal(join(dir, 'two'), layout);
    const log2 = await LogManager.open({ wal: wal2, objects, metastore, logger, options: { checkIntervalMs: 60_000, segmentBytes: 1 << 20 } });
    const e2 = new Engine(log2, metastore);
    await e2.load();
    log2.finishRecovery();
    return {
      dir,
      metastore,
      objects,
      lines,
      one: { wal: wal1, log: log1, engine: e1 },
      two: { wal: wal2, log: log2, engine: e2 },
      async close() {
        await log2.close();
        await log1.close();
        await wal1.close();
        if (wal2 !== wal1) await wal2.close();
        await metastore.close();
      },
    };
  }
  const fenced = (e: unknown) => isFlowError(e, 'FENCED');

  for (const layout of ['shared', 'partition'] as const) {
    it(`a second writer fences the first: its seal is refused, then its appends, for good, logged once (${layout} WAL)`, async () => {
      const t = await twoWriters(layout, false);
      try {
        assert.equal((await t.metastore.getPartitionState('f', 0))?.epoch, 2);
        // The second writes and seals its own data after what was committed (its WAL holds none of the first's tail).
        for (let i = 10; i < 15; i++) await t.two.engine.produce('f', 0, encodeBatch([{ ...rec(i), value: Buffer.from(`n${i}`) }])).durable;
        await t.two.log.flushAll();
        const before = await t.metastore.listSegments('f', 0);
        assert.deepEqual(
          before.map((x) => [x.baseOffset, x.endOffset, x.objectKey.slice(-6)]),
          [
            [0, 10, '-1.seg'],
            [10, 15, '-2.seg'],
          ],
        );
        const ownObject = await t.objects.get(before[1].objectKey);
        // The first tries to seal its tail [10, 20): refused, and the partition stops.
        await t.one.log.flushAll();
        assert.equal(t.one.log.stats.fencedPartitions, 1);
        assert.throws(() => t.one.engine.produce('f', 0, encodeBatch([rec(99)])), fenced);
        await assert.rejects(t.one.log.deleteRecordsBefore('f', 0, 5), fenced);
        await t.one.log.flushAll(); // no retry, no second line
        const errors = t.lines.filter((l) => l.level === 50);
        assert.equal(errors.length, 1, JSON.stringify(errors));
        assert.match(errors[0].msg, /partition fenced/);
        assert.equal(errors[0].partition, t.one.log.describe('f').length === 2 ? `f@${(await t.metastore.listStreams())[0].createdAt}/0` : '');
        // Its other partition was taken too: its own WAL still takes the append, the seal finds out.
        await t.one.engine.produce('f', 1, encodeBatch([rec(0)])).durable;
        await t.one.log.flushAll();
        assert.equal(t.one.log.stats.fencedPartitions, 2);
        assert.deepEqual(await t.metastore.listSegments('f', 1), []);
        // Nothing the second holds is damaged: its segments, objects and reads.
        assert.deepEqual(await t.metastore.listSegments('f', 0), before);
        assert.ok((await t.objects.get(before[1].objectKey)).equals(ownObject));
        const want = [...Array.from({ length: 10 }, (_, i) => `m${i}`), ...Array.from({ length: 5 }, (_, i) => `n${i + 10}`)];
        assert.deepEqual(await values(t.two.engine, 'f', 0), want);
        assert.equal(t.two.engine.produce('f', 0, encodeBatch([rec(15)])).baseOffset, 15);
      } finally {
        await t.close();
      }
    });
  }

  it("over one shared WAL, the second writer's fence refuses the first one's appends, and it takes over the first one's tail", async () => {
    const t = await twoWriters('partition', true);
    try {
      // The second replayed what the first had appended: it has the whole partition.
      assert.deepEqual(
        await values(t.two.engine, 'f', 0),
        Array.from({ length: 20 }, (_, i) => `m${i}`),
      );
      const r = t.one.engine.produce('f', 0, encodeBatch([rec(20)]));
      await assert.rejects(r.durable, fenced, 'the WAL refuses the old epoch');
      assert.throws(() => t.one.engine.produce('f', 0, encodeBatch([rec(21)])), fenced, 'then the partition refuses at once');
      assert.equal(t.one.log.stats.fencedPartitions, 1);
      await t.one.log.flushAll();
      await t.two.engine.produce('f', 0, encodeBatch([rec(20)])).durable;
      await t.two.log.flushAll();
      assert.deepEqual(
        (await t.metastore.listSegments('f', 0)).map((x) => [x.baseOffset, x.endOffset]),
        [
          [0, 10],
          [10, 20],
          [20, 21],
        ],
      );
      assert.deepEqual(
        await values(t.two.engine, 'f', 0),
        Array.from({ length: 21 }, (_, i) => `m${i}`),
      );
    } finally {
      await t.close();
    }
  });
});
