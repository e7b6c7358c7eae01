/**
 * The admin API's contracts: its options, the context its routes share, and what the running protocols offer it
 * (consumer groups, stored sessions). The control plane owns them; protocol modules implement them.
 */
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { Cluster } from '../../cluster/index.js';
import type { Engine } from '../../core/index.js';
import type { AccessControl } from '../access.js';
import type { HttpTimeouts } from '../http-guard.js';
import type { Sessions } from './auth.js';
import type { BrokerConfigAdmin } from '../settings.js';

/** Storage operations the control plane may ask for; implemented by the log engine. */
export interface StorageOps {
  flushAll(): Promise<void>;
  /** Runs a cleaner pass over the stream's compacted partitions held here now (whatever their dirty ratio). */
  compact(stream: string): Promise<void>;
  describe(stream: string): Array<Record<string, number>>;
  /**
   * Cluster mode: the same at the owners of the stream's partitions held by other brokers (each seals every tail it
   * holds and, with `compact`, runs a cleaner pass over its partitions of the stream).
   */
  atOwners?(stream: string, partitions: number, compact: boolean): Promise<void>;
}

/** What /metrics serves: a prom-client Registry (`metrics()`) or anything with `text()`. */
export interface MetricsSource {
  readonly contentType: string;
  text?(): Promise<string>;
  metrics?(): Promise<string>;
}

export interface AdminApiOptions {
  engine: Engine;
  /** The admin API's logger (a child of the broker's). */
  logger: Logger;
  /** The broker's root logger: PUT /api/v1/log-level sets its level (children follow). Default: `logger`. */
  rootLogger?: Logger;
  /** The control plane: directory, guard, policies, client registry, quotas. */
  access: AccessControl;
  storage?: StorageOps;
  /** Extra broker information for GET /api/v1/broker. */
  info?: () => Record<string, unknown>;
  /** Bind address (`--http-host`). */
  host: string;
  port: number;
  /** Extra host names the Host header may carry (`--http-allowed-hosts`). */
  allowedHosts?: readonly string[];
  /** Consumer groups of the running protocols (Kafka groups, JetStream durables). */
  groups?: () => ReadonlyArray<{ protocol: string; admin: ConsumerGroupAdmin }>;
  /** The MQTT module's session admin (ends a session held in its memory), when MQTT runs and offers one. */
  mqttSessions?: () => SessionAdmin | null | undefined;
  /** Kafka's broker configs (the kafka module's), for /api/v1/broker/configs; absent: not running. */
  brokerConfigs?: () => BrokerConfigAdmin | undefined;
  /** This broker's id (the default scope of /api/v1/broker/configs). */
  brokerId?: number;
  /** Cluster mode: membership and ownership for GET /api/v1/cluster; null or absent on a single broker. */
  cluster?: Cluster | null;
  /** /readyz: true once storage is recovered and the listeners are up. Default: always. */
  ready?: () => boolean;
  /** /metrics (part G's registry); absent: 404. */
  metrics?: MetricsSource | null;
  /** `--http-metrics-allow`: addresses / CIDR blocks that may read /metrics, /healthz, /readyz (empty: anyone). */
  metricsAllow?: readonly string[];
  /** Dashboard session lifetime (`--http-session-ttl`), ms. Default 12 h. */
  sessionTtlMs?: number;
  /** Requests without credentials act as the anonymous principal (no flag sets it; the broker leaves it off). Default false. */
  anonymous?: boolean;
  /** Logins per address per minute before 429 (POST /api/v1/login). Default 10. */
  loginRateLimit?: number;
  /** The broker's version, for /api/v1/broker and the OpenAPI document. */
  version?: string;
  /** Registers extra routes (the dashboard's static files); default: src/control/dashboard.ts when it exists. */
  dashboard?: ((app: FastifyInstance) => Promise<void> | void) | null;
  /** Headers, request and keep-alive timeouts (see http-guard.ts); default HTTP_TIMEOUTS. */
  timeouts?: HttpTimeouts;
}

/** A consumer group as the admin API lists it (Kafka groups; JetStream durable consumers). */
export interface GroupSummary {
  readonly name: string;
  /** "kafka", "jetstream". */
  readonly protocol: string;
  /** Kafka: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead; JetStream: "active" / "idle". */
  readonly state: string;
  readonly members: number;
  /** Messages not yet consumed over every partition it has offsets for (null: unknown). */
  readonly lag: number | null;
}

export interface GroupDetail extends GroupSummary {
  readonly memberDetails: ReadonlyArray<{ id: string; clientId: string; host: string; assignments: ReadonlyArray<{ stream: string; partition: number }> }>;
  readonly offsets: ReadonlyArray<{ stream: string; partition: number; committed: number | null; end: number; lag: number | null }>;
}

/** Where a group's committed offsets move to: the log's start or end, an offset, or the first offset at a time. */
export type OffsetResetTarget = { to: 'earliest' } | { to: 'latest' } | { to: 'offset'; offset: number } | { to: 'timestamp'; timestamp: number };

/** What a protocol offers the admin API about its consumer groups. */
export interface ConsumerGroupAdmin {
  list(): Promise<GroupSummary[]>;
  describe(name: string): Promise<GroupDetail | null>;
  /**
   * Moves the group's committed offsets on `stream` (every partition). Refused with FlowError
   * INVALID_ARGUMENT ("group has active members") unless the group is empty, as kafka-consumer-groups does.
   * `progress(done, total)` is called per partition (the CLI's progress bar).
   */
  resetOffsets(name: string, stream: string, target: OffsetResetTarget, progress?: (done: number, total: number) => void): Promise<GroupDetail>;
  /**
   * Deletes an empty group (its offsets). NOT_FOUND / INVALID_ARGUMENT (active members) otherwise; `force`: its
   * members are dropped first (a deleted namespace's groups, whose clients were just disconnected).
   */
  delete(name: string, force?: boolean): Promise<void>;
}

/** What a protocol offers the admin API about its stored client sessions (MQTT persistent sessions). */
export interface SessionAdmin {
  /**
   * Ends the session of a client id that is not connected (the admin API kicks a connected client first and waits
   * for its connection to end): its subscriptions, queued messages and stored record go, as when it expires.
   * Answers whether there was one in memory.
   */
  delete(clientId: string): Promise<boolean>;
}

export type ApiContext = AdminApiOptions & {
  access: AccessControl;
  sessions: Sessions;
  rootLogger: Logger;
  groups: () => ReadonlyArray<{ protocol: string; admin: ConsumerGroupAdmin }>;
  loginRateLimit: number;
};
