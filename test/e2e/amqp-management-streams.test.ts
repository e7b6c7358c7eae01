/**
 * Stream queues in the RabbitMQ management API (--amqp-management-port): an amqplib client declares a stream queue
 * (x-queue-type=stream) and a super stream laid out as RabbitMQ's tools lay one out (the exchange with
 * x-super-stream, queues `S-<key>` bound with x-stream-partition-order), publishes and consumes; the listings,
 * bindings, definitions and DELETE are checked as RabbitMQ 3.10.8 answers them (test/interop/rabbitmq-management).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { amqpUrl, startAmqpBroker } from './amqp-helpers.js';
import { eventually, type FlowmqProcess } from './harness.js';

const USERS = `
users:
  - {username: root, password: root-pw, groups: [admins]}
  - {username: alice, password: alice-pw}
policies:
  - {name: alice-own, effect: allow, actions: [publish, subscribe, create, describe, delete], resources: ["queue:alice-*"], principals: ["user:alice"]}
`;

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe('RabbitMQ management API: stream queues and super streams (bin/flowmq, amqplib)', { timeout: 60_000 }, () => {
  let broker: FlowmqProcess;
  let dir: string;
  let conn: ChannelModel;
  let ch: ConfirmChannel;
  let base: string;

  const http = async (path: string, opts: { user?: string; pass?: string; method?: string; body?: unknown } = {}) => {
    const auth = 'Basic ' + Buffer.from(`${opts.user ?? 'root'}:${opts.pass ?? 'root-pw'}`).toString('base64');
    const headers: Record<string, string> = { authorization: auth };
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const res = await fetch(base + path, { method: opts.method ?? 'GET', headers, body });
    const text = await res.text();
    return { status: res.status, json: (text === '' ? null : JSON.parse(text)) as Json };
  };
  const byName = (list: Json[], name: string) => list.find((q) => q.name === name);

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-amqp-mgmt-streams-'));
    writeFileSync(join(dir, 'users.yaml'), USERS);
    broker = await startAmqpBroker(['--users-file', join(dir, 'users.yaml'), '--amqp-management-port', '0']);
    await eventually(() => broker.ports['amqp-management'] !== undefined, 10_000, 'the management listener');
    base = `http://127.0.0.1:${broker.ports['amqp-management']}`;
    conn = await amqp.connect(amqpUrl(broker, 'root', 'root-pw'));
    ch = await conn.createConfirmChannel();
    await ch.assertQueue('ms-s', { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '7D' } });
    await ch.assertExchange('ms-ss', 'direct', { durable: true, arguments: { 'x-super-stream': true } });
    for (const [i, key] of ['a', 'b'].entries()) {
      await ch.assertQueue(`ms-ss-${key}`, { durable: true, arguments: { 'x-queue-type': 'stream' } });
      await ch.bindQueue(`ms-ss-${key}`, 'ms-ss', key, { 'x-stream-partition-order': i });
    }
    for (let i = 0; i < 3; i++) ch.sendToQueue('ms-s', Buffer.from(`s${i}`));
    for (let i = 0; i < 2; i++) ch.publish('ms-ss', 'b', Buffer.from(`b${i}`));
    await ch.waitForConfirms();
    // A stream consumer on the partition queue ms-ss-b (stream queues need a prefetch, as in RabbitMQ).
    const reader = await conn.createChannel();
    await reader.prefetch(10);
    const got: string[] = [];
    await reader.consume('ms-ss-b', (m) => m && got.push(m.content.toString()), { consumerTag: 'ms-reader', arguments: { 'x-stream-offset': 'first' } });
    await eventually(() => got.length === 2, 10_000, 'the partition queue read from first');
  });

  after(async () => {
    await conn?.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('lists a stream queue with type stream, its x-queue-type argument and its records as messages', async () => {
    for (const path of ['/api/queues', '/api/queues/%2F']) {
      const r = await http(path);
      assert.equal(r.status, 200);
      const s = byName(r.json as unknown as Json[], 'ms-s');
      assert.ok(s, `${path} lists the stream queue`);
      assert.equal(s.type, 'stream');
      assert.deepEqual(s.arguments, { 'x-max-age': '7D', 'x-queue-type': 'stream' });
      assert.equal(s.durable, true);
      assert.equal(s.auto_delete, false);
      assert.equal(s.exclusive, false);
      assert.equal(s.messages, 3);
      assert.equal(s.messages_ready, 3);
      assert.equal(s.messages_unacknowledged, 0);
      assert.equal(s.vhost, '/');
      assert.equal(s.state, 'running');
      assert.deepEqual(s.members, [s.node]);
    }
    const one = await http('/api/queues/%2F/ms-s');
    assert.equal(one.status, 200);
    assert.equal(one.json.type, 'stream');
    assert.equal(one.json.messages, 3);
    assert.deepEqual(one.json.consumer_details, []);
  });

  it('lists a super stream as its partition queues S-<key>, not as the stream S', async () => {
    const list = (await http('/api/queues')).json as unknown as Json[];
    const names = list.map((q) => q.name);
    assert.ok(names.includes('ms-ss-a') && names.includes('ms-ss-b'), names.join(','));
    assert.ok(!names.includes('ms-ss'), 'the super stream itself is no queue');
    assert.deepEqual(names, [...names].sort(), 'sorted by name');
    const a = byName(list, 'ms-ss-a')!;
    const b = byName(list, 'ms-ss-b')!;
    assert.equal(a.type, 'stream');
    assert.deepEqual(a.arguments, { 'x-queue-type': 'stream' });
    assert.equal(a.messages, 0);
    assert.equal(b.messages, 2);
    assert.equal(b.consumers, 1);
    const one = await http('/api/queues/%2F/ms-ss-b');
    assert.equal(one.status, 200);
    assert.equal(one.json.type, 'stream');
    assert.equal(one.json.consumer_details.length, 1);
    assert.equal(one.json.consumer_details[0].consumer_tag, 'ms-reader');
    assert.deepEqual(one.json.consumer_details[0].queue, { name: 'ms-ss-b', vhost: '/' });
    const consumers = (await http('/api/consumers')).json as unknown as Json[];
    assert.equal(consumers.find((c) => c.consumer_tag === 'ms-reader')?.queue.name, 'ms-ss-b');
    assert.equal((await http('/api/queues/%2F/ms-ss')).status, 404);
  });

  it('shows partition bindings destined to the partition queue, with RabbitMQ arguments only', async () => {
    const src = await http('/api/exchanges/%2F/ms-ss/bindings/source');
    assert.equal(src.status, 200);
    const rows = (src.json as unknown as Json[]).map((b) => [b.destination, b.destination_type, b.routing_key, b.arguments]);
    assert.deepEqual(rows, [
      ['ms-ss-a', 'queue', 'a', { 'x-stream-partition-order': 0 }],
      ['ms-ss-b', 'queue', 'b', { 'x-stream-partition-order': 1 }],
    ]);
    const all = (await http('/api/bindings')).json as unknown as Json[];
    assert.ok(!all.some((b) => b.destination === 'ms-ss'), 'no binding names the stream ms-ss as a queue');
    for (const q of ['ms-s', 'ms-ss-a', 'ms-ss-b'])
      assert.ok(
        all.some((b) => b.source === '' && b.destination === q && b.routing_key === q),
        `the default exchange's binding of ${q}`,
      );
    const own = await http('/api/queues/%2F/ms-ss-a/bindings');
    assert.equal(own.status, 200);
    assert.deepEqual(
      (own.json as unknown as Json[]).map((b) => [b.source, b.destination, b.routing_key]),
      [
        ['', 'ms-ss-a', 'ms-ss-a'],
        ['ms-ss', 'ms-ss-a', 'a'],
      ],
    );
  });

  it('exports stream queues and partition bindings in /api/definitions', async () => {
    const d = (await http('/api/definitions')).json;
    const q = (d.queues as Json[]).filter((x) => x.name.startsWith('ms-'));
    assert.deepEqual(
      q.map((x) => [x.name, x.durable, x.auto_delete, x.arguments]),
      [
        ['ms-s', true, false, { 'x-max-age': '7D', 'x-queue-type': 'stream' }],
        ['ms-ss-a', true, false, { 'x-queue-type': 'stream' }],
        ['ms-ss-b', true, false, { 'x-queue-type': 'stream' }],
      ],
    );
    const b = (d.bindings as Json[]).filter((x) => x.source === 'ms-ss');
    assert.deepEqual(
      b.map((x) => [x.destination, x.destination_type, x.arguments]),
      [
        ['ms-ss-a', 'queue', { 'x-stream-partition-order': 0 }],
        ['ms-ss-b', 'queue', { 'x-stream-partition-order': 1 }],
      ],
    );
    // Importing the export again leaves the stream queues as they are (a classic queue beside them would win).
    const res = await fetch(base + '/api/definitions', {
      method: 'POST',
      headers: { authorization: 'Basic ' + Buffer.from('root:root-pw').toString('base64'), 'content-type': 'application/json' },
      body: JSON.stringify({ queues: d.queues, bindings: d.bindings }),
    });
    assert.equal(res.status, 204);
    assert.equal((await http('/api/queues/%2F/ms-s')).json.type, 'stream');
  });

  it('lists a stream FlowMQ made with 3 partitions as the super stream AMQP sees (S-0..S-2)', async () => {
    broker.credentials = { username: 'root', password: 'root-pw' };
    await broker.api('POST', '/api/v1/streams', { name: 'ms-made', partitions: 3 });
    const names = ((await http('/api/queues')).json as unknown as Json[]).map((q) => q.name).filter((n) => n.startsWith('ms-made'));
    assert.deepEqual(names, ['ms-made-0', 'ms-made-1', 'ms-made-2']);
    // No exchange binding exists yet (a derived view); AMQP reads the same partition queue.
    assert.equal((await ch.checkQueue('ms-made-2')).messageCount, 0);
    assert.equal((await http('/api/queues/%2F/ms-made-2')).json.type, 'stream');
  });

  it('keeps stream queues from a user who may not describe them', async () => {
    const list = await http('/api/queues', { user: 'alice', pass: 'alice-pw' });
    assert.equal(list.status, 200);
    assert.ok(!(list.json as unknown as Json[]).some((q) => q.name.startsWith('ms-')));
    assert.equal((await http('/api/queues/%2F/ms-s', { user: 'alice', pass: 'alice-pw' })).status, 404);
    assert.equal((await http('/api/queues/%2F/ms-s', { user: 'alice', pass: 'alice-pw', method: 'DELETE' })).status, 401);
  });

  it('PUT /api/queues and a definitions import make stream queues as queue.declare does (RabbitMQ 3.10.8 codes and texts)', async () => {
    const put = (name: string, body: unknown) => http(`/api/queues/%2F/${name}`, { method: 'PUT', body });
    const args = { 'x-queue-type': 'stream', 'x-max-age': '1D', 'x-max-length-bytes': 100000 };
    assert.equal((await put('ms-put', { durable: true, arguments: args })).status, 201);
    assert.equal((await put('ms-put', { durable: true, arguments: args })).status, 204);
    const one = await http('/api/queues/%2F/ms-put');
    assert.equal(one.json.type, 'stream');
    assert.deepEqual(one.json.arguments, args);
    // RabbitMQ 3.10.8's answers to the same bodies (run side by side, see docs/amqp.md).
    const refused = [
      [{ durable: false, arguments: { 'x-queue-type': 'stream' } }, "invalid property 'non-durable' for queue 'ms-bad' in vhost '/'"],
      [
        { arguments: { 'x-queue-type': 'stream', 'x-max-length': 5 } },
        "invalid arg 'x-max-length' for queue 'ms-bad' in vhost '/' of queue type rabbit_stream_queue",
      ],
    ] as const;
    for (const [body, reason] of refused) assert.deepEqual((await put('ms-bad', body)).json, { error: 'bad_request', reason });
    assert.equal((await put('ms-put', { durable: true, arguments: { ...args, 'x-max-age': '2D' } })).status, 400);
    assert.equal((await http('/api/queues/%2F/ms-bad')).status, 404);
    // A real stream queue: amqplib publishes through the default exchange and reads it from the first offset.
    ch.sendToQueue('ms-put', Buffer.from('p0'));
    await ch.waitForConfirms();
    const reader = await conn.createChannel();
    await reader.prefetch(10);
    const got: string[] = [];
    await reader.consume('ms-put', (m) => m && got.push(m.content.toString()), { arguments: { 'x-stream-offset': 'first' } });
    await eventually(() => got.length === 1, 10_000, 'the stream queue made by PUT read from first');
    assert.deepEqual(got, ['p0']);
    await reader.close();
    // Definitions import: deleted, then made again from its exported entry.
    const exported = ((await http('/api/definitions')).json.queues as Json[]).find((q) => q.name === 'ms-put');
    assert.deepEqual(exported?.arguments, args);
    assert.equal((await http('/api/queues/%2F/ms-put', { method: 'DELETE' })).status, 204);
    assert.equal((await http('/api/definitions', { method: 'POST', body: { queues: [exported] } })).status, 204);
    const back = await http('/api/queues/%2F/ms-put');
    assert.equal(back.json.type, 'stream');
    assert.deepEqual(back.json.arguments, args);
    assert.equal((await ch.checkQueue('ms-put')).messageCount, 0);
    // alice may create queues alice-* only: a stream queue is a `stream:` resource.
    assert.equal((await http('/api/queues/%2F/alice-s', { user: 'alice', pass: 'alice-pw', method: 'PUT', body: { arguments: args } })).status, 401);
  });

  it('DELETE removes a partition queue and a stream queue as AMQP queue.delete does', async () => {
    assert.equal((await http('/api/queues/%2F/ms-ss-a', { method: 'DELETE' })).status, 204);
    assert.equal((await http('/api/queues/%2F/ms-ss-a')).status, 404);
    assert.equal((await http('/api/queues/%2F/ms-ss-b')).status, 200, 'the other partition stays');
    assert.equal((await http('/api/queues/%2F/ms-s', { method: 'DELETE' })).status, 204);
    assert.equal((await http('/api/queues/%2F/ms-s', { method: 'DELETE' })).status, 404);
    // amqplib sees them gone: a passive declare is 404 (the channel closes).
    for (const q of ['ms-ss-a', 'ms-s']) {
      const c = await conn.createChannel();
      c.on('error', () => undefined);
      await assert.rejects(c.checkQueue(q), /404/);
    }
    const names = ((await http('/api/queues')).json as unknown as Json[]).map((q) => q.name);
    assert.ok(!names.includes('ms-s') && !names.includes('ms-ss-a') && names.includes('ms-ss-b'), names.join(','));
  });
});
