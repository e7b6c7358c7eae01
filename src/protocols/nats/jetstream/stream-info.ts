/**
 * FlowMQ streams rendered as JetStream streams (nats-server 2.9's StreamConfig / StreamInfo JSON), and the checks
 * that turn a JetStream stream configuration into a FlowMQ stream definition.
 */
import {
  decodeBatch,
  isQualifiedStream,
  isValidStreamName,
  recordToMessage,
  type Engine,
  type Message,
  type NamespaceNames,
  type StreamDef,
} from '../../../core/index.js';
import { inSubject, namesOf, outSubject, ownStream } from './names.js';
import { JsErr, type ApiError } from './errors.js';
import { seqOf } from './partition-seq.js';
import { filterToSubject, isValidApiName, subjectToFilter } from './subjects.js';
import { parseRepublish } from './republish.js';
import { jsOptions, mirrorBinding, type JsStreamSettings, type SourceSpec, type StreamView } from './stream-view.js';

/** Go's zero time, which nats-server reports for "no message". */
export const ZERO_TIME = '0001-01-01T00:00:00Z';
export const DEFAULT_DUPLICATE_WINDOW_NS = 120e9;
/** What nats-server 2.9's file store reports as first_ts once its messages were removed one by one. */
export const UNIX_ZERO_TIME = '1970-01-01T00:00:00Z';

export function streamSubjects(def: StreamDef): string[] {
  return def.bindings.map(filterToSubject);
}

/** A stream's configuration as its namespace's clients see it (names.ts: its name, subjects and origins unqualified). */
export function streamConfigJson(def: StreamDef, duplicateWindowNs: number): Record<string, unknown> {
  const o = jsOptions(def);
  const names = namesOf(def.name);
  const out = (s: SourceSpec): SourceSpec => outSource(names, s);
  return {
    name: ownStream(def.name),
    ...(o.description !== '' ? { description: o.description } : {}),
    ...(o.mirror === null ? { subjects: names.isDefault ? streamSubjects(def) : streamSubjects(def).map((s) => outSubject(names, s)) } : {}),
    retention: o.retention,
    max_consumers: -1,
    max_msgs: o.maxMsgs,
    max_bytes: o.maxBytes,
    max_age: def.retentionMs === null ? 0 : def.retentionMs * 1e6,
    max_msgs_per_subject: o.maxMsgsPerSubject,
    max_msg_size: o.maxMsgSize,
    discard: o.discardNew ? 'new' : 'old',
    storage: o.memory ? 'memory' : 'file',
    num_replicas: 1,
    duplicate_window: duplicateWindowNs,
    allow_direct: o.allowDirect,
    mirror_direct: o.mirrorDirect,
    ...(o.discardNewPerSubject ? { discard_new_per_subject: true } : {}),
    sealed: o.sealed,
    deny_delete: o.denyDelete,
    deny_purge: o.denyPurge,
    allow_rollup_hdrs: o.allowRollup,
    ...(o.mirror !== null ? { mirror: out(o.mirror) } : {}),
    ...(o.sources.length > 0 ? { sources: o.sources.map(out) } : {}),
    ...(o.republish !== null ? { republish: { ...o.republish, src: outSubject(names, o.republish.src), dest: outSubject(names, o.republish.dest) } } : {}),
    ...(o.noAck ? { no_ack: true } : {}),
  };
}

/** A mirror's or source's configuration (or info) as the stream's namespace's clients see it. */
export function outSource<T extends { name: string; filter_subject?: string }>(names: NamespaceNames, s: T): T {
  if (names.isDefault) return s;
  return { ...s, name: ownStream(s.name), ...(s.filter_subject !== undefined ? { filter_subject: outSubject(names, s.filter_subject) } : {}) };
}

export function isoTime(ms: number): string {
  return new Date(ms).toISOString();
}

async function timestampAt(engine: Engine, stream: string, offset: number, partition = 0): Promise<string> {
  try {
    const batches = await engine.read(stream, partition, offset, 1);
    for (const b of batches) for (const r of decodeBatch(b)) if (r.offset === offset) return isoTime(recordToMessage(r, stream).timestamp);
  } catch {
    // The stream went away meanwhile: no timestamp.
  }
  return ZERO_TIME;
}

/**
 * The stream's state. Sequences are offset + 1 on one partition, partition-seq.ts's over several (first_seq the
 * lowest first record's, last_seq the highest last record's); message counts cover every partition; `bytes` is the
 * view's, else 0 here: stream-api.ts fills it in from the subject tally (account.ts bytesOf).
 */
