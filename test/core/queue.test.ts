import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  MemoryQueueStore,
  createQueue,
  decodeStoredMessage,
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
        setTimeout(r, 20); // ref: the queue's own timers are unref'd
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
    await s.append(
      'x',
      [1, 2, 3, 4, 5].map((id) => ({ id, data: Buffer.from([id]) })),
    );
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

describe('queue expiry, limits and dead letters', () => {
  it('x-message-ttl: expired messages are dead-lettered (expired) by the queue timer, without consumers', async () => {
    const { q, hooks, store } = await open(def('ttl', { messageTtlMs: 5, deadLetterExchange: 'dlx' }));
    await Promise.all(put(q, '1', '2'));
    await hooks.until(() => hooks.dead.length === 2);
    assert.deepEqual(
      hooks.dead.map((d) => [d.msg.payload.toString(), d.reason, d.msg.deaths?.[0].reason]),
      [
        ['1', 'expired', 'expired'],
        ['2', 'expired', 'expired'],
      ],
    );
    assert.deepEqual(q.stats(), { ready: 0, unacked: 0, bytes: 0, consumers: 0 });
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(await (store as QueueStore).read('ttl', 0, 10), [], 'the stored copies go once dead-lettered');
  });

  it('per-message expiry: an expired message is never delivered; it is dropped at the head with its original expiration recorded', async () => {
    const { q, hooks } = await open(def('pm', { deadLetterExchange: 'dlx' }));
    const now = Date.now();
    q.enqueue(msg('old', { expiresAt: now - 1, timestamp: now - 1001 }));
    q.enqueue(msg('live', { expiresAt: now + 3_600_000 }));
    const a = new Consumer('a', 'ch1');
    q.consume(a);
    assert.deepEqual(a.texts(), ['live']);
    assert.equal(hooks.dead.length, 1);
    assert.equal(hooks.dead[0].reason, 'expired');
    assert.equal(hooks.dead[0].msg.deaths?.[0].originalExpiration, '1000');
    assert.equal(hooks.dead[0].msg.expiresAt, undefined, 'the expiration does not follow the message into the dead-letter queue');
  });

  it('x-message-ttl 0: delivered to a consumer ready for it, else expired at once', async () => {
    const { q, hooks } = await open(def('ttl0', { messageTtlMs: 0, deadLetterExchange: 'dlx' }));
    const a = new Consumer('a', 'ch1', { credit: 1 });
    q.consume(a);
    put(q, 'now', 'later');
    assert.deepEqual(a.texts(), ['now']);
    await hooks.until(() => hooks.dead.length === 1);
    assert.deepEqual(
      hooks.dead.map((d) => [d.msg.payload.toString(), d.reason]),
      [['later', 'expired']],
    );
    a.credit = 1;
    q.resume(a);
    assert.deepEqual(a.texts(), ['now']);
  });

  it('x-expires asks the router to delete an unused queue; auto-delete once the last consumer went', async () => {
    const { hooks } = await open(def('exp', { expiresMs: 5 }));
    await hooks.until(() => hooks.expired.length === 1);
    assert.deepEqual(hooks.expired, ['exp:expires']);
    const ad = await open(def('ad', {}, { autoDelete: true }));
    const a = new Consumer('a', 'ch1');
    const b = new Consumer('b', 'ch1');
    ad.q.consume(a);
    ad.q.consume(b);
    ad.q.cancel(a);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(ad.hooks.expired, [], 'one consumer is left');
    ad.q.cancel(b);
    await ad.hooks.until(() => ad.hooks.expired.length === 1);
    assert.deepEqual(ad.hooks.expired, ['ad:auto-delete']);
  });

  it('x-max-length drop-head dead-letters the oldest (maxlen); max bytes too', async () => {
    const { q, hooks } = await open(def('ml', { maxLength: 2, deadLetterExchange: 'dlx' }));
    put(q, '1', '2', '3', '4');
    assert.deepEqual(
      hooks.dead.map((d) => [d.msg.payload.toString(), d.reason]),
      [
        ['1', 'maxlen'],
        ['2', 'maxlen'],
      ],
    );
    assert.equal(q.stats().ready, 2);
    const b = await open(def('mb', { maxLengthBytes: 5 }));
    put(b.q, 'aaa', 'bb', 'c');
    assert.deepEqual(b.q.stats(), { ready: 2, unacked: 0, bytes: 3, consumers: 0 });
    assert.equal((await b.q.get('ch', true))?.msg.payload.toString(), 'bb');
  });

  it('reject-publish refuses at the limit; reject-publish-dlx dead-letters the refused message', async () => {
    const { q, hooks } = await open(def('rp', { maxLength: 1, overflow: 'reject-publish', deadLetterExchange: 'dlx' }));
    assert.equal(q.enqueue(msg('1')).rejected, false);
    const r = q.enqueue(msg('2'));
    assert.equal(r.rejected, true);
    assert.equal(r.durable, null);
    assert.equal(hooks.dead.length, 0);
    assert.equal(q.stats().ready, 1);
    const d = await open(def('rpd', { maxLength: 1, overflow: 'reject-publish-dlx', deadLetterExchange: 'dlx' }));
    d.q.enqueue(msg('1'));
    assert.equal(d.q.enqueue(msg('2')).rejected, true);
    assert.deepEqual(
      d.hooks.dead.map((x) => [x.msg.payload.toString(), x.reason]),
      [['2', 'maxlen']],
    );
  });

  it('x-delivery-limit: a message returned more often than the limit is dead-lettered (delivery_limit)', async () => {
    const { q, hooks } = await open(def('lim', { deliveryLimit: 1, deadLetterExchange: 'dlx' }));
    const a = new Consumer('a', 'ch1');
    q.consume(a);
    put(q, 'x');
    await q.nack(a.got[0].id, true);
    assert.equal(a.got.length, 2);
    await q.nack(a.got[1].id, true);
    assert.equal(a.got.length, 2);
    assert.deepEqual(
      hooks.dead.map((d) => d.reason),
      ['delivery_limit'],
    );
    // The same through release.
    put(q, 'y');
    q.release('ch1');
    q.release('ch1');
    assert.equal(a.got.length, 4);
    q.release('ch1');
    assert.deepEqual(
      hooks.dead.map((d) => d.reason),
      ['delivery_limit', 'delivery_limit'],
    );
  });

  it('a message dead-lettered twice by the same queue and reason counts its death', async () => {
    const { q, hooks } = await open(def('twice', { deadLetterExchange: 'dlx' }));
    const a = new Consumer('a', 'ch1');
    q.consume(a);
    put(q, 'x');
    await q.nack(a.got[0].id, false);
    q.enqueue(hooks.dead[0].msg);
    await q.nack(a.got[1].id, false);
    assert.equal(hooks.dead[1].msg.deaths?.length, 1);
    assert.equal(hooks.dead[1].msg.deaths?.[0].count, 2);
  });
});

