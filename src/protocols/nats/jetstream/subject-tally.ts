/**
 * Messages per subject of a stream that has no view (stream-view.ts keeps its own): what STREAM.INFO reports as
 * `state.num_subjects` and, asked with `subjects_filter`, `state.subjects`. Counted from partition 0's log and kept
 * per stream; each request reads only what was appended since the last one, and a moved log start (a purge,
 * retention by age or size) starts the count over. A request that did not ask for subjects does not wait for a
 * long first read (soon()). Its memory is a map entry per subject. It also sums the messages' sizes as nats-server
 * counts them (storedSize): the stream's `state.bytes`.
 */
import { decodeBatch, recordToMessage, unifiedToDots, type Engine, type StreamDef } from '../../../core/index.js';
import { subjectMatches } from './subjects.js';
import { subjectLength } from './names.js';
import { headerBlockLength, jsOptions, storedSize } from './stream-view.js';

export class SubjectTally {
  /** Messages per subject (unified topic) among offsets [start, scanned). */
  private readonly counts = new Map<string, number>();
  /** The sizes of the messages among offsets [start, scanned) (storedSize). */
  private size = 0;
  private readonly memory: boolean;
  private start = -1;
  private scanned = 0;
  private running: Promise<void> | null = null;

  constructor(
    readonly def: StreamDef,
    private readonly engine: Engine,
  ) {
    this.memory = jsOptions(def).memory;
  }

  /** The bytes of the messages counted so far (caught up by soon() or current()). */
  get bytes(): number {
    return this.size;
  }

  /**
   * The counts caught up with the log when at most `maxBacklog` messages are left to read (a first look at a long
   * stream reads it whole); otherwise null, and the reading goes on in the background for the next request.
   */
  async soon(maxBacklog: number): Promise<ReadonlyMap<string, number> | null> {
    const { logStartOffset, highWatermark } = this.engine.offsets(this.def.name, 0);
    const from = logStartOffset !== this.start || highWatermark < this.scanned ? logStartOffset : this.scanned;
    if (highWatermark - from <= maxBacklog) return this.current();
    if (this.running === null) void this.current().catch(() => undefined);
    return null;
  }

  /** The counts, caught up with the log. */
  async current(): Promise<ReadonlyMap<string, number>> {
    while (this.running !== null) await this.running;
    const { logStartOffset, highWatermark } = this.engine.offsets(this.def.name, 0);
    if (logStartOffset !== this.start || highWatermark < this.scanned) {
      this.counts.clear();
      this.size = 0;
      this.start = logStartOffset;
      this.scanned = logStartOffset;
    }
    if (this.scanned < highWatermark) {
      this.running = this.scan(highWatermark).finally(() => (this.running = null));
      await this.running;
    }
    return this.counts;
  }

  private async scan(to: number): Promise<void> {
    const name = this.def.name;
    const own = name.split('.').join('/');
    while (this.scanned < to) {
      const from = this.scanned;
      const batches = await this.engine.read(name, 0, from, 1024 * 1024);
      for (const b of batches) {
        for (const rec of decodeBatch(b)) {
          if (rec.offset < this.scanned || rec.offset >= to) continue;
          const m = recordToMessage(rec, own);
          const topic = m.topic;
          this.counts.set(topic, (this.counts.get(topic) ?? 0) + 1);
          this.size += storedSize(subjectLength(topic), headerBlockLength(m), m.payload.length, this.memory);
          this.scanned = rec.offset + 1;
        }
      }
      // A gap (records deleted or compacted away, transaction markers): go on past it.
      if (this.scanned === from) this.scanned = from + 1;
    }
  }
}

/** Per-subject counts as NATS subjects, those matching `filter` (a NATS subject filter). */
export function subjectTotals(counts: Iterable<[string, number]>, filter: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const [topic, n] of counts) if (n > 0 && subjectMatches(filter, topic)) out.set(unifiedToDots(topic), n);
  return out;
}
