/**
 * Prometheus metrics (`GET /metrics`), with prom-client.
 *
 * Nothing here sits on the data path: every figure is read from counters the broker keeps anyway (the client
 * registry, the engine's and the log's stats, the WAL's commit histogram, the password guard, the quotas) when a
 * scraper asks, in prom-client `collect` callbacks. A scrape therefore costs the broker a walk over those counters
 * and nothing between scrapes; the only figure that costs real work, consumer-group lag, is cached (it asks every
 * group's offsets) and refreshed at most every `groupLagCacheMs`, never blocking a scrape for long.
 *
 * Latency histograms (WAL commit, Kafka produce) come from the broker's own fixed-bucket LatencyHistogram (O(1)
 * per record, already there for the admin API) and are written out as Prometheus histograms at scrape, with one
 * `le` per doubling (20 µs .. ~170 s), rather than observed a second time into a prom-client Histogram.
 */
import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import { createRequire } from 'node:module';
import type { Registry } from 'prom-client';
import { HISTOGRAM_BOUNDS_MS, type HistogramSnapshot } from '../core/index.js';
import type { ClientRegistry } from './clients.js';
import type { QuotaManager } from './quotas.js';

/** What the metrics read from. Every source is optional: a figure whose source is absent is left out. */
export interface MetricsSources {
  /** Connections and messages/bytes in and out by protocol and namespace. */
  clients?: Pick<ClientRegistry, 'totals'>;
  /** The routing core: its message counters, and its queues (depth, consumers). */
  engine?: {
    readonly stats: { published: number; delivered: number; captured: number; dropped: number };
    listQueues(): Array<{ name: string }>;
    getQueue(name: string): { stats(): { ready: number; unacked: number; bytes: number; consumers: number } } | undefined;
    listStreams?(): unknown[];
  };
  /** The log engine's counters (seals, object reads, refused/throttled/failed appends...). */
  log?: { readonly stats: Readonly<Record<string, number>>; readonly memoryStats?: { chunkBytes: number } };
  /** The WAL: bytes held, and the duration of each group commit when it keeps them. */
  wal?: { size(): number; readonly commitLatency?: { snapshot(): HistogramSnapshot } };
  /** The storage backends' figures (objectFigures: the block cache and the object store's requests). */
  storage?: { figures(): Record<string, unknown> };
  /** Listeners by name: open connections per listener (counts every connection, registered or not). */
  listeners?: ReadonlyMap<string, { readonly protocol: string; connections(): number }>;
  /**
   * The running protocols (read at each scrape: the list fills during start): consumer groups for lag, and their
   * figures (Kafka's produce latency histogram).
   */
  protocols?: () => ReadonlyArray<{ name: string; protocol: { groups?: { list(): Promise<ReadonlyArray<GroupFigure>> }; figures?(): unknown } }>;
  /** Password checks (guard.stats), the verifier's queue. */
  auth?: {
    readonly stats: { ok: number; bad: number; busy: number; throttled: number };
    readonly verifier?: { readonly stats: { checked: number; busy: number }; readonly queued?: number };
  };
  /** Authorization denials (access.stats). */
  access?: { readonly stats: { denied: number } };
  /** OIDC tokens checked (the verifier's stats), when --oidc-issuer is set. */
  oidc?: { readonly stats: { verified: number; refused: number; jwksErrors: number } };
  /** Namespace quota figures; stored bytes per namespace (hot tier, objects) when the quotas know the storage. */
  quotas?: Pick<QuotaManager, 'figures'> & Partial<Pick<QuotaManager, 'storedBytes'>>;
  /** Whether the broker is ready (storage recovered, listeners up): flowmq_ready 1/0. */
  ready?: () => boolean;
  /** How long consumer-group lag is reused between scrapes (ms). Default 10 s. */
  groupLagCacheMs?: number;
}

interface GroupFigure {
  readonly name: string;
  readonly protocol: string;
  readonly state: string;
  readonly members: number;
  readonly lag: number | null;
}

export interface Metrics {
  readonly registry: Registry;
  /** The exposition format's content type (for the HTTP answer). */
  readonly contentType: string;
  /** The text a scraper gets: every metric, collected now. */
  text(): Promise<string>;
}

const PREFIX = 'flowmq_';
/** A lag refresh that takes longer than this answers the scrape with the previous figures (it goes on). */
const LAG_WAIT_MS = 2000;

