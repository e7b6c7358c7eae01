/**
 * The runtime of one queue: ready / unacked state, competing consumers, acks and redelivery, TTL, length limits,
 * dead-lettering (through the router's hooks) and the bounded memory window over its QueueStore.
 *
 * Memory: ready messages live in a min-heap by id (the "window"); once the window is full (by count or bytes) new
 * messages of a durable queue go to the store only and are counted as "beyond" the window. When the window runs
 * low, the next messages are read from the store in id order (everything in the store above `nextLoadId` is
 * ready and beyond the window). Requeued messages have ids below that point, so they go back into the heap and
 * come out ahead of newer ones: merge by id. Every operation is O(log n) in the window (heap) or O(1).
 *
 * Non-durable queues (and exclusive ones: neither survives a restart) page the same way when the broker gives them a
 * page store (QueuePaging: the local queue store under a key of their own, which a restart sweeps away): only the
 * messages beyond the window are written there, and no publisher confirm waits for them. Without one they hold
 * every message in memory.
 *
 * Store writes are issued in the order they happen (the QueueStore keeps per-queue order): an append at
 * enqueue, setDeliveries at a requeue, removes (batched per tick) at ack / drop. A delivery never waits for the
 * store: a message can be delivered before its append is durable, as RabbitMQ does; the publisher's confirm
 * waits for `durable`.
 *
 * Expiry (x-message-ttl and per-message expiresAt) follows RabbitMQ: an expired message is dropped or
 * dead-lettered when it reaches the head of the queue, so one timer per queue (for the head's expiry) suffices;
 * an expired message behind a live one waits until it reaches the head (it is never delivered, though).
 */
import { FlowError } from './errors.js';
import type { DeathRecord, Message } from './message.js';
import type { EnqueueResult, QueueConsumer, QueueDef, QueueDelivery, QueueHooks, QueueMark, QueueRuntime, QueueStore } from './queues.js';
import { deadLettered } from './queue-dead-letter.js';
import { DEFAULT_QUEUE_WINDOW, IdHeap, type Entry, type QueuePages, type QueuePaging, type QueueWindowOptions } from './queue-window.js';
import { decodeStoredMessage, encodeStoredMessage } from './sessions.js';

export { DEFAULT_QUEUE_WINDOW, type QueuePages, type QueuePaging, type QueueWindowOptions } from './queue-window.js';

export class Queue implements QueueRuntime {
  readonly def: QueueDef;
  /** The queue's durable store, or its page store (paging), or null: everything in memory. */
  private readonly store: QueueStore | null;
  /** Its key in `store`: the queue's name, or the page key of this runtime. */
  private readonly key: string;
  /** `store` holds pages of a non-durable queue: only messages beyond the window, nothing recovered at open. */
  private readonly paging: boolean;
  /** Paging: something was written under `key` (destroy drops it then, and only then). */
  private paged = false;
  private readonly hooks: QueueHooks;
  private readonly win: QueueWindowOptions;
  private readonly name: string;

  private nextId = 1;
  private readonly heap = new IdHeap();
  private heapBytes = 0;
  /** Ready messages in the store only (above the window), and their payload bytes. */
  private beyond = 0;
  private beyondBytes = 0;
  /** Everything in the store with id >= nextLoadId is ready and beyond the window. */
  private nextLoadId = 1;
  private loading = false;
  /** Bumped by purge / destroy so a read in flight does not bring back what they removed. */
  private generation = 0;
  /** Ids at or below it were recovered from the store at open(): redelivered when delivered. */
  private recoveredMaxId = 0;
  /** Cluster mode: per forwarding broker, the highest sequence of its publishes stored here (see marked()). */
  private readonly marks = new Map<string, number>();
  /** Cluster mode: the writes of marked publishes in flight, per forwarding broker and sequence (see writing()). */
  private readonly markWrites = new Map<string, Map<number, Promise<void>>>();
  /** Enqueue times of messages appended beyond the window: [first id, ms] checkpoints, at most one per 100 ms. */
  private readonly enqueueTimes: number[] = [];

  private readonly unacked = new Map<number, Entry>();
  private readonly byOwner = new Map<string, Set<Entry>>();

