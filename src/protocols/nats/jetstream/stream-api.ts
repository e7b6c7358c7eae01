/**
 * The JetStream stream API (as nats-server's jetstream_api.go stream handlers over stream.go): STREAM.CREATE, UPDATE,
 * NAMES, LIST, INFO, DELETE and PURGE over FlowMQ streams. A JetStream stream is a FlowMQ stream whose subjects are
 * its bindings; creating or widening one needs subscribe on every subject it binds. Answers are nats-server's JSON.
 */
import type { Access } from '../../../control/index.js';
import { FlowError, namespaceNames, type StreamDef } from '../../../core/index.js';
import { inSubject, namesOf, outSubject, ownStream } from './names.js';
import { JsErr, type ApiError } from './errors.js';
import {
  DEFAULT_DUPLICATE_WINDOW_NS,
  isoTime,
  outSource,
  parseStreamConfig,
  sameBindings,
  streamConfigJson,
  streamState,
  streamSubjects,
  type StreamSpecFromJs,
} from './stream-info.js';
import { IDS_KEY, keepWindow, WINDOW_KEY } from './dedup.js';
import { subjectTotals } from './subject-tally.js';
import { accountLimits, API_STREAM_KEY, bytesOf, freshCatalog, overlapRefusal, streamConfigRefusal, streamLimitRefusal } from './account.js';
import { filterToSubject, subjectsCollide, subjectToFilter } from './subjects.js';
import { jsOptions, optionConfigs, type JsStreamOptions, type StreamView } from './stream-view.js';
import { BAD_JSON, errText, isApiError, isCount, JetStreamState, type Json, LIST_LIMIT, NAMES_LIMIT, pageOffset, parseJson, typed } from './service-state.js';

/** What a STREAM.INFO request may ask for beyond the stream (nats-server's JSApiStreamInfoRequest). */
export interface InfoRequest {
  /** Report `state.subjects`: the messages per subject matching this NATS subject filter. */
  subjectsFilter: string;
  /** Skip the first `offset` of those subjects (sorted), as nats-server pages them. */
  offset: number;
  /** Report `state.deleted`: the sequences between the first and the last that are gone. */
  deletedDetails: boolean;
}

/** At most this many subjects in one answer (nats-server's JSMaxSubjectDetails); `offset` pages on. */
export const SUBJECTS_LIMIT = 100_000;

export async function streamInfoJson(js: JetStreamState, def: StreamDef, req: InfoRequest | null = null): Promise<Json> {
  await js.freshen(def.name);
  const now = Date.now();
  const copiers = js.copiers.get(def.name)?.copiers ?? [];
  const mirror = jsOptions(def).mirror !== null;
  const view = await js.freshView(def.name);
  const { consumer_count, num_deleted, ...state } = await streamState(js.engine, def, await js.streamConsumerCount(def.name), view);
  const asked = req !== null && req.subjectsFilter !== '';
  const counted = await js.subjectCounts(def, view, asked);
  const counts = counted ?? [];
  state.bytes = bytesOf(js, def, view, counted !== null);
  let numSubjects = 0;
  for (const [, n] of counts) if (n > 0) numSubjects++;
  // nats-server's answer: the page's fields when some subject matched the filter, state.subjects sorted by subject.
  let page: Json = {};
  let subjects: Record<string, number> | null = null;
  if (asked) {
    const totals = subjectTotals(counts, req.subjectsFilter);
    if (totals.size > 0) {
      const names = [...totals.keys()].sort();
      const from = Math.min(req.offset, names.length);
      const slice = names.slice(from, from + SUBJECTS_LIMIT);
      page = { total: names.length, offset: from, limit: SUBJECTS_LIMIT };
      const ns = namesOf(def.name);
      if (slice.length > 0) subjects = Object.fromEntries(slice.map((s) => [outSubject(ns, s), totals.get(s)!]));
    }
  }
  return {
    ...page,
    config: streamConfigJson(def, js.duplicateWindowNs.get(def.name) ?? DEFAULT_DUPLICATE_WINDOW_NS),
    created: isoTime(def.createdAt),
    state: {
      ...state,
      // Left out at 0, as nats-server leaves them out.
      ...(numSubjects > 0 ? { num_subjects: numSubjects } : {}),
      ...(subjects !== null ? { subjects } : {}),
      ...(num_deleted !== undefined ? { num_deleted } : {}),
      ...(num_deleted !== undefined && req?.deletedDetails === true && view !== null ? { deleted: deletedSeqs(view, state.last_seq as number) } : {}),
      consumer_count,
    },
    ...(mirror && copiers.length > 0 ? { mirror: outSource(namesOf(def.name), copiers[0].info(now)) } : {}),
    ...(!mirror && copiers.length > 0 ? { sources: copiers.map((c) => outSource(namesOf(def.name), c.info(now))) } : {}),
  };
}

