// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Issue 17, the Kafka protocol's views of a cluster, with real clients against three `flowmq start --cluster`
 * processes (test/helpers/cluster.ts: PostgreSQL, s3rver, separate broker processes):
 *
 * - `kcat -L` at every broker lists the three brokers and names each partition's owner as its leader;
 * - a produce sent to a broker that does not lead the partition is answered NOT_LEADER_OR_FOLLOWER;
 * - KafkaJS: a consumer group whose members are bootstrapped at three different brokers, and an idempotent producer
 *   (acks=all) that keeps producing while a fourth broker joins and takes over part of the partitions (and maybe
 *   the group): the producer's stale leaders answer NOT_LEADER_OR_FOLLOWER and it follows; every record is in the
 *   log exactly once and in order per partition, and the group consumed every one;
 *
 * kill -9 of a leader during an idempotent acks=all run is test/e2e/cluster-failover.test.ts.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { eventually, kcatConsume, run } from './harness.js';
import { RawClient } from '../protocols/kafka/helpers.js';
import { KafkaErrorCode as E, ProduceApi } from '../../src/protocols/kafka/codec/index.js';
import { encodeBatch } from '../../src/core/index.js';

const { Kafka, logLevel } = kafkajsPkg;
const TOPIC = 'kx';
const PARTITIONS = 6;

interface KcatMetadata {
  brokers: Array<{ id: number; name: string }>;
  topics: Array<{ topic: string; partitions: Array<{ partition: number; leader: number }> }>;
}

