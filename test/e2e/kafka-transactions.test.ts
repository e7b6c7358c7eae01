/**
 * Kafka transactions (KIP-98) with KafkaJS 2.2.4 against a real `flowmq start`: commit and abort, a read_committed
 * consumer that never sees aborted or open records (proved with a committed marker record sent after them), the last
 * stable offset in ListOffsets, DescribeTransactions and ListTransactions, offsets sent with the transaction (visible
 * only at commit), zombie fencing, the transaction timeout, and a broker killed (kill -9) with a transaction open,
 * which its restart aborts.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import amqp from 'amqplib';
import type { Consumer, Kafka as KafkaT } from 'kafkajs';
import { DescribeTransactionsApi, KafkaErrorCode as E, ListTransactionsApi } from '../../src/protocols/kafka/codec/index.js';
import { RawClient } from '../protocols/kafka/helpers.js';
import { FlowmqProcess, eventually } from './harness.js';
import { mqttCollector } from './mqtt-helpers.js';
import { connectNats, natsCollector } from './cross-nats-helpers.js';
import { AckPolicy, type JsMsg } from 'nats';
import { storageConfigs } from './storage-configs.js';

const { Kafka, logLevel } = kafkajsPkg;

function client(broker: FlowmqProcess, id: string): KafkaT {
  return new Kafka({ clientId: id, brokers: [broker.kafka], logLevel: logLevel.NOTHING, retry: { retries: 2, initialRetryTime: 100 } });
}

/** Reads `topic` from the beginning with the isolation level given until `until` returns true; the values seen. */
async function readAll(kafka: KafkaT, topic: string, readUncommitted: boolean, until: (values: string[]) => boolean): Promise<string[]> {
  const consumer: Consumer = kafka.consumer({ groupId: `reader-${topic}-${readUncommitted}-${Math.random()}`, readUncommitted, maxWaitTimeInMs: 200 });
  const values: string[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        values.push(message.value?.toString() ?? '');
      },
    });
    await eventually(() => until(values), 20_000, `${topic}: ${JSON.stringify(values)}`);
  } finally {
    await consumer.disconnect();
  }
  return values;
}

