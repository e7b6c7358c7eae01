/**
 * MQTT `$queue/<name>`: MQTT.js clients consuming a core queue (bound on amq.topic, so MQTT publishes reach it).
 * QoS 1 subscriptions ack with PUBACK; QoS 0 ones are no-ack; a client that goes away hands its unacknowledged
 * deliveries back to the queue.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import type { QueueConsumer, QueueDelivery, QueueHandle } from '../../../src/core/index.js';
import { RawClient, connectPacket, startBroker, until, type TestBroker } from './helpers.js';

function client(b: TestBroker, opts: IClientOptions = {}): Promise<MqttClient> {
  return mqtt.connectAsync(b.url, { protocolVersion: 4, reconnectPeriod: 0, connectTimeout: 3000, ...opts });
}

async function declare(b: TestBroker, name: string, key: string): Promise<QueueHandle> {
  const q = await b.engine.declareQueue({ name, durable: true, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {} });
  await b.engine.bind({ source: 'amq.topic', destinationKind: 'queue', destination: name, key, arguments: {} });
  return q;
}

describe('mqtt $queue/<name> subscriptions', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker();
  });
  after(() => b.close());

  test('competing MQTT consumers share a queue; PUBACK acks', async () => {
    const q = await declare(b, 'work', 'jobs.#');
    const c1 = await client(b, { clientId: 'w1' });
    const c2 = await client(b, { clientId: 'w2' });
    const pub = await client(b, { clientId: 'p' });
    try {
      const got: Array<{ who: string; topic: string; payload: string; qos: number }> = [];
      c1.on('message', (topic, payload, p) => got.push({ who: 'w1', topic, payload: payload.toString(), qos: p.qos }));
      c2.on('message', (topic, payload, p) => got.push({ who: 'w2', topic, payload: payload.toString(), qos: p.qos }));
      const [g1] = await c1.subscribeAsync('$queue/work', { qos: 2 });
      const [g2] = await c2.subscribeAsync('$queue/work', { qos: 1 });
      assert.equal(g1.qos, 1, 'QoS 2 is granted as 1: the PUBACK is the queue ack');
      assert.equal(g2.qos, 1);
      for (let i = 0; i < 10; i++) await pub.publishAsync(`jobs/${i}`, `job ${i}`, { qos: 1 });
      await until(() => got.length >= 10, 'ten deliveries');
      assert.deepEqual(got.map((g) => g.payload).sort(), Array.from({ length: 10 }, (_, i) => `job ${i}`).sort());
      assert.ok(got.some((g) => g.who === 'w1') && got.some((g) => g.who === 'w2'), 'both consumers got work');
      assert.ok(
        got.every((g) => g.qos === 1 && g.topic.startsWith('jobs/')),
        'QoS 1, under the topic it was published to',
      );
      await until(() => q.stats().unacked === 0 && q.stats().ready === 0, 'every delivery acked by PUBACK');
      assert.equal(q.stats().consumers, 2);
      await c1.unsubscribeAsync('$queue/work');
      assert.equal(q.stats().consumers, 1);
    } finally {
      await Promise.all([c1.endAsync(), c2.endAsync(), pub.endAsync()]);
    }
    await until(() => q.stats().consumers === 0, 'consumers gone with their connections');
  });

  test('a client that goes away without acking hands its deliveries back, redelivered', async () => {
    const q = await declare(b, 'handback', 'hb.#');
    const raw = await RawClient.connect(b.port, 'raw-consumer');
    raw.send({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: '$queue/handback', qos: 1 }] });
    const suback = await raw.next('suback');
    assert.deepEqual(suback.returnCodes, [1]);
    const pub = await client(b, { clientId: 'p2' });
    await pub.publishAsync('hb/1', 'one', { qos: 1 });
    await pub.publishAsync('hb/2', 'two', { qos: 1 });
    const p1 = await raw.next('publish');
    const p2 = await raw.next('publish');
    assert.deepEqual([p1.payload.toString(), p2.payload.toString()], ['one', 'two']);
    assert.equal(q.stats().unacked, 2);
    // The raw client never sends PUBACK; it vanishes.
    raw.destroy();
    await until(() => q.stats().ready === 2, 'deliveries back in the queue');
    const got: QueueDelivery[] = [];
    const core: QueueConsumer = { tag: 'core', owner: 'test', noAck: false, hasCredit: () => true, deliver: (d) => void got.push(d) };
    q.consume(core);
    assert.deepEqual(
      got.map((d) => [d.msg.payload.toString(), d.redelivered]),
      [
        ['one', true],
        ['two', true],
      ],
    );
    for (const d of got) await q.ack(d.id);
    q.cancel(core);
    await pub.endAsync();
  });

  test('a QoS 0 subscription is a no-ack consumer', async () => {
    const q = await declare(b, 'noack', 'na.#');
    const c = await client(b, { clientId: 'na' });
    const pub = await client(b, { clientId: 'p3' });
    try {
      const got: Array<{ payload: string; qos: number }> = [];
      c.on('message', (_t, payload, p) => got.push({ payload: payload.toString(), qos: p.qos }));
      const [g] = await c.subscribeAsync('$queue/noack', { qos: 0 });
      assert.equal(g.qos, 0);
      await pub.publishAsync('na/x', 'a', { qos: 1 });
      await pub.publishAsync('na/x', 'b', { qos: 1 });
      await until(() => got.length === 2, 'two deliveries');
      assert.deepEqual(got, [
        { payload: 'a', qos: 0 },
        { payload: 'b', qos: 0 },
      ]);
      assert.deepEqual(q.stats(), { ready: 0, unacked: 0, bytes: 0, consumers: 1 });
    } finally {
      await Promise.all([c.endAsync(), pub.endAsync()]);
    }
  });

  test('messages already in the queue are delivered after the SUBACK; an unknown queue is refused', async () => {
    const q = await declare(b, 'waiting', 'wait.#');
    const pub = await client(b, { clientId: 'p4' });
    await pub.publishAsync('wait/1', 'queued before', { qos: 1 });
    assert.equal(q.stats().ready, 1);
    const raw = await RawClient.connect(b.port, 'raw-late');
    raw.send({
      type: 'subscribe',
      packetId: 7,
      subscriptions: [
        { filter: '$queue/waiting', qos: 1 },
        { filter: '$queue/nope', qos: 1 },
      ],
    });
    await until(() => raw.packets.length >= 2, 'SUBACK and PUBLISH');
    assert.deepEqual(
      raw.packets.map((x) => x.type),
      ['suback', 'publish'],
      'the queue delivers after the SUBACK',
    );
    const suback = await raw.next('suback');
    assert.deepEqual(suback.returnCodes, [1, 0x80]);
    const p = await raw.next('publish');
    assert.equal(p.payload.toString(), 'queued before');
    assert.equal(p.qos, 1);
    raw.send({ type: 'puback', packetId: p.packetId });
    await until(() => q.stats().unacked === 0 && q.stats().ready === 0, 'acked');
    raw.destroy();
    await pub.endAsync();
  });

  test('v5: an unknown queue or a queue with an exclusive consumer is refused with 0x83', async () => {
    const q = await declare(b, 'locked', 'locked.#');
    const holder: QueueConsumer = { tag: 'holder', owner: 'amqp-conn/1', noAck: false, hasCredit: () => false, deliver: () => undefined };
    q.consume(holder, { exclusive: true });
    const c = await RawClient.open(b.port);
    c.level = 5;
    c.send(connectPacket('v5-queue', { protocolLevel: 5, properties: {} }));
    assert.equal((await c.next('connack')).returnCode, 0);
    c.send({
      type: 'subscribe',
      packetId: 3,
      subscriptions: [
        { filter: '$queue/missing', qos: 1 },
        { filter: '$queue/locked', qos: 1 },
        { filter: '$queue/', qos: 1 },
      ],
      properties: {},
    });
    assert.deepEqual((await c.next('suback')).returnCodes, [0x83, 0x83, 0x83]);
    q.cancel(holder);
    c.destroy();
  });
});
