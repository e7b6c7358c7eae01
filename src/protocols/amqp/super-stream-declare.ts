/**
 * The AMQP methods on a super stream's objects (super-stream.ts says what they are): queue.declare of a partition
 * queue (new, existing or passive), queue.bind / unbind of one, queue.delete of one, and exchange.declare of a
 * super-stream exchange over a stream that already has partitions. Called from declare.ts once it knows the name
 * is no queue or stream of its own.
 */
import { isFlowError, MAX_PARTITIONS, STREAM_PARTITION_ARG, type BindingDef, type StreamDef } from '../../core/index.js';
import { AmqpError } from './errors.js';
import type { AmqpMethod, MethodOf } from './wire.js';
import { fieldInteger, fieldString, type FieldTable } from './codec/index.js';
import type { AmqpChannelState } from './channel-state.js';
import { checkEquivalent, streamQueueSettings } from './stream-args.js';
import { tableToJson } from './properties.js';
import {
  isPartitionBinding,
  isSuperStreamExchange,
  newPartitionIndex,
  partitionBinding,
  PARTITION_QUEUE_ARG,
  streamOfExchange,
  superStreamPartitions,
  type SuperPartition,
  type SuperStreamCtx,
} from './super-stream.js';

const STREAM_ONLY = 'a stream is named, durable, not exclusive, not auto-delete';

/** RabbitMQ's checks of a stream queue's properties and type, for a partition queue. */
function checkStreamQueue(chan: AmqpChannelState, m: MethodOf<'queue.declare'>, args: FieldTable): void {
  if (!m.durable || m.exclusive || m.autoDelete) throw new AmqpError(406, `invalid property for stream queue '${m.queue}': ${STREAM_ONLY}`, 50, 10);
  checkStreamType(m.queue, args, chan.conn.vhost);
}

/** An existing stream queue is declared again with `x-queue-type: stream` (RabbitMQ: 406 for none or another). */
export function checkStreamType(queue: string, args: FieldTable, vhost: string): void {
  const type = args['x-queue-type'];
  if (type !== undefined && fieldString(type) === 'stream') return;
  const got = type === undefined ? 'none' : `the value '${fieldString(type) ?? String(type)}'`;
  throw new AmqpError(
    406,
    `inequivalent arg 'x-queue-type' for queue '${queue}' in vhost '${vhost}': received ${got} but current is the value 'stream' of type 'longstr'`,
    50,
    10,
  );
}

function declareOk(chan: AmqpChannelState, m: MethodOf<'queue.declare'>, p: SuperPartition): void {
  chan.lastQueue = m.queue;
  if (m.noWait || chan.closing) return;
  const o = chan.engine.offsets(p.stream, p.partition);
  chan.conn.sendMethod(chan.ch, { name: 'queue.declare-ok', queue: m.queue, messageCount: o.highWatermark - o.logStartOffset, consumerCount: 0 } as AmqpMethod);
}

/** queue.declare (passive or not) of an existing partition queue: RabbitMQ's equivalence check on the stream's settings. */
export function declareExistingPartition(chan: AmqpChannelState, m: MethodOf<'queue.declare'>, p: SuperPartition): void {
  chan.authorize(m.passive ? 'describe' : 'create', 'stream', p.stream, 'queue.declare');
  if (!m.passive) {
    const args = (m.arguments ?? {}) as FieldTable;
    checkStreamQueue(chan, m, args);
    const def = chan.engine.getAnyStream(p.stream)!.def;
    checkEquivalent(renamed(def, m.queue), args, streamQueueSettings(args, m.queue, chan.conn.vhost), chan.conn.vhost);
  }
  declareOk(chan, m, p);
}

/** The stream's definition under a partition queue's name, for the queue's own error texts. */
function renamed(def: StreamDef, queue: string): StreamDef {
  return { ...def, name: queue };
}

/**
 * queue.declare of a new stream queue `<S>-<key>` while `S` is a super-stream exchange: a partition of the stream
 * `S` (made, or grown by one partition), and the binding that names it.
 */
