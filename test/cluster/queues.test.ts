/**
 * Durable queues across brokers in one process: two or three Engines over one catalog (MemoryStore), one
 * MemoryQueueStore, one MemoryClusterStore and a LocalHub channel (src/cluster/queues.ts).
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { Cluster, LocalHub, MemoryClusterStore, rendezvous } from '../../src/cluster/index.js';
import { ClusterQueues } from '../../src/cluster/queues.js';
import {
  Engine,
  makeMessage,
  MemoryQueueStore,
  MemoryStore,
  type QueueConsumer,
  type QueueDef,
  type QueueDelivery,
  type QueueHandle,
} from '../../src/core/index.js';
import { MemoryStreams } from '../helpers/memory-storage.js';

const logger = pino({ level: 'silent' });
const LEASE = 600;

interface Env {
  cs: MemoryClusterStore;
  hub: LocalHub;
  catalog: MemoryStore;
  qs: MemoryQueueStore;
  brokers: Broker[];
}

interface Broker {
  id: number;
  cluster: Cluster;
  engine: Engine;
  close(): void;
}

function env(): Env {
  return { cs: new MemoryClusterStore(), hub: new LocalHub(), catalog: new MemoryStore(), qs: new MemoryQueueStore(), brokers: [] };
}

let current: Env | null = null;
afterEach(async () => {
  for (const b of current?.brokers ?? []) {
    b.close();
    b.engine.close();
    await b.cluster.close().catch(() => undefined);
  }
  current = null;
});

async function broker(e: Env, id: number): Promise<Broker> {
  const cluster = await Cluster.start({ store: e.cs, info: { id, version: 'test', endpoints: {} }, leaseMs: LEASE, logger });
  cluster.channel = e.hub.channel(id);
  const engine = new Engine(new MemoryStreams(), e.catalog, e.qs);
  const close = await ClusterQueues.open(engine, cluster, logger);
  await engine.load();
  cluster.begin();
  const b = { id, cluster, engine, close };
  e.brokers.push(b);
  return b;
}

/** kill -9 in one process: unreachable, no heartbeat, no handover. */
function crash(e: Env, b: Broker): void {
  e.hub.disconnect(b.id);
  const c = b.cluster as unknown as { heartbeatTimer: NodeJS.Timeout; closed: boolean; started: boolean };
  clearInterval(c.heartbeatTimer);
  c.closed = true;
  c.started = false;
  b.close();
  e.brokers = e.brokers.filter((x) => x !== b);
}

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 8000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A queue name placed at `id` among `ids`. */
function placed(id: number, ids: number[], prefix = 'q'): string {
  for (let i = 0; ; i++) if (rendezvous('queue', `${prefix}${i}`, ids) === id) return `${prefix}${i}`;
}

function qdef(name: string, over: Partial<QueueDef> = {}): Omit<QueueDef, 'createdAt'> {
  return { name, durable: true, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {}, ...over };
}

class Sink implements QueueConsumer {
  readonly got: QueueDelivery[] = [];
  credit = Infinity;
  constructor(
    readonly tag: string,
    readonly owner: string,
    readonly noAck = false,
  ) {}
  hasCredit(): boolean {
    return this.credit > 0;
  }
  deliver(d: QueueDelivery): void {
    this.credit--;
    this.got.push(d);
  }
  bodies(): string[] {
    return this.got.map((d) => d.msg.payload.toString());
  }
}

const publish = (b: Broker, queue: string, body: string) => b.engine.publishTo('', queue, makeMessage('', Buffer.from(body)));

async function ownedBy(e: Env, name: string, id: number): Promise<void> {
  await until(
    `${name} owned by ${id}`,
    async () => (await e.cs.owner('queue', name))?.owner === id && e.brokers.find((b) => b.id === id)!.cluster.owns('queue', name) !== null,
  );
}

