/**
 * Durable queues in cluster mode: each persisted queue (durable, not exclusive) is owned by one broker ('queue'
 * kind, placed over the queue catalog), which alone runs it (src/core/queue.ts over the shared QueueStore, its writes
 * fenced by the queue's epoch). Every broker keeps every durable definition (the catalog is shared; a change is
 * announced on the `queues` topic and every broker reloads it) and routes locally, to a `ClusterQueue`: the queue's
 * runtime as the router and the adapters see it, the same object whether the queue is served here or elsewhere.
 *
 * - Owned here: it drives a local Queue; consumers attach to it directly.
 * - Owned elsewhere: publishes are forwarded to the owner (`queue.publish`, batched per queue, one batch in flight)
 *   and their durability is the owner's answer, given once its store made them durable; a consumer opens a remote
 *   consumer at the owner (`queue.consume`) that receives deliveries (`queue.deliver`, batched per peer) within the
 *   credit this broker grants (`queue.credit`, a window per consumer topped up while the consumer takes more);
 *   basic.get, acks, nacks, releases, purge and delete are requests to the owner.
 * - Delivery ids: the ids adapters see are this broker's own (translated), so that an ack for a delivery made by a
 *   former owner can never settle the redelivery of the same message by the next one: it is simply dropped (the
 *   message is redelivered: at-least-once, never lost).
 * - A consumer's broker dying: the owner cancels that broker's remote consumers and requeues every delivery it holds
 *   (release of their owners), on membership change and periodically.
 * - The owner changing (handover or death): the new owner loads the queue from the store (unacked messages ready
 *   again, redelivered); the other brokers notice the new owner (their periodic check, or a NOT_OWNER answer) and
 *   reopen their consumers there; forwarded publishes retry at the new owner for up to two leases.
 *
 * Exclusive and non-durable queues are never in the catalog: they stay local to the broker of their declaring
 * connection, exactly as on a single broker.
 */
import type { Logger } from 'pino';
import {
  CoalescingTask,
  createQueue,
  FlowError,
  type Engine,
  type Message,
  type QueueConsumer,
  type QueueDef,
  type QueueDelivery,
  type QueueHooks,
  type QueueRuntime,
  type QueueStore,
  type RouterCore,
} from '../core/index.js';
import type { Cluster } from './cluster.js';
import type { PeerChannel } from './types.js';
import { call, cast, listen, RPC, serve, WithTail, type QueueDeliverItem, type RpcReply, type RpcRequest } from './rpc.js';
import { decodeMessage, encodeMessage, packBuffers, unpackBuffers } from './wire.js';

/**
 * Deliveries a remote consumer may receive ahead of its broker handing them to the client: the consumer's own
 * prefetch when it has one (an AMQP consumer's basic.qos; at most MAX_WINDOW), else DEFAULT_WINDOW.
 */
const DEFAULT_WINDOW = 64;
const MAX_WINDOW = 1000;

function windowOf(c: QueueConsumer): number {
  const p = (c as { prefetch?: unknown }).prefetch;
  return typeof p === 'number' && p > 0 ? Math.min(p, MAX_WINDOW) : DEFAULT_WINDOW;
}
/** Pause between attempts while a queue has no reachable owner. */
const RETRY_MS = 100;
/** Messages per forwarded publish batch. */
const MAX_BATCH = 512;

type Stats = { ready: number; unacked: number; bytes: number; consumers: number };

function retriable(err: unknown): boolean {
  return err instanceof FlowError && (err.code === 'NOT_OWNER' || err.code === 'UNAVAILABLE' || err.code === 'FENCED' || err.code === 'CLOSED');
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref?.());
}

function ignore(): void {
  // A settle nobody waits for: the owner requeues what it does not hear about.
}

/** Who holds a delivery at the owner, for a client of another broker. */
function peerOwner(from: number, inc: string, owner: string): string {
  return `peer/${from}/${inc}/${owner}`;
}

// ---------------------------------------------------------------------------------------------------------------
// owner side: a consumer of another broker

class Served implements QueueConsumer {
  closed = false;
  constructor(
    readonly cq: ClusterQueues,
    readonly queue: ClusterQueue,
    readonly from: number,
    readonly inc: string,
    readonly key: string,
    readonly tag: string,
    readonly owner: string,
    readonly noAck: boolean,
    readonly priority: number,
    public credit: number,
  ) {}
  hasCredit(): boolean {
    return !this.closed && this.credit > 0;
  }
  deliver(d: QueueDelivery): void {
    this.credit--;
    this.cq.outbox(this, d);
  }
  cancelled(reason: string): void {
    this.cq.dropServed(this);
    cast(this.cq.channel, this.from, RPC.queueCancelled, { k: this.key, r: reason });
  }
}

// ---------------------------------------------------------------------------------------------------------------
// consumer side: a consumer of this broker on a queue owned elsewhere

interface Held {
  c: QueueConsumer;
  exclusive: boolean;
  /** Owned here: the consumer as the local queue sees it. */
  shim: QueueConsumer | null;
  /** Owned elsewhere: the remote consumer. */
  link: Link | null;
}

