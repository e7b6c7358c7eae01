/**
 * RabbitMQ management JSON (3.x field names and types) built from the routing core's queues, exchanges and bindings
 * and the AMQP module's connections and channels, and the rates its `*_details` objects carry.
 *
 * A virtual host is a FlowMQ namespace: the default namespace's objects are in "/", another namespace's in the vhost
 * of its name, with the names its clients write (core/vhosts.ts).
 *
 * Rates: RabbitMQ's "basic" rates mode reports, per figure, the change per second over the last sampling interval
 * (5 s by default). The Rates sampler does the same: every 5 s it keeps the figures it reports rates of (queue depths
 * and message counters, connection bytes, totals), and a rate is (latest − previous) / interval.
 */
import { createHash } from 'node:crypto';
import { pinnedPartition, type BindingDef, type ExchangeDef, type QueueCounters, type QueueDef, type QueueHandle } from '../../core/index.js';
import { DEFAULT_NAMESPACE, namespaceNames, splitName, splitStreamName } from '../../core/namespaces.js';
import { isReservedVhostName, ownVhostExchange, ownVhostKey, vhostQueueOfStream } from '../../core/vhosts.js';
import { notFound } from './errors.js';
import type { AmqpChannelView, AmqpConnectionView, AmqpManagementView, AmqpStreamQueueView } from './types.js';

export const VHOST = '/';

/** The vhost of a core queue or exchange name (vhost = namespace, docs/namespaces.md) and its name there. */
export function vhostOfName(internal: string): { vhost: string; name: string } {
  const { namespace, name } = splitName(internal);
  return namespace === DEFAULT_NAMESPACE ? { vhost: VHOST, name: internal } : { vhost: namespace, name };
}

/** The vhost label of a namespace. */
export function vhostOfNamespace(ns: string): string {
  return ns === DEFAULT_NAMESPACE ? VHOST : ns;
}

/**
 * A queue or exchange name of a vhost as the core knows it ('' and amq.topic are shared by every vhost). A name in the
 * reserved `$ns/` space (another vhost's internal name) is 404 in every vhost, as one nobody has.
 */
export function internalName(vhost: string, name: string): string {
  if (isReservedVhostName(name)) throw notFound();
  if (vhost === VHOST || vhost === DEFAULT_NAMESPACE || name === '' || name === 'amq.topic') return name;
  return namespaceNames(vhost).name(name);
}

/**
 * A binding's vhost: its destination's, or its source's when the destination is amq.topic (the default exchange and
 * amq.topic are shared by every vhost).
 */
export function bindingVhost(b: BindingDef): string {
  if (b.destinationKind === 'stream') return vhostOfNamespace(splitStreamName(b.destination).namespace);
  if (b.destinationKind === 'exchange' && b.destination === 'amq.topic') return vhostOfName(b.source).vhost;
  return vhostOfName(b.destination).vhost;
}

/** Arguments naming exchanges and keys (dead-lettering, alternate exchange) as the clients of the object's vhost do. */
export function ownArguments(internal: string, args: Record<string, unknown>): Record<string, unknown> {
  const { namespace } = splitName(internal);
  if (namespace === DEFAULT_NAMESPACE) return args;
  const ns = namespaceNames(namespace);
  let out = args;
  for (const k of ['x-dead-letter-exchange', 'alternate-exchange']) {
    const v = out[k];
    if (typeof v === 'string') out = { ...out, [k]: ownVhostExchange(ns, v) };
  }
  const rk = out['x-dead-letter-routing-key'];
  if (typeof rk === 'string') out = { ...out, 'x-dead-letter-routing-key': ownVhostKey(ns, rk) };
  return out;
}

/** A binding or routing key as the clients of `vhost` write it. */
function ownKey(vhost: string, key: string): string {
  if (vhost === VHOST || key.charCodeAt(0) !== 0x24) return key;
  for (const p of [`$ns/${vhost}/`, `$ns.${vhost}.`]) if (key.startsWith(p)) return key.slice(p.length);
  return key;
}
export const SAMPLE_MS = 5000;

