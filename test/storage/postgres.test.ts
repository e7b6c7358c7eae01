/**
 * What the conformance suites cannot say about the PostgreSQL backends: a real server restart under them
 * (calls fail with a retriable STORAGE_ERROR while it is down and work again by themselves), idle connections
 * dying (the pool's error handler), two brokers migrating one database at once, statement timeouts, per-key order
 * over a pool, epochs and fencing across two WAL instances, and group commit.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { isFlowError, type FlowError } from '../../src/core/index.js';
import { PostgresMetastore, postgresMigrations } from '../../src/storage/metastore/index.js';
import { PostgresWal, type WalEntry } from '../../src/storage/wal/index.js';
import { walMigrations } from '../../src/storage/wal/postgres-migrations.js';
import { createPool, migratePostgres } from '../../src/storage/postgres-util.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';

let server: PostgresServer;
before(async () => {
  server = await startPostgres();
});
after(async () => {
  await server.stop();
});

const storageError = (e: unknown): boolean => isFlowError(e, 'STORAGE_ERROR');
const fenced = (e: unknown): boolean => isFlowError(e, 'FENCED');
const entry = (key: string, base: number, epoch = 1, data = `${key}@${base}`): WalEntry => ({
  key,
  baseOffset: base,
  endOffset: base + 1,
  epoch,
  data: Buffer.from(data),
});
const stream = (name: string) => ({ name, partitions: 2, bindings: [name], retentionMs: null, createdAt: 1_700_000_000_000 });
const segment = (name: string, partition: number, base: number, end: number) => ({
  stream: name,
  partition,
  baseOffset: base,
  endOffset: end,
  objectKey: `streams/${name}/${partition}/${base}.seg`,
  size: 100,
  maxTimestamp: 1,
  createdAt: 2,
});

async function replayAll(wal: PostgresWal): Promise<WalEntry[]> {
  const out: WalEntry[] = [];
  await wal.replay((e) => out.push(e));
  return out;
}

/** Retries `fn` until it succeeds: the first calls after a restart may meet connections still being replaced. */
async function eventually<T>(fn: () => Promise<T>, what: string): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`${what} never worked again`, { cause: err });
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

