/**
 * One typed configuration schema. Every option is settable four ways, later ones winning:
 *   defaults < config file (`--config flowmq.yaml`) < environment (`FLOWMQ_*`) < command-line flags.
 * The same table drives parsing, validation, `flowmq start --help` and the reference in docs/configuration.md
 * (`npm run docs`).
 */
import { readFileSync } from 'node:fs';
import { parseYaml } from '../util/yaml.js';
import { FlowError } from '../core/errors.js';
import { SASL_MECHANISMS } from './sasl-mechanisms.js';
import { ANY_ADDRESS, addressFilter, hostName } from '../util/address.js';
import { parseDuration, parseSize } from '../util/units.js';
import { type MetastoreSetting, type ObjectStoreSetting, parseEndpoints, parseMetastore, parseObjectStore, parseWalShards, redactUrl } from './values.js';

export { parseDuration, parseSize } from '../util/units.js';

/**
 * The protocols FlowMQ speaks, each with a protocol module (src/protocols/<name>/module.ts). Without --protocols
 * every one is enabled, on its standard port.
 */
export const PROTOCOLS = ['mqtt', 'kafka', 'amqp', 'nats'] as const;
export type Protocol = (typeof PROTOCOLS)[number];

export type { MetastoreSetting, ObjectStoreSetting } from './values.js';
export { redactUrl } from './values.js';

export interface Config {
  dataDir: string;
  metastore: MetastoreSetting;
  /**
   * The hot tier: local WAL files (--wal-layout...), a PostgreSQL table in the metastore's database, or objects in the
   * object store indexed in that database (diskless).
   */
  wal: 'file' | 'postgres' | 'object';
  /** --wal object: how long appends are gathered into one object (ms), and the most bytes one holds. */
  walObjectWindow: number;
  walObjectMaxBytes: number;
  /** PostgreSQL WAL shards (--wal-shard), in order; empty: the metastore's database alone. */
  walShards: string[];
  objectStore: ObjectStoreSetting;
  s3Endpoint: string | null;
  s3Region: string;
  s3AccessKeyId: string | null;
  s3SecretAccessKey: string | null;
  /** Unset: path-style when an endpoint is given (MinIO, s3rver...), virtual-hosted style for AWS. */
  s3PathStyle: boolean;
  s3RequestTimeout: number;
  s3MaxAttempts: number;
  objectCacheBytes: number;
  pgPoolSize: number;
  pgStatementTimeout: number;
  host: string;
  mqttPort: number;
  kafkaPort: number;
  amqpPort: number;
  /** AMQP 0-9-1 over TLS (listens only with both cert and key). */
  amqpsPort: number;
  amqpTlsCert: string | null;
  amqpTlsKey: string | null;
  /** The RabbitMQ management HTTP API subset (src/control/rabbitmq); null: not served. */
  amqpManagementPort: number | null;
  /** Largest AMQP frame offered in connection.tune (bytes). */
  amqpFrameMax: number;
  amqpChannelMax: number;
  /** Heartbeat offered in connection.tune, ms (0: none unless the client asks). */
  amqpHeartbeat: number;
  amqpMaxConnections: number;
  amqpHandshakeTimeout: number;
  amqpMaxMessageSize: number;
  /** Process memory (RSS) above which AMQP publishers are blocked; null: 40% of the machine's memory. */
  amqpMemoryHighWatermark: number | null;
  natsPort: number;
  /** NATS over TLS on the NATS port itself (upgrade after INFO, as nats-server): both or neither. */
  natsTlsCert: string | null;
  natsTlsKey: string | null;
  /** INFO says tls_required and plain clients are refused; else tls_available and both are served. */
  natsTlsRequired: boolean;
  /** TLS before INFO (nats-server 2.10's handshake_first): every client must start with its ClientHello. */
  natsTlsHandshakeFirst: boolean;
  /** NATS over WebSocket; null: no WebSocket listener. */
  natsWsPort: number | null;
  /** The NATS WebSocket listener serves wss:// with the nats-tls-cert/key. */
  natsWsTls: boolean;
  /** nats-server's monitoring endpoints (/varz, /connz, ...) over HTTP on this port of --host; null: off. */
  natsMonitorPort: number | null;
  /** Addresses / CIDR blocks that may reach the NATS monitoring port; empty: anyone who can connect. */
  natsMonitorAllow: string[];
  /** The token a NATS CONNECT may carry in auth_token (instead of a user and password). */
  natsToken: string | null;
  natsNoAuthUser: string | null;
  /** Operator mode: operator JWT files (comma-separated); null: off. */
  natsOperator: string | null;
  /** Account JWT files or directories (comma-separated), the preloaded resolver of operator mode. */
  natsAccounts: string | null;
  /** The JetStream API over FlowMQ streams answers NATS clients (off: as a nats-server without JetStream). */
  natsJetstream: boolean;
  /** JetStream domain (nats-server's jetstream.domain): the API answers on $JS.<domain>.API.> too; null: none. */
  natsJetstreamDomain: string | null;
  /** allow_responses (the `respond` action): replies per request received, and for how long (ms; 0: no limit). */
  natsResponseMax: number;
  natsResponseTtl: number;
  natsMaxPayload: number;
  natsMaxControlLine: number;
  natsMaxPending: number;
  natsMaxPendingMsgs: number;
  natsPingInterval: number;
  natsMaxPingsOut: number;
  natsAuthTimeout: number;
  natsMaxConnections: number;
  natsMaxSubscriptions: number;
  httpPort: number;
  /** Bind address of the admin API (the protocol listeners bind `host`). */
  httpHost: string;
  /** Host names the admin API answers for besides its bind address (DNS rebinding defence). */
  httpAllowedHosts: string[];
  /** Addresses / CIDR blocks that may read /metrics, /healthz and /readyz; empty: anyone who can connect. */
  httpMetricsAllow: string[];
  /** How long a dashboard login session lasts, ms. */
  httpSessionTtl: number;
  /** Every HTTP listener: a request's headers must arrive within this (408 otherwise). */
  httpHeadersTimeout: number;
  /** Every HTTP listener: how long a connection refused before its body was read waits before it is reset. */
  httpLinger: number;
  protocols: Protocol[];
  logLevel: string;
  brokerId: number;
  /** Run as one broker of a cluster (src/cluster): shared PostgreSQL metastore and WAL, S3 objects, a peer channel. */
  cluster: boolean;
  /** Address the cluster's internal channel binds (null: --host). */
  clusterHost: string | null;
  clusterPort: number;
  /** Shared secret the brokers' internal channel authenticates with (HMAC challenge); required with --cluster. */
  clusterSecret: string | null;
  /**
   * TLS on the internal channel: psk (a key derived from the secret), cert (mutual TLS with the files below), off;
   * auto: cert when a certificate is configured, else psk (clusterTlsMode() resolves it).
   */
  clusterTls: 'auto' | 'off' | 'psk' | 'cert';
  clusterTlsCert: string | null;
  clusterTlsKey: string | null;
  clusterTlsCa: string | null;
  /** How long a broker's membership lease lasts without a heartbeat, ms: its work moves once it expires. */
  clusterLease: number;
  /** Host clients and other brokers are told to connect to (null: --host, or 127.0.0.1 when --host is a wildcard). */
  advertisedHost: string | null;
  /** Advertised address per listener ("kafka", "mqtt", "cluster", ...), overriding advertisedHost and the bound port. */
  advertisedListeners: Record<string, { host: string; port: number }>;
  kafkaAdvertisedHost: string | null;
  kafkaAutoCreateTopics: boolean;
  kafkaDefaultPartitions: number;
  kafkaFrameReserve: number;
  kafkaConnectionsMaxIdle: number;
  kafkaFetchSessionCacheSlots: number;
  kafkaRequestReceiveTimeout: number;
  mqttMaxPacketSize: number;
  mqttsPort: number;
  mqttTlsCert: string | null;
  mqttTlsKey: string | null;
  mqttWs: boolean;
  mqttWsPort: number;
  mqttMaxConnections: number;
  mqttMaxInflight: number;
  mqttMaxQueuedMessages: number;
  mqttSlowConsumer: 'drop' | 'disconnect';
  mqttPacketTimeout: number;
  mqttMaxPartialBytes: number;
  mqttQueueQos0: boolean;
  mqttMaxTopicLevels: number;
  mqttSessionExpiryMax: number;
  mqttMaxKeepalive: number;
  mqttSysInterval: number;
  segmentBytes: number;
  segmentMs: number;
  maxUnsealedBytes: number;
  /** Ready messages of one queue kept in memory; past this count or --queue-window-bytes a durable queue's go to its store only. */
  queueWindowMessages: number;
  queueWindowBytes: number;
  readCacheBytes: number | null;
  readCacheMaxAge: number;
  compactionBytesPerSec: number;
  walFsync: boolean;
  walLayout: 'partition' | 'shared';
  walDirectIo: boolean | null;
  /** Free bytes kept on the data directory's filesystem (stream appends refused below); null: 5%, at most 1 GiB. */
  minFreeDisk: number | null;
  /** Users file (YAML/JSON list of {username, password, groups?}): seeds the directory's users at start. */
  usersFile: string | null;
  /**
   * null (unset): derived at start by the broker: true while the directory has no users (zero setup), false once it
   * has some. `anonymousProtocols` narrows it per protocol.
   */
  allowAnonymous: boolean | null;
  /** Protocols that let clients in without credentials; null: all of them or none, as allowAnonymous says. */
  anonymousProtocols: Protocol[] | null;
  /** What no policy decides: auto (allow while no policy exists, deny once one does), allow, deny. */
  defaultPolicy: 'auto' | 'allow' | 'deny';
  /** Webhook authenticator: URL POSTed {username, password, protocol, remoteAddress}; null: none. */
  authWebhook: string | null;
  authWebhookTimeout: number;
  authWebhookCacheTtl: number;
  /** OIDC: JWTs from this issuer are accepted as credentials on every protocol (src/control/oidc.ts); null: off. */
  oidcIssuer: string | null;
  oidcAudience: string | null;
  oidcJwksUrl: string | null;
  oidcJwksFile: string | null;
  oidcHmacSecret: string | null;
  oidcUsernameClaim: string;
  oidcGroupsClaim: string | null;
  oidcNamespaceClaim: string | null;
  /** Comma-separated claim groups whose members are FlowMQ administrators. */
  oidcAdminGroups: string | null;
  oidcClockSkew: number;
  /** Longest session a token opens whatever its exp (0: its exp alone), ms. */
  oidcMaxSession: number;
  oidcJwksRefresh: number;
  /** How often a broker re-reads the control plane's version from a shared metastore (cluster changes). */
  controlRefresh: number;
  /** mTLS on every TLS listener: PEM file of the CAs client certificates must chain to; null: no client certificates. */
  tlsClientCa: string | null;
  /** request: a certificate is asked for and used when valid; require: the TLS handshake fails without a valid one. */
  tlsClientAuth: 'request' | 'require';
  /** Which field of a verified client certificate names the directory user. */
  tlsCertUser: 'cn' | 'san-email' | 'san-dns';
  /** Password checks: worker threads, queue, their nice value, and the per-address/username slowdown. */
  authThreads: number;
  authQueue: number;
  authNice: number;
  authFreeFailures: number;
  authFailureWindow: number;
  authMaxDelay: number;
  authUserMaxDelay: number;
  /** Kafka listeners require SASL. null (unset): derived at start, when Kafka clients may not be anonymous. */
  kafkaSasl: boolean | null;
  kafkaSaslMechanisms: string[];
  kafkaSaslMaxReceiveSize: number;
  kafkaAuthTimeout: number;
  kafkaTlsPort: number;
  kafkaTlsCert: string | null;
  kafkaTlsKey: string | null;
  kafkaGroupInitialRebalanceDelay: number;
  kafkaGroupMinSessionTimeout: number;
  kafkaGroupMaxSessionTimeout: number;
  kafkaConsumerGroupSessionTimeout: number;
  kafkaConsumerGroupHeartbeatInterval: number;
  kafkaTransactionalIdExpiration: number;
}

