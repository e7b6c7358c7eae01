/** QuotaManager (src/control/quotas.ts) with an injected clock: connection quota, rates as token buckets, live changes. */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Directory, PasswordVerifier, QuotaManager, type QuotaLease } from '../../src/control/index.js';
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
    assert.deepEqual(q.figures().ns, { connections: 2, throttled: 0, throttledMs: 0, refusedConnections: 2 });
    b.release();
    c.release();
    assert.equal(q.figures().ns.connections, 0);
    // Another namespace (the default one, no quotas) is not limited by it.
    for (let i = 0; i < 5; i++) assert.ok(!('refused' in q.connect({ user: null, groups: [], namespace: 'default' })));
  });

  it('publish rate: a second\'s worth passes at once, then the wait grows with the excess, and refills with time', async () => {
    const { q, lease, tick } = await setup({ publishRate: 10 });
    const l = lease();
    for (let i = 0; i < 10; i++) assert.equal(l.chargeIn(1, 100), 0, `message ${i} within the burst`);
    assert.equal(l.chargeIn(1, 100), 100, 'one over at 10/s: 100 ms');
    assert.equal(l.chargeIn(2, 100), 300, 'three over: 300 ms');
    tick(300);
    assert.equal(l.chargeIn(1, 100), 100, 'the debt was paid; this one is over again');
    tick(1100);
    assert.equal(l.chargeIn(9, 100), 0, 'refilled (up to one second\'s worth)');
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
    assert.equal(b.chargeIn(1, 1), 250, 'b pays for a\'s burst');
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
});