/**
 * A mirror's mirror_direct as nats-server 2.9 sets it (stream.go checkStreamCfg): whether its origin allows direct
 * gets now, whatever the client asked.
 */
function mirrorDirectOf(js: JetStreamState, spec: StreamSpecFromJs): boolean {
  const m = spec.options.mirror;
  if (m === null) return false;
  const origin = js.engine.getAnyStream(m.name);
  return origin !== undefined && jsOptions(origin.def).allowDirect;
}

/**
 * The stream that answers `$JS.API.DIRECT.GET.<name>`: the stream itself when it allows direct gets, else a mirror
 * of it with mirror_direct (nats-server's mirrors listen on their origin's direct get subjects in the origin's queue
 * group; FlowMQ lets the origin answer while it can, it is never behind its mirrors), else `name` (which answers 503).
 */
export function directServer(js: JetStreamState, name: string): string {
  const e = js.engine.getAnyStream(name);
  if (e !== undefined && jsOptions(e.def).allowDirect) return name;
  for (const d of js.engine.listAllStreams()) {
    const o = jsOptions(d);
    if (o.mirrorDirect && o.mirror?.name === name) return d.name;
  }
  return name;
}

/** The sequences from the first live one up to `last` that are not live (nats-server's `deleted`). */
function deletedSeqs(view: StreamView, last: number): number[] {
  const out: number[] = [];
  for (let seq = view.firstSeq; seq > 0 && seq <= last; seq++) if (!view.bySeq.has(seq)) out.push(seq);
  return out;
}

export async function streamCreate(js: JetStreamState, name: string, body: string, access: Access | null, namespace: string): Promise<Json> {
  const T_ = 'stream_create_response';
  const raw = parseJson(body);
  if (raw === BAD_JSON) return typed(T_, { error: JsErr.invalidJson() });
  const spec = parseStreamConfig(raw, name);
  if (isApiError(spec)) return typed(T_, { error: spec });
  if (spec.replicas > 1 && js.cluster === null) return typed(T_, { error: JsErr.replicasNotSupported() });
  if (spec.options.sealed) return typed(T_, { error: JsErr.streamInvalidConfig('stream configuration for create can not be sealed') });
  if (spec.options.mirrorDirect && spec.options.mirror === null) return typed(T_, { error: JsErr.mirrorDirectWithoutMirror() });
  const unbindable = bindRefusal(js, access, ownBindings(spec), name) ?? sourceRefusal(js, access, spec) ?? republishRefusal(js, access, spec, name);
  if (unbindable !== null) return typed(T_, { error: unbindable });
  spec.options.mirrorDirect = mirrorDirectOf(js, spec);
  const existing = js.engine.getAnyStream(name);
  if (existing) {
    if (!sameBindings(existing.def.bindings, spec.bindings) || existing.def.retentionMs !== spec.retentionMs || !sameOptions(existing.def, spec)) {
      return typed(T_, { error: JsErr.streamNameExist() });
    }
    return typed(T_, { ...(await streamInfoJson(js, existing.def)), did_create: true });
  }
  // The account's limits (account.ts), then nats-server's subject overlap, in its order.
  const limits = accountLimits(js, namespace);
  await freshCatalog(js);
  const refusal = streamLimitRefusal(js, limits, namespace, name, spec, null) ?? streamConfigRefusal(limits, spec) ?? overlapRefusal(js, name, spec);
  if (refusal !== null) return typed(T_, { error: refusal });
  let def: StreamDef;
  try {
    const configs = { ...optionConfigs(spec.options, []), [API_STREAM_KEY]: namespace };
    def = await js.engine.createStream({
      name,
      // A tenant's stream (`t1~orders`, names.ts): its name and bindings were qualified here, not by its client.
      namespaced: !namesOf(name).isDefault,
      partitions: 1,
      bindings: spec.bindings,
      retentionMs: spec.retentionMs,
      configs,
    });
  } catch (err) {
    if (err instanceof FlowError && err.code === 'ALREADY_EXISTS') return typed(T_, { error: JsErr.streamNameExist() });
    return typed(T_, { error: JsErr.streamCreate(errText(err)) });
  }
  try {
    def = await keepWindow(js, def, spec.duplicateWindowNs);
  } catch (err) {
    return typed(T_, { error: JsErr.streamCreate(errText(err)) });
  }
  js.streamAction(name, 'create');
  return typed(T_, { ...(await streamInfoJson(js, def)), did_create: true });
}

