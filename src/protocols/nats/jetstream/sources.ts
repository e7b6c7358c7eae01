/**
 * Mirrors and sources (nats-server 2.9's stream.go: a stream that copies another stream's messages), over FlowMQ
 * streams on a single broker.
 *
 * - A **mirror** copies its origin message for message and keeps its sequences and timestamps: origin sequence n is
 *   the mirror's sequence n. What the mirror does not take (outside its `filter_subject`, deleted in the origin's
 *   view, or below where it started) is a gap: a small placeholder record marked `Flowmq-Mirror-Gap` that the
 *   mirror's view never shows (stream-view.ts), since the log's offsets are dense and sequences are offsets. A
 *   mirror has no subjects: it is bound to a topic no client publishes to (`$FLOWMQ/mirror/<name>`), so it takes
 *   nothing but the copies.
 * - **Sources** append what their origins get, from `opt_start_seq` / `opt_start_time` (default: the origin's
 *   first message), filtered by `filter_subject`, each copy carrying `Nats-Stream-Source: <origin> <sequence>` as
 *   nats-server marks it, with the time it was copied; the stream's own subjects capture as usual.
 *
 * Copies are appended without being routed (engine.appendControl): live subscribers had the message when it was
 * published. Where to go on is in the target's log, so a restart continues where it stopped: a mirror's last
 * sequence, a source's last `Nats-Stream-Source` of that origin.
 */
import { encodeBatch, makeMessage, messageToRecord, recordToMessage, decodeBatch, type Engine, type Header, type Message } from '../../../core/index.js';
import { lastMatching } from './stream-info.js';
import { subjectMatches } from './subjects.js';
import { GAP_HEADER, type SourceSpec, type StreamView } from './stream-view.js';

export const SOURCE_HEADER = 'Nats-Stream-Source';
/** Origin bytes copied per step. */
const STEP_BYTES = 256 * 1024;
/** Placeholder records written per step for a gap (an origin trimmed far ahead is filled in steps). */
const GAP_STEP = 10_000;
const WAIT_MS = 1000;

/** What the copier needs from the JetStream service. */
export interface SourceHost {
  readonly engine: Engine;
  freshView(name: string): Promise<StreamView | null>;
  /** Whether this broker copies into `target` now (cluster mode: it owns the target's partition). */
  copiesHere(target: string): boolean;
  sourceFailed(target: string, origin: string, err: unknown): void;
}

/** One origin copied into one stream (a mirror, or one of a stream's sources). */
export class SourceCopier {
  /** The next origin sequence to copy (0: not known yet). */
  next = 0;
  /** When a copy was last appended (ms), for `active` in stream info. */
  lastActive = 0;
  private stopped = false;
  private readonly ownTopic: string;

  constructor(
    private readonly host: SourceHost,
    readonly target: string,
    readonly spec: SourceSpec,
    readonly mirror: boolean,
  ) {
    this.ownTopic = target.split('.').join('/');
    void this.run();
  }

  stop(): void {
    this.stopped = true;
  }

  /** Origin messages not copied yet (nats-server's `lag`). */
  lag(): number {
    const o = this.host.engine.getAnyStream(this.spec.name);
    if (o === undefined || this.next === 0) return 0;
    return Math.max(0, this.host.engine.offsets(this.spec.name, 0).highWatermark - (this.next - 1));
  }

