/**
 * Republish (nats-server 2.9's stream `republish: {src, dest, headers_only}`): every message a stream stores whose
 * subject matches `src` is published again on `dest` (its wildcards mapped as nats-server maps them), with the
 * headers Nats-Stream, Nats-Subject, Nats-Sequence and Nats-Last-Sequence added (headers_only: no payload, and
 * Nats-Msg-Size). A republisher per stream follows the stream's log from where it was when the republisher started
 * (what the log holds from then on, however it got there: a JetStream publish, a core publish, another protocol) and
 * publishes through the core as the broker itself, like a plain NATS publish: subscribers and streams on `dest` get
 * it. Who may configure it is checked at STREAM.CREATE / UPDATE (stream-api.ts: a publish deny of the caller that
 * reaches into `dest` refuses the request).
 */
import { decodeBatch, isReservedTopic, makeMessage, recordToMessage, splitTopic, type Engine, type Header, type Message } from '../../../core/index.js';
import { JsErr, type ApiError } from './errors.js';
import { subjectMatches, subjectToFilter } from './subjects.js';
import { namesOf, outSubject, ownStream } from './names.js';

export interface RepublishSpec {
  src: string;
  dest: string;
  headers_only?: boolean;
}

const STEP_BYTES = 256 * 1024;
const WAIT_MS = 1000;
const LAST_LIMIT = 100_000;

/** Checks a `republish` value as nats-server's checkStreamCfg does (src defaults to `>`), against the stream's subjects. */
export function parseRepublish(v: unknown, subjects: string[]): RepublishSpec | null | ApiError {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'object' || Array.isArray(v)) return JsErr.invalidJson();
  const r = v as Record<string, unknown>;
  const src = r.src === undefined || r.src === '' ? '>' : r.src;
  const dest = r.dest ?? '';
  const ho = r.headers_only ?? false;
  if (typeof src !== 'string' || typeof dest !== 'string' || typeof ho !== 'boolean') return JsErr.invalidJson();
  if (subjects.some((s) => collide(dest, s))) return JsErr.streamInvalidConfig('stream configuration for republish destination forms a cycle');
  if (mapping(src, dest) === null) {
    return JsErr.streamInvalidConfig('stream configuration for republish not valid');
  }
  return { src, dest, ...(ho ? { headers_only: true } : {}) };
}

/** Whether two subjects (wildcards allowed) can match a common subject (nats-server's SubjectsCollide). */
function collide(a: string, b: string): boolean {
  const x = a.split('.');
  const y = b.split('.');
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if (x[i] === '>' || y[i] === '>') return i < x.length && i < y.length;
    if (x[i] === undefined || y[i] === undefined) return false;
    if (x[i] !== '*' && y[i] !== '*' && x[i] !== y[i]) return false;
  }
  return true;
}

/**
 * The subject a matching subject goes to: `dest`'s `*` take `src`'s `*` tokens in order, `>` takes what `src`'s `>`
 * matched, `$n` and `{{wildcard(n)}}` the n-th `*` token. Null: the pair is not valid.
 */
export function mapping(src: string, dest: string): ((subject: string) => string) | null {
  const s = src.split('.');
  const d = dest.split('.');
  if (s.some((t, i) => t === '' || (t === '>' && i !== s.length - 1)) || d.some((t, i) => t === '' || (t === '>' && i !== d.length - 1))) return null;
  const stars = s.filter((t) => t === '*').length;
  const full = s[s.length - 1] === '>';
  const plain = d.filter((t) => t === '*').length;
  const indexOf = (t: string): number | null => {
    const m = /^(?:\$(\d+)|\{\{\s*wildcard\s*\(\s*(\d+)\s*\)\s*\}\})$/.exec(t);
    return m === null ? null : Number(m[1] ?? m[2]);
  };
  const numbered = d.map(indexOf).filter((n): n is number => n !== null);
  if (plain > 0 && plain !== stars) return null;
  if (numbered.some((n) => n < 1 || n > stars)) return null;
  if (d[d.length - 1] === '>' && !full) return null;
  return (subject) => {
    const t = subject.split('.');
    const caught: string[] = [];
    s.forEach((x, i) => {
      if (x === '*') caught.push(t[i]);
    });
    const rest = full ? t.slice(s.length - 1).join('.') : '';
    let k = 0;
    return d.map((x) => (x === '*' ? caught[k++] : x === '>' ? rest : indexOf(x) !== null ? caught[indexOf(x)! - 1] : x)).join('.');
  };
}

