/**
 * The RabbitMQ management API's users, permissions, policies and definitions (--amqp-management-port) end to end,
 * with plain HTTP (fetch) and amqplib against bin/flowmq: users made through it log in over AMQP and HTTP (a clear
 * password, and a password_hash RabbitMQ 3.10.8 itself made); permission regexes decide what amqplib may declare,
 * publish and consume, exactly as RabbitMQ's (unanchored search, "" matching nothing, the default exchange as
 * amq.default); a max-length policy drops and dead-letters as RabbitMQ's does, merges with queue arguments by
 * RabbitMQ's rules and shows in /api/queues; definitions export and import round-trip.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqp, { type Channel, type ChannelModel, type ConfirmChannel } from 'amqplib';
import { amqpUrl, startAmqpBroker, takeUntil } from './amqp-helpers.js';
import { eventually, run, type FlowmqProcess } from './harness.js';

/** Opens a pika connection; prints "opened" or the exception pika raised. */
const PIKA_OPEN = `
import pika, sys
try:
    pika.BlockingConnection(pika.ConnectionParameters(host='127.0.0.1', port=int(sys.argv[1]), credentials=pika.PlainCredentials(sys.argv[2], sys.argv[3])))
    print('opened')
except Exception as e:
    print(type(e).__name__, repr(e.args))
`;
// Debian's interpreter, where python3-pika is installed (as amqp-pika.test.ts).
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** A hash RabbitMQ 3.10.8 made (PUT /api/users/u1 with password "p1", read back from GET /api/users/u1). */
const RABBIT_HASH_OF_P1 = 'xLrBTbVBTCuLhgwbkwg8NhbGn/frG7EittRDT58aXCv2kAhg';

