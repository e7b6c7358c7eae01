/**
 * What a JetStream consumer (consumer.ts) keeps across a restart and over partitions: the keys its stored
 * configuration carries beside nats-server's fields, the state read back from a stored record (renumbered when the
 * stream grew), each partition's ack floor, num_pending over partitions, and where a consumer continuing it starts.
 */
import type { Engine, StreamDef } from '../../../core/index.js';
import type { ConsumerConfig } from './config.js';
import { newPart, type Part } from './consumer-parts.js';
import { placeOf, seqOf } from './partition-seq.js';
import { jsOptions, needsView } from './stream-view.js';

/** The key under which a stored consumer configuration carries `since` (not part of nats-server's config). */
export const SINCE_KEY = 'flowmq_interest_since';
/** The key under which it carries the delivery counts above 1 of unacked deliveries, flat [seq, count, ...]. */
export const DELIVERIES_KEY = 'flowmq_deliveries';
/**
 * The key under which a consumer of a multi-partition stream carries its positions: `n` partitions (its sequences'
 * numbering), and per partition the offsets done (`floors`) and the highest delivered offset + 1 (`delivered`).
 */
export const PARTS_KEY = 'flowmq_partitions';

/**
 * The partitions a consumer of the stream reads: all of them, or partition 0 alone on a stream with a view (deletes,
 * limits, rollups, retention, mirrors: stream-view.ts numbers partition 0 only). Consumers are not made on such a
 * stream of several partitions (consumer-api.ts); one made before the stream grew through Kafka goes on as it was.
 */
export function consumedPartitions(def: StreamDef): number {
  return def.partitions > 1 && needsView(jsOptions(def)) ? 1 : Math.max(1, def.partitions);
}

/** PARTS_KEY's value, checked (null: absent or unreadable). */
function storedParts(v: unknown): { n: number; floors: number[]; delivered: number[] } | null {
  if (v === null || typeof v !== 'object') return null;
  const { n, floors, delivered } = v as { n?: unknown; floors?: unknown; delivered?: unknown };
  const counts = (a: unknown): a is number[] => Array.isArray(a) && a.every((x) => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0);
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 1 || !counts(floors) || !counts(delivered)) return null;
  if (floors.length !== n || delivered.length !== n) return null;
  return { n, floors, delivered };
}

/** What a consumer starts from: a stored record, or a new consumer's floor (with one per partition on P > 1). */
export interface ConsumerStart {
  deliveredSeq: number;
  deliveredConsumerSeq: number;
  ackFloor: number;
  acked: number[];
  /** A new consumer of a multi-partition stream: offsets done in each partition (its deliver policy). */
  floors?: number[];
}

/** deliver_policy last_per_subject: up to `until`, only these sequences (each subject's last when created). */
export interface LastPerSubject {
  until: number;
  /** A multi-partition stream: `until` of each partition, as local sequences (offset + 1). */
  untils?: number[];
  seqs: Set<number>;
  /** The same, ascending. */
  sorted: number[];
}

/**
 * A consumer's state over `n` partitions from where it starts (consumer.ts's model): each partition's position, the
 * acks above the floors and the delivery counts (renumbered from the count they were stored with), `since`, and the
 * configuration without FlowMQ's keys. A stored single-partition state is partition 0's (a stream grown by
 * CreatePartitions starts its new partitions at 0).
 */
