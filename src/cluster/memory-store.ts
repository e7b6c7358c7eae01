/**
 * ClusterStore in memory, shared by several Cluster instances of one process (unit tests): the same rules as the
 * PostgreSQL store (pg-store.ts), with a clock the test may move (`now`).
 */
import { FlowError } from '../core/index.js';
import type { BrokerInfo, BrokerState, ClusterStore, OwnerRecord, ResourceKind } from './types.js';

interface BrokerRow {
  info: BrokerInfo;
  leaseUntil: number;
  leaving: boolean;
}

export class MemoryClusterStore implements ClusterStore {
  readonly kind = 'memory';
  /** The store's clock (ms); tests may replace it to expire leases without waiting. */
  now: () => number = () => Date.now();
  private readonly rows = new Map<number, BrokerRow>();
  private readonly owned = new Map<string, OwnerRecord>();
  private readonly topics = new Map<string, Array<(payload: string) => void>>();

  async register(info: BrokerInfo, leaseMs: number): Promise<void> {
    const row = this.rows.get(info.id);
    if (row && row.info.incarnation !== info.incarnation && row.leaseUntil > this.now()) {
      throw new FlowError('CONFIG_ERROR', `broker id ${info.id} is held by a live broker: give every broker of the cluster its own --broker-id`);
    }
    this.rows.set(info.id, { info: structuredClone(info), leaseUntil: this.now() + leaseMs, leaving: false });
  }

  async heartbeat(id: number, incarnation: string, leaseMs: number): Promise<boolean> {
    const row = this.rows.get(id);
    if (!row || row.info.incarnation !== incarnation || row.leaseUntil <= this.now()) return false;
    row.leaseUntil = this.now() + leaseMs;
    return true;
  }

  async setLeaving(id: number, incarnation: string): Promise<void> {
    const row = this.rows.get(id);
    if (row && row.info.incarnation === incarnation) row.leaving = true;
  }

  async deregister(id: number, incarnation: string): Promise<void> {
    if (this.rows.get(id)?.info.incarnation === incarnation) this.rows.delete(id);
  }

  async brokers(): Promise<BrokerState[]> {
    const now = this.now();
    return [...this.rows.values()]
      .sort((a, b) => a.info.id - b.info.id)
      .map((r) => ({ ...structuredClone(r.info), alive: r.leaseUntil > now, leaving: r.leaving, leaseRemainingMs: r.leaseUntil - now }));
  }

  private liveOwner(o: OwnerRecord): boolean {
    if (o.owner === null) return false;
    const row = this.rows.get(o.owner);
    return !!row && row.info.incarnation === o.incarnation && row.leaseUntil > this.now();
  }

  async owners(kind: ResourceKind): Promise<OwnerRecord[]> {
    return [...this.owned.values()].filter((o) => o.kind === kind).map((o) => ({ ...o }));
  }

  async orphans(kind: ResourceKind, limit: number): Promise<OwnerRecord[]> {
    return [...this.owned.values()]
      .filter((o) => o.kind === kind && !this.liveOwner(o))
      .slice(0, limit)
      .map((o) => ({ ...o }));
  }

  async owner(kind: ResourceKind, name: string): Promise<OwnerRecord | null> {
    const o = this.owned.get(`${kind}\u0000${name}`);
    return o ? { ...o } : null;
  }

  async claim(kind: ResourceKind, name: string, id: number, incarnation: string, opts: { force?: boolean } = {}): Promise<OwnerRecord> {
    const key = `${kind}\u0000${name}`;
    const me = this.rows.get(id);
    const o = this.owned.get(key);
    if (!me || me.info.incarnation !== incarnation || me.leaseUntil <= this.now()) {
      if (!o) throw new FlowError('UNAVAILABLE', `cannot claim the ${kind} ${name}: this broker's membership lease has expired`);
      return { ...o };
    }
    if (!o) {
      const row: OwnerRecord = { kind, name, owner: id, incarnation, epoch: 1, since: Date.now() };
      this.owned.set(key, row);
      return { ...row };
    }
    if (o.owner === id && o.incarnation === incarnation) return { ...o };
    if (o.owner === null || opts.force === true || !this.liveOwner(o)) {
      o.owner = id;
      o.incarnation = incarnation;
      o.epoch++;
      o.since = Date.now();
    }
    return { ...o };
  }

  async release(kind: ResourceKind, name: string, id: number, incarnation: string, epoch: number): Promise<boolean> {
    const o = this.owned.get(`${kind}\u0000${name}`);
    if (!o || o.owner !== id || o.incarnation !== incarnation || o.epoch !== epoch) return false;
    o.owner = null;
    o.incarnation = null;
    o.since = Date.now();
    return true;
  }

  async forget(kind: ResourceKind, name: string): Promise<void> {
    this.owned.delete(`${kind}\u0000${name}`);
  }

  /** The owner-row check the PostgreSQL store does in SQL (flowmq_owner_check), for memory-backed tests. */
  check(kind: ResourceKind, name: string, epoch: number): void {
    const o = this.owned.get(`${kind}\u0000${name}`);
    if (!o || o.epoch !== epoch) throw new FlowError('FENCED', `the ${kind} ${name} is owned by another broker now (epoch ${epoch} is fenced)`);
  }

  async notify(topic: string, payload: string): Promise<void> {
    // PostgreSQL's NOTIFY payload limit (8000 bytes), kept here so that tests find an oversized notification.
    if (Buffer.byteLength(payload) > 7900)
      throw new FlowError('INVALID_ARGUMENT', `cluster notification on ${topic} too large (${Buffer.byteLength(payload)} bytes)`);
    const list = this.topics.get(topic) ?? [];
    queueMicrotask(() => {
      for (const fn of list) fn(payload);
    });
  }

  async listen(topic: string, fn: (payload: string) => void): Promise<void> {
    let list = this.topics.get(topic);
    if (!list) this.topics.set(topic, (list = []));
    list.push(fn);
  }

  async close(): Promise<void> {}
}
