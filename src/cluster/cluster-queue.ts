/**
 * A persisted queue in cluster mode as this broker's router and adapters see it (`ClusterQueue`; see queues.ts for
 * the design): the same object whether the queue is served here (it drives a local Queue and its consumers attach
 * to it) or elsewhere (publishes forwarded to the owner in batches, consumers as links, basic.get, settles, purge
 * and delete as requests to the owner), with this broker's own delivery ids, and the ownership coming and going.
 */
import {
  FlowError,
  type Message,
  type QueueConsumer,
  type QueueDef,
  type QueueDelivery,
  type QueueFactory,
  type QueueHooks,
  type QueueRuntime,
  type QueueStore,
} from '../core/index.js';
import type { Cluster } from './cluster.js';
import { call, RPC } from './rpc.js';
import { decodeMessage, encodeMessage, packBuffers } from './wire.js';
import { type Held, ignore, Link, type LinkHub, type LinkQueue, MAX_BATCH, retriable, RETRY_MS, sleep, type Stats } from './queue-link.js';

/** The cluster queues hub (ClusterQueues, queues.ts) as a cluster queue sees it. */
export interface QueueHub extends LinkHub {
  readonly queues: Map<string, ClusterQueue>;
  /** The engine's queue runtime factory (its memory window from the broker's options). */
  readonly localQueue: QueueFactory;
  readonly stats: { forwarded: number; forwardedBatches: number; reopened: number };
  openLink(q: ClusterQueue, h: Held): Link;
  dropServedOf(q: ClusterQueue): void;
  /**
   * Numbers `count` forwarded publishes: the first of `count` consecutive sequences of this broker's life (one counter
   * for all queues), and the life's name (`src`): the owner stores the last with the messages (QueueMark) and takes a
   * retried one at or below it for a duplicate.
   */
  forwardSeqs(count: number): { src: string; seq: number };
}

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
/** A non-owner's counts of a queue older than this are asked of its owner again when read (ClusterQueue.stats). */
const STATS_STALE_MS = 2000;

export class ClusterQueue implements QueueRuntime, LinkQueue {
  local: QueueRuntime | null = null;
  epoch = 0;
  readonly consumers = new Map<QueueConsumer, Held>();
  /** Deliveries not settled yet, by the id the adapter was given. */
  private readonly outs = new Map<number, Out>();
  private nextDid = 1;
  cached: Stats = { ready: 0, unacked: 0, bytes: 0, consumers: 0 };
  /** When `cached` was last asked of the owner, and the ask under way (stats(), refresh()). */
  private refreshedAt = 0;
  private refreshing: Promise<void> | null = null;
  private pending: Pending[] = [];
  private forwarding = false;
  private settles: Array<{ o: Out; op: number; resolve(): void }> = [];
  private closed = false;
  private destroyed = false;
  private owning: Promise<void> | null = null;

  constructor(
    private readonly cq: QueueHub,
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
      const q = this.cq.localQueue(this.def, this.store, this.hooks);
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

  /**
   * At the owner, its counts; elsewhere the last ones asked of the owner, asked again in the background when they are
   * older than STATS_STALE_MS (metrics, the RabbitMQ management API's overview); those who must not show old counts
   * await refresh() first (a declare-ok, the admin API's queues).
   */
  stats(): Stats {
    if (this.local) return this.local.stats();
    if (Date.now() - this.refreshedAt > STATS_STALE_MS) this.refresh().catch(() => undefined);
    return this.cached;
  }

  /** Asks the owner for the queue's counts (one ask at a time; the callers meanwhile wait for it). */
  refresh(): Promise<void> {
    if (this.local) return Promise.resolve();
    this.refreshing ??= (async () => {
      try {
        const owner = this.cluster.owner('queue', this.def.name) ?? (await this.cluster.lookup('queue', this.def.name));
        if (!owner || owner.broker === this.cluster.id) return;
        // Counts for a declare-ok: not worth holding the client up while the owner moves.
        this.cached = (await call(this.cq.channel, owner.broker, RPC.queueStats, { q: this.def.name }, { timeoutMs: 1000 })).head.s;
      } finally {
        this.refreshedAt = Date.now();
        this.refreshing = null;
      }
    })();
    return this.refreshing;
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
    const reply = await this.toOwner(
      async (q) => {
        const d = await q.get(owner, noAck);
        return d && this.translate(d, owner, noAck, this.cluster.id, this.epoch);
      },
      async (broker) => {
        const r = await call(this.cq.channel, broker, RPC.queueGet, { q: this.def.name, o: owner, n: noAck, i: this.cluster.incarnation });
        this.cached = r.head.s;
        if (r.head.d === null) return null;
        return this.translate({ ...r.head.d, msg: decodeMessage(r.tail) }, owner, noAck, broker, r.head.e);
      },
    );
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
    // Numbered once: a retry (the owner died or its reply was lost after it stored them) carries the same numbers.
    const { src, seq } = this.cq.forwardSeqs(batch.length);
    try {
      await this.toOwner(
        async (q) => {
          // This broker took the queue meanwhile: what its last owner stored of the batch is not enqueued again.
          const stored = q.marked?.(src) ?? -1;
          for (let i = 0; i < batch.length; i++) {
            const b = batch[i];
            if (seq + i <= stored) {
              b.resolve();
              continue;
            }
            const r = q.enqueue(decodeMessage(b.data), { src, seq: seq + i });
            if (r.rejected) b.reject(new FlowError('LIMIT_EXCEEDED', `queue ${this.def.name} is full (x-overflow reject-publish)`));
            else if (r.durable) r.durable.then(b.resolve, b.reject);
            else b.resolve();
          }
        },
        async (broker) => {
          this.cq.stats.forwarded += batch.length;
          this.cq.stats.forwardedBatches++;
          const { r } = (
            await call(this.cq.channel, broker, RPC.queuePublish, { q: this.def.name, f: src, n: seq }, { tail: packBuffers(batch.map((b) => b.data)) })
          ).head;
          batch.forEach((b, i) =>
            r[i] === 1 ? b.reject(new FlowError('LIMIT_EXCEEDED', `queue ${this.def.name} is full (x-overflow reject-publish)`)) : b.resolve(),
          );
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
