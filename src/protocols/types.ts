/**
 * What every protocol adapter gets from the broker, and what it hands back.
 */
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Engine } from '../core/index.js';
import type { Config } from '../config/index.js';
import type { AccessControl, BrokerConfigAdmin, PasswordGuard } from '../control/index.js';
import type { Cluster } from '../cluster/index.js';

export interface AdapterContext {
  engine: Engine;
  logger: Logger;
  /** Identifier of this broker instance (Kafka node id, $SYS topics...). */
  brokerId: number;
}

export interface ListenOptions {
  host: string;
  /** 0 picks a free port. */
  port: number;
}

export interface ProtocolListener {
  readonly protocol: string;
  address(): AddressInfo;
  /** Number of open client connections. */
  connections(): number;
  /** Stops accepting, closes every client connection, resolves when all are closed. */
  close(): Promise<void>;
}

/** What the broker hands a protocol module at start. */
export interface ProtocolModuleContext extends AdapterContext {
  /** The broker's own logger: a module logs its 'listening' lines here and gives its adapter a child of it. */
  logger: Logger;
  config: Config;
  /**
   * Clear-text password checks against the directory's users; null while the broker started with no users and no
   * webhook (the zero-setup default: everyone is let in). Prefer `access.password(...)`, which also consults the
   * webhook authenticator and answers the principal.
   */
  guard: PasswordGuard | null;
  /** The control plane: authentication, policies, quotas, the client registry (see src/control/access.ts). */
  access: AccessControl;
  /**
   * Cluster mode (--cluster): membership, ownership and the internal channel (src/cluster); null on a single broker.
   * A module registers its ownership handlers (Cluster.register) during start; the broker calls begin() after.
   */
  cluster: Cluster | null;
}

/**
 * One protocol, as the broker starts it: the broker keeps a list of modules and starts the enabled ones in
 * order, so adding a protocol adds a module, not another block in startBroker.
 */
export interface ProtocolModule {
  /** "mqtt", "kafka", "amqp", "nats": the name in --protocols and the key of its figures in /api/v1/broker. */
  readonly name: string;
  /** Starts the protocol's shared state and its listeners as configured. A failure leaves nothing open. */
  start(ctx: ProtocolModuleContext): Promise<RunningProtocol>;
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
  /** Deletes an empty group (its offsets). NOT_FOUND / INVALID_ARGUMENT (active members) otherwise. */
  delete(name: string): Promise<void>;
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

export interface RunningProtocol {
  /** Listeners by name ("mqtt", "mqtts", "mqtt-ws", "kafka", "kafka-tls", "amqp", ...). */
  readonly listeners: ReadonlyMap<string, ProtocolListener>;
  /** Consumer groups of this protocol, for the admin API (Kafka; NATS: JetStream durable consumers). */
  readonly groups?: ConsumerGroupAdmin;
  /** Stored client sessions of this protocol, for the admin API (MQTT). */
  readonly sessions?: SessionAdmin;
  /** Broker configs altered at run time (Kafka's, by their names), for the admin API. */
  readonly brokerConfigs?: BrokerConfigAdmin;
  /** The protocol's figures for GET /api/v1/broker (drops, latencies, pools), if it keeps any. */
  figures?(): unknown;
  /** Stops the listeners (closing their connections), then the protocol's shared state. */
  close(): Promise<void>;
}