/** Two samples of named figures; rate(key) is the change per second between them. */
export class Rates {
  private prev = new Map<string, number>();
  private last = new Map<string, number>();
  private prevAt = 0;
  private lastAt = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly collect: (put: (key: string, value: number) => void) => void) {}

  start(): void {
    this.sample();
    this.timer = setInterval(() => this.sample(), SAMPLE_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  sample(now = Date.now()): void {
    this.prev = this.last;
    this.prevAt = this.lastAt;
    const next = new Map<string, number>();
    this.collect((k, v) => next.set(k, v));
    this.last = next;
    this.lastAt = now;
  }

  /** `{ rate }` of a figure: 0.0 until two samples hold it. */
  details(key: string): { rate: number } {
    const a = this.prev.get(key);
    const b = this.last.get(key);
    if (a === undefined || b === undefined || this.lastAt <= this.prevAt) return { rate: 0.0 };
    return { rate: Math.round(((b - a) * 1000 * 10) / (this.lastAt - this.prevAt)) / 10 };
  }
}

const NO_COUNTERS: QueueCounters = { publish: 0, deliver: 0, deliverNoAck: 0, get: 0, getNoAck: 0, getEmpty: 0, redeliver: 0, ack: 0 };

/** The counters RabbitMQ's message_stats names, from a queue's. */
export function messageStats(c: QueueCounters): Record<string, number> {
  return {
    publish: c.publish,
    deliver: c.deliver,
    deliver_no_ack: c.deliverNoAck,
    get: c.get,
    get_no_ack: c.getNoAck,
    get_empty: c.getEmpty,
    deliver_get: c.deliver + c.deliverNoAck + c.get + c.getNoAck,
    redeliver: c.redeliver,
    ack: c.ack,
  };
}

/** message_stats with `<name>_details` after each counter (rates keyed `<prefix>.<name>`). */
export function withDetails(stats: Record<string, number>, rates: Rates, prefix: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(stats)) {
    out[k] = v;
    out[`${k}_details`] = rates.details(`${prefix}.${k}`);
  }
  return out;
}

export function countersOf(h: QueueHandle | undefined): QueueCounters {
  return h?.counters ?? NO_COUNTERS;
}

/**
 * The overview's message_stats: what went into AMQP channels (publish, confirm, return_unroutable, drop_unroutable:
 * the AMQP module's counts, as RabbitMQ counts channel publishes) and what queues gave out (deliver..., get...,
 * redeliver, ack: summed over `queues`).
 */
export function overviewStats(queues: Iterable<QueueHandle | undefined>, amqp: AmqpManagementView | undefined): Record<string, number> {
  const t = amqp?.totals() ?? { publish: 0, confirm: 0, returnUnroutable: 0, dropUnroutable: 0 };
  const out: Record<string, number> = { publish: t.publish, confirm: t.confirm, return_unroutable: t.returnUnroutable, drop_unroutable: t.dropUnroutable };
  for (const h of queues) {
    for (const [k, v] of Object.entries(messageStats(countersOf(h)))) if (k !== 'publish') out[k] = (out[k] ?? 0) + v;
  }
  return out;
}

/** Figures the sampler keeps for one queue. */
export function queueFigures(h: QueueHandle, put: (key: string, value: number) => void): void {
  const s = h.stats();
  const p = `q.${h.def.name}`;
  put(`${p}.messages`, s.ready + s.unacked);
  put(`${p}.messages_ready`, s.ready);
  put(`${p}.messages_unacknowledged`, s.unacked);
  for (const [k, v] of Object.entries(messageStats(countersOf(h)))) put(`${p}.ms.${k}`, v);
}

