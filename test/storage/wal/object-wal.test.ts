/**
 * ObjectWal (`--wal object`) beyond the WriteAheadLog contract (test/conformance/wal-object.test.ts): what each store
 * holds (one object per window, PostgreSQL one small row per object and key and none of the bytes), objects deleted
 * once trimmed, objects of a writer that died before indexing them swept at open, and a window's acknowledgement
 * waiting for its object.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { FsObjectStore } from '../../../src/storage/objects/fs-store.js';
import { ObjectWal } from '../../../src/storage/wal/index.js';
import { WAL_OBJECT_PREFIX } from '../../../src/storage/wal/object-wal.js';
import type { WalEntry } from '../../../src/storage/wal/index.js';
import { startPostgres, type PostgresServer } from '../../helpers/postgres.js';

let server: PostgresServer;
let root = '';
before(async () => {
  server = await startPostgres();
  root = await mkdtemp(join(tmpdir(), 'flowmq-object-wal-'));
});
after(async () => {
  await server.stop();
  await rm(root, { recursive: true, force: true });
});

let n = 0;
async function fresh(): Promise<{ url: string; objects: FsObjectStore; sql: (q: string, v?: unknown[]) => Promise<pg.QueryResultRow[]> }> {
  const url = await server.createDatabase();
  const objects = new FsObjectStore(join(root, `objects-${n++}`));
  const sql = async (q: string, v?: unknown[]) => {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      return (await c.query(q, v)).rows;
    } finally {
      await c.end();
    }
  };
  return { url, objects, sql };
}

const entry = (key: string, base: number, size = 1000): WalEntry => ({
  key,
  baseOffset: base,
  endOffset: base + 1,
  epoch: 1,
  data: Buffer.alloc(size, base & 0xff),
});

test('a window of appends to many keys is one object and one index row per key, without the bytes', async () => {
  const { url, objects, sql } = await fresh();
  const wal = await ObjectWal.open({ url, objects, windowMs: 50 });
  try {
    // 10 keys x 20 entries of 1,000 bytes, all in one window.
    const appends: Promise<void>[] = [];
    for (let i = 0; i < 20; i++) for (let k = 0; k < 10; k++) appends.push(wal.append(entry(`s/${k}`, i)));
    await Promise.all(appends);
    const listed = await objects.list(WAL_OBJECT_PREFIX);
    assert.equal(listed.length, 1, 'one object for the window');
    assert.equal(listed[0]!.size, 200 * 1000);
    const rows = await sql('SELECT key, bytes, cardinality(bases) AS entries FROM wal_object_ranges ORDER BY key');
    assert.equal(rows.length, 10, 'one row per key');
    for (const r of rows) assert.deepEqual([r.bytes, r.entries], [20_000, 20]);
    // What PostgreSQL stores for it: a few hundred bytes a row, against 200 kB of data.
    const [size] = await sql("SELECT pg_column_size(r.*) AS bytes FROM wal_object_ranges r WHERE key = 's/0'");
    assert.ok(Number(size!.bytes) < 1000, `index row of ${size!.bytes} bytes`);
    assert.equal(wal.size(), 200_000);
    // Read back in order, byte for byte.
    const got: WalEntry[] = [];
    await wal.replayKey('s/3', (e) => got.push(e));
    assert.deepEqual(
      got.map((e) => e.baseOffset),
      Array.from({ length: 20 }, (_, i) => i),
    );
    assert.ok(got.every((e) => e.data.equals(Buffer.alloc(1000, e.baseOffset & 0xff))));
  } finally {
    await wal.close();
  }
});

test('an append is acknowledged only after its window is written (not before the window ends)', async () => {
  const { url, objects } = await fresh();
  const wal = await ObjectWal.open({ url, objects, windowMs: 300 });
  try {
    const t0 = Date.now();
    await wal.append(entry('w/0', 0));
    assert.ok(Date.now() - t0 >= 290, `acknowledged after ${Date.now() - t0} ms, inside its 300 ms window`);
    assert.equal((await objects.list(WAL_OBJECT_PREFIX)).length, 1);
  } finally {
    await wal.close();
  }
});

test('a window that fills is written at once; close writes the one gathering', async () => {
  const { url, objects } = await fresh();
  // A window far longer than the test: only its filling (8 MiB) or close() can end it.
  const wal = await ObjectWal.open({ url, objects, windowMs: 600_000, maxObjectBytes: 8 * 1024 * 1024 });
  let ninth = false;
  try {
    const mib = (i: number): WalEntry => ({ key: 'w/1', baseOffset: i, endOffset: i + 1, epoch: 1, data: Buffer.alloc(1024 * 1024, i) });
    const first = Array.from({ length: 8 }, (_, i) => wal.append(mib(i)));
    const last = wal.append(mib(8)).then(() => (ninth = true));
    await Promise.all(first);
    const listed = await objects.list(WAL_OBJECT_PREFIX);
    assert.deepEqual(
      listed.map((o) => o.size),
      [8 * 1024 * 1024],
      'the full window is one object of 8 MiB',
    );
    assert.equal(ninth, false, 'the ninth MiB waits in the next window');
    await wal.close();
    await last;
    assert.equal((await objects.list(WAL_OBJECT_PREFIX)).length, 2, 'close wrote the window it was gathering');
  } finally {
    await wal.close();
  }
});

test('trim deletes flushed ranges, then each object no range names any more', async () => {
  const { url, objects, sql } = await fresh();
  const wal = await ObjectWal.open({ url, objects, windowMs: 0 });
  try {
    // Two windows: the first holds a/0 and b/0, the second a/1 only.
    await Promise.all([wal.append(entry('a', 0)), wal.append(entry('b', 0))]);
    await wal.append(entry('a', 1));
    assert.equal((await objects.list(WAL_OBJECT_PREFIX)).length, 2);
    // a flushed up to 2: its two ranges go; the first object still holds b's range, the second none.
    await wal.trim((k) => (k === 'a' ? 2 : 0));
    assert.equal((await objects.list(WAL_OBJECT_PREFIX)).length, 1, 'the object only a used is deleted');
    assert.equal((await sql('SELECT count(*)::int AS n FROM wal_objects'))[0]!.n, 1);
    await wal.trim(() => 1);
    assert.equal((await objects.list(WAL_OBJECT_PREFIX)).length, 0, 'the last object is deleted with its last range');
    assert.equal(wal.size(), 0);
  } finally {
    await wal.close();
  }
});

test('objects no index names are swept at open once old enough; recent ones are left (a writer may be committing)', async () => {
  const { url, objects } = await fresh();
  const old = `${WAL_OBJECT_PREFIX}deadwriter/${(Date.now() - 3_600_000).toString(36)}-0000000000`;
  const recent = `${WAL_OBJECT_PREFIX}livewriter/${Date.now().toString(36)}-0000000000`;
  await objects.put(old, Buffer.from('torn'));
  await objects.put(recent, Buffer.from('in flight'));
  const wal = await ObjectWal.open({ url, objects, windowMs: 0 });
  try {
    await wal.append(entry('k', 0));
    const keys = (await objects.list(WAL_OBJECT_PREFIX)).map((o) => o.key);
    assert.ok(!keys.includes(old), 'the hour-old orphan is deleted');
    assert.ok(keys.includes(recent), 'the recent one is left');
    assert.equal(keys.length, 2, "the recent orphan and this writer's object");
  } finally {
    await wal.close();
  }
});
