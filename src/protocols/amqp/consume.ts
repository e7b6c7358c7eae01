/**
 * Consuming on an AMQP channel: consumers of queues (AmqpConsumer: credit from basic.qos prefetch per consumer and
 * per channel, the connection's socket and channel.flow; deliveries with their delivery tags) and of stream queues
 * (StreamConsumer, stream.ts), basic.get, the acknowledgements (basic.ack / nack / reject, in a transaction held
 * until commit), basic.recover, and basic.cancel from the server when a queue goes away.
 */
import { randomBytes } from 'node:crypto';
import type { Message, QueueDelivery, QueueHandle } from '../../core/index.js';
import { isFlowError } from '../../core/index.js';
import { AmqpError } from './errors.js';
import { TOPIC_EXCHANGE, propertiesOf, swapSeparators } from './properties.js';
import { messageFrames, type AmqpMethod, type MethodOf } from './wire.js';
import { Typed, decodeTable, fieldInteger, type FieldTable } from './codec/index.js';
import { StreamConsumer } from './stream.js';
import { ownDeaths, ownExchange, ownKey } from './vhost.js';
import { AmqpChannelState, type ChannelConsumer, type Settler, type Unacked } from './channel-state.js';

/** Stream deliveries: an ack only opens the consumer's window (reading a stream does not consume it). */
const STREAM_SETTLER: Settler = {
  ack: () => Promise.resolve(),
  nack: () => Promise.resolve(),
};

export class AmqpConsumer implements ChannelConsumer {
  /** Deliveries to this consumer not acked yet. */
  unacked = 0;
  /** Set once consume-ok went out: no delivery may overtake it. */
  ready = false;
  /** Directory version its `subscribe queue:` was last allowed at (-2: refused, its channel is closing). */
  authVersion = -1;
  /** Refused a delivery for want of credit: resume it when credit returns. */
  waiting = false;
  constructor(
    private readonly channel: AmqpChannelState,
    readonly tag: string,
    readonly owner: string,
    readonly noAck: boolean,
    readonly priority: number,
    readonly queue: QueueHandle,
    /** basic.qos global=false in force when the consumer was created; 0: unlimited. */
    readonly prefetch: number,
  ) {}
  hasCredit(): boolean {
    return credit(this.channel, this);
  }
  deliver(d: QueueDelivery): void {
    deliver(this.channel, this, d);
  }
  cancelled(reason: string): void {
    serverCancel(this.channel, this, reason);
  }
}

function randomName(prefix: string): string {
  return prefix + randomBytes(16).toString('base64url');
}

/** QueueConsumer.hasCredit of `c`. */
export function credit(chan: AmqpChannelState, c: AmqpConsumer): boolean {
  if (!c.ready || chan.closing || !chan.flowActive) return false;
  if (!chan.stillAllowed(c, 'queue', c.queue.def.name)) return false;
  if (chan.conn.sendsHeld) {
    c.waiting = true;
    return false;
  }
  if (chan.conn.congested) {
    chan.conn.starved = true;
    c.waiting = true;
    return false;
  }
  if (c.noAck) return true;
  if ((c.prefetch > 0 && c.unacked >= c.prefetch) || (chan.channelPrefetch > 0 && (chan.unacked?.size ?? 0) >= chan.channelPrefetch)) {
    c.waiting = true;
    return false;
  }
  return true;
}

/** Gives consumers that were refused a delivery their turn again (credit returned). */
export function resumeConsumers(chan: AmqpChannelState): void {
  if (chan.closing) return;
  if (chan.consumers !== null) {
    for (const c of chan.consumers.values()) {
      if (!c.waiting) continue;
      c.waiting = false;
      c.queue.resume(c);
    }
  }
  if (chan.streamConsumers !== null) for (const c of chan.streamConsumers.values()) c.pump();
}

export function deliver(chan: AmqpChannelState, c: AmqpConsumer, d: QueueDelivery): void {
  const tag = ++chan.deliveryTag;
  if (!c.noAck) {
    (chan.unacked ??= new Map()).set(tag, { handle: c.queue, id: d.id, consumer: c, msg: d.msg });
    c.unacked++;
  }
  chan.conn.adapter.stats.delivered++;
  chan.conn.chargeOut(d.msg.payload.length);
  sendContent(chan, 'basic.deliver', { consumerTag: c.tag, deliveryTag: tag, redelivered: d.redelivered }, d.msg);
}

