/**
 * Matching rules per binding. A binding's key is parsed by its rule into trie levels (trie.ts); the rule, not the
 * trie, decides what the wildcards are and where they may stand:
 *
 * - 'amqp' (AMQP 0-9-1 topic exchanges, spec 3.1.3.3): words separated by `.`, `*` one word, `#` zero or more
 *   words at any position. No `$` rule: RabbitMQ's topic exchange has none.
 * - 'mqtt' (MQTT subscriptions and stream bindings): levels separated by `/`, `+` one level, `#` the rest
 *   including the parent (`a/#` matches `a`), last only; wildcards at the first level do not match topics starting
 *   with `$` ([MQTT-4.7.2-1]), applied with the trie's `firstWild` flag (mqttAccepts).
 * - 'nats': tokens separated by `.`, `*` one token, `>` one or more trailing tokens (`a.>` does not match `a`).
 *
 * On the unified topic space (`amq.topic`) the dot-separated keys are mapped with the separator swap of topic.ts,
 * word by word (`/` inside a word is `.` inside a level), so every rule's pattern lands in the same trie as
 * levels of unified topics.
 */
import { FlowError } from './errors.js';
import { isReservedTopic, NS_ROOT } from './namespaces.js';
import { validateFilter } from './topic.js';
import { ANY, type Level, mqttLevels, ONE, REST } from './trie.js';

export type MatchRule = 'amqp' | 'mqtt' | 'nats';

/**
 * Parses a topic binding key into trie levels. `swap`: the key is matched against unified topics (amq.topic), so
 * a `/` inside a dot-separated word is a `.` inside a level. Throws INVALID_FILTER for keys the rule forbids.
 */
export function parseBindingKey(key: string, rule: MatchRule, swap: boolean, namespace: string | null = null): Level[] {
  if (rule === 'mqtt') {
    validateFilter(key);
    return mqttLevels(key);
  }
  if (key.includes('\u0000')) throw new FlowError('INVALID_FILTER', 'binding key must not contain NUL');
  // AMQP: the empty key is zero words (as RabbitMQ splits it), so it matches only the empty routing key and `#`.
  if (key.length === 0) {
    if (rule === 'nats') throw new FlowError('INVALID_FILTER', 'NATS subject must not be empty');
    return [];
  }
  const words = key.split('.');
  // The unified topic space's `$ns` level (namespaces.ts) is no client's to bind: a NATS subject may start with
  // `$ns.<ns>.` only when the NATS adapter qualified a subscription of namespace `<ns>` so (SubscribeOptions.namespace;
  // a `.` of the namespace's name is a `/` of that word, the separator swap); on amq.topic only a binding whose
  // destination is of namespace `<ns>` may name `$ns.<ns>.` (the AMQP adapter qualifies a vhost's keys so, router.ts
  // gives the destination's namespace).
  if (
    (rule === 'nats' || swap) &&
    words[0] === NS_ROOT &&
    !(namespace !== null && words.length > 2 && (rule === 'nats' ? words[1]!.replaceAll('/', '.') : words[1]) === namespace)
  ) {
    throw new FlowError('INVALID_FILTER', `"${key}" is in the reserved $ns space`);
  }
  const out: Level[] = [];
  for (let i = 0; i < words.length; i++) {
    const w = words[i];
    if (rule === 'amqp') {
      if (w === '#') {
        // `#.#` is `#`: collapsing keeps the trie from reaching one value along many paths.
        if (out.length === 0 || out[out.length - 1] !== ANY) out.push(ANY);
        continue;
      }
      if (w === '*') {
        out.push(ONE);
        continue;
      }
    } else {
      if (w.length === 0) throw new FlowError('INVALID_FILTER', `NATS subject "${key}" has an empty token`);
      if (w === '*') {
        out.push(ONE);
        continue;
      }
      if (w === '>') {
        if (i !== words.length - 1) throw new FlowError('INVALID_FILTER', `">" must be the last token of "${key}"`);
        out.push(REST);
        continue;
      }
    }
    out.push(swap && w.includes('/') ? w.replaceAll('/', '.') : w);
  }
  return out;
}

/**
 * The levels a routing key is matched with on a topic exchange other than the unified topic space: its words. The
 * empty key is zero words (RabbitMQ: only `#` and the empty binding key match it).
 */
export function routingKeyLevels(routingKey: string): string[] {
  return routingKey.length === 0 ? [] : routingKey.split('.');
}

/** The MQTT `$` rule: a value matched through a first-level wildcard is refused for a `$` topic. */
export function mqttAccepts(topic: string, firstWild: boolean): boolean {
  return !firstWild || topic.charCodeAt(0) !== 0x24;
}

/**
 * The rule of every binding: MQTT's `$` rule for 'mqtt', and for every rule the namespace rule (namespaces.ts): a
 * first-level wildcard (AMQP `#`, NATS `>`) never matches a topic of the reserved `$ns` space, so no binding or
 * subscription of one namespace reaches another namespace's topics.
 */