class Link {
  state: 'opening' | 'open' | 'closed' = 'opening';
  broker = -1;
  epoch = 0;
  outstanding = 0;
  granting = false;
  readonly buffer: Array<{ d: QueueDelivery; epoch: number }> = [];
  private readonly window: number;
  constructor(
    readonly cq: ClusterQueues,
    readonly q: ClusterQueue,
    readonly h: Held,
    readonly key: string,
  ) {
    this.window = windowOf(h.c);
  }

  async open(): Promise<void> {
    const cl = this.cq.cluster;
    const name = this.q.def.name;
    while (this.state === 'opening') {
      if (this.q.local) return; // owned here now: own() attaches the consumer
      const owner = cl.owner('queue', name) ?? (await cl.lookup('queue', name).catch(() => null));
      if (this.state !== 'opening' || this.q.local) return;
      if (owner === null || owner.broker === cl.id) {
        await sleep(RETRY_MS * 2);
        continue;
      }
      const c = this.h.c;
      const credit = c.hasCredit() ? this.window : 0;
      this.outstanding = credit;
      this.broker = owner.broker;
      try {
        const { head } = await call(this.cq.channel, owner.broker, RPC.queueConsume, {
          q: name,
          k: this.key,
          i: cl.incarnation,
          t: c.tag,
          o: c.owner,
          n: c.noAck,
          p: c.priority ?? 0,
          x: this.h.exclusive,
          c: credit,
        });
        if (this.state !== 'opening') {
          this.cq.cancelRemote(this, owner.broker, head.e);
          return;
        }
        this.epoch = head.e;
        this.q.cached = head.s;
        this.state = 'open';
        this.pump();
        return;
      } catch (err) {
        if (this.state !== 'opening') return;
        if (retriable(err)) {
          await cl.lookup('queue', name).catch(() => null);
          await sleep(RETRY_MS);
          continue;
        }
        // Refused (exclusive consumer, queue gone, tag in use): the client's consumer is cancelled.
        this.state = 'closed';
        this.cq.links.delete(this.key);
        if (this.q.consumers.get(c) === this.h) this.q.consumers.delete(c);
        try {
          c.cancelled?.(err instanceof Error ? err.message : String(err));
        } catch {
          // the adapter's notification must not stop us
        }
        return;
      }
    }
  }

  /** A delivery from the owner. */
  take(d: QueueDelivery, epoch: number): void {
    this.outstanding--;
    if (this.buffer.length === 0 && this.h.c.hasCredit()) this.hand(d, epoch);
    else this.buffer.push({ d, epoch });
    this.maybeGrant();
  }

  private hand(d: QueueDelivery, epoch: number): void {
    const c = this.h.c;
    c.deliver(this.q.translate(d, c.owner, c.noAck, this.broker, epoch));
  }

  /** The consumer may take more: hand it what is buffered, then grant the owner more credit. */
  pump(): void {
    while (this.buffer.length > 0 && this.state !== 'closed' && this.h.c.hasCredit()) {
      const b = this.buffer.shift()!;
      this.hand(b.d, b.epoch);
    }
    this.maybeGrant();
  }

  private maybeGrant(): void {
    if (this.state !== 'open' || this.granting || this.buffer.length > 0 || this.outstanding > this.window / 2 || !this.h.c.hasCredit()) return;
    const n = this.window - this.outstanding;
    this.outstanding += n;
    this.granting = true;
    const broker = this.broker;
    call(this.cq.channel, broker, RPC.queueCredit, { q: this.q.def.name, k: this.key, i: this.cq.cluster.incarnation, n }).then(
      ({ head }) => {
        this.granting = false;
        if (!head.ok) this.q.reopen(this);
        else this.maybeGrant();
      },
      () => {
        this.granting = false;
        this.q.reopen(this);
      },
    );
  }

  close(): void {
    this.state = 'closed';
    this.cq.links.delete(this.key);
  }
}

// ---------------------------------------------------------------------------------------------------------------

interface Out {
  id: number;
  owner: string;
  broker: number;
  epoch: number;
}

interface Pending {
  data: Buffer;
  resolve(): void;
  reject(err: unknown): void;
}

/** A persisted queue as the router and the adapters of this broker see it (see the file comment). */
export class ClusterQueue implements QueueRuntime {
  local: QueueRuntime | null = null;
  epoch = 0;
  readonly consumers = new Map<QueueConsumer, Held>();
  /** Deliveries not settled yet, by the id the adapter was given. */
  private readonly outs = new Map<number, Out>();
  private nextDid = 1;
  cached: Stats = { ready: 0, unacked: 0, bytes: 0, consumers: 0 };
  private pending: Pending[] = [];
  private forwarding = false;
  private settles: Array<{ o: Out; op: number; resolve(): void }> = [];
  private closed = false;
  private destroyed = false;
  private owning: Promise<void> | null = null;

  constructor(
    private readonly cq: ClusterQueues,
    readonly def: QueueDef,
    private readonly store: QueueStore | null,
    private readonly hooks: QueueHooks,
  ) {}

  private get cluster(): Cluster {
    return this.cq.cluster;
  }

  // ------------------------------------------------------------- ownership

