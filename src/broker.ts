/**
 * Assembles one broker process: storage backends, the log engine, the routing core, the protocol listeners
 * and the admin API; and takes them down again in the right order.
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Logger } from 'pino';
import { clusterTlsMode, type Config } from './config/index.js';
import { Engine, FlowError, queueFactory, type QueuePages, type QueueStore } from './core/index.js';
import {
  AccessControl,
  createMetrics,
  followNamespaceRemovals,
  Directory,
  FloodCollector,
  PasswordGuard,
  RuntimeSettings,
  parseUsersFile,
  processMemory,
  readUsersFile,
  seedDirectory,
  reloadDirectory,
  startAdminApi,
  startRabbitManagement,
  httpTimeouts,
  type RabbitManagement,
  WebhookAuthenticator,
  openOidcVerifier,
  type AdminApi,
  type Metrics,
  type UsersFile,
  storedByNamespace,
} from './control/index.js';
import type { ProtocolListener, ProtocolModule, RunningProtocol } from './protocols/types.js';
import { connectionTotals, formatAddress } from './protocols/listener.js';
import { mqttModule } from './protocols/mqtt/module.js';
import { kafkaModule } from './protocols/kafka/module.js';
import { amqpModule } from './protocols/amqp/module.js';
import { natsModule } from './protocols/nats/module.js';
import { LogManager } from './storage/log/index.js';
import { openStorage, sealOtherWalLayout, type Storage } from './storage/open.js';
import { MemoryControlStore, isControlStore, type ControlStore } from './storage/metastore/control-store.js';
import { lockDataDir } from './storage/lock.js';
import { DiskSpace } from './storage/disk-space.js';
import type { WriteAheadLog } from './storage/wal/index.js';
import {
  Cluster,
  ClusterStreams,
  followControl,
  Live,
  openPostgresClusterStore,
  startChannel,
  type ChannelTlsOptions,
  type Endpoint,
  type TcpChannel,
} from './cluster/index.js';
import { ClusterQueues } from './cluster/queues.js';

export interface Broker {
  readonly config: Config;
  readonly engine: Engine;
  readonly log: LogManager;
  readonly listeners: Map<string, ProtocolListener>;
  readonly admin: AdminApi;
  readonly access: AccessControl;
  /** Prometheus metrics, read from the broker's own counters at each scrape (GET /metrics). */
  readonly metrics: Metrics;
  /** Cluster mode: this broker's membership, ownership and channel; null on a single broker. */
  readonly cluster: Cluster | null;
  /** Port actually bound per listener ("mqtt", "kafka", "http"). */
  ports(): Record<string, number>;
  /**
   * A configuration reload (SIGHUP): the users file read again (reloadDirectory), then each protocol's reload (NATS:
   * its operator and account JWT files, and every subscription checked against the permissions now in force).
   * Settings given as flags or environment stay as they are. What failed is logged; the broker runs on.
   */
  reload(): Promise<Record<string, unknown>>;
  close(): Promise<void>;
}

/**
 * The protocols a broker can run, in start order (--protocols picks among them by name). A protocol is one entry
 * here: its module owns its options, listeners, figures and close.
 */
/** The broker's version (package.json), for GET /api/v1/broker and the OpenAPI document. */
const BROKER_VERSION = ((): string => {
  try {
    const url = new URL('../../package.json', import.meta.url);
    return String((JSON.parse(readFileSync(url, 'utf8')) as { version?: string }).version ?? '0.0.0');
  } catch {
    return '0.0.0';
  }
})();

export const PROTOCOL_MODULES: readonly ProtocolModule[] = [mqttModule, kafkaModule, amqpModule, natsModule];

/**
 * What a start has opened, closed newest first: all of it when the start fails part-way (nothing acknowledged yet,
 * grace 0), or at close(). Each entry is pushed as soon as its part is open, in the order the parts must close in
 * reverse: a part that must close before one opened after it pushes a second, idempotent closer later (the cluster
 * hands its work over while the log is still open).
 */
class Closers {
  private readonly stack: Array<{ what: string; close: (graceMs?: number) => Promise<void> | void }> = [];
  constructor(private readonly logger: Logger) {}

