import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { decodeBatch, encodeBatch, Engine, type StreamDef } from '../../../src/core/index.js';
import { LogManager, type LogOptions } from '../../../src/storage/log/index.js';
import { SqliteMetastore } from '../../../src/storage/metastore/index.js';
import { FsObjectStore } from '../../../src/storage/objects/index.js';
import { FileWal } from '../../../src/storage/wal/index.js';

const logger = pino({ level: process.env.LOG_LEVEL ?? 'silent' });
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function openAll(dir: string, options: Partial<LogOptions> = {}) {
  const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
  const objects = new FsObjectStore(join(dir, 'objects'));
  const wal = await FileWal.open(join(dir, 'wal'));
  const log = await LogManager.open({ wal, objects, metastore, logger, options: { checkIntervalMs: 20, ...options } });
  const engine = new Engine(log, metastore);
  await engine.load();
  log.finishRecovery();
  return {
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

describe('LogManager', () => {
  it('assigns offsets synchronously and exposes data only once durable', async () => {
    const s = await openAll(tmp());
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

  it('seals segments by size into the object store and reads across objects and memory', async () => {
    const s = await openAll(tmp(), { segmentBytes: 300 });
    await s.engine.createStream({ name: 't', partitions: 1 });
    for (let i = 0; i < 40; i++) await s.engine.produce('t', 0, encodeBatch([rec(i)])).durable;
    await s.log.flushAll();
    const segs = await s.metastore.listSegments('t', 0);
    assert.ok(segs.length >= 3, `several segments (${segs.length})`);
    assert.equal(segs[0].baseOffset, 0);
    for (let i = 1; i < segs.length; i++) assert.equal(segs[i].baseOffset, segs[i - 1].endOffset, 'segments are contiguous');
    for (let i = 40; i < 45; i++) await s.engine.produce('t', 0, encodeBatch([rec(i)])).durable;
    const before = s.log.stats.objectReads;
    assert.deepEqual(await values(s.engine, 't', 0), Array.from({ length: 45 }, (_, i) => `m${i}`));
    assert.ok(s.log.stats.objectReads > before);
    assert.equal(await s.engine.offsetForTimestamp('t', 0, 1_000_000 + 17), 17);
    assert.equal(await s.engine.offsetForTimestamp('t', 0, 1_000_000 + 42), 42);
    assert.equal(await s.engine.offsetForTimestamp('t', 0, 9_000_000), 45);
    await s.close();
  });

  it('recovers acknowledged data from the WAL after a crash, and from objects after a flush', async () => {
    const dir = tmp();
    const s1 = await openAll(dir, { segmentBytes: 1 << 20 });
    await s1.engine.createStream({ name: 't', partitions: 2 });
    for (let i = 0; i < 10; i++) await s1.engine.produce('t', i % 2, encodeBatch([rec(i)])).durable;
    await s1.log.flushAll(); // offsets 0..4 of each partition go to objects
    for (let i = 10; i < 20; i++) await s1.engine.produce('t', i % 2, encodeBatch([rec(i)])).durable;
    // "Crash": no close, no flush. A second instance opens the same files.
    const s2 = await openAll(dir);
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

  it('writes one segment object at a time across partitions, sealing what became durable while it waited', async () => {
    const dir = tmp();
    const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
    const inner = new FsObjectStore(join(dir, 'objects'));
    let active = 0;
    let most = 0;
    let puts = 0;
    const objects = Object.create(inner) as FsObjectStore;
    objects.put = async (key, data) => {
      active++;
      most = Math.max(most, active);
      puts++;
      try {
        await new Promise((r) => setTimeout(r, 20));
        await inner.put(key, data);
      } finally {
        active--;
      }
    };
    const wal = await FileWal.open(join(dir, 'wal'), { maxFileBytes: 4096 });
    const log = await LogManager.open({ wal, objects, metastore, logger, options: { checkIntervalMs: 60_000, segmentBytes: 512 } });
    const engine = new Engine(log, metastore);
    await engine.createStream({ name: 't', partitions: 4 });
    for (let i = 0; i < 200; i++) await engine.produce('t', i % 4, encodeBatch([rec(i)])).durable;
    await log.flushAll();
    assert.equal(most, 1, 'never two segment writes at once');
    assert.ok(puts >= 4 && puts < 200, `${puts} segments for 200 batches over 4 partitions`);
    for (let p = 0; p < 4; p++) assert.equal((await values(engine, 't', p)).length, 50);
    // Every seal trims the WAL by itself: nothing but the active file's remains.
    assert.ok(wal.fileCount() <= 2, `${wal.fileCount()} WAL files left`);
    await log.close();
    await wal.close();
    await metastore.close();
  });

  it('applies retention by deleting whole expired segments', async () => {
    const s = await openAll(tmp(), { segmentBytes: 200 });
    await s.engine.createStream({ name: 'r', partitions: 1, retentionMs: 60_000 });
    const old = Date.now() - 3_600_000;
    for (let i = 0; i < 10; i++) await s.engine.produce('r', 0, encodeBatch([rec(i, old)])).durable;
    await s.log.flushAll();
    for (let i = 10; i < 12; i++) await s.engine.produce('r', 0, encodeBatch([rec(i, Date.now())])).durable;
    await s.log.flushAll();
    const deadline = Date.now() + 5000;
    while (s.engine.offsets('r', 0).logStartOffset < 10 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(s.engine.offsets('r', 0).logStartOffset, 10);
    assert.deepEqual(await values(s.engine, 'r', 0, 10), ['m10', 'm11']);
    const keys = (await s.objects.list('streams/r/')).map((o) => o.key);
    assert.equal(keys.length, (await s.metastore.listSegments('r', 0)).length, 'expired objects are deleted');
    await s.close();
  });

  it('never resurrects the data of a deleted stream in a new stream of the same name', async () => {
    const dir = tmp();
    const s1 = await openAll(dir);
    await s1.engine.createStream({ name: 'x', partitions: 1 });
    await s1.engine.produce('x', 0, encodeBatch([rec(1)])).durable;
    await s1.engine.deleteStream('x');
    await new Promise((r) => setTimeout(r, 2)); // a new incarnation has a new createdAt
    const def: StreamDef = await s1.engine.createStream({ name: 'x', partitions: 1 });
    assert.ok(def.createdAt > 0);
    await s1.close();
    const s2 = await openAll(dir);
    assert.deepEqual(s2.engine.offsets('x', 0), { logStartOffset: 0, highWatermark: 0 });
    await s2.close();
  });
});