  async open(): Promise<void> {
    // Nothing is loaded here: the owner loads the queue when it acquires it.
    if (!this.closed) this.cq.queues.set(this.def.name, this);
  }

  /** This broker owns the queue now (Cluster acquire): load it from the store and serve it. */
  async own(epoch: number): Promise<void> {
    const run = async () => {
      this.store?.fence?.(this.def.name, epoch);
      const q = createQueue(this.def, this.store, this.hooks);
      await q.open();
      if (this.closed) {
        q.close();
        throw new FlowError('NOT_FOUND', `queue ${this.def.name} was deleted`);
      }
      this.local = q;
      this.epoch = epoch;
      this.outs.clear();
      for (const h of [...this.consumers.values()]) {
        if (h.link) {
          const l = h.link;
          h.link = null;
          l.close();
          this.cq.cancelRemote(l, l.broker, l.epoch);
        }
        this.attach(h);
      }
      if (this.pending.length > 0 && !this.forwarding) void this.forward();
    };
    this.owning = run();
    try {
      await this.owning;
    } finally {
      this.owning = null;
    }
  }

  /** Handover (or loss): stop serving, make what was acknowledged durable, let the consumers follow the queue. */
  async disown(lost: boolean): Promise<void> {
    const q = this.local;
    if (!q) return;
    this.local = null;
    this.outs.clear();
    q.close();
    this.cq.dropServedOf(this);
    if (!lost && this.store) {
      // The queue's store calls take effect in order: once a read issued after them answers, they are durable.
      await Promise.resolve();
      await this.store.read(this.def.name, Number.MAX_SAFE_INTEGER, 1).catch(() => undefined);
    }
    this.store?.fence?.(this.def.name, null);
    for (const h of this.consumers.values()) {
      h.shim = null;
      if (!this.closed) h.link = this.cq.openLink(this, h);
    }
  }

  /** Owned here now: the consumer attaches to the local queue (refused: cancelled, as a deleted queue's). */
  private attach(h: Held): void {
    try {
      this.attachOrThrow(h, this.local!);
    } catch (err) {
      h.shim = null;
      this.consumers.delete(h.c);
      h.c.cancelled?.(err instanceof Error ? err.message : String(err));
    }
  }

  /** A delivery as the adapter sees it: this broker's own id. */
  translate(d: QueueDelivery, owner: string, noAck: boolean, broker: number, epoch: number): QueueDelivery {
    const did = this.nextDid++;
    if (!noAck) this.outs.set(did, { id: d.id, owner, broker, epoch });
    return { ...d, id: did };
  }

  /** A write refused FENCED (another broker took the queue while this one still served it): stop serving it. */
  private fencedWrite(err: unknown): void {
    if (err instanceof FlowError && err.code === 'FENCED' && err.message.includes(`queue ${this.def.name} `)) this.cluster.fenced('queue', this.def.name);
  }

  reopen(l: Link): void {
    const h = l.h;
    if (h.link !== l || l.state === 'closed') return;
    l.close();
    this.cq.cancelRemote(l, l.broker, l.epoch);
    this.cq.stats.reopened++;
    h.link = this.cq.openLink(this, h);
  }

  // ------------------------------------------------------------- QueueHandle

  stats(): Stats {
    return this.local ? this.local.stats() : this.cached;
  }

  async refresh(): Promise<void> {
    if (this.local) return;
    const owner = this.cluster.owner('queue', this.def.name) ?? (await this.cluster.lookup('queue', this.def.name));
    if (!owner || owner.broker === this.cluster.id) return;
    // Counts for a declare-ok: not worth holding the client up while the owner moves.
    this.cached = (await call(this.cq.channel, owner.broker, RPC.queueStats, { q: this.def.name }, { timeoutMs: 1000 })).head.s;
  }

  consume(c: QueueConsumer, opts?: { exclusive?: boolean }): void {
    if (this.destroyed) throw new FlowError('NOT_FOUND', `queue ${this.def.name} was deleted`);
    for (const h of this.consumers.values()) {
      if (h.c.tag === c.tag) throw new FlowError('PRECONDITION_FAILED', `consumer tag ${c.tag} is in use on queue ${this.def.name}`);
    }
    const h: Held = { c, exclusive: opts?.exclusive === true, shim: null, link: null };
    if (this.local) {
      this.consumers.set(c, h);
      try {
        this.attachOrThrow(h, this.local);
      } catch (err) {
        this.consumers.delete(c);
        throw err;
      }
      return;
    }
    this.consumers.set(c, h);
    h.link = this.cq.openLink(this, h);
  }

  private attachOrThrow(h: Held, q: QueueRuntime): void {
    const c = h.c;
    const shim: QueueConsumer = {
      tag: c.tag,
      owner: c.owner,
      noAck: c.noAck,
      priority: c.priority,
      hasCredit: () => c.hasCredit(),
      deliver: (d) => c.deliver(this.translate(d, c.owner, c.noAck, this.cluster.id, this.epoch)),
      cancelled: (reason) => {
        if (this.consumers.get(c) === h) this.consumers.delete(c);
        c.cancelled?.(reason);
      },
    };
    q.consume(shim, { exclusive: h.exclusive });
    h.shim = shim;
  }

