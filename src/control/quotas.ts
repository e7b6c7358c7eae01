/**
 * Namespace quotas: open connections, publish rate, bytes in and out per second.
 *
 * Rates are token buckets per namespace holding one second of the rate (a burst of one second's worth passes at
 * once). A charge never refuses: it answers how long the caller should hold the client back (ms), and the caller
 * applies it the protocol's way: MQTT, AMQP and NATS stop reading the socket for that long (back-pressure: TCP
 * pushes back on the client), Kafka answers with throttle_time_ms and mutes the connection for that long (KIP-219).
 * Connections over the limit are refused at login with the protocol's own reply.
 *
 * Quotas are read from the directory at each charge (a Map lookup), so a changed quota applies at once.
 *
 * Cluster-wide: in a cluster a namespace's quotas are the cluster's, not each broker's. Every broker takes an
 * equal part of them from the membership it already follows (`shareWith`: the live brokers not leaving, the list
 * placement uses): rates are divided by the number of brokers, and the connection quota is split so that the parts
 * add up to it exactly (the first `max % N` brokers by id take one more). No message costs a metastore round trip
 * and no broker waits on another; the parts follow a membership change at the broker's next view of the members
 * (a heartbeat, a fraction of the lease: well within a second with the default lease's beats, or at once when a
 * broker registers and notifies). The price of its simplicity: a namespace whose clients all use one broker gets
 * that broker's part only (1/N of its rate quota), never more than its quota across the cluster.
 * User quotas (below) stay per broker, as Kafka's client quotas are.
 *
 * User quotas (Kafka's client quotas for the `user` entity, settings.ts): producer_byte_rate and consumer_byte_rate
 * per user, shared by all of that user's connections to this broker (as Kafka's quotas are per broker), on top of
 * the namespace's: a charge holds the client back for the longer of the two waits. A user without a quota of their
 * own gets the default user's (Kafka's `<default>` user entity), the anonymous principal too.
 */
import { splitStreamName } from '../core/namespaces.js';
import type { Directory, Quotas } from './directory.js';
import type { Principal } from './policy.js';
import { RuntimeSettings } from './settings.js';

class Bucket {
  private tokens: number;
  private at: number;

  constructor(rate: number, now: number) {
    this.tokens = rate;
    this.at = now;
  }

  /** Takes `n`; answers the ms until the bucket is back to zero (0 when it did not go negative). */
  take(n: number, rate: number, now: number): number {
    this.tokens = Math.min(rate, this.tokens + ((now - this.at) * rate) / 1000);
    this.at = now;
    this.tokens -= n;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens * 1000) / rate);
  }
}

class NamespaceUsage {
  connections = 0;
  publish: Bucket | null = null;
  bytesIn: Bucket | null = null;
  bytesOut: Bucket | null = null;
  /** Figures: how often and how long clients were held back. */
  throttled = 0;
  throttledMs = 0;
  refusedConnections = 0;
  /** Writes refused because the namespace was over its storage quota. */
  refusedWrites = 0;
}

/** Bytes stored per namespace: in the hot tier (unsealed tails) and in segment objects. */
export interface StoredBytes {
  hot: number;
  objects: number;
}

/** How long a per-namespace storage figure is reused (the fold walks every partition). */
const STORAGE_CACHE_MS = 1000;

/** Per-namespace quota figures. */
export interface QuotaFigures {
  connections: number;
  throttled: number;
  throttledMs: number;
  refusedConnections: number;
  refusedWrites: number;
}

/** Held by one connection from login to close. */
export interface QuotaLease {
  readonly namespace: string;
  /** A publish of `messages` messages and `bytes` payload bytes arrived: ms to hold the client back (0: none). */
  chargeIn(messages: number, bytes: number): number;
  /** `bytes` were sent to the client: ms to hold further sends back (0: none). */
  chargeOut(bytes: number): number;
  /**
   * Why a write must be refused now (the namespace's stored bytes reached `maxStorageBytes`), or null. Cheap: the
   * figure is folded at most once a second for every namespace together.
   */
  storageFull(): string | null;
  release(): void;
}

/** Per-user buckets (user quotas); the anonymous principal's under "". */
class UserUsage {
  bytesIn: Bucket | null = null;
  bytesOut: Bucket | null = null;
  connections = 0;
}

