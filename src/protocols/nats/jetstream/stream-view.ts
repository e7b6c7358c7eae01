/**
 * What a JetStream stream holds beyond its log: per-subject limits (max_msgs_per_subject), rollups (Nats-Rollup),
 * single-message deletes and purges by subject or with `keep`, as nats-server applies them, over a FlowMQ stream
 * whose log is append-only (sequence = offset + 1, never reused).
 *
 * Design (docs/jetstream.md, "Deletes, per-subject limits and rollups"): nothing is rewritten in the log. A stream's
 * live messages are a function of its log and of a short list of explicit delete rules:
 *
 * - the log itself says what the limits and rollups remove: a message is gone once its subject has
 *   `max_msgs_per_subject` later messages, or a later message of its subject carries `Nats-Rollup: sub` (of any
 *   subject: `all`), on a stream that allows rollups. Replaying the log gives the same answer on every broker and
 *   after every restart, so none of this is stored;
 * - what only a request says (STREAM.MSG.DELETE, STREAM.PURGE with `filter`, `keep` or `seq`) is a rule kept with
 *   the stream's definition (its `nats.deletes` config, in the metastore), each stamped with the last sequence the
 *   log had when it was applied, and replayed at that point.
 *
 * The view is that replay, kept in memory per stream and caught up with the log before it is used: the live
 * sequences per subject and in sequence order. Readers (MSG.GET, DIRECT.GET, consumers, stream state) skip what is
 * not live; sequences stay where they were (a deleted message is a gap, as in nats-server). A purge of the whole
 * stream still moves the log start (the log deletes those records). Streams without limits, rollups or rules have no
 * view and are read as before. Its memory is a map entry per live message.
 *
 * `max_age` of a one-partition stream made through the JetStream API is applied per message, as nats-server expires
 * them (one by one, oldest first, once `timestamp <= now - max_age`): the view keeps each live message's timestamp and
 * expire() removes the aged ones (at each catch-up, and on the service's once-a-second tick, which then moves the
 * log start past them: service-state.ts expireAged). Other streams keep the log's retention by whole segments.
 */
import { decodeBatch, dotsToUnified, recordToMessage, type Engine, type Message, type StreamDef } from '../../../core/index.js';
import { subjectMatches, subjectToFilter } from './subjects.js';
import { subjectLength } from './names.js';
import type { RepublishSpec } from './republish.js';

/** A mirror or source as nats-server configures it (StreamSource; sources.ts copies it). */
export interface SourceSpec {
  name: string;
  opt_start_seq?: number;
  opt_start_time?: string;
  filter_subject?: string;
}

/** Marks a mirror's placeholder record for an origin sequence it did not take (sources.ts): never live. */
export const GAP_HEADER = 'Flowmq-Mirror-Gap';

/** The topic a mirror is bound to (nothing is published there: it only takes its copies, sources.ts). */
export function mirrorBinding(name: string): string {
  return `$FLOWMQ/mirror/${name}`;
}

/** An explicit delete, applied once the log had `at` messages (sequences up to `at`). */
export interface DeleteRule {
  at: number;
  /** STREAM.MSG.DELETE of this sequence. */
  seq?: number;
  /** Sequences a workqueue consumer acknowledged out of order before it was deleted. */
  seqs?: number[];
  /** STREAM.PURGE: the subject filter (a NATS subject; absent: all), `keep` the last n, `below` a sequence. */
  purge?: { filter?: string; keep?: number; below?: number };
}

/**
 * Marks a stream made through the JetStream API, with the namespace of who made it (its account): only such
 * streams' subjects may not overlap (account.ts overlapRefusal), and only their max_age is per message.
 */
export const API_STREAM_KEY = 'nats.api';

