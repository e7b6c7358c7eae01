/**
 * Publishers share the PostgreSQL queue store fairly (issue 24), through AMQP: a broker on a PostgreSQL metastore
 * (whose queue store is PostgreSQL's) takes one amqplib connection flooding a durable queue with persistent
 * messages without confirms while another connection publishes with confirms to another durable queue, one at a
 * time. Every confirm arrives and every message of both is stored: counted by the broker (queue.declare passive)
 * and in PostgreSQL's own tables. The order-based proof of fairness is the store's test
 * (test/storage/queues/postgres-queue-store.test.ts); here the figures are printed.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { connectAmqp, startAmqpBroker } from './amqp-helpers.js';
import { argValue, sharedArgs, sharedServices } from './storage-configs.js';
import type { FlowmqProcess } from './harness.js';

describe('e2e: AMQP publishers share the PostgreSQL queue store', () => {
  const services = sharedServices();
  let broker: FlowmqProcess | undefined;
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('a flooder without confirms and a confirming publisher: every confirm arrives, every message is stored', async () => {
    const svc = await services();
    const db = await svc.pg.createDatabase();
    const args = sharedArgs(svc, db, `fair-${process.pid}`);
    broker = await startAmqpBroker(args);
    const info = await broker.api<{ storage: { metastore: string; queueStoreFigures?: object } }>('GET', '/api/v1/broker');
    assert.equal(info.storage.metastore, 'postgres');
    assert.ok(info.storage.queueStoreFigures !== undefined && 'statements' in info.storage.queueStoreFigures, 'the PostgreSQL queue store');

    const floodConn = await connectAmqp(broker);
    const lightConn = await connectAmqp(broker);
    const fch = await floodConn.createChannel();
    await fch.assertQueue('flood', { durable: true });
    const lch = await lightConn.createConfirmChannel();
    await lch.assertQueue('light', { durable: true });

    const flood = 20_000;
    const light = 200;
    // The flood: persistent 1 KiB messages, no confirms, handed to the socket all at once.
    for (let i = 0; i < flood; i++) {
      const body = Buffer.alloc(1024, 0x66);
      body.write(`f${i}`);
      fch.sendToQueue('flood', body, { persistent: true });
    }
    // The other client: one publish at a time, each once the previous one is confirmed.
    const pool = new pg.Pool({ connectionString: argValue(args, '--metastore') ?? db, max: 1 });
    const stored = async (): Promise<Record<string, number>> => {
      const r = await pool.query<{ queue: string; n: string }>(
        "SELECT queue, count(*) AS n FROM queue_messages WHERE queue LIKE '%flood' OR queue LIKE '%light' GROUP BY queue",
      );
      const out: Record<string, number> = {};
      for (const row of r.rows) out[row.queue.endsWith('flood') ? 'flood' : 'light'] = Number(row.n);
      return out;
    };
    const lat: number[] = [];
    for (let i = 0; i < light; i++) {
      const t0 = performance.now();
      await new Promise<void>((resolve, reject) =>
        lch.sendToQueue('light', Buffer.from(`l${i}`), { persistent: true }, (err: unknown) => (err ? reject(err) : resolve())),
      );
      lat.push(performance.now() - t0);
    }
    const atLightDone = await stored();
    lat.sort((a, b) => a - b);

    // The flood is stored whole once a confirmed marker after it, in the same queue, is confirmed (a queue's
    // appends commit in order; the marker's channel is read after the flood's frames on that connection).
    const mch = await floodConn.createConfirmChannel();
    await new Promise<void>((resolve, reject) =>
      mch.sendToQueue('flood', Buffer.from('marker'), { persistent: true }, (err: unknown) => (err ? reject(err) : resolve())),
    );
    const total = await stored();
    const figures = (await broker.api<{ storage: { queueStoreFigures: Record<string, number> } }>('GET', '/api/v1/broker')).storage.queueStoreFigures;
    console.log(
      `confirms ${lat.length}/${light}, latency p50 ${lat[light >> 1]!.toFixed(1)} ms, p99 ${lat[Math.floor(light * 0.99)]!.toFixed(1)} ms; ` +
        `flood messages stored when the confirming client was done: ${atLightDone.flood ?? 0} of ${flood}; stored at the end: ${JSON.stringify(total)}; ` +
        `store: ${figures.commits} groups, ${figures.meanGroupCalls.toFixed(1)} calls each`,
    );
    assert.equal(lat.length, light, 'every confirm arrived');
    assert.deepEqual(total, { flood: flood + 1, light }, 'every message stored in PostgreSQL');
    assert.equal((await lch.checkQueue('light')).messageCount, light);
    assert.equal((await mch.checkQueue('flood')).messageCount, flood + 1);
    await pool.end();
    await floodConn.close();
    await lightConn.close();
  });
});