type Labels = Record<string, string>;

export function createMetrics(sources: MetricsSources): Metrics {
  // prom-client is loaded here, not with the module (synchronously: it is CommonJS): it was ~22 ms of a broker's
  // start, and the broker makes its metrics once the protocol listeners are up (test/storage/open-imports.test.ts).
  const prom = createRequire(import.meta.url)('prom-client') as typeof import('prom-client');
  const { collectDefaultMetrics, Counter, Gauge } = prom;
  const registry = new prom.Registry();
  /** Scrapes through text() so far: figures shared by several metrics are read once per scrape. */
  let scrapes = 0;
  // Process and runtime: CPU, memory, heap spaces, event-loop lag, GC durations, handles (prom-client's set).
  collectDefaultMetrics({ register: registry, prefix: PREFIX });

  /** A counter whose values are read at scrape (a broker counter that only grows). */
  const counter = (name: string, help: string, labelNames: string[], read: () => Iterable<[Labels, number]>) =>
    new Counter({
      name: PREFIX + name,
      help,
      labelNames,
      registers: [registry],
      collect() {
        this.reset();
        for (const [labels, v] of read()) this.inc(labels, Math.max(0, v));
      },
    });
  /** A gauge read at scrape. */
  const gauge = (name: string, help: string, labelNames: string[], read: () => Iterable<[Labels, number]> | Promise<Iterable<[Labels, number]>>) =>
    new Gauge({
      name: PREFIX + name,
      help,
      labelNames,
      registers: [registry],
      async collect() {
        const values = await read();
        this.reset();
        for (const [labels, v] of values) this.set(labels, v);
      },
    });
  const one = (v: number): Array<[Labels, number]> => [[{}, v]];

  // Event-loop utilisation since the previous scrape (0..1): how busy the one thread that runs every protocol is.
  let elu: EventLoopUtilization = performance.eventLoopUtilization();
  gauge('event_loop_utilization', 'Share of time the event loop was busy since the previous scrape (0..1)', [], () => {
    const now = performance.eventLoopUtilization();
    const d = performance.eventLoopUtilization(now, elu);
    elu = now;
    return one(d.utilization);
  });

  if (sources.ready) {
    const ready = sources.ready;
    gauge('ready', '1 once storage is recovered and the listeners are up', [], () => one(ready() ? 1 : 0));
  }

  if (sources.clients) {
    const clients = sources.clients;
    // One walk over the registry per scrape, shared by the five metrics below: prom-client calls every metric's
    // collect in one synchronous pass. The walk is kept for that scrape only (text() starts a new one; for a
    // caller of registry.metrics() directly, it is dropped at the next turn of the event loop).
    let cached: { scrape: number; rows: ReturnType<ClientRegistry['totals']> } | null = null;
    const rows = () => {
      if (cached === null || cached.scrape !== scrapes) {
        cached = { scrape: scrapes, rows: clients.totals() };
        setImmediate(() => (cached = null));
      }
      return cached.rows;
    };
    const by = (pick: (r: ReturnType<ClientRegistry['totals']>[number]) => number) => () =>
      rows().map((r): [Labels, number] => [{ protocol: r.protocol, namespace: r.namespace }, pick(r)]);
    const l = ['protocol', 'namespace'];
    gauge(
      'connections',
      'Open client connections (logged in or not yet) by protocol and namespace',
      l,
      by((r) => r.connections),
    );
    counter(
      'messages_in_total',
      'Messages published/produced by clients',
      l,
      by((r) => r.messagesIn),
    );
    counter(
      'messages_out_total',
      'Messages delivered to clients',
      l,
      by((r) => r.messagesOut),
    );
    counter(
      'bytes_in_total',
      'Bytes read from client connections',
      l,
      by((r) => r.bytesIn),
    );
    counter(
      'bytes_out_total',
      'Bytes written to client connections',
      l,
      by((r) => r.bytesOut),
    );
  }

  if (sources.listeners) {
    const listeners = sources.listeners;
    gauge('listener_connections', 'Open connections per listener', ['listener', 'protocol'], () =>
      [...listeners].map(([name, l]): [Labels, number] => [{ listener: name, protocol: l.protocol }, l.connections()]),
    );
  }

  if (sources.engine) {
    const engine = sources.engine;
    counter(
      'routed_messages_total',
      'Messages routed by the core: published (entered routing), delivered (to live subscribers), captured (appended to streams), dropped',
      ['event'],
      () => (['published', 'delivered', 'captured', 'dropped'] as const).map((k): [Labels, number] => [{ event: k }, engine.stats[k]]),
    );
    if (engine.listStreams) {
      const list = engine.listStreams.bind(engine);
      gauge('streams', 'Streams defined', [], () => one(list().length));
    }
    const queueRows = () => {
      const out: Array<{ name: string; s: { ready: number; unacked: number; bytes: number; consumers: number } }> = [];
      for (const q of engine.listQueues()) {
        const h = engine.getQueue(q.name);
        if (h) out.push({ name: q.name, s: h.stats() });
      }
      return out;
    };
    gauge('queue_messages', 'Messages in a queue: ready (waiting) or unacked (delivered, not yet acknowledged)', ['queue', 'state'], () =>
      queueRows().flatMap(({ name, s }): Array<[Labels, number]> => [
        [{ queue: name, state: 'ready' }, s.ready],
        [{ queue: name, state: 'unacked' }, s.unacked],
      ]),
    );
    gauge('queue_ready_bytes', 'Payload bytes of the ready messages of a queue', ['queue'], () =>
      queueRows().map(({ name, s }): [Labels, number] => [{ queue: name }, s.bytes]),
    );
    gauge('queue_consumers', 'Consumers of a queue', ['queue'], () => queueRows().map(({ name, s }): [Labels, number] => [{ queue: name }, s.consumers]));
  }

  if (sources.log) {
    const log = sources.log;
    // Every counter the log engine keeps, one metric each (flowmq_log_sealed_segments_total, ...): they only grow.
    for (const key of Object.keys(log.stats)) {
      if (typeof log.stats[key] !== 'number') continue;
      counter(`log_${snake(key)}_total`, `Log engine counter ${key}`, [], () => one(log.stats[key]));
    }
    // A getter answering a fresh object each time: read it at scrape.
    if (log.memoryStats)
      gauge('log_tail_memory_bytes', 'Bytes of memory holding the unsealed tails of stream partitions', [], () => one(log.memoryStats?.chunkBytes ?? 0));
  }

  if (sources.wal) {
    const wal = sources.wal;
    gauge('wal_bytes', 'Bytes held by the write-ahead log (not yet sealed into segment objects and trimmed)', [], () => one(wal.size()));
    if (wal.commitLatency) {
      const h = wal.commitLatency;
      registry.registerMetric(
        snapshotHistogram(
          PREFIX + 'wal_commit_seconds',
          'Duration of each WAL group commit: the durable write (O_DSYNC write, i.e. write and fsync in one call) or the PostgreSQL transaction',
          () => [[{}, h.snapshot()]],
        ) as never,
      );
    }
  }

  if (sources.protocols) {
    const protocols = sources.protocols;
    // Kafka's produce latency (request decoded → durable answer), kept by its adapter for the admin API.
    registry.registerMetric(
      snapshotHistogram(PREFIX + 'produce_latency_seconds', 'Produce latency, from the decoded request to the durable answer (Kafka)', () => {
        const out: Array<[Labels, HistogramSnapshot]> = [];
        for (const { name, protocol } of protocols()) {
          const f = protocol.figures?.() as { produceLatency?: HistogramSnapshot } | undefined;
          if (f && isSnapshot(f.produceLatency)) out.push([{ protocol: name }, f.produceLatency]);
        }
        return out;
      }) as never,
    );
    const lagCache = new GroupLagCache(protocols, sources.groupLagCacheMs ?? 10_000);
    gauge(
      'consumer_group_lag',
      'Messages not yet consumed by a consumer group, over every partition it has offsets for (refreshed at most every few seconds)',
      ['protocol', 'group'],
      async () => (await lagCache.get()).flatMap((g): Array<[Labels, number]> => (g.lag === null ? [] : [[{ protocol: g.protocol, group: g.name }, g.lag]])),
    );
    gauge('consumer_group_members', 'Members of a consumer group', ['protocol', 'group'], async () =>
      (await lagCache.get()).map((g): [Labels, number] => [{ protocol: g.protocol, group: g.name }, g.members]),
    );
  }

  if (sources.storage) {
    const storage = sources.storage;
    const objectFigures = () => {
      const f = storage.figures().objectFigures as ObjectFigures | undefined;
      if (!f) return { cache: null, ops: null };
      // The block cache wraps the store (its figures carry the store's as `inner`); without it, the store itself.
      const inner = (f.inner ?? f) as ObjectFigures;
      return { cache: 'hits' in f ? f : null, ops: inner.operations ?? null };
    };
    const perOp = (field: 'requests' | 'bytes' | 'errors' | 'retries') => () =>
      Object.entries(objectFigures().ops ?? {}).map(([op, v]): [Labels, number] => [{ operation: op }, Number(v[field]) || 0]);
    counter(
      'object_store_requests_total',
      'Requests sent to the object store, retries included (backends that count them: S3)',
      ['operation'],
      perOp('requests'),
    );
    counter('object_store_bytes_total', 'Bytes received (get) or sent (put, part) by the object store', ['operation'], perOp('bytes'));
    counter('object_store_errors_total', 'Object store operations that failed for good', ['operation'], perOp('errors'));
    counter('object_store_retries_total', 'Object store attempts that retried a failed one', ['operation'], perOp('retries'));
    counter('object_cache_reads_total', 'Object block cache lookups: hit or miss', ['result'], () => {
      const c = objectFigures().cache;
      return c === null
        ? []
        : [
            [{ result: 'hit' }, Number(c.hits) || 0],
            [{ result: 'miss' }, Number(c.misses) || 0],
          ];
    });
    gauge('object_cache_bytes', 'Bytes held by the object block cache', [], () => {
      const c = objectFigures().cache;
      return c === null ? [] : one(Number(c.bytesHeld) || 0);
    });
  }

  if (sources.auth) {
    const auth = sources.auth;
    counter(
      'auth_attempts_total',
      'Password checks by result: ok, bad (wrong credentials), busy (verifier queue full), throttled (too many failures)',
      ['result'],
      () => (['ok', 'bad', 'busy', 'throttled'] as const).map((k): [Labels, number] => [{ result: k }, auth.stats[k]]),
    );
    if (auth.verifier) {
      const v = auth.verifier;
      gauge('auth_verifier_queued', 'Password checks waiting for the verifier thread', [], () => one(v.queued ?? 0));
    }
  }

  if (sources.oidc) {
    const oidc = sources.oidc;
    counter('oidc_tokens_total', 'OIDC tokens checked, by result: verified, refused (signature, claims, expiry, unknown namespace)', ['result'], () =>
      (['verified', 'refused'] as const).map((k): [Labels, number] => [{ result: k }, oidc.stats[k]]),
    );
    counter('oidc_jwks_errors_total', "Tokens answered busy because the identity provider's JWKS could not be fetched or read", [], () =>
      one(oidc.stats.jwksErrors),
    );
  }

  if (sources.access) {
    const access = sources.access;
    counter('authorization_denials_total', 'Requests refused by a policy (any protocol, the admin API included)', [], () => one(access.stats.denied));
  }

  if (sources.quotas) {
    const quotas = sources.quotas;
    const per = (pick: (f: ReturnType<QuotaManager['figures']>[string]) => number) => () =>
      Object.entries(quotas.figures()).map(([ns, f]): [Labels, number] => [{ namespace: ns }, pick(f)]);
    counter(
      'quota_throttled_total',
      'Times a client was held back by a namespace rate quota',
      ['namespace'],
      per((f) => f.throttled),
    );
    counter(
      'quota_throttled_seconds_total',
      'Time clients were held back by namespace rate quotas',
      ['namespace'],
      per((f) => f.throttledMs / 1000),
    );
    counter(
      'quota_refused_connections_total',
      'Connections refused by a namespace connection quota',
      ['namespace'],
      per((f) => f.refusedConnections),
    );
    counter(
      'quota_refused_writes_total',
      'Writes (produce, publish) refused because the namespace was over its storage quota (maxStorageBytes)',
      ['namespace'],
      per((f) => f.refusedWrites),
    );
    if (quotas.storedBytes) {
      const stored = quotas.storedBytes.bind(quotas);
      // One series per namespace and tier (never per stream or client): the figure the storage quota checks.
      gauge(
        'namespace_stored_bytes',
        'Bytes of stream data a namespace holds on this broker: hot tier (WAL tails) or segment objects',
        ['namespace', 'tier'],
        () =>
          [...stored()].flatMap(([ns, s]): Array<[Labels, number]> => [
            [{ namespace: ns, tier: 'hot' }, s.hot],
            [{ namespace: ns, tier: 'objects' }, s.objects],
          ]),
      );
    }
  }

  return {
    registry,
    contentType: registry.contentType,
    text: () => {
      scrapes++;
      return registry.metrics();
    },
  };
}