export async function streamState(engine: Engine, def: StreamDef, consumers: number, view: StreamView | null = null): Promise<Record<string, unknown>> {
  if (view !== null) {
    // Deleted messages are gaps (stream-view.ts): counted from the view, first_seq the first live one.
    const { logStartOffset, highWatermark } = engine.offsets(def.name, 0);
    const first = view.firstSeq;
    const live = view.bySeq.size;
    const base = first > 0 ? first : highWatermark + 1;
    return {
      messages: live,
      bytes: view.bytes,
      first_seq: highWatermark === 0 ? 0 : base,
      // Emptied message by message (deletes, max_age) nats-server's file store reads the zero Unix time; a purge of
      // the whole stream (the log start at its end) Go's zero time.
      first_ts: live > 0 ? await timestampAt(engine, def.name, first - 1) : logStartOffset < highWatermark ? UNIX_ZERO_TIME : ZERO_TIME,
      last_seq: highWatermark,
      last_ts: highWatermark > 0 ? await timestampAt(engine, def.name, highWatermark - 1) : ZERO_TIME,
      ...(highWatermark + 1 - base - live > 0 ? { num_deleted: highWatermark + 1 - base - live } : {}),
      consumer_count: consumers,
    };
  }
  let messages = 0;
  for (let p = 0; p < def.partitions; p++) {
    const o = engine.offsets(def.name, p);
    messages += o.highWatermark - o.logStartOffset;
  }
  if (def.partitions > 1) return { messages, bytes: 0, ...(await partitionedEnds(engine, def)), consumer_count: consumers };
  const { logStartOffset, highWatermark } = engine.offsets(def.name, 0);
  const has = highWatermark > logStartOffset;
  return {
    messages,
    bytes: 0,
    first_seq: highWatermark === 0 ? 0 : logStartOffset + 1,
    first_ts: has ? await timestampAt(engine, def.name, logStartOffset) : ZERO_TIME,
    last_seq: highWatermark,
    last_ts: highWatermark > 0 && has ? await timestampAt(engine, def.name, highWatermark - 1) : ZERO_TIME,
    consumer_count: consumers,
  };
}

/** first_seq/last_seq (and their times) of a multi-partition stream without a view, in partition-seq.ts's numbering. */
async function partitionedEnds(engine: Engine, def: StreamDef): Promise<Record<string, unknown>> {
  const n = def.partitions;
  let first: { seq: number; p: number; offset: number } | null = null;
  let last: { seq: number; p: number; offset: number } | null = null;
  let lastEmpty = 0;
  for (let p = 0; p < n; p++) {
    const { logStartOffset, highWatermark } = engine.offsets(def.name, p);
    if (highWatermark <= logStartOffset) {
      // Emptied (or never written): nothing to show, but its end still numbers what comes next.
      if (highWatermark > 0) lastEmpty = Math.max(lastEmpty, seqOf(n, p, highWatermark - 1));
      continue;
    }
    const lo = seqOf(n, p, logStartOffset);
    const hi = seqOf(n, p, highWatermark - 1);
    if (first === null || lo < first.seq) first = { seq: lo, p, offset: logStartOffset };
    if (last === null || hi > last.seq) last = { seq: hi, p, offset: highWatermark - 1 };
  }
  if (first === null || last === null) {
    return { first_seq: lastEmpty === 0 ? 0 : lastEmpty + 1, first_ts: ZERO_TIME, last_seq: lastEmpty, last_ts: ZERO_TIME };
  }
  return {
    first_seq: first.seq,
    first_ts: await timestampAt(engine, def.name, first.offset, first.p),
    last_seq: Math.max(last.seq, lastEmpty),
    last_ts: await timestampAt(engine, def.name, last.offset, last.p),
  };
}

export interface StreamSpecFromJs {
  /** The options kept in the stream's `nats.*` configs (stream-view.ts). */
  options: JsStreamSettings;
  name: string;
  bindings: string[];
  /** num_replicas as asked (0 is 1): more than one needs a cluster (stream-api.ts). */
  replicas: number;
  retentionMs: number | null;
  duplicateWindowNs: number;
}

/** nats-server's StreamMaxReplicas. */
export const MAX_REPLICAS = 5;

/** A NATS subject as nats-server's IsValidSubject takes it: tokens not empty, no white space, `>` last. */
function isNatsSubject(s: string): boolean {
  if (s === '' || /\s/.test(s)) return false;
  const t = s.split('.');
  return t.every((x, i) => x !== '' && (x !== '>' || i === t.length - 1));
}

