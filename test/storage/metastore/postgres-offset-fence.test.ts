/**
 * Consumer-group offset commits fenced by the group's owner epoch (cluster mode) in the PostgreSQL metastore: with
 * the cluster's owner rows in the same database (PostgresClusterStore), a commit naming the epoch its coordinator
 * owns the group under lands; once another broker claimed the group (epoch bumped) the same commit is refused with
 * FENCED and changes nothing, a batch all or none; commits without a fence (a single broker) are unchanged.
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
const at = (stream: string, partition: number, offset: number) => ({ stream, partition, offset, metadata: null });

describe('PostgresMetastore offset commits fenced by the group epoch', () => {
  it('accepts the owner epoch, refuses a stale one with nothing written, and leaves unfenced commits alone', async () => {
    const url = await server.createDatabase();
    const store = await PostgresClusterStore.open({ url });
    const meta = await PostgresMetastore.open({ url });
    try {
      await meta.createStream({ name: 's', partitions: 2, bindings: [], retentionMs: null, createdAt: 1 });
      await store.register(info(1, 'a'), 60_000);
      await store.register(info(2, 'b'), 60_000);
      const a = await store.claim('group', 'g', 1, 'a');
      assert.equal(a.owner, 1);

      await meta.commitOffsets('g', [at('s', 0, 5), at('s', 1, 7)], a.epoch);
      assert.deepEqual(
        (await meta.listOffsets('g')).map((o) => o.offset),
        [5, 7],
      );

      // Broker 2 takes the group (its coordinator moved): epoch bumped.
      const b = await store.claim('group', 'g', 2, 'b', { force: true });
      assert.ok(b.epoch > a.epoch);
      await assert.rejects(meta.commitOffsets('g', [at('s', 0, 9), at('s', 1, 9)], a.epoch), fenced);
      assert.deepEqual(
        (await meta.listOffsets('g')).map((o) => o.offset),
        [5, 7],
        'the stale commit changed nothing',
      );
      // A group nobody ever owned is fenced too (no row holds the epoch).
      await assert.rejects(meta.commitOffsets('other', [at('s', 0, 1)], 1), fenced);
      assert.deepEqual(await meta.listOffsets('other'), []);

      await meta.commitOffsets('g', [at('s', 0, 6)], b.epoch);
      assert.equal((await meta.fetchOffset('g', 's', 0))?.offset, 6);
      // Without a fence (a single broker): as before.
      await meta.commitOffsets('g', [at('s', 1, 8)]);
      assert.deepEqual(
        (await meta.listOffsets('g')).map((o) => o.offset),
        [6, 8],
      );
    } finally {
      await meta.close();
      await store.close();
    }
  });
});