  cancel(c: QueueConsumer): void {
    const h = this.consumers.get(c);
    if (!h) return;
    this.consumers.delete(c);
    if (h.shim && this.local) this.local.cancel(h.shim);
    if (h.link) {
      const l = h.link;
      l.close();
      this.cq.cancelRemote(l, l.broker, l.epoch);
    }
  }

  resume(c: QueueConsumer): void {
    const h = this.consumers.get(c);
    if (!h) return;
    if (h.shim && this.local) this.local.resume(h.shim);
    else if (h.link) h.link.pump();
  }

  async get(owner: string, noAck: boolean): Promise<QueueDelivery | null> {
    const reply = await this.toOwner(async (q) => {
      const d = await q.get(owner, noAck);
      return d && this.translate(d, owner, noAck, this.cluster.id, this.epoch);
    }, async (broker) => {
      const r = await call(this.cq.channel, broker, RPC.queueGet, { q: this.def.name, o: owner, n: noAck, i: this.cluster.incarnation });
      this.cached = r.head.s;
      if (r.head.d === null) return null;
      return this.translate({ ...r.head.d, msg: decodeMessage(r.tail) }, owner, noAck, broker, r.head.e);
    });
    return reply;
  }

  ack(id: number): Promise<void> {
    return this.settle(id, 0);
  }

  async nack(id: number, requeue: boolean): Promise<void> {
    return this.settle(id, requeue ? 1 : 2);
  }

  private settle(did: number, op: number): Promise<void> {
    const o = this.outs.get(did);
    // Unknown: made by a former owner (the message is redelivered by the current one), or the queue went.
    if (!o) return Promise.resolve();
    this.outs.delete(did);
    if (o.broker === this.cluster.id) {
      if (!this.local || this.epoch !== o.epoch) return Promise.resolve();
      return op === 0 ? this.local.ack(o.id) : this.local.nack(o.id, op === 1);
    }
    if (!this.cluster.isAlive(o.broker)) return Promise.resolve();
    return new Promise<void>((resolve) => {
      this.settles.push({ o, op, resolve });
      if (this.settles.length === 1) queueMicrotask(() => this.flushSettles());
    });
  }

  private flushSettles(): void {
    const all = this.settles;
    this.settles = [];
    const groups = new Map<string, typeof all>();
    for (const s of all) {
      const k = `${s.o.broker}/${s.o.epoch}`;
      let g = groups.get(k);
      if (!g) groups.set(k, (g = []));
      g.push(s);
    }
    for (const g of groups.values()) {
      const { broker, epoch } = g[0].o;
      const ops = g.map((s): [number, number] => [s.o.id, s.op]);
      const done = () => {
        for (const s of g) s.resolve();
      };
      // A settle that does not arrive leaves the message unacked at the owner: redelivered, never lost.
      call(this.cq.channel, broker, RPC.queueSettle, { q: this.def.name, e: epoch, ops }).then(done, done);
    }
  }

  release(owner: string): void {
    for (const [did, o] of this.outs) if (o.owner === owner) this.outs.delete(did);
    for (const h of this.consumers.values()) if (h.link && h.c.owner === owner) h.link.buffer.length = 0;
    if (this.local) {
      this.local.release(owner);
      return;
    }
    const cur = this.cluster.owner('queue', this.def.name);
    if (cur && cur.broker !== this.cluster.id) {
      call(this.cq.channel, cur.broker, RPC.queueRelease, { q: this.def.name, o: owner, i: this.cluster.incarnation }).catch(ignore);
    }
  }

  // ------------------------------------------------------------- QueueRuntime

  enqueue(msg: Message): { durable: Promise<void> | null; rejected: boolean } {
    if (this.local) {
      const r = this.local.enqueue(msg);
      r.durable?.catch((err: unknown) => this.fencedWrite(err));
      return r;
    }
    if (this.destroyed) throw new FlowError('NOT_FOUND', `queue ${this.def.name} was deleted`);
    let resolve!: () => void;
    let reject!: (err: unknown) => void;
    const p = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    this.pending.push({ data: encodeMessage(msg), resolve, reject });
    if (!this.forwarding) {
      this.forwarding = true;
      setImmediate(() => void this.forward());
    }
    if (msg.persistent === false) {
      p.catch(ignore);
      return { durable: null, rejected: false };
    }
    return { durable: p, rejected: false };
  }

  /** Sends the pending publishes to the owner, one batch in flight (the next one grows meanwhile). */
  private async forward(): Promise<void> {
    this.forwarding = true;
    try {
      while (this.pending.length > 0) {
        const batch = this.pending.splice(0, MAX_BATCH);
        await this.sendBatch(batch);
      }
    } finally {
      this.forwarding = false;
    }
  }

