/**
 * AMQP stream queues in a tenant vhost (issue 29): a stream queue `orders` declared by amqplib in vhost t1 is t1's
 * stream (`t1~orders` inside), read by KafkaJS as topic `orders` by t1's user and absent from `default`'s and t2's
 * Metadata; Kafka records reach amqplib consumers of t1 with x-stream-offset; amq.topic bindings of t1 feed it with
 * t1's publishes only; the management API lists and makes stream queues in vhost t1; a super stream declared in
 * vhost t1 is t1's Kafka topic of its partitions.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import amqp, { type Channel, type ChannelModel, type ConsumeMessage } from 'amqplib';
import kafkajsPkg, { type Kafka as KafkaClient } from 'kafkajs';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { until } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;
type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe('e2e: AMQP stream queues in a tenant vhost are the namespace streams', { timeout: 60_000 }, () => {
  let dir = '';
  let broker: Broker;
  let amqpPort = 0;
  let kafkaAddr = '';
  let mgmt = '';
  const conns: ChannelModel[] = [];

  async function open(user: string, vhost: string): Promise<Channel> {
    const c = await amqp.connect(`amqp://${user}:${user}-pw@127.0.0.1:${amqpPort}/${encodeURIComponent(vhost)}?heartbeat=0`);
    conns.push(c);
    c.on('error', () => undefined);
    const ch = await c.createChannel();
    ch.on('error', () => undefined);
    return ch;
  }

  function kafka(user: string): KafkaClient {
    return new Kafka({
      clientId: `ns-${user}`,
      brokers: [kafkaAddr],
      sasl: { mechanism: 'plain', username: user, password: `${user}-pw` },
      logLevel: logLevel.NOTHING,
      retry: { retries: 2 },
      connectionTimeout: 5000,
    });
  }

  async function topics(user: string): Promise<string[]> {
    const admin = kafka(user).admin();
    await admin.connect();
    try {
      return (await admin.listTopics()).sort();
    } finally {
      await admin.disconnect();
    }
  }

  /** Reads `topic` from the beginning with a group of `user` until `want` records came. */
  async function kafkaRead(user: string, topic: string, groupId: string, want: number): Promise<string[]> {
    const consumer = kafka(user).consumer({ groupId, maxWaitTimeInMs: 100 });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const got: string[] = [];
    let done!: () => void;
    const finished = new Promise<void>((r) => (done = r));
    await consumer.run({
      eachMessage: async ({ message }) => {
        got.push(message.value?.toString() ?? '');
        if (got.length >= want) done();
      },
    });
    await Promise.race([finished, new Promise((_, reject) => setTimeout(() => reject(new Error(`${topic}: only ${got.join(',')}`)), 15_000))]);
    await consumer.disconnect();
    return got;
  }

  /** Reads the stream queue from `offset` with amqplib until `want` deliveries came. */
  async function amqpRead(ch: Channel, queue: string, offset: unknown, want: number): Promise<string[]> {
    const got: string[] = [];
    await ch.prefetch(100);
    const { consumerTag } = await ch.consume(
      queue,
      (m: ConsumeMessage | null) => {
        if (m === null) return;
        got.push(`${m.fields.routingKey}|${String(m.properties.headers?.['x-stream-offset'])}|${m.content}`);
        ch.ack(m);
      },
      { arguments: { 'x-stream-offset': offset } },
    );
    await until(() => assert.equal(got.length, want));
    await ch.cancel(consumerTag);
    return got;
  }

  const http = async (user: string, method: string, path: string, body?: unknown) => {
    const headers: Record<string, string> = { authorization: `Basic ${Buffer.from(`${user}:${user}-pw`).toString('base64')}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const r = await fetch(`${mgmt}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    return { status: r.status, json: (text === '' ? null : JSON.parse(text)) as Json };
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ns-amqp-streams-'));
    writeFileSync(
      join(dir, 'users.yaml'),
      [
        'users:',
        '  - {username: dee, password: dee-pw}',
        '  - {username: ann, password: ann-pw, namespace: t1}',
        '  - {username: bob, password: bob-pw, namespace: t2}',
        'namespaces:',
        '  - {name: t1}',
        '  - {name: t2}',
        '',
      ].join('\n'),
    );
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'amqp,kafka',
      'amqp-port': '0',
      'kafka-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
      'amqp-management-port': '0',
      'kafka-group-initial-rebalance-delay': '0',
      'kafka-auto-create-topics': 'false',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    amqpPort = broker.listeners.get('amqp')!.address().port;
    kafkaAddr = `127.0.0.1:${broker.listeners.get('kafka')!.address().port}`;
    mgmt = `http://127.0.0.1:${broker.ports()['amqp-management']}`;
  });

  after(async () => {
    for (const c of conns) await c.close().catch(() => undefined);
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("a stream queue declared in vhost t1 is t1's Kafka topic, not default's or t2's", async () => {
    const ann = await open('ann', 't1');
    const q = await ann.assertQueue('orders', { durable: true, arguments: { 'x-queue-type': 'stream' } });
    assert.equal(q.queue, 'orders');
    ann.sendToQueue('orders', Buffer.from('a1'));
    ann.sendToQueue('orders', Buffer.from('a2'));
    assert.deepEqual(await kafkaRead('ann', 'orders', 'g-ann', 2), ['a1', 'a2']);
    assert.ok((await topics('ann')).includes('orders'));
    assert.ok(!(await topics('dee')).includes('orders'));
    assert.ok(!(await topics('bob')).includes('orders'));
    // `/` has no `orders`: a passive declare there is 404, and so is t2's.
    for (const [u, v] of [
      ['dee', '/'],
      ['bob', 't2'],
    ]) {
      const ch = await open(u, v);
      await assert.rejects(ch.checkQueue('orders'), /404/);
    }
  });

  test('Kafka records of t1 reach amqplib consumers in vhost t1 from an x-stream-offset', async () => {
    const p = kafka('ann').producer();
    await p.connect();
    await p.send({ topic: 'orders', messages: [{ value: 'k1' }] });
    await p.disconnect();
    const ann = await open('ann', 't1');
    const first = await amqpRead(ann, 'orders', 'first', 3);
    assert.deepEqual(
      first.map((x) => x.split('|').slice(1).join('|')),
      ['0|a1', '1|a2', '2|k1'],
    );
    // AMQP publishes name the queue as t1 wrote it.
    assert.deepEqual(first.slice(0, 2), ['orders|0|a1', 'orders|1|a2']);
    assert.deepEqual(
      (await amqpRead(await open('ann', 't1'), 'orders', 2, 1)).map((x) => x.split('|').slice(1).join('|')),
      ['2|k1'],
    );
  });

  test("an amq.topic binding of t1's stream queue takes t1's publishes only", async () => {
    const ann = await open('ann', 't1');
    await ann.assertQueue('feed', { durable: true, arguments: { 'x-queue-type': 'stream' } });
    await ann.bindQueue('feed', 'amq.topic', 'feed.#');
    const dee = await open('dee', '/');
    dee.publish('amq.topic', 'feed.x', Buffer.from('from-default'));
    const c = await amqp.connect(`amqp://ann:ann-pw@127.0.0.1:${amqpPort}/t1?heartbeat=0`);
    conns.push(c);
    const confirm = await c.createConfirmChannel();
    confirm.publish('amq.topic', 'feed.x', Buffer.from('from-t1'));
    await confirm.waitForConfirms();
    // t1's record is the marker: `/`'s publish came first and is not before it.
    assert.deepEqual(await kafkaRead('ann', 'feed', 'g-feed', 1), ['from-t1']);
    assert.deepEqual(
      (await amqpRead(await open('ann', 't1'), 'feed', 'first', 1)).map((x) => x.split('|').slice(1).join('|')),
      ['0|from-t1'],
    );
  });

  test('the management API lists, makes and deletes stream queues in vhost t1', async () => {
    const q = await http('ann', 'GET', '/api/queues/t1/orders');
    assert.deepEqual([q.status, q.json.name, q.json.vhost, q.json.type, q.json.messages], [200, 'orders', 't1', 'stream', 3]);
    const t1 = (await http('ann', 'GET', '/api/queues/t1')).json as unknown as Json[];
    assert.ok(t1.some((x) => x.name === 'orders' && x.type === 'stream'));
    const root = (await http('dee', 'GET', '/api/queues/%2F')).json as unknown as Json[];
    assert.ok(!root.some((x) => x.name === 'orders' || String(x.name).includes('~')), JSON.stringify(root.map((x) => x.name)));
    assert.equal((await http('dee', 'GET', '/api/queues/%2F/orders')).status, 404);
    const b = (await http('ann', 'GET', '/api/queues/t1/feed/bindings')).json as unknown as Json[];
    assert.ok(
      b.some((x) => x.source === 'amq.topic' && x.routing_key === 'feed.#' && x.destination === 'feed'),
      JSON.stringify(b),
    );

    assert.equal((await http('ann', 'PUT', '/api/queues/t1/events', { durable: true, arguments: { 'x-queue-type': 'stream' } })).status, 201);
    assert.equal((await http('ann', 'PUT', '/api/queues/t1/events', { durable: true, arguments: { 'x-queue-type': 'stream' } })).status, 204);
    assert.ok((await topics('ann')).includes('events'));
    assert.ok(!(await topics('dee')).includes('events'));
    assert.equal((await http('bob', 'DELETE', '/api/queues/t2/events')).status, 404);
    assert.equal((await http('ann', 'DELETE', '/api/queues/t1/events')).status, 204);
    assert.ok(!(await topics('ann')).includes('events'));
  });

  test('queue.delete of a stream queue in t1 deletes t1 topic', async () => {
    const ann = await open('ann', 't1');
    await ann.assertQueue('gone', { durable: true, arguments: { 'x-queue-type': 'stream' } });
    assert.ok((await topics('ann')).includes('gone'));
    await ann.deleteQueue('gone');
    assert.ok(!(await topics('ann')).includes('gone'));
  });

  test("a super stream declared in vhost t1 is t1's Kafka topic of its partitions; its partition queues read one each", async () => {
    const ann = await open('ann', 't1');
    await ann.assertExchange('sup', 'direct', { durable: true, arguments: { 'x-super-stream': true } });
    for (const k of ['0', '1']) {
      const q = await ann.assertQueue(`sup-${k}`, { durable: true, arguments: { 'x-queue-type': 'stream' } });
      assert.equal(q.queue, `sup-${k}`);
    }
    const c = await amqp.connect(`amqp://ann:ann-pw@127.0.0.1:${amqpPort}/t1?heartbeat=0`);
    conns.push(c);
    const confirm = await c.createConfirmChannel();
    confirm.publish('sup', '0', Buffer.from('p0'));
    confirm.publish('sup', '1', Buffer.from('p1'));
    await confirm.waitForConfirms();
    assert.deepEqual((await kafkaRead('ann', 'sup', 'g-sup', 2)).sort(), ['p0', 'p1']);
    const admin = kafka('ann').admin();
    await admin.connect();
    const meta = await admin.fetchTopicMetadata({ topics: ['sup'] });
    await admin.disconnect();
    assert.equal(meta.topics[0].partitions.length, 2);
    assert.ok(!(await topics('dee')).includes('sup'));
    assert.deepEqual(await amqpRead(await open('ann', 't1'), 'sup-1', 'first', 1), ['1|0|p1']);
    // The management API lists the partition queues in vhost t1, under t1's names.
    const listed = ((await http('ann', 'GET', '/api/queues/t1')).json as unknown as Json[]).filter((x) => String(x.name).startsWith('sup-'));
    assert.deepEqual(
      listed.map((x) => [x.name, x.type, x.messages]),
      [
        ['sup-0', 'stream', 1],
        ['sup-1', 'stream', 1],
      ],
    );
    // `/` has no such super stream.
    const dee = await open('dee', '/');
    await assert.rejects(dee.checkExchange('sup'), /404/);
    // Deleting the partition queues deletes t1's stream.
    await ann.deleteQueue('sup-0');
    await ann.deleteQueue('sup-1');
    assert.ok(!(await topics('ann')).includes('sup'));
  });
});
