/**
 * What every ClusterStore backend (src/cluster/types.ts: membership leases and owner rows with epochs) must do.
 * `open(dir)` opens a store over the state kept for `dir`; opening the same `dir` again gives a second handle (a
 * second broker on the same metastore). `check(handle, kind, name, epoch)` runs the backend's owner check (the SQL
 * function flowmq_owner_check in PostgreSQL), which rejects with FENCED unless the row holds `epoch`.
 * Leases are real time here (a few hundred ms), measured by the store's clock.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isFlowError } from '../../src/core/index.js';
import type { BrokerInfo, ClusterStore, ResourceKind } from '../../src/cluster/index.js';

export interface ClusterBackend {
  store: ClusterStore;
  check(kind: ResourceKind, name: string, epoch: number): Promise<void>;
  close(): Promise<void>;
}

const SHORT = 300;
const LONG = 60_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function info(id: number, incarnation: string): BrokerInfo {
  return { id, incarnation, version: 'test', startedAt: Date.now(), endpoints: { cluster: { host: '127.0.0.1', port: 9000 + id } } };
}

export function clusterStoreConformance(name: string, open: (dir: string) => Promise<ClusterBackend>): void {
  describe(`ClusterStore conformance: ${name}`, () => {
    let n = 0;
    const fresh = () => `case-${n++}`;

    it('registers brokers with leases; a live id cannot be taken, an expired one can', async () => {
      const dir = fresh();
      const { store, close } = await open(dir);
      try {
        await store.register(info(1, 'a1'), LONG);
        await store.register(info(2, 'b1'), SHORT);
        let view = await store.brokers();
        assert.deepEqual(
          view.map((b) => [b.id, b.incarnation, b.alive, b.leaving]),
          [
            [1, 'a1', true, false],
            [2, 'b1', true, false],
          ],
        );
        assert.deepEqual(view[0].endpoints.cluster, { host: '127.0.0.1', port: 9001 });
        assert.ok(view[0].leaseRemainingMs > LONG - 5000 && view[0].leaseRemainingMs <= LONG);
        await assert.rejects(
          store.register(info(1, 'a2'), LONG),
          (e) => isFlowError(e, 'CONFIG_ERROR') && /broker id 1 is held by a live broker/.test(e.message),
        );
        await store.register(info(1, 'a1'), LONG); // the same incarnation again: fine
        await sleep(SHORT + 150);
        view = await store.brokers();
        assert.equal(view.find((b) => b.id === 2)?.alive, false);
        assert.ok(view.find((b) => b.id === 2)!.leaseRemainingMs < 0);
        assert.equal(await store.heartbeat(2, 'b1', LONG), false, 'an expired lease is not renewed');
        await store.register(info(2, 'b2'), LONG);
        assert.equal(await store.heartbeat(2, 'b1', LONG), false, 'an old incarnation is not renewed');
        assert.equal(await store.heartbeat(2, 'b2', LONG), true);
        await store.setLeaving(2, 'b2');
        assert.equal((await store.brokers()).find((b) => b.id === 2)?.leaving, true);
        await store.deregister(2, 'b1'); // another incarnation: nothing
        assert.equal((await store.brokers()).length, 2);
        await store.deregister(2, 'b2');
        assert.deepEqual(
          (await store.brokers()).map((b) => b.id),
          [1],
        );
      } finally {
        await close();
      }
    });

    it('claims: one owner at a time, the epoch bumped at every change of hands', async () => {
      const dir = fresh();
      const { store, close } = await open(dir);
      try {
        await store.register(info(1, 'a'), LONG);
        await store.register(info(2, 'b'), LONG);
        let row = await store.claim('partition', 's/0', 1, 'a');
        assert.deepEqual([row.owner, row.incarnation, row.epoch], [1, 'a', 1]);
        row = await store.claim('partition', 's/0', 1, 'a');
        assert.equal(row.epoch, 1, 'claiming what one holds changes nothing');
        row = await store.claim('partition', 's/0', 2, 'b');
        assert.deepEqual([row.owner, row.epoch], [1, 1], 'a live owner keeps it');
        assert.equal(await store.release('partition', 's/0', 1, 'a', 2), false, 'a release at another epoch does nothing');
        assert.equal(await store.release('partition', 's/0', 2, 'b', 1), false, 'a non-owner cannot release');
        assert.equal(await store.release('partition', 's/0', 1, 'a', 1), true);
        row = (await store.owner('partition', 's/0'))!;
        assert.deepEqual([row.owner, row.incarnation, row.epoch], [null, null, 1]);
        row = await store.claim('partition', 's/0', 2, 'b');
        assert.deepEqual([row.owner, row.epoch], [2, 2]);
        row = await store.claim('partition', 's/0', 1, 'a', { force: true });
        assert.deepEqual([row.owner, row.epoch], [1, 3], 'a forced claim takes it from a live owner');
        // Kinds are separate namespaces.
        row = await store.claim('queue', 's/0', 2, 'b');
        assert.deepEqual([row.owner, row.epoch], [2, 1]);
        assert.deepEqual(
          (await store.owners('partition')).map((o) => [o.name, o.owner, o.epoch]),
          [['s/0', 1, 3]],
        );
        await store.forget('queue', 's/0');
        assert.equal(await store.owner('queue', 's/0'), null);
      } finally {
        await close();
      }
    });

    it("a dead owner's rows are orphans anyone live may claim; a dead claimant takes nothing", async () => {
      const dir = fresh();
      const { store, close } = await open(dir);
      try {
        await store.register(info(1, 'a'), LONG);
        await store.register(info(2, 'b'), SHORT);
        await store.claim('session', 'c1', 2, 'b');
        await store.claim('session', 'c2', 1, 'a');
        assert.deepEqual(await store.orphans('session', 10), []);
        await sleep(SHORT + 150);
        assert.deepEqual(
          (await store.orphans('session', 10)).map((o) => o.name),
          ['c1'],
        );
        const lost = await store.claim('session', 'c2', 2, 'b');
        assert.deepEqual([lost.owner, lost.epoch], [1, 1], 'a broker whose lease expired claims nothing');
        await assert.rejects(store.claim('session', 'c3', 2, 'b'), (e) => isFlowError(e, 'UNAVAILABLE'));
        const row = await store.claim('session', 'c1', 1, 'a');
        assert.deepEqual([row.owner, row.epoch], [1, 2]);
        // Rows of a broker registered again under a new incarnation are orphans too.
        await store.register(info(2, 'b2'), LONG);
        await store.claim('session', 'c4', 2, 'b2');
        await store.register(info(2, 'b3'), LONG).catch(() => undefined); // refused: b2 is live
        assert.deepEqual(await store.orphans('session', 10), []);
      } finally {
        await close();
      }
    });

    it("the owner check passes for the owner row's epoch only", async () => {
      const dir = fresh();
      const { store, close, check } = await open(dir);
      try {
        await store.register(info(1, 'a'), LONG);
        await store.register(info(2, 'b'), LONG);
        await store.claim('group', 'g', 1, 'a');
        await check('group', 'g', 1);
        await store.claim('group', 'g', 2, 'b', { force: true });
        await assert.rejects(check('group', 'g', 1), (e) => isFlowError(e, 'FENCED'));
        await check('group', 'g', 2);
        await assert.rejects(check('group', 'nothing', 1), (e) => isFlowError(e, 'FENCED'));
      } finally {
        await close();
      }
    });

    it("a second handle sees the first one's rows and notifications", async () => {
      const dir = fresh();
      const one = await open(dir);
      const two = await open(dir);
      try {
        await one.store.register(info(1, 'a'), LONG);
        assert.deepEqual(
          (await two.store.brokers()).map((b) => b.id),
          [1],
        );
        const got: string[] = [];
        await two.store.listen('streams', (p) => {
          if (p !== '*') got.push(p);
        });
        await one.store.notify('streams', 'created:alpha');
        await one.store.notify('streams', 'created:beta');
        for (let i = 0; i < 100 && got.length < 2; i++) await sleep(20);
        assert.deepEqual(got, ['created:alpha', 'created:beta'], 'in order');
        await assert.rejects(one.store.notify('streams', 'x'.repeat(8000)), (e) => isFlowError(e, 'INVALID_ARGUMENT'));
      } finally {
        await one.close();
        await two.close();
      }
    });
  });
}
