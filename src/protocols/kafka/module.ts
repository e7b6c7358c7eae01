/**
 * Kafka as a protocol module: one adapter (one group coordinator, one producer-id allocator) shared by the
 * plaintext and TLS listeners, started from the broker's config.
 */
import { readFileSync } from 'node:fs';
import { HISTOGRAM_BOUNDS_MS } from '../../core/index.js';
import { accessSaslProvider } from './auth.js';
import { tlsClientOptions } from '../../control/index.js';
import type { AdapterContext, ProtocolListener, ProtocolModule, ProtocolModuleContext, RunningProtocol } from '../types.js';
import { formatAddress } from '../listener.js';
import { createKafkaAdapter, startKafkaListener } from './server.js';
import { KafkaGroupAdmin } from './group-admin.js';

export const kafkaModule: ProtocolModule = {
  name: 'kafka',
  async start(ctx: ProtocolModuleContext): Promise<RunningProtocol> {
    const { config, guard, access } = ctx;
    // Unset: SASL is required when Kafka clients may not be anonymous and there is someone to log in as.
    const requireSasl = config.kafkaSasl ?? (guard !== null && !access.anonymousAllowed('kafka'));
    // `--kafka-sasl false` says Kafka clients need not authenticate: they are anonymous then.
    const anonymous = config.kafkaSasl === false || access.anonymousAllowed('kafka');
    const kctx: AdapterContext = { engine: ctx.engine, brokerId: ctx.brokerId, logger: ctx.logger.child({ protocol: 'kafka' }) };
    const adapter = createKafkaAdapter(kctx, {
      // --kafka-advertised-host, else --advertised-host (the host every listener is advertised with), else the
      // address each client reached; --advertised-listeners kafka=/kafka-tls= override it per listener (below).
      advertisedHost: config.kafkaAdvertisedHost ?? config.advertisedHost ?? undefined,
      autoCreateTopics: config.kafkaAutoCreateTopics,
      defaultPartitions: config.kafkaDefaultPartitions,
      groupInitialRebalanceDelayMs: config.kafkaGroupInitialRebalanceDelay,
      transactionalIdExpirationMs: config.kafkaTransactionalIdExpiration,
      groupMinSessionTimeoutMs: config.kafkaGroupMinSessionTimeout,
      groupMaxSessionTimeoutMs: config.kafkaGroupMaxSessionTimeout,
      consumerGroupSessionTimeoutMs: config.kafkaConsumerGroupSessionTimeout,
      consumerGroupHeartbeatIntervalMs: config.kafkaConsumerGroupHeartbeatInterval,
      logSegmentBytes: config.segmentBytes,
      logSegmentMs: config.segmentMs,
      saslMaxReceiveBytes: config.kafkaSaslMaxReceiveSize,
      frameReserveBytes: config.kafkaFrameReserve,
      connectionsMaxIdleMs: config.kafkaConnectionsMaxIdle,
      fetchSessionCacheSlots: config.kafkaFetchSessionCacheSlots,
      authTimeoutMs: config.kafkaAuthTimeout,
      requestReceiveTimeoutMs: config.kafkaRequestReceiveTimeout,
      // DescribeLogDirs and log.dirs; the broker's logger is Kafka's BROKER_LOGGER "root".
      logDir: config.dataDir,
      rootLogger: ctx.logger,
      // SASL is offered even while no user exists: users added live (admin API, CLI) can log in at once.
      sasl: accessSaslProvider(access, config.kafkaSaslMechanisms),
      access,
      anonymous,
      // Cluster mode: brokers, leaders and coordinators from the cluster's ownership (registers the 'group' kind).
      ...(ctx.cluster ? { cluster: ctx.cluster } : {}),
    });
    /**
     * `--advertised-listeners kafka=host:port` (and `kafka-tls=`): what Metadata, FindCoordinator and
     * DescribeCluster tell this listener's clients, for a broker behind NAT or a proxy. In a cluster the same
     * addresses are registered for the other brokers to report (broker.ts, advertisedEndpoints).
     */
    const advertised = (name: string): { advertisedHost?: string; advertisedPort?: number } => {
      const ep = config.advertisedListeners[name];
      return ep ? { advertisedHost: ep.host, advertisedPort: ep.port } : {};
    };
    const listeners = new Map<string, ProtocolListener>();
    // The adapter's group timers stop when its last listener closes.
    const close = async () => {
      await Promise.allSettled([...listeners.values()].map((l) => l.close()));
    };
    try {
      const l = await startKafkaListener(kctx, { host: config.host, port: config.kafkaPort, sasl: requireSasl, ...advertised('kafka') }, {}, adapter);
      listeners.set('kafka', l);
      ctx.logger.info({ protocol: 'kafka', address: formatAddress(l.address()), sasl: requireSasl }, 'listening');
      if (config.kafkaTlsCert !== null && config.kafkaTlsKey !== null) {
        // Client certificates (mTLS) when --tls-client-ca is set: a verified one logs the client in as its user.
        const client = tlsClientOptions(config);
        const tlsOpts = {
          cert: readFileSync(config.kafkaTlsCert),
          key: readFileSync(config.kafkaTlsKey),
          ...client,
          ...(client.requestCert ? { certUser: config.tlsCertUser } : {}),
        };
        const t = await startKafkaListener(
          kctx,
          { host: config.host, port: config.kafkaTlsPort, sasl: requireSasl, tls: tlsOpts, ...advertised('kafka-tls') },
          {},
          adapter,
        );
        listeners.set('kafka-tls', t);
        ctx.logger.info({ protocol: 'kafka-tls', address: formatAddress(t.address()), sasl: requireSasl }, 'listening');
      }
    } catch (err) {
      await close();
      throw err;
    }
    return {
      listeners,
      // Consumer groups for the admin API and the CLI: list with lag, describe, reset offsets, delete.
      groups: new KafkaGroupAdmin(adapter.engine, adapter.groups, adapter.cluster),
      // Broker configs altered at run time, for the admin API (the same settings as IncrementalAlterConfigs).
      brokerConfigs: adapter.brokerConfigs,
      // Produce latency (decoded request → durable response) as a histogram snapshot clients can diff.
      figures: () => ({ produceLatency: adapter.produceLatency.snapshot(), framePool: adapter.frames.stats(), histogramBoundsMs: HISTOGRAM_BOUNDS_MS }),
      close,
    };
  },
};