type Kind =
  | 'endpoints'
  | 'string'
  | 'port'
  | 'int'
  | 'bool'
  | 'protocols'
  | 'size'
  | 'capacity'
  | 'duration'
  | 'delay'
  | 'level'
  | 'sasl-mechanisms'
  | 'wal-layout'
  | 'default-policy'
  | 'hosts'
  | 'cidrs'
  | 'slow-consumer'
  | 'metastore'
  | 'wal'
  | 'wal-shards'
  | 'object-store'
  | 'url'
  | 'tls-client-auth'
  | 'tls-cert-user'
  | 'cluster-tls';

export interface OptionSpec {
  key: keyof Config;
  /** Flag and config-file name; the environment variable is FLOWMQ_ + this in upper snake case. */
  name: string;
  kind: Kind;
  default: Config[keyof Config];
  /** The default in words, where it is derived at start rather than a literal (`--read-cache-bytes`: a quarter of...). */
  defaultText?: string;
  help: string;
}

const BYTE_UNITS: ReadonlyArray<[string, number]> = [
  ['GiB', 2 ** 30],
  ['MiB', 2 ** 20],
  ['KiB', 2 ** 10],
];
const TIME_UNITS: ReadonlyArray<[string, number]> = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1000],
];

/** A byte count as the flags take it: the largest binary unit it is a whole number of (`256MiB`), else bytes. */
export function formatSize(n: number): string {
  for (const [unit, size] of BYTE_UNITS) if (n >= size && n % size === 0) return `${n / size}${unit}`;
  return String(n);
}

/** Milliseconds as the flags take them: the largest unit they are a whole number of (`30s`, `10m`), else `ms`. */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0';
  for (const [unit, size] of TIME_UNITS) if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}

/** An option's default as `flowmq start --help` and the configuration reference show it. */
export function formatDefault(o: OptionSpec): string {
  if (o.defaultText !== undefined) return o.defaultText;
  const d = o.default;
  if (d === null) return 'none';
  if (typeof d === 'number') {
    if (o.kind === 'size' || o.kind === 'capacity') return formatSize(d);
    if (o.kind === 'duration' || o.kind === 'delay') return formatDuration(d);
    return String(d);
  }
  if (Array.isArray(d)) return d.length === 0 ? 'none' : d.join(',');
  if (typeof d === 'object') return 'kind' in d ? String(d.kind) : Object.keys(d).length === 0 ? 'none' : JSON.stringify(d);
  return String(d);
}

