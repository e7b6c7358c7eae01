/**
 * Unified topic names. The canonical form separates levels with `/` (as MQTT does); filters use `+` for one
 * level and `#` for the rest. Names of dot-separated protocols (Kafka, NATS, AMQP) are translated here.
 */
import { FlowError } from './errors.js';

export const MAX_TOPIC_BYTES = 65535;

/** A publishable topic: non-empty, no wildcards, no NUL. */
export function validateTopic(topic: string): void {
  if (topic.length === 0) throw new FlowError('INVALID_TOPIC', 'topic must not be empty');
  if (Buffer.byteLength(topic) > MAX_TOPIC_BYTES) throw new FlowError('INVALID_TOPIC', 'topic too long');
  for (let i = 0; i < topic.length; i++) {
    const c = topic.charCodeAt(i);
    if (c === 0x2b /* + */ || c === 0x23 /* # */) {
      throw new FlowError('INVALID_TOPIC', `topic "${topic}" must not contain wildcards`);
    }
    if (c === 0) throw new FlowError('INVALID_TOPIC', 'topic must not contain NUL');
  }
}

/** A subscription filter: `+` must fill a whole level, `#` must be the whole last level. */
export function validateFilter(filter: string): void {
  if (filter.length === 0) throw new FlowError('INVALID_FILTER', 'filter must not be empty');
  if (Buffer.byteLength(filter) > MAX_TOPIC_BYTES) throw new FlowError('INVALID_FILTER', 'filter too long');
  const levels = filter.split('/');
  for (let i = 0; i < levels.length; i++) {
    const l = levels[i];
    if (l.includes('\u0000')) throw new FlowError('INVALID_FILTER', 'filter must not contain NUL');
    if (l.includes('#') && (l !== '#' || i !== levels.length - 1)) {
      throw new FlowError('INVALID_FILTER', `"#" must be the last level on its own in "${filter}"`);
    }
    if (l.includes('+') && l !== '+') {
      throw new FlowError('INVALID_FILTER', `"+" must occupy a whole level in "${filter}"`);
    }
  }
}

/**
 * Does `filter` match `topic`? Wildcards at the first level never match a topic starting with `$`
 * (MQTT [MQTT-4.7.2-1]), so `#` does not capture `$SYS/...`.
 */
export function matches(filter: string, topic: string): boolean {
  const f = filter.split('/');
  const t = topic.split('/');
  if (topic.startsWith('$') && (f[0] === '+' || f[0] === '#')) return false;
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '#') return true;
    if (i >= t.length) return false;
    if (f[i] !== '+' && f[i] !== t[i]) return false;
  }
  return f.length === t.length;
}

/** Kafka topic names: [a-zA-Z0-9._-], 1..249 chars, not "." or "..". */
const KAFKA_NAME = /^[a-zA-Z0-9._-]{1,249}$/;

export function isValidStreamName(name: string): boolean {
  return KAFKA_NAME.test(name) && name !== '.' && name !== '..';
}

/** Kafka topic `a.b.c` is the unified topic `a/b/c`. */
export function kafkaToUnified(name: string): string {
  return name.split('.').join('/');
}

/**
 * The Kafka name of a unified topic, or null when it cannot be expressed (a level holding a `.` or a
 * character Kafka forbids, or an empty level).
 */
export function unifiedToKafka(topic: string): string | null {
  const levels = topic.split('/');
  for (const l of levels) if (l.length === 0 || l.includes('.')) return null;
  const name = levels.join('.');
  return isValidStreamName(name) ? name : null;
}

/**
 * Names across protocols: a dot-separated name (an AMQP routing key on a topic exchange, a NATS subject, a Kafka
 * topic) is a unified topic with the two separators swapped: every `.` becomes `/` and every `/` becomes `.`
 * (`a.b.c` is `a/b/c`; the AMQP key `x/y.z` is the unified topic `x.y/z`: a `/` inside a word is a `.` inside a
 * level, and the reverse). The swap is its own inverse, so the mapping is a bijection and needs no escape
 * character; it is what RabbitMQ's MQTT plugin does between MQTT topics and AMQP routing keys. Kafka names cannot
 * hold `/`, so for them it is the same as kafkaToUnified.
 */
export function swapSeparators(name: string): string {
  const dot = name.indexOf('.');
  const slash = name.indexOf('/');
  if (slash < 0) return dot < 0 ? name : name.replaceAll('.', '/');
  if (dot < 0) return name.replaceAll('/', '.');
  let out = '';
  for (let i = 0; i < name.length; i++) {
    const c = name[i];
    out += c === '.' ? '/' : c === '/' ? '.' : c;
  }
  return out;
}

/** The unified topic of a dot-separated name (AMQP routing key, NATS subject). */
export const dotsToUnified = swapSeparators;
/** The dot-separated name (AMQP routing key, NATS subject) of a unified topic. */
export const unifiedToDots = swapSeparators;

/** True when `topic` can be published by MQTT (validateTopic would accept it). */
export function isValidTopic(topic: string): boolean {
  if (topic.length === 0 || topic.length > MAX_TOPIC_BYTES) return false;
  for (let i = 0; i < topic.length; i++) {
    const c = topic.charCodeAt(i);
    if (c === 0x2b || c === 0x23 || c === 0) return false;
  }
  return Buffer.byteLength(topic) <= MAX_TOPIC_BYTES;
}