function queueType(def: QueueDef): string {
  const t = def.rawArguments['x-queue-type'];
  return t === 'quorum' ? 'quorum' : 'classic';
}

/** What /api/queues shows of the policies that apply to a queue (policy-store.ts). */
export interface QueuePolicyView {
  policy: string | null;
  operator_policy: string | null;
  effective_policy_definition: Record<string, unknown>;
}

const NO_POLICY: QueuePolicyView = { policy: null, operator_policy: null, effective_policy_definition: {} };

export function queueJson(def: QueueDef, h: QueueHandle | undefined, node: string, rates: Rates, pol: QueuePolicyView = NO_POLICY): Record<string, unknown> {
  const s = h?.stats() ?? { ready: 0, unacked: 0, bytes: 0, consumers: 0 };
  const p = `q.${def.name}`;
  const c = countersOf(h);
  const out: Record<string, unknown> = {
    arguments: ownArguments(def.name, def.rawArguments),
    auto_delete: def.autoDelete,
    consumers: s.consumers,
    durable: def.durable,
    effective_policy_definition: pol.effective_policy_definition,
    exclusive: def.exclusiveOwner !== null,
    exclusive_consumer_tag: null,
    message_bytes: s.bytes,
    message_bytes_ready: s.bytes,
    message_bytes_unacknowledged: 0,
    messages: s.ready + s.unacked,
    messages_details: rates.details(`${p}.messages`),
    messages_ready: s.ready,
    messages_ready_details: rates.details(`${p}.messages_ready`),
    messages_unacknowledged: s.unacked,
    messages_unacknowledged_details: rates.details(`${p}.messages_unacknowledged`),
    name: vhostOfName(def.name).name,
    node,
    operator_policy: pol.operator_policy,
    policy: pol.policy,
    single_active_consumer_tag: null,
    state: 'running',
    type: queueType(def),
    vhost: vhostOfName(def.name).vhost,
  };
  // RabbitMQ leaves message_stats out of a queue nothing went through yet.
  if (c.publish + c.deliver + c.deliverNoAck + c.get + c.getNoAck + c.ack > 0) out.message_stats = withDetails(messageStats(c), rates, `${p}.ms`);
  return out;
}

/** Figures the sampler keeps for one stream queue (a stream's records are all ready: nothing is unacked). */
export function streamQueueFigures(v: AmqpStreamQueueView, put: (key: string, value: number) => void): void {
  put(`q.${v.name}.messages`, v.messages);
  put(`q.${v.name}.messages_ready`, v.messages);
  put(`q.${v.name}.messages_unacknowledged`, 0);
}

/**
 * A stream queue (or super-stream partition queue) as RabbitMQ 3.10 lists one: type "stream", its members (this
 * node), `messages` = `messages_ready` = the records in its partition, no byte counts. `consumers`: AMQP consumers
 * reading it. No policy applies to a stream queue in FlowMQ (policies act on queues).
 */
export function streamQueueJson(v: AmqpStreamQueueView, consumers: number, node: string, rates: Rates): Record<string, unknown> {
  const p = `q.${v.name}`;
  return {
    arguments: v.arguments,
    auto_delete: false,
    consumers,
    durable: true,
    effective_policy_definition: {},
    exclusive: false,
    members: [node],
    messages: v.messages,
    messages_details: rates.details(`${p}.messages`),
    messages_ready: v.messages,
    messages_ready_details: rates.details(`${p}.messages_ready`),
    messages_unacknowledged: 0,
    messages_unacknowledged_details: rates.details(`${p}.messages_unacknowledged`),
    name: vhostOfName(v.name).name,
    node,
    online: [node],
    operator_policy: null,
    policy: null,
    readers: { [node]: consumers },
    state: 'running',
    type: 'stream',
    vhost: vhostOfName(v.name).vhost,
  };
}

/** The partition queue (`S-<key>`) of partition `partition` of super stream `stream`, if there is one. */
export type PartitionQueueOf = (stream: string, partition: number) => string | undefined;

