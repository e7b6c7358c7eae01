/**
 * RabbitMQ super streams on FlowMQ: a super stream is ONE FlowMQ stream `S` of N partitions, seen by AMQP 0-9-1 as
 * RabbitMQ lays one out (`rabbitmq-streams add_super_stream S --partitions N` or `--routing-keys a,b,c`):
 *
 * - the direct exchange `S` with the argument `x-super-stream: true`;
 * - one stream queue per partition, `S-<key>` (`S-0`..`S-(N-1)`, or `S-a`, `S-b`...), which reads that partition;
 * - a binding from the exchange to each partition queue, routing key `<key>`, argument `x-stream-partition-order`
 *   = the partition index (RabbitMQ's order of the partition streams; FlowMQ's Kafka partition number).
 *
 * Two ways to have one, one rule for naming:
 *
 * - **Declared over AMQP** (by hand, or by tools that declare the same objects): the exchange is a real exchange of
 *   the router; declaring a stream queue `S-<key>` while the super-stream exchange `S` exists makes it a partition
 *   of the stream `S` (created with the first one, grown by one partition per new queue): its index is `<key>` when
 *   that is a whole number not taken yet, else the lowest index without a queue. The queue's identity is the router
 *   binding `S` → stream `S`, key `<key>`, `x-stream-partition-order: <index>` (persisted with the other bindings, so
 *   key-named partitions survive restarts); the core appends what that binding routes to that partition
 *   (core/exchanges.ts STREAM_PARTITION_ARG). The declare makes the binding at once; the client's own queue.bind with
 *   the same key (and order) is then accepted as already there.
 * - **Made by FlowMQ** (a Kafka topic or `flowmq stream create` with N >= 2 partitions) and no exchange named `S`: the
 *   view is derived, with keys `0`..`N-1` (exchange `S`, queues `S-i`), until an exchange `S` is declared, which then
 *   gets one binding per partition (its existing data stays where it is).
 *
 * A router object named like a partition queue (a queue or stream `S-0` of its own) wins over the partition view.
 */
import {
  DEFAULT_NAMESPACE,
  STREAM_PARTITION_ARG,
  namespaceNames,
  pinnedPartition,
  splitName,
  vhostStreamOfQueue,
  type BindingDef,
  type Engine,
  type ExchangeDef,
  type Router,
} from '../../core/index.js';

/** The exchange argument that marks a super stream's exchange (RabbitMQ's). */
export const SUPER_STREAM_ARG = 'x-super-stream';
/**
 * The argument FlowMQ adds to the binding a partition queue's declare makes: the queue it stands for. It tells that
 * binding from further bindings of the same partition (other keys, as RabbitMQ allows), which route to the partition
 * but name no queue.
 */
export const PARTITION_QUEUE_ARG = 'x-flowmq-partition-queue';

/** What the super-stream view needs: the engine's streams and the router's exchanges and bindings. */
export interface SuperStreamCtx {
  readonly engine: Engine;
  readonly router: Router;
}

/**
 * The FlowMQ stream of a super-stream exchange: the exchange's own name in `/`; in vhost `t1` the exchange `$ns/t1/S`
 * is the namespace's stream `t1~S` (core vhosts.ts), t1's Kafka topic `S`.
 */
export function streamOfExchange(x: string): string {
  const { namespace } = splitName(x);
  if (namespace === DEFAULT_NAMESPACE) return x;
  return vhostStreamOfQueue(namespaceNames(namespace), x) ?? x;
}

/** One partition of a super stream as AMQP sees it. */
export interface SuperPartition {
  /** The super stream's FlowMQ stream (`S`; `t1~S` in vhost t1). */
  readonly stream: string;
  /** Its exchange (`S`; `$ns/t1/S` in vhost t1): its partition queues are `<exchange>-<key>`. */
  readonly exchange: string;
  readonly partition: number;
  /** Its routing key; the partition queue is `<stream>-<key>`. */
  readonly key: string;
  /** True when a router binding names it (declared over AMQP); false for the derived view. */
  readonly bound: boolean;
}

