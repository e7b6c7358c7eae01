/**
 * The admin calls of a current librdkafka (2.15, the one @confluentinc/kafka-javascript builds and every current
 * confluent-kafka binding shares) against a real `flowmq start`, with SASL SCRAM: through rdkafka-admin, a small C
 * program over that librdkafka (test/interop/confluent-kafka-javascript/rdkafka-admin.c, compiled here against the
 * package's library, as its install.sh builds rdkafka-configs).
 *
 * - What a Kafka UI (kafka-ui, Redpanda Console, Conduktor) asks when it opens a cluster, a topic, a consumer group
 *   and the ACL page: DescribeCluster, Metadata, DescribeConfigs of the broker and of the topic, DescribeLogDirs,
 *   ListGroups, DescribeGroups, OffsetFetch and ListOffsets (the lag), DescribeAcls; every answer checked for
 *   completeness and values. librdkafka has no DescribeLogDirs: that one request is sent with FlowMQ's codec at the
 *   version the Java admin client sends (v4), over the same SASL login.
 * - OffsetDelete (DeleteConsumerGroupOffsets), ElectLeaders, Describe/AlterUserScramCredentials (librdkafka salts
 *   and hashes the new password itself; the JavaScript client then logs in with it).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FlowmqProcess, ROOT, run } from './harness.js';
import { RawClient } from '../protocols/kafka/helpers.js';
import { DescribeLogDirsApi, KafkaErrorCode as E, SaslAuthenticateApi, SaslHandshakeApi } from '../../src/protocols/kafka/codec/index.js';
import { KAFKA_BROKER_CONFIGS } from '../../src/protocols/kafka/kafka-broker-config-defs.js';

const INTEROP = join(ROOT, 'test/interop/confluent-kafka-javascript');
const DEPS = join(INTEROP, 'node_modules/@confluentinc/kafka-javascript/build/deps');
const HOW_TO_INSTALL = 'apt-get install libssl-dev zlib1g-dev libzstd-dev liblz4-dev && test/interop/confluent-kafka-javascript/install.sh';

type Rd = Record<string, string | number | boolean | object>;
interface Kafka {
  producer(c?: Rd): {
    connect(): Promise<void>;
    disconnect(): Promise<void>;
    send(r: { topic: string; messages: Array<{ value: string; partition?: number }> }): Promise<unknown>;
  };
  consumer(c: Rd): {
    connect(): Promise<void>;
    disconnect(): Promise<void>;
    subscribe(s: { topics: string[] }): Promise<void>;
    run(r: { eachMessage: (p: { partition: number; message: { offset: string } }) => Promise<void> }): Promise<void>;
    commitOffsets(o: Array<{ topic: string; partition: number; offset: string }>): Promise<void>;
  };
  admin(c?: Rd): {
    connect(): Promise<void>;
    disconnect(): Promise<void>;
    createTopics(o: { topics: Array<{ topic: string; numPartitions?: number }> }): Promise<boolean>;
    fetchTopicMetadata(o: {
      topics: string[];
    }): Promise<Array<{ name: string; partitions: Array<{ partitionId: number; leader: number; replicas: number[]; isr: number[] }> }>>;
  };
}
interface Ckjs {
  KafkaJS: { Kafka: new (c: Rd) => Kafka };
}

function loadClient(): Ckjs {
  const require = createRequire(join(INTEROP, 'package.json'));
  try {
    return require('@confluentinc/kafka-javascript') as Ckjs;
  } catch (err) {
    throw new Error(`@confluentinc/kafka-javascript is not installed in ${INTEROP}: ${HOW_TO_INSTALL}`, { cause: err });
  }
}

const quiet = {
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
  debug: () => undefined,
  namespace: () => quiet,
  setLogLevel: () => undefined,
};

// Not installed is a failure, never a skip (CI installs the package).
it("has the interop package installed, with librdkafka's headers and library", () => {
  loadClient();
  assert.ok(existsSync(join(DEPS, 'include/librdkafka/rdkafka.h')), `${DEPS} is missing: ${HOW_TO_INSTALL}`);
});

describe('kafka admin with a current librdkafka: what a UI asks, and the operations APIs', () => {
  let ck: Ckjs;
  let broker: FlowmqProcess;
  let dir: string;
  let bin: string;
  const sasl = (user: string, password: string, mechanism = 'SCRAM-SHA-256') => ({
    'security.protocol': 'SASL_PLAINTEXT',
    'sasl.mechanisms': mechanism,
    'sasl.username': user,
    'sasl.password': password,
  });
  const kafka = (user = 'alice', password = 'alice-pw', mechanism = 'SCRAM-SHA-256'): Kafka =>
    new ck.KafkaJS.Kafka({ 'bootstrap.servers': broker.kafka, 'client.id': 'ui-e2e', ...sasl(user, password, mechanism), kafkaJS: { logger: quiet } });

  /** One rdkafka-admin call as alice; its JSON answer. */
  async function admin<T = Record<string, unknown>>(...args: string[]): Promise<T> {
    const conf = 'security.protocol=SASL_PLAINTEXT;sasl.mechanisms=SCRAM-SHA-256;sasl.username=alice;sasl.password=alice-pw';
    const r = await run(bin, [broker.kafka, ...args], { timeoutMs: 30_000, env: { RDKAFKA_CONF: conf } });
    assert.equal(r.code, 0, `rdkafka-admin ${args.join(' ')}: ${r.stdout}${r.stderr}`);
    return JSON.parse(r.stdout) as T;
  }

  before(async () => {
    ck = loadClient();
    dir = mkdtempSync(join(tmpdir(), 'flowmq-rdadmin-'));
    bin = join(dir, 'rdkafka-admin');
    const cc = await run(
      'cc',
      ['-O2', '-Wall', `-I${join(DEPS, 'include')}`, '-o', bin, join(INTEROP, 'rdkafka-admin.c'), `-L${DEPS}`, '-lrdkafka', `-Wl,-rpath,${DEPS}`],
      { timeoutMs: 120_000 },
    );
    assert.equal(cc.code, 0, `cc rdkafka-admin.c: ${cc.stderr}`);
    // alice administers; bob may only read ui.* (the policy the ACL page shows).
    writeFileSync(
      join(dir, 'users.yaml'),
      [
        'users:',
        '  - {username: alice, password: alice-pw}',
        '  - {username: bob, password: bob-pw}',
        'policies:',
        '  - {name: alice-all, effect: allow, actions: ["*"], resources: ["cluster:*", "stream:*", "group:*", "topic:#"], principals: ["user:alice"]}',
        '  - {name: bob-read, effect: allow, actions: [describe, subscribe], resources: ["stream:ui.*", "group:bob-*"], principals: ["user:bob"]}',
      ].join('\n'),
    );
    broker = await FlowmqProcess.start({ args: ['--users-file', join(dir, 'users.yaml'), '--kafka-group-initial-rebalance-delay', '0'] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('answers every call a UI makes when it opens the cluster, a topic, a consumer group and the ACL page', async () => {
    // A topic with data and a consumer group that read part of it and stays connected.
    const k = kafka();
    const setup = k.admin();
    await setup.connect();
    assert.equal(await setup.createTopics({ topics: [{ topic: 'ui.orders', numPartitions: 3 }] }), true);
    const p = k.producer();
    await p.connect();
    for (let part = 0; part < 3; part++)
      await p.send({ topic: 'ui.orders', messages: Array.from({ length: 10 }, (_, i) => ({ value: `o${part}-${i}`, partition: part })) });
    await p.disconnect();
    const consumer = k.consumer({ 'group.id': 'ui-group', 'auto.offset.reset': 'earliest', 'enable.auto.commit': false });
    await consumer.connect();
    let read = 0;
    const committed = new Promise<void>((resolve) => {
      void consumer.subscribe({ topics: ['ui.orders'] }).then(() =>
        consumer.run({
          eachMessage: async ({ partition, message }) => {
            // Commit up to offset 4 of each partition (5 read), then stop committing.
            if (Number(message.offset) === 4) {
              await consumer.commitOffsets([{ topic: 'ui.orders', partition, offset: '5' }]);
              if (++read === 3) resolve();
            }
          },
        }),
      );
    });
    try {
      await committed;

      // Cluster page: DescribeCluster, the broker's configs, its log dirs.
      const cluster = await admin<{ clusterId: string; controller: number; nodes: Array<{ id: number; host: string; port: number }> }>('cluster');
      assert.equal(cluster.clusterId, 'flowmq');
      assert.equal(cluster.controller, 0);
      assert.deepEqual(cluster.nodes, [{ id: 0, host: '127.0.0.1', port: broker.ports.kafka }]);
      const bc = await admin<{
        resources: Array<{
          error: string | null;
          configs: Array<{
            name: string;
            value: string | null;
            source: string;
            readOnly: boolean;
            isSensitive: boolean;
            synonyms: Array<{ name: string; source: string }>;
          }>;
        }>;
      }>('configs', 'broker', '0');
      assert.equal(bc.resources[0].error, null);
      const brokerConfigs = new Map(bc.resources[0].configs.map((c) => [c.name, c]));
      assert.equal(brokerConfigs.size, KAFKA_BROKER_CONFIGS.length, 'every broker config Kafka defines');
      assert.deepEqual([brokerConfigs.get('broker.id')?.value, brokerConfigs.get('broker.id')?.source], ['0', 'STATIC_BROKER_CONFIG']);
      assert.equal(brokerConfigs.get('log.dirs')?.value, broker.dataDir);
      assert.deepEqual([brokerConfigs.get('num.io.threads')?.source, brokerConfigs.get('num.io.threads')?.readOnly], ['DEFAULT_CONFIG', true]);
      assert.equal(brokerConfigs.get('log.retention.ms')?.readOnly, false);
      assert.equal(brokerConfigs.get('sasl.jaas.config')?.isSensitive, true);
      assert.deepEqual(
        brokerConfigs.get('log.retention.hours')?.synonyms.map((s) => s.source),
        ['STATIC_BROKER_CONFIG', 'DEFAULT_CONFIG'],
      );
      const raw = await RawClient.connect(broker.ports.kafka);
      try {
        await raw.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
        assert.equal((await raw.call(SaslAuthenticateApi, 2, { authBytes: Buffer.from('\0alice\0alice-pw') })).errorCode, E.NONE);
        const ld = await raw.call(DescribeLogDirsApi, 4, { topics: null });
        assert.equal(ld.errorCode, E.NONE);
        assert.equal(ld.results.length, 1);
        assert.equal(ld.results[0].logDir, broker.dataDir);
        assert.ok(ld.results[0].totalBytes > 0 && ld.results[0].usableBytes > 0);
        const orders = ld.results[0].topics.find((t) => t.name === 'ui.orders');
        assert.deepEqual(
          orders?.partitions.map((x) => x.partitionIndex),
          [0, 1, 2],
        );
        for (const x of orders!.partitions) assert.ok(x.partitionSize > 10 * 3 && x.offsetLag === 0 && !x.isFutureKey, JSON.stringify(x));
      } finally {
        raw.close();
      }

      // Topic page: Metadata (partitions, leaders, replicas), its configs, its offsets.
      const md = await setup.fetchTopicMetadata({ topics: ['ui.orders'] });
      assert.deepEqual(
        md[0].partitions.map((x) => [x.partitionId, x.leader, x.replicas, x.isr]),
        [
          [0, 0, [0], [0]],
          [1, 0, [0], [0]],
          [2, 0, [0], [0]],
        ],
      );
      const tc = await admin<{ resources: Array<{ error: string | null; configs: Array<{ name: string; value: string | null; source: string }> }> }>(
        'configs',
        'topic',
        'ui.orders',
      );
      const topicConfigs = new Map(tc.resources[0].configs.map((c) => [c.name, c]));
      assert.ok(topicConfigs.size >= 35);
      assert.deepEqual([topicConfigs.get('cleanup.policy')?.value, topicConfigs.get('retention.ms')?.value], ['delete', '-1']);
      const latest = await admin<{ partitions: Array<{ partition: number; offset: number; error: string | null }> }>(
        'offsets',
        'latest',
        'ui.orders:0',
        'ui.orders:1',
        'ui.orders:2',
      );
      assert.deepEqual(latest.partitions.map((x) => [x.partition, x.offset, x.error]).sort(), [
        [0, 10, null],
        [1, 10, null],
        [2, 10, null],
      ]);
      const earliest = await admin<{ partitions: Array<{ offset: number }> }>('offsets', 'earliest', 'ui.orders:0');
      assert.equal(earliest.partitions[0].offset, 0);

      // Consumer group page: the groups, the group's members and assignment, its offsets and lag.
      const groups = await admin<{ groups: Array<{ group: string; state: string; simple: boolean }>; errors: number }>('groups');
      assert.deepEqual(
        groups.groups.find((g) => g.group === 'ui-group'),
        { group: 'ui-group', state: 'Stable', simple: false },
      );
      assert.equal(groups.errors, 0);
      const dg = await admin<{
        groups: Array<{
          group: string;
          error: string | null;
          state: string;
          assignor: string;
          coordinator: number;
          members: Array<{ clientId: string; host: string; assignment: Array<{ topic: string; partition: number }> }>;
        }>;
      }>('describe-groups', 'ui-group');
      const g = dg.groups[0];
      assert.deepEqual([g.error, g.state, g.coordinator, g.members.length], [null, 'Stable', 0, 1]);
      assert.equal(g.members[0].clientId, 'ui-e2e');
      assert.deepEqual(g.members[0].assignment.map((a) => `${a.topic}/${a.partition}`).sort(), ['ui.orders/0', 'ui.orders/1', 'ui.orders/2']);
      const go = await admin<{
        groups: Array<{ group: string; error: string | null; partitions: Array<{ topic: string; partition: number; offset: number }> }>;
      }>('group-offsets', 'ui-group');
      assert.equal(go.groups[0].error, null);
      const lag = go.groups[0].partitions.map((x) => [x.partition, 10 - x.offset]).sort();
      assert.deepEqual(
        lag,
        [
          [0, 5],
          [1, 5],
          [2, 5],
        ],
        'lag = end offset - committed offset',
      );

      // ACL page: the policies as ACL bindings.
      const acls = await admin<{
        acls: Array<{ resourceType: string; name: string; pattern: string; principal: string; operation: string; permission: string }>;
      }>('acls');
      const bob = acls.acls.filter((a) => a.principal === 'User:bob');
      assert.ok(
        bob.some((a) => a.resourceType === 'TOPIC' && a.name === 'ui.' && a.pattern === 'PREFIXED' && a.operation === 'DESCRIBE' && a.permission === 'ALLOW'),
        JSON.stringify(bob),
      );
      assert.ok(
        bob.some((a) => a.resourceType === 'TOPIC' && a.name === 'ui.' && a.operation === 'READ'),
        JSON.stringify(bob),
      );
      // bob's policy, binding by binding: DESCRIBE and READ on the topics prefixed ui. and the groups prefixed bob-.
      assert.deepEqual(bob.map((a) => `${a.resourceType} ${a.name} ${a.pattern} ${a.operation} ${a.permission}`).sort(), [
        'GROUP bob- PREFIXED DESCRIBE ALLOW',
        'GROUP bob- PREFIXED READ ALLOW',
        'TOPIC ui. PREFIXED DESCRIBE ALLOW',
        'TOPIC ui. PREFIXED READ ALLOW',
      ]);
    } finally {
      await consumer.disconnect();
      await setup.disconnect();
    }
  });

  it("deletes a group's committed offsets (refused on a topic its members consume), elects leaders", async () => {
    // ui-group has no members now (the consumer above disconnected): its offsets may go.
    const del = await admin<{ groups: Array<{ group: string; error: string | null; partitions: Array<{ partition: number; error: string | null }> }> }>(
      'delete-group-offsets',
      'ui-group',
      'ui.orders:0',
      'ui.orders:1',
    );
    assert.deepEqual(
      [del.groups[0].error, del.groups[0].partitions.map((x) => [x.partition, x.error])],
      [
        null,
        [
          [0, null],
          [1, null],
        ],
      ],
    );
    const go = await admin<{ groups: Array<{ partitions: Array<{ partition: number; offset: number }> }> }>('group-offsets', 'ui-group');
    // Every committed offset of the group: partition 2's is all that is left.
    assert.deepEqual(
      go.groups[0].partitions.map((x) => [x.partition, x.offset]),
      [[2, 5]],
    );

    // A member consuming ui.orders: its offsets there stay (GROUP_SUBSCRIBED_TO_TOPIC).
    const c = kafka().consumer({ 'group.id': 'ui-live', 'auto.offset.reset': 'earliest', 'enable.auto.commit': false });
    await c.connect();
    try {
      const first = new Promise<void>((resolve) => {
        void c.subscribe({ topics: ['ui.orders'] }).then(() =>
          c.run({
            eachMessage: async ({ partition, message }) => {
              if (partition === 0 && message.offset === '0') {
                await c.commitOffsets([{ topic: 'ui.orders', partition: 0, offset: '1' }]);
                resolve();
              }
            },
          }),
        );
      });
      await first;
      const live = await admin<{ groups: Array<{ error: string | null; partitions: Array<{ partition: number; error: string | null }> }> }>(
        'delete-group-offsets',
        'ui-live',
        'ui.orders:0',
      );
      const errors = [live.groups[0].error, ...live.groups[0].partitions.map((x) => x.error)];
      assert.ok(errors.includes('GROUP_SUBSCRIBED_TO_TOPIC'), JSON.stringify(live));
    } finally {
      await c.disconnect();
    }

    const elect = await admin<{ partitions: Array<{ topic: string; partition: number; error: string | null }> }>(
      'elect',
      'preferred',
      'ui.orders:0',
      'ui.orders:2',
    );
    assert.deepEqual(elect.partitions.map((x) => [x.partition, x.error]).sort(), [
      [0, 'ELECTION_NOT_NEEDED'],
      [2, 'ELECTION_NOT_NEEDED'],
    ]);
  });

  it('describes and alters SCRAM credentials; the client logs in with the new one', async () => {
    const d = await admin<{ users: Array<{ user: string; error: string | null; credentials: Array<{ mechanism: number; iterations: number }> }> }>(
      'describe-scram',
      'bob',
      'nobody',
    );
    const byUser = new Map(d.users.map((u) => [u.user, u]));
    assert.deepEqual(byUser.get('bob')?.credentials, [
      { mechanism: 1, iterations: 4096 },
      { mechanism: 2, iterations: 4096 },
    ]);
    assert.equal(byUser.get('nobody')?.error, 'RESOURCE_NOT_FOUND');
    const a = await admin<{ users: Array<{ user: string; error: string | null }> }>('alter-scram', 'upsert:bob:512:8192:bob-new-pw', 'upsert:ghost:256:8192:x');
    assert.deepEqual(
      new Map(a.users.map((u) => [u.user, u.error])),
      new Map([
        ['bob', null],
        ['ghost', 'RESOURCE_NOT_FOUND'],
      ]),
    );
    const after = await admin<{ users: Array<{ credentials: Array<{ mechanism: number; iterations: number }> }> }>('describe-scram', 'bob');
    assert.deepEqual(after.users[0].credentials, [
      { mechanism: 1, iterations: 4096 },
      { mechanism: 2, iterations: 8192 },
    ]);
    // bob logs in with SCRAM-SHA-512 and the new password, and reads a topic he may read.
    const md = kafka('bob', 'bob-new-pw', 'SCRAM-SHA-512').admin();
    await md.connect();
    try {
      assert.equal((await md.fetchTopicMetadata({ topics: ['ui.orders'] }))[0].partitions.length, 3);
    } finally {
      await md.disconnect();
    }
    const old = kafka('bob', 'bob-pw', 'SCRAM-SHA-512').admin();
    await assert.rejects(old.connect().then(() => old.fetchTopicMetadata({ topics: ['ui.orders'] })));
    await old.disconnect().catch(() => undefined);
  });
});