export function restoreState(
  n: number,
  config: ConsumerConfig,
  state: ConsumerStart,
): { parts: Part[]; acked: number[]; rdc: Map<number, number>; since: number; config: ConsumerConfig } {
  const stored = config as ConsumerConfig & { [SINCE_KEY]?: unknown; [DELIVERIES_KEY]?: unknown; [PARTS_KEY]?: unknown };
  // Each partition's done offsets and highest delivered offset + 1, numbered over `was` partitions.
  let was = 1;
  let floors = [state.ackFloor];
  let delivered = [state.deliveredSeq];
  const kept = storedParts(stored[PARTS_KEY]);
  if (state.floors !== undefined) {
    was = n;
    floors = state.floors;
    delivered = state.floors;
  } else if (kept !== null) ({ n: was, floors, delivered } = kept);
  const parts: Part[] = [];
  for (let p = 0; p < n; p++) parts.push(newPart(p, floors[p] ?? 0, delivered[p] ?? 0));
  /** A stored sequence renumbered over the partitions now; null when done or unknown. */
  const renumber = (seq: number, upToDelivered: boolean): number | null => {
    const { partition, offset } = placeOf(was, seq);
    const pt = parts[partition];
    if (pt === undefined || offset + 1 <= (floors[partition] ?? 0)) return null;
    if (upToDelivered && offset + 1 > pt.replayUpTo) return null;
    return seqOf(n, partition, offset);
  };
  const acked = new Set<number>();
  for (const s of state.acked) {
    const r = Number.isSafeInteger(s) && s >= 1 ? renumber(s, false) : null;
    if (r !== null) acked.add(r);
  }
  const rdc = new Map<number, number>();
  let since = 0;
  if (stored[SINCE_KEY] !== undefined || stored[DELIVERIES_KEY] !== undefined || stored[PARTS_KEY] !== undefined) {
    // A configuration loaded from the store: `since`, the positions and the delivery counts out of it (record()).
    const { [SINCE_KEY]: s, [DELIVERIES_KEY]: counts, [PARTS_KEY]: _parts, ...rest } = stored;
    if (typeof s === 'number' && Number.isSafeInteger(s)) since = s;
    if (Array.isArray(counts)) {
      for (let i = 0; i + 1 < counts.length; i += 2) {
        const seq: unknown = counts[i];
        const c: unknown = counts[i + 1];
        if (typeof seq !== 'number' || typeof c !== 'number' || !Number.isSafeInteger(seq) || !Number.isSafeInteger(c) || seq < 1) continue;
        const r = renumber(seq, true);
        if (r !== null && c > 1 && !acked.has(r)) rdc.set(r, c);
      }
    }
    config = rest;
  }
  return { parts, acked: [...acked], rdc, since, config };
}

/** Where stream sequence `seq` is among `parts`: its partition, and its offset + 1 (one part: seq itself). */
export function locate(parts: Part[], seq: number): { pt: Part; local: number } {
  if (parts.length === 1) return { pt: parts[0], local: seq };
  const { partition, offset } = placeOf(parts.length, seq);
  return { pt: parts[partition], local: offset + 1 };
}

/**
 * Offsets done in each partition (the per-partition ack floors, as local sequences), given the pending deliveries'
 * sequences in first-delivery order.
 */
export function partFloors(parts: Part[], pending: Iterable<number>): number[] {
  const out = parts.map((pt) => pt.cursor - 1);
  if (parts.length === 1) {
    for (const k of pending) return [k - 1];
    return out;
  }
  // Per partition, first deliveries are in offset order: a partition's first pending key is its lowest.
  const seen = new Set<number>();
  for (const k of pending) {
    const { pt, local } = locate(parts, k);
    if (seen.has(pt.index)) continue;
    seen.add(pt.index);
    out[pt.index] = Math.min(out[pt.index], local - 1);
    if (seen.size === parts.length) break;
  }
  return out;
}

/**
 * num_pending over P > 1 partitions (no view: consumer-api.ts refuses those streams): what each partition holds past
 * its cursor (an upper bound for a filtered consumer), deliver last_per_subject's choice while not passed.
 */
export function pendingOverParts(engine: Engine, stream: string, parts: Part[], lps: LastPerSubject | null): number {
  let n = 0;
  for (const pt of parts) {
    const { highWatermark } = engine.offsets(stream, pt.index);
    const until = lps?.untils?.[pt.index] ?? 0;
    n += Math.max(0, highWatermark - Math.max(pt.cursor - 1, until));
  }
  if (lps !== null) {
    for (const seq of lps.sorted) {
      const { pt, local } = locate(parts, seq);
      if (local >= pt.cursor) n++;
    }
  }
  return n;
}

/**
 * Where a consumer continuing one that delivered `recent` (its latest deliveries, in order) after stream sequence
 * `seq - 1` starts: the offsets done in each partition right after that delivery, or null when it is not among them.
 */
export function continuationOf(parts: Part[], recent: number[], seq: number): number[] | null {
  if (seq < 2) return null;
  const j = recent.lastIndexOf(seq - 1);
  if (j < 0) return null;
  const floors = parts.map((pt) => pt.cursor - 1);
  // Each partition back to before its first delivery after seq - 1 (the cursor went past it since).
  const seen = new Set<number>();
  for (let k = j + 1; k < recent.length && seen.size < parts.length; k++) {
    const { pt, local } = locate(parts, recent[k]);
    if (seen.has(pt.index)) continue;
    seen.add(pt.index);
    floors[pt.index] = Math.min(floors[pt.index], local - 1);
  }
  return floors;
}
