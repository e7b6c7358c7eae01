/**
 * Publishing on an AMQP channel: a basic.publish with its content (assembled in channel.ts) is authorized, charged to
 * the connection's quota and routed through the core's Router (the default exchange also reaches a stream queue by
 * its name); an unroutable mandatory publish comes back as basic.return; publisher confirms (confirm.select) are
 * acked or nacked in sequence order once storage settles, a run of equal outcomes as one multiple=true frame; in a
 * transaction (tx.select) publishes and settlements wait for tx.commit, tx.rollback drops the publishes and puts the
 * acks back.
 */
import type { Message, RouteResult } from '../../core/index.js';
import { isFlowError } from '../../core/index.js';
import { storageRefusal } from '../storage-refusal.js';
import { AmqpError } from './errors.js';
import { superStreamPartitions } from './super-stream.js';
import { deliverReply, replyAddress } from './direct-reply.js';
import { REPLY_PREFIX, REPLY_QUEUE } from './reply-registry.js';
import { TOPIC_EXCHANGE, messageOfPublish } from './properties.js';
import { messageFrames, type AmqpMethod } from './wire.js';
import { qualifyMethod, stripMethod } from './vhost.js';
import { encodeBatch, messageToRecord } from '../../core/index.js';
import { AmqpChannelState, NO_CONFIRMS, type PendingConfirm, type PublishItem, type Unacked } from './channel-state.js';

/** One outstanding publisher confirm. state: 0 pending, 1 ack, 2 nack. */
class Confirm implements PendingConfirm {
  state = 0;
  constructor(
    readonly seq: number,
    private readonly channel: AmqpChannelState,
  ) {}
  readonly ok = (): void => {
    this.state = 1;
    this.channel.conn.writeSettled();
    confirmSettled(this.channel);
  };
  readonly fail = (err: unknown): void => {
    this.state = 2;
    this.channel.conn.writeSettled();
    writeFailed(this.channel, err);
    confirmSettled(this.channel);
  };
}

export function publish(chan: AmqpChannelState, item: PublishItem): void {
  chan.conn.published();
  qualifyMethod(chan.conn.names, chan.router, item.method);
  const m = item.method;
  if (m.immediate) throw new AmqpError(540, 'immediate=true', 60, 40);
  if (!chan.conn.access.open) {
    if (m.exchange === '') {
      const stream = chan.router.getQueue(m.routingKey) === undefined && chan.streamEntry(m.routingKey) !== undefined;
      // A super stream's partition queue is its stream (super-stream.ts).
      const part = stream ? null : chan.partitionOf(m.routingKey);
      if (part !== null) chan.authorize('publish', 'stream', part.stream, 'basic.publish');
      else chan.authorize('publish', stream ? 'stream' : 'queue', m.routingKey, 'basic.publish');
    } else {
      chan.authorize('publish', 'exchange', m.exchange, 'basic.publish');
      chan.authorizeTopicPublish(m.exchange, m.routingKey);
    }
  }
  // Direct reply-to: the requester's reply-to becomes its channel's own reply address (direct-reply.ts).
  if (item.props.replyTo === REPLY_QUEUE) item.props = { ...item.props, replyTo: replyAddress(chan) };
  // The namespace's storage quota (maxStorageBytes): over it the publish is refused with a channel error (406
  // PRECONDITION_FAILED, as RabbitMQ refuses a publish its policies forbid; 506 would close the whole connection),
  // until retention or deletion frees room.
  const full = chan.conn.storageFull();
  if (full !== null) throw new AmqpError(406, full, 60, 40);
  chan.conn.chargeIn(item.body.length);
  if (chan.tx) {
    // Checked now (a missing exchange fails the publish, not the commit), routed at commit.
    if (chan.router.getExchange(m.exchange) === undefined && superStreamPartitions(chan, m.exchange) === null)
      throw new AmqpError(404, `no exchange '${m.exchange}' in vhost '${chan.conn.vhost}'`, 60, 40);
    (chan.txPublishes ??= []).push(item);
    return;
  }
  route(chan, item);
}

