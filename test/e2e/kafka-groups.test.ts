/**
 * Kafka consumer groups end to end with KafkaJS against a real `flowmq start` process: three members share a
 * topic, one leaves and the others take over its partitions (rebalance), committed offsets survive a broker
 * restart; and a KafkaJS group reads a stream that MQTT publishes are captured into. On the embedded storage and
 * on PostgreSQL + S3 (storage-configs.ts), where group offsets are kept in PostgreSQL.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import kafkajsPkg from 'kafkajs';
import type { Consumer, EachMessagePayload, Kafka as KafkaClient } from 'kafkajs';
import { eventually, FlowmqProcess } from './harness.js';
import { storageConfigs } from './storage-configs.js';

const { Kafka, logLevel, AssignerProtocol } = kafkajsPkg;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

interface Seen {
  member: string;
  partition: number;
  offset: number;
  value: string;
}

function kafkaFor(broker: FlowmqProcess, clientId: string): KafkaClient {
  return new Kafka({ brokers: [broker.kafka], clientId, logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
}

/** A group member that records what it reads and which partitions it was assigned at each generation. */
async function member(
  kafka: KafkaClient,
  groupId: string,
  topic: string,
  name: string,
  seen: Seen[],
): Promise<{ consumer: Consumer; assigned: () => number[] }> {
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10_000, heartbeatInterval: 300, rebalanceTimeout: 15_000, maxWaitTimeInMs: 200 });
  let assigned: number[] = [];
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    assigned = [...(e.payload.memberAssignment[topic] ?? [])].sort((a, b) => a - b);
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }: EachMessagePayload) => {
      seen.push({ member: name, partition, offset: Number(message.offset), value: String(message.value) });
    },
  });
  return { consumer, assigned: () => assigned };
}

async function produce(kafka: KafkaClient, topic: string, from: number, count: number): Promise<void> {
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({
    topic,
    messages: Array.from({ length: count }, (_, i) => ({ key: `k${(from + i) % 17}`, value: `m${from + i}` })),
  });
  await producer.disconnect();
}

