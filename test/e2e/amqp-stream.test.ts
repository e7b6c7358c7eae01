/**
 * x-queue-type=stream end to end: a stream queue is a FlowMQ stream; AMQP consumers read it from an offset
 * (x-stream-offset) any number of times, MQTT publishes on its name land in it too.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import kafkajsPkg from 'kafkajs';
import { amqpFixture, take } from './amqp-helpers.js';
import { eventually } from './harness.js';

const { Kafka, logLevel, ConfigResourceTypes } = kafkajsPkg;
const MIB = 1024 * 1024;

describe('e2e: AMQP stream queues', () => {
  const f = amqpFixture({ connect: true });

  it('declare, publish, and read from first / an offset / next, with x-stream-offset on every delivery', async () => {
    const ch = await f.conn.createConfirmChannel();
    const ok = await ch.assertQueue('events', { durable: true, arguments: { 'x-queue-type': 'stream' } });
    assert.equal(ok.messageCount, 0);
    for (let i = 0; i < 10; i++) ch.sendToQueue('events', Buffer.from(`e${i}`), { messageId: `m${i}` });
    await ch.waitForConfirms();
    assert.equal((await ch.checkQueue('events')).messageCount, 10);
    await ch.prefetch(3);
    /** Consumes n messages from `offset`; `started` resolves with consume-ok. */
    const reader = (offset: unknown, n: number) => {
      const got: Array<{ body: string; offset: unknown; id: unknown }> = [];
      let started!: Promise<string>;
      const done = new Promise<typeof got>((resolve, reject) => {
        started = ch
          .consume(
            'events',
            (m) => {
              if (m === null) return;
              got.push({ body: m.content.toString(), offset: m.properties.headers?.['x-stream-offset'], id: m.properties.messageId });
              ch.ack(m);
              if (got.length === n) void started.then((t) => ch.cancel(t)).then(() => resolve(got), reject);
            },
            { arguments: { 'x-stream-offset': offset } },
          )
          .then((r) => r.consumerTag);
      });
      return { started, done };
    };
    const readFrom = (offset: unknown, n: number) => reader(offset, n).done;
    const all = await readFrom('first', 10);
    assert.deepEqual(
      all.map((g) => g.body),
      [...Array(10).keys()].map((i) => `e${i}`),
    );
    assert.deepEqual(
      all.map((g) => g.offset),
      [...Array(10).keys()],
    );
    assert.equal(all[3]!.id, 'm3');
    const tail = await readFrom(7, 3);
    assert.deepEqual(
      tail.map((g) => g.body),
      ['e7', 'e8', 'e9'],
    );
    // 'next': only what is published after the consumer started; an MQTT publish on the stream's name counts.
    const next = reader('next', 2);
    await next.started;
    const client = await mqtt.connectAsync(f.broker.mqttUrl);
    await client.publishAsync('events', 'from mqtt', { qos: 1 });
    await client.endAsync();
    ch.sendToQueue('events', Buffer.from('e10'));
    const got = await next.done;
    assert.deepEqual(got.map((g) => g.body).sort(), ['e10', 'from mqtt']);
    await ch.close();
  });

  it('a stream queue must be durable; deleting it deletes the stream', async () => {
    const ch = await f.conn.createChannel();
    ch.on('error', () => undefined);
    await assert.rejects(ch.assertQueue('bad-stream', { durable: false, arguments: { 'x-queue-type': 'stream' } }), /406/);
    const ch2 = await f.conn.createChannel();
    await ch2.assertQueue('short', { durable: true, arguments: { 'x-queue-type': 'stream' } });
    ch2.sendToQueue('short', Buffer.from('x'));
    const del = await ch2.deleteQueue('short');
    assert.ok(del.messageCount <= 1);
    ch2.on('error', () => undefined);
    await assert.rejects(ch2.checkQueue('short'), /404/);
  });

  it("retention arguments (x-max-age, x-max-length-bytes, x-stream-max-segment-size-bytes) are the stream's settings, as Kafka sees them", async () => {
    const ch = await f.conn.createChannel();
    const args = { 'x-queue-type': 'stream', 'x-max-age': '7D', 'x-max-length-bytes': MIB, 'x-stream-max-segment-size-bytes': MIB };
    await ch.assertQueue('kept', { durable: true, arguments: args });
    const kafka = new Kafka({ clientId: 'stream-args', brokers: [f.broker.kafka], logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    try {
      const described = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: 'kept' }], includeSynonyms: false });
      const config = Object.fromEntries(described.resources[0]!.configEntries.map((e) => [e.configName, e.configValue]));
      assert.equal(config['retention.ms'], String(7 * 86_400_000));
      assert.equal(config['retention.bytes'], String(MIB));
      assert.equal(config['segment.bytes'], String(MIB));
    } finally {
      await admin.disconnect();
    }
    // The same declare again is fine; a different value is RabbitMQ's 406 inequivalent arg.
    await ch.assertQueue('kept', { durable: true, arguments: args });
    ch.on('error', () => undefined);
    await assert.rejects(
      ch.assertQueue('kept', { durable: true, arguments: { ...args, 'x-max-age': '1D' } }),
      /406 \(PRECONDITION-FAILED\).*inequivalent arg 'x-max-age'/,
    );
    const ch2 = await f.conn.createChannel();
    ch2.on('error', () => undefined);
    await assert.rejects(
      ch2.assertQueue('ttl-stream', { durable: true, arguments: { 'x-queue-type': 'stream', 'x-message-ttl': 1000 } }),
      /406.*invalid arg 'x-message-ttl'/,
    );
    const ch3 = await f.conn.createChannel();
    ch3.on('error', () => undefined);
    await assert.rejects(ch3.assertQueue('bad-age', { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '7 days' } }), /406.*x-max-age/);
    // Size retention at work: 3.5 MiB in segments of 1 MiB (FlowMQ's smallest); the oldest whole segments go while
    // the stream still holds 1 MiB without them, so a reader from `first` starts past the beginning.
    const pub = await f.conn.createConfirmChannel();
    for (let i = 0; i < 70; i++) pub.sendToQueue('kept', Buffer.alloc(50 * 1024, i));
    await pub.waitForConfirms();
    await eventually(
      async () => {
        const c = await f.conn.createChannel();
        await c.prefetch(1);
        const first = await new Promise<number>((resolve) => {
          void c.consume('kept', (m) => m !== null && resolve(Number(m.properties.headers?.['x-stream-offset'])), {
            arguments: { 'x-stream-offset': 'first' },
          });
        });
        await c.close();
        return first > 0;
      },
      30_000,
      'size retention removed the oldest segments',
    );
    await pub.close();
  });

  it("x-stream-offset as an interval (1h): what was published in the last hour, by the records' timestamps", async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('recent', { durable: true, arguments: { 'x-queue-type': 'stream' } });
    // Kafka producers set record timestamps: two records from three hours ago, then two of now.
    const kafka = new Kafka({ clientId: 'stream-interval', brokers: [f.broker.kafka], logLevel: logLevel.NOTHING });
    const producer = kafka.producer();
    await producer.connect();
    const old = String(Date.now() - 3 * 3_600_000);
    await producer.send({
      topic: 'recent',
      messages: [
        { value: 'old-1', timestamp: old },
        { value: 'old-2', timestamp: old },
      ],
    });
    await producer.send({ topic: 'recent', messages: [{ value: 'new-1' }, { value: 'new-2' }] });
    await producer.disconnect();
    await ch.prefetch(10);
    const read = (offset: unknown) =>
      new Promise<string[]>((resolve) => {
        const got: string[] = [];
        void ch.consume(
          'recent',
          (m) => {
            if (m === null) return;
            got.push(m.content.toString());
            ch.ack(m);
            if (got.at(-1) === 'new-2') resolve(got);
          },
          { arguments: { 'x-stream-offset': offset } },
        );
      });
    assert.deepEqual(await read('1h'), ['new-1', 'new-2']);
    assert.deepEqual(await read('4h'), ['old-1', 'old-2', 'new-1', 'new-2']);
    await ch.close();
  });

  it('take() still works on classic queues next to streams', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('classic-beside', { exclusive: true });
    ch.sendToQueue('classic-beside', Buffer.from('c'));
    assert.equal((await take(ch, 'classic-beside', 1))[0]!.content.toString(), 'c');
    await ch.close();
  });
});