  push(what: string, close: (graceMs?: number) => Promise<void> | void): void {
    this.stack.push({ what, close });
  }

  /**
   * Closes everything, newest first. A part that fails to close is logged and the others still close; the first
   * failure is thrown at the end.
   */
  async run(graceMs?: number): Promise<void> {
    let first: unknown = null;
    for (let c = this.stack.pop(); c !== undefined; c = this.stack.pop()) {
      try {
        await c.close(graceMs);
      } catch (err) {
        this.logger.warn({ err, part: c.what }, 'closing the broker: a part failed to close');
        first ??= err;
      }
    }
    if (first !== null) throw first;
  }
}

/**
 * Non-durable queues page past their window into the local queue store under `amq.page.<broker id>.` (QueuePages):
 * what an earlier run of this broker left there is dropped first, since no non-durable queue survives a restart.
 * Cluster mode: after registering (an id already live elsewhere stops the start before), and only this broker's
 * prefix, so one broker's sweep never touches another's pages. The sweep runs while the log recovers; `swept` is
 * awaited before any queue opens.
 */
function sweepQueuePages(store: QueueStore, brokerId: number, logger: Logger): { pages: QueuePages | undefined; swept: Promise<void> } {
  if (!store.dropQueues) return { pages: undefined, swept: Promise.resolve() };
  const prefix = `amq.page.${brokerId}.`;
  const swept = store.dropQueues(prefix).then((n) => {
    if (n > 0) logger.info({ swept: n, prefix }, 'queue store: pages of non-durable queues of an earlier run dropped');
  });
  swept.catch(() => undefined);
  return { pages: { store, prefix }, swept };
}

export async function startBroker(config: Config, logger: Logger): Promise<Broker> {
  // The users file first: a bad one stops the broker before it opens storage. It seeds the directory below.
  const seedUsers = config.usersFile === null ? null : parseUsersFile(await readUsersFile(config.usersFile), config.usersFile);
  const closers = new Closers(logger);
  try {
    const data = await openDataPlane(config, logger, closers);
    const control = await openControlPlane(config, logger, data.storage.metastore, seedUsers);
    closers.push('control plane', async () => {
      control.access.close();
      control.directory.close();
      await control.guard.close();
    });
    // Reading a stream or queue is judged by the topics that feed it (authorization follows the data).
    control.access.sources = data.engine;
    // Cluster mode: users and policies changed through any broker apply here at once (the `control` notify).
    if (data.cluster) await followControl(data.cluster.cluster, control.directory, config.controlRefresh, logger.child({ component: 'control' }));
    return await startServing(config, logger, data, control, closers);
  } catch (err) {
    // What failed to close is logged; the error that stopped the start is the one to report.
    await closers.run(0).catch(() => undefined);
    throw err;
  }
}

/** The data plane a broker serves from: storage, the log engine, the routing core and, in cluster mode, the cluster. */
interface DataPlane {
  storage: Storage;
  wal: WriteAheadLog;
  space: DiskSpace;
  log: LogManager;
  engine: Engine;
  cluster: { cluster: Cluster; channel: TcpChannel } | null;
  clusterStreams: ClusterStreams | null;
  live: Live | null;
}