/** The JetStream stream options FlowMQ keeps in the stream's configs (`nats.*`). */
export interface JsStreamOptions {
  /** Stream limits on live messages and their bytes (-1: none): the oldest go (discard old) or publishes are refused. */
  maxMsgs: number;
  maxBytes: number;
  maxMsgsPerSubject: number;
  allowRollup: boolean;
  denyDelete: boolean;
  denyPurge: boolean;
  discardNew: boolean;
  discardNewPerSubject: boolean;
  allowDirect: boolean;
  /**
   * A mirror answers direct gets for its origin (nats-server 2.9's mirror_direct: set when the origin allows direct
   * gets at the mirror's create or update, whatever the client asked; message-api.ts directGet).
   */
  mirrorDirect: boolean;
  /** Retention policy: `limits` (the log's own), or messages removed once consumed (workqueue, interest). */
  retention: Retention;
  /** Largest message (headers + payload) a JetStream publish may store; negative: none (kept as given, as nats-server). */
  maxMsgSize: number;
  /** No more writes, deletes or purges (nats-server's sealed stream). */
  sealed: boolean;
  /**
   * A sealed stream's log is replayed as before its seal (which turns rollups and discard old off): its rollups and
   * its oldest messages over max_msgs / max_bytes stay removed (`nats.sealed_replay`).
   */
  sealedRollup: boolean;
  sealedDiscardOld: boolean;
  /** The stream mirrors this one (sources.ts), or copies from these; null / empty: none. */
  mirror: SourceSpec | null;
  sources: SourceSpec[];
  /** What the client said about the stream, reported back as given ('' : none). */
  description: string;
  /**
   * Storage the client asked for (`memory`): reported back, and fixed as in nats-server. FlowMQ keeps a memory
   * stream's messages in its log like any other's (docs/jetstream.md).
   */
  memory: boolean;
  /** Stored messages published again (republish.ts), or null. */
  republish: RepublishSpec | null;
  /** JetStream publishes get no PubAck (nats-server's no_ack). */
  noAck: boolean;
  rules: DeleteRule[];
  /** max_age applied per message by the view (ageLimitMs), 0: none. Derived from the definition, never stored. */
  maxAgeMs: number;
}

/** The options a STREAM.CREATE / UPDATE sets (the rest are derived or kept by the service). */
export type JsStreamSettings = Omit<JsStreamOptions, 'rules' | 'maxAgeMs'>;

export type Retention = 'limits' | 'workqueue' | 'interest';

/** Explicit delete rules a stream may hold (each is a few dozen bytes of its definition). */
export const MAX_DELETE_RULES = 4096;

export function jsOptions(def: StreamDef): JsStreamOptions {
  const c = def.configs ?? {};
  let rules: DeleteRule[] = [];
  if (c['nats.deletes'] !== undefined) {
    try {
      const v = JSON.parse(c['nats.deletes']) as unknown;
      if (Array.isArray(v)) rules = v as DeleteRule[];
    } catch {
      rules = [];
    }
  }
  const n = Number(c['nats.max_msgs_per_subject'] ?? -1);
  const replay = (c['nats.sealed_replay'] ?? '').split(',');
  const limit = (k: string): number => {
    const v = Number(c[k] ?? -1);
    return Number.isSafeInteger(v) && v > 0 ? v : -1;
  };
  return {
    maxMsgs: limit('nats.max_msgs'),
    maxBytes: limit('nats.max_bytes'),
    maxMsgsPerSubject: Number.isSafeInteger(n) && n > 0 ? n : -1,
    allowRollup: c['nats.allow_rollup_hdrs'] === 'true',
    denyDelete: c['nats.deny_delete'] === 'true',
    denyPurge: c['nats.deny_purge'] === 'true',
    discardNew: c['nats.discard'] === 'new',
    discardNewPerSubject: c['nats.discard_new_per_subject'] === 'true',
    allowDirect: c['nats.allow_direct'] === 'true',
    mirrorDirect: c['nats.mirror_direct'] === 'true',
    retention: c['nats.retention'] === 'workqueue' || c['nats.retention'] === 'interest' ? c['nats.retention'] : 'limits',
    maxMsgSize:
      Number.isSafeInteger(Number(c['nats.max_msg_size'] ?? -1)) && Number(c['nats.max_msg_size'] ?? -1) !== 0 ? Number(c['nats.max_msg_size'] ?? -1) : -1,
    sealed: c['nats.sealed'] === 'true',
    sealedRollup: replay.includes('rollup'),
    sealedDiscardOld: replay.includes('discard_old'),
    mirror: parseSpecs(c['nats.mirror'])[0] ?? null,
    sources: parseSpecs(c['nats.sources']),
    description: c['nats.description'] ?? '',
    memory: c['nats.storage'] === 'memory',
    republish: parseRepublishConfig(c['nats.republish']),
    noAck: c['nats.no_ack'] === 'true',
    rules,
    maxAgeMs: ageLimitMs(def),
  };
}

/**
 * The max_age the view applies per message: a one-partition stream made through the JetStream API (a stream grown
 * by Kafka, or made by another protocol, keeps the log's retention by segments); 0: none.
 */
