/**
 * What the ConsumerStateStore conformance suite cannot see in the PostgreSQL metastore: puts of a stream's
 * consumers made while one is running are coalesced into one statement (the latest record per consumer), and a
 * write touches only the rows of the consumers it names.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { PostgresClusterStore } from '../../../src/cluster/pg-store.js';
import { isFlowError, type ConsumerRecord } from '../../../src/core/index.js';
import { PostgresMetastore } from '../../../src/storage/metastore/index.js';
import { startPostgres, type PostgresServer } from '../../helpers/postgres.js';

let server: PostgresServer;
before(async () => {
  server = await startPostgres();
});
after(async () => {
  await server.stop();
});

const rec = (stream: string, name: string, seq: number): ConsumerRecord => ({
  stream,
  name,
  config: '{"ack_policy":"explicit"}',
  createdAt: 1,
  deliveredSeq: seq,
  deliveredConsumerSeq: seq,
  ackFloor: Math.max(0, seq - 2),
  acked: seq >= 2 ? [seq] : [],
});

const figures = (m: PostgresMetastore) => m.figures() as { consumerPuts: number; consumerWrites: number };

describe('PostgresMetastore: JetStream consumer state', () => {
  it('coalesces the puts made while a write of the stream runs: one statement, the latest record of each consumer', async () => {
    const m = await PostgresMetastore.open({ url: await server.createDatabase(), poolSize: 4 });
    const ops: Array<Promise<void>> = [];
    // Issued in one go, none awaited: the first put of each stream goes out at once, the others queue behind it
    // and become one batch per stream.
    for (let i = 1; i <= 100; i++) {
      for (const name of ['a', 'b', 'c']) ops.push(m.putConsumer(rec('s', name, i)));
      ops.push(m.putConsumer(rec('t', 'x', i)));
    }
    await Promise.all(ops);
    assert.deepEqual(figures(m), { ...figures(m), consumerPuts: 400, consumerWrites: 4 });
    assert.deepEqual(await m.listConsumers(), [rec('s', 'a', 100), rec('s', 'b', 100), rec('s', 'c', 100), rec('t', 'x', 100)]);

    // Another call on the stream closes the batch: puts after it are not merged into puts before it.
    const before = [m.putConsumer(rec('s', 'a', 200)), m.putConsumer(rec('s', 'a', 201))];
    const read = m.getConsumer('s', 'a');
    const del = m.deleteConsumer('s', 'a');
    const afterDel = m.putConsumer(rec('s', 'a', 300));
    await Promise.all([...before, del, afterDel]);
    assert.equal((await read)?.deliveredSeq, 201);
    assert.equal((await m.getConsumer('s', 'a'))?.deliveredSeq, 300);
    await m.close();
  });

  it('a write rewrites the rows of the consumers it names and no others', async () => {
    const url = await server.createDatabase();
    const m = await PostgresMetastore.open({ url });
    for (const name of ['a', 'b']) await m.putConsumer(rec('s', name, 1));
    await m.putConsumer(rec('t', 'a', 1));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    // xmin: the transaction that wrote the row's current version.
    const versions = async () =>
      Object.fromEntries(
        (await client.query<{ k: string; x: string }>("SELECT stream || '/' || name AS k, xmin::text AS x FROM jetstream_consumers")).rows.map((r) => [
          r.k,
          r.x,
        ]),
      );
    const was = await versions();
    await m.putConsumer(rec('s', 'a', 2));
    const now = await versions();
    assert.notEqual(now['s/a'], was['s/a']);
    assert.deepEqual({ ...now, 's/a': was['s/a'] }, was, 'the other consumers, of the same stream or not, were not rewritten');
    await client.end();
    await m.close();
  });
});

describe('PostgresMetastore: JetStream consumer state fenced by the owner epoch (cluster mode)', () => {
  const info = (id: number) => ({ id, incarnation: `inc-${id}`, version: 't', startedAt: Date.now(), endpoints: {} });
  const fenced = (e: unknown) => isFlowError(e, 'FENCED');

  it('refuses puts and deletes of a consumer under an epoch its owner row no longer holds; other consumers of a batch are written', async () => {
    const url = await server.createDatabase();
    const cs = await PostgresClusterStore.open({ url });
    const m = await PostgresMetastore.open({ url });
    await cs.register(info(1), 60_000);
    await cs.register(info(2), 60_000);
    const a1 = await cs.claim('consumer', 's/a', 1, 'inc-1');
    const b1 = await cs.claim('consumer', 's/b', 1, 'inc-1');
    assert.equal(a1.epoch, 1);
    await m.putConsumer(rec('s', 'a', 1), a1.epoch);
    await m.putConsumer(rec('s', 'b', 1), b1.epoch);
    // Broker 2 takes s/a over (a handover the holder agreed to): broker 1's epoch for it is stale from now on.
    const a2 = await cs.claim('consumer', 's/a', 2, 'inc-2', { force: true });
    assert.equal(a2.epoch, 2);
    await assert.rejects(m.putConsumer(rec('s', 'a', 5), a1.epoch), fenced);
    assert.equal((await m.getConsumer('s', 'a'))?.deliveredSeq, 1, 'the refused put wrote nothing');
    // A batch (puts made while another write of the stream runs) holding a fenced put and a valid one: the valid
    // one is written, the fenced one refused.
    const running = m.putConsumer(rec('s', 'b', 2), b1.epoch);
    const stale = m.putConsumer(rec('s', 'a', 6), a1.epoch);
    const fine = m.putConsumer(rec('s', 'b', 3), b1.epoch);
    await running;
    await assert.rejects(stale, fenced);
    await fine;
    assert.equal((await m.getConsumer('s', 'b'))?.deliveredSeq, 3);
    assert.equal((await m.getConsumer('s', 'a'))?.deliveredSeq, 1);
    // The new owner writes; the old one cannot delete.
    await m.putConsumer(rec('s', 'a', 7), a2.epoch);
    await assert.rejects(m.deleteConsumer('s', 'a', a1.epoch), fenced);
    assert.equal((await m.getConsumer('s', 'a'))?.deliveredSeq, 7);
    await m.deleteConsumer('s', 'a', a2.epoch);
    assert.equal(await m.getConsumer('s', 'a'), null);
    // A consumer without an owner row at all (forgotten: deleted elsewhere) is fenced too.
    await assert.rejects(m.putConsumer(rec('s', 'z', 1), 1), fenced);
    assert.equal(await m.getConsumer('s', 'z'), null);
    // Unfenced writes (a single broker) are unchanged.
    await m.putConsumer(rec('s', 'z', 1));
    assert.equal((await m.getConsumer('s', 'z'))?.deliveredSeq, 1);
    await m.close();
    await cs.close();
  });
});