interface ObjectFigures {
  hits?: number;
  misses?: number;
  bytesHeld?: number;
  inner?: unknown;
  operations?: Record<string, { requests?: number; bytes?: number; errors?: number; retries?: number }>;
}

/** camelCase → snake_case (sealedBytes → sealed_bytes). */
function snake(s: string): string {
  return s.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function isSnapshot(x: unknown): x is HistogramSnapshot {
  return typeof x === 'object' && x !== null && Array.isArray((x as HistogramSnapshot).buckets) && typeof (x as HistogramSnapshot).count === 'number';
}

interface CustomMetricValue {
  metricName: string;
  labels: Labels;
  value: number;
}

/** What prom-client's registry asks of a metric it did not make (see Registry.getMetricsAsString). */
interface CustomMetric {
  name: string;
  help: string;
  type: 'histogram';
  get(): Promise<{ name: string; help: string; type: 'histogram'; values: CustomMetricValue[]; aggregator: 'sum' }>;
}

/** Every fourth bound of the LatencyHistogram: one `le` per doubling (0.02 ms, 0.04 ms, ... ~168 s). */
const LE_INDEXES = HISTOGRAM_BOUNDS_MS.map((_, i) => i).filter((i) => i % 4 === 3);

/**
 * A Prometheus histogram written from LatencyHistogram snapshots at scrape. prom-client's registry takes any object
 * with name, help, type and get(); this one answers cumulative `_bucket` lines in seconds, `_sum` and `_count`.
 */
function snapshotHistogram(name: string, help: string, read: () => Array<[Labels, HistogramSnapshot]>): CustomMetric {
  return {
    name,
    help,
    type: 'histogram',
    async get() {
      const values: CustomMetricValue[] = [];
      for (const [labels, s] of read()) {
        let cumulative = 0;
        let at = 0;
        for (const i of LE_INDEXES) {
          while (at <= i) cumulative += s.buckets[at++] ?? 0;
          values.push({ metricName: `${name}_bucket`, labels: { ...labels, le: seconds(HISTOGRAM_BOUNDS_MS[i]) }, value: cumulative });
        }
        values.push({ metricName: `${name}_bucket`, labels: { ...labels, le: '+Inf' }, value: s.count });
        values.push({ metricName: `${name}_sum`, labels, value: (s.sumMs ?? 0) / 1000 });
        values.push({ metricName: `${name}_count`, labels, value: s.count });
      }
      return { name, help, type: 'histogram', values, aggregator: 'sum' };
    },
  };
}

/** A bound in ms as seconds, short: 0.02 ms → "0.00002". */
function seconds(ms: number): string {
  return String(Number((ms / 1000).toPrecision(4)));
}

/** Consumer groups of every protocol, listed at most every `ttlMs` (listing asks every group's offsets). */
class GroupLagCache {
  private groups: GroupFigure[] = [];
  private at = -Infinity;
  private refreshing: Promise<void> | null = null;

  constructor(
    private readonly protocols: NonNullable<MetricsSources['protocols']>,
    private readonly ttlMs: number,
  ) {}

  async get(): Promise<GroupFigure[]> {
    if (Date.now() - this.at >= this.ttlMs && this.refreshing === null) {
      this.refreshing = this.refresh().finally(() => (this.refreshing = null));
    }
    if (this.refreshing !== null) {
      // Wait a little for fresh figures, but a slow listing never holds a scrape: the last ones answer meanwhile.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.refreshing, new Promise<void>((r) => (timer = setTimeout(r, LAG_WAIT_MS)))]);
      clearTimeout(timer);
    }
    return this.groups;
  }

  private async refresh(): Promise<void> {
    const out: GroupFigure[] = [];
    for (const { protocol } of this.protocols()) {
      if (!protocol.groups) continue;
      try {
        out.push(...(await protocol.groups.list()));
      } catch {
        // A protocol that cannot list now keeps nothing: its groups drop out until the next refresh.
      }
    }
    this.groups = out;
    this.at = Date.now();
  }
}
