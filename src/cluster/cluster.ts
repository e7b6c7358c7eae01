/**
 * One broker's part in the cluster: its membership lease, its view of the other brokers, placement, and the
 * resources it owns (see types.ts for the model).
 *
 * - Heartbeat every lease/5. A heartbeat the store refuses (the lease expired: the process was paused, or cut off
 *   from PostgreSQL) or no successful heartbeat for a whole lease means this broker is dead to the others: every
 *   resource it holds is released as lost (no write is possible: its epochs are fenced), and it registers again as a
 *   new incarnation, after which it takes part as a newcomer.
 * - Reconcile (after every heartbeat, and at once when another broker announces a change by NOTIFY): for placed kinds
 *   (partitions, queues) the broker claims what placement gives it and is free (released, or its owner dead), and
 *   hands over what placement now gives a live other broker (a join); for lazy kinds (groups, JetStream consumers) it
 *   hands over what placement moved and takes its share of a dead broker's; for sessions it takes its share of a dead
 *   broker's (a client that reconnects elsewhere moves its session with Cluster.claim).
 * - Handover is two steps, release then claim, so the two owners never overlap: the holder stops serving, makes what
 *   it acknowledged durable (handler.release), clears its owner row and notifies; the next owner's claim bumps the
 *   epoch and it loads the state from shared storage. Nothing is copied.
 */
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import { FlowError } from '../core/index.js';
import type { BrokerInfo, BrokerState, ClusterStore, OwnershipHandler, OwnerRecord, PeerChannel, ResourceKind } from './types.js';
import { RESOURCE_KINDS } from './types.js';

export interface ClusterOptions {
  store: ClusterStore;
  /** This broker, without the incarnation (made here) and start time. */
  info: Omit<BrokerInfo, 'incarnation' | 'startedAt'>;
  leaseMs: number;
  logger: Logger;
}

/** A resource held here. */
interface Held {
  epoch: number;
  state: 'acquiring' | 'owned' | 'releasing';
  /** Settles when the acquire (or release) in progress ends. */
  busy: Promise<void> | null;
}

/** Parallel acquires and releases per reconcile (each is a few metastore round trips). */
const PARALLEL = 8;
/** Orphan rows looked at per kind and reconcile. */
const ORPHANS_PER_ROUND = 1000;
/** After a failed acquire, the resource is not tried again for this long. */
const RETRY_AFTER_MS = 2000;

