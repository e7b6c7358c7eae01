/**
 * One AMQP channel: publishes (content assembly, mandatory returns, publisher confirms, transactions),
 * declarations through the core's Router, and consumers of queues (deliveries, acks, prefetch, recover).
 *
 * Order: methods of a channel take effect in the order they arrived (§4.2.1 / 2.3.5). Synchronous ones (publish,
 * ack, consume, qos...) run at once; asynchronous ones (declare, bind, delete, purge, get, commit) hold the channel:
 * what arrives meanwhile waits in a backlog (bounded per connection, see connection.ts) and runs when they finish.
 *
 * Errors: an AmqpError or FlowError with a soft code closes this channel with channel.close (the client answers
 * close-ok; until then everything else on the channel is ignored, §2.2.4 / 1.5.2.3); a hard code closes the
 * connection.
 *
 * Consumers (QueueConsumer): a delivery takes a delivery tag (per channel, from 1) mapped to its (queue, id) until
 * acked. Credit: prefetch per consumer (basic.qos global=false, for consumers created after it) and per channel
 * (global=true), as RabbitMQ 3.3+ reads the flag; a socket holding more than socketHighWater unsent bytes stops
 * every consumer of the connection until it drains; channel.flow active=false stops them too. basic.recover and
 * the channel's close requeue its unacked deliveries (QueueHandle.release), which come back with redelivered=true.
 *
 * Publisher confirms (confirm.select): every publish takes the next sequence number; it is acked once
 * RouteResult.durable resolves (at once when nothing needed storing: unroutable, transient only), nacked when it
 * rejects or the queue refused it (x-overflow reject-publish). Confirms leave strictly in sequence order, and a run
 * of equal outcomes settled together leaves as one basic.ack/nack with multiple=true.
 *
 * Transactions (tx.select): publishes, acks and rejects are held until tx.commit, which routes / settles them in
 * order and answers commit-ok once all are durable; tx.rollback drops the publishes and puts the acks back.
 *
 * Authorization: every method is checked against the connection's policies before it acts (see `authorize`):
 * exchange.declare → create exchange (passive: describe), exchange.delete → delete exchange, exchange.bind /
 * unbind → subscribe on the source and alter on the destination exchange; queue.declare → create queue (passive:
 * describe; server-named exclusive queues need nothing: nobody else can reach them), queue.delete and queue.purge →
 * delete queue, queue.bind / unbind → alter queue + subscribe exchange; basic.publish → publish exchange (the
 * default exchange: publish queue:<routing key>; amq.topic also publish topic:<the key as a unified topic>);
 * basic.consume / basic.get → subscribe queue. Stream queues are `stream:` resources. A binding on amq.topic is a
 * subscription to the unified topic space: its key, as a filter, must not reach a denied topic (refused, not
 * filtered: a queue is shared by its consumers). A refusal is channel.close 403 ACCESS_REFUSED with RabbitMQ's
 * text; the connection stays. A policy changed live applies to the next method, and to open consumers at their
 * next delivery: a consumer no longer allowed on its queue closes its channel with 403 instead of taking it.
 */
import { randomBytes } from 'node:crypto';
import type { ExchangeType, Message, QueueArguments, QueueConsumer, QueueDelivery, QueueHandle, RouteResult } from '../../core/index.js';
import { dotsToUnified, isFlowError } from '../../core/index.js';
import type { Action, ResourceKind } from '../../control/index.js';
import { logKey } from '../../util/log-limit.js';
import { storageRefusal } from '../storage-refusal.js';
import type { AmqpChannelHost } from './types.js';
import { AmqpError, replyText, toAmqpError } from './errors.js';
import { TOPIC_EXCHANGE, messageOfPublish, propertiesOf, swapSeparators, tableToJson } from './properties.js';
import { AmqpCodecError, decodeHeaderPayload, messageFrames, type AmqpMethod, type BasicProperties, type MethodOf } from './wire.js';
import { Typed, decodeTable, fieldBoolean, fieldInteger, fieldString, type FieldTable } from './codec/index.js';
import { StreamConsumer, type StreamSink } from './stream.js';
import { PartialBody } from './intake.js';
import { encodeBatch, messageToRecord } from '../../core/index.js';

