/**
 * Topic trie: binding patterns are stored level by level, so matching a topic costs O(levels), not O(patterns).
 * Values are opaque to the trie; the same structure indexes live subscriptions, stream bindings and the bindings
 * of topic exchanges.
 *
 * The trie knows three wildcard tokens and no grammar: a pattern is parsed into levels by its binding's rule
 * (matcher.ts), so `#` may stand anywhere (AMQP) or only last (MQTT), and `>` exists only for NATS. The tokens are
 * symbols, not strings, so no literal level (a `+` word in an AMQP routing key, say) can collide with them.
 * Rule-specific exceptions such as MQTT's `$`-topic rule are applied by the callback: the trie tells it whether
 * the topic's first level was consumed by a wildcard.
 */

/** One level, any text. */
export const ONE: unique symbol = Symbol('one');
/** Zero or more levels, at any position. */
export const ANY: unique symbol = Symbol('any');
/** One or more levels; only as the last level (NATS `>`). */
export const REST: unique symbol = Symbol('rest');

export type Level = string | typeof ONE | typeof ANY | typeof REST;

interface Node<V> {
  children: Map<string, Node<V>>;
  values: Set<V>;
  one: Node<V> | undefined;
  any: Node<V> | undefined;
  rest: Node<V> | undefined;
}

/**
 * What a node holds until its first child or value: one empty Map and one empty Set shared by every node (their
 * only writers, `add`, swap in the node's own first). An empty Map costs ~200 bytes of heap and an empty Set ~170,
 * and most nodes need only one of the two, or neither: a subscription to a filter of its own (`devices/<id>/#`, one per
 * client) made two nodes holding ~730 bytes of empty or one-entry tables where one Set was needed (~560 bytes of
 * the ~6.2 KB an idle MQTT connection held, `npm run bench -- idle`).
 */
const NO_CHILDREN: Map<string, never> = new Map<string, never>();
const NO_VALUES: Set<never> = new Set<never>();

function newNode<V>(): Node<V> {
  return { children: NO_CHILDREN, values: NO_VALUES, one: undefined, any: undefined, rest: undefined };
}

function isEmpty<V>(n: Node<V>): boolean {
  return n.values.size === 0 && n.children.size === 0 && n.one === undefined && n.any === undefined && n.rest === undefined;
}

/** Levels of an MQTT filter (`+` one level, `#` the rest, which in MQTT includes the parent level). */
export function mqttLevels(filter: string): Level[] {
  const parts: Level[] = filter.split('/');
  for (let i = 0; i < parts.length; i++) {
    if (parts[i] === '+') parts[i] = ONE;
    else if (parts[i] === '#') parts[i] = ANY;
  }
  return parts;
}

/**
 * The levels of a topic, split once and shared between the tries a publish walks (live subscriptions, stream
 * bindings, the unified topic space) and between publishes on the same topic: the split was most of a match's
 * cost (~0.3-0.6 us of a ~1 us NATS 16-byte publish; with this cache FlowMQ's 16-byte 1 -> 1 went from ~0.9M to
 * ~1.6M msgs/s in `npm run bench -- nats`). Bounded: short topics only, and the cache starts over when full, so
 * many distinct topics cost one extra map insert each and pin at most a few hundred KiB.
 */
const levelsCache = new Map<string, readonly string[]>();
const LEVELS_CACHE_MAX = 4096;
const LEVELS_CACHE_TOPIC_MAX = 256;

/** The `/`-separated levels of a topic (the array is shared: callers must not modify it). */
export function topicLevels(topic: string): readonly string[] {
  if (topic.length > LEVELS_CACHE_TOPIC_MAX) return topic.split('/');
  let levels = levelsCache.get(topic);
  if (levels === undefined) {
    if (levelsCache.size >= LEVELS_CACHE_MAX) levelsCache.clear();
    levels = topic.split('/');
    levelsCache.set(topic, levels);
  }
  return levels;
}

/**
 * Called once per matching value (a value reachable along several paths, e.g. AMQP `#.#`, may be called more
 * than once: callers that must not duplicate deduplicate). `firstWild` is true when the topic's first level was
 * matched by a wildcard, which MQTT rule bindings refuse for `$` topics ([MQTT-4.7.2-1]).
 */
