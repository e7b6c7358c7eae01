/**
 * Live subscriptions: what a subscriber is and subscribes with, the table of subscriptions and shared groups (a trie
 * of filters) and delivery through it (each subscriber called once per message, a shared group's member picked round
 * robin, authorization's admit predicate, the `$` rule), with cluster mode's LiveHook (forwarding, remote interest).
 * Functions over a LiveTable, which the Engine is.
 */
import type { Message, QoS } from './message.js';
import { mqttAccepts, parseBindingKey } from './matcher.js';
import { isReservedTopic } from './namespaces.js';
import { validateFilter } from './topic.js';
import type { TopicTrie } from './trie.js';

/** A consumer of live messages: one per protocol connection or session. */
export interface Subscriber {
  /** Unique among live subscribers, e.g. "mqtt:client-7". */
  readonly id: string;
  /**
   * Called synchronously once per matching publish with every subscription of this subscriber that matched.
   * Must not throw and must not block: an adapter queues or drops according to its own flow control.
   */
  deliver(msg: Message, subs: Subscription[]): void;
  /**
   * Optional: false while the subscriber cannot take messages right away (e.g. an offline persistent
   * session). A shared group then prefers its available members.
   */
  isAvailable?(): boolean;
}

export interface SubscribeOptions {
  qos: QoS;
  /** Shared-subscription group: each message goes to one member of the group. */
  group?: string;
  /** Protocol-specific options (e.g. MQTT v5 no-local, subscription identifier); opaque to the core. */
  data?: unknown;
  /**
   * How the filter is written and matched (matcher.ts). 'mqtt' (default): an MQTT filter on unified topics, with
   * the `$` rule. 'nats': a NATS subject (`a.*.>`; `>` one or more tokens, so `a.>` does not match `a`), matched
   * against unified topics through the separator swap, without the `$` rule (NATS `>` matches `$JS.API.INFO`).
   */
  rule?: 'mqtt' | 'nats';
  /**
   * Set when authorization lets the subscriber receive only some of the topics its filter matches (a wildcard
   * reaching into a denied topic): a delivery on a topic it refuses is skipped for this subscription (a shared
   * group whose picked member refuses it skips that message). Unset: every match is delivered, at no cost.
   */
  admit?: (topic: string) => boolean;
  /**
   * Cluster mode: a service of this broker's own (the JetStream API), serving the clients of this broker only: not
   * announced to the other brokers, and messages forwarded from another broker are not delivered to it (the broker
   * they were published on serves them). Without effect on a single broker.
   */
  local?: boolean;
  /**
   * The namespace (other than `default`) of a 'nats' subscription the NATS adapter qualified as `$ns.<ns>.<subject>`
   * (namespaces.ts natsSubject): only with it may a NATS subject start with `$ns` (matcher.ts parseBindingKey).
   */
  namespace?: string;
  /**
   * Cluster mode: the key of a subscriber that stores what it receives (an MQTT persistent session, on a QoS 1/2
   * subscription that is not shared). Announced to the other brokers, so that a QoS 1/2 publish elsewhere is
   * acknowledged only once this subscriber's broker stored it (the LiveHook's `acked`). Without effect on a single broker.
   */
  durable?: string;
  /**
   * Whether this subscription stands for interest in `topic` (hasLiveSubscribers: no-responders, a push consumer's
   * binding). Set by a namespace link (links.ts), whose interest is the importer's, as nats-server's shadow
   * subscriptions are; unset: the subscription is interest itself.
   */
  interest?: (topic: string) => boolean;
}

/**
 * What a broker's storing subscribers (MQTT persistent sessions) tell the cluster's live side (Engine.durable), to
 * serve a publish forwarded by another broker that waits for them: whether this broker holds a session now, and when
 * what was delivered to it is stored.
 */
export interface DurableSubscribers {
  /**
   * 'owned' with a token when this broker owns and serves the subscriber `key` now (it stores what it is given);
   * 'elsewhere' when it does not (the publisher retries at its owner); 'nothing' when it owns `key` but has nothing
   * that stores (the session ended or is not persistent any more: nothing to wait for).
   */
  holds(key: string): { state: 'owned'; token: unknown } | { state: 'elsewhere' | 'nothing' };
  /** Settles once the store writes of what was delivered so far have settled; null when none is pending. */
  written(): Promise<void> | null;
  /** After written(): still held under the same token, and no write of it failed since the token was taken. */
  stored(key: string, token: unknown): boolean;
}

