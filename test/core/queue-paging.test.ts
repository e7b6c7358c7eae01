/**
 * Non-durable queues page past their memory window (issue 28): the messages beyond it go to the page store under
 * a key of the runtime's own (QueuePages), come back in order, and nothing else of the queue is written there.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  MemoryQueueStore,
  makeMessage,
  queueFactory,
  type QueueConsumer,
  type QueueDef,
  type QueueHooks,
  type QueueRuntime,
  type QueueStore,
} from '../../src/core/index.js';

const PREFIX = 'amq.page.7.';

function def(name: string, over: Partial<QueueDef> = {}): QueueDef {
  return { name, durable: false, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {}, createdAt: 0, ...over };
}

const hooks: QueueHooks = { deadLetter: () => null, expire: () => undefined };
const msg = (text: string, persistent = true) => makeMessage('q/t', Buffer.from(text), { persistent });

/** The store's queues (keys) and their message counts. */
async function keys(store: MemoryQueueStore): Promise<Map<string, number>> {
  const inner = (store as unknown as { queues: Map<string, unknown> }).queues;
  const out = new Map<string, number>();
  for (const k of inner.keys()) out.set(k, (await store.openQueue(k)).count);
  return out;
}

function window(q: QueueRuntime): { inMemory: number; inMemoryBytes: number; beyond: number } {
  return (q as unknown as { windowStats(): { inMemory: number; inMemoryBytes: number; beyond: number } }).windowStats();
}

/** Counts the store calls made (appends and everything else), passing them on. */
function counting(store: QueueStore): { store: QueueStore; calls: Record<string, number> } {
  const calls: Record<string, number> = {};
  const proxy = new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        calls[String(prop)] = (calls[String(prop)] ?? 0) + 1;
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store: proxy, calls };
}

