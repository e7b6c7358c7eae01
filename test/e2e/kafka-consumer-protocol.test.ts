/**
 * The consumer group protocol (KIP-848) with the client that judges it: librdkafka 2.15 (through
 * @confluentinc/kafka-javascript, test/interop/confluent-kafka-javascript) with group.protocol=consumer against a
 * real `flowmq start`. Two consumers of one group share a 4-partition topic, every record is consumed exactly once
 * across them, one leaves and the other gets every partition, commits are resumed by a later consumer; and the group
 * as ListGroups, DescribeGroups (kafka-python, which knows only the classic APIs) and ConsumerGroupDescribe
 * (librdkafka 2.15's describe) report it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { FlowmqProcess, ROOT, run } from './harness.js';

const INTEROP = join(ROOT, 'test/interop/confluent-kafka-javascript');
// Debian's interpreter, where python3-kafka is installed (a python3 earlier in PATH may be another one).
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

type Rd = Record<string, string | number | boolean | object>;
interface Message {
  value: Buffer | null;
  offset: string;
}
interface Consumer {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  subscribe(s: { topics: Array<string | RegExp> }): Promise<void>;
  run(r: { eachMessage: (p: { topic: string; partition: number; message: Message }) => Promise<void> }): Promise<void>;
  commitOffsets(o: Array<{ topic: string; partition: number; offset: string }>): Promise<void>;
  assignment(): Array<{ topic: string; partition: number }>;
}
interface Producer {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  send(r: { topic: string; messages: Array<{ value: string; partition?: number }> }): Promise<unknown>;
}
interface GroupDescription {
  groupId: string;
  error?: { code: number; message: string };
  members: Array<{ memberId: string; clientId: string; assignment: { topicPartitions: Array<{ topic: string; partition: number }> } }>;
  protocolType: string;
  partitionAssignor: string;
  state: number;
  type: number;
}
interface Admin {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  createTopics(o: { topics: Array<{ topic: string; numPartitions?: number }> }): Promise<boolean>;
  listGroups(): Promise<{ groups: Array<{ groupId: string; protocolType: string; state: number; type: number }>; errors: unknown[] }>;
  describeGroups(ids: string[]): Promise<{ groups: GroupDescription[] }>;
  fetchOffsets(o: { groupId: string; topics: string[] }): Promise<Array<{ topic: string; partitions: Array<{ partition: number; offset: string }> }>>;
}
interface Kafka {
  producer(c?: Rd): Producer;
  consumer(c: Rd): Consumer;
  admin(c?: Rd): Admin;
}
interface Ckjs {
  librdkafkaVersion: string;
  KafkaJS: { Kafka: new (c: Rd) => Kafka; ConsumerGroupStates: Record<string, number>; ConsumerGroupTypes: Record<string, number> };
}

function loadClient(): Ckjs {
  const require = createRequire(join(INTEROP, 'package.json'));
  try {
    return require('@confluentinc/kafka-javascript') as Ckjs;
  } catch (err) {
    throw new Error(`@confluentinc/kafka-javascript is not installed in ${INTEROP}: run test/interop/confluent-kafka-javascript/install.sh`, { cause: err });
  }
}

function logSink(lines: string[]) {
  const keep = (msg: string) => void lines.push(msg);
  const logger = { info: keep, warn: keep, error: keep, debug: keep, namespace: () => logger, setLogLevel: () => undefined };
  return logger;
}

async function until(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A consumer of the group and what it read, by "partition:offset". */
interface Reader {
  name: string;
  consumer: Consumer;
  seen: Map<string, string>;
  parts(): string[];
}

