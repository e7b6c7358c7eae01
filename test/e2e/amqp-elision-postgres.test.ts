/**
 * Persistent messages acked before their write is due are not written, on the PostgreSQL queue store too (issue 28),
 * through AMQP: a broker on a PostgreSQL metastore (so a PostgreSQL queue store) takes two amqplib publishers with
 * confirms (persistent 1 KiB messages, 100 unconfirmed at most each) and a consumer that acks every delivery at once.
 *
 * 1. Every message is confirmed and consumed, and a share of them never reached PostgreSQL (queueStoreFigures.elided;
 *    queue_messages holds nothing at the end).
 * 2. The same load, then `kill -9` of the broker in the middle: after a restart on the same database every confirmed
 *    message was either delivered to the consumer before the kill or is still in the queue. A confirm still means
 *    durable: eliding never drops a message that was confirmed and not consumed.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import type { ChannelModel, ConsumeMessage } from 'amqplib';
import { connectAmqp, startAmqpBroker } from './amqp-helpers.js';
import { sharedArgs, sharedServices } from './storage-configs.js';
import type { FlowmqProcess } from './harness.js';

interface Figures {
  storage: { metastore: string; queueStoreFigures: { elided: number; calls: number; commits: number } };
}

const SIZE = 1024;
const body = (p: number, i: number): Buffer => {
  const b = Buffer.alloc(SIZE, 0x61 + p);
  b.write(`${p}:${i}:`);
  return b;
};
const key = (m: Buffer): string => m.subarray(0, m.indexOf(':', m.indexOf(':') + 1)).toString();

/** A publisher with confirms: at most `window` unconfirmed; `confirmed` gets each confirmed message's key. */
async function publisher(conn: ChannelModel, p: number, queue: string, until: () => boolean, confirmed: Set<string>, window = 100): Promise<number> {
  const ch = await conn.createConfirmChannel();
  ch.on('error', () => undefined);
  let inFlight = 0;
  let sent = 0;
  let wake: (() => void) | null = null;
  let failed = false;
  while (!until() && !failed) {
    // Woken by a confirm; the timer ends the wait of a publisher whose broker was killed (its confirms never come).
    while (inFlight >= window && !failed && !until()) await new Promise<void>((r) => ((wake = r), setTimeout(r, 100)));
    if (failed || until()) break;
    const k = `${p}:${sent}`;
    inFlight++;
    try {
      ch.sendToQueue(queue, body(p, sent), { persistent: true }, (err: unknown) => {
        inFlight--;
        if (err) failed = true;
        else confirmed.add(k);
        const w = wake;
        wake = null;
        w?.();
      });
    } catch {
      break;
    }
    sent++;
    // Let the socket and the confirms run now and then.
    if (sent % 20 === 0) await new Promise((r) => setImmediate(r));
  }
  return sent;
}

/** A consumer that acks every delivery at once; `got` gets each delivery's key. */
async function consumer(conn: ChannelModel, queue: string, got: Set<string>): Promise<void> {
  const ch = await conn.createChannel();
  ch.on('error', () => undefined);
  await ch.prefetch(200);
  await ch.consume(queue, (m: ConsumeMessage | null) => {
    if (m === null) return;
    got.add(key(m.content));
    ch.ack(m);
  });
}