/** Locks the data directory, opens storage (and the cluster), recovers the log and loads the routing core. */
async function openDataPlane(config: Config, logger: Logger, closers: Closers): Promise<DataPlane> {
  const dataDir = resolve(config.dataDir);
  mkdirSync(dataDir, { recursive: true });
  closers.push('data directory lock', lockDataDir(dataDir));
  // Backends as configured (embedded by default); one that cannot be reached stops the start with one line.
  const storage = await openStorage(config, dataDir, logger);
  closers.push('storage backends', () => storage.close());
  const { metastore, objects } = storage;
  // Cluster mode: register with the others (a heartbeat lease) and open the internal channel before the log engine,
  // which then takes only the partitions this broker is given (see src/cluster/cluster.ts).
  const clustered = config.cluster ? await openCluster(config, logger) : null;
  if (clustered) closers.push('cluster membership', () => clustered.close());
  const cluster = clustered?.cluster ?? null;
  const { pages, swept } = sweepQueuePages(storage.queues, config.brokerId, logger);
  const logOptions = {
    segmentBytes: config.segmentBytes,
    segmentMs: config.segmentMs,
    maxUnsealedBytes: config.maxUnsealedBytes,
    recentBytes: config.readCacheBytes ?? undefined,
    recentMaxAgeMs: config.readCacheMaxAge,
    compactionBytesPerSec: config.compactionBytesPerSec,
  };
  const logLogger = logger.child({ component: 'log' });
  await sealOtherWalLayout(config, dataDir, storage, logOptions, logLogger);
  const wal = await storage.openWal(config.walLayout);
  closers.push('WAL', () => wal.close());
  // The free-space reserve: stream appends are refused (retriable) before the disk is full (see disk-space.ts).
  // Only where appends land on the local disk: with the WAL in PostgreSQL, a full local disk stops no write.
  const space = await DiskSpace.open({ dir: dataDir, minFreeBytes: config.minFreeDisk, logger: logger.child({ component: 'disk' }) });
  closers.push('free-space reserve', () => space.close());
  if (config.wal === 'file') logger.info({ dir: dataDir, minFreeBytes: space.minFreeBytes, freeBytes: space.freeBytes }, 'free-space reserve');
  const log = await LogManager.open({
    wal,
    objects,
    metastore,
    logger: logLogger,
    options: logOptions,
    ...(config.wal === 'file' ? { space } : {}),
    ...(cluster ? { owned: true } : {}),
  });
  // The grace lets appends already acknowledged become durable (0 when the start failed: nothing was acknowledged).
  closers.push('log engine', (graceMs) => log.close(graceMs));
  // Cluster streams: partitions owned here go to the log, the others are forwarded to their owners; the stream
  // catalog follows the other brokers' changes (src/cluster/streams.ts).
  const clusterStreams = cluster
    ? await ClusterStreams.start({ log, cluster, catalog: metastore, logger: logger.child({ component: 'cluster-streams' }) })
    : null;
  if (clusterStreams) closers.push('cluster streams', () => clusterStreams.close());
  // The metastore covers every durable role (definitions, offsets, producer ids, sessions, retained messages), keyed
  // so another broker could take them over: it is passed once, and the adapters take their part from engine.store.
  const engine = new Engine(
    clusterStreams ?? log,
    metastore,
    storage.queues,
    queueFactory({ maxMessages: Math.max(1, config.queueWindowMessages), maxBytes: Math.max(1, config.queueWindowBytes) }, pages),
  );
  clusterStreams?.attach((defs) => engine.syncStreams(defs));
  // Durable queues are under the free-space reserve where they are on the local disk (the embedded queue store).
  if (config.metastore.kind === 'sqlite') engine.writeRefusal = () => space.refusal();
  // Cluster queues: persisted queues owned across brokers (src/cluster/queues.ts), attached before load.
  if (cluster) closers.push('cluster queues', await ClusterQueues.open(engine, cluster, logger.child({ component: 'cluster-queues' })));
  // Cluster: at close, everything is handed over first, while the log is still open to make it durable; then leave.
  if (clustered) closers.push('cluster handover', () => clustered.close());
  // The queue store's worker has booted meanwhile (or the start fails here, naming it).
  await storage.ready;
  await swept;
  await engine.load();
  log.finishRecovery();
  // Cluster mode, live side: interest and forwarding across brokers, retained messages (before any subscription).
  const live = clustered
    ? await Live.start({ cluster: clustered.cluster, channel: clustered.channel, engine, logger: logger.child({ component: 'live' }) })
    : null;
  if (live) closers.push('live forwarding', () => live.close());
  // Queue timers (TTL, x-expires) stop before the stores close; nothing is deleted.
  closers.push('routing core', () => engine.close());
  logger.info({ dataDir, streams: engine.listAllStreams().length, recoveredBatches: log.stats.recoveredBatches }, `storage ready (${storage.description})`);
  return { storage, wal, space, log, engine, cluster: clustered, clusterStreams, live };
}

