/**
 * The RabbitMQ management API's writes in a tenant vhost (issue 29): over HTTP as scripts use it, tenant t1 (ann)
 * makes an exchange, a queue and bindings in vhost t1, publishes, gets and purges; an amqplib client of ann in vhost
 * t1 consumes what the API published; `/`'s same-named queue keeps its own message; t2 (bob) gets 404 for t1's vhost
 * and for its own missing objects alike; `$ns/` names are refused in every vhost; error texts and arguments name
 * things as t1's clients do; policies are judged on the names the tenant writes.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import amqp, { type Channel, type ChannelModel, type ConsumeMessage } from 'amqplib';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { until } from './harness.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe('e2e: the RabbitMQ management API writes in a tenant vhost', { timeout: 30_000 }, () => {
  let dir = '';
  let broker: Broker;
  let amqpPort = 0;
  let mgmt = '';
  const conns: ChannelModel[] = [];

  const http = async (user: string, method: string, path: string, body?: unknown) => {
    const headers: Record<string, string> = { authorization: `Basic ${Buffer.from(`${user}:${user}-pw`).toString('base64')}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const r = await fetch(`${mgmt}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    return { status: r.status, location: r.headers.get('location'), json: (text === '' ? null : JSON.parse(text)) as Json };
  };

  async function open(user: string, vhost: string): Promise<Channel> {
    const c = await amqp.connect(`amqp://${user}:${user}-pw@127.0.0.1:${amqpPort}/${encodeURIComponent(vhost)}?heartbeat=0`);
    conns.push(c);
    const ch = await c.createChannel();
    ch.on('error', () => undefined);
    return ch;
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ns-amqp-mgmt-'));
    writeFileSync(
      join(dir, 'users.yaml'),
      [
        'users:',
        '  - {username: dee, password: dee-pw}',
        '  - {username: root, password: root-pw, groups: [admins]}',
        '  - {username: ann, password: ann-pw, namespace: t1}',
        '  - {username: bob, password: bob-pw, namespace: t2}',
        '  - {username: carl, password: carl-pw, namespace: t3}',
        'namespaces:',
        '  - {name: t1}',
        '  - {name: t2}',
        '  - {name: t3}',
        'policies:',
        '  - {name: carl-own, namespace: t3, effect: allow, actions: [create, delete, describe, publish, subscribe], resources: ["queue:carl-*", "exchange:carl-*"], principals: ["user:carl"]}',
        '',
      ].join('\n'),
    );
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'amqp',
      'amqp-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
      'amqp-management-port': '0',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    amqpPort = broker.listeners.get('amqp')!.address().port;
    mgmt = `http://127.0.0.1:${broker.ports()['amqp-management']}`;
  });

  after(async () => {
    for (const c of conns) await c.close().catch(() => undefined);
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("t1 makes an exchange, a queue and a binding over HTTP, publishes, and its amqplib client consumes; `/`'s orders is untouched", async () => {
    // `/` has its own `orders`, with one message of its own.
    const dee = await open('dee', '/');
    await dee.assertQueue('orders', { durable: true });
    dee.sendToQueue('orders', Buffer.from('d-1'));
    await until(async () => assert.equal((await dee.checkQueue('orders')).messageCount, 1));

    assert.equal((await http('ann', 'PUT', '/api/exchanges/t1/orders-x', { type: 'direct', durable: true })).status, 201);
    assert.equal((await http('ann', 'PUT', '/api/exchanges/t1/orders-x', { type: 'direct', durable: true })).status, 204);
    assert.equal((await http('ann', 'PUT', '/api/queues/t1/orders', { durable: true })).status, 201);
    const bound = await http('ann', 'POST', '/api/bindings/t1/e/orders-x/q/orders', { routing_key: 'new' });
    assert.equal(bound.status, 201);
    assert.equal(bound.location, 'new');
    const list = await http('ann', 'GET', '/api/bindings/t1/e/orders-x/q/orders');
    assert.deepEqual(
      (list.json as unknown as Json[]).map((b) => [b.vhost, b.source, b.destination, b.routing_key, b.properties_key]),
      [['t1', 'orders-x', 'orders', 'new', 'new']],
    );
    assert.equal((await http('ann', 'GET', '/api/bindings/t1/e/orders-x/q/orders/new')).json.routing_key, 'new');
    // Objects are listed in vhost t1 under the names ann wrote.
    const q = await http('ann', 'GET', '/api/queues/t1/orders');
    assert.deepEqual([q.status, q.json.name, q.json.vhost], [200, 'orders', 't1']);

    const x = await http('ann', 'POST', '/api/exchanges/t1/orders-x/publish', { routing_key: 'new', payload: 'via-x', properties: {} });
    assert.deepEqual(x.json, { routed: true });
    const d = await http('ann', 'POST', '/api/exchanges/t1/amq.default/publish', { routing_key: 'orders', payload: 'via-default', properties: {} });
    assert.deepEqual(d.json, { routed: true });

    const ann = await open('ann', 't1');
    const got: string[] = [];
    await ann.consume('orders', (m: ConsumeMessage | null) => m !== null && got.push(`${m.fields.exchange}|${m.fields.routingKey}|${m.content}`), {
      noAck: true,
    });
    await until(() => assert.deepEqual(got, ['orders-x|new|via-x', '|orders|via-default']));

    // `/`'s queue kept its own message and got none of t1's.
    const left = await dee.get('orders', { noAck: true });
    assert.ok(left !== false);
    assert.equal(left.content.toString(), 'd-1');
    assert.equal(await dee.get('orders'), false);
    assert.equal((await http('dee', 'GET', '/api/exchanges/%2F/orders-x')).status, 404);
  });

  test('get, purge and delete in vhost t1 answer in its names; `/` and t2 are not reached', async () => {
    assert.equal((await http('ann', 'PUT', '/api/queues/t1/jobs', { durable: false })).status, 201);
    assert.equal((await http('dee', 'PUT', '/api/queues/%2F/jobs', { durable: false })).status, 201);
    await http('ann', 'POST', '/api/exchanges/t1/amq.default/publish', { routing_key: 'jobs', payload: 'j1', properties: { delivery_mode: 2 } });
    await http('ann', 'POST', '/api/exchanges/t1/amq.default/publish', { routing_key: 'jobs', payload: 'j2', properties: {} });
    await http('dee', 'POST', '/api/exchanges/%2F/amq.default/publish', { routing_key: 'jobs', payload: 'dee-job', properties: {} });
    const g = await http('ann', 'POST', '/api/queues/t1/jobs/get', { count: 1, ackmode: 'ack_requeue_false', encoding: 'auto' });
    assert.equal(g.status, 200);
    const m = (g.json as unknown as Json[])[0];
    assert.deepEqual([m.payload, m.exchange, m.routing_key, m.message_count], ['j1', '', 'jobs', 1]);
    assert.equal((await http('ann', 'DELETE', '/api/queues/t1/jobs/contents')).status, 204);
    assert.deepEqual((await http('ann', 'POST', '/api/queues/t1/jobs/get', { count: 5, ackmode: 'ack_requeue_true' })).json, []);
    // `/`'s jobs still holds its message.
    const dg = await http('dee', 'POST', '/api/queues/%2F/jobs/get', { count: 5, ackmode: 'ack_requeue_true' });
    assert.deepEqual(
      (dg.json as unknown as Json[]).map((x) => x.payload),
      ['dee-job'],
    );
    assert.equal((await http('ann', 'DELETE', '/api/queues/t1/jobs')).status, 204);
    assert.equal((await http('ann', 'DELETE', '/api/queues/t1/jobs')).status, 404);
    assert.equal((await http('dee', 'GET', '/api/queues/%2F/jobs')).status, 200);
  });

  test("t2 gets 404 for t1's vhost and for its own missing objects alike; t1's queue is unchanged", async () => {
    await http('ann', 'PUT', '/api/queues/t1/secret', { durable: false });
    await http('ann', 'POST', '/api/exchanges/t1/amq.default/publish', { routing_key: 'secret', payload: 's', properties: {} });
    const calls: Array<[string, string, unknown?]> = [
      ['GET', '/api/queues/t1/secret'],
      ['PUT', '/api/queues/t1/secret', { durable: false }],
      ['DELETE', '/api/queues/t1/secret'],
      ['DELETE', '/api/queues/t1/secret/contents'],
      ['POST', '/api/queues/t1/secret/get', { count: 1, ackmode: 'ack_requeue_false' }],
      ['POST', '/api/exchanges/t1/amq.default/publish', { routing_key: 'secret', payload: 'x', properties: {} }],
      ['POST', '/api/bindings/t1/e/amq.direct/q/secret', { routing_key: 'k' }],
    ];
    for (const [method, path, body] of calls) {
      const r = await http('bob', method, path, body);
      assert.equal(r.status, 404, `${method} ${path}`);
    }
    // In t2 itself, t1's `secret` does not exist: the same 404 as a name nobody has.
    const own = await http('bob', 'POST', '/api/queues/t2/secret/get', { count: 1, ackmode: 'ack_requeue_false' });
    const none = await http('bob', 'POST', '/api/queues/t2/never-made/get', { count: 1, ackmode: 'ack_requeue_false' });
    assert.deepEqual([own.status, own.json], [none.status, none.json]);
    assert.equal(own.status, 404);
    assert.equal((await http('bob', 'DELETE', '/api/queues/t2/secret')).status, 404);
    assert.equal((await http('bob', 'DELETE', '/api/exchanges/t2/orders-x')).status, 404);
    const q = await http('ann', 'GET', '/api/queues/t1/secret');
    assert.equal(q.json.messages, 1);
  });

  test('the reserved $ns/ space is refused in every vhost, reads of it are 404', async () => {
    const internal = encodeURIComponent('$ns/t1/secret');
    assert.equal((await http('root', 'DELETE', `/api/queues/%2F/${internal}`)).status, 401);
    assert.equal((await http('root', 'POST', `/api/queues/%2F/${internal}/get`, { count: 1, ackmode: 'ack_requeue_false' })).status, 401);
    assert.equal((await http('dee', 'PUT', `/api/queues/%2F/${internal}`, {})).status, 401);
    assert.equal((await http('ann', 'PUT', `/api/queues/t1/${encodeURIComponent('$ns/t2/x')}`, {})).status, 401);
    assert.equal((await http('root', 'GET', `/api/queues/%2F/${internal}`)).status, 404);
    const k = await http('ann', 'POST', '/api/exchanges/t1/amq.topic/publish', { routing_key: '$ns.t2.a', payload: 'x', properties: {} });
    assert.equal(k.status, 401);
    assert.equal((await http('ann', 'GET', '/api/queues/t1/secret')).json.messages, 1);
  });

  test("amq.topic bindings and publishes of vhost t1 stay in t1's topics", async () => {
    assert.equal((await http('ann', 'PUT', '/api/queues/t1/sensors', { durable: false })).status, 201);
    assert.equal((await http('ann', 'POST', '/api/bindings/t1/e/amq.topic/q/sensors', { routing_key: 'sensors.#' })).status, 201);
    const b = await http('ann', 'GET', '/api/queues/t1/sensors/bindings');
    assert.ok(
      (b.json as unknown as Json[]).some((x) => x.source === 'amq.topic' && x.routing_key === 'sensors.#'),
      JSON.stringify(b.json),
    );
    const ann = await open('ann', 't1');
    const got: string[] = [];
    await ann.consume('sensors', (m) => m !== null && got.push(`${m.fields.exchange}|${m.fields.routingKey}|${m.content}`), { noAck: true });
    // `/` publishes on the same key first: not t1's topic. t1's publish after it is the marker.
    assert.deepEqual((await http('dee', 'POST', '/api/exchanges/%2F/amq.topic/publish', { routing_key: 'sensors.a', payload: 'dee', properties: {} })).json, {
      routed: false,
    });
    const r = await http('ann', 'POST', '/api/exchanges/t1/amq.topic/publish', { routing_key: 'sensors.a', payload: 'ann', properties: {} });
    assert.deepEqual(r.json, { routed: true });
    await until(() => assert.deepEqual(got, ['amq.topic|sensors.a|ann']));
    // The per-vhost amq.direct exists for a vhost made through the API, and routes in t1 only.
    assert.equal((await http('ann', 'POST', '/api/bindings/t1/e/amq.direct/q/sensors', { routing_key: 'd' })).status, 201);
    const props = encodeURIComponent('d');
    assert.equal((await http('ann', 'DELETE', `/api/bindings/t1/e/amq.direct/q/sensors/${props}`)).status, 204);
    assert.equal((await http('ann', 'DELETE', `/api/bindings/t1/e/amq.direct/q/sensors/${props}`)).status, 404);
  });

  test("dead-letter and alternate exchanges name t1's exchanges; errors name nothing of the prefix", async () => {
    assert.equal((await http('ann', 'PUT', '/api/exchanges/t1/dlx', { type: 'fanout', durable: false })).status, 201);
    assert.equal((await http('ann', 'PUT', '/api/queues/t1/dead', { durable: false })).status, 201);
    assert.equal((await http('ann', 'POST', '/api/bindings/t1/e/dlx/q/dead', {})).status, 201);
    const args = { 'x-dead-letter-exchange': 'dlx', 'x-dead-letter-routing-key': 'gone' };
    assert.equal((await http('ann', 'PUT', '/api/queues/t1/work', { durable: false, arguments: args })).status, 201);
    assert.deepEqual((await http('ann', 'GET', '/api/queues/t1/work')).json.arguments, args);
    await http('ann', 'POST', '/api/exchanges/t1/amq.default/publish', { routing_key: 'work', payload: 'w', properties: {} });
    const rej = await http('ann', 'POST', '/api/queues/t1/work/get', { count: 1, ackmode: 'reject_requeue_false' });
    assert.equal((rej.json as unknown as Json[]).length, 1);
    await until(async () => {
      const d = await http('ann', 'POST', '/api/queues/t1/dead/get', { count: 1, ackmode: 'ack_requeue_false' });
      const m = (d.json as unknown as Json[])[0];
      assert.deepEqual([m?.payload, m?.exchange, m?.routing_key], ['w', 'dlx', 'gone']);
    });
    // An alternate exchange of t1.
    assert.equal(
      (await http('ann', 'PUT', '/api/exchanges/t1/with-ae', { type: 'direct', durable: false, arguments: { 'alternate-exchange': 'dlx' } })).status,
      201,
    );
    assert.equal((await http('ann', 'GET', '/api/exchanges/t1/with-ae')).json.arguments['alternate-exchange'], 'dlx');
    assert.deepEqual((await http('ann', 'POST', '/api/exchanges/t1/with-ae/publish', { routing_key: 'nobody', payload: 'alt', properties: {} })).json, {
      routed: true,
    });
    await until(async () => {
      const d = await http('ann', 'POST', '/api/queues/t1/dead/get', { count: 1, ackmode: 'ack_requeue_false' });
      assert.equal((d.json as unknown as Json[])[0]?.payload, 'alt');
    });
    // A declare that differs from the queue: 400, the text in t1's names.
    const bad = await http('ann', 'PUT', '/api/queues/t1/work', { durable: true, arguments: args });
    assert.equal(bad.status, 400);
    assert.match(String(bad.json.reason), /work/);
    assert.doesNotMatch(String(bad.json.reason), /\$ns|t1\//);
  });

  test('policies are judged on the names the tenant writes', async () => {
    assert.equal((await http('carl', 'PUT', '/api/queues/t3/carl-q', { durable: false })).status, 201);
    assert.equal((await http('carl', 'PUT', '/api/queues/t3/other', { durable: false })).status, 401);
    assert.equal((await http('carl', 'PUT', '/api/exchanges/t3/carl-x', { type: 'fanout', durable: false })).status, 201);
    assert.equal((await http('carl', 'POST', '/api/bindings/t3/e/carl-x/q/carl-q', {})).status, 201);
    assert.deepEqual((await http('carl', 'POST', '/api/exchanges/t3/carl-x/publish', { routing_key: '', payload: 'c', properties: {} })).json, {
      routed: true,
    });
    const g = await http('carl', 'POST', '/api/queues/t3/carl-q/get', { count: 1, ackmode: 'ack_requeue_false' });
    assert.equal((g.json as unknown as Json[])[0]?.payload, 'c');
    assert.equal((await http('carl', 'DELETE', '/api/queues/t3/carl-q')).status, 204);
  });

  test("a tenant's listings hold its own vhost only, its `/` is its own namespace (as at connection.open), and `default` is 404", async () => {
    // Nobody's policy reaches ann (t1): her policies would allow her anything, the vhost gate still holds.
    const vhostsOf = (items: Json[]) => [...new Set(items.map((i) => String(i.vhost)))].sort();
    const queues = (await http('ann', 'GET', '/api/queues')).json as unknown as Json[];
    assert.ok(queues.some((q) => q.name === 'orders'));
    assert.deepEqual(vhostsOf(queues), ['t1']);
    const exchanges = (await http('ann', 'GET', '/api/exchanges')).json as unknown as Json[];
    assert.deepEqual(vhostsOf(exchanges.filter((x) => x.name !== '' && x.name !== 'amq.topic')), ['t1']);
    assert.deepEqual(vhostsOf((await http('ann', 'GET', '/api/bindings')).json as unknown as Json[]), ['t1']);
    // The root's view still holds every vhost's `orders`.
    const all = (await http('root', 'GET', '/api/queues')).json as unknown as Json[];
    assert.deepEqual(vhostsOf(all.filter((q) => q.name === 'orders')), ['/', 't1']);

    const slash = await http('ann', 'GET', '/api/queues/%2F/orders');
    assert.deepEqual([slash.status, slash.json.vhost], [200, 't1']);
    assert.equal((await http('ann', 'GET', '/api/queues/default/orders')).status, 404);
    assert.equal((await http('ann', 'DELETE', '/api/queues/default/orders')).status, 404);
    // A write in `/` makes t1's queue, not default's.
    assert.equal((await http('ann', 'PUT', '/api/queues/%2F/ann-slash', { durable: false })).status, 201);
    assert.equal((await http('ann', 'GET', '/api/queues/t1/ann-slash')).status, 200);
    assert.equal((await http('root', 'GET', '/api/queues/%2F/ann-slash')).status, 404);
    assert.equal((await http('dee', 'GET', '/api/queues/%2F/ann-slash')).status, 404);
    assert.equal((await http('dee', 'GET', '/api/queues/%2F/orders')).json.vhost, '/');
  });
});
