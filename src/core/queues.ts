/**
 * Durable queues as the core sees them: the definition, the storage interface a backend implements (src/storage/
 * queues), and the consumer interface an adapter implements (AMQP basic.consume, MQTT `$queue/<name>`).
 *
 * A queue is the core's second durable destination (beside streams): competing consumers, per-message
 * ready/unacked state, acks and redelivery, TTL, length limits and dead-lettering. The runtime (src/core/queue.ts)
 * keeps a bounded window of ready messages in memory and the rest in its QueueStore, so a long queue costs storage,
 * not memory, and a publish costs O(log n) whatever the length.
 */
import type { DeathRecord, Message } from './message.js';

/** What happens to a publish that would take a queue past its max length / max bytes. */
export type QueueOverflow = 'drop-head' | 'reject-publish' | 'reject-publish-dlx';

/** Queue arguments the core acts on (AMQP x-arguments, normalized and validated by the adapter or the API). */
export interface QueueArguments {
  /** x-message-ttl: a message not delivered within this many ms of enqueue is dropped or dead-lettered. */
  messageTtlMs?: number;
  /** x-expires: the queue is deleted after this many ms without consumers, basic.get or re-declare. */
  expiresMs?: number;
  /** x-max-length (messages) and x-max-length-bytes (payload bytes) of ready messages. */
  maxLength?: number;
  maxLengthBytes?: number;
  /** x-overflow; default drop-head. */
  overflow?: QueueOverflow;
  /** x-dead-letter-exchange / x-dead-letter-routing-key. */
  deadLetterExchange?: string;
  deadLetterRoutingKey?: string;
  /** x-single-active-consumer: only one consumer receives at a time; the next takes over when it goes. */
  singleActiveConsumer?: boolean;
  /** x-delivery-limit: after this many deliveries a message is dead-lettered (reason delivery_limit). */
  deliveryLimit?: number;
}

export interface QueueDef {
  name: string;
  /** Survives a restart (definition and persistent messages). Non-durable queues live in memory only. */
  durable: boolean;
  /**
   * Exclusive to one connection (its id; null when not exclusive): deleted when that connection closes. Never
   * persisted as exclusive: an exclusive queue does not survive its connection, let alone a restart.
   */
  exclusiveOwner: string | null;
  /** Deleted once it has had at least one consumer and the last one went away. */
  autoDelete: boolean;
  arguments: QueueArguments;
  /**
   * Set while a policy (the RabbitMQ management API's) changed `arguments`: the arguments as declared, which a
   * redeclaration is compared with. Never persisted: a policy applies to a queue again whenever the queue opens.
   */
  declaredArguments?: QueueArguments;
  /**
   * The arguments exactly as declared (AMQP field table as JSON-safe values), for redeclare equivalence checks
   * and display; the core acts only on `arguments`.
   */
  rawArguments: Record<string, unknown>;
  createdAt: number;
}

/** One message as a QueueStore keeps it. */
export interface StoredQueueMessage {
  /** Increasing per queue, assigned by the core before the append. */
  id: number;
  /** The message in `encodeStoredMessage` form. */
  data: Buffer;
  /** Deliveries so far, as last recorded (setDeliveries); 0 when never recorded. */
  deliveries: number;
}

/**
 * Durable storage of queue messages (definitions are in the QueueCatalog of the metastore).
 *
 * Order and durability: calls naming the same queue take effect in the order they were issued, awaited or not; a
 * returned promise resolves once the change is durable (survives `kill -9` of the broker). Backends group the
 * calls issued close together into one commit (one fsync / transaction), so a single append costs a fraction of a
 * commit under load. Every operation is O(log n) in the queue's length (no COUNT(*), no scan of the queue).
 */
/** A forwarded publish: who forwarded it (a broker's life) and its sequence from there, to that queue. */
export interface QueueMark {
  src: string;
  seq: number;
}