describe('queue consumers', () => {
  it('single active consumer: only the first receives; the next takes over when it goes', async () => {
    const { q } = await open(def('sac', { singleActiveConsumer: true }));
    const a = new Consumer('a', 'ch1');
    const b = new Consumer('b', 'ch2');
    q.consume(a);
    q.consume(b);
    put(q, '1', '2');
    assert.deepEqual(a.texts(), ['1', '2']);
    assert.deepEqual(b.texts(), []);
    q.cancel(a);
    q.release('ch1');
    put(q, '3');
    assert.deepEqual(b.texts(), ['1', '2', '3']);
  });

  it('an exclusive consumer locks the queue', async () => {
    const { q } = await open(def('ex'));
    const a = new Consumer('a', 'ch1');
    q.consume(a, { exclusive: true });
    assert.throws(
      () => q.consume(new Consumer('b', 'ch2')),
      (e: unknown) => isFlowError(e, 'RESOURCE_LOCKED'),
    );
    q.cancel(a);
    const b = new Consumer('b', 'ch2');
    q.consume(b);
    assert.throws(
      () => q.consume(new Consumer('c', 'ch2'), { exclusive: true }),
      (e: unknown) => isFlowError(e, 'RESOURCE_LOCKED'),
    );
    assert.throws(
      () => q.consume(new Consumer('b', 'ch3')),
      (e: unknown) => isFlowError(e, 'PRECONDITION_FAILED'),
      'tags are unique per queue',
    );
  });
});

