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
 */
import type { Directory, Quotas } from './directory.js';
import type { Principal } from './policy.js';

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
}

/** Held by one connection from login to close. */
export interface QuotaLease {
  readonly namespace: string;
  /** A publish of `messages` messages and `bytes` payload bytes arrived: ms to hold the client back (0: none). */
  chargeIn(messages: number, bytes: number): number;
  /** `bytes` were sent to the client: ms to hold further sends back (0: none). */
  chargeOut(bytes: number): number;
  release(): void;
}

export class QuotaManager {
  private readonly usage = new Map<string, NamespaceUsage>();

  constructor(
    private readonly directory: Directory,
    private readonly now: () => number = Date.now,
  ) {}

  private quotas(ns: string): Quotas {
    return this.directory.namespace(ns)?.quotas ?? {};
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
    const max = this.quotas(ns).maxConnections;
    if (max !== undefined && u.connections >= max) {
      u.refusedConnections++;
      return { refused: `namespace "${ns}" has reached its quota of ${max} connection${max === 1 ? '' : 's'}` };
    }
    u.connections++;
    let released = false;
    const charge = (bucket: 'publish' | 'bytesIn' | 'bytesOut', rate: number | undefined, n: number): number => {
      if (rate === undefined || n <= 0) return 0;
      if (rate <= 0) {
        // A zero rate stops the flow: hold back a second at a time (and count it, as any other hold).
        u.throttled++;
        u.throttledMs += 1000;
        return 1000;
      }
      const now = this.now();
      const b = (u[bucket] ??= new Bucket(rate, now));
      const wait = b.take(n, rate, now);
      if (wait > 0) {
        u.throttled++;
        u.throttledMs += wait;
      }
      return wait;
    };
    return {
      namespace: ns,
      chargeIn: (messages, bytes) => {
        const q = this.quotas(ns);
        if (q.publishRate === undefined && q.bytesInRate === undefined) return 0;
        return Math.max(charge('publish', q.publishRate, messages), charge('bytesIn', q.bytesInRate, bytes));
      },
      chargeOut: (bytes) => {
        const q = this.quotas(ns);
        return q.bytesOutRate === undefined ? 0 : charge('bytesOut', q.bytesOutRate, bytes);
      },
      release: () => {
        if (released) return;
        released = true;
        u.connections--;
      },
    };
  }

  /** Per-namespace figures (admin API, /metrics). */
  figures(): Record<string, { connections: number; throttled: number; throttledMs: number; refusedConnections: number }> {
    const out: Record<string, { connections: number; throttled: number; throttledMs: number; refusedConnections: number }> = {};
    for (const [ns, u] of this.usage) out[ns] = { connections: u.connections, throttled: u.throttled, throttledMs: u.throttledMs, refusedConnections: u.refusedConnections };
    return out;
  }
}
