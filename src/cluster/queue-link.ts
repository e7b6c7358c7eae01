/**
 * Cluster queues (see queues.ts for the design): the two ends of a remote consumer. `Link` is this broker's client
 * consuming a queue owned elsewhere (opened at the owner with `queue.consume`, deliveries buffered within the
 * credit it grants with `queue.credit`, reopened when the owner moves); `Served` is another broker's client as
 * the owner's queue sees it (its deliveries go to that broker's outbox). Also the helpers the cluster queue files
 * share.
 */
import { FlowError, type QueueConsumer, type QueueDef, type QueueDelivery, type QueueRuntime } from '../core/index.js';
import type { Cluster } from './cluster.js';
import type { PeerChannel } from './types.js';
import { call, cast, RPC } from './rpc.js';

/**
 * Deliveries a remote consumer may receive ahead of its broker handing them to the client: the consumer's own
 * prefetch when it has one (an AMQP consumer's basic.qos; at most MAX_WINDOW), else DEFAULT_WINDOW.
 */
export const DEFAULT_WINDOW = 64;
export const MAX_WINDOW = 1000;

export function windowOf(c: QueueConsumer): number {
  const p = (c as { prefetch?: unknown }).prefetch;
  return typeof p === 'number' && p > 0 ? Math.min(p, MAX_WINDOW) : DEFAULT_WINDOW;
}
/** Pause between attempts while a queue has no reachable owner. */
export const RETRY_MS = 100;
/** Messages per forwarded publish batch. */
export const MAX_BATCH = 512;

export type Stats = { ready: number; unacked: number; bytes: number; consumers: number };

export function retriable(err: unknown): boolean {
  return err instanceof FlowError && (err.code === 'NOT_OWNER' || err.code === 'UNAVAILABLE' || err.code === 'FENCED' || err.code === 'CLOSED');
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref?.());
}

export function ignore(): void {
  // A settle nobody waits for: the owner requeues what it does not hear about.
}

/** Who holds a delivery at the owner, for a client of another broker. */
export function peerOwner(from: number, inc: string, owner: string): string {
  return `peer/${from}/${inc}/${owner}`;
}

/** The cluster queues hub (ClusterQueues, queues.ts) as the links and served consumers see it. */
export interface LinkHub {
  readonly cluster: Cluster;
  readonly channel: PeerChannel;
  readonly links: Map<string, Link>;
  cancelRemote(l: Link, broker: number, epoch: number): void;
  outbox(s: Served, d: QueueDelivery): void;
  dropServed(s: Served): void;
}

/** A cluster queue (ClusterQueue, cluster-queue.ts) as its links and served consumers see it. */
export interface LinkQueue {
  readonly def: QueueDef;
  readonly local: QueueRuntime | null;
  readonly epoch: number;
  cached: Stats;
  readonly consumers: Map<QueueConsumer, Held>;
  translate(d: QueueDelivery, owner: string, noAck: boolean, broker: number, epoch: number): QueueDelivery;
  reopen(l: Link): void;
}

// ---------------------------------------------------------------------------------------------------------------
// owner side: a consumer of another broker

export class Served implements QueueConsumer {
  closed = false;
  constructor(
    readonly cq: LinkHub,
    readonly queue: LinkQueue,
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

export interface Held {
  c: QueueConsumer;
  exclusive: boolean;
  /** Owned here: the consumer as the local queue sees it. */
  shim: QueueConsumer | null;
  /** Owned elsewhere: the remote consumer. */
  link: Link | null;
}

export class Link {
  state: 'opening' | 'open' | 'closed' = 'opening';
  broker = -1;
  epoch = 0;
  outstanding = 0;
  granting = false;
  readonly buffer: Array<{ d: QueueDelivery; epoch: number }> = [];
  private readonly window: number;
  constructor(
    readonly cq: LinkHub,
    readonly q: LinkQueue,
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