/** Starts the protocol listeners and the admin API over the data and control planes; the broker is ready after it. */
async function startServing(config: Config, logger: Logger, data: DataPlane, control: ControlPlane, closers: Closers): Promise<Broker> {
  const { storage, wal, space, log, engine, clusterStreams, live } = data;
  const { directory, guard, access, protocolGuard } = control;
  const cluster = data.cluster?.cluster ?? null;
  const listeners = new Map<string, ProtocolListener>();
  const started = Date.now();
  /** GET /readyz: true from the end of the start until close begins. */
  let ready = false;
  /** The running protocols, in start order; their figures go under their names in GET /api/v1/broker. */
  const running: Array<{ name: string; protocol: RunningProtocol }> = [];
  // What a flood of connections leaves behind is given back once it has gone (see src/control/memory.ts).
  const collector = new FloodCollector({ totals: connectionTotals, logger: logger.child({ component: 'memory' }) });
  closers.push('protocols', async () => {
    collector.stop();
    await Promise.allSettled(running.map((r) => r.protocol.close()));
  });
  // Stored bytes per namespace (the log's per-stream sizes, a stream attributed by its name): the one figure the
  // storage quota, /metrics, the admin API and JetStream account info share.
  access.quotas.useStorage(() => storedByNamespace(engine.streamSizes()));
  if (cluster) {
    // A namespace's quotas are the cluster's: each live broker enforces its part (src/control/quotas.ts).
    const share = (ids: readonly number[]) => access.quotas.shareWith(ids, cluster.id);
    share(cluster.placementBrokers());
    cluster.on('membership', share);
    closers.push('quota shares', () => {
      cluster.off('membership', share);
    });
  }
  closers.push('namespace links', followNamespaceLinks(engine, directory, logger.child({ component: 'links' })));
  const enabled: readonly string[] = config.protocols;
  // The protocols start side by side (one's listener binds while another reads its state), then are recorded in
  // PROTOCOL_MODULES order; when one fails, the others that started are closed with the broker.
  const modules = PROTOCOL_MODULES.filter((m) => enabled.includes(m.name));
  for (const m of modules) m.check?.(config);
  const starts = await Promise.allSettled(
    modules.map((module) => module.start({ engine, logger, brokerId: config.brokerId, config, guard: protocolGuard, access, cluster })),
  );
  starts.forEach((s, i) => {
    if (s.status === 'fulfilled') running.push({ name: modules[i].name, protocol: s.value });
  });
  for (const { protocol } of running) for (const [name, l] of protocol.listeners) listeners.set(name, l);
  const failed = starts.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) throw failed.reason;
  // Made once the listeners are up (loading prom-client was ~22 ms of a restart's wait); read at scrape only.
  const metrics = createMetrics({
    clients: access.clients,
    engine,
    log,
    wal,
    storage,
    listeners,
    protocols: () => running,
    auth: { stats: guard.stats, verifier: guard.verifier },
    access,
    ...(access.oidc !== null ? { oidc: access.oidc } : {}),
    quotas: access.quotas,
    ready: () => ready,
  });
  // Every HTTP listener's headers timeout and lingering close (the protocols' listeners read the same options).
  const httpGuard = httpTimeouts({ headersTimeoutMs: config.httpHeadersTimeout, lingerMs: config.httpLinger });
  // The protocols' consumer groups and MQTT sessions, for both management APIs (a deleted namespace's go with it).
  const protocolGroups = () => running.flatMap((r) => (r.protocol.groups ? [{ protocol: r.name, admin: r.protocol.groups }] : []));
  const mqttSessions = () => running.find((r) => r.name === 'mqtt')?.protocol.sessions;
  // A namespace deleted through any broker: its clients here are disconnected and the Kafka groups this broker
  // coordinates dropped (in cluster mode the `control` notify tells; namespace-removal.ts).
  followNamespaceRemovals(access.directory, access.clients, { groups: protocolGroups, mqttSessions });
  const admin = await startAdminApi({
    engine,
    logger: logger.child({ component: 'admin' }),
    rootLogger: logger,
    access,
    // Cluster mode: flush and compact reach the owners of partitions held elsewhere.
    storage: clusterStreams
      ? {
          flushAll: () => log.flushAll(),
          compact: (stream) => log.compact(stream),
          describe: (stream) => log.describe(stream),
          atOwners: (stream, partitions, compact) => clusterStreams.maintain(stream, partitions, compact),
        }
      : log,
    host: config.httpHost,
    port: config.httpPort,
    allowedHosts: config.httpAllowedHosts,
    metricsAllow: config.httpMetricsAllow,
    metrics,
    sessionTtlMs: config.httpSessionTtl,
    timeouts: httpGuard,
    version: BROKER_VERSION,
    groups: protocolGroups,
    mqttSessions,
    // Kafka's broker configs altered at run time (GET/PATCH /api/v1/broker/configs).
    brokerConfigs: () => running.find((r) => r.name === 'kafka')?.protocol.brokerConfigs,
    brokerId: config.brokerId,
    // Cluster mode: GET /api/v1/cluster (brokers, owners).
    cluster,
    // Storage has recovered before the API starts; ready once the listeners are up too, and no longer once closing.
    ready: () => ready,
    info: () => ({
      brokerId: config.brokerId,
      uptimeMs: Date.now() - started,
      listeners: Object.fromEntries([...listeners].map(([k, l]) => [k, { ...l.address(), connections: l.connections() }])),
      ...(protocolGuard ? { auth: { ...guard.stats, verifier: guard.verifier.stats, queued: guard.verifier.queued, tracked: guard.throttle.size } } : {}),
      storage: {
        metastore: storage.metastore.kind,
        objects: storage.objects.kind,
        wal: config.wal,
        walBytes: wal.size(),
        log: log.stats,
        batchMemory: log.memoryStats,
        // The free-space reserve guards local appends only (see above): no figure where the WAL is in PostgreSQL.
        ...(config.wal === 'file' ? { disk: space.figures() } : {}),
        // Pools, requests and bytes by operation, the object block cache (backends that keep figures).
        ...storage.figures(),
        ...(wal.figures ? { walFigures: wal.figures() } : {}),
        // Cluster streams: forwarded and served appends and reads, partitions owned here.
        ...(clusterStreams ? { clusterStreams: clusterStreams.figures() } : {}),
      },
      ...Object.fromEntries(running.flatMap((r) => (r.protocol.figures ? [[r.name, r.protocol.figures()]] : []))),
      // Cluster mode: live interest and forwarding figures (src/cluster/live.ts).
      ...(live ? { live: live.figures() } : {}),
      process: { ...processMemory(), floodCollector: collector.stats() },
    }),
  });
  // Stop taking traffic first (the API, then the protocols), then let storage finish what was acknowledged.
  closers.push('admin API', () => admin.close());
  logger.info({ protocol: 'http', address: formatAddress(admin.address()), auth: admin.auth }, 'listening (admin API)');
  // RabbitMQ's management API subset on its own port (src/control/rabbitmq/server.ts says why not under the admin API).
  let management: RabbitManagement | null = null;
  if (config.amqpManagementPort !== null) {
    management = await startRabbitManagement({
      engine,
      logger: logger.child({ component: 'amqp-management' }),
      access,
      host: config.httpHost,
      port: config.amqpManagementPort,
      allowedHosts: config.httpAllowedHosts,
      timeouts: httpGuard,
      amqp: () => running.find((r) => r.name === 'amqp')?.protocol.amqpManagement,
      listeners: () => [
        ...[...listeners].map(([name, l]) => ({ name, port: l.address().port })),
        { name: 'http', port: admin.address().port },
        ...(management !== null ? [{ name: 'management', port: management.address().port }] : []),
      ],
      disk: () => (config.wal === 'file' ? space.figures() : null),
      version: BROKER_VERSION,
      startedAt: started,
      removal: { groups: protocolGroups, mqttSessions },
    });
    const m = management;
    closers.push('amqp management API', () => m.close());
    logger.info({ protocol: 'amqp-management', address: formatAddress(m.address()) }, 'listening (RabbitMQ management API)');
  }
  if (directory.size === 0 && !access.hasUsers && config.httpHost !== '127.0.0.1' && config.httpHost !== 'localhost' && config.httpHost !== '::1') {
    logger.warn(
      { protocol: 'http', address: formatAddress(admin.address()) },
      'no user exists yet: the admin API answers loopback callers only (as an administrator) until the first user is added with `flowmq user add`',
    );
  }
  collector.start();
  if (data.cluster) {
    // Clients and the other brokers learn the bound listeners' advertised addresses; then this broker takes its share.
    await data.cluster.cluster.advertise(advertisedEndpoints(config, listeners, admin.address().port, data.cluster.channel.address().port));
    data.cluster.cluster.begin();
  }
  ready = true;

  let closing: Promise<void> | null = null;
  let reloading: Promise<Record<string, unknown>> = Promise.resolve({});
  const reloadOnce = async (): Promise<Record<string, unknown>> => {
    const figures: Record<string, unknown> = {};
    if (config.usersFile !== null) {
      try {
        const file = parseUsersFile(await readUsersFile(config.usersFile), config.usersFile);
        figures.usersFile = await reloadDirectory(directory, file, config.usersFile, (password, stored) => guard.verifier.verify(password, stored));
      } catch (err) {
        logger.warn({ err, usersFile: config.usersFile }, 'reload: the users file did not load; the directory stays as it was');
        figures.usersFile = { error: (err as Error).message };
      }
    }
    for (const r of running) {
      if (r.protocol.reload === undefined) continue;
      try {
        figures[r.name] = await r.protocol.reload();
      } catch (err) {
        logger.warn({ err, protocol: r.name }, 'reload failed for a protocol');
      }
    }
    logger.info(figures, 'configuration reloaded');
    return figures;
  };
  return {
    reload() {
      // One reload at a time, in order: a second signal during one runs after it.
      reloading = reloading.then(reloadOnce, reloadOnce);
      return reloading;
    },
    config,
    engine,
    log,
    listeners,
    admin,
    access,
    metrics,
    cluster,
    ports: () => ({
      ...Object.fromEntries([...listeners].map(([k, l]) => [k, l.address().port])),
      http: admin.address().port,
      ...(management !== null ? { 'amqp-management': management.address().port } : {}),
    }),
    close() {
      closing ??= (async () => {
        ready = false;
        await closers.run();
      })();
      return closing;
    },
  };
}

