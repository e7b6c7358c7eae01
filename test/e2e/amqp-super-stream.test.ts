/**
 * RabbitMQ super streams over AMQP 0-9-1 (src/protocols/amqp/super-stream.ts): the topology declared by hand with
 * amqplib (a direct exchange with x-super-stream, stream queues `S-<key>`, bindings with x-stream-partition-order) is
 * ONE FlowMQ stream of N partitions, which KafkaJS reads and writes as a topic of N partitions; a FlowMQ stream of N
 * partitions made by Kafka is seen by AMQP as a super stream.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import type { Channel, ConsumeMessage } from 'amqplib';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { AckPolicy } from 'nats';
import { amqpFixture, connectAmqp } from './amqp-helpers.js';
import { crossFixture } from './cross-nats-helpers.js';
import { ROOT } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;
// Debian's interpreter, where python3-pika is installed (a python3 earlier in PATH may be another one).
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const PIKA_SCRIPT = join(ROOT, 'test/e2e/amqp-super-stream-pika.py');

/** Declares a super stream as RabbitMQ's tools do: the exchange, then each partition queue and its binding. */
async function declareSuperStream(ch: Channel, name: string, keys: string[], queueArgs: Record<string, unknown> = {}): Promise<void> {
  await ch.assertExchange(name, 'direct', { durable: true, arguments: { 'x-super-stream': true } });
  for (const k of keys) await ch.assertQueue(`${name}-${k}`, { durable: true, arguments: { 'x-queue-type': 'stream', ...queueArgs } });
  for (const [i, k] of keys.entries()) await ch.bindQueue(`${name}-${k}`, name, k, { 'x-stream-partition-order': i });
}