export interface QueueStore {
  readonly kind: string;
  /** Prepares a queue's storage (idempotent); returns what recovery needs without reading the messages. */
  openQueue(queue: string): Promise<{ count: number; bytes: number; maxId: number; marks?: Record<string, number> }>;
  /**
   * Appends messages with the given ids (increasing, above any id already appended to this queue). `mark`: the
   * forwarding broker and sequence of the last of them (cluster mode), stored in the same transaction, so that the
   * queue's next owner knows it was stored (openQueue's `marks`: the highest sequence per forwarder). Backends of
   * the embedded mode ignore it.
   */
  append(queue: string, messages: Array<{ id: number; data: Buffer }>, mark?: QueueMark): Promise<void>;
  /** Removes messages (acked, dropped, dead-lettered, expired); ids not present are ignored. */
  remove(queue: string, ids: number[]): Promise<void>;
  /** Records a message's delivery count (on requeue; so the redelivered flag and delivery limits survive a restart). */
  setDeliveries(queue: string, id: number, deliveries: number): Promise<void>;
  /** Up to `limit` messages with id >= `fromId`, in id order. */
  read(queue: string, fromId: number, limit: number): Promise<StoredQueueMessage[]>;
  /** Removes every message; returns how many there were. */
  purge(queue: string): Promise<number>;
  /** Removes the queue's storage and messages (no error when absent). */
  dropQueue(queue: string): Promise<void>;
  /**
   * Removes every queue whose name starts with `prefix`, and its messages; returns how many queues. What the broker
   * sweeps at start: the pages of its non-durable queues (QueuePages). Backends without it give no paging.
   */
  dropQueues?(prefix: string): Promise<number>;
  close(): Promise<void>;
  figures?(): Record<string, unknown>;
  /**
   * Cluster mode: fences the queue's writes (appends, removes, delivery counts, purge, drop) by the queue's owner
   * epoch (`flowmq_owner_check('queue', name, epoch)` in the same transaction), so that a broker that lost the queue
   * can never write it again; null stops fencing (the queue was handed over). Backends without owner rows omit it.
   */
  fence?(queue: string, epoch: number | null): void;
}

/** A delivery handed to a consumer (or returned by get). */
export interface QueueDelivery {
  queue: string;
  /** The message's id in its queue: what ack/nack name. */
  id: number;
  msg: Message;
  /** True when the message may have been delivered before (requeued, or recovered after a restart). */
  redelivered: boolean;
  /** Deliveries including this one. */
  deliveryCount: number;
  /** Ready messages left in the queue after this one (AMQP basic.get-ok message-count). */
  remaining: number;
}

/** A consumer of a queue: one per AMQP basic.consume or MQTT `$queue/<name>` subscription. */
export interface QueueConsumer {
  /** Unique per queue (AMQP consumer tag, or "mqtt:<client id>"). */
  readonly tag: string;
  /**
   * Who holds this consumer's unacked deliveries: an AMQP channel ("<connection id>/<channel>"), an MQTT client.
   * release(owner) requeues them when that channel or connection goes away.
   */
  readonly owner: string;
  /** Deliveries need no ack (AMQP no-ack): a message is removed when delivered. */
  readonly noAck: boolean;
  /** Higher first (AMQP x-priority); default 0. */
  readonly priority?: number;
  /** True when the consumer can take one more delivery now (prefetch window, socket back-pressure). */
  hasCredit(): boolean;
  /** Called synchronously; must not throw or block. */
  deliver(d: QueueDelivery): void;
  /** The queue went away (deleted): AMQP sends basic.cancel to the client. */
  cancelled?(reason: string): void;
}

/** What a queue counted since it opened in this process (see Queue.counters). */
export interface QueueCounters {
  readonly publish: number;
  readonly deliver: number;
  readonly deliverNoAck: number;
  readonly get: number;
  readonly getNoAck: number;
  readonly getEmpty: number;
  readonly redeliver: number;
  readonly ack: number;
}

/** A live queue's public surface: what adapters call. */
export interface QueueHandle {
  readonly def: QueueDef;
  /** Ready and unacked message counts, ready payload bytes, consumers. */
  stats(): { ready: number; unacked: number; bytes: number; consumers: number };
  /** Message counts since the queue opened in this process (the RabbitMQ management API's message_stats); absent: not counted. */
  readonly counters?: QueueCounters;
  /** Adds a consumer (FlowError RESOURCE_LOCKED when the queue has an exclusive consumer). */
  consume(c: QueueConsumer, opts?: { exclusive?: boolean }): void;
  /** Removes a consumer; its unacked deliveries stay unacked until acked, nacked or released. */
  cancel(c: QueueConsumer): void;
  /** Tells the queue a consumer has credit again (after acks or a drained socket). */
  resume(c: QueueConsumer): void;
  /** One message for a pull consumer (AMQP basic.get); null when none is ready. `owner` gets the delivery. */
  get(owner: string, noAck: boolean): Promise<QueueDelivery | null>;
  /** Acknowledges a delivery: the message is removed; resolves once durable. */
  ack(id: number): Promise<void>;
  /** Rejects a delivery: requeued (redelivered later) or dropped / dead-lettered (reason rejected). */
  nack(id: number, requeue: boolean): Promise<void>;
  /** Requeues every unacked delivery of `owner` (its channel or connection closed, or basic.recover). */
  release(owner: string): void;
  /** Cluster mode: brings stats() up to date from the queue's owner (before a declare-ok or a delete's checks). */
  refresh?(): Promise<void>;
}