const NEUTRAL: Array<[string, (v: unknown) => boolean, string]> = [
  ['max_consumers', (v) => v === undefined || v === -1 || v === 0, 'max_consumers'],
  ['subject_transform', (v) => v === undefined || v === null, 'subject transforms'],
  ['template_owner', (v) => v === undefined || v === '', 'stream templates'],
  ['compression', (v) => v === undefined || v === '' || v === 'none', 'compression'],
  ['first_seq', (v) => v === undefined || v === 0 || v === 1, 'first_seq'],
];

/**
 * Checks a STREAM.CREATE / STREAM.UPDATE body against the subject's stream name and what FlowMQ streams can be.
 * Kept and reported back: description and storage (`memory` is reported as memory; FlowMQ streams are always on
 * its durable storage). Accepted and ignored where harmless: num_replicas 1 (durability is the storage's), placement.
 */
export function parseStreamConfig(raw: unknown, internal: string): StreamSpecFromJs | ApiError {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return JsErr.invalidJson();
  const r = raw as Record<string, unknown>;
  // The configuration is the client's, in its namespace's names; the spec is the core's (names.ts).
  const names = namesOf(internal);
  const subjectName = ownStream(internal);
  const name = r.name === undefined || r.name === '' ? subjectName : r.name;
  if (typeof name !== 'string') return JsErr.invalidJson();
  if (name !== subjectName) return JsErr.streamMismatch();
  if (!isValidApiName(name)) return JsErr.streamNameInvalid();
  if (!isValidStreamName(name)) return JsErr.streamInvalidConfig(`stream name "${name}" is not a valid FlowMQ stream name: use 1-249 of [a-zA-Z0-9_-]`);
  for (const [k, ok, what] of NEUTRAL) {
    if (!ok(r[k])) return JsErr.streamInvalidConfig(`${what} ${what.endsWith('s') ? 'are' : 'is'} not supported by FlowMQ streams`);
  }
  if (r.storage !== undefined && r.storage !== 'file' && r.storage !== 'memory') return JsErr.invalidJson();
  const description = r.description ?? '';
  if (typeof description !== 'string') return JsErr.invalidJson();
  if (r.discard !== undefined && r.discard !== 'old' && r.discard !== 'new') return JsErr.invalidJson();
  const retention = r.retention ?? 'limits';
  if (retention !== 'limits' && retention !== 'workqueue' && retention !== 'interest') return JsErr.invalidJson();
  const maxMsgSize = r.max_msg_size ?? -1;
  if (typeof maxMsgSize !== 'number' || !Number.isSafeInteger(maxMsgSize) || maxMsgSize > 2 ** 31 - 1 || maxMsgSize < -(2 ** 31)) return JsErr.invalidJson();
  const mirror = r.mirror === undefined || r.mirror === null ? null : sourceSpec(r.mirror, names);
  if (mirror !== null && 'err_code' in mirror) return mirror;
  const sources: SourceSpec[] = [];
  if (r.sources !== undefined && r.sources !== null) {
    if (!Array.isArray(r.sources)) return JsErr.invalidJson();
    for (const x of r.sources) {
      const spec = sourceSpec(x, names);
      if ('err_code' in spec) return spec;
      sources.push(spec);
    }
  }
  const replicas = r.num_replicas ?? 1;
  if (typeof replicas !== 'number' || !Number.isSafeInteger(replicas)) return JsErr.invalidJson();
  if (replicas > MAX_REPLICAS) return JsErr.streamInvalidConfig(`maximum replicas is ${MAX_REPLICAS}`);
  const maxAge = r.max_age ?? 0;
  const dupAsked = r.duplicate_window ?? 0;
  for (const v of [maxAge, dupAsked]) if (typeof v !== 'number' || !Number.isSafeInteger(v)) return JsErr.invalidJson();
  // The duplicate window as nats-server fills it in: the max age when that is shorter than the default.
  const dup =
    (dupAsked as number) !== 0
      ? (dupAsked as number)
      : maxAge !== 0 && (maxAge as number) < DEFAULT_DUPLICATE_WINDOW_NS
        ? (maxAge as number)
        : DEFAULT_DUPLICATE_WINDOW_NS;
  if (dup < 0) return JsErr.streamInvalidConfig('duplicates window can not be negative');
  if (maxAge !== 0 && dup > (maxAge as number)) return JsErr.streamInvalidConfig('duplicates window can not be larger then max age');
  if ((maxAge as number) < 0) return JsErr.invalidJson();
  if ((maxAge as number) > 0 && (maxAge as number) < 1e6) return JsErr.streamInvalidConfig('max_age must be at least 1ms on FlowMQ streams');
  const hasSubjects = Array.isArray(r.subjects) && r.subjects.length > 0;
  if (mirror !== null && hasSubjects) return JsErr.mirrorWithSubjects();
  if (mirror !== null && sources.length > 0) return JsErr.mirrorWithSources();
  let subjects: string[];
  if (mirror !== null) subjects = [];
  else if (r.subjects === undefined || r.subjects === null || (Array.isArray(r.subjects) && r.subjects.length === 0)) subjects = [name];
  else if (Array.isArray(r.subjects) && r.subjects.every((s) => typeof s === 'string')) subjects = r.subjects as string[];
  else return JsErr.invalidJson();
  // nats-server's subject checks (checkStreamCfg), in its order and words; FlowMQ's own refusals follow.
  const seen = new Set<string>();
  for (const s of subjects) {
    if (seen.has(s)) return JsErr.streamInvalidConfig('duplicate subjects detected');
    const t = s.split('.');
    if (t.length >= 3 && t[0] === '$JS' && t[1] === 'API') return JsErr.streamInvalidConfig('subjects overlap with jetstream api');
    if (!isNatsSubject(s)) return JsErr.streamInvalidConfig('invalid subject');
    seen.add(s);
  }
  const bindings: string[] = [];
  for (const s of subjects) {
    try {
      bindings.push(names.topic(subjectToFilter(s)));
    } catch (err) {
      return JsErr.streamInvalidConfig(`invalid subject "${s}": ${(err as Error).message}`);
    }
  }
  const perSubject = r.max_msgs_per_subject ?? -1;
  if (typeof perSubject !== 'number' || !Number.isSafeInteger(perSubject) || perSubject < -1) return JsErr.invalidJson();
  const maxMsgs = r.max_msgs ?? -1;
  const maxBytes = r.max_bytes ?? -1;
  for (const v of [maxMsgs, maxBytes]) if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < -1) return JsErr.invalidJson();
  const flags: Record<string, boolean> = {};
  const republish = parseRepublish(r.republish, subjects);
  if (republish !== null && 'err_code' in republish) return republish;
  for (const k of ['no_ack', 'allow_rollup_hdrs', 'deny_delete', 'deny_purge', 'allow_direct', 'mirror_direct', 'discard_new_per_subject', 'sealed']) {
    const v = r[k] ?? false;
    if (typeof v !== 'boolean') return JsErr.invalidJson();
    flags[k] = v;
  }
  const discardNew = r.discard === 'new';
  // nats-server's checks (stream.go checkStreamCfg), with its texts.
  if (flags.allow_rollup_hdrs && flags.deny_purge) return JsErr.streamInvalidConfig('roll-ups require the purge permission');
  if (flags.discard_new_per_subject) {
    if (!discardNew) return JsErr.streamInvalidConfig('discard new per subject requires discard new policy to be set');
    if (perSubject <= 0) return JsErr.streamInvalidConfig('discard new per subject requires max msgs per subject > 0');
  }
  return {
    options: {
      maxMsgs: (maxMsgs as number) > 0 ? (maxMsgs as number) : -1,
      maxBytes: (maxBytes as number) > 0 ? (maxBytes as number) : -1,
      maxMsgsPerSubject: perSubject > 0 ? perSubject : -1,
      allowRollup: flags.allow_rollup_hdrs,
      denyDelete: flags.deny_delete,
      denyPurge: flags.deny_purge,
      discardNew,
      discardNewPerSubject: flags.discard_new_per_subject,
      allowDirect: flags.allow_direct,
      // As asked: stream-api.ts refuses it without a mirror and sets it from the origin (mirrorDirectOf).
      mirrorDirect: flags.mirror_direct,
      retention,
      maxMsgSize: maxMsgSize === 0 ? -1 : maxMsgSize,
      sealed: flags.sealed,
      sealedRollup: false,
      sealedDiscardOld: false,
      mirror,
      sources,
      description,
      memory: r.storage === 'memory',
      republish:
        republish === null || names.isDefault ? republish : { ...republish, src: inSubject(names, republish.src), dest: inSubject(names, republish.dest) },
      noAck: flags.no_ack,
    },
    name: internal,
    bindings: mirror !== null ? [names.topic(mirrorBinding(name))] : [...new Set(bindings)],
    replicas,
    retentionMs: (maxAge as number) > 0 ? Math.round((maxAge as number) / 1e6) : null,
    duplicateWindowNs: dup,
  };
}

