/**
 * RabbitMQ definitions (`GET`/`POST /api/definitions[/{vhost}]`) per vhost, a vhost being a namespace (issue 29):
 * the whole export holds the queues, exchanges and bindings of every vhost with their `vhost` and the names its
 * clients write; `/api/definitions/{vhost}` that vhost's only, without vhost fields; an import creates each object
 * in the vhost it names (amqplib in that vhost uses it, passive declares from another vhost get 404 NOT_FOUND); an
 * unknown vhost refuses the whole file; a namespace administrator (ann, `admin namespace:t1`) exports and imports its
 * own vhost only and sees nothing of t2; a plain tenant user (bob) is refused.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { until } from './harness.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe('e2e: RabbitMQ definitions per vhost (namespace)', { timeout: 60_000 }, () => {
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
    return { status: r.status, text, json: (text === '' ? null : JSON.parse(text)) as Json };
  };

  async function open(user: string, vhost: string): Promise<Channel> {
    const c = await amqp.connect(`amqp://${user}:${user}-pw@127.0.0.1:${amqpPort}/${encodeURIComponent(vhost)}?heartbeat=0`);
    conns.push(c);
    const ch = await c.createChannel();
    ch.on('error', () => undefined);
    return ch;
  }
  /** A passive declare on a fresh channel: null when the queue is there, else the channel's close code. */
  async function passive(user: string, vhost: string, queue: string): Promise<string | null> {
    const ch = await open(user, vhost);
    try {
      await ch.checkQueue(queue);
      return null;
    } catch (e) {
      // amqplib: "Operation failed: QueueDeclare; 404 (NOT-FOUND) with message "NOT_FOUND - no queue ..."".
      const m = /; (\d{3}) \(([A-Z-]+)\)/.exec((e as Error).message);
      assert.ok(m !== null, (e as Error).message);
      return `${m[1]} ${m[2]}`;
    }
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ns-amqp-defs-'));
    writeFileSync(
      join(dir, 'users.yaml'),
      [
        'users:',
        '  - {username: root, password: root-pw, groups: [admins]}',
        '  - {username: ann, password: ann-pw, namespace: t1}',
        '  - {username: bob, password: bob-pw, namespace: t2}',
        'namespaces:',
        '  - {name: t1}',
        '  - {name: t2}',
        'policies:',
        '  - {name: t1-admin, effect: allow, actions: [admin], resources: ["namespace:t1"], principals: ["user:ann"]}',
        '  - {name: ann-own, namespace: t1, effect: allow, actions: [create, delete, describe, publish, subscribe, alter], resources: ["queue:*", "exchange:*", "topic:#"], principals: ["user:ann"]}',
        '  - {name: bob-own, namespace: t2, effect: allow, actions: [create, delete, describe, publish, subscribe, alter], resources: ["queue:*", "exchange:*", "topic:#"], principals: ["user:bob"]}',
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
    // The same names in t1, t2 and `/`, made through the per-vhost write routes.
    for (const v of ['t1', 't2', '%2F']) {
      assert.equal((await http('root', 'PUT', `/api/exchanges/${v}/orders-x`, { type: 'topic', durable: true })).status, 201);
      assert.equal(
        (await http('root', 'PUT', `/api/queues/${v}/orders-q`, { durable: true, arguments: { 'x-dead-letter-exchange': 'orders-x' } })).status,
        201,
      );
      assert.equal((await http('root', 'POST', `/api/bindings/${v}/e/orders-x/q/orders-q`, { routing_key: `a.${v}` })).status, 201);
    }
    assert.equal((await http('root', 'POST', '/api/bindings/t1/e/amq.topic/q/orders-q', { routing_key: 'orders.#' })).status, 201);
  });

  after(async () => {
    for (const c of conns) await c.close().catch(() => undefined);
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("GET /api/definitions: every vhost's queues, exchanges and bindings with their vhost and own names", async () => {
    const doc = (await http('root', 'GET', '/api/definitions')).json;
    assert.ok(!JSON.stringify(doc).includes('$ns'), 'no internal name in the export');
    assert.deepEqual(
      (doc.queues as Json[]).filter((q) => q.name === 'orders-q'),
      ['/', 't1', 't2'].map((vhost) => ({ name: 'orders-q', durable: true, auto_delete: false, arguments: { 'x-dead-letter-exchange': 'orders-x' }, vhost })),
    );
    assert.deepEqual(
      (doc.exchanges as Json[]).map((x) => `${x.vhost}|${x.name}|${x.type}`),
      ['/|orders-x|topic', 't1|orders-x|topic', 't2|orders-x|topic'],
    );
    assert.deepEqual((doc.bindings as Json[]).map((b) => `${b.vhost}|${b.source}|${b.destination}|${b.destination_type}|${b.routing_key}`).sort(), [
      '/|orders-x|orders-q|queue|a.%2F',
      't1|amq.topic|orders-q|queue|orders.#',
      't1|orders-x|orders-q|queue|a.t1',
      't2|orders-x|orders-q|queue|a.t2',
    ]);
  });

  test("GET /api/definitions/{vhost}: that vhost only, RabbitMQ's per-vhost shape; ann sees t1 as its `/`, never t2", async () => {
    const t1 = await http('root', 'GET', '/api/definitions/t1');
    assert.equal(t1.status, 200);
    assert.deepEqual(Object.keys(t1.json).sort(), ['bindings', 'exchanges', 'parameters', 'policies', 'queues', 'rabbit_version']);
    assert.deepEqual(t1.json.queues, [{ name: 'orders-q', durable: true, auto_delete: false, arguments: { 'x-dead-letter-exchange': 'orders-x' } }]);
    assert.deepEqual(t1.json.exchanges, [{ name: 'orders-x', type: 'topic', durable: true, auto_delete: false, internal: false, arguments: {} }]);
    assert.deepEqual((t1.json.bindings as Json[]).map((b) => `${b.source}|${b.destination}|${b.routing_key}|${'vhost' in b}`).sort(), [
      'amq.topic|orders-q|orders.#|false',
      'orders-x|orders-q|a.t1|false',
    ]);
    // ann, t1's administrator: `/` is t1 (as at connection.open), t1 itself too; t2 and the whole document are not hers.
    const annRoot = await http('ann', 'GET', '/api/definitions/%2F');
    assert.equal(annRoot.status, 200);
    assert.deepEqual(annRoot.json, t1.json);
    assert.deepEqual((await http('ann', 'GET', '/api/definitions/t1')).json, t1.json);
    assert.ok(!annRoot.text.includes('t2'));
    const other = await http('ann', 'GET', '/api/definitions/t2');
    // RabbitMQ 3.10 answers a GET of a vhost it does not have 400 (and a POST 404): another tenant's is the same.
    assert.deepEqual([other.status, other.json], [400, { error: 'bad_request', reason: 'vhost_not_found' }]);
    assert.deepEqual((await http('ann', 'GET', '/api/definitions/nope')).json, other.json);
    assert.deepEqual((await http('ann', 'GET', '/api/definitions/default')).json, other.json);
    assert.equal((await http('ann', 'GET', '/api/definitions')).status, 401);
    // bob is t2's user, not its administrator.
    assert.equal((await http('bob', 'GET', '/api/definitions/t2')).status, 401);
    assert.deepEqual((await http('bob', 'GET', '/api/definitions/t1')).json, other.json);
  });

  test('POST /api/definitions: objects made in the vhost they name; amqplib uses them there, other vhosts get 404', async () => {
    // An unknown vhost refuses the whole file: nothing of it is made.
    const bad = await http('root', 'POST', '/api/definitions', {
      queues: [
        { name: 'imp-early', vhost: 't2', durable: true, auto_delete: false, arguments: {} },
        { name: 'imp-q', vhost: 'nope', durable: true, auto_delete: false, arguments: {} },
      ],
    });
    // RabbitMQ 3.10's answer (Debian's rabbitmq-server, the same file): the Erlang term as a JSON list.
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.json, { error: 'bad_request', reason: ['no_such_vhost', 'nope'] });
    assert.equal((await http('root', 'GET', '/api/queues/t2/imp-early')).status, 404);

    const doc = {
      exchanges: [{ name: 'imp-x', vhost: 't2', type: 'direct', durable: true, auto_delete: false, internal: false, arguments: {} }],
      queues: [{ name: 'imp-q', vhost: 't2', durable: true, auto_delete: false, arguments: {} }],
      bindings: [{ source: 'imp-x', vhost: 't2', destination: 'imp-q', destination_type: 'queue', routing_key: 'k', arguments: {} }],
    };
    assert.equal((await http('root', 'POST', '/api/definitions', doc)).status, 204);
    assert.deepEqual(
      (await http('root', 'GET', '/api/bindings/t2/e/imp-x/q/imp-q')).json.map((b: Json) => `${b.vhost}|${b.routing_key}`),
      ['t2|k'],
    );
    // bob's client in t2 publishes through the imported exchange and binding and gets the message from the queue.
    const bob = await open('bob', 't2');
    bob.publish('imp-x', 'k', Buffer.from('via-import'));
    let got: string | null = null;
    await until(async () => {
      const m = await bob.get('imp-q', { noAck: true });
      if (m !== false) got = m.content.toString();
      assert.equal(got, 'via-import');
    });
    // Invisible from t1 and `/`: a passive declare is 404 NOT_FOUND, as for a queue nobody has.
    assert.equal(await passive('ann', 't1', 'imp-q'), '404 NOT-FOUND');
    assert.equal(await passive('root', '/', 'imp-q'), '404 NOT-FOUND');
    assert.equal(await passive('bob', 't2', 'imp-q'), null);
    assert.equal((await http('ann', 'GET', '/api/queues/t1/imp-q')).status, 404);
  });

  test('POST /api/definitions/{vhost}: into that vhost whatever the objects say; ann only in t1, users and permissions ignored', async () => {
    const doc = {
      users: [{ name: 'evil', password: 'x', tags: 'administrator' }],
      permissions: [{ user: 'ann', vhost: 't2', configure: '.*', write: '.*', read: '.*' }],
      queues: [{ name: 'ann-q', vhost: 't2', durable: true, auto_delete: false, arguments: {} }],
      bindings: [{ source: 'orders-x', vhost: 't2', destination: 'ann-q', destination_type: 'queue', routing_key: 'ann', arguments: {} }],
    };
    const refused = await http('ann', 'POST', '/api/definitions/t2', doc);
    assert.deepEqual([refused.status, refused.json], [404, { error: 'not_found', reason: 'vhost_not_found' }]);
    assert.equal((await http('ann', 'POST', '/api/definitions', doc)).status, 401);
    assert.equal((await http('bob', 'POST', '/api/definitions/t2', doc)).status, 401);
    assert.equal((await http('ann', 'POST', '/api/definitions/%2F', doc)).status, 204);
    // Made in t1 (ann's `/`), bound to t1's orders-x; nothing in t2 or `/`, no user, no permission.
    assert.equal((await http('root', 'GET', '/api/queues/t1/ann-q')).status, 200);
    assert.equal((await http('root', 'GET', '/api/queues/t2/ann-q')).status, 404);
    assert.equal((await http('root', 'GET', '/api/queues/%2F/ann-q')).status, 404);
    assert.equal((await http('root', 'GET', '/api/users/evil')).status, 404);
    assert.equal((await http('root', 'GET', '/api/permissions/t2/ann')).status, 404);
    const ann = await open('ann', 't1');
    ann.publish('orders-x', 'ann', Buffer.from('t1-bound'));
    await until(async () => assert.equal((await ann.checkQueue('ann-q')).messageCount, 1));
    assert.equal(await passive('bob', 't2', 'ann-q'), '404 NOT-FOUND');
    // Policies and operator policies go into the path's vhost too (before: 400, "/"'s only); `vhosts` is not looked at.
    const pol = await http('ann', 'POST', '/api/definitions/t1', {
      vhosts: [{ name: 'ann-new' }],
      queues: [{ name: 'ann-q2', durable: true }],
      policies: [{ vhost: 't2', name: 'ann-p', pattern: '^ann-q2$', definition: { 'max-length': 1 } }],
      parameters: [{ vhost: 't2', component: 'operator_policy', name: 'ann-op', value: { pattern: '^ann-q2$', definition: { 'message-ttl': 60000 } } }],
    });
    assert.equal(pol.status, 204);
    const q2 = (await http('root', 'GET', '/api/queues/t1/ann-q2')).json;
    assert.deepEqual([q2.policy, q2.operator_policy, q2.effective_policy_definition], ['ann-p', 'ann-op', { 'max-length': 1, 'message-ttl': 60000 }]);
    assert.deepEqual(
      (await http('root', 'GET', '/api/policies')).json.map((p: Json) => `${p.vhost}|${p.name}`),
      ['t1|ann-p'],
    );
    assert.equal((await http('root', 'GET', '/api/vhosts/ann-new')).status, 404);
  });

  test("policies per vhost: each applies to its own vhost's queues (amqplib), listed per vhost; ann manages t1's only", async () => {
    // The same name and pattern in t2 and t1, none in `/`; t1's dead-letters what max-length drops to t1's lim-dead.
    const cap = (n: number, more: Json = {}) => ({ pattern: '^lim-q$', 'apply-to': 'queues', priority: 1, definition: { 'max-length': n, ...more } });
    assert.equal((await http('root', 'PUT', '/api/policies/t2/cap', cap(3))).status, 201);
    assert.equal(
      (await http('ann', 'PUT', '/api/policies/%2F/cap', cap(2, { 'dead-letter-exchange': '', 'dead-letter-routing-key': 'lim-dead' }))).status,
      201,
    );
    assert.equal((await http('ann', 'PUT', '/api/policies/t1/cap', cap(2, { 'dead-letter-exchange': '', 'dead-letter-routing-key': 'lim-dead' }))).status, 204);
    assert.deepEqual((await http('root', 'GET', '/api/policies/t1/cap')).json, {
      vhost: 't1',
      name: 'cap',
      pattern: '^lim-q$',
      'apply-to': 'queues',
      definition: { 'max-length': 2, 'dead-letter-exchange': '', 'dead-letter-routing-key': 'lim-dead' },
      priority: 1,
    });
    assert.deepEqual(
      (await http('root', 'GET', '/api/policies/t2')).json.map((p: Json) => `${p.vhost}|${p.name}|${p.definition['max-length']}`),
      ['t2|cap|3'],
    );
    assert.deepEqual((await http('root', 'GET', '/api/policies/%2F')).json, []);
    // ann (t1's administrator) lists and changes t1's only; t2 is a vhost she does not have; bob has no right to policies.
    assert.deepEqual((await http('ann', 'GET', '/api/policies')).json.map((p: Json) => `${p.vhost}|${p.name}`).sort(), ['t1|ann-p', 't1|cap']);
    assert.deepEqual(await http('ann', 'GET', '/api/policies/t2'), {
      status: 404,
      text: '{"error":"Object Not Found","reason":"Not Found"}',
      json: { error: 'Object Not Found', reason: 'Not Found' },
    });
    const put = await http('ann', 'PUT', '/api/policies/t2/x', cap(9));
    assert.deepEqual([put.status, put.json], [404, { error: 'not_found', reason: 'vhost_not_found' }]);
    assert.equal((await http('ann', 'DELETE', '/api/policies/t2/cap')).status, 404);
    assert.equal((await http('bob', 'GET', '/api/policies')).status, 401);
    assert.equal((await http('bob', 'PUT', '/api/policies/t2/x', cap(9))).status, 401);
    // RabbitMQ's answers for a vhost nobody has (Debian's rabbitmq-server 3.10.8: GET and DELETE 404, PUT vhost_not_found).
    assert.equal((await http('root', 'GET', '/api/policies/nope')).status, 404);
    assert.deepEqual((await http('root', 'PUT', '/api/operator-policies/nope/x', cap(1))).json, { error: 'not_found', reason: 'vhost_not_found' });

    // Four messages into each vhost's lim-q: t1 keeps 2 (its 2 oldest dead-lettered into t1's lim-dead), t2 keeps 3, `/` all 4.
    const counts: Record<string, number[]> = {};
    for (const [user, vhost] of [
      ['ann', 't1'],
      ['bob', 't2'],
      ['root', '/'],
    ] as const) {
      const c = await amqp.connect(`amqp://${user}:${user}-pw@127.0.0.1:${amqpPort}/${encodeURIComponent(vhost)}?heartbeat=0`);
      conns.push(c);
      const ch = await c.createConfirmChannel();
      await ch.assertQueue('lim-dead', { durable: true });
      await ch.assertQueue('lim-q', { durable: true });
      for (let i = 0; i < 4; i++) ch.sendToQueue('lim-q', Buffer.from(`m${i}`));
      await ch.waitForConfirms();
      await until(async () => {
        counts[vhost] = [(await ch.checkQueue('lim-q')).messageCount, (await ch.checkQueue('lim-dead')).messageCount];
        assert.deepEqual(counts[vhost], vhost === 't1' ? [2, 2] : vhost === 't2' ? [3, 0] : [4, 0]);
      });
    }
    assert.equal((await http('root', 'GET', '/api/queues/t2/lim-q')).json.policy, 'cap');
    assert.equal((await http('root', 'GET', '/api/queues/%2F/lim-q')).json.policy, null);
    // Deleted in t2: t1's stays.
    assert.equal((await http('root', 'DELETE', '/api/policies/t2/cap')).status, 204);
    assert.equal((await http('root', 'GET', '/api/queues/t2/lim-q')).json.policy, null);
    assert.equal((await http('root', 'GET', '/api/queues/t1/lim-q')).json.policy, 'cap');
  });

  test("definitions carry each vhost's policies; the whole import makes the namespaces its `vhosts` name", async () => {
    const whole = (await http('root', 'GET', '/api/definitions')).json;
    assert.deepEqual((whole.policies as Json[]).map((p) => `${p.vhost}|${p.name}`).sort(), ['t1|ann-p', 't1|cap']);
    assert.deepEqual(
      (whole.parameters as Json[]).map((p) => `${p.vhost}|${p.component}|${p.name}`),
      ['t1|operator_policy|ann-op'],
    );
    // RabbitMQ 3.10 keeps the vhost field of policies and parameters in a per-vhost document.
    const t1 = (await http('ann', 'GET', '/api/definitions/%2F')).json;
    assert.deepEqual((t1.policies as Json[]).map((p) => `${p.vhost}|${p.name}`).sort(), ['t1|ann-p', 't1|cap']);
    assert.deepEqual((await http('root', 'GET', '/api/definitions/t2')).json.policies, []);

    // A new vhost t3 with a policy, a queue and a permission for bob (a guest from t2), all from one file.
    const doc = {
      vhosts: [{ name: '/' }, { name: 't1' }, { name: 't3', description: 'imported' }],
      permissions: [{ user: 'bob', vhost: 't3', configure: '.*', write: '.*', read: '.*' }],
      policies: [{ vhost: 't3', name: 'small', pattern: '^in3$', 'apply-to': 'queues', definition: { 'max-length': 1 }, priority: 0 }],
      queues: [{ name: 'in3', vhost: 't3', durable: true, auto_delete: false, arguments: {} }],
    };
    // ann, a namespace administrator, may not import the whole document (RabbitMQ: administrators only).
    assert.equal((await http('ann', 'POST', '/api/definitions', doc)).status, 401);
    assert.equal((await http('root', 'GET', '/api/vhosts/t3')).status, 404);
    assert.equal((await http('root', 'POST', '/api/definitions', doc)).status, 204);
    const v = (await http('root', 'GET', '/api/vhosts/t3')).json;
    assert.deepEqual([v.name, v.description], ['t3', 'imported']);
    // The importer (root) got every permission in the vhost it made, as in RabbitMQ; bob the file's.
    assert.deepEqual(
      (await http('root', 'GET', '/api/vhosts/t3/permissions')).json.map((p: Json) => `${p.user}|${p.configure}`),
      ['bob|.*', 'root|.*'],
    );
    assert.deepEqual(
      (await http('root', 'GET', '/api/definitions')).json.vhosts.map((x: Json) => x.name),
      ['/', 't1', 't2', 't3'],
    );
    const bob = await open('bob', 't3');
    for (let i = 0; i < 3; i++) bob.sendToQueue('in3', Buffer.from(`m${i}`));
    await until(async () => assert.equal((await bob.checkQueue('in3')).messageCount, 1));
    assert.equal((await http('root', 'GET', '/api/queues/t3/in3')).json.policy, 'small');
    assert.equal(await passive('bob', 't2', 'in3'), '404 NOT-FOUND');
  });

  test("the whole export imported back re-creates a deleted vhost's queue and binding in its vhost", async () => {
    const doc = (await http('root', 'GET', '/api/definitions')).json;
    assert.equal((await http('root', 'DELETE', '/api/queues/t1/orders-q')).status, 204);
    assert.equal(await passive('ann', 't1', 'orders-q'), '404 NOT-FOUND');
    assert.equal((await http('root', 'POST', '/api/definitions', doc)).status, 204);
    assert.equal(await passive('ann', 't1', 'orders-q'), null);
    const ann = await open('ann', 't1');
    ann.publish('orders-x', 'a.t1', Buffer.from('again'));
    ann.publish('amq.topic', 'orders.z', Buffer.from('topic'));
    await until(async () => assert.equal((await ann.checkQueue('orders-q')).messageCount, 2));
    // t2's and `/`'s orders-q got none of it.
    for (const [user, vhost] of [
      ['bob', 't2'],
      ['root', '/'],
    ] as const)
      assert.equal((await (await open(user, vhost)).checkQueue('orders-q')).messageCount, 0);
  });
});