export async function streamUpdate(js: JetStreamState, name: string, body: string, access: Access | null, namespace: string): Promise<Json> {
  const T_ = 'stream_update_response';
  const raw = parseJson(body);
  if (raw === BAD_JSON) return typed(T_, { error: JsErr.invalidJson() });
  const spec = parseStreamConfig(raw, name);
  if (isApiError(spec)) return typed(T_, { error: spec });
  if (spec.replicas > 1 && js.cluster === null) return typed(T_, { error: JsErr.replicasNotSupported() });
  const e = js.engine.getAnyStream(name);
  if (!e) return typed(T_, { error: JsErr.streamNotFound() });
  const refusal = updateRefusal(jsOptions(e.def), spec);
  if (refusal !== null) return typed(T_, { error: refusal });
  spec.options.mirrorDirect = mirrorDirectOf(js, spec);
  // Permissions first (as on create): a refused caller learns nothing of other streams' subjects.
  const unbindable =
    bindRefusal(
      js,
      access,
      ownBindings(spec).filter((f) => !e.def.bindings.includes(f)),
      name,
    ) ??
    sourceRefusal(js, access, spec) ??
    republishRefusal(js, access, spec, name);
  if (unbindable !== null) return typed(T_, { error: unbindable });
  const limits = accountLimits(js, namespace);
  await freshCatalog(js);
  const over = streamConfigRefusal(limits, spec) ?? streamLimitRefusal(js, limits, namespace, name, spec, e.def) ?? overlapRefusal(js, name, spec);
  if (over !== null) return typed(T_, { error: over });
  let def = e.def;
  try {
    // New subjects are new bindings: the stream captures what they match from the next publish on.
    if (!sameBindings(def.bindings, spec.bindings)) def = await js.engine.setBindings(name, spec.bindings);
    if (def.retentionMs !== spec.retentionMs) def = await js.engine.setRetention(name, spec.retentionMs);
    if (!sameOptions(def, spec)) {
      // The stream's other configs (Kafka's, the delete rules) are kept; a new per-subject limit applies to what
      // the stream holds already, as in nats-server (the view is rebuilt from the log).
      const keep = Object.fromEntries(
        Object.entries(def.configs ?? {}).filter(
          ([k]) => !k.startsWith('nats.') || k === 'nats.deletes' || k === WINDOW_KEY || k === IDS_KEY || k === API_STREAM_KEY,
        ),
      );
      const { name: _n, partitions: _p, bindings: _b, createdAt: _c, id: _i, ...settings } = def;
      def = await js.engine.setSettings(name, { ...settings, configs: { ...keep, ...optionConfigs(spec.options, []) } });
    }
    def = await keepWindow(js, def, spec.duplicateWindowNs);
  } catch (err) {
    return typed(T_, { error: JsErr.streamUpdate(errText(err)) });
  }
  js.streamAction(name, 'modify');
  return typed(T_, await streamInfoJson(js, def));
}

/**
 * What nats-server 2.9 refuses in an update (stream.go update), in its order and words; a sealed stream's other
 * settings are then set as sealing sets them (no age limit, discard new, no deletes, purges or rollups).
 */