/** This broker's part of every namespace's cluster-wide quotas: 1 of 1 alone. */
interface Share {
  /** How many brokers share the quotas. */
  readonly of: number;
  /** This broker's rank among them (ids ascending; -1: it is not one of them, e.g. leaving). */
  readonly rank: number;
}

export class QuotaManager {
  private readonly usage = new Map<string, NamespaceUsage>();
  private share: Share = { of: 1, rank: 0 };
  /** The part of a namespace's rate quotas this broker enforces (1 alone, 1/N in a cluster of N). */
  rateShare = 1;
  private readonly users = new Map<string, UserUsage>();
  private storageSource: (() => Map<string, StoredBytes>) | null = null;
  private storageCache: { at: number; byNs: Map<string, StoredBytes> } | null = null;

  constructor(
    private readonly directory: Directory,
    readonly now: () => number = Date.now,
    /** User quotas; default: none set (an empty in-memory store). */
    readonly settings: RuntimeSettings = new RuntimeSettings(),
  ) {}

  /**
   * Cluster mode: the brokers that share every namespace's quotas (the live ones not leaving, ids ascending) and
   * this broker's id. Called at start and at each membership change.
   */
  shareWith(brokers: readonly number[], self: number): void {
    const of = Math.max(1, brokers.length);
    this.share = { of, rank: brokers.indexOf(self) };
    this.rateShare = 1 / of;
  }

  /** This broker's part of a cluster-wide connection quota: the parts of all brokers add up to `max`. */
  connectionShare(max: number): number {
    const { of, rank } = this.share;
    if (of === 1) return max;
    return Math.floor(max / of) + (rank >= 0 && rank < max % of ? 1 : 0);
  }

  private use(ns: string): NamespaceUsage {
    let u = this.usage.get(ns);
    if (!u) this.usage.set(ns, (u = new NamespaceUsage()));
    return u;
  }

  /**
   * Opens a connection's lease, or answers why not (the namespace's connection quota is reached). Every accepted
   * connection must `release()` its lease when it closes.
   */
  connect(principal: Principal): QuotaLease | { refused: string } {
    const ns = principal.namespace;
    const u = this.use(ns);
    const max = this.quotasOf(ns).maxConnections;
    if (max !== undefined && u.connections >= this.connectionShare(max)) {
      u.refusedConnections++;
      const part = this.share.of === 1 ? '' : `, shared by ${this.share.of} brokers: ${this.connectionShare(max)} here`;
      return { refused: `namespace "${ns}" has reached its quota of ${max} connection${max === 1 ? '' : 's'}${part}` };
    }
    u.connections++;
    const userKey = principal.user ?? '';
    let user = this.users.get(userKey);
    if (!user) this.users.set(userKey, (user = new UserUsage()));
    user.connections++;
    return new Lease(this, principal, u, user);
  }

  /**
   * Where stored bytes per namespace come from (the broker hands the engine's streamSizes folded by namespace).
   * Until set, nothing is known and the storage quota refuses nothing.
   */
  useStorage(source: () => Map<string, StoredBytes>): void {
    this.storageSource = source;
    this.storageCache = null;
  }

  /** Stored bytes per namespace, reused for up to a second: the one figure metrics, API and enforcement share. */
  storedBytes(): Map<string, StoredBytes> {
    if (this.storageSource === null) return new Map();
    const now = this.now();
    if (this.storageCache === null || now - this.storageCache.at >= STORAGE_CACHE_MS || now < this.storageCache.at)
      this.storageCache = { at: now, byNs: this.storageSource() };
    return this.storageCache.byNs;
  }

  /** Forgets the cached figure (a deletion or retention pass freed room: the next check re-reads). */
  refreshStorage(): void {
    this.storageCache = null;
  }

  /** Why a write to namespace `ns` must be refused (stored bytes at or over maxStorageBytes), or null. */
  storageFull(ns: string): string | null {
    const max = this.quotasOf(ns).maxStorageBytes;
    if (max === undefined || this.storageSource === null) return null;
    const s = this.storedBytes().get(ns);
    const used = s === undefined ? 0 : s.hot + s.objects;
    if (used < max) return null;
    this.use(ns).refusedWrites++;
    return `namespace "${ns}" is over its storage quota (${used} of ${max} bytes stored)`;
  }

