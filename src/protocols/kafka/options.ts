/**
 * Options of the Kafka listener.
 */
import { FlowError, MAX_PARTITIONS } from '../../core/index.js';
import type { KafkaSaslOptions } from './sasl-session.js';
import type { AccessControl } from '../../control/index.js';
import type { Cluster } from '../../cluster/index.js';
import { DEFAULT_AHEAD_BYTES } from './frame-pool.js';
import { resolve } from 'node:path';
import type { Logger } from 'pino';

export interface KafkaOptions {
  /** Host advertised in Metadata responses; default: the local address the client connected to. */
  advertisedHost?: string;
  /** Port advertised in Metadata responses; default: the local port the client connected to. */
  advertisedPort?: number;
  /** Create unknown topics on Metadata (when the client allows it) and on Produce. Default true. */
  autoCreateTopics?: boolean;
  /** Partitions of auto-created topics. Default 1. */
  defaultPartitions?: number;
  /** Largest request frame accepted; a larger size prefix closes the connection. Default 100 MiB. */
  maxRequestBytes?: number;
  /**
   * Largest request frame accepted before SASL authentication completes on a listener that requires it, and
   * during a SASL exchange on any listener (Kafka's `sasl.server.max.receive.size`). A larger size prefix closes
   * the connection: a stranger must not make the broker buffer up to maxRequestBytes. Default 512 KiB.
   */
  saslMaxReceiveBytes?: number;
  /**
   * Frame memory all connections together may hold ahead of the bytes arriving (a frame is taken whole when its
   * size prefix arrives); beyond it, frames are gathered in pieces of the bytes received (see frame-pool.ts).
   * Default 64 MiB.
   */
  frameReserveBytes?: number;
  /**
   * Kafka's `connections.max.idle.ms`: a connection with no request in flight, no request partly received and
   * nothing received or sent for this long is closed. Default 10 minutes.
   */
  connectionsMaxIdleMs?: number;
  /**
   * A connection to a listener requiring SASL that has not authenticated this long after it opened is closed.
   * Default 10 s: a SASL exchange takes a few round trips and one password check (milliseconds on a LAN), so this
   * is a thousand times the usual; it bounds how long a stranger holds a socket and up to saslMaxReceiveBytes.
   */
  authTimeoutMs?: number;
  /**
   * A request whose first bytes arrived must be received whole within this, or the connection is closed (a
   * half-sent request must not hold its memory forever). Default 30 s, the clients' own request.timeout.ms
   * (Java client, KafkaJS): a client whose request has not gone out by then has already given up on it.
   */
  requestReceiveTimeoutMs?: number;
  /**
   * Requests read but not yet answered, per connection, before the connection stops reading (TCP backpressure).
   * Default 256.
   */
  maxInFlightRequests?: number;
  /**
   * A connection whose responses wait in its socket's buffer without any being taken for this long is closed: the
   * client does not read them (while it does not, the connection does not read its requests either). Default
   * `requestReceiveTimeoutMs` (30 s, the clients' request.timeout.ms: a client that has not read a response by
   * then has given up on it).
   */
  responseSendTimeoutMs?: number;
  /**
   * Incremental fetch sessions kept at most (Kafka's max.incremental.fetch.session.cache.slots, KIP-227); 0 makes
   * none (every fetch is a full one). Default 1000.
   */
  fetchSessionCacheSlots?: number;
  /** A fetch session idle this long may be evicted for a new one when the cache is full. Default 120 s (Kafka's). */
  fetchSessionEvictionMs?: number;
  /** Cluster id reported in Metadata v2+. Default "flowmq". */
  clusterId?: string;
  /** group.min.session.timeout.ms. Default 6000. */
  groupMinSessionTimeoutMs?: number;
  /** group.max.session.timeout.ms. Default 1800000. */
  groupMaxSessionTimeoutMs?: number;
  /**
   * transactional.id.expiration.ms: a transactional id whose state has not changed for this long, with no
   * transaction open, is removed from the coordinator's state (the metastore). Default 604800000 (7 days).
   */
  transactionalIdExpirationMs?: number;
  /** group.initial.rebalance.delay.ms (KIP-134). Default 3000. */
  groupInitialRebalanceDelayMs?: number;
  /** group.consumer.session.timeout.ms: consumer-protocol members (KIP-848) silent this long are removed. Default 45000. */
  consumerGroupSessionTimeoutMs?: number;
  /** group.consumer.heartbeat.interval.ms: told to consumer-protocol members (KIP-848). Default 5000. */
  consumerGroupHeartbeatIntervalMs?: number;
  /**
   * The log's segment size and age (`--segment-bytes`, `--segment-ms`): what DescribeConfigs reports as the
   * default of segment.bytes and segment.ms. Defaults 16 MiB and 60 s, the log's own.
   */
  logSegmentBytes?: number;
  logSegmentMs?: number;
  /**
   * SASL mechanisms and the authenticator behind them. Without it SaslHandshake and SaslAuthenticate are not
   * advertised (and answered UNSUPPORTED_VERSION like any API not offered); whether a listener requires
   * authentication is the listener's choice (`saslRequired`).
   */
  sasl?: KafkaSaslOptions;
  /**
   * The control plane: each connection's principal (from SASL, else anonymous), authorization of every API
   * against the policies, namespace quotas (throttle_time_ms and muting) and the client registry. Without it
   * (embedded use, tests) every client may do everything and nothing is registered.
   */
  access?: AccessControl;
  /**
   * With `access`: whether a client that did not authenticate is served as the anonymous principal (else it is
   * closed at its first request that needs a principal). Default true.
   */
  anonymous?: boolean;
  /**
   * Cluster mode: Metadata names every broker and the partitions' owners as leaders, partitions and groups owned
   * elsewhere are refused (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR), see cluster.ts. The adapter registers the
   * 'group' ownership handler, so it must be created before `cluster.begin()`.
   */
  cluster?: Cluster;
  /**
   * The data directory: the one log directory DescribeLogDirs reports (with its volume's total and usable bytes) and
   * DescribeConfigs names as log.dirs. Default ./data (absolute).
   */
  logDir?: string;
  /**
   * The broker's own logger: the "root" logger of Kafka's BROKER_LOGGER resource, whose level every component
   * follows. Default: the adapter's logger.
   */
  rootLogger?: Logger;
}