/** A PartitionQueueOf over the stream queues the AMQP module lists. */
export function partitionQueues(views: readonly AmqpStreamQueueView[]): PartitionQueueOf {
  const m = new Map<string, string>();
  for (const v of views) if (v.superStream !== null) m.set(`${v.stream}\0${v.partition}`, v.name);
  return (stream, partition) => m.get(`${stream}\0${partition}`);
}

export function exchangeJson(def: ExchangeDef): Record<string, unknown> {
  return {
    arguments: ownArguments(
      def.name,
      def.alternateExchange !== undefined ? { 'alternate-exchange': def.alternateExchange, ...def.rawArguments } : def.rawArguments,
    ),
    auto_delete: def.autoDelete,
    durable: def.durable,
    internal: def.internal,
    name: vhostOfName(def.name).name,
    type: def.type,
    user_who_performed_action: 'rmq-internal',
    vhost: vhostOfName(def.name).vhost,
  };
}

/**
 * A binding's `properties_key`, which names it in DELETE /api/bindings/...: the routing key (%-encoded, "~" for an
 * empty one) when it has no arguments, else the key, "~" and a hash of the arguments. RabbitMQ hashes the Erlang
 * term; FlowMQ's hash is its own (SHA-256 of the JSON), as opaque to clients, who only send back what they read.
 */
export function propertiesKey(key: string, args: Record<string, unknown> | undefined): string {
  const hasArgs = args !== undefined && Object.keys(args).length > 0;
  const quoted = encodeURIComponent(key).replace(/~/g, '%7E');
  if (!hasArgs) return key === '' ? '~' : quoted;
  const hash = createHash('sha256').update(JSON.stringify(args)).digest('base64url').slice(0, 8);
  return `${quoted}~${hash}`;
}

/**
 * A binding's destination and arguments as RabbitMQ shows them: a binding to a super stream's partition (the core's
 * `x-stream-partition-order` binding to the stream `S`) has the partition queue `S-<key>` as its destination, as
 * RabbitMQ binds the exchange to that queue; FlowMQ's own binding arguments (`x-flowmq-*`) are left out.
 */
export function bindingView(b: BindingDef, partitionQueue?: PartitionQueueOf): { destination: string; arguments: Record<string, unknown> } {
  const raw = (b.arguments ?? {}) as Record<string, unknown>;
  if (b.destinationKind !== 'stream') return { destination: b.destination, arguments: raw };
  const args: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(raw)) if (!k.startsWith('x-flowmq-')) args[k] = v;
  const p = pinnedPartition(raw);
  const q = p >= 0 ? partitionQueue?.(b.destination, p) : undefined;
  // A vhost's stream `t1~orders` is its stream queue `$ns/t1/orders` (core vhosts.ts).
  const { namespace } = splitStreamName(b.destination);
  const own = namespace === DEFAULT_NAMESPACE ? b.destination : (vhostQueueOfStream(namespaceNames(namespace), b.destination) ?? b.destination);
  return { destination: q ?? own, arguments: args };
}

export function bindingJson(b: BindingDef, partitionQueue?: PartitionQueueOf): Record<string, unknown> {
  const { destination, arguments: args } = bindingView(b, partitionQueue);
  const vhost = bindingVhost(b);
  const key = ownKey(vhost, b.key);
  return {
    source: vhostOfName(b.source).name,
    vhost,
    destination: vhostOfName(destination).name,
    destination_type: b.destinationKind === 'exchange' ? 'exchange' : 'queue',
    routing_key: key,
    arguments: args,
    properties_key: propertiesKey(key, args),
  };
}

/** The implicit binding of every queue to the default exchange that RabbitMQ lists first. */
export function defaultBindingJson(queue: string): Record<string, unknown> {
  return bindingJson({ source: '', destinationKind: 'queue', destination: queue, key: queue } as BindingDef);
}

