/**
 * Exchanges, bindings and queues: the Router half of the Engine (the Engine delegates to it; see exchanges.ts for
 * the contract). Routing follows AMQP 0-9-1 (spec section 3.1.3) and RabbitMQ where the spec is silent:
 * destinations are a set (a queue reached by several bindings gets a message once), exchange-to-exchange bindings
 * route with the same routing key and tolerate cycles, the alternate exchange takes what an exchange's own
 * bindings did not match.
 *
 * The unified topic space is the exchange `amq.topic`: its live subscriptions and stream bindings stay in the
 * Engine's tries (the MQTT path is untouched and pays nothing for queues); its queue and exchange bindings sit in
 * this exchange's trie, which MQTT publishes and Kafka produces consult only when it is not empty.
 */
import { randomBytes } from 'node:crypto';
import { FlowError } from './errors.js';
import type { BindingDef, ExchangeDef, ExchangeType, RouteResult } from './exchanges.js';
import { DEFAULT_EXCHANGE, TOPIC_SPACE } from './exchanges.js';
import type { Message } from './message.js';
import {
  headersMatch,
  type HeadersPattern,
  type MatchRule,
  mqttAccepts,
  parseBindingKey,
  parseHeadersBinding,
  routingKeyLevels,
} from './matcher.js';
import type { QueueDef, QueueFactory, QueueHandle, QueueHooks, QueueRuntime, QueueStore } from './queues.js';
import { bindingKey, type CoreStore } from './store.js';
import { dotsToUnified, isValidTopic, swapSeparators, unifiedToDots } from './topic.js';
import { type Level, TopicTrie } from './trie.js';

/** What the Router needs of the Engine: the live and stream side of the unified topic space. */
export interface RouterHost {
  /**
   * Delivers a message on the unified topic space (msg.topic set, a valid MQTT topic) to live subscribers and bound
   * streams; returns how many it reached and the streams' durability.
   */
  publishUnified(msg: Message): { count: number; durable: Promise<void> | null };
  hasStream(name: string): boolean;
  /** Appends a message to a stream (a stream destination of an exchange binding). */
  appendToStream(name: string, msg: Message): Promise<void> | null;
  /**
   * Why durable queue writes are refused now (the broker's free-space reserve: STORAGE_FULL), or null. Asked once
   * per publish that reaches a durable queue with a persistent message.
   */
  writeRefusal(): FlowError | null;
}

/**
 * Cluster mode (src/cluster/queues.ts): persisted queues are owned by one broker each; every broker keeps every
 * durable definition (the catalog is shared) and routes locally, to a runtime that serves the queue here or forwards
 * to its owner.
 */
export interface RouterCluster {
  /** Makes the runtime of a persisted queue (durable, not exclusive). */
  factory: QueueFactory;
  /** A durable exchange, queue or binding changed in the catalog: the other brokers reload it. */
  changed(): void;
  /** A persisted queue was declared here: claims it at once when placement picks this broker. */
  declared(name: string): Promise<void>;
}

interface BindingEntry {
  readonly def: BindingDef;
  readonly id: string;
  readonly rule: MatchRule;
  readonly levels: Level[] | null;
  readonly headers: HeadersPattern | null;
}

interface XState {
  def: ExchangeDef;
  readonly builtin: boolean;
  /** Every binding with this exchange as source, by bindingKey. */
  readonly bindings: Map<string, BindingEntry>;
  /** direct: bindings by key. */
  readonly direct: Map<string, Set<BindingEntry>> | null;
  /** topic: bindings by parsed pattern. */
  readonly trie: TopicTrie<BindingEntry> | null;
}

/** The destinations one publish reached. */
class Route {
  readonly queues: QueueRuntime[] = [];
  readonly streams: string[] = [];
  readonly seen = new Set<XState>();
  live = 0;
  liveDurable: Promise<void> | null = null;
  add(q: QueueRuntime): void {
    if (!this.queues.includes(q)) this.queues.push(q);
  }
}

