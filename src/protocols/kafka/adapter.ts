/**
 * State shared by every Kafka connection of one listener: the engine, options, the API routes, and topic
 * auto-creation (deduplicated, so concurrent requests naming the same new topic create it once).
 */
import type { Logger } from 'pino';
import {
  LatencyHistogram,
  isFlowError,
  isQualifiedStream,
  isValidInternalStreamName,
  ProducerIdAllocator,
  type Engine,
  type ProducerIdStore,
  type StreamDef,
  type StreamEntry,
} from '../../core/index.js';
import type { AdapterContext } from '../types.js';
import { ApiKey, KafkaErrorCode, type ApiVersionRange } from './codec/index.js';
import { kafkaErrorCode } from './errors.js';
import type { ResolvedKafkaOptions } from './options.js';
import { FramePool } from './frame-pool.js';
import { LogLimiter } from '../../util/log-limit.js';
import type { Route } from './types.js';
import { GroupCoordinator } from './groups/coordinator.js';
import type { TopicCatalog } from './groups/consumer-coordinator.js';
import type { AssignorTopic } from './groups/assignors.js';
import { KafkaCluster } from './cluster.js';
import { KafkaBrokerConfigs } from './broker-configs.js';
import { RuntimeSettings } from '../../control/index.js';
import { FetchSessionCache } from './fetch-sessions.js';
import { TransactionCoordinator } from './transactions/coordinator.js';
import { MemoryControlStore, isControlStore } from '../../storage/metastore/control-store.js';
// Registers the snappy, lz4 and zstd decompressors with the core.

export type TopicResult = { entry: StreamEntry; errorCode: 0 } | { entry: null; errorCode: number };

/** The topics the consumer group protocol assigns: the streams that have a topic id (KIP-516). */
function streamCatalog(engine: Engine): TopicCatalog {
  const topic = (def: StreamDef | undefined): AssignorTopic | undefined =>
    def?.id !== undefined ? { id: def.id, name: def.name, partitions: def.partitions } : undefined;
  return {
    byName: (name) => topic(engine.getAnyStream(name)?.def),
    byId: (id) => topic(engine.getAnyStreamById(id)?.def),
    all: () => engine.listAllStreams().flatMap((d) => topic(d) ?? []),
  };
}

export class KafkaAdapter {
  readonly engine: Engine;
  readonly logger: Logger;
  readonly brokerId: number;
  private readonly routeByKey: Map<number, Route<KafkaAdapter>>;
  /** Ranges advertised by ApiVersions: exactly the APIs with a route. */
  readonly apiVersions: ApiVersionRange[];
  private readonly creating = new Map<string, Promise<void>>();
  /** Coordinator of the consumer groups: all of them on a single broker, those placed here in a cluster. */
  readonly groups: GroupCoordinator;
  readonly producerIds: ProducerIdStore;
  readonly producerIdAllocator: ProducerIdAllocator;
  /** Produce requests with acks=1/all: from the decoded request to the durable response, in ms. */
  readonly produceLatency = new LatencyHistogram();
  /** Reused memory for large request frames, and the budget of frame memory ahead of arrival (see frame-pool.ts). */
  readonly frames: FramePool;
  /** Client-triggered log lines (protocol errors, refused requests, timeouts) at a bounded rate per address. */
  readonly logLimit: LogLimiter;
  /** Cluster mode: brokers, partition leaders and group coordinators (cluster.ts); null on a single broker. */
  readonly cluster: KafkaCluster | null;
  /** Runtime settings (client quotas, broker configs): the control plane's, else in memory (no access control). */
  readonly settings: RuntimeSettings;
  /** Kafka's broker configs: described, altered at run time, applied (broker-configs.ts). */
  readonly brokerConfigs: KafkaBrokerConfigs;
  /** Incremental fetch sessions of this broker's connections (KIP-227, fetch-sessions.ts). */
  readonly fetchSessions: FetchSessionCache;
  /**
   * The transaction coordinator (KIP-98) and the partitions' transaction state (LSO, aborted transactions); its
   * state is in the metastore's control documents (a store without that role keeps it in memory).
   */
  readonly transactions: TransactionCoordinator;

