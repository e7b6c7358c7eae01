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
 *
 * The channel is split in rooms, functions over its state:
 *
 *   channel-state.ts  AmqpChannelState: the channel's state, closeWith / teardown, authorization, queue lookup
 *   channel.ts        AmqpChannel: frames in (methods, content header and body assembly), ordering, dispatch
 *   publish.ts        basic.publish: authorization, routing, basic.return, publisher confirms, transactions
 *   consume.ts        consumers, deliveries, basic.get, acks / nacks / rejects, basic.qos, basic.recover
 *   declare.ts        exchange.* and queue.* declarations, bindings, purge, delete, queue x-arguments
 *   direct-reply.ts   direct reply-to (`amq.rabbitmq.reply-to`): the reply consumer, reply addresses, replies
 */
import type { Message } from '../../core/index.js';
import { AmqpError, toAmqpError } from './errors.js';
import { AmqpCodecError, decodeHeaderPayload, type AmqpMethod } from './wire.js';
import { StreamConsumer } from './stream.js';
import { PartialBody } from './intake.js';
import { AmqpChannelState, IDS, type Item, type PublishItem } from './channel-state.js';
import { commit, publish, rollback } from './publish.js';
import { allows, consume, deliverStream, get, qos, recover, resumeConsumers, settle, streamFailed, tagTaken } from './consume.js';
import { cancelReplies, consumeReplies } from './direct-reply.js';
import { REPLY_QUEUE } from './reply-registry.js';
import { qualifyMethod } from './vhost.js';
import { exchangeBind, exchangeDeclare, exchangeDelete, queueBind, queueDeclare, queueDelete, queuePurge } from './declare.js';

export { bindingFilter } from './channel-state.js';
export { queueArguments } from './declare.js';

export class AmqpChannel extends AmqpChannelState {
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
    if (this.expect !== 0)
      throw new AmqpError(505, `expected a content ${this.expect === 1 ? 'header' : 'body'} frame on channel ${this.ch}, got method ${m.name}`);
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
      r = 'kind' in item ? publish(this, item) : this.exec(item);
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

  private exec(m: AmqpMethod): Promise<void> | void {
    qualifyMethod(this.conn.names, this.router, m);
    switch (m.name) {
      case 'channel.flow':
        this.flowActive = m.active;
        this.conn.sendMethod(this.ch, { name: 'channel.flow-ok', active: m.active } as AmqpMethod);
        if (m.active) resumeConsumers(this);
        return;
      case 'channel.flow-ok':
        return;
      case 'exchange.declare':
        return exchangeDeclare(this, m);
      case 'exchange.delete':
        return exchangeDelete(this, m);
      case 'exchange.bind':
      case 'exchange.unbind':
        return exchangeBind(this, m);
      case 'queue.declare':
        return queueDeclare(this, m);
      case 'queue.bind':
      case 'queue.unbind':
        return queueBind(this, m);
      case 'queue.purge':
        return queuePurge(this, m);
      case 'queue.delete':
        return queueDelete(this, m);
      case 'basic.qos':
        return qos(this, m);
      case 'basic.consume':
        // The direct reply-to pseudo-queue is no queue (direct-reply.ts).
        if (m.queue === REPLY_QUEUE) return consumeReplies(this, m, (tag) => tagTaken(this, tag));
        return consume(this, m);
      case 'basic.cancel': {
        if (this.replyConsumer?.tag === m.consumerTag) cancelReplies(this);
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
        return get(this, m);
      case 'basic.ack':
        settle(this, m.deliveryTag, m.multiple, true, false);
        return;
      case 'basic.nack':
        settle(this, m.deliveryTag, m.multiple, false, m.requeue);
        return;
      case 'basic.reject':
        settle(this, m.deliveryTag, false, false, m.requeue);
        return;
      case 'basic.recover':
      case 'basic.recover-async':
        recover(this, m.requeue);
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
        return commit(this);
      case 'tx.rollback':
        if (!this.tx) throw new AmqpError(406, 'channel is not transactional', 90, 30);
        rollback(this);
        this.conn.sendMethod(this.ch, { name: 'tx.rollback-ok' } as AmqpMethod);
        return;
      default:
        throw new AmqpError(540, `${m.name} is not a method a client sends on a channel`);
    }
  }

  /** Gives consumers that were refused a delivery their turn again (credit returned). */
  resumeConsumers(): void {
    resumeConsumers(this);
  }

  /** StreamSink.allows: a stream consumer reads on while its channel may deliver (quota, policies). */
  allows(c: StreamConsumer): boolean {
    return allows(this, c);
  }

  deliverStream(c: StreamConsumer, msg: Message, offset: number): void {
    deliverStream(this, c, msg, offset);
  }

  streamFailed(c: StreamConsumer, err: unknown): void {
    streamFailed(this, c, err);
  }
}