/** A forwarded message that waits for storing subscribers (Engine.deliverForwarded). */
export interface ForwardedDurable {
  /** Storing subscribers (DurableSubscribers keys) it is for. */
  names: ReadonlySet<string>;
  /** Storing subscribers it must not reach here (the publishing broker holds it for them). */
  skip: ReadonlySet<string> | null;
  /** Only `names` get it (a retry: the other subscribers had it). */
  only: boolean;
}

export interface Subscription {
  /** The filter as given (an MQTT filter, or a NATS subject with rule 'nats'). */
  readonly filter: string;
  readonly subscriber: Subscriber;
  readonly options: SubscribeOptions;
}

export interface SharedGroup {
  key: string;
  members: Subscription[];
  next: number;
  /** The members' rule is 'nats': no MQTT `$` rule. */
  nats: boolean;
}

/**
 * What one publish reached, filled by Engine.publish when asked: NATS answers a request nobody receives with a
 * no-responders status, and a JetStream publish is acknowledged with the stream sequence its message got.
 */
export interface PublishInfo {
  /** Live subscribers that received it. */
  delivered: number;
  /**
   * Stream appends, with the offset each was given (assigned synchronously, before the write is durable). Cluster
   * mode, an append forwarded to the partition's owner: `offset` is -1 and `later` resolves with it once durable.
   */
  captured: Array<{ stream: string; partition: number; offset: number; later?: Promise<number> }>;
  /** Queues and exchange destinations reached through the unified topic space (amq.topic bindings). */
  queued: number;
}

export function newPublishInfo(): PublishInfo {
  return { delivered: 0, captured: [], queued: 0 };
}

/**
 * Cluster mode's live side (implemented in src/cluster/live.ts; null on a single broker, where nothing below costs
 * anything). The core stays free of I/O: it tells the hook which live interest exists here and hands it each message
 * published through this broker; the hook forwards (batched, over the brokers' channel) to the brokers that want it.
 * A message forwarded from another broker comes back in through Engine.deliverForwarded and never reaches the hook.
 */
export interface LiveHook {
  /**
   * A live subscription appeared here (called once per subscription, the hook counts): its filter as given, its rule
   * and its shared group. `key` identifies the interest (liveKey): equal for subscriptions that match alike.
   */
  subscribed(key: string, filter: string, rule: 'mqtt' | 'nats', group: string | undefined, durable?: string): void;
  unsubscribed(key: string, filter: string, rule: 'mqtt' | 'nats', group: string | undefined, durable?: string): void;
  /**
   * How many interest entries other brokers hold, plus the storing subscribers the hook holds messages for: 0 means no
   * forwarding at all (checked before every forward).
   */
  readonly remote: number;
  /**
   * A message published through this broker (once, before local delivery): queues it for every broker that wants it
   * and returns how many. Shared groups with members on several brokers are served by one broker per message; the
   * groups given to another broker are left in `skip` (their liveKey) until the next call, for local delivery to pass.
   * `acked` (a QoS 1/2 publish whose publisher waits): the storing subscribers of other brokers it reaches must have
   * stored it before `takeAcked()`'s promise resolves.
   */
  forward(msg: Message, acked: boolean): number;
  readonly skip: ReadonlySet<string> | null;
  /**
   * During an acked forward: the storing subscriber `key` of this broker has earlier messages held by the hook (its
   * owner changed, they wait for it): true when the hook took this message for it too, to keep their order.
   */
  divert(key: string, msg: Message): boolean;
  /** The wait of the last acked forward (null: nothing to wait for), cleared by the call. */
  takeAcked(): Promise<void> | null;
  /**
   * The storing subscriber `key` of this broker is leaving it (`on`: from now until `moving(key, false)`), handed over
   * to another broker or lost with this broker's lease: acked messages that reach it from now on are held for its
   * next owner instead of being delivered here, and the other brokers keep its entries for that owner meanwhile.
   */
  moving?(key: string, on: boolean): void;
  /** True when another broker has live interest matching `topic` (NATS no-responders, JetStream push consumers). */
  wants(topic: string): boolean;
  /** The retained message of `topic` was written to (or, null, deleted from) the store. */
  retainedChanged(topic: string, msg: Message | null): void;
}