export function sendContent(chan: AmqpChannelState, name: 'basic.deliver' | 'basic.get-ok', fields: Record<string, unknown>, msg: Message): void {
  const exchange = msg.exchange ?? TOPIC_EXCHANGE;
  const routingKey = msg.routingKey ?? swapSeparators(msg.topic);
  const ns = chan.conn.names;
  // Method, content header and body frames in one buffer: one allocation and one write per delivery.
  chan.conn.send(
    messageFrames(
      chan.ch,
      {
        name,
        ...fields,
        exchange: ns.isDefault ? exchange : ownExchange(ns, exchange),
        routingKey: ns.isDefault ? routingKey : ownKey(ns, routingKey),
      } as unknown as AmqpMethod,
      propertiesOf(ns.isDefault || msg.deaths === undefined ? msg : { ...msg, deaths: ownDeaths(ns, msg.deaths) }, Date.now()),
      msg.payload,
      chan.conn.frameMax,
    ),
  );
}

/** The queue went away: basic.cancel to clients that understand it (consumer_cancel_notify). */
export function serverCancel(chan: AmqpChannelState, c: AmqpConsumer, _reason: string): void {
  if (chan.consumers?.get(c.tag) !== c) return;
  chan.consumers!.delete(c.tag);
  if (!chan.closing && chan.conn.capabilities.cancelNotify) {
    chan.conn.sendMethod(chan.ch, { name: 'basic.cancel', consumerTag: c.tag, noWait: true } as AmqpMethod);
  }
}

export async function consumeStream(chan: AmqpChannelState, m: MethodOf<'basic.consume'>, stream: string, partition = 0): Promise<void> {
  const tag = m.consumerTag === '' ? randomName('amq.ctag-') : m.consumerTag;
  if (tagTaken(chan, tag)) throw new AmqpError(530, `attempt to reuse consumer tag '${tag}'`, 60, 20);
  const args = (m.arguments ?? {}) as FieldTable;
  const c = new StreamConsumer(chan.engine, chan, tag, stream, m.noAck, chan.consumerPrefetch, args['x-stream-offset'], partition);
  await c.begin();
  if (chan.closing) return;
  (chan.streamConsumers ??= new Map()).set(tag, c);
  if (!m.noWait) chan.conn.sendMethod(chan.ch, { name: 'basic.consume-ok', consumerTag: tag } as AmqpMethod);
  c.pump();
}

/** StreamSink.allows: a stream consumer reads on while its channel may deliver (quota, policies). */
export function allows(chan: AmqpChannelState, c: StreamConsumer): boolean {
  if (chan.closing || chan.conn.sendsHeld) return false;
  if (chan.conn.congested) {
    // As a queue consumer's credit: the socket's unsent bytes stop it (a no-ack stream consumer has no window).
    chan.conn.starved = true;
    return false;
  }
  return chan.stillAllowed(c, 'stream', c.stream);
}

export function deliverStream(chan: AmqpChannelState, c: StreamConsumer, msg: Message, offset: number): void {
  if (chan.closing || chan.streamConsumers?.get(c.tag) !== c) return;
  chan.conn.chargeOut(msg.payload.length);
  const tag = ++chan.deliveryTag;
  if (!c.noAck) {
    (chan.unacked ??= new Map()).set(tag, { handle: STREAM_SETTLER, id: offset, consumer: c, msg });
    c.unacked++;
  }
  chan.conn.adapter.stats.delivered++;
  sendStreamDelivery(chan, c, tag, msg, offset, false);
}

function sendStreamDelivery(chan: AmqpChannelState, c: StreamConsumer, tag: number, msg: Message, offset: number, redelivered: boolean): void {
  // RabbitMQ tells stream consumers each message's offset in the x-stream-offset header.
  const props = propertiesOf(msg, Date.now());
  const headers = props.headers ?? (props.rawHeaders !== undefined ? decodeTable(props.rawHeaders) : {});
  headers['x-stream-offset'] = new Typed('l', BigInt(offset));
  props.headers = headers;
  delete props.rawHeaders;
  // In the vhost's names: a tenant's records carry qualified keys; one with none is named by its stream queue.
  const ns = chan.conn.names;
  const exchange = ownExchange(ns, msg.exchange ?? '');
  const routingKey = msg.routingKey !== undefined ? ownKey(ns, msg.routingKey) : (ns.ownStream(c.stream) ?? c.stream);
  chan.conn.send(
    messageFrames(
      chan.ch,
      { name: 'basic.deliver', consumerTag: c.tag, deliveryTag: tag, redelivered, exchange, routingKey } as AmqpMethod,
      props,
      msg.payload,
      chan.conn.frameMax,
    ),
  );
}

