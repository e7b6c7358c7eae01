/** QuotaManager (src/control/quotas.ts) with an injected clock: connection quota, rates as token buckets, live changes. */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Directory, PasswordVerifier, QuotaManager, RuntimeSettings, storedByNamespace, type QuotaLease } from '../../src/control/index.js';
import { MemoryControlStore } from '../../src/storage/metastore/control-store.js';

const verifier = new PasswordVerifier({ scrypt: { N: 1024, r: 8, p: 1 } });
after(() => verifier.close());

async function setup(quotas: Record<string, number>) {
  const d = await Directory.open({ store: new MemoryControlStore(), hasher: (p) => verifier.hash(p) });
  await d.putNamespace({ name: 'ns', quotas });
  let now = 10_000;
  const q = new QuotaManager(d, () => now);
  const p = { user: 'u', groups: [], namespace: 'ns' };
  const lease = (): QuotaLease => {
    const l = q.connect(p);
    if ('refused' in l) throw new Error(l.refused);
    return l;
  };
  return { d, q, p, lease, tick: (ms: number) => (now += ms) };
}

describe('QuotaManager', () => {
  it('storage quota: streams fold into their namespace; writes refused at maxStorageBytes, resumed when usage drops', async () => {
    const { d, q, lease, tick } = await setup({ maxStorageBytes: 1000 });
    const sizes = new Map([
      ['ns~a', { hot: 300, objects: 400 }],
      ['ns~b', { hot: 100, objects: 0 }],
      ['orders', { hot: 5000, objects: 5000 }],
    ]);
    let walks = 0;
    q.useStorage(() => (walks++, storedByNamespace(sizes)));
    assert.deepEqual(q.storedBytes().get('ns'), { hot: 400, objects: 400 });
    assert.deepEqual(q.storedBytes().get('default'), { hot: 5000, objects: 5000 });
    const l = lease();
    assert.equal(l.storageFull(), null, '800 of 1000');
    sizes.set('ns~b', { hot: 300, objects: 0 });
    assert.equal(l.storageFull(), null, 'the figure is reused within a second');
    tick(1000);
    assert.match(l.storageFull() ?? '', /namespace "ns" is over its storage quota \(1000 of 1000 bytes stored\)/);
    assert.equal(walks, 2, 'one walk per second, whatever the number of checks');
    assert.equal(q.figures().ns.refusedWrites, 1);
    sizes.delete('ns~a');
    q.refreshStorage();
    assert.equal(l.storageFull(), null, 'room again after a deletion');
    await d.putNamespace({ name: 'ns', quotas: {} });
    sizes.set('ns~a', { hot: 1e9, objects: 0 });
    tick(1000);
    assert.equal(l.storageFull(), null, 'no quota, no limit');
    l.release();
  });

  it('refuses connections over the namespace quota and counts releases once', async () => {
    const { q, p, lease } = await setup({ maxConnections: 2 });
    const a = lease();
    const b = lease();
    const third = q.connect(p);
    assert.ok('refused' in third);
    assert.match(third.refused, /namespace "ns" has reached its quota of 2 connections/);
    a.release();
    a.release(); // twice: still one connection freed
    const c = lease();
    assert.ok('refused' in q.connect(p));
    assert.deepEqual(q.figures().ns, { connections: 2, throttled: 0, throttledMs: 0, refusedConnections: 2, refusedWrites: 0 });
    b.release();
    c.release();
    assert.equal(q.figures().ns.connections, 0);
    // Another namespace (the default one, no quotas) is not limited by it.
    for (let i = 0; i < 5; i++) assert.ok(!('refused' in q.connect({ user: null, groups: [], namespace: 'default' })));
  });

  it("publish rate: a second's worth passes at once, then the wait grows with the excess, and refills with time", async () => {
    const { q, lease, tick } = await setup({ publishRate: 10 });
    const l = lease();
    for (let i = 0; i < 10; i++) assert.equal(l.chargeIn(1, 100), 0, `message ${i} within the burst`);
    assert.equal(l.chargeIn(1, 100), 100, 'one over at 10/s: 100 ms');
    assert.equal(l.chargeIn(2, 100), 300, 'three over: 300 ms');
    tick(300);
    assert.equal(l.chargeIn(1, 100), 100, 'the debt was paid; this one is over again');
    tick(1100);
    assert.equal(l.chargeIn(9, 100), 0, "refilled (up to one second's worth)");
    assert.equal(q.figures().ns.throttled, 3);
    assert.equal(q.figures().ns.throttledMs, 500);
  });

  it('bytes in and out have their own buckets; the longest wait wins', async () => {
    const { lease } = await setup({ publishRate: 1000, bytesInRate: 1000, bytesOutRate: 500 });
    const l = lease();
    assert.equal(l.chargeIn(1, 1000), 0);
    assert.equal(l.chargeIn(1, 500), 500, 'bytes over, messages not');
    assert.equal(l.chargeOut(500), 0);
    assert.equal(l.chargeOut(250), 500);
    assert.equal(l.chargeIn(0, 0), 0, 'nothing charged, nothing owed');
  });

  it('leases of one namespace share its buckets', async () => {
    const { lease } = await setup({ publishRate: 4 });
    const a = lease();
    const b = lease();
    assert.equal(a.chargeIn(4, 1), 0);
    assert.equal(b.chargeIn(1, 1), 250, "b pays for a's burst");
  });

  it('a quota changed in the directory applies at the next charge; a zero rate holds back a second at a time', async () => {
    const { d, q, lease } = await setup({});
    const l = lease();
    for (let i = 0; i < 100; i++) assert.equal(l.chargeIn(1, 1), 0, 'no quota');
    await d.putNamespace({ name: 'ns', quotas: { publishRate: 0 } });
    assert.equal(l.chargeIn(1, 1), 1000);
    assert.equal(q.figures().ns.throttled, 1, 'counted');
    await d.putNamespace({ name: 'ns', quotas: { maxConnections: 1 } });
    assert.equal(l.chargeIn(1, 1), 0);
    assert.ok('refused' in q.connect({ user: 'x', groups: [], namespace: 'ns' }), 'the new connection quota counts the open lease');
  });

  it('user quotas (Kafka client quotas): per user across connections, the default user for the others, beside the namespace', async () => {
    const store = new MemoryControlStore();
    const d = await Directory.open({ store, hasher: (p) => verifier.hash(p) });
    const settings = await RuntimeSettings.open(store, d);
    let now = 10_000;
    const q = new QuotaManager(d, () => now, settings);
    await settings.alterQuotas([
      { entity: { user: 'alice' }, set: { producer_byte_rate: 1000 } },
      { entity: { user: null }, set: { consumer_byte_rate: 500 } },
    ]);
    const lease = (user: string | null): QuotaLease => {
      const l = q.connect({ user, groups: [], namespace: 'default' });
      if ('refused' in l) throw new Error(l.refused);
      return l;
    };
    const a1 = lease('alice');
    const a2 = lease('alice');
    assert.equal(a1.chargeIn(1, 600), 0);
    assert.equal(a2.chargeIn(1, 600), 200, "alice's two connections share one bucket: 200 bytes over at 1000 B/s");
    assert.equal(a1.chargeOut(400), 0, "alice has no consumer rate of her own: the default user's (500 B/s)");
    assert.equal(a1.chargeOut(200), 200);
    const bob = lease('bob');
    assert.equal(bob.chargeIn(1, 100_000), 0, 'bob has no producer rate');
    assert.equal(bob.chargeOut(600), 200, "bob gets the default user's consumer rate, his own bucket");
    const anon = lease(null);
    assert.equal(anon.chargeOut(500), 0);
    assert.equal(anon.chargeOut(50), 100, 'anonymous clients are the default user too');
    // A change applies at the next charge; removing the last key removes the entity.
    await settings.alterQuotas([{ entity: { user: 'alice' }, set: { producer_byte_rate: null } }]);
    now += 10_000;
    assert.equal(a1.chargeIn(1, 1_000_000), 0);
    assert.equal(settings.quota({ user: 'alice' }), undefined);
    for (const l of [a1, a2, bob, anon]) l.release();
  });
  it('cluster-wide: each of N brokers enforces 1/N of the rates and its part of the connections, following membership', async () => {
    const { q, p, lease, tick } = await setup({ bytesInRate: 3000, maxConnections: 4 });
    // Three brokers, this one the second by id: 1000 bytes a second here, 1 connection (4 = 2 + 1 + 1).
    q.shareWith([1, 2, 3], 2);
    const l = lease();
    assert.equal(l.chargeIn(1, 1000), 0, "this broker's second of burst");
    assert.equal(l.chargeIn(1, 1000), 1000, 'the next 1000 bytes wait a second at 1000 B/s');
    const refused = q.connect(p);
    assert.ok('refused' in refused, 'a second connection is over this broker part');
    assert.match(refused.refused, /quota of 4 connections, shared by 3 brokers: 1 here/);
    // The first broker by id takes the remainder: 2 of the 4.
    q.shareWith([1, 2, 3], 1);
    assert.equal(q.connectionShare(4), 2);
    const second = lease();
    // A broker leaves: the two left take half each.
    q.shareWith([1, 2], 1);
    assert.equal(q.rateShare, 0.5);
    tick(2000);
    assert.equal(l.chargeIn(1, 1500), 0, 'the bucket refills to 1500 (half of 3000)');
    assert.equal(l.chargeIn(1, 1500), 1000);
    // Alone again: the whole quota.
    q.shareWith([1], 1);
    assert.equal(q.connectionShare(4), 4);
    l.release();
    second.release();
  });
});
