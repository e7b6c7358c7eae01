/**
 * A current librdkafka against a real `flowmq start`: @confluentinc/kafka-javascript 1.10.1 (librdkafka 2.15.1),
 * the client every current confluent-kafka binding (Python, Go, .NET, JavaScript) shares. The other Kafka e2e tests
 * use kcat and Debian's confluent-kafka (librdkafka 2.0.2), KafkaJS and kafka-python; librdkafka 2.1+ writes its
 * all-topics Metadata v12 request with 3 bytes after the body, which FlowMQ used to refuse, locking every current
 * client out.
 *
 * The client lives in its own package, test/interop/confluent-kafka-javascript (built from source against
 * Debian's OpenSSL, zlib, zstd and lz4: minutes, so it stays out of the root package and `npm ci`). `.ci/run`
 * installs it; without it this test fails and says how to install it. Its JavaScript API has no config calls, so
 * DescribeConfigs/AlterConfigs/IncrementalAlterConfigs go through rdkafka-configs, a small C program over the same
 * librdkafka that the package's install.sh builds.
 *
 * Covered: ApiVersions negotiation (api.version.request) and the features it enables, all-topics Metadata, the
 * newest versions it sends to produce and consume (Fetch v16 by topic id, Produce v10, Metadata v13),
 * idempotent produce with every codec, a consumer group that commits and resumes, the admin calls (topics, groups,
 * configs), SASL SCRAM-SHA-256/512 over plaintext and TLS, and TLS alone.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { FlowmqProcess, ROOT, kcatConsume, makeTestCert, run, type TestCert } from './harness.js';

const INTEROP = join(ROOT, 'test/interop/confluent-kafka-javascript');
const CONFIGS_BIN = join(INTEROP, 'bin/rdkafka-configs');
const HOW_TO_INSTALL =
  'apt-get install libssl-dev zlib1g-dev libzstd-dev liblz4-dev && test/interop/confluent-kafka-javascript/install.sh ' +
  '(.ci/run does both; about 5 minutes on two cores)';

// ------------------------------------------------------------------------------------------------ the client's API

type Rd = Record<string, string | number | boolean | object>;
interface Message {
  key: Buffer | null;
  value: Buffer | null;
  offset: string;
  headers?: Record<string, Buffer | string | undefined>;
}
interface Producer {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  send(r: {
    topic: string;
    messages: Array<{ key?: string; value: string; headers?: Record<string, string>; partition?: number }>;
  }): Promise<Array<{ partition: number; errorCode: number; baseOffset?: string }>>;
}
interface Consumer {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  subscribe(s: { topics: string[] }): Promise<void>;
  run(r: { eachMessage: (p: { topic: string; partition: number; message: Message }) => Promise<void> }): Promise<void>;
  commitOffsets(o: Array<{ topic: string; partition: number; offset: string }>): Promise<void>;
  assignment(): Array<{ topic: string; partition: number }>;
}
interface GroupOverview {
  groupId: string;
  protocolType: string;
  state: number;
  isSimpleConsumerGroup: boolean;
}
interface Admin {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  listTopics(): Promise<string[]>;
  createTopics(o: { topics: Array<{ topic: string; numPartitions?: number; configEntries?: Array<{ name: string; value: string }> }> }): Promise<boolean>;
  deleteTopics(o: { topics: string[] }): Promise<void>;
  fetchTopicMetadata(o: { topics: string[] }): Promise<Array<{ name: string; partitions: Array<{ partitionId: number; leader: number }> }>>;
  listGroups(): Promise<{ groups: GroupOverview[]; errors: unknown[] }>;
  describeGroups(ids: string[]): Promise<{ groups: Array<GroupOverview & { members: unknown[] }> }>;
  deleteGroups(ids: string[]): Promise<Array<{ groupId: string; errorCode: number }>>;
  fetchOffsets(o: { groupId: string; topics: string[] }): Promise<Array<{ topic: string; partitions: Array<{ partition: number; offset: string }> }>>;
}
interface Kafka {
  producer(c?: Rd): Producer;
  consumer(c: Rd): Consumer;
  admin(c?: Rd): Admin;
}
interface Ckjs {
  librdkafkaVersion: string;
  features: string[];
  KafkaJS: { Kafka: new (c: Rd) => Kafka; ConsumerGroupStates: Record<string, number> };
}

/** The client from the interop package (never from the root node_modules: it is not a dependency of FlowMQ). */
function loadClient(): Ckjs {
  const require = createRequire(join(INTEROP, 'package.json'));
  try {
    return require('@confluentinc/kafka-javascript') as Ckjs;
  } catch (err) {
    throw new Error(`@confluentinc/kafka-javascript is not installed in ${INTEROP}: ${HOW_TO_INSTALL}`, { cause: err });
  }
}

