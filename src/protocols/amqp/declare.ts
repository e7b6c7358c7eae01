/**
 * Declarations on an AMQP channel through the core's Router: exchange.declare / delete / bind / unbind, and
 * queue.declare (classic, quorum accepted as durable, and stream queues: a FlowMQ stream of one partition, or a
 * super stream's partition queue: super-stream-declare.ts) / bind / unbind / purge / delete, with RabbitMQ's checks
 * and errors, and the x-arguments of queue.declare.
 */
import type { ExchangeType, QueueArguments } from '../../core/index.js';
import { isFlowError } from '../../core/index.js';
import { AmqpError } from './errors.js';
import { declareReplyQueue } from './direct-reply.js';
import { REPLY_PREFIX, REPLY_QUEUE } from './reply-registry.js';
import { tableToJson } from './properties.js';
import type { AmqpMethod, MethodOf } from './wire.js';
import { fieldBoolean, fieldInteger, fieldString, type FieldTable } from './codec/index.js';
import { AmqpChannelState } from './channel-state.js';
import { checkEquivalent, streamQueueSettings } from './stream-args.js';
import { partitionQueue, partitionTarget, superStreamPartitions } from './super-stream.js';
import { adoptStream, bindPartition, checkStreamType, declareExistingPartition, declareNewPartition, deletePartition } from './super-stream-declare.js';

const EXCHANGE_TYPES: ReadonlySet<string> = new Set(['direct', 'fanout', 'topic', 'headers']);
const OVERFLOWS: ReadonlySet<string> = new Set(['drop-head', 'reject-publish', 'reject-publish-dlx']);

export async function exchangeDeclare(chan: AmqpChannelState, m: MethodOf<'exchange.declare'>): Promise<void> {
  if (m.exchange === '') {
    if (!m.passive) throw new AmqpError(403, 'operation not permitted on the default exchange', 40, 10);
  } else {
    chan.authorize(m.passive ? 'describe' : 'create', 'exchange', m.exchange, 'exchange.declare');
    if (!m.passive && !EXCHANGE_TYPES.has(m.type)) throw new AmqpError(503, `invalid exchange type '${m.type}'`, 40, 10);
    // A FlowMQ stream of several partitions is a super stream's exchange until one is declared (super-stream.ts).
    if (m.passive && chan.router.getExchange(m.exchange) === undefined && superStreamPartitions(chan, m.exchange) !== null) {
      if (!m.noWait && !chan.closing) chan.conn.sendMethod(chan.ch, { name: 'exchange.declare-ok' } as AmqpMethod);
      return;
    }
    const args = (m.arguments ?? {}) as FieldTable;
    const ae = args['alternate-exchange'];
    const alternateExchange = ae === undefined ? undefined : fieldString(ae);
    await chan.router
      .declareExchange(
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
      )
      .catch((err: unknown) => {
        if (m.passive && isFlowError(err, 'NOT_FOUND')) throw new AmqpError(404, `no exchange '${m.exchange}' in vhost '${chan.conn.vhost}'`, 40, 10);
        throw err;
      });
    if (!m.passive) await adoptStream(chan, m.exchange);
  }
  if (!m.noWait && !chan.closing) chan.conn.sendMethod(chan.ch, { name: 'exchange.declare-ok' } as AmqpMethod);
}

export async function exchangeDelete(chan: AmqpChannelState, m: MethodOf<'exchange.delete'>): Promise<void> {
  if (m.exchange === '') throw new AmqpError(403, 'operation not permitted on the default exchange', 40, 20);
  chan.authorize('delete', 'exchange', m.exchange, 'exchange.delete');
  await chan.router.deleteExchange(m.exchange, { ifUnused: m.ifUnused }).catch((err: unknown) => {
    // Deleting what is not there succeeds (RabbitMQ 3.x).
    if (!isFlowError(err, 'NOT_FOUND')) throw err;
  });
  if (!m.noWait && !chan.closing) chan.conn.sendMethod(chan.ch, { name: 'exchange.delete-ok' } as AmqpMethod);
}