export async function declareNewPartition(chan: AmqpChannelState, m: MethodOf<'queue.declare'>, s: string, key: string): Promise<void> {
  const args = (m.arguments ?? {}) as FieldTable;
  // `s` is the exchange; its stream is `s` in `/`, `t1~S` for vhost t1's `$ns/t1/S` (super-stream.ts).
  const stream = streamOfExchange(s);
  chan.authorize('create', 'stream', stream, 'queue.declare');
  checkStreamQueue(chan, m, args);
  const settings = streamQueueSettings(args, m.queue, chan.conn.vhost);
  // One declare of a super stream's partition at a time in this broker: two new queues must not take one index.
  const p = await serialized(s, async () => {
    // Declared meanwhile (the queue waited its turn behind its own twin): as a declare of an existing partition.
    const known = superStreamPartitions(chan, s)?.find((x) => x.key === key);
    if (known !== undefined) {
      const def = chan.engine.getAnyStream(stream)?.def;
      if (def !== undefined) checkEquivalent(renamed(def, m.queue), args, settings, chan.conn.vhost);
      return known;
    }
    const taken = new Set((superStreamPartitions(chan, s) ?? []).map((x) => x.partition));
    const index = newPartitionIndex(key, taken, MAX_PARTITIONS);
    if (index >= MAX_PARTITIONS) throw new AmqpError(406, `super stream '${s}' has ${MAX_PARTITIONS} partitions already`, 50, 10);
    try {
      const existing = chan.engine.getAnyStream(stream);
      if (existing === undefined)
        await chan.engine.createStream({ name: stream, partitions: index + 1, ...settings, ...(stream === s ? {} : { namespaced: true }) });
      else {
        // One stream, one set of settings: a partition declared with other ones than the stream has is 406 (RabbitMQ
        // would let each partition stream differ).
        checkEquivalent(renamed(existing.def, m.queue), args, settings, chan.conn.vhost);
        if (existing.def.partitions <= index) await chan.engine.addPartitions(stream, index + 1);
      }
    } catch (err) {
      // Made or grown by another broker meanwhile: grown once more if it still lacks the partition.
      const now = chan.engine.getAnyStream(stream);
      if (!isFlowError(err, 'ALREADY_EXISTS') && !(isFlowError(err, 'INVALID_ARGUMENT') && now !== undefined && now.def.partitions > index)) {
        if (isFlowError(err, 'INVALID_ARGUMENT')) throw new AmqpError(406, `super stream '${s}': ${(err as Error).message}`, 50, 10);
        throw err;
      }
      if (now !== undefined && now.def.partitions <= index) await chan.engine.addPartitions(stream, index + 1);
    }
    await chan.router.bind(partitionBinding(s, key, index));
    return { stream, exchange: s, partition: index, key, bound: true };
  });
  declareOk(chan, m, p);
}

/** The partition declares running in this process, by super stream (their tails). */
const declaring = new Map<string, Promise<unknown>>();

/** Runs `fn` after every earlier call for the same super stream has settled. */
function serialized<T>(s: string, fn: () => Promise<T>): Promise<T> {
  const prev = declaring.get(s) ?? Promise.resolve();
  const run = prev.then(fn, fn);
  const tail = run.then(
    () => undefined,
    () => undefined,
  );
  declaring.set(s, tail);
  void tail.then(() => {
    if (declaring.get(s) === tail) declaring.delete(s);
  });
  return run;
}

/**
 * queue.bind / queue.unbind of a partition queue. Its own key on its own super-stream exchange: that binding exists
 * since the declare (unbinding it is refused: delete the queue instead). Any other binding (another key, another
 * exchange) is a binding to the stream pinned to the partition, with the client's arguments; on its own exchange an
 * `x-stream-partition-order` other than the partition is refused (here the order is the partition it routes to).
 */