  private async sendBatch(batch: Pending[]): Promise<void> {
    try {
      await this.toOwner(
        async (q) => {
          for (const b of batch) {
            const r = q.enqueue(decodeMessage(b.data));
            if (r.rejected) b.reject(new FlowError('LIMIT_EXCEEDED', `queue ${this.def.name} is full (x-overflow reject-publish)`));
            else if (r.durable) r.durable.then(b.resolve, b.reject);
            else b.resolve();
          }
        },
        async (broker) => {
          this.cq.stats.forwarded += batch.length;
          this.cq.stats.forwardedBatches++;
          const { r } = (await call(this.cq.channel, broker, RPC.queuePublish, { q: this.def.name }, { tail: packBuffers(batch.map((b) => b.data)) })).head;
          batch.forEach((b, i) => (r[i] === 1 ? b.reject(new FlowError('LIMIT_EXCEEDED', `queue ${this.def.name} is full (x-overflow reject-publish)`)) : b.resolve()));
        },
      );
    } catch (err) {
      for (const b of batch) b.reject(err);
    }
  }

  /**
   * Runs `here` when the queue is served by this broker, else `there` at its owner; while the owner moves (no owner,
   * NOT_OWNER, unreachable) retries for up to two leases, then fails with UNAVAILABLE (retriable for clients).
   */
  private async toOwner<T>(here: (q: QueueRuntime) => Promise<T>, there: (broker: number) => Promise<T>): Promise<T> {
    const deadline = Date.now() + 2 * this.cluster.leaseMs + 1000;
    let last: unknown = null;
    for (;;) {
      if (this.owning) await this.owning.catch(() => undefined);
      if (this.local) return here(this.local);
      if (this.destroyed) throw new FlowError('NOT_FOUND', `queue ${this.def.name} was deleted`);
      const owner = this.cluster.owner('queue', this.def.name) ?? (await this.cluster.lookup('queue', this.def.name).catch(() => null));
      if (this.local) return here(this.local);
      if (owner && owner.broker !== this.cluster.id) {
        try {
          return await there(owner.broker);
        } catch (err) {
          if (!retriable(err)) throw err;
          last = err;
          await this.cluster.lookup('queue', this.def.name).catch(() => null);
        }
      }
      if (Date.now() > deadline) {
        throw new FlowError('UNAVAILABLE', `queue ${this.def.name} has no reachable owner${last instanceof Error ? `: ${last.message}` : ''}`);
      }
      await sleep(RETRY_MS);
    }
  }

  async purge(): Promise<number> {
    return this.toOwner(
      (q) => q.purge(),
      async (broker) => (await call(this.cq.channel, broker, RPC.queuePurge, { q: this.def.name })).head.n,
    );
  }

  async destroy(): Promise<number> {
    let n = 0;
    if (this.local) {
      const q = this.local;
      this.local = null;
      this.cq.dropServedOf(this);
      n = await q.destroy();
      this.store?.fence?.(this.def.name, null);
      await this.cluster.forget('queue', this.def.name).catch(() => undefined);
    } else {
      const owner = this.cluster.owner('queue', this.def.name) ?? (await this.cluster.lookup('queue', this.def.name).catch(() => null));
      let done = false;
      if (owner && owner.broker !== this.cluster.id) {
        try {
          n = (await call(this.cq.channel, owner.broker, RPC.queueDelete, { q: this.def.name })).head.n;
          done = true;
        } catch {
          // unreachable owner: drop the storage from here (its writes are fenced once it is gone)
        }
      }
      if (!done) {
        n = this.cached.ready;
        await this.store?.dropQueue(this.def.name).catch(() => undefined);
        await this.cluster.forget('queue', this.def.name).catch(() => undefined);
      }
    }
    this.stop('queue deleted');
    return n;
  }

  detach(): void {
    if (this.local) {
      // Deleted by another broker while owned here: the storage goes with it (its owner drops it).
      void this.destroy().catch(() => undefined);
      return;
    }
    this.stop('queue deleted');
  }

  /** Ends every consumer here (cancelled) and stops. */
  private stop(reason: string): void {
    this.destroyed = true;
    this.closed = true;
    if (this.cq.queues.get(this.def.name) === this) this.cq.queues.delete(this.def.name);
    const hs = [...this.consumers.values()];
    this.consumers.clear();
    for (const h of hs) {
      if (h.link) {
        const l = h.link;
        l.close();
        this.cq.cancelRemote(l, l.broker, l.epoch);
      }
      try {
        h.c.cancelled?.(reason);
      } catch {
        // an adapter's notification must not stop the deletion
      }
    }
    for (const p of this.pending.splice(0)) p.reject(new FlowError('NOT_FOUND', `queue ${this.def.name} was deleted`));
  }

  close(): void {
    this.closed = true;
    if (this.cq.queues.get(this.def.name) === this) this.cq.queues.delete(this.def.name);
    this.local?.close();
    for (const h of this.consumers.values()) {
      if (h.link) {
        const l = h.link;
        l.close();
        this.cq.cancelRemote(l, l.broker, l.epoch);
      }
    }
  }

  touch(): void {
    this.local?.touch?.();
  }
}

// ---------------------------------------------------------------------------------------------------------------

