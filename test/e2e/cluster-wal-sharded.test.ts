// test-runner: apart (scripts/test.mjs): a 2-broker cluster and three PostgreSQL servers, whose leases must not starve for CPU
/**
 * Cluster mode on a WAL sharded over two PostgreSQL servers (`--wal-shard` twice, the metastore on a third): KafkaJS
 * produces acks=all to a topic whose partitions the two brokers share; the broker whose partitions lie on both
 * shards is killed with kill -9 (nothing sealed: segments far larger than what is produced), and the survivor takes
 * its partitions over, fencing and reading each one's tail from its own shard: every acknowledged record is read back
 * once, in order. A third broker started with the shards in another order is refused.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import pg from 'pg';
import { startCluster, startRefused, type TestCluster } from '../helpers/cluster.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';
import { kcatConsume } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

const TOPIC = 'shd.orders';
const PARTITIONS = 12;
const SENDS = 30;

async function keysOn(url: string): Promise<Array<{ key: string; n: number }>> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<{ key: string; n: number }>('SELECT key, count(*)::int AS n FROM wal_entries GROUP BY key')).rows;
  } finally {
    await c.end();
  }
}

describe('cluster on a WAL sharded over two PostgreSQL servers', { timeout: 180_000 }, () => {
  let a: PostgresServer;
  let b: PostgresServer;
  let shards: string[];
  let c: TestCluster;
  before(async () => {
    [a, b] = await Promise.all([startPostgres({ maxConnections: 300 }), startPostgres({ maxConnections: 300 })]);
    shards = [await a.createDatabase(), await b.createDatabase()];
    c = await startCluster({
      brokers: 2,
      haproxy: false,
      args: [...shards.flatMap((u) => ['--wal-shard', u]), '--segment-bytes', '64MiB'],
    });
    const admin = new Kafka({ brokers: [c.broker(1).kafka], clientId: 'shd-admin', logLevel: logLevel.NOTHING, retry: { retries: 10 } }).admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: PARTITIONS }], waitForLeaders: true });
    await admin.disconnect();
  });
  after(async () => {
    await c?.close();
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it("recovers a killed broker's partitions from both shards, every record once and in order", async () => {
    const rows = (await c.waitSettled({ min: { partition: PARTITIONS } })).filter((r) => r.kind === 'partition' && r.name.startsWith(`${TOPIC}/`));
    const ownerOf = new Map(rows.map((r) => [Number(r.name.slice(TOPIC.length + 1)), r.owner!]));

    const producer = new Kafka({
      brokers: c.bootstrap,
      clientId: 'shd-producer',
      logLevel: logLevel.NOTHING,
      retry: { retries: 10 },
    }).producer({ allowAutoTopicCreation: false });
    await producer.connect();
    for (let s = 0; s < SENDS; s++) {
      await producer.send({ topic: TOPIC, acks: -1, messages: Array.from({ length: PARTITIONS }, (_, p) => ({ partition: p, value: `${p}:${s}` })) });
    }
    await producer.disconnect();

    // Where each partition's entries are: one shard, none on the other.
    const held = await Promise.all(shards.map(keysOn));
    const shardOfPartition = new Map<number, number>();
    for (let s = 0; s < 2; s++)
      for (const r of held[s]) {
        const p = Number(r.key.slice(r.key.lastIndexOf('/') + 1));
        assert.equal(shardOfPartition.has(p), false, `partition ${p} on one shard only`);
        shardOfPartition.set(p, s);
        assert.equal(r.n > 0, true);
      }
    assert.equal(shardOfPartition.size, PARTITIONS, `every partition in the WAL: ${JSON.stringify(held)}`);
    assert.ok(held[0].length > 0 && held[1].length > 0, 'both shards hold partitions');

    // The victim: a broker whose partitions lie on both shards (with 12 partitions over 2 brokers, one nearly always does).
    const shardsOf = (id: number): Set<number> => new Set([...ownerOf].filter(([, o]) => o === id).map(([p]) => shardOfPartition.get(p)!));
    const victim = [1, 2].find((id) => shardsOf(id).size === 2);
    assert.ok(victim !== undefined, `a broker with partitions on both shards: ${JSON.stringify([...ownerOf])}`);
    const survivor = victim === 1 ? 2 : 1;
    const moved = [...ownerOf].filter(([, o]) => o === victim).map(([p]) => p);
    await c.kill(victim);

    await c.waitSettled({ min: { partition: PARTITIONS } });
    for (const p of moved) assert.equal(await c.ownerOf('partition', `${TOPIC}/${p}`), survivor, `partition ${p} moved`);
    for (let p = 0; p < PARTITIONS; p++) {
      const records = (await kcatConsume(c.broker(survivor).kafka, TOPIC, ['-p', String(p)])).map((m) => m.payload ?? '');
      assert.deepEqual(
        records,
        Array.from({ length: SENDS }, (_, s) => `${p}:${s}`),
        `partition ${p} (shard ${shardOfPartition.get(p)}, ${moved.includes(p) ? 'taken over' : 'kept'})`,
      );
    }
  });

  it('refuses a broker given the shards in another order', async () => {
    // The cluster's options without its --wal-shard pairs, then the shards swapped.
    const base = c.brokerArgs(3);
    const others = base.filter((x, i) => x !== '--wal-shard' && base[i - 1] !== '--wal-shard');
    const r = await startRefused([...others, '--wal-shard', shards[1], '--wal-shard', shards[0]]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /shard list recorded in the metastore is \[0: .*\], this broker was given \[0: /);
  });
});
