/**
 * Routing one publish: through an exchange by its type (the default exchange, direct, fanout, headers, topic; the
 * unified topic space amq.topic with its live and stream side in the Engine), exchange-to-exchange bindings and
 * alternate exchanges, to the set of destination queues and streams; then delivery to them (the free-space reserve
 * for durable queues, dead-letter cycles) and dead-lettering through a queue's dead-letter exchange. Functions over
 * a RoutingTable, which the RouterCore is; the binding entries the exchanges hold are defined here.
 */
import { FlowError } from './errors.js';
import { DEFAULT_EXCHANGE, TOPIC_SPACE, type BindingDef, type ExchangeDef, type RouteResult } from './exchanges.js';
import type { Message } from './message.js';
import { headersMatch, type HeadersPattern, type MatchRule, routingKeyLevels, ruleAccepts } from './matcher.js';
import { DEFAULT_NAMESPACE, namespaceNames, splitName } from './namespaces.js';
import type { QueueDef, QueueRuntime } from './queues.js';
import { dotsToUnified, isValidTopic, unifiedToDots } from './topic.js';
import type { Level, TopicTrie } from './trie.js';

/** What the Router needs of the Engine: the live and stream side of the unified topic space. */
export interface RouterHost {
  /**
   * Delivers a message on the unified topic space (msg.topic set, a valid MQTT topic) to live subscribers and bound
   * streams; returns how many it reached and the streams' durability.
   */
  publishUnified(msg: Message): { count: number; durable: Promise<void> | null };
  hasStream(name: string): boolean;
  /**
   * Appends a message to a stream (a stream destination of an exchange binding): to `partition` when the binding
   * pins one (STREAM_PARTITION_ARG) and the stream has it, else to the partition its key or topic picks.
   */
  appendToStream(name: string, msg: Message, partition?: number): Promise<void> | null;
  /**
   * Why durable queue writes are refused now (the broker's free-space reserve: STORAGE_FULL), or null. Asked once
   * per publish that reaches a durable queue with a persistent message.
   */
  writeRefusal(): FlowError | null;
}

export interface BindingEntry {
  readonly def: BindingDef;
  readonly id: string;
  readonly rule: MatchRule;
  readonly levels: Level[] | null;
  readonly headers: HeadersPattern | null;
  /** A binding to a stream: the partition it pins (STREAM_PARTITION_ARG), else -1. */
  readonly partition: number;
}

export interface XState {
  def: ExchangeDef;
  readonly builtin: boolean;
  /** Every binding with this exchange as source, by bindingKey. */
  readonly bindings: Map<string, BindingEntry>;
  /** direct: bindings by key. */
  readonly direct: Map<string, Set<BindingEntry>> | null;
  /** topic: bindings by parsed pattern. */
  readonly trie: TopicTrie<BindingEntry> | null;
}

/** The router's state, as routing uses it. */
export interface RoutingTable {
  readonly exchanges: Map<string, XState>;
  readonly queues: Map<string, QueueRuntime>;
  /** The unified topic space's exchange state. */
  readonly topicSpace: XState;
  readonly host: RouterHost;
}

/** The destinations one publish reached. */
class Route {
  readonly queues: QueueRuntime[] = [];
  readonly streams: string[] = [];
  /** The partition each of `streams` is appended to (-1: by key), one stream partition reached once. */
  readonly parts: number[] = [];
  readonly seen = new Set<XState>();
  live = 0;
  liveDurable: Promise<void> | null = null;
  add(q: QueueRuntime): void {
    if (!this.queues.includes(q)) this.queues.push(q);
  }
}

/**
 * True when dead-lettering `msg` into `queue` closes a cycle without a rejection in it: the message already died in
 * that queue and no death since (deaths are newest first) was a rejection. RabbitMQ drops such a message for that
 * queue ("Dead-lettering ... cycles": a message dead-lettered to the same queue twice is dropped if there were no
 * rejections in the entire cycle).
 */
export function isDeadLetterCycle(msg: Message, queue: string): boolean {
  const deaths = msg.deaths;
  if (deaths === undefined) return false;
  for (const d of deaths) {
    if (d.reason === 'rejected') return false;
    if (d.queue === queue) return true;
  }
  return false;
}

export function publishTo(t: RoutingTable, exchange: string, routingKey: string, msg: Message): RouteResult {
  const x = t.exchanges.get(exchange);
  if (!x) throw new FlowError('NOT_FOUND', `no exchange '${exchange}'`);
  // RabbitMQ: publishing to an internal exchange is 403 access-refused.
  if (x.def.internal) throw new FlowError('ACCESS_REFUSED', `cannot publish to internal exchange '${exchange}'`);
  msg.exchange = exchange;
  msg.routingKey = routingKey;
  const r = new Route();
  routeExchange(t, x, routingKey, msg, r);
  return deliver(t, r, msg, false);
}

