// test-runner: apart (scripts/test.mjs): a cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Pages of non-durable queues in cluster mode (issue 28): two `bin/flowmq --cluster` brokers (PostgreSQL + s3rver)
 * with a window of 10 messages share one PostgreSQL queue store, and each pages its own non-durable queue under its
 * own broker id. Broker 1 is killed (SIGKILL) and started again with its id: its pages are swept, broker 2's are
 * untouched, and broker 2's queue still gives back every message in order.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import amqp from 'amqplib';
import pg from 'pg';
import { startCluster, type TestCluster } from '../helpers/cluster.js';

type Conn = Awaited<ReturnType<typeof amqp.connect>>;

describe('cluster: pages of non-durable queues carry their broker id', { timeout: 180_000 }, () => {
  let c: TestCluster;
  let pool: pg.Pool;
  const conns: Conn[] = [];
  const open = async (id: number): Promise<Conn> => {
    const conn = await amqp.connect(c.broker(id).amqpUrl);
    conn.on('error', () => undefined);
    conns.push(conn);
    return conn;
  };
  /** Page rows in the shared queue store, per broker id ("amq.page.<id>."). */
  const pages = async (): Promise<Record<string, number>> => {
    const r = await pool.query<{ b: string; n: string }>(
      "SELECT split_part(queue, '.', 3) AS b, count(*) AS n FROM queue_messages WHERE queue LIKE 'amq.page.%' GROUP BY 1 ORDER BY 1",
    );
    return Object.fromEntries(r.rows.map((row) => [row.b, Number(row.n)]));
  };

  before(async () => {
    c = await startCluster({ brokers: 2, leaseMs: 1500, haproxy: false, args: ['--queue-window-messages', '10'] });
    pool = new pg.Pool({ connectionString: c.dbUrl, max: 1 });
  });
  after(async () => {
    for (const conn of conns) await conn.close().catch(() => undefined);
    await pool?.end();
    await c?.close();
  });

  it("each broker pages under its own id; a restarted broker sweeps its pages only, the other's queue keeps all it holds", async () => {
    const chs = [];
    for (const id of [1, 2]) {
      const ch = await (await open(id)).createConfirmChannel();
      await ch.assertQueue(`np-${id}`, { durable: false });
      for (let i = 0; i < 50; i++) ch.sendToQueue(`np-${id}`, Buffer.from(`b${id}-m${i}`), { persistent: true });
      await ch.waitForConfirms();
      chs.push(ch);
    }
    // Pages are written after the confirms (no confirm waits for one): wait for them.
    const end = Date.now() + 20_000;
    while (JSON.stringify(await pages()) !== JSON.stringify({ 1: 40, 2: 40 }) && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(await pages(), { 1: 40, 2: 40 });

    await c.kill(1);
    await c.waitBrokerDead(1, 20_000);
    await c.startBroker({ id: 1 });
    assert.deepEqual(await pages(), { 2: 40 }, "broker 1's pages are swept at its start, broker 2's stay");
    assert.match(c.logs(1), /pages of non-durable queues of an earlier run dropped/);

    const ch = await (await open(2)).createChannel();
    const got: string[] = [];
    await new Promise<void>((resolve) => {
      void ch.consume('np-2', (m) => {
        if (!m) return;
        got.push(m.content.toString());
        ch.ack(m);
        if (got.length === 50) resolve();
      });
    });
    assert.deepEqual(
      got,
      Array.from({ length: 50 }, (_, i) => `b2-m${i}`),
    );
    const again = await (await open(1)).createChannel();
    again.on('error', () => undefined);
    await assert.rejects(again.checkQueue('np-1'), /404/, 'a non-durable queue does not survive its broker');
  });
});