/**
 * The identity of live interest: rule, shared group (empty: none) and filter. A shared group's members on every
 * broker share it, so it names the group cluster-wide.
 */
export function liveKey(rule: 'mqtt' | 'nats' | undefined, group: string | undefined, filter: string): string {
  return `${rule === 'nats' ? 'n' : 'm'}${group === undefined ? '-' : `g${group}`}\u0000${filter}`;
}

/** The engine's live side, as the functions below use it. */
export interface LiveTable {
  readonly subs: TopicTrie<Subscription | SharedGroup>;
  readonly groups: Map<string, SharedGroup>;
  readonly stats: { delivered: number };
  readonly live: LiveHook | null;
}

export function subscribe(t: LiveTable, filter: string, subscriber: Subscriber, options: SubscribeOptions): Subscription {
  const nats = options.rule === 'nats';
  // A NATS subject is parsed into unified levels once here (and again at unsubscribe): `>` is the trie's REST.
  const pattern = nats ? parseBindingKey(filter, 'nats', true, options.namespace ?? null) : (validateFilter(filter), filter);
  const sub: Subscription = { filter, subscriber, options };
  if (t.live !== null && options.local !== true)
    t.live.subscribed(liveKey(options.rule, options.group, filter), filter, nats ? 'nats' : 'mqtt', options.group, options.durable);
  if (options.group === undefined) {
    t.subs.add(pattern, sub);
    return sub;
  }
  const key = groupKey(sub);
  let g = t.groups.get(key);
  if (!g) {
    g = { key, members: [], next: 0, nats };
    t.groups.set(key, g);
    t.subs.add(pattern, g);
  }
  g.members.push(sub);
  return sub;
}

export function unsubscribe(t: LiveTable, sub: Subscription): void {
  const pattern = sub.options.rule === 'nats' ? parseBindingKey(sub.filter, 'nats', true, sub.options.namespace ?? null) : sub.filter;
  if (sub.options.group === undefined) {
    if (t.subs.remove(pattern, sub) && t.live !== null && sub.options.local !== true)
      t.live.unsubscribed(
        liveKey(sub.options.rule, undefined, sub.filter),
        sub.filter,
        sub.options.rule === 'nats' ? 'nats' : 'mqtt',
        undefined,
        sub.options.durable,
      );
    return;
  }
  const key = groupKey(sub);
  const g = t.groups.get(key);
  if (!g) return;
  const i = g.members.indexOf(sub);
  if (i < 0) return;
  g.members.splice(i, 1);
  if (t.live !== null && sub.options.local !== true) t.live.unsubscribed(key, sub.filter, sub.options.rule === 'nats' ? 'nats' : 'mqtt', sub.options.group);
  if (g.members.length === 0) {
    t.groups.delete(key);
    t.subs.remove(pattern, g);
  }
}

/**
 * Delivers a message to matching live subscriptions; each subscriber is called once. Returns how many, plus the
 * brokers it was forwarded to (cluster mode). `forwarded`: the message was published on another broker, which
 * forwarded it here with the shared groups this broker serves for it (their liveKey); it goes no further; `durable`
 * (a forward that waits for storing subscribers) says which of them it is for. `acked`: published here by a client
 * that waits for the storing subscribers of other brokers (the hook's `acked`).
 */
