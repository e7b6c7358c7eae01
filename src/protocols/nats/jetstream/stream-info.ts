/**
 * FlowMQ streams rendered as JetStream streams (nats-server 2.9's StreamConfig / StreamInfo JSON), and the checks
 * that turn a JetStream stream configuration into a FlowMQ stream definition.
 */
import { decodeBatch, isValidStreamName, recordToMessage, type Engine, type StreamDef } from '../../../core/index.js';
import { JsErr, type ApiError } from './errors.js';
import { filterToSubject, isValidApiName, subjectToFilter } from './subjects.js';

/** Go's zero time, which nats-server reports for "no message". */
export const ZERO_TIME = '0001-01-01T00:00:00Z';
export const DEFAULT_DUPLICATE_WINDOW_NS = 120e9;

export function streamSubjects(def: StreamDef): string[] {
  return def.bindings.map(filterToSubject);
}

export function streamConfigJson(def: StreamDef, duplicateWindowNs: number): Record<string, unknown> {
  return {
    name: def.name,
    subjects: streamSubjects(def),
    retention: 'limits',
    max_consumers: -1,
    max_msgs: -1,
    max_bytes: -1,
    max_age: def.retentionMs === null ? 0 : def.retentionMs * 1e6,
    max_msgs_per_subject: -1,
    max_msg_size: -1,
    discard: 'old',
    storage: 'file',
    num_replicas: 1,
    duplicate_window: duplicateWindowNs,
    allow_direct: false,
    mirror_direct: false,
    sealed: false,
    deny_delete: false,
    deny_purge: false,
    allow_rollup_hdrs: false,
  };
}

export function isoTime(ms: number): string {
  return new Date(ms).toISOString();
}

async function timestampAt(engine: Engine, stream: string, offset: number): Promise<string> {
  try {
    const batches = await engine.read(stream, 0, offset, 1);
    for (const b of batches) for (const r of decodeBatch(b)) if (r.offset === offset) return isoTime(recordToMessage(r, stream).timestamp);
  } catch {
    // The stream went away meanwhile: no timestamp.
  }
  return ZERO_TIME;
}

/**
 * The stream's state. Sequences are those of partition 0 (offset + 1; a multi-partition stream's other partitions
 * have their own, which JetStream cannot express), message counts cover every partition; `bytes` is not tracked
 * per stream by FlowMQ's log and reads 0.
 */
