/**
 * The broker's direct reply-to consumers by their opaque token (AmqpAdapter.replies; direct-reply.ts says how direct
 * reply-to works). Kept apart so that the adapter and the channel state can name it without importing the channel.
 */

import { DIRECT_REPLY_PREFIX, DIRECT_REPLY_QUEUE } from '../../core/index.js';

export const REPLY_QUEUE = DIRECT_REPLY_QUEUE;
export const REPLY_PREFIX = DIRECT_REPLY_PREFIX;
/** The same addresses as unified topics (an MQTT response topic, a NATS reply subject): reserved in the core. */
export const REPLY_TOPIC_PREFIX = 'amq/rabbitmq/reply-to/';

/** The reserved topic of a reply address `amq.rabbitmq.reply-to.<token>` (its routing key): `amq/rabbitmq/reply-to/<token>`. */
export function replyTopicOf(routingKey: string): string {
  return REPLY_TOPIC_PREFIX + routingKey.slice(REPLY_PREFIX.length);
}

/** A channel's direct reply-to consumer: its consumer tag, its token, its connection's namespace, and its channel. */
export interface ReplyConsumer {
  readonly tag: string;
  readonly token: string;
  readonly namespace: string;
  readonly chan: { readonly closing: boolean };
}

export class DirectReplies {
  private readonly byToken = new Map<string, ReplyConsumer>();
  /** Replies delivered, and dropped (requester gone or its socket full). */
  readonly stats = { delivered: 0, dropped: 0, forwarded: 0 };
  /**
   * Told of each address that appears (`on`) or goes (module.ts: Engine.watchDirect, so that in cluster mode the other
   * brokers forward its replies here).
   */
  watch: ((topic: string, namespace: string, on: boolean) => void) | null = null;

  get size(): number {
    return this.byToken.size;
  }

  add(c: ReplyConsumer): void {
    this.byToken.set(c.token, c);
    this.watch?.(REPLY_TOPIC_PREFIX + c.token, c.namespace, true);
  }

  remove(c: ReplyConsumer): void {
    if (this.byToken.get(c.token) !== c) return;
    this.byToken.delete(c.token);
    this.watch?.(REPLY_TOPIC_PREFIX + c.token, c.namespace, false);
  }

  /** The consumer a routing key `amq.rabbitmq.reply-to.<token>` names, while its channel is open. */
  lookup(routingKey: string): ReplyConsumer | undefined {
    if (!routingKey.startsWith(REPLY_PREFIX)) return undefined;
    const c = this.byToken.get(routingKey.slice(REPLY_PREFIX.length));
    return c === undefined || c.chan.closing ? undefined : c;
  }
}