describe('non-durable queues page past their window', () => {
  it('a queue filled far past its window keeps the window in memory, the rest under its page key, and delivers everything in order', async () => {
    const store = new MemoryQueueStore();
    const factory = queueFactory({ maxMessages: 100, maxBytes: 1 << 20, readBatch: 40 }, { store, prefix: PREFIX });
    const q = factory(def('nd'), null, hooks);
    await q.open();
    const n = 20_000;
    const written: Array<Promise<void>> = [];
    for (let i = 0; i < n; i++) {
      // Persistent and transient alike: a non-durable queue confirms at once, pages are no promise.
      const r = q.enqueue(msg(String(i), i % 2 === 0));
      assert.equal(r.durable, null);
      if (r.written) written.push(r.written);
    }
    assert.equal(written.length, n - 100, 'every message past the window is a page write, counted for flow control');
    await Promise.all(written);
    assert.deepEqual(window(q), { inMemory: 100, inMemoryBytes: 190, beyond: n - 100 });
    assert.deepEqual(q.stats(), { ready: n, unacked: 0, bytes: window(q).inMemoryBytes + bytesOf(100, n), consumers: 0 });
    assert.deepEqual([...(await keys(store))], [[`${PREFIX}1.nd`, n - 100]]);

    // A consumer with a prefetch of 30 that requeues every 7th delivery once: FIFO with requeued ones first.
    let expected = 0;
    const got: number[] = [];
    const pending: number[] = [];
    let maxInMemory = 0;
    const requeued = new Set<number>();
    const c: QueueConsumer = {
      tag: 'c',
      owner: 'ch',
      noAck: false,
      hasCredit: () => pending.length < 30,
      deliver: (d) => {
        got.push(Number(d.msg.payload.toString()));
        pending.push(d.id);
      },
    };
    q.consume(c);
    const deadline = Date.now() + 60_000; // safety net
    while (expected < n && Date.now() < deadline) {
      const ids = pending.splice(0, pending.length);
      for (const id of ids) {
        if (id % 7 === 0 && !requeued.has(id)) {
          requeued.add(id);
          await q.nack(id, true);
        } else {
          await q.ack(id);
          expected++;
        }
      }
      maxInMemory = Math.max(maxInMemory, window(q).inMemory);
      q.resume(c);
      if (pending.length === 0) await new Promise((r) => setImmediate(r));
    }
    assert.equal(expected, n);
    assert.ok(maxInMemory <= 100 + 30, `window peaked at ${maxInMemory}`);
    // First deliveries come in order; each requeued message comes again before anything newer than it.
    const first = got.filter((v, i) => got.indexOf(v) === i);
    assert.deepEqual(
      first,
      Array.from({ length: n }, (_, i) => i),
    );
    assert.equal(got.length, n + requeued.size);
    assert.deepEqual(q.stats(), { ready: 0, unacked: 0, bytes: 0, consumers: 1 });
    assert.equal((await store.openQueue(`${PREFIX}1.nd`)).count, 0, 'acked pages are removed');
    await q.destroy();
    assert.deepEqual([...(await keys(store))], [], 'destroy drops the page key');
  });

  it('a queue that never passes its window touches no store, and destroy leaves the store alone', async () => {
    const { store, calls } = counting(new MemoryQueueStore());
    const factory = queueFactory({ maxMessages: 10, maxBytes: 1 << 20, readBatch: 5 }, { store, prefix: PREFIX });
    const q = factory(def('small', { exclusiveOwner: 'conn-1', durable: true }), null, hooks);
    await q.open();
    for (let i = 0; i < 10; i++) assert.equal(q.enqueue(msg(String(i))).written, undefined);
    const d = await q.get('ch', false);
    await q.ack(d!.id);
    assert.equal(await q.purge(), 9);
    await q.destroy();
    assert.deepEqual(calls, {});
  });

  it('two runtimes of one name page under different keys; dropQueues(prefix) sweeps pages only', async () => {
    const store = new MemoryQueueStore();
    await store.append('durable', [{ id: 1, data: Buffer.from('d') }]);
    await store.append('amq.page.70.1.other-broker', [{ id: 1, data: Buffer.from('o') }]);
    const factory = queueFactory({ maxMessages: 2, maxBytes: 1 << 20, readBatch: 2 }, { store, prefix: PREFIX });
    const a = factory(def('same'), null, hooks);
    const b = factory(def('same'), null, hooks);
    await a.open();
    await b.open();
    const writes: Array<Promise<void> | undefined> = [];
    for (const t of ['a1', 'a2', 'a3', 'a4']) writes.push(a.enqueue(msg(t)).written);
    for (const t of ['b1', 'b2', 'b3']) writes.push(b.enqueue(msg(t)).written);
    await Promise.all(writes);
    assert.deepEqual([...(await keys(store))].sort(), [
      [`${PREFIX}1.same`, 2],
      [`${PREFIX}2.same`, 1],
      ['amq.page.70.1.other-broker', 1],
      ['durable', 1],
    ]);
    const texts = async (q: QueueRuntime) => {
      const out: string[] = [];
      for (let d = await q.get('ch', true); d; d = await q.get('ch', true)) out.push(d.msg.payload.toString());
      return out;
    };
    assert.deepEqual(await texts(b), ['b1', 'b2', 'b3']);
    assert.equal(await store.dropQueues(PREFIX), 2);
    assert.deepEqual([...(await keys(store))].sort(), [
      ['amq.page.70.1.other-broker', 1],
      ['durable', 1],
    ]);
  });

  it('a durable queue with a store is not paged: its messages stay under its own name', async () => {
    const store = new MemoryQueueStore();
    const factory = queueFactory({ maxMessages: 1, maxBytes: 1 << 20, readBatch: 1 }, { store, prefix: PREFIX });
    const q = factory(def('dur', { durable: true }), store, hooks);
    await q.open();
    await q.enqueue(msg('x')).durable;
    await q.enqueue(msg('y')).durable;
    assert.deepEqual([...(await keys(store))], [['dur', 2]]);
  });

  it('without a page store a non-durable queue holds everything in memory', async () => {
    const factory = queueFactory({ maxMessages: 2, maxBytes: 1 << 20, readBatch: 2 });
    const q = factory(def('mem'), new MemoryQueueStore(), hooks);
    await q.open();
    for (const t of ['a', 'b', 'c', 'd']) assert.equal(q.enqueue(msg(t)).written, undefined);
    assert.deepEqual(window(q), { inMemory: 4, inMemoryBytes: 4, beyond: 0 });
  });
});

/** Payload bytes of the messages String(from) .. String(to - 1). */
function bytesOf(from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i++) n += String(i).length;
  return n;
}