export function deliverLive(t: LiveTable, msg: Message, forwarded?: ReadonlySet<string>, durable?: ForwardedDurable, acked = false): number {
  // Cluster mode, a message published here: the brokers that want it get it (batched by the hook); shared groups
  // spanning brokers are served by the one broker the hook picked. Nothing at all while no other broker has interest.
  let skip: ReadonlySet<string> | null = null;
  let remote = 0;
  let divert: LiveHook | null = null;
  const hook = t.live;
  if (forwarded === undefined && hook !== null && hook.remote > 0) {
    remote = hook.forward(msg, acked);
    skip = hook.skip;
    if (acked && msg.qos > 0) divert = hook;
  }
  const only = durable !== undefined && durable.only;
  let single: Subscription | undefined;
  let many: Map<Subscriber, Subscription[]> | undefined;
  const add = (s: Subscription) => {
    if (single === undefined && many === undefined) {
      single = s;
      return;
    }
    if (many === undefined) {
      many = new Map([[single!.subscriber, [single!]]]);
      single = undefined;
    }
    const list = many.get(s.subscriber);
    if (list) list.push(s);
    else many.set(s.subscriber, [s]);
  };
  // [MQTT-4.7.2-1]: live subscriptions are MQTT filters; their first-level wildcards do not match `$` topics.
  const dollar = msg.topic.charCodeAt(0) === 0x24;
  t.subs.match(msg.topic, (v, firstWild) => {
    // The `$ns` rule (namespaces.ts) holds for NATS subscriptions too: `>` of one namespace is not another's.
    if (firstWild && dollar && (!('members' in v ? v.nats : v.options.rule === 'nats') || isReservedTopic(msg.topic))) return;
    if ('members' in v) {
      if (only) return;
      if (forwarded !== undefined ? !forwarded.has(v.key) : skip !== null && skip.has(v.key)) return;
      const s = pickMember(v, undefined);
      if (s !== undefined && admitted(s.options, msg)) add(s);
      return;
    }
    const d = v.options.durable;
    if (durable !== undefined) {
      // A forward that waits for storing subscribers: those named get it, those held by the publisher do not.
      if (d !== undefined ? !durable.names.has(d) && (only || (durable.skip !== null && durable.skip.has(d))) : only) return;
    } else if (d !== undefined && divert !== null && divert.divert(d, msg)) return;
    if (admitted(v.options, msg) && (forwarded === undefined || v.options.local !== true)) add(v);
  });
  if (single !== undefined) {
    t.stats.delivered++;
    single.subscriber.deliver(msg, [single]);
    return 1 + remote;
  } else if (many !== undefined) {
    for (const [subscriber, list] of many) {
      t.stats.delivered++;
      subscriber.deliver(msg, list);
    }
    return (many as Map<Subscriber, Subscription[]>).size + remote;
  }
  return remote;
}

/**
 * Hands a message that one member of a shared group received but will not process (its connection went
 * away) to another available member of the same group. Returns false when there is none.
 */
export function redeliverShared(t: LiveTable, sub: Subscription, msg: Message): boolean {
  if (sub.options.group === undefined) return false;
  const g = t.groups.get(groupKey(sub));
  if (!g) return false;
  const other = pickMember(g, sub.subscriber);
  if (other === undefined || other.subscriber.isAvailable?.() === false) return false;
  if (!admitted(other.options, msg)) return false;
  t.stats.delivered++;
  other.subscriber.deliver(msg, [other]);
  return true;
}

export function hasLiveSubscribers(t: LiveTable, topic: string): boolean {
  const accepts = (v: Subscription | SharedGroup, w: boolean): boolean =>
    (mqttAccepts(topic, w) || (('members' in v ? v.nats : v.options.rule === 'nats') && !isReservedTopic(topic))) &&
    ('members' in v || v.options.interest === undefined || v.options.interest(topic));
  if (t.subs.hasMatch(topic, accepts)) return true;
  return t.live !== null && t.live.remote > 0 && t.live.wants(topic);
}

/**
 * Whether a live subscription takes a message: its admit predicate (set when authorization filters its deliveries)
 * accepts the message's topic and, for stored data re-published to an inbox, the topic the data was stored under.
 */
function admitted(o: SubscribeOptions, msg: Message): boolean {
  const admit = o.admit;
  if (admit === undefined) return true;
  return admit(msg.topic) && (msg.guardTopic === undefined || admit(msg.guardTopic));
}

/** A shared group's identity: its name, rule and filter (a NATS queue group and an MQTT $share group differ). */
function groupKey(sub: Subscription): string {
  return liveKey(sub.options.rule, sub.options.group, sub.filter);
}

/**
 * Next member of a shared group in round-robin order, preferring members that are available; skips `except`.
 */
function pickMember(g: SharedGroup, except: Subscriber | undefined): Subscription | undefined {
  const n = g.members.length;
  let fallback: Subscription | undefined;
  for (let k = 0; k < n; k++) {
    const s = g.members[(g.next + k) % n];
    if (s.subscriber === except) continue;
    if (s.subscriber.isAvailable?.() === false) {
      fallback ??= s;
      continue;
    }
    g.next = (g.next + k + 1) % n;
    return s;
  }
  if (fallback !== undefined) g.next = (g.next + 1) % n;
  return fallback;
}