/**
 * A publish into the unified topic space by MQTT, Kafka or NATS (msg.topic is a valid topic; its live and stream
 * side is done by the Engine): reaches the queue and exchange bindings on amq.topic. Call only when
 * topicBindings > 0.
 */
export function routeTopicSpace(t: RoutingTable, msg: Message): RouteResult {
  const r = new Route();
  r.seen.add(t.topicSpace);
  let copy: Message | null = null;
  const rk = unifiedToDots(msg.topic);
  const topic = msg.topic;
  const follow: BindingEntry[] = [];
  // Stored data re-published to an inbox (Message.guardTopic) follows only the bindings that reach its own topic
  // too: a queue bound to `_INBOX.#` must not collect a denied topic's data for whoever may read that queue.
  const guard = msg.guardTopic;
  let reach: Set<BindingEntry> | null = null;
  if (guard !== undefined) {
    const g = (reach = new Set());
    t.topicSpace.trie!.match(guard, (e, w) => {
      if (ruleAccepts(e.rule, guard, w)) g.add(e);
    });
  }
  t.topicSpace.trie!.match(topic, (e, w) => {
    if (!ruleAccepts(e.rule, topic, w)) return;
    if (reach !== null && !reach.has(e)) return;
    follow.push(e);
  });
  if (follow.length === 0) return { routed: 0, durable: null, rejected: false };
  // Queues keep the message: it gets its own payload (the adapter's may be a view into a socket buffer) and the
  // exchange and routing key AMQP consumers are told.
  copy = { ...msg, payload: Buffer.from(msg.payload), exchange: TOPIC_SPACE, routingKey: rk };
  for (const e of follow) toDestination(t, e, rk, copy, r);
  return deliver(t, r, copy, false);
}

function toDestination(t: RoutingTable, e: BindingEntry, rk: string, msg: Message, r: Route): void {
  const d = e.def;
  if (d.destinationKind === 'queue') {
    const q = t.queues.get(d.destination);
    if (q) r.add(q);
  } else if (d.destinationKind === 'exchange') {
    const x = t.exchanges.get(d.destination);
    if (x) routeExchange(t, x, rk, msg, r);
  } else {
    for (let i = 0; i < r.streams.length; i++) if (r.streams[i] === d.destination && r.parts[i] === e.partition) return;
    r.streams.push(d.destination);
    r.parts.push(e.partition);
  }
}

/** Routes through one exchange (and, recursively, the exchanges bound to it and its alternate exchange). */
function routeExchange(t: RoutingTable, x: XState, rk: string, msg: Message, r: Route): void {
  // Exchange-to-exchange bindings may form cycles: each exchange routes a message once (RabbitMQ).
  if (r.seen.has(x)) return;
  r.seen.add(x);
  let matched = 0;
  const visit = (e: BindingEntry) => {
    matched++;
    toDestination(t, e, rk, msg, r);
  };
  if (x.def.name === DEFAULT_EXCHANGE) {
    // Spec 3.1.3.1: the default exchange routes to the queue whose name is the routing key.
    const q = t.queues.get(rk);
    if (q) {
      matched++;
      r.add(q);
    }
  } else if (x.def.type === 'direct') {
    const set = x.direct!.get(rk);
    if (set) for (const e of set) visit(e);
  } else if (x.def.type === 'fanout') {
    for (const e of x.bindings.values()) visit(e);
  } else if (x.def.type === 'headers') {
    for (const e of x.bindings.values()) if (headersMatch(e.headers!, msg.headers, msg.amqpHeaderClasses)) visit(e);
  } else if (x === t.topicSpace) {
    // A namespace's message (an AMQP vhost's, namespaces.ts) reaching amq.topic through an exchange binding, an
    // alternate or a dead-letter exchange stays in its namespace's topics: its key is qualified as the adapter's are.
    const ns = msg.namespace;
    if (ns !== undefined && !rk.startsWith(`$ns.${ns}.`)) rk = `$ns.${ns}.${rk}`;
    const topic = rk.length === 0 ? '' : dotsToUnified(rk);
    // A routing key whose unified form MQTT cannot carry (empty, or with `+`/`#` characters) reaches AMQP and
    // NATS rule bindings only: not live MQTT subscribers, streams or MQTT rule bindings.
    const mqttOk = isValidTopic(topic);
    if (mqttOk) {
      // The message is this publish's own (publishTo's caller handed it over, dead letters are copies).
      if (msg.topic !== topic) msg.topic = topic;
      const res = t.host.publishUnified(msg);
      r.live += res.count;
      matched += res.count;
      if (res.durable) r.liveDurable = r.liveDurable === null ? res.durable : Promise.all([r.liveDurable, res.durable]).then(() => undefined);
    }
    const fn = (e: BindingEntry, w: boolean) => {
      if ((e.rule === 'mqtt' && !mqttOk) || !ruleAccepts(e.rule, topic, w)) return;
      visit(e);
    };
    if (rk.length === 0) x.trie!.matchLevels([], fn);
    else x.trie!.match(topic, fn);
  } else {
    x.trie!.matchLevels(routingKeyLevels(rk), visit);
  }
  // RabbitMQ alternate exchanges: what this exchange's own bindings did not match goes to its alternate exchange
  // (which need not exist; then the message is unroutable here).
  if (matched === 0 && x.def.alternateExchange !== undefined) {
    const ae = t.exchanges.get(x.def.alternateExchange);
    if (ae) routeExchange(t, ae, rk, msg, r);
  }
}