export async function exchangeBind(chan: AmqpChannelState, m: MethodOf<'exchange.bind'> | MethodOf<'exchange.unbind'>): Promise<void> {
  if (m.source === '' || m.destination === '')
    throw new AmqpError(403, 'operation not permitted on the default exchange', 40, m.name === 'exchange.bind' ? 30 : 40);
  chan.authorize('subscribe', 'exchange', m.source, m.name);
  chan.authorize('alter', 'exchange', m.destination, m.name);
  chan.authorizeTopicBinding(m.source, m.routingKey, m.name, m.name === 'exchange.bind');
  const b = {
    source: m.source,
    destinationKind: 'exchange' as const,
    destination: m.destination,
    key: m.routingKey,
    rule: 'amqp' as const,
    arguments: tableToJson((m.arguments ?? {}) as FieldTable),
  };
  if (m.name === 'exchange.bind') await chan.router.bind(b);
  else await chan.router.unbind(b);
  if (!m.noWait && !chan.closing) chan.conn.sendMethod(chan.ch, { name: m.name === 'exchange.bind' ? 'exchange.bind-ok' : 'exchange.unbind-ok' } as AmqpMethod);
}

export async function queueDeclare(chan: AmqpChannelState, m: MethodOf<'queue.declare'>): Promise<void> {
  // An empty name asks for a server-named queue (amq.gen-..., named by the router).
  const name = m.queue;
  if (name === REPLY_QUEUE || name.startsWith(REPLY_PREFIX)) return declareReplyQueue(chan, m);
  if (name === '') {
    if (m.passive) throw new AmqpError(404, `no queue '' in vhost '${chan.conn.vhost}'`, 50, 10);
  } else if (name.startsWith('amq.') && !m.passive) {
    throw new AmqpError(403, `queue name '${name}' contains reserved prefix 'amq.*'`, 50, 10);
  }
  const args = (m.arguments ?? {}) as FieldTable;
  const action = m.passive ? 'describe' : 'create';
  if (name !== '' && chan.router.getQueue(name) === undefined && chan.streamEntry(name) === undefined) {
    // A super stream's partition queue `<stream>-<key>` (super-stream.ts): one that exists, or a new one.
    const p = partitionQueue(chan, name);
    if (p !== null) return declareExistingPartition(chan, m, p);
    const t = m.passive || fieldString(args['x-queue-type'] as never) !== 'stream' ? null : partitionTarget(chan, name);
    if (t !== null) return declareNewPartition(chan, m, t.stream, t.key);
  }
  // A stream queue declared again as another type (or none): 406, as RabbitMQ (not a classic queue beside it).
  if (!m.passive && name !== '' && chan.router.getQueue(name) === undefined && chan.streamEntry(name) !== undefined) {
    checkStreamType(name, args, chan.conn.vhost);
  }
  if (m.passive || fieldString(args['x-queue-type'] as never) === 'stream') {
    const stream = name === '' ? null : chan.streamEntry(name);
    if (stream !== undefined && stream !== null && chan.router.getQueue(name) === undefined) {
      chan.authorize(action, 'stream', name, 'queue.declare');
      // RabbitMQ compares the arguments of a declare with the queue's (a passive declare's are ignored).
      if (!m.passive) checkEquivalent(stream.def, args, streamQueueSettings(args, name, chan.conn.vhost), chan.conn.vhost);
      return streamDeclared(chan, m, name);
    }
    if (!m.passive) {
      if (name !== '') chan.authorize('create', 'stream', name, 'queue.declare');
      return declareStream(chan, m, name);
    }
  }
  // A server-named exclusive queue is reachable by this connection only: nothing to check. A server-named shared
  // one is checked as `amq.gen-*` (its name is not known before it exists).
  if (name !== '') chan.authorize(action, 'queue', name, 'queue.declare');
  else if (!m.exclusive && !m.passive) chan.authorize('create', 'queue', 'amq.gen-*', 'queue.declare');
  const def = {
    name,
    durable: m.durable,
    exclusiveOwner: m.exclusive ? chan.conn.id : null,
    autoDelete: m.autoDelete,
    arguments: m.passive ? {} : queueArguments(args, name, m.durable, m.exclusive),
    rawArguments: tableToJson(args),
  };
  const h = await chan.router.declareQueue(def, { passive: m.passive, owner: chan.conn.id }).catch((err: unknown) => {
    if (isFlowError(err, 'NOT_FOUND')) throw new AmqpError(404, `no queue '${name}' in vhost '${chan.conn.vhost}'`, 50, 10);
    if (isFlowError(err, 'RESOURCE_LOCKED'))
      throw new AmqpError(405, `cannot obtain exclusive access to locked queue '${name}' in vhost '${chan.conn.vhost}'`, 50, 10);
    throw err;
  });
  chan.lastQueue = h.def.name;
  if (!m.noWait && !chan.closing) {
    const s = h.stats();
    chan.conn.sendMethod(chan.ch, { name: 'queue.declare-ok', queue: h.def.name, messageCount: s.ready, consumerCount: s.consumers } as AmqpMethod);
  }
}