function updateRefusal(old: JsStreamOptions, spec: StreamSpecFromJs): ApiError | null {
  const o = spec.options;
  const no = (what: string): ApiError => JsErr.streamInvalidConfig(`stream configuration update can not ${what}`);
  if (JSON.stringify(o.mirror) !== JSON.stringify(old.mirror)) return JsErr.mirrorUpdate();
  if (o.memory !== old.memory) return no('change storage type');
  if (o.retention !== old.retention) return no('change retention policy');
  // nats-server 2.9.10's words for a changed republish.
  if (JSON.stringify(o.republish) !== JSON.stringify(old.republish)) return JsErr.streamInvalidConfig('stream configuration for republish not valid');
  if (old.sealed && !o.sealed) return no('unseal a sealed stream');
  if (old.denyDelete && !o.denyDelete) return no('cancel deny message deletes');
  if (old.denyPurge && !o.denyPurge) return no('cancel deny purge');
  if (o.sealed) {
    // What the seal turns off still holds for what the stream has (its view replays the log as before).
    const sealedRollup = old.sealedRollup || old.allowRollup;
    const sealedDiscardOld = old.sealedDiscardOld || (!old.discardNew && (old.maxMsgs > 0 || old.maxBytes > 0));
    spec.options = { ...o, discardNew: true, denyDelete: true, denyPurge: true, allowRollup: false, sealedRollup, sealedDiscardOld };
    spec.retentionMs = null;
  }
  return null;
}

/**
 * A stream's subjects are bindings: each needs subscribe on every topic it matches (Access.mayBind), or the stream
 * would collect a denied topic for whoever reads it. The refusal names the subject, as nats-server's permission
 * errors do.
 */
/** The bindings a client asks for (a mirror's internal binding is none: it takes only copies). */
function ownBindings(spec: StreamSpecFromJs): string[] {
  return spec.options.mirror === null ? spec.bindings : [];
}

/**
 * A mirror or sources read their origins: whoever configures them needs `subscribe` on each origin stream, or a
 * stream they may create would hand them one they may not read (a deny holds wherever the data goes).
 */
function sourceRefusal(js: JetStreamState, access: Access | null, spec: StreamSpecFromJs): ApiError | null {
  if (access === null) return null;
  const control = js.authorizer!.control;
  const origins = spec.options.mirror !== null ? [spec.options.mirror] : spec.options.sources;
  for (const o of origins) {
    const own = ownStream(o.name);
    if (control.allows(access.principal, 'subscribe', 'stream', own)) continue;
    control.logDenial(access, 'subscribe', 'stream', own);
    js.api.denied++;
    const user = access.principal.user;
    return JsErr.accessDenied(
      `Permissions Violation for subscribe on stream ${JSON.stringify(own)}${user === null ? '' : ` for user ${JSON.stringify(user)}`}`,
    );
  }
  return null;
}

/**
 * A republish destination is published to by the broker for whoever configured it: a publish deny of the caller
 * that reaches into `dest` refuses the request (the republished messages would go where the caller may not publish).
 */
function republishRefusal(js: JetStreamState, access: Access | null, spec: StreamSpecFromJs, stream: string): ApiError | null {
  const r = spec.options.republish;
  if (access === null || r === null) return null;
  const dest = outSubject(namesOf(stream), r.dest);
  let filter: string;
  try {
    filter = subjectToFilter(dest.replace(/\$\d+|\{\{[^}]*\}\}/g, '*'));
  } catch {
    return JsErr.streamInvalidConfig('stream configuration for republish not valid');
  }
  const wild = filter.split('/').some((l) => l === '+' || l === '#');
  if (!access.deniesTopic('publish', filter) && (wild || access.permits('publish', 'topic', filter))) return null;
  js.authorizer!.control.logDenial(access, 'publish', 'topic', filter);
  js.api.denied++;
  const user = access.principal.user;
  return JsErr.accessDenied(`Permissions Violation for publish on subject ${JSON.stringify(dest)}${user === null ? '' : ` for user ${JSON.stringify(user)}`}`);
}

