/**
 * The state of one AMQP channel (`AmqpChannelState`, the base of `AmqpChannel`) and what every part of it uses:
 * closing the channel on a soft error (`closeWith()`) and stopping it (`teardown()`: consumers cancelled, unacked
 * deliveries requeued), the authorization of each method against the connection's policies, and the queue or stream
 * a method names. The channel's parts are functions over it (channel.ts lists them).
 */
import type { Message, QueueConsumer, QueueHandle } from '../../core/index.js';
import { dotsToUnified, vhostStreamOfQueue, type StreamEntry } from '../../core/index.js';
import { routingKeyName, type Action, type ResourceKind } from '../../control/index.js';
import { logKey } from '../../util/log-limit.js';
import type { AmqpChannelHost } from './types.js';
import { AmqpError, replyText } from './errors.js';
import { TOPIC_EXCHANGE } from './properties.js';
import { ownExchange, ownKey } from './vhost.js';
import type { AmqpMethod, BasicProperties, MethodOf } from './wire.js';
import { StreamConsumer, type StreamSink } from './stream.js';
import { PartialBody } from './intake.js';
import type { ReplyConsumer } from './reply-registry.js';
import { partitionQueue, type SuperPartition } from './super-stream.js';

/** Class and method ids (amqp0-9-1.xml) of the methods a channel can fail on, for channel.close. */
export const IDS: Record<string, [number, number]> = {
  'channel.flow': [20, 20],
  'exchange.declare': [40, 10],
  'exchange.delete': [40, 20],
  'exchange.bind': [40, 30],
  'exchange.unbind': [40, 40],
  'queue.declare': [50, 10],
  'queue.bind': [50, 20],
  'queue.purge': [50, 30],
  'queue.delete': [50, 40],
  'queue.unbind': [50, 50],
  'basic.qos': [60, 10],
  'basic.consume': [60, 20],
  'basic.cancel': [60, 30],
  'basic.publish': [60, 40],
  'basic.get': [60, 70],
  'basic.ack': [60, 80],
  'basic.reject': [60, 90],
  'basic.recover-async': [60, 100],
  'basic.recover': [60, 110],
  'basic.nack': [60, 120],
  'confirm.select': [85, 10],
  'tx.select': [90, 10],
  'tx.commit': [90, 20],
  'tx.rollback': [90, 30],
};

export type Publish = MethodOf<'basic.publish'>;

/** A publish with its content, waiting its turn (or held by a transaction). */
export interface PublishItem {
  kind: 'publish';
  method: Publish;
  props: BasicProperties;
  body: Buffer;
}

export type Item = AmqpMethod | PublishItem;

/** What an unacked delivery is settled with: its queue, or (stream deliveries) nothing to do. */
export interface Settler {
  ack(id: number): Promise<void>;
  nack(id: number, requeue: boolean): Promise<void>;
}

/** An unacked delivery: what settles it, and the consumer whose count of unacked deliveries it is in. */
export interface Unacked {
  handle: Settler;
  id: number;
  /** null: a basic.get delivery. Else its AmqpConsumer (consume.ts) or StreamConsumer (stream.ts). */
  consumer: { unacked: number; readonly tag: string } | null;
  /** What was delivered: basic.recover with requeue=false sends it again to the same consumer. */
  msg: Message;
}

/** A queue consumer of the channel (AmqpConsumer, consume.ts) as the channel's state holds it. */
export interface ChannelConsumer extends QueueConsumer {
  readonly queue: QueueHandle;
  /** Refused a delivery for want of credit: resume it when credit returns. */
  waiting: boolean;
}

/** One outstanding publisher confirm (Confirm, publish.ts). state: 0 pending, 1 ack, 2 nack. */
export interface PendingConfirm {
  readonly seq: number;
  state: number;
}

/** The confirms of a channel that has none outstanding (shared: never written to, replaced by the first push). */
export const NO_CONFIRMS: PendingConfirm[] = [];

/** The state of one AMQP channel (see the file header); `AmqpChannel` (channel.ts) is its one subclass. */
export abstract class AmqpChannelState implements StreamSink {
  closing = false;

