/**
 * Virtual hosts as namespaces (docs/namespaces.md): the vhost a client opens is a namespace, and the names of its
 * methods are qualified on the way in and stripped on the way out here, so that declare.ts, publish.ts, consume.ts
 * and the core see internal names only (as the Kafka adapter's namespaces.ts does per API).
 *
 * - Queues and exchanges of vhost `t1` are `$ns/t1/<name>`; the default exchange stays '' and the unified topic space
 *   `amq.topic` stays one exchange: a routing key `a.b` on it is `$ns.t1.a.b` (the topic `$ns/t1/a/b`, where t1's
 *   MQTT, Kafka and NATS traffic lives), and a binding key `#` is `$ns.t1.#`. The other predeclared exchanges
 *   (amq.direct, amq.fanout, amq.headers, amq.match) are made per vhost, as `$ns/t1/amq.direct`, at its first open.
 * - A default-exchange routing key names a queue: qualified as a queue name (direct reply-to addresses excepted).
 * - Dead-lettering and alternate exchanges name exchanges (and routing keys) of the same vhost: qualified too.
 * - A client-written name starting `$ns/` (a queue, an exchange, a default-exchange routing key) is refused in every
 *   vhost with 403 ACCESS_REFUSED; so is an amq.topic key whose first word is `$ns`.
 * - Out: queue.declare-ok's name, basic.deliver / get-ok / return's exchange and routing key, a dead letter's x-death
 *   and x-first-death-* headers, and the texts of channel.close and connection.close lose the vhost's prefixes.
 * - A stream queue of vhost `t1` (`$ns/t1/orders`) is the namespace's stream `t1~orders` (channel-state.ts streamName):
 *   t1's Kafka clients read it as topic `orders`.
 * - A super stream of vhost `t1` (the exchange `$ns/t1/S`, queues `$ns/t1/S-<key>`) is the stream `t1~S` (super-stream.ts).
 */
import { randomBytes } from 'node:crypto';
import type { DeathRecord, Router } from '../../core/index.js';
import {
  NS_ROOT,
  isReservedTopicKey,
  isReservedVhostName,
  ownVhostExchange,
  ownVhostKey,
  ownVhostText,
  vhostExchange as exchange,
  vhostKey as key,
  vhostQueue as queue,
  type NamespaceNames,
} from '../../core/index.js';
import { AmqpError } from './errors.js';
import { TOPIC_EXCHANGE } from './properties.js';
import type { AmqpMethod } from './wire.js';

export { ensureVhost, VHOST_EXCHANGES } from '../../core/index.js';

function refuse(kind: string, name: string, classId: number, methodId: number): never {
  throw new AmqpError(403, `access to ${kind} '${name}' refused: the '${NS_ROOT}/' prefix is reserved`, classId, methodId);
}

function checkName(kind: string, name: string, classId: number, methodId: number): void {
  if (isReservedVhostName(name)) refuse(kind, name, classId, methodId);
}

function checkTopicKey(key: string, classId: number, methodId: number): void {
  if (isReservedTopicKey(key)) refuse('topic', key, classId, methodId);
}

/**
 * Checks and qualifies the names of one method in place (called for every vhost: in `/` only the checks run).
 * Arguments tables are copied before they change.
 */
