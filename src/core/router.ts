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
 *
 * This file keeps the catalog (exchanges, queues, bindings: declare, delete, load, cluster sync); routing a publish
 * through it, delivery and dead-lettering are in routing.ts.
 */
import { randomBytes } from 'node:crypto';
import { FlowError } from './errors.js';
import type { BindingDef, ExchangeDef, ExchangeType, RouteResult } from './exchanges.js';
import { DEFAULT_EXCHANGE, TOPIC_SPACE, pinnedPartition } from './exchanges.js';
import type { Message } from './message.js';
import { type MatchRule, parseBindingKey, parseHeadersBinding } from './matcher.js';
import { DEFAULT_NAMESPACE, splitName, splitStreamName } from './namespaces.js';
import type { QueueArguments, QueueDef, QueueFactory, QueueHandle, QueueHooks, QueueRuntime, QueueStore } from './queues.js';
import { bindingKey, type CoreStore } from './store.js';
import { swapSeparators } from './topic.js';
import { TopicTrie } from './trie.js';
import { deadLetter, publishTo, routeTopicSpace, type BindingEntry, type RouterHost, type RoutingTable, type XState } from './routing.js';

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

export class RouterCore implements RoutingTable {
  /** Exchanges and queues by name (routing.ts routes through them). */
  readonly exchanges = new Map<string, XState>();
  readonly queues = new Map<string, QueueRuntime>();
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
    readonly host: RouterHost,
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
      deadLetter: (def, msg) => deadLetter(this, def, msg),
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
      if (
        d.type !== req.type ||
        d.durable !== req.durable ||
        d.autoDelete !== req.autoDelete ||
        d.internal !== req.internal ||
        d.alternateExchange !== req.alternateExchange
      ) {
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
        if (
          d.durable !== req.durable ||
          (d.exclusiveOwner !== null) !== (req.exclusiveOwner !== null) ||
          d.autoDelete !== req.autoDelete ||
          !sameJson(d.declaredArguments ?? d.arguments, req.arguments)
        ) {
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

  /** The local queue runtime's factory (cluster mode: what the owner of a queue runs it with). */
  get queueFactory(): QueueFactory | undefined {
    return this.factory;
  }

  /**
   * The arguments a queue acts on given its definition (declared arguments merged with the policy that applies, as
   * the RabbitMQ management API's policies do); null: the declared ones. Applied to every queue as it opens.
   */
  queuePolicy: ((def: QueueDef) => QueueArguments | null) | null = null;

  /** Sets `def.arguments` from the policy (see queuePolicy); answers whether they changed. */
  private withPolicy(def: QueueDef): boolean {
    const declared = def.declaredArguments ?? def.arguments;
    const effective = this.queuePolicy?.({ ...def, arguments: declared }) ?? null;
    const next = effective === null || sameJson(effective, declared) ? declared : effective;
    if (sameJson(next, def.arguments)) return false;
    def.arguments = next;
    if (next === declared) delete def.declaredArguments;
    else def.declaredArguments = declared;
    return true;
  }

  /** Applies the queue policy again to every queue (a policy was added, changed or removed). */
  applyQueuePolicies(): void {
    for (const q of this.queues.values()) if (this.withPolicy(q.def)) q.argumentsChanged?.();
  }

  private makeQueue(def: QueueDef): QueueRuntime {
    if (!this.factory) throw new FlowError('INVALID_ARGUMENT', 'this engine has no queue runtime');
    if (this.queuePolicy !== null) {
      def = { ...def, arguments: { ...def.arguments } };
      this.withPolicy(def);
    }
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
      levels: x.def.type === 'topic' ? parseBindingKey(b.key, rule, x === this.topicSpace, x === this.topicSpace ? destinationNamespace(b) : null) : null,
      headers: x.def.type === 'headers' ? parseHeadersBinding(b.arguments) : null,
      partition: b.destinationKind === 'stream' ? pinnedPartition(b.arguments) : -1,
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

  // ---------------------------------------------------------------- publishing (routing.ts)

  publishTo(exchange: string, routingKey: string, msg: Message): RouteResult {
    return publishTo(this, exchange, routingKey, msg);
  }

  /**
   * A publish into the unified topic space by MQTT, Kafka or NATS (msg.topic is a valid topic; its live and stream
   * side is done by the Engine): reaches the queue and exchange bindings on amq.topic. Call only when
   * topicBindings > 0.
   */
  routeTopicSpace(msg: Message): RouteResult {
    return routeTopicSpace(this, msg);
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

/** The namespace of a binding's destination (namespaces.ts), or null for `default`'s. */
function destinationNamespace(b: BindingDef): string | null {
  const ns = b.destinationKind === 'stream' ? splitStreamName(b.destination).namespace : splitName(b.destination).namespace;
  return ns === DEFAULT_NAMESPACE ? null : ns;
}
