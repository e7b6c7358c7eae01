import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  MemoryQueueStore,
  createQueue,
  decodeStoredMessage,
  encodeStoredMessage,
  isFlowError,
  makeMessage,
  queueFactory,
  type DeathRecord,
  type Message,
  type QueueArguments,
  type QueueConsumer,
  type QueueDef,
  type QueueDelivery,
  type QueueHooks,
  type QueueRuntime,
  type QueueStore,
} from '../../src/core/index.js';

function def(name: string, args: QueueArguments = {}, over: Partial<QueueDef> = {}): QueueDef {
  return { name, durable: true, exclusiveOwner: null, autoDelete: false, arguments: args, rawArguments: {}, createdAt: 0, ...over };
}

class Hooks implements QueueHooks {
  readonly dead: Array<{ msg: Message; reason: DeathRecord['reason'] }> = [];
  readonly expired: string[] = [];
  private waiters: Array<() => void> = [];
  deadLetter(d: QueueDef, msg: Message, reason: DeathRecord['reason']): Promise<void> | null {
    if (d.arguments.deadLetterExchange === undefined) return null;
    this.dead.push({ msg, reason });
    this.wake();
    return Promise.resolve();
  }
  expire(d: QueueDef, why: 'auto-delete' | 'expires'): void {
    this.expired.push(`${d.name}:${why}`);
    this.wake();
  }
  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
  /** Waits (30 s safety net) until cond() holds, re-checked after every hook call. */
  async until(cond: () => boolean): Promise<void> {
    const deadline = Date.now() + 30_000;
    while (!cond()) {
      if (Date.now() > deadline) throw new Error('timed out waiting');
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 20).unref();
      });
    }
  }
}

class Consumer implements QueueConsumer {
  readonly got: QueueDelivery[] = [];
  credit: number;
  cancelReason: string | null = null;
  constructor(
    readonly tag: string,
    readonly owner: string,
    opts: { credit?: number; noAck?: boolean; priority?: number } = {},
  ) {
    this.credit = opts.credit ?? Infinity;
    this.noAck = opts.noAck ?? false;
    this.priority = opts.priority ?? 0;
  }
  readonly noAck: boolean;
  readonly priority: number;
  hasCredit(): boolean {
    return this.credit > 0;
  }
  deliver(d: QueueDelivery): void {
    this.credit--;
    this.got.push(d);
  }
  cancelled(reason: string): void {
    this.cancelReason = reason;
  }
  texts(): string[] {
    return this.got.map((d) => d.msg.payload.toString());
  }
}

const msg = (text: string, init: Partial<Message> = {}) => makeMessage('q/t', Buffer.from(text), init);

async function open(d: QueueDef, store: QueueStore | null = new MemoryQueueStore(), hooks = new Hooks(), factory = createQueue) {
  const q = factory(d, store, hooks);
  await q.open();
  return { q, store, hooks };
}

function put(q: QueueRuntime, ...texts: string[]): Promise<void>[] {
  return texts.map((t) => {
    const r = q.enqueue(msg(t));
    assert.equal(r.rejected, false);
    return r.durable ?? Promise.resolve();
  });
}