/** One broker's part in cluster queues: the 'queue' ownership handler, the channel handlers, the catalog sync. */
export class ClusterQueues {
  router!: RouterCore;
  /** The persisted queues of this broker's router, by name. */
  readonly queues = new Map<string, ClusterQueue>();
  /** Consumer side: remote consumers of this broker's clients, by key. */
  readonly links = new Map<string, Link>();
  private nextKey = 1;
  /** Owner side: remote consumers of other brokers' clients, by "<from>/<incarnation>/<key>". */
  private readonly served = new Map<string, Served>();
  /** Owner side: delivery owners of other brokers, to requeue their deliveries when they die. */
  private readonly peers = new Map<string, { from: number; inc: string; owners: Map<string, Set<string>> }>();
  private readonly boxes = new Map<number, { items: Array<{ k: string; i: number; r: boolean; n: number; m: number; e: number; q: string }>; bufs: Buffer[]; refs: Array<{ s: Served; id: number }> }>();
  private readonly syncTask: CoalescingTask;
  private timer: NodeJS.Timeout | null = null;
  private checking = false;
  readonly stats = { forwarded: 0, forwardedBatches: 0, remoteDeliveries: 0, reopened: 0, peerReleases: 0, syncs: 0 };

  constructor(
    readonly cluster: Cluster,
    private readonly logger: Logger,
  ) {
    this.syncTask = new CoalescingTask(async () => {
      this.stats.syncs++;
      await this.router.sync();
    });
  }

  get channel(): PeerChannel {
    const ch = this.cluster.channel;
    if (!ch) throw new FlowError('UNAVAILABLE', 'the cluster channel is not open');
    return ch;
  }

  /** Attaches to the engine and starts (before engine.load() and cluster.begin()); returns its closer. */
  static async open(engine: Engine, cluster: Cluster, logger: Logger): Promise<() => void> {
    const cq = new ClusterQueues(cluster, logger);
    cq.attach(engine);
    await cq.start();
    return () => cq.close();
  }

  /** Before engine.load(): persisted queues become ClusterQueues. */
  attach(engine: Engine): void {
    this.router = engine.router;
    this.router.setCluster({
      factory: (def: QueueDef, store: QueueStore | null, hooks: QueueHooks) => new ClusterQueue(this, def, store, hooks),
      changed: () => {
        this.cluster.store.notify('queues', this.cluster.incarnation).catch((err: unknown) => this.logger.warn({ err }, 'cluster queues: cannot announce a catalog change'));
      },
      declared: async (name: string) => {
        if (this.cluster.placement('queue', name) === this.cluster.id) await this.cluster.ensure('queue', name).catch(() => this.cluster.kick());
        else this.cluster.kick();
      },
    });
  }