/** RabbitMQ's connection name: "peer:port -> local:port". */
export function connectionName(c: AmqpConnectionView): string {
  const peer = c.peerHost.includes(':') ? `[${c.peerHost}]` : c.peerHost;
  const local = c.host.includes(':') ? `[${c.host}]` : c.host;
  return `${peer}:${c.peerPort} -> ${local}:${c.port}`;
}

export function connectionFigures(c: AmqpConnectionView, put: (key: string, value: number) => void): void {
  put(`c.${c.id}.recv_oct`, c.recvOct);
  put(`c.${c.id}.send_oct`, c.sendOct);
}

export function connectionJson(c: AmqpConnectionView, node: string, rates: Rates): Record<string, unknown> {
  const name = connectionName(c);
  const provided = c.clientProperties.connection_name;
  return {
    auth_mechanism: c.authMechanism,
    channel_max: c.channelMax,
    channels: c.channels.length,
    client_properties: c.clientProperties,
    connected_at: c.connectedAt,
    frame_max: c.frameMax,
    host: c.host,
    name,
    node,
    peer_cert_issuer: null,
    peer_cert_subject: null,
    peer_cert_validity: null,
    peer_host: c.peerHost,
    peer_port: c.peerPort,
    port: c.port,
    protocol: 'AMQP 0-9-1',
    recv_cnt: c.recvCnt,
    recv_oct: c.recvOct,
    recv_oct_details: rates.details(`c.${c.id}.recv_oct`),
    send_cnt: c.sendCnt,
    send_oct: c.sendOct,
    send_oct_details: rates.details(`c.${c.id}.send_oct`),
    send_pend: 0,
    ssl: c.tls,
    ssl_cipher: null,
    ssl_hash: null,
    ssl_key_exchange: null,
    ssl_protocol: null,
    state: c.state,
    timeout: c.heartbeatSec,
    type: 'network',
    user: c.user,
    user_provided_name: typeof provided === 'string' ? provided : null,
    user_who_performed_action: c.user,
    vhost: vhostOfNamespace(c.namespace),
  };
}

export function channelJson(c: AmqpConnectionView, ch: AmqpChannelView, node: string): Record<string, unknown> {
  const name = connectionName(c);
  return {
    acks_uncommitted: ch.uncommittedAcks,
    confirm: ch.confirm,
    connection_details: { name, peer_host: c.peerHost, peer_port: c.peerPort },
    consumer_count: ch.consumers.length,
    global_prefetch_count: ch.globalPrefetchCount,
    messages_unacknowledged: ch.unacked,
    messages_uncommitted: ch.uncommittedMessages,
    messages_unconfirmed: ch.unconfirmed,
    name: `${name} (${ch.number})`,
    node,
    number: ch.number,
    pending_raft_commands: 0,
    prefetch_count: ch.prefetchCount,
    state: c.state === 'running' ? 'running' : c.state,
    transactional: ch.transactional,
    user: c.user,
    user_who_performed_action: c.user,
    vhost: vhostOfNamespace(c.namespace),
  };
}

/** The consumers of a channel as /api/consumers and a queue's consumer_details list them. */
export function consumerJson(c: AmqpConnectionView, ch: AmqpChannelView, index: number): Record<string, unknown> {
  const k = ch.consumers[index];
  const name = connectionName(c);
  return {
    arguments: k.priority !== 0 ? { 'x-priority': k.priority } : {},
    ack_required: k.ackRequired,
    active: true,
    activity_status: 'up',
    channel_details: {
      connection_name: name,
      name: `${name} (${ch.number})`,
      node: '',
      number: ch.number,
      peer_host: c.peerHost,
      peer_port: c.peerPort,
      user: c.user,
    },
    consumer_tag: k.tag,
    exclusive: false,
    prefetch_count: k.prefetchCount,
    queue: vhostOfName(k.queue),
  };
}
