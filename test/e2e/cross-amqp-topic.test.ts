/**
 * Across protocols through amq.topic, with real clients against bin/flowmq: amqplib, MQTT.js and KafkaJS.
 * amq.topic is the unified topic space, so an AMQP routing key `a.b.c` is the MQTT topic `a/b/c` and the Kafka
 * stream `a.b.c`; names holding the other separator swap it (docs/concepts.md, "Names across protocols": AMQP key
 * `x/y.z` is MQTT topic `x.y/z`). Absence is proven with a marker message sent after what must not arrive.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import kafkajsPkg from 'kafkajs';
import { eventually } from './harness.js';
import { amqpFixture, takeUntil } from './amqp-helpers.js';
import { mqttCollector } from './mqtt-helpers.js';

const { Kafka, logLevel } = kafkajsPkg;

describe('e2e: AMQP, MQTT and Kafka through amq.topic', () => {
  // No KIP-134 initial rebalance delay: each Kafka group here has one member; 3 s per group proves nothing.
  const f = amqpFixture({ channel: true, args: ['--kafka-group-initial-rebalance-delay', '0'] });

  it('an AMQP publish with routing key a.b.c reaches an MQTT.js subscriber of a/+/c (and only matching keys do)', async () => {
    const sub = await mqttCollector(f.broker.mqttUrl, ['a/+/c']);
    try {
      f.ch.publish('amq.topic', 'a.b.c', Buffer.from('abc'), { contentType: 'text/plain', deliveryMode: 2, headers: { from: 'amqp' } });
      for (const k of ['a.b.d', 'a.b.c.d', 'x.b.c', 'a.c']) f.ch.publish('amq.topic', k, Buffer.from(k));
      // Routing keys on other exchanges are not unified topics, even an exchange of type topic.
      await f.ch.assertExchange('xp.other', 'topic', { durable: false, autoDelete: true });
      f.ch.publish('xp.other', 'a.b.c', Buffer.from('other exchange'));
      f.ch.publish('amq.topic', 'a.z.c', Buffer.from('end'));
      const got = await sub.until('end');
      assert.deepEqual(
        got.map((p) => [p.topic, p.payload.toString()]),
        [['a/b/c', 'abc']],
      );
      const p = got[0]!;
      assert.equal(p.qos, 1, 'a persistent message is QoS 1 for a QoS 1 subscription');
      assert.equal(p.properties?.contentType, 'text/plain');
      assert.deepEqual({ ...p.properties?.userProperties }, { from: 'amqp' });
    } finally {
      await sub.c.endAsync();
    }
  });

  it('an MQTT publish reaches an AMQP queue bound on amq.topic with a.# (a.# matches a; other topics do not)', async () => {
    await f.ch.assertQueue('xp-hash', { exclusive: true });
    await f.ch.bindQueue('xp-hash', 'amq.topic', 'a.#');
    const pub = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      await pub.publishAsync('a/b/c', 'deep', {
        qos: 1,
        properties: { contentType: 'application/json', userProperties: { k: 'v' }, messageExpiryInterval: 600 },
      });
      await pub.publishAsync('a', 'top', { qos: 0 });
      await pub.publishAsync('b/a', 'no', { qos: 1 });
      await pub.publishAsync('ab/c', 'no', { qos: 1 });
      await pub.publishAsync('a/end', 'end', { qos: 1 });
      const got = await takeUntil(f.ch, 'xp-hash', 'end');
      assert.deepEqual(
        got.map((m) => [m.fields.routingKey, m.content.toString()]),
        [
          ['a.b.c', 'deep'],
          ['a', 'top'],
        ],
      );
      const [deep, top] = got;
      assert.equal(deep!.fields.exchange, 'amq.topic');
      assert.equal(deep!.properties.contentType, 'application/json');
      assert.equal(deep!.properties.headers?.k, 'v');
      const ttl = Number(deep!.properties.expiration);
      assert.ok(ttl > 0 && ttl <= 600_000, `the message expiry becomes the expiration: ${deep!.properties.expiration}`);
      assert.equal(top!.fields.redelivered, false);
    } finally {
      await pub.endAsync();
      await f.ch.unbindQueue('xp-hash', 'amq.topic', 'a.#');
    }
  });

  it("a KafkaJS producer's records to stream x.y reach an AMQP queue bound on amq.topic with x.y (and x.*)", async () => {
    await f.ch.assertQueue('xp-kafka-exact', { exclusive: true });
    await f.ch.assertQueue('xp-kafka-star', { exclusive: true });
    await f.ch.bindQueue('xp-kafka-exact', 'amq.topic', 'x.y');
    await f.ch.bindQueue('xp-kafka-star', 'amq.topic', 'x.*');
    const kafka = new Kafka({ brokers: [f.broker.kafka], clientId: 'xp', logLevel: logLevel.NOTHING, retry: { retries: 3 } });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: 'x.y', numPartitions: 2 }, { topic: 'x.z' }, { topic: 'x.y.deeper' }], waitForLeaders: true });
    await admin.disconnect();
    const producer = kafka.producer();
    await producer.connect();
    try {
      const sent = Array.from({ length: 10 }, (_, i) => ({ key: `k${i % 3}`, value: `r${i}`, headers: { seq: String(i), src: 'kafka' } }));
      const res = await producer.send({ topic: 'x.y', acks: -1, messages: sent });
      assert.equal(
        res.reduce((n, r) => n + (r.errorCode === 0 ? 1 : 0), 0),
        res.length,
      );
      await producer.send({ topic: 'x.z', acks: -1, messages: [{ value: 'z1' }] });
      await producer.send({ topic: 'x.y.deeper', acks: -1, messages: [{ value: 'deeper' }] });
      await producer.send({ topic: 'x.y', acks: -1, messages: [{ key: 'k0', value: 'end' }] });

      const exact = await takeUntil(f.ch, 'xp-kafka-exact', 'end');
      // Order is kept per partition (per key), not across partitions.
      assert.deepEqual(exact.map((m) => m.content.toString()).sort(), sent.map((s) => s.value).sort());
      for (const k of ['k0', 'k1', 'k2']) {
        const mine = exact.filter((m) => m.properties.headers?.seq !== undefined && Number(m.properties.headers.seq) % 3 === Number(k.slice(1)));
        const seqs = mine.map((m) => Number(m.properties.headers!.seq));
        assert.deepEqual(
          seqs,
          [...seqs].sort((a, b) => a - b),
          `key ${k} in order`,
        );
      }
      for (const m of exact) {
        assert.equal(m.fields.exchange, 'amq.topic');
        assert.equal(m.fields.routingKey, 'x.y');
        assert.equal(m.properties.headers?.src, 'kafka');
        assert.equal(m.properties.headers?.seq, m.content.toString().slice(1));
      }
      const star = await takeUntil(f.ch, 'xp-kafka-star', 'end');
      assert.deepEqual(star.map((m) => [m.fields.routingKey, m.content.toString()]).sort(), [...sent.map((s) => ['x.y', s.value]), ['x.z', 'z1']].sort());
    } finally {
      await producer.disconnect();
    }
  });

  it('an AMQP publish on amq.topic is captured by the stream of the same name and read by a KafkaJS consumer with its properties', async () => {
    const kafka = new Kafka({ brokers: [f.broker.kafka], clientId: 'xp-read', logLevel: logLevel.NOTHING, retry: { retries: 3 } });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: 'orders.eu' }], waitForLeaders: true });
    await admin.disconnect();
    await new Promise<void>((resolve, reject) => {
      f.ch.publish('amq.topic', 'orders.eu', Buffer.from('o-1'), { correlationId: 'c-1', messageId: 'm-1', headers: { region: 'eu' } });
      f.ch.publish('amq.topic', 'orders.us', Buffer.from('not captured'));
      f.ch.publish('amq.topic', 'orders.eu', Buffer.from('end'));
      // A channel round trip: both publishes were routed before it returns.
      f.ch.checkExchange('amq.topic').then(() => resolve(), reject);
    });
    const consumer = kafka.consumer({ groupId: 'xp-readers' });
    await consumer.connect();
    const got: Array<{ value: string; headers: Record<string, string> }> = [];
    try {
      await consumer.subscribe({ topic: 'orders.eu', fromBeginning: true });
      await consumer.run({
        eachMessage: async ({ message }) => {
          const headers: Record<string, string> = {};
          for (const [k, v] of Object.entries(message.headers ?? {})) headers[k] = String(v);
          got.push({ value: String(message.value), headers });
        },
      });
      await eventually(() => got.some((g) => g.value === 'end'), 30_000, 'the Kafka consumer reads the marker');
    } finally {
      await consumer.disconnect();
    }
    assert.deepEqual(
      got.map((g) => g.value),
      ['o-1', 'end'],
    );
    assert.equal(got[0]!.headers.region, 'eu');
    // AMQP properties travel as reserved flowmq.* record headers.
    const reserved = Object.entries(got[0]!.headers).filter(([k]) => k.startsWith('flowmq.'));
    assert.ok(
      reserved.some(([, v]) => v === 'c-1'),
      `correlation id among ${JSON.stringify(reserved)}`,
    );
    assert.ok(
      reserved.some(([, v]) => v === 'm-1'),
      `message id among ${JSON.stringify(reserved)}`,
    );
  });

  it('names holding the other separator: AMQP key x/y.z is MQTT topic x.y/z, and MQTT level v1.2 is AMQP word v1/2', async () => {
    const sub = await mqttCollector(f.broker.mqttUrl, ['x.y/+', 'plain/#']);
    await f.ch.assertQueue('xp-sep', { exclusive: true });
    await f.ch.bindQueue('xp-sep', 'amq.topic', 'v1/2.*');
    const pub = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      // AMQP → MQTT: a `/` inside a word is a `.` inside a level.
      f.ch.publish('amq.topic', 'x/y.z', Buffer.from('slash in a word'));
      f.ch.publish('amq.topic', 'x.y.z', Buffer.from('three words')); // x/y/z: not matched by x.y/+
      f.ch.publish('amq.topic', 'x/y', Buffer.from('one word')); // x.y: not matched by x.y/+ (one level)
      f.ch.publish('amq.topic', 'plain.end', Buffer.from('end'));
      const got = await sub.until('end');
      assert.deepEqual(
        got.map((p) => [p.topic, p.payload.toString()]),
        [['x.y/z', 'slash in a word']],
      );

      // MQTT → AMQP: a `.` inside a level is a `/` inside a word.
      await pub.publishAsync('v1.2/temp', 'dot in a level', { qos: 1 });
      await pub.publishAsync('v1/2/temp', 'three levels', { qos: 1 }); // v1.2.temp: not v1/2.*
      await pub.publishAsync('v1.2/temp/x', 'too deep', { qos: 1 });
      await pub.publishAsync('v1.2/end', 'end', { qos: 1 });
      const q = await takeUntil(f.ch, 'xp-sep', 'end');
      assert.deepEqual(
        q.map((m) => [m.fields.routingKey, m.content.toString()]),
        [['v1/2.temp', 'dot in a level']],
      );
    } finally {
      await sub.c.endAsync();
      await pub.endAsync();
    }
  });
});
