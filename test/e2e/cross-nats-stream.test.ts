/**
 * JetStream over FlowMQ streams across protocols, with real clients against bin/flowmq: a NATS JetStream publish is
 * a record a KafkaJS consumer reads at offset seq - 1 with the NATS headers as record headers; a stream fed by AMQP
 * and Kafka publishers is replayed by a JetStream pull consumer that sees each message under its own subject with
 * the headers a live NATS subscriber would get, and its sequence = Kafka offset + 1.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg, { type KafkaMessage } from 'kafkajs';
import { AckPolicy, headers as natsHeaders, type JsMsg } from 'nats';
import { eventually } from './harness.js';
import { crossFixture } from './cross-nats-helpers.js';

const { Kafka, logLevel } = kafkajsPkg;

function hdrs(m: JsMsg): Record<string, string[]> | null {
  if (m.headers === undefined) return null;
  const out: Record<string, string[]> = {};
  for (const k of m.headers.keys()) out[k] = m.headers.values(k);
  return out;
}

describe('e2e: JetStream over FlowMQ streams with Kafka and AMQP', () => {
  const f = crossFixture('cross-stream');

  it('a JetStream publish (PubAck seq, Nats-Msg-Id dedup) is the Kafka record at offset seq - 1 with the NATS headers', async () => {
    await f.broker.api('POST', '/api/v1/streams', { name: 'js-kafka', partitions: 1, bindings: ['jsk/#'] });
    const js = f.nc.jetstream();
    const h = natsHeaders();
    h.append('tenant', 'acme');
    const first = await js.publish('jsk.a', 'one', { msgID: 'dedup-1', headers: h });
    const again = await js.publish('jsk.a', 'one again', { msgID: 'dedup-1' });
    const second = await js.publish('jsk.b.c', 'two');
    assert.deepEqual([first.stream, first.seq, first.duplicate], ['js-kafka', 1, false]);
    assert.deepEqual([again.stream, again.seq, again.duplicate], ['js-kafka', 1, true]);
    assert.deepEqual([second.stream, second.seq, second.duplicate], ['js-kafka', 2, false]);

    const kafka = new Kafka({ brokers: [f.broker.kafka], clientId: 'xs', logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
    const consumer = kafka.consumer({ groupId: 'xs-readers', maxWaitTimeInMs: 200 });
    const records: KafkaMessage[] = [];
    await consumer.connect();
    try {
      await consumer.subscribe({ topic: 'js-kafka', fromBeginning: true });
      await consumer.run({ eachMessage: async ({ message }) => void records.push(message) });
      await eventually(() => records.length >= 2, 30_000, 'two records');
    } finally {
      await consumer.disconnect();
    }
    assert.deepEqual(
      records.map((r) => [r.offset, String(r.value), r.headers?.['flowmq.topic']?.toString()]),
      [
        ['0', 'one', 'jsk/a'],
        ['1', 'two', 'jsk/b/c'],
      ],
    );
    assert.equal(records[0]!.headers?.tenant?.toString(), 'acme');
    assert.equal(records[0]!.headers?.['Nats-Msg-Id']?.toString(), 'dedup-1');
    assert.equal(records[0]!.headers?.['flowmq.message-id']?.toString(), 'dedup-1');
  });

  it('a stream fed by AMQP and Kafka is replayed by a JetStream pull consumer: subjects, headers, seq = offset + 1', async () => {
    await f.broker.api('POST', '/api/v1/streams', { name: 'js-mixed', partitions: 1, bindings: ['mixed/#'] });
    const ch = await f.conn.createConfirmChannel();
    ch.publish('amq.topic', 'mixed.amqp.v1/2', Buffer.from('from amqp'), {
      headers: { tenant: 'acme' },
      messageId: 'am-1',
      correlationId: 'ac-1',
      contentType: 'text/plain',
    });
    await ch.waitForConfirms();
    await ch.close();
    const kafka = new Kafka({ brokers: [f.broker.kafka], clientId: 'xs-mixed', logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
    const producer = kafka.producer();
    await producer.connect();
    try {
      await producer.send({ topic: 'js-mixed', acks: -1, messages: [{ value: 'from kafka', headers: { src: 'kafka' } }] });
    } finally {
      await producer.disconnect();
    }
    const jsm = await f.nc.jetstreamManager();
    await jsm.consumers.add('js-mixed', { durable_name: 'replay', ack_policy: AckPolicy.Explicit });
    const c = await f.nc.jetstream().consumers.get('js-mixed', 'replay');
    const got: JsMsg[] = [];
    const iter = await c.fetch({ max_messages: 2, expires: 10_000 });
    for await (const m of iter) {
      got.push(m);
      m.ack();
    }
    assert.deepEqual(
      got.map((m) => [m.subject, m.seq, m.string()]),
      [
        ['mixed.amqp.v1/2', 1, 'from amqp'],
        ['js-mixed', 2, 'from kafka'],
      ],
    );
    assert.deepEqual(hdrs(got[0]!), { tenant: ['acme'], 'Nats-Msg-Id': ['am-1'], 'Correlation-Id': ['ac-1'], 'Content-Type': ['text/plain'] });
    assert.deepEqual(hdrs(got[1]!), { src: ['kafka'] });
  });
});