/**
 * Cluster mode: the membership store (in the metastore's database), this broker's registration with its lease, and
 * the internal channel. Listeners' advertised addresses are added once they are bound (advertise()).
 */
async function openCluster(config: Config, logger: Logger): Promise<{ cluster: Cluster; channel: TcpChannel; close(): Promise<void> }> {
  if (config.metastore.kind !== 'postgres') throw new FlowError('CONFIG_ERROR', '--cluster needs --metastore postgres://...');
  const clusterLogger = logger.child({ component: 'cluster' });
  const tls = channelTls(config);
  const store = await openPostgresClusterStore({ url: config.metastore.url, statementTimeoutMs: config.pgStatementTimeout, logger: clusterLogger });
  const host = advertisedHost(config);
  const port = config.advertisedListeners.cluster?.port ?? config.clusterPort;
  let cluster: Cluster;
  try {
    cluster = await Cluster.start({
      store,
      info: { id: config.brokerId, version: BROKER_VERSION, endpoints: { cluster: config.advertisedListeners.cluster ?? { host, port } } },
      leaseMs: config.clusterLease,
      logger: clusterLogger,
    });
  } catch (err) {
    await store.close();
    throw err;
  }
  let channel: TcpChannel;
  try {
    channel = await startChannel({
      cluster,
      host: config.clusterHost ?? config.host,
      port: config.clusterPort,
      secret: config.clusterSecret ?? '',
      tls,
      logger: clusterLogger,
    });
  } catch (err) {
    await cluster.close();
    await store.close();
    throw err;
  }
  cluster.channel = channel;
  let closing: Promise<void> | null = null;
  return {
    cluster,
    channel,
    close: () =>
      (closing ??= (async () => {
        await cluster.close();
        await channel.close();
        await store.close();
      })()),
  };
}