export function route(chan: AmqpChannelState, item: PublishItem): RouteResult {
  const m = item.method;
  const msg = messageOfPublish(
    { exchange: m.exchange, routingKey: m.routingKey, props: item.props, body: item.body, origin: chan.conn.id, user: chan.conn.user },
    Date.now(),
  );
  // The namespace may publish on its own `$ns/<ns>/` topics (amq.topic keys qualified by vhost.ts).
  if (!chan.conn.names.isDefault) msg.namespace = chan.conn.names.namespace;
  let r: RouteResult;
  if ((m.exchange === '' || m.exchange === TOPIC_EXCHANGE) && m.routingKey.startsWith(REPLY_PREFIX)) {
    // A direct reply: to its requester's consumer now, or dropped; routed either way, as RabbitMQ counts it. On
    // amq.topic too: the key is then a topic the core reserves for direct replies (direct-reply.ts).
    deliverReply(chan.conn.adapter.replies, msg, m.routingKey, (r) => chan.engine.forwardDirect(r));
    return afterRoute(chan, item, { routed: 1, durable: null, rejected: false });
  }
  try {
    const stream = m.exchange === '' && chan.router.getQueue(m.routingKey) === undefined ? chan.streamEntry(m.routingKey) : undefined;
    if (stream !== undefined) {
      // The default exchange reaches a stream queue by its name too.
      msg.exchange = '';
      msg.routingKey = m.routingKey;
      r = { routed: 1, durable: chan.engine.produce(stream.def.name, 0, encodeBatch([messageToRecord(msg, stream.ownTopic)])).durable, rejected: false };
    } else r = superStreamRoute(chan, m.exchange, m.routingKey, msg) ?? chan.router.publishTo(m.exchange, m.routingKey, msg);
  } catch (err) {
    if (storageRefusal(err) !== null) {
      // Refused at once (the free-space reserve, a partition backing off): as a failed write, a nack.
      const failed = Promise.reject(err);
      failed.catch(() => undefined);
      r = { routed: 1, durable: failed, rejected: false };
      return afterRoute(chan, item, r);
    }
    if (isFlowError(err, 'NOT_FOUND')) throw new AmqpError(404, `no exchange '${m.exchange}' in vhost '${chan.conn.vhost}'`, 60, 40);
    if (isFlowError(err, 'ACCESS_REFUSED')) throw new AmqpError(403, (err as Error).message, 60, 40);
    throw err;
  }
  return afterRoute(chan, item, r);
}

export function afterRoute(chan: AmqpChannelState, item: PublishItem, r: RouteResult): RouteResult {
  const m = item.method;
  chan.conn.adapter.stats.published++;
  if (r.routed === 0 && !m.mandatory) chan.conn.adapter.stats.droppedUnroutable++;
  if (r.routed === 0 && m.mandatory) {
    chan.conn.adapter.stats.returned++;
    chan.conn.send(
      messageFrames(
        chan.ch,
        stripMethod(chan.conn.names, {
          name: 'basic.return',
          replyCode: 312,
          replyText: 'NO_ROUTE',
          exchange: m.exchange,
          routingKey: m.routingKey,
        } as AmqpMethod),
        item.props,
        item.body,
        chan.conn.frameMax,
      ),
    );
  }
  if (chan.confirm) {
    const c = new Confirm(++chan.publishSeq, chan);
    if (chan.confirms === NO_CONFIRMS) chan.confirms = [];
    chan.confirms.push(c);
    if (r.rejected) c.state = 2;
    else if (r.durable === null) c.state = 1;
    else {
      chan.conn.writeStarted(item.body.length);
      r.durable.then(c.ok, c.fail);
    }
    if (c.state !== 0) confirmSettled(chan);
  } else if (r.durable !== null) {
    chan.conn.writeStarted(item.body.length);
    const w = chan.conn.onWrite;
    r.durable.then(w.settled, w.failed);
  }
  if (r.written !== undefined) {
    // A transient message a durable queue keeps in its store: nobody waits for it, but it takes the store's time
    // like a persistent one, so it takes the connection's credit too.
    chan.conn.writeStarted(item.body.length);
    const w = chan.conn.onWrite;
    r.written.then(w.settled, w.failed);
  }
  return r;
}

/** A publish's write failed: a full disk raises the adapter's alarm; the rest is logged. */
export function writeFailed(chan: AmqpChannelState, err: unknown): void {
  chan.conn.adapter.storeWriteFailed(err);
}

export function confirmSettled(chan: AmqpChannelState): void {
  if (chan.confirmFlushScheduled) return;
  chan.confirmFlushScheduled = true;
  setImmediate(() => flushConfirms(chan));
}