export function ageLimitMs(def: StreamDef): number {
  const r = def.retentionMs;
  return r !== null && r > 0 && def.partitions === 1 && def.configs?.[API_STREAM_KEY] !== undefined ? r : 0;
}

/** The `nats.*` configs of a stream with these options (the others of `configs` are kept by the caller). */
export function optionConfigs(o: JsStreamSettings, rules: DeleteRule[]): Record<string, string> {
  const out: Record<string, string> = {};
  if (o.maxMsgs > 0) out['nats.max_msgs'] = String(o.maxMsgs);
  if (o.maxBytes > 0) out['nats.max_bytes'] = String(o.maxBytes);
  if (o.maxMsgsPerSubject > 0) out['nats.max_msgs_per_subject'] = String(o.maxMsgsPerSubject);
  if (o.allowRollup) out['nats.allow_rollup_hdrs'] = 'true';
  if (o.denyDelete) out['nats.deny_delete'] = 'true';
  if (o.denyPurge) out['nats.deny_purge'] = 'true';
  if (o.discardNew) out['nats.discard'] = 'new';
  if (o.discardNewPerSubject) out['nats.discard_new_per_subject'] = 'true';
  if (o.allowDirect) out['nats.allow_direct'] = 'true';
  if (o.mirrorDirect) out['nats.mirror_direct'] = 'true';
  if (o.retention !== 'limits') out['nats.retention'] = o.retention;
  if (o.maxMsgSize !== -1) out['nats.max_msg_size'] = String(o.maxMsgSize);
  if (o.sealed) out['nats.sealed'] = 'true';
  const replay = [...(o.sealedRollup ? ['rollup'] : []), ...(o.sealedDiscardOld ? ['discard_old'] : [])];
  if (replay.length > 0) out['nats.sealed_replay'] = replay.join(',');
  if (o.mirror !== null) out['nats.mirror'] = JSON.stringify(o.mirror);
  if (o.sources.length > 0) out['nats.sources'] = JSON.stringify(o.sources);
  if (o.description !== '') out['nats.description'] = o.description;
  if (o.memory) out['nats.storage'] = 'memory';
  if (o.republish !== null) out['nats.republish'] = JSON.stringify(o.republish);
  if (o.noAck) out['nats.no_ack'] = 'true';
  if (rules.length > 0) out['nats.deletes'] = JSON.stringify(rules);
  return out;
}

function parseRepublishConfig(text: string | undefined): RepublishSpec | null {
  if (text === undefined) return null;
  try {
    const v = JSON.parse(text) as RepublishSpec;
    return v !== null && typeof v === 'object' && typeof v.src === 'string' && typeof v.dest === 'string' ? v : null;
  } catch {
    return null;
  }
}

/** Mirror and source specs as stored (one object or an array); what cannot be read is none. */
function parseSpecs(text: string | undefined): SourceSpec[] {
  if (text === undefined) return [];
  try {
    const v = JSON.parse(text) as unknown;
    const all = Array.isArray(v) ? v : [v];
    return all.filter((x): x is SourceSpec => x !== null && typeof x === 'object' && typeof (x as SourceSpec).name === 'string');
  } catch {
    return [];
  }
}

export function needsView(o: JsStreamOptions): boolean {
  return (
    o.maxMsgs > 0 ||
    o.maxBytes > 0 ||
    o.maxMsgsPerSubject > 0 ||
    o.allowRollup ||
    o.sealedRollup ||
    o.rules.length > 0 ||
    o.retention !== 'limits' ||
    o.mirror !== null ||
    o.maxAgeMs > 0
  );
}

/**
 * A message's size as nats-server 2.9 counts it (stream `bytes`, account usage, max_bytes). The file store counts its
 * record (filestore.go fileStoreMsgSize): length 4 + sequence 8 + timestamp 8 + subject length 2 + subject, with
 * headers 4 + the header block, then the data and an 8-byte checksum; the memory store (memstore.go
 * memStoreMsgSize) subject + headers + data + 16. A message stored without a header block has `headerLength` 0.
 */
export function storedSize(subjectLength: number, headerLength: number, payloadLength: number, memory = false): number {
  if (memory) return subjectLength + headerLength + payloadLength + 16;
  return 22 + subjectLength + (headerLength > 0 ? 4 + headerLength : 0) + payloadLength + 8;
}

