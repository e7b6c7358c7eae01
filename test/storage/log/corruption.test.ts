/**
 * Torn writes and flipped bits, injected into the files the log keeps (WAL files, segment objects in a directory
 * and in s3rver's directory): detected by checksums at recovery and at read time, reported (a log line at error or
 * warn level, the log's corruptBatches counter) and never served as data.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { decodeBatch, encodeBatch, Engine, isFlowError } from '../../../src/core/index.js';
import type { LogOptions } from '../../../src/storage/log/index.js';
import { SqliteMetastore } from '../../../src/storage/metastore/index.js';
import { CachedObjectStore, FsObjectStore, S3ObjectStore, type ObjectStore } from '../../../src/storage/objects/index.js';
import { FileWal, PartitionWal, type WalEntry, type WriteAheadLog } from '../../../src/storage/wal/index.js';
import { openLogEngine } from '../../helpers/log-engine.js';
import { startS3, type S3TestServer } from '../../helpers/s3.js';

/** Log lines at warn and above. */
const lines: Array<{ level: number; msg: string; reason?: string }> = [];
const logger = pino(
  { level: 'warn' },
  new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as { level: number; msg: string });
      done();
    },
  }),
);

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  lines.length = 0;
});
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'flowmq-corrupt-'));
  dirs.push(d);
  return d;
}

const value = (i: number): string => `value-${String(i).padStart(4, '0')}`;
const batch = (i: number): Buffer => encodeBatch([{ key: null, value: Buffer.from(value(i)), headers: [], timestamp: 1_000_000 + i }]);

async function values(engine: Engine, stream: string, from = 0): Promise<string[]> {
  const out: string[] = [];
  let offset = from;
  for (;;) {
    const batches = await engine.read(stream, 0, offset, 1024);
    if (batches.length === 0) return out;
    for (const b of batches) {
      for (const r of decodeBatch(b)) {
        if (r.offset >= offset) out.push(r.value!.toString());
        offset = r.offset + 1;
      }
    }
  }
}

const isCorrupt = (err: unknown): boolean => isFlowError(err) && err.code === 'CORRUPT_DATA';

/** Every file under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(e.parentPath, e.name);
    if (e.isDirectory()) out.push(...filesUnder(p));
    else out.push(p);
  }
  return out;
}

/** The one file under `dir` holding `needle`, and where. */
function locate(dir: string, needle: string, exclude: (path: string) => boolean = () => false): { path: string; at: number } {
  const hits = filesUnder(dir)
    .filter((p) => !exclude(p))
    .map((path) => ({ path, at: readFileSync(path).indexOf(needle) }))
    .filter((h) => h.at >= 0);
  assert.equal(hits.length, 1, `exactly one file holds ${needle}: ${hits.map((h) => h.path).join(', ')}`);
  return hits[0];
}

/** Flips one bit of the byte at `at` of the file. */
function flipBit(path: string, at: number): void {
  const b = readFileSync(path);
  b[at] ^= 0x10;
  writeFileSync(path, b);
}

type Layout = 'shared' | 'partition';

async function openLog(dir: string, objects: ObjectStore, layout: Layout, options: Partial<LogOptions> = {}, wal?: WriteAheadLog) {
  const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
  wal ??= layout === 'shared' ? await FileWal.open(join(dir, 'wal'), { logger }) : await PartitionWal.open(join(dir, 'wal-partitions'), { logger });
  try {
    const { log, engine } = await openLogEngine({ wal, objects, metastore }, logger, options);
    return {
      log,
      engine,
      async close() {
        await log.close();
        await wal.close();
        await metastore.close();
      },
    };
  } catch (err) {
    await wal.close().catch(() => undefined);
    await metastore.close();
    throw err;
  }
}