export const OPTIONS: readonly OptionSpec[] = [
  { key: 'dataDir', name: 'data-dir', kind: 'string', default: './data', help: 'directory of the embedded metastore, WAL and object store' },
  {
    key: 'metastore',
    name: 'metastore',
    kind: 'metastore',
    default: { kind: 'sqlite' },
    help: 'sqlite (metastore.db in the data directory) or a PostgreSQL URL, postgres://user:password@host:port/database; several hosts (postgres://h1:5432,h2:5432/db?target_session_attrs=read-write) are tried in order for the read-write one, which brokers find again after a failover (see docs/storage.md)',
  },
  {
    key: 'wal',
    name: 'wal',
    kind: 'wal',
    default: 'file',
    help: 'the hot tier that acknowledges writes: file (WAL files in the data directory, see --wal-layout), postgres (a table in the --metastore database, for brokers without a durable local disk) or object (diskless: appends gathered for --wal-object-window, written as one object to the --object-store, indexed in the --metastore database; acknowledged after both)',
  },
  {
    key: 'walObjectWindow',
    name: 'wal-object-window',
    kind: 'duration',
    default: 100,
    help: 'with --wal object: how long appends are gathered into one object after the first of a window (the acknowledgement waits for it; 0: write each group at once)',
  },
  {
    key: 'walObjectMaxBytes',
    name: 'wal-object-max-bytes',
    kind: 'size',
    default: 8 * 1024 * 1024,
    help: 'with --wal object: a window is written at once when it holds this many bytes',
  },
  {
    key: 'walShards',
    name: 'wal-shard',
    kind: 'wal-shards',
    default: [],
    defaultText: "the metastore's database",
    help: 'with --wal postgres: a PostgreSQL database URL holding a shard of the WAL, repeated once per shard (or a comma list), each best on a server of its own; partitions are placed by a hash of their name over the list. Every broker of a cluster must be given the same list, in the same order: it is recorded in the metastore at the first start and a broker given another is refused (see docs/storage.md)',
  },
  {
    key: 'objectStore',
    name: 'object-store',
    kind: 'object-store',
    default: { kind: 'fs' },
    help: 'where sealed segments go: fs (objects/ in the data directory) or s3://bucket/prefix on any S3-compatible service',
  },
  {
    key: 's3Endpoint',
    name: 's3-endpoint',
    kind: 'url',
    default: null,
    defaultText: 'AWS S3 of --s3-region',
    help: 'S3 endpoint URL, e.g. http://127.0.0.1:9000 for MinIO (default: AWS S3 of --s3-region)',
  },
  { key: 's3Region', name: 's3-region', kind: 'string', default: 'us-east-1', help: 'S3 region' },
  {
    key: 's3AccessKeyId',
    name: 's3-access-key-id',
    kind: 'string',
    default: null,
    defaultText: "the AWS SDK's chain",
    help: "S3 access key id (default: the AWS SDK's chain: AWS_ACCESS_KEY_ID, profiles, instance roles)",
  },
  {
    key: 's3SecretAccessKey',
    name: 's3-secret-access-key',
    kind: 'string',
    default: null,
    defaultText: "the AWS SDK's chain",
    help: 'S3 secret access key (prefer the environment: FLOWMQ_S3_SECRET_ACCESS_KEY or AWS_SECRET_ACCESS_KEY)',
  },
  {
    key: 's3PathStyle',
    name: 's3-path-style',
    kind: 'bool',
    default: null,
    defaultText: 'on with --s3-endpoint',
    help: 'path-style bucket addressing (default: on when --s3-endpoint is set, off for AWS)',
  },
  {
    key: 's3RequestTimeout',
    name: 's3-request-timeout',
    kind: 'duration',
    default: 30_000,
    help: 'an S3 request with no answer for this long is abandoned and retried',
  },
  {
    key: 's3MaxAttempts',
    name: 's3-max-attempts',
    kind: 'int',
    default: 5,
    help: 'tries of an S3 request failing with a 5xx, throttling or a network error (exponential backoff with jitter) before the operation fails; failed seals are retried later anyway',
  },
  {
    key: 'objectCacheBytes',
    name: 'object-cache-bytes',
    kind: 'capacity',
    default: 256 * 1024 * 1024,
    help: 'memory for blocks of segment objects read back from S3 (LRU; read-ahead for sequential consumers; 0: none). Not used with --object-store fs, whose reads the page cache serves',
  },
  { key: 'pgPoolSize', name: 'pg-pool-size', kind: 'int', default: 10, help: 'PostgreSQL connections of the metastore (the PostgreSQL WAL has its own)' },
  {
    key: 'pgStatementTimeout',
    name: 'pg-statement-timeout',
    kind: 'duration',
    default: 30_000,
    help: "PostgreSQL statement_timeout of the broker's connections",
  },
  {
    key: 'host',
    name: 'host',
    kind: 'string',
    default: ANY_ADDRESS,
    defaultText: ':: (every address, IPv6 and IPv4; 0.0.0.0 on a host without IPv6)',
    help: 'address the protocol listeners bind (the admin API binds --http-host); 0.0.0.0 is every IPv4 address only',
  },
  { key: 'mqttPort', name: 'mqtt-port', kind: 'port', default: 1883, help: 'MQTT over TCP' },
  { key: 'kafkaPort', name: 'kafka-port', kind: 'port', default: 9092, help: 'Kafka wire protocol' },
  { key: 'amqpPort', name: 'amqp-port', kind: 'port', default: 5672, help: 'AMQP 0-9-1 (listens when amqp is in --protocols)' },
  { key: 'amqpsPort', name: 'amqps-port', kind: 'port', default: 5671, help: 'AMQP 0-9-1 over TLS; listens only when amqp-tls-cert and amqp-tls-key are set' },
  { key: 'amqpTlsCert', name: 'amqp-tls-cert', kind: 'string', default: null, help: 'PEM certificate (chain) file of the AMQP TLS listener' },
  { key: 'amqpTlsKey', name: 'amqp-tls-key', kind: 'string', default: null, help: 'PEM private key file of the AMQP TLS listener' },
  {
    key: 'amqpManagementPort',
    name: 'amqp-management-port',
    kind: 'port',
    default: null,
    help: "RabbitMQ management HTTP API subset (RabbitMQ's 15672: /api/overview, /api/queues, health checks...) on --http-host, HTTP Basic as FlowMQ users; unset: not served",
  },
  {
    key: 'amqpFrameMax',
    name: 'amqp-frame-max',
    kind: 'size',
    default: 131_072,
    help: 'largest AMQP frame offered in connection.tune (4096 or more; clients may ask for less); a larger frame closes the connection (501)',
  },
  { key: 'amqpChannelMax', name: 'amqp-channel-max', kind: 'int', default: 2047, help: 'channels per AMQP connection offered in connection.tune (1..65535)' },
  {
    key: 'amqpHeartbeat',
    name: 'amqp-heartbeat',
    kind: 'delay',
    default: 60_000,
    help: 'AMQP heartbeat interval offered in connection.tune (whole seconds; 0: none unless the client asks); a connection silent for two intervals is closed',
  },
  {
    key: 'amqpMaxConnections',
    name: 'amqp-max-connections',
    kind: 'int',
    default: 100_000,
    help: 'AMQP client connections over all AMQP listeners; more are closed before the handshake',
  },
  {
    key: 'amqpHandshakeTimeout',
    name: 'amqp-handshake-timeout',
    kind: 'duration',
    default: 10_000,
    help: 'an AMQP connection must finish its handshake (protocol header to connection.open) within this, or it is closed',
  },
  {
    key: 'amqpMaxMessageSize',
    name: 'amqp-max-message-size',
    kind: 'size',
    default: 128 * 1024 * 1024,
    help: "largest AMQP message body accepted; a larger one closes its channel (406 PRECONDITION_FAILED), as RabbitMQ's max_message_size",
  },
  {
    key: 'amqpMemoryHighWatermark',
    name: 'amqp-memory-high-watermark',
    kind: 'capacity',
    default: null,
    defaultText: '40% of RAM',
    help: "process memory (RSS) above which AMQP publishing connections are blocked (connection.blocked) until it falls (0: never; default: 40% of the machine's memory)",
  },
  {
    key: 'natsPort',
    name: 'nats-port',
    kind: 'port',
    default: 4222,
    help: 'NATS client protocol (TLS on the same port when nats-tls-cert and nats-tls-key are set)',
  },
  {
    key: 'natsTlsCert',
    name: 'nats-tls-cert',
    kind: 'string',
    default: null,
    help: 'PEM certificate (chain) file for NATS over TLS: clients upgrade on the NATS port after INFO, as with nats-server',
  },
  { key: 'natsTlsKey', name: 'nats-tls-key', kind: 'string', default: null, help: 'PEM private key file for NATS over TLS' },
  {
    key: 'natsTlsRequired',
    name: 'nats-tls-required',
    kind: 'bool',
    default: false,
    help: "NATS clients must use TLS (INFO tls_required; a plain CONNECT gets -ERR 'Secure Connection - TLS Required'); else TLS is offered (tls_available) and plain clients are served too",
  },
  {
    key: 'natsTlsHandshakeFirst',
    name: 'nats-tls-handshake-first',
    kind: 'bool',
    default: false,
    help: "NATS clients start with the TLS handshake, INFO comes after it (nats-server 2.10 handshake_first; the nats client's tls.handshakeFirst); implies TLS required",
  },
  {
    key: 'natsWsPort',
    name: 'nats-ws-port',
    kind: 'port',
    default: null,
    help: 'NATS over WebSocket (binary frames, any path) for browser clients; unset: no WebSocket listener',
  },
  {
    key: 'natsWsTls',
    name: 'nats-ws-tls',
    kind: 'bool',
    default: false,
    help: 'the NATS WebSocket listener serves wss:// (TLS) with nats-tls-cert and nats-tls-key',
  },
  {
    key: 'natsMonitorPort',
    name: 'nats-monitor-port',
    kind: 'port',
    default: null,
    help: "nats-server's monitoring endpoints (/varz, /connz, /subsz, /jsz, /healthz) over plain HTTP on this port of --host, as nats-server's -m; unauthenticated like nats-server's (see docs/nats.md); unset: off",
  },
  {
    key: 'natsMonitorAllow',
    name: 'nats-monitor-allow',
    kind: 'cidrs',
    default: [],
    defaultText: 'none (anyone)',
    help: 'addresses or CIDR blocks (10.0.0.0/8, ::1) that may reach the NATS monitoring port, comma-separated; others get 403 (default: anyone who can connect)',
  },
  {
    key: 'natsToken',
    name: 'nats-token',
    kind: 'string',
    default: null,
    help: 'token a NATS client may present in CONNECT auth_token instead of a user and password (prefer the environment: FLOWMQ_NATS_TOKEN)',
  },
  {
    key: 'natsNoAuthUser',
    name: 'nats-no-auth-user',
    kind: 'string',
    default: null,
    help: "user a NATS client without any credentials logs in as (nats-server's no_auth_user): its policies apply; a user not in the directory refuses such clients",
  },
  {
    key: 'natsOperator',
    name: 'nats-operator',
    kind: 'string',
    default: null,
    help: "operator mode (nats-server's operator): operator JWT file(s), comma-separated; NATS clients may then log in with user JWTs of the accounts in nats-accounts (see docs/nats.md)",
  },
  {
    key: 'natsAccounts',
    name: 'nats-accounts',
    kind: 'string',
    default: null,
    help: "account JWT files or directories of them, comma-separated, read at start (nats-server's resolver MEMORY with resolver_preload); each account is the namespace of its name",
  },
  {
    key: 'natsJetstream',
    name: 'nats-jetstream',
    kind: 'bool',
    default: true,
    help: 'the JetStream API for NATS clients (off: $JS.API requests get no responder and INFO says no jetstream, as a nats-server without JetStream; the streams stay, for the other protocols)',
  },
  {
    key: 'natsJetstreamDomain',
    name: 'nats-jetstream-domain',
    kind: 'string',
    default: null,
    help: "JetStream domain (nats-server's jetstream.domain): the API answers on $JS.<domain>.API.> as well, and PubAcks and account info name it",
  },
  {
    key: 'natsResponseMax',
    name: 'nats-response-max',
    kind: 'int',
    default: 1,
    help: "allow_responses: replies a NATS client may publish to the reply subject of each request it received on a topic it may 'respond' to (a user JWT's resp overrides it)",
  },
  {
    key: 'natsResponseTtl',
    name: 'nats-response-ttl',
    kind: 'duration',
    default: 120_000,
    help: "allow_responses: how long after the request its replies may be published (0: no limit; nats-server's default 2m)",
  },
  {
    key: 'natsMaxPayload',
    name: 'nats-max-payload',
    kind: 'size',
    default: 1024 * 1024,
    help: "largest NATS message (payload and headers), announced in INFO max_payload; larger: -ERR 'Maximum Payload Violation' and close (at most 64MiB, and not over nats-max-pending)",
  },
  {
    key: 'natsMaxControlLine',
    name: 'nats-max-control-line',
    kind: 'size',
    default: 4096,
    help: "longest NATS protocol line (operation and arguments); longer: -ERR 'maximum control line exceeded' and close",
  },
  {
    key: 'natsMaxPending',
    name: 'nats-max-pending',
    kind: 'size',
    default: 64 * 1024 * 1024,
    help: "bytes waiting to be written to one NATS connection; past it the client is a slow consumer and closed (as nats-server's max_pending)",
  },
  {
    key: 'natsMaxPendingMsgs',
    name: 'nats-max-pending-msgs',
    kind: 'int',
    default: 0,
    help: 'messages waiting to be written to one NATS connection past which it is a slow consumer and closed (0: nats-max-pending alone bounds it)',
  },
  { key: 'natsPingInterval', name: 'nats-ping-interval', kind: 'duration', default: 120_000, help: 'the broker PINGs each NATS client this often' },
  {
    key: 'natsMaxPingsOut',
    name: 'nats-max-pings-out',
    kind: 'int',
    default: 2,
    help: "unanswered PINGs after which a NATS connection is stale (-ERR 'Stale Connection') and closed",
  },
  {
    key: 'natsAuthTimeout',
    name: 'nats-auth-timeout',
    kind: 'duration',
    default: 2000,
    help: "a NATS client must send CONNECT within this after INFO, or it is closed (-ERR 'Authentication Timeout')",
  },
  {
    key: 'natsMaxConnections',
    name: 'nats-max-connections',
    kind: 'int',
    default: 100_000,
    help: "NATS client connections over all NATS listeners (TLS handshakes in progress included); more get -ERR 'maximum connections exceeded' and are closed",
  },
  {
    key: 'natsMaxSubscriptions',
    name: 'nats-max-subscriptions',
    kind: 'int',
    default: 100_000,
    help: "subscriptions per NATS connection (0: no limit); more: -ERR 'Maximum Subscriptions Exceeded'",
  },
  { key: 'httpPort', name: 'http-port', kind: 'port', default: 8080, help: 'admin HTTP API (/api/v1) and health' },
  { key: 'httpHost', name: 'http-host', kind: 'string', default: '127.0.0.1', help: 'address the admin HTTP API binds (0.0.0.0 for every interface)' },
  {
    key: 'httpAllowedHosts',
    name: 'http-allowed-hosts',
    kind: 'hosts',
    default: [],
    help: 'host names the admin API answers for besides its bind address, comma-separated (Host header check against DNS rebinding)',
  },
  {
    key: 'httpMetricsAllow',
    name: 'http-metrics-allow',
    kind: 'cidrs',
    default: [],
    defaultText: 'none (anyone)',
    help: 'addresses or CIDR blocks (10.0.0.0/8, ::1) that may read /metrics, /healthz and /readyz, comma-separated (default: anyone who can connect; they need no login)',
  },
  { key: 'httpSessionTtl', name: 'http-session-ttl', kind: 'duration', default: 12 * 3_600_000, help: 'how long a dashboard login session lasts' },
  {
    key: 'httpHeadersTimeout',
    name: 'http-headers-timeout',
    kind: 'duration',
    default: 10_000,
    help: "every HTTP listener (admin API, dashboard, /metrics, the WebSocket listeners, NATS monitoring, RabbitMQ management): a request's headers, or a new connection's first request, must arrive within this, else 408 and the connection is closed",
  },
  {
    key: 'httpLinger',
    name: 'http-linger',
    kind: 'duration',
    default: 2000,
    help: "every HTTP listener: after a response sent before its request's body was read (a 401, 413, 426...), the connection is closed and what the client still sends is discarded for this long, then the connection is reset",
  },
  { key: 'protocols', name: 'protocols', kind: 'protocols', default: [...PROTOCOLS], help: 'listeners this broker enables, comma-separated' },
  { key: 'logLevel', name: 'log-level', kind: 'level', default: 'info', help: 'trace, debug, info, warn, error, fatal or silent' },
  { key: 'brokerId', name: 'broker-id', kind: 'int', default: 0, help: "this broker's id (Kafka node id); every broker of a cluster needs its own" },
  {
    key: 'cluster',
    name: 'cluster',
    kind: 'bool',
    default: false,
    help: 'run as one broker of a cluster of stateless brokers (see docs/cluster.md): needs --metastore postgres://..., --wal postgres, an s3:// --object-store and --cluster-secret',
  },
  {
    key: 'clusterHost',
    name: 'cluster-host',
    kind: 'string',
    default: null,
    defaultText: '--host',
    help: "address the brokers' internal channel binds (default: --host)",
  },
  {
    key: 'clusterPort',
    name: 'cluster-port',
    kind: 'port',
    default: 9450,
    help: "port of the brokers' internal channel (forwarded writes, live messages, handovers)",
  },
  {
    key: 'clusterSecret',
    name: 'cluster-secret',
    kind: 'string',
    default: null,
    help: "shared secret of the brokers' internal channel, at least 16 characters (every broker of the cluster needs the same)",
  },
  {
    key: 'clusterTls',
    name: 'cluster-tls',
    kind: 'cluster-tls',
    default: 'auto',
    help: "encryption of the brokers' internal channel, the same on every broker: psk (TLS 1.3 with a key derived from --cluster-secret), cert (mutual TLS: --cluster-tls-cert, --cluster-tls-key, --cluster-tls-ca), off (plaintext; the secret still authenticates); auto: cert when --cluster-tls-cert is set, else psk",
  },
  {
    key: 'clusterTlsCert',
    name: 'cluster-tls-cert',
    kind: 'string',
    default: null,
    help: 'PEM certificate (chain) file this broker presents on the internal channel, both when it accepts and when it dials (--cluster-tls cert)',
  },
  { key: 'clusterTlsKey', name: 'cluster-tls-key', kind: 'string', default: null, help: 'PEM private key file of --cluster-tls-cert' },
  {
    key: 'clusterTlsCa',
    name: 'cluster-tls-ca',
    kind: 'string',
    default: null,
    help: "PEM file of the CA(s) peers' channel certificates must chain to: any certificate it signed is a broker of the cluster (use a CA of the cluster's own)",
  },
  {
    key: 'clusterLease',
    name: 'cluster-lease',
    kind: 'duration',
    default: 5000,
    help: 'a broker that has not renewed its membership lease for this long is dead: its partitions, queues, groups and sessions move to the others',
  },
  {
    key: 'advertisedHost',
    name: 'advertised-host',
    kind: 'string',
    default: null,
    defaultText: '--host (127.0.0.1 for a wildcard)',
    help: 'host clients and other brokers are told to connect to (default: --host, or 127.0.0.1 when --host is :: or 0.0.0.0)',
  },
  {
    key: 'advertisedListeners',
    name: 'advertised-listeners',
    kind: 'endpoints',
    default: {},
    help: "advertised address per listener, overriding --advertised-host and the bound port: kafka=host:port,kafka-tls=host:port,mqtt=host:port,cluster=host:port,... (a single broker too: Kafka's Metadata, FindCoordinator and DescribeCluster tell clients of that listener)",
  },
  {
    key: 'kafkaAdvertisedHost',
    name: 'kafka-advertised-host',
    kind: 'string',
    default: null,
    defaultText: '--advertised-host, else the address the client reached',
    help: 'host Kafka clients are told to connect to (default: --advertised-host, else the address they reached)',
  },
  {
    key: 'kafkaAutoCreateTopics',
    name: 'kafka-auto-create-topics',
    kind: 'bool',
    default: true,
    help: 'create a stream when a Kafka client produces to or asks for an unknown topic',
  },
  { key: 'kafkaDefaultPartitions', name: 'kafka-default-partitions', kind: 'int', default: 1, help: 'partitions of auto-created topics' },
  {
    key: 'kafkaFrameReserve',
    name: 'kafka-frame-reserve',
    kind: 'capacity',
    default: 64 * 1024 * 1024,
    help: 'request memory all Kafka connections together may hold ahead of the bytes arriving (a frame is taken whole when its size arrives); beyond it requests are gathered as their bytes arrive, at the cost of one more copy',
  },
  {
    key: 'kafkaConnectionsMaxIdle',
    name: 'kafka-connections-max-idle',
    kind: 'duration',
    default: 600_000,
    help: 'close a Kafka connection idle this long: no request in flight, nothing received or sent (connections.max.idle.ms)',
  },
  {
    key: 'kafkaFetchSessionCacheSlots',
    name: 'kafka-fetch-session-cache-slots',
    kind: 'int',
    default: 1000,
    help: 'incremental fetch sessions (KIP-227) the broker keeps at most, over all Kafka connections (max.incremental.fetch.session.cache.slots); when full, a new session evicts one idle for 2 minutes or a smaller one, else the client does full fetches; 0: none',
  },
  {
    key: 'kafkaRequestReceiveTimeout',
    name: 'kafka-request-receive-timeout',
    kind: 'duration',
    default: 30_000,
    help: "close a Kafka connection whose request has not arrived whole this long after its first bytes, or whose responses have waited unread this long (the clients' own request.timeout.ms)",
  },
  {
    key: 'mqttMaxPacketSize',
    name: 'mqtt-max-packet-size',
    kind: 'size',
    default: 1024 * 1024,
    help: 'largest MQTT packet accepted (bytes, or 256KiB, 1MiB...)',
  },
  { key: 'mqttsPort', name: 'mqtts-port', kind: 'port', default: 8883, help: 'MQTT over TLS; listens only when mqtt-tls-cert and mqtt-tls-key are set' },
  { key: 'mqttTlsCert', name: 'mqtt-tls-cert', kind: 'string', default: null, help: 'PEM certificate (chain) file of the MQTT TLS listener' },
  { key: 'mqttTlsKey', name: 'mqtt-tls-key', kind: 'string', default: null, help: 'PEM private key file of the MQTT TLS listener' },
  { key: 'mqttWs', name: 'mqtt-ws', kind: 'bool', default: true, help: 'serve MQTT over WebSocket (path /mqtt, subprotocol mqtt)' },
  { key: 'mqttWsPort', name: 'mqtt-ws-port', kind: 'port', default: 8083, help: 'MQTT over WebSocket' },
  {
    key: 'mqttMaxConnections',
    name: 'mqtt-max-connections',
    kind: 'int',
    default: 1_000_000,
    help: 'MQTT client connections over all MQTT listeners; more are refused (CONNACK 0x97 / 0x03)',
  },
  {
    key: 'mqttMaxInflight',
    name: 'mqtt-max-inflight',
    kind: 'int',
    default: 100,
    help: 'unacknowledged QoS 1/2 messages per MQTT connection, each way (v5 Receive Maximum)',
  },
  {
    key: 'mqttMaxQueuedMessages',
    name: 'mqtt-max-queued-messages',
    kind: 'int',
    default: 1000,
    help: 'messages queued per MQTT session (online behind the in-flight window, offline in the store); the oldest are dropped beyond it',
  },
  {
    key: 'mqttSlowConsumer',
    name: 'mqtt-slow-consumer',
    kind: 'slow-consumer',
    default: 'drop',
    help: 'when a message for an MQTT client would be dropped because it does not keep up (queue full, or its socket over 1MiB): drop it, or disconnect the client (v5 DISCONNECT 0x97; a persistent session keeps the messages)',
  },
  {
    key: 'mqttPacketTimeout',
    name: 'mqtt-packet-timeout',
    kind: 'duration',
    default: 30_000,
    help: 'a packet that has started must be complete within this time, whatever the keep-alive (30 s admits ~35 KB/s for a 1 MiB packet); else the connection is closed (v5 DISCONNECT 0x8D). Replies a client does not read must make progress within it too (else DISCONNECT 0x97)',
  },
  {
    key: 'mqttMaxPartialBytes',
    name: 'mqtt-max-partial-bytes',
    kind: 'size',
    default: 64 * 1024 * 1024,
    help: 'memory all MQTT connections together may hold for packets not received completely; a connection that would take it over is closed (v5 DISCONNECT 0x97)',
  },
  { key: 'mqttQueueQos0', name: 'mqtt-queue-qos0', kind: 'bool', default: false, help: 'also queue QoS 0 messages for offline MQTT sessions' },
  {
    key: 'mqttMaxTopicLevels',
    name: 'mqtt-max-topic-levels',
    kind: 'int',
    default: 128,
    help: 'levels of a topic name or filter (v5: PUBACK 0x90 / SUBACK 0x8F; 3.1.1: SUBACK 0x80, publish closes)',
  },
  {
    key: 'mqttSessionExpiryMax',
    name: 'mqtt-session-expiry-max',
    kind: 'duration',
    default: 7 * 86_400_000,
    help: 'longest an offline MQTT session is kept (caps v5 Session Expiry; 3.1.1 clean-session-0 sessions get it)',
  },
  {
    key: 'mqttMaxKeepalive',
    name: 'mqtt-max-keepalive',
    kind: 'int',
    default: 0,
    defaultText: '0 (any)',
    help: 'highest MQTT keep-alive in seconds a client may use (0: any); v5 clients are told (Server Keep Alive)',
  },
  {
    key: 'mqttSysInterval',
    name: 'mqtt-sys-interval',
    kind: 'duration',
    default: 10_000,
    help: 'how often broker statistics are published under $SYS/broker/',
  },
  {
    key: 'segmentBytes',
    name: 'segment-bytes',
    kind: 'size',
    default: 16 * 1024 * 1024,
    help: "seal a partition's hot tail into an object-store segment at this size",
  },
  { key: 'segmentMs', name: 'segment-ms', kind: 'duration', default: 60_000, help: '...or at this age (ms, or 30s, 5m...)' },
  {
    key: 'maxUnsealedBytes',
    name: 'max-unsealed-bytes',
    kind: 'size',
    default: 256 * 1024 * 1024,
    help: "memory all partitions' hot tails may hold; beyond it, acknowledgements (Kafka produce responses, MQTT PUBACKs of captured messages) wait for segment writes to catch up",
  },
  {
    key: 'queueWindowMessages',
    name: 'queue-window-messages',
    kind: 'int',
    default: 20_000,
    help: "ready messages of one queue (AMQP, MQTT $queue/) held in memory; beyond it, or beyond --queue-window-bytes, a durable queue's new messages go to the queue store only and are read back in order as the window empties (at least 1)",
  },
  {
    key: 'queueWindowBytes',
    name: 'queue-window-bytes',
    kind: 'size',
    default: 64 * 1024 * 1024,
    help: 'payload bytes of ready messages of one queue held in memory (see --queue-window-messages)',
  },
  {
    key: 'readCacheBytes',
    name: 'read-cache-bytes',
    kind: 'capacity',
    default: null,
    defaultText: 'a quarter of --max-unsealed-bytes, at most 64MiB',
    help: 'sealed batches kept in memory for consumers a little behind, across all partitions (0: none; default: a quarter of --max-unsealed-bytes, at most 64MiB)',
  },
  {
    key: 'readCacheMaxAge',
    name: 'read-cache-max-age',
    kind: 'delay',
    default: 120_000,
    help: 'how long a sealed batch stays in the read cache at most (0: until --read-cache-bytes pushes it out); a consumer further behind reads from the object store through its block cache',
  },
  {
    key: 'compactionBytesPerSec',
    name: 'compaction-bytes-per-sec',
    kind: 'size',
    default: 32 * 1024 * 1024,
    help: 'bytes per second the log cleaner of compacted streams (cleanup.policy=compact) reads and writes at most, so that it leaves the disk and the object store to producers and consumers (0: unpaced)',
  },
  { key: 'walFsync', name: 'wal-fsync', kind: 'bool', default: true, help: 'fsync the WAL before acknowledging (turn off only for throwaway data)' },
  {
    key: 'walLayout',
    name: 'wal-layout',
    kind: 'wal-layout',
    default: 'partition',
    help: "partition: each partition's WAL files become its segment objects by a hard link, so every byte is written to disk once; shared: one WAL for all partitions (one fsync per group commit whatever the number of partitions), segments written from memory (every byte written twice). Entries left in the other layout's WAL are sealed into segments at start, so switching loses nothing",
  },
  {
    key: 'walDirectIo',
    name: 'wal-direct-io',
    kind: 'bool',
    default: null,
    defaultText: 'on for partition, off for shared',
    help: 'write the WAL with O_DIRECT, around the page cache, where the filesystem supports it (default: on for the partition layout, off for shared)',
  },
  {
    key: 'minFreeDisk',
    name: 'min-free-disk',
    kind: 'capacity',
    default: null,
    defaultText: "5% of the data directory's filesystem, at most 1GiB",
    help: "free space kept on the data directory's filesystem: below it stream writes are refused with a retriable error until space returns (0: no reserve; default: 5% of the filesystem, at most 1GiB)",
  },
  {
    key: 'usersFile',
    name: 'users-file',
    kind: 'string',
    default: null,
    help: 'YAML/JSON users file seeding the directory at start: a list of {username, password, groups?, namespace?}, or {users, groups, namespaces, policies}; only what is absent is created (see docs/security.md)',
  },
  {
    key: 'allowAnonymous',
    name: 'allow-anonymous',
    kind: 'bool',
    default: null,
    defaultText: 'true while no user exists at start, else false',
    help: 'let clients in without credentials on every protocol (MQTT without a username; Kafka without SASL unless --kafka-sasl says otherwise); see docs/security.md for why',
  },
  {
    key: 'anonymousProtocols',
    name: 'anonymous-protocols',
    kind: 'protocols',
    default: null,
    defaultText: 'as --allow-anonymous',
    help: 'protocols (mqtt, kafka, amqp, nats) that let clients in without credentials, comma-separated; overrides allow-anonymous per protocol',
  },
  {
    key: 'defaultPolicy',
    name: 'default-policy',
    kind: 'default-policy',
    default: 'auto',
    help: 'what no authorization policy decides: auto (allow while no policy exists, deny once one does), allow or deny; members of the admins group are always allowed',
  },
  {
    key: 'authWebhook',
    name: 'auth-webhook',
    kind: 'url',
    default: null,
    help: 'http(s):// URL asked about usernames the directory does not know: POST {username, password, protocol, remoteAddress}; 200 {"result":"allow","groups":[...],"namespace":"..."} lets the client in',
  },
  {
    key: 'authWebhookTimeout',
    name: 'auth-webhook-timeout',
    kind: 'duration',
    default: 2000,
    help: 'a webhook answer slower than this (or a 5xx, or no connection) is "server busy" for the client, never a yes',
  },
  {
    key: 'authWebhookCacheTtl',
    name: 'auth-webhook-cache-ttl',
    kind: 'duration',
    default: 60_000,
    help: 'how long a webhook yes is reused for the same username and password (0: ask every time)',
  },
  {
    key: 'oidcIssuer',
    name: 'oidc-issuer',
    kind: 'string',
    default: null,
    help: 'OIDC: accept JWTs whose iss is exactly this as credentials on every protocol (Kafka SASL OAUTHBEARER, MQTT/AMQP/NATS password, NATS auth_token, admin API Bearer); needs oidc-jwks-url, oidc-jwks-file or oidc-hmac-secret',
  },
  { key: 'oidcAudience', name: 'oidc-audience', kind: 'string', default: null, help: "OIDC: a token's aud must contain this (unset: aud is not checked)" },
  {
    key: 'oidcJwksUrl',
    name: 'oidc-jwks-url',
    kind: 'url',
    default: null,
    help: "OIDC: the IdP's JSON Web Key Set (jwks_uri), fetched and cached; fetched again when a token names an unknown kid, at most once per oidc-jwks-refresh",
  },
  {
    key: 'oidcJwksFile',
    name: 'oidc-jwks-file',
    kind: 'string',
    default: null,
    help: 'OIDC: a JWKS file instead of a URL (read again on an unknown kid, at most once per oidc-jwks-refresh)',
  },
  {
    key: 'oidcHmacSecret',
    name: 'oidc-hmac-secret',
    kind: 'string',
    default: null,
    help: 'OIDC: a shared secret that also accepts HS256/384/512 tokens (without it only RS*, PS*, ES* and EdDSA are accepted; never none)',
  },
  { key: 'oidcUsernameClaim', name: 'oidc-username-claim', kind: 'string', default: 'sub', help: 'OIDC: the claim naming the user' },
  {
    key: 'oidcGroupsClaim',
    name: 'oidc-groups-claim',
    kind: 'string',
    default: 'groups',
    help: "OIDC: the claim listing the user's groups (an array, or names separated by spaces or commas); they are FlowMQ group names for policies",
  },
  {
    key: 'oidcNamespaceClaim',
    name: 'oidc-namespace-claim',
    kind: 'string',
    default: null,
    help: "OIDC: the claim naming the user's namespace (unset or absent: default); a namespace the directory does not know is refused",
  },
  {
    key: 'oidcAdminGroups',
    name: 'oidc-admin-groups',
    kind: 'string',
    default: null,
    help: 'OIDC: claim groups (comma-separated) whose members are FlowMQ administrators (get the admins group)',
  },
  { key: 'oidcClockSkew', name: 'oidc-clock-skew', kind: 'delay', default: 30_000, help: 'OIDC: tolerance on exp and nbf for clocks that differ' },
  {
    key: 'oidcMaxSession',
    name: 'oidc-max-session',
    kind: 'delay',
    default: 0,
    help: "OIDC: longest a token's session lasts whatever its exp says (Kafka session_lifetime_ms; 0: until exp); a connection not re-authenticated by then is closed",
  },
  {
    key: 'oidcJwksRefresh',
    name: 'oidc-jwks-refresh',
    kind: 'delay',
    default: 30_000,
    help: 'OIDC: shortest time between two JWKS fetches caused by tokens naming an unknown kid',
  },
  {
    key: 'tlsClientCa',
    name: 'tls-client-ca',
    kind: 'string',
    default: null,
    help: 'PEM file of the CA(s) that sign client certificates: every TLS listener then asks clients for one and maps a verified certificate to the directory user it names (mTLS); credentials sent too win',
  },
  {
    key: 'tlsClientAuth',
    name: 'tls-client-auth',
    kind: 'tls-client-auth',
    default: 'request',
    help: 'with tls-client-ca: request (a valid certificate logs the client in, others go on to credentials) or require (the TLS handshake fails without a certificate signed by the CA)',
  },
  {
    key: 'tlsCertUser',
    name: 'tls-cert-user',
    kind: 'tls-cert-user',
    default: 'cn',
    help: 'which field of a verified client certificate is the username: cn (subject common name), san-email or san-dns (first subjectAltName of that type)',
  },
  {
    key: 'controlRefresh',
    name: 'control-refresh',
    kind: 'duration',
    default: 2000,
    help: 'how often a broker looks for control-plane changes (users, policies) made through another broker sharing the metastore (PostgreSQL); with --cluster changes arrive by notification at once and this poll, a safety net, runs every 30 s or this, whichever is longer',
  },
  {
    key: 'authThreads',
    name: 'auth-threads',
    kind: 'int',
    default: 1,
    help: "worker threads that check passwords (scrypt), each at most one core; never libuv's pool, which the WAL uses",
  },
  {
    key: 'authQueue',
    name: 'auth-queue',
    kind: 'int',
    default: 32,
    help: 'password checks waiting for a thread; beyond it a login is answered busy (MQTT CONNACK 0x89 / 0x03, Kafka: closed, the client retries)',
  },
  {
    key: 'authNice',
    name: 'auth-nice',
    kind: 'int',
    default: 10,
    help: 'Linux nice value of the password threads (0-19), so the event loop and storage get the CPU first',
  },
  {
    key: 'authFreeFailures',
    name: 'auth-free-failures',
    kind: 'int',
    default: 3,
    help: 'failed logins per client address or username within auth-failure-window before each further attempt is slowed down',
  },
  { key: 'authFailureWindow', name: 'auth-failure-window', kind: 'duration', default: 60_000, help: 'failed logins are forgotten after this quiet time' },
  {
    key: 'authMaxDelay',
    name: 'auth-max-delay',
    kind: 'delay',
    default: 4000,
    help: 'cap of the doubling spacing of checks from an address that keeps failing; attempts booked further ahead are answered busy (0: no slowdown)',
  },
  {
    key: 'authUserMaxDelay',
    name: 'auth-user-max-delay',
    kind: 'delay',
    default: 2000,
    help: 'cap of the doubling delay before checks for a username that keeps failing (a delay, never a lock-out; 0: none)',
  },
  {
    key: 'kafkaSasl',
    name: 'kafka-sasl',
    kind: 'bool',
    default: null,
    defaultText: 'true iff users are configured and anonymous is not allowed',
    help: 'Kafka listeners require SASL authentication (default: true when users-file is set and allow-anonymous is not)',
  },
  {
    key: 'kafkaSaslMechanisms',
    name: 'kafka-sasl-mechanisms',
    kind: 'sasl-mechanisms',
    default: [...SASL_MECHANISMS],
    help: 'SASL mechanisms offered to Kafka clients, comma-separated (offered even before users exist, so users added live can log in)',
  },
  {
    key: 'kafkaSaslMaxReceiveSize',
    name: 'kafka-sasl-max-receive-size',
    kind: 'size',
    default: 512 * 1024,
    help: "largest Kafka request read before SASL authentication completes on a --kafka-sasl listener, and during any SASL exchange (Kafka's sasl.server.max.receive.size); a larger size prefix closes the connection",
  },
  {
    key: 'kafkaAuthTimeout',
    name: 'kafka-auth-timeout',
    kind: 'duration',
    default: 10_000,
    help: 'close a connection to a Kafka listener requiring SASL that has not authenticated this long after connecting',
  },
  {
    key: 'kafkaTlsPort',
    name: 'kafka-tls-port',
    kind: 'port',
    default: 9093,
    help: 'Kafka over TLS (SSL, or SASL_SSL with --kafka-sasl); listens only when both --kafka-tls-cert and --kafka-tls-key are set',
  },
  { key: 'kafkaTlsCert', name: 'kafka-tls-cert', kind: 'string', default: null, help: 'PEM certificate (chain) file of the Kafka TLS listener' },
  { key: 'kafkaTlsKey', name: 'kafka-tls-key', kind: 'string', default: null, help: 'PEM private key file of the Kafka TLS listener' },
  {
    key: 'kafkaGroupInitialRebalanceDelay',
    name: 'kafka-group-initial-rebalance-delay',
    kind: 'delay',
    default: 3000,
    help: 'wait for more members before the first rebalance of an empty group (KIP-134; 0 to disable)',
  },
  {
    key: 'kafkaGroupMinSessionTimeout',
    name: 'kafka-group-min-session-timeout',
    kind: 'duration',
    default: 6000,
    help: 'shortest session timeout a consumer group member may ask for',
  },
  {
    key: 'kafkaGroupMaxSessionTimeout',
    name: 'kafka-group-max-session-timeout',
    kind: 'duration',
    default: 1_800_000,
    help: 'longest session timeout a consumer group member may ask for',
  },
  {
    key: 'kafkaConsumerGroupSessionTimeout',
    name: 'kafka-consumer-group-session-timeout',
    kind: 'duration',
    default: 45_000,
    help: 'members of consumer-protocol groups (KIP-848, group.protocol=consumer) silent this long are removed (group.consumer.session.timeout.ms)',
  },
  {
    key: 'kafkaConsumerGroupHeartbeatInterval',
    name: 'kafka-consumer-group-heartbeat-interval',
    kind: 'duration',
    default: 5000,
    help: 'heartbeat interval told to members of consumer-protocol groups (group.consumer.heartbeat.interval.ms)',
  },
  {
    key: 'kafkaTransactionalIdExpiration',
    name: 'kafka-transactional-id-expiration',
    kind: 'duration',
    default: 604_800_000,
    help: "a transactional id with no transaction for this long is removed from the coordinator's state (transactional.id.expiration.ms)",
  },
];

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

