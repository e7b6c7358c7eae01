/**
 * The chaos runner's checker (bench/reliability/chaos.ts): reads back through the protocols what each load was
 * acknowledged and compares. Kafka records, the MQTT messages a stream captured and the JetStream messages are read
 * with kcat (librdkafka) from every broker's bootstrap list; the AMQP queue is consumed up to a marker published
 * after the load (crash-loads.ts). Each message number was sent in one fault window (the last fault injected before
 * it was sent, or none); the tallies are kept per load and per fault kind.
 *
 * Rules: every acknowledged message must be found (lost = acknowledged and not found). Duplicates are counted; they
 * fail the run only for the idempotent Kafka producer (exactly once), which must also keep each partition and each
 * key in order (the record numbers of a partition, first copies, increasing).
 */
import { kcatConsume, type KcatMessage } from '../../test/e2e/harness.js';
import { KAFKA_KEYS } from './chaos-loads.js';

export interface Tally {
  acked: number;
  found: number;
  lost: number;
  /** Extra copies found (a message found 3 times counts 2). */
  duplicates: number;
  lostSample: number[];
}

export interface LoadResult extends Tally {
  name: string;
  /** What the protocol promises: duplicates fail the run only where 'exactly-once'. */
  promise: 'exactly-once' | 'at-least-once';
  /** Kafka: partitions or keys out of order (first copies). */
  orderBreaks: number;
  failures: number;
  /** Per fault window index: acked, lost, duplicates. */
  byWindow: Map<number, { acked: number; lost: number; duplicates: number }>;
}

/** Counts of each message number found. */
export type Counts = Map<number, number>;

const bump = (m: Counts, n: number): void => void m.set(n, (m.get(n) ?? 0) + 1);

/**
 * The tally of one load: `acked` against `found`, each message attributed to the window it was sent in (`sentIn`,
 * message number -> window index; 0 when before any fault).
 */
export function tallyLoad(
  o: { name: string; promise: LoadResult['promise']; failures: number; orderBreaks?: number },
  acked: Set<number>,
  found: Counts,
  sentIn: Map<number, number>,
): LoadResult {
  const r: LoadResult = {
    name: o.name,
    promise: o.promise,
    orderBreaks: o.orderBreaks ?? 0,
    failures: o.failures,
    acked: acked.size,
    found: 0,
    lost: 0,
    duplicates: 0,
    lostSample: [],
    byWindow: new Map(),
  };
  const w = (n: number) => {
    const i = sentIn.get(n) ?? 0;
    let x = r.byWindow.get(i);
    if (!x) r.byWindow.set(i, (x = { acked: 0, lost: 0, duplicates: 0 }));
    return x;
  };
  for (const n of acked) {
    w(n).acked++;
    if ((found.get(n) ?? 0) > 0) r.found++;
    else {
      r.lost++;
      w(n).lost++;
      if (r.lostSample.length < 20) r.lostSample.push(n);
    }
  }
  for (const [n, c] of found) {
    if (c > 1) {
      r.duplicates += c - 1;
      w(n).duplicates += c - 1;
    }
  }
  return r;
}

/** Every record of a stream, through kcat from the bootstrap list. */
export function readStream(bootstrap: string[], topic: string): Promise<KcatMessage[]> {
  return kcatConsume(bootstrap.join(','), topic);
}

/** `prefix:<n>` payloads of a stream, counted (others ignored). */
export function countPayloads(records: KcatMessage[], prefix: string): Counts {
  const m: Counts = new Map();
  for (const r of records) {
    const [p, n] = String(r.payload).split(':');
    if (p === prefix) bump(m, Number(n));
  }
  return m;
}

/**
 * The Kafka topic's counts and order breaks: within each partition, by offset, the first copy of each record number
 * must be larger than the previous one; the same for each key (`k<n % KAFKA_KEYS>`), which must also stay in one
 * partition.
 */
export function checkKafka(records: KcatMessage[]): { counts: Counts; orderBreaks: number; breaks: string[]; where: Map<number, string[]> } {
  const counts: Counts = new Map();
  const sorted = [...records].sort((a, b) => a.partition - b.partition || a.offset - b.offset);
  const lastByPartition = new Map<number, number>();
  const lastByKey = new Map<string, { n: number; partition: number }>();
  const breaks: string[] = [];
  // Where each record number was found (partition/offset), for the report of duplicates.
  const where = new Map<number, string[]>();
  for (const r of sorted) {
    const n = Number(String(r.payload).split(':')[1]);
    where.set(n, [...(where.get(n) ?? []), `${r.partition}/${r.offset}`]);
    const seen = counts.has(n);
    bump(counts, n);
    if (seen) continue;
    const last = lastByPartition.get(r.partition) ?? -1;
    if (n <= last) breaks.push(`partition ${r.partition} offset ${r.offset}: record ${n} after ${last}`);
    lastByPartition.set(r.partition, n);
    const key = r.key ?? `k${n % KAFKA_KEYS}`;
    const k = lastByKey.get(key);
    if (k && (k.partition !== r.partition || n <= k.n))
      breaks.push(`key ${key}: record ${n} (partition ${r.partition}) after ${k.n} (partition ${k.partition})`);
    lastByKey.set(key, { n, partition: r.partition });
  }
  return { counts, orderBreaks: breaks.length, breaks, where };
}

export interface FaultRow {
  kind: string;
  injected: number;
  acked: number;
  lost: number;
  duplicates: number;
}

/**
 * Per fault kind: faults injected, and the acknowledged, lost and duplicated messages sent while it was the last
 * fault injected, over every load.
 */
export function faultTable(kinds: readonly string[], windows: Array<{ kind: string }>, loads: LoadResult[]): FaultRow[] {
  const rows = new Map<string, FaultRow>();
  for (const k of ['none', ...kinds]) rows.set(k, { kind: k, injected: 0, acked: 0, lost: 0, duplicates: 0 });
  for (const w of windows.slice(1)) rows.get(w.kind)!.injected++;
  for (const l of loads) {
    for (const [i, x] of l.byWindow) {
      const row = rows.get(windows[i]?.kind ?? 'none')!;
      row.acked += x.acked;
      row.lost += x.lost;
      row.duplicates += x.duplicates;
    }
  }
  return [...rows.values()];
}

const num = (n: number) => n.toLocaleString('en-US');

/** A text table with right-aligned numbers. */
export function table(head: string[], rows: Array<Array<string | number>>): string {
  const cells = [head, ...rows.map((r) => r.map((c) => (typeof c === 'number' ? num(c) : c)))];
  const width = head.map((_, i) => Math.max(...cells.map((r) => String(r[i]).length)));
  return cells
    .map((r, ri) =>
      r
        .map((c, i) => (ri === 0 || !/^[\d,.-]+$/.test(String(c)) ? String(c).padEnd(width[i]!) : String(c).padStart(width[i]!)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}