export function streamFailed(chan: AmqpChannelState, c: StreamConsumer, err: unknown): void {
  if (chan.streamConsumers?.get(c.tag) !== c) return;
  chan.streamConsumers!.delete(c.tag);
  c.close();
  chan.conn.log.debug({ err, stream: c.stream }, 'amqp: stream consumer stopped');
  if (!chan.closing && chan.conn.capabilities.cancelNotify) {
    chan.conn.sendMethod(chan.ch, { name: 'basic.cancel', consumerTag: c.tag, noWait: true } as AmqpMethod);
  }
}

export function tagTaken(chan: AmqpChannelState, tag: string): boolean {
  return chan.consumers?.has(tag) === true || chan.streamConsumers?.has(tag) === true || chan.replyConsumer?.tag === tag;
}

export function consume(chan: AmqpChannelState, m: MethodOf<'basic.consume'>): void | Promise<void> {
  const stream = chan.streamOf(m.queue);
  if (stream !== null) {
    chan.authorize('subscribe', 'stream', stream, 'basic.consume');
    const n = chan.engine.getAnyStream(stream)!.def.partitions;
    // A stream queue reads one partition: a super stream is read through its partition queues (super-stream.ts).
    if (n > 1) throw new AmqpError(406, `stream '${stream}' has ${n} partitions: consume the partition queues of super stream '${stream}'`, 60, 20);
    return consumeStream(chan, m, stream);
  }
  const part = chan.partitionOf(m.queue);
  if (part !== null) {
    chan.authorize('subscribe', 'stream', part.stream, 'basic.consume');
    return consumeStream(chan, m, part.stream, part.partition);
  }
  chan.authorize('subscribe', 'queue', chan.queueName(m.queue), 'basic.consume');
  const h = chan.queueOf(m.queue, 'basic.consume');
  const tag = m.consumerTag === '' ? randomName('amq.ctag-') : m.consumerTag;
  if (tagTaken(chan, tag)) throw new AmqpError(530, `attempt to reuse consumer tag '${tag}'`, 60, 20);
  const args = (m.arguments ?? {}) as FieldTable;
  const pv = args['x-priority'];
  const priority = pv === undefined ? 0 : fieldInteger(pv);
  if (priority === undefined) throw new AmqpError(406, "invalid arg 'x-priority': expected an integer", 60, 20);
  const c = new AmqpConsumer(chan, tag, chan.owner, m.noAck, priority, h, chan.consumerPrefetch);
  c.authVersion = chan.conn.adapter.access.version;
  try {
    h.consume(c, { exclusive: m.exclusive });
  } catch (err) {
    if (isFlowError(err, 'RESOURCE_LOCKED')) throw new AmqpError(403, `queue '${h.def.name}' in vhost '${chan.conn.vhost}' in exclusive use`, 60, 20);
    throw err;
  }
  (chan.consumers ??= new Map()).set(tag, c);
  (chan.touched ??= new Set()).add(h);
  if (!m.noWait) chan.conn.sendMethod(chan.ch, { name: 'basic.consume-ok', consumerTag: tag } as AmqpMethod);
  // Deliveries only after consume-ok (a client must know the tag before its first delivery).
  c.ready = true;
  h.resume(c);
}

export async function get(chan: AmqpChannelState, m: MethodOf<'basic.get'>): Promise<void> {
  if (chan.streamOf(m.queue) !== null || chan.partitionOf(m.queue) !== null) {
    // RabbitMQ closes the connection: stream queues are read by consumers only.
    throw new AmqpError(540, `basic.get not supported by stream queues queue '${chan.queueName(m.queue)}' in vhost '${chan.conn.vhost}'`, 60, 70);
  }
  chan.authorize('subscribe', 'queue', chan.queueName(m.queue), 'basic.get');
  const h = chan.queueOf(m.queue, 'basic.get');
  (chan.touched ??= new Set()).add(h);
  // A basic.get answer counts against the socket's allowance as deliveries do: none is taken from the queue while
  // the client has not read what was sent before (the gets behind it wait in the channel's backlog).
  if (chan.conn.congested) await chan.conn.uncongested();
  if (chan.closing) return;
  const d = await h.get(chan.owner, m.noAck);
  if (chan.closing) return; // its delivery is released with the channel's
  if (d === null) {
    chan.conn.sendMethod(chan.ch, { name: 'basic.get-empty' } as AmqpMethod);
    return;
  }
  chan.conn.chargeOut(d.msg.payload.length);
  const tag = ++chan.deliveryTag;
  if (!m.noAck) (chan.unacked ??= new Map()).set(tag, { handle: h, id: d.id, consumer: null, msg: d.msg });
  sendContent(chan, 'basic.get-ok', { deliveryTag: tag, redelivered: d.redelivered, messageCount: d.remaining }, d.msg);
}

