/**
 * Namespaces on Kafka's last APIs (issue 29): the consumer group protocol (KIP-848: ConsumerGroupHeartbeat and
 * ConsumerGroupDescribe), DescribeLogDirs and ElectLeaders for tenants, on a real `flowmq start` with a users file.
 * Two namespaces (t1: ann, its namespace administrator, and amy; t2: bob) and `default` (dee) each have a topic
 * `orders` and a group `billing`. Clients: librdkafka 2.15 (through @confluentinc/kafka-javascript) with
 * group.protocol=consumer, its admin API (ConsumerGroupDescribe), rdkafka-admin (ElectLeaders, the same
 * librdkafka); librdkafka has no DescribeLogDirs, so that request is sent with FlowMQ's codec (v4, what the Java
 * admin sends) after a SASL PLAIN login, as test/e2e/kafka-admin-librdkafka.test.ts does.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FlowmqProcess, ROOT, run } from './harness.js';
import { RawClient } from '../protocols/kafka/helpers.js';
import { DescribeLogDirsApi, KafkaErrorCode as E, SaslAuthenticateApi, SaslHandshakeApi } from '../../src/protocols/kafka/codec/index.js';

const INTEROP = join(ROOT, 'test/interop/confluent-kafka-javascript');
const DEPS = join(INTEROP, 'node_modules/@confluentinc/kafka-javascript/build/deps');

type Rd = Record<string, string | number | boolean | object>;
interface Message {
  value: Buffer | null;
}
interface Consumer {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  subscribe(s: { topics: Array<string | RegExp> }): Promise<void>;
  run(r: { eachMessage: (p: { topic: string; partition: number; message: Message }) => Promise<void> }): Promise<void>;
  assignment(): Array<{ topic: string; partition: number }>;
}
interface GroupDescription {
  groupId: string;
  error?: { code: number; message: string };
  members: Array<{ clientId: string; assignment: { topicPartitions: Array<{ topic: string; partition: number }> } }>;
  type: number;
}
interface Kafka {
  producer(c?: Rd): {
    connect(): Promise<void>;
    disconnect(): Promise<void>;
    send(r: { topic: string; messages: Array<{ value: string; partition?: number }> }): Promise<unknown>;
  };
  consumer(c: Rd): Consumer;
  admin(c?: Rd): {
    connect(): Promise<void>;
    disconnect(): Promise<void>;
    createTopics(o: { topics: Array<{ topic: string; numPartitions?: number }> }): Promise<boolean>;
    describeGroups(ids: string[]): Promise<{ groups: GroupDescription[] }>;
  };
}
interface Ckjs {
  librdkafkaVersion: string;
  KafkaJS: { Kafka: new (c: Rd) => Kafka; ConsumerGroupTypes: Record<string, number> };
}

const quiet = {
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
  debug: () => undefined,
  namespace: () => quiet,
  setLogLevel: () => undefined,
};

const USERS = `
users:
  - {username: dee, password: dee-pw}
  - {username: ann, password: ann-pw, namespace: t1}
  - {username: amy, password: amy-pw, namespace: t1}
  - {username: bob, password: bob-pw, namespace: t2}
namespaces:
  - {name: t1}
  - {name: t2}
policies:
  - {name: ann-admin, effect: allow, actions: [admin], resources: ["namespace:t1"], principals: ["user:ann"]}
  - {name: clients, effect: allow, actions: ["*"], resources: ["stream:*", "group:*", "topic:#"], principals: ["user:dee", "user:ann", "user:amy", "user:bob"]}
`;

type User = 'dee' | 'ann' | 'amy' | 'bob';

async function until(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('e2e: namespaces on the KIP-848 group APIs, DescribeLogDirs and ElectLeaders', { timeout: 180_000 }, () => {
  let ck: Ckjs;
  let broker: FlowmqProcess;
  let dir = '';
  let bin = '';
  const consumers: Consumer[] = [];
  const sasl = (user: User) => ({
    'security.protocol': 'SASL_PLAINTEXT',
    'sasl.mechanisms': 'PLAIN',
    'sasl.username': user,
    'sasl.password': `${user}-pw`,
  });
  const kafka = (user: User): Kafka =>
    new ck.KafkaJS.Kafka({ 'bootstrap.servers': broker.kafka, 'client.id': `ns-${user}`, ...sasl(user), kafkaJS: { logger: quiet } });

  /** One rdkafka-admin call as `user`; its JSON answer (`failed`: the call is expected to fail as a whole). */
  async function rdAdmin<T>(user: User, failed: boolean, ...args: string[]): Promise<T> {
    const conf = Object.entries(sasl(user))
      .map(([k, v]) => `${k}=${v}`)
      .join(';');
    const r = await run(bin, [broker.kafka, ...args], { timeoutMs: 30_000, env: { RDKAFKA_CONF: conf } });
    assert.equal(r.code, failed ? 1 : 0, `rdkafka-admin ${args.join(' ')}: ${r.stdout}${r.stderr}`);
    return JSON.parse(r.stdout) as T;
  }

  /** DescribeLogDirs v4 as `user` (FlowMQ's codec; no client library sends it but Kafka's Java admin). */
  async function logDirs(user: User, topics: Array<{ topic: string; partitions: number[] }> | null) {
    const raw = await RawClient.connect(broker.ports.kafka);
    try {
      await raw.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
      assert.equal((await raw.call(SaslAuthenticateApi, 2, { authBytes: Buffer.from(`\0${user}\0${user}-pw`) })).errorCode, E.NONE);
      return await raw.call(DescribeLogDirsApi, 4, { topics });
    } finally {
      raw.close();
    }
  }

  /** A KIP-848 consumer of `group` as `user`; what it reads, as "topic:value". */
  async function startConsumer(user: User, group: string, topics: Array<string | RegExp>) {
    const consumer = kafka(user).consumer({
      'group.id': group,
      'group.protocol': 'consumer',
      'client.id': `${user}-${group}`,
      'auto.offset.reset': 'earliest',
    });
    await consumer.connect();
    consumers.push(consumer);
    await consumer.subscribe({ topics });
    const got: string[] = [];
    void consumer.run({ eachMessage: async ({ topic, message }) => void got.push(`${topic}:${message.value?.toString()}`) });
    return { consumer, got };
  }

  before(async () => {
    const require = createRequire(join(INTEROP, 'package.json'));
    ck = require('@confluentinc/kafka-javascript') as Ckjs;
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ns-kadmin-'));
    bin = join(dir, 'rdkafka-admin');
    const cc = await run(
      'cc',
      ['-O2', '-Wall', `-I${join(DEPS, 'include')}`, '-o', bin, join(INTEROP, 'rdkafka-admin.c'), `-L${DEPS}`, '-lrdkafka', `-Wl,-rpath,${DEPS}`],
      { timeoutMs: 120_000 },
    );
    assert.equal(cc.code, 0, `cc rdkafka-admin.c: ${cc.stderr}`);
    writeFileSync(join(dir, 'users.yaml'), USERS);
    broker = await FlowmqProcess.start({
      args: ['--users-file', join(dir, 'users.yaml'), '--kafka-group-initial-rebalance-delay', '0', '--kafka-consumer-group-heartbeat-interval', '500ms'],
    });
    // Every namespace: a topic `orders` (2 partitions) with its own records, and a topic of its own name.
    for (const [user, own] of [
      ['dee', 'dee-only'],
      ['ann', 'ann-only'],
      ['bob', 'bob-only'],
    ] as const) {
      const k = kafka(user);
      const admin = k.admin();
      await admin.connect();
      await admin.createTopics({
        topics: [
          { topic: 'orders', numPartitions: 2 },
          { topic: own, numPartitions: 1 },
        ],
      });
      await admin.disconnect();
      const p = k.producer();
      await p.connect();
      await p.send({ topic: 'orders', messages: Array.from({ length: 6 }, (_, i) => ({ value: `${user}-${i}`, partition: i % 2 })) });
      await p.send({ topic: own, messages: [{ value: `${user}-own` }] });
      await p.disconnect();
    }
  });
  after(async () => {
    for (const c of consumers) await c.disconnect().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('each tenant has its own KIP-848 group `billing`: its own members, partitions and records', async () => {
    assert.equal(ck.librdkafkaVersion, '2.15.1');
    const t1 = await startConsumer('ann', 'billing', ['orders']);
    const t2 = await startConsumer('bob', 'billing', ['orders']);
    const parts = (c: Consumer) =>
      c
        .assignment()
        .map((a) => `${a.topic}:${a.partition}`)
        .sort()
        .join(' ');
    // Both get both partitions: two groups, not one group of two members.
    await until(
      'each tenant consumer owns both partitions of its orders',
      () => parts(t1.consumer) === 'orders:0 orders:1' && parts(t2.consumer) === 'orders:0 orders:1',
    );
    await until('both read their six records', () => t1.got.length >= 6 && t2.got.length >= 6);
    const six = (user: string) => Array.from({ length: 6 }, (_, i) => `orders:${user}-${i}`);
    // A marker after everything: what came before it is all there is.
    for (const user of ['ann', 'bob'] as const) {
      const p = kafka(user).producer();
      await p.connect();
      await p.send({ topic: 'orders', messages: [{ value: `${user}-end`, partition: 0 }] });
      await p.disconnect();
    }
    await until('the markers read', () => t1.got.includes('orders:ann-end') && t2.got.includes('orders:bob-end'));
    assert.deepEqual(t1.got.filter((x) => !x.endsWith('-end')).sort(), six('ann'));
    assert.deepEqual(t2.got.filter((x) => !x.endsWith('-end')).sort(), six('bob'));

    // ConsumerGroupDescribe (librdkafka's describe asks it first): each tenant sees its own group, by its own names.
    for (const user of ['ann', 'bob'] as const) {
      const admin = kafka(user).admin();
      await admin.connect();
      try {
        const [g] = (await admin.describeGroups(['billing'])).groups;
        assert.equal(g.error, undefined, JSON.stringify(g.error));
        assert.equal(g.groupId, 'billing');
        assert.equal(g.type, ck.KafkaJS.ConsumerGroupTypes.CONSUMER);
        assert.deepEqual(
          g.members.map((m) => m.clientId),
          [`${user}-billing`],
        );
        assert.deepEqual(g.members[0].assignment.topicPartitions.map((x) => `${x.topic}:${x.partition}`).sort(), ['orders:0', 'orders:1']);
      } finally {
        await admin.disconnect();
      }
    }
    // default has no group `billing`: neither tenant's is seen from there.
    const admin = kafka('dee').admin();
    await admin.connect();
    try {
      const [g] = (await admin.describeGroups(['billing'])).groups;
      assert.equal(g.members.length, 0, JSON.stringify(g));
    } finally {
      await admin.disconnect();
    }
  });

  it("a regex subscription matches the tenant's own topics only, by the names it writes", async () => {
    // `.*-only` in t1 is ann-only alone: not default's dee-only nor t2's bob-only (nor their internal names).
    const r = await startConsumer('amy', 'billing-re', [/^.*-only$/]);
    await until('the regex assigned', () => r.consumer.assignment().length > 0);
    await until('its record read', () => r.got.length >= 1);
    const p = kafka('ann').producer();
    await p.connect();
    await p.send({ topic: 'ann-only', messages: [{ value: 'ann-end' }] });
    await p.disconnect();
    await until('the marker read', () => r.got.includes('ann-only:ann-end'));
    assert.deepEqual(
      r.consumer.assignment().map((a) => `${a.topic}:${a.partition}`),
      ['ann-only:0'],
    );
    assert.deepEqual(r.got, ['ann-only:ann-own', 'ann-only:ann-end']);
    // default's `.*-only` does not reach into the tenants either.
    const d = await startConsumer('dee', 'billing-re', [/^.*-only$/]);
    await until('default regex assigned', () => d.consumer.assignment().length > 0);
    await until('its record read', () => d.got.length >= 1);
    assert.deepEqual(
      d.consumer.assignment().map((a) => `${a.topic}:${a.partition}`),
      ['dee-only:0'],
    );
  });

  it("DescribeLogDirs lists the tenant's topics only; a tenant user who administers nothing is refused", async () => {
    const names = (ld: Awaited<ReturnType<typeof logDirs>>) => ld.results[0].topics.map((t) => `${t.name}:${t.partitions.length}`).sort();
    const ann = await logDirs('ann', null);
    assert.equal(ann.errorCode, E.NONE);
    assert.deepEqual(names(ann), ['ann-only:1', 'orders:2']);
    for (const t of ann.results[0].topics) for (const x of t.partitions) assert.ok(x.partitionSize > 0, JSON.stringify(x));
    // Asked by name: its own `orders`; another namespace's topic is not held here for it.
    const named = await logDirs('ann', [
      { topic: 'orders', partitions: [0, 1] },
      { topic: 'bob-only', partitions: [0] },
      { topic: 'dee-only', partitions: [0] },
    ]);
    assert.deepEqual(names(named), ['orders:2']);
    const amy = await logDirs('amy', null);
    assert.equal(amy.errorCode, E.CLUSTER_AUTHORIZATION_FAILED);
    assert.deepEqual(amy.results, []);
  });

  it('ElectLeaders answers per partition for the namespace administrator, CLUSTER_AUTHORIZATION_FAILED for others', async () => {
    type Elect = { partitions: Array<{ topic: string; partition: number; error: string | null }> };
    const ann = await rdAdmin<Elect>('ann', false, 'elect', 'preferred', 'orders:0', 'orders:1', 'bob-only:0');
    assert.deepEqual(ann.partitions.map((x) => `${x.topic}:${x.partition}:${x.error}`).sort(), [
      'bob-only:0:UNKNOWN_TOPIC_OR_PART',
      'orders:0:ELECTION_NOT_NEEDED',
      'orders:1:ELECTION_NOT_NEEDED',
    ]);
    // Refused at the top (v1+): librdkafka fails the call with the error.
    const amy = await rdAdmin<{ error: string }>('amy', true, 'elect', 'preferred', 'orders:0');
    assert.equal(amy.error, 'CLUSTER_AUTHORIZATION_FAILED');
  });
});