/** What a queue runtime asks of the router that owns it. */
export interface QueueHooks {
  /**
   * Routes a dead-lettered message to the queue's dead-letter exchange (the runtime has already added its death
   * record and set the routing key). Resolves once durable wherever it went; null when nothing needed waiting for
   * (no dead-letter exchange, or it routed nowhere: the message is then dropped, as RabbitMQ does).
   */
  deadLetter(def: QueueDef, msg: Message, reason: DeathRecord['reason']): Promise<void> | null;
  /** The queue asks to be deleted: auto-delete after its last consumer went, or x-expires elapsed unused. */
  expire(def: QueueDef, why: 'auto-delete' | 'expires'): void;
}

/** The runtime of one queue (src/core/queue.ts), as the router drives it. */
/** What an enqueue did: the publisher's durability, a refusal, and a store write the publisher need not wait for. */
export interface EnqueueResult {
  durable: Promise<void> | null;
  rejected: boolean;
  /**
   * A store write of a transient message (a durable queue past its in-memory window keeps it in the store too): no
   * publisher confirm waits for it, but it takes the store's time, so publishers' flow control counts it.
   */
  written?: Promise<void>;
}

export interface QueueRuntime extends QueueHandle {
  /** Recovers a durable queue's stored messages (ready again, redelivered); starts TTL / expiry timers. */
  open(): Promise<void>;
  /**
   * Takes a routed message. Its id is assigned synchronously; `durable` resolves once stored (persistent messages
   * in durable queues; null otherwise). `rejected`: refused by x-overflow reject-publish(-dlx) at the limit.
   */
  enqueue(msg: Message, mark?: QueueMark): EnqueueResult;
  /**
   * Cluster mode: the highest sequence of `src`'s forwarded publishes this queue stored (from the store at open, then
   * each one once durable), -1 when none: a retried publish at or below it is not enqueued again.
   */
  marked?(src: string): number;
  /**
   * Cluster mode: the write of `src`'s forwarded publish `seq` while it is in flight (stored, not yet durable), else
   * undefined: a retry arriving meanwhile (its request broke off) waits for it instead of being enqueued again.
   */
  writing?(src: string, seq: number): Promise<void> | undefined;
  /** Removes the ready messages; returns how many. */
  purge(): Promise<number>;
  /** Deletes the queue: cancels its consumers (cancelled()), drops its storage; returns the messages it held. */
  destroy(): Promise<number>;
  /** Stops timers without deleting anything (broker shutdown). */
  close(): void;
  /** Counts as a use for x-expires (RabbitMQ: a re-declaration does); optional for runtimes without expiry. */
  touch?(): void;
  /**
   * `def.arguments` changed (a policy applied or removed): length limits are enforced at once, the x-expires timer
   * re-armed; message TTLs apply to messages enqueued from now on. Optional: a runtime without it takes new arguments
   * at its next enqueue.
   */
  argumentsChanged?(): void;
  /**
   * Cluster mode: the queue was deleted by another broker: cancel the consumers here (cancelled()) and stop, without
   * touching its storage (its owner drops it).
   */
  detach?(): void;
}

export type QueueFactory = (def: QueueDef, store: QueueStore | null, hooks: QueueHooks) => QueueRuntime;

/** Owners asked at once by refreshQueueStats. */
const REFRESH_PARALLEL = 16;

/**
 * Cluster mode: brings the counts of `handles` owned by other brokers up to date (QueueHandle.refresh, each asked of
 * its owner), REFRESH_PARALLEL at a time, before they are shown (the admin API, the RabbitMQ management API); a
 * failed ask leaves the last counts. Nothing to do on a single broker.
 */
export async function refreshQueueStats(handles: Iterable<QueueHandle | undefined>): Promise<void> {
  const todo = [...handles].filter((h): h is QueueHandle & { refresh(): Promise<void> } => h?.refresh !== undefined);
  for (let i = 0; i < todo.length; i += REFRESH_PARALLEL) {
    await Promise.all(todo.slice(i, i + REFRESH_PARALLEL).map((h) => h.refresh().catch(() => undefined)));
  }
}