describe('a bit flipped in a segment object', () => {
  let s3: S3TestServer;
  before(async () => {
    s3 = await startS3();
  });
  after(async () => {
    await s3.close();
  });

  const stores: Array<{ name: string; layout: Layout; make(dir: string): Promise<{ objects: ObjectStore; root: string }> }> = [
    { name: 'directory store', layout: 'shared', make: async (dir) => ({ objects: new FsObjectStore(join(dir, 'objects')), root: join(dir, 'objects') }) },
    {
      name: 'directory store (partition WAL: segments are the WAL files) behind the block cache',
      layout: 'partition',
      make: async (dir) => ({
        objects: new CachedObjectStore(new FsObjectStore(join(dir, 'objects')), { maxBytes: 1 << 20, blockBytes: 4096 }),
        root: join(dir, 'objects'),
      }),
    },
    {
      name: 'S3 (s3rver) behind the block cache',
      layout: 'shared',
      make: async (dir) => {
        const prefix = `corrupt-${dir.slice(-6)}`;
        const inner = await S3ObjectStore.open({
          bucket: s3.bucket,
          prefix,
          endpoint: s3.endpoint,
          region: s3.region,
          accessKeyId: s3.accessKeyId,
          secretAccessKey: s3.secretAccessKey,
          forcePathStyle: true,
          logger,
        });
        return { objects: new CachedObjectStore(inner, { maxBytes: 1 << 20, blockBytes: 4096 }), root: join(s3.directory, s3.bucket, prefix) };
      },
    },
  ];

  for (const store of stores) {
    it(`${store.name}: a read of it fails with CORRUPT_DATA, counted and logged, never the records; other segments read; repaired, it reads again`, async () => {
      const dir = tmp();
      const { objects, root } = await store.make(dir);
      const s = await openLog(dir, objects, store.layout, { segmentBytes: 400, recentBytes: 0 });
      await s.engine.createStream({ name: 't', partitions: 1 });
      for (let i = 0; i < 40; i++) await s.engine.produce('t', 0, batch(i)).durable;
      await s.log.flushAll();
      const all = Array.from({ length: 40 }, (_, i) => value(i));
      assert.deepEqual(await values(s.engine, 't'), all);
      const hit = locate(root, value(17), (p) => !p.endsWith('.seg') && !p.endsWith('._S3rver_object'));
      flipBit(hit.path, hit.at + value(17).length - 1);
      // A broker started afresh (no block cached from before the flip) reads the object.
      const fresh = await store.make(dir);
      await s.close();
      const s2 = await openLog(dir, fresh.objects, store.layout, { segmentBytes: 400, recentBytes: 0 });
      await assert.rejects(s2.engine.read('t', 0, 17, 1024), isCorrupt, 'the batch holding the flipped bit is refused');
      await assert.rejects(values(s2.engine, 't', 17), isCorrupt);
      await assert.rejects(s2.engine.offsetForTimestamp('t', 0, 1_000_000 + 17), isCorrupt, 'ListOffsets by time does not decode it either');
      assert.ok(s2.log.stats.corruptBatches >= 3, `counted (${s2.log.stats.corruptBatches})`);
      const reported = lines.filter((l) => l.level >= 50 && /corrupt data/.test(l.msg));
      assert.ok(reported.length >= 3, 'logged at error level');
      assert.match(reported[0].reason ?? '', /CRC mismatch/);
      // The segments before it read as before.
      const before = await values(s2.engine, 't').catch((err: unknown) => err);
      assert.ok(isCorrupt(before), 'a scan from 0 stops at the corrupt segment, with the error');
      const first = await s2.engine.read('t', 0, 0, 1);
      assert.equal(decodeBatch(first[0])[0].value!.toString(), value(0));

      // Repaired (the bit flipped back, as a re-upload would): the next read fetches it again, no cached block or
      // index of the corrupt object is served.
      flipBit(hit.path, hit.at + value(17).length - 1);
      assert.deepEqual(await values(s2.engine, 't'), all);
      await s2.close();
    });
  }
});

