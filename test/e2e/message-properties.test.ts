/**
 * Message properties across protocols, with real clients against a real `flowmq start`: an MQTT v5 request (content
 * type, response topic, correlation data, user properties, message expiry, payload format) is captured by a stream;
 * a KafkaJS service reads it and sees the properties as `flowmq.*` headers, answers with a record into another
 * stream that names the response topic, and the MQTT v5 requester gets the reply with its properties. This is the
 * request/response pattern of MQTT v5 answered by a Kafka service, through streams only.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import kafkajsPkg from 'kafkajs';
import type { KafkaMessage } from 'kafkajs';
import { eventually, FlowmqProcess } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

function mqttConnect(url: string, opts: mqtt.IClientOptions): Promise<mqtt.MqttClient> {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(url, { protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 5000, ...opts });
    c.once('connect', () => resolve(c));
    c.once('error', reject);
  });
}

const header = (m: KafkaMessage, key: string): Buffer | undefined => {
  const v = m.headers?.[key];
  return v === undefined ? undefined : Buffer.isBuffer(v) ? v : Buffer.from(String(v));
};

describe('message properties through streams: MQTT v5 request -> stream -> KafkaJS service -> stream -> MQTT v5 reply', () => {
  let broker: FlowmqProcess;
  const clients: mqtt.MqttClient[] = [];

  before(async () => {
    // No KIP-134 initial rebalance delay: the Kafka groups here have one member; 3 s per group proves nothing.
    broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0'] });
  });
  after(async () => {
    for (const c of clients) c.end(true);
    await broker?.stop();
    broker?.cleanup();
  });

  it('carries content type, response topic, correlation data, user properties and expiry both ways', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'requests', partitions: 1, bindings: ['rpc/req/#'] });
    await broker.api('POST', '/api/v1/streams', { name: 'replies', partitions: 1, bindings: ['rpc/resp/#'] });

    const requester = await mqttConnect(broker.mqttUrl, { clientId: 'requester' });
    clients.push(requester);
    const replies: Array<{ topic: string; payload: string; props: mqtt.IPublishPacket['properties'] }> = [];
    requester.on('message', (topic, payload, packet) => replies.push({ topic, payload: payload.toString(), props: packet.properties }));
    await requester.subscribeAsync('rpc/resp/+', { qos: 1 });

    const correlation = Buffer.from([0x00, 0xc3, 0x28, 0xff, 0x07]); // not UTF-8: bytes must stay bytes
    const sentAt = Date.now();
    await requester.publishAsync('rpc/req/7', '{"op":"sum","args":[2,3]}', {
      qos: 1,
      properties: {
        contentType: 'application/json',
        responseTopic: 'rpc/resp/7',
        correlationData: correlation,
        userProperties: { tenant: 'acme', trace: 'abc-1' },
        messageExpiryInterval: 3600,
        payloadFormatIndicator: true,
      },
    });

    // The service: a KafkaJS consumer of the request stream.
    const kafka = new Kafka({ brokers: [broker.kafka], clientId: 'rpc-service', logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
    const consumer = kafka.consumer({ groupId: 'rpc-service', maxWaitTimeInMs: 200, heartbeatInterval: 300 });
    const requests: KafkaMessage[] = [];
    await consumer.connect();
    await consumer.subscribe({ topics: ['requests'], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        requests.push(message);
      },
    });
    try {
      await eventually(() => requests.length === 1, 20_000, 'the request record');
    } finally {
      await consumer.disconnect();
    }
    const req = requests[0];
    assert.equal(req.value?.toString(), '{"op":"sum","args":[2,3]}');
    assert.equal(header(req, 'flowmq.topic')?.toString(), 'rpc/req/7');
    assert.equal(header(req, 'flowmq.content-type')?.toString(), 'application/json');
    assert.equal(header(req, 'flowmq.reply-to')?.toString(), 'rpc/resp/7');
    assert.deepEqual(header(req, 'flowmq.correlation-id'), correlation);
    assert.equal(header(req, 'flowmq.payload-format')?.toString(), '1');
    const expiresAt = Number(header(req, 'flowmq.expires-at')?.toString());
    assert.ok(expiresAt >= sentAt + 3_600_000 && expiresAt <= Date.now() + 3_600_000, `expires-at ${expiresAt}`);
    // MQTT user properties are the record's plain headers, in order, after the reserved ones.
    assert.equal(header(req, 'tenant')?.toString(), 'acme');
    assert.equal(header(req, 'trace')?.toString(), 'abc-1');
    const keys = Object.keys(req.headers ?? {});
    assert.deepEqual(
      keys.filter((k) => !k.startsWith('flowmq.')),
      ['tenant', 'trace'],
    );

    // The answer: a record into the reply stream naming the response topic, echoing the correlation id, with an
    // expiry of its own, and a user id the service has no business claiming.
    const producer = kafka.producer();
    await producer.connect();
    try {
      const res = await producer.send({
        topic: 'replies',
        acks: -1,
        messages: [
          {
            value: '5',
            headers: {
              'flowmq.topic': header(req, 'flowmq.reply-to')!,
              'flowmq.correlation-id': header(req, 'flowmq.correlation-id')!,
              'flowmq.content-type': 'text/plain',
              'flowmq.expires-at': String(Date.now() + 60_000),
              'flowmq.user-id': 'admin',
              tenant: header(req, 'tenant')!,
            },
          },
        ],
      });
      assert.equal(res[0].errorCode, 0);
    } finally {
      await producer.disconnect();
    }

    await eventually(() => replies.length === 1, 10_000, 'the MQTT v5 reply');
    const [reply] = replies;
    assert.equal(reply.topic, 'rpc/resp/7');
    assert.equal(reply.payload, '5');
    assert.deepEqual(reply.props?.correlationData, correlation);
    assert.equal(reply.props?.contentType, 'text/plain');
    // Only the service's own header: no flowmq.* name reaches the subscriber as a user property.
    assert.deepEqual({ ...reply.props?.userProperties }, { tenant: 'acme' });
    const expiry = reply.props?.messageExpiryInterval;
    assert.ok(expiry !== undefined && expiry >= 1 && expiry <= 60, `message expiry interval ${expiry}`);
  });
});