/** What a republisher needs from the JetStream service. */
export interface RepublishHost {
  readonly engine: Engine;
  /** Whether this broker republishes `stream` (cluster mode: it owns the stream's partition). */
  copiesHere(stream: string): boolean;
  republishFailed(stream: string, err: unknown): void;
}

/** Follows one stream's log and republishes what it stores (partition 0, sequence = offset + 1). */
export class Republisher {
  private stopped = false;
  /** The next offset to read. */
  private next: number;
  private readonly map: (subject: string) => string;
  private readonly ownTopic: string;
  /**
   * The last sequence republished per subject (Nats-Last-Sequence is the subject's previous message, as nats-server
   * sends it); subjects last seen before this republisher started count from 0. Bounded: cleared past LAST_LIMIT.
   */
  private readonly last = new Map<string, number>();

  constructor(
    private readonly host: RepublishHost,
    readonly stream: string,
    readonly spec: RepublishSpec,
  ) {
    this.next = host.engine.offsets(stream, 0).highWatermark;
    this.map = mapping(spec.src, spec.dest) ?? (() => spec.dest);
    this.ownTopic = stream.split('.').join('/');
    void this.run();
  }

  stop(): void {
    this.stopped = true;
  }

  private async run(): Promise<void> {
    const engine = this.host.engine;
    while (!this.stopped) {
      try {
        if (engine.getAnyStream(this.stream) === undefined) return;
        const { logStartOffset, highWatermark } = engine.offsets(this.stream, 0);
        if (this.next < logStartOffset) this.next = logStartOffset;
        if (this.next >= highWatermark) {
          await engine.waitFor(this.stream, 0, this.next, WAIT_MS).catch(() => sleep(WAIT_MS));
          continue;
        }
        const batches = await engine.read(this.stream, 0, this.next, STEP_BYTES);
        const before = this.next;
        for (const b of batches) {
          for (const rec of decodeBatch(b)) {
            if (rec.offset < this.next || rec.offset >= highWatermark || this.stopped) continue;
            this.next = rec.offset + 1;
            if (!this.host.copiesHere(this.stream)) continue;
            const m = recordToMessage(rec, this.ownTopic);
            const subject = m.topic.split('/').join('.');
            if (!subjectMatches(this.spec.src, m.topic)) continue;
            // A stream bound to dest stores it: a failed write there is logged, the republishing goes on.
            engine.publish(this.republished(m, subject, rec.offset + 1))?.catch((err: unknown) => this.host.republishFailed(this.stream, err));
          }
        }
        if (this.next === before) this.next = batches.length === 0 ? highWatermark : before + 1;
      } catch (err) {
        this.host.republishFailed(this.stream, err);
        await sleep(WAIT_MS);
      }
    }
  }

  private republished(m: Message, subject: string, seq: number): Message {
    const dest = this.map(subject);
    const prev = this.last.get(subject) ?? 0;
    if (this.last.size >= LAST_LIMIT) this.last.clear();
    this.last.set(subject, seq);
    const added: Array<[string, string]> = [
      ['Nats-Stream', ownStream(this.stream)],
      ['Nats-Subject', outSubject(namesOf(this.stream), subject)],
      ['Nats-Sequence', String(seq)],
      ['Nats-Last-Sequence', String(prev)],
    ];
    if (this.spec.headers_only) added.push(['Nats-Msg-Size', String(m.payload.length)]);
    const headers: Header[] = [...m.headers.filter((h) => !added.some(([k]) => k === h.key)), ...added.map(([key, v]) => ({ key, value: Buffer.from(v) }))];
    const old = m.natsHeaders;
    const oldText = old !== undefined && old.length >= 12 ? old.toString('latin1').replace(/\r\n\r\n$/, '\r\n') : 'NATS/1.0\r\n';
    const natsHeaders = Buffer.from(`${oldText}${added.map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`, 'latin1');
    const out = makeMessage(subjectToFilter(dest), this.spec.headers_only ? Buffer.alloc(0) : m.payload, { headers, origin: 'jetstream' });
    out.natsHeaders = natsHeaders;
    // A tenant's stream republishes inside its namespace (its dest was qualified: names.ts).
    if (isReservedTopic(out.topic)) out.namespace = splitTopic(out.topic).namespace;
    return out;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref());
}