describe('e2e: AMQP on the PostgreSQL queue store, messages acked before their write', () => {
  const services = sharedServices();
  let broker: FlowmqProcess | undefined;
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('confirming publishers and a fast consumer: every message confirmed and consumed, a share never written', async () => {
    const svc = await services();
    const db = await svc.pg.createDatabase();
    broker = await startAmqpBroker(sharedArgs(svc, db, `elide-${process.pid}`));
    const f0 = await broker.api<Figures>('GET', '/api/v1/broker');
    assert.equal(f0.storage.metastore, 'postgres');
    const conn = await connectAmqp(broker);
    const setup = await conn.createChannel();
    await setup.assertQueue('fast', { durable: true });
    const got = new Set<string>();
    await consumer(conn, 'fast', got);
    const pubConns = [await connectAmqp(broker), await connectAmqp(broker)];
    const confirmed = new Set<string>();
    const end = Date.now() + 5000;
    const sent = await Promise.all(pubConns.map((c, p) => publisher(c, p, 'fast', () => Date.now() > end, confirmed)));
    const total = sent[0]! + sent[1]!;
    const deadline = Date.now() + 60_000;
    while ((confirmed.size < total || got.size < total) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(confirmed.size, total, 'every message confirmed');
    assert.equal(got.size, total, 'every message consumed');
    const f1 = await broker.api<Figures>('GET', '/api/v1/broker');
    const elided = f1.storage.queueStoreFigures.elided - f0.storage.queueStoreFigures.elided;
    console.log(
      `${total} messages in 5 s, ${elided} never written (${((100 * elided) / total).toFixed(1)}%); ` +
        `${f1.storage.queueStoreFigures.commits - f0.storage.queueStoreFigures.commits} groups`,
    );
    assert.ok(elided > 0, 'some acked messages were never written');
    assert.ok(elided <= total);
    // What PostgreSQL holds: nothing of the queue (written ones were deleted, elided ones never inserted).
    // The last acks' deletes go in the store's next group after the consumer has seen the messages: wait for it.
    const pool = new pg.Pool({ connectionString: db, max: 1 });
    const count = async () => Number((await pool.query<{ n: string }>("SELECT count(*) AS n FROM queue_messages WHERE queue LIKE '%fast'")).rows[0]!.n);
    let rows = await count();
    for (const until = Date.now() + 15_000; rows > 0 && Date.now() < until; rows = await count()) await new Promise((r) => setTimeout(r, 100));
    await pool.end();
    assert.equal(rows, 0);
    for (const c of [conn, ...pubConns]) await c.close().catch(() => undefined);
  });

  it('killed (SIGKILL) under that load: after a restart every confirmed message was consumed before or is still queued', async () => {
    const svc = await services();
    const db = await svc.pg.createDatabase();
    await broker?.stop();
    broker?.cleanup();
    broker = await startAmqpBroker(sharedArgs(svc, db, `elide-kill-${process.pid}`));
    const b = broker;
    const conn = await connectAmqp(b);
    conn.on('error', () => undefined);
    const setup = await conn.createChannel();
    await setup.assertQueue('kill', { durable: true });
    const got = new Set<string>();
    await consumer(conn, 'kill', got);
    const pubConns = [await connectAmqp(b), await connectAmqp(b)];
    for (const c of pubConns) c.on('error', () => undefined);
    const confirmed = new Set<string>();
    let killed = false;
    const running = Promise.all(pubConns.map((c, p) => publisher(c, p, 'kill', () => killed, confirmed)));
    // Kill once the load has run a while (and elided some: the figure is read just before).
    const deadline = Date.now() + 20_000;
    while (confirmed.size < 3000 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const before = await b.api<Figures>('GET', '/api/v1/broker');
    await b.stop('SIGKILL');
    killed = true;
    await running;
    const confirmedAtKill = new Set(confirmed);
    const consumedAtKill = new Set(got);
    broker = await b.restart();
    const again = await connectAmqp(broker);
    const after = new Set<string>();
    const ch = await again.createChannel();
    const left = (await ch.checkQueue('kill')).messageCount;
    await consumer(again, 'kill', after);
    const until = Date.now() + 20_000;
    while (after.size < left && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    const lost = [...confirmedAtKill].filter((k) => !consumedAtKill.has(k) && !after.has(k));
    console.log(
      `at the kill: ${confirmedAtKill.size} confirmed, ${consumedAtKill.size} consumed, ${before.storage.queueStoreFigures.elided} elided; ` +
        `after the restart ${left} queued; confirmed and lost: ${lost.length}`,
    );
    assert.ok(before.storage.queueStoreFigures.elided > 0, 'the store was eliding when killed');
    assert.equal(after.size, left);
    assert.deepEqual(lost, []);
    await again.close().catch(() => undefined);
  });
});
