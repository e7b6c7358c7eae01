/**
 * AMQP virtual hosts as namespaces (issue 29, second slice), with amqplib and MQTT.js. One broker with `default`
 * (user dee, and root of the admins group), `t1` (ann) and `t2` (bob). Each vhost declares the same queue, exchange
 * and bindings and sees only its own messages; an MQTT publish of t1 reaches t1's queue bound to amq.topic and never
 * `/`'s or t2's; passive declares of another vhost's names are 404 without naming it; a user refused a vhost gets
 * 530; the reserved `$ns/` prefix is refused in every vhost.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import amqp, { type Channel, type ChannelModel, type ConsumeMessage, type GetMessage } from 'amqplib';
import mqtt from 'mqtt';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { until } from './harness.js';

const HOME = { dee: '/', ann: 't1', bob: 't2' } as const;
type User = keyof typeof HOME;
const USERS = Object.keys(HOME) as User[];

describe('e2e: AMQP virtual hosts are namespaces', { timeout: 30_000 }, () => {
  let dir = '';
  let broker: Broker;
  let amqpPort = 0;
  let mqttUrl = '';
  let mgmt = '';
  const conns: ChannelModel[] = [];

  const url = (user: string, vhost: string) => `amqp://${user}:${user}-pw@127.0.0.1:${amqpPort}/${encodeURIComponent(vhost)}?heartbeat=0`;

  async function open(user: string, vhost: string): Promise<Channel> {
    const c = await amqp.connect(url(user, vhost));
    conns.push(c);
    const ch = await c.createChannel();
    ch.on('error', () => undefined);
    return ch;
  }

  /** The channel.close a method caused (amqplib rejects the call with it). */
  async function closedWith(fn: (ch: Channel) => Promise<unknown>, user: User): Promise<{ code: number; message: string }> {
    const ch = await open(user, HOME[user]);
    const err = (await fn(ch).then(
      () => null,
      (e: unknown) => e,
    )) as { code: number; message: string } | null;
    assert.ok(err !== null, 'the method should have been refused');
    return err;
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ns-amqp-'));
    writeFileSync(
      join(dir, 'users.yaml'),
      [
        'users:',
        '  - {username: dee, password: dee-pw}',
        '  - {username: root, password: root-pw, groups: [admins]}',
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
      protocols: 'mqtt,amqp',
      'mqtt-port': '0',
      'mqtt-ws-port': '0', // never the default 8083: another test's broker may hold it
      'amqp-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
      'amqp-management-port': '0',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    amqpPort = broker.listeners.get('amqp')!.address().port;
    mqttUrl = `mqtt://127.0.0.1:${broker.listeners.get('mqtt')!.address().port}`;
    mgmt = `http://127.0.0.1:${broker.ports()['amqp-management']}`;
  });

  after(async () => {
    for (const c of conns) await c.close().catch(() => undefined);
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('the same queue, exchange and bindings in /, t1 and t2 are three worlds', async () => {
    const chans = new Map<User, Channel>();
    const got = new Map<User, string[]>();
    for (const u of USERS) {
      const ch = await open(u, HOME[u]);
      chans.set(u, ch);
      await ch.assertExchange('orders-x', 'direct', { durable: false });
      const q = await ch.assertQueue('orders', { durable: false });
      assert.equal(q.queue, 'orders');
      // A server-named queue is named as the client sees it, inside the vhost.
      const anon = await ch.assertQueue('', { exclusive: true });
      assert.match(anon.queue, /^amq\.gen-/);
      await ch.bindQueue('orders', 'orders-x', 'new');
      await ch.bindQueue('orders', 'amq.direct', 'direct-key');
      const seen: string[] = [];
      got.set(u, seen);
      await ch.consume(
        'orders',
        (m: ConsumeMessage | null) => {
          if (m !== null) seen.push(`${m.fields.exchange}|${m.fields.routingKey}|${m.content.toString()}`);
        },
        { noAck: true },
      );
    }
    for (const u of USERS) {
      const ch = chans.get(u)!;
      ch.publish('orders-x', 'new', Buffer.from(`x-${u}`));
      ch.publish('amq.direct', 'direct-key', Buffer.from(`d-${u}`));
      ch.sendToQueue('orders', Buffer.from(`q-${u}`));
    }
    for (const u of USERS) {
      await until(() => assert.deepEqual(got.get(u), [`orders-x|new|x-${u}`, `amq.direct|direct-key|d-${u}`, `|orders|q-${u}`]));
    }
  });

  test('an MQTT publish in t1 reaches the AMQP queue bound to amq.topic in vhost t1 only', async () => {
    const got = new Map<User, string[]>();
    for (const u of USERS) {
      const ch = await open(u, HOME[u]);
      const q = await ch.assertQueue('sensor-q', { durable: false, exclusive: true });
      await ch.bindQueue(q.queue, 'amq.topic', 'sensors.#');
      const seen: string[] = [];
      got.set(u, seen);
      await ch.consume(q.queue, (m) => m !== null && seen.push(`${m.fields.exchange}|${m.fields.routingKey}|${m.content.toString()}`), {
        noAck: true,
      });
    }
    const m = await mqtt.connectAsync(mqttUrl, { username: 'ann', password: 'ann-pw', reconnectPeriod: 0 });
    await m.publishAsync('sensors/a/temp', '21', { qos: 1 });
    await m.endAsync();
    // Markers after: each vhost publishes on its own amq.topic, so each queue's last message proves the first came.
    for (const u of USERS) (await open(u, HOME[u])).publish('amq.topic', 'sensors.marker', Buffer.from(`m-${u}`));
    await until(() => assert.deepEqual(got.get('ann'), ['amq.topic|sensors.a.temp|21', 'amq.topic|sensors.marker|m-ann']));
    await until(() => assert.deepEqual(got.get('dee'), ['amq.topic|sensors.marker|m-dee']));
    await until(() => assert.deepEqual(got.get('bob'), ['amq.topic|sensors.marker|m-bob']));
  });

  test("dead-lettering goes to the vhost's own exchange and queue", async () => {
    const got = new Map<User, string[]>();
    for (const u of ['dee', 'ann'] as const) {
      const ch = await open(u, HOME[u]);
      await ch.assertExchange('dlx', 'fanout', { durable: false });
      await ch.assertQueue('dead', { durable: false });
      await ch.bindQueue('dead', 'dlx', '');
      await ch.assertQueue('work', { durable: false, deadLetterExchange: 'dlx', deadLetterRoutingKey: 'gone' });
      const seen: string[] = [];
      got.set(u, seen);
      await ch.consume('dead', (m) => m !== null && seen.push(`${m.fields.exchange}|${m.fields.routingKey}|${m.content.toString()}`), { noAck: true });
      ch.sendToQueue('work', Buffer.from(`w-${u}`));
      let msg: false | GetMessage = false;
      for (const deadline = Date.now() + 5000; msg === false && Date.now() < deadline;) msg = await ch.get('work');
      assert.ok(msg !== false);
      ch.nack(msg, false, false);
    }
    await until(() => assert.deepEqual(got.get('ann'), ['dlx|gone|w-ann']));
    await until(() => assert.deepEqual(got.get('dee'), ['dlx|gone|w-dee']));
  });

  test("an exchange bound to amq.topic, or an alternate exchange amq.topic, reaches only the vhost's topics", async () => {
    const got = new Map<User, string[]>();
    for (const u of ['dee', 'ann'] as const) {
      const ch = await open(u, HOME[u]);
      const q = await ch.assertQueue('', { exclusive: true });
      await ch.bindQueue(q.queue, 'amq.topic', 'fwd.#');
      const seen: string[] = [];
      got.set(u, seen);
      await ch.consume(q.queue, (m) => m !== null && seen.push(`${m.fields.routingKey}|${m.content.toString()}`), { noAck: true });
    }
    const ac = await amqp.connect(url('ann', 't1'));
    conns.push(ac);
    const ann = await ac.createConfirmChannel();
    await ann.assertExchange('fwd-x', 'direct', { durable: false });
    await ann.bindExchange('amq.topic', 'fwd-x', 'fwd.e2e');
    await ann.assertExchange('fwd-ae', 'direct', { durable: false, alternateExchange: 'amq.topic' });
    ann.publish('fwd-x', 'fwd.e2e', Buffer.from('bound'));
    ann.publish('fwd-ae', 'fwd.ae', Buffer.from('alternate'));
    // Routed (and so enqueued wherever it went) before the marker is published.
    await ann.waitForConfirms();
    (await open('dee', '/')).publish('amq.topic', 'fwd.marker', Buffer.from('m'));
    await until(() => assert.deepEqual(got.get('ann'), ['fwd.e2e|bound', 'fwd.ae|alternate']));
    await until(() => assert.deepEqual(got.get('dee'), ['fwd.marker|m']));
  });

  test('direct reply-to works inside a vhost; a responder of another vhost does not reach the requester', async () => {
    const req = await open('ann', 't1');
    const got: string[] = [];
    await req.consume('amq.rabbitmq.reply-to', (m) => m !== null && got.push(`${m.fields.routingKey.startsWith('amq.rabbitmq.reply-to.')}|${m.content}`), {
      noAck: true,
    });
    await req.assertQueue('rpc', { durable: false });
    req.sendToQueue('rpc', Buffer.from('ask'), { replyTo: 'amq.rabbitmq.reply-to' });
    const server = await open('ann', 't1');
    let asked: false | GetMessage = false;
    for (const deadline = Date.now() + 5000; asked === false && Date.now() < deadline;) asked = await server.get('rpc', { noAck: true });
    assert.ok(asked !== false);
    const replyTo = asked.properties.replyTo as string;
    // `/` (dee) answers first: dropped; then t1's answer arrives, and only it.
    const dc = await amqp.connect(url('dee', '/'));
    conns.push(dc);
    const dee = await dc.createConfirmChannel();
    dee.sendToQueue(replyTo, Buffer.from('from-default'));
    await dee.waitForConfirms();
    server.sendToQueue(replyTo, Buffer.from('from-t1'));
    await until(() => assert.deepEqual(got, ['true|from-t1']));
  });

  test("passive declares of another vhost's queue or exchange are 404 without naming the other vhost", async () => {
    const ch = await open('dee', '/');
    await ch.assertQueue('only-default', { durable: false });
    await ch.assertExchange('only-default-x', 'fanout', { durable: false });
    const q = await closedWith((c) => c.checkQueue('only-default'), 'ann');
    assert.equal(q.code, 404);
    assert.match(q.message, /NOT_FOUND - no queue 'only-default' in vhost 't1'/);
    const x = await closedWith((c) => c.checkExchange('only-default-x'), 'bob');
    assert.equal(x.code, 404);
    assert.match(x.message, /no exchange 'only-default-x' in vhost 't2'/);
    assert.doesNotMatch(q.message + x.message, /\$ns/);
    // The owner still finds them.
    await (await open('dee', '/')).checkQueue('only-default');
  });

  test('the reserved $ns/ prefix is refused in every vhost', async () => {
    const a = await closedWith((c) => c.checkQueue('$ns/t1/orders'), 'dee');
    assert.equal(a.code, 403);
    const b = await closedWith((c) => c.assertQueue('$ns/t2/orders'), 'ann');
    assert.equal(b.code, 403);
    const k = await closedWith(async (c) => c.bindQueue((await c.assertQueue('', { exclusive: true })).queue, 'amq.topic', '$ns.t1.#'), 'dee');
    assert.equal(k.code, 403);
  });

  test('a user opens its own vhost; another gets 530, an unknown one 530 not found; admins open every vhost', async () => {
    // amqplib reports the connection.close without its text; test/protocols/amqp/auth.test.ts reads the texts.
    for (const [u, vhost] of [
      ['ann', 't2'],
      ['bob', 'default'],
      ['dee', 't1'],
      ['ann', 'nope'],
    ]) {
      await assert.rejects(amqp.connect(url(u, vhost)), /ConnectionClose/, `${u} in ${vhost}`);
    }
    // root (admins) works in t1's world.
    const ch = await open('root', 't1');
    await ch.checkQueue('orders');
    const r = await ch.get('orders');
    assert.equal(r, false);
  });

  test('the management API lists vhosts from namespaces and each object in its vhost', async () => {
    const get = async (user: string, path: string): Promise<{ status: number; body: unknown }> => {
      const r = await fetch(`${mgmt}${path}`, { headers: { authorization: `Basic ${Buffer.from(`${user}:${user}-pw`).toString('base64')}` } });
      return { status: r.status, body: r.status === 200 ? await r.json() : null };
    };
    const names = (b: unknown) => (b as Array<{ name: string; vhost: string }>).map((x) => `${x.vhost}:${x.name}`);
    const vhosts = async (user: string) => ((await get(user, '/api/vhosts')).body as Array<{ name: string }>).map((v) => v.name);
    assert.deepEqual(await vhosts('root'), ['/', 't1', 't2']);
    assert.deepEqual(await vhosts('ann'), ['/', 't1']);
    const t1 = names((await get('root', '/api/queues/t1')).body);
    assert.ok(t1.includes('t1:orders') && !t1.some((n) => !n.startsWith('t1:')), t1.join());
    assert.ok(!names((await get('root', '/api/queues/%2F')).body).some((n) => !n.startsWith('/:')));
    const q = (await get('root', '/api/queues/t2/orders')).body as { name: string; vhost: string };
    assert.deepEqual([q.name, q.vhost], ['orders', 't2']);
    assert.equal((await get('root', '/api/queues/t2/only-default')).status, 404);
    assert.equal((await get('ann', '/api/queues/t2')).status, 404);
    const x = names((await get('root', '/api/exchanges/t1')).body);
    assert.ok(x.includes('t1:orders-x') && x.includes('t1:amq.direct') && !x.some((n) => n.startsWith('t2:') || n.startsWith('/:orders')), x.join());
    const b = (await get('root', '/api/bindings/t1')).body as Array<{ source: string; destination: string; routing_key: string }>;
    assert.ok(
      b.some((e) => e.source === 'amq.topic' && e.routing_key === 'sensors.#'),
      JSON.stringify(b),
    );
    // Definitions are `/`'s alone (other vhosts' are not exported yet): no internal name (t1's durable amq.direct
    // is `$ns/t1/amq.direct`) leaks into them.
    const defs = (await get('root', '/api/definitions')).body as { exchanges: unknown[] };
    assert.ok(Array.isArray(defs.exchanges));
    assert.doesNotMatch(JSON.stringify(defs), /\$ns/);
  });
});