export class ConfigError extends FlowError {
  constructor(message: string) {
    super('CONFIG_ERROR', message);
    this.name = 'ConfigError';
  }
}

export function envName(name: string): string {
  return `FLOWMQ_${name.replace(/-/g, '_').toUpperCase()}`;
}

function coerce(spec: OptionSpec, raw: unknown, source: string): Config[keyof Config] {
  // A value that may hold a secret is not echoed whole: error lines end up in logs.
  const shown =
    (spec.kind === 'metastore' || spec.kind === 'wal-shards') && (typeof raw === 'string' || Array.isArray(raw))
      ? JSON.stringify(typeof raw === 'string' ? redactUrl(raw) : raw.map((u) => redactUrl(String(u))))
      : spec.name.includes('secret') || spec.name.endsWith('-token')
        ? '"***"'
        : JSON.stringify(raw);
  const bad = (why: string) => new ConfigError(`invalid ${source}: ${why} (got ${shown})`);
  const str = typeof raw === 'string' ? raw.trim() : raw;
  switch (spec.kind) {
    case 'string':
      if (typeof str !== 'string' || str === '') throw bad('expected a non-empty string');
      return str;
    case 'endpoints':
      return parseEndpoints(str, bad);
    case 'level':
      if (typeof str !== 'string' || !LEVELS.includes(str)) throw bad(`expected one of ${LEVELS.join(', ')}`);
      return str;
    case 'default-policy':
      if (str !== 'auto' && str !== 'allow' && str !== 'deny') throw bad('expected auto, allow or deny');
      return str;
    case 'tls-client-auth':
      if (str !== 'request' && str !== 'require') throw bad('expected request or require');
      return str;
    case 'tls-cert-user':
      if (str !== 'cn' && str !== 'san-email' && str !== 'san-dns') throw bad('expected cn, san-email or san-dns');
      return str;
    case 'cluster-tls':
      if (str !== 'auto' && str !== 'off' && str !== 'psk' && str !== 'cert') throw bad('expected auto, off, psk or cert');
      return str;
    case 'wal-layout':
      if (str !== 'partition' && str !== 'shared') throw bad('expected partition or shared');
      return str;
    case 'slow-consumer':
      if (str !== 'drop' && str !== 'disconnect') throw bad('expected drop or disconnect');
      return str;
    case 'wal':
      if (str !== 'file' && str !== 'postgres' && str !== 'object') throw bad('expected file, postgres or object');
      return str;
    case 'metastore':
      return parseMetastore(str, bad);
    case 'wal-shards':
      return parseWalShards(str, bad);
    case 'object-store':
      return parseObjectStore(str, bad);
    case 'url': {
      if (typeof str !== 'string') throw bad('expected a URL');
      let u: URL;
      try {
        u = new URL(str);
      } catch {
        throw bad('expected a URL such as http://127.0.0.1:9000');
      }
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw bad('expected an http:// or https:// URL');
      return str;
    }
    case 'port':
    case 'int': {
      const n = typeof str === 'number' ? str : typeof str === 'string' && /^-?\d+$/.test(str) ? Number(str) : NaN;
      if (!Number.isInteger(n)) throw bad('expected an integer');
      if (spec.kind === 'port' && (n < 0 || n > 65535)) throw bad('expected a port number 0..65535');
      if (spec.kind === 'int' && n < 0) throw bad('expected a non-negative integer');
      return n;
    }
    case 'bool':
      if (typeof str === 'boolean') return str;
      if (str === 'true' || str === '1' || str === 'yes') return true;
      if (str === 'false' || str === '0' || str === 'no') return false;
      throw bad('expected true or false');
    case 'size': {
      const n = typeof str === 'string' || typeof str === 'number' ? parseSize(str) : null;
      if (n === null || n <= 0) throw bad('expected a size such as 1048576, 512KiB or 16MiB');
      return n;
    }
    case 'capacity': {
      const n = typeof str === 'string' || typeof str === 'number' ? parseSize(str) : null;
      if (n === null || n < 0) throw bad('expected 0 or a size such as 1048576, 512KiB or 16MiB');
      return n;
    }
    case 'duration': {
      const n = typeof str === 'string' || typeof str === 'number' ? parseDuration(str) : null;
      if (n === null || n <= 0) throw bad('expected a duration such as 500ms, 30s, 5m or 7d');
      return n;
    }
    case 'delay': {
      const n = typeof str === 'string' || typeof str === 'number' ? parseDuration(str) : null;
      if (n === null || n < 0) throw bad('expected 0 or a duration such as 500ms, 30s, 5m');
      return n;
    }
    case 'sasl-mechanisms': {
      const list = Array.isArray(str) ? str : typeof str === 'string' ? str.split(',') : null;
      if (!list) throw bad('expected a comma-separated list');
      const out: string[] = [];
      for (const item of list) {
        const m = String(item).trim().toUpperCase();
        if (!(SASL_MECHANISMS as readonly string[]).includes(m)) throw bad(`unknown SASL mechanism "${m}"; known: ${SASL_MECHANISMS.join(', ')}`);
        if (!out.includes(m)) out.push(m);
      }
      if (out.length === 0) throw bad('offer at least one mechanism');
      return out;
    }
    case 'hosts': {
      const list = Array.isArray(str) ? str : typeof str === 'string' ? str.split(',') : null;
      if (!list) throw bad('expected a comma-separated list of host names');
      const out: string[] = [];
      for (const item of list) {
        const h = String(item).trim().toLowerCase();
        if (h === '') continue;
        // A name, an IPv4 address or a bracketed or bare IPv6 address, optionally with a port (ignored).
        if (hostName(h) === null) throw bad(`"${h}" is not a host name or IP address`);
        if (!out.includes(h)) out.push(h);
      }
      return out;
    }
    case 'cidrs': {
      const list = Array.isArray(str) ? str : typeof str === 'string' ? str.split(',') : null;
      if (!list) throw bad('expected a comma-separated list of addresses or CIDR blocks');
      const out = list.map((x) => String(x).trim()).filter((x) => x !== '');
      try {
        addressFilter(out);
      } catch (err) {
        throw bad((err as Error).message.replace(/^http-metrics-allow: /, ''));
      }
      return out;
    }
    case 'protocols': {
      const list = Array.isArray(str) ? str : typeof str === 'string' ? str.split(',') : null;
      if (!list) throw bad('expected a comma-separated list');
      const out: Protocol[] = [];
      for (const item of list) {
        const p = String(item).trim().toLowerCase();
        if (!(PROTOCOLS as readonly string[]).includes(p)) throw bad(`unknown protocol "${p}"; known: ${PROTOCOLS.join(', ')}`);
        if (!out.includes(p as Protocol)) out.push(p as Protocol);
      }
      if (out.length === 0) throw bad('enable at least one protocol');
      return out;
    }
  }
}

