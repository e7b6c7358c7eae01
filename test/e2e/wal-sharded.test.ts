/**
 * `--wal postgres` sharded over two PostgreSQL servers (`--wal-shard` twice), end to end with KafkaJS: a topic of
 * several partitions produced with acks=all lands in both shard databases (queried directly: each partition's rows on
 * the shard its key hashes to, nothing in the other), a broker killed with SIGKILL (nothing sealed, the tails only in
 * the WAL) reads every record back in order after a restart, and a restart with another shard list is refused with
 * one line naming both lists.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import kafkajsPkg from 'kafkajs';
import pg from 'pg';
import { shardOf } from '../../src/storage/wal/index.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';
import { eventually, FLOWMQ_BIN, FlowmqProcess, run } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

const TOPIC = 'sharded.orders';
const PARTITIONS = 6;
const PER_PARTITION = 40;

async function query<R>(url: string, sql: string): Promise<R[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(sql)).rows as R[];
  } finally {
    await c.end();
  }
}

describe('PostgreSQL WAL sharded over two servers, with KafkaJS', () => {
  let a: PostgresServer;
  let b: PostgresServer;
  let metastore: string;
  let shards: string[];
  let broker: FlowmqProcess | null = null;
  const dataDir = mkdtempSync(join(tmpdir(), 'flowmq-wal-sharded-'));
  const args = (list: string[]): string[] => [
    '--protocols',
    'kafka',
    '--metastore',
    metastore,
    '--wal',
    'postgres',
    ...list.flatMap((u) => ['--wal-shard', u]),
    // Segments far larger than what is produced: every record stays in the WAL until the restart reads it back.
    '--segment-bytes',
    '64MiB',
  ];

  before(async () => {
    [a, b] = await Promise.all([startPostgres(), startPostgres()]);
    metastore = await a.createDatabase();
    shards = [await a.createDatabase(), await b.createDatabase()];
  });
  after(async () => {
    await broker?.stop('SIGKILL');
    await Promise.all([a.stop(), b.stop()]);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('puts each partition on its shard, and reads every record back in order after kill -9', async () => {
    broker = await FlowmqProcess.start({ dataDir, args: args(shards) });
    const info = await broker.api<{ storage: { wal: string; walFigures: { shardCount: number } } }>('GET', '/api/v1/broker');
    assert.equal(info.storage.wal, 'postgres');
    assert.equal(info.storage.walFigures.shardCount, 2);

    const kafka = new Kafka({ clientId: 'sharded', brokers: [broker.kafka], logLevel: logLevel.NOTHING, retry: { retries: 3 } });
    const admin = kafka.admin();
    await admin.connect();
    assert.equal(await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: PARTITIONS }], waitForLeaders: true }), true);
    await admin.disconnect();
    const producer = kafka.producer({ allowAutoTopicCreation: false });
    await producer.connect();
    for (let i = 0; i < PER_PARTITION; i++) {
      await producer.send({
        topic: TOPIC,
        acks: -1,
        messages: Array.from({ length: PARTITIONS }, (_, p) => ({ partition: p, key: `k${p}`, value: `p${p}:${i}` })),
      });
    }
    await producer.disconnect();

    // The partitions' WAL keys (one per partition) on each shard: the shard databases hold nothing else.
    type Row = { key: string; n: number };
    const held = await Promise.all(shards.map((url) => query<Row>(url, 'SELECT key, count(*)::int AS n FROM wal_entries GROUP BY key ORDER BY key')));
    assert.ok(held[0].length > 0 && held[1].length > 0, `rows on both shards: ${JSON.stringify(held)}`);
    assert.equal(held[0].length + held[1].length, PARTITIONS, 'each partition on one shard only');
    for (let s = 0; s < 2; s++) for (const r of held[s]) assert.equal(shardOf(r.key, 2), s, `${r.key} is on the shard its hash names`);
    // The metastore's database records the list and holds no WAL table.
    const recorded = await query<{ endpoint: string }>(metastore, 'SELECT endpoint FROM wal_shard_list ORDER BY position');
    assert.deepEqual(
      recorded.map((r) => r.endpoint),
      [`127.0.0.1:${a.port}`, `127.0.0.1:${b.port}`],
    );
    assert.deepEqual(await query(metastore, "SELECT to_regclass('wal_entries') AS t"), [{ t: null }]);

    // kill -9: nothing sealed at shutdown; the restart reads every partition's tail from its shard.
    await broker.stop('SIGKILL');
    broker = await FlowmqProcess.start({ dataDir, args: args(shards) });
    const again = new Kafka({ clientId: 'sharded-read', brokers: [broker.kafka], logLevel: logLevel.NOTHING });
    const consumer = again.consumer({ groupId: 'sharded-readers' });
    await consumer.connect();
    await consumer.subscribe({ topic: TOPIC, fromBeginning: true });
    const got = new Map<number, string[]>();
    let total = 0;
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        const l = got.get(partition) ?? [];
        l.push(String(message.value));
        got.set(partition, l);
        total++;
      },
    });
    await eventually(() => total >= PARTITIONS * PER_PARTITION, 30_000, 'every record read back');
    await consumer.disconnect();
    for (let p = 0; p < PARTITIONS; p++) {
      assert.deepEqual(
        got.get(p),
        Array.from({ length: PER_PARTITION }, (_, i) => `p${p}:${i}`),
        `partition ${p} complete and in order`,
      );
    }
    assert.equal(total, PARTITIONS * PER_PARTITION, 'nothing duplicated');
    await broker.stop();
    broker = null;
  });

  it('refuses to start with another shard list, one line naming both', async () => {
    await broker?.stop('SIGKILL');
    broker = null;
    for (const list of [[shards[1], shards[0]], [shards[0]], []]) {
      const r = await run(
        process.execPath,
        [FLOWMQ_BIN, 'start', '--data-dir', dataDir, '--host', '127.0.0.1', '--kafka-port', '0', '--http-port', '0', '--log-level', 'silent', ...args(list)],
        { timeoutMs: 60_000 },
      );
      assert.equal(r.code, 1, `${list.length} shards: ${r.stderr}`);
      const lines = r.stderr.split('\n').filter((l) => l.trim() !== '');
      assert.equal(lines.length, 1, r.stderr);
      assert.match(r.stderr, /shard list recorded in the metastore is \[0: 127\.0\.0\.1:\d+ \(\w+\), 1: 127\.0\.0\.1:\d+ \(\w+\)\], this broker was given \[/);
    }
  });
});
