/**
 * AMQP virtual hosts as namespaces (docs/namespaces.md "AMQP"): how a name a client of vhost `t1` writes becomes the
 * core's, and back. Pure name logic shared by the AMQP adapter (src/protocols/amqp/vhost.ts, per method) and the
 * RabbitMQ management API (src/control/rabbitmq, per HTTP request), so that both apply the same rules:
 *
 * - queues and exchanges of `t1` are `$ns/t1/<name>` (server-named queues too);
 * - the default exchange '' and `amq.topic` are shared by every vhost: a default-exchange routing key names a queue
 *   (`$ns/t1/<queue>`, direct reply-to addresses excepted), an amq.topic key or binding key `a.#` is `$ns.t1.a.#`;
 * - amq.direct, amq.fanout, amq.headers and amq.match are made per vhost (`$ns/t1/amq.direct`) at its first use;
 *   another `amq.` name stays as written, so the core refuses it as it does in `/`;
 * - a stream queue `orders` of `t1` is the namespace's stream `t1~orders` (its Kafka topic `orders` for t1's clients);
 * - a client-written name spelling the reserved `$ns/` space, or an amq.topic key whose first word is `$ns`, is
 *   refused in every vhost (`/` included) with the protocol's access error.
 */
import type { Router } from './exchanges.js';
import { TOPIC_SPACE } from './exchanges.js';
import { isReservedName, NS_ROOT, STREAM_SEPARATOR, type NamespaceNames } from './namespaces.js';

/** AMQP direct reply-to's pseudo-queue and the prefix of its reply addresses (RabbitMQ's names). */
export const DIRECT_REPLY_QUEUE = 'amq.rabbitmq.reply-to';
export const DIRECT_REPLY_PREFIX = 'amq.rabbitmq.reply-to.';

/** The exchanges every vhost has of its own (amq.topic is the one unified topic space, shared and keyed by namespace). */
export const VHOST_EXCHANGES: ReadonlyArray<readonly [string, 'direct' | 'fanout' | 'headers']> = [
  ['amq.direct', 'direct'],
  ['amq.fanout', 'fanout'],
  ['amq.headers', 'headers'],
  ['amq.match', 'headers'],
];

/** Makes the vhost's predeclared exchanges when they are missing (its first connection or management call). */
export async function ensureVhost(router: Pick<Router, 'getExchange' | 'declareExchange'>, ns: NamespaceNames): Promise<void> {
  if (ns.isDefault) return;
  for (const [name, type] of VHOST_EXCHANGES) {
    const q = ns.name(name);
    if (router.getExchange(q) !== undefined) continue;
    await router.declareExchange({ name: q, type, durable: true, autoDelete: false, internal: false, rawArguments: {} });
  }
}

/** Is this client-written queue, exchange or default-exchange key in the reserved `$ns/` space? */
export function isReservedVhostName(name: string): boolean {
  return name.charCodeAt(0) === 0x24 && isReservedName(name);
}

/** Is this client-written amq.topic routing or binding key in the reserved `$ns` space (first word `$ns`)? */
export function isReservedTopicKey(key: string): boolean {
  return key.charCodeAt(0) === 0x24 && (key === NS_ROOT || key.startsWith(`${NS_ROOT}.`));
}

/** An exchange name as the core knows it: '' and amq.topic are shared; other `amq.*` names only when the vhost has them. */
export function vhostExchange(ns: NamespaceNames, router: Pick<Router, 'getExchange'>, name: string): string {
  if (ns.isDefault || name === '' || name === TOPIC_SPACE) return name;
  const q = ns.name(name);
  // A reserved `amq.` name the vhost does not have stays as written: the core refuses it as it does in `/`.
  if (name.startsWith('amq.') && router.getExchange(q) === undefined) return name;
  return q;
}

/** A routing or binding key as the core knows it on `x` (an internal exchange name). */
export function vhostKey(ns: NamespaceNames, x: string, k: string): string {
  if (ns.isDefault) return k;
  if (x === TOPIC_SPACE) return `${ns.topicPrefix.replaceAll('/', '.')}${k}`;
  if (x === '') return k.startsWith(DIRECT_REPLY_PREFIX) ? k : ns.name(k);
  return k;
}

/** A queue name (of an existing queue, or one named by the server) as the core knows it. */
export function vhostQueue(ns: NamespaceNames, name: string): string {
  if (ns.isDefault || name === '' || name === DIRECT_REPLY_QUEUE || name.startsWith(DIRECT_REPLY_PREFIX)) return name;
  return ns.name(name);
}

/** An internal exchange name as the vhost's clients know it. */
export function ownVhostExchange(ns: NamespaceNames, x: string): string {
  return ns.isDefault ? x : (ns.ownName(x) ?? x);
}

/** An internal routing key (or queue name, or binding key) as the vhost's clients know it. */
export function ownVhostKey(ns: NamespaceNames, k: string): string {
  if (ns.isDefault || k.charCodeAt(0) !== 0x24) return k;
  const p = ns.topicPrefix;
  if (k.startsWith(p)) return k.slice(p.length);
  const dots = p.replaceAll('/', '.');
  return k.startsWith(dots) ? k.slice(dots.length) : k;
}

/** A text (an error's) without the vhost's prefixes. */
export function ownVhostText(ns: NamespaceNames, text: string): string {
  if (ns.isDefault) return text;
  return text.replaceAll(ns.topicPrefix, '').replaceAll(ns.topicPrefix.replaceAll('/', '.'), '').replaceAll(ns.streamPrefix, '');
}

/**
 * The stream behind an internal queue name of a vhost (a stream queue: `x-queue-type: stream`): `orders` in `/`,
 * `t1~orders` for `$ns/t1/orders`. Null when the name cannot be a stream's of that vhost: a `/` name holding `~` (it
 * would name another namespace's stream), or a queue name of another vhost.
 */
export function vhostStreamOfQueue(ns: NamespaceNames, internalQueue: string): string | null {
  if (ns.isDefault) return internalQueue.includes(STREAM_SEPARATOR) ? null : internalQueue;
  const own = ns.ownName(internalQueue);
  if (own === null || own.includes(STREAM_SEPARATOR)) return null;
  return ns.stream(own);
}

/** The internal queue name a vhost's clients reach a stream by: `orders` for `orders`, `$ns/t1/orders` for `t1~orders`. */
export function vhostQueueOfStream(ns: NamespaceNames, stream: string): string | null {
  const own = ns.ownStream(stream);
  return own === null ? null : ns.name(own);
}
