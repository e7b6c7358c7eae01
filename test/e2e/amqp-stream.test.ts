/**
 * x-queue-type=stream end to end: a stream queue is a FlowMQ stream; AMQP consumers read it from an offset
 * (x-stream-offset) any number of times, MQTT publishes on its name land in it too.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import { amqpFixture, take } from './amqp-helpers.js';

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

  it('take() still works on classic queues next to streams', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('classic-beside', { exclusive: true });
    ch.sendToQueue('classic-beside', Buffer.from('c'));
    assert.equal((await take(ch, 'classic-beside', 1))[0]!.content.toString(), 'c');
    await ch.close();
  });
});