export async function streamState(engine: Engine, def: StreamDef, consumers: number): Promise<Record<string, unknown>> {
  let messages = 0;
  for (let p = 0; p < def.partitions; p++) {
    const o = engine.offsets(def.name, p);
    messages += o.highWatermark - o.logStartOffset;
  }
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

export interface StreamSpecFromJs {
  name: string;
  bindings: string[];
  retentionMs: number | null;
  duplicateWindowNs: number;
}

const NEUTRAL: Array<[string, (v: unknown) => boolean, string]> = [
  ['retention', (v) => v === undefined || v === 'limits', 'retention policies other than limits'],
  ['max_consumers', (v) => v === undefined || v === -1 || v === 0, 'max_consumers'],
  ['max_msgs', (v) => v === undefined || v === -1 || v === 0, 'max_msgs (use max_age)'],
  ['max_bytes', (v) => v === undefined || v === -1 || v === 0, 'max_bytes (use max_age)'],
  ['max_msgs_per_subject', (v) => v === undefined || v === -1 || v === 0, 'max_msgs_per_subject'],
  ['max_msg_size', (v) => v === undefined || v === -1 || v === 0, 'max_msg_size'],
  ['mirror', (v) => v === undefined || v === null, 'mirrors'],
  ['sources', (v) => v === undefined || v === null || (Array.isArray(v) && v.length === 0), 'sources'],
  ['republish', (v) => v === undefined || v === null, 'republish'],
  ['subject_transform', (v) => v === undefined || v === null, 'subject transforms'],
  ['sealed', (v) => v === undefined || v === false, 'sealed streams'],
  ['deny_delete', (v) => v === undefined || v === false, 'deny_delete'],
  ['deny_purge', (v) => v === undefined || v === false, 'deny_purge'],
  ['allow_rollup_hdrs', (v) => v === undefined || v === false, 'rollups'],
  ['allow_direct', (v) => v === undefined || v === false, 'direct get'],
  ['mirror_direct', (v) => v === undefined || v === false, 'direct get'],
  ['no_ack', (v) => v === undefined || v === false, 'no_ack streams'],
  ['template_owner', (v) => v === undefined || v === '', 'stream templates'],
  ['compression', (v) => v === undefined || v === '' || v === 'none', 'compression'],
  ['first_seq', (v) => v === undefined || v === 0 || v === 1, 'first_seq'],
  ['discard_new_per_subject', (v) => v === undefined || v === false, 'discard_new_per_subject'],
];

/**
 * Checks a STREAM.CREATE / STREAM.UPDATE body against the subject's stream name and what FlowMQ streams can be.
 * Accepted and ignored where harmless: storage (FlowMQ streams are always on its durable storage), num_replicas
 * (durability is the storage's), discard (without limits nothing is discarded), description, placement.
 */
export function parseStreamConfig(raw: unknown, subjectName: string): StreamSpecFromJs | ApiError {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return JsErr.invalidJson();
  const r = raw as Record<string, unknown>;
  const name = r.name === undefined || r.name === '' ? subjectName : r.name;
  if (typeof name !== 'string') return JsErr.invalidJson();
  if (name !== subjectName) return JsErr.streamMismatch();
  if (!isValidApiName(name)) return JsErr.streamNameInvalid();
  if (!isValidStreamName(name)) return JsErr.streamInvalidConfig(`stream name "${name}" is not a valid FlowMQ stream name: use 1-249 of [a-zA-Z0-9_-]`);
  for (const [k, ok, what] of NEUTRAL) {
    if (!ok(r[k])) return JsErr.streamInvalidConfig(`${what} ${what.endsWith('s') ? 'are' : 'is'} not supported by FlowMQ streams`);
  }
  if (r.storage !== undefined && r.storage !== 'file' && r.storage !== 'memory') return JsErr.invalidJson();
  if (r.discard !== undefined && r.discard !== 'old' && r.discard !== 'new') return JsErr.invalidJson();
  let subjects: string[];
  if (r.subjects === undefined || r.subjects === null || (Array.isArray(r.subjects) && r.subjects.length === 0)) subjects = [name];
  else if (Array.isArray(r.subjects) && r.subjects.every((s) => typeof s === 'string')) subjects = r.subjects as string[];
  else return JsErr.invalidJson();
  const bindings: string[] = [];
  for (const s of subjects) {
    try {
      bindings.push(subjectToFilter(s));
    } catch (err) {
      return JsErr.streamInvalidConfig(`invalid subject "${s}": ${(err as Error).message}`);
    }
  }
  const maxAge = r.max_age ?? 0;
  if (typeof maxAge !== 'number' || !Number.isSafeInteger(maxAge) || maxAge < 0) return JsErr.invalidJson();
  if (maxAge > 0 && maxAge < 1e6) return JsErr.streamInvalidConfig('max_age must be at least 1ms on FlowMQ streams');
  const dup = r.duplicate_window ?? 0;
  if (typeof dup !== 'number' || !Number.isSafeInteger(dup) || dup < 0) return JsErr.invalidJson();
  return {
    name,
    bindings: [...new Set(bindings)],
    retentionMs: maxAge > 0 ? Math.round(maxAge / 1e6) : null,
    duplicateWindowNs: dup > 0 ? dup : maxAge > 0 && maxAge < DEFAULT_DUPLICATE_WINDOW_NS ? maxAge : DEFAULT_DUPLICATE_WINDOW_NS,
  };
}

export function sameBindings(a: string[], b: string[]): boolean {
  const x = [...new Set(a)].sort();
  const y = [...new Set(b)].sort();
  return x.length === y.length && x.every((v, i) => v === y[i]);
}
