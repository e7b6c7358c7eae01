/**
 * What fences the Kafka transaction state a broker writes in cluster mode, against a real PostgreSQL (the fences are
 * SQL checks of the owner rows, flowmq_owner_check) with two brokers in one process (cluster-helpers.ts):
 * - a partition's aborted list (txn-aborted) is written under the partition's owner epoch: a deposed leader's
 *   write is refused and it lets the partition go;
 * - transactional.id.expiration.ms in cluster mode: the id's coordinator (its owner) removes an idle id from the
 *   metastore and from ListTransactions; a coordinator whose id was taken over deletes nothing and lets it go.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PostgresClusterStore } from '../../../src/cluster/pg-store.js';
import { AddPartitionsToTxnApi, EndTxnApi, InitProducerIdApi, KafkaErrorCode as E, ListTransactionsApi } from '../../../src/protocols/kafka/codec/index.js';
import { PostgresMetastore } from '../../../src/storage/metastore/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { startPostgres, type PostgresServer } from '../../helpers/postgres.js';
import { logger, ownerOf, settle, startBroker, type Broker } from './cluster-helpers.js';
import { RawClient } from './helpers.js';

/** Until `cond` holds (checked every 20 ms), else fails with `what`. */
async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  for (const end = Date.now() + timeoutMs; !(await cond()); await new Promise((r) => setTimeout(r, 20))) assert.ok(Date.now() < end, what);
}

