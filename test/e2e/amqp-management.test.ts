/**
 * The RabbitMQ management API subset (--amqp-management-port) end to end: amqplib clients make queues, exchanges,
 * bindings, consumers and unacked deliveries on bin/flowmq, and the JSON is checked against what they did; users see
 * what their policies allow; the write calls scripts use (PUT/DELETE queue and exchange, POST binding, publish, get);
 * and the foreign judge, Debian's nagios-plugins-rabbitmq (Perl, LWP: it sends credentials only after a 401 naming the
 * realm "RabbitMQ Management"), run unchanged against it, including a threshold that must turn CRITICAL.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { amqpUrl, startAmqpBroker } from './amqp-helpers.js';
import { eventually, run, type FlowmqProcess } from './harness.js';

const USERS = `
users:
  - {username: root, password: root-pw, groups: [admins]}
  - {username: alice, password: alice-pw}
policies:
  - {name: alice-own, effect: allow, actions: [publish, subscribe, create, describe, delete], resources: ["queue:alice-*"], principals: ["user:alice"]}
`;

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe('RabbitMQ management API (bin/flowmq, amqplib, nagios-plugins-rabbitmq)', { timeout: 90_000 }, () => {
  let broker: FlowmqProcess;
  let dir: string;
  let conn: ChannelModel;
  let pub: Channel;
  let sub: Channel;
  let base: string;
  let port: number;

  const http = async (path: string, opts: { user?: string; pass?: string; method?: string; body?: unknown } = {}) => {
    const headers: Record<string, string> = {};
    if (opts.user !== undefined) headers.authorization = 'Basic ' + Buffer.from(`${opts.user}:${opts.pass ?? ''}`).toString('base64');
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(base + path, { method: opts.method ?? 'GET', headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
    const text = await res.text();
    return { status: res.status, headers: res.headers, json: (text === '' ? null : JSON.parse(text)) as Json };
  };
  const root = (path: string, opts: { method?: string; body?: unknown } = {}) => http(path, { user: 'root', pass: 'root-pw', ...opts });
  const nagios = (check: string, args: string[]) =>
    run(`/usr/bin/${check}`, ['-H', 'localhost', '--port', String(port), '-u', 'root', '-p', 'root-pw', ...args]);

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-amqp-mgmt-'));
    writeFileSync(join(dir, 'users.yaml'), USERS);
    broker = await startAmqpBroker(['--users-file', join(dir, 'users.yaml'), '--amqp-management-port', '0']);
    await eventually(() => broker.ports['amqp-management'] !== undefined, 10_000, 'the management listener');
    port = broker.ports['amqp-management'];
    base = `http://127.0.0.1:${port}`;
    conn = await amqp.connect(amqpUrl(broker, 'root', 'root-pw'), { clientProperties: { connection_name: 'mgmt-test' } });
    pub = await conn.createChannel();
    await pub.assertExchange('m-x', 'topic', { durable: true });
    await pub.assertQueue('m-q', { durable: true });
    await pub.bindQueue('m-q', 'm-x', 'orders.*');
    for (let i = 0; i < 3; i++) pub.publish('m-x', 'orders.new', Buffer.from(`o${i}`));
    pub.publish('m-x', 'other.key', Buffer.from('unrouted'));
    sub = await conn.createChannel();
    await sub.prefetch(1);
    const got: string[] = [];
    await sub.consume('m-q', (m) => m && got.push(m.content.toString()), { consumerTag: 'ctag-1' });
    await eventually(() => got.length === 1, 5000, 'the first delivery');
  });

  after(async () => {
    await conn?.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('asks for Basic credentials with the realm RabbitMQ tools answer, and refuses wrong ones (401)', async () => {
    const none = await http('/api/overview');
    assert.equal(none.status, 401);
    assert.equal(none.headers.get('www-authenticate'), 'Basic realm="RabbitMQ Management"');
    assert.equal(none.json.error, 'not_authorized');
    const bad = await http('/api/queues', { user: 'root', pass: 'wrong' });
    assert.equal(bad.status, 401);
    assert.equal(bad.json.reason, 'Login failed');
  });

  it('reports a queue as its clients left it: 3 messages, 2 ready, 1 unacked, 1 consumer, message_stats', async () => {
    const q = await root('/api/queues/%2F/m-q');
    assert.equal(q.status, 200);
    assert.equal(q.json.name, 'm-q');
    assert.equal(q.json.vhost, '/');
    assert.equal(q.json.durable, true);
    assert.equal(q.json.type, 'classic');
    assert.equal(q.json.messages, 3);
    assert.equal(q.json.messages_ready, 2);
    assert.equal(q.json.messages_unacknowledged, 1);
    assert.equal(q.json.consumers, 1);
    assert.equal(typeof q.json.messages_details.rate, 'number');
    assert.equal(q.json.message_stats.publish, 3);
    assert.equal(q.json.message_stats.deliver, 1);
    assert.equal(q.json.message_stats.deliver_get, 1);
    assert.equal(q.json.consumer_details.length, 1);
    assert.equal(q.json.consumer_details[0].consumer_tag, 'ctag-1');
    assert.equal(q.json.consumer_details[0].prefetch_count, 1);
    const list = await root('/api/queues');
    assert.ok(list.json.some((x: Json) => x.name === 'm-q' && x.messages === 3));
    const missing = await root('/api/queues/%2F/nope');
    assert.equal(missing.status, 404);
    assert.deepEqual(missing.json, { error: 'Object Not Found', reason: 'Not Found' });
    assert.equal((await root('/api/queues/other-vhost/m-q')).status, 404);
  });

  it('lists exchanges, bindings (with the default exchange binding first), vhosts and the overview totals', async () => {
    const x = await root('/api/exchanges/%2F/m-x');
    assert.deepEqual(
      { name: x.json.name, type: x.json.type, durable: x.json.durable, auto_delete: x.json.auto_delete, internal: x.json.internal, vhost: x.json.vhost },
      { name: 'm-x', type: 'topic', durable: true, auto_delete: false, internal: false, vhost: '/' },
    );
    const xs = await root('/api/exchanges');
    assert.ok(xs.json.some((e: Json) => e.name === '' && e.type === 'direct'));
    assert.ok(xs.json.some((e: Json) => e.name === 'amq.topic'));
    const b = await root('/api/bindings/%2F');
    const mine = b.json.filter((e: Json) => e.destination === 'm-q');
    assert.deepEqual(
      mine.map((e: Json) => [e.source, e.routing_key, e.destination_type, e.properties_key]),
      [
        ['', 'm-q', 'queue', 'm-q'],
        ['m-x', 'orders.*', 'queue', 'orders.*'],
      ],
    );
    const v = await root('/api/vhosts');
    assert.equal(v.json.length, 1);
    assert.equal(v.json[0].name, '/');
    const o = await root('/api/overview');
    assert.ok(o.json.queue_totals.messages >= 3);
    assert.ok(o.json.queue_totals.messages_unacknowledged >= 1);
    assert.ok(o.json.object_totals.connections >= 1);
    assert.ok(o.json.object_totals.consumers >= 1);
    assert.ok(o.json.listeners.some((l: Json) => l.protocol === 'amqp' && l.port === broker.ports.amqp));
  });

  it('lists connections and channels with what the client negotiated and holds', async () => {
    const cs = await root('/api/connections');
    const c = cs.json.find((x: Json) => x.user_provided_name === 'mgmt-test');
    assert.ok(c, JSON.stringify(cs.json));
    assert.equal(c.user, 'root');
    assert.equal(c.vhost, '/');
    assert.equal(c.state, 'running');
    assert.equal(c.protocol, 'AMQP 0-9-1');
    assert.equal(c.channels, 2);
    assert.equal(c.auth_mechanism, 'PLAIN');
    assert.equal(c.port, broker.ports.amqp);
    assert.equal(c.client_properties.connection_name, 'mgmt-test');
    assert.ok(c.recv_oct > 0 && c.send_oct > 0);
    assert.match(c.name, /^127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+$/);
    const one = await root(`/api/connections/${encodeURIComponent(c.name)}`);
    assert.equal(one.json.name, c.name);
    const chs = await root(`/api/connections/${encodeURIComponent(c.name)}/channels`);
    const consuming = chs.json.find((x: Json) => x.consumer_count === 1);
    assert.ok(consuming, JSON.stringify(chs.json));
    assert.equal(consuming.prefetch_count, 1);
    assert.equal(consuming.messages_unacknowledged, 1);
    assert.equal(consuming.connection_details.name, c.name);
    const all = await root('/api/channels');
    assert.ok(all.json.length >= 2);
  });

  it('shows a user only what its policies allow', async () => {
    const alice = (path: string, opts: { method?: string; body?: unknown } = {}) => http(path, { user: 'alice', pass: 'alice-pw', ...opts });
    assert.equal((await alice('/api/queues/%2F/alice-q', { method: 'PUT', body: { durable: false } })).status, 201);
    const qs = await alice('/api/queues');
    assert.deepEqual(
      qs.json.map((q: Json) => q.name),
      ['alice-q'],
    );
    assert.equal((await alice('/api/queues/%2F/m-q')).status, 404);
    assert.equal((await alice('/api/nodes')).status, 401);
    assert.deepEqual((await alice('/api/connections')).json, []);
    assert.equal((await alice('/api/queues/%2F/m-q', { method: 'DELETE' })).status, 401);
    assert.equal((await alice('/api/whoami')).json.name, 'alice');
    assert.deepEqual((await root('/api/whoami')).json, { name: 'root', tags: ['administrator'] });
  });

  it('declares, binds, publishes to, reads and deletes through the write calls', async () => {
    assert.equal((await root('/api/exchanges/%2F/w-x', { method: 'PUT', body: { type: 'direct', durable: true } })).status, 201);
    assert.equal((await root('/api/exchanges/%2F/w-x', { method: 'PUT', body: { type: 'direct', durable: true } })).status, 204);
    assert.equal((await root('/api/exchanges/%2F/w-x', { method: 'PUT', body: { type: 'fanout', durable: true } })).status, 400);
    assert.equal((await root('/api/queues/%2F/w-q', { method: 'PUT', body: { durable: true, arguments: { 'x-max-length': 10 } } })).status, 201);
    assert.equal((await root('/api/queues/%2F/w-q', { method: 'PUT', body: { durable: true, arguments: { 'x-max-length': 10 } } })).status, 204);
    const bind = await root('/api/bindings/%2F/e/w-x/q/w-q', { method: 'POST', body: { routing_key: 'k', arguments: {} } });
    assert.equal(bind.status, 201);
    assert.equal(bind.headers.get('location'), 'k');
    const pubd = await root('/api/exchanges/%2F/w-x/publish', {
      method: 'POST',
      body: { routing_key: 'k', payload: 'hello', payload_encoding: 'string', properties: { headers: { h: 'v' } } },
    });
    assert.deepEqual(pubd.json, { routed: true });
    const lost = await root('/api/exchanges/%2F/w-x/publish', {
      method: 'POST',
      body: { routing_key: 'zz', payload: 'x', payload_encoding: 'string', properties: {} },
    });
    assert.deepEqual(lost.json, { routed: false });
    // An amqplib consumer sees what the HTTP publish sent.
    const ch = await conn.createChannel();
    const peek = await ch.get('w-q', { noAck: false });
    assert.ok(peek);
    assert.equal(peek.content.toString(), 'hello');
    ch.nack(peek, false, true);
    await ch.close();
    await eventually(async () => (await root('/api/queues/%2F/w-q')).json.messages_ready === 1, 5000, 'the nacked message back');
    const got = await root('/api/queues/%2F/w-q/get', { method: 'POST', body: { count: 5, ackmode: 'ack_requeue_true', encoding: 'auto' } });
    assert.equal(got.json.length, 1);
    assert.equal(got.json[0].payload, 'hello');
    assert.equal(got.json[0].payload_encoding, 'string');
    assert.equal(got.json[0].exchange, 'w-x');
    assert.equal(got.json[0].routing_key, 'k');
    assert.equal(got.json[0].redelivered, true);
    assert.equal(got.json[0].properties.headers.h, 'v');
    assert.equal((await root('/api/queues/%2F/w-q')).json.messages_ready, 1);
    const taken = await root('/api/queues/%2F/w-q/get', { method: 'POST', body: { count: 1, ackmode: 'ack_requeue_false', encoding: 'auto' } });
    assert.equal(taken.json.length, 1);
    assert.equal((await root('/api/queues/%2F/w-q')).json.messages, 0);
    assert.equal((await root('/api/bindings/%2F/e/w-x/q/w-q/k', { method: 'DELETE' })).status, 204);
    assert.equal((await root('/api/bindings/%2F/e/w-x/q/w-q/k', { method: 'DELETE' })).status, 404);
    assert.equal((await root('/api/queues/%2F/w-q', { method: 'DELETE' })).status, 204);
    assert.equal((await root('/api/queues/%2F/w-q', { method: 'DELETE' })).status, 404);
    assert.equal((await root('/api/exchanges/%2F/w-x', { method: 'DELETE' })).status, 204);
  });

  it('answers the aliveness test and the health checks as RabbitMQ does', async () => {
    assert.deepEqual((await root('/api/aliveness-test/%2F')).json, { status: 'ok' });
    assert.deepEqual((await root('/api/health/checks/alarms')).json, { status: 'ok' });
    assert.deepEqual((await root('/api/health/checks/local-alarms')).json, { status: 'ok' });
    assert.deepEqual((await root('/api/health/checks/virtual-hosts')).json, { status: 'ok' });
    assert.deepEqual((await root(`/api/health/checks/port-listener/${broker.ports.amqp}`)).json, { status: 'ok', port: broker.ports.amqp });
    const closed = await root('/api/health/checks/port-listener/1');
    assert.equal(closed.status, 503);
    assert.equal(closed.json.status, 'failed');
    assert.equal(closed.json.missing, 1);
    assert.deepEqual((await root('/api/health/checks/protocol-listener/amqp091')).json, { status: 'ok', protocol: 'amqp' });
    const stomp = await root('/api/health/checks/protocol-listener/stomp');
    assert.equal(stomp.status, 503);
    assert.equal(stomp.json.missing, 'stomp');
    const nodes = await root('/api/nodes');
    assert.equal(nodes.json[0].running, true);
    assert.equal(nodes.json[0].mem_alarm, false);
    assert.ok(nodes.json[0].mem_used > 0 && nodes.json[0].fd_used > 0 && nodes.json[0].sockets_used > 0);
  });

  it('refuses a foreign Host name (DNS rebinding) and closes a connection on DELETE (320 CONNECTION_FORCED)', async () => {
    const { request } = await import('node:http');
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port,
          path: '/api/overview',
          headers: { host: 'evil.example', authorization: 'Basic ' + Buffer.from('root:root-pw').toString('base64') },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on('error', reject);
      req.end();
    });
    assert.equal(status, 421);
    const victim = await amqp.connect(amqpUrl(broker, 'root', 'root-pw'), { clientProperties: { connection_name: 'victim' } });
    // amqplib reports a server's connection.close 320 on 'close' (with the error), not on 'error'.
    victim.on('error', () => undefined);
    const closed = new Promise<Error>((resolve) => victim.on('close', resolve));
    let name = '';
    await eventually(async () => {
      name = (await root('/api/connections')).json.find((c: Json) => c.user_provided_name === 'victim')?.name ?? '';
      return name !== '';
    });
    assert.equal((await http(`/api/connections/${encodeURIComponent(name)}`, { user: 'alice', pass: 'alice-pw', method: 'DELETE' })).status, 401);
    assert.equal((await root(`/api/connections/${encodeURIComponent(name)}`, { method: 'DELETE' })).status, 204);
    assert.match(String((await closed)?.message), /320 \(CONNECTION-FORCED\).*Closed via management plugin/);
  });

  it("passes Debian's nagios-plugins-rabbitmq checks run unchanged, and their thresholds see the real figures", async () => {
    const ok = async (check: string, args: string[], expect: RegExp) => {
      const r = await nagios(check, args);
      assert.equal(r.code, 0, `${check}: ${r.stdout}${r.stderr}`);
      assert.match(r.stdout, expect);
    };
    await ok('check_rabbitmq_aliveness', [], /RABBITMQ_ALIVENESS OK - vhost: \//);
    await ok('check_rabbitmq_overview', [], /messages OK \(\d+\)/);
    await ok('check_rabbitmq_server', [], /RABBITMQ_SERVER OK - Memory OK .*Process OK .*FD OK .*Sockets OK/);
    await ok('check_rabbitmq_connections', [], /connections OK \(1\)/);
    await ok('check_rabbitmq_watermark', [], /RABBITMQ_WATERMARK OK - mem_alarm disk_free_alarm/);
    await ok('check_rabbitmq_partition', [], /No Partitions/);
    await ok('check_rabbitmq_objects', [], /Gathered Object Counts/);
    await ok('check_rabbitmq_queue', ['--queue', 'm-q'], /messages OK \(3\) messages_ready OK \(2\) messages_unacknowledged OK \(1\) consumers OK \(1\)/);
    // The figures are real: a threshold below them turns the check CRITICAL (exit 2).
    const crit = await nagios('check_rabbitmq_queue', ['--queue', 'm-q', '-w', '1,1,1,5', '-c', '2,5,5,5']);
    assert.equal(crit.code, 2, crit.stdout);
    assert.match(crit.stdout, /RABBITMQ_QUEUE CRITICAL - messages CRITICAL \(3\)/);
    const wrong = await run('/usr/bin/check_rabbitmq_overview', ['-H', 'localhost', '--port', String(port), '-u', 'root', '-p', 'nope']);
    assert.notEqual(wrong.code, 0);
  });
});
