import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { isFlowError } from '../../../src/core/index.js';
import { SqliteMetastore, migrations, type StreamDef } from '../../../src/storage/metastore/index.js';
import { migrate } from '../../../src/storage/metastore/sqlite.js';

const def = (name: string): StreamDef => ({ name, partitions: 2, bindings: [name], retentionMs: null, createdAt: 1 });

describe('SqliteMetastore', () => {
  let root = '';
  let n = 0;
  const freshFile = (): string => join(root, `t-${n++}`, 'meta.db');

  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'flowmq-sqlite-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('writes the consumer puts of one event-loop turn in one transaction, the latest record of each consumer', async () => {
    const m = SqliteMetastore.open(freshFile());
    const rec = (name: string, seq: number) => ({
      stream: 's',
      name,
      config: '{}',
      createdAt: 1,
      deliveredSeq: seq,
      deliveredConsumerSeq: seq,
      ackFloor: 0,
      acked: [],
    });
    const puts: Array<Promise<void>> = [];
    for (let i = 1; i <= 100; i++) for (const name of ['a', 'b', 'c']) puts.push(m.putConsumer(rec(name, i)));
    await Promise.all(puts);
    assert.deepEqual(m.consumerStats, { puts: 300, writes: 1 });
    assert.deepEqual(
      (await m.listConsumers('s')).map((r) => r.deliveredSeq),
      [100, 100, 100],
    );
    // Any other consumer call writes the pending puts first: a read sees them, a later put is a new batch.
    const p1 = m.putConsumer(rec('a', 101));
    const read = m.getConsumer('s', 'a');
    const p2 = m.putConsumer(rec('a', 102));
    const del = m.deleteConsumer('s', 'b');
    const p3 = m.putConsumer(rec('b', 103));
    await Promise.all([p1, p2, del, p3]);
    assert.equal((await read)?.deliveredSeq, 101);
    assert.deepEqual(
      (await m.listConsumers('s')).map((r) => [r.name, r.deliveredSeq]),
      [
        ['a', 102],
        ['b', 103],
        ['c', 100],
      ],
    );
    assert.deepEqual(m.consumerStats, { puts: 303, writes: 4 });
    await m.close();
  });

  describe('schema migrations', () => {
    it('records every migration once, in order, and does not re-apply them on reopen', async () => {
      const file = freshFile();
      const m = SqliteMetastore.open(file);
      assert.equal(m.schemaVersion(), migrations.length);
      await m.close();
      await SqliteMetastore.open(file).close();

      const db = new Database(file, { readonly: true });
      const rows = db.prepare('SELECT version, name, applied_at FROM schema_migrations ORDER BY version').all() as Array<{
        version: number;
        name: string;
        applied_at: number;
      }>;
      db.close();
      assert.deepEqual(
        rows.map((r) => [r.version, r.name]),
        migrations.map((mg) => [mg.version, mg.name]),
      );
      for (const r of rows) assert.ok(r.applied_at > 1_600_000_000_000, 'applied_at is a ms timestamp');
    });

    it('refuses a database written by a newer FlowMQ', async () => {
      const file = freshFile();
      await SqliteMetastore.open(file).close();
      const db = new Database(file);
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(migrations.length + 1, 'from the future', Date.now());
      db.close();
      assert.throws(
        () => SqliteMetastore.open(file),
        (e: unknown) => isFlowError(e, 'STORAGE_ERROR') && /newer/.test(e.message),
      );
    });

    it('applies only pending migrations, and a failing one rolls back the whole batch', () => {
      const db = new Database(':memory:');
      assert.equal(migrate(db), migrations.length);
      const extra = [
        ...migrations,
        { version: migrations.length + 1, name: 'add a table', sql: 'CREATE TABLE extra (x INTEGER)' },
        { version: migrations.length + 2, name: 'broken', sql: 'CREATE TABLE extra2 (x INTEGER); THIS IS NOT SQL' },
      ];
      assert.throws(() => migrate(db, extra));
      const version = () => (db.prepare('SELECT MAX(version) AS v FROM schema_migrations').get() as { v: number }).v;
      assert.equal(version(), migrations.length, 'nothing of the failed batch recorded');
      assert.equal(db.prepare("SELECT name FROM sqlite_master WHERE name = 'extra'").get(), undefined, 'nor applied');

      assert.equal(migrate(db, extra.slice(0, -1)), migrations.length + 1);
      assert.equal(version(), migrations.length + 1);
      assert.notEqual(db.prepare("SELECT name FROM sqlite_master WHERE name = 'extra'").get(), undefined);
      db.close();
    });

    it('migration 4 gives existing partitions epoch 0 and existing queues counters past their seqs', async () => {
      const file = freshFile();
      await SqliteMetastore.open(file).close(); // creates the directory
      for (const f of [file, `${file}-wal`, `${file}-shm`]) await rm(f, { force: true });
      const db = new Database(file);
      db.pragma('journal_mode = WAL');
      migrate(db, migrations.slice(0, 3));
      db.prepare("INSERT INTO streams (name, partitions, bindings, retention_ms, created_at) VALUES ('s', 1, '[]', NULL, 1)").run();
      db.prepare("INSERT INTO partitions (stream, partition, log_start_offset, flushed_offset) VALUES ('s', 0, 3, 10)").run();
      const q = db.prepare('INSERT INTO session_queue (client_id, seq, data) VALUES (?, ?, ?)');
      q.run('c', 5, Buffer.from('five'));
      q.run('c', 7, Buffer.from('seven'));
      db.close();
      const m = SqliteMetastore.open(file);
      assert.deepEqual(await m.getPartitionState('s', 0), { stream: 's', partition: 0, logStartOffset: 3, flushedOffset: 10, epoch: 0 });
      assert.equal(await m.openPartition('s', 0), 1);
      const { seqs, dropped } = await m.updateQueue('c', { append: [Buffer.from('eight')] }, 3);
      assert.deepEqual([seqs, dropped], [[8], 0]);
      assert.equal((await m.updateQueue('c', { append: [Buffer.from('nine')] }, 3)).dropped, 1, 'the length was counted at migration');
      assert.deepEqual(
        (await m.readQueue('c', 10)).map((e) => e.data.toString()),
        ['seven', 'eight', 'nine'],
      );
      await m.close();
    });

    it('migration 6 brings a version-5 database to JetStream consumer state, keeping what it held', async () => {
      const file = freshFile();
      await SqliteMetastore.open(file).close(); // creates the directory
      for (const f of [file, `${file}-wal`, `${file}-shm`]) await rm(f, { force: true });
      const db = new Database(file);
      db.pragma('journal_mode = WAL');
      migrate(db, migrations.slice(0, 5));
      db.prepare("INSERT INTO streams (name, partitions, bindings, retention_ms, created_at) VALUES ('s', 1, '[]', NULL, 1)").run();
      db.close();
      const m = SqliteMetastore.open(file);
      assert.equal(m.schemaVersion(), migrations.length);
      assert.deepEqual(
        (await m.listStreams()).map((s) => s.name),
        ['s'],
      );
      assert.deepEqual(await m.listConsumers(), []);
      const rec = { stream: 's', name: 'c', config: '{}', createdAt: 2, deliveredSeq: 3, deliveredConsumerSeq: 4, ackFloor: 1, acked: [3] };
      await m.putConsumer(rec);
      assert.deepEqual(await m.getConsumer('s', 'c'), rec);
      await m.close();
    });

    it('migration 7 brings a version-6 database to control documents, keeping what it held', async () => {
      const file = freshFile();
      await SqliteMetastore.open(file).close();
      for (const f of [file, `${file}-wal`, `${file}-shm`]) await rm(f, { force: true });
      const db = new Database(file);
      db.pragma('journal_mode = WAL');
      migrate(db, migrations.slice(0, 6));
      db.prepare("INSERT INTO streams (name, partitions, bindings, retention_ms, created_at) VALUES ('s', 1, '[]', NULL, 1)").run();
      db.close();
      const m = SqliteMetastore.open(file);
      assert.equal(m.schemaVersion(), migrations.length);
      assert.deepEqual(
        (await m.listStreams()).map((x) => x.name),
        ['s'],
      );
      assert.equal(await m.controlVersion(), 0);
      assert.deepEqual(await m.listControl('user'), []);
      await m.putControl('user', 'u', { a: 1 });
      assert.equal(await m.controlVersion(), 1);
      await m.close();
    });

    it('migration 8 gives streams a settings column, existing ones without settings', async () => {
      const file = freshFile();
      await SqliteMetastore.open(file).close();
      for (const f of [file, `${file}-wal`, `${file}-shm`]) await rm(f, { force: true });
      const db = new Database(file);
      db.pragma('journal_mode = WAL');
      migrate(db, migrations.slice(0, 7));
      db.prepare("INSERT INTO streams (name, partitions, bindings, retention_ms, created_at) VALUES ('s', 1, '[]', 5000, 1)").run();
      db.close();
      const m = SqliteMetastore.open(file);
      assert.equal(m.schemaVersion(), migrations.length);
      // (Migration 9 gave it an id too: see below.)
      assert.deepEqual(
        (await m.listStreams()).map(({ id: _id, ...d }) => d),
        [{ name: 's', partitions: 1, bindings: [], retentionMs: 5000, createdAt: 1 }],
      );
      await m.updateStream({
        name: 's',
        partitions: 1,
        bindings: [],
        retentionMs: 5000,
        createdAt: 1,
        segmentBytes: 1 << 20,
        configs: { 'min.insync.replicas': '2' },
      });
      assert.deepEqual((await m.listStreams())[0].configs, { 'min.insync.replicas': '2' });
      await m.close();
    });

    it('migration 9 gives every existing stream its own id, kept by later opens and updates', async () => {
      const file = freshFile();
      await SqliteMetastore.open(file).close();
      for (const f of [file, `${file}-wal`, `${file}-shm`]) await rm(f, { force: true });
      const db = new Database(file);
      db.pragma('journal_mode = WAL');
      migrate(db, migrations.slice(0, 8));
      const ins = db.prepare('INSERT INTO streams (name, partitions, bindings, retention_ms, created_at, settings) VALUES (?, 1, ?, NULL, 1, NULL)');
      for (const name of ['a', 'b', 'c']) ins.run(name, JSON.stringify([name]));
      db.close();
      let m = SqliteMetastore.open(file);
      assert.equal(m.schemaVersion(), migrations.length);
      const ids = (await m.listStreams()).map((d) => d.id);
      for (const id of ids) assert.match(String(id), /^[0-9a-f]{32}$/);
      assert.equal(new Set(ids).size, 3, 'one id per stream');
      await m.updateStream({ name: 'a', partitions: 2, bindings: ['a'], retentionMs: null, createdAt: 1 });
      await m.close();
      m = SqliteMetastore.open(file);
      assert.deepEqual(
        (await m.listStreams()).map((d) => d.id),
        ids,
        'the same ids after reopening and an update',
      );
      // A stream made now keeps the id it is given; made again under a name, another id.
      await m.deleteStream('b');
      await m.createStream({ name: 'b', partitions: 1, bindings: ['b'], retentionMs: null, createdAt: 2, id: 'ab'.repeat(16) });
      assert.equal((await m.listStreams()).find((d) => d.name === 'b')?.id, 'ab'.repeat(16));
      await assert.rejects(m.createStream({ name: 'd', partitions: 1, bindings: [], retentionMs: null, createdAt: 2, id: 'nothex' }), (e: unknown) =>
        isFlowError(e, 'INVALID_ARGUMENT'),
      );
      await m.close();
    });

    it('migration 10 gives an existing session queue publish-key marks, keeping the session and its entries', async () => {
      const file = freshFile();
      await SqliteMetastore.open(file).close();
      for (const f of [file, `${file}-wal`, `${file}-shm`]) await rm(f, { force: true });
      const db = new Database(file);
      db.pragma('journal_mode = WAL');
      migrate(db, migrations.slice(0, 9));
      db.prepare("INSERT INTO client_sessions (client_id, protocol, state, expires_at, updated_at) VALUES ('c', 'mqtt', '{}', NULL, 1)").run();
      db.prepare("INSERT INTO session_queue (client_id, seq, data) VALUES ('c', 4, ?)").run(Buffer.from('four'));
      db.prepare("INSERT INTO session_queues (client_id, next_seq, length) VALUES ('c', 5, 1)").run();
      db.close();
      let m = SqliteMetastore.open(file);
      assert.equal(m.schemaVersion(), 10);
      assert.deepEqual(await m.getSession('c'), { clientId: 'c', protocol: 'mqtt', state: '{}', expiresAt: null, updatedAt: 1 });
      const { seqs } = await m.updateQueue('c', { append: [Buffer.from('five')], marks: { '12': 7 } }, 10);
      assert.deepEqual(seqs, [5]);
      await m.close();
      m = SqliteMetastore.open(file);
      assert.deepEqual((await m.getSession('c'))?.marks, { '12': 7 });
      assert.deepEqual(
        (await m.readQueue('c', 10)).map((e) => e.data.toString()),
        ['four', 'five'],
      );
      await m.close();
    });

    it('refuses a migration list that is out of order', () => {
      const db = new Database(':memory:');
      assert.throws(() => migrate(db, [{ version: 2, name: 'skips 1', sql: '' }]), /out of order/);
      db.close();
    });
  });

  it("keeps a stream's createdAt when the stream is updated", async () => {
    const m = SqliteMetastore.open(':memory:');
    await m.createStream({ ...def('s'), createdAt: 1000 });
    await m.updateStream({ ...def('s'), partitions: 4, createdAt: 2000 });
    assert.deepEqual(await m.listStreams(), [{ ...def('s'), partitions: 4, createdAt: 1000 }]);
    await m.close();
  });

  it('uses WAL journal mode', async () => {
    const file = freshFile();
    const m = SqliteMetastore.open(file);
    await m.createStream(def('s'));
    const db = new Database(file, { readonly: true });
    assert.equal(db.pragma('journal_mode', { simple: true }), 'wal');
    db.close();
    await m.close();
  });

  it('answers a write only after syncing the journal, and concurrent writes share syncs', async () => {
    const file = freshFile();
    const m = SqliteMetastore.open(file);
    await m.createStream(def('s'));
    assert.equal(m.journalSyncs, 1, 'one write, one journal sync before it was answered');
    // 50 commits issued together: each is answered by a sync that started after it, so at most 2 syncs.
    await Promise.all(Array.from({ length: 50 }, (_, i) => m.commitOffsets('g', [{ stream: 's', partition: 0, offset: i, metadata: null }])));
    assert.ok(m.journalSyncs >= 2 && m.journalSyncs <= 3, `50 concurrent commits took ${m.journalSyncs - 1} syncs`);
    // Reads never wait for a sync.
    const before = m.journalSyncs;
    assert.equal((await m.fetchOffset('g', 's', 0))?.offset, 49);
    assert.equal(m.journalSyncs, before);
    // Queue writes resolve at commit (the MQTT adapter needs their seqs at once); their sync follows unasked.
    const synced = m.journalSyncs;
    const { seqs } = await m.updateQueue('c', { append: [Buffer.from('x')] }, 10);
    assert.equal(seqs.length, 1);
    for (let i = 0; i < 100 && m.journalSyncs === synced; i++) await new Promise((r) => setTimeout(r, 5));
    assert.equal(m.journalSyncs, synced + 1, 'the queue write was synced without anyone waiting for it');
    await m.close();
    // What was answered is in the file for the next process.
    const again = SqliteMetastore.open(file);
    assert.equal((await again.fetchOffset('g', 's', 0))?.offset, 49);
    await again.close();
  });
  it('refuses partition state, segments and offsets for a stream that does not exist', async () => {
    const m = SqliteMetastore.open(':memory:');
    const notFound = (e: unknown) => isFlowError(e, 'NOT_FOUND');
    await assert.rejects(
      m.commitSegment(
        {
          stream: 'ghost',
          partition: 0,
          baseOffset: 0,
          endOffset: 1,
          objectKey: 'k',
          size: 1,
          maxTimestamp: 0,
          createdAt: 0,
        },
        0,
      ),
      notFound,
    );
    await assert.rejects(m.setLogStartOffset('ghost', 0, 5, 0), notFound);
    await assert.rejects(m.openPartition('ghost', 0), notFound);
    await assert.rejects(m.commitOffsets('g', [{ stream: 'ghost', partition: 0, offset: 1, metadata: null }]), notFound);
    await m.close();
  });

  it('never moves the log start offset backwards', async () => {
    const m = SqliteMetastore.open(':memory:');
    await m.createStream(def('s'));
    await m.setLogStartOffset('s', 0, 50, 0);
    await m.setLogStartOffset('s', 0, 20, 0); // a stale retention pass
    assert.equal((await m.getPartitionState('s', 0))?.logStartOffset, 50);
    await m.setLogStartOffset('s', 0, 60, 0);
    assert.equal((await m.getPartitionState('s', 0))?.logStartOffset, 60);
    await m.close();
  });

  it('validates its arguments', async () => {
    const m = SqliteMetastore.open(':memory:');
    const invalid = (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT');
    await assert.rejects(m.createStream({ ...def('s'), partitions: 0 }), invalid);
    await assert.rejects(m.createStream({ ...def(''), partitions: 1 }), invalid);
    await m.createStream(def('s'));
    const seg = { stream: 's', partition: 0, baseOffset: 0, endOffset: 0, objectKey: 'k', size: 0, maxTimestamp: -1, createdAt: 0 };
    await assert.rejects(m.commitSegment(seg, 0), invalid, 'empty segment');
    await assert.rejects(m.commitSegment({ ...seg, endOffset: 1.5 }, 0), invalid);
    await assert.rejects(m.commitSegment({ ...seg, endOffset: 1 }, -1), invalid, 'a negative epoch');
    // -1 is how Kafka clients say "no offset"; accepted as is.
    await m.commitOffsets('g', [{ stream: 's', partition: 0, offset: -1, metadata: null }]);
    assert.equal((await m.fetchOffset('g', 's', 0))?.offset, -1);
    await m.close();
  });

  it('throws CLOSED after close, and close is idempotent', async () => {
    const m = SqliteMetastore.open(':memory:');
    await m.close();
    await m.close();
    await assert.rejects(m.listStreams(), (e: unknown) => isFlowError(e, 'CLOSED'));
    await assert.rejects(m.createStream(def('x')), (e: unknown) => isFlowError(e, 'CLOSED'));
  });

  it('creates the directory of the database file', async () => {
    const file = join(root, 'deep', 'er', 'meta.db');
    const m = SqliteMetastore.open(file);
    await m.createStream(def('s'));
    await m.close();
    const again = SqliteMetastore.open(file);
    assert.equal((await again.listStreams()).length, 1);
    await again.close();
  });
});