describe('kafka transactions with KafkaJS', () => {
  let broker: FlowmqProcess;
  before(async () => {
    broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0'] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('commits and aborts: read_committed never sees aborted records, read_uncommitted sees all', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'tx.a', partitions: 2 });
    const kafka = client(broker, 'tx-a');
    const producer = kafka.producer({ transactionalId: 'tx-a', maxInFlightRequests: 1, idempotent: true });
    await producer.connect();
    const t1 = await producer.transaction();
    await t1.send({ topic: 'tx.a', messages: [0, 1, 2, 3].map((i) => ({ value: `committed-${i}`, partition: i % 2 })) });
    await t1.commit();
    const t2 = await producer.transaction();
    await t2.send({ topic: 'tx.a', messages: [0, 1, 2, 3].map((i) => ({ value: `aborted-${i}`, partition: i % 2 })) });
    await t2.abort();
    // The marker: committed after the aborted records, in both partitions.
    const t3 = await producer.transaction();
    await t3.send({ topic: 'tx.a', messages: [0, 1].map((p) => ({ value: `marker-${p}`, partition: p })) });
    await t3.commit();
    await producer.disconnect();

    const committed = await readAll(kafka, 'tx.a', false, (v) => v.includes('marker-0') && v.includes('marker-1'));
    assert.deepEqual(
      [...committed].sort(),
      ['committed-0', 'committed-1', 'committed-2', 'committed-3', 'marker-0', 'marker-1'],
      'read_committed: the committed records and the marker, no aborted one',
    );
    const all = await readAll(kafka, 'tx.a', true, (v) => v.includes('marker-0') && v.includes('marker-1'));
    assert.equal(all.filter((v) => v.startsWith('aborted-')).length, 4, 'read_uncommitted sees the aborted records too');
    assert.equal(all.length, 10);
  });

  it('holds read_committed consumers at the last stable offset while a transaction is open', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'tx.open', partitions: 1 });
    const kafka = client(broker, 'tx-open');
    const producer = kafka.producer({ transactionalId: 'tx-open', maxInFlightRequests: 1, idempotent: true });
    const plain = kafka.producer();
    await producer.connect();
    await plain.connect();
    await plain.send({ topic: 'tx.open', messages: [{ value: 'before' }] });
    const t = await producer.transaction();
    await t.send({ topic: 'tx.open', messages: [{ value: 'open-1' }] });
    // Written after the open transaction's record by a non-transactional producer: readable only once the
    // transaction ends (it is past the last stable offset).
    await plain.send({ topic: 'tx.open', messages: [{ value: 'after' }] });
    const admin = kafka.admin();
    await admin.connect();
    // KafkaJS's admin lists offsets read_committed: the latest offset is the last stable offset, the open
    // transaction's first record.
    const committedEnd = await admin.fetchTopicOffsets('tx.open');
    await admin.disconnect();
    assert.equal(committedEnd[0].high, '1', 'read_committed latest offset: the last stable offset');
    const seen = await readAll(kafka, 'tx.open', true, (v) => v.includes('after'));
    assert.deepEqual(seen, ['before', 'open-1', 'after']);
    // read_committed: only 'before' until the commit; the commit releases both.
    const consumer = kafka.consumer({ groupId: 'tx-open-reader', readUncommitted: false, maxWaitTimeInMs: 100 });
    const values: string[] = [];
    await consumer.connect();
    await consumer.subscribe({ topic: 'tx.open', fromBeginning: true });
    await consumer.run({ eachMessage: async ({ message }) => void values.push(message.value?.toString() ?? '') });
    await eventually(() => values.length >= 1, 10_000, 'first record');
    // Several fetches at the LSO return nothing more.
    const raw = await RawClient.connect(broker.ports.kafka);
    const d = await raw.call(DescribeTransactionsApi, 0, { transactionalIds: ['tx-open', 'nope'] });
    assert.equal(d.transactionStates[0].transactionState, 'Ongoing');
    assert.deepEqual(d.transactionStates[0].topics, [{ topic: 'tx.open', partitions: [0] }]);
    assert.equal(d.transactionStates[1].errorCode, E.TRANSACTIONAL_ID_NOT_FOUND);
    const l = await raw.call(ListTransactionsApi, 1, { stateFilters: ['Ongoing', 'Bogus'], producerIdFilters: [], durationFilter: -1 });
    assert.deepEqual(
      l.transactionStates.map((s) => s.transactionalId),
      ['tx-open'],
    );
    assert.deepEqual(l.unknownStateFilters, ['Bogus']);
    raw.close();
    assert.deepEqual(values, ['before'], 'nothing past the open transaction');
    await t.commit();
    await eventually(() => values.length === 3, 10_000, `after commit: ${JSON.stringify(values)}`);
    assert.deepEqual(values, ['before', 'open-1', 'after']);
    await consumer.disconnect();
    await producer.disconnect();
    await plain.disconnect();
  });

  it('sendOffsets: the group offsets are committed with the transaction, not before, and not at an abort', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'tx.in', partitions: 1 });
    await broker.api('POST', '/api/v1/streams', { name: 'tx.out', partitions: 1 });
    const kafka = client(broker, 'tx-ctp');
    const admin = kafka.admin();
    await admin.connect();
    const producer = kafka.producer({ transactionalId: 'tx-ctp', maxInFlightRequests: 1, idempotent: true });
    await producer.connect();
    const offsetOf = async (): Promise<string> => (await admin.fetchOffsets({ groupId: 'ctp', topics: ['tx.in'] }))[0].partitions[0].offset;

    const t1 = await producer.transaction();
    await t1.send({ topic: 'tx.out', messages: [{ value: 'out-1' }] });
    await t1.sendOffsets({ consumerGroupId: 'ctp', topics: [{ topic: 'tx.in', partitions: [{ partition: 0, offset: '5' }] }] });
    assert.equal(await offsetOf(), '-1', 'not visible before the commit');
    await t1.commit();
    assert.equal(await offsetOf(), '5', 'visible at the commit');

    const t2 = await producer.transaction();
    await t2.send({ topic: 'tx.out', messages: [{ value: 'out-2' }] });
    await t2.sendOffsets({ consumerGroupId: 'ctp', topics: [{ topic: 'tx.in', partitions: [{ partition: 0, offset: '9' }] }] });
    await t2.abort();
    assert.equal(await offsetOf(), '5', 'an aborted transaction commits no offset');
    await producer.disconnect();
    await admin.disconnect();
  });

  it('fences a zombie: a second producer with the same transactional id aborts its transaction and fences it', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'tx.z', partitions: 1 });
    const kafka = client(broker, 'tx-z');
    const zombie = kafka.producer({ transactionalId: 'tx-z', maxInFlightRequests: 1, idempotent: true });
    await zombie.connect();
    const zt = await zombie.transaction();
    await zt.send({ topic: 'tx.z', messages: [{ value: 'zombie-1' }] });

    const fresh = kafka.producer({ transactionalId: 'tx-z', maxInFlightRequests: 1, idempotent: true });
    await fresh.connect();
    // KafkaJS initializes a transactional producer (InitProducerId) when its first transaction begins.
    const ft = await fresh.transaction();
    // The zombie's next produce and its commit are refused with a fencing error.
    await assert.rejects(
      zt.send({ topic: 'tx.z', messages: [{ value: 'zombie-2' }] }),
      (err: Error & { type?: string }) => /INVALID_PRODUCER_EPOCH|PRODUCER_FENCED/.test(String(err.type)) || /epoch|fenced/i.test(err.message),
    );
    await assert.rejects(
      zt.commit(),
      (err: Error & { type?: string }) => /INVALID_PRODUCER_EPOCH|PRODUCER_FENCED/.test(String(err.type)) || /epoch|fenced/i.test(err.message),
    );
    await ft.send({ topic: 'tx.z', messages: [{ value: 'fresh-marker' }] });
    await ft.commit();
    const seen = await readAll(kafka, 'tx.z', false, (v) => v.includes('fresh-marker'));
    assert.deepEqual(seen, ['fresh-marker'], "the zombie's records were aborted");
    await zombie.disconnect().catch(() => undefined);
    await fresh.disconnect();
  });

  it('aborts a transaction open longer than its timeout, and fences its producer', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'tx.t', partitions: 1 });
    const kafka = client(broker, 'tx-t');
    const producer = kafka.producer({ transactionalId: 'tx-t', transactionTimeout: 1000, maxInFlightRequests: 1, idempotent: true });
    await producer.connect();
    const t = await producer.transaction();
    await t.send({ topic: 'tx.t', messages: [{ value: 'expired' }] });
    const raw = await RawClient.connect(broker.ports.kafka);
    await eventually(
      async () => (await raw.call(DescribeTransactionsApi, 0, { transactionalIds: ['tx-t'] })).transactionStates[0].transactionState === 'CompleteAbort',
      10_000,
      'the transaction is aborted',
    );
    raw.close();
    await assert.rejects(t.commit());
    await producer.disconnect().catch(() => undefined);
    const p2 = kafka.producer({ transactionalId: 'tx-t2', maxInFlightRequests: 1, idempotent: true });
    await p2.connect();
    const t2 = await p2.transaction();
    await t2.send({ topic: 'tx.t', messages: [{ value: 'marker' }] });
    await t2.commit();
    await p2.disconnect();
    assert.deepEqual(await readAll(kafka, 'tx.t', false, (v) => v.includes('marker')), ['marker']);
  });

  it("MQTT and NATS subscribers get a transaction's records at its commit, never those of an aborted one", async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'tx.mqtt', partitions: 1 });
    const sub = await mqttCollector(broker.mqttUrl, ['tx/mqtt']);
    await eventually(() => broker.ports.nats !== undefined, 10_000, 'the NATS listener');
    const nc = await connectNats(broker);
    const ns = natsCollector(nc, 'tx.mqtt');
    await nc.flush();
    const kafka = client(broker, 'tx-mqtt');
    const producer = kafka.producer({ transactionalId: 'tx-mqtt', maxInFlightRequests: 1, idempotent: true });
    const plain = kafka.producer();
    await producer.connect();
    await plain.connect();
    const t = await producer.transaction();
    await t.send({ topic: 'tx.mqtt', messages: [{ value: 'in-txn-1' }, { value: 'in-txn-2' }] });
    // Stored, and not delivered: a plain record sent after it arrives alone.
    await plain.send({ topic: 'tx.mqtt', messages: [{ value: 'plain-1' }] });
    assert.deepEqual(
      (await sub.until('plain-1')).map((p) => p.payload.toString()),
      [],
      'nothing of the open transaction before the plain record',
    );
    assert.deepEqual(
      (await ns.until('plain-1')).map((m) => m.data),
      [],
      'NATS: nothing of the open transaction before the plain record',
    );
    await t.commit();
    await eventually(() => sub.got.length >= 2, 10_000, 'the committed records');
    assert.deepEqual(
      sub.got.splice(0).map((p) => p.payload.toString()),
      ['in-txn-1', 'in-txn-2'],
      'delivered at the commit',
    );
    await eventually(() => ns.got.length >= 2, 10_000, 'the committed records over NATS');
    assert.deepEqual(
      ns.got.splice(0).map((m) => m.data),
      ['in-txn-1', 'in-txn-2'],
    );
    const t2 = await producer.transaction();
    await t2.send({ topic: 'tx.mqtt', messages: [{ value: 'aborted-1' }] });
    await t2.abort();
    await plain.send({ topic: 'tx.mqtt', messages: [{ value: 'plain-2' }] });
    assert.deepEqual(
      (await sub.until('plain-2')).map((p) => p.payload.toString()),
      [],
      'an aborted record is never delivered',
    );
    assert.deepEqual(
      (await ns.until('plain-2')).map((m) => m.data),
      [],
      'NATS: an aborted record is never delivered',
    );
    await nc.close();
    await sub.c.endAsync();
    await producer.disconnect();
    await plain.disconnect();
  });

  it('AMQP stream queues read a stream with transactions as read_committed: held at an open one, no aborted record, no marker', async () => {
    await eventually(() => broker.ports.amqp !== undefined, 10_000, 'the AMQP listener');
    const conn = await amqp.connect(`amqp://guest:guest@127.0.0.1:${broker.ports.amqp}?heartbeat=0`);
    const ch = await conn.createChannel();
    await ch.assertQueue('tx.amqp', { durable: true, arguments: { 'x-queue-type': 'stream' } });
    const kafka = client(broker, 'tx-amqp');
    const producer = kafka.producer({ transactionalId: 'tx-amqp', maxInFlightRequests: 1, idempotent: true });
    await producer.connect();
    for (const [value, commit] of [
      ['c1', true],
      ['a1', false],
    ] as const) {
      const t = await producer.transaction();
      await t.send({ topic: 'tx.amqp', messages: [{ value }] });
      await (commit ? t.commit() : t.abort());
    }
    // An open transaction holds the reader: the plain record after it is not delivered before its commit.
    const open = await producer.transaction();
    await open.send({ topic: 'tx.amqp', messages: [{ value: 'c2' }] });
    const plain = kafka.producer();
    await plain.connect();
    await plain.send({ topic: 'tx.amqp', messages: [{ value: 'plain' }] });
    await ch.prefetch(10);
    const got: Array<[string, unknown]> = [];
    await ch.consume(
      'tx.amqp',
      (m) => {
        if (m === null) return;
        got.push([m.content.toString(), m.properties.headers?.['x-stream-offset']]);
        ch.ack(m);
      },
      { arguments: { 'x-stream-offset': 'first' } },
    );
    await eventually(() => got.length >= 1, 10_000, 'c1 over AMQP');
    // The marker record: a plain one on a second stream queue that nothing holds proves the reader had its chance.
    await ch.assertQueue('tx.amqp.free', { durable: true, arguments: { 'x-queue-type': 'stream' } });
    await plain.send({ topic: 'tx.amqp.free', messages: [{ value: 'free' }] });
    const free: string[] = [];
    await ch.consume(
      'tx.amqp.free',
      (m) => {
        if (m === null) return;
        free.push(m.content.toString());
        ch.ack(m);
      },
      { arguments: { 'x-stream-offset': 'first' } },
    );
    await eventually(() => free.length === 1, 10_000, 'the free stream queue');
    assert.deepEqual(got, [['c1', 0]], 'held at the open transaction');
    await open.commit();
    await eventually(() => got.some((g) => g[0] === 'plain'), 10_000, `plain over AMQP: ${JSON.stringify(got)}`);
    // Offsets 1 and 3 are the markers (no message), 2 the aborted record.
    assert.deepEqual(got, [
      ['c1', 0],
      ['c2', 4],
      ['plain', 5],
    ]);
    await producer.disconnect();
    await plain.disconnect();
    await conn.close();
  });

  it('JetStream consumers read a stream with transactions as read_committed: held at an open one, no aborted record', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'tx-js', partitions: 1 });
    await eventually(() => broker.ports.nats !== undefined, 10_000, 'the NATS listener');
    const kafka = client(broker, 'tx-js');
    const producer = kafka.producer({ transactionalId: 'tx-js', maxInFlightRequests: 1, idempotent: true });
    const plain = kafka.producer();
    await producer.connect();
    await plain.connect();
    for (const [value, commit] of [
      ['c1', true],
      ['a1', false],
    ] as const) {
      const t = await producer.transaction();
      await t.send({ topic: 'tx-js', messages: [{ value }] });
      await (commit ? t.commit() : t.abort());
    }
    const open = await producer.transaction();
    await open.send({ topic: 'tx-js', messages: [{ value: 'c2' }] });
    await plain.send({ topic: 'tx-js', messages: [{ value: 'plain' }] });
    const nc = await connectNats(broker);
    const jsm = await nc.jetstreamManager();
    await jsm.consumers.add('tx-js', { durable_name: 'reader', ack_policy: AckPolicy.Explicit });
    const c = await nc.jetstream().consumers.get('tx-js', 'reader');
    const fetchAll = async (max: number, expires: number): Promise<Array<[number, string]>> => {
      const out: Array<[number, string]> = [];
      for await (const m of await c.fetch({ max_messages: max, expires })) {
        out.push([(m as JsMsg).seq, (m as JsMsg).string()]);
        m.ack();
      }
      return out;
    };
    // The fetch ends at its expiry with what could be delivered: after c1 the log holds its marker, a1, a1's marker,
    // c2 and plain, none deliverable while c2's transaction is open.
    assert.deepEqual(await fetchAll(5, 1500), [[1, 'c1']]);
    await open.commit();
    // Sequences 2 and 4 are the markers, 3 the aborted record.
    assert.deepEqual(await fetchAll(2, 10_000), [
      [5, 'c2'],
      [6, 'plain'],
    ]);
    await nc.close();
    await producer.disconnect();
    await plain.disconnect();
  });
});