/** The channel's TLS settings (--cluster-tls, auto resolved), certificate files read now: a bad path stops the start. */
function channelTls(config: Config): ChannelTlsOptions {
  const mode = clusterTlsMode(config);
  if (mode !== 'cert') return { mode };
  const read = (option: string, path: string | null): Buffer => {
    try {
      return readFileSync(path ?? '');
    } catch (err) {
      throw new FlowError('CONFIG_ERROR', `cannot read --${option} ${String(path)}: ${(err as Error).message}`, { cause: err });
    }
  };
  return {
    mode,
    cert: read('cluster-tls-cert', config.clusterTlsCert),
    key: read('cluster-tls-key', config.clusterTlsKey),
    ca: read('cluster-tls-ca', config.clusterTlsCa),
  };
}

/** The host clients and brokers are told to connect to: --advertised-host, else the bind address (loopback for a wildcard). */
function advertisedHost(config: Config): string {
  if (config.advertisedHost !== null) return config.advertisedHost;
  return config.host === '0.0.0.0' || config.host === '::' ? '127.0.0.1' : config.host;
}

/** Advertised address of every bound listener (--advertised-listeners overrides one by name). */
function advertisedEndpoints(config: Config, listeners: Map<string, ProtocolListener>, httpPort: number, clusterPort: number): Record<string, Endpoint> {
  const host = advertisedHost(config);
  const out: Record<string, Endpoint> = {};
  for (const [name, l] of listeners) out[name] = { host, port: l.address().port };
  out.http = { host: config.httpHost === '0.0.0.0' || config.httpHost === '::' ? host : config.httpHost, port: httpPort };
  out.cluster = { host, port: clusterPort };
  if (config.kafkaAdvertisedHost !== null && out.kafka) out.kafka = { ...out.kafka, host: config.kafkaAdvertisedHost };
  return { ...out, ...config.advertisedListeners };
}