export function qualifyMethod(ns: NamespaceNames, router: Router, m: AmqpMethod): void {
  const a = m as unknown as Record<string, unknown> & { arguments?: Record<string, unknown> };
  switch (m.name) {
    case 'exchange.declare':
    case 'exchange.delete':
      checkName('exchange', m.exchange, 40, m.name === 'exchange.declare' ? 10 : 20);
      if (ns.isDefault) return;
      if (m.name === 'exchange.declare') {
        const ae = a.arguments?.['alternate-exchange'];
        const name = typeof ae === 'string' ? ae : Buffer.isBuffer(ae) ? ae.toString() : null;
        if (name !== null) {
          checkName('exchange', name, 40, 10);
          a.arguments = { ...a.arguments, 'alternate-exchange': exchange(ns, router, name) };
        }
      }
      a.exchange = exchange(ns, router, m.exchange);
      return;
    case 'exchange.bind':
    case 'exchange.unbind': {
      const id = m.name === 'exchange.bind' ? 30 : 40;
      checkName('exchange', m.source, 40, id);
      checkName('exchange', m.destination, 40, id);
      if (m.source === TOPIC_EXCHANGE) checkTopicKey(m.routingKey, 40, id);
      if (ns.isDefault) return;
      a.source = exchange(ns, router, m.source);
      a.destination = exchange(ns, router, m.destination);
      a.routingKey = key(ns, a.source as string, m.routingKey);
      return;
    }
    case 'queue.declare': {
      checkName('queue', m.queue, 50, 10);
      if (ns.isDefault) return;
      const args = a.arguments;
      if (args !== undefined && args !== null) {
        const dlx = args['x-dead-letter-exchange'];
        const x = typeof dlx === 'string' ? dlx : Buffer.isBuffer(dlx) ? dlx.toString() : null;
        if (x !== null) {
          checkName('exchange', x, 50, 10);
          const qx = exchange(ns, router, x);
          const next: Record<string, unknown> = { ...args, 'x-dead-letter-exchange': qx };
          const rk = args['x-dead-letter-routing-key'];
          const k = typeof rk === 'string' ? rk : Buffer.isBuffer(rk) ? rk.toString() : null;
          if (k !== null) next['x-dead-letter-routing-key'] = key(ns, qx, k);
          a.arguments = next;
        }
      }
      // A server-named queue is named here, inside the vhost (the router would name it in `/`).
      if (m.queue === '' && !m.passive) a.queue = ns.name(`amq.gen-${randomBytes(16).toString('base64url')}`);
      // A reserved `amq.` name stays as written: declare.ts refuses it as in `/`.
      else if (!(m.queue.startsWith('amq.') && !m.passive)) a.queue = queue(ns, m.queue);
      return;
    }
    case 'queue.bind':
    case 'queue.unbind': {
      const id = m.name === 'queue.bind' ? 20 : 50;
      checkName('queue', m.queue, 50, id);
      checkName('exchange', m.exchange, 50, id);
      if (m.exchange === TOPIC_EXCHANGE) checkTopicKey(m.routingKey, 50, id);
      if (ns.isDefault) return;
      a.queue = queue(ns, m.queue);
      a.exchange = exchange(ns, router, m.exchange);
      a.routingKey = key(ns, a.exchange as string, m.routingKey);
      return;
    }
    case 'queue.purge':
    case 'queue.delete':
      checkName('queue', m.queue, 50, m.name === 'queue.purge' ? 30 : 40);
      if (!ns.isDefault) a.queue = queue(ns, m.queue);
      return;
    case 'basic.consume':
    case 'basic.get':
      checkName('queue', m.queue, 60, m.name === 'basic.consume' ? 20 : 70);
      if (!ns.isDefault) a.queue = queue(ns, m.queue);
      return;
    case 'basic.publish':
      checkName('exchange', m.exchange, 60, 40);
      if (m.exchange === '') checkName('queue', m.routingKey, 60, 40);
      else if (m.exchange === TOPIC_EXCHANGE) checkTopicKey(m.routingKey, 60, 40);
      if (ns.isDefault) return;
      a.exchange = exchange(ns, router, m.exchange);
      a.routingKey = key(ns, a.exchange as string, m.routingKey);
      return;
    default:
  }
}

/** An internal exchange name as the vhost's clients know it. */
export const ownExchange = ownVhostExchange;

/** An internal routing key (or queue name, or binding key) as the vhost's clients know it. */
export const ownKey = ownVhostKey;

/** Death records (x-death, x-first-death-*) naming queues, exchanges and routing keys as the vhost's clients do. */
export function ownDeaths(ns: NamespaceNames, deaths: DeathRecord[]): DeathRecord[] {
  return deaths.map((d) => ({ ...d, queue: ownKey(ns, d.queue), exchange: ownExchange(ns, d.exchange), routingKeys: d.routingKeys.map((k) => ownKey(ns, k)) }));
}

/** An error text without the vhost's prefixes. */
export const ownText = ownVhostText;

/** Outgoing methods that name things: stripped in place (a copy). */
export function stripMethod(ns: NamespaceNames, m: AmqpMethod): AmqpMethod {
  switch (m.name) {
    case 'queue.declare-ok':
      return { ...m, queue: ownKey(ns, m.queue) };
    case 'basic.return':
    case 'basic.deliver':
    case 'basic.get-ok':
      return { ...m, exchange: ownExchange(ns, m.exchange), routingKey: ownKey(ns, m.routingKey) };
    case 'channel.close':
    case 'connection.close':
      return { ...m, replyText: ownText(ns, m.replyText) };
    default:
      return m;
  }
}