/**
 * The length of the header block a stored message had (or would have) as a NATS publish: the block itself when it
 * came through NATS, else `NATS/1.0\r\n` + `key: value\r\n` per header + `\r\n` (what a NATS reader of it gets).
 */
export function headerBlockLength(m: Message): number {
  if (m.natsHeaders !== undefined) return m.natsHeaders.length;
  if (m.headers.length === 0) return 0;
  return m.headers.reduce((a, x) => a + x.key.length + (x.value?.length ?? 0) + 4, 12);
}

function ownTopic(stream: string): string {
  return stream.split('.').join('/');
}

export class StreamView {
  /** Live sequences, ascending (Map insertion order: appended in log order), to their subject (unified topic). */
  readonly bySeq = new Map<number, string>();
  /** Live sequences of each subject, ascending. */
  readonly bySubject = new Map<string, number[]>();
  /** Live sequences counted by position (a Fenwick tree over sequences): consumers' num_pending in O(log n). */
  private tree = new Int32Array(1024);
  /** Live sequences to their stored size, and the sum (state.bytes, max_bytes). */
  private readonly sizes = new Map<number, number>();
  bytes = 0;
  /** Streams with max_age (opts.maxAgeMs): live sequences to their timestamp (ms), ascending by sequence. */
  private readonly stamps = new Map<number, number>();
  /** Messages of the log applied: sequences 1..scanned. */
  scanned = 0;
  private nextRule = 0;
  private prunedAt = 0;
  private running: Promise<void> | null = null;
  opts: JsStreamOptions;

  /**
   * @param consumed workqueue and interest streams: whether the stream's consumers are done with a message (the
   *   service asks its consumers: their ack floors and acks are stored, so a view rebuilt after a restart agrees).
   */
  constructor(
    public def: StreamDef,
    private readonly engine: Engine,
    private readonly consumed: ((seq: number, topic: string, retention: Retention) => boolean) | null = null,
  ) {
    this.opts = jsOptions(def);
  }

  /** Workqueue and interest streams: removes `seq` if its consumers are done with it; whether it did. */
  recheck(seq: number): boolean {
    const topic = this.bySeq.get(seq);
    if (topic === undefined || this.consumed === null || this.opts.retention === 'limits' || !this.consumed(seq, topic, this.opts.retention)) return false;
    return this.remove(seq);
  }

  /** recheck() of every live message from `from` on (a consumer went away: its interest with it). */
  recheckFrom(from: number): number {
    let n = 0;
    for (const seq of [...this.bySeq.keys()]) if (seq >= from && this.recheck(seq)) n++;
    return n;
  }

  /** The stream refuses publishes at its limits (discard new): each is checked against the view first. */
  get refusesNew(): boolean {
    const o = this.opts;
    return o.discardNewPerSubject || (o.discardNew && (o.maxMsgs > 0 || o.maxBytes > 0));
  }

  /** The stream's definition after a rule this view already applied was added to it. */
  adopt(def: StreamDef): void {
    this.def = def;
    this.opts = jsOptions(def);
    this.nextRule = this.opts.rules.length;
  }

  /** Whether `seq` (within the log's range, already applied) was removed. */
  isDeleted(seq: number): boolean {
    return seq <= this.scanned && !this.bySeq.has(seq);
  }

  /** The last live sequence of a subject (its unified topic), 0 when none. */
  lastOf(subject: string): number {
    const l = this.bySubject.get(subject);
    return l === undefined || l.length === 0 ? 0 : l[l.length - 1];
  }

  /** The last live sequence whose subject the NATS subject `filter` matches, 0 when none. */
  lastMatching(filter: string): number {
    if (!/(^|\.)[*>](\.|$)/.test(filter)) return this.lastOf(dotsToUnified(filter));
    let best = 0;
    for (const [s, l] of this.bySubject) if (l.length > 0 && l[l.length - 1] > best && subjectMatches(filter, s)) best = l[l.length - 1];
    return best;
  }

  /** The first live sequence >= `from` whose subject the NATS subject `filter` matches, 0 when none. */
  nextMatching(filter: string, from: number): number {
    if (!/(^|\.)[*>](\.|$)/.test(filter)) {
      const l = this.bySubject.get(dotsToUnified(filter));
      if (l === undefined) return 0;
      const i = lowerBound(l, from);
      return i < l.length ? l[i] : 0;
    }
    let best = 0;
    for (const [s, l] of this.bySubject) {
      const i = lowerBound(l, from);
      if (i < l.length && (best === 0 || l[i] < best) && subjectMatches(filter, s)) best = l[i];
    }
    return best;
  }

