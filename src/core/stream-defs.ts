/**
 * Streams as the engine holds them: the spec a caller creates one with, its settings checked into a definition,
 * the entry kept by name (with its own unified topic), and where a message captured by a stream goes (whether a
 * binding reaches its topic; the partition, murmur2 of the key as Kafka's default partitioner).
 */
import { FlowError } from './errors.js';
import type { Message } from './message.js';
import type { StreamDef, StreamSettings } from './streams.js';
import { matches, validateTopic } from './topic.js';

export interface StreamSpec {
  name: string;
  partitions: number;
  bindings?: string[];
  retentionMs?: number | null;
  retentionBytes?: number | null;
  segmentBytes?: number | null;
  segmentMs?: number | null;
  configs?: Readonly<Record<string, string>>;
  /**
   * The name is namespace-qualified (`<ns>~<name>`, namespaces.ts), made by an adapter that isolates namespaces;
   * without it such a name is refused, so no client of an adapter that does not isolate them can make one.
   */
  namespaced?: boolean;
}

/**
 * Checks a stream's settings and returns them as a definition holds them: the optional ones only when set, so a
 * stream with none has the same definition as before they existed.
 */
export function streamSettings(s: Partial<StreamSettings>): StreamSettings {
  const retentionMs = s.retentionMs ?? null;
  if (retentionMs !== null && (!Number.isFinite(retentionMs) || retentionMs <= 0)) {
    throw new FlowError('INVALID_ARGUMENT', 'retention must be a positive duration');
  }
  const out: StreamSettings = { retentionMs };
  const whole = (what: string, v: number | null | undefined, min: number): number | null => {
    if (v === null || v === undefined) return null;
    if (!Number.isSafeInteger(v) || v < min) throw new FlowError('INVALID_ARGUMENT', `${what} must be an integer >= ${min}`);
    return v;
  };
  const retentionBytes = whole('retention bytes', s.retentionBytes, 0);
  const segmentBytes = whole('segment bytes', s.segmentBytes, 1);
  const segmentMs = whole('segment age', s.segmentMs, 1);
  if (retentionBytes !== null) out.retentionBytes = retentionBytes;
  if (segmentBytes !== null) out.segmentBytes = segmentBytes;
  if (segmentMs !== null) out.segmentMs = segmentMs;
  if (s.configs !== undefined) {
    const entries = Object.entries(s.configs);
    if (!entries.every(([k, v]) => typeof k === 'string' && typeof v === 'string'))
      throw new FlowError('INVALID_ARGUMENT', 'stream configs must map names to strings');
    if (entries.length > 0) out.configs = Object.fromEntries(entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }
  return out;
}

export interface StreamEntry {
  def: StreamDef;
  /** The stream's own unified topic (its name with dots as levels). */
  ownTopic: string;
}

export const MAX_PARTITIONS = 10000;

/** True when `topic` is a valid topic that one of the stream's bindings matches. */
export function canCapture(e: StreamEntry, topic: string): boolean {
  try {
    validateTopic(topic);
  } catch {
    return false;
  }
  return e.def.bindings.some((b) => matches(b, topic));
}

/**
 * Partition of a message captured by a stream: by key when there is one (murmur2, as Kafka's default
 * partitioner, so keys land where Kafka clients would put them), else by topic, so one device's messages
 * stay in order.
 */
export function partitionFor(msg: Message, partitions: number): number {
  if (partitions === 1) return 0;
  const h = murmur2(msg.key ?? Buffer.from(msg.topic));
  return (h & 0x7fffffff) % partitions;
}

/** Kafka's murmur2 (seed 0x9747b28c). */
export function murmur2(data: Uint8Array): number {
  const m = 0x5bd1e995;
  const len = data.length;
  let h = 0x9747b28c ^ len;
  let i = 0;
  for (; i + 4 <= len; i += 4) {
    let k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  const rest = len - i;
  if (rest >= 3) h ^= data[i + 2] << 16;
  if (rest >= 2) h ^= data[i + 1] << 8;
  if (rest >= 1) {
    h ^= data[i];
    h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}