describe('torn writes and flipped bits in the WAL', () => {
  for (const layout of ['shared', 'partition'] as const) {
    const walDir = (dir: string): string => join(dir, layout === 'shared' ? 'wal' : 'wal-partitions');
    const produce10 = async (dir: string): Promise<void> => {
      const s = await openLog(dir, new FsObjectStore(join(dir, 'objects')), layout, { segmentBytes: 1 << 20 });
      await s.engine.createStream({ name: 't', partitions: 1 });
      for (let i = 0; i < 10; i++) await s.engine.produce('t', 0, batch(i)).durable;
      // A crash: nothing sealed, nothing closed (the WAL files stay as the appends left them).
    };
    const reopen = (dir: string) => openLog(dir, new FsObjectStore(join(dir, 'objects')), layout, { segmentBytes: 1 << 20 });

    it(`${layout} layout: a record half-written with garbage after it is dropped, every complete record before it kept`, async () => {
      const dir = tmp();
      await produce10(dir);
      const { path } = locate(walDir(dir), value(9));
      // A frame header announcing 200 bytes, then 40 bytes of garbage: a write torn by the crash.
      const torn = Buffer.alloc(48, 0xa5);
      torn.writeUInt32BE(200, 0);
      appendFileSync(path, torn);
      const s = await reopen(dir);
      assert.deepEqual(
        await values(s.engine, 't'),
        Array.from({ length: 10 }, (_, i) => value(i)),
      );
      assert.ok(
        lines.some((l) => l.level === 40 && /torn write/.test(l.msg)),
        'the cut is logged',
      );
      const r = s.engine.produce('t', 0, batch(10));
      assert.equal(r.baseOffset, 10);
      await r.durable;
      await s.close();
    });

    it(`${layout} layout: a file cut in the middle of its last record keeps the records before it, and the log goes on at that offset`, async () => {
      const dir = tmp();
      await produce10(dir);
      const { path, at } = locate(walDir(dir), value(9));
      truncateSync(path, at + 3);
      const s = await reopen(dir);
      assert.deepEqual(
        await values(s.engine, 't'),
        Array.from({ length: 9 }, (_, i) => value(i)),
      );
      const r = s.engine.produce('t', 0, batch(99));
      assert.equal(r.baseOffset, 9, 'the torn record was never acknowledged: its offset is given again');
      await r.durable;
      await s.close();
      const s2 = await reopen(dir);
      assert.deepEqual((await values(s2.engine, 't')).slice(8), [value(8), value(99)]);
      await s2.close();
    });

    it(`${layout} layout: a bit flipped in an acknowledged record before the end stops recovery with CORRUPT_DATA, naming the file; nothing is served`, async () => {
      const dir = tmp();
      await produce10(dir);
      const { path, at } = locate(walDir(dir), value(4));
      const size = statSync(path).size;
      flipBit(path, at + 2);
      await assert.rejects(reopen(dir), (err: unknown) => isCorrupt(err) && (err as Error).message.includes(path));
      assert.equal(statSync(path).size, size, 'the file is left as it is, for the operator');
    });
  }

  it('a bit flipped in a WAL entry with no frame checksum of its own (a PostgreSQL WAL row) is caught by the batch CRC at recovery', async () => {
    const dir = tmp();
    const wal = new RowWal();
    const s = await openLog(dir, new FsObjectStore(join(dir, 'objects')), 'shared', { segmentBytes: 1 << 20 }, wal);
    await s.engine.createStream({ name: 't', partitions: 1 });
    for (let i = 0; i < 10; i++) await s.engine.produce('t', 0, batch(i)).durable;
    // The same rows, one bit flipped in the value of record 4 (as a bad disk under PostgreSQL would leave it).
    const copy = new RowWal(wal.rows.map((e) => ({ ...e, data: Buffer.from(e.data) })));
    const row = copy.rows[4].data;
    row[row.indexOf(value(4)) + 2] ^= 0x10;
    await assert.rejects(openLog(dir, new FsObjectStore(join(dir, 'objects')), 'shared', {}, copy), isCorrupt);
    assert.ok(
      lines.some((l) => l.level >= 50 && /corrupt data/.test(l.msg) && /CRC mismatch/.test(l.reason ?? '')),
      'reported',
    );
  });
});

/** A WAL that keeps its entries as rows, without a checksum of its own (as the PostgreSQL WAL does). */
class RowWal implements WriteAheadLog {
  constructor(readonly rows: WalEntry[] = []) {}
  async fence(): Promise<void> {}
  async append(entry: WalEntry): Promise<void> {
    this.rows.push({ key: entry.key, baseOffset: entry.baseOffset, endOffset: entry.endOffset, epoch: entry.epoch, data: Buffer.from(entry.data) });
  }
  async replay(fn: (entry: WalEntry) => void): Promise<void> {
    for (const e of this.rows) fn(e);
  }
  async trim(): Promise<number> {
    return 0;
  }
  size(): number {
    return this.rows.reduce((n, e) => n + e.data.length, 0);
  }
  async close(): Promise<void> {}
}