  /** Consumers by priority (higher first), stable in registration order. */
  private consumers: QueueConsumer[] = [];
  private rr = -1;
  private exclusiveConsumer = false;
  private active: QueueConsumer | null = null;
  private hadConsumer = false;
  private dispatching = false;
  private redispatch = false;

  private pendingRemoves: number[] = [];
  /** The promise of the pending remove batch and how to settle it. */
  private removesDone: Promise<void> | null = null;
  private removesSettle: ((p: Promise<void>) => void) | null = null;

  private ttlTimer: NodeJS.Timeout | null = null;
  private ttlTimerAt = Infinity;
  private expiresTimer: NodeJS.Timeout | null = null;
  private lastUsed = Date.now();
  private closed = false;
  private destroyed = false;

  constructor(def: QueueDef, store: QueueStore | null, hooks: QueueHooks, win: QueueWindowOptions = DEFAULT_QUEUE_WINDOW, paging?: QueuePaging) {
    this.def = def;
    this.name = def.name;
    if (def.durable && store !== null) {
      this.store = store;
      this.key = def.name;
      this.paging = false;
    } else {
      this.store = paging?.store ?? null;
      this.key = paging?.key ?? def.name;
      this.paging = paging !== undefined;
    }
    this.hooks = hooks;
    this.win = win;
    this.onTtlTimer = this.onTtlTimer.bind(this);
    this.onExpiresTimer = this.onExpiresTimer.bind(this);
    this.flushRemoves = this.flushRemoves.bind(this);
  }

  // ---------------------------------------------------------------------------------------------------------
  // lifecycle

  async open(): Promise<void> {
    if (this.store && !this.paging) {
      const r = await this.store.openQueue(this.key);
      this.nextId = r.maxId + 1;
      this.recoveredMaxId = r.maxId;
      for (const [src, seq] of Object.entries(r.marks ?? {})) this.marks.set(src, seq);
      this.nextLoadId = 1;
      this.beyond = r.count;
      // The store counts encoded bytes, the queue payload bytes: each recovered message's share is swapped for
      // its payload size when it loads (onLoaded).
      this.beyondBytes = r.bytes;
      if (r.count > 0) await this.load();
    }
    this.armExpires();
  }

  close(): void {
    this.closed = true;
    this.clearTimers();
  }

  private clearTimers(): void {
    if (this.ttlTimer) clearTimeout(this.ttlTimer);
    this.ttlTimer = null;
    this.ttlTimerAt = Infinity;
    if (this.expiresTimer) clearTimeout(this.expiresTimer);
    this.expiresTimer = null;
  }

  /**
   * Message counts since the queue opened in this process (not persisted), for the RabbitMQ management API's
   * message_stats: publish (enqueued), deliver / deliver_no_ack (to consumers), get / get_no_ack (basic.get and
   * the like; get_empty: found nothing), redeliver (deliveries of a message delivered before), ack. Plain increments on paths that run anyway.
   */
  readonly counters = { publish: 0, deliver: 0, deliverNoAck: 0, get: 0, getNoAck: 0, getEmpty: 0, redeliver: 0, ack: 0 };

  stats(): { ready: number; unacked: number; bytes: number; consumers: number } {
    return { ready: this.heap.size + this.beyond, unacked: this.unacked.size, bytes: this.heapBytes + this.beyondBytes, consumers: this.consumers.length };
  }

  /** Window figures, for tests and the admin API. */
  windowStats(): { inMemory: number; inMemoryBytes: number; beyond: number } {
    return { inMemory: this.heap.size, inMemoryBytes: this.heapBytes, beyond: this.beyond };
  }

