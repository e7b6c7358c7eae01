// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Issue 17, a broker joining: two brokers own every partition of a topic; a third starts and takes over part of
 * them (the ones rendezvous placement now gives it, handed over by their holders, with a newer epoch), the others
 * stay where they were; records written before the join are read after it through the new broker, and new records
 * to the partitions it took are acknowledged by it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import { startCluster, type ClusterOwnerView, type TestCluster } from '../helpers/cluster.js';
import { kcatConsume } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

const TOPIC = 'join.t';
const PARTITIONS = 12;

describe('cluster: a new broker takes over part of the partitions', { timeout: 120_000 }, () => {
  let c: TestCluster;
  before(async () => {
    c = await startCluster({ brokers: 2, haproxy: false });
    const admin = new Kafka({ brokers: [c.broker(1).kafka], clientId: 'join-admin', logLevel: logLevel.NOTHING, retry: { retries: 10 } }).admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: PARTITIONS }], waitForLeaders: true });
    await admin.disconnect();
  });
  after(async () => {
    await c?.close();
  });

  const mine = (rows: ClusterOwnerView[]) => new Map(rows.filter((r) => r.kind === 'partition' && r.name.startsWith(`${TOPIC}/`)).map((r) => [r.name, r]));

  it('broker 3 joins: it owns its share, moved from the others with a newer epoch; nothing else moved; data stays readable', async () => {
    const beforeJoin = mine(await c.waitSettled({ min: { partition: PARTITIONS } }));
    assert.equal(beforeJoin.size, PARTITIONS);
    assert.ok([...beforeJoin.values()].every((r) => r.owner === 1 || r.owner === 2));

    const producer = new Kafka({
      brokers: c.bootstrap,
      clientId: 'join-producer',
      logLevel: logLevel.NOTHING,
      retry: { retries: 20, initialRetryTime: 100 },
    }).producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      await producer.send({
        topic: TOPIC,
        acks: -1,
        messages: Array.from({ length: PARTITIONS * 5 }, (_, i) => ({ partition: i % PARTITIONS, value: `pre${i}` })),
      });

      const b3 = await c.startBroker({ id: 3 });
      const afterJoin = mine(await c.waitSettled({ min: { partition: PARTITIONS } }));
      const taken = [...afterJoin.values()].filter((r) => r.owner === 3);
      console.log(`join: broker 3 took ${taken.length} of ${PARTITIONS} partitions`);
      assert.ok(taken.length > 0, 'the new broker took some partitions');
      assert.ok(taken.length < PARTITIONS, 'and not all of them');
      for (const [name, r] of afterJoin) {
        const was = beforeJoin.get(name)!;
        if (r.owner === 3) assert.ok(r.epoch > was.epoch, `${name}: a newer epoch after the handover (${was.epoch} -> ${r.epoch})`);
        else assert.deepEqual([r.owner, r.epoch], [was.owner, was.epoch], `${name} did not move`);
      }
      // The cluster status counts the same.
      const s = await c.status({ via: 3 });
      assert.equal(s.brokers.find((b) => b.id === 3)?.owned.partition, taken.length);

      // Records written before the join, read through the new broker.
      const all = await kcatConsume(b3.kafka, TOPIC);
      assert.deepEqual(all.map((m) => m.payload).sort(), Array.from({ length: PARTITIONS * 5 }, (_, i) => `pre${i}`).sort());
      // New records to the partitions it took: acknowledged (by their new owner) and readable.
      await producer.send({
        topic: TOPIC,
        acks: -1,
        messages: taken.map((r) => ({ partition: Number(r.name.slice(TOPIC.length + 1)), value: `post-${r.name}` })),
      });
      for (const r of taken) {
        const p = Number(r.name.slice(TOPIC.length + 1));
        const got = (await kcatConsume(c.broker(1).kafka, TOPIC, ['-p', String(p)])).map((m) => m.payload);
        assert.deepEqual(got, [...Array.from({ length: 5 }, (_, k) => `pre${p + k * PARTITIONS}`), `post-${r.name}`], `partition ${p}`);
      }
    } finally {
      await producer.disconnect();
    }
  });
});
