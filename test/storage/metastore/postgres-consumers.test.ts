/**
 * What the ConsumerStateStore conformance suite cannot see in the PostgreSQL metastore: puts of a stream's
 * consumers made while one is running are coalesced into one statement (the latest record per consumer), and a
 * write touches only the rows of the consumers it names.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import type { ConsumerRecord } from '../../../src/core/index.js';
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
        (await client.query<{ k: string; x: string }>("SELECT stream || '/' || name AS k, xmin::text AS x FROM jetstream_consumers")).rows.map((r) => [r.k, r.x]),
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