/** Class and method ids (amqp0-9-1.xml) of the methods a channel can fail on, for channel.close. */
const IDS: Record<string, [number, number]> = {
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

const EXCHANGE_TYPES: ReadonlySet<string> = new Set(['direct', 'fanout', 'topic', 'headers']);
const OVERFLOWS: ReadonlySet<string> = new Set(['drop-head', 'reject-publish', 'reject-publish-dlx']);

type Publish = MethodOf<'basic.publish'>;

/** A publish with its content, waiting its turn (or held by a transaction). */
interface PublishItem {
  kind: 'publish';
  method: Publish;
  props: BasicProperties;
  body: Buffer;
}

type Item = AmqpMethod | PublishItem;

/** What an unacked delivery is settled with: its queue, or (stream deliveries) nothing to do. */
interface Settler {
  ack(id: number): Promise<void>;
  nack(id: number, requeue: boolean): Promise<void>;
}

/** The confirms of a channel that has none outstanding (shared: never written to, replaced by the first push). */
const NO_CONFIRMS: Confirm[] = [];

/** Stream deliveries: an ack only opens the consumer's window (reading a stream does not consume it). */
const STREAM_SETTLER: Settler = {
  ack: () => Promise.resolve(),
  nack: () => Promise.resolve(),
};

interface Unacked {
  handle: Settler;
  id: number;
  /** null: a basic.get delivery. */
  consumer: AmqpConsumer | StreamConsumer | null;
}

/** One outstanding publisher confirm. state: 0 pending, 1 ack, 2 nack. */
class Confirm {
  state = 0;
  constructor(
    readonly seq: number,
    private readonly channel: AmqpChannel,
  ) {}
  readonly ok = (): void => {
    this.state = 1;
    this.channel.conn.writeSettled();
    this.channel.confirmSettled();
  };
  readonly fail = (err: unknown): void => {
    this.state = 2;
    this.channel.conn.writeSettled();
    this.channel.writeFailed(err);
    this.channel.confirmSettled();
  };
}

export class AmqpConsumer implements QueueConsumer {
  /** Deliveries to this consumer not acked yet. */
  unacked = 0;
  /** Set once consume-ok went out: no delivery may overtake it. */
  ready = false;
  /** Directory version its `subscribe queue:` was last allowed at (-2: refused, its channel is closing). */
  authVersion = -1;
  /** Refused a delivery for want of credit: resume it when credit returns. */
  waiting = false;
  constructor(
    private readonly channel: AmqpChannel,
    readonly tag: string,
    readonly owner: string,
    readonly noAck: boolean,
    readonly priority: number,
    readonly queue: QueueHandle,
    /** basic.qos global=false in force when the consumer was created; 0: unlimited. */
    readonly prefetch: number,
  ) {}
  hasCredit(): boolean {
    return this.channel.credit(this);
  }
  deliver(d: QueueDelivery): void {
    this.channel.deliver(this, d);
  }
  cancelled(reason: string): void {
    this.channel.serverCancel(this, reason);
  }
}

function randomName(prefix: string): string {
  return prefix + randomBytes(16).toString('base64url');
}

export class AmqpChannel implements StreamSink {
  private closing = false;

  // content assembly: 0 method expected, 1 content header, 2 body frames
  private expect = 0;
  private publishing: Publish | null = null;
  private props: BasicProperties | null = null;
  private bodySize = 0;
  /** A body spanning several body frames, while they arrive. */
  private partial: PartialBody | null = null;

  // order
  private busy = false;
  /** Items waiting behind an asynchronous method (null while there are none: see `owner` for why). */
  private backlog: Item[] | null = null;

  // consumers. The collections are made when first needed: an idle channel is a few fields (issue 24: memory per
  // idle connection), and a content header alone must not cost a channel more than the bytes it carries.
  private consumers: Map<string, AmqpConsumer> | null = null;
  private streamConsumers: Map<string, StreamConsumer> | null = null;
  private consumerPrefetch = 0;
  private channelPrefetch = 0;
  private deliveryTag = 0;
  private unacked: Map<number, Unacked> | null = null;
  /** Queues this channel has had deliveries from: release(owner) on each at close and recover. */
  private touched: Set<QueueHandle> | null = null;
  private flowActive = true;
  /** Last queue declared on the channel: the queue of methods naming none (§ queue.bind, basic.consume...). */
  private lastQueue: string | null = null;

  // publishing
  private confirm = false;
  private publishSeq = 0;
  private confirms: Confirm[] = NO_CONFIRMS;
  private confirmHead = 0;
  private confirmFlushScheduled = false;
  private tx = false;
  private txPublishes: PublishItem[] | null = null;
  private txSettles: Array<{ tag: number; u: Unacked; ack: boolean; requeue: boolean }> | null = null;
  private ownerName: string | null = null;

  constructor(
    readonly conn: AmqpChannelHost,
    readonly ch: number,
  ) {}

  /** Who holds this channel's unacked deliveries in the queues (`<connection id>/<channel>`). */
  get owner(): string {
    return (this.ownerName ??= `${this.conn.id}/${this.ch}`);
  }

  private get router() {
    return this.conn.adapter.router;
  }

  // ------------------------------------------------------------------ frames in

  onMethod(m: AmqpMethod): void {
    if (this.closing) {
      // Waiting for close-ok: everything else is dropped (§1.5.2.3: channel.close).
      if (m.name === 'channel.close-ok') this.conn.channelGone(this.ch);
      else if (m.name === 'channel.close') {
        this.conn.sendMethod(this.ch, { name: 'channel.close-ok' } as AmqpMethod);
        this.conn.channelGone(this.ch);
      }
      return;
    }
    if (this.expect !== 0) throw new AmqpError(505, `expected a content ${this.expect === 1 ? 'header' : 'body'} frame on channel ${this.ch}, got method ${m.name}`);
    switch (m.name) {
      case 'basic.publish':
        this.publishing = m;
        this.expect = 1;
        return;
      case 'channel.close':
        this.teardown();
        this.conn.sendMethod(this.ch, { name: 'channel.close-ok' } as AmqpMethod);
        this.conn.channelGone(this.ch);
        return;
      case 'channel.close-ok':
        return;
      default:
        this.enqueue(m);
    }
  }

  onHeader(payload: Buffer): void {
    if (this.closing) return;
    if (this.expect !== 1) throw new AmqpError(505, `content header frame on channel ${this.ch} without basic.publish`);
    const h = decodeHeaderPayload(payload);
    if (h.classId !== 60) throw new AmqpError(505, `content header of class ${h.classId}, expected 60 (basic)`);
    const max = this.conn.adapter.options.maxMessageSize;
    if (h.bodySize > max) {
      this.expect = 0;
      this.publishing = null;
      this.closeWith(406, `message size ${h.bodySize} is larger than configured max size ${max}`, 60, 40);
      return;
    }
    this.props = h.properties;
    this.bodySize = h.bodySize;
    if (h.bodySize === 0) this.completePublish(Buffer.alloc(0));
    else this.expect = 2;
  }

  onBody(payload: Buffer, owned: boolean): void {
    if (this.closing) return;
    if (this.expect !== 2) throw new AmqpError(505, `content body frame on channel ${this.ch} without a content header`);
    const n = payload.length;
    let p = this.partial;
    if (p === null) {
      if (n > this.bodySize) throw new AmqpError(501, `content body frames exceed the body size ${this.bodySize}`);
      if (n === this.bodySize) {
        // One frame holds the whole body: keep the frame's own buffer, or copy from a shared read buffer.
        this.completePublish(owned ? payload : Buffer.from(payload));
        return;
      }
      // Memory follows the bytes that arrive, never the size the header announced (see intake.ts).
      p = this.partial = new PartialBody(this.bodySize);
    } else if (p.have + n > p.size) {
      throw new AmqpError(501, `content body frames exceed the body size ${p.size}`);
    }
    const grew = p.add(payload, owned);
    if (!p.complete) {
      // Counted against the connection's and the broker's limits (which may close the connection or stop reading it).
      this.conn.bodyBytes(grew);
      return;
    }
    this.partial = null;
    this.conn.bodyBytes(grew - p.held);
    this.completePublish(p.body());
  }

  private completePublish(body: Buffer): void {
    const item: PublishItem = { kind: 'publish', method: this.publishing!, props: this.props!, body };
    this.expect = 0;
    this.publishing = null;
    this.props = null;
    this.enqueue(item);
  }

  // ------------------------------------------------------------------ ordering

  private enqueue(item: Item): void {
    if (this.busy) {
      (this.backlog ??= []).push(item);
      this.conn.backlogChanged(1);
      return;
    }
    this.run(item);
  }

  private run(item: Item): void {
    let r: Promise<void> | void;
    try {
      r = 'kind' in item ? this.publish(item) : this.exec(item);
    } catch (err) {
      this.fail(err, item);
      return;
    }
    if (r !== undefined) {
      this.busy = true;
      r.then(
        () => this.next(),
        (err: unknown) => {
          this.fail(err, item);
          this.next();
        },
      );
    }
  }

  private next(): void {
    this.busy = false;
    while (!this.busy && this.backlog !== null && this.backlog.length > 0 && !this.closing) {
      const item = this.backlog.shift()!;
      this.conn.backlogChanged(-1);
      this.run(item);
    }
  }

  private fail(err: unknown, item: Item): void {
    if (this.closing) return;
    const name = 'kind' in item ? 'basic.publish' : item.name;
    const [classId, methodId] = IDS[name] ?? [0, 0];
    const e = err instanceof AmqpCodecError ? new AmqpError(err.replyCode, err.message, err.classId, err.methodId) : toAmqpError(err, classId, methodId);
    if (e.hard) {
      this.conn.protocolError(e);
      return;
    }
    this.closeWith(e.code, e.message, e.classId || classId, e.methodId || methodId);
  }

  /** A soft error: channel.close with the code; the channel's consumers and unacked deliveries go now. */
  closeWith(code: number, text: string, classId = 0, methodId = 0): void {
    if (this.closing) return;
    const a = this.conn.adapter;
    a.stats.channelErrors++;
    a.logLimit.log('debug', logKey('amqp channel error', this.conn.remoteAddress), { conn: this.conn.id, channel: this.ch, code, err: text }, 'amqp: channel error');
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
  private authorize(action: Action, kind: ResourceKind, name: string, method: string): void {
    if (this.conn.access.can(action, kind, name)) return;
    const [classId, methodId] = IDS[method] ?? [0, 0];
    throw new AmqpError(403, `access to ${kind} '${name}' in vhost '${this.conn.vhost}' refused for user '${this.conn.loginName}'`, classId, methodId);
  }

  /** basic.publish to amq.topic: the routing key is a topic of the unified space (RabbitMQ's topic permissions). */
  private authorizeTopicPublish(routingKey: string): void {
    if (this.conn.access.can('publish', 'topic', dotsToUnified(routingKey))) return;
    throw new AmqpError(403, `access to topic '${routingKey}' in exchange '${TOPIC_EXCHANGE}' in vhost '${this.conn.vhost}' refused for user '${this.conn.loginName}'`, 60, 40);
  }

  /**
   * A binding on amq.topic subscribes its destination to the unified topic space: the key, read as a filter, must
   * not reach a denied topic. 'filter' (some topics under it denied) is refused too: the queue is shared, so there
   * is nobody to filter deliveries for.
   */
  private authorizeTopicBinding(key: string, method: string): void {
    const a = this.conn.access;
    if (a.open) return;
    if (a.subscription(bindingFilter(key)) === 'allow') return;
    const [classId, methodId] = IDS[method] ?? [0, 0];
    throw new AmqpError(403, `access to topic '${key}' in exchange '${TOPIC_EXCHANGE}' in vhost '${this.conn.vhost}' refused for user '${this.conn.loginName}'`, classId, methodId);
  }

  /**
   * Whether a consumer may still take deliveries from its queue or stream: checked again after every change of the
   * directory (a policy changed live) or of what feeds streams and queues (a binding to a denied topic added). A
   * refused consumer closes its channel with 403 (on the next turn: this runs inside the queue's dispatch) and gets
   * nothing more.
   */
  private stillAllowed(c: { authVersion: number }, kind: ResourceKind, name: string): boolean {
    const version = this.conn.adapter.access.version;
    if (c.authVersion === version) return true;
    if (c.authVersion === -2) return false;
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

  private exec(m: AmqpMethod): Promise<void> | void {
    switch (m.name) {
      case 'channel.flow':
        this.flowActive = m.active;
        this.conn.sendMethod(this.ch, { name: 'channel.flow-ok', active: m.active } as AmqpMethod);
        if (m.active) this.resumeConsumers();
        return;
      case 'channel.flow-ok':
        return;
      case 'exchange.declare':
        return this.exchangeDeclare(m);
      case 'exchange.delete':
        return this.exchangeDelete(m);
      case 'exchange.bind':
      case 'exchange.unbind':
        return this.exchangeBind(m);
      case 'queue.declare':
        return this.queueDeclare(m);
      case 'queue.bind':
      case 'queue.unbind':
        return this.queueBind(m);
      case 'queue.purge':
        return this.queuePurge(m);
      case 'queue.delete':
        return this.queueDelete(m);
      case 'basic.qos':
        return this.qos(m);
      case 'basic.consume':
        return this.consume(m);
      case 'basic.cancel': {
        const c = this.consumers?.get(m.consumerTag);
        if (c !== undefined) {
          this.consumers!.delete(m.consumerTag);
          c.queue.cancel(c);
        }
        const sc = this.streamConsumers?.get(m.consumerTag);
        if (sc !== undefined) {
          this.streamConsumers!.delete(m.consumerTag);
          sc.close();
        }
        if (!m.noWait) this.conn.sendMethod(this.ch, { name: 'basic.cancel-ok', consumerTag: m.consumerTag } as AmqpMethod);
        return;
      }
      case 'basic.get':
        return this.get(m);
      case 'basic.ack':
        this.settle(m.deliveryTag, m.multiple, true, false);
        return;
      case 'basic.nack':
        this.settle(m.deliveryTag, m.multiple, false, m.requeue);
        return;
      case 'basic.reject':
        this.settle(m.deliveryTag, false, false, m.requeue);
        return;
      case 'basic.recover':
      case 'basic.recover-async':
        this.recover();
        if (m.name === 'basic.recover') this.conn.sendMethod(this.ch, { name: 'basic.recover-ok' } as AmqpMethod);
        return;
      case 'confirm.select':
        if (this.tx) throw new AmqpError(406, 'cannot switch from tx to confirm mode', 85, 10);
        this.confirm = true;
        if (!m.noWait) this.conn.sendMethod(this.ch, { name: 'confirm.select-ok' } as AmqpMethod);
        return;
      case 'tx.select':
        if (this.confirm) throw new AmqpError(406, 'cannot switch from confirm to tx mode', 90, 10);
        this.tx = true;
        this.conn.sendMethod(this.ch, { name: 'tx.select-ok' } as AmqpMethod);
        return;
      case 'tx.commit':
        if (!this.tx) throw new AmqpError(406, 'channel is not transactional', 90, 20);
        return this.commit();
      case 'tx.rollback':
        if (!this.tx) throw new AmqpError(406, 'channel is not transactional', 90, 30);
        this.rollback();
        this.conn.sendMethod(this.ch, { name: 'tx.rollback-ok' } as AmqpMethod);
        return;
      default:
        throw new AmqpError(540, `${m.name} is not a method a client sends on a channel`);
    }
  }

  // ------------------------------------------------------------------ publish

  private publish(item: PublishItem): void {
    this.conn.published();
    const m = item.method;
    if (m.immediate) throw new AmqpError(540, 'immediate=true', 60, 40);
    if (!this.conn.access.open) {
      if (m.exchange === '') {
        const stream = this.router.getQueue(m.routingKey) === undefined && this.engine.getStream(m.routingKey) !== undefined;
        this.authorize('publish', stream ? 'stream' : 'queue', m.routingKey, 'basic.publish');
      } else {
        this.authorize('publish', 'exchange', m.exchange, 'basic.publish');
        if (m.exchange === TOPIC_EXCHANGE) this.authorizeTopicPublish(m.routingKey);
      }
    }
    this.conn.chargeIn(item.body.length);
    if (this.tx) {
      // Checked now (a missing exchange fails the publish, not the commit), routed at commit.
      if (this.router.getExchange(m.exchange) === undefined) throw new AmqpError(404, `no exchange '${m.exchange}' in vhost '${this.conn.vhost}'`, 60, 40);
      (this.txPublishes ??= []).push(item);
      return;
    }
    this.route(item);
  }

  private route(item: PublishItem): RouteResult {
    const m = item.method;
    const msg = messageOfPublish({ exchange: m.exchange, routingKey: m.routingKey, props: item.props, body: item.body, origin: this.conn.id, user: this.conn.user }, Date.now());
    let r: RouteResult;
    try {
      if (m.exchange === '' && this.router.getQueue(m.routingKey) === undefined && this.engine.getStream(m.routingKey) !== undefined) {
        // The default exchange reaches a stream queue by its name too.
        msg.exchange = '';
        msg.routingKey = m.routingKey;
        const own = this.engine.getStream(m.routingKey)!.ownTopic;
        r = { routed: 1, durable: this.engine.produce(m.routingKey, 0, encodeBatch([messageToRecord(msg, own)])).durable, rejected: false };
      } else r = this.router.publishTo(m.exchange, m.routingKey, msg);
    } catch (err) {
      if (storageRefusal(err) !== null) {
        // Refused at once (the free-space reserve, a partition backing off): as a failed write, a nack.
        const failed = Promise.reject(err);
        failed.catch(() => undefined);
        r = { routed: 1, durable: failed, rejected: false };
        return this.afterRoute(item, r);
      }
      if (isFlowError(err, 'NOT_FOUND')) throw new AmqpError(404, `no exchange '${m.exchange}' in vhost '${this.conn.vhost}'`, 60, 40);
      if (isFlowError(err, 'ACCESS_REFUSED')) throw new AmqpError(403, (err as Error).message, 60, 40);
      throw err;
    }
    return this.afterRoute(item, r);
  }

  private afterRoute(item: PublishItem, r: RouteResult): RouteResult {
    const m = item.method;
    this.conn.adapter.stats.published++;
    if (r.routed === 0 && m.mandatory) {
      this.conn.adapter.stats.returned++;
      this.conn.send(messageFrames(this.ch, { name: 'basic.return', replyCode: 312, replyText: 'NO_ROUTE', exchange: m.exchange, routingKey: m.routingKey } as AmqpMethod, item.props, item.body, this.conn.frameMax));
    }
    if (this.confirm) {
      const c = new Confirm(++this.publishSeq, this);
      if (this.confirms === NO_CONFIRMS) this.confirms = [];
      this.confirms.push(c);
      if (r.rejected) c.state = 2;
      else if (r.durable === null) c.state = 1;
      else {
        this.conn.writeStarted(item.body.length);
        r.durable.then(c.ok, c.fail);
      }
      if (c.state !== 0) this.confirmSettled();
    } else if (r.durable !== null) {
      this.conn.writeStarted(item.body.length);
      const w = this.conn.onWrite;
      r.durable.then(w.settled, w.failed);
    }
    if (r.written !== undefined) {
      // A transient message a durable queue keeps in its store: nobody waits for it, but it takes the store's time
      // like a persistent one, so it takes the connection's credit too.
      this.conn.writeStarted(item.body.length);
      const w = this.conn.onWrite;
      r.written.then(w.settled, w.failed);
    }
    return r;
  }

  /** A publish's write failed: a full disk raises the adapter's alarm; the rest is logged. */
  writeFailed(err: unknown): void {
    this.conn.adapter.storeWriteFailed(err);
  }

  confirmSettled(): void {
    if (this.confirmFlushScheduled) return;
    this.confirmFlushScheduled = true;
    setImmediate(() => this.flushConfirms());
  }

  /** Sends the settled confirms at the head, in order, one frame per run of equal outcomes. */
  private flushConfirms(): void {
    this.confirmFlushScheduled = false;
    if (this.closing) return;
    const q = this.confirms;
    let i = this.confirmHead;
    const stats = this.conn.adapter.stats;
    while (i < q.length && q[i]!.state !== 0) {
      const state = q[i]!.state;
      let j = i;
      while (j + 1 < q.length && q[j + 1]!.state === state) j++;
      const tag = q[j]!.seq;
      const multiple = j > i;
      if (state === 1) {
        stats.confirmsAcked += j - i + 1;
        this.conn.sendMethod(this.ch, { name: 'basic.ack', deliveryTag: tag, multiple } as AmqpMethod);
      } else {
        stats.confirmsNacked += j - i + 1;
        this.conn.sendMethod(this.ch, { name: 'basic.nack', deliveryTag: tag, multiple, requeue: false } as AmqpMethod);
      }
      i = j + 1;
    }
    if (i >= q.length) {
      this.confirms = NO_CONFIRMS;
      this.confirmHead = 0;
    } else if (i > 1024 && i > q.length / 2) {
      this.confirms = q.slice(i);
      this.confirmHead = 0;
    } else {
      this.confirmHead = i;
    }
  }

  private async commit(): Promise<void> {
    const pubs = this.txPublishes ?? [];
    const settles = this.txSettles ?? [];
    this.txPublishes = null;
    this.txSettles = null;
    const waits: Promise<void>[] = [];
    for (const p of pubs) {
      const r = this.route(p);
      if (r.durable !== null) waits.push(r.durable);
    }
    for (const s of settles) waits.push(s.ack ? s.u.handle.ack(s.u.id) : s.u.handle.nack(s.u.id, s.requeue));
    try {
      await Promise.all(waits);
    } catch (err) {
      this.writeFailed(err);
      throw new AmqpError(406, `tx.commit failed: ${err instanceof Error ? err.message : String(err)}`, 90, 20);
    }
    if (!this.closing) this.conn.sendMethod(this.ch, { name: 'tx.commit-ok' } as AmqpMethod);
  }

  private rollback(): void {
    this.txPublishes = null;
    if (this.txSettles === null || this.txSettles.length === 0) return;
    // The acks and rejects held by the transaction are undone: the deliveries are unacked again, in tag order.
    const all = new Map<number, Unacked>();
    const back = this.txSettles.sort((a, b) => a.tag - b.tag);
    this.txSettles = null;
    let k = 0;
    for (const [tag, u] of this.unacked ?? []) {
      while (k < back.length && back[k]!.tag < tag) {
        all.set(back[k]!.tag, back[k]!.u);
        k++;
      }
      all.set(tag, u);
    }
    for (; k < back.length; k++) all.set(back[k]!.tag, back[k]!.u);
    for (const s of back) if (s.u.consumer) s.u.consumer.unacked++;
    this.unacked = all;
  }

  // ------------------------------------------------------------------ consumers

  /** QueueConsumer.hasCredit of `c`. */
  credit(c: AmqpConsumer): boolean {
    if (!c.ready || this.closing || !this.flowActive) return false;
    if (!this.stillAllowed(c, 'queue', c.queue.def.name)) return false;
    if (this.conn.sendsHeld) {
      c.waiting = true;
      return false;
    }
    if (this.conn.congested) {
      this.conn.starved = true;
      c.waiting = true;
      return false;
    }
    if (c.noAck) return true;
    if ((c.prefetch > 0 && c.unacked >= c.prefetch) || (this.channelPrefetch > 0 && (this.unacked?.size ?? 0) >= this.channelPrefetch)) {
      c.waiting = true;
      return false;
    }
    return true;
  }

  /** Gives consumers that were refused a delivery their turn again (credit returned). */
  resumeConsumers(): void {
    if (this.closing) return;
    if (this.consumers !== null) {
      for (const c of this.consumers.values()) {
        if (!c.waiting) continue;
        c.waiting = false;
        c.queue.resume(c);
      }
    }
    if (this.streamConsumers !== null) for (const c of this.streamConsumers.values()) c.pump();
  }

  deliver(c: AmqpConsumer, d: QueueDelivery): void {
    const tag = ++this.deliveryTag;
    if (!c.noAck) {
      (this.unacked ??= new Map()).set(tag, { handle: c.queue, id: d.id, consumer: c });
      c.unacked++;
    }
    this.conn.adapter.stats.delivered++;
    this.conn.chargeOut(d.msg.payload.length);
    this.sendContent('basic.deliver', { consumerTag: c.tag, deliveryTag: tag, redelivered: d.redelivered }, d.msg);
  }

  private sendContent(name: 'basic.deliver' | 'basic.get-ok', fields: Record<string, unknown>, msg: Message): void {
    const exchange = msg.exchange ?? TOPIC_EXCHANGE;
    const routingKey = msg.routingKey ?? swapSeparators(msg.topic);
    // Method, content header and body frames in one buffer: one allocation and one write per delivery.
    this.conn.send(messageFrames(this.ch, { name, ...fields, exchange, routingKey } as unknown as AmqpMethod, propertiesOf(msg, Date.now()), msg.payload, this.conn.frameMax));
  }

  /** The queue went away: basic.cancel to clients that understand it (consumer_cancel_notify). */
  serverCancel(c: AmqpConsumer, _reason: string): void {
    if (this.consumers?.get(c.tag) !== c) return;
    this.consumers!.delete(c.tag);
    if (!this.closing && this.conn.capabilities.cancelNotify) {
      this.conn.sendMethod(this.ch, { name: 'basic.cancel', consumerTag: c.tag, noWait: true } as AmqpMethod);
    }
  }

  /** The queue a method names ('' : the channel's last declared queue), for authorization. */
  private queueName(name: string): string {
    return name === '' ? (this.lastQueue ?? '') : name;
  }

  private queueOf(name: string, what: string): QueueHandle {
    const q = name === '' ? this.lastQueue : name;
    if (q === null) throw new AmqpError(404, `no previously declared queue (${what} names none)`);
    const h = this.router.getQueue(q);
    if (h === undefined) throw new AmqpError(404, `no queue '${q}' in vhost '${this.conn.vhost}'`);
    const owner = h.def.exclusiveOwner;
    if (owner !== null && owner !== this.conn.id) throw new AmqpError(405, `cannot obtain exclusive access to locked queue '${q}' in vhost '${this.conn.vhost}'`);
    return h;
  }

  private get engine() {
    return this.conn.adapter.ctx.engine;
  }

  /** The stream behind a queue name, when it names no queue but a stream (x-queue-type stream). */
  private streamOf(name: string): string | null {
    const q = name === '' ? this.lastQueue : name;
    if (q === null || this.router.getQueue(q) !== undefined) return null;
    return this.engine.getStream(q) !== undefined ? q : null;
  }

  private async consumeStream(m: MethodOf<'basic.consume'>, stream: string): Promise<void> {
    const tag = m.consumerTag === '' ? randomName('amq.ctag-') : m.consumerTag;
    if (this.tagTaken(tag)) throw new AmqpError(530, `attempt to reuse consumer tag '${tag}'`, 60, 20);
    const args = (m.arguments ?? {}) as FieldTable;
    const c = new StreamConsumer(this.engine, this, tag, stream, m.noAck, this.consumerPrefetch, args['x-stream-offset']);
    await c.begin();
    if (this.closing) return;
    (this.streamConsumers ??= new Map()).set(tag, c);
    if (!m.noWait) this.conn.sendMethod(this.ch, { name: 'basic.consume-ok', consumerTag: tag } as AmqpMethod);
    c.pump();
  }

  /** StreamSink.allows: a stream consumer reads on while its channel may deliver (quota, policies). */
  allows(c: StreamConsumer): boolean {
    if (this.closing || this.conn.sendsHeld) return false;
    if (this.conn.congested) {
      // As a queue consumer's credit: the socket's unsent bytes stop it (a no-ack stream consumer has no window).
      this.conn.starved = true;
      return false;
    }
    return this.stillAllowed(c, 'stream', c.stream);
  }

  deliverStream(c: StreamConsumer, msg: Message, offset: number): void {
    if (this.closing || this.streamConsumers?.get(c.tag) !== c) return;
    this.conn.chargeOut(msg.payload.length);
    const tag = ++this.deliveryTag;
    if (!c.noAck) {
      (this.unacked ??= new Map()).set(tag, { handle: STREAM_SETTLER, id: offset, consumer: c });
      c.unacked++;
    }
    this.conn.adapter.stats.delivered++;
    // RabbitMQ tells stream consumers each message's offset in the x-stream-offset header.
    const props = propertiesOf(msg, Date.now());
    const headers = props.headers ?? (props.rawHeaders !== undefined ? decodeTable(props.rawHeaders) : {});
    headers['x-stream-offset'] = new Typed('l', BigInt(offset));
    props.headers = headers;
    delete props.rawHeaders;
    const exchange = msg.exchange ?? '';
    const routingKey = msg.routingKey ?? c.stream;
    this.conn.send(messageFrames(this.ch, { name: 'basic.deliver', consumerTag: c.tag, deliveryTag: tag, redelivered: false, exchange, routingKey } as AmqpMethod, props, msg.payload, this.conn.frameMax));
  }

  streamFailed(c: StreamConsumer, err: unknown): void {
    if (this.streamConsumers?.get(c.tag) !== c) return;
    this.streamConsumers!.delete(c.tag);
    c.close();
    this.conn.log.debug({ err, stream: c.stream }, 'amqp: stream consumer stopped');
    if (!this.closing && this.conn.capabilities.cancelNotify) {
      this.conn.sendMethod(this.ch, { name: 'basic.cancel', consumerTag: c.tag, noWait: true } as AmqpMethod);
    }
  }

  private tagTaken(tag: string): boolean {
    return this.consumers?.has(tag) === true || this.streamConsumers?.has(tag) === true;
  }

  private consume(m: MethodOf<'basic.consume'>): void | Promise<void> {
    const stream = this.streamOf(m.queue);
    if (stream !== null) {
      this.authorize('subscribe', 'stream', stream, 'basic.consume');
      return this.consumeStream(m, stream);
    }
    this.authorize('subscribe', 'queue', this.queueName(m.queue), 'basic.consume');
    const h = this.queueOf(m.queue, 'basic.consume');
    const tag = m.consumerTag === '' ? randomName('amq.ctag-') : m.consumerTag;
    if (this.tagTaken(tag)) throw new AmqpError(530, `attempt to reuse consumer tag '${tag}'`, 60, 20);
    const args = (m.arguments ?? {}) as FieldTable;
    const pv = args['x-priority'];
    const priority = pv === undefined ? 0 : fieldInteger(pv);
    if (priority === undefined) throw new AmqpError(406, "invalid arg 'x-priority': expected an integer", 60, 20);
    const c = new AmqpConsumer(this, tag, this.owner, m.noAck, priority, h, this.consumerPrefetch);
    c.authVersion = this.conn.adapter.access.version;
    try {
      h.consume(c, { exclusive: m.exclusive });
    } catch (err) {
      if (isFlowError(err, 'RESOURCE_LOCKED')) throw new AmqpError(403, `queue '${h.def.name}' in vhost '${this.conn.vhost}' in exclusive use`, 60, 20);
      throw err;
    }
    (this.consumers ??= new Map()).set(tag, c);
    (this.touched ??= new Set()).add(h);
    if (!m.noWait) this.conn.sendMethod(this.ch, { name: 'basic.consume-ok', consumerTag: tag } as AmqpMethod);
    // Deliveries only after consume-ok (a client must know the tag before its first delivery).
    c.ready = true;
    h.resume(c);
  }

  private async get(m: MethodOf<'basic.get'>): Promise<void> {
    this.authorize('subscribe', 'queue', this.queueName(m.queue), 'basic.get');
    const h = this.queueOf(m.queue, 'basic.get');
    (this.touched ??= new Set()).add(h);
    // A basic.get answer counts against the socket's allowance as deliveries do: none is taken from the queue while
    // the client has not read what was sent before (the gets behind it wait in the channel's backlog).
    if (this.conn.congested) await this.conn.uncongested();
    if (this.closing) return;
    const d = await h.get(this.owner, m.noAck);
    if (this.closing) return; // its delivery is released with the channel's
    if (d === null) {
      this.conn.sendMethod(this.ch, { name: 'basic.get-empty' } as AmqpMethod);
      return;
    }
    this.conn.chargeOut(d.msg.payload.length);
    const tag = ++this.deliveryTag;
    if (!m.noAck) (this.unacked ??= new Map()).set(tag, { handle: h, id: d.id, consumer: null });
    this.sendContent('basic.get-ok', { deliveryTag: tag, redelivered: d.redelivered, messageCount: d.remaining }, d.msg);
  }

  /** basic.ack / nack / reject: `multiple` settles every unacked tag up to `tag` (0: all). */
  private settle(tag: number, multiple: boolean, ack: boolean, requeue: boolean): void {
    let found = 0;
    const unacked = this.unacked;
    if (multiple) {
      if (unacked !== null) for (const [t, u] of unacked) {
        if (tag !== 0 && t > tag) break;
        unacked.delete(t);
        this.settleOne(t, u, ack, requeue);
        found++;
      }
      if (found === 0 && tag !== 0) throw new AmqpError(406, `unknown delivery tag ${tag}`, 60, ack ? 80 : 120);
    } else {
      const u = unacked?.get(tag);
      if (u === undefined) throw new AmqpError(406, `unknown delivery tag ${tag}`, 60, ack ? 80 : 90);
      unacked!.delete(tag);
      this.settleOne(tag, u, ack, requeue);
    }
    this.resumeConsumers();
  }

  private settleOne(tag: number, u: Unacked, ack: boolean, requeue: boolean): void {
    if (u.consumer !== null) u.consumer.unacked--;
    if (this.tx) {
      (this.txSettles ??= []).push({ tag, u, ack, requeue });
      return;
    }
    (ack ? u.handle.ack(u.id) : u.handle.nack(u.id, requeue)).catch(this.conn.adapter.storeWriteFailed);
  }

  private recover(): void {
    if (this.unacked !== null) for (const u of this.unacked.values()) if (u.consumer !== null) u.consumer.unacked--;
    this.unacked = null;
    if (this.touched !== null) for (const h of this.touched) h.release(this.owner);
    this.resumeConsumers();
  }

  private qos(m: MethodOf<'basic.qos'>): void {
    if (m.prefetchSize !== 0) throw new AmqpError(540, `prefetch_size!=0 (${m.prefetchSize})`, 60, 10);
    if (m.global) this.channelPrefetch = m.prefetchCount;
    else this.consumerPrefetch = m.prefetchCount;
    this.conn.sendMethod(this.ch, { name: 'basic.qos-ok' } as AmqpMethod);
    this.resumeConsumers();
  }

  // ------------------------------------------------------------------ exchanges and queues

  private async exchangeDeclare(m: MethodOf<'exchange.declare'>): Promise<void> {
    if (m.exchange === '') {
      if (!m.passive) throw new AmqpError(403, "operation not permitted on the default exchange", 40, 10);
    } else {
      this.authorize(m.passive ? 'describe' : 'create', 'exchange', m.exchange, 'exchange.declare');
      if (!m.passive && !EXCHANGE_TYPES.has(m.type)) throw new AmqpError(503, `invalid exchange type '${m.type}'`, 40, 10);
      const args = (m.arguments ?? {}) as FieldTable;
      const ae = args['alternate-exchange'];
      const alternateExchange = ae === undefined ? undefined : fieldString(ae);
      await this.router.declareExchange(
        {
          name: m.exchange,
          type: m.type as ExchangeType,
          durable: m.durable,
          autoDelete: m.autoDelete,
          internal: m.internal,
          ...(alternateExchange !== undefined ? { alternateExchange } : {}),
          rawArguments: tableToJson(args),
        },
        { passive: m.passive },
      ).catch((err: unknown) => {
        if (m.passive && isFlowError(err, 'NOT_FOUND')) throw new AmqpError(404, `no exchange '${m.exchange}' in vhost '${this.conn.vhost}'`, 40, 10);
        throw err;
      });
    }
    if (!m.noWait && !this.closing) this.conn.sendMethod(this.ch, { name: 'exchange.declare-ok' } as AmqpMethod);
  }

  private async exchangeDelete(m: MethodOf<'exchange.delete'>): Promise<void> {
    if (m.exchange === '') throw new AmqpError(403, 'operation not permitted on the default exchange', 40, 20);
    this.authorize('delete', 'exchange', m.exchange, 'exchange.delete');
    await this.router.deleteExchange(m.exchange, { ifUnused: m.ifUnused }).catch((err: unknown) => {
      // Deleting what is not there succeeds (RabbitMQ 3.x).
      if (!isFlowError(err, 'NOT_FOUND')) throw err;
    });
    if (!m.noWait && !this.closing) this.conn.sendMethod(this.ch, { name: 'exchange.delete-ok' } as AmqpMethod);
  }

  private async exchangeBind(m: MethodOf<'exchange.bind'> | MethodOf<'exchange.unbind'>): Promise<void> {
    if (m.source === '' || m.destination === '') throw new AmqpError(403, 'operation not permitted on the default exchange', 40, m.name === 'exchange.bind' ? 30 : 40);
    this.authorize('subscribe', 'exchange', m.source, m.name);
    this.authorize('alter', 'exchange', m.destination, m.name);
    if (m.source === TOPIC_EXCHANGE && m.name === 'exchange.bind') this.authorizeTopicBinding(m.routingKey, m.name);
    const b = { source: m.source, destinationKind: 'exchange' as const, destination: m.destination, key: m.routingKey, rule: 'amqp' as const, arguments: tableToJson((m.arguments ?? {}) as FieldTable) };
    if (m.name === 'exchange.bind') await this.router.bind(b);
    else await this.router.unbind(b);
    if (!m.noWait && !this.closing) this.conn.sendMethod(this.ch, { name: m.name === 'exchange.bind' ? 'exchange.bind-ok' : 'exchange.unbind-ok' } as AmqpMethod);
  }

  private async queueDeclare(m: MethodOf<'queue.declare'>): Promise<void> {
    // An empty name asks for a server-named queue (amq.gen-..., named by the router).
    const name = m.queue;
    if (name === '') {
      if (m.passive) throw new AmqpError(404, `no queue '' in vhost '${this.conn.vhost}'`, 50, 10);
    } else if (name.startsWith('amq.') && !m.passive) {
      throw new AmqpError(403, `queue name '${name}' contains reserved prefix 'amq.*'`, 50, 10);
    }
    const args = (m.arguments ?? {}) as FieldTable;
    const action = m.passive ? 'describe' : 'create';
    if (m.passive || fieldString(args['x-queue-type'] as never) === 'stream') {
      const stream = name === '' ? null : this.engine.getStream(name);
      if (stream !== undefined && stream !== null && this.router.getQueue(name) === undefined) {
        this.authorize(action, 'stream', name, 'queue.declare');
        return this.streamDeclared(m, name);
      }
      if (!m.passive) {
        if (name !== '') this.authorize('create', 'stream', name, 'queue.declare');
        return this.declareStream(m, name);
      }
    }
    // A server-named exclusive queue is reachable by this connection only: nothing to check. A server-named shared
    // one is checked as `amq.gen-*` (its name is not known before it exists).
    if (name !== '') this.authorize(action, 'queue', name, 'queue.declare');
    else if (!m.exclusive && !m.passive) this.authorize('create', 'queue', 'amq.gen-*', 'queue.declare');
    const def = {
      name,
      durable: m.durable,
      exclusiveOwner: m.exclusive ? this.conn.id : null,
      autoDelete: m.autoDelete,
      arguments: m.passive ? {} : queueArguments(args, name, m.durable, m.exclusive),
      rawArguments: tableToJson(args),
    };
    const h = await this.router.declareQueue(def, { passive: m.passive, owner: this.conn.id }).catch((err: unknown) => {
      if (isFlowError(err, 'NOT_FOUND')) throw new AmqpError(404, `no queue '${name}' in vhost '${this.conn.vhost}'`, 50, 10);
      if (isFlowError(err, 'RESOURCE_LOCKED')) throw new AmqpError(405, `cannot obtain exclusive access to locked queue '${name}' in vhost '${this.conn.vhost}'`, 50, 10);
      throw err;
    });
    this.lastQueue = h.def.name;
    if (!m.noWait && !this.closing) {
      const s = h.stats();
      this.conn.sendMethod(this.ch, { name: 'queue.declare-ok', queue: h.def.name, messageCount: s.ready, consumerCount: s.consumers } as AmqpMethod);
    }
  }

  /** queue.declare of a stream queue: RabbitMQ's constraints, then the stream (one partition). */
  private async declareStream(m: MethodOf<'queue.declare'>, name: string): Promise<void> {
    if (name === '' || !m.durable || m.exclusive || m.autoDelete) {
      throw new AmqpError(406, `invalid property for stream queue '${name}': a stream is named, durable, not exclusive, not auto-delete`, 50, 10);
    }
    if (this.router.getQueue(name) !== undefined) throw new AmqpError(406, `inequivalent arg 'x-queue-type' for queue '${name}' in vhost '${this.conn.vhost}'`, 50, 10);
    try {
      await this.engine.createStream({ name, partitions: 1 });
    } catch (err) {
      if (isFlowError(err, 'INVALID_ARGUMENT')) throw new AmqpError(406, `stream queue name '${name}': ${(err as Error).message}`, 50, 10);
      if (!isFlowError(err, 'ALREADY_EXISTS')) throw err;
    }
    return this.streamDeclared(m, name);
  }

  private streamDeclared(m: MethodOf<'queue.declare'>, name: string): void {
    this.lastQueue = name;
    if (m.noWait || this.closing) return;
    const o = this.engine.offsets(name, 0);
    this.conn.sendMethod(this.ch, { name: 'queue.declare-ok', queue: name, messageCount: o.highWatermark - o.logStartOffset, consumerCount: 0 } as AmqpMethod);
  }

  private async queueBind(m: MethodOf<'queue.bind'> | MethodOf<'queue.unbind'>): Promise<void> {
    const bind = m.name === 'queue.bind';
    if (m.exchange === '') throw new AmqpError(403, 'operation not permitted on the default exchange', 50, bind ? 20 : 50);
    const stream = this.streamOf(m.queue);
    this.authorize('alter', stream !== null ? 'stream' : 'queue', stream ?? this.queueName(m.queue), m.name);
    this.authorize('subscribe', 'exchange', m.exchange, m.name);
    const dest = stream ?? this.queueOf(m.queue, m.name).def.name;
    // §queue.bind: an empty queue name and routing key mean the last declared queue for both.
    const key = m.queue === '' && m.routingKey === '' ? dest : m.routingKey;
    if (bind && m.exchange === TOPIC_EXCHANGE) this.authorizeTopicBinding(key, m.name);
    const b = { source: m.exchange, destinationKind: stream !== null ? ('stream' as const) : ('queue' as const), destination: dest, key, rule: 'amqp' as const, arguments: tableToJson((m.arguments ?? {}) as FieldTable) };
    if (bind) await this.router.bind(b);
    else await this.router.unbind(b);
    if (this.closing) return;
    if (bind) {
      if (!(m as MethodOf<'queue.bind'>).noWait) this.conn.sendMethod(this.ch, { name: 'queue.bind-ok' } as AmqpMethod);
    } else {
      this.conn.sendMethod(this.ch, { name: 'queue.unbind-ok' } as AmqpMethod);
    }
  }

  private async queuePurge(m: MethodOf<'queue.purge'>): Promise<void> {
    this.authorize('delete', 'queue', this.queueName(m.queue), 'queue.purge');
    const h = this.queueOf(m.queue, 'queue.purge');
    const n = await this.router.purgeQueue(h.def.name);
    if (!m.noWait && !this.closing) this.conn.sendMethod(this.ch, { name: 'queue.purge-ok', messageCount: n } as AmqpMethod);
  }

  private async queueDelete(m: MethodOf<'queue.delete'>): Promise<void> {
    const name = m.queue === '' ? this.lastQueue : m.queue;
    if (name === null) throw new AmqpError(404, 'no previously declared queue (queue.delete names none)', 50, 40);
    const h = this.router.getQueue(name);
    this.authorize('delete', h === undefined && this.engine.getStream(name) !== undefined ? 'stream' : 'queue', name, 'queue.delete');
    let n = 0;
    if (h === undefined && this.engine.getStream(name) !== undefined) {
      const o = this.engine.offsets(name, 0);
      n = o.highWatermark - o.logStartOffset;
      await this.engine.deleteStream(name);
    } else if (h !== undefined) {
      const owner = h.def.exclusiveOwner;
      if (owner !== null && owner !== this.conn.id) throw new AmqpError(405, `cannot obtain exclusive access to locked queue '${name}' in vhost '${this.conn.vhost}'`, 50, 40);
      n = await this.router.deleteQueue(name, { ifUnused: m.ifUnused, ifEmpty: m.ifEmpty }).catch((err: unknown) => {
        if (isFlowError(err, 'NOT_FOUND')) return 0;
        throw err;
      });
    }
    if (!m.noWait && !this.closing) this.conn.sendMethod(this.ch, { name: 'queue.delete-ok', messageCount: n } as AmqpMethod);
  }
}

/** x-arguments of queue.declare, checked as RabbitMQ does (406 PRECONDITION_FAILED for a bad value). */
export function queueArguments(t: FieldTable, name: string, durable: boolean, exclusive: boolean): QueueArguments {
  const bad = (k: string, why: string): never => {
    throw new AmqpError(406, `invalid arg '${k}' for queue '${name}' in vhost '/': ${why}`, 50, 10);
  };
  const int = (k: string, min: number): number | undefined => {
    const v = t[k];
    if (v === undefined) return undefined;
    const n = fieldInteger(v);
    if (n === undefined || n < min) bad(k, min > 0 ? 'expected a positive integer' : 'expected a non-negative integer');
    return n;
  };
  const str = (k: string): string | undefined => {
    const v = t[k];
    if (v === undefined) return undefined;
    const s = fieldString(v);
    if (s === undefined) bad(k, 'expected a string');
    return s;
  };
  const a: QueueArguments = {};
  const ttl = int('x-message-ttl', 0);
  if (ttl !== undefined) a.messageTtlMs = ttl;
  const expires = int('x-expires', 1);
  if (expires !== undefined) a.expiresMs = expires;
  const maxLength = int('x-max-length', 0);
  if (maxLength !== undefined) a.maxLength = maxLength;
  const maxBytes = int('x-max-length-bytes', 0);
  if (maxBytes !== undefined) a.maxLengthBytes = maxBytes;
  const limit = int('x-delivery-limit', 0);
  if (limit !== undefined) a.deliveryLimit = limit;
  const overflow = str('x-overflow');
  if (overflow !== undefined) {
    if (!OVERFLOWS.has(overflow)) bad('x-overflow', 'expected drop-head, reject-publish or reject-publish-dlx');
    a.overflow = overflow as QueueArguments['overflow'];
  }
  const dlx = str('x-dead-letter-exchange');
  if (dlx !== undefined) a.deadLetterExchange = dlx;
  const dlk = str('x-dead-letter-routing-key');
  if (dlk !== undefined) {
    if (dlx === undefined) bad('x-dead-letter-routing-key', 'needs x-dead-letter-exchange');
    a.deadLetterRoutingKey = dlk;
  }
  const sac = t['x-single-active-consumer'];
  if (sac !== undefined) {
    const b = fieldBoolean(sac);
    if (b === undefined) bad('x-single-active-consumer', 'expected a boolean');
    a.singleActiveConsumer = b;
  }
  const type = t['x-queue-type'];
  if (type !== undefined) {
    const s = fieldString(type);
    if (s === 'quorum') {
      // Accepted as a durable queue, with the constraints RabbitMQ puts on quorum queues.
      if (!durable || exclusive) bad('x-queue-type', 'a quorum queue is durable and not exclusive');
    } else if (s !== 'classic' && s !== 'stream') {
      bad('x-queue-type', 'expected classic, quorum or stream');
    }
  }
  return a;
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