/** The control plane a broker checks clients against. */
interface ControlPlane {
  directory: Directory;
  guard: PasswordGuard;
  access: AccessControl;
  /** The guard the adapters check passwords with; null while nobody could log in (zero setup). */
  protocolGuard: PasswordGuard | null;
}

/** Opens the control plane over the metastore: the directory, the password guard, the users file's seed, access. */
async function openControlPlane(config: Config, logger: Logger, metastore: object & { kind: string }, seedUsers: UsersFile | null): Promise<ControlPlane> {
  // The control plane: the directory (users, groups, tokens, policies, namespaces) lives in the metastore, so every
  // broker sharing it sees the same identities; this process keeps a copy in memory for the data path.
  const controlStore: ControlStore = isControlStore(metastore) ? metastore : new MemoryControlStore();
  if (!isControlStore(metastore))
    logger.warn({ metastore: metastore.kind }, 'this metastore has no control-plane role: users and policies are kept in memory only');
  // Every clear-text password check (MQTT CONNECT, Kafka PLAIN, AMQP, NATS, HTTP; SCRAM failures are counted) goes
  // through one guard: throttled per address and username, scrypt on its own worker thread (started by the first
  // check) with a bounded queue, never on libuv's pool, which the WAL's writes use. New passwords are hashed there too.
  // eslint-disable-next-line prefer-const -- the directory's hasher (a closure made before the guard) reads it
  let guard!: PasswordGuard;
  const directory = await Directory.open({
    store: controlStore,
    defaultPolicy: config.defaultPolicy,
    hasher: (password) => guard.verifier.hash(password),
    logger: logger.child({ component: 'control' }),
  });
  guard = new PasswordGuard(directory, {
    verifier: { threads: config.authThreads, maxQueue: config.authQueue, nice: config.authNice },
    throttle: {
      freeFailures: config.authFreeFailures,
      windowMs: config.authFailureWindow,
      maxDelayMs: config.authMaxDelay,
      userMaxDelayMs: config.authUserMaxDelay,
    },
    logger: logger.child({ component: 'auth' }),
  });
  if (seedUsers) {
    try {
      // Only what is absent is created; passwords of users the file made are set again where the file changed them.
      const added = await seedDirectory(directory, seedUsers, config.usersFile ?? '', (password, stored) => guard.verifier.verify(password, stored));
      logger.info({ usersFile: config.usersFile, users: seedUsers.users.length, added }, 'users file seeded into the directory');
    } catch (err) {
      await guard.close();
      throw err;
    }
  }
  // Cluster mode polls slowly as a safety net behind the `control` notify (followControl in startBroker).
  if (config.metastore.kind !== 'sqlite' && !config.cluster) directory.startPolling(config.controlRefresh);
  // Anonymous access: as configured, else allowed exactly while nobody could log in (zero setup).
  const usersExist = directory.size > 0 || config.authWebhook !== null || config.oidcIssuer !== null;
  const anonymousAll = config.allowAnonymous ?? !usersExist;
  // The admin API is not among them: once users exist it always wants credentials (--allow-anonymous does not open it).
  const anonymous = new Set<string>(config.anonymousProtocols ?? (anonymousAll ? config.protocols : []));
  if (!usersExist && !anonymousAll)
    logger.warn('anonymous access is off and there are no users yet: add one with `flowmq user add` (the admin API is open from loopback until then)');
  // Users the directory does not know go to the webhook, when one is configured (see src/control/webhook.ts).
  const external =
    config.authWebhook === null
      ? null
      : new WebhookAuthenticator({
          url: config.authWebhook,
          timeoutMs: config.authWebhookTimeout,
          cacheTtlMs: config.authWebhookCacheTtl,
          logger: logger.child({ component: 'auth-webhook' }),
        });
  // Runtime settings (client quotas, broker configs set at run time), in the same store, reloaded with the directory.
  const settings = await RuntimeSettings.open(controlStore, directory, logger.child({ component: 'settings' }));
  // JWTs of the company's identity provider, accepted wherever a password or token is (src/control/oidc.ts).
  const oidc =
    config.oidcIssuer === null
      ? null
      : await openOidcVerifier({
          issuer: config.oidcIssuer,
          audience: config.oidcAudience,
          jwksUrl: config.oidcJwksUrl,
          jwksFile: config.oidcJwksFile,
          hmacSecret: config.oidcHmacSecret,
          usernameClaim: config.oidcUsernameClaim,
          groupsClaim: config.oidcGroupsClaim,
          namespaceClaim: config.oidcNamespaceClaim,
          adminGroups: (config.oidcAdminGroups ?? '')
            .split(',')
            .map((g) => g.trim())
            .filter((g) => g !== ''),
          clockSkewMs: config.oidcClockSkew,
          maxSessionMs: config.oidcMaxSession,
          refreshCooldownMs: config.oidcJwksRefresh,
        });
  const access = new AccessControl({ directory, guard, anonymous, external, settings, oidc, logger: logger.child({ component: 'access' }) });
  logger.info(
    { users: directory.size, policies: directory.policies.size, defaultPolicy: config.defaultPolicy, anonymous: [...anonymous] },
    'control plane ready',
  );
  // Adapters written before the directory check passwords only when there is a guard: keep it null while nobody
  // could log in, so that the zero-setup broker lets everyone in as before.
  const protocolGuard = usersExist ? guard : null;
  return { directory, guard, access, protocolGuard };
}

/**
 * The directory's namespace exports and imports (NATS accounts' links, src/core/links.ts), applied at start and again
 * whenever they change (the admin API, the users file, another broker's change). An import that does not hold (no
 * such export, not granted) is logged and left out, as nats-server does. Answers the closer.
 */
function followNamespaceLinks(engine: Engine, directory: Directory, logger: Logger): () => void {
  let last = '';
  const apply = (): void => {
    const defs = directory
      .listNamespaces()
      .filter((n) => n.exports !== undefined || n.imports !== undefined)
      .map((n) => ({ namespace: n.name, exports: n.exports ?? [], imports: n.imports ?? [] }));
    const key = JSON.stringify(defs);
    if (key === last) return;
    last = key;
    const out = engine.links.configure('namespaces', defs);
    for (const r of out.refused) logger.warn(r, 'namespace import refused');
    if (out.active.length > 0 || defs.length > 0) logger.info({ imports: out.active }, 'namespace exports and imports applied');
  };
  apply();
  const off = directory.onChange(apply);
  return () => {
    off();
    engine.links.close();
  };
}
