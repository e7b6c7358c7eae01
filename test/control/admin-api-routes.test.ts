/**
 * The admin API's resources over real HTTP, on the real engine (memory storage) and the real control plane:
 * streams (pagination, live changes, the message browser), queues, exchanges and bindings, clients, consumer
 * groups, MQTT sessions and retained messages, users, groups, policies and namespaces; and authorization: what a
 * user without the admin role may see and do once policies exist.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Engine, makeMessage } from '../../src/core/index.js';
import type { AdminApi } from '../../src/control/admin-api.js';
import { storedByNamespace, type ConsumerGroupAdmin, type GroupDetail, type OffsetResetTarget, type SessionAdmin } from '../../src/control/index.js';
import { MemoryStreams } from '../helpers/memory-storage.js';
import { JSON_TYPE, call, controlPlane, startApi, type Plane } from './admin-api-helpers.js';

const ADMIN: [string, string] = ['root', 'root-pw'];
const DEV: [string, string] = ['dev', 'dev-pw'];

describe('admin API resources', () => {
  let engine: Engine;
  let plane: Plane;
  let api: AdminApi;
  const resets: Array<{ name: string; stream: string; target: OffsetResetTarget }> = [];
  // A consumer-group admin over a fixed table: the route code is under test here; the Kafka module's own
  // implementation is tested with the Kafka module.
  const groups: ConsumerGroupAdmin = {
    list: async () => [{ name: 'billing', protocol: 'kafka', state: 'Empty', members: 0, lag: 5 }],
    describe: async (name) =>
      name === 'billing'
        ? ({
            name,
            protocol: 'kafka',
            state: 'Empty',
            members: 0,
            lag: 5,
            memberDetails: [],
            offsets: [{ stream: 'orders', partition: 0, committed: 1, end: 6, lag: 5 }],
          } satisfies GroupDetail)
        : null,
    resetOffsets: async (name, stream, target) => {
      resets.push({ name, stream, target });
      return (await groups.describe(name))!;
    },
    delete: async () => undefined,
  };

  // The MQTT module's offline sessions held in memory (what SessionAdmin ends), by client id.
  const inMemory = new Set<string>(['mem-only']);
  const mqttSessions: SessionAdmin = { delete: async (clientId) => inMemory.delete(clientId) };

  before(async () => {
    const m = new MemoryStreams();
    engine = new Engine(m, m);
    await engine.load();
    plane = await controlPlane([
      { username: 'root', password: 'root-pw', groups: ['admins'] },
      { username: 'dev', password: 'dev-pw', groups: ['developers'] },
    ]);
    api = await startApi({ engine, access: plane.access, groups: () => [{ protocol: 'kafka', admin: groups }], mqttSessions: () => mqttSessions });
  });
  after(async () => {
    await api.close();
    await plane.close();
    engine.close();
  });

  it('creates streams and pages through them with limit and an opaque cursor', async () => {
    for (const name of ['s.c', 's.a', 's.e', 's.b', 's.d']) {
      const r = await call(api, 'POST', '/api/v1/streams', {
        auth: ADMIN,
        body: { name, partitions: 1, bindings: [`${name}/#`.replace('.', '/')], retention: '7d' },
      });
      assert.equal(r.status, 201, r.text);
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: Awaited<ReturnType<typeof call>> = await call(api, 'GET', `/api/v1/streams?limit=2${cursor ? `&cursor=${cursor}` : ''}`, { auth: ADMIN });
      assert.equal(page.status, 200, page.text);
      const items = page.body.items as Array<{ name: string; retentionMs: number }>;
      assert.ok(items.length <= 2);
      seen.push(...items.map((s) => s.name));
      cursor = page.body.next as string | null;
      pages++;
    } while (cursor !== null);
    assert.deepEqual(seen, ['s.a', 's.b', 's.c', 's.d', 's.e']);
    assert.equal(pages, 3);
    assert.equal((await call(api, 'GET', '/api/v1/streams?cursor=%%%', { auth: ADMIN })).status, 400);
    assert.equal((await call(api, 'GET', '/api/v1/streams?limit=1001', { auth: ADMIN })).status, 400);
    const dup = await call(api, 'POST', '/api/v1/streams', { auth: ADMIN, body: { name: 's.a' } });
    assert.equal(dup.status, 409);
    assert.equal(dup.body.error?.code, 'ALREADY_EXISTS');
  });

  it('changes bindings, retention and partitions live; never shrinks', async () => {
    const r = await call(api, 'PATCH', '/api/v1/streams/s.a', { auth: ADMIN, body: { bindings: ['x/+/y'], retention: null, partitions: 3 } });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.body.bindings, ['x/+/y']);
    assert.equal(r.body.retentionMs, null);
    assert.equal(r.body.partitions, 3);
    assert.equal((r.body.partitionDetails as unknown[]).length, 3);
    assert.deepEqual(engine.getStream('s.a')!.def.bindings, ['x/+/y']);
    const shrink = await call(api, 'PATCH', '/api/v1/streams/s.a', { auth: ADMIN, body: { partitions: 2, bindings: ['z/#'] } });
    assert.equal(shrink.status, 400);
    assert.deepEqual(engine.getStream('s.a')!.def.bindings, ['x/+/y'], 'a refused change leaves the stream as it was');
    const badFilter = await call(api, 'PATCH', '/api/v1/streams/s.a', { auth: ADMIN, body: { bindings: ['a/#/b'] } });
    assert.equal(badFilter.status, 400);
  });

  it('browses messages of a partition from an offset: text as utf8, binary as base64, reserved headers as properties', async () => {
    await engine.createStream({ name: 'browse', partitions: 1, bindings: ['br/#'] });
    for (let i = 0; i < 5; i++) {
      await engine.publish(makeMessage(`br/t${i}`, Buffer.from(`hello ${i}`), { headers: [{ key: 'h', value: Buffer.from(`v${i}`) }] }));
    }
    await engine.publish(makeMessage('br/bin', Buffer.from([0xff, 0x00, 0xfe])));
    const first = await call(api, 'GET', '/api/v1/streams/browse/messages?partition=0&limit=2', { auth: ADMIN });
    assert.equal(first.status, 200, first.text);
    const items = first.body.items as Array<{ offset: number; value: string; topic: string; encoding: string; headers: Array<{ key: string; value: string }> }>;
    assert.deepEqual(
      items.map((m) => [m.offset, m.topic, m.value, m.encoding]),
      [
        [0, 'br/t0', 'hello 0', 'utf8'],
        [1, 'br/t1', 'hello 1', 'utf8'],
      ],
    );
    assert.deepEqual(items[0].headers, [{ key: 'h', value: 'v0' }]);
    assert.equal(first.body.next, 2);
    const rest = await call(api, 'GET', '/api/v1/streams/browse/messages?partition=0&offset=4&limit=20', { auth: ADMIN });
    const more = rest.body.items as Array<{ offset: number; value: string; encoding: string }>;
    assert.deepEqual(
      more.map((m) => m.offset),
      [4, 5],
    );
    assert.equal(more[1].encoding, 'base64');
    assert.equal(Buffer.from(more[1].value, 'base64').toString('hex'), 'ff00fe');
    assert.equal(rest.body.next, null);
    assert.equal((await call(api, 'GET', '/api/v1/streams/browse/messages?partition=3', { auth: ADMIN })).status, 400);
  });

  it('declares, lists, purges and deletes queues; declares exchanges; lists bindings', async () => {
    const q = await call(api, 'POST', '/api/v1/queues', { auth: ADMIN, body: { name: 'jobs', durable: false, arguments: { maxLength: 10 } } });
    assert.equal(q.status, 201, q.text);
    assert.deepEqual(q.body.arguments, { 'x-max-length': 10 });
    engine.publishTo('', 'jobs', makeMessage('jobs', Buffer.from('a')));
    engine.publishTo('', 'jobs', makeMessage('jobs', Buffer.from('b')));
    const one = await call(api, 'GET', '/api/v1/queues/jobs', { auth: ADMIN });
    assert.equal(one.body.messages, 2);
    const list = await call(api, 'GET', '/api/v1/queues', { auth: ADMIN });
    assert.ok((list.body.items as Array<{ name: string }>).some((x) => x.name === 'jobs'));
    assert.deepEqual((await call(api, 'POST', '/api/v1/queues/jobs/purge', { auth: ADMIN, headers: JSON_TYPE })).body, { messages: 2 });
    assert.equal((await call(api, 'GET', '/api/v1/queues/jobs', { auth: ADMIN })).body.messages, 0);
    const x = await call(api, 'POST', '/api/v1/exchanges', { auth: ADMIN, body: { name: 'events', type: 'fanout' } });
    assert.equal(x.status, 201, x.text);
    await engine.bind({ source: 'events', destinationKind: 'queue', destination: 'jobs', key: '', arguments: {} });
    const bindings = await call(api, 'GET', '/api/v1/bindings', { auth: ADMIN });
    assert.ok((bindings.body.items as Array<{ source: string; destination: string }>).some((b) => b.source === 'events' && b.destination === 'jobs'));
    assert.equal(((await call(api, 'GET', '/api/v1/exchanges/events', { auth: ADMIN })).body.bindings as unknown[]).length, 1);
    assert.ok(((await call(api, 'GET', '/api/v1/exchanges', { auth: ADMIN })).body.items as Array<{ name: string }>).some((e) => e.name === 'amq.topic'));
    assert.equal((await call(api, 'DELETE', '/api/v1/exchanges/events', { auth: ADMIN, headers: JSON_TYPE })).status, 204);
    assert.equal((await call(api, 'DELETE', '/api/v1/queues/jobs', { auth: ADMIN, headers: JSON_TYPE })).status, 200);
    assert.equal(engine.getQueue('jobs'), undefined);
    assert.equal((await call(api, 'DELETE', '/api/v1/queues/jobs', { auth: ADMIN, headers: JSON_TYPE })).status, 404);
  });

  it('lists, filters and kicks connected clients from the registry', async () => {
    const kicked: string[] = [];
    const a = plane.access.clients.register({
      protocol: 'mqtt',
      listener: 'mqtt',
      remoteAddress: '127.0.0.1',
      remotePort: 5000,
      kick: (r) => kicked.push(`a:${r}`),
    });
    a.user = 'dev';
    a.clientId = 'sensor-1';
    const b = plane.access.clients.register({
      protocol: 'kafka',
      listener: 'kafka',
      remoteAddress: '127.0.0.1',
      remotePort: 5001,
      kick: (r) => kicked.push(`b:${r}`),
    });
    try {
      const all = await call(api, 'GET', '/api/v1/clients', { auth: ADMIN });
      assert.deepEqual((all.body.items as Array<{ id: string }>).map((c) => c.id).sort(), [a.id, b.id].sort());
      const mqtt = await call(api, 'GET', '/api/v1/clients?protocol=mqtt', { auth: ADMIN });
      assert.deepEqual(
        (mqtt.body.items as Array<{ clientId: string }>).map((c) => c.clientId),
        ['sensor-1'],
      );
      const q = await call(api, 'GET', '/api/v1/clients?q=sensor', { auth: ADMIN });
      assert.equal((q.body.items as unknown[]).length, 1);
      assert.equal((await call(api, 'GET', `/api/v1/clients/${a.id}`, { auth: ADMIN })).body.user, 'dev');
      assert.equal((await call(api, 'DELETE', `/api/v1/clients/${b.id}`, { auth: ADMIN, headers: JSON_TYPE })).status, 204);
      assert.deepEqual(kicked, ['b:kicked by an administrator']);
      assert.equal((await call(api, 'DELETE', '/api/v1/clients/nope-1', { auth: ADMIN, headers: JSON_TYPE })).status, 404);
      const overview = await call(api, 'GET', '/api/v1/overview', { auth: ADMIN });
      assert.equal(overview.body.connections, 2);
      assert.ok(Array.isArray(overview.body.byProtocol));
      assert.equal(typeof overview.body.at, 'number');
    } finally {
      a.close();
      b.close();
    }
  });

  it('lists, describes, resets and deletes consumer groups through the protocols that have them', async () => {
    const list = await call(api, 'GET', '/api/v1/consumer-groups', { auth: ADMIN });
    assert.deepEqual(
      (list.body.items as Array<{ name: string }>).map((g) => g.name),
      ['billing'],
    );
    assert.equal((await call(api, 'GET', '/api/v1/consumer-groups/billing', { auth: ADMIN })).body.lag, 5);
    assert.equal((await call(api, 'GET', '/api/v1/consumer-groups/nope', { auth: ADMIN })).status, 404);
    const r = await call(api, 'POST', '/api/v1/consumer-groups/billing/reset', {
      auth: ADMIN,
      body: { stream: 'orders', to: 'timestamp', timestamp: '2026-01-01T00:00:00Z' },
    });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(resets.at(-1), { name: 'billing', stream: 'orders', target: { to: 'timestamp', timestamp: Date.parse('2026-01-01T00:00:00Z') } });
    const noOffset = await call(api, 'POST', '/api/v1/consumer-groups/billing/reset', { auth: ADMIN, body: { stream: 'orders', to: 'offset' } });
    assert.equal(noOffset.status, 400);
    assert.equal((await call(api, 'DELETE', '/api/v1/consumer-groups/billing', { auth: ADMIN, headers: JSON_TYPE })).status, 204);
  });

  it('lists MQTT sessions and retained messages; clears a retained message by its %-encoded topic', async () => {
    await engine.store.putSession({
      clientId: 'dev-1',
      protocol: 'mqtt',
      state: JSON.stringify({ subs: [{ f: 'a/#', q: 1 }] }),
      expiresAt: Date.now() + 60_000,
      updatedAt: Date.now(),
    });
    const sessions = await call(api, 'GET', '/api/v1/mqtt/sessions', { auth: ADMIN });
    assert.deepEqual(
      (sessions.body.items as Array<{ clientId: string; subscriptions: unknown }>).map((s) => [s.clientId, s.subscriptions]),
      [['dev-1', [{ filter: 'a/#', qos: 1 }]]],
    );
    assert.equal((await call(api, 'DELETE', '/api/v1/mqtt/sessions/dev-1', { auth: ADMIN, headers: JSON_TYPE })).status, 204);
    assert.equal(await engine.store.getSession('dev-1'), null);
    assert.equal((await call(api, 'DELETE', '/api/v1/mqtt/sessions/dev-1', { auth: ADMIN, headers: JSON_TYPE })).status, 404);
    // A session the MQTT module holds in memory only (not written yet) is ended there.
    assert.equal((await call(api, 'DELETE', '/api/v1/mqtt/sessions/mem-only', { auth: ADMIN, headers: JSON_TYPE })).status, 204);
    assert.equal(inMemory.has('mem-only'), false);

    // A connected client owns its live session: it is kicked, and the delete waits for its connection to end.
    await engine.store.putSession({ clientId: 'live-1', protocol: 'mqtt', state: '{}', expiresAt: null, updatedAt: Date.now() });
    const order: string[] = [];
    const live = plane.access.clients.register({
      protocol: 'mqtt',
      listener: 'mqtt',
      kick: (reason) => {
        order.push(`kicked: ${reason}`);
        // The adapter's last write of the session lands as the connection closes, before the registry entry goes.
        setTimeout(() => {
          void engine.store
            .putSession({ clientId: 'live-1', protocol: 'mqtt', state: '{}', expiresAt: Date.now() + 60_000, updatedAt: Date.now() })
            .then(() => {
              order.push('closed');
              live.close();
            });
        }, 20);
      },
    });
    live.clientId = 'live-1';
    const listed = await call(api, 'GET', '/api/v1/mqtt/sessions', { auth: ADMIN });
    assert.equal((listed.body.items as Array<{ clientId: string; connected: boolean }>).find((s) => s.clientId === 'live-1')?.connected, true);
    assert.equal((await call(api, 'DELETE', '/api/v1/mqtt/sessions/live-1', { auth: ADMIN, headers: JSON_TYPE })).status, 204);
    assert.deepEqual(order, ['kicked: session deleted by an administrator', 'closed']);
    assert.equal(await engine.store.getSession('live-1'), null, 'the delete came after the closing write');

    await engine.publish(makeMessage('plant/1/temp', Buffer.from('21.5'), { retain: true }));
    await engine.publish(makeMessage('other/x', Buffer.from('y'), { retain: true }));
    const retained = await call(api, 'GET', '/api/v1/mqtt/retained?filter=plant/%2B/temp', { auth: ADMIN });
    assert.deepEqual(
      (retained.body.items as Array<{ topic: string; payload: string }>).map((r) => [r.topic, r.payload]),
      [['plant/1/temp', '21.5']],
    );
    assert.equal((await call(api, 'DELETE', '/api/v1/mqtt/retained/plant%2F1%2Ftemp', { auth: ADMIN, headers: JSON_TYPE })).status, 204);
    assert.equal(
      (await engine.store.listRetained()).some((r) => r.topic === 'plant/1/temp'),
      false,
    );
    assert.equal((await call(api, 'DELETE', '/api/v1/mqtt/retained/plant%2F1%2Ftemp', { auth: ADMIN, headers: JSON_TYPE })).status, 404);
  });

  it('manages users, groups, namespaces and policies', async () => {
    const ns = await call(api, 'POST', '/api/v1/namespaces', { auth: ADMIN, body: { name: 'tenant-a', quotas: { maxConnections: 10 } } });
    assert.equal(ns.status, 201, ns.text);
    const patched = await call(api, 'PATCH', '/api/v1/namespaces/tenant-a', { auth: ADMIN, body: { quotas: { publishRate: 100, maxConnections: null } } });
    assert.deepEqual(patched.body.quotas, { publishRate: 100 });
    const u = await call(api, 'POST', '/api/v1/users', {
      auth: ADMIN,
      body: { username: 'erin', password: 'erin-pw', groups: ['ops'], namespace: 'tenant-a' },
    });
    assert.equal(u.status, 201, u.text);
    assert.equal(((await call(api, 'GET', '/api/v1/namespaces/tenant-a', { auth: ADMIN })).body.usage as { users: number }).users, 1);
    // Usage: stored bytes from the quotas' shared per-namespace figure (here a stand-in for the log's stream sizes).
    plane.access.quotas.useStorage(() =>
      storedByNamespace(
        new Map([
          ['tenant-a~orders', { hot: 120, objects: 3000 }],
          ['other', { hot: 9, objects: 9 }],
        ]),
      ),
    );
    await call(api, 'PATCH', '/api/v1/namespaces/tenant-a', { auth: ADMIN, body: { quotas: { maxStorageBytes: 5000 } } });
    const usage = await call(api, 'GET', '/api/v1/namespaces/tenant-a/usage', { auth: ADMIN });
    assert.equal(usage.status, 200, usage.text);
    assert.deepEqual(
      { ...usage.body, throttled: undefined, throttledMs: undefined },
      {
        name: 'tenant-a',
        users: 1,
        connections: 0,
        messagesIn: 0,
        messagesOut: 0,
        bytesIn: 0,
        bytesOut: 0,
        storedHotBytes: 120,
        storedObjectBytes: 3000,
        storedBytes: 3120,
        throttled: undefined,
        throttledMs: undefined,
        refusedConnections: 0,
        refusedWrites: 0,
        maxStorageBytes: 5000,
      },
    );
    const listed = (await call(api, 'GET', '/api/v1/namespaces', { auth: ADMIN })).body.items as Array<{ name: string; usage: { storedBytes: number } }>;
    assert.equal(listed.find((n) => n.name === 'tenant-a')?.usage.storedBytes, 3120);
    assert.equal((await call(api, 'GET', '/api/v1/namespaces/nope/usage', { auth: ADMIN })).status, 404);
    assert.equal((await call(api, 'DELETE', '/api/v1/namespaces/tenant-a', { auth: ADMIN, headers: JSON_TYPE })).status, 400, 'still has a user');
    assert.equal((await call(api, 'POST', '/api/v1/users', { auth: ADMIN, body: { username: 'erin', password: 'x' } })).status, 409);
    const g = await call(api, 'GET', '/api/v1/groups/ops', { auth: ADMIN });
    assert.deepEqual(g.body.members, ['erin']);
    assert.equal((await call(api, 'POST', '/api/v1/groups', { auth: ADMIN, body: { name: 'auditors', description: 'read only' } })).status, 201);
    const p = await call(api, 'PUT', '/api/v1/policies/ops-all', {
      auth: ADMIN,
      body: { effect: 'allow', actions: ['*'], resources: ['topic:ops/#'], principals: ['group:ops'] },
    });
    assert.equal(p.status, 201, p.text);
    assert.equal(
      (
        await call(api, 'PUT', '/api/v1/policies/ops-all', {
          auth: ADMIN,
          body: { effect: 'deny', actions: ['publish'], resources: ['topic:ops/#'], principals: ['group:ops'] },
        })
      ).status,
      200,
    );
    assert.equal(plane.directory.policies.defs().find((x) => x.name === 'ops-all')?.effect, 'deny');
    const badPolicy = await call(api, 'POST', '/api/v1/policies', {
      auth: ADMIN,
      body: { name: 'bad', effect: 'allow', actions: ['fly'], resources: ['topic:a'], principals: ['everyone'] },
    });
    assert.equal(badPolicy.status, 400);
    assert.match(String(badPolicy.body.error?.message), /unknown action "fly"/);
    assert.equal((await call(api, 'DELETE', '/api/v1/policies/ops-all', { auth: ADMIN, headers: JSON_TYPE })).status, 204);
    assert.equal((await call(api, 'PATCH', '/api/v1/users/erin', { auth: ADMIN, body: { groups: [], namespace: 'default' } })).status, 200);
    assert.equal((await call(api, 'DELETE', '/api/v1/users/erin', { auth: ADMIN, headers: JSON_TYPE })).status, 204);
    assert.equal((await call(api, 'DELETE', '/api/v1/namespaces/tenant-a', { auth: ADMIN, headers: JSON_TYPE })).status, 204);
    assert.equal((await call(api, 'DELETE', '/api/v1/groups/auditors', { auth: ADMIN, headers: JSON_TYPE })).status, 204);
  });

  describe('authorization once policies exist', () => {
    before(async () => {
      await plane.directory.putPolicy({
        name: 'dev-streams',
        effect: 'allow',
        actions: ['describe', 'subscribe'],
        resources: ['stream:s.a', 'stream:browse'],
        principals: ['group:developers'],
      });
    });

    it('filters lists to what the caller may describe and refuses the rest with 403', async () => {
      const list = await call(api, 'GET', '/api/v1/streams', { auth: DEV });
      assert.deepEqual(
        (list.body.items as Array<{ name: string }>).map((s) => s.name),
        ['browse', 's.a'],
      );
      assert.equal((await call(api, 'GET', '/api/v1/streams/s.a', { auth: DEV })).status, 200);
      const other = await call(api, 'GET', '/api/v1/streams/s.b', { auth: DEV });
      assert.equal(other.status, 403);
      assert.equal(other.body.error?.code, 'FORBIDDEN');
      assert.equal(other.body.error?.message, 'user "dev" may not describe stream:s.b');
      assert.equal((await call(api, 'GET', '/api/v1/streams/browse/messages', { auth: DEV })).status, 200);
      const del = await call(api, 'DELETE', '/api/v1/streams/s.a', { auth: DEV, headers: JSON_TYPE });
      assert.equal(del.status, 403);
      assert.ok(engine.getStream('s.a'));
      assert.equal((await call(api, 'POST', '/api/v1/streams', { auth: DEV, body: { name: 'mine' } })).status, 403);
    });

    it('keeps identities, clients, kicks and the broker status to administrators', async () => {
      for (const [method, path, body] of [
        ['GET', '/api/v1/users', undefined],
        ['POST', '/api/v1/users', { username: 'x', password: 'y' }],
        ['GET', '/api/v1/policies', undefined],
        ['PUT', '/api/v1/policies/mine', { effect: 'allow', actions: ['*'], resources: ['*:*'], principals: ['user:dev'] }],
        ['GET', '/api/v1/namespaces', undefined],
        ['GET', '/api/v1/namespaces/default/usage', undefined],
        ['GET', '/api/v1/groups', undefined],
        ['GET', '/api/v1/clients', undefined],
        ['GET', '/api/v1/broker', undefined],
        ['GET', '/api/v1/users/root', undefined],
        ['PATCH', '/api/v1/users/dev', { groups: ['admins'] }],
      ] as const) {
        const r = await call(api, method, path, { auth: DEV, body, headers: body === undefined && method !== 'GET' ? JSON_TYPE : {} });
        assert.equal(r.status, 403, `${method} ${path}: ${r.text}`);
      }
      assert.deepEqual(plane.directory.user('dev')?.groups, ['developers']);
      assert.equal((await call(api, 'GET', '/api/v1/users', { auth: ADMIN })).status, 200, 'members of admins may');
    });

    it('lets a user read itself and change its own password', async () => {
      assert.equal((await call(api, 'GET', '/api/v1/users/dev', { auth: DEV })).body.username, 'dev');
      const r = await call(api, 'PATCH', '/api/v1/users/dev', { auth: DEV, body: { password: 'dev-pw-2' } });
      assert.equal(r.status, 200, r.text);
      assert.equal((await call(api, 'GET', '/api/v1/users/dev', { auth: DEV })).status, 401);
      assert.equal((await call(api, 'GET', '/api/v1/users/dev', { auth: ['dev', 'dev-pw-2'] })).status, 200);
      const me = await call(api, 'GET', '/api/v1/session', { auth: ['dev', 'dev-pw-2'] });
      assert.equal(me.body.admin, false);
      assert.deepEqual(me.body.groups, ['developers']);
    });
  });
});