describe('cluster queues', () => {
  it('a publish on a non-owner is forwarded and durable at the owner; a consumer there receives it and its ack removes it', async () => {
    const e = (current = env());
    const a = await broker(e, 1);
    const b = await broker(e, 2);
    const name = placed(1, [1, 2]);
    // Declared on broker 2, placed at broker 1.
    await b.engine.declareQueue(qdef(name));
    await ownedBy(e, name, 1);
    await until('broker 1 knows the queue', () => a.engine.getQueue(name) !== undefined);
    const r = publish(b, name, 'm1');
    assert.equal(r.routed, 1);
    assert.ok(r.durable, 'a persistent message to a durable queue is confirmed at the owner');
    await r.durable;
    // Durable at the owner: in the shared store.
    assert.equal((await e.qs.read(name, 0, 10)).length, 1);
    const sink = new Sink('c2', 'ch-2');
    const h = b.engine.getQueue(name)!;
    h.consume(sink);
    await until('delivery on broker 2', () => sink.got.length === 1);
    assert.equal(sink.bodies()[0], 'm1');
    await h.ack(sink.got[0].id);
    await until('the ack removed it at the owner', async () => (await e.qs.read(name, 0, 10)).length === 0);
    assert.deepEqual(a.engine.getQueue(name)!.stats(), { ready: 0, unacked: 0, bytes: 0, consumers: 1 });
  });

  it('exchanges and bindings declared on one broker route on another', async () => {
    const e = (current = env());
    const a = await broker(e, 1);
    const b = await broker(e, 2);
    const name = placed(2, [1, 2], 'bq');
    await a.engine.declareExchange({ name: 'orders', type: 'direct', durable: true, autoDelete: false, internal: false, rawArguments: {} });
    await a.engine.declareQueue(qdef(name));
    await a.engine.bind({ source: 'orders', destinationKind: 'queue', destination: name, key: 'new', arguments: {} });
    await until('broker 2 has the binding', () => b.engine.listBindings().some((x) => x.source === 'orders' && x.destination === name));
    await ownedBy(e, name, 2);
    const r = a.engine.publishTo('orders', 'new', makeMessage('', Buffer.from('o1')));
    assert.equal(r.routed, 1);
    await r.durable;
    const s = new Sink('c', 'ch');
    b.engine.getQueue(name)!.consume(s);
    await until('delivered at the owner', () => s.got.length === 1);
    // Deleting the queue on broker 1 removes it (and its binding) everywhere.
    await a.engine.deleteQueue(name);
    await until('gone on broker 2', () => b.engine.getQueue(name) === undefined);
    assert.equal(
      b.engine.listBindings().some((x) => x.destination === name),
      false,
    );
    assert.equal((await e.qs.read(name, 0, 10)).length, 0);
  });

  it('competing consumers on two brokers share the messages, each once', async () => {
    const e = (current = env());
    const a = await broker(e, 1);
    const b = await broker(e, 2);
    const name = placed(1, [1, 2], 'cq');
    await a.engine.declareQueue(qdef(name));
    await ownedBy(e, name, 1);
    await until('broker 2 knows it', () => b.engine.getQueue(name) !== undefined);
    const s1 = new Sink('c1', 'ch-1');
    const s2 = new Sink('c2', 'ch-2');
    a.engine.getQueue(name)!.consume(s1);
    b.engine.getQueue(name)!.consume(s2);
    // The remote consumer is open at the owner once broker 1 counts two consumers.
    await until('two consumers at the owner', () => a.engine.getQueue(name)!.stats().consumers === 2);
    const n = 60;
    for (let i = 0; i < n; i++) await publish(i % 2 ? a : b, name, `m${i}`).durable;
    await until('all delivered', () => s1.got.length + s2.got.length === n);
    const all = [...s1.bodies(), ...s2.bodies()].sort();
    assert.deepEqual(all, Array.from({ length: n }, (_, i) => `m${i}`).sort());
    assert.ok(s1.got.length > 0 && s2.got.length > 0, `both got some (${s1.got.length}/${s2.got.length})`);
  });

  it('respects the remote consumer credit: no more than it can take, the rest after acks', async () => {
    const e = (current = env());
    const a = await broker(e, 1);
    const b = await broker(e, 2);
    const name = placed(1, [1, 2], 'pq');
    await a.engine.declareQueue(qdef(name));
    await ownedBy(e, name, 1);
    await until('broker 2 knows it', () => b.engine.getQueue(name) !== undefined);
    const s = new Sink('c', 'ch');
    s.credit = 2;
    const h = b.engine.getQueue(name)!;
    h.consume(s);
    for (let i = 0; i < 10; i++) await publish(a, name, `m${i}`).durable;
    await until('two delivered', () => s.got.length === 2);
    assert.equal(s.got.length, 2, 'the consumer was not given more than its credit');
    for (const d of s.got.splice(0)) await h.ack(d.id);
    s.credit = 100;
    h.resume(s);
    await until('the rest delivered', () => s.got.length === 8);
    assert.deepEqual(
      s.bodies(),
      Array.from({ length: 8 }, (_, i) => `m${i + 2}`),
    );
  });

  it("a remote consumer's window is its prefetch: a stalled prefetch-1 consumer holds one message, the others get the rest", async () => {
    const e = (current = env());
    const a = await broker(e, 1);
    const b = await broker(e, 2);
    const name = placed(1, [1, 2], 'wq');
    await a.engine.declareQueue(qdef(name));
    await ownedBy(e, name, 1);
    await until('broker 2 knows it', () => b.engine.getQueue(name) !== undefined);
    const stalled = Object.assign(new Sink('slow', 'ch-2'), { prefetch: 1 });
    stalled.credit = 1; // never acks
    b.engine.getQueue(name)!.consume(stalled);
    await until('remote consumer open', () => a.engine.getQueue(name)!.stats().consumers === 1);
    const fast = new Sink('fast', 'ch-1');
    a.engine.getQueue(name)!.consume(fast);
    for (let i = 0; i < 10; i++) await publish(a, name, `m${i}`).durable;
    await until('nine on the local consumer, one on the stalled one', () => fast.got.length === 9 && stalled.got.length === 1);
    assert.equal(a.engine.getQueue(name)!.stats().unacked, 10);
  });

  it('a channel outage between live brokers: deliveries that did not arrive are requeued, the consumer is reopened and gets everything', async () => {
    const e = (current = env());
    const a = await broker(e, 1);
    const b = await broker(e, 2);
    const name = placed(1, [1, 2], 'nq');
    await a.engine.declareQueue(qdef(name));
    await ownedBy(e, name, 1);
    await until('broker 2 knows it', () => b.engine.getQueue(name) !== undefined);
    const s = new Sink('c', 'ch');
    const h = b.engine.getQueue(name)!;
    h.consume(s);
    await until('remote consumer open', () => a.engine.getQueue(name)!.stats().consumers === 1);
    e.hub.disconnect(2);
    for (let i = 0; i < 5; i++) await publish(a, name, `m${i}`).durable;
    await until('the failed deliveries requeued', () => a.engine.getQueue(name)!.stats().ready === 5);
    e.hub.reconnect(2);
    await until('all five delivered after the outage', () => s.got.length === 5);
    assert.deepEqual(s.bodies(), ['m0', 'm1', 'm2', 'm3', 'm4']);
    for (const d of s.got) await h.ack(d.id);
    await until('acked at the owner', () => a.engine.getQueue(name)!.stats().unacked === 0);
  });

  it('basic.get and nack with requeue from a non-owner', async () => {
    const e = (current = env());
    const a = await broker(e, 1);
    const b = await broker(e, 2);
    const name = placed(1, [1, 2], 'gq');
    await a.engine.declareQueue(qdef(name));
    await ownedBy(e, name, 1);
    await until('broker 2 knows it', () => b.engine.getQueue(name) !== undefined);
    await publish(b, name, 'g1').durable;
    const h = b.engine.getQueue(name)! as QueueHandle;
    const d = await h.get('ch', false);
    assert.equal(d?.msg.payload.toString(), 'g1');
    assert.equal(d?.redelivered, false);
    await h.nack(d!.id, true);
    const again = await h.get('ch', false);
    assert.equal(again?.msg.payload.toString(), 'g1');
    assert.equal(again?.redelivered, true);
    await h.ack(again!.id);
    assert.equal(await h.get('ch', true), null);
    assert.equal((await e.qs.read(name, 0, 10)).length, 0);
  });

  it("a consumer broker's death: its unacked deliveries are redelivered to a consumer elsewhere", async () => {
    const e = (current = env());
    const a = await broker(e, 1);
    const b = await broker(e, 2);
    const name = placed(1, [1, 2], 'dq');
    await a.engine.declareQueue(qdef(name));
    await ownedBy(e, name, 1);
    await until('broker 2 knows it', () => b.engine.getQueue(name) !== undefined);
    const s2 = new Sink('c2', 'ch-2');
    b.engine.getQueue(name)!.consume(s2);
    await until('remote consumer open', () => a.engine.getQueue(name)!.stats().consumers === 1);
    for (let i = 0; i < 5; i++) await publish(a, name, `m${i}`).durable;
    await until('delivered on broker 2', () => s2.got.length === 5);
    assert.equal(a.engine.getQueue(name)!.stats().unacked, 5);
    crash(e, b);
    const s1 = new Sink('c1', 'ch-1');
    a.engine.getQueue(name)!.consume(s1);
    await until('redelivered on broker 1', () => s1.got.length === 5);
    assert.deepEqual(s1.bodies(), ['m0', 'm1', 'm2', 'm3', 'm4']);
    assert.ok(s1.got.every((d) => d.redelivered));
  });

  it("the owner's death: the queue continues on another broker with every confirmed message", async () => {
    const e = (current = env());
    const a = await broker(e, 1);
    const b = await broker(e, 2);
    const name = placed(1, [1, 2], 'oq');
    await b.engine.declareQueue(qdef(name));
    await ownedBy(e, name, 1);
    // Confirmed through the non-owner, one consumed but not acked on broker 2.
    for (let i = 0; i < 10; i++) await publish(b, name, `m${i}`).durable;
    const s = new Sink('c', 'ch');
    s.credit = 1;
    const h = b.engine.getQueue(name)!;
    h.consume(s);
    await until('one delivered', () => s.got.length === 1);
    crash(e, a);
    await ownedBy(e, name, 2);
    // Its delivery by the dead owner is moot: acking it changes nothing, the new owner redelivers the message.
    await h.ack(s.got[0].id);
    s.credit = 100;
    h.resume(s);
    await until('everything on the new owner', () => s.got.length === 11);
    assert.deepEqual(s.bodies(), ['m0', ...Array.from({ length: 10 }, (_, i) => `m${i}`)]);
    assert.equal(s.got[1].redelivered, true);
    // Publishes continue there.
    await publish(b, name, 'after').durable;
    await until('delivered', () => s.got.length === 12);
    for (const d of s.got.slice(1)) await h.ack(d.id);
    assert.equal((await e.qs.read(name, 0, 100)).length, 0);
  });

  it('a join hands the queue over without losing what was confirmed', async () => {
    const e = (current = env());
    const a = await broker(e, 1);
    // A queue that placement gives broker 2 once it joins.
    const name = placed(2, [1, 2], 'jq');
    await a.engine.declareQueue(qdef(name));
    await ownedBy(e, name, 1);
    const pubs = [];
    for (let i = 0; i < 20; i++) pubs.push(publish(a, name, `m${i}`).durable);
    await Promise.all(pubs);
    const b = await broker(e, 2);
    await ownedBy(e, name, 2);
    const s = new Sink('c', 'ch');
    a.engine.getQueue(name)!.consume(s);
    await until('all 20 through the new owner', () => s.got.length === 20);
    assert.deepEqual(
      s.bodies(),
      Array.from({ length: 20 }, (_, i) => `m${i}`),
    );
    assert.ok(b.cluster.owns('queue', name));
  });
});

describe('cluster queues: what stays local', () => {
  it('exclusive and non-durable queues stay on the broker that declared them, unowned', async () => {
    const e = (current = env());
    const a = await broker(e, 1);
    const b = await broker(e, 2);
    await a.engine.declareQueue(qdef('excl', { exclusiveOwner: 'conn-1' }));
    await a.engine.declareQueue(qdef('transient', { durable: false }));
    const durable = placed(2, [1, 2], 'lq');
    await a.engine.declareQueue(qdef(durable));
    await until('the durable one known on broker 2', () => b.engine.getQueue(durable) !== undefined);
    assert.equal(b.engine.getQueue('excl'), undefined);
    assert.equal(b.engine.getQueue('transient'), undefined);
    assert.equal(await e.cs.owner('queue', 'excl'), null);
    assert.equal(await e.cs.owner('queue', 'transient'), null);
    // Served by broker 1 itself, as on a single broker.
    const s = new Sink('c', 'ch');
    a.engine.getQueue('excl')!.consume(s);
    await publish(a, 'excl', 'x').durable;
    assert.deepEqual(s.bodies(), ['x']);
  });
});