describe('kafka consumer group protocol (KIP-848) with librdkafka 2.15', () => {
  let ck: Ckjs;
  let broker: FlowmqProcess;
  let kafka: Kafka;
  const logs: string[] = [];
  const readers: Reader[] = [];
  const TOPIC = 'kc.orders';
  const GROUP = 'kc.group';

  before(async () => {
    ck = loadClient();
    broker = await FlowmqProcess.start({
      // A short heartbeat interval: members learn of partitions handed over within half a second.
      args: [
        '--kafka-group-initial-rebalance-delay',
        '0',
        '--kafka-consumer-group-heartbeat-interval',
        '500ms',
        '--kafka-consumer-group-session-timeout',
        '10s',
      ],
    });
    kafka = new ck.KafkaJS.Kafka({ 'bootstrap.servers': broker.kafka, kafkaJS: { logger: logSink(logs) } });
    const admin = kafka.admin();
    await admin.connect();
    try {
      await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 4 }] });
    } finally {
      await admin.disconnect();
    }
  });
  after(async () => {
    for (const r of readers) await r.consumer.disconnect().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
  });

  const produce = async (from: number, count: number): Promise<void> => {
    const p = kafka.producer();
    await p.connect();
    try {
      await p.send({ topic: TOPIC, messages: Array.from({ length: count }, (_, i) => ({ value: `m-${from + i}`, partition: (from + i) % 4 })) });
    } finally {
      await p.disconnect();
    }
  };

  /** A consumer with group.protocol=consumer that commits every record it reads before reading the next. */
  const startReader = async (name: string): Promise<Reader> => {
    const consumer = kafka.consumer({
      'group.id': GROUP,
      'group.protocol': 'consumer',
      'client.id': name,
      'auto.offset.reset': 'earliest',
      'enable.auto.commit': false,
      debug: 'cgrp',
    });
    await consumer.connect();
    await consumer.subscribe({ topics: [TOPIC] });
    const seen = new Map<string, string>();
    const reader: Reader = {
      name,
      consumer,
      seen,
      parts: () =>
        consumer
          .assignment()
          .map((a) => `${a.topic}:${a.partition}`)
          .sort(),
    };
    void consumer.run({
      eachMessage: async ({ partition, message }) => {
        const key = `${partition}:${message.offset}`;
        assert.ok(!allSeen().has(key), `${key} consumed twice (now by ${name})`);
        seen.set(key, message.value?.toString() ?? '');
        await consumer.commitOffsets([{ topic: TOPIC, partition, offset: String(Number(message.offset) + 1) }]);
      },
    });
    readers.push(reader);
    return reader;
  };
  const allSeen = (): Map<string, string> => new Map(readers.flatMap((r) => [...r.seen]));

  it('two consumers share the partitions, each record is read once, and the group is reported by every API', async () => {
    assert.equal(ck.librdkafkaVersion, '2.15.1');
    const a = await startReader('reader-a');
    await until('reader-a owns the 4 partitions', () => a.parts().length === 4);
    const b = await startReader('reader-b');
    await until(
      'the partitions split between the two readers',
      () => a.parts().length > 0 && b.parts().length > 0 && a.parts().length + b.parts().length === 4,
    );
    assert.deepEqual([...a.parts(), ...b.parts()].sort(), [`${TOPIC}:0`, `${TOPIC}:1`, `${TOPIC}:2`, `${TOPIC}:3`]);
    // Through the consumer protocol, not the classic one.
    assert.ok(
      logs.some((l) => /ConsumerGroupHeartbeat response received/.test(l)),
      'librdkafka heartbeats with ConsumerGroupHeartbeat',
    );
    await until('the broker logged two consumer-protocol joins', () => broker.logs.filter((l) => l.msg === 'member joins the consumer group').length === 2);
    assert.ok(!logs.some((l) => /JoinGroup/.test(l)), 'no classic JoinGroup');

    await produce(0, 200);
    await until('200 records read', () => allSeen().size === 200);
    assert.ok(a.seen.size > 0 && b.seen.size > 0, `both read (${a.seen.size}, ${b.seen.size})`);
    assert.deepEqual(new Set(allSeen().values()), new Set(Array.from({ length: 200 }, (_, i) => `m-${i}`)));
    // Each reader read only its own partitions.
    for (const r of [a, b]) {
      const mine = new Set(r.parts().map((p) => p.split(':')[1]));
      for (const k of r.seen.keys()) assert.ok(mine.has(k.split(':')[0]), `${r.name} read ${k} outside its partitions`);
    }

    // The group as the APIs report it. ListGroups (v5): a "consumer" group of type consumer.
    const admin = kafka.admin();
    await admin.connect();
    try {
      const listed = (await admin.listGroups()).groups.find((g) => g.groupId === GROUP);
      assert.ok(listed, 'listed');
      assert.equal(listed.protocolType, 'consumer');
      assert.equal(listed.type, ck.KafkaJS.ConsumerGroupTypes.CONSUMER);
      assert.equal(listed.state, ck.KafkaJS.ConsumerGroupStates.STABLE);
      // ConsumerGroupDescribe (what librdkafka 2.15 asks first): both members and their partitions.
      const [described] = (await admin.describeGroups([GROUP])).groups;
      assert.equal(described.error, undefined, JSON.stringify(described.error));
      assert.equal(described.type, ck.KafkaJS.ConsumerGroupTypes.CONSUMER);
      assert.equal(described.partitionAssignor, 'uniform');
      assert.deepEqual(described.members.map((m) => m.clientId).sort(), ['reader-a', 'reader-b']);
      assert.deepEqual(described.members.flatMap((m) => m.assignment.topicPartitions.map((p) => p.partition)).sort(), [0, 1, 2, 3]);
    } finally {
      await admin.disconnect();
    }
    // DescribeGroups (the classic API), through kafka-python (Debian's python3-kafka), which decodes the members'
    // subscriptions and assignments in the consumer protocol's encodings.
    const py = await run(
      PYTHON,
      [
        '-c',
        [
          'import sys, json',
          'from kafka import KafkaAdminClient',
          "a = KafkaAdminClient(bootstrap_servers=sys.argv[1], client_id='kafka-python-admin')",
          'd = a.describe_consumer_groups([sys.argv[2]])[0]',
          "print(json.dumps({'error': d.error_code, 'state': d.state, 'type': d.protocol_type, 'protocol': d.protocol,",
          "  'members': sorted([m.client_id, list(m.member_metadata.subscription), sorted(p for t, ps in m.member_assignment.assignment for p in ps)] for m in d.members)}))",
          'a.close()',
        ].join('\n'),
        broker.kafka,
        GROUP,
      ],
      { timeoutMs: 30_000 },
    );
    assert.equal(py.code, 0, py.stderr);
    const classic = JSON.parse(py.stdout) as { error: number; state: string; type: string; protocol: string; members: Array<[string, string[], number[]]> };
    assert.deepEqual([classic.error, classic.state, classic.type, classic.protocol], [0, 'Stable', 'consumer', 'uniform']);
    assert.deepEqual(
      classic.members.map((m) => [m[0], m[1]]),
      [
        ['reader-a', [TOPIC]],
        ['reader-b', [TOPIC]],
      ],
    );
    assert.deepEqual(classic.members.flatMap((m) => m[2]).sort(), [0, 1, 2, 3]);
  });

  it('one leaves, the other gets every partition and reads on; a later consumer resumes from the commits', async () => {
    const [a, b] = readers;
    await b.consumer.disconnect();
    readers.splice(readers.indexOf(b), 1);
    const bSeen = b.seen;
    await until('reader-a owns the 4 partitions again', () => a.parts().length === 4);
    await produce(200, 200);
    await until('400 records read in all', () => allSeen().size + bSeen.size === 400);
    const all = new Set([...allSeen().values(), ...bSeen.values()]);
    assert.equal(all.size, 400);
    assert.ok(!broker.logs.some((l) => l.msg.includes('invariant broken')), 'no partition had two owners');

    // a stops; its commits are the group's.
    await a.consumer.disconnect();
    readers.splice(readers.indexOf(a), 1);
    const admin = kafka.admin();
    await admin.connect();
    try {
      const committed = (await admin.fetchOffsets({ groupId: GROUP, topics: [TOPIC] }))[0].partitions.map((p) => [p.partition, p.offset]).sort();
      assert.deepEqual(committed, [
        [0, '100'],
        [1, '100'],
        [2, '100'],
        [3, '100'],
      ]);
    } finally {
      await admin.disconnect();
    }
    // A new consumer of the group reads only what came after: it resumes at the commits.
    await produce(400, 8);
    const c = await startReader('reader-c');
    await until('reader-c read the 8 new records', () => c.seen.size >= 8);
    assert.deepEqual([...c.seen.values()].sort(), Array.from({ length: 8 }, (_, i) => `m-${400 + i}`).sort());
    assert.deepEqual([...c.seen.keys()].map((k) => Number(k.split(':')[1])).sort(), [100, 100, 100, 100, 101, 101, 101, 101]);
  });

  it('a regex subscription (SubscribedTopicRegex) gets the matching topics, and one created later', async () => {
    const admin = kafka.admin();
    await admin.connect();
    try {
      await admin.createTopics({
        topics: [
          { topic: 'kr.one', numPartitions: 2 },
          { topic: 'kr.two', numPartitions: 1 },
          { topic: 'krx', numPartitions: 1 },
        ],
      });
    } finally {
      await admin.disconnect();
    }
    const consumer = kafka.consumer({ 'group.id': 'kr.group', 'group.protocol': 'consumer', 'auto.offset.reset': 'earliest', 'enable.auto.commit': false });
    await consumer.connect();
    readers.push({ name: 'regex', consumer, seen: new Map(), parts: () => [] });
    // librdkafka sends its ^-subscriptions to the broker as one regex: (^kr\..*).
    await consumer.subscribe({ topics: [/^kr\..*/] });
    const got: string[] = [];
    void consumer.run({ eachMessage: async ({ topic, message }) => void got.push(`${topic}:${message.value?.toString()}`) });
    const assigned = () =>
      consumer
        .assignment()
        .map((a) => `${a.topic}:${a.partition}`)
        .sort();
    await until('the matching topics assigned', () => assigned().join(' ') === 'kr.one:0 kr.one:1 kr.two:0');
    const p = kafka.producer();
    await p.connect();
    try {
      await p.send({ topic: 'krx', messages: [{ value: 'not-matching' }] });
      await p.send({ topic: 'kr.two', messages: [{ value: 'two' }] });
      const a2 = kafka.admin();
      await a2.connect();
      await a2.createTopics({ topics: [{ topic: 'kr.three', numPartitions: 1 }] });
      await a2.disconnect();
      await until('the topic created later assigned too', () => assigned().includes('kr.three:0'));
      await p.send({ topic: 'kr.three', messages: [{ value: 'three' }] });
    } finally {
      await p.disconnect();
    }
    await until('both records read', () => got.length >= 2);
    assert.deepEqual(got.sort(), ['kr.three:three', 'kr.two:two']);
  });

  it('a static member (group.instance.id) that restarts takes its partitions back, with no new assignment for the group', async () => {
    const group = 'ks.cgroup';
    const start = async (name: string, instance: string): Promise<Reader> => {
      const consumer = kafka.consumer({
        'group.id': group,
        'group.protocol': 'consumer',
        'group.instance.id': instance,
        'client.id': name,
        'auto.offset.reset': 'earliest',
        'enable.auto.commit': false,
      });
      await consumer.connect();
      await consumer.subscribe({ topics: [TOPIC] });
      void consumer.run({ eachMessage: async () => undefined });
      const r: Reader = {
        name,
        consumer,
        seen: new Map(),
        parts: () =>
          consumer
            .assignment()
            .map((a) => `${a.topic}:${a.partition}`)
            .sort(),
      };
      readers.push(r);
      return r;
    };
    const targets = () => broker.logs.filter((l) => l.msg === 'consumer group target assignment computed' && l.group === group).length;
    const a = await start('static-a', 'inst-a');
    const b = await start('static-b', 'inst-b');
    await until('the partitions split', () => a.parts().length === 2 && b.parts().length === 2);
    const aParts = a.parts();
    const bParts = b.parts();
    const computed = targets();
    // Closing sends the static leave (epoch -2): a keeps its partitions in the group while it is away.
    await a.consumer.disconnect();
    readers.splice(readers.indexOf(a), 1);
    // (The broker's log lines come through a pipe: wait for them rather than race them.)
    await until('the broker logged the static leave', () =>
      broker.logs.some((l) => l.msg === 'static member left the consumer group for now' && l.group === group),
    );
    const a2 = await start('static-a2', 'inst-a');
    await until('the restarted member owns its partitions again', () => a2.parts().length === 2);
    assert.deepEqual(a2.parts(), aParts);
    assert.deepEqual(b.parts(), bParts);
    assert.equal(targets(), computed, 'no new target assignment');
    await until('the broker logged the takeover', () =>
      broker.logs.some((l) => l.msg === 'static member rejoined: it takes over its partitions' && l.group === group),
    );
  });
});