for (const cfg of storageConfigs())
  describe(`kafka consumer groups (KafkaJS) against a real broker [${cfg.name}]`, () => {
    let broker: FlowmqProcess;

    before(async () => {
      broker = await FlowmqProcess.start({ args: await cfg.brokerArgs() });
    });
    after(async () => {
      await broker?.stop();
      broker?.cleanup();
    });

    it('shares partitions among 3 members, rebalances when one leaves, resumes from committed offsets after a restart', async () => {
      await broker.api('POST', '/api/v1/streams', { name: 'orders', partitions: 6 });
      let kafka = kafkaFor(broker, 'groups-e2e');
      await produce(kafka, 'orders', 0, 60);

      const seen: Seen[] = [];
      const members = await Promise.all(['a', 'b', 'c'].map((n) => member(kafka, 'billing', 'orders', n, seen)));
      await eventually(() => new Set(seen.map((s) => s.value)).size === 60, 30_000, 'all 60 records read by the group');
      // One generation with three members: every partition has exactly one owner, each member at least one.
      await eventually(() => members.reduce((n, m) => n + m.assigned().length, 0) === 6, 10_000, 'assignments of 6 partitions');
      const owned = members.flatMap((m) => m.assigned());
      assert.deepEqual([...owned].sort(), [0, 1, 2, 3, 4, 5]);
      for (const m of members) assert.ok(m.assigned().length >= 1, 'every member owns a partition');
      // No record was read twice by the group, and each by the member owning its partition.
      assert.equal(seen.length, 60);

      // Member c leaves (KafkaJS sends LeaveGroup): a and b take over all six partitions.
      const leaving = members[2];
      const before = leaving.assigned();
      await leaving.consumer.disconnect();
      await eventually(() => members[0].assigned().length + members[1].assigned().length === 6, 20_000, 'the remaining two members own all partitions');
      assert.deepEqual([...members[0].assigned(), ...members[1].assigned()].sort(), [0, 1, 2, 3, 4, 5]);
      await produce(kafka, 'orders', 60, 30);
      await eventually(() => new Set(seen.map((s) => s.value)).size === 90, 20_000, 'records after the rebalance');
      const late = seen.filter((s) => Number(s.value.slice(1)) >= 60);
      assert.ok(
        late.every((s) => s.member !== 'c'),
        'the member that left reads nothing more',
      );
      assert.ok(
        late.some((s) => before.includes(s.partition)),
        'its partitions are read by the others',
      );

      // The group is stable with two members; DescribeGroups through the admin client says so.
      const admin = kafka.admin();
      await admin.connect();
      const described = await admin.describeGroups(['billing']);
      assert.equal(described.groups[0].state, 'Stable');
      assert.equal(described.groups[0].members.length, 2);
      assert.equal(described.groups[0].protocol, 'RoundRobinAssigner');
      const decoded = described.groups[0].members.map((m) => AssignerProtocol.MemberAssignment.decode(m.memberAssignment));
      assert.deepEqual(decoded.flatMap((d) => d?.assignment.orders ?? []).sort(), [0, 1, 2, 3, 4, 5]);
      await admin.disconnect();

      // Stopping commits the offsets read (KafkaJS commits on disconnect); the broker restarts.
      await Promise.all([members[0].consumer.disconnect(), members[1].consumer.disconnect()]);
      // From here on every group has one member: no KIP-134 wait for others to join (3 s a group otherwise; the
      // last --kafka-group-initial-rebalance-delay given is the one that counts).
      broker = await broker.restart([...broker.args, '--kafka-group-initial-rebalance-delay', '0']);
      kafka = kafkaFor(broker, 'groups-e2e-2');
      const admin2 = kafka.admin();
      await admin2.connect();
      const committed = await admin2.fetchOffsets({ groupId: 'billing', topics: ['orders'] });
      const total = committed[0].partitions.reduce((n, p) => n + Number(p.offset), 0);
      assert.equal(total, 90, 'committed offsets survived the restart');
      const groups = await admin2.listGroups();
      assert.ok(
        groups.groups.some((g) => g.groupId === 'billing'),
        'the group is listed after the restart',
      );
      await admin2.disconnect();

      await produce(kafka, 'orders', 90, 10);
      const after: Seen[] = [];
      const again = await member(kafka, 'billing', 'orders', 'd', after);
      await eventually(() => after.length >= 10, 20_000, 'the new records');
      // A marker after them in every partition: a committed record read again would come before its partition's marker.
      const markers = kafka.producer();
      await markers.connect();
      await markers.send({ topic: 'orders', messages: Array.from({ length: 6 }, (_, partition) => ({ partition, value: `marker${partition}` })) });
      await markers.disconnect();
      await eventually(() => after.filter((s) => s.value.startsWith('marker')).length === 6, 20_000, 'the six markers');
      assert.deepEqual(
        after
          .map((s) => s.value)
          .filter((v) => !v.startsWith('marker'))
          .sort(),
        Array.from({ length: 10 }, (_, i) => `m${90 + i}`).sort(),
        'only what was not committed',
      );
      await again.consumer.disconnect();
    });

    it('a KafkaJS group reads the telemetry stream that MQTT publishes are captured into', async () => {
      await broker.api('POST', '/api/v1/streams', { name: 'telemetry', partitions: 3, bindings: ['factory/+/+/telemetry'] });
      const c = await new Promise<mqtt.MqttClient>((resolve, reject) => {
        const x = mqtt.connect(broker.mqttUrl, { protocolVersion: 4, reconnectPeriod: 0 });
        x.once('connect', () => resolve(x));
        x.once('error', reject);
      });
      for (let d = 0; d < 4; d++) {
        for (let i = 0; i < 5; i++) await c.publishAsync(`factory/l1/d${d}/telemetry`, `d${d}:${i}`, { qos: 1 });
      }
      c.end(true);
      const kafka = kafkaFor(broker, 'telemetry-reader');
      const seen: Array<{ partition: number; value: string; topic: string | undefined }> = [];
      const consumer = kafka.consumer({ groupId: 'dashboards', maxWaitTimeInMs: 200, heartbeatInterval: 300 });
      await consumer.connect();
      await consumer.subscribe({ topics: ['telemetry'], fromBeginning: true });
      await consumer.run({
        eachMessage: async ({ partition, message }) => {
          seen.push({ partition, value: String(message.value), topic: message.headers?.['flowmq.topic']?.toString() });
        },
      });
      await eventually(() => seen.length === 20, 20_000, '20 telemetry records');
      await consumer.disconnect();
      for (let d = 0; d < 4; d++) {
        const mine = seen.filter((s) => s.value.startsWith(`d${d}:`));
        assert.deepEqual(
          mine.map((s) => s.value),
          Array.from({ length: 5 }, (_, i) => `d${d}:${i}`),
          `device ${d} in order`,
        );
        assert.equal(new Set(mine.map((s) => s.partition)).size, 1, `device ${d} in one partition`);
        assert.ok(
          mine.every((s) => s.topic === `factory/l1/d${d}/telemetry`),
          'the MQTT topic travels as a header',
        );
      }
    });
  });
