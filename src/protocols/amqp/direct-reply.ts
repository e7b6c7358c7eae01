/**
 * Direct reply-to (RabbitMQ's `amq.rabbitmq.reply-to`): RPC replies delivered straight to the requester's consumer,
 * with no reply queue.
 *
 * - A requester consumes from the pseudo-queue `amq.rabbitmq.reply-to` with no-ack (an acking consumer is 406
 *   PRECONDITION_FAILED "reply consumer cannot acknowledge", a second one on the channel 406 "reply consumer already
 *   set", as RabbitMQ). The channel gets an opaque token: 24 characters of base64url from 18 random bytes (144 bits),
 *   so that nobody can guess another requester's reply address.
 * - A publish on that channel with reply-to `amq.rabbitmq.reply-to` leaves with reply-to
 *   `amq.rabbitmq.reply-to.<token>` (without a reply consumer on the channel: 406 "fast reply consumer does not exist").
 * - A publish to the default exchange with routing key `amq.rabbitmq.reply-to.<token>`, from any AMQP connection of
 *   this broker, is delivered to that consumer at once (basic.deliver, exchange '', the routing key as published).
 *   It is authorized as any default-exchange publish (`publish queue:<routing key>`: a restricted responder needs
 *   `queue:amq.rabbitmq.reply-to.*`). It counts as routed whether or not the requester is still there (no
 *   basic.return for mandatory, a confirm ack), as RabbitMQ documents; a reply whose requester is gone (channel or
 *   connection closed, consumer cancelled) or whose socket holds more than socketHighWater unsent bytes is dropped:
 *   direct replies are at most once.
 * - Other protocols answer on the reply-to they were given, a topic: MQTT v5 on the Response Topic
 *   `amq/rabbitmq/reply-to/<token>`, NATS on the reply subject `amq.rabbitmq.reply-to.<token>` (an AMQP publish on
 *   amq.topic with that key too). The routing core reserves that prefix (Engine.direct): such a publish goes to
 *   replyTopics' handler and nowhere else.
 * - So replies never reach the topic space nor any queue or stream: an MQTT `#` (or a subscription to the address
 *   itself), a NATS `>` or an amq.topic binding sees none of them, and no queue can be made to take them (`amq.`
 *   queue names are reserved; consuming the address is 404: it is no queue). queue.declare of
 *   `amq.rabbitmq.reply-to.<token>` answers with 1 consumer while the requester is there (else 404), so that a
 *   responder can check before long work, as RabbitMQ allows.
 * - The registry is per broker (the adapter's, shared by its listeners). In cluster mode each address is watched
 *   through the cluster's live interest (Engine.watchDirect), and a reply published on a broker that does not hold
 *   its requester goes to the broker that does (Engine.forwardDirect), one-way and best effort like live delivery,
 *   its namespace carried with it: the requester's broker delivers or drops it as above.
 */
import { DEFAULT_NAMESPACE } from '../../core/namespaces.js';
import { randomBytes } from 'node:crypto';
import type { DirectTopics, Message } from '../../core/index.js';
import { AmqpError } from './errors.js';
import { REPLY_PREFIX, REPLY_QUEUE, REPLY_TOPIC_PREFIX, replyTopicOf, type DirectReplies, type ReplyConsumer } from './reply-registry.js';
import { sendContent } from './consume.js';
import type { AmqpChannelState } from './channel-state.js';
import type { MethodOf, AmqpMethod } from './wire.js';

/** A channel's direct reply-to consumer, as the registry holds it (every one is made by consumeReplies). */
interface ChannelReplyConsumer extends ReplyConsumer {
  readonly chan: AmqpChannelState;
}

/** basic.consume on `amq.rabbitmq.reply-to`. */
export function consumeReplies(chan: AmqpChannelState, m: MethodOf<'basic.consume'>, tagTaken: (tag: string) => boolean): void {
  if (!m.noAck) throw new AmqpError(406, 'reply consumer cannot acknowledge', 60, 20);
  if (chan.replyConsumer !== null) throw new AmqpError(406, 'reply consumer already set', 60, 20);
  const tag = m.consumerTag === '' ? 'amq.ctag-' + randomBytes(16).toString('base64url') : m.consumerTag;
  if (tagTaken(tag)) throw new AmqpError(530, `attempt to reuse consumer tag '${tag}'`, 60, 20);
  const c: ChannelReplyConsumer = { tag, token: randomBytes(18).toString('base64url'), namespace: chan.conn.names.namespace, chan };
  chan.replyConsumer = c;
  chan.conn.adapter.replies.add(c);
  if (!m.noWait) chan.conn.sendMethod(chan.ch, { name: 'basic.consume-ok', consumerTag: tag } as AmqpMethod);
}