const BUILTIN: Array<[string, ExchangeType]> = [
  [DEFAULT_EXCHANGE, 'direct'],
  ['amq.direct', 'direct'],
  ['amq.fanout', 'fanout'],
  [TOPIC_SPACE, 'topic'],
  ['amq.headers', 'headers'],
  ['amq.match', 'headers'],
];

const EXCHANGE_TYPES = new Set<ExchangeType>(['direct', 'fanout', 'topic', 'headers']);

function destId(kind: string, name: string): string {
  return `${kind}\u0000${name}`;
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));
}

function sorted(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sorted);
  if (v !== null && typeof v === 'object' && !Buffer.isBuffer(v)) {
    return Object.fromEntries(
      Object.keys(v)
        .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
        .sort()
        .map((k) => [k, sorted((v as Record<string, unknown>)[k])]),
    );
  }
  return v;
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

export class RouterCore {
  private readonly exchanges = new Map<string, XState>();
  private readonly queues = new Map<string, QueueRuntime>();
  /** Queues being created (a concurrent declare of the same name waits for it). */
  private readonly creating = new Map<string, Promise<QueueRuntime>>();
  /** Bindings by destination, to drop them when the destination goes. */
  private readonly byDest = new Map<string, Set<BindingEntry>>();
  /** The unified topic space's exchange state (its trie holds the queue/exchange bindings on amq.topic). */
  readonly topicSpace: XState;
  private readonly hooks: QueueHooks;
  /** Cluster mode (null on a single broker: nothing below changes). */
  private cluster: RouterCluster | null = null;

  constructor(
    private readonly host: RouterHost,
    private readonly store: CoreStore,
    private readonly queueStore: QueueStore | null,
    private readonly factory: QueueFactory | undefined,
  ) {
    for (const [name, type] of BUILTIN) {
      const def: ExchangeDef = { name, type, durable: true, autoDelete: false, internal: false, rawArguments: {}, createdAt: 0 };
      this.exchanges.set(name, this.newState(def, true));
      this.version++;
    }
    this.topicSpace = this.exchanges.get(TOPIC_SPACE)!;
    this.hooks = {
      deadLetter: (def, msg) => this.deadLetter(def, msg),
      expire: (def) => {
        // Only the queue that asked: a queue of the same name declared since is another queue.
        if (this.queues.get(def.name)?.def === def) this.deleteQueue(def.name).catch(() => undefined);
      },
    };
  }

  /** Cluster mode: before load(). */
  setCluster(c: RouterCluster): void {
    this.cluster = c;
  }

  /**
   * Cluster mode: brings the durable definitions up to date with the shared catalog (another broker declared or
   * deleted an exchange, queue or binding). Only persisted things are compared: non-durable exchanges and exclusive
   * or non-durable queues are local to the broker that declared them.
   */
  async sync(): Promise<void> {
    const [xs, qs, bs] = await Promise.all([this.store.listExchanges(), this.store.listQueues(), this.store.listBindings()]);
    const xNames = new Set(xs.map((d) => d.name));
    for (const def of xs) if (!this.exchanges.has(def.name)) this.exchanges.set(def.name, this.newState(def, false));
    this.version++;
    for (const [name, x] of [...this.exchanges]) {
      if (x.builtin || !x.def.durable || xNames.has(name)) continue;
      this.exchanges.delete(name);
      this.version++;
      for (const b of [...x.bindings.values()]) this.unindex(b);
      this.dropBindingsTo('exchange', name);
    }
    const qNames = new Set(qs.map((d) => d.name));
    for (const def of qs) {
      if (this.queues.has(def.name) || this.creating.has(def.name)) continue;
      const q = this.makeQueue({ ...def, exclusiveOwner: null });
      await q.open();
      if (!this.queues.has(def.name)) {
        this.queues.set(def.name, q);
        this.version++;
      } else q.close();
    }
    for (const [name, q] of [...this.queues]) {
      if (!persisted(q.def) || qNames.has(name) || this.creating.has(name)) continue;
      this.queues.delete(name);
      this.version++;
      this.dropBindingsTo('queue', name);
      if (q.detach) q.detach();
      else q.close();
    }
    const want = new Set<string>();
    for (const b of bs) {
      want.add(bindingKey(b));
      if (!this.exchanges.has(b.source) || !this.destinationExists(b)) continue;
      try {
        this.index(this.entry(b));
      } catch {
        // A stored key this version refuses: not routable, as at load.
      }
    }
    for (const x of this.exchanges.values()) {
      for (const e of [...x.bindings.values()]) if (!want.has(e.id) && this.isDurable(e.def)) this.unindex(e);
    }
  }