describe('queue runtime', () => {
  it('stores persistent messages before durable resolves and keeps transient ones in memory', async () => {
    const store = new MemoryQueueStore();
    const { q } = await open(def('q1'), store);
    const p = q.enqueue(msg('a'));
    assert.ok(p.durable, 'a persistent message in a durable queue has something to wait for');
    await p.durable;
    const t = q.enqueue(msg('b', { persistent: false }));
    assert.equal(t.durable, null);
    const rows = await store.read('q1', 0, 10);
    assert.deepEqual(
      rows.map((r) => decodeStoredMessage(r.data).payload.toString()),
      ['a'],
    );
    assert.deepEqual(q.stats(), { ready: 2, unacked: 0, bytes: 2, consumers: 0 });
    // A non-durable queue stores nothing even when given a store.
    const nd = await open(def('q2', {}, { durable: false }), store);
    assert.equal(nd.q.enqueue(msg('x')).durable, null);
    assert.deepEqual(await store.read('q2', 0, 10), []);
  });

  it('competing consumers share round-robin; acks remove from the store', async () => {
    const { q, store } = await open(def('rr'));
    const a = new Consumer('a', 'ch1');
    const b = new Consumer('b', 'ch2');
    const c = new Consumer('c', 'ch3');
    q.consume(a);
    q.consume(b);
    q.consume(c);
    await Promise.all(put(q, '1', '2', '3', '4', '5', '6'));
    assert.deepEqual(a.texts(), ['1', '4']);
    assert.deepEqual(b.texts(), ['2', '5']);
    assert.deepEqual(c.texts(), ['3', '6']);
    assert.deepEqual(q.stats(), { ready: 0, unacked: 6, bytes: 0, consumers: 3 });
    await Promise.all([...a.got, ...b.got].map((d) => q.ack(d.id)));
    assert.equal(q.stats().unacked, 2);
    const left = await (store as QueueStore).read('rr', 0, 10);
    assert.deepEqual(
      left.map((r) => r.id),
      c.got.map((d) => d.id),
    );
    await assert.rejects(q.ack(a.got[0].id), (e: unknown) => isFlowError(e, 'PRECONDITION_FAILED'));
  });

  it('respects credit and resumes; higher consumer priority first', async () => {
    const { q } = await open(def('cr'));
    const low = new Consumer('low', 'ch1', { credit: 10 });
    const high = new Consumer('high', 'ch2', { credit: 2, priority: 5 });
    q.consume(low);
    q.consume(high);
    put(q, '1', '2', '3');
    assert.deepEqual(high.texts(), ['1', '2']);
    assert.deepEqual(low.texts(), ['3']);
    low.credit = 0;
    put(q, '4');
    assert.equal(q.stats().ready, 1);
    high.credit = 1;
    q.resume(high);
    assert.deepEqual(high.texts(), ['1', '2', '4']);
  });

  it('nack with requeue puts the message back ahead of newer ones, redelivered', async () => {
    const { q } = await open(def('rq'));
    const a = new Consumer('a', 'ch1', { credit: 1 });
    q.consume(a);
    put(q, '1', '2', '3');
    assert.deepEqual(a.texts(), ['1']);
    assert.equal(a.got[0].redelivered, false);
    assert.equal(a.got[0].deliveryCount, 1);
    a.credit = 1;
    await q.nack(a.got[0].id, true);
    assert.deepEqual(a.texts(), ['1', '1']);
    assert.equal(a.got[1].redelivered, true);
    assert.equal(a.got[1].deliveryCount, 2);
    a.credit = 5;
    await q.ack(a.got[1].id);
    q.resume(a);
    assert.deepEqual(a.texts(), ['1', '1', '2', '3']);
  });

  it('nack without requeue drops, or dead-letters with reason rejected', async () => {
    const { q, hooks } = await open(def('dl', { deadLetterExchange: 'dlx', deadLetterRoutingKey: 'dead' }));
    const a = new Consumer('a', 'ch1');
    q.consume(a);
    put(q, 'x');
    await q.nack(a.got[0].id, false);
    assert.equal(hooks.dead.length, 1);
    const dead = hooks.dead[0];
    assert.equal(dead.reason, 'rejected');
    assert.equal(dead.msg.routingKey, 'dead');
    assert.equal(dead.msg.deaths?.[0].queue, 'dl');
    assert.equal(dead.msg.deaths?.[0].reason, 'rejected');
    assert.deepEqual(dead.msg.deaths?.[0].routingKeys, ['q.t'], 'an MQTT message dies with its amq.topic key');
    assert.equal(dead.msg.deaths?.[0].count, 1);
    assert.deepEqual(q.stats(), { ready: 0, unacked: 0, bytes: 0, consumers: 1 });
    const plain = await open(def('nodl'));
    const b = new Consumer('b', 'ch1');
    plain.q.consume(b);
    put(plain.q, 'y');
    await plain.q.nack(b.got[0].id, false);
    assert.deepEqual(await (plain.store as QueueStore).read('nodl', 0, 10), []);
    assert.equal(plain.hooks.dead.length, 0);
  });

  it('get returns one message at a time with the remaining count, then null', async () => {
    const { q } = await open(def('g'));
    put(q, '1', '2');
    const d1 = await q.get('ch1', false);
    assert.equal(d1?.msg.payload.toString(), '1');
    assert.equal(d1?.remaining, 1);
    const d2 = await q.get('ch1', true);
    assert.equal(d2?.msg.payload.toString(), '2');
    assert.equal(d2?.remaining, 0);
    assert.equal(await q.get('ch1', false), null);
    assert.deepEqual(q.stats(), { ready: 0, unacked: 1, bytes: 0, consumers: 0 });
  });

  it('release requeues an owner’s unacked deliveries to other consumers, redelivered', async () => {
    const { q } = await open(def('rel'));
    const a = new Consumer('a', 'conn1/1');
    q.consume(a);
    put(q, '1', '2');
    q.cancel(a);
    const b = new Consumer('b', 'conn2/1');
    q.consume(b);
    assert.equal(b.got.length, 0, 'unacked deliveries of a cancelled consumer stay unacked');
    q.release('conn1/1');
    assert.deepEqual(b.texts(), ['1', '2']);
    assert.ok(b.got.every((d) => d.redelivered));
    await q.ack(b.got[0].id);
    await q.ack(b.got[1].id);
    assert.deepEqual(q.stats(), { ready: 0, unacked: 0, bytes: 0, consumers: 1 });
  });

  it('no-ack consumers remove messages on delivery', async () => {
    const { q, store } = await open(def('na'));
    await Promise.all(put(q, '1', '2'));
    const a = new Consumer('a', 'ch1', { noAck: true });
    q.consume(a);
    assert.deepEqual(a.texts(), ['1', '2']);
    assert.equal(q.stats().unacked, 0);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(await (store as QueueStore).read('na', 0, 10), []);
  });

  it('recovers stored messages as redelivered, with delivery counts, and keeps ids increasing', async () => {
    const store = new MemoryQueueStore();
    const first = await open(def('rec'), store);
    const a = new Consumer('a', 'ch1', { credit: 1 });
    first.q.consume(a);
    await Promise.all(put(first.q, '1', '2', '3'));
    await first.q.nack(a.got[0].id, true); // requeued: its delivery count is recorded
    first.q.close();
    const second = await open(def('rec'), store);
    assert.deepEqual(second.q.stats(), { ready: 3, unacked: 0, bytes: 3, consumers: 0 });
    const b = new Consumer('b', 'ch1');
    second.q.consume(b);
    assert.deepEqual(b.texts(), ['1', '2', '3']);
    assert.ok(b.got.every((d) => d.redelivered));
    assert.deepEqual(
      b.got.map((d) => d.deliveryCount),
      [2, 1, 1],
    );
    const r = second.q.enqueue(msg('4'));
    await r.durable;
    assert.ok(b.got[3].id > b.got[2].id);
    assert.equal(b.got[3].redelivered, false);
  });

  it('purge removes ready messages only; destroy cancels consumers and drops the storage', async () => {
    const { q, store } = await open(def('p'));
    const a = new Consumer('a', 'ch1', { credit: 1 });
    q.consume(a);
    await Promise.all(put(q, '1', '2', '3'));
    assert.equal(await q.purge(), 2);
    assert.deepEqual(q.stats(), { ready: 0, unacked: 1, bytes: 0, consumers: 1 });
    assert.deepEqual(
      (await (store as QueueStore).read('p', 0, 10)).map((r) => r.id),
      [a.got[0].id],
    );
    await q.nack(a.got[0].id, true);
    assert.equal(a.got.length, 1);
    assert.equal(await q.destroy(), 1);
    assert.equal(a.cancelReason, 'queue deleted');
    assert.deepEqual((await (store as QueueStore).openQueue('p')).count, 0);
  });
});

describe('MemoryQueueStore', () => {
  it('reads in id order from an id, skipping removed ones, and counts', async () => {
    const s = new MemoryQueueStore();
    assert.deepEqual(await s.openQueue('x'), { count: 0, bytes: 0, maxId: 0 });
    await s.append('x', [1, 2, 3, 4, 5].map((id) => ({ id, data: Buffer.from([id]) })));
    await s.remove('x', [2, 4, 9]);
    await s.setDeliveries('x', 3, 2);
    assert.deepEqual(
      (await s.read('x', 2, 10)).map((r) => [r.id, r.deliveries]),
      [
        [3, 2],
        [5, 0],
      ],
    );
    assert.deepEqual(await s.openQueue('x'), { count: 3, bytes: 3, maxId: 5 });
    await assert.rejects(s.append('x', [{ id: 5, data: Buffer.alloc(1) }]), (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT'));
    assert.equal(await s.purge('x'), 3);
    await s.dropQueue('x');
    assert.deepEqual(await s.openQueue('x'), { count: 0, bytes: 0, maxId: 0 });
  });
});