  // content assembly: 0 method expected, 1 content header, 2 body frames
  protected expect = 0;
  protected publishing: Publish | null = null;
  protected props: BasicProperties | null = null;
  protected bodySize = 0;
  /** A body spanning several body frames, while they arrive. */
  protected partial: PartialBody | null = null;

  // order
  protected busy = false;
  /** Items waiting behind an asynchronous method (null while there are none: see `owner` for why). */
  protected backlog: Item[] | null = null;

  // consumers. The collections are made when first needed: an idle channel is a few fields (issue 24: memory per
  // idle connection), and a content header alone must not cost a channel more than the bytes it carries.
  consumers: Map<string, ChannelConsumer> | null = null;
  streamConsumers: Map<string, StreamConsumer> | null = null;
  consumerPrefetch = 0;
  channelPrefetch = 0;
  deliveryTag = 0;
  unacked: Map<number, Unacked> | null = null;
  /** Queues this channel has had deliveries from: release(owner) on each at close and recover. */
  touched: Set<QueueHandle> | null = null;
  flowActive = true;
  /** The channel's direct reply-to consumer (direct-reply.ts), or null. */
  replyConsumer: ReplyConsumer | null = null;
  /** Last queue declared on the channel: the queue of methods naming none (§ queue.bind, basic.consume...). */
  lastQueue: string | null = null;

  // publishing
  confirm = false;
  publishSeq = 0;
  confirms: PendingConfirm[] = NO_CONFIRMS;
  confirmHead = 0;
  confirmFlushScheduled = false;
  tx = false;
  txPublishes: PublishItem[] | null = null;
  txSettles: Array<{ tag: number; u: Unacked; ack: boolean; requeue: boolean }> | null = null;
  private ownerName: string | null = null;

  constructor(
    readonly conn: AmqpChannelHost,
    readonly ch: number,
  ) {}

  /** Who holds this channel's unacked deliveries in the queues (`<connection id>/<channel>`). */
  get owner(): string {
    return (this.ownerName ??= `${this.conn.id}/${this.ch}`);
  }

  get router() {
    return this.conn.adapter.router;
  }

  // ------------------------------------------------------------------ frames in

  // ------------------------------------------------------------------ ordering

  /** A soft error: channel.close with the code; the channel's consumers and unacked deliveries go now. */
  closeWith(code: number, text: string, classId = 0, methodId = 0): void {
    if (this.closing) return;
    const a = this.conn.adapter;
    a.stats.channelErrors++;
    a.logLimit.log(
      'debug',
      logKey('amqp channel error', this.conn.remoteAddress),
      { conn: this.conn.id, channel: this.ch, code, err: text },
      'amqp: channel error',
    );
    this.conn.sendMethod(this.ch, { name: 'channel.close', replyCode: code, replyText: replyText(code, text), classId, methodId } as AmqpMethod);
    this.teardown();
  }

  /** Stops the channel: cancels its consumers and requeues its unacked deliveries. Idempotent. */
  teardown(): void {
    if (this.closing) return;
    this.closing = true;
    if (this.backlog !== null && this.backlog.length > 0) this.conn.backlogChanged(-this.backlog.length);
    this.backlog = null;
    if (this.consumers !== null) for (const c of this.consumers.values()) c.queue.cancel(c);
    this.consumers = null;
    if (this.streamConsumers !== null) for (const c of this.streamConsumers.values()) c.close();
    this.streamConsumers = null;
    if (this.replyConsumer !== null) this.conn.adapter.replies.remove(this.replyConsumer);
    this.replyConsumer = null;
    this.unacked = null;
    this.txPublishes = null;
    this.txSettles = null;
    this.confirms = NO_CONFIRMS;
    if (this.partial !== null) {
      const held = this.partial.held;
      this.partial = null;
      this.conn.bodyBytes(-held);
    }
    if (this.touched !== null) for (const h of this.touched) h.release(this.owner);
    this.touched = null;
  }