describe('RabbitMQ management API: users, permissions, policies, definitions (bin/flowmq, fetch, amqplib)', { timeout: 120_000 }, () => {
  let broker: FlowmqProcess;
  let dir: string;
  let base: string;
  let admin: ChannelModel;
  let ch: ConfirmChannel;

  const http = async (path: string, opts: { user?: string; pass?: string; method?: string; body?: unknown } = {}) => {
    const headers: Record<string, string> = {
      authorization: 'Basic ' + Buffer.from(`${opts.user ?? 'root'}:${opts.pass ?? 'root-pw'}`).toString('base64'),
    };
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(base + path, { method: opts.method ?? 'GET', headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
    const text = await res.text();
    return { status: res.status, json: (text === '' ? null : JSON.parse(text)) as Json };
  };
  const put = (path: string, body: unknown) => http(path, { method: 'PUT', body });
  /** Opens an amqplib connection as the user, or answers the error it failed with. */
  const login = async (user: string, pass: string): Promise<ChannelModel | Error> => {
    try {
      return await amqp.connect(amqpUrl(broker, user, pass));
    } catch (e) {
      return e as Error;
    }
  };
  /** Runs an amqplib channel call; answers null or the AMQP error code the channel closed with. */
  const attempt = async (conn: ChannelModel, fn: (c: Channel) => Promise<unknown>): Promise<number | null> => {
    const c = await conn.createChannel();
    c.on('error', () => undefined);
    try {
      await fn(c);
      await c.close();
      return null;
    } catch (e) {
      return (e as { code?: number }).code ?? -1;
    }
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-amqp-mgmt-users-'));
    writeFileSync(join(dir, 'users.yaml'), 'users:\n  - {username: root, password: root-pw, groups: [admins]}\n');
    // --host at its default: every address of both families (the AMQP listener is reached on [::1] and 127.0.0.1 below).
    broker = await startAmqpBroker(['--users-file', join(dir, 'users.yaml'), '--amqp-management-port', '0'], { defaultHost: true });
    await eventually(() => broker.ports['amqp-management'] !== undefined, 10_000, 'the management listener');
    base = `http://127.0.0.1:${broker.ports['amqp-management']}`;
    admin = await amqp.connect(amqpUrl(broker, 'root', 'root-pw'));
    ch = await admin.createConfirmChannel();
  });

  after(async () => {
    await admin?.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('users: PUT (201, then 204), GET with tags and hash, whoami, AMQP login, DELETE; RabbitMQ status codes for bad bodies', async () => {
    assert.equal((await put('/api/users/carol', { password: 'carol-pw', tags: 'monitoring,management' })).status, 201);
    assert.equal((await put('/api/users/carol', { password: 'carol-pw', tags: ['monitoring'] })).status, 204);
    const u = await http('/api/users/carol');
    assert.equal(u.status, 200);
    assert.deepEqual(u.json.tags, ['monitoring']);
    assert.equal(u.json.hashing_algorithm, 'rabbit_password_hashing_sha256');
    assert.equal(Buffer.from(u.json.password_hash, 'base64').length, 4 + 32);
    assert.deepEqual((await http('/api/whoami', { user: 'carol', pass: 'carol-pw' })).json, { name: 'carol', tags: ['monitoring'] });
    // The monitoring tag shows node-wide figures (user administration needs administrator once policies exist: the
    // definitions test below checks it; while none exists FlowMQ's default mode lets everyone do everything).
    assert.equal((await http('/api/nodes', { user: 'carol', pass: 'carol-pw' })).status, 200);
    const c = await login('carol', 'carol-pw');
    assert.ok(!(c instanceof Error), `carol logs in over AMQP: ${String(c)}`);
    await c.close();
    assert.ok((await login('carol', 'wrong')) instanceof Error);
    // administrator is FlowMQ's admins group.
    assert.equal((await put('/api/users/dave', { password: 'dave-pw', tags: 'administrator' })).status, 201);
    assert.equal((await http('/api/users', { user: 'dave', pass: 'dave-pw' })).status, 200);
    assert.deepEqual(
      (await http('/api/users')).json.map((x: Json) => x.name),
      ['carol', 'dave', 'root'],
    );
    assert.equal((await put('/api/users/x', { password: 'p' })).json.reason, 'tags_not_present');
    assert.equal((await put('/api/users/x', { password: 'p', password_hash: RABBIT_HASH_OF_P1, tags: '' })).status, 400);
    assert.equal((await put('/api/users/x', { password_hash: 'abc', tags: '' })).status, 400);
    assert.equal((await http('/api/users/nobody')).status, 404);
    assert.equal((await http('/api/users/dave', { method: 'DELETE' })).status, 204);
    assert.equal((await http('/api/users/dave', { method: 'DELETE' })).status, 404);
    assert.ok((await login('dave', 'dave-pw')) instanceof Error);
  });

  it('the default --host listens on IPv6 and IPv4 (amqplib on [::1] and 127.0.0.1, as its ipv6 test); peers show as RabbitMQ shows them', async () => {
    assert.ok(
      broker.logs.some((l) => l.protocol === 'amqp' && String(l.address).startsWith('[::]:')),
      'bound to ::',
    );
    const v6 = await amqp.connect(`amqp://root:root-pw@[::1]:${broker.ports.amqp}`);
    const v4 = await amqp.connect(amqpUrl(broker, 'root', 'root-pw'));
    try {
      const c = await v6.createChannel();
      await c.checkQueue((await c.assertQueue('', { exclusive: true })).queue);
      await eventually(async () => ((await http('/api/connections')).json as unknown as Json[]).length >= 3, 10_000, 'the connections listed');
      const peers = ((await http('/api/connections')).json as unknown as Json[]).map((x) => x.peer_host as string);
      // An IPv4 client of the dual-stack listener is 127.0.0.1 (not ::ffff:127.0.0.1), as RabbitMQ shows it.
      assert.ok(peers.includes('::1') && peers.includes('127.0.0.1') && !peers.some((p) => p.startsWith('::ffff:')), peers.join(','));
    } finally {
      await v6.close();
      await v4.close();
    }
  });

  it('a password_hash RabbitMQ made logs in with its password over AMQP and HTTP; an empty one never does', async () => {
    assert.equal(
      (await put('/api/users/migrated', { password_hash: RABBIT_HASH_OF_P1, hashing_algorithm: 'rabbit_password_hashing_sha256', tags: '' })).status,
      201,
    );
    assert.equal((await http('/api/users/migrated')).json.password_hash, RABBIT_HASH_OF_P1);
    const c = await login('migrated', 'p1');
    assert.ok(!(c instanceof Error), `migrated logs in: ${String(c)}`);
    await c.close();
    assert.ok((await login('migrated', 'p2')) instanceof Error);
    assert.equal((await http('/api/whoami', { user: 'migrated', pass: 'p1' })).status, 200);
    assert.equal((await put('/api/users/nopass', { password_hash: '', tags: '' })).status, 201);
    assert.ok((await login('nopass', '')) instanceof Error);
    assert.ok((await login('nopass', 'anything')) instanceof Error);
  });

  it('permissions: regexes decide declare, publish, bind and consume over AMQP exactly as RabbitMQ matches them', async () => {
    assert.equal((await put('/api/users/erin', { password: 'erin-pw', tags: '' })).status, 201);
    assert.equal((await http('/api/permissions/%2F/erin')).status, 404);
    // configure: an unanchored search (a prefix approximation would refuse "my-q1"); write: not the default exchange;
    // read: exactly two names.
    const perm = { configure: 'q[0-9]$', write: '^(e-x|my-q1)$', read: '^(my-q1|e-x)$' };
    assert.equal((await put('/api/permissions/%2F/erin', perm)).status, 201);
    assert.equal((await put('/api/permissions/%2F/erin', perm)).status, 204);
    assert.deepEqual((await http('/api/permissions/%2F/erin')).json, { user: 'erin', vhost: '/', ...perm });
    assert.deepEqual((await http('/api/users/erin/permissions')).json, [{ user: 'erin', vhost: '/', ...perm }]);
    assert.ok((await http('/api/permissions')).json.some((p: Json) => p.user === 'erin'));
    assert.equal((await put('/api/permissions/%2F/nobody', perm)).status, 400);
    assert.equal((await put('/api/permissions/%2F/erin', { configure: '(', write: '', read: '' })).status, 400);
    assert.equal((await put('/api/permissions/%2F/erin', { configure: '.*' })).status, 400);

    await ch.assertExchange('e-x', 'direct', { durable: true });
    await ch.assertQueue('other-q', { durable: true });
    const erin = await amqp.connect(amqpUrl(broker, 'erin', 'erin-pw'));
    try {
      assert.equal(await attempt(erin, (c) => c.assertQueue('my-q1', { durable: true })), null, 'configure q[0-9]$ matches my-q1');
      assert.equal(await attempt(erin, (c) => c.assertQueue('q1-mine', { durable: true })), 403, 'q[0-9]$ does not match q1-mine');
      assert.equal(await attempt(erin, (c) => c.checkQueue('other-q')), null, 'a passive declare needs no permission');
      assert.equal(await attempt(erin, (c) => c.bindQueue('my-q1', 'e-x', 'k')), null, 'write my-q1, read e-x');
      assert.equal(await attempt(erin, (c) => c.bindQueue('other-q', 'e-x', 'k')), 403, 'no write on other-q');
      assert.equal(await attempt(erin, (c) => c.deleteQueue('other-q')), 403, 'no configure on other-q');
      assert.equal(await attempt(erin, (c) => c.consume('other-q', () => undefined)), 403, 'no read on other-q');
      // Publishes: to e-x (write matches) reaches my-q1; to the default exchange (amq.default, not matched) closes.
      assert.equal(
        await attempt(erin, async (c) => {
          c.publish('e-x', 'k', Buffer.from('via-e-x'));
          await c.checkQueue('my-q1');
        }),
        null,
      );
      assert.equal(
        await attempt(erin, async (c) => {
          c.publish('', 'my-q1', Buffer.from('via-default'));
          await c.checkQueue('my-q1');
        }),
        403,
      );
      // A marker after the refused publish: what my-q1 holds before it is the allowed publish alone.
      assert.equal(
        await attempt(erin, async (c) => {
          c.publish('e-x', 'k', Buffer.from('end'));
          await c.checkQueue('my-q1');
        }),
        null,
      );
      const got = await takeUntil(await erin.createChannel(), 'my-q1', 'end');
      assert.deepEqual(
        got.map((m) => m.content.toString()),
        ['via-e-x'],
      );
      // Write that matches amq.default allows default-exchange publishes, as RabbitMQ.
      assert.equal((await put('/api/permissions/%2F/erin', { ...perm, write: '^(e-x|my-q1|amq\\.default)$' })).status, 204);
      assert.equal(
        await attempt(erin, async (c) => {
          c.publish('', 'my-q1', Buffer.from('via-default'));
          await c.checkQueue('my-q1');
        }),
        null,
      );
    } finally {
      await erin.close().catch(() => undefined);
    }
    assert.equal((await http('/api/permissions/%2F/erin', { method: 'DELETE' })).status, 204);
    assert.equal((await http('/api/permissions/%2F/erin', { method: 'DELETE' })).status, 404);
    assert.equal((await http('/api/topic-permissions')).status, 200);
  });

  it('a max-length policy drops and dead-letters as RabbitMQ, merges with arguments, applies to existing queues, shows in /api/queues', async () => {
    await ch.assertExchange('lim-dlx', 'fanout', { durable: true });
    await ch.assertQueue('lim-dead', { durable: true });
    await ch.bindQueue('lim-dead', 'lim-dlx', '');
    const policy = { pattern: '^lim-q', definition: { 'max-length': 2, 'dead-letter-exchange': 'lim-dlx' }, priority: 1, 'apply-to': 'queues' };
    assert.equal((await put('/api/policies/%2F/lim', policy)).status, 201);
    assert.equal((await put('/api/policies/%2F/lim', policy)).status, 204);
    // A lower-priority policy on the same queues loses.
    assert.equal((await put('/api/policies/%2F/lim-low', { ...policy, definition: { 'max-length': 100 }, priority: 0 })).status, 201);
    assert.equal(
      (await put('/api/operator-policies/%2F/op', { pattern: '^lim-q', definition: { 'message-ttl': 600000, 'max-length': 50 }, 'apply-to': 'queues' })).status,
      201,
    );
    assert.equal((await put('/api/policies/%2F/bad', { pattern: '^x', definition: { bogus: 1 } })).status, 400);
    assert.equal((await put('/api/policies/%2F/bad', { pattern: '^x', definition: { 'max-length': 'x' } })).status, 400);
    assert.equal((await put('/api/operator-policies/%2F/bad', { pattern: '^x', definition: { 'dead-letter-exchange': 'x' } })).status, 400);

    await ch.assertQueue('lim-q1', { durable: true });
    // A queue argument: the smaller max-length wins (4 > 2: the policy's), its own dead-letter exchange wins.
    await ch.assertQueue('lim-q2', { durable: true, arguments: { 'x-max-length': 4, 'x-dead-letter-exchange': 'nowhere' } });
    for (let i = 0; i < 5; i++) ch.sendToQueue('lim-q1', Buffer.from(`m${i}`), { persistent: true });
    for (let i = 0; i < 5; i++) ch.sendToQueue('lim-q2', Buffer.from(`n${i}`), { persistent: true });
    await ch.waitForConfirms();
    // A redeclaration with the declared arguments is still equivalent (the policy's are not the queue's own).
    await ch.assertQueue('lim-q2', { durable: true, arguments: { 'x-max-length': 4, 'x-dead-letter-exchange': 'nowhere' } });
    assert.equal((await ch.checkQueue('lim-q1')).messageCount, 2);
    assert.equal((await ch.checkQueue('lim-q2')).messageCount, 2);
    // What is left before m4 (the last, taken as the marker) is m3 alone.
    const kept = await takeUntil(ch, 'lim-q1', 'm4');
    assert.deepEqual(
      kept.map((m) => m.content.toString()),
      ['m3'],
    );
    // The heads went to the policy's dead-letter exchange, with RabbitMQ's x-death reason; lim-q2's went nowhere.
    ch.sendToQueue('lim-dead', Buffer.from('marker'));
    const dead = await takeUntil(ch, 'lim-dead', 'marker');
    assert.deepEqual(
      dead.map((m) => m.content.toString()),
      ['m0', 'm1', 'm2'],
    );
    assert.equal(dead[0].properties.headers?.['x-death']?.[0]?.reason, 'maxlen');
    assert.equal(dead[0].properties.headers?.['x-death']?.[0]?.queue, 'lim-q1');

    const q = (await http('/api/queues/%2F/lim-q1')).json;
    assert.equal(q.policy, 'lim');
    assert.equal(q.operator_policy, 'op');
    assert.deepEqual(q.effective_policy_definition, { 'max-length': 2, 'dead-letter-exchange': 'lim-dlx', 'message-ttl': 600000 });
    assert.deepEqual(q.arguments, {});
    const listed = (await http('/api/queues')).json.find((x: Json) => x.name === 'lim-q2');
    assert.equal(listed.policy, 'lim');
    assert.equal((await http('/api/queues/%2F/lim-dead')).json.policy, null);

    // A policy set on a queue that already holds more: trimmed at once.
    await ch.assertQueue('late-q', { durable: true });
    for (let i = 0; i < 6; i++) ch.sendToQueue('late-q', Buffer.from(`l${i}`), { persistent: true });
    await ch.waitForConfirms();
    assert.equal((await ch.checkQueue('late-q')).messageCount, 6);
    assert.equal((await put('/api/policies/%2F/late', { pattern: '^late-', definition: { 'max-length': 1 }, 'apply-to': 'queues' })).status, 201);
    await eventually(async () => (await ch.checkQueue('late-q')).messageCount === 1, 5000, 'late-q trimmed to 1');
    // Removed: the limit goes with it.
    assert.equal((await http('/api/policies/%2F/late', { method: 'DELETE' })).status, 204);
    assert.equal((await http('/api/policies/%2F/late', { method: 'DELETE' })).status, 404);
    for (let i = 0; i < 3; i++) ch.sendToQueue('late-q', Buffer.from(`x${i}`), { persistent: true });
    await ch.waitForConfirms();
    assert.equal((await ch.checkQueue('late-q')).messageCount, 4);
    assert.deepEqual(
      (await http('/api/policies')).json.map((p: Json) => p.name),
      ['lim', 'lim-low'],
    );
    assert.equal((await http('/api/operator-policies/%2F/op')).json.definition['max-length'], 50);
  });

  it('topic permissions: the management calls answer as RabbitMQ 3.10.8; write and read regexes judge routing keys on every topic exchange', async () => {
    assert.equal((await put('/api/users/tina', { password: 'tina-pw', tags: '' })).status, 201);
    assert.equal((await put('/api/permissions/%2F/tina', { configure: '.*', write: '.*', read: '.*' })).status, 201);
    assert.equal((await http('/api/topic-permissions/%2F/tina')).status, 404);
    // {username} is expanded per user, as RabbitMQ does; "dx" is a direct exchange, where topic permissions do not apply.
    const onTopic = { exchange: 'amq.topic', write: '^{username}\\.', read: '^{username}\\.' };
    const onTx = { exchange: 'tp-x', write: '^ok\\.', read: '^ok\\.' };
    const onDx = { exchange: 'tp-dx', write: '^ok\\.', read: '^ok\\.' };
    assert.equal((await put('/api/topic-permissions/%2F/tina', onTopic)).status, 201);
    assert.equal((await put('/api/topic-permissions/%2F/tina', onTx)).status, 204);
    assert.equal((await put('/api/topic-permissions/%2F/tina', onDx)).status, 204);
    const mine = [onTopic, onDx, onTx].map((t) => ({ user: 'tina', vhost: '/', ...t }));
    assert.deepEqual((await http('/api/topic-permissions/%2F/tina')).json, mine);
    assert.deepEqual((await http('/api/users/tina/topic-permissions')).json, mine);
    assert.deepEqual(
      ((await http('/api/topic-permissions')).json as unknown as Json[]).filter((t) => t.user === 'tina'),
      mine,
    );
    const inVhost = ((await http('/api/vhosts/%2F/topic-permissions')).json as unknown as Json[]).filter((t) => t.user === 'tina');
    assert.deepEqual(Object.keys(inVhost[0]), ['vhost', 'user', 'exchange', 'write', 'read'], 'RabbitMQ lists vhost first here');
    // RabbitMQ 3.10.8's answers to bad bodies.
    const bad = async (path: string, body: unknown) => (await put(path, body)).json;
    assert.deepEqual(await bad('/api/topic-permissions/%2F/tina', { write: 'a', read: 'b' }), { error: 'bad_request', reason: '[{key_missing,exchange}]' });
    assert.deepEqual(await bad('/api/topic-permissions/%2F/tina', { exchange: 'amq.topic', read: 'b' }), {
      error: 'bad_request',
      reason: '[{key_missing,write}]',
    });
    assert.deepEqual(await bad('/api/topic-permissions/%2F/nobody', onTx), { error: 'bad_request', reason: 'vhost_or_user_not_found' });
    assert.equal((await put('/api/topic-permissions/%2F/tina', { ...onTx, write: '(' })).status, 400);

    await ch.assertExchange('tp-x', 'topic', { durable: true });
    await ch.assertExchange('tp-y', 'topic', { durable: true });
    await ch.assertExchange('tp-dx', 'direct', { durable: true });
    await ch.assertQueue('tp-q', { durable: true });
    await ch.bindQueue('tp-q', 'tp-dx', 'bad.1');
    const tina = await amqp.connect(amqpUrl(broker, 'tina', 'tina-pw'));
    try {
      const publish = (x: string, key: string) =>
        attempt(tina, async (c) => {
          c.publish(x, key, Buffer.from(`${x}/${key}`));
          await c.checkQueue('tp-q');
        });
      assert.equal(await attempt(tina, (c) => c.bindQueue('tp-q', 'tp-x', 'ok.#')), null);
      assert.equal(await attempt(tina, (c) => c.bindQueue('tp-q', 'tp-x', 'bad.#')), 403, 'read ^ok\. refuses the binding key bad.#');
      assert.equal(await attempt(tina, (c) => c.bindQueue('tp-q', 'amq.topic', 'tina.#')), null, '{username} expanded');
      assert.equal(await attempt(tina, (c) => c.bindQueue('tp-q', 'amq.topic', 'tom.#')), 403);
      assert.equal(await attempt(tina, (c) => c.bindQueue('tp-q', 'tp-y', 'any.#')), null, 'no topic permission on tp-y: every key');
      assert.equal(await attempt(tina, (c) => c.unbindQueue('tp-q', 'tp-x', 'bad.#')), 403, 'unbind is checked too');
      assert.equal(await attempt(tina, (c) => c.bindExchange('tp-y', 'tp-x', 'bad.#')), 403, 'and exchange.bind from a topic exchange');
      assert.equal(await publish('tp-x', 'ok.1'), null);
      assert.equal(await publish('tp-x', 'bad.1'), 403);
      assert.equal(await publish('amq.topic', 'tina.1'), null);
      assert.equal(await publish('amq.topic', 'tom.1'), 403);
      assert.equal(await publish('tp-y', 'any.1'), null);
      assert.equal(await publish('tp-dx', 'bad.1'), null, 'a direct exchange is not judged by topic permissions');
      // RabbitMQ's channel.close text.
      const c = await tina.createChannel();
      const closed = new Promise<Error>((resolve) => c.on('error', resolve));
      c.publish('tp-x', 'bad.2', Buffer.from('x'));
      assert.match(
        (await closed).message,
        /403 \(ACCESS-REFUSED\) with message "ACCESS_REFUSED - access to topic 'bad\.2' in exchange 'tp-x' in vhost '\/' refused for user 'tina'"/,
      );
      // What reached tp-q is what was allowed (a marker last).
      assert.equal(await publish('tp-x', 'ok.end'), null);
      const got = await takeUntil(await tina.createChannel(), 'tp-q', 'tp-x/ok.end');
      assert.deepEqual(
        got.map((m) => m.content.toString()),
        ['tp-x/ok.1', 'amq.topic/tina.1', 'tp-y/any.1', 'tp-dx/bad.1'],
      );
      // Deleting the one on tp-x frees it for the open connection (a policy change applies at the next request).
      assert.equal((await http('/api/topic-permissions/%2F/tina/tp-x', { method: 'DELETE' })).status, 204);
      assert.equal(await publish('tp-x', 'bad.3'), null);
      assert.equal(await publish('amq.topic', 'tom.2'), 403, 'the one on amq.topic stays');
      assert.deepEqual(
        ((await http('/api/topic-permissions/%2F/tina')).json as unknown as Json[]).map((t) => t.exchange),
        ['amq.topic', 'tp-dx'],
      );
    } finally {
      await tina.close().catch(() => undefined);
    }
    // Exported, deleted (all of them), imported back.
    const exported = ((await http('/api/definitions')).json.topic_permissions as Json[]).filter((t) => t.user === 'tina');
    assert.deepEqual(
      exported,
      [onTopic, onDx].map((t) => ({ user: 'tina', vhost: '/', ...t })),
    );
    assert.equal((await http('/api/topic-permissions/%2F/tina', { method: 'DELETE' })).status, 204);
    assert.equal((await http('/api/topic-permissions/%2F/tina', { method: 'DELETE' })).status, 404);
    assert.equal((await http('/api/definitions', { method: 'POST', body: { topic_permissions: exported } })).status, 204);
    assert.deepEqual((await http('/api/topic-permissions/%2F/tina')).json, exported);
    // Deleting the user takes them.
    assert.equal((await http('/api/users/tina', { method: 'DELETE' })).status, 204);
    assert.ok(!((await http('/api/topic-permissions')).json as unknown as Json[]).some((t) => t.user === 'tina'));
  });

  it('a user without permissions is refused the vhost at connection.open (530), as RabbitMQ; queue.purge needs read', async () => {
    assert.equal((await put('/api/users/nina', { password: 'nina-pw', tags: '' })).status, 201);
    // Someone's permission, so that policies exist: with none at all FlowMQ's default mode (auto) allows everyone.
    assert.equal((await put('/api/users/olga', { password: 'olga-pw', tags: '' })).status, 201);
    assert.equal((await put('/api/permissions/%2F/olga', { configure: '.*', write: '.*', read: '.*' })).status, 201);
    // amqplib and pika see what they see from RabbitMQ 3.10.8 (run by hand against it with the same user).
    const refused = await login('nina', 'nina-pw');
    assert.equal(refused instanceof Error ? refused.message : 'opened', 'Expected ConnectionOpenOk; got <ConnectionClose channel:0>');
    const pika = await run(PYTHON, ['-c', PIKA_OPEN, String(broker.ports.amqp), 'nina', 'nina-pw'], { timeoutMs: 30_000 });
    assert.equal(
      pika.stdout.trim(),
      `ProbableAccessDeniedError ('ConnectionClosedByBroker: (530) "NOT_ALLOWED - access to vhost \\'/\\' refused for user \\'nina\\'"',)`,
    );
    // Read but not configure: may purge; configure but not read: may not.
    await ch.assertQueue('purge-q', { durable: true });
    assert.equal((await put('/api/permissions/%2F/nina', { configure: '', write: '', read: '^purge-q$' })).status, 201);
    const nina = await login('nina', 'nina-pw');
    assert.ok(!(nina instanceof Error), String(nina));
    try {
      assert.equal(await attempt(nina, (c) => c.purgeQueue('purge-q')), null);
      assert.equal((await put('/api/permissions/%2F/nina', { configure: '^purge-q$', write: '', read: '' })).status, 204);
      assert.equal(await attempt(nina, (c) => c.purgeQueue('purge-q')), 403);
    } finally {
      await nina.close().catch(() => undefined);
    }
    assert.equal((await http('/api/permissions/%2F/nina', { method: 'DELETE' })).status, 204);
    assert.ok((await login('nina', 'nina-pw')) instanceof Error, 'refused again once its permission is gone');
  });

  it('definitions: export holds what was made; import recreates deleted objects, users, permissions and policies', async () => {
    await ch.assertExchange('def-x', 'topic', { durable: true });
    await ch.assertQueue('def-q', { durable: true, arguments: { 'x-message-ttl': 60000 } });
    await ch.bindQueue('def-q', 'def-x', 'a.*');
    await put('/api/users/frank', { password: 'frank-pw', tags: 'policymaker' });
    await put('/api/permissions/%2F/frank', { configure: '^def-', write: '.*', read: '.*' });
    const exp = await http('/api/definitions');
    assert.equal(exp.status, 200);
    const d = exp.json;
    assert.ok(d.users.some((u: Json) => u.name === 'frank' && u.tags.includes('policymaker')));
    assert.deepEqual(
      d.permissions.find((p: Json) => p.user === 'frank'),
      { user: 'frank', vhost: '/', configure: '^def-', write: '.*', read: '.*' },
    );
    assert.ok(d.policies.some((p: Json) => p.name === 'lim'));
    assert.ok(d.parameters.some((p: Json) => p.component === 'operator_policy' && p.name === 'op'));
    assert.deepEqual(
      d.queues.find((q: Json) => q.name === 'def-q'),
      { name: 'def-q', vhost: '/', durable: true, auto_delete: false, arguments: { 'x-message-ttl': 60000 } },
    );
    assert.ok(d.exchanges.some((x: Json) => x.name === 'def-x' && x.type === 'topic'));
    assert.ok(!d.exchanges.some((x: Json) => x.name.startsWith('amq.')));
    assert.ok(d.bindings.some((b: Json) => b.source === 'def-x' && b.destination === 'def-q' && b.routing_key === 'a.*'));
    assert.deepEqual(d.vhosts, [{ name: '/' }]);

    // Gone, then imported back (rabbitmqadmin import posts the file as is).
    await ch.deleteQueue('def-q');
    await ch.deleteExchange('def-x');
    assert.equal((await http('/api/users/frank', { method: 'DELETE' })).status, 204);
    assert.equal((await http('/api/policies/%2F/lim-low', { method: 'DELETE' })).status, 204);
    // A user with RabbitMQ's hash, as a RabbitMQ export carries it.
    d.users.push({
      name: 'from-rabbit',
      password_hash: RABBIT_HASH_OF_P1,
      hashing_algorithm: 'rabbit_password_hashing_sha256',
      tags: ['management'],
      limits: {},
    });
    d.permissions.push({ user: 'from-rabbit', vhost: '/', configure: '', write: '', read: '' });
    assert.equal((await http('/api/definitions', { method: 'POST', body: d })).status, 204);
    assert.equal((await ch.checkQueue('def-q')).messageCount, 0);
    await ch.checkExchange('def-x');
    const bs = await http('/api/bindings/%2F/e/def-x/q/def-q');
    assert.ok(Array.isArray(bs.json) && bs.json.some((b: Json) => b.routing_key === 'a.*'), JSON.stringify(bs));
    assert.deepEqual((await http('/api/users/frank/permissions')).json, [{ user: 'frank', vhost: '/', configure: '^def-', write: '.*', read: '.*' }]);
    assert.equal((await http('/api/policies/%2F/lim-low')).status, 200);
    const frank = await login('frank', 'frank-pw');
    assert.ok(!(frank instanceof Error), 'frank logs in with his password after the import (its RabbitMQ hash)');
    await frank.close();
    const fromRabbit = await login('from-rabbit', 'p1');
    assert.ok(!(fromRabbit instanceof Error));
    await fromRabbit.close();
    // The policymaker tag may manage policies, not users.
    assert.equal((await http('/api/policies', { user: 'frank', pass: 'frank-pw' })).status, 200);
    assert.equal((await http('/api/users', { user: 'frank', pass: 'frank-pw' })).status, 401);

    // What FlowMQ cannot hold is refused before anything changes.
    assert.equal((await http('/api/definitions', { method: 'POST', body: { queues: [{ name: 'v-q', vhost: 'other', durable: true }] } })).status, 400);
    assert.equal((await http('/api/definitions', { method: 'POST', body: [] })).status, 400);
    assert.equal((await http('/api/queues/%2F/v-q')).status, 404);
  });
});
