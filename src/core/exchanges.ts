/**
 * Exchanges and bindings: the routing table of the core, as definitions. Every publish enters through an
 * exchange; a binding connects an exchange to a destination (a queue, a stream, or another exchange) with a
 * matching rule that belongs to the binding (see matcher.ts). The unified topic space, where MQTT, Kafka and NATS
 * publish and where streams bind their topic filters, is the exchange `amq.topic`: AMQP routing key `a.b.c` on
 * it is the unified topic `a/b/c`.
 */
import type { Message } from './message.js';
import type { QueueDef, QueueHandle } from './queues.js';

export type ExchangeType = 'direct' | 'fanout' | 'topic' | 'headers';

/** The exchange of the unified topic space. */
export const TOPIC_SPACE = 'amq.topic';
/** The AMQP default exchange: routes to the queue named by the routing key; cannot be bound or deleted. */
export const DEFAULT_EXCHANGE = '';

export interface ExchangeDef {
  name: string;
  type: ExchangeType;
  durable: boolean;
  /** Deleted when its last binding (as source) is removed. */
  autoDelete: boolean;
  /** Cannot be published to directly, only through exchange-to-exchange bindings. */
  internal: boolean;
  /** alternate-exchange: where messages this exchange cannot route go. */
  alternateExchange?: string;
  /** Declared arguments as JSON-safe values, for equivalence checks and display. */
  rawArguments: Record<string, unknown>;
  createdAt: number;
}

export type DestinationKind = 'queue' | 'exchange' | 'stream';

/**
 * A binding to a stream whose arguments hold this whole number appends to that partition of the stream instead of
 * choosing one by key: RabbitMQ's super-stream binding argument (there it orders the partition streams; a FlowMQ
 * super stream is one stream whose partition index is that order). Out of range, or not a whole number: ignored.
 */
export const STREAM_PARTITION_ARG = 'x-stream-partition-order';

/** The partition a binding to a stream pins (STREAM_PARTITION_ARG), or -1. */
export function pinnedPartition(args: Readonly<Record<string, unknown>>): number {
  const v = args[STREAM_PARTITION_ARG];
  const n = typeof v === 'string' && /^\d{1,9}$/.test(v) ? Number(v) : v;
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 ? n : -1;
}

export interface BindingDef {
  /** Source exchange. */
  source: string;
  destinationKind: DestinationKind;
  destination: string;
  /**
   * The binding key in the source exchange's own syntax: a direct key, an AMQP topic pattern (`a.*.#`), or, on
   * the unified topic space when `rule` says so, an MQTT filter or a NATS subject. Ignored by fanout.
   */
  key: string;
  /**
   * How `key` matches on a topic exchange: 'amqp' (`*` one word, `#` zero or more words anywhere), 'mqtt' (`+`,
   * trailing `#`, wildcards do not match `$` topics at the first level) or 'nats' (`*`, trailing `>` one or more).
   * Default 'amqp'.
   */
  rule?: 'amqp' | 'mqtt' | 'nats';
  /** Binding arguments (headers exchanges: x-match all|any|all-with-x|any-with-x and the values to match). */
  arguments: Record<string, unknown>;
}

/** Durable definitions of queues, exchanges and bindings (the metastore implements it). */
export interface QueueCatalog {
  putQueue(def: QueueDef): Promise<void>;
  deleteQueue(name: string): Promise<void>; // no error when absent; removes bindings to it as well
  listQueues(): Promise<QueueDef[]>;
  putExchange(def: ExchangeDef): Promise<void>;
  deleteExchange(name: string): Promise<void>; // no error when absent; removes bindings from and to it
  listExchanges(): Promise<ExchangeDef[]>;
  putBinding(b: BindingDef): Promise<void>; // idempotent
  deleteBinding(b: BindingDef): Promise<void>; // no error when absent
  listBindings(): Promise<BindingDef[]>;
}

/** What a publish into an exchange reached. */
export interface RouteResult {
  /** Destinations the message reached: queues, streams and live subscribers. 0: unroutable (AMQP basic.return). */
  routed: number;
  /**
   * Resolves once the message is durable in every durable destination it reached (publisher confirm: ack);
   * rejects when one failed (confirm: nack). Null when there is nothing to wait for.
   */
  durable: Promise<void> | null;
  /** A queue refused it (x-overflow reject-publish at its limit): the publisher confirm must be a nack. */
  rejected: boolean;
  /**
   * Settles once store writes made for it that no confirm waits for (transient messages kept in a durable queue's
   * store) are done: publishers' flow control counts them (see EnqueueResult.written). Absent when there are none.
   */
  written?: Promise<void>;
}

/**
 * The routing core's exchange and queue operations (implemented by the Engine). Errors are FlowErrors:
 * NOT_FOUND (AMQP 404), PRECONDITION_FAILED (406), RESOURCE_LOCKED (405), ACCESS_REFUSED (403),
 * INVALID_ARGUMENT (406 / 530 as the adapter sees fit).
 */
export interface Router {
  /**
   * Declares an exchange, or checks an existing one is equivalent (type, durable, autoDelete, internal, arguments;
   * PRECONDITION_FAILED otherwise). With `passive`, only checks it exists (NOT_FOUND). Names starting `amq.` cannot
   * be declared non-passively unless they already exist equivalently (ACCESS_REFUSED).
   */
  declareExchange(def: Omit<ExchangeDef, 'createdAt'>, opts?: { passive?: boolean }): Promise<ExchangeDef>;
  /** ifUnused: PRECONDITION_FAILED when it is the source of a binding. Built-in exchanges cannot be deleted. */
  deleteExchange(name: string, opts?: { ifUnused?: boolean }): Promise<void>;
  getExchange(name: string): ExchangeDef | undefined;
  listExchanges(): ExchangeDef[];

  /**
   * Declares a queue or checks an existing one (durable, autoDelete, exclusivity and arguments must be
   * equivalent: PRECONDITION_FAILED; another connection's exclusive queue: RESOURCE_LOCKED). Every queue is bound
   * to the default exchange by its name. `passive` only checks.
   */
  declareQueue(def: Omit<QueueDef, 'createdAt'>, opts?: { passive?: boolean; owner?: string }): Promise<QueueHandle>;
  /** Returns the number of messages deleted with it; ifUnused (no consumers) / ifEmpty: PRECONDITION_FAILED. */
  deleteQueue(name: string, opts?: { ifUnused?: boolean; ifEmpty?: boolean }): Promise<number>;
  /** Removes the ready messages; returns how many. */
  purgeQueue(name: string): Promise<number>;
  getQueue(name: string): QueueHandle | undefined;
  listQueues(): QueueDef[];
  /** Deletes the exclusive queues of a connection that went away. */
  dropExclusive(owner: string): Promise<void>;

  /** Idempotent; NOT_FOUND when the source or destination does not exist. */
  bind(b: BindingDef): Promise<void>;
  unbind(b: BindingDef): Promise<void>;
  listBindings(): BindingDef[];

  /**
   * Publishes into an exchange: routes by the exchange's type and bindings, follows exchange-to-exchange bindings
   * and the alternate exchange, enqueues into queues, appends to streams, delivers to live subscribers. On the
   * unified topic space (`amq.topic`) the routing key is translated to a unified topic (see topic.ts). NOT_FOUND
   * for an unknown exchange, ACCESS_REFUSED for an internal one.
   */
  publishTo(exchange: string, routingKey: string, msg: Message): RouteResult;
}