export type MatchFn<V> = (value: V, firstWild: boolean) => void;

export class TopicTrie<V> {
  private readonly root: Node<V> = newNode();
  private count = 0;

  get size(): number {
    return this.count;
  }

  /** Adds a value under a pattern: an MQTT filter string, or levels parsed by a rule (matcher.ts). */
  add(pattern: string | readonly Level[], value: V): void {
    const levels = typeof pattern === 'string' ? mqttLevels(pattern) : pattern;
    let node = this.root;
    for (const level of levels) {
      let next: Node<V> | undefined;
      if (level === ONE) next = node.one ??= newNode();
      else if (level === ANY) next = node.any ??= newNode();
      else if (level === REST) next = node.rest ??= newNode();
      else {
        next = node.children.get(level);
        if (!next) {
          next = newNode();
          if (node.children === NO_CHILDREN) node.children = new Map();
          node.children.set(level, next);
        }
      }
      node = next;
    }
    if (!node.values.has(value)) {
      if (node.values === NO_VALUES) node.values = new Set();
      node.values.add(value);
      this.count++;
    }
  }

  remove(pattern: string | readonly Level[], value: V): boolean {
    const levels = typeof pattern === 'string' ? mqttLevels(pattern) : pattern;
    const path: Node<V>[] = [this.root];
    let node = this.root;
    for (const level of levels) {
      const next = level === ONE ? node.one : level === ANY ? node.any : level === REST ? node.rest : node.children.get(level);
      if (!next) return false;
      path.push(next);
      node = next;
    }
    if (!node.values.delete(value)) return false;
    this.count--;
    // Prune empty branches so churn does not leak nodes.
    for (let i = levels.length; i > 0; i--) {
      if (!isEmpty(path[i])) break;
      const parent = path[i - 1];
      const level = levels[i - 1];
      if (level === ONE) parent.one = undefined;
      else if (level === ANY) parent.any = undefined;
      else if (level === REST) parent.rest = undefined;
      else parent.children.delete(level);
    }
    return true;
  }

  /** Calls `fn` for every value whose pattern matches `topic` (`/`-separated levels). */
  match(topic: string, fn: MatchFn<V>): void {
    this.walk(this.root, topicLevels(topic), 0, false, fn);
  }

  /** As match, with the levels already split (topic exchanges other than the unified topic space). */
  matchLevels(levels: readonly string[], fn: MatchFn<V>): void {
    this.walk(this.root, levels, 0, false, fn);
  }

  /** True when at least one value matches `topic` and `accept` (when given) takes it. */
  hasMatch(topic: string, accept?: (value: V, firstWild: boolean) => boolean): boolean {
    let found = false;
    this.match(topic, (v, w) => {
      if (!found && (accept === undefined || accept(v, w))) found = true;
    });
    return found;
  }

  private walk(node: Node<V>, levels: readonly string[], i: number, wild: boolean, fn: MatchFn<V>): void {
    const n = levels.length;
    const any = node.any;
    if (any !== undefined) {
      if (any.children.size === 0 && any.one === undefined && any.any === undefined && any.rest === undefined) {
        // A trailing `#` (every MQTT `#`): it takes the remaining levels, zero or more, in one step.
        if (any.values.size > 0) {
          const w = wild || (i === 0 && n > 0);
          for (const v of any.values) fn(v, w);
        }
      } else {
        // `#` inside a pattern (AMQP): try every number of levels it could consume.
        for (let j = i; j <= n; j++) this.walk(any, levels, j, wild || (i === 0 && j > 0), fn);
      }
    }
    if (i === n) {
      for (const v of node.values) fn(v, wild);
      return;
    }
    const exact = node.children.get(levels[i]);
    if (exact !== undefined) this.walk(exact, levels, i + 1, wild, fn);
    const one = node.one;
    if (one !== undefined) this.walk(one, levels, i + 1, wild || i === 0, fn);
    const rest = node.rest;
    if (rest !== undefined) for (const v of rest.values) fn(v, wild || i === 0);
  }
}
