/**
 * MQTT `$queue/<name>` end to end (bin/flowmq, MQTT.js and amqplib): a durable queue declared by AMQP and bound
 * on amq.topic takes MQTT QoS 1 publishes, keeps them across kill -9, and an MQTT client consumes it, its PUBACKs
 * being the queue acks; a consumer that vanishes hands its unacked deliveries to the next one.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type MqttClient } from 'mqtt';
import { FlowmqProcess, eventually } from './harness.js';
import { amqpFixture, connectAmqp } from './amqp-helpers.js';
import { RawClient } from '../protocols/mqtt/helpers.js';

function mqttClient(b: FlowmqProcess, clientId: string, opts: mqtt.IClientOptions = {}): Promise<MqttClient> {
  return mqtt.connectAsync(`mqtt://127.0.0.1:${b.ports.mqtt}`, { clientId, protocolVersion: 4, reconnectPeriod: 0, connectTimeout: 5000, ...opts });
}

describe('e2e: MQTT $queue/<name>', () => {
  const f = amqpFixture();

  it('MQTT publishes reach a durable AMQP queue, survive kill -9 and are consumed by an MQTT client with PUBACK as the ack', async () => {
    const conn = await connectAmqp(f.broker);
    const ch = await conn.createChannel();
    await ch.assertQueue('mq-orders', { durable: true });
    await ch.bindQueue('mq-orders', 'amq.topic', 'orders.#');
    await conn.close();

    const pub = await mqttClient(f.broker, 'orders-pub');
    const n = 20;
    // QoS 1: the PUBACK comes once the message is durable in the queue.
    for (let i = 0; i < n; i++) await pub.publishAsync(`orders/eu/${i}`, `order ${i}`, { qos: 1 });
    pub.end(true);

    await f.broker.stop('SIGKILL');
    f.broker = await FlowmqProcess.start({ dataDir: f.broker.dataDir, args: f.broker.args });

    const sub = await mqttClient(f.broker, 'orders-worker');
    const got: Array<{ topic: string; payload: string; qos: number }> = [];
    sub.on('message', (topic, payload, p) => got.push({ topic, payload: payload.toString(), qos: p.qos }));
    const [g] = await sub.subscribeAsync('$queue/mq-orders', { qos: 1 });
    assert.equal(g.qos, 1);
    await eventually(() => got.length >= n, 15_000, `${n} deliveries`);
    assert.deepEqual(
      got.map((m) => m.payload),
      Array.from({ length: n }, (_, i) => `order ${i}`),
      'in publish order',
    );
    assert.ok(got.every((m) => m.qos === 1 && m.topic.startsWith('orders/eu/')));
    await sub.endAsync();

    // Every PUBACK acked its message: the queue is empty for an AMQP client.
    const conn2 = await connectAmqp(f.broker);
    const ch2 = await conn2.createChannel();
    await eventually(async () => (await ch2.checkQueue('mq-orders')).messageCount === 0, 10_000, 'queue drained by PUBACKs');
    assert.equal(await ch2.get('mq-orders'), false);
    await conn2.close();
  });

  it('deliveries a vanished MQTT consumer did not acknowledge go to the next consumer; QoS 0 is no-ack', async () => {
    const conn = await connectAmqp(f.broker);
    const ch = await conn.createChannel();
    await ch.assertQueue('mq-handback', { durable: true });
    // Published by AMQP to the default exchange: no MQTT topic, delivered under the subscription's filter.
    for (let i = 0; i < 3; i++) ch.sendToQueue('mq-handback', Buffer.from(`m${i}`), { persistent: true });
    await eventually(async () => (await ch.checkQueue('mq-handback')).messageCount === 3, 10_000, 'three messages queued');

    // A client that takes deliveries and never acknowledges them, then vanishes (raw socket: MQTT.js always acks).
    const greedy = await RawClient.connect(f.broker.ports.mqtt, 'greedy');
    greedy.send({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: '$queue/mq-handback', qos: 1 }] });
    assert.deepEqual((await greedy.next('suback')).returnCodes, [1]);
    const seen: string[] = [];
    for (let i = 0; i < 3; i++) seen.push((await greedy.next('publish', 10_000)).payload.toString());
    assert.deepEqual(seen, ['m0', 'm1', 'm2']);
    greedy.destroy();

    const next = await mqttClient(f.broker, 'next');
    const got: Array<{ topic: string; payload: string; qos: number }> = [];
    next.on('message', (topic, payload, p) => got.push({ topic, payload: payload.toString(), qos: p.qos }));
    await next.subscribeAsync('$queue/mq-handback', { qos: 0 });
    await eventually(() => got.length === 3, 10_000, 'three deliveries handed back');
    assert.deepEqual(
      got.map((m) => [m.payload, m.qos]),
      [
        ['m0', 0],
        ['m1', 0],
        ['m2', 0],
      ],
    );
    assert.ok(got.every((m) => m.topic.length > 0));
    await next.endAsync();
    await eventually(async () => (await ch.checkQueue('mq-handback')).messageCount === 0, 10_000, 'no-ack deliveries removed');
    await conn.close();
  });
});
