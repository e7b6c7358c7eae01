/**
 * GET /api/v1/cluster over real Clusters sharing a MemoryClusterStore (no sockets, no PostgreSQL): brokers with
 * their state and owned counts from the store, owner rows paged and filtered, a dead broker shown dead, and a
 * single broker answering `enabled: false`.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { Cluster, MemoryClusterStore, type OwnershipHandler } from '../../src/cluster/index.js';
import { call, controlPlane, engineWith, startApi } from './admin-api-helpers.js';

const logger = pino({ level: 'silent' });

function holder(names: () => string[]): OwnershipHandler {
  return { names, acquire: async () => undefined, release: async () => undefined };
}

async function settle(...cs: Cluster[]): Promise<void> {
  for (let i = 0; i < 4; i++) {
    for (const c of cs) c.kick();
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface Body {
  enabled: boolean;
  broker: number | null;
  leaseMs: number | null;
  brokers: Array<{
    id: number;
    alive: boolean;
    leaving: boolean;
    leaseRemainingMs: number;
    self: boolean;
    endpoints: Record<string, { host: string; port: number }>;
    owned: Record<string, number>;
  }>;
  owners: { items: Array<{ kind: string; name: string; owner: number | null; epoch: number; alive: boolean; placement: number | null }>; next: string | null };
}

describe('admin API: GET /api/v1/cluster', () => {
  it('lists the brokers with their owned counts and pages the owner rows', async () => {
    const store = new MemoryClusterStore();
    const names = Array.from({ length: 30 }, (_, i) => `s/${i}`);
    const start = async (id: number) => {
      const c = await Cluster.start({
        store,
        info: { id, version: 'test', endpoints: { mqtt: { host: '127.0.0.1', port: 1880 + id } } },
        leaseMs: 60_000,
        logger,
      });
      c.register(
        'partition',
        holder(() => names),
      );
      c.begin();
      return c;
    };
    const a = await start(1);
    const b = await start(2);
    await settle(a, b);
    await settle(a, b);
    const plane = await controlPlane();
    const api = await startApi({ engine: await engineWith(), access: plane.access, cluster: a });
    try {
      const r = await call(api, 'GET', '/api/v1/cluster');
      assert.equal(r.status, 200);
      const s = r.body as unknown as Body;
      assert.equal(s.enabled, true);
      assert.equal(s.broker, 1);
      assert.equal(s.leaseMs, 60_000);
      assert.deepEqual(
        s.brokers.map((x) => [x.id, x.alive, x.leaving, x.self]),
        [
          [1, true, false, true],
          [2, true, false, false],
        ],
      );
      assert.deepEqual(s.brokers[1].endpoints.mqtt, { host: '127.0.0.1', port: 1882 });
      const counts = s.brokers.map((x) => x.owned.partition);
      assert.equal(counts[0] + counts[1], 30);
      assert.ok(counts[0] > 0 && counts[1] > 0, `both own some (${counts})`);
      assert.equal(s.owners.items.length, 30);
      for (const o of s.owners.items) {
        assert.equal(o.kind, 'partition');
        assert.equal(o.alive, true);
        assert.equal(o.owner, o.placement, `${o.name} is owned where placement puts it`);
        assert.ok(o.epoch >= 1);
      }

      // Pages of 7 cover every row once, in order.
      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const q: string = `/api/v1/cluster?limit=7${cursor ? `&cursor=${cursor}` : ''}`;
        const p = (await call(api, 'GET', q)).body as unknown as Body;
        assert.ok(p.owners.items.length <= 7);
        seen.push(...p.owners.items.map((o) => o.name));
        cursor = p.owners.next;
      } while (cursor !== null);
      assert.deepEqual([...seen].sort(), [...names].sort());
      assert.equal(new Set(seen).size, 30);

      // Filters.
      const only2 = (await call(api, 'GET', '/api/v1/cluster?broker=2')).body as unknown as Body;
      assert.equal(only2.owners.items.length, counts[1]);
      assert.ok(only2.owners.items.every((o) => o.owner === 2));
      const queues = (await call(api, 'GET', '/api/v1/cluster?kind=queue')).body as unknown as Body;
      assert.equal(queues.owners.items.length, 0);
      assert.equal((await call(api, 'GET', '/api/v1/cluster?kind=bogus')).status, 400);

      // Broker 2's lease runs out (the store's clock moves): it is shown dead, its rows no longer alive.
      const t0 = Date.now();
      store.now = () => t0 + 120_000;
      const dead = (await call(api, 'GET', '/api/v1/cluster')).body as unknown as Body;
      const two = dead.brokers.find((x) => x.id === 2)!;
      assert.equal(two.alive, false);
      assert.ok(two.leaseRemainingMs < 0);
      assert.ok(dead.owners.items.filter((o) => o.owner === 2).every((o) => !o.alive));
    } finally {
      await api.close();
      await plane.close();
      await a.close().catch(() => undefined);
      await b.close().catch(() => undefined);
    }
  });

  it('answers enabled: false on a single broker', async () => {
    const plane = await controlPlane();
    const api = await startApi({ engine: await engineWith(), access: plane.access });
    try {
      const r = await call(api, 'GET', '/api/v1/cluster');
      assert.equal(r.status, 200);
      assert.deepEqual(r.body, { enabled: false, broker: null, leaseMs: null, brokers: [], owners: { items: [], next: null } });
    } finally {
      await api.close();
      await plane.close();
    }
  });

  it('needs describe on cluster:*', async () => {
    const plane = await controlPlane([{ username: 'nobody', password: 'pw' }]);
    // With a policy in place the default is deny: this user may read one stream, not the cluster.
    await plane.directory.putPolicy({ name: 'one-stream', effect: 'allow', actions: ['describe'], resources: ['stream:x'], principals: ['user:nobody'] });
    const api = await startApi({ engine: await engineWith(), access: plane.access });
    try {
      assert.equal((await call(api, 'GET', '/api/v1/cluster')).status, 401);
      assert.equal((await call(api, 'GET', '/api/v1/cluster', { auth: ['nobody', 'pw'] })).status, 403);
    } finally {
      await api.close();
      await plane.close();
    }
  });
});