/** Sends the settled confirms at the head, in order, one frame per run of equal outcomes. */
export function flushConfirms(chan: AmqpChannelState): void {
  chan.confirmFlushScheduled = false;
  if (chan.closing) return;
  const q = chan.confirms;
  let i = chan.confirmHead;
  const stats = chan.conn.adapter.stats;
  while (i < q.length && q[i]!.state !== 0) {
    const state = q[i]!.state;
    let j = i;
    while (j + 1 < q.length && q[j + 1]!.state === state) j++;
    const tag = q[j]!.seq;
    const multiple = j > i;
    if (state === 1) {
      stats.confirmsAcked += j - i + 1;
      chan.conn.sendMethod(chan.ch, { name: 'basic.ack', deliveryTag: tag, multiple } as AmqpMethod);
    } else {
      stats.confirmsNacked += j - i + 1;
      chan.conn.sendMethod(chan.ch, { name: 'basic.nack', deliveryTag: tag, multiple, requeue: false } as AmqpMethod);
    }
    i = j + 1;
  }
  if (i >= q.length) {
    chan.confirms = NO_CONFIRMS;
    chan.confirmHead = 0;
  } else if (i > 1024 && i > q.length / 2) {
    chan.confirms = q.slice(i);
    chan.confirmHead = 0;
  } else {
    chan.confirmHead = i;
  }
}

export async function commit(chan: AmqpChannelState): Promise<void> {
  const pubs = chan.txPublishes ?? [];
  const settles = chan.txSettles ?? [];
  chan.txPublishes = null;
  chan.txSettles = null;
  const waits: Promise<void>[] = [];
  for (const p of pubs) {
    const r = route(chan, p);
    if (r.durable !== null) waits.push(r.durable);
  }
  for (const s of settles) waits.push(s.ack ? s.u.handle.ack(s.u.id) : s.u.handle.nack(s.u.id, s.requeue));
  try {
    await Promise.all(waits);
  } catch (err) {
    writeFailed(chan, err);
    throw new AmqpError(406, `tx.commit failed: ${err instanceof Error ? err.message : String(err)}`, 90, 20);
  }
  if (!chan.closing) chan.conn.sendMethod(chan.ch, { name: 'tx.commit-ok' } as AmqpMethod);
}

export function rollback(chan: AmqpChannelState): void {
  chan.txPublishes = null;
  if (chan.txSettles === null || chan.txSettles.length === 0) return;
  // The acks and rejects held by the transaction are undone: the deliveries are unacked again, in tag order.
  const all = new Map<number, Unacked>();
  const back = chan.txSettles.sort((a, b) => a.tag - b.tag);
  chan.txSettles = null;
  let k = 0;
  for (const [tag, u] of chan.unacked ?? []) {
    while (k < back.length && back[k]!.tag < tag) {
      all.set(back[k]!.tag, back[k]!.u);
      k++;
    }
    all.set(tag, u);
  }
  for (; k < back.length; k++) all.set(back[k]!.tag, back[k]!.u);
  for (const s of back) if (s.u.consumer) s.u.consumer.unacked++;
  chan.unacked = all;
}

/**
 * A publish the router cannot route because its target is a super stream's view (super-stream.ts): through the
 * default exchange to a partition queue, or through the exchange of a FlowMQ stream of several partitions that no
 * exchange was declared for (routing key = a partition's key, else unroutable). Null for every other publish.
 */
function superStreamRoute(chan: AmqpChannelState, exchange: string, routingKey: string, msg: Message): RouteResult | null {
  let stream: string;
  let partition: number;
  if (exchange === '') {
    const p = chan.router.getQueue(routingKey) === undefined ? chan.partitionOf(routingKey) : null;
    if (p === null) return null;
    stream = p.stream;
    partition = p.partition;
  } else {
    if (chan.router.getExchange(exchange) !== undefined) return null;
    const parts = superStreamPartitions(chan, exchange);
    if (parts === null) return null;
    const p = parts.find((x) => x.key === routingKey);
    if (p === undefined) return { routed: 0, durable: null, rejected: false };
    stream = exchange;
    partition = p.partition;
  }
  msg.exchange = exchange;
  msg.routingKey = routingKey;
  const own = chan.engine.getAnyStream(stream)!.ownTopic;
  return { routed: 1, durable: chan.engine.produce(stream, partition, encodeBatch([messageToRecord(msg, own)])).durable, rejected: false };
}