  async purge(): Promise<number> {
    const n = this.heap.size + this.beyond;
    const ready = this.heap.clear();
    this.heapBytes = 0;
    this.generation++;
    const hadBeyond = this.beyond > 0;
    this.beyond = 0;
    this.beyondBytes = 0;
    this.loading = false;
    this.loadPromise = null;
    this.enqueueTimes.length = 0;
    if (!this.store || (this.paging && !this.paged)) return n;
    if (this.unacked.size === 0) {
      // Nothing in the store needs keeping: one call, whatever the length.
      const flushed = this.flushRemoves();
      await this.store.purge(this.key);
      await flushed;
      this.nextLoadId = this.nextId;
      return n;
    }
    // Unacked messages must survive the purge (they may still be nacked back); remove the ready ones by id.
    for (const e of ready) if (e.stored) this.pendingRemoves.push(e.id);
    const from = this.nextLoadId;
    const until = this.nextId;
    this.nextLoadId = until;
    const done = this.flushRemoves();
    if (hadBeyond) {
      // Everything stored in [from, until) was ready beyond the window.
      let cursor = from;
      for (;;) {
        const rows = await this.store.read(this.key, cursor, 1000);
        const ids = rows.filter((r) => r.id < until).map((r) => r.id);
        if (ids.length) await this.store.remove(this.key, ids);
        if (rows.length < 1000 || rows[rows.length - 1].id >= until) break;
        cursor = rows[rows.length - 1].id + 1;
      }
    }
    await done;
    return n;
  }

  async destroy(): Promise<number> {
    const n = this.heap.size + this.beyond;
    this.destroyed = true;
    this.closed = true;
    this.clearTimers();
    this.generation++;
    this.heap.clear();
    this.heapBytes = this.beyond = this.beyondBytes = 0;
    const cs = this.consumers;
    this.consumers = [];
    this.active = null;
    for (const c of cs) {
      try {
        c.cancelled?.('queue deleted');
      } catch {
        // A consumer's notification must not stop the deletion.
      }
    }
    this.unacked.clear();
    this.byOwner.clear();
    this.pendingRemoves = [];
    if (this.store && (!this.paging || this.paged)) await this.store.dropQueue(this.key);
    return n;
  }

  // ---------------------------------------------------------------------------------------------------------
  // publish side

  marked(src: string): number {
    return this.marks.get(src) ?? -1;
  }

  writing(src: string, seq: number): Promise<void> | undefined {
    return this.markWrites.get(src)?.get(seq);
  }

  /**
   * The mark is noted once the message carrying it is durable (a failed write leaves it to the retry); until then
   * its write is what a retry of the same publish waits for (writing()).
   */
  private noteMark(mark: QueueMark, durable: Promise<void>): void {
    let writes = this.markWrites.get(mark.src);
    if (writes === undefined) this.markWrites.set(mark.src, (writes = new Map<number, Promise<void>>()));
    writes.set(mark.seq, durable);
    const settled = (): void => {
      const w = this.markWrites.get(mark.src);
      if (w?.get(mark.seq) !== durable) return;
      w.delete(mark.seq);
      if (w.size === 0) this.markWrites.delete(mark.src);
    };
    durable.then(() => {
      if (mark.seq > (this.marks.get(mark.src) ?? -1)) this.marks.set(mark.src, mark.seq);
      settled();
    }, settled);
  }