  constructor(
    ctx: AdapterContext,
    readonly options: ResolvedKafkaOptions,
    routes: readonly Route<KafkaAdapter>[],
  ) {
    this.engine = ctx.engine;
    this.logger = ctx.logger;
    this.brokerId = ctx.brokerId;
    this.frames = new FramePool(undefined, options.frameReserveBytes);
    this.logLimit = new LogLimiter(ctx.logger);
    // Committed offsets and producer ids are kept in the core's one store (the broker's metastore).
    this.producerIds = ctx.engine.store;
    this.producerIdAllocator = new ProducerIdAllocator(this.producerIds);
    this.groups = new GroupCoordinator(
      ctx.engine.store,
      ctx.logger.child({ component: 'groups' }),
      {
        minSessionTimeoutMs: options.groupMinSessionTimeoutMs,
        maxSessionTimeoutMs: options.groupMaxSessionTimeoutMs,
        initialRebalanceDelayMs: options.groupInitialRebalanceDelayMs,
      },
      streamCatalog(ctx.engine),
      { sessionTimeoutMs: options.consumerGroupSessionTimeoutMs, heartbeatIntervalMs: options.consumerGroupHeartbeatIntervalMs },
    );
    this.settings = options.access?.settings ?? new RuntimeSettings();
    this.brokerConfigs = new KafkaBrokerConfigs({
      engine: ctx.engine,
      brokerId: ctx.brokerId,
      options,
      settings: this.settings,
      rootLogger: options.rootLogger ?? ctx.logger,
      logger: ctx.logger,
    });
    const store = ctx.engine.store;
    const txnStore = isControlStore(store) ? store : new MemoryControlStore();
    this.transactions = new TransactionCoordinator(
      ctx.engine,
      txnStore,
      () => this.producerIdAllocator.allocate(),
      ctx.logger.child({ component: 'transactions' }),
    );
    this.transactions.idExpirationMs = options.transactionalIdExpirationMs;
    // The log cleaner shortens a partition's aborted list (compaction.ts): stored where the coordinator keeps it.
    ctx.engine.transactions.persistAborted = (stream, partition, aborted) => this.transactions.storeAborted(stream, partition, aborted);
    // A deleted stream's aborted lists and a deleted namespace's transactional ids leave the store with it.
    ctx.engine.transactions.removeStored = (stream, partitions) => this.transactions.deleteAborted(stream, partitions);
    ctx.engine.transactions.removeIds = (match) => this.transactions.removeIds(match);
    this.fetchSessions = new FetchSessionCache({ maxSlots: options.fetchSessionCacheSlots, evictionMs: options.fetchSessionEvictionMs });
    this.cluster = options.cluster ? new KafkaCluster(options.cluster, this.groups, ctx.logger.child({ component: 'kafka-cluster' }), this.transactions) : null;
    // The SASL APIs are offered only when there is something to authenticate against; client quotas and SCRAM
    // credentials only with access control (a user directory, and the quota manager that enforces quotas).
    const sasl: readonly number[] = [ApiKey.SaslHandshake, ApiKey.SaslAuthenticate];
    const access: readonly number[] = [
      ApiKey.DescribeClientQuotas,
      ApiKey.AlterClientQuotas,
      ApiKey.DescribeUserScramCredentials,
      ApiKey.AlterUserScramCredentials,
    ];
    const offered = routes.filter((r) => (options.sasl || !sasl.includes(r.codec.apiKey)) && (options.access || !access.includes(r.codec.apiKey)));
    this.routeByKey = new Map(offered.map((r) => [r.codec.apiKey, r]));
    this.apiVersions = offered
      .map((r) => ({ apiKey: r.codec.apiKey, minVersion: r.codec.minVersion, maxVersion: r.codec.maxVersion }))
      .sort((a, b) => a.apiKey - b.apiKey);
  }

  private users = 0;
  private txnStart: Promise<void> | null = null;

  /**
   * Loads the transaction coordinator's state and finishes what a previous run left in flight, once, before the
   * first listener accepts a client (a read_committed fetch must know the aborted transactions). In cluster mode
   * the state is loaded per transactional id and per partition as this broker takes them (cluster.ts). On a single
   * broker the log cleaner may judge transactional batches from then on; in cluster mode, a partition's once its
   * leader loaded it.
   */
  startTransactions(): Promise<void> {
    const kc = this.cluster;
    if (kc === null)
      return (this.txnStart ??= this.transactions.start().then(() => {
        this.engine.transactions.loaded = true;
      }));
    return (this.txnStart ??= (async () => {
      kc.start();
      await this.transactions.start(1000, true);
    })());
  }

  /** A listener starts using this adapter (several listeners, e.g. plaintext and TLS, share one). */
  retain(): void {
    this.users++;
  }

  /** A listener stops using it; the last one stops the group coordinator's timers. */
  release(): void {
    if (--this.users <= 0) {
      this.groups.close();
      this.transactions.close();
      this.logLimit.stop();
      this.brokerConfigs.close();
    }
  }

  route(apiKey: number): Route<KafkaAdapter> | undefined {
    return this.routeByKey.get(apiKey);
  }

  /** The stream of a Kafka topic, without creating it. */
  lookup(name: string): TopicResult {
    const entry = this.engine.getAnyStream(name);
    if (entry) return { entry, errorCode: 0 };
    if (!isValidInternalStreamName(name)) return { entry: null, errorCode: KafkaErrorCode.INVALID_TOPIC_EXCEPTION };
    return { entry: null, errorCode: KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION };
  }

  /** Whether an unknown topic would be created by `resolve(name, true)`. */
  wouldCreate(name: string): boolean {
    return this.options.autoCreateTopics && isValidInternalStreamName(name) && this.engine.getAnyStream(name) === undefined;
  }

  /**
   * The stream of a Kafka topic, auto-creating it when `allowCreate` and the listener allows it. A Kafka topic
   * `a.b.c` is the stream `a.b.c`, whose own unified topic `a/b/c` the engine binds by default.
   */
  async resolve(name: string, allowCreate: boolean): Promise<TopicResult> {
    const found = this.lookup(name);
    if (found.entry || found.errorCode !== KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION) return found;
    if (!allowCreate || !this.options.autoCreateTopics) return found;
    let p = this.creating.get(name);
    if (!p) {
      p = this.engine
        // A namespace's topic (namespaces.ts: route.ts qualified the client's name) is `<ns>~<name>`.
        .createStream({ name, partitions: this.options.defaultPartitions, namespaced: isQualifiedStream(name) })
        .then(
          (def) => {
            this.logger.info({ topic: name, partitions: def.partitions }, 'auto-created topic');
          },
          (err: unknown) => {
            // Created meanwhile by someone else (another listener, the admin API): that is what we wanted.
            if (!isFlowError(err, 'ALREADY_EXISTS')) throw err;
          },
        )
        .finally(() => this.creating.delete(name));
      this.creating.set(name, p);
    }
    try {
      await p;
    } catch (err) {
      this.logger.warn({ err, topic: name }, 'topic auto-creation failed');
      return { entry: null, errorCode: kafkaErrorCode(err) };
    }
    return this.lookup(name);
  }
}
