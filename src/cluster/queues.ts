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
 *
 * Files: queues.ts (this one: ClusterQueues, the ownership handler, the owner's channel handlers, the catalog sync,
 * the checks of peers), cluster-queue.ts (ClusterQueue), queue-link.ts (the two ends of a remote consumer).
 */
import type { Logger } from 'pino';
import {
  CoalescingTask,
  FlowError,
  type Engine,
  type QueueDef,
  type QueueDelivery,
  type QueueFactory,
  type QueueHooks,
  type QueueRuntime,
  type QueueStore,
  type RouterCore,
} from '../core/index.js';
import type { Cluster } from './cluster.js';
import type { PeerChannel } from './types.js';
import { call, listen, RPC, serve, WithTail, type QueueDeliverItem, type RpcReply, type RpcRequest } from './rpc.js';
import { decodeMessage, encodeMessage, packBuffers, unpackBuffers } from './wire.js';
import { type Held, ignore, Link, peerOwner, Served, type Stats } from './queue-link.js';
import { ClusterQueue, type QueueHub } from './cluster-queue.js';

/** One broker's part in cluster queues: the 'queue' ownership handler, the channel handlers, the catalog sync. */
export class ClusterQueues implements QueueHub {
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
  private readonly boxes = new Map<
    number,
    { items: Array<{ k: string; i: number; r: boolean; n: number; m: number; e: number; q: string }>; bufs: Buffer[]; refs: Array<{ s: Served; id: number }> }
  >();
  private readonly syncTask: CoalescingTask;
  private timer: NodeJS.Timeout | null = null;
  private checking = false;
  readonly stats = { forwarded: 0, forwardedBatches: 0, remoteDeliveries: 0, reopened: 0, peerReleases: 0, syncs: 0, duplicates: 0 };
  /** The next forwarded publish's sequence (forwardSeqs). */
  private nextSeq = 0;

  constructor(
    readonly cluster: Cluster,
    private readonly logger: Logger,
  ) {
    this.syncTask = new CoalescingTask(async () => {
      this.stats.syncs++;
      await this.router.sync();
    });
  }

  forwardSeqs(count: number): { src: string; seq: number } {
    const seq = this.nextSeq;
    this.nextSeq += count;
    return { src: `${this.cluster.id}/${this.cluster.incarnation}`, seq };
  }

  /** The engine's local queue runtime (see QueueHub.localQueue). */
  readonly localQueue: QueueFactory = (def, store, hooks) => {
    const f = this.router.queueFactory;
    if (f === undefined) throw new FlowError('INVALID_ARGUMENT', 'this engine has no queue runtime');
    return f(def, store, hooks);
  };

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
        this.cluster.store
          .notify('queues', this.cluster.incarnation)
          .catch((err: unknown) => this.logger.warn({ err }, 'cluster queues: cannot announce a catalog change'));
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
    return {
      ...this.stats,
      queues: this.queues.size,
      owned: [...this.queues.values()].filter((q) => q.local).length,
      links: this.links.size,
      served: this.served.size,
    };
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
    const requeue = l.buffer
      .splice(0)
      .filter((b) => b.epoch === epoch)
      .map((b) => b.d.id);
    call(this.channel, broker, RPC.queueCancel, { q: l.q.def.name, k: l.key, i: this.cluster.incarnation, e: epoch, r: requeue }).catch(ignore);
  }

  // ------------------------------------------------------------- owner side

  /**
   * Publishes forwarded by another broker, numbered `n`, `n + 1`, ... by it (`f`, a broker's life; absent from a
   * broker of channel version 4 or older): one at or below the highest number of `f` this queue stored (a retry
   * after a lost reply, also to the next owner, which read the numbers from the store) is answered as taken and not
   * enqueued again. The number goes to the store with the message (QueueMark).
   */
  private async onPublish(head: { q: string; f?: string; n?: number }, tail: Buffer): Promise<{ r: number[] }> {
    const q = this.owned(head.q);
    const msgs = unpackBuffers(tail);
    const r: number[] = [];
    const durable: Promise<void>[] = [];
    const { f, n } = head;
    const stored = f !== undefined && n !== undefined ? (q.marked?.(f) ?? -1) : -1;
    for (let i = 0; i < msgs.length; i++) {
      const m = msgs[i];
      if (f !== undefined && n !== undefined && n + i <= stored) {
        this.stats.duplicates++;
        r.push(0);
        continue;
      }
      // A retry whose first copy is still being written here (the first request broke off): answered with that write.
      const first = f !== undefined && n !== undefined ? q.writing?.(f, n + i) : undefined;
      if (first !== undefined) {
        this.stats.duplicates++;
        r.push(0);
        durable.push(first);
        continue;
      }
      const res = q.enqueue(decodeMessage(m), f !== undefined && n !== undefined ? { src: f, seq: n + i } : undefined);
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