  // ------------------------------------------------------------------ authorization

  /**
   * Throws channel.close 403 ACCESS_REFUSED with RabbitMQ's text unless the connection's policies allow `action` on
   * the resource (free while nothing can be denied: `access.can` answers at once when the policies are open).
   */
  authorize(action: Action, kind: ResourceKind, internal: string, method: string): void {
    // Policies name things as the vhost's clients do (vhost.ts); a stream by its queue name or its own (`t1~orders`).
    const ns = this.conn.names;
    const name = ns.isDefault ? internal : kind === 'stream' ? (ns.ownStream(internal) ?? ownKey(ns, internal)) : ownKey(ns, internal);
    if (this.conn.access.can(action, kind, name)) return;
    const [classId, methodId] = IDS[method] ?? [0, 0];
    throw new AmqpError(403, `access to ${kind} '${name}' in vhost '${this.conn.vhost}' refused for user '${this.conn.loginName}'`, classId, methodId);
  }

  /** Whether RabbitMQ's topic permissions apply to the exchange: it is of type topic. */
  private topicExchange(exchange: string): boolean {
    return exchange === TOPIC_EXCHANGE || this.router.getExchange(exchange)?.type === 'topic';
  }

  private topicRefused(exchange: string, key: string, classId: number, methodId: number): AmqpError {
    return new AmqpError(
      403,
      `access to topic '${key}' in exchange '${exchange}' in vhost '${this.conn.vhost}' refused for user '${this.conn.loginName}'`,
      classId,
      methodId,
    );
  }

  /**
   * basic.publish to a topic exchange: RabbitMQ's topic permissions (the write regex of the user's topic permission
   * on that exchange, a deny policy of kind routing-key: src/control/rabbitmq/topic-permissions.ts) judge the routing
   * key; on amq.topic the key is also a topic of the unified space, which the topic policies judge.
   */
  authorizeTopicPublish(x: string, rk: string): void {
    const a = this.conn.access;
    const ns = this.conn.names;
    const exchange = ns.isDefault ? x : ownExchange(ns, x);
    const routingKey = ns.isDefault ? rk : ownKey(ns, rk);
    if (exchange === TOPIC_EXCHANGE && !a.can('publish', 'topic', dotsToUnified(routingKey))) throw this.topicRefused(exchange, routingKey, 60, 40);
    if (this.topicExchange(x) && a.refuses('publish', 'routing-key', routingKeyName(exchange, routingKey)))
      throw this.topicRefused(exchange, routingKey, 60, 40);
  }

  /**
   * queue.bind/unbind and exchange.bind/unbind from a topic exchange: the binding key against the read regex of the
   * user's topic permission on it (RabbitMQ checks both bind and unbind). A binding on amq.topic also subscribes its
   * destination to the unified topic space: the key, read as a filter, must not reach a denied topic. 'filter' (some
   * topics under it denied) is refused too: the queue is shared, so there is nobody to filter deliveries for.
   */
  authorizeTopicBinding(x: string, k: string, method: string, bind: boolean): void {
    const a = this.conn.access;
    if (a.open) return;
    const ns = this.conn.names;
    const exchange = ns.isDefault ? x : ownExchange(ns, x);
    const key = ns.isDefault ? k : ownKey(ns, k);
    const [classId, methodId] = IDS[method] ?? [0, 0];
    if (bind && exchange === TOPIC_EXCHANGE && a.subscription(bindingFilter(key)) !== 'allow') throw this.topicRefused(exchange, key, classId, methodId);
    if (this.topicExchange(x) && a.refuses('subscribe', 'routing-key', routingKeyName(exchange, key)))
      throw this.topicRefused(exchange, key, classId, methodId);
  }

