/**
 * Session writes fenced by the session's owner epoch (cluster mode) in the PostgreSQL metastore: with the cluster's
 * owner rows in the same database (PostgresClusterStore), a write naming the epoch its broker owns the session under
 * lands; once another broker claimed the session (epoch bumped) the same write is refused with FENCED and leaves
 * nothing behind; writes without an epoch (a single broker) are unchanged.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isFlowError } from '../../../src/core/index.js';
import { PostgresClusterStore } from '../../../src/cluster/pg-store.js';
import { PostgresMetastore } from '../../../src/storage/metastore/index.js';
import { startPostgres, type PostgresServer } from '../../helpers/postgres.js';

let server: PostgresServer;
before(async () => {
  server = await startPostgres();
});
after(async () => {
  await server.stop();
});

const fenced = (e: unknown): boolean => isFlowError(e, 'FENCED');
const info = (id: number, incarnation: string) => ({ id, incarnation, version: 't', startedAt: 0, endpoints: {} });
const rec = (clientId: string, state: string) => ({ clientId, protocol: 'mqtt', state, expiresAt: null, updatedAt: 1 });

describe('PostgresMetastore session writes fenced by the owner epoch', () => {
  it('accepts the owner epoch, refuses a stale one with nothing written, and leaves unfenced writes alone', async () => {
    const url = await server.createDatabase();
    const store = await PostgresClusterStore.open({ url });
    const meta = await PostgresMetastore.open({ url });
    try {
      await store.register(info(1, 'a'), 60_000);
      await store.register(info(2, 'b'), 60_000);
      const a = await store.claim('session', 'c1', 1, 'a');
      assert.equal(a.owner, 1);
      const e1 = a.epoch;

      // The owner writes under its epoch.
      await meta.putSession(rec('c1', 'one'), e1);
      const first = await meta.updateQueue('c1', { append: [Buffer.from('m1'), Buffer.from('m2')] }, 10, e1);
      assert.equal(first.seqs.length, 2);
      await meta.ackQueue('c1', first.seqs[0], e1);
      assert.deepEqual(
        (await meta.readQueue('c1', 10)).map((x) => x.data.toString()),
        ['m2'],
      );

      // Broker 2 takes the session over (the holder agreed: force): epoch bumped.
      const b = await store.claim('session', 'c1', 2, 'b', { force: true });
      assert.equal(b.owner, 2);
      assert.ok(b.epoch > e1);

      // Every write of the old owner is refused, and none of it happened.
      await assert.rejects(meta.putSession(rec('c1', 'late'), e1), fenced);
      await assert.rejects(meta.updateQueue('c1', { append: [Buffer.from('late')], remove: [first.seqs[1]] }, 10, e1), fenced);
      await assert.rejects(meta.ackQueue('c1', first.seqs[1], e1), fenced);
      await assert.rejects(meta.deleteSession('c1', e1), fenced);
      assert.equal((await meta.getSession('c1'))?.state, 'one');
      assert.deepEqual(
        (await meta.readQueue('c1', 10)).map((x) => x.data.toString()),
        ['m2'],
      );

      // The new owner writes under its own epoch.
      await meta.putSession(rec('c1', 'two'), b.epoch);
      await meta.updateQueue('c1', { append: [Buffer.from('m3')] }, 10, b.epoch);
      assert.equal((await meta.getSession('c1'))?.state, 'two');
      assert.deepEqual(
        (await meta.readQueue('c1', 10)).map((x) => x.data.toString()),
        ['m2', 'm3'],
      );

      // A session nobody owns (no owner row) refuses a fenced write too.
      await assert.rejects(meta.putSession(rec('nobody', 'x'), 1), fenced);
      assert.equal(await meta.getSession('nobody'), null);

      // Without an epoch (a single broker) writes are not checked.
      await meta.putSession(rec('nobody', 'x'));
      assert.equal((await meta.getSession('nobody'))?.state, 'x');

      await meta.deleteSession('c1', b.epoch);
      assert.equal(await meta.getSession('c1'), null);
      assert.deepEqual(await meta.readQueue('c1', 10), []);
    } finally {
      await meta.close();
      await store.close();
    }
  });
});