  /**
   * Changes to bindings, queues and exchanges (their dead-letter and alternate exchanges): what feeds a destination
   * may have changed (topicFiltersFeeding), so authorization verdicts that depend on it are taken again.
   */
  version = 0;

  /**
   * The unified topic filters whose messages can reach a queue or stream through the exchanges: its bindings on the
   * unified topic space, and, followed backwards, those of every exchange bound to it, of exchanges whose alternate
   * exchange routes to it, and of queues that dead-letter into one. A superset (an AMQP key with `#` inside the key
   * counts as its prefix and `#`): what reading the destination is judged by (authorization follows the data).
   */
  topicFiltersFeeding(kind: 'queue' | 'stream', name: string): string[] {
    const out = new Set<string>();
    const seenX = new Set<string>();
    const seenQ = new Set<string>();
    const intoExchange = (x: string): void => {
      if (seenX.has(x)) return;
      seenX.add(x);
      if (x === TOPIC_SPACE) {
        // Bound to amq.topic itself (an exchange-to-exchange binding): everything published there.
        out.add('#');
        return;
      }
      into('exchange', x);
      for (const [n, xs] of this.exchanges) if (xs.def.alternateExchange === x) intoExchange(n);
      for (const q of this.queues.values()) if (q.def.arguments.deadLetterExchange === x) intoQueue(q.def.name);
    };
    const intoQueue = (q: string): void => {
      if (seenQ.has(q)) return;
      seenQ.add(q);
      into('queue', q);
    };
    const into = (destKind: string, dest: string): void => {
      const set = this.byDest.get(destId(destKind, dest));
      if (set === undefined) return;
      for (const e of set) {
        if (e.def.source === TOPIC_SPACE) {
          const f = keyFilter(e.def.key, e.rule);
          if (f !== null) out.add(f);
        } else intoExchange(e.def.source);
      }
    };
    if (kind === 'queue') intoQueue(name);
    else into('stream', name);
    return [...out];
  }

  /** Queue and exchange bindings on the unified topic space: MQTT and Kafka publishes consult them when > 0. */
  get topicBindings(): number {
    return this.topicSpace.trie!.size;
  }

  private newState(def: ExchangeDef, builtin: boolean): XState {
    return {
      def,
      builtin,
      bindings: new Map(),
      direct: def.type === 'direct' ? new Map() : null,
      trie: def.type === 'topic' ? new TopicTrie() : null,
    };
  }

  // ---------------------------------------------------------------- load

  /** Loads durable definitions (engine.load): exchanges, then queues (opened: messages recovered), then bindings. */
  async load(): Promise<void> {
    for (const def of await this.store.listExchanges()) {
      if (this.exchanges.get(def.name)?.builtin) continue;
      this.exchanges.set(def.name, this.newState(def, false));
      this.version++;
    }
    for (const def of await this.store.listQueues()) {
      // Exclusive queues are never persisted; a definition that says otherwise is treated as not exclusive.
      const q = this.makeQueue({ ...def, exclusiveOwner: null });
      await q.open();
      this.queues.set(q.def.name, q);
      this.version++;
    }
    for (const b of await this.store.listBindings()) {
      if (!this.exchanges.has(b.source) || !this.destinationExists(b)) continue;
      let e: BindingEntry;
      try {
        e = this.entry(b);
      } catch {
        // A stored key this version's rules refuse: the binding cannot route, the broker still starts.
        continue;
      }
      this.index(e);
    }
  }

  /** Stops queue timers (broker shutdown); nothing is deleted. */
  close(): void {
    for (const q of this.queues.values()) q.close();
  }