/** queue.declare of a stream queue: RabbitMQ's constraints, then the stream (one partition). */
export async function declareStream(chan: AmqpChannelState, m: MethodOf<'queue.declare'>, name: string): Promise<void> {
  if (name === '' || !m.durable || m.exclusive || m.autoDelete) {
    throw new AmqpError(406, `invalid property for stream queue '${name}': a stream is named, durable, not exclusive, not auto-delete`, 50, 10);
  }
  if (chan.router.getQueue(name) !== undefined)
    throw new AmqpError(406, `inequivalent arg 'x-queue-type' for queue '${name}' in vhost '${chan.conn.vhost}'`, 50, 10);
  const args = (m.arguments ?? {}) as FieldTable;
  const settings = streamQueueSettings(args, name, chan.conn.vhost);
  // The vhost's stream (`t1~orders` for t1's `orders`, core vhosts.ts); a name no stream of the vhost can have is 406.
  const stream = chan.streamName(name);
  if (stream === null) throw new AmqpError(406, `stream queue name '${name}': not a valid stream name`, 50, 10);
  try {
    await chan.engine.createStream({ name: stream, partitions: 1, ...settings, ...(chan.conn.names.isDefault ? {} : { namespaced: true }) });
  } catch (err) {
    if (isFlowError(err, 'INVALID_ARGUMENT')) throw new AmqpError(406, `stream queue name '${name}': ${(err as Error).message}`, 50, 10);
    if (!isFlowError(err, 'ALREADY_EXISTS')) throw err;
    // Declared by someone else meanwhile: the same equivalence check as a declare of an existing stream.
    const def = chan.engine.getAnyStream(stream);
    if (def !== undefined) checkEquivalent(def.def, args, settings, chan.conn.vhost);
  }
  return streamDeclared(chan, m, name);
}

export function streamDeclared(chan: AmqpChannelState, m: MethodOf<'queue.declare'>, name: string): void {
  chan.lastQueue = name;
  if (m.noWait || chan.closing) return;
  const o = chan.engine.offsets(chan.streamName(name)!, 0);
  chan.conn.sendMethod(chan.ch, { name: 'queue.declare-ok', queue: name, messageCount: o.highWatermark - o.logStartOffset, consumerCount: 0 } as AmqpMethod);
}