  enqueue(msg: Message, mark?: QueueMark): EnqueueResult {
    if (this.destroyed) throw new FlowError('NOT_FOUND', `queue ${this.name} was deleted`);
    const bytes = msg.payload.length;
    const a = this.def.arguments;
    const now = Date.now();
    if (a.maxLength !== undefined || a.maxLengthBytes !== undefined) {
      const ready = this.heap.size + this.beyond;
      const readyBytes = this.heapBytes + this.beyondBytes;
      const over = (a.maxLength !== undefined && ready + 1 > a.maxLength) || (a.maxLengthBytes !== undefined && readyBytes + bytes > a.maxLengthBytes);
      if (over && (a.overflow === 'reject-publish' || a.overflow === 'reject-publish-dlx')) {
        if (a.overflow === 'reject-publish-dlx') void this.deadLetter(msg, 'maxlen');
        return { durable: null, rejected: true };
      }
    }
    const id = this.nextId++;
    this.counters.publish++;
    const ttlAt = a.messageTtlMs !== undefined ? now + a.messageTtlMs : Infinity;
    const expiresAt = msg.expiresAt !== undefined && msg.expiresAt < ttlAt ? msg.expiresAt : ttlAt;
    let durable: Promise<void> | null = null;
    let written: Promise<void> | undefined;
    const store = this.store;
    const persistent = msg.persistent !== false;
    // A durable queue whose window is full (or already has messages beyond it) takes new messages into the store
    // only, transient ones too; otherwise in memory. A transient message that went to the store survives a restart
    // like a persistent one (AMQP lets a server keep a transient message; it only need not): dropping it at recovery
    // would leave the store's count above the queue's real length until it was read back, and length limits would
    // then drop confirmed persistent messages for it. Its publisher is not made to wait for the write.
    const toStoreOnly =
      store !== null && (this.beyond > 0 || this.loading || this.heap.size >= this.win.maxMessages || this.heapBytes + bytes > this.win.maxBytes);
    if (toStoreOnly) {
      const p = store.append(this.key, [{ id, data: encodeStoredMessage(msg) }], mark);
      if (mark !== undefined) this.noteMark(mark, p);
      // A page of a non-durable queue is no promise of durability: it is counted as a transient message's write.
      const confirms = persistent && !this.paging;
      this.paged ||= this.paging;
      durable = confirms ? p : null;
      if (!confirms) {
        p.catch(ignore);
        written = p;
      }
      this.beyond++;
      this.beyondBytes += bytes;
      if (expiresAt !== Infinity) this.noteEnqueueTime(id, now);
    } else {
      let stored = false;
      if (store !== null && persistent && !this.paging) {
        durable = store.append(this.key, [{ id, data: encodeStoredMessage(msg) }], mark);
        if (mark !== undefined) this.noteMark(mark, durable);
        stored = true;
      }
      this.nextLoadId = id + 1;
      const e: Entry = { id, msg, bytes, deliveries: 0, redelivered: false, expiresAt, stored, owner: null };
      this.heap.push(e);
      this.heapBytes += bytes;
      if (expiresAt !== Infinity && this.heap.peek() === e) this.armTtl(expiresAt);
    }
    if (a.maxLength !== undefined || a.maxLengthBytes !== undefined) this.enforceLimits();
    // With the enqueue's own clock, so that a message with x-message-ttl 0 reaches a consumer ready for it (as in
    // RabbitMQ: TTL 0 expires a message unless it can be delivered at once).
    if (this.consumers.length > 0) this.dispatch(now);
    return written === undefined ? { durable, rejected: false } : { durable, rejected: false, written };
  }

  /** Remembers when messages beyond the window were enqueued (for x-message-ttl when they load). */
  private noteEnqueueTime(id: number, now: number): void {
    const t = this.enqueueTimes;
    if (t.length === 0 || now - t[t.length - 1] >= 100) t.push(id, now);
  }

  private enqueueTimeOf(id: number): number | undefined {
    const t = this.enqueueTimes;
    // Drop checkpoints wholly below id (ids load in increasing order).
    while (t.length >= 4 && t[2] <= id) t.splice(0, 2);
    return t.length >= 2 && t[0] <= id ? t[1] : undefined;
  }

  /** drop-head: the oldest ready messages go (dead-lettered 'maxlen') until the queue is within its limits. */
  private enforceLimits(): void {
    const a = this.def.arguments;
    for (;;) {
      const ready = this.heap.size + this.beyond;
      const readyBytes = this.heapBytes + this.beyondBytes;
      const over = (a.maxLength !== undefined && ready > a.maxLength) || (a.maxLengthBytes !== undefined && readyBytes > a.maxLengthBytes);
      if (!over) return;
      const e = this.heap.pop();
      if (!e) {
        // The head is in the store: load it, then enforce again (onLoaded).
        this.maybeLoad(true);
        return;
      }
      this.heapBytes -= e.bytes;
      void this.drop(e, 'maxlen');
    }
  }

  // ---------------------------------------------------------------------------------------------------------
  // consume side