  // ---------------------------------------------------------------- exchanges

  async declareExchange(req: Omit<ExchangeDef, 'createdAt'>, opts: { passive?: boolean } = {}): Promise<ExchangeDef> {
    const x = this.exchanges.get(req.name);
    if (opts.passive) {
      if (!x) throw new FlowError('NOT_FOUND', `no exchange '${req.name}'`);
      return x.def;
    }
    // AMQP 0-9-1 exchange.declare: the default exchange cannot be declared (RabbitMQ: 403 access-refused).
    if (req.name === DEFAULT_EXCHANGE) throw new FlowError('ACCESS_REFUSED', 'operation not permitted on the default exchange');
    if (!EXCHANGE_TYPES.has(req.type)) throw new FlowError('INVALID_ARGUMENT', `invalid exchange type '${req.type}'`);
    if (x) {
      // Redeclaration must be equivalent (spec: 406 precondition-failed). RabbitMQ compares type, durable,
      // auto-delete, internal and, of the arguments, only alternate-exchange.
      const d = x.def;
      if (d.type !== req.type || d.durable !== req.durable || d.autoDelete !== req.autoDelete || d.internal !== req.internal || d.alternateExchange !== req.alternateExchange) {
        throw new FlowError('PRECONDITION_FAILED', `inequivalent arguments for exchange '${req.name}'`);
      }
      return d;
    }
    // Names starting with "amq." are reserved (spec: 403 access-refused), except the predeclared ones above.
    if (req.name.startsWith('amq.')) throw new FlowError('ACCESS_REFUSED', `exchange name '${req.name}' contains reserved prefix 'amq.'`);
    const def: ExchangeDef = { ...req, rawArguments: { ...req.rawArguments }, createdAt: Date.now() };
    if (def.durable) await this.store.putExchange(def);
    // A concurrent declare may have created it while we awaited: the first one stays.
    const now = this.exchanges.get(def.name);
    if (now) return now.def;
    this.exchanges.set(def.name, this.newState(def, false));
    this.version++;
    if (def.durable) this.cluster?.changed();
    return def;
  }

  async deleteExchange(name: string, opts: { ifUnused?: boolean } = {}): Promise<void> {
    const x = this.exchanges.get(name);
    // RabbitMQ: deleting an exchange that does not exist succeeds (delete is idempotent).
    if (!x) return;
    if (x.builtin) throw new FlowError('ACCESS_REFUSED', `exchange '${name}' is predeclared and cannot be deleted`);
    if (opts.ifUnused && x.bindings.size > 0) throw new FlowError('PRECONDITION_FAILED', `exchange '${name}' in use`);
    this.exchanges.delete(name);
    this.version++;
    for (const b of [...x.bindings.values()]) this.unindex(b);
    const sources = this.dropBindingsTo('exchange', name);
    if (x.def.durable) await this.store.deleteExchange(name);
    if (x.def.durable) this.cluster?.changed();
    await this.autoDeleteSources(sources);
  }

  getExchange(name: string): ExchangeDef | undefined {
    return this.exchanges.get(name)?.def;
  }

  listExchanges(): ExchangeDef[] {
    return [...this.exchanges.values()].map((x) => x.def).sort((a, b) => a.name.localeCompare(b.name));
  }

  // ---------------------------------------------------------------- queues