/** Reads `queue` from offset `first` until the body `marker` arrives (prefetch set, as RabbitMQ requires). */
async function readUntil(ch: Channel, queue: string, marker: string): Promise<ConsumeMessage[]> {
  await ch.prefetch(100);
  const got: ConsumeMessage[] = [];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out reading ${queue}: ${got.map((m) => m.content.toString()).join(',')}`)), 15_000);
    let tag: Promise<string> | null = null;
    tag = ch
      .consume(
        queue,
        (m) => {
          if (m === null) return;
          ch.ack(m);
          if (m.content.toString() === marker) {
            clearTimeout(timer);
            void tag!.then((t) => ch.cancel(t)).then(() => resolve(got), reject);
          } else got.push(m);
        },
        { arguments: { 'x-stream-offset': 'first' } },
      )
      .then((r) => r.consumerTag);
    tag.catch(reject);
  });
}

/** A channel whose errors (a refused method closes it) are left to the returned promise. */
async function quietChannel(f: { conn: { createChannel(): Promise<Channel> } }): Promise<Channel> {
  const ch = await f.conn.createChannel();
  ch.on('error', () => undefined);
  return ch;
}

describe('e2e: AMQP super streams', () => {
  // No KIP-134 wait for the one-member Kafka group below (3 s otherwise).
  const f = amqpFixture({ connect: true, args: ['--kafka-group-initial-rebalance-delay', '0'] });

  it('a hand-declared super stream is one stream of N partitions: routing keys pick partitions, partition queues read them, Kafka sees N partitions', async () => {
    const ch = await f.conn.createConfirmChannel();
    await declareSuperStream(ch, 'invoices', ['0', '1', '2']);
    // Publishing to the exchange with a partition's key lands in that partition.
    for (let i = 0; i < 9; i++) ch.publish('invoices', String(i % 3), Buffer.from(`inv-${i}`), { messageId: `m${i}` });
    await ch.waitForConfirms();
    for (let p = 0; p < 3; p++) {
      assert.equal((await ch.checkQueue(`invoices-${p}`)).messageCount, 3, `invoices-${p}`);
      ch.publish('invoices', String(p), Buffer.from('end'));
    }
    await ch.waitForConfirms();
    for (let p = 0; p < 3; p++) {
      const got = await readUntil(ch, `invoices-${p}`, 'end');
      assert.deepEqual(
        got.map((m) => m.content.toString()),
        [p, p + 3, p + 6].map((i) => `inv-${i}`),
      );
      assert.deepEqual(
        got.map((m) => m.properties.headers?.['x-stream-offset']),
        [0, 1, 2],
      );
      assert.equal(got[0]!.fields.exchange, 'invoices');
      assert.equal(got[0]!.fields.routingKey, String(p));
    }
    // A key no partition has is unroutable: a mandatory publish comes back.
    const returned = new Promise<string>((resolve) => ch.once('return', (m: ConsumeMessage) => resolve(m.fields.routingKey)));
    ch.publish('invoices', 'nope', Buffer.from('x'), { mandatory: true });
    assert.equal(await returned, 'nope');
    // Kafka: the topic invoices with 3 partitions, holding what AMQP put in each.
    const kafka = new Kafka({ clientId: 'super', brokers: [f.broker.kafka], logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    const meta = await admin.fetchTopicMetadata({ topics: ['invoices'] });
    assert.equal(meta.topics[0]!.partitions.length, 3);
    const offsets = await admin.fetchTopicOffsets('invoices');
    assert.deepEqual(offsets.map((o) => [o.partition, o.high]).sort(), [
      [0, '4'],
      [1, '4'],
      [2, '4'],
    ]);
    // A Kafka record produced to partition 2 is read by the AMQP consumer of invoices-2.
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({
      topic: 'invoices',
      messages: [
        { partition: 2, value: 'from-kafka' },
        { partition: 2, value: 'end2' },
      ],
    });
    await producer.disconnect();
    const p2 = await readUntil(ch, 'invoices-2', 'end2');
    assert.equal(p2.at(-1)!.content.toString(), 'from-kafka');
    // A Kafka consumer reads the AMQP publishes from each partition.
    const consumer = kafka.consumer({ groupId: 'super-readers' });
    await consumer.connect();
    await consumer.subscribe({ topics: ['invoices'], fromBeginning: true });
    const seen: Array<[number, string]> = [];
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`kafka read ${seen.length}`)), 20_000);
      void consumer.run({
        eachMessage: async ({ partition, message }) => {
          seen.push([partition, message.value!.toString()]);
          if (seen.length === 14) {
            clearTimeout(timer);
            resolve();
          }
        },
      });
    });
    await consumer.disconnect();
    await admin.disconnect();
    for (let i = 0; i < 9; i++)
      assert.ok(
        seen.some(([p, v]) => p === i % 3 && v === `inv-${i}`),
        `inv-${i} in partition ${i % 3}`,
      );
    await ch.close();
  });

  it('routing keys name the partitions (add_super_stream --routing-keys): S-<key>, indexes in declaration order', async () => {
    const ch = await f.conn.createConfirmChannel();
    await declareSuperStream(ch, 'regions', ['amer', 'emea', 'apac']);
    ch.publish('regions', 'emea', Buffer.from('to-emea'));
    ch.publish('regions', 'emea', Buffer.from('end'));
    // The default exchange reaches a partition queue by its name, as RabbitMQ's does.
    ch.sendToQueue('regions-apac', Buffer.from('to-apac'));
    ch.sendToQueue('regions-apac', Buffer.from('end'));
    await ch.waitForConfirms();
    assert.deepEqual(
      (await readUntil(ch, 'regions-emea', 'end')).map((m) => m.content.toString()),
      ['to-emea'],
    );
    assert.deepEqual(
      (await readUntil(ch, 'regions-apac', 'end')).map((m) => m.content.toString()),
      ['to-apac'],
    );
    assert.equal((await ch.checkQueue('regions-amer')).messageCount, 0);
    const kafka = new Kafka({ clientId: 'super-keys', brokers: [f.broker.kafka], logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    const offsets = await admin.fetchTopicOffsets('regions');
    assert.deepEqual(offsets.map((o) => [o.partition, o.high]).sort(), [
      [0, '0'],
      [1, '2'],
      [2, '2'],
    ]);
    // Partition queues declared at once, on several channels: one partition each.
    await ch.assertExchange('burst', 'direct', { durable: true, arguments: { 'x-super-stream': true } });
    const keys = ['k0', 'k1', 'k2', 'k3', 'k4'];
    const chans = await Promise.all(keys.map(() => f.conn.createChannel()));
    await Promise.all(chans.map((c, i) => c.assertQueue(`burst-${keys[i]}`, { durable: true, arguments: { 'x-queue-type': 'stream' } })));
    for (const k of keys) ch.publish('burst', k, Buffer.from(k));
    await ch.waitForConfirms();
    const burst = await admin.fetchTopicOffsets('burst');
    assert.deepEqual(
      burst.map((o) => o.high),
      ['1', '1', '1', '1', '1'],
    );
    await Promise.all(chans.map((c) => c.close()));
    await admin.disconnect();
    await ch.close();
  });

  it('a Kafka topic of N partitions is a super stream for AMQP: passive declares, publish by key, partition queues', async () => {
    const kafka = new Kafka({ clientId: 'super-topic', brokers: [f.broker.kafka], logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: 'orders', numPartitions: 4 }] });
    await admin.disconnect();
    const ch = await f.conn.createConfirmChannel();
    await ch.checkExchange('orders');
    for (let p = 0; p < 4; p++) assert.equal((await ch.checkQueue(`orders-${p}`)).messageCount, 0);
    ch.publish('orders', '3', Buffer.from('o3'));
    ch.publish('orders', '3', Buffer.from('end'));
    await ch.waitForConfirms();
    assert.deepEqual(
      (await readUntil(ch, 'orders-3', 'end')).map((m) => m.content.toString()),
      ['o3'],
    );
    // Declaring the exchange as RabbitMQ's tools do (then the queues) keeps the same partitions.
    await declareSuperStream(ch, 'orders', ['0', '1', '2', '3']);
    assert.equal((await ch.checkQueue('orders-3')).messageCount, 2);
    await assert.rejects(
      quietChannel(f).then((c) => c.checkQueue('orders-4')),
      /404/,
    );
    // FlowMQ's control plane makes one too (`flowmq stream create NAME --partitions N` calls the same admin API).
    await f.broker.api('POST', '/api/v1/streams', { name: 'shipments', partitions: 2 });
    await ch.checkExchange('shipments');
    assert.equal((await ch.checkQueue('shipments-1')).messageCount, 0);
    await assert.rejects(
      quietChannel(f).then((c) => c.checkQueue('shipments-2')),
      /404/,
    );
    // The stream itself reads one partition only: refused rather than half read.
    const c2 = await quietChannel(f);
    await assert.rejects(
      c2.consume('orders', () => undefined),
      /406/,
    );
    await ch.close();
  });

  it('edge cases: inequivalent args and bindings are 406; deleting partition queues deletes the stream with the last', async () => {
    const ch = await f.conn.createChannel();
    await declareSuperStream(ch, 'edges', ['0', '1'], { 'x-max-age': '7D' });
    // Same arguments again: fine (RabbitMQ's declare is idempotent).
    await ch.assertQueue('edges-1', { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '7D' } });
    const bad = [
      (c: Channel) => c.assertQueue('edges-1', { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '1D' } }),
      (c: Channel) => c.assertQueue('edges-1', { durable: true, arguments: { 'x-queue-type': 'classic' } }),
      (c: Channel) => c.assertQueue('edges-1', { durable: true }),
      // A plain stream queue too: declared again without its type is 406, not a classic queue beside the stream.
      (c: Channel) =>
        c.assertQueue('plain-stream', { durable: true, arguments: { 'x-queue-type': 'stream' } }).then(() => c.assertQueue('plain-stream', { durable: true })),
      (c: Channel) => c.assertQueue('edges-1', { durable: false, arguments: { 'x-queue-type': 'stream' } }),
      (c: Channel) => c.bindQueue('edges-1', 'edges', '1', { 'x-stream-partition-order': 0 }),
      (c: Channel) => c.unbindQueue('edges-1', 'edges', '1'),
      // A new partition with other settings than the stream's.
      (c: Channel) => c.assertQueue('edges-2', { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '1h' } }),
    ];
    for (const [i, call] of bad.entries()) {
      const c = await quietChannel(f);
      await assert.rejects(call(c), /406/, `case ${i}`);
    }
    // Another key for a partition (as RabbitMQ allows): routes to it, names no queue, and can be unbound.
    await ch.bindQueue('edges-1', 'edges', 'other', { 'x-stream-partition-order': 1 });
    ch.publish('edges', 'other', Buffer.from('via-other-key'));
    await assert.rejects(
      quietChannel(f).then((c) => c.checkQueue('edges-other')),
      /404/,
    );
    await ch.unbindQueue('edges-1', 'edges', 'other', { 'x-stream-partition-order': 1 });
    // Binding a partition queue to another exchange pins that partition.
    await ch.assertExchange('edges-fan', 'fanout', { durable: true });
    await ch.bindQueue('edges-1', 'edges-fan', '');
    ch.publish('edges-fan', 'anything', Buffer.from('via-fanout'));
    ch.publish('edges-fan', 'anything', Buffer.from('end'));
    assert.deepEqual(
      (await readUntil(ch, 'edges-1', 'end')).map((m) => m.content.toString()),
      ['via-other-key', 'via-fanout'],
    );
    const back = new Promise<string>((resolve) => ch.once('return', (m: ConsumeMessage) => resolve(m.fields.routingKey)));
    ch.publish('edges', 'other', Buffer.from('x'), { mandatory: true });
    assert.equal(await back, 'other', 'unbound');
    assert.equal((await ch.checkQueue('edges-0')).messageCount, 0);
    // Deleting one partition queue: gone for AMQP, the stream stays; deleting the last deletes the stream.
    const del = await ch.deleteQueue('edges-0');
    assert.equal(del.messageCount, 0);
    await assert.rejects(
      quietChannel(f).then((c) => c.checkQueue('edges-0')),
      /404/,
    );
    const kafka = new Kafka({ clientId: 'super-edges', brokers: [f.broker.kafka], logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    assert.ok((await admin.listTopics()).includes('edges'));
    assert.equal((await ch.deleteQueue('edges-1')).messageCount, 3);
    assert.ok(!(await admin.listTopics()).includes('edges'));
    // RabbitMQ's teardown order (delete_super_stream: the exchange, then each partition queue) deletes it too.
    await declareSuperStream(ch, 'td', ['0', '1', '2']);
    await ch.deleteExchange('td');
    await ch.checkQueue('td-1');
    for (const q of ['td-0', 'td-1', 'td-2']) await ch.deleteQueue(q);
    assert.ok(!(await admin.listTopics()).includes('td'));
    await admin.disconnect();
    await ch.close();
  });

  it('a super stream survives a broker restart, key-named partitions included', async () => {
    const ch = await f.conn.createConfirmChannel();
    await declareSuperStream(ch, 'kept', ['x', 'y']);
    ch.publish('kept', 'y', Buffer.from('before'));
    await ch.waitForConfirms();
    await ch.close();
    await f.conn.close();
    f.broker = await f.broker.restart();
    f.conn = await connectAmqp(f.broker);
    const ch2 = await f.conn.createConfirmChannel();
    ch2.publish('kept', 'y', Buffer.from('end'));
    await ch2.waitForConfirms();
    assert.deepEqual(
      (await readUntil(ch2, 'kept-y', 'end')).map((m) => m.content.toString()),
      ['before'],
    );
    assert.equal((await ch2.checkQueue('kept-x')).messageCount, 0);
    await ch2.close();
  });
});

describe('e2e: AMQP super streams with pika and JetStream', () => {
  const f = crossFixture('super-stream');

  it('pika declares and uses a super stream as on RabbitMQ (test/interop/rabbitmq-super-stream compares the two)', async () => {
    const out = await new Promise<string>((resolve, reject) =>
      execFile(PYTHON, [PIKA_SCRIPT, String(f.broker.ports.amqp), 'pk'], { timeout: 60_000 }, (err, stdout, stderr) =>
        err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout),
      ),
    );
    const r = JSON.parse(out) as Record<string, unknown>;
    assert.deepEqual(r.partitions, [
      [
        ['m0', 0, '0', 'pk'],
        ['m3', 1, '0', 'pk'],
      ],
      [
        ['m1', 0, '1', 'pk'],
        ['m4', 1, '1', 'pk'],
      ],
      [
        ['m2', 0, '2', 'pk'],
        ['m5', 1, '2', 'pk'],
      ],
    ]);
    // As RabbitMQ 3.10 answers (see docs/amqp.md for the differences: message counts, extra bindings).
    assert.equal(r.unroutable, 'returned');
    assert.equal(r.redeclare_same, 'ok');
    assert.equal(r.redeclare_other_age, 406);
    assert.equal(r.redeclare_classic, 406);
    assert.equal(r.redeclare_transient, 406);
    assert.equal(r.redeclare_no_type, 406);
    assert.equal(r.exchange_passive, 'ok');
    assert.equal(r.exchange_other_type, 406);
    assert.equal(r.get_from_partition, 'connection 540');
    assert.equal(r.passive_deleted_0, 404);
    assert.equal(r.publish_deleted_0, 'returned');
    // FlowMQ's own answers: a stream queue counts its records; another order for a partition's binding is refused.
    assert.deepEqual(r.passive_counts, [2, 2, 2]);
    assert.equal(r.delete_partition_0, 2);
    assert.equal(r.bind_other_key, 'ok');
    assert.equal(r.bind_other_order, 406);
    assert.equal(r.queue_named_as_stream, 'ok', "the stream's own name is a queue for declare and delete (RabbitMQ: 404)");
    // The script deleted every partition queue: the stream went with the last.
    await assert.rejects((await f.nc.jetstreamManager()).streams.info('pk'), /not found/);
  });

  it('JetStream reads a one-partition super stream, and one of several partitions (sequence offset * 3 + partition + 1)', async () => {
    const ch = await f.conn.createConfirmChannel();
    await declareSuperStream(ch, 'solo', ['0']);
    await declareSuperStream(ch, 'multi', ['0', '1', '2']);
    ch.publish('solo', '0', Buffer.from('s1'));
    ch.publish('solo', '0', Buffer.from('s2'));
    for (let i = 0; i < 3; i++) ch.publish('multi', String(i), Buffer.from(`m${i}`));
    await ch.waitForConfirms();
    await ch.close();
    const jsm = await f.nc.jetstreamManager();
    assert.equal((await jsm.streams.info('solo')).state.messages, 2);
    await jsm.consumers.add('solo', { durable_name: 'r', ack_policy: AckPolicy.Explicit });
    const c = await f.nc.jetstream().consumers.get('solo', 'r');
    const got: string[] = [];
    for await (const m of await c.fetch({ max_messages: 2, expires: 10_000 })) {
      got.push(m.string());
      m.ack();
    }
    assert.deepEqual(got, ['s1', 's2']);
    assert.equal((await jsm.streams.info('multi')).state.messages, 3);
    await jsm.consumers.add('multi', { durable_name: 'r', ack_policy: AckPolicy.Explicit });
    const mc = await f.nc.jetstream().consumers.get('multi', 'r');
    const multi: Array<[string, number]> = [];
    for await (const m of await mc.fetch({ max_messages: 3, expires: 10_000 })) {
      multi.push([m.string(), m.seq]);
      m.ack();
    }
    // One record in each partition, at offset 0: sequences 1, 2, 3 (docs/jetstream.md, "Multi-partition streams").
    assert.deepEqual(multi, [
      ['m0', 1],
      ['m1', 2],
      ['m2', 3],
    ]);
  });
});