  consume(c: QueueConsumer, opts?: { exclusive?: boolean }): void {
    if (this.destroyed) throw new FlowError('NOT_FOUND', `queue ${this.name} was deleted`);
    if (this.exclusiveConsumer || (opts?.exclusive && this.consumers.length > 0)) {
      throw new FlowError('RESOURCE_LOCKED', `queue ${this.name} has an exclusive consumer`);
    }
    for (const o of this.consumers) if (o.tag === c.tag) throw new FlowError('PRECONDITION_FAILED', `consumer tag ${c.tag} is in use on queue ${this.name}`);
    if (opts?.exclusive) this.exclusiveConsumer = true;
    const p = c.priority ?? 0;
    let i = this.consumers.length;
    while (i > 0 && (this.consumers[i - 1].priority ?? 0) < p) i--;
    this.consumers.splice(i, 0, c);
    if (i <= this.rr) this.rr++;
    this.hadConsumer = true;
    this.touch();
    if (this.def.arguments.singleActiveConsumer && this.active === null) this.active = c;
    this.dispatch();
  }

  cancel(c: QueueConsumer): void {
    const i = this.consumers.indexOf(c);
    if (i < 0) return;
    this.consumers.splice(i, 1);
    if (i <= this.rr) this.rr--;
    if (this.consumers.length === 0) this.exclusiveConsumer = false;
    if (this.active === c) {
      // Single active consumer: the next one (highest priority, then oldest) takes over.
      this.active = this.consumers[0] ?? null;
      this.dispatch();
    }
    if (this.consumers.length === 0) {
      this.touch();
      this.armExpires();
      if (this.def.autoDelete && this.hadConsumer && !this.destroyed) queueMicrotask(() => this.autoDelete());
    }
  }

  private autoDelete(): void {
    if (this.consumers.length === 0 && !this.destroyed && !this.closed) this.hooks.expire(this.def, 'auto-delete');
  }

  resume(_c: QueueConsumer): void {
    if (this.heap.size > 0 || this.beyond > 0) this.dispatch();
  }

  async get(owner: string, noAck: boolean): Promise<QueueDelivery | null> {
    if (this.destroyed) throw new FlowError('NOT_FOUND', `queue ${this.name} was deleted`);
    this.touch();
    this.armExpires();
    for (;;) {
      const e = this.takeHead();
      if (e) {
        if (noAck) this.counters.getNoAck++;
        else this.counters.get++;
        return this.deliverEntry(e, owner, noAck);
      }
      if (this.beyond === 0 || !this.store) {
        this.counters.getEmpty++;
        return null;
      }
      await this.load();
    }
  }

  ack(id: number): Promise<void> {
    const e = this.unacked.get(id);
    // After a delete the queue's deliveries are gone with it: acking them is not an error (as RabbitMQ).
    if (!e && this.destroyed) return Promise.resolve();
    if (!e) return Promise.reject(new FlowError('PRECONDITION_FAILED', `queue ${this.name}: no unacked delivery ${id}`));
    this.forgetUnacked(e);
    this.counters.ack++;
    if (!e.stored) return Promise.resolve();
    return this.removeStored(e.id);
  }

  async nack(id: number, requeue: boolean): Promise<void> {
    const e = this.unacked.get(id);
    if (!e && this.destroyed) return;
    if (!e) throw new FlowError('PRECONDITION_FAILED', `queue ${this.name}: no unacked delivery ${id}`);
    this.forgetUnacked(e);
    if (requeue) {
      this.requeue(e);
      this.dispatch();
      return;
    }
    const p = this.drop(e, 'rejected');
    if (p) await p;
  }

  release(owner: string): void {
    const set = this.byOwner.get(owner);
    if (!set) return;
    this.byOwner.delete(owner);
    for (const e of set) {
      this.unacked.delete(e.id);
      e.owner = null;
      this.requeue(e);
    }
    this.dispatch();
  }

  /** Marks the queue used (x-expires): a consumer, a basic.get or a re-declare. */
  touch(): void {
    this.lastUsed = Date.now();
  }

  private forgetUnacked(e: Entry): void {
    this.unacked.delete(e.id);
    const set = e.owner !== null ? this.byOwner.get(e.owner) : undefined;
    if (set) {
      set.delete(e);
      if (set.size === 0) this.byOwner.delete(e.owner as string);
    }
    e.owner = null;
  }