/** basic.ack / nack / reject: `multiple` settles every unacked tag up to `tag` (0: all). */
export function settle(chan: AmqpChannelState, tag: number, multiple: boolean, ack: boolean, requeue: boolean): void {
  let found = 0;
  const unacked = chan.unacked;
  if (multiple) {
    if (unacked !== null)
      for (const [t, u] of unacked) {
        if (tag !== 0 && t > tag) break;
        unacked.delete(t);
        settleOne(chan, t, u, ack, requeue);
        found++;
      }
    if (found === 0 && tag !== 0) throw new AmqpError(406, `unknown delivery tag ${tag}`, 60, ack ? 80 : 120);
  } else {
    const u = unacked?.get(tag);
    if (u === undefined) throw new AmqpError(406, `unknown delivery tag ${tag}`, 60, ack ? 80 : 90);
    unacked!.delete(tag);
    settleOne(chan, tag, u, ack, requeue);
  }
  resumeConsumers(chan);
}

export function settleOne(chan: AmqpChannelState, tag: number, u: Unacked, ack: boolean, requeue: boolean): void {
  if (u.consumer !== null) u.consumer.unacked--;
  if (chan.tx) {
    (chan.txSettles ??= []).push({ tag, u, ack, requeue });
    return;
  }
  (ack ? u.handle.ack(u.id) : u.handle.nack(u.id, requeue)).catch(chan.conn.adapter.storeWriteFailed);
}

/**
 * basic.recover / basic.recover-async. requeue=true: every unacked delivery of the channel goes back to its queue
 * (and may reach another consumer). requeue=false: each is sent again, marked redelivered and under a new delivery
 * tag, to the consumer that had it, as AMQP 0-9-1 says (1.8.3.16: "redelivered to the original recipient"); one
 * whose consumer is gone (cancelled) and a basic.get delivery, which has no recipient to go back to, go back to
 * their queue. (RabbitMQ answers requeue=false with 540 NOT_IMPLEMENTED.)
 */
export function recover(chan: AmqpChannelState, requeue: boolean): void {
  if (requeue) {
    if (chan.unacked !== null) for (const u of chan.unacked.values()) if (u.consumer !== null) u.consumer.unacked--;
    chan.unacked = null;
    if (chan.touched !== null) for (const h of chan.touched) h.release(chan.owner);
  } else if (chan.unacked !== null) {
    const old = chan.unacked;
    chan.unacked = null;
    for (const u of old.values()) {
      const c = u.consumer;
      const queueConsumer = c !== null && (chan.consumers?.get(c.tag) as unknown) === c;
      const streamConsumer = c !== null && !queueConsumer && chan.streamConsumers?.get(c.tag) === c;
      if (!queueConsumer && !streamConsumer) {
        if (c !== null) c.unacked--;
        u.handle.nack(u.id, true).catch(chan.conn.adapter.storeWriteFailed);
        continue;
      }
      const tag = ++chan.deliveryTag;
      (chan.unacked ??= new Map()).set(tag, u);
      chan.conn.adapter.stats.delivered++;
      chan.conn.chargeOut(u.msg.payload.length);
      if (streamConsumer) sendStreamDelivery(chan, c as StreamConsumer, tag, u.msg, u.id, true);
      else sendContent(chan, 'basic.deliver', { consumerTag: c!.tag, deliveryTag: tag, redelivered: true }, u.msg);
    }
  }
  resumeConsumers(chan);
}

export function qos(chan: AmqpChannelState, m: MethodOf<'basic.qos'>): void {
  if (m.prefetchSize !== 0) throw new AmqpError(540, `prefetch_size!=0 (${m.prefetchSize})`, 60, 10);
  if (m.global) chan.channelPrefetch = m.prefetchCount;
  else chan.consumerPrefetch = m.prefetchCount;
  chan.conn.sendMethod(chan.ch, { name: 'basic.qos-ok' } as AmqpMethod);
  resumeConsumers(chan);
}