export type ResolvedKafkaOptions = Required<Omit<KafkaOptions, 'advertisedHost' | 'advertisedPort' | 'sasl' | 'access' | 'cluster' | 'rootLogger'>> &
  Pick<KafkaOptions, 'advertisedHost' | 'advertisedPort' | 'sasl' | 'access' | 'cluster' | 'rootLogger'>;

export const DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024;
/** Kafka's sasl.server.max.receive.size default. */
export const DEFAULT_SASL_MAX_RECEIVE_BYTES = 512 * 1024;

export function resolveKafkaOptions(opts: KafkaOptions = {}): ResolvedKafkaOptions {
  const r: ResolvedKafkaOptions = {
    advertisedHost: opts.advertisedHost,
    advertisedPort: opts.advertisedPort,
    sasl: opts.sasl,
    access: opts.access,
    cluster: opts.cluster,
    anonymous: opts.anonymous ?? true,
    autoCreateTopics: opts.autoCreateTopics ?? true,
    defaultPartitions: opts.defaultPartitions ?? 1,
    maxRequestBytes: opts.maxRequestBytes ?? DEFAULT_MAX_REQUEST_BYTES,
    saslMaxReceiveBytes: opts.saslMaxReceiveBytes ?? DEFAULT_SASL_MAX_RECEIVE_BYTES,
    frameReserveBytes: opts.frameReserveBytes ?? DEFAULT_AHEAD_BYTES,
    connectionsMaxIdleMs: opts.connectionsMaxIdleMs ?? 600_000,
    authTimeoutMs: opts.authTimeoutMs ?? 10_000,
    requestReceiveTimeoutMs: opts.requestReceiveTimeoutMs ?? 30_000,
    responseSendTimeoutMs: opts.responseSendTimeoutMs ?? opts.requestReceiveTimeoutMs ?? 30_000,
    maxInFlightRequests: opts.maxInFlightRequests ?? 256,
    clusterId: opts.clusterId ?? 'flowmq',
    fetchSessionCacheSlots: opts.fetchSessionCacheSlots ?? 1000,
    fetchSessionEvictionMs: opts.fetchSessionEvictionMs ?? 120_000,
    groupMinSessionTimeoutMs: opts.groupMinSessionTimeoutMs ?? 6000,
    groupMaxSessionTimeoutMs: opts.groupMaxSessionTimeoutMs ?? 1_800_000,
    groupInitialRebalanceDelayMs: opts.groupInitialRebalanceDelayMs ?? 3000,
    transactionalIdExpirationMs: opts.transactionalIdExpirationMs ?? 604_800_000,
    consumerGroupSessionTimeoutMs: opts.consumerGroupSessionTimeoutMs ?? 45_000,
    consumerGroupHeartbeatIntervalMs: opts.consumerGroupHeartbeatIntervalMs ?? 5000,
    logSegmentBytes: opts.logSegmentBytes ?? 16 * 1024 * 1024,
    logSegmentMs: opts.logSegmentMs ?? 60_000,
    logDir: resolve(opts.logDir ?? 'data'),
    rootLogger: opts.rootLogger,
  };
  const int = (v: number, min: number, max: number) => Number.isInteger(v) && v >= min && v <= max;
  if (!int(r.defaultPartitions, 1, MAX_PARTITIONS)) {
    throw new FlowError('CONFIG_ERROR', `kafka defaultPartitions must be an integer in 1..${MAX_PARTITIONS}`);
  }
  // A frame size is an INT32; at least a request header must fit.
  if (!int(r.maxRequestBytes, 64, 0x7fffffff)) {
    throw new FlowError('CONFIG_ERROR', 'kafka maxRequestBytes must be an integer in 64..2147483647');
  }
  if (!int(r.saslMaxReceiveBytes, 64, 0x7fffffff)) {
    throw new FlowError('CONFIG_ERROR', 'kafka saslMaxReceiveBytes must be an integer in 64..2147483647');
  }
  if (!int(r.frameReserveBytes, 0, Number.MAX_SAFE_INTEGER)) {
    throw new FlowError('CONFIG_ERROR', 'kafka frameReserveBytes must be a non-negative integer');
  }
  for (const k of ['connectionsMaxIdleMs', 'authTimeoutMs', 'requestReceiveTimeoutMs', 'responseSendTimeoutMs'] as const) {
    if (!int(r[k], 1, 0x7fffffff)) throw new FlowError('CONFIG_ERROR', `kafka ${k} must be a positive integer (ms)`);
  }
  if (!int(r.fetchSessionCacheSlots, 0, 1_000_000)) {
    throw new FlowError('CONFIG_ERROR', 'kafka fetchSessionCacheSlots must be an integer in 0..1000000');
  }
  if (!int(r.fetchSessionEvictionMs, 0, 0x7fffffff)) {
    throw new FlowError('CONFIG_ERROR', 'kafka fetchSessionEvictionMs must be a non-negative integer (ms)');
  }
  if (!int(r.maxInFlightRequests, 1, 1_000_000)) {
    throw new FlowError('CONFIG_ERROR', 'kafka maxInFlightRequests must be an integer in 1..1000000');
  }
  if (!int(r.groupMinSessionTimeoutMs, 1, 0x7fffffff) || !int(r.groupMaxSessionTimeoutMs, r.groupMinSessionTimeoutMs, 0x7fffffff)) {
    throw new FlowError('CONFIG_ERROR', 'kafka group session timeouts must be integers with 1 <= min <= max');
  }
  // An INT in Kafka: at most 2^31-1 ms (about 24.8 days).
  if (!int(r.transactionalIdExpirationMs, 1, 0x7fffffff)) {
    throw new FlowError('CONFIG_ERROR', 'kafka transactionalIdExpirationMs must be an integer in 1..2147483647');
  }
  if (!int(r.groupInitialRebalanceDelayMs, 0, 0x7fffffff)) {
    throw new FlowError('CONFIG_ERROR', 'kafka groupInitialRebalanceDelayMs must be a non-negative integer');
  }
  // As Kafka: the heartbeat interval must be shorter than the session timeout.
  if (!int(r.consumerGroupHeartbeatIntervalMs, 1, 0x7fffffff) || !int(r.consumerGroupSessionTimeoutMs, r.consumerGroupHeartbeatIntervalMs + 1, 0x7fffffff)) {
    throw new FlowError(
      'CONFIG_ERROR',
      'kafka consumer group heartbeat interval and session timeout must be positive integers with interval < session timeout',
    );
  }
  if (r.advertisedPort !== undefined && !int(r.advertisedPort, 1, 65535)) {
    throw new FlowError('CONFIG_ERROR', 'kafka advertisedPort must be a port number');
  }
  if (r.sasl && r.sasl.mechanisms.length === 0) {
    throw new FlowError('CONFIG_ERROR', 'kafka sasl needs at least one mechanism');
  }
  if (r.advertisedHost !== undefined && r.advertisedHost.length === 0) {
    throw new FlowError('CONFIG_ERROR', 'kafka advertisedHost must not be empty');
  }
  return r;
}