  /** Back to ready, ahead of newer messages; dead-lettered instead past x-delivery-limit. */
  private requeue(e: Entry): void {
    const limit = this.def.arguments.deliveryLimit;
    if (limit !== undefined && e.deliveries > limit) {
      void this.drop(e, 'delivery_limit');
      return;
    }
    e.redelivered = true;
    if (e.stored && this.store) this.store.setDeliveries(this.key, e.id, e.deliveries).catch(ignore);
    this.heap.push(e);
    this.heapBytes += e.bytes;
    if (e.expiresAt !== Infinity && this.heap.peek() === e) this.armTtl(e.expiresAt);
  }

  /** The head of the ready heap, dropping / dead-lettering expired heads on the way; null when the heap is empty. */
  private takeHead(now: number = Date.now()): Entry | null {
    for (;;) {
      const e = this.heap.pop();
      if (!e) {
        this.maybeLoad(false);
        return null;
      }
      this.heapBytes -= e.bytes;
      // Expired once its time has passed: a message expiring this very millisecond is still delivered.
      if (e.expiresAt < now) {
        void this.drop(e, 'expired');
        continue;
      }
      const head = this.heap.peek();
      if (head !== undefined && head.expiresAt < this.ttlTimerAt) this.armTtl(head.expiresAt);
      return e;
    }
  }

  private dispatch(now: number = Date.now()): void {
    if (this.dispatching) {
      this.redispatch = true;
      return;
    }
    if (this.closed) return;
    this.dispatching = true;
    try {
      do {
        this.redispatch = false;
        while (this.heap.size > 0) {
          const c = this.pick();
          if (c === null) break;
          const e = this.takeHead(now);
          if (e === null) break;
          if (c.noAck) this.counters.deliverNoAck++;
          else this.counters.deliver++;
          c.deliver(this.deliverEntry(e, c.owner, c.noAck));
        }
      } while (this.redispatch);
    } finally {
      this.dispatching = false;
    }
    this.maybeLoad(false);
    const head = this.heap.peek();
    if (head && head.expiresAt !== Infinity) this.armTtl(head.expiresAt);
  }

  /** The next consumer with credit: highest priority first, round-robin within a priority. */
  private pick(): QueueConsumer | null {
    if (this.active !== null) return this.active.hasCredit() ? this.active : null;
    const cs = this.consumers;
    const n = cs.length;
    let i = 0;
    while (i < n) {
      const p = cs[i].priority ?? 0;
      let j = i + 1;
      while (j < n && (cs[j].priority ?? 0) === p) j++;
      const len = j - i;
      const start = this.rr >= i && this.rr < j ? this.rr + 1 - i : 0;
      for (let k = 0; k < len; k++) {
        const idx = i + ((start + k) % len);
        if (cs[idx].hasCredit()) {
          this.rr = idx;
          return cs[idx];
        }
      }
      i = j;
    }
    return null;
  }

  private deliverEntry(e: Entry, owner: string, noAck: boolean): QueueDelivery {
    if (e.deliveries > 0 || e.redelivered) this.counters.redeliver++;
    e.deliveries++;
    const d: QueueDelivery = {
      queue: this.name,
      id: e.id,
      msg: e.msg,
      redelivered: e.redelivered,
      deliveryCount: e.deliveries,
      remaining: this.heap.size + this.beyond,
    };
    if (noAck) {
      if (e.stored) void this.removeStored(e.id);
    } else {
      e.owner = owner;
      this.unacked.set(e.id, e);
      let set = this.byOwner.get(owner);
      if (!set) {
        set = new Set();
        this.byOwner.set(owner, set);
      }
      set.add(e);
    }
    return d;
  }

  // ---------------------------------------------------------------------------------------------------------
  // drops and dead letters

  /**
   * Removes a message for good: dead-lettered when the queue has a dead-letter exchange (its stored copy goes once
   * the dead-lettered one is durable, so a crash in between delivers it twice rather than never; when the dead-letter
   * publish fails the message is dropped, as RabbitMQ's at-most-once dead-lettering does), else dropped.
   */
  private drop(e: Entry, reason: DeathRecord['reason']): Promise<void> | null {
    const p = this.def.arguments.deadLetterExchange !== undefined ? this.deadLetter(e.msg, reason) : null;
    if (!e.stored) return p;
    if (p === null) return this.removeStored(e.id);
    const id = e.id;
    const done = p.then(
      () => this.removeStored(id),
      () => this.removeStored(id),
    );
    done.catch(ignore);
    return done;
  }

