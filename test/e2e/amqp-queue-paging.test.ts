// test-runner: alone (scripts/test.mjs): measures the broker process's memory while a client fills a queue, without a second file competing for the two cores
/**
 * Non-durable queues page past their memory window (issue 28), against a real bin/flowmq with a window of 1,000
 * messages: amqplib fills a non-durable queue with 470 MiB (120,000 messages of 4 KiB, persistent and transient
 * alternately) and the broker's memory (V8 heap plus Buffers, GET /api/v1/broker) stays far below what it holds;
 * every message then comes back in order. Then a second non-durable queue is left with pages in the queue store and
 * the broker is killed (SIGKILL): after the restart the queue is gone, and so are its pages (the store's own tables).
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { ConsumeMessage } from 'amqplib';
import { connectAmqp, startAmqpBroker } from './amqp-helpers.js';
import type { FlowmqProcess } from './harness.js';

interface BrokerInfo {
  process: { heapUsed: number; arrayBuffers: number; rss: number };
  storage: { queueStoreFigures: { bytesAppended: number } };
}

const MiB = 1024 * 1024;
const mib = (n: number) => `${(n / MiB).toFixed(1)} MiB`;

const body = (i: number, size: number): Buffer => {
  const b = Buffer.alloc(size, i & 0xff);
  b.writeUInt32BE(i, 0);
  return b;
};

/** The page keys and messages left in the embedded queue store (read beside the running broker: WAL mode). */
function pagesIn(dataDir: string): { queues: number; messages: number } {
  const db = new Database(join(dataDir, 'queues.db'), { readonly: true });
  try {
    const q = db.prepare("SELECT count(*) AS n FROM queues WHERE name LIKE 'amq.page.%'").get() as { n: number };
    const m = db.prepare("SELECT count(*) AS n FROM messages JOIN queues USING (qkey) WHERE name LIKE 'amq.page.%'").get() as { n: number };
    return { queues: q.n, messages: m.n };
  } finally {
    db.close();
  }
}

describe('e2e: non-durable queues page past their window', () => {
  let broker: FlowmqProcess | undefined;
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('a non-durable queue filled with 470 MiB keeps the broker within a fraction of it and gives every message back in order; a restart sweeps the pages', async () => {
    broker = await startAmqpBroker(['--queue-window-messages', '1000']);
    const b = broker;
    const conn = await connectAmqp(b);
    const ch = await conn.createConfirmChannel();
    await ch.assertQueue('paged', { durable: false });

    let peak = 0;
    let sampling = true;
    const sample = async (): Promise<void> => {
      while (sampling) {
        const info = await b.api<BrokerInfo>('GET', '/api/v1/broker');
        peak = Math.max(peak, info.process.heapUsed + info.process.arrayBuffers);
        await new Promise((r) => setTimeout(r, 200));
      }
    };
    const start = await b.api<BrokerInfo>('GET', '/api/v1/broker');
    const sampler = sample();

    const n = 120_000;
    const size = 4096;
    for (let i = 0; i < n; i++) {
      ch.sendToQueue('paged', body(i, size), { persistent: i % 2 === 0 });
      if (i % 500 === 499) await ch.waitForConfirms();
    }
    await ch.waitForConfirms();
    const held = await ch.checkQueue('paged');
    assert.equal(held.messageCount, n);
    const filled = await b.api<BrokerInfo>('GET', '/api/v1/broker');
    assert.ok(filled.storage.queueStoreFigures.bytesAppended >= (n - 1000) * size, 'the messages past the window were paged to the queue store');

    // Consume with a prefetch of 200: every message, in order, with its own body.
    const cch = await conn.createChannel();
    await cch.prefetch(200);
    let next = 0;
    let bad: string | null = null;
    const done = new Promise<void>((resolve) => {
      void cch.consume('paged', (m: ConsumeMessage | null) => {
        if (m === null) return;
        const i = m.content.readUInt32BE(0);
        if (i !== next || m.content.length !== size || m.content[size - 1] !== (i & 0xff)) bad ??= `message ${next}: got ${i} (${m.content.length} bytes)`;
        next++;
        cch.ack(m);
        if (next === n) resolve();
      });
    });
    await done;
    sampling = false;
    await sampler;
    console.log(
      `broker heap + buffers: ${mib(start.process.heapUsed + start.process.arrayBuffers)} at start, peak ${mib(peak)} while holding ${mib(n * size)}; ` +
        `rss ${mib(filled.process.rss)} when full; paged ${mib(filled.storage.queueStoreFigures.bytesAppended)}`,
    );
    assert.equal(bad, null);
    assert.equal(next, n);
    assert.ok(peak < (n * size) / 3, `peak ${mib(peak)} of a queue holding ${mib(n * size)}`);
    assert.equal((await cch.checkQueue('paged')).messageCount, 0);
    await cch.close();
    // Deleting the queue drops its page key.
    await ch.deleteQueue('paged');
    assert.deepEqual(pagesIn(b.dataDir), { queues: 0, messages: 0 });

    // Pages left behind by a killed broker: gone after the restart, with the queue itself.
    await ch.assertQueue('left', { durable: false });
    for (let i = 0; i < 3000; i++) ch.sendToQueue('left', body(i, 1024), { persistent: true });
    await ch.waitForConfirms();
    // Page writes are not waited for by confirms: wait until they are in the store.
    const deadline = Date.now() + 20_000;
    while (pagesIn(b.dataDir).messages < 2000 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(pagesIn(b.dataDir), { queues: 1, messages: 2000 });
    await conn.close().catch(() => undefined);
    await b.stop('SIGKILL');
    // Same data directory and options (restart's SIGTERM finds it gone already).
    broker = await b.restart();
    const swept = await broker.waitForLog((l) => String(l.msg).includes('pages of non-durable queues'));
    assert.equal(swept.swept, 1);
    assert.deepEqual(pagesIn(broker.dataDir), { queues: 0, messages: 0 });
    const again = await connectAmqp(broker);
    const ach = await again.createChannel();
    ach.on('error', () => undefined);
    await assert.rejects(ach.checkQueue('left'), /404/);
    await again.close().catch(() => undefined);
  });
});
