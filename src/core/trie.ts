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

/** A node's value slot when it holds none (values are the callers' objects, `undefined` among them if they like). */
const NO_VALUE: unique symbol = Symbol('no value');

/**
 * One level of patterns. A node keeps its first child and its first value in fields of its own, and makes a Map or
 * a Set only for the second: an empty or one-entry Map costs ~220 bytes of heap and a Set ~230, and most nodes have
 * one child or one value, or neither. A subscription to a filter of its own (`idle/<id>/cmd`, a device's command
 * topic, one per client) adds two such nodes; with tables of their own they held ~450 bytes of the ~5.5 KB an idle
 * MQTT connection held (`npm run bench -- idle`).
 */
interface Node<V> {
  /** Children by level from the second child on (then `key`/`child` are unused); null while there are fewer. */
  children: Map<string, Node<V>> | null;
  key: string | undefined;
  child: Node<V> | undefined;
  /** Values from the second on (then `value` is unused); null while there are fewer. */
  values: Set<V> | null;
  value: V | typeof NO_VALUE;
  one: Node<V> | undefined;
  any: Node<V> | undefined;
  rest: Node<V> | undefined;
}

function newNode<V>(): Node<V> {
  return { children: null, key: undefined, child: undefined, values: null, value: NO_VALUE, one: undefined, any: undefined, rest: undefined };
}

function childOf<V>(n: Node<V>, level: string): Node<V> | undefined {
  if (n.children !== null) return n.children.get(level);
  return n.key === level ? n.child : undefined;
}

function addChild<V>(n: Node<V>, level: string, c: Node<V>): void {
  if (n.children !== null) n.children.set(level, c);
  else if (n.child === undefined) {
    n.key = level;
    n.child = c;
  } else {
    n.children = new Map([[n.key!, n.child]]);
    n.children.set(level, c);
    n.key = undefined;
    n.child = undefined;
  }
}

function removeChild<V>(n: Node<V>, level: string): void {
  if (n.children !== null) n.children.delete(level);
  else if (n.key === level) {
    n.key = undefined;
    n.child = undefined;
  }
}

function hasChildren<V>(n: Node<V>): boolean {
  return n.children !== null ? n.children.size > 0 : n.child !== undefined;
}

function hasValues<V>(n: Node<V>): boolean {
  return n.values !== null ? n.values.size > 0 : n.value !== NO_VALUE;
}

/** Adds a value to a node; false when it was there already. */
function addValue<V>(n: Node<V>, v: V): boolean {
  if (n.values !== null) {
    if (n.values.has(v)) return false;
    n.values.add(v);
    return true;
  }
  if (n.value === NO_VALUE) {
    n.value = v;
    return true;
  }
  if (n.value === v) return false;
  n.values = new Set([n.value, v]);
  n.value = NO_VALUE;
  return true;
}

function deleteValue<V>(n: Node<V>, v: V): boolean {
  if (n.values !== null) return n.values.delete(v);
  if (n.value === NO_VALUE || n.value !== v) return false;
  n.value = NO_VALUE;
  return true;
}

function eachValue<V>(n: Node<V>, wild: boolean, fn: MatchFn<V>): void {
  if (n.values !== null) for (const v of n.values) fn(v, wild);
  else if (n.value !== NO_VALUE) fn(n.value, wild);
}

function isEmpty<V>(n: Node<V>): boolean {
  return !hasValues(n) && !hasChildren(n) && n.one === undefined && n.any === undefined && n.rest === undefined;
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
        next = childOf(node, level);
        if (!next) {
          next = newNode();
          addChild(node, level, next);
        }
      }
      node = next;
    }
    if (addValue(node, value)) this.count++;
  }

  remove(pattern: string | readonly Level[], value: V): boolean {
    const levels = typeof pattern === 'string' ? mqttLevels(pattern) : pattern;
    const path: Node<V>[] = [this.root];
    let node = this.root;
    for (const level of levels) {
      const next = level === ONE ? node.one : level === ANY ? node.any : level === REST ? node.rest : childOf(node, level);
      if (!next) return false;
      path.push(next);
      node = next;
    }
    if (!deleteValue(node, value)) return false;
    this.count--;
    // Prune empty branches so churn does not leak nodes.
    for (let i = levels.length; i > 0; i--) {
      if (!isEmpty(path[i])) break;
      const parent = path[i - 1];
      const level = levels[i - 1];
      if (level === ONE) parent.one = undefined;
      else if (level === ANY) parent.any = undefined;
      else if (level === REST) parent.rest = undefined;
      else removeChild(parent, level);
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
      if (!hasChildren(any) && any.one === undefined && any.any === undefined && any.rest === undefined) {
        // A trailing `#` (every MQTT `#`): it takes the remaining levels, zero or more, in one step.
        eachValue(any, wild || (i === 0 && n > 0), fn);
      } else {
        // `#` inside a pattern (AMQP): try every number of levels it could consume.
        for (let j = i; j <= n; j++) this.walk(any, levels, j, wild || (i === 0 && j > 0), fn);
      }
    }
    if (i === n) {
      eachValue(node, wild, fn);
      return;
    }
    const exact = childOf(node, levels[i]);
    if (exact !== undefined) this.walk(exact, levels, i + 1, wild, fn);
    const one = node.one;
    if (one !== undefined) this.walk(one, levels, i + 1, wild || i === 0, fn);
    const rest = node.rest;
    if (rest !== undefined) eachValue(rest, wild || i === 0, fn);
  }
}