describe('kafka in a cluster: transaction state fenced by owner epochs (PostgreSQL)', () => {
  let server: PostgresServer;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server.stop();
  });

  it("a deposed partition leader cannot write the partition's aborted list (fenced by the partition's owner epoch)", async () => {
    const url = await server.createDatabase();
    const clusterStore = await PostgresClusterStore.open({ url, poolSize: 2, logger });
    const metas: PostgresMetastore[] = [];
    const brokers: Broker[] = [];
    const clients: RawClient[] = [];
    try {
      for (const id of [1, 2]) {
        const meta = await PostgresMetastore.open({ url, poolSize: 2 });
        metas.push(meta);
        brokers.push(await startBroker(clusterStore, id, new MemoryStreams(), meta, [['afx', 1]]));
      }
      await settle(brokers, 1);
      const leader = ownerOf(brokers, 'afx/0');
      const other = brokers.find((b) => b !== leader)!;
      // A transactional id coordinated by the leader too: its abort markers are written there, not forwarded.
      let id = '';
      for (let i = 0; leader.cluster.placement('txn', (id = `afx-txn-${i}`)) !== leader.id; i++);
      const c = await RawClient.connect(leader.port);
      clients.push(c);
      const init = await c.call(InitProducerIdApi, 4, { transactionalId: id, transactionTimeoutMs: 60000, producerId: -1, producerEpoch: -1 });
      assert.equal(init.errorCode, E.NONE);
      const txn = { transactionalId: id, producerId: init.producerId, producerEpoch: init.producerEpoch };
      const add = async () => (await c.call(AddPartitionsToTxnApi, 3, { ...txn, topics: [{ name: 'afx', partitions: [0] }] })).results[0].results[0].errorCode;
      const abort = () => c.call(EndTxnApi, 3, { ...txn, committed: false });
      const stored = async () => ((await metas[0].getControl('txn-aborted', '0:afx'))?.data.aborted as unknown[] | undefined)?.length ?? 0;

      assert.equal(await add(), E.NONE);
      assert.equal((await abort()).errorCode, E.NONE);
      assert.equal(await stored(), 1, "the leader stores the abort in the partition's aborted list");

      // Another broker takes the partition while the leader still believes it leads it.
      const epoch = leader.cluster.owns('partition', 'afx/0')!;
      const row = await clusterStore.claim('partition', 'afx/0', other.id, other.cluster.incarnation, { force: true });
      assert.ok(row.epoch > epoch);
      assert.equal(leader.cluster.owns('partition', 'afx/0'), epoch, 'the deposed leader has not noticed');
      assert.equal(await add(), E.NONE);
      // Its abort marker's aborted-list write is refused; the EndTxn keeps looking for a leader (none is reachable here).
      void abort().catch(() => undefined);
      // Until the write was refused (the leader lets the partition go) or went through (the list grew).
      for (const until = Date.now() + 10_000; leader.cluster.owns('partition', 'afx/0') !== null && (await stored()) === 1;) {
        assert.ok(Date.now() < until, 'the marker was written and its aborted list write answered');
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.equal(await stored(), 1, 'the deposed leader did not overwrite the aborted list');
      assert.equal(leader.cluster.owns('partition', 'afx/0'), null, 'the fenced leader lets the partition go');
    } finally {
      for (const x of clients) x.close();
      // The listeners first: the pending EndTxn's marker stops looking for a leader once its coordinator is closed
      // (else the id's handover at the cluster's close would wait for it, up to three leases).
      for (const b of brokers) await b.listener.close();
      for (const b of brokers) await b.cluster.close();
      for (const m of metas) await m.close();
      await clusterStore.close();
    }
  });

  it('an idle transactional id expires at its coordinator (transactional.id.expiration.ms); a deposed coordinator deletes nothing', async () => {
    const url = await server.createDatabase();
    const clusterStore = await PostgresClusterStore.open({ url, poolSize: 2, logger });
    const metas: PostgresMetastore[] = [];
    const brokers: Broker[] = [];
    const clients: RawClient[] = [];
    try {
      for (const id of [1, 2]) {
        const meta = await PostgresMetastore.open({ url, poolSize: 2 });
        metas.push(meta);
        brokers.push(await startBroker(clusterStore, id, new MemoryStreams(), meta, [['efx', 1]], { transactionalIdExpirationMs: 1500 }));
      }
      await settle(brokers, 1);
      const coord = brokers[0];
      const other = brokers[1];
      // Two ids coordinated by broker 1.
      const ids: string[] = [];
      for (let i = 0; ids.length < 2; i++) if (coord.cluster.placement('txn', `efx-${i}`) === coord.id) ids.push(`efx-${i}`);
      const [expiring, taken] = ids;
      const c = await RawClient.connect(coord.port);
      clients.push(c);
      for (const id of ids) {
        const init = await c.call(InitProducerIdApi, 4, { transactionalId: id, transactionTimeoutMs: 60000, producerId: -1, producerEpoch: -1 });
        assert.equal(init.errorCode, E.NONE);
      }
      const listed = async () =>
        (await c.call(ListTransactionsApi, 1, { stateFilters: [], producerIdFilters: [], durationFilter: -1 })).transactionStates
          .map((s) => s.transactionalId)
          .sort();
      const stored = async (id: string) => (await metas[1].getControl('txn', id)) !== null;
      assert.deepEqual(await listed(), ids);
      assert.ok((await stored(expiring)) && (await stored(taken)));

      // `taken` moves to broker 2 while broker 1 still believes it coordinates it.
      const epoch = coord.cluster.owns('txn', taken)!;
      const row = await clusterStore.claim('txn', taken, other.id, other.cluster.incarnation, { force: true });
      assert.ok(row.epoch > epoch);

      // Both are idle past 1.5 s: broker 1 deletes `expiring`; its delete of `taken` is refused (FENCED): it lets it go.
      await until(async () => !(await stored(expiring)), 'the idle id is deleted from the metastore by its coordinator');
      await until(() => coord.cluster.owns('txn', taken) === null, 'the deposed coordinator lets the id go');
      assert.ok(await stored(taken), "the deposed coordinator did not delete the id's state");
      assert.deepEqual(await listed(), [], 'ListTransactions lists neither');
      assert.notEqual(coord.cluster.owns('txn', expiring), null, 'the expired id stays owned here (its next writes stay fenced)');
    } finally {
      for (const x of clients) x.close();
      for (const b of brokers) await b.listener.close();
      for (const b of brokers) await b.cluster.close();
      for (const m of metas) await m.close();
      await clusterStore.close();
    }
  });
});
