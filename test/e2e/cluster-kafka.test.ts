/**
 * Issue 17, Kafka over three brokers: Metadata (kcat -L) names the three brokers and each partition's owner as its
 * leader; a consumer group whose members bootstrap at three different brokers shares the partitions (every member
 * gets some) and reads every record; the group is coordinated by its owner broker, and its committed offsets are
 * read back through another broker.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { eventually, run } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;
type Consumer = ReturnType<InstanceType<typeof Kafka>['consumer']>;

const TOPIC = 'grp.orders';
const PARTITIONS = 6;
const GROUP = 'grp-spread';

interface KcatMetadata {
  brokers: Array<{ id: number; name: string }>;
  topics: Array<{ topic: string; partitions: Array<{ partition: number; leader: number }> }>;
}

describe('cluster: Kafka metadata and a consumer group spread over brokers', { timeout: 120_000 }, () => {
  let c: TestCluster;
  before(async () => {
    c = await startCluster({ brokers: 3, haproxy: false });
    const admin = new Kafka({ brokers: [c.broker(1).kafka], clientId: 'grp-admin', logLevel: logLevel.NOTHING, retry: { retries: 10 } }).admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: PARTITIONS }], waitForLeaders: true });
    await admin.disconnect();
  });
  after(async () => {
    await c?.close();
  });

  /** Partition → owner broker, from GET /api/v1/cluster. */
  async function owners(): Promise<Map<number, number>> {
    const rows = await c.waitSettled({ min: { partition: PARTITIONS } });
    const out = new Map<number, number>();
    for (const r of rows) if (r.kind === 'partition' && r.name.startsWith(`${TOPIC}/`)) out.set(Number(r.name.slice(TOPIC.length + 1)), r.owner!);
    return out;
  }

  it('kcat -L at any broker lists three brokers and the partition owners as leaders', async () => {
    const own = await owners();
    assert.equal(own.size, PARTITIONS);
    assert.ok(new Set(own.values()).size >= 2, `partitions are spread over brokers: ${JSON.stringify([...own])}`);
    for (const b of c.brokers) {
      const r = await run('kcat', ['-b', b.kafka, '-L', '-t', TOPIC, '-J'], { timeoutMs: 20_000 });
      assert.equal(r.code, 0, r.stderr);
      const md = JSON.parse(r.stdout) as KcatMetadata;
      assert.deepEqual(md.brokers.map((x) => x.id).sort(), [1, 2, 3], `brokers in the metadata of broker ${b.id}`);
      for (const x of md.brokers) assert.equal(x.name, c.broker(x.id).kafka, `broker ${x.id}'s advertised Kafka address`);
      const t = md.topics.find((x) => x.topic === TOPIC);
      assert.ok(t, 'the topic is in the metadata');
      assert.deepEqual(
        t.partitions.map((p) => [p.partition, p.leader]).sort((a, b) => a[0] - b[0]),
        [...own].sort((a, b) => a[0] - b[0]),
        `broker ${b.id}: leaders are the owners`,
      );
    }
  });

  it('a group with members on three brokers shares the partitions and reads every record', async () => {
    const producer = new Kafka({ brokers: [c.broker(2).kafka], clientId: 'grp-producer', logLevel: logLevel.NOTHING, retry: { retries: 10 } }).producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const first = Array.from({ length: 60 }, (_, i) => ({ key: `k${i}`, value: `a${i}` }));
    await producer.send({ topic: TOPIC, acks: -1, messages: first });

    const got: Array<{ member: number; partition: number; value: string }> = [];
    const assigned = new Map<number, { generation: number; partitions: number[] }>();
    const consumers: Consumer[] = [];
    try {
      for (const b of c.brokers) {
        const consumer = new Kafka({ brokers: [b.kafka], clientId: `grp-member-${b.id}`, logLevel: logLevel.NOTHING, retry: { retries: 10 } }).consumer({
          groupId: GROUP,
          heartbeatInterval: 500,
          sessionTimeout: 10_000,
          rebalanceTimeout: 10_000,
        });
        consumer.on(consumer.events.GROUP_JOIN, (e) => {
          const p = (e.payload.memberAssignment[TOPIC] ?? []) as number[];
          assigned.set(b.id, { generation: Number((e.payload as { generationId?: number }).generationId ?? 0), partitions: p });
        });
        await consumer.connect();
        await consumer.subscribe({ topics: [TOPIC], fromBeginning: true });
        await consumer.run({ eachMessage: async ({ partition, message }) => void got.push({ member: b.id, partition, value: message.value!.toString() }) });
        consumers.push(consumer);
      }
      // Every record of the first batch arrives (at least once: a rebalance may hand a partition over before its
      // position was committed, as in Kafka).
      await eventually(() => first.every((m) => got.some((g) => g.value === m.value)), 40_000, 'the first 60 records');
      // A stable generation: the three members share the six partitions.
      await eventually(
        () => {
          const a = [...assigned.values()];
          return a.length === 3 && new Set(a.map((x) => x.generation)).size === 1 && a.every((x) => x.partitions.length > 0) && a.flatMap((x) => x.partitions).length === PARTITIONS;
        },
        40_000,
        `three members with partitions each (have ${JSON.stringify([...assigned])})`,
      );
      const all = [...assigned.values()].flatMap((x) => x.partitions).sort((a, b) => a - b);
      assert.deepEqual(all, Array.from({ length: PARTITIONS }, (_, i) => i), 'each partition to one member');

      // In the stable generation every record goes to the member holding its partition, exactly once.
      const before = got.length;
      const second = Array.from({ length: 60 }, (_, i) => ({ key: `k${i}`, value: `b${i}` }));
      await producer.send({ topic: TOPIC, acks: -1, messages: second });
      await eventually(() => second.every((m) => got.some((g) => g.value === m.value)), 30_000, 'the second 60 records');
      const later = got.slice(before).filter((g) => g.value.startsWith('b'));
      for (const m of second) assert.equal(later.filter((g) => g.value === m.value).length, 1, `${m.value} once`);
      for (const g of later) assert.ok(assigned.get(g.member)!.partitions.includes(g.partition), `${g.value} read by the member assigned partition ${g.partition}`);
      assert.equal(new Set(later.map((g) => g.member)).size, 3, 'every member read some');

      // The group is owned (coordinated) by a live broker, where placement puts it.
      const { owners: rows } = await c.owners('group');
      const row = rows.find((r) => r.name === GROUP);
      assert.ok(row, 'the group has an owner row');
      assert.equal(row.alive, true);
      assert.equal(row.owner, row.placement);
      const admin = new Kafka({ brokers: [c.broker(row.owner === 1 ? 2 : 1).kafka], clientId: 'grp-describe', logLevel: logLevel.NOTHING }).admin();
      await admin.connect();
      try {
        const d = await admin.describeGroups([GROUP]);
        assert.equal(d.groups[0].members.length, 3, 'DescribeGroups through another broker finds the coordinator');
      } finally {
        await admin.disconnect();
      }
    } finally {
      for (const consumer of consumers) await consumer.disconnect().catch(() => undefined);
      await producer.disconnect();
    }

    // The committed positions (written by the coordinator, fenced by the group's epoch) read through any broker.
    for (const b of c.brokers) {
      const admin = new Kafka({ brokers: [b.kafka], clientId: `grp-offsets-${b.id}`, logLevel: logLevel.NOTHING }).admin();
      await admin.connect();
      try {
        const [o] = await admin.fetchOffsets({ groupId: GROUP, topics: [TOPIC] });
        const committed = o.partitions.reduce((n, p) => n + Number(p.offset), 0);
        assert.equal(committed, 120, `broker ${b.id}: committed offsets cover every record`);
      } finally {
        await admin.disconnect();
      }
    }
  });
});