  /** After engine.load(), before cluster.begin(). */
  async start(): Promise<void> {
    this.cluster.register('queue', {
      names: () => [...this.queues.keys()],
      acquire: (name, epoch) => this.acquire(name, epoch),
      release: async (name, lost) => {
        await this.queues.get(name)?.disown(lost);
      },
    });
    await this.cluster.store.listen('queues', (payload) => {
      if (payload === this.cluster.incarnation) return;
      this.syncTask.run().then(
        () => this.cluster.kick(),
        (err: unknown) => this.logger.warn({ err }, 'cluster queues: cannot reload the catalog'),
      );
    });
    const ch = this.channel;
    serve(ch, RPC.queuePublish, (_from, head, tail) => this.onPublish(head, tail));
    serve(ch, RPC.queueConsume, (from, head) => this.onConsume(from, head));
    serve(ch, RPC.queueCredit, (from, head) => this.onCredit(from, head));
    serve(ch, RPC.queueCancel, (from, head) => this.onCancel(from, head));
    serve(ch, RPC.queueDeliver, (from, head, tail) => this.onDeliver(from, head, tail));
    serve(ch, RPC.queueGet, (from, head) => this.onGet(from, head));
    serve(ch, RPC.queueSettle, (_from, head) => this.onSettle(head));
    serve(ch, RPC.queueRelease, (from, head) => this.onRelease(from, head));
    serve(ch, RPC.queuePurge, async (_from, head) => ({ n: await this.owned(head.q).purge() }));
    serve(ch, RPC.queueDelete, async (_from, { q }) => {
      if (!this.queues.get(q)?.local) throw new FlowError('NOT_OWNER', `queue ${q} is not served by broker ${this.cluster.id}`);
      return { n: await this.router.deleteQueue(q) };
    });
    serve(ch, RPC.queueStats, (_from, head) => ({ s: this.owned(head.q).stats() }));
    serve(ch, RPC.queueCheck, (from, head) => ({ missing: head.k.filter((k) => !this.served.has(`${from}/${head.i}/${k}`)) }));
    listen(ch, RPC.queueCancelled, (from, head) => {
      const l = this.links.get(head.k);
      if (!l || l.broker !== from) return;
      l.close();
      if (l.q.consumers.get(l.h.c) === l.h) l.q.consumers.delete(l.h.c);
      try {
        l.h.c.cancelled?.(head.r);
      } catch {
        // ignore
      }
    });
    this.cluster.on('membership', () => this.sweep());
    this.timer = setInterval(() => void this.tick(), Math.max(200, Math.floor(this.cluster.leaseMs / 5)));
    this.timer.unref();
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  figures(): Record<string, unknown> {
    return { ...this.stats, queues: this.queues.size, owned: [...this.queues.values()].filter((q) => q.local).length, links: this.links.size, served: this.served.size };
  }

  private async acquire(name: string, epoch: number): Promise<void> {
    let q = this.queues.get(name);
    if (!q) {
      await this.syncTask.run();
      q = this.queues.get(name);
    }
    if (!q) throw new FlowError('NOT_FOUND', `queue ${name} is not in the catalog`);
    await q.own(epoch);
  }

  private owned(name: string): QueueRuntime {
    const q = this.queues.get(name)?.local;
    if (!q) throw new FlowError('NOT_OWNER', `queue ${name} is not served by broker ${this.cluster.id}`);
    return q;
  }

  openLink(q: ClusterQueue, h: Held): Link {
    const l = new Link(this, q, h, `${this.nextKey++}`);
    this.links.set(l.key, l);
    void l.open();
    return l;
  }

  /** Tells an owner a remote consumer is gone; its buffered deliveries are requeued there. */
  cancelRemote(l: Link, broker: number, epoch: number): void {
    if (broker < 0) return;
    const requeue = l.buffer.splice(0).filter((b) => b.epoch === epoch).map((b) => b.d.id);
    call(this.channel, broker, RPC.queueCancel, { q: l.q.def.name, k: l.key, i: this.cluster.incarnation, e: epoch, r: requeue }).catch(ignore);
  }

  // ------------------------------------------------------------- owner side

  private async onPublish(head: { q: string }, tail: Buffer): Promise<{ r: number[] }> {
    const q = this.owned(head.q);
    const msgs = unpackBuffers(tail);
    const r: number[] = [];
    const durable: Promise<void>[] = [];
    for (const m of msgs) {
      const res = q.enqueue(decodeMessage(m));
      r.push(res.rejected ? 1 : 0);
      if (res.durable) durable.push(res.durable);
    }
    await Promise.all(durable);
    return { r };
  }

  private onConsume(from: number, head: RpcRequest<typeof RPC.queueConsume>): { e: number; s: Stats } {
    const w = this.queues.get(head.q);
    const q = this.owned(head.q);
    const sk = `${from}/${head.i}/${head.k}`;
    if (!this.served.has(sk)) {
      const owner = peerOwner(from, head.i, head.o);
      const s = new Served(this, w!, from, head.i, head.k, `${from}:${head.t}`, owner, head.n, head.p, head.c);
      this.served.set(sk, s);
      this.notePeer(from, head.i, head.q, owner);
      try {
        q.consume(s, { exclusive: head.x });
      } catch (err) {
        this.served.delete(sk);
        throw err;
      }
    }
    return { e: w!.epoch, s: q.stats() };
  }

  private onCredit(from: number, head: RpcRequest<typeof RPC.queueCredit>): { ok: boolean } {
    const s = this.served.get(`${from}/${head.i}/${head.k}`);
    const q = this.queues.get(head.q)?.local;
    if (!s || !q || s.closed) return { ok: false };
    s.credit += head.n;
    q.resume(s);
    return { ok: true };
  }

  private onCancel(from: number, head: RpcRequest<typeof RPC.queueCancel>): Record<string, never> {
    const s = this.served.get(`${from}/${head.i}/${head.k}`);
    if (s) this.dropServed(s);
    const w = this.queues.get(head.q);
    if (w?.local && w.epoch === head.e) for (const id of head.r) w.local.nack(id, true).catch(ignore);
    return {};
  }

  private async onGet(from: number, head: RpcRequest<typeof RPC.queueGet>): Promise<RpcReply<typeof RPC.queueGet> | WithTail<RpcReply<typeof RPC.queueGet>>> {
    const w = this.queues.get(head.q);
    const q = this.owned(head.q);
    const owner = peerOwner(from, head.i, head.o);
    if (!head.n) this.notePeer(from, head.i, head.q, owner);
    const d = await q.get(owner, head.n);
    if (d === null) return { d: null, e: w!.epoch, s: q.stats() };
    const { msg, ...rest } = d;
    return new WithTail({ d: rest, e: w!.epoch, s: q.stats() }, encodeMessage(msg));
  }

  private async onSettle(head: RpcRequest<typeof RPC.queueSettle>): Promise<Record<string, never>> {
    const w = this.queues.get(head.q);
    // Settles of deliveries by a former owner are moot: the queue was reloaded and redelivers them.
    if (!w?.local || w.epoch !== head.e) return {};
    const q = w.local;
    await Promise.all(head.ops.map(([id, op]) => (op === 0 ? q.ack(id) : q.nack(id, op === 1)).catch(ignore)));
    return {};
  }

  private onRelease(from: number, head: RpcRequest<typeof RPC.queueRelease>): Record<string, never> {
    this.queues.get(head.q)?.local?.release(peerOwner(from, head.i, head.o));
    return {};
  }

  private notePeer(from: number, inc: string, queue: string, owner: string): void {
    const pk = `${from}/${inc}`;
    let p = this.peers.get(pk);
    if (!p) this.peers.set(pk, (p = { from, inc, owners: new Map() }));
    let set = p.owners.get(queue);
    if (!set) p.owners.set(queue, (set = new Set()));
    set.add(owner);
  }

  dropServed(s: Served): void {
    const sk = `${s.from}/${s.inc}/${s.key}`;
    if (this.served.get(sk) === s) this.served.delete(sk);
    if (s.closed) return;
    s.closed = true;
    s.queue.local?.cancel(s);
  }

  /** The queue is no longer served here: its remote consumers go (their brokers reopen them at the next owner). */
  dropServedOf(q: ClusterQueue): void {
    for (const s of [...this.served.values()]) {
      if (s.queue !== q) continue;
      s.closed = true;
      this.served.delete(`${s.from}/${s.inc}/${s.key}`);
    }
    for (const p of this.peers.values()) p.owners.delete(q.def.name);
  }

  /** Batches deliveries per peer (one request per tick). */
  outbox(s: Served, d: QueueDelivery): void {
    let box = this.boxes.get(s.from);
    if (!box) {
      this.boxes.set(s.from, (box = { items: [], bufs: [], refs: [] }));
      setImmediate(() => this.flushBox(s.from));
    }
    box.items.push({ q: d.queue, k: s.key, i: d.id, r: d.redelivered, n: d.deliveryCount, m: d.remaining, e: s.queue.epoch });
    box.bufs.push(encodeMessage(d.msg));
    box.refs.push({ s, id: d.id });
    this.stats.remoteDeliveries++;
  }

  private flushBox(to: number): void {
    const box = this.boxes.get(to);
    this.boxes.delete(to);
    if (!box || box.items.length === 0) return;
    const requeue = (idx: number[]) => {
      for (const i of idx) {
        const { s, id } = box.refs[i];
        const w = s.queue;
        if (!s.noAck && w.local && w.epoch === box.items[i].e) w.local.nack(id, true).catch(ignore);
      }
    };
    call(this.channel, to, RPC.queueDeliver, box.items, { tail: packBuffers(box.bufs) }).then(
      ({ head }) => {
        const refused = head.refuse;
        // Refused: that consumer is gone there (its cancel did not arrive): drop it, or it would take them again.
        for (const i of refused) this.dropServed(box.refs[i].s);
        requeue(refused);
      },
      () => {
        // Not delivered: requeue them, and drop those consumers (their broker reopens them if it is alive).
        for (const { s } of box.refs) this.dropServed(s);
        requeue(box.items.map((_, i) => i));
      },
    );
  }

  /** Consumer side: deliveries from an owner. */
  private onDeliver(from: number, head: QueueDeliverItem[], tail: Buffer): { refuse: number[] } {
    const bufs = unpackBuffers(tail);
    const refuse: number[] = [];
    head.forEach((it, idx) => {
      const l = this.links.get(it.k);
      if (!l || l.state === 'closed' || l.broker !== from) {
        refuse.push(idx);
        return;
      }
      l.take({ queue: it.q, id: it.i, msg: decodeMessage(bufs[idx]), redelivered: it.r, deliveryCount: it.n, remaining: it.m }, it.e);
    });
    return { refuse };
  }

  /** Owner side: the deliveries and consumers of brokers that died go back to their queues. */
  private sweep(): void {
    for (const [pk, p] of this.peers) {
      const b = this.cluster.broker(p.from);
      // Not in the view at all: too new to be there yet (or pruned long after its death).
      if (!b || (b.alive && b.incarnation === p.inc)) continue;
      this.peers.delete(pk);
      this.stats.peerReleases++;
      for (const s of [...this.served.values()]) if (s.from === p.from && s.inc === p.inc) this.dropServed(s);
      for (const [queue, owners] of p.owners) {
        const q = this.queues.get(queue)?.local;
        if (!q) continue;
        for (const o of owners) q.release(o);
      }
      this.logger.info({ broker: p.from }, 'cluster queues: a consumer broker is gone; its deliveries are requeued');
    }
  }

  /** Periodic: dead peers, and this broker's remote consumers still known at their owners. */
  private async tick(): Promise<void> {
    this.sweep();
    if (this.checking) return;
    this.checking = true;
    try {
      const byBroker = new Map<number, Link[]>();
      for (const l of [...this.links.values()]) {
        if (l.state !== 'open') continue;
        const cur = this.cluster.owner('queue', l.q.def.name);
        if ((cur && (cur.broker !== l.broker || cur.epoch !== l.epoch)) || !this.cluster.isAlive(l.broker)) {
          l.q.reopen(l);
          continue;
        }
        let list = byBroker.get(l.broker);
        if (!list) byBroker.set(l.broker, (list = []));
        list.push(l);
      }
      await Promise.all(
        [...byBroker].map(async ([broker, links]) => {
          try {
            const { head } = await call(this.channel, broker, RPC.queueCheck, { i: this.cluster.incarnation, k: links.map((l) => l.key) });
            const missing = new Set(head.missing);
            for (const l of links) if (missing.has(l.key) && l.state === 'open') l.q.reopen(l);
          } catch {
            for (const l of links) if (l.state === 'open') l.q.reopen(l);
          }
        }),
      );
    } finally {
      this.checking = false;
    }
  }
}