export function ruleAccepts(rule: MatchRule, topic: string, firstWild: boolean): boolean {
  if (!firstWild || topic.charCodeAt(0) !== 0x24) return true;
  return rule !== 'mqtt' && !isReservedTopic(topic);
}

// ---------------------------------------------------------------- headers exchanges

export type XMatch = 'all' | 'any' | 'all-with-x' | 'any-with-x';

/** A headers binding, parsed once: the x-match mode and the header values to compare (as text or bytes). */
export interface HeadersPattern {
  mode: XMatch;
  /**
   * null value: presence only (an AMQP void value in the binding, as RabbitMQ matches it). `cls`: the value's type
   * class as the binding's JSON arguments give it (see Message.amqpHeaderClasses).
   */
  entries: Array<{ key: string; value: Buffer | null; cls: string | null }>;
}

/** Unwraps a tagged field-table value ({ type, value }) as the AMQP codec may give it. */
function plain(v: unknown): unknown {
  if (v !== null && typeof v === 'object' && !Buffer.isBuffer(v) && !(v instanceof Uint8Array) && 'value' in v) {
    return (v as { value: unknown }).value;
  }
  return v;
}

/** A binding argument as the bytes a message header would carry (UTF-8 text of scalars). */
function argBytes(v: unknown): Buffer | null {
  v = plain(v);
  if (v === null || v === undefined) return null;
  if (Buffer.isBuffer(v)) return v;
  if (v instanceof Uint8Array) return Buffer.from(v);
  if (typeof v === 'string') return Buffer.from(v);
  if (typeof v === 'number' || typeof v === 'bigint' || typeof v === 'boolean') return Buffer.from(String(v));
  return Buffer.from(JSON.stringify(v));
}

/**
 * The type class of a binding argument as stored (JSON: AMQP integers of any width are numbers, strings strings); a
 * whole number is `int` (a double binding value such as 1.0 is one too: JSON cannot tell them apart).
 */
function argClass(v: unknown): string | null {
  v = plain(v);
  if (v === null || v === undefined) return null;
  if (typeof v === 'number') return Number.isInteger(v) ? 'int' : 'float';
  if (typeof v === 'bigint') return 'int';
  if (typeof v === 'boolean') return 'bool';
  if (typeof v === 'string') return 'str';
  if (Buffer.isBuffer(v) || v instanceof Uint8Array) return 'bytes';
  return Array.isArray(v) ? 'array' : 'table';
}

/**
 * Parses headers-exchange binding arguments. `x-match` defaults to `all` (AMQP 0-9-1 spec 3.1.3.4); RabbitMQ adds
 * `all-with-x` / `any-with-x`, which also compare arguments starting with `x-` (plain all/any ignore them).
 */
export function parseHeadersBinding(args: Record<string, unknown>): HeadersPattern {
  const raw = plain(args['x-match']);
  let mode: XMatch = 'all';
  if (raw !== undefined) {
    const s = Buffer.isBuffer(raw) ? raw.toString() : String(raw);
    if (s !== 'all' && s !== 'any' && s !== 'all-with-x' && s !== 'any-with-x') {
      throw new FlowError('INVALID_ARGUMENT', `invalid x-match "${s}": use all, any, all-with-x or any-with-x`);
    }
    mode = s;
  }
  const withX = mode === 'all-with-x' || mode === 'any-with-x';
  const entries: HeadersPattern['entries'] = [];
  for (const [key, v] of Object.entries(args)) {
    if (key === 'x-match') continue;
    if (!withX && key.startsWith('x-')) continue;
    entries.push({ key, value: argBytes(v), cls: argClass(v) });
  }
  return { mode, entries };
}

/**
 * Does a message's headers match? Values compare by their bytes (message headers carry AMQP values as UTF-8 text
 * of the value, MQTT v5 user properties and Kafka headers as they are) and, for a header whose type class the
 * message names (`classes`: an AMQP publish), by class too, as RabbitMQ compares typed values: an int 1 matches an
 * int binding value 1 (any width), not the string "1". `all` with no entries matches every message, `any` with none
 * matches nothing (RabbitMQ).
 */
export function headersMatch(p: HeadersPattern, headers: ReadonlyArray<{ key: string; value: Buffer | null }>, classes?: ReadonlyMap<string, string>): boolean {
  const all = p.mode === 'all' || p.mode === 'all-with-x';
  for (const e of p.entries) {
    let hit = false;
    for (const h of headers) {
      if (h.key !== e.key) continue;
      if (e.value === null) {
        hit = true;
        break;
      }
      const cls = classes?.get(h.key);
      if (cls !== undefined && cls !== e.cls) continue;
      if (h.value !== null && h.value.equals(e.value)) {
        hit = true;
        break;
      }
    }
    if (all && !hit) return false;
    if (!all && hit) return true;
  }
  return all;
}