/** The channel's reply consumer goes (basic.cancel, channel or connection closed): later replies are dropped. */
export function cancelReplies(chan: AmqpChannelState): void {
  const c = chan.replyConsumer;
  if (c === null) return;
  chan.replyConsumer = null;
  chan.conn.adapter.replies.remove(c);
}

/** The reply-to a publish on `chan` leaves with: `amq.rabbitmq.reply-to` becomes the channel's own address. */
export function replyAddress(chan: AmqpChannelState): string {
  const c = chan.replyConsumer;
  if (c === null) throw new AmqpError(406, 'fast reply consumer does not exist', 60, 40);
  return REPLY_PREFIX + c.token;
}

/**
 * A reply (published to the default exchange or amq.topic, or by another protocol on the reserved topic): delivered
 * to its requester's consumer now, or dropped. True when delivered. Only a responder of the requester's namespace
 * (vhost) reaches it (`msg.namespace`: unset for `default`), as a queue of that vhost would be reached. `forward`
 * (cluster mode, a reply published here): where the requester is not on this broker, hands the reply, on its topic,
 * to the broker that holds it (Engine.forwardDirect); true when one does.
 */
export function deliverReply(replies: DirectReplies, msg: Message, routingKey: string, forward?: (msg: Message) => boolean): boolean {
  const c = replies.lookup(routingKey) as ChannelReplyConsumer | undefined;
  if (c === undefined && forward !== undefined && routingKey.startsWith(REPLY_PREFIX)) {
    const topic = replyTopicOf(routingKey);
    if (forward(msg.topic === topic ? msg : { ...msg, topic })) {
      replies.stats.forwarded++;
      return true;
    }
  }
  const to = c?.chan;
  if (c === undefined || to === undefined || to.conn.congested || to.conn.names.namespace !== (msg.namespace ?? DEFAULT_NAMESPACE)) {
    replies.stats.dropped++;
    return false;
  }
  const tag = ++to.deliveryTag;
  replies.stats.delivered++;
  to.conn.adapter.stats.delivered++;
  to.conn.chargeOut(msg.payload.length);
  sendContent(to, 'basic.deliver', { consumerTag: c.tag, deliveryTag: tag, redelivered: false }, { ...msg, exchange: '', routingKey });
  return true;
}

/**
 * The routing core's reserved topic for direct replies (Engine.direct): an MQTT or NATS responder answering an AMQP
 * requester publishes on the reply-to as a topic (`amq/rabbitmq/reply-to/<token>`, the subject
 * `amq.rabbitmq.reply-to.<token>`); the core hands such messages here and to nothing else.
 */
export function replyTopics(replies: DirectReplies, forward: (msg: Message) => boolean): DirectTopics {
  return {
    prefix: REPLY_TOPIC_PREFIX,
    deliver: (msg, forwarded) => deliverReply(replies, msg, REPLY_PREFIX + msg.topic.slice(REPLY_TOPIC_PREFIX.length), forwarded ? undefined : forward),
  };
}

/**
 * queue.declare of `amq.rabbitmq.reply-to` (allowed, as RabbitMQ: nothing is made) or of a reply address (passive or
 * not, nothing can be made: 0 messages and 1 consumer while its requester is there, on this broker or, in cluster
 * mode, on another one of the vhost, else 404).
 */
export function declareReplyQueue(chan: AmqpChannelState, m: MethodOf<'queue.declare'>): void {
  let consumers = 0;
  if (m.queue !== REPLY_QUEUE) {
    const here = chan.conn.adapter.replies.lookup(m.queue);
    const there = () => chan.engine.directWatched(replyTopicOf(m.queue), chan.conn.names.namespace);
    if ((here === undefined || here.namespace !== chan.conn.names.namespace) && !there())
      throw new AmqpError(404, `no queue '${m.queue}' in vhost '${chan.conn.vhost}'`, 50, 10);
    consumers = 1;
  }
  if (!m.noWait) chan.conn.sendMethod(chan.ch, { name: 'queue.declare-ok', queue: m.queue, messageCount: 0, consumerCount: consumers } as AmqpMethod);
}