  /** Live messages with a sequence >= `from` whose subject matches the NATS subject `filter` (undefined: all). */
  countFrom(from: number, filter?: string): number {
    if (filter === undefined || this.covers(filter)) return this.bySeq.size - this.prefix(Math.max(0, from - 1));
    if (!/(^|\.)[*>](\.|$)/.test(filter)) {
      const l = this.bySubject.get(dotsToUnified(filter));
      return l === undefined ? 0 : l.length - lowerBound(l, from);
    }
    let n = 0;
    for (const [s, l] of this.bySubject) {
      if (filter !== undefined && !subjectMatches(filter, s)) continue;
      n += l.length - lowerBound(l, from);
    }
    return n;
  }

  /** The last live sequence of every subject `filter` matches, as of now. */
  lastPerSubject(filter?: string): Set<number> {
    const out = new Set<number>();
    for (const [s, l] of this.bySubject) if (l.length > 0 && (filter === undefined || subjectMatches(filter, s))) out.add(l[l.length - 1]);
    return out;
  }

  /** The filter is one of the stream's subjects and the stream has no other: it matches every message. */
  private covers(filter: string): boolean {
    const b = this.def.bindings;
    if (b.length !== 1) return false;
    try {
      return subjectToFilter(filter) === b[0];
    } catch {
      return false;
    }
  }

  private bump(seq: number, d: number): void {
    if (seq >= this.tree.length) {
      // Grown by doubling, rebuilt from the live sequences (amortized O(1) per message).
      let n = this.tree.length;
      while (seq >= n) n *= 2;
      this.tree = new Int32Array(n);
      for (const q of this.bySeq.keys()) if (q !== seq) this.treeAdd(q, 1);
      if (d > 0) this.treeAdd(seq, d);
      return;
    }
    this.treeAdd(seq, d);
  }

  private treeAdd(seq: number, d: number): void {
    for (let i = seq; i < this.tree.length; i += i & -i) this.tree[i] += d;
  }

  /** Live sequences <= seq. */
  private prefix(seq: number): number {
    let n = 0;
    for (let i = Math.min(seq, this.tree.length - 1); i > 0; i -= i & -i) n += this.tree[i];
    return n;
  }

  get firstSeq(): number {
    for (const k of this.bySeq.keys()) return k;
    return 0;
  }

  /** Applies the log up to its high watermark (one pass at a time; callers share it). */
  async catchUp(): Promise<void> {
    while (this.running !== null) await this.running;
    if (this.scanned >= this.engine.offsets(this.def.name, 0).highWatermark) {
      this.prune();
      this.expire(Date.now());
      return;
    }
    this.running = this.scan().finally(() => (this.running = null));
    await this.running;
  }

  private async scan(): Promise<void> {
    const name = this.def.name;
    for (;;) {
      const { logStartOffset, highWatermark } = this.engine.offsets(name, 0);
      if (this.scanned < logStartOffset) this.scanned = logStartOffset;
      if (this.scanned >= highWatermark) break;
      const from = this.scanned;
      const batches = await this.engine.read(name, 0, from, 1024 * 1024);
      let progressed = false;
      for (const b of batches) {
        for (const rec of decodeBatch(b)) {
          if (rec.offset < this.scanned || rec.offset >= highWatermark) continue;
          const seq = rec.offset + 1;
          this.applyRules(seq - 1);
          const m = recordToMessage(rec, ownTopic(name));
          if (m.headers.length > 0 && m.headers.some((h) => h.key === GAP_HEADER)) {
            // A mirror's placeholder for an origin sequence it did not take (sources.ts): a gap.
            this.scanned = seq;
            progressed = true;
            continue;
          }
          let rollup: string | undefined;
          if (this.opts.allowRollup || this.opts.sealedRollup)
            for (const h of m.headers) if (h.key === 'Nats-Rollup') rollup = h.value?.toString('utf8').toLowerCase();
          this.add(seq, m.topic, rollup, storedSize(subjectLength(m.topic), headerBlockLength(m), m.payload.length, this.opts.memory), m.timestamp);
          this.scanned = seq;
          progressed = true;
        }
      }
      // A gap (records deleted or compacted away, transaction markers): go on past it.
      if (!progressed) this.scanned = Math.min(highWatermark, from + 1);
    }
    this.applyRules(this.scanned);
    this.prune();
    this.expire(Date.now());
  }

