/**
 * Kafka transactions with a current librdkafka (2.15, @confluentinc/kafka-javascript from
 * test/interop/confluent-kafka-javascript; .ci/run installs it, see kafka-librdkafka-current.test.ts) against a real
 * `flowmq start`: a consume-transform-produce transaction with sendOffsets (the group's offset moves at the commit),
 * an aborted transaction a read_committed consumer never sees (proved by a committed marker after it), and zombie
 * fencing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { FlowmqProcess, ROOT } from './harness.js';

const INTEROP = join(ROOT, 'test/interop/confluent-kafka-javascript');

type Rd = Record<string, string | number | boolean | object>;
interface Message {
  value: Buffer | null;
}
interface Producer {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  send(r: { topic: string; messages: Array<{ value: string; partition?: number }> }): Promise<unknown>;
  transaction(): Promise<Producer>;
  commit(): Promise<void>;
  abort(): Promise<void>;
  sendOffsets(a: { consumer: Consumer; topics: Array<{ topic: string; partitions: Array<{ partition: number; offset: string }> }> }): Promise<void>;
}
interface Consumer {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  subscribe(s: { topics: string[] }): Promise<void>;
  run(r: { eachMessage: (p: { message: Message }) => Promise<void> }): Promise<void>;
}
interface Admin {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  fetchOffsets(o: { groupId: string; topics: string[] }): Promise<Array<{ topic: string; partitions: Array<{ partition: number; offset: string }> }>>;
}
interface Kafka {
  producer(c?: Rd): Producer;
  consumer(c: Rd): Consumer;
  admin(c?: Rd): Admin;
}
interface Ckjs {
  librdkafkaVersion: string;
  KafkaJS: { Kafka: new (c: Rd) => Kafka };
}

function loadClient(): Ckjs {
  const require = createRequire(join(INTEROP, 'package.json'));
  try {
    return require('@confluentinc/kafka-javascript') as Ckjs;
  } catch (err) {
    throw new Error(`@confluentinc/kafka-javascript is not installed in ${INTEROP}: run test/interop/confluent-kafka-javascript/install.sh`, { cause: err });
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

/** Starts a consumer of `topic` in `group`; `values` grows as records arrive. */
async function reader(kafka: Kafka, group: string, topic: string, isolation: string): Promise<{ c: Consumer; values: string[] }> {
  const c = kafka.consumer({ 'group.id': group, 'auto.offset.reset': 'earliest', 'enable.auto.commit': false, 'isolation.level': isolation });
  const values: string[] = [];
  await c.connect();
  await c.subscribe({ topics: [topic] });
  void c.run({ eachMessage: async ({ message }) => void values.push(message.value?.toString() ?? '') });
  return { c, values };
}

async function until(values: string[], last: string): Promise<string[]> {
  const deadline = Date.now() + 30_000;
  while (!values.includes(last)) {
    if (Date.now() > deadline) throw new Error(`no ${last} in ${JSON.stringify(values)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return values;
}

describe('kafka transactions with a current librdkafka (@confluentinc/kafka-javascript)', () => {
  let broker: FlowmqProcess;
  let kafka: Kafka;
  before(async () => {
    const ckjs = loadClient();
    assert.match(ckjs.librdkafkaVersion, /^2\./);
    broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0'] });
    kafka = new ckjs.KafkaJS.Kafka({ 'bootstrap.servers': broker.kafka, 'client.id': 'txn-current', kafkaJS: { logger: quiet } });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('consume-transform-produce with sendOffsets, an abort, and read_committed', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'cur.in', partitions: 1 });
    await broker.api('POST', '/api/v1/streams', { name: 'cur.out', partitions: 1 });
    const plain = kafka.producer();
    await plain.connect();
    await plain.send({ topic: 'cur.in', messages: [0, 1, 2].map((i) => ({ value: `in-${i}`, partition: 0 })) });
    await plain.disconnect();

    const input = await reader(kafka, 'cur-ctp', 'cur.in', 'read_committed');
    await until(input.values, 'in-2');
    const producer = kafka.producer({ 'transactional.id': 'cur-ctp' });
    await producer.connect();
    const t1 = await producer.transaction();
    await t1.send({ topic: 'cur.out', messages: input.values.map((v) => ({ value: v.toUpperCase(), partition: 0 })) });
    await t1.sendOffsets({ consumer: input.c, topics: [{ topic: 'cur.in', partitions: [{ partition: 0, offset: '3' }] }] });
    const admin = kafka.admin();
    await admin.connect();
    // No offset yet: an empty answer, or -1.
    const offset = async (): Promise<string> => (await admin.fetchOffsets({ groupId: 'cur-ctp', topics: ['cur.in'] }))[0]?.partitions[0]?.offset ?? '-1';
    assert.equal(await offset(), '-1', 'not committed before the transaction');
    await t1.commit();
    assert.equal(await offset(), '3', 'committed with the transaction');
    await input.c.disconnect();
    await admin.disconnect();

    const t2 = await producer.transaction();
    await t2.send({ topic: 'cur.out', messages: [{ value: 'aborted-1', partition: 0 }] });
    await t2.abort();
    const t3 = await producer.transaction();
    await t3.send({ topic: 'cur.out', messages: [{ value: 'marker', partition: 0 }] });
    await t3.commit();
    await producer.disconnect();

    const rc = await reader(kafka, 'cur-rc', 'cur.out', 'read_committed');
    assert.deepEqual(await until(rc.values, 'marker'), ['IN-0', 'IN-1', 'IN-2', 'marker']);
    await rc.c.disconnect();
    const ru = await reader(kafka, 'cur-ru', 'cur.out', 'read_uncommitted');
    assert.deepEqual(await until(ru.values, 'marker'), ['IN-0', 'IN-1', 'IN-2', 'aborted-1', 'marker']);
    await ru.c.disconnect();
  });

  it('fences the first of two producers with one transactional.id', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'cur.fence', partitions: 1 });
    const zombie = kafka.producer({ 'transactional.id': 'cur-fence' });
    await zombie.connect();
    const zt = await zombie.transaction();
    await zt.send({ topic: 'cur.fence', messages: [{ value: 'zombie-1', partition: 0 }] });
    const fresh = kafka.producer({ 'transactional.id': 'cur-fence' });
    await fresh.connect();
    await assert.rejects(
      (async () => {
        await zt.send({ topic: 'cur.fence', messages: [{ value: 'zombie-2', partition: 0 }] });
        await zt.commit();
      })(),
      (err: Error) => /fenced|epoch/i.test(err.message),
    );
    const ft = await fresh.transaction();
    await ft.send({ topic: 'cur.fence', messages: [{ value: 'marker', partition: 0 }] });
    await ft.commit();
    await fresh.disconnect();
    await zombie.disconnect().catch(() => undefined);
    const rc = await reader(kafka, 'cur-fence-rc', 'cur.fence', 'read_committed');
    assert.deepEqual(await until(rc.values, 'marker'), ['marker'], "the zombie's records were aborted");
    await rc.c.disconnect();
  });
});