  async declareQueue(req: Omit<QueueDef, 'createdAt'>, opts: { passive?: boolean; owner?: string } = {}): Promise<QueueHandle> {
    if (req.name !== '') {
      const pending = this.creating.get(req.name);
      if (pending) await pending.catch(() => undefined);
      // Cluster mode: another broker may have declared it a moment ago (its notification still on its way).
      if (this.cluster !== null && !this.queues.has(req.name)) await this.sync();
      const q = this.queues.get(req.name);
      if (q) {
        if (q.refresh) await q.refresh().catch(() => undefined);
        // RabbitMQ x-expires: a re-declaration (passive too) counts as a use.
        q.touch?.();
        // RabbitMQ: another connection's exclusive queue is 405 resource-locked, passive or not.
        if (q.def.exclusiveOwner !== null && q.def.exclusiveOwner !== opts.owner) {
          throw new FlowError('RESOURCE_LOCKED', `cannot obtain exclusive access to locked queue '${req.name}'`);
        }
        if (opts.passive) return q;
        // Spec queue.declare: a redeclaration must match (406 precondition-failed): durable, exclusive,
        // auto-delete and the arguments RabbitMQ checks, i.e. the ones the core acts on.
        const d = q.def;
        if (d.durable !== req.durable || (d.exclusiveOwner !== null) !== (req.exclusiveOwner !== null) || d.autoDelete !== req.autoDelete || !sameJson(d.arguments, req.arguments)) {
          throw new FlowError('PRECONDITION_FAILED', `inequivalent arguments for queue '${req.name}'`);
        }
        return q;
      }
    }
    if (opts.passive) throw new FlowError('NOT_FOUND', `no queue '${req.name}'`);
    if (req.name.startsWith('amq.')) throw new FlowError('ACCESS_REFUSED', `queue name '${req.name}' contains reserved prefix 'amq.'`);
    if (!this.factory) throw new FlowError('INVALID_ARGUMENT', 'this engine has no queue runtime');
    // Spec queue.declare: an empty name asks the server for one; RabbitMQ's are "amq.gen-" and random text.
    const name = req.name === '' ? `amq.gen-${randomBytes(16).toString('base64url')}` : req.name;
    const def: QueueDef = { ...req, name, arguments: { ...req.arguments }, rawArguments: { ...req.rawArguments }, createdAt: Date.now() };
    const create = (async () => {
      // Exclusive queues are never persisted: they do not outlive their connection.
      if (persisted(def)) await this.store.putQueue(def);
      const q = this.makeQueue(def);
      // Routable only once open: recovery assigns ids after what the store holds, a publish must not come first.
      try {
        await q.open();
      } catch (e) {
        q.close();
        if (persisted(def)) await this.store.deleteQueue(name).catch(() => undefined);
        throw e;
      }
      this.queues.set(name, q);
      this.version++;
      return q;
    })();
    this.creating.set(name, create);
    let q: QueueRuntime;
    try {
      q = await create;
    } finally {
      if (this.creating.get(name) === create) this.creating.delete(name);
    }
    if (this.cluster !== null && persisted(def)) {
      this.cluster.changed();
      await this.cluster.declared(name);
    }
    return q;
  }

  private makeQueue(def: QueueDef): QueueRuntime {
    if (!this.factory) throw new FlowError('INVALID_ARGUMENT', 'this engine has no queue runtime');
    if (this.cluster !== null && persisted(def)) return this.cluster.factory(def, this.queueStore, this.hooks);
    return this.factory(def, persisted(def) ? this.queueStore : null, this.hooks);
  }

  async deleteQueue(name: string, opts: { ifUnused?: boolean; ifEmpty?: boolean } = {}): Promise<number> {
    const q = this.queues.get(name);
    // RabbitMQ: queue.delete of a queue that does not exist succeeds with message-count 0.
    if (!q) return 0;
    if (q.refresh && (opts.ifUnused || opts.ifEmpty)) await q.refresh().catch(() => undefined);
    const s = q.stats();
    if (opts.ifUnused && s.consumers > 0) throw new FlowError('PRECONDITION_FAILED', `queue '${name}' in use`);
    if (opts.ifEmpty && s.ready > 0) throw new FlowError('PRECONDITION_FAILED', `queue '${name}' not empty`);
    this.queues.delete(name);
    this.version++;
    const sources = this.dropBindingsTo('queue', name);
    if (persisted(q.def)) await this.store.deleteQueue(name);
    if (persisted(q.def)) this.cluster?.changed();
    const n = await q.destroy();
    await this.autoDeleteSources(sources);
    return n;
  }

  async purgeQueue(name: string): Promise<number> {
    const q = this.queues.get(name);
    if (!q) throw new FlowError('NOT_FOUND', `no queue '${name}'`);
    return q.purge();
  }

  getQueue(name: string): QueueHandle | undefined {
    return this.queues.get(name);
  }