  private deadLetter(msg: Message, reason: DeathRecord['reason']): Promise<void> | null {
    const a = this.def.arguments;
    if (a.deadLetterExchange === undefined) return null;
    const out = deadLettered(msg, this.name, reason, a.deadLetterRoutingKey, Date.now());
    let p: Promise<void> | null;
    try {
      p = this.hooks.deadLetter(this.def, out, reason);
    } catch {
      return null;
    }
    // Most callers (expiry, drop-head) do not wait; nack does and still sees a failure.
    p?.catch(ignore);
    return p;
  }

  // ---------------------------------------------------------------------------------------------------------
  // store

  /** Batches removes of one tick into one store call; resolves once durable. */
  private removeStored(id: number): Promise<void> {
    this.pendingRemoves.push(id);
    if (this.removesDone === null) {
      this.removesDone = new Promise<void>((resolve) => {
        this.removesSettle = resolve as (p: Promise<void>) => void;
      });
      // Deliveries of no-ack consumers and drops do not wait for the remove: one handler per batch keeps a failing
      // store from raising unhandled rejections; ack() callers still see the failure.
      this.removesDone.catch(ignore);
      queueMicrotask(() => void this.flushRemoves());
    }
    return this.removesDone;
  }

  /** Issues the pending removes as one store call (at the end of the tick, or before a purge). */
  private flushRemoves(): Promise<void> {
    const settle = this.removesSettle;
    const ids = this.pendingRemoves;
    this.removesDone = null;
    this.removesSettle = null;
    this.pendingRemoves = [];
    const p = ids.length === 0 || !this.store || this.destroyed ? Promise.resolve() : this.store.remove(this.key, ids);
    settle?.(p);
    return p;
  }

  private maybeLoad(force: boolean): void {
    if (!this.store || this.beyond === 0 || this.loading || this.closed) return;
    if (!force && (this.heap.size >= this.win.maxMessages / 2 || this.heapBytes >= this.win.maxBytes / 2)) return;
    this.startLoad().catch(ignore);
  }

  /** Reads the next messages into the window; one read at a time (open and get wait for it). */
  private load(): Promise<void> {
    if (!this.store || this.beyond === 0) return Promise.resolve();
    return this.loadPromise ?? this.startLoad();
  }

  private loadPromise: Promise<void> | null = null;

  private startLoad(): Promise<void> {
    const store = this.store as QueueStore;
    this.loading = true;
    const gen = this.generation;
    const limit = Math.max(1, Math.min(this.win.readBatch, this.win.maxMessages - this.heap.size));
    const p = store.read(this.key, this.nextLoadId, limit).then(
      (rows) => {
        if (this.loadPromise === p) this.loadPromise = null;
        this.onLoaded(rows, gen);
      },
      (err: unknown) => {
        // A failing store: stop loading; the next enqueue, consume, get or ack tries again.
        if (this.loadPromise === p) this.loadPromise = null;
        if (gen === this.generation) this.loading = false;
        throw err;
      },
    );
    this.loadPromise = p;
    return p;
  }

  private onLoaded(rows: Array<{ id: number; data: Buffer; deliveries: number }>, gen: number): void {
    if (gen !== this.generation || this.destroyed) return;
    this.loading = false;
    if (rows.length === 0) {
      // The store holds fewer than counted (it lost them, or counted differently): trust the store.
      this.beyond = 0;
      this.beyondBytes = 0;
      return;
    }
    const ttl = this.def.arguments.messageTtlMs;
    const now = Date.now();
    for (const r of rows) {
      this.nextLoadId = r.id + 1;
      const recovered = r.id <= this.recoveredMaxId;
      let msg: Message;
      try {
        msg = decodeStoredMessage(r.data);
      } catch {
        // Unreadable: not deliverable; removed so it does not come back at every load.
        this.beyond--;
        if (recovered) {
          this.beyondBytes -= r.data.length;
        }
        this.store?.remove(this.key, [r.id]).catch(ignore);
        continue;
      }
      const bytes = msg.payload.length;
      this.beyond--;
      if (recovered) {
        // The store counted the encoded size; the queue counts payload bytes.
        this.beyondBytes -= r.data.length;
      } else this.beyondBytes -= bytes;
      let expiresAt = msg.expiresAt ?? Infinity;
      if (ttl !== undefined) {
        const at = (recovered ? msg.timestamp : (this.enqueueTimeOf(r.id) ?? now)) + ttl;
        if (at < expiresAt) expiresAt = at;
      }
      this.heap.push({ id: r.id, msg, bytes, deliveries: r.deliveries, redelivered: recovered || r.deliveries > 0, expiresAt, stored: true, owner: null });
      this.heapBytes += bytes;
    }
    if (this.beyond <= 0) {
      this.beyond = 0;
      this.beyondBytes = 0;
    }
    const a = this.def.arguments;
    if (a.maxLength !== undefined || a.maxLengthBytes !== undefined) this.enforceLimits();
    this.expireHeads();
    this.dispatch();
  }

