/**
 * NATS subjects across protocols, with real clients against bin/flowmq: the `nats` npm client, MQTT.js, amqplib and
 * KafkaJS. A NATS subject is a unified topic with the separators swapped (`a.b.c` is `a/b/c`; a `/` inside a NATS
 * token is a `.` inside an MQTT level and back), so NATS publishes reach MQTT subscribers, AMQP queues bound on
 * amq.topic and streams, and their messages reach NATS subscribers, each side matching with its own wildcard rule
 * (NATS `a.>` does not match `a`, MQTT `a/#` does). Absence is proven with a marker message sent after what must
 * not arrive.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import kafkajsPkg from 'kafkajs';
import { eventually } from './harness.js';
import { crossFixture, connectNats, natsCollector } from './cross-nats-helpers.js';
import { mqttCollector } from './mqtt-helpers.js';
import { takeUntil } from './amqp-helpers.js';

const { Kafka, logLevel } = kafkajsPkg;

describe('e2e: NATS subjects across MQTT, AMQP and Kafka', () => {
  const f = crossFixture('cross-topic');

  it('NATS publishes reach MQTT subscribers: subject a.b.c is topic a/b/c, with MQTT wildcards on the MQTT side', async () => {
    const sub = await mqttCollector(f.broker.mqttUrl, ['n2m/+/c', 'n2m/deep/#']);
    try {
      f.nc.publish('n2m.b.c', 'abc');
      for (const s of ['n2m.b.d', 'n2m.b.c.d', 'x.b.c', 'n2m.c']) f.nc.publish(s, s);
      f.nc.publish('n2m.deep', 'deep itself'); // MQTT a/# matches a
      f.nc.publish('n2m.deep.x.y', 'deep below');
      f.nc.publish('n2m.z.c', 'end');
      const got = await sub.until('end');
      assert.deepEqual(
        got.map((p) => [p.topic, p.payload.toString()]),
        [
          ['n2m/b/c', 'abc'],
          ['n2m/deep', 'deep itself'],
          ['n2m/deep/x/y', 'deep below'],
        ],
      );
      // A NATS publish carries no delivery guarantee: QoS 0, whatever the subscription's QoS.
      for (const p of got) assert.equal(p.qos, 0);
    } finally {
      await sub.c.endAsync();
    }
  });

  it('MQTT publishes reach NATS subscribers with NATS wildcards: * one token, > one or more (a.> does not match a)', async () => {
    const star = natsCollector(f.nc, 'm2n.*.c');
    const tail = natsCollector(f.nc, 'm2n.deep.>');
    const both = natsCollector(f.nc, 'm2n.>');
    await f.nc.flush();
    const pub = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      await pub.publishAsync('m2n/b/c', 'abc', { qos: 1 });
      await pub.publishAsync('m2n/b/c/d', 'too deep for *', { qos: 1 });
      await pub.publishAsync('m2n/deep', 'the parent', { qos: 1 }); // not m2n.deep.>
      await pub.publishAsync('m2n/deep/x/y', 'below deep', { qos: 0 });
      await pub.publishAsync('m2n', 'm2n alone', { qos: 1 }); // not m2n.>
      await pub.publishAsync('m2n/end', 'end', { qos: 1 });
      await pub.publishAsync('m2n/deep/end', 'end', { qos: 1 });
      await pub.publishAsync('m2n/end/c', 'end', { qos: 1 });
      assert.deepEqual(
        (await star.until('end')).map((s) => [s.subject, s.data]),
        [['m2n.b.c', 'abc']],
      );
      assert.deepEqual(
        (await tail.until('end')).map((s) => [s.subject, s.data]),
        [['m2n.deep.x.y', 'below deep']],
      );
      assert.deepEqual(
        (await both.until('end')).map((s) => [s.subject, s.data]),
        [
          ['m2n.b.c', 'abc'],
          ['m2n.b.c.d', 'too deep for *'],
          ['m2n.deep', 'the parent'],
          ['m2n.deep.x.y', 'below deep'],
        ],
      );
    } finally {
      await pub.endAsync();
      star.sub.unsubscribe();
      tail.sub.unsubscribe();
      both.sub.unsubscribe();
    }
  });

  it('an MQTT message without properties arrives as a plain MSG: no headers, no reply', async () => {
    const s = natsCollector(f.nc, 'plain.>');
    await f.nc.flush();
    const pub = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      await pub.publishAsync('plain/x', 'bare', { qos: 1 });
      await pub.publishAsync('plain/end', 'end', { qos: 1 });
      const got = await s.until('end');
      assert.deepEqual(got, [{ subject: 'plain.x', reply: '', data: 'bare', headers: null, status: '' }]);
    } finally {
      await pub.endAsync();
      s.sub.unsubscribe();
    }
  });

  it('a / inside a NATS token is a . inside an MQTT level, and back', async () => {
    const sub = await mqttCollector(f.broker.mqttUrl, ['sep/x.y/+', 'sep/end']);
    const ns = natsCollector(f.nc, 'sep.v1/2.*');
    await f.nc.flush();
    const pub = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      // NATS → MQTT.
      f.nc.publish('sep.x/y.z', 'slash in a token');
      f.nc.publish('sep.x.y.z', 'four tokens'); // sep/x/y/z: not sep/x.y/+
      f.nc.publish('sep.x/y', 'no third token');
      f.nc.publish('sep.end', 'end');
      assert.deepEqual(
        (await sub.until('end')).map((p) => [p.topic, p.payload.toString()]),
        [['sep/x.y/z', 'slash in a token']],
      );

      // MQTT → NATS.
      await pub.publishAsync('sep/v1.2/temp', 'dot in a level', { qos: 1 });
      await pub.publishAsync('sep/v1/2/temp', 'four levels', { qos: 1 }); // sep.v1.2.temp: not sep.v1/2.*
      await pub.publishAsync('sep/v1.2/temp/x', 'too deep', { qos: 1 });
      await pub.publishAsync('sep/v1.2/end', 'end', { qos: 1 });
      assert.deepEqual(
        (await ns.until('end')).map((s) => [s.subject, s.data]),
        [['sep.v1/2.temp', 'dot in a level']],
      );
    } finally {
      await sub.c.endAsync();
      await pub.endAsync();
      ns.sub.unsubscribe();
    }
  });

  it('MQTT topics that are no NATS subject (a space, a tab) do not break a NATS subscriber of ws.>', async () => {
    // A NATS subject cannot hold a space or a tab, and MSG is a space-separated control line: such a delivery
    // would corrupt the client's protocol stream. The NATS subscriber must stay usable whatever the adapter does.
    // Its own connection, so that a broken one fails this test only.
    const own = await connectNats(f.broker, { name: 'whitespace' });
    const ns = natsCollector(own, 'ws.>');
    await own.flush();
    const pub = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      await pub.publishAsync('ws/has space', 'space', { qos: 1 });
      await pub.publishAsync('ws/has\ttab', 'tab', { qos: 1 });
      await pub.publishAsync('ws/ok', 'ok', { qos: 1 });
      // A response topic with a space is no reply subject either (a reply subject is an argument of MSG).
      await pub.publishAsync('ws/reply', 'bad reply', { qos: 1, properties: { responseTopic: 'r/has space' } });
      await pub.publishAsync('ws/end', 'end', { qos: 1 });
      const got = await ns.until('end');
      assert.deepEqual(
        got.filter((s) => s.subject !== 'ws.reply').map((s) => [s.subject, s.data]),
        [['ws.ok', 'ok']],
      );
      for (const s of got) assert.ok(!/\s/.test(s.subject) && !/\s/.test(s.reply), `no whitespace in ${JSON.stringify(s)}`);
      assert.equal(own.isClosed(), false);
    } finally {
      await pub.endAsync();
      await own.close().catch(() => undefined);
    }
  });

  it('a NATS subscription gets no retained MQTT messages (NATS has none); a retained publish made while it is there arrives live', async () => {
    const pub = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      await pub.publishAsync('ret/x', 'old retained', { qos: 1, retain: true });
      const ns = natsCollector(f.nc, 'ret.>');
      await f.nc.flush();
      await pub.publishAsync('ret/y', 'live retained', { qos: 1, retain: true });
      await pub.publishAsync('ret/end', 'end', { qos: 1 });
      assert.deepEqual(
        (await ns.until('end')).map((s) => [s.subject, s.data]),
        [['ret.y', 'live retained']],
      );
      ns.sub.unsubscribe();
    } finally {
      // Clear the retained messages (an empty retained payload).
      await pub.publishAsync('ret/x', '', { qos: 1, retain: true });
      await pub.publishAsync('ret/y', '', { qos: 1, retain: true });
      await pub.endAsync();
    }
  });

  it('NATS > matches $ subjects (no MQTT $ rule for NATS subscriptions) while MQTT # does not', async () => {
    const ns = natsCollector(f.nc, '>');
    const sub = await mqttCollector(f.broker.mqttUrl, ['#', '$app/#']);
    await f.nc.flush();
    const pub = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      f.nc.publish('$app.x', 'dollar from NATS');
      await f.nc.flush(); // ahead of the MQTT publish
      await pub.publishAsync('$app/y', 'dollar from MQTT', { qos: 1 });
      f.nc.publish('dollar.end', 'end');
      const n = await ns.until('end');
      assert.deepEqual(
        n.filter((s) => s.subject.startsWith('$app')).map((s) => [s.subject, s.data]),
        [
          ['$app.x', 'dollar from NATS'],
          ['$app.y', 'dollar from MQTT'],
        ],
      );
      const m = await sub.until('end');
      // `$app/#` sees both; `#` neither [MQTT-4.7.2-1], so each arrives once.
      assert.deepEqual(
        m.filter((p) => p.topic.startsWith('$app')).map((p) => [p.topic, p.payload.toString()]),
        [
          ['$app/x', 'dollar from NATS'],
          ['$app/y', 'dollar from MQTT'],
        ],
      );
    } finally {
      ns.sub.unsubscribe();
      await sub.c.endAsync();
      await pub.endAsync();
    }
  });

  it('an AMQP queue bound on amq.topic receives NATS publishes (routing key = subject; AMQP # matches zero words)', async () => {
    await f.ch.assertQueue('xn-hash', { exclusive: true });
    await f.ch.bindQueue('xn-hash', 'amq.topic', 'orders.#');
    await f.ch.assertQueue('xn-star', { exclusive: true });
    await f.ch.bindQueue('xn-star', 'amq.topic', '*.v1/2.*');
    f.nc.publish('orders.eu.1', 'o1');
    f.nc.publish('orders', 'orders itself');
    f.nc.publish('ordersx.eu', 'no');
    f.nc.publish('other.orders', 'no');
    f.nc.publish('dev.v1/2.temp', 'slash in a word');
    f.nc.publish('dev.v1.2.temp', 'no');
    f.nc.publish('orders.end', 'end');
    f.nc.publish('dev.v1/2.end', 'end');
    await f.nc.flush();
    const hash = await takeUntil(f.ch, 'xn-hash', 'end');
    assert.deepEqual(
      hash.map((m) => [m.fields.exchange, m.fields.routingKey, m.content.toString()]),
      [
        ['amq.topic', 'orders.eu.1', 'o1'],
        ['amq.topic', 'orders', 'orders itself'],
      ],
    );
    // A NATS publish says nothing about persistence: no delivery-mode; and it has no headers.
    assert.equal(hash[0]!.properties.deliveryMode, undefined);
    assert.equal(hash[0]!.properties.headers, undefined);
    const star = await takeUntil(f.ch, 'xn-star', 'end');
    assert.deepEqual(
      star.map((m) => [m.fields.routingKey, m.content.toString()]),
      [['dev.v1/2.temp', 'slash in a word']],
    );
  });

  it('AMQP publishes on amq.topic reach NATS subscribers (other exchanges do not)', async () => {
    const ns = natsCollector(f.nc, 'a2n.*');
    await f.nc.flush();
    f.ch.publish('amq.topic', 'a2n.one', Buffer.from('one'));
    f.ch.publish('amq.topic', 'a2n.one.two', Buffer.from('no'));
    await f.ch.assertExchange('xn.other', 'topic', { durable: false, autoDelete: true });
    f.ch.publish('xn.other', 'a2n.two', Buffer.from('other exchange'));
    f.ch.publish('amq.topic', 'a2n.end', Buffer.from('end'));
    const got = await ns.until('end');
    assert.deepEqual(
      got.map((s) => [s.subject, s.data, s.headers]),
      [['a2n.one', 'one', null]],
    );
    ns.sub.unsubscribe();
  });

  it('a NATS publish is captured by a stream and read by a KafkaJS consumer; a Kafka produce reaches NATS subscribers', async () => {
    await f.broker.api('POST', '/api/v1/streams', { name: 'nats-orders', partitions: 1, bindings: ['norders/#'] });
    const kafka = new Kafka({ brokers: [f.broker.kafka], clientId: 'xn', logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
    const live = natsCollector(f.nc, 'nats-orders');
    await f.nc.flush();

    f.nc.publish('norders.eu.1', 'o-1');
    f.nc.publish('norders', 'the parent'); // MQTT # binding: captured too
    f.nc.publish('nordersx.eu', 'not captured');
    f.nc.publish('norders.v1/2', 'slash in a token');
    f.nc.publish('norders.end', 'end');
    await f.nc.flush();

    const consumer = kafka.consumer({ groupId: 'xn-readers', maxWaitTimeInMs: 200 });
    await consumer.connect();
    const got: Array<{ value: string; topic: string | undefined }> = [];
    try {
      await consumer.subscribe({ topic: 'nats-orders', fromBeginning: true });
      await consumer.run({
        eachMessage: async ({ message }) => {
          got.push({ value: String(message.value), topic: message.headers?.['flowmq.topic']?.toString() });
        },
      });
      await eventually(() => got.some((g) => g.value === 'end'), 30_000, 'the Kafka consumer reads the marker');
    } finally {
      await consumer.disconnect();
    }
    // The record header flowmq.topic names each message's unified topic.
    assert.deepEqual(got, [
      { value: 'o-1', topic: 'norders/eu/1' },
      { value: 'the parent', topic: 'norders' },
      { value: 'slash in a token', topic: 'norders/v1.2' },
      { value: 'end', topic: 'norders/end' },
    ]);

    // Kafka → NATS: a produce to the stream reaches live subscribers of the stream's own subject.
    const producer = kafka.producer();
    await producer.connect();
    try {
      await producer.send({ topic: 'nats-orders', acks: -1, messages: [{ value: 'from kafka' }, { value: 'end' }] });
    } finally {
      await producer.disconnect();
    }
    const fromKafka = await live.until('end');
    assert.deepEqual(
      fromKafka.map((s) => [s.subject, s.data, s.reply]),
      [['nats-orders', 'from kafka', '']],
    );
    live.sub.unsubscribe();
  });

  it('a NATS queue group holds only NATS members: each message once among them; an MQTT $share group of the same name is a group of its own', async () => {
    const nc2 = await connectNats(f.broker, { name: 'worker-2' });
    const nc3 = await connectNats(f.broker, { name: 'worker-3' });
    const members = [
      natsCollector(f.nc, 'jobs.*', { queue: 'workers' }),
      natsCollector(nc2, 'jobs.*', { queue: 'workers' }),
      natsCollector(nc3, 'jobs.*', { queue: 'workers' }),
    ];
    const plain = natsCollector(nc2, 'jobs.*');
    // Same group name and an equivalent filter, but MQTT: a separate group that gets every message too.
    const shared = await mqttCollector(f.broker.mqttUrl, ['$share/workers/jobs/+']);
    await Promise.all([f.nc.flush(), nc2.flush(), nc3.flush()]);
    const pub = await mqtt.connectAsync(f.broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
    try {
      const sent: string[] = [];
      // Publishers of three protocols feed the group.
      for (let i = 0; i < 10; i++) {
        sent.push(`m${i}`, `n${i}`, `a${i}`);
        await pub.publishAsync(`jobs/m${i}`, `m${i}`, { qos: 1 });
        f.nc.publish(`jobs.n${i}`, `n${i}`);
        f.ch.publish('amq.topic', `jobs.a${i}`, Buffer.from(`a${i}`));
      }
      await f.nc.flush();
      await eventually(() => members.reduce((n, m) => n + m.got.length, 0) >= sent.length, 15_000, 'every job delivered to the queue group');
      await eventually(
        () => plain.got.length >= sent.length && shared.got.length >= sent.length,
        15_000,
        'every job to the plain and the MQTT shared subscriber',
      );
      const all = members.flatMap((m) => m.got.map((s) => s.data));
      assert.deepEqual([...all].sort(), [...sent].sort(), 'each message exactly once in the NATS queue group');
      for (const [i, m] of members.entries()) assert.ok(m.got.length > 0, `member ${i + 1} got a share`);
      assert.deepEqual(plain.got.map((s) => s.data).sort(), [...sent].sort());
      assert.deepEqual(shared.got.map((p) => p.payload.toString()).sort(), [...sent].sort());
    } finally {
      await pub.endAsync();
      await shared.c.endAsync();
      await nc2.close();
      await nc3.close();
      members[0]!.sub.unsubscribe();
    }
  });
});