/** `stream`: the internal name of the stream binding `filters` (policies name its namespace's topics unqualified). */
export function bindRefusal(js: JetStreamState, access: Access | null, internal: readonly string[], stream: string): ApiError | null {
  if (access === null) return null;
  const names = namesOf(stream);
  for (const i of internal) {
    const f = names.outTopic(i);
    if (access.mayBind(f)) continue;
    const user = access.principal.user;
    js.api.denied++;
    return JsErr.accessDenied(
      `Permissions Violation for subscribe on subject ${JSON.stringify(filterToSubject(f))}${user === null ? '' : ` for user ${JSON.stringify(user)}`}`,
    );
  }
  return null;
}

/** The streams of `namespace` (an account sees its own only) that `access` may list, optionally by subject. */
export function matchingStreams(js: JetStreamState, body: string, access: Access | null, namespace: string): StreamDef[] | ApiError {
  const raw = body.trim() === '' ? {} : parseJson(body);
  if (raw === BAD_JSON || raw === null || typeof raw !== 'object') return JsErr.invalidJson();
  const subject = (raw as Json).subject;
  const names = namespaceNames(namespace);
  const defs = js.engine.listAllStreams().filter((d) => names.ownStream(d.name) !== null && listable(js, access, ownStream(d.name)));
  if (typeof subject !== 'string' || subject === '') return defs;
  const asked = inSubject(names, subject);
  return defs.filter((d) => streamSubjects(d).some((s) => subjectsCollide(s, asked)));
}

export function streamNames(js: JetStreamState, body: string, access: Access | null, namespace: string): Json {
  const defs = matchingStreams(js, body, access, namespace);
  if (isApiError(defs)) return typed('stream_names_response', { error: defs });
  const offset = pageOffset(body);
  return typed('stream_names_response', {
    total: defs.length,
    offset,
    limit: NAMES_LIMIT,
    streams: defs.slice(offset, offset + NAMES_LIMIT).map((d) => ownStream(d.name)),
  });
}

export async function streamList(js: JetStreamState, body: string, access: Access | null, namespace: string): Promise<Json> {
  const defs = matchingStreams(js, body, access, namespace);
  if (isApiError(defs)) return typed('stream_list_response', { error: defs });
  const offset = pageOffset(body);
  const streams: Json[] = [];
  for (const d of defs.slice(offset, offset + LIST_LIMIT)) streams.push(await streamInfoJson(js, d));
  return typed('stream_list_response', { total: defs.length, offset, limit: LIST_LIMIT, streams });
}

export async function streamInfo(js: JetStreamState, name: string, body: string): Promise<Json> {
  const T_ = 'stream_info_response';
  const raw = body.trim() === '' ? {} : parseJson(body);
  if (raw === BAD_JSON || raw === null || typeof raw !== 'object' || Array.isArray(raw))
    return typed(T_, { error: JsErr.invalidJson(), total: 0, offset: 0, limit: 0 });
  const r = raw as Json;
  const filter = typeof r.subjects_filter === 'string' && r.subjects_filter !== '' ? inSubject(namesOf(name), r.subjects_filter) : '';
  const offset = isCount(r.offset) ? r.offset : 0;
  const deletedDetails = r.deleted_details === true;
  const e = js.engine.getAnyStream(name);
  if (!e) return typed(T_, { error: JsErr.streamNotFound(), total: 0, offset: 0, limit: 0 });
  return typed(T_, { total: 0, offset: 0, limit: 0, ...(await streamInfoJson(js, e.def, { subjectsFilter: filter, offset, deletedDetails })) });
}

export async function streamDelete(js: JetStreamState, name: string): Promise<Json> {
  const T_ = 'stream_delete_response';
  if (!js.engine.getAnyStream(name)) return typed(T_, { error: JsErr.streamNotFound() });
  js.removeConsumersOf(name);
  js.duplicateWindowNs.delete(name);
  js.tallies.delete(name);
  try {
    await js.engine.deleteStream(name);
  } catch (err) {
    if (err instanceof FlowError && err.code === 'NOT_FOUND') return typed(T_, { error: JsErr.streamNotFound() });
    return typed(T_, { error: JsErr.streamDelete(errText(err)) });
  }
  await js.engine.store.deleteConsumers(name).catch((err: unknown) => js.warnStore(err));
  js.streamAction(name, 'delete');
  return typed(T_, { success: true });
}