for (const cfg of storageConfigs())
  describe(`kafka transactions across a kill -9 [${cfg.name}]`, () => {
    let broker: FlowmqProcess;
    before(async () => {
      broker = await FlowmqProcess.start({ args: await cfg.brokerArgs(['--kafka-group-initial-rebalance-delay', '0']) });
    });
    after(async () => {
      await broker?.stop();
      broker?.cleanup();
    });

    it('a broker killed with a transaction open aborts it at restart and keeps the producer id', async () => {
      await broker.api('POST', '/api/v1/streams', { name: 'tx.k', partitions: 1 });
      let kafka = client(broker, 'tx-k');
      const producer = kafka.producer({ transactionalId: 'tx-k', maxInFlightRequests: 1, idempotent: true });
      await producer.connect();
      const t0 = await producer.transaction();
      await t0.send({ topic: 'tx.k', messages: [{ value: 'kept' }] });
      await t0.commit();
      const t = await producer.transaction();
      await t.send({ topic: 'tx.k', messages: [{ value: 'lost-1' }, { value: 'lost-2' }] });
      let raw = await RawClient.connect(broker.ports.kafka);
      const before = (await raw.call(DescribeTransactionsApi, 0, { transactionalIds: ['tx-k'] })).transactionStates[0];
      raw.close();
      await producer.disconnect().catch(() => undefined);
      await broker.stop('SIGKILL');
      broker = await FlowmqProcess.start({ dataDir: broker.dataDir, args: broker.args });
      kafka = client(broker, 'tx-k');
      raw = await RawClient.connect(broker.ports.kafka);
      const afterRestart = (await raw.call(DescribeTransactionsApi, 0, { transactionalIds: ['tx-k'] })).transactionStates[0];
      raw.close();
      assert.equal(afterRestart.transactionState, 'CompleteAbort');
      assert.equal(afterRestart.producerId, before.producerId);
      const p2 = kafka.producer({ transactionalId: 'tx-k', maxInFlightRequests: 1, idempotent: true });
      await p2.connect();
      const t2 = await p2.transaction();
      await t2.send({ topic: 'tx.k', messages: [{ value: 'marker' }] });
      await t2.commit();
      await p2.disconnect();
      assert.deepEqual(await readAll(kafka, 'tx.k', false, (v) => v.includes('marker')), ['kept', 'marker']);
      const all = await readAll(kafka, 'tx.k', true, (v) => v.includes('marker'));
      assert.deepEqual(all, ['kept', 'lost-1', 'lost-2', 'marker'], 'read_uncommitted still sees the aborted records');
    });
  });