  // ---------------------------------------------------------------------------------------------------------
  // timers

  /** One timer per queue, for the earliest expiry at the head. */
  private armTtl(at: number): void {
    if (this.closed || at >= this.ttlTimerAt) return;
    if (this.ttlTimer) clearTimeout(this.ttlTimer);
    this.ttlTimerAt = at;
    this.ttlTimer = setTimeout(this.onTtlTimer, Math.max(0, at - Date.now()));
    this.ttlTimer.unref();
  }

  private onTtlTimer(): void {
    this.ttlTimer = null;
    this.ttlTimerAt = Infinity;
    this.expireHeads();
  }

  private expireHeads(): void {
    const now = Date.now();
    for (;;) {
      const e = this.heap.peek();
      if (!e) {
        this.maybeLoad(false);
        return;
      }
      if (e.expiresAt > now) {
        if (e.expiresAt !== Infinity) this.armTtl(e.expiresAt);
        return;
      }
      this.heap.pop();
      this.heapBytes -= e.bytes;
      void this.drop(e, 'expired');
    }
  }

  argumentsChanged(): void {
    if (this.destroyed || this.closed) return;
    const a = this.def.arguments;
    if (a.maxLength !== undefined || a.maxLengthBytes !== undefined) this.enforceLimits();
    if (this.expiresTimer) clearTimeout(this.expiresTimer);
    this.expiresTimer = null;
    this.armExpires();
  }

  private armExpires(): void {
    const ms = this.def.arguments.expiresMs;
    if (ms === undefined || this.closed || this.consumers.length > 0) return;
    if (this.expiresTimer) clearTimeout(this.expiresTimer);
    this.expiresTimer = setTimeout(this.onExpiresTimer, Math.max(0, this.lastUsed + ms - Date.now()));
    this.expiresTimer.unref();
  }

  private onExpiresTimer(): void {
    this.expiresTimer = null;
    const ms = this.def.arguments.expiresMs;
    if (ms === undefined || this.closed || this.consumers.length > 0) return;
    if (Date.now() - this.lastUsed >= ms) this.hooks.expire(this.def, 'expires');
    else this.armExpires();
  }
}

function ignore(): void {
  // Errors of writes nobody waits for: the next recovery shows the store's truth.
}

/**
 * A QueueFactory with its own window bounds (tests use small ones) and, when `pages` is given, paging for the queues
 * given no durable store (non-durable and exclusive ones): each runtime pages under a key of its own,
 * `<prefix><n>.<name>` (n counts the runtimes made), so that a queue deleted and declared again never meets its
 * predecessor's pages, even while their drop is still under way.
 */
export function queueFactory(
  win: Partial<QueueWindowOptions> = {},
  pages?: QueuePages,
): (def: QueueDef, store: QueueStore | null, hooks: QueueHooks) => QueueRuntime {
  const w = { ...DEFAULT_QUEUE_WINDOW, ...win };
  let made = 0;
  return (def, store, hooks) => {
    const paging = pages !== undefined && !(def.durable && store !== null) ? { store: pages.store, key: `${pages.prefix}${++made}.${def.name}` } : undefined;
    return new Queue(def, store, hooks, w, paging);
  };
}

/** The core's QueueFactory (the Engine creates every queue through it). */
export const createQueue = queueFactory();