export async function streamPurge(js: JetStreamState, name: string, body: string): Promise<Json> {
  await js.freshen(name);
  const T_ = 'stream_purge_response';
  const e = js.engine.getAnyStream(name);
  if (!e) return typed(T_, { error: JsErr.streamNotFound() });
  const raw = body.trim() === '' ? {} : parseJson(body);
  if (raw === BAD_JSON || raw === null || typeof raw !== 'object') return typed(T_, { error: JsErr.invalidJson() });
  const r = raw as Json;
  if (jsOptions(e.def).sealed) return typed(T_, { error: JsErr.streamSealed() });
  if (jsOptions(e.def).denyPurge) return typed(T_, { error: JsErr.streamPurge('stream purge not permitted') });
  if (r.filter !== undefined && typeof r.filter !== 'string') return typed(T_, { error: JsErr.invalidJson() });
  const filter = r.filter === undefined || r.filter === '' || r.filter === '>' ? undefined : inSubject(namesOf(name), r.filter);
  if (
    (r.seq !== undefined && r.seq !== 0 && r.keep !== undefined && r.keep !== 0) ||
    (r.seq !== undefined && !isCount(r.seq)) ||
    (r.keep !== undefined && !isCount(r.keep))
  ) {
    return typed(T_, { error: JsErr.badRequest() });
  }
  const seq = typeof r.seq === 'number' && r.seq > 0 ? r.seq : undefined;
  const keep = typeof r.keep === 'number' && r.keep > 0 ? r.keep : undefined;
  const view = await js.freshView(name);
  if (filter !== undefined || (view !== null && (seq !== undefined || keep !== undefined))) {
    // By subject, or on a stream with gaps: a delete rule (stream-view.ts); sequences stay.
    try {
      subjectToFilter(filter ?? '>');
    } catch {
      return typed(T_, { error: JsErr.badRequest('invalid subject filter') });
    }
    if (e.def.partitions !== 1) return typed(T_, { error: JsErr.streamPurge('purging by subject needs a single-partition stream') });
    const purge = { ...(filter !== undefined ? { filter } : {}), ...(keep !== undefined ? { keep } : {}), ...(seq !== undefined ? { below: seq } : {}) };
    let n: number | string;
    try {
      n = await js.addRule(name, () => ({ at: 0, purge }));
    } catch (err) {
      return typed(T_, { error: JsErr.streamPurge(errText(err)) });
    }
    if (typeof n === 'string') return typed(T_, { error: JsErr.streamPurge(n) });
    return typed(T_, { success: true, purged: n });
  }
  let purged = 0;
  if (view !== null) purged = view.bySeq.size;
  try {
    for (let p = 0; p < e.def.partitions; p++) {
      const { logStartOffset, highWatermark } = js.engine.offsets(name, p);
      let to = highWatermark;
      // seq: everything below that sequence (partition 0's numbering); keep: all but the last n.
      if (typeof r.seq === 'number' && r.seq > 0) to = Math.min(highWatermark, r.seq - 1);
      else if (typeof r.keep === 'number' && r.keep > 0) to = Math.max(0, highWatermark - r.keep);
      if (to <= logStartOffset) continue;
      await js.engine.deleteRecords(name, p, to);
      if (view === null) purged += to - logStartOffset;
    }
  } catch (err) {
    return typed(T_, { error: JsErr.streamPurge(errText(err)) });
  }
  return typed(T_, { success: true, purged });
}

/** Whether a stream appears in STREAM.NAMES/LIST for `access` (describe; not logged: a list is not a request for it). */
export function listable(js: JetStreamState, access: Access | null, name: string): boolean {
  if (access === null) return true;
  return js.authorizer!.control.allows(access.principal, 'describe', 'stream', name);
}

/** Whether a stream already has the JetStream options a create or update asks for. */
function sameOptions(def: StreamDef, spec: StreamSpecFromJs): boolean {
  const { rules: _r, ...have } = jsOptions(def);
  const want = spec.options;
  return (Object.keys(want) as Array<keyof typeof want>).every((k) => JSON.stringify(have[k]) === JSON.stringify(want[k]));
}