  /** nats-server's StreamSourceInfo. */
  info(now: number): { name: string; filter_subject?: string; lag: number; active: number } {
    return {
      name: this.spec.name,
      ...(this.spec.filter_subject !== undefined ? { filter_subject: this.spec.filter_subject } : {}),
      lag: this.lag(),
      active: this.lastActive > 0 ? (now - this.lastActive) * 1e6 : -1,
    };
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      try {
        const copied = await this.step();
        if (copied === 0 && !this.stopped) {
          const o = this.host.engine.getAnyStream(this.spec.name);
          if (o === undefined || this.next === 0) await sleep(WAIT_MS);
          else await this.host.engine.waitFor(this.spec.name, 0, this.next - 1, WAIT_MS).catch(() => sleep(WAIT_MS));
        }
      } catch (err) {
        this.host.sourceFailed(this.target, this.spec.name, err);
        await sleep(WAIT_MS);
      }
    }
  }

  /** Where to start: the target's log says where copying stopped, else the spec's start. */
  private async start(): Promise<number> {
    const engine = this.host.engine;
    const origin = this.spec.name;
    if (this.mirror) {
      const hw = engine.offsets(this.target, 0).highWatermark;
      if (hw > 0) return hw + 1;
    } else {
      const prefix = `${origin} `;
      let found = 0;
      await lastMatching(engine, this.target, (m) => {
        const v = sourceHeader(m);
        if (v === undefined || !v.startsWith(prefix)) return false;
        found = Number(v.slice(prefix.length).split(' ')[0]);
        return Number.isSafeInteger(found) && found > 0;
      });
      if (found > 0) return found + 1;
    }
    if (this.spec.opt_start_seq !== undefined && this.spec.opt_start_seq > 0) return this.spec.opt_start_seq;
    if (this.spec.opt_start_time !== undefined) {
      const t = Date.parse(this.spec.opt_start_time);
      if (Number.isFinite(t)) return (await engine.offsetForTimestamp(origin, 0, t)) + 1;
    }
    return this.mirror ? 1 : engine.offsets(origin, 0).logStartOffset + 1;
  }

  /** Copies what the origin has from `next` on (one read); returns how many origin sequences it moved past. */
  private async step(): Promise<number> {
    const engine = this.host.engine;
    const origin = this.spec.name;
    if (engine.getAnyStream(origin) === undefined || engine.getAnyStream(this.target) === undefined) return 0;
    if (this.next === 0) this.next = await this.start();
    const { logStartOffset, highWatermark } = engine.offsets(origin, 0);
    if (this.next - 1 >= highWatermark) return 0;
    const from = this.next;
    const out: Message[] = [];
    let upTo = from - 1;
    if (from - 1 < logStartOffset) {
      // Trimmed in the origin before it was copied: a mirror keeps the numbering with gaps, a source skips on.
      upTo = Math.min(logStartOffset, from - 1 + GAP_STEP);
      if (this.mirror) for (let s = from; s <= upTo; s++) out.push(this.gap());
    } else {
      const view = await this.host.freshView(origin);
      const batches = await engine.read(origin, 0, from - 1, STEP_BYTES);
      const originTopic = origin.split('.').join('/');
      const f = this.spec.filter_subject;
      for (const b of batches) {
        for (const rec of decodeBatch(b)) {
          const seq = rec.offset + 1;
          if (seq <= upTo || seq < from) continue;
          if (seq >= highWatermark + 1) break;
          // Offsets without a record (transaction markers, compaction) are gaps too.
          if (this.mirror) for (let s = upTo + 1; s < seq; s++) out.push(this.gap());
          upTo = seq;
          const m = recordToMessage(rec, originTopic);
          const live = view === null || !view.isDeleted(seq);
          if (!live || (f !== undefined && !subjectMatches(f, m.topic)) || m.headers.some((h) => h.key === GAP_HEADER)) {
            if (this.mirror) out.push(this.gap());
            continue;
          }
          out.push(this.mirror ? m : this.sourced(m, seq));
        }
      }
      if (batches.length === 0 && upTo < from) {
        // Nothing stored at `from` though the log goes on (records removed from the middle): a gap.
        upTo = from;
        if (this.mirror) out.push(this.gap());
      }
    }
    // Checked as the append is issued: a copier whose broker let the partition go must not append through the new
    // owner, whose own copier continues from the log (an append issued while owned is local: made durable before
    // the release, or fenced).
    if (this.stopped || upTo < from || !this.host.copiesHere(this.target)) return 0;
    // Moved on as the append is made (lag counts what is not in the log yet); back if it fails.
    this.next = upTo + 1;
    if (out.length > 0) {
      const batch = encodeBatch(out.map((m) => messageToRecord(m, this.ownTopic)));
      try {
        await engine.appendControl(this.target, 0, batch).durable;
      } catch (err) {
        this.next = from;
        throw err;
      }
      this.lastActive = Date.now();
    }
    return upTo - from + 1;
  }

  private gap(): Message {
    return makeMessage(this.ownTopic, Buffer.alloc(0), { headers: [{ key: GAP_HEADER, value: Buffer.from('1') }] });
  }

  /** A source's copy: the origin's message with Nats-Stream-Source added (to its NATS header block too), now. */
  private sourced(m: Message, seq: number): Message {
    const value = `${this.spec.name} ${seq}`;
    const h: Header = { key: SOURCE_HEADER, value: Buffer.from(value) };
    const block = m.natsHeaders;
    const natsHeaders =
      block !== undefined && block.length >= 4 && block.subarray(block.length - 4).toString('latin1') === '\r\n\r\n'
        ? Buffer.concat([block.subarray(0, block.length - 2), Buffer.from(`${SOURCE_HEADER}: ${value}\r\n\r\n`)])
        : undefined;
    const { natsHeaders: _n, ...rest } = m;
    return { ...rest, headers: [...m.headers, h], timestamp: Date.now(), ...(natsHeaders !== undefined ? { natsHeaders } : {}) };
  }
}

function sourceHeader(m: Message): string | undefined {
  for (const h of m.headers) if (h.key === SOURCE_HEADER) return h.value?.toString('utf8');
  return undefined;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref());
}