  /**
   * Removes the messages older than max_age (none without it), oldest first, as nats-server's expireMsgs: it stops at
   * the first live message that has not aged (timestamps follow sequences, but for a Kafka producer's own). Returns
   * how many it removed.
   */
  expire(now: number): number {
    const age = this.opts.maxAgeMs;
    if (age <= 0) return 0;
    const cutoff = now - age;
    let n = 0;
    for (const [seq, ts] of this.stamps) {
      if (ts > cutoff) break;
      if (this.remove(seq)) n++;
      else this.stamps.delete(seq);
    }
    return n;
  }

  private applyRules(upTo: number): void {
    const rules = this.opts.rules;
    while (this.nextRule < rules.length && rules[this.nextRule].at <= upTo) this.apply(rules[this.nextRule++]);
  }

  /** Drops what the log no longer has (a purge of the whole stream, retention by age). */
  private prune(): void {
    const lso = this.engine.offsets(this.def.name, 0).logStartOffset;
    if (lso <= this.prunedAt) return;
    this.prunedAt = lso;
    for (const seq of [...this.bySeq.keys()]) {
      if (seq > lso) break;
      this.remove(seq);
    }
  }

  private add(seq: number, topic: string, rollup: string | undefined, size: number, timestamp: number): void {
    if (rollup === 'all') {
      this.bySeq.clear();
      this.bySubject.clear();
      this.sizes.clear();
      this.stamps.clear();
      this.bytes = 0;
      this.tree.fill(0);
    } else if (rollup === 'sub') {
      for (const s of this.bySubject.get(topic) ?? []) this.drop(s);
      this.bySubject.delete(topic);
    }
    this.bySeq.set(seq, topic);
    this.bump(seq, 1);
    this.sizes.set(seq, size);
    this.bytes += size;
    if (this.opts.maxAgeMs > 0) this.stamps.set(seq, timestamp);
    let l = this.bySubject.get(topic);
    if (l === undefined) this.bySubject.set(topic, (l = []));
    l.push(seq);
    const max = this.opts.maxMsgsPerSubject;
    while (max > 0 && l.length > max) this.drop(l.shift()!);
    // Discard old: the oldest messages go while the stream is over a limit (discard new refuses the publish instead).
    if (!this.opts.discardNew || this.opts.sealedDiscardOld) {
      const { maxMsgs, maxBytes } = this.opts;
      while ((maxMsgs > 0 && this.bySeq.size > maxMsgs) || (maxBytes > 0 && this.bytes > maxBytes && this.bySeq.size > 1)) this.remove(this.firstSeq);
    }
    // Workqueue, interest: already consumed (a view rebuilt after acks), or nobody to consume it (interest).
    this.recheck(seq);
  }

  /** Forgets a live sequence (not its subject's list: the caller's). */
  private drop(seq: number): void {
    if (!this.bySeq.delete(seq)) return;
    this.bump(seq, -1);
    this.bytes -= this.sizes.get(seq) ?? 0;
    this.sizes.delete(seq);
    this.stamps.delete(seq);
  }

  remove(seq: number): boolean {
    const topic = this.bySeq.get(seq);
    if (topic === undefined) return false;
    this.drop(seq);
    const l = this.bySubject.get(topic)!;
    const i = l.indexOf(seq);
    if (i >= 0) l.splice(i, 1);
    if (l.length === 0) this.bySubject.delete(topic);
    return true;
  }

  /** Applies a rule now (the view is caught up to `rule.at`); returns how many messages it removed. */
  apply(rule: DeleteRule): number {
    if (rule.seq !== undefined) return this.remove(rule.seq) ? 1 : 0;
    let n = 0;
    for (const seq of rule.seqs ?? []) if (this.remove(seq)) n++;
    const p = rule.purge;
    if (p === undefined) return n;
    const victims: number[] = [];
    for (const [seq, topic] of this.bySeq) {
      if (p.below !== undefined && seq >= p.below) break;
      if (p.filter === undefined || subjectMatches(p.filter, topic)) victims.push(seq);
    }
    if (p.keep !== undefined && p.keep > 0) victims.splice(Math.max(0, victims.length - p.keep));
    for (const s of victims) this.remove(s);
    return n + victims.length;
  }
}

function lowerBound(a: number[], v: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (a[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