  listQueues(): QueueDef[] {
    return [...this.queues.values()].map((q) => q.def).sort((a, b) => a.name.localeCompare(b.name));
  }

  async dropExclusive(owner: string): Promise<void> {
    const names = [...this.queues.values()].filter((q) => q.def.exclusiveOwner === owner).map((q) => q.def.name);
    for (const n of names) await this.deleteQueue(n);
  }

  /** A stream was deleted: the exchange bindings to it go too (in the catalog as well). */
  async streamDeleted(name: string): Promise<void> {
    const set = this.byDest.get(destId('stream', name));
    const durable = set ? [...set].filter((e) => this.exchanges.get(e.def.source)?.def.durable).map((e) => e.def) : [];
    const sources = this.dropBindingsTo('stream', name);
    for (const b of durable) await this.store.deleteBinding(b);
    if (durable.length > 0) this.cluster?.changed();
    await this.autoDeleteSources(sources);
  }

  // ---------------------------------------------------------------- bindings

  private destinationExists(b: BindingDef): boolean {
    if (b.destinationKind === 'queue') return this.queues.has(b.destination);
    if (b.destinationKind === 'exchange') return this.exchanges.has(b.destination);
    return this.host.hasStream(b.destination);
  }

  private entry(b: BindingDef): BindingEntry {
    const x = this.exchanges.get(b.source)!;
    const rule = b.rule ?? 'amqp';
    const def: BindingDef = { ...b, arguments: { ...b.arguments } };
    return {
      def,
      id: bindingKey(def),
      rule,
      levels: x.def.type === 'topic' ? parseBindingKey(b.key, rule, x === this.topicSpace) : null,
      headers: x.def.type === 'headers' ? parseHeadersBinding(b.arguments) : null,
    };
  }

  private index(e: BindingEntry): void {
    const x = this.exchanges.get(e.def.source)!;
    if (x.bindings.has(e.id)) return;
    this.version++;
    x.bindings.set(e.id, e);
    if (x.direct) {
      let set = x.direct.get(e.def.key);
      if (!set) x.direct.set(e.def.key, (set = new Set()));
      set.add(e);
    }
    if (x.trie) x.trie.add(e.levels!, e);
    const d = destId(e.def.destinationKind, e.def.destination);
    let set = this.byDest.get(d);
    if (!set) this.byDest.set(d, (set = new Set()));
    set.add(e);
  }

  private unindex(e: BindingEntry): void {
    this.version++;
    const x = this.exchanges.get(e.def.source);
    if (x && x.bindings.get(e.id) === e) {
      x.bindings.delete(e.id);
      if (x.direct) {
        const set = x.direct.get(e.def.key);
        if (set) {
          set.delete(e);
          if (set.size === 0) x.direct.delete(e.def.key);
        }
      }
      if (x.trie) x.trie.remove(e.levels!, e);
    }
    const d = destId(e.def.destinationKind, e.def.destination);
    const set = this.byDest.get(d);
    if (set) {
      set.delete(e);
      if (set.size === 0) this.byDest.delete(d);
    }
  }

  /** Removes the bindings to a destination that went; returns their source exchanges (auto-delete candidates). */
  private dropBindingsTo(kind: string, name: string): Set<XState> {
    const sources = new Set<XState>();
    const set = this.byDest.get(destId(kind, name));
    if (set) {
      for (const e of [...set]) {
        const x = this.exchanges.get(e.def.source);
        if (x) sources.add(x);
        this.unindex(e);
      }
    }
    return sources;
  }

  /** RabbitMQ: an auto-delete exchange is deleted when its last binding (as source) is removed. */
  private async autoDeleteSources(sources: Iterable<XState>): Promise<void> {
    for (const x of sources) {
      if (x.def.autoDelete && !x.builtin && x.bindings.size === 0 && this.exchanges.get(x.def.name) === x) {
        await this.deleteExchange(x.def.name);
      }
    }
  }

