/**
 * Where a new JetStream consumer of a multi-partition stream starts: its deliver policy as offsets done in each
 * partition (consumer.ts ConsumerStart.floors), in the numbering of partition-seq.ts. A single-partition stream's start
 * is consumer-api.ts's startFloor / lastPerSubject.
 *
 * - all: every partition from its first record; new: from each partition's end;
 * - by_start_sequence: every record numbered opt_start_seq or above (each partition from its first such offset);
 * - by_start_time: each partition from its first record at or after opt_start_time;
 * - last: the stream's last message (matching the filter): the latest by record timestamp among the partitions' last
 *   ones (the highest sequence on a tie), then what comes after it in its partition and whatever arrives in the others;
 * - last_per_subject: each subject's latest message by record timestamp (the highest sequence on a tie) over every
 *   partition, then everything new.
 */
import type { Engine, Message } from '../../../core/index.js';
import type { ConsumerConfig } from './config.js';
import { readAt } from './consumer-parts.js';
import type { LastPerSubject } from './consumer.js';
import { firstOffsetFrom, seqOf } from './partition-seq.js';
import { lastMatching, scanLog } from './stream-info.js';
import { subjectMatches } from './subjects.js';

/** The offsets done in each of the stream's `n` partitions for a new consumer with `cfg` (not last_per_subject). */
export async function startFloors(engine: Engine, stream: string, n: number, cfg: ConsumerConfig): Promise<number[]> {
  const ends: number[] = [];
  for (let p = 0; p < n; p++) ends.push(engine.offsets(stream, p).highWatermark);
  switch (cfg.deliver_policy) {
    case 'new':
      return ends;
    case 'by_start_sequence': {
      const seq = cfg.opt_start_seq ?? 1;
      return ends.map((_, p) => firstOffsetFrom(n, p, seq));
    }
    case 'by_start_time': {
      const ts = Date.parse(cfg.opt_start_time ?? '');
      return Promise.all(ends.map((_, p) => engine.offsetForTimestamp(stream, p, ts)));
    }
    case 'last': {
      const filter = cfg.filter_subject;
      let best: { p: number; offset: number; ts: number; seq: number } | null = null;
      for (let p = 0; p < n; p++) {
        const { logStartOffset } = engine.offsets(stream, p);
        if (ends[p] <= logStartOffset) continue;
        const offset = filter === undefined ? ends[p] - 1 : await lastMatching(engine, stream, (m) => subjectMatches(filter, m.topic), p);
        if (offset < 0) continue;
        const m = await readAt(engine, stream, p, offset);
        if (m === null) continue;
        const seq = seqOf(n, p, offset);
        if (best === null || m.timestamp > best.ts || (m.timestamp === best.ts && seq > best.seq)) best = { p, offset, ts: m.timestamp, seq };
      }
      if (best !== null) ends[best.p] = best.offset;
      return ends;
    }
    default:
      return ends.map(() => 0);
  }
}

/** deliver_policy last_per_subject over `n` partitions, and the offsets done in each partition to start from. */
export async function lastPerSubjectParts(
  engine: Engine,
  stream: string,
  n: number,
  filter: string | undefined,
): Promise<{ lps: LastPerSubject; floors: number[] }> {
  const last = new Map<string, { ts: number; seq: number }>();
  const untils: number[] = [];
  for (let p = 0; p < n; p++) {
    const end = engine.offsets(stream, p).highWatermark;
    untils.push(end);
    await scanLog(
      engine,
      stream,
      end,
      (local: number, m: Message) => {
        if (filter !== undefined && !subjectMatches(filter, m.topic)) return;
        const seq = seqOf(n, p, local - 1);
        const had = last.get(m.topic);
        if (had === undefined || m.timestamp > had.ts || (m.timestamp === had.ts && seq > had.seq)) last.set(m.topic, { ts: m.timestamp, seq });
      },
      p,
    );
  }
  const sorted = [...last.values()].map((v) => v.seq).sort((a, b) => a - b);
  // Each partition from its first chosen record (or its end when none of them is there).
  const floors = untils.slice();
  for (const seq of sorted) {
    const p = (seq - 1) % n;
    floors[p] = Math.min(floors[p], Math.floor((seq - 1) / n));
  }
  return { lps: { until: seqOf(n, n - 1, Math.max(...untils)), untils, seqs: new Set(sorted), sorted }, floors };
}