describe('cluster: Kafka clients across broker processes', { timeout: 240_000 }, () => {
  let c: TestCluster;
  const kafka = (bootstrap: string[], clientId: string) =>
    new Kafka({ brokers: bootstrap, clientId, logLevel: logLevel.NOTHING, retry: { retries: 15, initialRetryTime: 100, maxRetryTime: 2000 } });

  /** partition index → owner broker id, as the cluster's admin API says. */
  async function leaders(): Promise<Map<number, number>> {
    const { owners } = await c.owners('partition');
    const out = new Map<number, number>();
    for (const o of owners) {
      if (!o.name.startsWith(`${TOPIC}/`) || !o.alive || o.owner === null) continue;
      out.set(Number(o.name.slice(TOPIC.length + 1)), o.owner);
    }
    return out;
  }

  before(async () => {
    c = await startCluster({ brokers: 3, haproxy: false });
    const admin = kafka([c.broker(1).kafka], 'kx-admin').admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: PARTITIONS }], waitForLeaders: true });
    await admin.disconnect();
    await c.waitCatalog({ streams: [TOPIC] });
    await c.waitSettled({ min: { partition: PARTITIONS } });
  });
  after(async () => {
    await c?.close();
  });

  it('kcat -L at every broker lists the three brokers, each partition led by its owner', async () => {
    const owners = await leaders();
    assert.equal(owners.size, PARTITIONS);
    assert.ok(new Set(owners.values()).size >= 2, `several brokers lead (${[...owners.values()]})`);
    for (const b of c.running) {
      const r = await run('kcat', ['-b', b.kafka, '-L', '-J', '-t', TOPIC], { timeoutMs: 20_000 });
      assert.equal(r.code, 0, r.stderr);
      const md = JSON.parse(r.stdout) as KcatMetadata;
      assert.deepEqual(
        md.brokers.map((x) => [x.id, x.name]).sort(),
        c.running.map((x) => [x.id, x.kafka]).sort(),
        `broker ${b.id} names every broker with its Kafka address`,
      );
      const t = md.topics.find((x) => x.topic === TOPIC)!;
      assert.deepEqual(
        t.partitions.map((p) => [p.partition, p.leader]).sort((x, y) => x[0] - y[0]),
        [...owners].sort((x, y) => x[0] - y[0]),
        `broker ${b.id} names the owners as leaders`,
      );
    }
  });

  it('a produce at a broker that does not lead the partition is answered NOT_LEADER_OR_FOLLOWER, the leader takes it', async () => {
    const owners = await leaders();
    const leader = c.broker(owners.get(0)!);
    const other = c.running.find((b) => b.id !== leader.id)!;
    const produce = (client: RawClient) =>
      client.call(ProduceApi, 9, {
        transactionalId: null,
        acks: -1,
        timeoutMs: 5000,
        topics: [
          { name: TOPIC, partitions: [{ index: 0, records: encodeBatch([{ key: null, value: Buffer.from('raw'), headers: [], timestamp: Date.now() }]) }] },
        ],
      });
    const port = (addr: string) => Number(addr.split(':')[1]);
    const elsewhere = await RawClient.connect(port(other.kafka));
    const at = await RawClient.connect(port(leader.kafka));
    try {
      assert.equal((await produce(elsewhere)).topics[0].partitions[0].errorCode, E.NOT_LEADER_OR_FOLLOWER);
      const ok = (await produce(at)).topics[0].partitions[0];
      assert.equal(ok.errorCode, E.NONE);
      assert.ok(ok.baseOffset >= 0);
    } finally {
      elsewhere.close();
      at.close();
    }
  });

  it('KafkaJS: a group spread over three brokers and an idempotent producer (acks=all) follow a joining broker; every record once, in order', async () => {
    const group = 'kx-group';
    const consumed = new Map<string, number>();
    const byMember = new Map<string, number>();
    const consumers = c.running.map((b) =>
      kafka([b.kafka], `kx-c${b.id}`).consumer({
        groupId: group,
        sessionTimeout: 10_000,
        heartbeatInterval: 500,
        rebalanceTimeout: 10_000,
        maxWaitTimeInMs: 200,
      }),
    );
    const producer = kafka([c.broker(2).kafka], 'kx-producer').producer({ idempotent: true, maxInFlightRequests: 1 });
    const sent: Array<{ partition: number; value: string }> = [];
    try {
      for (const [i, consumer] of consumers.entries()) {
        await consumer.connect();
        await consumer.subscribe({ topic: TOPIC, fromBeginning: true });
        await consumer.run({
          eachMessage: async ({ message }) => {
            const v = message.value!.toString();
            if (!v.startsWith('v')) return;
            consumed.set(v, (consumed.get(v) ?? 0) + 1);
            byMember.set(`c${i}`, (byMember.get(`c${i}`) ?? 0) + 1);
          },
        });
      }
      // The group settles with its three members, at its coordinator, whichever broker each was bootstrapped at.
      const admin = kafka([c.broker(3).kafka], 'kx-admin2').admin();
      await admin.connect();
      try {
        await eventually(
          async () => {
            const d = (await admin.describeGroups([group])).groups[0];
            return d.state === 'Stable' && d.members.length === 3;
          },
          60_000,
          'the group of three members to be stable',
        );
      } finally {
        await admin.disconnect();
      }

      await producer.connect();
      const send = async (from: number, to: number) => {
        for (let i = from; i < to; i += 12) {
          const messages = Array.from({ length: Math.min(12, to - i) }, (_, j) => ({ partition: (i + j) % PARTITIONS, value: `v${i + j}` }));
          await producer.send({ topic: TOPIC, acks: -1, messages });
          sent.push(...messages);
        }
      };
      await send(0, 240);
      const before = await leaders();

      // A fourth broker joins and takes over its share of the partitions: the producer's metadata is stale now.
      await c.startBroker();
      await c.waitSettled({ min: { partition: PARTITIONS } });
      const after = await leaders();
      const moved = [...after].filter(([p, id]) => before.get(p) !== id);
      assert.ok(moved.length > 0, 'the joining broker took over some partitions');
      assert.ok(
        moved.every(([, id]) => id === 4),
        'partitions move only to the new broker',
      );

      await send(240, 480);
      await producer.disconnect();

      await eventually(() => sent.every((m) => (consumed.get(m.value) ?? 0) >= 1), 90_000, 'the group to consume every record');
      assert.ok(byMember.size >= 2, `several members consumed (${JSON.stringify([...byMember])})`);
    } finally {
      await Promise.allSettled([producer.disconnect(), ...consumers.map((x) => x.disconnect())]);
    }

    // The log holds every acknowledged record exactly once, in the order it was sent, per partition (read at a
    // broker bootstrapped from broker 1, following Metadata to the leaders, the new one included).
    const log = (await kcatConsume(c.broker(1).kafka, TOPIC)).filter((m) => m.payload?.startsWith('v'));
    const values = log.map((m) => m.payload!);
    assert.equal(new Set(values).size, values.length, 'no record twice in the log');
    assert.deepEqual([...values].sort(), sent.map((m) => m.value).sort(), 'every acknowledged record is in the log');
    for (let p = 0; p < PARTITIONS; p++) {
      assert.deepEqual(
        log.filter((m) => m.partition === p).map((m) => m.payload),
        sent.filter((m) => m.partition === p).map((m) => m.value),
        `partition ${p} in the order sent`,
      );
    }
  });
});