/** librdkafka's log lines (the `debug` contexts asked for), gathered per client. */
function logSink(lines: string[]) {
  const keep = (msg: string) => void lines.push(msg);
  const logger = { info: keep, warn: keep, error: keep, debug: keep, namespace: () => logger, setLogLevel: () => undefined };
  return logger;
}

const CODECS = ['none', 'gzip', 'snappy', 'lz4', 'zstd'] as const;

/** The versions librdkafka 2.15 sends to produce and consume (its newest of each, all offered by FlowMQ). */
const EXPECTED_VERSIONS: Record<string, number[]> = {
  Produce: [10],
  // v13+ names topics by id: the consumer found the id in Metadata (v10+) and fetched by it.
  Fetch: [16],
  Metadata: [13],
  ListOffsets: [7],
  OffsetCommit: [9],
  OffsetFetch: [9],
  FindCoordinator: [2],
  InitProducerId: [4],
};

/** Reads `count` messages through a fresh consumer of `group`; returns them and disconnects. */
async function consume(kafka: Kafka, group: string, topic: string, count: number, extra: Rd = {}): Promise<Message[]> {
  const c = kafka.consumer({ 'group.id': group, 'auto.offset.reset': 'earliest', 'enable.auto.commit': false, ...extra });
  await c.connect();
  try {
    await c.subscribe({ topics: [topic] });
    const got: Message[] = [];
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`read ${got.length} of ${count} messages of ${topic}`)), 30_000);
      void c.run({
        eachMessage: async ({ message }) => {
          got.push(message);
          if (got.length === count) {
            clearTimeout(timer);
            resolve();
          }
        },
      });
    });
    return got;
  } finally {
    await c.disconnect();
  }
}

async function configs(bootstrap: string, args: string[], env: NodeJS.ProcessEnv = {}) {
  const r = await run(CONFIGS_BIN, [bootstrap, ...args], { timeoutMs: 30_000, env });
  assert.equal(r.code, 0, `rdkafka-configs ${args.join(' ')}: ${r.stdout}${r.stderr}`);
  return JSON.parse(r.stdout) as {
    resources: Array<{
      name: string;
      error: string | null;
      message: string | null;
      configs: Array<{
        name: string;
        value: string | null;
        source: string;
        readOnly: boolean;
        isDefault: boolean;
        synonyms: Array<{ name: string; source: string }>;
      }>;
    }>;
  };
}

// ------------------------------------------------------------------------------------------------ tests

// Not installed is a failure, never a skip: CI installs the package, and a silent skip would hide its absence.
it('has the interop package installed (test/interop/confluent-kafka-javascript)', () => {
  loadClient();
  if (!existsSync(CONFIGS_BIN)) throw new Error(`${CONFIGS_BIN} is missing: ${HOW_TO_INSTALL}`);
});

