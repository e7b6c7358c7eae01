/**
 * RabbitMQ-style per-vhost permissions (issue 29): a user allowed in several vhosts picks one at connection.open, and
 * acts there (vhost = namespace) with the permission it was granted in it; a vhost it is not allowed in is 530
 * NOT_ALLOWED. amqplib, python3-pika (the 530 text) and fetch against one in-process broker: `default` (dee, root of
 * the admins group), `t1` (ann), `t2` (bob). Permissions are set through the RabbitMQ management API
 * (`PUT /api/permissions/{vhost}/{user}`), and through FlowMQ's own admin API (a policy scoped to the namespace naming
 * the user); configure/write/read are checked as RabbitMQ checks them (403 ACCESS_REFUSED), FlowMQ deny policies
 * still hold, and the user's permissions of its own vhost do not follow it into another. kafkajs: the permission of a
 * user's own vhost holds for its Kafka clients too (they are in its own namespace), a guest grant does not reach them.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { Kafka, logLevel } from 'kafkajs';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
/** Opens a pika connection to a vhost; prints "opened" or the exception pika raised with its args. */
const PIKA_OPEN = `
import pika, sys
try:
    pika.BlockingConnection(pika.ConnectionParameters(host='127.0.0.1', port=int(sys.argv[1]), virtual_host=sys.argv[4], credentials=pika.PlainCredentials(sys.argv[2], sys.argv[3])))
    print('opened')
except Exception as e:
    print(type(e).__name__, repr(e.args))
`;