  private isDurable(b: BindingDef): boolean {
    if (!this.exchanges.get(b.source)!.def.durable) return false;
    if (b.destinationKind === 'queue') return persisted(this.queues.get(b.destination)!.def);
    if (b.destinationKind === 'exchange') return this.exchanges.get(b.destination)!.def.durable;
    return true;
  }

  private checkBinding(b: BindingDef): void {
    // RabbitMQ: the default exchange cannot be bound to or from (403 access-refused); every queue is bound to it
    // implicitly by its name.
    if (b.source === DEFAULT_EXCHANGE || (b.destinationKind === 'exchange' && b.destination === DEFAULT_EXCHANGE)) {
      throw new FlowError('ACCESS_REFUSED', 'operation not permitted on the default exchange');
    }
    if (!this.exchanges.has(b.source)) throw new FlowError('NOT_FOUND', `no exchange '${b.source}'`);
    if (!this.destinationExists(b)) throw new FlowError('NOT_FOUND', `no ${b.destinationKind} '${b.destination}'`);
  }

  async bind(b: BindingDef): Promise<void> {
    this.checkBinding(b);
    const e = this.entry(b);
    if (this.exchanges.get(b.source)!.bindings.has(e.id)) return;
    // A binding is durable when both ends are (RabbitMQ); exclusive queues are never persisted.
    const durable = this.isDurable(b);
    if (durable) await this.store.putBinding(e.def);
    // The ends may have gone while we awaited.
    if (!this.exchanges.has(b.source) || !this.destinationExists(b)) return;
    this.index(e);
    if (durable) this.cluster?.changed();
  }

  async unbind(b: BindingDef): Promise<void> {
    this.checkBinding(b);
    const x = this.exchanges.get(b.source)!;
    const id = bindingKey({ ...b, rule: b.rule ?? 'amqp' });
    const e = x.bindings.get(id);
    // RabbitMQ: unbinding a binding that does not exist succeeds.
    if (!e) return;
    this.unindex(e);
    if (this.isDurable(b)) {
      await this.store.deleteBinding(e.def);
      this.cluster?.changed();
    }
    await this.autoDeleteSources([x]);
  }

  listBindings(): BindingDef[] {
    const out: BindingDef[] = [];
    for (const x of this.exchanges.values()) for (const e of x.bindings.values()) out.push(e.def);
    return out;
  }

  // ---------------------------------------------------------------- publishing

  publishTo(exchange: string, routingKey: string, msg: Message): RouteResult {
    const x = this.exchanges.get(exchange);
    if (!x) throw new FlowError('NOT_FOUND', `no exchange '${exchange}'`);
    // RabbitMQ: publishing to an internal exchange is 403 access-refused.
    if (x.def.internal) throw new FlowError('ACCESS_REFUSED', `cannot publish to internal exchange '${exchange}'`);
    msg.exchange = exchange;
    msg.routingKey = routingKey;
    const r = new Route();
    this.routeExchange(x, routingKey, msg, r);
    return this.deliver(r, msg, false);
  }