describe('kafka with a current librdkafka (@confluentinc/kafka-javascript)', () => {
  let ck: Ckjs;
  let broker: FlowmqProcess;
  let tls: TestCert;
  let Kafka: Ckjs['KafkaJS']['Kafka'];
  const logs: string[] = [];
  const client = (bootstrap: string, extra: Rd = {}): Kafka =>
    new Kafka({ 'bootstrap.servers': bootstrap, 'client.id': 'ckjs-e2e', ...extra, kafkaJS: { logger: logSink(logs) } });

  before(async () => {
    ck = loadClient();
    if (!existsSync(CONFIGS_BIN)) throw new Error(`${CONFIGS_BIN} is missing: ${HOW_TO_INSTALL}`);
    Kafka = ck.KafkaJS.Kafka;
    tls = makeTestCert('flowmq-ckjs-');
    broker = await FlowmqProcess.start({
      args: ['--kafka-group-initial-rebalance-delay', '0', '--kafka-tls-port', '0', '--kafka-tls-cert', tls.certPath, '--kafka-tls-key', tls.keyPath],
    });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    if (tls) rmSync(tls.dir, { recursive: true, force: true });
  });

  it('is librdkafka 2.15 with every codec, SSL and SCRAM built in', () => {
    assert.equal(ck.librdkafkaVersion, '2.15.1');
    for (const f of ['gzip', 'snappy', 'lz4', 'zstd', 'ssl', 'sasl_scram']) assert.ok(ck.features.includes(f), f);
  });

  it('negotiates API versions (api.version.request) and lists every topic (all-topics Metadata v13)', async () => {
    const p = await run('kcat', ['-b', broker.kafka, '-P', '-t', 'ck.existing'], { input: 'x\n', timeoutMs: 20_000 });
    assert.equal(p.code, 0, p.stderr);
    logs.length = 0;
    const admin = client(broker.kafka, { debug: 'feature,protocol' }).admin();
    await admin.connect();
    try {
      assert.ok((await admin.listTopics()).includes('ck.existing'));
    } finally {
      await admin.disconnect();
    }
    const has = (re: RegExp) =>
      assert.ok(
        logs.some((l) => re.test(l)),
        `librdkafka logged ${re}`,
      );
    has(/Sent ApiVersionRequest \(v3,/);
    has(/Received ApiVersionResponse \(v3,/);
    // The features librdkafka derives from the advertised ranges: its request layouts and what it may use.
    for (const f of ['MsgVer2', 'ApiVersion', 'IdempotentProducer', 'ZSTD', 'LZ4', 'SaslAuthReq', 'BrokerGroupCoordinator']) {
      has(new RegExp(`Enabling feature ${f}\\b`));
    }
    has(/Sent MetadataRequest \(v13,/);
    assert.ok(!broker.logs.some((l) => l.msg.includes('malformed request')), 'no request refused');
  });

  it('produces and consumes at the newest versions it negotiates: Produce and Fetch by topic id, Metadata v13', async () => {
    const topic = 'ck.latest';
    logs.length = 0;
    const kafka = client(broker.kafka, { debug: 'protocol' });
    const producer = kafka.producer({ 'enable.idempotence': true });
    await producer.connect();
    try {
      for (let i = 0; i < 5; i++) await producer.send({ topic, messages: [{ key: `k${i}`, value: `v${i}` }] });
    } finally {
      await producer.disconnect();
    }
    const got = await consume(kafka, 'ck.latest.g', topic, 5, { 'enable.auto.commit': true, 'auto.commit.interval.ms': 100 });
    assert.deepEqual(
      got.map((m) => m.value?.toString()),
      ['v0', 'v1', 'v2', 'v3', 'v4'],
    );
    const sent = (api: string): number[] => [
      ...new Set(logs.flatMap((l) => [...l.matchAll(new RegExp(`Sent ${api}Request \\(v(\\d+),`, 'g'))].map((m) => Number(m[1])))),
    ];
    const versions = Object.fromEntries(
      ['Produce', 'Fetch', 'Metadata', 'ListOffsets', 'OffsetCommit', 'OffsetFetch', 'FindCoordinator', 'InitProducerId'].map((a) => [a, sent(a)]),
    );
    // librdkafka 2.15's own maxima, all within FlowMQ's ranges: it uses each API at its newest version it knows.
    assert.deepEqual(versions, EXPECTED_VERSIONS, JSON.stringify(versions));
    assert.ok(!broker.logs.some((l) => l.msg.includes('malformed request')), 'no request refused');
  });

  it('produces idempotently with every codec; kcat reads every record back with its key and headers', async () => {
    const topic = 'ck.codecs';
    for (const codec of CODECS) {
      const p = client(broker.kafka).producer({ 'enable.idempotence': true, 'compression.codec': codec, 'linger.ms': 20 });
      await p.connect();
      try {
        const res = await p.send({
          topic,
          messages: Array.from({ length: 20 }, (_, i) => ({ key: `${codec}-${i}`, value: `${codec} value ${i} `.repeat(20), headers: { codec } })),
        });
        assert.ok(
          res.every((r) => r.errorCode === 0),
          JSON.stringify(res),
        );
      } finally {
        await p.disconnect();
      }
    }
    const msgs = await kcatConsume(broker.kafka, topic, ['-X', 'fetch.wait.max.ms=50']);
    assert.equal(msgs.length, 20 * CODECS.length);
    assert.deepEqual(
      msgs.map((m) => m.offset),
      msgs.map((_, i) => i),
      'contiguous offsets',
    );
    CODECS.forEach((codec, c) => {
      for (let i = 0; i < 20; i++) {
        const m = msgs[c * 20 + i];
        assert.equal(m.key, `${codec}-${i}`);
        assert.equal(m.payload, `${codec} value ${i} `.repeat(20));
        assert.deepEqual(m.headers, ['codec', codec]);
      }
    });
    // And librdkafka reads them all back too (decompressing each codec).
    const back = await consume(client(broker.kafka), 'ck-codecs-reader', topic, 20 * CODECS.length);
    assert.deepEqual(
      back.map((m) => m.key?.toString()),
      msgs.map((m) => m.key),
    );
  });

  it('consumes in a group, commits, and a member rejoining resumes from the committed offset', async () => {
    const topic = 'ck.group';
    const kafka = client(broker.kafka);
    const p = kafka.producer({ 'enable.idempotence': true });
    await p.connect();
    await p.send({ topic, messages: Array.from({ length: 10 }, (_, i) => ({ key: `k${i}`, value: `v${i}` })) });
    const c = kafka.consumer({ 'group.id': 'ck-g', 'auto.offset.reset': 'earliest', 'enable.auto.commit': false });
    await c.connect();
    await c.subscribe({ topics: [topic] });
    const first: string[] = [];
    await new Promise<void>((resolve) => {
      void c.run({
        eachMessage: async ({ message }) => {
          first.push(message.offset);
          if (first.length === 10) resolve();
        },
      });
    });
    assert.deepEqual(first, ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
    await c.commitOffsets([{ topic, partition: 0, offset: '6' }]);
    await c.disconnect();
    const admin = kafka.admin();
    await admin.connect();
    try {
      const committed = await admin.fetchOffsets({ groupId: 'ck-g', topics: [topic] });
      assert.deepEqual(
        committed.map((t) => [t.topic, t.partitions.map((x) => [x.partition, x.offset])]),
        [[topic, [[0, '6']]]],
      );
    } finally {
      await admin.disconnect();
    }
    await p.send({ topic, messages: [{ value: 'v10' }, { value: 'v11' }] });
    await p.disconnect();
    const again = await consume(kafka, 'ck-g', topic, 6);
    assert.deepEqual(
      again.map((m) => m.offset),
      ['6', '7', '8', '9', '10', '11'],
    );
    assert.deepEqual(
      again.map((m) => m.value?.toString()),
      ['v6', 'v7', 'v8', 'v9', 'v10', 'v11'],
    );
  });

  it('lists, describes and deletes groups; an Empty group that never committed is still a consumer group', async () => {
    const kafka = client(broker.kafka);
    const p = kafka.producer();
    await p.connect();
    await p.send({ topic: 'ck.nocommit', messages: [{ value: 'a' }] });
    await p.disconnect();
    // Joins, reads, leaves without committing anything.
    await consume(kafka, 'ck-nocommit', 'ck.nocommit', 1);
    const admin = kafka.admin();
    await admin.connect();
    try {
      const { groups } = await admin.listGroups();
      const byId = new Map(groups.map((g) => [g.groupId, g]));
      const EMPTY = ck.KafkaJS.ConsumerGroupStates.EMPTY;
      for (const id of ['ck-g', 'ck-nocommit']) {
        const g = byId.get(id);
        assert.ok(g, `${id} listed`);
        assert.deepEqual([g.protocolType, g.state, g.isSimpleConsumerGroup], ['consumer', EMPTY, false], id);
      }
      const described = await admin.describeGroups(['ck-g', 'ck-nocommit']);
      for (const g of described.groups) {
        assert.deepEqual([g.protocolType, g.state, g.isSimpleConsumerGroup, g.members.length], ['consumer', EMPTY, false, 0], g.groupId);
      }
      const deleted = await admin.deleteGroups(['ck-nocommit']);
      assert.deepEqual(
        deleted.map((d) => [d.groupId, d.errorCode]),
        [['ck-nocommit', 0]],
      );
      assert.ok(!(await admin.listGroups()).groups.some((g) => g.groupId === 'ck-nocommit'));
    } finally {
      await admin.disconnect();
    }
  });

  it('creates (with configs, such as a Kafka Streams repartition topic), lists and deletes topics', async () => {
    const admin = client(broker.kafka).admin();
    await admin.connect();
    try {
      const created = await admin.createTopics({
        topics: [
          { topic: 'ck.admin', numPartitions: 3, configEntries: [{ name: 'retention.ms', value: '3600000' }] },
          {
            // What Kafka Streams sets on a repartition topic (RepartitionTopicConfig).
            topic: 'ck.app-KSTREAM-REPARTITION-0000000003-repartition',
            numPartitions: 2,
            configEntries: [
              { name: 'cleanup.policy', value: 'delete' },
              { name: 'segment.bytes', value: '52428800' },
              { name: 'retention.ms', value: '-1' },
              { name: 'message.timestamp.type', value: 'CreateTime' },
            ],
          },
        ],
      });
      assert.equal(created, true);
      const topics = await admin.listTopics();
      assert.ok(topics.includes('ck.admin') && topics.includes('ck.app-KSTREAM-REPARTITION-0000000003-repartition'));
      const [md] = await admin.fetchTopicMetadata({ topics: ['ck.admin'] });
      assert.deepEqual(md.partitions.map((x) => x.partitionId).sort(), [0, 1, 2]);
      await admin.deleteTopics({ topics: ['ck.admin'] });
      assert.ok(!(await admin.listTopics()).includes('ck.admin'));
    } finally {
      await admin.disconnect();
    }
  });

  it('describes and alters topic configs (DescribeConfigs, IncrementalAlterConfigs, AlterConfigs)', async () => {
    const topic = 'ck.app-KSTREAM-REPARTITION-0000000003-repartition';
    const value = (d: Awaited<ReturnType<typeof configs>>, name: string) => d.resources[0].configs.find((c) => c.name === name);
    let d = await configs(broker.kafka, ['describe', topic]);
    assert.equal(d.resources[0].error, null);
    const seg = value(d, 'segment.bytes');
    assert.deepEqual([seg?.value, seg?.source, seg?.readOnly, seg?.isDefault], ['52428800', 'DYNAMIC_TOPIC_CONFIG', false, false]);
    assert.deepEqual(seg?.synonyms[0], {
      name: 'segment.bytes',
      value: '52428800',
      source: 'DYNAMIC_TOPIC_CONFIG',
      readOnly: false,
      isDefault: false,
      isSensitive: false,
    });
    assert.equal(value(d, 'retention.bytes')?.source, 'DEFAULT_CONFIG');
    const inc = await configs(broker.kafka, ['incremental', topic, 'set:retention.bytes=10485760', 'set:max.message.bytes=2097152', 'delete:segment.bytes']);
    assert.equal(inc.resources[0].error, null, inc.resources[0].message ?? '');
    d = await configs(broker.kafka, ['describe', topic]);
    assert.deepEqual([value(d, 'retention.bytes')?.value, value(d, 'retention.bytes')?.source], ['10485760', 'DYNAMIC_TOPIC_CONFIG']);
    assert.deepEqual([value(d, 'max.message.bytes')?.value, value(d, 'max.message.bytes')?.source], ['2097152', 'DYNAMIC_TOPIC_CONFIG']);
    // Deleted: back to the broker's log.segment.bytes, FlowMQ's --segment-bytes.
    assert.equal(value(d, 'segment.bytes')?.source, 'STATIC_BROKER_CONFIG');
    // Unknown names and invalid values are refused, with the resource's error; nothing of it is applied.
    const bad = await configs(broker.kafka, ['incremental', topic, 'set:retention.bytes=1', 'set:no.such.config=1']);
    assert.equal(bad.resources[0].error, 'INVALID_CONFIG');
    assert.match(bad.resources[0].message ?? '', /no\.such\.config/);
    const badValue = await configs(broker.kafka, ['incremental', topic, 'set:segment.bytes=many']);
    assert.equal(badValue.resources[0].error, 'INVALID_CONFIG');
    d = await configs(broker.kafka, ['describe', topic]);
    assert.equal(value(d, 'retention.bytes')?.value, '10485760');
    // AlterConfigs replaces the topic's whole dynamic config.
    const alt = await configs(broker.kafka, ['alter', topic, 'segment.ms=3600000']);
    assert.equal(alt.resources[0].error, null, alt.resources[0].message ?? '');
    d = await configs(broker.kafka, ['describe', topic]);
    assert.deepEqual([value(d, 'segment.ms')?.value, value(d, 'segment.ms')?.source], ['3600000', 'DYNAMIC_TOPIC_CONFIG']);
    assert.equal(value(d, 'retention.bytes')?.source, 'DEFAULT_CONFIG');
  });

  it('speaks TLS (security.protocol=SSL): produces and consumes on the TLS listener', async () => {
    const ssl = { 'security.protocol': 'SSL', 'ssl.ca.location': tls.certPath };
    const bootstrap = `127.0.0.1:${broker.ports['kafka-tls']}`;
    const kafka = client(bootstrap, ssl);
    const p = kafka.producer({ 'enable.idempotence': true, 'compression.codec': 'zstd' });
    await p.connect();
    await p.send({ topic: 'ck.tls', messages: [{ key: 'a', value: 'over TLS' }] });
    await p.disconnect();
    const got = await consume(kafka, 'ck-tls', 'ck.tls', 1);
    assert.equal(got[0].value?.toString(), 'over TLS');
  });
});

describe('kafka with a current librdkafka: SASL SCRAM over plaintext and TLS', () => {
  let ck: Ckjs;
  let broker: FlowmqProcess;
  let tls: TestCert;

  before(async () => {
    ck = loadClient();
    tls = makeTestCert('flowmq-ckjs-sasl-');
    writeFileSync(join(tls.dir, 'users.yaml'), '- username: alice\n  password: "wonder:land"\n');
    broker = await FlowmqProcess.start({
      args: [
        '--users-file',
        join(tls.dir, 'users.yaml'),
        '--kafka-group-initial-rebalance-delay',
        '0',
        '--kafka-tls-port',
        '0',
        '--kafka-tls-cert',
        tls.certPath,
        '--kafka-tls-key',
        tls.keyPath,
      ],
    });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    if (tls) rmSync(tls.dir, { recursive: true, force: true });
  });

  const sasl = (mechanism: string, password: string, tlsOn: boolean): Rd => ({
    'security.protocol': tlsOn ? 'SASL_SSL' : 'SASL_PLAINTEXT',
    'sasl.mechanisms': mechanism,
    'sasl.username': 'alice',
    'sasl.password': password,
    ...(tlsOn ? { 'ssl.ca.location': tls.certPath } : {}),
  });

  for (const mechanism of ['SCRAM-SHA-256', 'SCRAM-SHA-512']) {
    for (const tlsOn of [false, true]) {
      it(`${mechanism} over ${tlsOn ? 'TLS (SASL_SSL)' : 'plaintext (SASL_PLAINTEXT)'}: produces and consumes`, async () => {
        const bootstrap = `127.0.0.1:${tlsOn ? broker.ports['kafka-tls'] : broker.ports.kafka}`;
        const kafka = new ck.KafkaJS.Kafka({ 'bootstrap.servers': bootstrap, ...sasl(mechanism, 'wonder:land', tlsOn), kafkaJS: { logger: logSink([]) } });
        const topic = `ck.sasl.${mechanism.toLowerCase()}.${tlsOn ? 'tls' : 'plain'}`;
        const p = kafka.producer({ 'enable.idempotence': true });
        await p.connect();
        await p.send({ topic, messages: [{ value: mechanism }] });
        await p.disconnect();
        const got = await consume(kafka, `ck-sasl-${mechanism}-${tlsOn}`, topic, 1);
        assert.equal(got[0].value?.toString(), mechanism);
        assert.ok(broker.logs.some((l) => l.msg === 'SASL authentication succeeded' && l.principal === 'alice' && l.mechanism === mechanism));
      });
    }
  }

  it('is refused with a wrong password', async () => {
    const lines: string[] = [];
    const kafka = new ck.KafkaJS.Kafka({ 'bootstrap.servers': broker.kafka, ...sasl('SCRAM-SHA-512', 'wrong', false), kafkaJS: { logger: logSink(lines) } });
    const admin = kafka.admin();
    await assert.rejects(admin.connect().then(() => admin.listTopics()));
    await admin.disconnect().catch(() => undefined);
    await broker.waitForLog((l) => /SASL authentication failed/i.test(l.msg));
  });
});
