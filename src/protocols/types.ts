/**
 * What every protocol adapter gets from the broker, and what it hands back.
 */
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Engine } from '../core/index.js';
import type { Config } from '../config/index.js';
import type { AccessControl, AmqpManagementView, BrokerConfigAdmin, ConsumerGroupAdmin, PasswordGuard, SessionAdmin } from '../control/index.js';
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
 * One protocol, as the broker starts it: the broker keeps a list of modules and starts the enabled ones, so
 * adding a protocol adds a module, not another block in startBroker.
 */
export interface ProtocolModule {
  /** "mqtt", "kafka", "amqp", "nats": the name in --protocols and the key of its figures in /api/v1/broker. */
  readonly name: string;
  /**
   * Refuses a configuration the module cannot run with (a half-configured TLS listener), with a CONFIG_ERROR. The
   * broker checks every enabled module before it starts any, so such a start opens no listener at all.
   */
  check?(config: Config): void;
  /**
   * Starts the protocol's shared state and its listeners as configured. A failure leaves nothing open. The broker
   * starts the enabled modules side by side; when one fails, it closes the others.
   */
  start(ctx: ProtocolModuleContext): Promise<RunningProtocol>;
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
  /** AMQP's connections, channels and alarms, for the RabbitMQ management API (src/control/rabbitmq). */
  readonly amqpManagement?: AmqpManagementView;
  /** The protocol's figures for GET /api/v1/broker (drops, latencies, pools), if it keeps any. */
  figures?(): unknown;
  /**
   * A configuration reload (SIGHUP), after the users file was read again: the protocol reloads what it can (its own
   * files) and checks its clients against the permissions now in force. Answers figures for the log.
   */
  reload?(): Promise<Record<string, unknown>>;
  /** Stops the listeners (closing their connections), then the protocol's shared state. */
  close(): Promise<void>;
}