  /**
   * Whether a consumer may still take deliveries from its queue or stream: checked again after every change of the
   * directory (a policy changed live) or of what feeds streams and queues (a binding to a denied topic added). A
   * refused consumer closes its channel with 403 (on the next turn: this runs inside the queue's dispatch) and gets
   * nothing more.
   */
  stillAllowed(c: { authVersion: number }, kind: ResourceKind, internal: string): boolean {
    const version = this.conn.adapter.access.version;
    if (c.authVersion === version) return true;
    if (c.authVersion === -2) return false;
    const ns = this.conn.names;
    const name = kind === 'stream' && !ns.isDefault ? (ns.ownStream(internal) ?? ownKey(ns, internal)) : ownKey(ns, internal);
    if (this.conn.access.can('subscribe', kind, name)) {
      c.authVersion = version;
      return true;
    }
    c.authVersion = -2;
    const text = `access to ${kind} '${name}' in vhost '${this.conn.vhost}' refused for user '${this.conn.loginName}'`;
    setImmediate(() => this.closeWith(403, text, 60, 20));
    return false;
  }

  // ------------------------------------------------------------------ methods

  // ------------------------------------------------------------------ publish

  // ------------------------------------------------------------------ consumers

  /** The queue a method names ('' : the channel's last declared queue), for authorization. */
  queueName(name: string): string {
    return name === '' ? (this.lastQueue ?? '') : name;
  }

  queueOf(name: string, what: string): QueueHandle {
    const q = name === '' ? this.lastQueue : name;
    if (q === null) throw new AmqpError(404, `no previously declared queue (${what} names none)`);
    const h = this.router.getQueue(q);
    if (h === undefined) throw new AmqpError(404, `no queue '${q}' in vhost '${this.conn.vhost}'`);
    const owner = h.def.exclusiveOwner;
    if (owner !== null && owner !== this.conn.id)
      throw new AmqpError(405, `cannot obtain exclusive access to locked queue '${q}' in vhost '${this.conn.vhost}'`);
    return h;
  }

  get engine() {
    return this.conn.adapter.ctx.engine;
  }

  /**
   * The stream a stream queue of this vhost is (core vhosts.ts): `orders` in `/`, `t1~orders` for `$ns/t1/orders`, the
   * namespace's stream that its Kafka clients call `orders`. Null: the name cannot be one of the vhost's streams.
   */
  streamName(queue: string): string | null {
    return vhostStreamOfQueue(this.conn.names, queue);
  }

  /** The stream behind an internal queue name of this vhost, whether or not a classic queue has the name. */
  streamEntry(queue: string): StreamEntry | undefined {
    const s = this.streamName(queue);
    return s === null ? undefined : this.engine.getAnyStream(s);
  }

  /** The stream behind a queue name, when it names no queue but a stream (x-queue-type stream): its stream name. */
  streamOf(name: string): string | null {
    const q = name === '' ? this.lastQueue : name;
    if (q === null || this.router.getQueue(q) !== undefined) return null;
    return this.streamEntry(q)?.def.name ?? null;
  }

  /**
   * The super-stream partition behind a queue name (`<stream>-<key>`, super-stream.ts), when it names no queue and no
   * stream of its own.
   */
  partitionOf(name: string): SuperPartition | null {
    const q = name === '' ? this.lastQueue : name;
    if (q === null || this.router.getQueue(q) !== undefined || this.streamEntry(q) !== undefined) return null;
    return partitionQueue(this, q);
  }

  // ------------------------------------------------------------------ exchanges and queues

  // ------------------------------------------------------------------ what channel.ts adds (StreamSink)

  abstract allows(c: StreamConsumer): boolean;
  abstract deliverStream(c: StreamConsumer, msg: Message, offset: number): void;
  abstract streamFailed(c: StreamConsumer, err: unknown): void;
}

/**
 * An amq.topic binding key as an MQTT filter of the unified topic space, for the policy check: levels split on `.`,
 * `*` → `+`, and a `#` ends the filter (AMQP allows `a.#.b`; `a/#` covers more, so the check is never weaker).
 */
export function bindingFilter(key: string): string {
  const out: string[] = [];
  for (const level of dotsToUnified(key).split('/')) {
    if (level === '#') {
      out.push('#');
      break;
    }
    out.push(level === '*' ? '+' : level);
  }
  return out.join('/');
}
