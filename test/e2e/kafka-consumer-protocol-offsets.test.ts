/**
 * OffsetDelete for a group of the consumer group protocol (KIP-848), with librdkafka 2.15 on both sides against a
 * real `flowmq start`: members consume with group.protocol=consumer (through @confluentinc/kafka-javascript, one by
 * topic name, one by regex), and librdkafka's DeleteConsumerGroupOffsets (rdkafka-admin, the C program over the same
 * librdkafka, test/interop/confluent-kafka-javascript/rdkafka-admin.c) deletes the group's offsets as Kafka's group
 * coordinator does: GROUP_SUBSCRIBED_TO_TOPIC for a topic a member subscribes to, by name or by regex; deleted for
 * any other topic; once every member has left (the group Empty), deleted for every topic.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FlowmqProcess, ROOT, run } from './harness.js';

const INTEROP = join(ROOT, 'test/interop/confluent-kafka-javascript');
const DEPS = join(INTEROP, 'node_modules/@confluentinc/kafka-javascript/build/deps');
const HOW_TO_INSTALL = 'apt-get install libssl-dev zlib1g-dev libzstd-dev liblz4-dev && test/interop/confluent-kafka-javascript/install.sh';

type Rd = Record<string, string | number | boolean | object>;
interface Consumer {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  subscribe(s: { topics: Array<string | RegExp> }): Promise<void>;
  run(r: { eachMessage: (p: { topic: string; partition: number; message: { offset: string } }) => Promise<void> }): Promise<void>;
  commitOffsets(o: Array<{ topic: string; partition: number; offset: string }>): Promise<void>;
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
    describeGroups(ids: string[]): Promise<{ groups: Array<{ groupId: string; members: unknown[]; state: number }> }>;
  };
}
interface Ckjs {
  KafkaJS: { Kafka: new (c: Rd) => Kafka; ConsumerGroupStates: Record<string, number> };
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

async function until(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface DeleteAnswer {
  groups: Array<{ group: string; error: string | null; partitions: Array<{ topic: string; partition: number; error: string | null }> }>;
}
interface OffsetsAnswer {
  groups: Array<{ partitions: Array<{ topic: string; partition: number; offset: number }> }>;
}

// Not installed is a failure, never a skip (CI installs the package).
it("has the interop package installed, with librdkafka's headers and library", () => {
  loadClient();
  assert.ok(existsSync(join(DEPS, 'include/librdkafka/rdkafka.h')), `${DEPS} is missing: ${HOW_TO_INSTALL}`);
});

describe('kafka OffsetDelete of a consumer-protocol group (KIP-848) with librdkafka 2.15', () => {
  let ck: Ckjs;
  let kafka: Kafka;
  let broker: FlowmqProcess;
  let dir: string;
  let bin: string;
  const GROUP = 'ko.group';
  const consumers: Consumer[] = [];

  async function admin<T>(...args: string[]): Promise<T> {
    const r = await run(bin, [broker.kafka, ...args], { timeoutMs: 30_000 });
    assert.equal(r.code, 0, `rdkafka-admin ${args.join(' ')}: ${r.stdout}${r.stderr}`);
    return JSON.parse(r.stdout) as T;
  }
  const committed = async (): Promise<string[]> =>
    (await admin<OffsetsAnswer>('group-offsets', GROUP)).groups[0].partitions
      .filter((p) => p.offset >= 0)
      .map((p) => `${p.topic}:${p.partition}@${p.offset}`)
      .sort();

  /** A member of GROUP (group.protocol=consumer) that commits each record it reads; resolves once it has read `want`. */
  async function member(topics: Array<string | RegExp>, want: number): Promise<Consumer> {
    const c = kafka.consumer({ 'group.id': GROUP, 'group.protocol': 'consumer', 'auto.offset.reset': 'earliest', 'enable.auto.commit': false });
    consumers.push(c);
    await c.connect();
    await c.subscribe({ topics });
    let read = 0;
    await new Promise<void>((resolve) => {
      void c.run({
        eachMessage: async ({ topic, partition, message }) => {
          await c.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }]);
          if (++read === want) resolve();
        },
      });
    });
    return c;
  }

  before(async () => {
    ck = loadClient();
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ko-'));
    bin = join(dir, 'rdkafka-admin');
    const cc = await run(
      'cc',
      ['-O2', '-Wall', `-I${join(DEPS, 'include')}`, '-o', bin, join(INTEROP, 'rdkafka-admin.c'), `-L${DEPS}`, '-lrdkafka', `-Wl,-rpath,${DEPS}`],
      { timeoutMs: 120_000 },
    );
    assert.equal(cc.code, 0, `cc rdkafka-admin.c: ${cc.stderr}`);
    broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0', '--kafka-consumer-group-heartbeat-interval', '500ms'] });
    kafka = new ck.KafkaJS.Kafka({ 'bootstrap.servers': broker.kafka, kafkaJS: { logger: quiet } });
    const a = kafka.admin();
    await a.connect();
    try {
      assert.equal(
        await a.createTopics({
          topics: [
            { topic: 'ko.a', numPartitions: 1 },
            { topic: 'ko.b', numPartitions: 1 },
            { topic: 'ko.rx.1', numPartitions: 1 },
          ],
        }),
        true,
      );
    } finally {
      await a.disconnect();
    }
    const p = kafka.producer();
    await p.connect();
    try {
      for (const topic of ['ko.a', 'ko.b', 'ko.rx.1']) await p.send({ topic, messages: [{ value: `${topic}-0` }, { value: `${topic}-1` }] });
    } finally {
      await p.disconnect();
    }
  });
  after(async () => {
    for (const c of consumers) await c.disconnect().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a topic a member subscribes to by name or regex (GROUP_SUBSCRIBED_TO_TOPIC), deletes the others; all once the group is empty', async () => {
    // Offsets of ko.b from an earlier member that has left; then one member by name, one by regex.
    const earlier = await member(['ko.b'], 2);
    await earlier.disconnect();
    await member(['ko.a'], 2);
    await member([/^ko\.rx\..*/], 2);
    assert.deepEqual(await committed(), ['ko.a:0@2', 'ko.b:0@2', 'ko.rx.1:0@2']);
    const members = async () => (await describe()).members.length;
    const describe = async () => {
      const a = kafka.admin();
      await a.connect();
      try {
        return (await a.describeGroups([GROUP])).groups[0];
      } finally {
        await a.disconnect();
      }
    };
    assert.equal(await members(), 2);

    const del = await admin<DeleteAnswer>('delete-group-offsets', GROUP, 'ko.a:0', 'ko.rx.1:0', 'ko.b:0');
    const byPartition = (d: DeleteAnswer) => d.groups[0].partitions.map((x) => `${x.topic}:${x.partition}=${x.error ?? 'ok'}`).sort();
    assert.deepEqual(byPartition(del), ['ko.a:0=GROUP_SUBSCRIBED_TO_TOPIC', 'ko.b:0=ok', 'ko.rx.1:0=GROUP_SUBSCRIBED_TO_TOPIC'], JSON.stringify(del));
    assert.deepEqual(await committed(), ['ko.a:0@2', 'ko.rx.1:0@2']);

    // Every member leaves: the group is Empty, and its remaining offsets may go.
    for (const c of consumers.splice(0)) await c.disconnect();
    await until('the group empty', async () => (await members()) === 0);
    assert.equal((await describe()).state, ck.KafkaJS.ConsumerGroupStates.EMPTY);
    const after = await admin<DeleteAnswer>('delete-group-offsets', GROUP, 'ko.a:0', 'ko.rx.1:0');
    assert.equal(after.groups[0].error, null, JSON.stringify(after));
    assert.deepEqual(byPartition(after), ['ko.a:0=ok', 'ko.rx.1:0=ok']);
    assert.deepEqual(await committed(), []);
  });
});