/** A mirror's or source's configuration (nats-server's StreamSource; `external` is not supported). */
function sourceSpec(v: unknown, names: NamespaceNames): SourceSpec | ApiError {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return JsErr.invalidJson();
  const r = v as Record<string, unknown>;
  if (typeof r.name !== 'string' || r.name === '') return JsErr.streamInvalidConfig('stream source name is required');
  // An origin is a stream of the same namespace: a qualified name (another namespace's) is none a client may write.
  if (isQualifiedStream(r.name)) return JsErr.streamInvalidConfig(`stream source name "${r.name}" is not a valid stream name`);
  if (r.external !== undefined && r.external !== null) return JsErr.streamInvalidConfig('external stream sources are not supported by FlowMQ streams');
  const seq = r.opt_start_seq ?? 0;
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 0) return JsErr.invalidJson();
  const time = r.opt_start_time ?? '';
  if (typeof time !== 'string' || (time !== '' && !Number.isFinite(Date.parse(time)))) return JsErr.invalidJson();
  const filter = r.filter_subject ?? '';
  if (typeof filter !== 'string') return JsErr.invalidJson();
  return {
    name: names.stream(r.name),
    ...(seq > 0 ? { opt_start_seq: seq } : {}),
    ...(time !== '' ? { opt_start_time: time } : {}),
    ...(filter !== '' ? { filter_subject: inSubject(names, filter) } : {}),
  };
}