  /** The namespace's quotas, read at each charge so that a changed quota applies at once. */
  quotasOf(ns: string): Quotas {
    return this.directory.namespace(ns)?.quotas ?? {};
  }

  /** Closes a lease's accounting: its user's buckets go with their last connection. */
  releaseUser(user: UserUsage, principal: Principal): void {
    const key = principal.user ?? '';
    // The user's buckets go with their last connection (a user who comes back starts with a full second).
    if (--user.connections === 0 && this.users.get(key) === user) this.users.delete(key);
  }

  /** Per-namespace figures (admin API, /metrics). */
  figures(): Record<string, QuotaFigures> {
    const out: Record<string, QuotaFigures> = {};
    for (const [ns, u] of this.usage)
      out[ns] = {
        connections: u.connections,
        throttled: u.throttled,
        throttledMs: u.throttledMs,
        refusedConnections: u.refusedConnections,
        refusedWrites: u.refusedWrites,
      };
    return out;
  }
}

/**
 * One connection's lease: an object with its methods on the class, not closures made per connection (six closures
 * and their contexts were ~500 bytes of every idle connection's heap).
 */
class Lease implements QuotaLease {
  private released = false;

  constructor(
    private readonly qm: QuotaManager,
    private readonly principal: Principal,
    private readonly u: NamespaceUsage,
    private readonly user: UserUsage,
  ) {}

  get namespace(): string {
    return this.principal.namespace;
  }

  chargeIn(messages: number, bytes: number): number {
    const q = this.qm.quotasOf(this.principal.namespace);
    const uq = this.qm.settings.userQuota(this.principal.user);
    if (q.publishRate === undefined && q.bytesInRate === undefined && uq.producerByteRate === undefined) return 0;
    const part = this.qm.rateShare;
    return Math.max(
      this.charge('publish', q.publishRate === undefined ? undefined : q.publishRate * part, messages),
      this.charge('bytesIn', q.bytesInRate === undefined ? undefined : q.bytesInRate * part, bytes),
      this.charge('bytesIn', uq.producerByteRate, bytes, 'user'),
    );
  }

  chargeOut(bytes: number): number {
    const q = this.qm.quotasOf(this.principal.namespace);
    const uq = this.qm.settings.userQuota(this.principal.user);
    if (q.bytesOutRate === undefined && uq.consumerByteRate === undefined) return 0;
    const out = q.bytesOutRate === undefined ? undefined : q.bytesOutRate * this.qm.rateShare;
    return Math.max(this.charge('bytesOut', out, bytes), this.charge('bytesOut', uq.consumerByteRate, bytes, 'user'));
  }

  storageFull(): string | null {
    return this.qm.storageFull(this.principal.namespace);
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.u.connections--;
    this.qm.releaseUser(this.user, this.principal);
  }

  private charge(bucket: 'publish' | 'bytesIn' | 'bytesOut', rate: number | undefined, n: number, of: 'namespace' | 'user' = 'namespace'): number {
    if (rate === undefined || n <= 0) return 0;
    const u = this.u;
    if (rate <= 0) {
      // A zero rate stops the flow: hold back a second at a time (and count it, as any other hold).
      u.throttled++;
      u.throttledMs += 1000;
      return 1000;
    }
    const now = this.qm.now();
    const b = of === 'user' ? (this.user[bucket as 'bytesIn' | 'bytesOut'] ??= new Bucket(rate, now)) : (u[bucket] ??= new Bucket(rate, now));
    const wait = b.take(n, rate, now);
    if (wait > 0) {
      u.throttled++;
      u.throttledMs += wait;
    }
    return wait;
  }
}

/** Folds per-stream sizes into per-namespace ones: a stream belongs to the namespace its name carries. */
export function storedByNamespace(sizes: ReadonlyMap<string, StoredBytes>): Map<string, StoredBytes> {
  const out = new Map<string, StoredBytes>();
  for (const [stream, s] of sizes) {
    const ns = splitStreamName(stream).namespace;
    const e = out.get(ns);
    if (e === undefined) out.set(ns, { hot: s.hot, objects: s.objects });
    else {
      e.hot += s.hot;
      e.objects += s.objects;
    }
  }
  return out;
}