export async function bindPartition(chan: AmqpChannelState, m: MethodOf<'queue.bind'> | MethodOf<'queue.unbind'>, p: SuperPartition): Promise<void> {
  const bind = m.name === 'queue.bind';
  chan.authorize('alter', 'stream', p.stream, m.name);
  chan.authorize('subscribe', 'exchange', m.exchange, m.name);
  const args = (m.arguments ?? {}) as FieldTable;
  const queue = `${p.exchange}-${p.key}`;
  const methodId = bind ? 20 : 50;
  const order = args[STREAM_PARTITION_ARG];
  if (m.exchange === p.exchange && order !== undefined && fieldInteger(order) !== p.partition) {
    throw new AmqpError(
      406,
      `inequivalent arg '${STREAM_PARTITION_ARG}' for the binding of queue '${queue}': it is partition ${p.partition} of super stream '${p.stream}'`,
      50,
      methodId,
    );
  }
  if (m.exchange === p.exchange && m.routingKey === p.key) {
    if (!bind)
      throw new AmqpError(406, `the binding of partition queue '${queue}' to its super stream '${p.stream}' cannot be removed; delete the queue`, 50, methodId);
    return sendBound(chan, m);
  }
  const b: BindingDef = {
    source: m.exchange,
    destinationKind: 'stream',
    destination: p.stream,
    key: m.routingKey,
    rule: 'amqp',
    arguments: { ...tableToJson(args), [STREAM_PARTITION_ARG]: p.partition },
  };
  // Only a declare names a partition queue.
  delete b.arguments[PARTITION_QUEUE_ARG];
  if (bind) await chan.router.bind(b);
  else await chan.router.unbind(b);
  sendBound(chan, m);
}

function sendBound(chan: AmqpChannelState, m: MethodOf<'queue.bind'> | MethodOf<'queue.unbind'>): void {
  if (chan.closing) return;
  if (m.name === 'queue.bind') {
    if (!m.noWait) chan.conn.sendMethod(chan.ch, { name: 'queue.bind-ok' } as AmqpMethod);
  } else chan.conn.sendMethod(chan.ch, { name: 'queue.unbind-ok' } as AmqpMethod);
}

/**
 * queue.delete of a partition queue; returns the messages it held. A declared partition loses its bindings (key
 * unroutable, queue gone for AMQP) and its records stay in the stream, readable by Kafka, until the last partition
 * queue of the super stream is deleted, which deletes the stream. A partition of the derived view (a FlowMQ stream
 * with no exchange of its name) has no existence of its own: deleting it deletes the stream, every partition.
 */
export async function deletePartition(chan: AmqpChannelState, p: SuperPartition): Promise<number> {
  chan.authorize('delete', 'stream', p.stream, 'queue.delete');
  return removePartition(chan, p);
}

/** deletePartition without the permission check (the management API checks its caller's own). */
export async function removePartition(ctx: SuperStreamCtx, p: SuperPartition): Promise<number> {
  const o = ctx.engine.offsets(p.stream, p.partition);
  const n = o.highWatermark - o.logStartOffset;
  if (!p.bound) {
    await ctx.engine.deleteStream(p.stream);
    return n;
  }
  for (const b of ctx.router.listBindings()) {
    if (b.destinationKind === 'stream' && b.destination === p.stream && isPinnedTo(b.arguments, p.partition)) await ctx.router.unbind(b);
  }
  if (!ctx.router.listBindings().some((b) => isPartitionBinding(b, p.exchange))) await ctx.engine.deleteStream(p.stream).catch(ignoreNotFound);
  return n;
}

function isPinnedTo(args: Readonly<Record<string, unknown>>, partition: number): boolean {
  const v = args[STREAM_PARTITION_ARG];
  return v === partition || v === String(partition);
}

function ignoreNotFound(err: unknown): void {
  if (!isFlowError(err, 'NOT_FOUND')) throw err;
}

/**
 * After exchange.declare of a super-stream exchange `s` (new, or equivalent): when the stream `s` already exists
 * (a Kafka topic, `flowmq stream create`) and has no partition queue yet, each partition i gets the key `i` and the
 * queue `s-i`, as the derived view showed them.
 */
export async function adoptStream(chan: AmqpChannelState, s: string): Promise<void> {
  if (!isSuperStreamExchange(chan.router.getExchange(s))) return;
  const e = chan.engine.getAnyStream(streamOfExchange(s));
  if (e === undefined || (superStreamPartitions(chan, s) ?? []).length > 0) return;
  for (let i = 0; i < e.def.partitions; i++) await chan.router.bind(partitionBinding(s, String(i), i));
}