export async function queueBind(chan: AmqpChannelState, m: MethodOf<'queue.bind'> | MethodOf<'queue.unbind'>): Promise<void> {
  const bind = m.name === 'queue.bind';
  if (m.exchange === '') throw new AmqpError(403, 'operation not permitted on the default exchange', 50, bind ? 20 : 50);
  const part = chan.partitionOf(m.queue);
  if (part !== null) return bindPartition(chan, m, part);
  const stream = chan.streamOf(m.queue);
  chan.authorize('alter', stream !== null ? 'stream' : 'queue', stream ?? chan.queueName(m.queue), m.name);
  chan.authorize('subscribe', 'exchange', m.exchange, m.name);
  const dest = stream ?? chan.queueOf(m.queue, m.name).def.name;
  // §queue.bind: an empty queue name and routing key mean the last declared queue for both.
  const key = m.queue === '' && m.routingKey === '' ? dest : m.routingKey;
  chan.authorizeTopicBinding(m.exchange, key, m.name, bind);
  const b = {
    source: m.exchange,
    destinationKind: stream !== null ? ('stream' as const) : ('queue' as const),
    destination: dest,
    key,
    rule: 'amqp' as const,
    arguments: tableToJson((m.arguments ?? {}) as FieldTable),
  };
  if (bind) await chan.router.bind(b);
  else await chan.router.unbind(b);
  if (chan.closing) return;
  if (bind) {
    if (!(m as MethodOf<'queue.bind'>).noWait) chan.conn.sendMethod(chan.ch, { name: 'queue.bind-ok' } as AmqpMethod);
  } else {
    chan.conn.sendMethod(chan.ch, { name: 'queue.unbind-ok' } as AmqpMethod);
  }
}

export async function queuePurge(chan: AmqpChannelState, m: MethodOf<'queue.purge'>): Promise<void> {
  // RabbitMQ checks read on queue.purge (rabbit_channel): here the subscribe action, as basic.get and basic.consume.
  chan.authorize('subscribe', 'queue', chan.queueName(m.queue), 'queue.purge');
  const h = chan.queueOf(m.queue, 'queue.purge');
  const n = await chan.router.purgeQueue(h.def.name);
  if (!m.noWait && !chan.closing) chan.conn.sendMethod(chan.ch, { name: 'queue.purge-ok', messageCount: n } as AmqpMethod);
}

export async function queueDelete(chan: AmqpChannelState, m: MethodOf<'queue.delete'>): Promise<void> {
  const name = m.queue === '' ? chan.lastQueue : m.queue;
  if (name === null) throw new AmqpError(404, 'no previously declared queue (queue.delete names none)', 50, 40);
  const h = chan.router.getQueue(name);
  const part = h === undefined ? chan.partitionOf(name) : null;
  if (part !== null) {
    const n = await deletePartition(chan, part);
    if (!m.noWait && !chan.closing) chan.conn.sendMethod(chan.ch, { name: 'queue.delete-ok', messageCount: n } as AmqpMethod);
    return;
  }
  const stream = h === undefined ? chan.streamEntry(name) : undefined;
  chan.authorize('delete', stream !== undefined ? 'stream' : 'queue', name, 'queue.delete');
  let n = 0;
  if (stream !== undefined) {
    const o = chan.engine.offsets(stream.def.name, 0);
    n = o.highWatermark - o.logStartOffset;
    await chan.engine.deleteStream(stream.def.name);
  } else if (h !== undefined) {
    const owner = h.def.exclusiveOwner;
    if (owner !== null && owner !== chan.conn.id)
      throw new AmqpError(405, `cannot obtain exclusive access to locked queue '${name}' in vhost '${chan.conn.vhost}'`, 50, 40);
    n = await chan.router.deleteQueue(name, { ifUnused: m.ifUnused, ifEmpty: m.ifEmpty }).catch((err: unknown) => {
      if (isFlowError(err, 'NOT_FOUND')) return 0;
      throw err;
    });
  }
  if (!m.noWait && !chan.closing) chan.conn.sendMethod(chan.ch, { name: 'queue.delete-ok', messageCount: n } as AmqpMethod);
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