/** 32-bit FNV-1a of a string, finished with a murmur3 mix: the rendezvous weight. */
function weight(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The broker among `ids` with the highest rendezvous weight for `kind`/`name` (ties: the lower id). */
export function rendezvous(kind: string, name: string, ids: readonly number[]): number | null {
  let best: number | null = null;
  let bestW = -1;
  for (const id of ids) {
    const w = weight(`${kind}\u0000${name}\u0000${id}`);
    if (w > bestW || (w === bestW && best !== null && id < best)) {
      best = id;
      bestW = w;
    }
  }
  return best;
}

export class Cluster extends EventEmitter {
  readonly store: ClusterStore;
  readonly leaseMs: number;
  private info: BrokerInfo;
  private view: BrokerState[] = [];
  private placementIds: number[] = [];
  private readonly handlers = new Map<ResourceKind, OwnershipHandler>();
  /** What other subsystems load when this broker acquires a resource of a kind, before serving it (onAcquire). */
  private readonly loaders = new Map<ResourceKind, Array<(name: string, epoch: number) => Promise<void>>>();
  private readonly held = new Map<ResourceKind, Map<string, Held>>();
  /** Owner rows seen (placed kinds: all of them at each reconcile; others: looked up), by kind and name. */
  private readonly known = new Map<ResourceKind, Map<string, OwnerRecord>>();
  private readonly retryAt = new Map<string, number>();
  /** Kinds whose resources may be placed with another resource (colocate()). */
  private readonly colocation = new Map<ResourceKind, (name: string) => { kind: ResourceKind; name: string } | null>();
  private readonly logger: Logger;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  /** When the last heartbeat the store accepted was sent (a lease runs from when the store renewed it, later). */
  private lastRenewal = 0;
  /** The incarnation whose heartbeat is on its way (one at a time), else null. */
  private heartbeating: string | null = null;
  /** lost() is under way: no heartbeat, no second lost(). */
  private losing = false;
  private reconciling: Promise<void> | null = null;
  private again = false;
  private started = false;
  private leaving = false;
  private closed = false;
  /** Set by the broker once the internal channel is up. */
  channel: PeerChannel | null = null;
  readonly stats = { heartbeats: 0, heartbeatFailures: 0, reconciles: 0, acquired: 0, released: 0, lost: 0, failedAcquires: 0, reregistrations: 0 };

  private constructor(opts: ClusterOptions) {
    super();
    this.store = opts.store;
    this.leaseMs = opts.leaseMs;
    this.logger = opts.logger;
    this.info = { ...opts.info, incarnation: randomBytes(8).toString('hex'), startedAt: Date.now() };
    for (const k of RESOURCE_KINDS) {
      this.held.set(k, new Map());
      this.known.set(k, new Map());
    }
  }

  /** Registers this broker (CONFIG_ERROR when its id is held by a live broker) and starts its heartbeat. */
  static async start(opts: ClusterOptions): Promise<Cluster> {
    const c = new Cluster(opts);
    const sent = Date.now();
    await c.store.register(c.info, c.leaseMs);
    c.lastRenewal = sent;
    await c.refreshView();
    await c.store.listen('cluster', (payload) => {
      if (payload === '*' || payload !== c.info.incarnation) c.kick();
    });
    c.heartbeatTimer = setInterval(() => void c.beat(), Math.max(100, Math.floor(c.leaseMs / 5)));
    c.heartbeatTimer.unref();
    c.logger.info(
      { broker: c.id, incarnation: c.info.incarnation, leaseMs: c.leaseMs, brokers: c.view.filter((b) => b.alive).map((b) => b.id) },
      'cluster: joined',
    );
    return c;
  }

  get id(): number {
    return this.info.id;
  }

  get incarnation(): string {
    return this.info.incarnation;
  }

  get self(): BrokerInfo {
    return this.info;
  }

  /** Adds endpoints known only once the listeners are bound (registered again with the next heartbeat's view). */
  async advertise(endpoints: BrokerInfo['endpoints']): Promise<void> {
    this.info = { ...this.info, endpoints: { ...this.info.endpoints, ...endpoints } };
    await this.store.register(this.info, this.leaseMs);
    await this.store.notify('cluster', this.info.incarnation);
  }

  /** Takes part in ownership of `kind` (before begin()). */
  register(kind: ResourceKind, handler: OwnershipHandler): void {
    if (this.handlers.has(kind)) throw new Error(`cluster: ${kind} already has an ownership handler`);
    this.handlers.set(kind, handler);
  }
  /**
   * Another subsystem's state of a resource to load when this broker acquires it, after the kind's handler and
   * before the resource is served (a Kafka partition's transaction state, say). A throw gives the resource back.
   */
  onAcquire(kind: ResourceKind, fn: (name: string, epoch: number) => Promise<void>): void {
    let l = this.loaders.get(kind);
    if (!l) this.loaders.set(kind, (l = []));
    l.push(fn);
  }

  /** Starts reconciling: called once storage and the protocols are ready to take resources. */
  begin(): void {
    this.started = true;
    this.kick();
  }

  /** Every registered broker (dead ones included), as of the last heartbeat. */
  brokers(): BrokerState[] {
    return this.view;
  }

  broker(id: number): BrokerState | undefined {
    return this.view.find((b) => b.id === id);
  }

  /** Live brokers placement may pick (not leaving), ids ascending. */
  placementBrokers(): readonly number[] {
    return this.placementIds;
  }

  /**
   * The broker that should own the resource: rendezvous over the live brokers not leaving (of the resource it is
   * colocated with, when colocate() names one).
   */
  placement(kind: ResourceKind, name: string): number | null {
    const at = this.colocation.get(kind)?.(name) ?? null;
    return at !== null ? rendezvous(at.kind, at.name, this.placementIds) : rendezvous(kind, name, this.placementIds);
  }

  /**
   * Places some resources of `kind` where another resource is placed (`at` names it, or null: placed on their own),
   * so that a subsystem finds them on the same broker: the consumers of a JetStream workqueue or interest stream with
   * the stream's partition, whose owner decides what their acks remove. `at` must answer the same on every broker.
   */
  colocate(kind: ResourceKind, at: (name: string) => { kind: ResourceKind; name: string } | null): void {
    this.colocation.set(kind, at);
  }

  /**
   * The epoch under which this broker owns the resource and serves it now, or null. Null too once a whole lease has
   * passed since the last renewal was sent (leaseCurrent): a process thawed after SIGSTOP handles the requests queued
   * on its sockets before its heartbeat timer runs, and must not answer them as the owner it no longer is.
   */
  owns(kind: ResourceKind, name: string): number | null {
    const h = this.held.get(kind)!.get(name);
    return h && h.state === 'owned' && this.leaseCurrent() ? h.epoch : null;
  }

  /**
   * Whether this broker's membership lease still runs by its own clock: the store renewed it after the last accepted
   * heartbeat was sent, so counting from the sending never outlasts it. False from a whole lease on, whatever the
   * heartbeat timer has noticed yet (it gives everything up at its next beat: beat()).
   */
  leaseCurrent(): boolean {
    return Date.now() - this.lastRenewal <= this.leaseMs;
  }

  /** Names of the resources of a kind owned and served here now. */
  ownedNames(kind: ResourceKind): string[] {
    return [...this.held.get(kind)!].filter(([, h]) => h.state === 'owned').map(([n]) => n);
  }

  /**
   * Who owns the resource as far as this broker knows without asking the store: itself, the last owner row seen
   * (when its owner is alive), else null. Forwarding code falls back to lookup() and retries on NOT_OWNER.
   */
  owner(kind: ResourceKind, name: string): { broker: number; epoch: number } | null {
    const h = this.held.get(kind)!.get(name);
    if (h && h.state === 'owned' && this.leaseCurrent()) return { broker: this.id, epoch: h.epoch };
    const row = this.known.get(kind)!.get(name);
    if (row && row.owner !== null && row.owner !== this.id && this.isAlive(row.owner, row.incarnation)) return { broker: row.owner, epoch: row.epoch };
    return null;
  }

  /** Reads the owner row from the store (and remembers it); null when nobody live owns the resource. */
  async lookup(kind: ResourceKind, name: string): Promise<{ broker: number; epoch: number } | null> {
    const row = await this.store.owner(kind, name);
    if (row) this.known.get(kind)!.set(name, row);
    else this.known.get(kind)!.delete(name);
    if (row && row.owner === this.id && row.incarnation === this.incarnation) {
      return this.owns(kind, name) === row.epoch ? { broker: this.id, epoch: row.epoch } : null;
    }
    return row && row.owner !== null && this.isAlive(row.owner, row.incarnation) ? { broker: row.owner, epoch: row.epoch } : null;
  }

  isAlive(id: number, incarnation?: string | null): boolean {
    const b = this.broker(id);
    return !!b && b.alive && (incarnation === undefined || incarnation === null || b.incarnation === incarnation);
  }

  /**
   * Lazy kinds at their placement broker (a Kafka group at its coordinator, a JetStream consumer): owns it here,
   * claiming and acquiring it if it is free. NOT_OWNER when placement picks another broker, or a live broker still
   * holds it (it hands it over at its next reconcile; the client retries).
   */
  async ensure(kind: ResourceKind, name: string): Promise<number> {
    const epoch = this.owns(kind, name);
    if (epoch !== null) return epoch;
    const h = this.held.get(kind)!.get(name);
    if (h?.busy) {
      await h.busy;
      return this.ensure(kind, name);
    }
    if (h?.state === 'owned') throw lapsed(kind, name);
    if (this.placement(kind, name) !== this.id) throw new FlowError('NOT_OWNER', `the ${kind} ${name} is served by broker ${this.placement(kind, name)}`);
    return this.take(kind, name, false);
  }

  /**
   * Sticky kinds (an MQTT session where its client connects): owns it here. With `force` the claim succeeds over a
   * live holder, which the caller has asked to hand it over first (over the channel); without, NOT_OWNER when a live
   * broker holds it.
   */
  async claim(kind: ResourceKind, name: string, opts: { force?: boolean } = {}): Promise<number> {
    const epoch = this.owns(kind, name);
    if (epoch !== null) return epoch;
    const h = this.held.get(kind)!.get(name);
    if (h?.busy) {
      await h.busy;
      return this.claim(kind, name, opts);
    }
    if (h?.state === 'owned') throw lapsed(kind, name);
    return this.take(kind, name, opts.force === true);
  }

  /** Hands a resource over (or gives it up): stop serving, make it durable, clear the owner row, notify. */
  async release(kind: ResourceKind, name: string): Promise<void> {
    const h = this.held.get(kind)!.get(name);
    if (!h) return;
    if (h.busy) await h.busy;
    if (h.state !== 'owned') return;
    await this.letGo(kind, name, h, false);
  }

  /** A resource was deleted (a stream, a queue): forget it here and its owner row, without a release. */
  async forget(kind: ResourceKind, name: string): Promise<void> {
    this.held.get(kind)!.delete(name);
    this.known.get(kind)!.delete(name);
    await this.store.forget(kind, name);
  }

  /**
   * A write of a resource was refused with FENCED (another broker took it while this one still served it): stop
   * serving it now, as lost.
   */
  fenced(kind: ResourceKind, name: string): void {
    const h = this.held.get(kind)!.get(name);
    if (!h || h.state !== 'owned') return;
    this.logger.warn({ kind, name, epoch: h.epoch }, 'cluster: a write was fenced: another broker owns this now');
    void this.letGo(kind, name, h, true);
  }

  /** Reconcile soon (a change was announced, a stream or queue was created). */
  kick(): void {
    if (!this.started || this.closed) return;
    if (this.reconciling) {
      this.again = true;
      return;
    }
    this.reconciling = this.reconcile()
      .catch((err: unknown) => this.logger.warn({ err }, 'cluster: reconcile failed; retried at the next heartbeat'))
      .finally(() => {
        this.reconciling = null;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  /** Announces a change to every broker (they reconcile at once). */
  async announce(): Promise<void> {
    await this.store.notify('cluster', this.incarnation);
  }

  /** Graceful shutdown: leave placement, hand everything over at once, deregister. */
  async leave(): Promise<void> {
    if (this.closed || this.leaving) return;
    this.leaving = true;
    this.started = false;
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    await this.reconciling;
    try {
      await this.store.setLeaving(this.id, this.incarnation);
      await this.store.notify('cluster', this.incarnation);
      const all: Array<[ResourceKind, string, Held]> = [];
      for (const [kind, m] of this.held) for (const [name, h] of m) all.push([kind, name, h]);
      await limited(all, PARALLEL, async ([kind, name, h]) => {
        if (h.busy) await h.busy.catch(() => undefined);
        if (h.state === 'owned') await this.letGo(kind, name, h, false);
      });
      await this.store.deregister(this.id, this.incarnation);
      await this.store.notify('cluster', this.incarnation);
      this.logger.info({ broker: this.id, released: all.length }, 'cluster: left, everything handed over');
    } catch (err) {
      this.logger.warn({ err }, 'cluster: leaving failed part-way; the rest moves when the lease expires');
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.leave();
    this.closed = true;
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    this.removeAllListeners();
  }

  figures(): Record<string, unknown> {
    const owned = Object.fromEntries([...this.held].map(([k, m]) => [k, [...m.values()].filter((h) => h.state === 'owned').length]));
    return {
      broker: this.id,
      incarnation: this.incarnation,
      leaseMs: this.leaseMs,
      brokers: this.view.map((b) => ({ id: b.id, alive: b.alive, leaving: b.leaving })),
      owned,
      ...this.stats,
      ...(this.channel ? { channel: this.channel.figures() } : {}),
    };
  }

  // --- internals ---

  private async beat(): Promise<void> {
    if (this.closed || this.leaving || this.losing) return;
    const incarnation = this.info.incarnation;
    if (this.heartbeating === incarnation) {
      // The last heartbeat has not come back (PostgreSQL cut off: its connection stalls, and a stalled query fails
      // only once the network heals). Past a whole lease since the last renewal was sent, the others may take this
      // broker's work at any moment: it stops serving now rather than when the network heals (the chaos runner's
      // pg-partition: an MQTT session's client stayed attached here for seconds while another broker, its owner by
      // then, queued its messages offline).
      if (Date.now() - this.lastRenewal > this.leaseMs) await this.lost('no heartbeat came back from the metastore for a whole lease', null);
      return;
    }
    const sent = Date.now();
    let ok: boolean;
    this.heartbeating = incarnation;
    try {
      ok = await this.store.heartbeat(this.id, incarnation, this.leaseMs);
    } catch (err) {
      if (incarnation !== this.info.incarnation) return;
      this.stats.heartbeatFailures++;
      // Cut off from the store: once a whole lease has passed without a renewal the others consider us dead.
      if (Date.now() - this.lastRenewal > this.leaseMs) await this.lost('no heartbeat reached the metastore for a whole lease', err);
      else this.logger.warn({ err }, 'cluster: heartbeat failed; retrying');
      return;
    } finally {
      if (this.heartbeating === incarnation) this.heartbeating = null;
    }
    // The answer for an incarnation given up meanwhile (this broker registered again since): nothing to learn.
    if (incarnation !== this.info.incarnation) return;
    if (!ok) {
      await this.lost('the membership lease expired (was this process paused, or cut off?)', null);
      return;
    }
    this.stats.heartbeats++;
    // The store renewed the lease at some point after `sent`: counting from `sent` never overestimates it.
    this.lastRenewal = sent;
    await this.refreshView().catch((err: unknown) => this.logger.warn({ err }, 'cluster: cannot read the brokers'));
    this.kick();
  }

  /** This broker is dead to the cluster: drop everything as lost and come back as a new incarnation (one at a time). */
  private async lost(why: string, err: unknown): Promise<void> {
    if (this.losing) return;
    this.losing = true;
    try {
      await this.loseAll(why, err);
    } finally {
      this.losing = false;
    }
  }

  private async loseAll(why: string, err: unknown): Promise<void> {
    const all: Array<[ResourceKind, string, Held]> = [];
    for (const [kind, m] of this.held) for (const [name, h] of m) all.push([kind, name, h]);
    // Those not waiting on the store first: cut off from it, an acquire or release under way waits for the network.
    all.sort((a, b) => (a[2].busy === null ? 0 : 1) - (b[2].busy === null ? 0 : 1));
    this.logger.error({ err, broker: this.id, held: all.length }, `cluster: ${why}: everything this broker owned is given up; registering again`);
    this.stats.lost += all.length;
    await limited(all, PARALLEL, async ([kind, name, h]) => {
      if (h.busy) await h.busy.catch(() => undefined);
      if (h.state === 'owned') await this.letGo(kind, name, h, true);
    });
    for (const m of this.known.values()) m.clear();
    this.info = { ...this.info, incarnation: randomBytes(8).toString('hex') };
    try {
      const sent = Date.now();
      await this.store.register(this.info, this.leaseMs);
      this.lastRenewal = sent;
      this.stats.reregistrations++;
      await this.refreshView();
      await this.store.notify('cluster', this.incarnation);
      this.kick();
    } catch (e) {
      this.logger.warn({ err: e }, 'cluster: cannot register again yet; retrying at the next heartbeat');
      // The next beat's heartbeat is refused for the new incarnation (no row), which brings us back here.
    }
  }

  private async refreshView(): Promise<void> {
    const view = await this.store.brokers();
    const before = this.placementIds.join(',');
    this.view = view;
    this.placementIds = view.filter((b) => b.alive && !b.leaving).map((b) => b.id);
    // This broker is a candidate while it believes its lease valid, whatever a stale read said.
    if (!this.leaving && !this.placementIds.includes(this.id)) this.placementIds = [...this.placementIds, this.id].sort((a, b) => a - b);
    if (this.placementIds.join(',') !== before) {
      this.logger.info({ brokers: this.placementIds }, 'cluster: membership changed');
      this.emit('membership', this.placementIds);
    }
  }

  private async reconcile(): Promise<void> {
    this.stats.reconciles++;
    await this.refreshView();
    for (const [kind, handler] of this.handlers) {
      if (!this.started) return;
      const held = this.held.get(kind)!;
      const rows = new Map<string, OwnerRecord>();
      const work: Array<() => Promise<void>> = [];
      if (handler.names) {
        for (const r of await this.store.owners(kind)) rows.set(r.name, r);
        const known = this.known.get(kind)!;
        known.clear();
        for (const [n, r] of rows) known.set(n, r);
        const names = new Set(handler.names());
        for (const name of names) {
          if (this.placement(kind, name) !== this.id) continue;
          if (held.has(name)) continue;
          const row = rows.get(name);
          const free =
            !row || row.owner === null || !this.isAlive(row.owner, row.incarnation) || (row.owner === this.id && row.incarnation !== this.incarnation);
          if (free) work.push(() => this.tryTake(kind, name));
        }
        for (const [name, h] of held) {
          if (h.state !== 'owned') continue;
          if (!names.has(name)) continue; // deleted: its subsystem forgets it
          if (this.placement(kind, name) !== this.id) work.push(() => this.letGo(kind, name, h, false).then(() => undefined));
        }
      } else {
        if (!handler.sticky) {
          for (const [name, h] of held) {
            if (h.state === 'owned' && this.placement(kind, name) !== this.id) work.push(() => this.letGo(kind, name, h, false).then(() => undefined));
          }
        }
        for (const row of await this.store.orphans(kind, ORPHANS_PER_ROUND)) {
          this.known.get(kind)!.set(row.name, row);
          if (!held.has(row.name) && this.placement(kind, row.name) === this.id) work.push(() => this.tryTake(kind, row.name));
        }
      }
      await limited(work, PARALLEL, (fn) => fn());
    }
  }

  private async tryTake(kind: ResourceKind, name: string): Promise<void> {
    const key = `${kind}\u0000${name}`;
    const at = this.retryAt.get(key);
    if (at !== undefined && at > Date.now()) return;
    try {
      await this.take(kind, name, false);
    } catch (err) {
      if (!(err instanceof FlowError && err.code === 'NOT_OWNER')) {
        this.retryAt.set(key, Date.now() + RETRY_AFTER_MS);
        this.logger.warn({ err, kind, name }, 'cluster: taking over failed; retried later');
      }
    }
  }

  /** Claims and acquires; NOT_OWNER when a live broker holds it (and `force` is not set). */
  private async take(kind: ResourceKind, name: string, force: boolean): Promise<number> {
    const handler = this.handlers.get(kind);
    if (!handler) throw new FlowError('UNAVAILABLE', `no ${kind} ownership on this broker`);
    const held = this.held.get(kind)!;
    const row = await this.store.claim(kind, name, this.id, this.incarnation, { force });
    this.known.get(kind)!.set(name, row);
    if (row.owner !== this.id || row.incarnation !== this.incarnation) {
      throw new FlowError('NOT_OWNER', `the ${kind} ${name} is owned by broker ${row.owner ?? '(none)'}`);
    }
    const existing = held.get(name);
    if (existing && existing.state === 'owned' && existing.epoch === row.epoch) return row.epoch;
    const h: Held = { epoch: row.epoch, state: 'acquiring', busy: null };
    held.set(name, h);
    h.busy = (async () => {
      try {
        await handler.acquire(name, row.epoch);
        for (const load of this.loaders.get(kind) ?? []) await load(name, row.epoch);
        h.state = 'owned';
        this.stats.acquired++;
        this.logger.info({ kind, name, epoch: row.epoch }, 'cluster: owned here now');
        this.emit('owned', kind, name, row.epoch);
      } catch (err) {
        this.stats.failedAcquires++;
        held.delete(name);
        await this.store.release(kind, name, this.id, this.incarnation, row.epoch).catch(() => undefined);
        throw err;
      } finally {
        h.busy = null;
      }
    })();
    await h.busy;
    return row.epoch;
  }

  private async letGo(kind: ResourceKind, name: string, h: Held, lost: boolean): Promise<void> {
    const handler = this.handlers.get(kind)!;
    h.state = 'releasing';
    h.busy = (async () => {
      try {
        await handler.release(name, lost);
      } catch (err) {
        this.logger.warn({ err, kind, name }, 'cluster: release failed; the next owner recovers from shared storage');
      }
      if (!lost) await this.store.release(kind, name, this.id, this.incarnation, h.epoch).catch(() => false);
      this.held.get(kind)!.delete(name);
      this.stats.released++;
      this.logger.info({ kind, name, epoch: h.epoch, lost }, lost ? 'cluster: lost' : 'cluster: handed over');
      this.emit('released', kind, name, h.epoch);
    })().finally(() => {
      h.busy = null;
    });
    await h.busy;
    if (!lost) await this.store.notify('cluster', this.incarnation).catch(() => undefined);
  }
}

/** Held here, but the lease has lapsed (leaseCurrent): given up at the next beat, not claimed again before. */
function lapsed(kind: ResourceKind, name: string): FlowError {
  return new FlowError('NOT_OWNER', `the ${kind} ${name} is not served here: this broker's lease lapsed (it registers again)`);
}

async function limited<T>(items: readonly T[], n: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++];
      await fn(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
}
