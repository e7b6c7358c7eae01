/**
 * What the AMQP module offers the RabbitMQ management API (src/control/rabbitmq): its live connections, channels and
 * consumers, and its resource alarms. The control plane owns the contract (it is the lower layer); the AMQP
 * module implements it (src/protocols/amqp/admin.ts) and the broker hands it over, as with consumer groups and
 * MQTT sessions (RunningProtocol.amqpManagement).
 */

/** One consumer on a channel. */
export interface AmqpConsumerView {
  readonly tag: string;
  readonly queue: string;
  readonly ackRequired: boolean;
  readonly prefetchCount: number;
  readonly priority: number;
}

/** One open channel. */
export interface AmqpChannelView {
  readonly number: number;
  readonly prefetchCount: number;
  readonly globalPrefetchCount: number;
  readonly unacked: number;
  readonly confirm: boolean;
  readonly transactional: boolean;
  /** Publishes and acks held by an open transaction. */
  readonly uncommittedMessages: number;
  readonly uncommittedAcks: number;
  /** Publisher confirms not sent yet. */
  readonly unconfirmed: number;
  readonly consumers: readonly AmqpConsumerView[];
}

/** One AMQP connection (open or still in its handshake). */
export interface AmqpConnectionView {
  readonly id: string;
  /** "running" once opened, "starting" during the handshake, "blocked" while an alarm holds it, "closing". */
  readonly state: string;
  readonly user: string;
  /** The virtual host as the client opened it. */
  readonly vhost: string;
  readonly namespace: string;
  readonly peerHost: string;
  readonly peerPort: number;
  readonly host: string;
  readonly port: number;
  readonly tls: boolean;
  readonly authMechanism: string;
  readonly frameMax: number;
  readonly channelMax: number;
  /** Negotiated heartbeat, seconds. */
  readonly heartbeatSec: number;
  readonly connectedAt: number;
  /** Bytes and frames (read calls / writes) since the connection opened. */
  readonly recvOct: number;
  readonly sendOct: number;
  readonly recvCnt: number;
  readonly sendCnt: number;
  /** The client's start-ok client-properties, as JSON-safe values (strings, numbers, booleans, nested tables). */
  readonly clientProperties: Record<string, unknown>;
  readonly channels: readonly AmqpChannelView[];
}

/**
 * A FlowMQ stream as AMQP 0-9-1 sees it: a stream queue (x-queue-type=stream, one partition) or one partition queue
 * `S-<key>` of a super stream S (src/protocols/amqp/super-stream.ts).
 */
export interface AmqpStreamQueueView {
  /** The queue name clients use: the stream's own, or `S-<key>`. */
  readonly name: string;
  /** The FlowMQ stream it reads (`S` for a partition queue) and the partition. */
  readonly stream: string;
  readonly partition: number;
  /** The super stream (its exchange) when this is a partition queue, and its routing key there; else null. */
  readonly superStream: string | null;
  readonly key: string | null;
  /** RabbitMQ's arguments of the queue: x-queue-type "stream" and the stream's settings (x-max-age...). */
  readonly arguments: Record<string, unknown>;
  /** Records in the partition (high watermark − log start). */
  readonly messages: number;
}

export interface AmqpManagementView {
  connections(): AmqpConnectionView[];
  /** Every stream queue and super-stream partition queue AMQP clients can declare passively, consume and delete. */
  streamQueues(): AmqpStreamQueueView[];
  /**
   * Deletes a stream queue or partition queue as AMQP queue.delete does (a partition queue of a declared super stream
   * unbinds its partition; the last one, or one of a derived view, deletes the stream). Its records, or null when
   * `name` is no stream queue.
   */
  deleteStreamQueue(name: string): Promise<number | null>;
  /**
   * Makes a stream queue (x-queue-type stream) as AMQP queue.declare makes one, from RabbitMQ's JSON arguments;
   * `created: false` when it exists with equivalent arguments, `error` (RabbitMQ's text) when refused.
   */
  declareStreamQueue(name: string, args: Record<string, unknown>, durable: boolean, autoDelete: boolean): Promise<{ created: boolean } | { error: string }>;
  /** The AMQP module's resource alarms (publishers blocked). */
  alarms(): { memory: boolean; disk: boolean };
  /** Publishes taken, confirmed, returned (mandatory, unroutable) and dropped (unroutable) since start. */
  totals(): { publish: number; confirm: number; returnUnroutable: number; dropUnroutable: number };
  /** The memory high watermark publishers are blocked above, bytes (0: none). */
  memoryLimit(): number;
  /** connection.close 320 CONNECTION_FORCED with the reason; false when no such connection. */
  close(id: string, reason: string): boolean;
}