describe('queue memory window', () => {
  it('keeps a bounded window of a long queue in memory and delivers everything in order', async () => {
    const store = new MemoryQueueStore();
    const factory = queueFactory({ maxMessages: 1000, maxBytes: 1 << 20, readBatch: 200 });
    const { q } = await open(def('long'), store, new Hooks(), factory);
    const n = 200_000;
    let last: Promise<void> | null = null;
    for (let i = 0; i < n; i++) last = q.enqueue(msg(String(i))).durable;
    await last;
    const w = (q as unknown as { windowStats(): { inMemory: number; inMemoryBytes: number; beyond: number } }).windowStats();
    assert.equal(w.inMemory, 1000, 'the window is full and no larger');
    assert.equal(w.beyond, n - 1000);
    assert.equal(q.stats().ready, n);
    // Consume with a prefetch of 50, checking order and the window bound throughout.
    let next = 0;
    let maxInMemory = 0;
    let failed: string | null = null;
    const pending: number[] = [];
    const c: QueueConsumer = {
      tag: 'c',
      owner: 'ch',
      noAck: false,
      hasCredit: () => pending.length < 50,
      deliver: (d) => {
        if (d.msg.payload.toString() !== String(next)) failed ??= `got ${d.msg.payload.toString()} expected ${next}`;
        next++;
        pending.push(d.id);
      },
    };
    q.consume(c);
    const deadline = Date.now() + 60_000; // safety net
    while (next < n && failed === null && Date.now() < deadline) {
      const ids = pending.splice(0, pending.length);
      await Promise.all(ids.map((id) => q.ack(id)));
      const ws = (q as unknown as { windowStats(): { inMemory: number } }).windowStats();
      maxInMemory = Math.max(maxInMemory, ws.inMemory);
      q.resume(c);
      // Refills of the window from the store are asynchronous: let them run.
      if (pending.length === 0) await new Promise((r) => setImmediate(r));
    }
    assert.equal(failed, null);
    assert.equal(next, n);
    assert.ok(maxInMemory <= 1000, `window peaked at ${maxInMemory}`);
    await Promise.all(pending.map((id) => q.ack(id)));
    assert.deepEqual(q.stats(), { ready: 0, unacked: 0, bytes: 0, consumers: 1 });
    assert.equal((await store.openQueue('long')).count, 0);
  });

  it('requeued messages come back ahead of those still in the store; recovery reads past the window', async () => {
    const store = new MemoryQueueStore();
    const factory = queueFactory({ maxMessages: 4, maxBytes: 1 << 20, readBatch: 2 });
    const { q } = await open(def('win'), store, new Hooks(), factory);
    await Promise.all(put(q, ...'abcdefghij'.split('')));
    const first = await q.get('ch', false);
    assert.equal(first?.msg.payload.toString(), 'a');
    const rest: string[] = [];
    for (let i = 0; i < 4; i++) rest.push((await q.get('ch', true))?.msg.payload.toString() ?? '-');
    await q.nack(first!.id, true);
    for (;;) {
      const d = await q.get('ch', true);
      if (!d) break;
      rest.push(d.msg.payload.toString() + (d.redelivered ? '*' : ''));
    }
    assert.deepEqual(rest, ['b', 'c', 'd', 'e', 'a*', 'f', 'g', 'h', 'i', 'j']);
    // Restart with a long stored queue: open reads only a window; get reads the rest.
    await Promise.all(put(q, ...'0123456789'.split('')));
    q.close();
    const again = await open(def('win'), store, new Hooks(), factory);
    assert.equal(again.q.stats().ready, 10);
    const got: string[] = [];
    for (let d = await again.q.get('ch', true); d; d = await again.q.get('ch', true)) got.push(d.msg.payload.toString());
    assert.equal(got.join(''), '0123456789');
  });

  it("a transient message stored past the window reports its store write (publishers' flow control counts it)", async () => {
    const store = new MemoryQueueStore();
    const factory = queueFactory({ maxMessages: 2, maxBytes: 1 << 20, readBatch: 2 });
    const { q } = await open(def('tw'), store, new Hooks(), factory);
    const results = ['a', 'b', 'c', 'd'].map((t) => q.enqueue(msg(t, { persistent: false })));
    assert.deepEqual(
      results.map((r) => [r.durable, r.written !== undefined]),
      [
        [null, false],
        [null, false],
        [null, true],
        [null, true],
      ],
      'in the window: nothing written; past it: written, nobody waits',
    );
    await Promise.all(results.map((r) => r.written));
    assert.equal((await store.openQueue('tw')).count, 2);
  });

  it('purge with deliveries outstanding removes the stored ready messages beyond the window too', async () => {
    const store = new MemoryQueueStore();
    const factory = queueFactory({ maxMessages: 3, maxBytes: 1 << 20, readBatch: 2 });
    const { q } = await open(def('pw'), store, new Hooks(), factory);
    await Promise.all(put(q, ...'abcdefgh'.split('')));
    const held = await q.get('ch', false);
    assert.equal(await q.purge(), 7);
    assert.deepEqual(
      (await store.read('pw', 0, 100)).map((r) => r.id),
      [held!.id],
    );
    await Promise.all(put(q, 'z'));
    assert.equal((await q.get('ch', true))?.msg.payload.toString(), 'z');
    await q.nack(held!.id, true);
    assert.equal((await q.get('ch', true))?.msg.payload.toString(), 'a');
  });

  it('transient messages pushed past the window are stored, survive a restart, and the recovered count is exact', async () => {
    const store = new MemoryQueueStore();
    const factory = queueFactory({ maxMessages: 2, maxBytes: 1 << 20, readBatch: 2 });
    const { q } = await open(def('tr', { maxLength: 5 }), store, new Hooks(), factory);
    const results = ['p1', 't1', 'p2', 't2', 'p3', 't3'].map((t) => q.enqueue(msg(t, { persistent: t.startsWith('p') })));
    assert.deepEqual(
      results.map((r) => r.durable !== null),
      [true, false, true, false, true, false],
      'only persistent messages have a store write to wait for',
    );
    await Promise.all(results.map((r) => r.durable));
    await new Promise((r) => setImmediate(r));
    // max-length 5 dropped the oldest (p1) when t3 came.
    assert.equal(q.stats().ready, 5);
    q.close();
    // After a restart: t1 lived in the memory window only and is gone; t2 and t3 were pushed past it into the
    // store and are kept. The recovered length is what the queue holds, so one more message drops exactly one, the
    // oldest (with a length that still counted rows about to vanish, p2 and more would go).
    const again = await open(def('tr', { maxLength: 5 }), store, new Hooks(), factory);
    assert.equal(again.q.stats().ready, 4);
    await again.q.enqueue(msg('p4')).durable;
    await again.q.enqueue(msg('p5')).durable;
    const got: string[] = [];
    for (let d = await again.q.get('ch', true); d; d = await again.q.get('ch', true)) got.push(d.msg.payload.toString());
    assert.deepEqual(got, ['t2', 'p3', 't3', 'p4', 'p5']);
    assert.deepEqual(again.q.stats(), { ready: 0, unacked: 0, bytes: 0, consumers: 0 });
  });

  it('keeps id order when publishing and consuming interleave while messages wait in the store', async () => {
    const store = new MemoryQueueStore();
    const factory = queueFactory({ maxMessages: 4, maxBytes: 1 << 20, readBatch: 3 });
    const { q } = await open(def('mix'), store, new Hooks(), factory);
    let n = 0;
    const publish = (k: number) => Promise.all(Array.from({ length: k }, () => q.enqueue(msg(String(n++))).durable));
    const got: number[] = [];
    const take = async (k: number) => {
      for (let i = 0; i < k; i++) {
        const d = await q.get('ch', true);
        if (d) got.push(Number(d.msg.payload.toString()));
      }
    };
    await publish(10);
    await take(3);
    await publish(5);
    await take(4);
    await publish(7);
    await take(100);
    assert.deepEqual(
      got,
      Array.from({ length: 22 }, (_, i) => i),
    );
  });

  it('a dead-lettered message leaves the store only once its dead-lettered copy is durable', async () => {
    const store = new MemoryQueueStore();
    let release!: () => void;
    const routed = new Promise<void>((r) => (release = r));
    const hooks: QueueHooks = { deadLetter: () => routed, expire: () => undefined };
    const q = createQueue(def('dlx-order', { deadLetterExchange: 'dlx' }), store, hooks);
    await q.open();
    await q.enqueue(msg('x')).durable;
    const d = await q.get('ch', false);
    const nacked = q.nack(d!.id, false);
    await new Promise((r) => setImmediate(r));
    assert.equal((await store.openQueue('dlx-order')).count, 1, 'still stored while the dead letter is not durable');
    release();
    await nacked;
    assert.equal((await store.openQueue('dlx-order')).count, 0);
  });

  it('x-message-ttl applies to messages read back from the store', async () => {
    const store = new MemoryQueueStore();
    const factory = queueFactory({ maxMessages: 2, maxBytes: 1 << 20, readBatch: 2 });
    const hooks = new Hooks();
    const { q } = await open(def('wttl', { messageTtlMs: 5, deadLetterExchange: 'dlx' }), store, hooks, factory);
    await Promise.all(put(q, ...'abcdef'.split('')));
    await hooks.until(() => hooks.dead.length === 6);
    assert.equal(hooks.dead.map((d) => d.msg.payload.toString()).join(''), 'abcdef');
    assert.deepEqual(q.stats(), { ready: 0, unacked: 0, bytes: 0, consumers: 0 });
  });
});