describe('PostgreSQL backends', () => {
  it('refuses to open an unreachable server with STORAGE_ERROR naming host:port and the cause', async () => {
    // A port nothing listens on: the server's own port once it is stopped would do too, but this is quicker.
    const probe = await startPostgres();
    const url = probe.url();
    const port = probe.port;
    await probe.stop();
    for (const open of [() => PostgresMetastore.open({ url, connectTimeoutMs: 2000 }), () => PostgresWal.open({ url, connectTimeoutMs: 2000 })]) {
      await assert.rejects(open(), (e: unknown) => {
        assert.ok(storageError(e), String(e));
        assert.match((e as FlowError).message, new RegExp(`127\\.0\\.0\\.1:${port}`));
        assert.match((e as FlowError).message, /ECONNREFUSED/);
        return true;
      });
    }
  });

  it('migrates once when two brokers open a fresh database together (advisory lock)', async () => {
    const url = await server.createDatabase();
    const [a, b, c] = await Promise.all([PostgresMetastore.open({ url }), PostgresMetastore.open({ url }), PostgresMetastore.open({ url })]);
    assert.equal(a.migrationsApplied + b.migrationsApplied + c.migrationsApplied, postgresMigrations.length);
    const [w1, w2] = await Promise.all([PostgresWal.open({ url }), PostgresWal.open({ url })]);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const versions = await client.query('SELECT version FROM flowmq_schema_migrations ORDER BY version');
    assert.deepEqual(
      versions.rows.map((r) => r.version),
      postgresMigrations.map((m) => m.version),
    );
    const walVersions = await client.query('SELECT count(*)::int AS n FROM flowmq_wal_schema_migrations');
    assert.equal(walVersions.rows[0].n, walMigrations.length);
    // Each WAL database has one identity (a shard of a sharded WAL is known by it).
    assert.equal((await client.query('SELECT count(*)::int AS n FROM wal_shard_identity')).rows[0].n, 1);
    assert.equal(w1.shardId, w2.shardId);
    await client.end();
    // All of them work on the one schema.
    await a.createStream(stream('shared'));
    assert.deepEqual(
      (await c.listStreams()).map((s) => s.name),
      ['shared'],
    );
    await w1.append(entry('k/0', 0));
    assert.equal((await replayAll(w2)).length, 1);
    await Promise.all([a.close(), b.close(), c.close(), w1.close(), w2.close()]);
  });

  it('migration 6 gives every stream of an older database its own id (a database made by the previous schema)', async () => {
    const url = await server.createDatabase();
    const p = createPool({ url }, 'test');
    await migratePostgres(p, postgresMigrations.slice(0, 5), 'flowmq_schema_migrations', 'metastore');
    for (const name of ['a', 'b', 'c']) {
      await p.query('test insert', 'INSERT INTO streams (name, partitions, bindings, retention_ms, created_at, settings) VALUES ($1, 1, $2, NULL, 1, NULL)', [
        name,
        JSON.stringify([name]),
      ]);
    }
    await p.end();
    let m = await PostgresMetastore.open({ url });
    assert.equal(m.migrationsApplied, postgresMigrations.length - 5);
    const ids = (await m.listStreams()).map((d) => d.id);
    for (const id of ids) assert.match(String(id), /^[0-9a-f]{32}$/);
    assert.equal(new Set(ids).size, 3, 'one id per stream');
    await m.updateStream({ name: 'a', partitions: 2, bindings: ['a'], retentionMs: null, createdAt: 1 });
    await m.close();
    m = await PostgresMetastore.open({ url });
    assert.deepEqual(
      (await m.listStreams()).map((d) => d.id),
      ids,
      'the same ids after reopening and an update',
    );
    await m.createStream({ ...stream('d'), id: 'cd'.repeat(16) });
    assert.equal((await m.listStreams()).find((d) => d.name === 'd')?.id, 'cd'.repeat(16));
    await m.close();
  });

  it('migration 7 gives the sessions of an older database publish-key marks, keeping the session and its queue', async () => {
    const url = await server.createDatabase();
    const p = createPool({ url }, 'test');
    await migratePostgres(p, postgresMigrations.slice(0, 6), 'flowmq_schema_migrations', 'metastore');
    await p.query('test insert', "INSERT INTO client_sessions (client_id, protocol, state, expires_at, updated_at) VALUES ('c', 'mqtt', '{}', NULL, 1)", []);
    // A queue entry written by the previous schema's own statement.
    await p.query('test append', "SELECT first_seq FROM flowmq_queue_update('c', '{}'::bigint[], '{}'::bytea[], '{}'::bigint[], ARRAY['four'::bytea], 10)", []);
    await p.end();
    let m = await PostgresMetastore.open({ url });
    assert.equal(m.migrationsApplied, postgresMigrations.length - 6);
    assert.deepEqual(await m.getSession('c'), { clientId: 'c', protocol: 'mqtt', state: '{}', expiresAt: null, updatedAt: 1 });
    await m.updateQueue('c', { append: [Buffer.from('five')], marks: { '12': 7 } }, 10);
    await m.close();
    m = await PostgresMetastore.open({ url });
    assert.deepEqual((await m.getSession('c'))?.marks, { '12': 7 });
    assert.deepEqual(
      (await m.readQueue('c', 10)).map((e) => e.data.toString()),
      ['four', 'five'],
    );
    await m.close();
  });

  it('keeps startup options given in the URL (a schema per broker through search_path) and synchronous_commit on', async () => {
    const url = await server.createDatabase();
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    await admin.query('CREATE SCHEMA b1; CREATE SCHEMA b2');
    // A database whose default would make an acknowledgement before the commit is durable: FlowMQ overrides it.
    await admin.query(`ALTER DATABASE "${new URL(url).pathname.slice(1)}" SET synchronous_commit = off`);
    const inSchema = (schema: string) => `${url}?options=${encodeURIComponent(`-c search_path=${schema}`)}`;
    const [m1, m2] = await Promise.all([PostgresMetastore.open({ url: inSchema('b1') }), PostgresMetastore.open({ url: inSchema('b2') })]);
    const [w1, w2] = await Promise.all([PostgresWal.open({ url: inSchema('b1') }), PostgresWal.open({ url: inSchema('b2') })]);
    await m1.createStream(stream('only-in-b1'));
    await w1.append(entry('k/0', 0));
    assert.deepEqual(
      (await m2.listStreams()).map((d) => d.name),
      [],
    );
    assert.deepEqual(await replayAll(w2), []);
    const tables = await admin.query("SELECT table_schema FROM information_schema.tables WHERE table_name = 'streams' ORDER BY 1");
    assert.deepEqual(
      tables.rows.map((r) => r.table_schema),
      ['b1', 'b2'],
    );
    await admin.end();
    const p = createPool({ url: inSchema('b1') }, 'test');
    assert.deepEqual((await p.query('test', 'SHOW synchronous_commit')).rows, [{ synchronous_commit: 'on' }]);
    assert.deepEqual((await p.query('test', 'SHOW search_path')).rows, [{ search_path: 'b1' }]);
    await p.end();
    await Promise.all([m1.close(), m2.close(), w1.close(), w2.close()]);
  });

  it('times a statement blocked by another connection out with STORAGE_ERROR, then works again', async () => {
    const url = await server.createDatabase();
    const m = await PostgresMetastore.open({ url, statementTimeoutMs: 300 });
    await m.putSession({ clientId: 'locked', protocol: 'mqtt', state: '{}', expiresAt: null, updatedAt: 1 });
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    await other.query('BEGIN');
    await other.query("SELECT * FROM client_sessions WHERE client_id = 'locked' FOR UPDATE");
    await assert.rejects(m.putSession({ clientId: 'locked', protocol: 'mqtt', state: '{"x":1}', expiresAt: null, updatedAt: 2 }), (e: unknown) => {
      assert.ok(storageError(e), String(e));
      assert.match((e as FlowError).message, /statement timed out/);
      return true;
    });
    await other.query('ROLLBACK');
    await other.end();
    await m.putSession({ clientId: 'locked', protocol: 'mqtt', state: '{"x":2}', expiresAt: null, updatedAt: 3 });
    assert.equal((await m.getSession('locked'))?.state, '{"x":2}');
    await m.close();
  });

  it('keeps per-key order over a pool for calls issued without awaiting', async () => {
    const url = await server.createDatabase();
    const m = await PostgresMetastore.open({ url, poolSize: 8 });
    // Alternating puts and deletes of one session, none awaited: the last one issued wins. Without per-key
    // chaining they run on different connections and commit in any order.
    const ops: Array<Promise<unknown>> = [];
    for (let i = 0; i < 60; i++) {
      for (const id of ['a', 'b', 'c']) {
        if (i % 2 === 0) ops.push(m.putSession({ clientId: id, protocol: 'mqtt', state: `{"i":${i}}`, expiresAt: null, updatedAt: i }));
        else ops.push(m.deleteSession(id));
      }
    }
    ops.push(m.putSession({ clientId: 'a', protocol: 'mqtt', state: '{"last":true}', expiresAt: null, updatedAt: 99 }));
    const read = m.getSession('a');
    const readB = m.getSession('b');
    await Promise.all(ops);
    assert.equal((await read)?.state, '{"last":true}', 'a read sees the writes issued before it');
    assert.equal(await readB, null);
    // Queue writes and reads issued at once keep their order too.
    const q: Array<Promise<unknown>> = [];
    for (let i = 0; i < 40; i++) q.push(m.updateQueue('q', { append: [Buffer.from(String(i))] }, 1000));
    const ack = m.ackQueue('q', 10);
    const page = m.readQueue('q', 100);
    const seqs = (await Promise.all(q)).map((r) => (r as { seqs: number[] }).seqs[0]);
    await ack;
    assert.deepEqual(
      seqs,
      [...seqs].sort((x, y) => x - y),
      'seqs follow the order of the calls',
    );
    assert.deepEqual(
      (await page).map((e) => e.data.toString()),
      Array.from({ length: 30 }, (_, i) => String(i + 10)),
    );
    // The bound applies to the kept length (no COUNT): 30 entries, a limit of 25 drops 5 plus the one appended.
    assert.equal((await m.updateQueue('q', { append: [Buffer.from('x')] }, 25)).dropped, 6);
    assert.equal((await m.readQueue('q', 100)).length, 25);
    // Retained: a put then a listing issued at once.
    const puts = Array.from({ length: 20 }, (_, i) => m.putRetained(`t/${i}`, Buffer.from('x')));
    const list = m.listRetained();
    await Promise.all(puts);
    assert.equal((await list).length, 20);
    await m.close();
  });

  it('fences stale partition epochs: openPartition bumps, every mutation with an older epoch is refused and changes nothing', async () => {
    const url = await server.createDatabase();
    const [m1, m2] = await Promise.all([PostgresMetastore.open({ url }), PostgresMetastore.open({ url })]);
    await m1.createStream(stream('f'));
    const e1 = await m1.openPartition('f', 0);
    assert.equal(e1, 1);
    await m1.commitSegment(segment('f', 0, 0, 10), e1);
    // A second broker takes the partition.
    const e2 = await m2.openPartition('f', 0);
    assert.equal(e2, 2);
    await assert.rejects(m1.commitSegment(segment('f', 0, 10, 20), e1), fenced);
    await assert.rejects(m1.setLogStartOffset('f', 0, 5, e1), fenced);
    await assert.rejects(m1.deleteSegment('f', 0, 0, e1), fenced);
    await assert.rejects(m1.putProducerState('f', 0, 10, '[]', e1), fenced);
    assert.deepEqual(await m2.getPartitionState('f', 0), { stream: 'f', partition: 0, logStartOffset: 0, flushedOffset: 10, epoch: 2 });
    assert.equal((await m2.listSegments('f', 0)).length, 1);
    assert.equal(await m2.getProducerState('f', 0), null);
    // The owner goes on.
    await m2.commitSegment(segment('f', 0, 10, 20), e2);
    await m2.setLogStartOffset('f', 0, 10, e2);
    await m2.setLogStartOffset('f', 0, 3, e2); // never backwards
    assert.equal((await m2.getPartitionState('f', 0))?.logStartOffset, 10);
    await assert.rejects(m1.openPartition('nope', 0), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
    // Many brokers opening at once each get their own epoch.
    const epochs = await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? m1 : m2).openPartition('f', 1)));
    assert.deepEqual(
      [...epochs].sort((x, y) => x - y),
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
    );
    // Producer ids from two brokers never overlap.
    const ids = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? m1 : m2).allocateProducerIds(5)));
    const all = ids.flatMap((first) => [0, 1, 2, 3, 4].map((k) => first + k));
    assert.equal(new Set(all).size, 100);
    await Promise.all([m1.close(), m2.close()]);
  });

  it('WAL: group commit writes the appends of one tick as one transaction, acknowledged after COMMIT', async () => {
    const url = await server.createDatabase();
    const wal = await PostgresWal.open({ url });
    const written = Array.from({ length: 300 }, (_, i) => entry(`g/${i % 3}`, Math.floor(i / 3)));
    await Promise.all(written.map((e) => wal.append(e)));
    const f = wal.figures();
    assert.equal(f.entries, 300);
    assert.ok((f.commits as number) < 300, `groups formed: ${String(f.commits)} commits`);
    // Committed for anyone to read: another instance replays them in per-key order.
    const other = await PostgresWal.open({ url });
    const got = await replayAll(other);
    for (const key of ['g/0', 'g/1', 'g/2']) {
      assert.deepEqual(
        got.filter((e) => e.key === key).map((e) => e.baseOffset),
        Array.from({ length: 100 }, (_, i) => i),
      );
    }
    assert.equal(other.size(), wal.size());
    // A group of more rows than one statement takes (a transaction of several INSERTs) keeps the order too.
    const many = Array.from({ length: 4500 }, (_, i) => entry('many/0', i));
    await Promise.all(many.map((e) => wal.append(e)));
    const replayed = (await replayAll(wal)).filter((e) => e.key === 'many/0');
    assert.deepEqual(
      replayed.map((e) => e.baseOffset),
      many.map((e) => e.baseOffset),
    );
    assert.ok(replayed.every((e, i) => e.data.equals(many[i].data)));
    await Promise.all([wal.close(), other.close()]);
  });

  it('WAL: a group goes to the server as one statement (lock, insert and commit in one round trip)', async () => {
    const url = await server.createDatabase();
    const wal = await PostgresWal.open({ url });
    await wal.fence('r/0', 3);
    const before = wal.figures();
    for (let round = 0; round < 5; round++) {
      await Promise.all(Array.from({ length: 12 }, (_, i) => wal.append(entry(`r/${i % 4}`, round * 3 + Math.floor(i / 4), 3))));
    }
    const f = wal.figures();
    const commits = (f.commits as number) - (before.commits as number);
    assert.ok(commits >= 5, `${commits} groups`);
    assert.equal((f.queries as number) - (before.queries as number), commits, 'one statement per group');
    // What landed is what a transaction would have written, in append order per key.
    const got = await replayAll(wal);
    for (let k = 0; k < 4; k++) {
      assert.deepEqual(
        got.filter((e) => e.key === `r/${k}`).map((e) => e.baseOffset),
        Array.from({ length: 15 }, (_, i) => i),
      );
    }
    await wal.close();
  });

  it('WAL: fence() raises a key epoch across instances; a stale append is refused with FENCED and never lands', async () => {
    const url = await server.createDatabase();
    const a = await PostgresWal.open({ url });
    const b = await PostgresWal.open({ url });
    await a.fence('p/0', 1);
    await a.append(entry('p/0', 0, 1));
    // Broker b takes the partition: from then on a's appends (epoch 1) are refused, checked in the database.
    await b.fence('p/0', 2);
    await assert.rejects(a.append(entry('p/0', 1, 1)), fenced);
    // Appends issued while a fence is in flight either land before it or are refused: none after.
    const racing = Array.from({ length: 20 }, (_, i) =>
      a.append(entry('p/1', i, 1)).then(
        () => 'ok',
        (e: unknown) => (fenced(e) ? 'fenced' : String(e)),
      ),
    );
    await b.fence('p/1', 5);
    const outcomes = await Promise.all(racing);
    assert.ok(
      outcomes.every((o) => o === 'ok' || o === 'fenced'),
      outcomes.join(),
    );
    // Order: once one was refused, every later one is.
    const firstFenced = outcomes.indexOf('fenced');
    if (firstFenced >= 0) assert.ok(outcomes.slice(firstFenced).every((o) => o === 'fenced'));
    await assert.rejects(a.append(entry('p/1', 20, 1)), fenced);
    await b.append(entry('p/0', 1, 2));
    await b.append(entry('p/1', 0, 5));
    // A lower fence never lowers the epoch.
    await b.fence('p/0', 1);
    await assert.rejects(b.append(entry('p/0', 2, 1)), fenced);
    const got = await replayAll(b);
    assert.deepEqual(
      got.filter((e) => e.key === 'p/0').map((e) => [e.baseOffset, e.epoch]),
      [
        [0, 1],
        [1, 2],
      ],
    );
    const p1 = got.filter((e) => e.key === 'p/1');
    assert.equal(p1.filter((e) => e.epoch === 1).length, outcomes.filter((o) => o === 'ok').length, 'exactly the acknowledged stale appends are there');
    assert.deepEqual(p1.at(-1)?.epoch, 5);
    await Promise.all([a.close(), b.close()]);
  });

  it('WAL: a connection killed in the middle of a group transaction fails that group only; the WAL goes on', async () => {
    const url = await server.createDatabase();
    const wal = await PostgresWal.open({ url });
    await wal.fence('kill/0', 1);
    await wal.append(entry('kill/0', 0));
    // Hold the key's epoch row, so that the next group waits inside its transaction on a checked-out connection.
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    await other.query('BEGIN');
    await other.query("SELECT * FROM wal_epochs WHERE key = 'kill/0' FOR UPDATE");
    // A group too large for one statement, so it runs as a transaction on a checked-out connection. Its outcome
    // is taken at once (it may fail before the test looks at it).
    const blocked = Promise.all(Array.from({ length: 2500 }, (_, i) => wal.append(entry('kill/0', 1 + i)))).then(
      () => null,
      (e: unknown) => e,
    );
    const waiting = async () =>
      (await other.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'flowmq-wal' AND wait_event_type = 'Lock'")).rows[0].n > 0;
    const deadline = Date.now() + 20_000;
    while (!(await waiting())) {
      assert.ok(Date.now() < deadline, 'the group waits for the lock');
      await new Promise((r) => setTimeout(r, 20));
    }
    await other.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'flowmq-wal' AND wait_event_type = 'Lock'");
    const failure = await blocked;
    assert.ok(storageError(failure), String(failure));
    await other.query('ROLLBACK');
    await other.end();
    await wal.append(entry('kill/0', 1));
    assert.deepEqual(
      (await replayAll(wal)).map((e) => e.baseOffset),
      [0, 1],
    );
    await wal.close();
  });

  it('survives a PostgreSQL restart: STORAGE_ERROR while down, working again by itself, no acknowledged entry lost', async () => {
    const url = await server.createDatabase();
    const m = await PostgresMetastore.open({ url, connectTimeoutMs: 2000 });
    const wal = await PostgresWal.open({ url, connectTimeoutMs: 2000 });
    await m.createStream(stream('r'));
    const epoch = await m.openPartition('r', 0);
    await wal.fence('r/0', epoch);
    await wal.append(entry('r/0', 0, epoch));
    // Several connections in the pools, idle when the server goes: each one's death is an 'error' event on its
    // pool, which without a listener would end this process.
    await Promise.all(Array.from({ length: 6 }, (_, i) => m.putSession({ clientId: `s${i}`, protocol: 'mqtt', state: '{}', expiresAt: null, updatedAt: 1 })));
    await Promise.all([wal.fence('x/0', 0), wal.fence('x/1', 0), wal.fence('x/2', 0)]);

    await server.stopServer();
    await assert.rejects(m.getSession('s0'), (e: unknown) => {
      assert.ok(storageError(e), String(e));
      assert.match((e as FlowError).message, new RegExp(`127\\.0\\.0\\.1:${server.port}`));
      return true;
    });
    // The WAL fails the appends, and the key then accepts only an entry at or below the lowest failed offset.
    const failing = [wal.append(entry('r/0', 1, epoch)), wal.append(entry('r/0', 2, epoch))];
    for (const p of failing) await assert.rejects(p, storageError);
    await server.startServer();

    await assert.rejects(wal.append(entry('r/0', 3, epoch)), storageError, 'past the hole');
    await eventually(() => wal.append(entry('r/0', 1, epoch)), 'WAL append');
    await wal.append(entry('r/0', 2, epoch));
    await wal.append(entry('r/0', 3, epoch));
    assert.equal((await eventually(() => m.getSession('s0'), 'metastore read'))?.clientId, 's0');
    await m.commitSegment(segment('r', 0, 0, 2), epoch);
    assert.equal((await m.getPartitionState('r', 0))?.flushedOffset, 2);

    const mf = m.figures();
    assert.ok((mf.reconnects as number) >= 1, `metastore reconnects: ${JSON.stringify(mf)}`);
    assert.ok((mf.idleErrors as number) >= 1, `idle connections lost: ${JSON.stringify(mf)}`);
    assert.deepEqual(
      (await replayAll(wal)).filter((e) => e.key === 'r/0').map((e) => e.baseOffset),
      [0, 1, 2, 3],
    );
    // Trim drops what is flushed and says how much.
    const before = wal.size();
    const released = await wal.trim((key) => (key === 'r/0' ? 2 : 0));
    assert.equal(released, Buffer.byteLength('r/0@0') + Buffer.byteLength('r/0@1'));
    assert.equal(wal.size(), before - released);
    await Promise.all([m.close(), wal.close()]);
  });
});