export function sameBindings(a: string[], b: string[]): boolean {
  const x = [...new Set(a)].sort();
  const y = [...new Set(b)].sort();
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

/**
 * The highest offset of partition 0 (or `partition`) whose message satisfies `pred`, or -1: read backwards in windows
 * of offsets from the end (FlowMQ keeps no per-subject index, so "last by subject" costs a scan of what follows the
 * match).
 */
export async function lastMatching(engine: Engine, stream: string, pred: (m: Message) => boolean, partition = 0): Promise<number> {
  const { logStartOffset, highWatermark } = engine.offsets(stream, partition);
  const ownTopic = stream.split('.').join('/');
  const WINDOW = 1024;
  let hi = highWatermark;
  while (hi > logStartOffset) {
    const lo = Math.max(logStartOffset, hi - WINDOW);
    let best = -1;
    let offset = lo;
    while (offset < hi) {
      const batches = await engine.read(stream, partition, offset, 1024 * 1024);
      if (batches.length === 0) break;
      const before = offset;
      for (const b of batches) {
        for (const rec of decodeBatch(b)) {
          if (rec.offset < offset || rec.offset >= hi) continue;
          if (pred(recordToMessage(rec, ownTopic))) best = rec.offset;
          offset = rec.offset + 1;
        }
      }
      if (offset === before) break;
    }
    if (best >= 0) return best;
    hi = lo;
  }
  return -1;
}

/**
 * The lowest offset >= `from` of partition 0 (or `partition`) whose message satisfies `pred`, or -1 (a forward scan
 * of the log).
 */
export async function firstMatching(engine: Engine, stream: string, from: number, pred: (m: Message) => boolean, partition = 0): Promise<number> {
  const ownTopic = stream.split('.').join('/');
  const { logStartOffset, highWatermark } = engine.offsets(stream, partition);
  let offset = Math.max(from, logStartOffset);
  while (offset < highWatermark) {
    const batches = await engine.read(stream, partition, offset, 1024 * 1024);
    const before = offset;
    for (const b of batches) {
      for (const rec of decodeBatch(b)) {
        if (rec.offset < offset || rec.offset >= highWatermark) continue;
        if (pred(recordToMessage(rec, ownTopic))) return rec.offset;
        offset = rec.offset + 1;
      }
    }
    if (offset === before) {
      if (batches.length === 0) break;
      offset++;
    }
  }
  return -1;
}

/** Calls `fn` with every message of partition 0 (or `partition`) below offset `to`, in order (seq: offset + 1). */
export async function scanLog(engine: Engine, stream: string, to: number, fn: (seq: number, m: Message) => void, partition = 0): Promise<void> {
  const ownTopic = stream.split('.').join('/');
  let offset = engine.offsets(stream, partition).logStartOffset;
  while (offset < to) {
    const batches = await engine.read(stream, partition, offset, 1024 * 1024);
    const before = offset;
    for (const b of batches) {
      for (const rec of decodeBatch(b)) {
        if (rec.offset < offset || rec.offset >= to) continue;
        fn(rec.offset + 1, recordToMessage(rec, ownTopic));
        offset = rec.offset + 1;
      }
    }
    if (offset === before) {
      if (batches.length === 0) break;
      offset++;
    }
  }
}