export interface ConfigSources {
  /** Parsed flags by option name (`data-dir`), strings as typed. */
  flags?: Record<string, unknown>;
  env?: NodeJS.ProcessEnv;
  /** Path of a YAML (or JSON) config file. */
  file?: string;
}

/** Builds and validates the config; throws ConfigError with one clear line naming the key and the problem. */
export function loadConfig(src: ConfigSources = {}): Config {
  const cfg = Object.fromEntries(OPTIONS.map((o) => [o.key, o.default])) as unknown as Record<keyof Config, unknown>;
  const byName = new Map(OPTIONS.map((o) => [o.name, o]));
  if (src.file) {
    let doc: unknown;
    try {
      doc = parseYaml(readFileSync(src.file, 'utf8'));
    } catch (e) {
      throw new ConfigError(`config file ${src.file}: ${(e as Error).message.split('\n')[0]}`);
    }
    if (doc !== null && doc !== undefined) {
      if (typeof doc !== 'object' || Array.isArray(doc)) throw new ConfigError(`config file ${src.file}: expected a mapping of option: value`);
      for (const [k, v] of Object.entries(doc as Record<string, unknown>)) {
        const spec = byName.get(k) ?? OPTIONS.find((o) => o.key === k);
        if (!spec) throw new ConfigError(`config file ${src.file}: unknown key "${k}"`);
        cfg[spec.key] = coerce(spec, v, `${k} in ${src.file}`);
      }
    }
  }
  const env = src.env ?? {};
  for (const spec of OPTIONS) {
    const v = env[envName(spec.name)];
    if (v !== undefined && v !== '') cfg[spec.key] = coerce(spec, v, envName(spec.name));
  }
  for (const [k, v] of Object.entries(src.flags ?? {})) {
    if (v === undefined) continue;
    const spec = byName.get(k);
    if (!spec) throw new ConfigError(`unknown option --${k}`);
    cfg[spec.key] = coerce(spec, v, `--${k}`);
  }
  // Options whose default depends on others (their table default is null: "derived").
  // allow-anonymous and kafka-sasl stay null when unset: the broker derives them from the directory at start (users
  // may live in the metastore, added by `flowmq user add`, with no users file at all).
  if (cfg.oidcIssuer !== null && cfg.oidcJwksUrl === null && cfg.oidcJwksFile === null && cfg.oidcHmacSecret === null) {
    throw new ConfigError('oidc-issuer needs oidc-jwks-url, oidc-jwks-file or oidc-hmac-secret');
  }
  if (cfg.oidcIssuer === null && (cfg.oidcJwksUrl !== null || cfg.oidcJwksFile !== null))
    throw new ConfigError('oidc-jwks-url and oidc-jwks-file need oidc-issuer');
  if ((cfg.authThreads as number) < 1) throw new ConfigError('auth-threads must be at least 1');
  if ((cfg.authNice as number) > 19) throw new ConfigError('auth-nice must be 0..19');
  if (cfg.s3PathStyle === null) cfg.s3PathStyle = cfg.s3Endpoint !== null;
  if (cfg.wal === 'postgres' && (cfg.metastore as MetastoreSetting).kind !== 'postgres') {
    throw new ConfigError("wal postgres keeps the WAL in the metastore's database: it needs --metastore postgres://...");
  }
  if (cfg.wal === 'object' && (cfg.metastore as MetastoreSetting).kind !== 'postgres') {
    throw new ConfigError("wal object indexes its objects in the metastore's database: it needs --metastore postgres://...");
  }
  if ((cfg.walObjectMaxBytes as number) < 1024) throw new ConfigError('wal-object-max-bytes must be at least 1KiB');
  if ((cfg.walShards as string[]).length > 0 && cfg.wal !== 'postgres') throw new ConfigError('wal-shard needs --wal postgres');
  if ((cfg.s3AccessKeyId === null) !== (cfg.s3SecretAccessKey === null)) {
    throw new ConfigError("S3 credentials need both s3-access-key-id and s3-secret-access-key (or neither, for the AWS SDK's own chain)");
  }
  if ((cfg.pgPoolSize as number) < 1) throw new ConfigError('pg-pool-size must be at least 1');
  if ((cfg.s3MaxAttempts as number) < 1) throw new ConfigError('s3-max-attempts must be at least 1');
  if ((cfg.amqpTlsCert === null) !== (cfg.amqpTlsKey === null)) throw new ConfigError('AMQP over TLS needs both amqp-tls-cert and amqp-tls-key');
  if ((cfg.amqpFrameMax as number) < 4096 || (cfg.amqpFrameMax as number) > 0x7fffffff)
    throw new ConfigError('amqp-frame-max must be 4096 bytes or more (AMQP 0-9-1 frame-min-size)');
  if ((cfg.amqpChannelMax as number) < 1 || (cfg.amqpChannelMax as number) > 65535) throw new ConfigError('amqp-channel-max must be 1..65535');
  if ((cfg.amqpHeartbeat as number) % 1000 !== 0 || (cfg.amqpHeartbeat as number) > 65535_000)
    throw new ConfigError('amqp-heartbeat must be whole seconds, at most 65535s');
  if ((cfg.natsTlsCert === null) !== (cfg.natsTlsKey === null)) throw new ConfigError('NATS over TLS needs both nats-tls-cert and nats-tls-key');
  if ((cfg.natsTlsRequired === true || cfg.natsTlsHandshakeFirst === true || cfg.natsWsTls === true) && cfg.natsTlsCert === null) {
    const which = cfg.natsTlsRequired === true ? 'nats-tls-required' : cfg.natsTlsHandshakeFirst === true ? 'nats-tls-handshake-first' : 'nats-ws-tls';
    throw new ConfigError(`${which} needs nats-tls-cert and nats-tls-key`);
  }
  // nats-server's own bounds: max_payload at most 64MB, and never more than max_pending (one message must fit).
  if ((cfg.natsMaxPayload as number) > 64 * 1024 * 1024) throw new ConfigError('nats-max-payload must be at most 64MiB');
  if ((cfg.natsMaxPayload as number) > (cfg.natsMaxPending as number)) throw new ConfigError('nats-max-payload must not exceed nats-max-pending');
  if ((cfg.natsMaxControlLine as number) < 256) throw new ConfigError('nats-max-control-line must be at least 256 bytes');
  if ((cfg.natsMaxPingsOut as number) < 1) throw new ConfigError('nats-max-pings-out must be at least 1');
  if ((cfg.natsMaxConnections as number) < 1) throw new ConfigError('nats-max-connections must be at least 1');
  if (cfg.tlsClientAuth === 'require' && cfg.tlsClientCa === null)
    throw new ConfigError('tls-client-auth require needs tls-client-ca (the CA client certificates are checked against)');
  if ((cfg.kafkaTlsCert === null) !== (cfg.kafkaTlsKey === null)) throw new ConfigError('Kafka over TLS needs both kafka-tls-cert and kafka-tls-key');
  if (cfg.cluster === true) {
    // Cluster brokers keep no durable state of their own: everything they acknowledge must be where the others can
    // take it over. Refused here, before anything is opened, with what to change.
    const missing: string[] = [];
    if ((cfg.metastore as MetastoreSetting).kind !== 'postgres') missing.push('--metastore postgres://... (not the embedded SQLite file)');
    if (cfg.wal === 'file') missing.push("--wal postgres or object (not WAL files on this broker's disk)");
    if ((cfg.objectStore as ObjectStoreSetting).kind !== 's3') missing.push('an s3://bucket/prefix --object-store (not the data directory)');
    if (cfg.clusterSecret === null) missing.push("--cluster-secret (the brokers' shared channel secret)");
    if (missing.length > 0) throw new ConfigError(`--cluster needs shared backends every broker reaches: ${missing.join('; ')}`);
    if ((cfg.clusterSecret as string).length < 16) throw new ConfigError('cluster-secret must be at least 16 characters');
    if ((cfg.clusterLease as number) < 1000) throw new ConfigError('cluster-lease must be at least 1s');
  }
  if ((cfg.clusterTlsCert === null) !== (cfg.clusterTlsKey === null))
    throw new ConfigError('cluster channel TLS needs both cluster-tls-cert and cluster-tls-key');
  if (cfg.clusterTlsCert !== null && cfg.clusterTlsCa === null)
    throw new ConfigError("cluster-tls-cert needs cluster-tls-ca (the CA the peers' certificates must chain to)");
  if (cfg.clusterTlsCa !== null && cfg.clusterTlsCert === null) throw new ConfigError('cluster-tls-ca needs cluster-tls-cert and cluster-tls-key');
  if (cfg.clusterTls === 'cert' && cfg.clusterTlsCert === null)
    throw new ConfigError('cluster-tls cert needs cluster-tls-cert, cluster-tls-key and cluster-tls-ca');
  if ((cfg.clusterTls === 'psk' || cfg.clusterTls === 'off') && cfg.clusterTlsCert !== null)
    throw new ConfigError(
      `cluster-tls ${cfg.clusterTls as string} does not use cluster-tls-cert, cluster-tls-key and cluster-tls-ca: remove them, or use cluster-tls cert`,
    );
  if ((cfg.kafkaGroupMinSessionTimeout as number) > (cfg.kafkaGroupMaxSessionTimeout as number)) {
    throw new ConfigError('kafka-group-min-session-timeout must not exceed kafka-group-max-session-timeout');
  }
  return cfg as unknown as Config;
}

/** The internal channel's TLS mode once `auto` is resolved: cert when a certificate is configured, else psk. */
export function clusterTlsMode(config: Pick<Config, 'clusterTls' | 'clusterTlsCert'>): 'off' | 'psk' | 'cert' {
  if (config.clusterTls !== 'auto') return config.clusterTls;
  return config.clusterTlsCert !== null ? 'cert' : 'psk';
}