function deliver(t: RoutingTable, r: Route, msg: Message, deadLettered: boolean): RouteResult {
  let durable: Promise<void>[] | null = r.liveDurable ? [r.liveDurable] : null;
  let written: Promise<void>[] | null = null;
  let rejected = false;
  let routed = r.live;
  // The free-space reserve covers durable queues as it covers streams: a persistent message is not taken by a
  // durable queue while writes are refused; its durability rejects with the refusal (STORAGE_FULL, retriable), so
  // a publisher confirm is a nack and an MQTT PUBACK carries the error, and the adapters raise their alarms.
  let refusal: FlowError | null | undefined;
  for (const q of r.queues) {
    if (deadLettered && isDeadLetterCycle(msg, q.def.name)) continue;
    if (q.def.durable && msg.persistent !== false && (refusal ??= t.host.writeRefusal()) !== null) {
      routed++;
      (durable ??= []).push(Promise.reject(refusal));
      continue;
    }
    const res = q.enqueue(msg);
    routed++;
    if (res.rejected) rejected = true;
    if (res.durable) (durable ??= []).push(res.durable);
    if (res.written) (written ??= []).push(res.written);
  }
  for (let i = 0; i < r.streams.length; i++) {
    const d = t.host.appendToStream(r.streams[i], msg, r.parts[i]);
    routed++;
    if (d) (durable ??= []).push(d);
  }
  const out: RouteResult = {
    routed,
    durable: durable === null ? null : durable.length === 1 ? durable[0] : Promise.all(durable).then(() => undefined),
    rejected,
  };
  if (written !== null) out.written = written.length === 1 ? written[0] : Promise.allSettled(written).then(() => undefined);
  return out;
}

/** QueueHooks.deadLetter: routes a dead-lettered message through its queue's dead-letter exchange. */
export function deadLetter(t: RoutingTable, def: QueueDef, msg: Message): Promise<void> | null {
  const name = def.arguments.deadLetterExchange;
  if (name === undefined) return null;
  const x = t.exchanges.get(name);
  // RabbitMQ: a dead-letter exchange that does not exist drops the message silently.
  if (!x) return null;
  // The namespace is the dead-lettering queue's (its name holds it): the publisher's mark (Message.namespace) is not
  // stored with queued messages, so after a restart, or for a message another broker queued, it is absent.
  const { namespace } = splitName(def.name);
  const rk = deadLetterKey(def, namespace, x, msg.routingKey ?? '');
  const m: Message = { ...msg, exchange: name, routingKey: rk };
  if (namespace === DEFAULT_NAMESPACE) delete m.namespace;
  else m.namespace = namespace;
  const r = new Route();
  routeExchange(t, x, rk, m, r);
  const res = deliver(t, r, m, true);
  return res.durable;
}

/**
 * The key a queue's dead letter is routed with on its dead-letter exchange `x`. An `x-dead-letter-routing-key` was
 * qualified for `x` by the adapter when the queue was declared. Otherwise the key is the message's own, as the
 * exchange it was published to knew it: in a namespace, a default-exchange key is a qualified queue name
 * (`$ns/t1/q`) and an amq.topic key starts `$ns.t1.`. It is brought back to the key the namespace's clients wrote
 * and qualified again for `x` as the adapter qualifies keys (src/protocols/amqp/vhost.ts): so a message published
 * by queue name dead-letters into amq.topic as `$ns.t1.q`, not `$ns.t1.$ns/t1/q`, and reaches a direct exchange's
 * binding key `q`.
 */
function deadLetterKey(def: QueueDef, namespace: string, x: XState, rk: string): string {
  if (def.arguments.deadLetterRoutingKey !== undefined || namespace === DEFAULT_NAMESPACE) return rk;
  const names = namespaceNames(namespace);
  const slashes = names.topicPrefix;
  const dots = slashes.replaceAll('/', '.');
  const own = rk.startsWith(slashes) || rk.startsWith(dots) ? rk.slice(slashes.length) : rk;
  if (x.def.name === DEFAULT_EXCHANGE) return slashes + own;
  if (x.def.name === TOPIC_SPACE) return dots + own;
  return own;
}