export function isSuperStreamExchange(def: ExchangeDef | undefined): boolean {
  const v = def?.rawArguments[SUPER_STREAM_ARG];
  return v === true || v === 'true' || v === 1;
}

/** Whether a binding is one that names a partition of super stream `s` (its own exchange to its own stream). */
export function isPartitionBinding(b: BindingDef, s: string): boolean {
  return (
    b.source === s &&
    b.destinationKind === 'stream' &&
    b.destination === streamOfExchange(s) &&
    pinnedPartition(b.arguments) >= 0 &&
    b.arguments[PARTITION_QUEUE_ARG] === `${s}-${b.key}`
  );
}

/**
 * The partitions of super stream `name` by index (one key each: the first binding found for an index), or null when
 * `name` is no super stream. A declared super stream with no partition queue yet has none.
 */
export function superStreamPartitions(ctx: SuperStreamCtx, name: string): SuperPartition[] | null {
  const x = ctx.router.getExchange(name);
  if (x !== undefined) {
    if (!isSuperStreamExchange(x)) return null;
    const byIndex = new Map<number, SuperPartition>();
    const stream = streamOfExchange(name);
    for (const b of ctx.router.listBindings()) {
      if (!isPartitionBinding(b, name)) continue;
      const p = pinnedPartition(b.arguments);
      if (!byIndex.has(p)) byIndex.set(p, { stream, exchange: name, partition: p, key: b.key, bound: true });
    }
    return [...byIndex.values()].sort((a, b) => a.partition - b.partition);
  }
  const e = ctx.engine.getStream(name);
  if (e === undefined || e.def.partitions < 2) return null;
  return Array.from({ length: e.def.partitions }, (_, i) => ({ stream: name, exchange: name, partition: i, key: String(i), bound: false }));
}

/**
 * The super-stream partition a queue name designates (`<stream>-<key>`), or null. The longest super-stream name wins
 * when several prefixes are super streams. Callers look for a queue or stream of that exact name first.
 */
export function partitionQueue(ctx: SuperStreamCtx, queue: string): SuperPartition | null {
  for (let j = queue.lastIndexOf('-'); j > 0; j = queue.lastIndexOf('-', j - 1)) {
    const key = queue.slice(j + 1);
    if (key === '') continue;
    const parts = superStreamPartitions(ctx, queue.slice(0, j));
    const p = parts?.find((x) => x.key === key);
    if (p !== undefined) return p;
  }
  return null;
}

/**
 * The super-stream exchange a new stream queue `queue` would be a partition of: the longest prefix `S` (before a
 * `-`) naming a router exchange with `x-super-stream: true`, with the key after it; null when there is none.
 */
export function partitionTarget(ctx: SuperStreamCtx, queue: string): { stream: string; key: string } | null {
  for (let j = queue.lastIndexOf('-'); j > 0; j = queue.lastIndexOf('-', j - 1)) {
    const key = queue.slice(j + 1);
    if (key !== '' && isSuperStreamExchange(ctx.router.getExchange(queue.slice(0, j)))) return { stream: queue.slice(0, j), key };
  }
  return null;
}

/**
 * The index a new partition queue `<S>-<key>` gets: `key` itself when it is a whole number below `max` not taken yet
 * (`add_super_stream --partitions N` names them so), else the lowest index not taken.
 */
export function newPartitionIndex(key: string, taken: ReadonlySet<number>, max: number): number {
  if (/^(0|[1-9]\d{0,8})$/.test(key)) {
    const n = Number(key);
    if (n < max && !taken.has(n)) return n;
  }
  let i = 0;
  while (taken.has(i)) i++;
  return i;
}

/** The router binding that makes partition `index` of super stream `s` reachable by `key` (and names its queue). */
export function partitionBinding(s: string, key: string, index: number): BindingDef {
  return {
    source: s,
    destinationKind: 'stream',
    destination: streamOfExchange(s),
    key,
    rule: 'amqp',
    arguments: { [STREAM_PARTITION_ARG]: index, [PARTITION_QUEUE_ARG]: `${s}-${key}` },
  };
}