describe('e2e: AMQP per-vhost permissions (RabbitMQ set_permissions, vhost = namespace)', { timeout: 60_000 }, () => {
  let dir = '';
  let broker: Broker;
  let amqpPort = 0;
  let kafkaAddr = '';
  let mgmt = '';
  let adminApi = '';
  const conns: ChannelModel[] = [];

  const url = (user: string, vhost: string) => `amqp://${user}:${user}-pw@127.0.0.1:${amqpPort}/${encodeURIComponent(vhost)}?heartbeat=0`;
  const auth = (user: string) => `Basic ${Buffer.from(`${user}:${user}-pw`).toString('base64')}`;
  const http = async (base: string, method: string, path: string, body?: unknown, user = 'root') => {
    const headers: Record<string, string> = { authorization: auth(user) };
    // FlowMQ's admin API wants the JSON content type on every write, body or not (RabbitMQ's takes it too).
    if (body !== undefined || method !== 'GET') headers['content-type'] = 'application/json';
    const r = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    return { status: r.status, json: (text === '' ? null : JSON.parse(text)) as Json };
  };
  const rabbit = (method: string, path: string, body?: unknown) => http(mgmt, method, path, body);

  async function connect(user: string, vhost: string): Promise<ChannelModel> {
    const c = await amqp.connect(url(user, vhost));
    c.on('error', () => undefined);
    conns.push(c);
    return c;
  }
  /** Runs a channel call on a fresh channel of `conn`: null, or the code of the channel.close it caused. */
  async function attempt(conn: ChannelModel, fn: (ch: Channel) => Promise<unknown>): Promise<number | null> {
    const ch = await conn.createChannel();
    ch.on('error', () => undefined);
    try {
      await fn(ch);
      await ch.close();
      return null;
    } catch (e) {
      // amqplib rejects with an Error carrying `code`, or (basic.get) with the channel.close frame itself.
      const code = (e as { code?: number; fields?: { replyCode?: number } }).code ?? (e as { fields?: { replyCode?: number } }).fields?.replyCode;
      if (code === undefined) throw e;
      return code;
    }
  }
  /** connection.open of `vhost` as `user` through pika: "opened", or pika's exception naming the close. */
  async function pikaOpen(user: string, vhost: string): Promise<string> {
    const { stdout } = await promisify(execFile)(PYTHON, ['-c', PIKA_OPEN, String(amqpPort), user, `${user}-pw`, vhost]);
    return stdout.trim().replace(/\\/g, '');
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-amqp-vhost-perms-'));
    writeFileSync(
      join(dir, 'users.yaml'),
      [
        'users:',
        '  - {username: dee, password: dee-pw}',
        '  - {username: root, password: root-pw, groups: [admins]}',
        '  - {username: ann, password: ann-pw, namespace: t1}',
        '  - {username: bob, password: bob-pw, namespace: t2}',
        '  - {username: cat, password: cat-pw, namespace: t1}',
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
      'kafka-port': '0',
      'amqp-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
      'amqp-management-port': '0',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    amqpPort = broker.listeners.get('amqp')!.address().port;
    kafkaAddr = `127.0.0.1:${broker.listeners.get('kafka')!.address().port}`;
    mgmt = `http://127.0.0.1:${broker.ports()['amqp-management']}`;
    adminApi = `http://127.0.0.1:${broker.ports().http}`;
    // Everyone has every right in its own vhost (RabbitMQ's `.* .* .*`).
    const all = { configure: '.*', write: '.*', read: '.*' };
    assert.equal((await rabbit('PUT', '/api/permissions/%2F/dee', all)).status, 201);
    assert.equal((await rabbit('PUT', '/api/permissions/t1/ann', all)).status, 201);
    assert.equal((await rabbit('PUT', '/api/permissions/t2/bob', all)).status, 201);
  });

  after(async () => {
    for (const c of conns) await c.close().catch(() => undefined);
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a vhost the user has no permission in is 530 NOT_ALLOWED at connection.open', async () => {
    assert.match(await pikaOpen('ann', 't2'), /530.*NOT_ALLOWED - access to vhost 't2' refused for user 'ann'/);
    assert.match(await pikaOpen('ann', 'nope'), /530.*NOT_ALLOWED - vhost nope not found/);
    assert.equal(await pikaOpen('ann', 't1'), 'opened');
    await assert.rejects(amqp.connect(url('dee', 't2')), /ConnectionClose/);
  });

  test('PUT /api/permissions/{vhost}/{user} for another vhost: listed per vhost and per user', async () => {
    const grant = { configure: '^ann-', write: '^(ann-.*|amq\\.default|amq\\.topic)$', read: '^ann-' };
    assert.equal((await rabbit('PUT', '/api/permissions/t2/ann', grant)).status, 201);
    assert.equal((await rabbit('PUT', '/api/permissions/t2/ann', grant)).status, 204);
    assert.deepEqual((await rabbit('GET', '/api/permissions/t2/ann')).json, { user: 'ann', vhost: 't2', ...grant });
    const all = { configure: '.*', write: '.*', read: '.*' };
    assert.deepEqual((await rabbit('GET', '/api/permissions/t1/ann')).json, { user: 'ann', vhost: 't1', ...all });
    assert.equal((await rabbit('GET', '/api/permissions/%2F/ann')).status, 404);
    assert.deepEqual((await rabbit('GET', '/api/users/ann/permissions')).json, [
      { user: 'ann', vhost: 't1', ...all },
      { user: 'ann', vhost: 't2', ...grant },
    ]);
    assert.deepEqual(
      ((await rabbit('GET', '/api/vhosts/t2/permissions')).json as unknown as Json[]).map((p) => `${p.user}@${p.vhost}`),
      ['ann@t2', 'bob@t2'],
    );
    assert.deepEqual(
      ((await rabbit('GET', '/api/permissions')).json as unknown as Json[]).map((p) => `${p.user}@${p.vhost}`),
      ['ann@t1', 'ann@t2', 'bob@t2', 'dee@/'],
    );
    assert.equal((await rabbit('GET', '/api/vhosts/nope/permissions')).status, 404);
    assert.deepEqual((await rabbit('PUT', '/api/permissions/nope/ann', grant)).json, { error: 'bad_request', reason: 'vhost_or_user_not_found' });
  });

  test('the granted user opens the vhost and acts in its namespace with the granted configure/write/read', async () => {
    assert.equal(await pikaOpen('ann', 't2'), 'opened');
    const ann = await connect('ann', 't2');
    const bob = await connect('bob', 't2');
    const annHome = await connect('ann', '/');
    // configure: ^ann-
    assert.equal(await attempt(ann, (ch) => ch.assertQueue('ann-q', { durable: false })), null);
    assert.equal(await attempt(ann, (ch) => ch.assertQueue('other', { durable: false })), 403);
    assert.equal(await attempt(ann, (ch) => ch.assertExchange('bobs-x', 'fanout', { durable: false })), 403);
    // RabbitMQ's text, naming the vhost the connection opened.
    const ch = await ann.createChannel();
    ch.on('error', () => undefined);
    await assert.rejects(ch.assertQueue('other', { durable: false }), (e: Error) => {
      assert.match(e.message, /403 \(ACCESS-REFUSED\) with message "ACCESS_REFUSED - access to queue 'other' in vhost 't2' refused for user 'ann'"/);
      return true;
    });
    // The queue is t2's: bob (t2) sees it, ann's own vhost (t1) does not.
    assert.equal(await attempt(bob, (ch) => ch.checkQueue('ann-q')), null);
    assert.equal(await attempt(annHome, (ch) => ch.checkQueue('ann-q')), 404);
    // bob's queue: ann may not read it (read ^ann-) nor bind it (write)...
    assert.equal(await attempt(bob, (ch) => ch.assertQueue('bobs-q', { durable: false })), null);
    assert.equal(await attempt(ann, (ch) => ch.consume('bobs-q', () => undefined)), 403);
    assert.equal(await attempt(ann, (ch) => ch.get('bobs-q')), 403);
    assert.equal(await attempt(ann, (ch) => ch.bindQueue('bobs-q', 'amq.direct', 'k')), 403);
    // ...nor publish through amq.fanout (write).
    assert.equal(
      await attempt(ann, async (ch) => {
        ch.publish('amq.fanout', '', Buffer.from('x'));
        await ch.checkQueue('ann-q'); // the channel.close of the publish comes before this answer
      }),
      403,
    );
    // write matches amq.default: ann publishes to t2's ann-q and bob gets it there; bob's own vhost is where it went.
    const pub = await ann.createConfirmChannel();
    pub.sendToQueue('ann-q', Buffer.from('from ann'));
    await pub.waitForConfirms();
    const bobCh = await bob.createChannel();
    const got = await bobCh.get('ann-q', { noAck: true });
    assert.ok(got !== false && got.content.toString() === 'from ann');
    // ann reads its own queue in t2 (read ^ann-).
    pub.sendToQueue('ann-q', Buffer.from('again'));
    await pub.waitForConfirms();
    const annCh = await ann.createChannel();
    const mine = await annCh.get('ann-q', { noAck: true });
    assert.ok(mine !== false && mine.content.toString() === 'again');
    // connection.update-secret (the password again): still a guest in t2, with t2's grant and not t1's `.*`.
    await ann.updateSecret(Buffer.from('ann-pw'), 'renew');
    assert.equal(await attempt(ann, (ch) => ch.checkQueue('ann-q')), null);
    assert.equal(await attempt(ann, (ch) => ch.assertQueue('other', { durable: false })), 403);
  });

  test('permissions of the user’s own vhost do not follow it; a FlowMQ deny holds in the granted vhost', async () => {
    // ann has `.*` in t1: in t2 only the t2 permission counts.
    const ann = await connect('ann', 't2');
    assert.equal(await attempt(ann, (ch) => ch.assertQueue('plain', { durable: false })), 403);
    // A deny policy scoped to t2 naming everyone (what t2's administrator may write) holds for the guest too.
    const deny = {
      name: 't2-no-secret',
      effect: 'deny',
      actions: ['create', 'publish', 'subscribe'],
      resources: ['queue:ann-secret'],
      principals: ['everyone'],
      namespace: 't2',
    };
    assert.equal((await http(adminApi, 'POST', '/api/v1/policies', deny)).status, 201);
    assert.equal(await attempt(ann, (ch) => ch.assertQueue('ann-secret', { durable: false })), 403);
    assert.equal(await attempt(ann, (ch) => ch.assertQueue('ann-open', { durable: false })), null);
    // An unscoped deny naming ann holds in every vhost.
    const denyAnn = { name: 'no-ann-open', effect: 'deny', actions: ['subscribe'], resources: ['queue:ann-open'], principals: ['user:ann'] };
    assert.equal((await http(adminApi, 'POST', '/api/v1/policies', denyAnn)).status, 201);
    assert.equal(await attempt(ann, (ch) => ch.get('ann-open')), 403);
    assert.equal(await attempt(ann, (ch) => ch.get('ann-q')), null);
  });

  test('topic permissions per vhost narrow amq.topic keys in that vhost only', async () => {
    const tp = { exchange: 'amq.topic', write: '^ann\\.', read: '^ann\\.' };
    assert.equal((await rabbit('PUT', '/api/topic-permissions/t2/ann', tp)).status, 201);
    assert.deepEqual((await rabbit('GET', '/api/topic-permissions/t2/ann')).json, [{ user: 'ann', vhost: 't2', ...tp }]);
    assert.equal((await rabbit('GET', '/api/topic-permissions/t1/ann')).status, 404);
    assert.deepEqual(
      ((await rabbit('GET', '/api/vhosts/t2/topic-permissions')).json as unknown as Json[]).map((p) => `${p.user}@${p.vhost}`),
      ['ann@t2'],
    );
    const ann = await connect('ann', 't2');
    const publishes = (key: string) =>
      attempt(ann, async (ch) => {
        ch.publish('amq.topic', key, Buffer.from('k'));
        await ch.checkQueue('ann-q');
      });
    assert.equal(await publishes('ann.x'), null);
    assert.equal(await publishes('other.x'), 403);
    // ann's own vhost has no topic permission: any key.
    const home = await connect('ann', 't1');
    assert.equal(
      await attempt(home, async (ch) => {
        ch.publish('amq.topic', 'other.x', Buffer.from('k'));
        await ch.checkExchange('amq.topic');
      }),
      null,
    );
    assert.equal((await rabbit('DELETE', '/api/topic-permissions/t2/ann')).status, 204);
    assert.equal(await publishes('other.x'), null);
  });

  test("FlowMQ's admin API grants a vhost: a policy scoped to the namespace naming the user", async () => {
    await assert.rejects(amqp.connect(url('dee', 't1')), /ConnectionClose/);
    const grant = {
      name: 'dee-in-t1',
      effect: 'allow',
      actions: ['describe', 'subscribe'],
      resources: ['queue:*'],
      principals: ['user:dee'],
      namespace: 't1',
    };
    assert.equal((await http(adminApi, 'POST', '/api/v1/policies', grant)).status, 201);
    const dee = await connect('dee', 't1');
    const ann = await connect('ann', 't1');
    assert.equal(await attempt(ann, (ch) => ch.assertQueue('t1-q', { durable: false })), null);
    assert.equal(await attempt(dee, (ch) => ch.checkQueue('t1-q')), null);
    assert.equal(await attempt(dee, (ch) => ch.get('t1-q')), null);
    assert.equal(await attempt(dee, (ch) => ch.assertQueue('dee-q', { durable: false })), 403);
    // A group or everyone in a namespace's policy does not make guests: only a policy naming the user does.
    assert.equal((await http(adminApi, 'DELETE', '/api/v1/policies/dee-in-t1')).status, 204);
    const everyone = { ...grant, name: 'everyone-in-t1', principals: ['everyone'] };
    assert.equal((await http(adminApi, 'POST', '/api/v1/policies', everyone)).status, 201);
    await assert.rejects(amqp.connect(url('dee', 't1')), /ConnectionClose/);
  });

  test('GET/POST /api/definitions: every namespace is a vhost, permissions and topic permissions keep theirs', async () => {
    const doc = (await rabbit('GET', '/api/definitions')).json;
    assert.deepEqual(doc.vhosts, [{ name: '/' }, { name: 't1' }, { name: 't2' }]);
    assert.deepEqual(
      (doc.permissions as Json[]).map((p) => `${p.user}@${p.vhost}`),
      ['ann@t1', 'ann@t2', 'bob@t2', 'dee@/'],
    );
    assert.deepEqual(doc.topic_permissions, []);
    // bob gets a vhost (t1) and a topic permission there from a definitions file; ann's t2 permission is re-imported.
    const imported = {
      vhosts: [{ name: '/' }, { name: 't1' }, { name: 't2' }],
      permissions: [
        { user: 'bob', vhost: 't1', configure: '^bob-', write: '^(bob-.*|amq\\.topic)$', read: '^bob-' },
        { user: 'ann', vhost: 't2', configure: '^ann-', write: '^(ann-.*|amq\\.default|amq\\.topic)$', read: '^ann-' },
      ],
      topic_permissions: [{ user: 'bob', vhost: 't1', exchange: 'amq.topic', write: '^bob\\.', read: '^bob\\.' }],
    };
    // A vhost name no namespace may have (`vhosts` are made: namespaces-amqp-definitions), or a queue naming a vhost
    // that neither exists nor is in `vhosts`, refuses the whole file before anything changes.
    const bad = await rabbit('POST', '/api/definitions', { ...imported, vhosts: [{ name: 'no pe' }] });
    assert.equal(bad.status, 400);
    const badQueue = await rabbit('POST', '/api/definitions', { ...imported, queues: [{ name: 'q', vhost: 'nope', durable: true }] });
    assert.deepEqual([badQueue.status, badQueue.json], [400, { error: 'bad_request', reason: ['no_such_vhost', 'nope'] }]);
    assert.equal((await rabbit('GET', '/api/permissions/t1/bob')).status, 404);
    assert.match(await pikaOpen('bob', 't1'), /530.*NOT_ALLOWED - access to vhost 't1' refused for user 'bob'/);
    assert.equal((await rabbit('POST', '/api/definitions', imported)).status, 204);
    assert.deepEqual((await rabbit('GET', '/api/permissions/t1/bob')).json, imported.permissions[0]);
    assert.deepEqual((await rabbit('GET', '/api/topic-permissions/t1/bob')).json, imported.topic_permissions);
    const again = (await rabbit('GET', '/api/definitions')).json;
    assert.deepEqual(
      (again.permissions as Json[]).map((p) => `${p.user}@${p.vhost}`),
      ['ann@t1', 'ann@t2', 'bob@t1', 'bob@t2', 'dee@/'],
    );
    assert.deepEqual(again.topic_permissions, imported.topic_permissions);
    // bob acts in t1 with what the file gave it.
    const bob = await connect('bob', 't1');
    assert.equal(await attempt(bob, (ch) => ch.assertQueue('bob-q', { durable: false })), null);
    assert.equal(await attempt(bob, (ch) => ch.assertQueue('t1-other', { durable: false })), 403);
    const publishes = (key: string) =>
      attempt(bob, async (ch) => {
        ch.publish('amq.topic', key, Buffer.from('k'));
        await ch.checkQueue('bob-q');
      });
    assert.equal(await publishes('bob.x'), null);
    assert.equal(await publishes('ann.x'), 403);
  });

  test("the user's own vhost permission holds on Kafka too; a grant in another vhost does not reach Kafka", async () => {
    // cat (t1) may configure ^cat- in its own vhost, and everything in t2 as a guest.
    assert.equal((await rabbit('PUT', '/api/permissions/t1/cat', { configure: '^cat-', write: '.*', read: '.*' })).status, 201);
    assert.equal((await rabbit('PUT', '/api/permissions/t2/cat', { configure: '.*', write: '.*', read: '.*' })).status, 201);
    const kafka = new Kafka({
      clientId: 'cat',
      brokers: [kafkaAddr],
      sasl: { mechanism: 'plain', username: 'cat', password: 'cat-pw' },
      logLevel: logLevel.NOTHING,
      retry: { retries: 0 },
    });
    const admin = kafka.admin();
    await admin.connect();
    try {
      assert.equal(await admin.createTopics({ topics: [{ topic: 'cat-t', numPartitions: 1 }], waitForLeaders: true }), true);
      await assert.rejects(admin.createTopics({ topics: [{ topic: 'dog-t', numPartitions: 1 }] }), (e: { errors?: Array<{ type?: string }> }) => {
        assert.equal(e.errors?.[0]?.type, 'TOPIC_AUTHORIZATION_FAILED');
        return true;
      });
    } finally {
      await admin.disconnect();
    }
    // The Kafka topic is t1's stream: cat's AMQP connection to its own vhost sees it as a stream queue, t2 does not.
    assert.equal(await attempt(await connect('cat', 't1'), (ch) => ch.checkQueue('cat-t')), null);
    assert.equal(await attempt(await connect('cat', 't2'), (ch) => ch.checkQueue('cat-t')), 404);
    // In t2 (AMQP, a guest) cat configures any name.
    assert.equal(await attempt(await connect('cat', 't2'), (ch) => ch.assertQueue('dog-q', { durable: false })), null);
    assert.equal(await attempt(await connect('cat', 't1'), (ch) => ch.assertQueue('dog-q', { durable: false })), 403);
  });

  test('DELETE /api/permissions/{vhost}/{user}: the open connection is refused at its next method, a new one at open', async () => {
    const ann = await connect('ann', 't2');
    assert.equal(await attempt(ann, (ch) => ch.checkQueue('ann-q')), null);
    assert.equal((await rabbit('DELETE', '/api/permissions/t2/ann')).status, 204);
    assert.equal((await rabbit('DELETE', '/api/permissions/t2/ann')).status, 404);
    assert.equal(await attempt(ann, (ch) => ch.get('ann-q')), 403);
    assert.match(await pikaOpen('ann', 't2'), /530.*NOT_ALLOWED - access to vhost 't2' refused for user 'ann'/);
    // ann's own vhost is untouched.
    assert.equal((await rabbit('GET', '/api/permissions/t1/ann')).status, 200);
    assert.equal(await pikaOpen('ann', 't1'), 'opened');
  });

  test("deleting a namespace (admin API) deletes its guests' permissions, its policies, queues and streams; made again, it is empty", async () => {
    assert.equal((await rabbit('PUT', '/api/vhosts/t5')).status, 201);
    assert.equal((await rabbit('PUT', '/api/vhosts/t5', { description: 'fifth' })).status, 204);
    assert.equal((await rabbit('GET', '/api/vhosts/t5')).json.description, 'fifth');
    // ann (of t1) is a guest of t5, with a topic permission there; t5 has a policy, a classic queue and a stream queue.
    assert.equal((await rabbit('PUT', '/api/permissions/t5/ann', { configure: '.*', write: '.*', read: '.*' })).status, 201);
    assert.equal((await rabbit('PUT', '/api/topic-permissions/t5/ann', { exchange: 'amq.topic', write: '^a', read: '^a' })).status, 201);
    assert.equal((await rabbit('PUT', '/api/policies/t5/t5-cap', { pattern: '^g', definition: { 'max-length': 5 } })).status, 201);
    const ann = await connect('ann', 't5');
    const closed = new Promise<string>((resolve) => ann.on('close', (e?: Error) => resolve(e?.message ?? 'closed without an error')));
    assert.equal(await attempt(ann, (ch) => ch.assertQueue('gq', { durable: true })), null);
    assert.equal(await attempt(ann, (ch) => ch.assertQueue('gs', { durable: true, arguments: { 'x-queue-type': 'stream' } })), null);
    assert.equal((await rabbit('GET', '/api/queues/t5/gq')).json.policy, 't5-cap');
    assert.equal((await rabbit('GET', '/api/queues/t5/gs')).status, 200);

    // Before: 400 "namespace t5 still has 12 policy(ies) scoped to it" (ann's permission policies).
    const del = await http(adminApi, 'DELETE', '/api/v1/namespaces/t5');
    assert.equal(del.status, 204, JSON.stringify(del.json));
    assert.equal((await http(adminApi, 'GET', '/api/v1/namespaces/t5')).status, 404);
    // ann's connection in t5 is closed with RabbitMQ's text for a deleted vhost.
    assert.match(await closed, /320 \(CONNECTION-FORCED\) with message "CONNECTION_FORCED - vhost 't5' is deleted"/);
    assert.ok(!(await rabbit('GET', '/api/permissions')).json.some((p: Json) => p.vhost === 't5'));
    assert.ok(!(await rabbit('GET', '/api/topic-permissions')).json.some((p: Json) => p.vhost === 't5'));
    assert.ok(!(await rabbit('GET', '/api/policies')).json.some((p: Json) => p.vhost === 't5'));
    assert.ok(!(await http(adminApi, 'GET', '/api/v1/policies?limit=1000')).json.items.some((p: Json) => p.namespace === 't5'));
    assert.match(await pikaOpen('ann', 't5'), /530.*NOT_ALLOWED - vhost t5 not found/);
    // ann's own vhost and permission are untouched.
    assert.equal((await rabbit('GET', '/api/permissions/t1/ann')).status, 200);

    // Made again under the same name: nothing of the deleted one applies to it.
    assert.equal((await http(adminApi, 'POST', '/api/v1/namespaces', { name: 't5' })).status, 201);
    assert.match(await pikaOpen('ann', 't5'), /530.*NOT_ALLOWED - access to vhost 't5' refused for user 'ann'/);
    assert.equal((await rabbit('GET', '/api/queues/t5/gq')).status, 404);
    assert.equal((await rabbit('GET', '/api/queues/t5/gs')).status, 404);
    assert.deepEqual((await rabbit('GET', '/api/policies/t5')).json, []);
    assert.deepEqual((await rabbit('GET', '/api/vhosts/t5/permissions')).json, []);
  });

  test('PUT and DELETE /api/vhosts/{vhost} (rabbitmqadmin declare/delete vhost): administrators only, RabbitMQ answers', async () => {
    assert.equal((await rabbit('PUT', '/api/vhosts/t6')).status, 201);
    // As RabbitMQ, its maker (root) gets every permission in it.
    assert.deepEqual((await rabbit('GET', '/api/vhosts/t6/permissions')).json, [{ vhost: 't6', user: 'root', configure: '.*', write: '.*', read: '.*' }]);
    assert.equal((await rabbit('PUT', '/api/permissions/t6/bob', { configure: '.*', write: '.*', read: '.*' })).status, 201);
    assert.equal(await pikaOpen('bob', 't6'), 'opened');
    // Not an administrator: RabbitMQ's 401.
    assert.equal((await http(mgmt, 'DELETE', '/api/vhosts/t6', undefined, 'ann')).status, 401);
    assert.equal((await http(mgmt, 'PUT', '/api/vhosts/t7', undefined, 'ann')).status, 401);
    assert.equal((await rabbit('DELETE', '/api/vhosts/t6')).status, 204);
    assert.deepEqual(await rabbit('DELETE', '/api/vhosts/t6'), { status: 404, json: { error: 'Object Not Found', reason: 'Not Found' } });
    assert.equal((await rabbit('GET', '/api/vhosts/t6')).status, 404);
    assert.ok(!(await rabbit('GET', '/api/permissions')).json.some((p: Json) => p.vhost === 't6'));
    assert.match(await pikaOpen('bob', 't6'), /530.*NOT_ALLOWED - vhost t6 not found/);
    // `/` is `default`, which is never deleted; t1 is ann's and cat's home; a name no namespace may have.
    const root = await rabbit('DELETE', '/api/vhosts/%2F');
    assert.deepEqual([root.status, root.json.error], [400, 'bad_request']);
    const home = await rabbit('DELETE', '/api/vhosts/t1');
    assert.deepEqual([home.status, home.json.reason], [400, 'namespace "t1" still has 2 user(s)']);
    assert.equal((await rabbit('PUT', '/api/vhosts/a%20b')).status, 400);
    assert.equal((await rabbit('PUT', '/api/vhosts/%2F')).status, 204);
  });

  test('a policymaker manages the policies of a vhost it has permissions in as a guest (RabbitMQ 3.10), not of others', async () => {
    // pam (a user of `default`, made through the management API) with the tag policymaker, a guest of t2 only.
    assert.equal((await rabbit('PUT', '/api/users/pam', { password: 'pam-pw', tags: 'policymaker' })).status, 201);
    assert.equal((await rabbit('PUT', '/api/permissions/t2/pam', { configure: '', write: '', read: '.*' })).status, 201);
    const pam = (method: string, path: string, body?: unknown) => http(mgmt, method, path, body, 'pam');
    const cap = { pattern: '^pam-', definition: { 'max-length': 3 }, 'apply-to': 'queues' };
    // Before: 404 vhost_not_found (a guest's vhost was not the policymaker's).
    assert.equal((await pam('PUT', '/api/policies/t2/pam-cap', cap)).status, 201);
    assert.deepEqual(
      (await pam('GET', '/api/policies/t2')).json.map((p: Json) => `${p.vhost}|${p.name}`),
      ['t2|pam-cap'],
    );
    assert.equal((await pam('GET', '/api/policies/t2/pam-cap')).json.definition['max-length'], 3);
    assert.ok((await pam('GET', '/api/policies')).json.some((p: Json) => p.vhost === 't2' && p.name === 'pam-cap'));
    // The policy applies in t2 (bob's queue there), as the administrator sees it.
    const bob = await connect('bob', 't2');
    assert.equal(await attempt(bob, (ch) => ch.assertQueue('pam-q', { durable: true })), null);
    assert.equal((await rabbit('GET', '/api/queues/t2/pam-q')).json.policy, 'pam-cap');
    // Its own vhost `/` too; none in t1, where it has no permission (another tenant's vhost: 404 as for one nobody has),
    // and t1's policies are not listed to it.
    assert.equal((await pam('PUT', '/api/policies/%2F/pam-own', cap)).status, 201);
    assert.deepEqual(await pam('PUT', '/api/policies/t1/pam-cap', cap), { status: 404, json: { error: 'not_found', reason: 'vhost_not_found' } });
    assert.equal((await rabbit('PUT', '/api/policies/t1/t1-cap', cap)).status, 201);
    assert.equal((await pam('GET', '/api/policies/t1')).status, 404);
    assert.ok(!(await pam('GET', '/api/policies')).json.some((p: Json) => p.vhost === 't1'));
    // Operator policies stay the administrators' in a guest's vhost (RabbitMQ 3.10: administrator only).
    assert.equal((await pam('PUT', '/api/operator-policies/t2/pam-op', { pattern: '^pam-', definition: { 'max-length': 1 } })).status, 404);
    // Its permission gone, its guest's reach goes too.
    assert.equal((await rabbit('DELETE', '/api/permissions/t2/pam')).status, 204);
    assert.equal((await pam('DELETE', '/api/policies/t2/pam-cap')).status, 404);
    assert.equal((await rabbit('PUT', '/api/permissions/t2/pam', { configure: '', write: '', read: '.*' })).status, 201);
    assert.equal((await pam('DELETE', '/api/policies/t2/pam-cap')).status, 204);
    assert.deepEqual((await rabbit('GET', '/api/policies/t2')).json, []);
  });
});