  /**
   * A publish into the unified topic space by MQTT, Kafka or NATS (msg.topic is a valid topic; its live and stream
   * side is done by the Engine): reaches the queue and exchange bindings on amq.topic. Call only when
   * topicBindings > 0.
   */
  routeTopicSpace(msg: Message): RouteResult {
    const r = new Route();
    r.seen.add(this.topicSpace);
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
      this.topicSpace.trie!.match(guard, (e, w) => {
        if (e.rule !== 'mqtt' || mqttAccepts(guard, w)) g.add(e);
      });
    }
    this.topicSpace.trie!.match(topic, (e, w) => {
      if (e.rule === 'mqtt' && !mqttAccepts(topic, w)) return;
      if (reach !== null && !reach.has(e)) return;
      follow.push(e);
    });
    if (follow.length === 0) return { routed: 0, durable: null, rejected: false };
    // Queues keep the message: it gets its own payload (the adapter's may be a view into a socket buffer) and the
    // exchange and routing key AMQP consumers are told.
    copy = { ...msg, payload: Buffer.from(msg.payload), exchange: TOPIC_SPACE, routingKey: rk };
    for (const e of follow) this.toDestination(e, rk, copy, r);
    return this.deliver(r, copy, false);
  }

  private toDestination(e: BindingEntry, rk: string, msg: Message, r: Route): void {
    const d = e.def;
    if (d.destinationKind === 'queue') {
      const q = this.queues.get(d.destination);
      if (q) r.add(q);
    } else if (d.destinationKind === 'exchange') {
      const x = this.exchanges.get(d.destination);
      if (x) this.routeExchange(x, rk, msg, r);
    } else if (!r.streams.includes(d.destination)) r.streams.push(d.destination);
  }

  /** Routes through one exchange (and, recursively, the exchanges bound to it and its alternate exchange). */
  private routeExchange(x: XState, rk: string, msg: Message, r: Route): void {
    // Exchange-to-exchange bindings may form cycles: each exchange routes a message once (RabbitMQ).
    if (r.seen.has(x)) return;
    r.seen.add(x);
    let matched = 0;
    const visit = (e: BindingEntry) => {
      matched++;
      this.toDestination(e, rk, msg, r);
    };
    if (x.def.name === DEFAULT_EXCHANGE) {
      // Spec 3.1.3.1: the default exchange routes to the queue whose name is the routing key.
      const q = this.queues.get(rk);
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
      for (const e of x.bindings.values()) if (headersMatch(e.headers!, msg.headers)) visit(e);
    } else if (x === this.topicSpace) {
      const topic = rk.length === 0 ? '' : dotsToUnified(rk);
      // A routing key whose unified form MQTT cannot carry (empty, or with `+`/`#` characters) reaches AMQP and
      // NATS rule bindings only: not live MQTT subscribers, streams or MQTT rule bindings.
      const mqttOk = isValidTopic(topic);
      if (mqttOk) {
        // The message is this publish's own (publishTo's caller handed it over, dead letters are copies).
        if (msg.topic !== topic) msg.topic = topic;
        const res = this.host.publishUnified(msg);
        r.live += res.count;
        matched += res.count;
        if (res.durable) r.liveDurable = r.liveDurable === null ? res.durable : Promise.all([r.liveDurable, res.durable]).then(() => undefined);
      }
      const fn = (e: BindingEntry, w: boolean) => {
        if (e.rule === 'mqtt' && (!mqttOk || !mqttAccepts(topic, w))) return;
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
      const ae = this.exchanges.get(x.def.alternateExchange);
      if (ae) this.routeExchange(ae, rk, msg, r);
    }
  }

  private deliver(r: Route, msg: Message, deadLettered: boolean): RouteResult {
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
      if (q.def.durable && msg.persistent !== false && (refusal ??= this.host.writeRefusal()) !== null) {
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
    for (const s of r.streams) {
      const d = this.host.appendToStream(s, msg);
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
  private deadLetter(def: QueueDef, msg: Message): Promise<void> | null {
    const name = def.arguments.deadLetterExchange;
    if (name === undefined) return null;
    const x = this.exchanges.get(name);
    // RabbitMQ: a dead-letter exchange that does not exist drops the message silently.
    if (!x) return null;
    const rk = msg.routingKey ?? '';
    const m: Message = { ...msg, exchange: name, routingKey: rk };
    const r = new Route();
    this.routeExchange(x, rk, m, r);
    const res = this.deliver(r, m, true);
    return res.durable;
  }
}

/**
 * A topic-space binding key as a unified MQTT filter covering at least what it matches (null: it matches no topic
 * MQTT can carry, e.g. the empty AMQP key). AMQP `#` in mid-key becomes the end (`a.#.b` → `a/#`), NATS `>` is `#`.
 */
function keyFilter(key: string, rule: MatchRule): string | null {
  if (rule === 'mqtt') return key;
  if (key.length === 0) return null;
  const out: string[] = [];
  for (const w of key.split('.')) {
    if (w === '#' || w === '>') {
      out.push('#');
      break;
    }
    out.push(w === '*' ? '+' : swapSeparators(w));
  }
  return out.join('/');
}

function persisted(def: QueueDef): boolean {
  return def.durable && def.exclusiveOwner === null;
}
