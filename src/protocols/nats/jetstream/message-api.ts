/**
 * Messages of JetStream streams: the JetStream publish (a NATS publish with a reply subject, as nats-server's
 * stream.go processJetStreamMsg): expectations (Nats-Expected-Stream, -Last-Sequence, -Last-Msg-Id), duplicate
 * detection by Nats-Msg-Id within the stream's duplicate window (in memory; dedup.ts rebuilds it at start), the core's publish, and the PubAck once
 * every capturing stream has the message durably (in cluster mode checked where the partition is written); and the
 * message API, STREAM.MSG.GET (by sequence or last by subject) and STREAM.MSG.DELETE (refused: FlowMQ streams do
 * not delete single messages).
 */
import type { Cluster } from '../../../cluster/index.js';
import { call, encodeMessage, RPC } from '../../../cluster/index.js';
import {
  decodeBatch,
  dotsToUnified,
  makeMessage,
  matches,
  newPublishInfo,
  recordToMessage,
  type Header,
  type Message,
  type PublishInfo,
  type StreamDef,
} from '../../../core/index.js';
import { pause, retriable, retryWindowMs } from './cluster.js';
import { consumedPartitions } from './consumer.js';
import { readAt } from './consumer-parts.js';
import { firstOffsetFrom, placeOf, seqOf } from './partition-seq.js';
import { JsErr, type ApiError } from './errors.js';
import { DEFAULT_DUPLICATE_WINDOW_NS, firstMatching, isoTime, lastMatching } from './stream-info.js';
import { subjectMatches } from './subjects.js';
import { markIds, storedWindowNs, windowLoad } from './dedup.js';
import { jsOptions, storedSize, type StreamView } from './stream-view.js';
import { accountRefusal } from './account.js';
import { BAD_JSON, errText, isCount, JetStreamState, type Json, parseJson, typed } from './service-state.js';
import { inSubject, namesOf, ownStream, subjectLength } from './names.js';

/** A JetStream publish whose PubAck (or error) goes to `to`: a reply topic, or (cluster mode) a callback. */
export function publishWith(js: JetStreamState, msg: Message, to: string | ((body: Json) => void), forward = true, checked = false): PublishInfo {
  const info = newPublishInfo();
  // Plain requests (no headers: request/reply traffic, acks, API calls) skip the header look-ups.
  const plain = msg.headers.length === 0;
  const msgId = msg.messageId ?? (plain ? undefined : headerValue(msg, 'Nats-Msg-Id'));
  const expStream = plain ? undefined : headerValue(msg, 'Nats-Expected-Stream');
  const expLastSeq = plain ? undefined : headerValue(msg, 'Nats-Expected-Last-Sequence');
  const expLastId = plain ? undefined : headerValue(msg, 'Nats-Expected-Last-Msg-Id');
  const expLastSubj = plain ? undefined : headerValue(msg, 'Nats-Expected-Last-Subject-Sequence');
  const rollup = plain ? undefined : headerValue(msg, 'Nats-Rollup');
  if (js.guards.size > 0) {
    // nats-server's first checks (stream.go processJetStreamMsg): a sealed stream, a message over max_msg_size.
    const t = capturing(js, msg.topic)[0];
    const g = t === undefined ? undefined : js.guards.get(t.name);
    if (t !== undefined && g !== undefined) {
      // no_ack: nothing is answered, not even an error (nats-server answers only when the stream acks).
      if (g.noAck) to = () => undefined;
      let error: ApiError | null = null;
      if (g.sealed) error = JsErr.streamSealed();
      else if (g.maxMsgSize >= 0 && (msg.natsHeaders?.length ?? 0) + msg.payload.length > g.maxMsgSize) error = JsErr.messageTooBig();
      if (error !== null) {
        answer(js, to, { error, stream: t.name, seq: 0 });
        info.delivered++;
        return info;
      }
    }
  }
  if (js.accountUsage.size > 0) {
    // The account's storage limits (account.ts), checked as nats-server checks them after the guards.
    const t = capturing(js, msg.topic)[0];
    const error = t === undefined ? null : accountRefusal(js, t.name, msg);
    if (error !== null) {
      answer(js, to, { error, stream: t!.name, seq: 0 });
      info.delivered++;
      return info;
    }
  }
  // Plain requests (most request/reply traffic) look for a target only while some stream refuses at its limits.
  const view = plain && js.refusing.size === 0 ? null : viewTarget(js, msg.topic);
  if (!checked && (expLastSubj !== undefined || rollup !== undefined || (view !== null && view.refusesNew))) {
    const t = capturing(js, msg.topic)[0];
    const where = t === undefined || js.cluster === null || !forward ? undefined : js.engine.storage.locate?.(t.name, 0);
    // Cluster mode: checked where the partition is written (forwarded below); while nobody writes it (the owner's
    // lease run out, the next claim not made yet) waited for, never checked against this broker's view.
    if (js.cluster !== null && t?.partitions === 1 && where !== undefined && !where.local && where.broker === null) {
      info.delivered++;
      relocatePublish(js, js.cluster, msg, to, Date.now() + retryWindowMs(js.cluster), 0);
      return info;
    }
    const remote = where !== undefined && !where.local && where.broker !== null;
    if (t !== undefined && !remote) {
      info.delivered++;
      subjectChecked(js, t.name, msg, to, forward, expLastSubj, rollup);
      return info;
    }
  }
  if (msgId !== undefined || expStream !== undefined || expLastSeq !== undefined || expLastId !== undefined || (expLastSubj !== undefined && !checked)) {
    const targets = capturing(js, msg.topic);
    if (targets.length > 0) {
      const t = targets[0];
      // Cluster mode: ids and expectations are checked where the stream's partition is written, so that a
      // publish retried through another broker is still found a duplicate.
      if (forward && js.cluster !== null && t.partitions === 1) {
        const where = js.engine.storage.locate?.(t.name, 0);
        if (where !== undefined && !where.local) {
          // No live owner now (its lease ran out, the next one not there yet): waited for, never checked here.
          if (where.broker === null) relocatePublish(js, js.cluster, msg, to, Date.now() + retryWindowMs(js.cluster), 0);
          else forwardPublish(js, js.cluster, where.broker, msg, to);
          info.delivered++;
          return info;
        }
      }
      // Cluster mode: a new owner of the partition first rebuilds the window from the stream (dedup.ts).
      const loading = (msgId !== undefined || expLastId !== undefined) && js.cluster !== null && t.partitions === 1 ? windowLoad(js, t.name) : null;
      if (loading !== null) {
        loading.then(
          () => publishWith(js, msg, to, forward, checked),
          (err: unknown) => answer(js, to, { error: JsErr.streamStoreFailed(errText(err)), stream: t.name, seq: 0 }),
        );
        info.delivered++;
        return info;
      }
      let refusal: ApiError | null = null;
      if (expStream !== undefined && expStream !== t.name) refusal = JsErr.expectedStreamMismatch();
      else if (expLastSeq !== undefined) {
        const last = js.engine.offsets(t.name, 0).highWatermark;
        if (String(last) !== expLastSeq.trim()) refusal = JsErr.wrongLastSequence(last);
      } else if (expLastId !== undefined) {
        const ids = js.dedup.get(t.name);
        let last = '';
        if (ids) for (const k of ids.keys()) last = k;
        if (last !== expLastId) refusal = JsErr.wrongLastMsgId(last);
      }
      if (refusal !== null) {
        answer(js, to, { error: refusal, stream: t.name, seq: 0 });
        // Answered: not a request nobody heard.
        info.delivered++;
        return info;
      }
      if (msgId !== undefined) {
        const now = Date.now();
        const seen = targets.map((d) => seenSeq(js, d.name, msgId, now));
        if (seen.every((s) => s !== undefined)) {
          for (let i = 0; i < targets.length; i++) info.captured.push({ stream: targets[i].name, partition: 0, offset: seen[i]! - 1 });
          answer(js, to, { stream: t.name, seq: seen[0], duplicate: true });
          return info;
        }
      }
    }
  }
  const durable = js.engine.publish(msg, info);
  if (durable !== null && js.views.size > 0) {
    // Publishes with a subject expectation wait for this one to be in the log (subjectChecked).
    for (const c of info.captured) if (js.views.has(c.stream)) track(js, c.stream, durable);
  }
  if (info.captured.length === 0) return info;
  const first = info.captured[0];
  if (msgId !== undefined) {
    const now = Date.now();
    for (const c of info.captured) {
      if (c.later === undefined) remember(js, c.stream, msgId, c.offset + 1, now);
      else
        c.later.then(
          (o) => remember(js, c.stream, msgId, o + 1, now),
          () => undefined,
        );
    }
  }
  if (first.later !== undefined) {
    // Cluster mode: the partition's owner assigned the sequence; it is known once the owner made it durable.
    const later = first.later;
    Promise.all([durable, later]).then(
      ([, o]) => answer(js, to, { stream: first.stream, seq: o + 1 }),
      (err: unknown) => answer(js, to, { error: JsErr.streamStoreFailed(errText(err)), stream: first.stream, seq: 0 }),
    );
    return info;
  }
  const ack = { stream: first.stream, seq: first.offset + 1 };
  if (durable === null) answer(js, to, ack);
  else {
    durable.then(
      () => answer(js, to, ack),
      (err: unknown) => answer(js, to, { error: JsErr.streamStoreFailed(errText(err)), stream: first.stream, seq: 0 }),
    );
  }
  return info;
}

function track(js: JetStreamState, stream: string, durable: Promise<unknown>): void {
  let set = js.inflight.get(stream);
  if (set === undefined) js.inflight.set(stream, (set = new Set()));
  const s = set;
  const settled = durable.catch(() => undefined);
  s.add(settled);
  void settled.then(() => {
    s.delete(settled);
    if (s.size === 0 && js.inflight.get(stream) === s) js.inflight.delete(stream);
  });
}

/** The view (stream-view.ts) of the first stream capturing `topic`, or null. */
function viewTarget(js: JetStreamState, topic: string): StreamView | null {
  const t = capturing(js, topic)[0];
  return t === undefined ? null : js.viewOf(t.name);
}

/**
 * A publish whose checks need the stream's last message of its subject (Nats-Expected-Last-Subject-Sequence,
 * discard new per subject) or its rollup permission. These publishes on one stream go one at a time: each waits for
 * the publishes before it to be in the log and the view to have them, checks, and publishes (the rest of its
 * checks, the PubAck) through publishWith.
 */
function subjectChecked(
  js: JetStreamState,
  stream: string,
  msg: Message,
  to: string | ((body: Json) => void),
  forward: boolean,
  expLastSubj: string | undefined,
  rollup: string | undefined,
): void {
  const refuse = (error: ApiError): void => answer(js, to, { error, stream, seq: 0 });
  const def = js.engine.getAnyStream(stream)?.def;
  if (def === undefined) return refuse(JsErr.streamNotFound());
  const opts = jsOptions(def);
  if (rollup !== undefined) {
    // nats-server's order and texts (stream.go processJetStreamMsg).
    if (!opts.allowRollup || opts.denyPurge) return refuse(JsErr.rollupFailed('rollup not permitted'));
    if (rollup !== 'sub' && rollup !== 'all') return refuse(JsErr.rollupFailed(`rollup value invalid: ${JSON.stringify(rollup)}`));
    if (expLastSubj === undefined && !(js.viewOf(stream)?.refusesNew ?? false)) {
      publishWith(js, msg, to, forward, true);
      return;
    }
  }
  const prev = js.expectChain.get(stream) ?? Promise.resolve();
  const next = prev.then(async () => {
    for (;;) {
      const waiting = js.inflight.get(stream);
      if (waiting !== undefined && waiting.size > 0) await Promise.all([...waiting]);
      const v = await js.freshView(stream);
      const hw = js.engine.offsets(stream, 0).highWatermark;
      if ((js.inflight.get(stream)?.size ?? 0) > 0 || (v !== null && v.scanned < hw)) continue;
      let last: number;
      if (v !== null) last = v.lastOf(msg.topic);
      else {
        const topic = msg.topic;
        last = (await lastMatching(js.engine, stream, (m) => m.topic === topic)) + 1;
        if (js.engine.offsets(stream, 0).highWatermark !== hw || (js.inflight.get(stream)?.size ?? 0) > 0) continue;
      }
      if (expLastSubj !== undefined && expLastSubj.trim() !== String(last)) return refuse(JsErr.wrongLastSequence(last));
      if (v !== null && opts.discardNewPerSubject && opts.maxMsgsPerSubject > 0 && (v.bySubject.get(msg.topic)?.length ?? 0) >= opts.maxMsgsPerSubject) {
        return refuse(JsErr.streamStoreFailed('maximum messages per subject exceeded'));
      }
      // nats-server's discard new (filestore.go storeRawMsg): refused at a stream limit, unless the message replaces
      // one of its subject's (at max_msgs_per_subject).
      const atSubjectLimit = opts.maxMsgsPerSubject > 0 && (v?.bySubject.get(msg.topic)?.length ?? 0) >= opts.maxMsgsPerSubject;
      if (v !== null && opts.discardNew && !atSubjectLimit) {
        if (opts.maxMsgs > 0 && v.bySeq.size >= opts.maxMsgs) return refuse(JsErr.streamStoreFailed('maximum messages exceeded'));
        const size = storedSize(subjectLength(msg.topic), msg.natsHeaders?.length ?? 0, msg.payload.length, opts.memory);
        if (opts.maxBytes > 0 && v.bytes + size >= opts.maxBytes) return refuse(JsErr.streamStoreFailed('maximum bytes exceeded'));
      }
      const info = publishWith(js, msg, to, forward, true);
      // Nothing captured it (the stream went away meanwhile): the caller hears nothing else.
      if (info.captured.length === 0 && info.delivered === 0) refuse(JsErr.streamNotFound());
      return;
    }
  });
  const settled = next.catch((err: unknown) => refuse(JsErr.streamStoreFailed(errText(err))));
  js.expectChain.set(stream, settled);
  void settled.then(() => {
    if (js.expectChain.get(stream) === settled) js.expectChain.delete(stream);
  });
}

/**
 * Cluster mode: a publish carrying a Nats-Msg-Id or an expectation, sent to the broker writing the stream's
 * partition (`js.publish`), which checks and publishes it there and answers the PubAck. An owner that cannot be
 * reached or no longer owns the partition (NOT_OWNER, UNAVAILABLE) is looked up again and the publish sent to the
 * next one, or checked here once this broker owns the partition (its window rebuilt: dedup.ts windowLoad), for up to
 * two leases (retryWindowMs): a publish is never checked against the window of a broker that does not own the
 * partition. Past that, an error answers it (the client sends it again, with the same id).
 */
export function forwardPublish(
  js: JetStreamState,
  cl: Cluster,
  broker: number,
  msg: Message,
  to: string | ((body: Json) => void),
  deadline = Date.now() + retryWindowMs(cl),
  attempt = 0,
): void {
  // The origin names a connection of this broker: meaningless (or someone else's) at the other one.
  const { origin: _o, ...rest } = msg;
  js.clusterStats.publishesForwarded++;
  call(cl.channel!, broker, RPC.jsPublish, null, { tail: encodeMessage({ ...rest, payload: Buffer.from(msg.payload) }) }).then(
    ({ head: ack }) => {
      if (ack !== null) answer(js, to, ack);
    },
    (err: unknown) => {
      if (!retriable(err) || Date.now() > deadline) return answer(js, to, { error: JsErr.streamStoreFailed(errText(err)), stream: '', seq: 0 });
      relocatePublish(js, cl, msg, to, deadline, attempt);
    },
  );
}

/**
 * forwardPublish's next attempt, after a pause: checked here once this broker owns the partition, sent to its owner
 * once one is known, else (nobody owns it now) the same again, until `deadline`.
 */
function relocatePublish(js: JetStreamState, cl: Cluster, msg: Message, to: string | ((body: Json) => void), deadline: number, attempt: number): void {
  if (Date.now() > deadline) {
    answer(js, to, { error: JsErr.streamStoreFailed('no broker writes the stream partition now'), stream: '', seq: 0 });
    return;
  }
  void pause(attempt).then(() => {
    const t = capturing(js, msg.topic)[0];
    const where = t === undefined ? undefined : js.engine.storage.locate?.(t.name, 0);
    if (where === undefined || where.local) publishWith(js, msg, to, false);
    else if (where.broker === null) relocatePublish(js, cl, msg, to, deadline, attempt + 1);
    else forwardPublish(js, cl, where.broker, msg, to, deadline, attempt + 1);
  });
}

/**
 * Cluster mode, `js.publish` at the broker asked: it must own the single partition of the stream capturing the
 * message, or the sender looks the owner up again (NOT_OWNER) instead of having the id checked here.
 */
export function ownsPublished(js: JetStreamState, msg: Message): boolean {
  const t = capturing(js, msg.topic)[0];
  if (t === undefined || t.partitions !== 1) return true;
  const where = js.engine.storage.locate?.(t.name, 0);
  return where === undefined || where.local;
}

export function answer(js: JetStreamState, to: string | ((body: Json) => void), body: Json): void {
  // The stream as its namespace's clients name it (names.ts).
  if (typeof body.stream === 'string' && body.stream.includes('~')) body = { ...body, stream: ownStream(body.stream) };
  // A PubAck names the domain (nats-server puts it after the stream; errors have none).
  if (js.domain !== null && body.error === undefined && body.stream !== undefined) body = { stream: body.stream, domain: js.domain, ...body };
  if (typeof to === 'string') js.reply(to, body);
  else to(body);
}

/** The streams whose bindings match `topic` (a tenant's topics are matched by its own streams only: names.ts). */
export function capturing(js: JetStreamState, topic: string): StreamDef[] {
  return js.engine.listAllStreams().filter((d) => d.bindings.some((b) => matches(b, topic)));
}

export function windowMs(js: JetStreamState, stream: string): number {
  // Cluster mode: a stream created through another broker has its length in its stored configs.
  let ns = js.duplicateWindowNs.get(stream);
  if (ns === undefined) {
    const def = js.engine.getAnyStream(stream)?.def;
    ns = def === undefined ? DEFAULT_DUPLICATE_WINDOW_NS : storedWindowNs(def);
  }
  return ns / 1e6;
}

export function seenSeq(js: JetStreamState, stream: string, id: string, now: number): number | undefined {
  const ids = js.dedup.get(stream);
  if (!ids) return undefined;
  prune(js, stream, ids, now);
  return ids.get(id)?.seq;
}

export function remember(js: JetStreamState, stream: string, id: string, seq: number, now: number): void {
  markIds(js, stream);
  let ids = js.dedup.get(stream);
  if (!ids) js.dedup.set(stream, (ids = new Map<string, { seq: number; at: number }>()));
  ids.delete(id);
  ids.set(id, { seq, at: now });
  prune(js, stream, ids, now);
  // A publisher sending unique ids fast would grow the window without bound (12 million ids in 2 minutes at
  // 100k/s): past the cap the oldest ids are forgotten early, so dedup is best effort for them.
  if (ids.size > js.maxDedupIds) {
    for (const k of ids.keys()) {
      ids.delete(k);
      if (ids.size <= js.maxDedupIds) break;
    }
  }
}

export function prune(js: JetStreamState, stream: string, ids: Map<string, { seq: number; at: number }>, now: number): void {
  const horizon = now - windowMs(js, stream);
  for (const [k, v] of ids) {
    if (v.at >= horizon) break;
    ids.delete(k);
  }
}

export async function msgGet(js: JetStreamState, name: string, body: string): Promise<Json> {
  await js.freshen(name);
  const T_ = 'stream_msg_get_response';
  const e = js.engine.getAnyStream(name);
  if (!e) return typed(T_, { error: JsErr.streamNotFound() });
  const raw = parseJson(body);
  if (raw === BAD_JSON || raw === null || typeof raw !== 'object') return typed(T_, { error: JsErr.invalidJson() });
  const r = raw as Json;
  const seq = await requestedSeq(js, name, r);
  if (typeof seq !== 'number') return typed(T_, { error: seq });
  const m = await readStored(js, name, seq);
  if (m === null) return typed(T_, { error: JsErr.noMessageFound() });
  const hdrs = encodeHeaderBlock(m);
  return typed(T_, {
    message: {
      subject: dotsSubject(namesOf(name).outTopic(m.topic)),
      seq,
      ...(hdrs !== null ? { hdrs: hdrs.toString('base64') } : {}),
      data: m.payload.toString('base64'),
      time: isoTime(m.timestamp),
    },
  });
}

/** The sequence a MSG.GET / DIRECT.GET request names (`seq` or `last_by_subj`), or its error. */
async function requestedSeq(js: JetStreamState, name: string, r: Json): Promise<number | ApiError> {
  // nats-server 2.9 (jetstream_api.go jsMsgGetRequest): a sequence or last_by_subj, or next_by_subj from a sequence
  // (0: the first); last and next together, or a sequence with last, are a bad request.
  const seq = r.seq ?? 0;
  const last = r.last_by_subj ?? '';
  const next = r.next_by_subj ?? '';
  if (!isCount(seq) || typeof last !== 'string' || typeof next !== 'string') return JsErr.badRequest();
  if ((seq > 0 && last !== '') || (seq === 0 && last === '' && next === '') || (last !== '' && next !== '')) return JsErr.badRequest();
  // The subjects are the client's, in the stream's namespace (names.ts).
  const names = namesOf(name);
  if (!names.isDefault) return requestedIn(js, name, seq, last === '' ? '' : inSubject(names, last), next === '' ? '' : inSubject(names, next));
  return requestedIn(js, name, seq, last, next);
}

async function requestedIn(js: JetStreamState, name: string, seq: number, last: string, next: string): Promise<number | ApiError> {
  const def = js.engine.getAnyStream(name)?.def;
  const parts = def === undefined ? 1 : consumedPartitions(def);
  if (parts > 1 && (last !== '' || next !== '')) return partitionedSeq(js, name, parts, last, next, seq);
  if (last !== '') {
    const view = await js.freshView(name);
    if (view !== null) {
      const l = view.lastMatching(last);
      return l > 0 ? l : JsErr.noMessageFound();
    }
    const l = await lastMatching(js.engine, name, (m) => subjectMatches(last, m.topic));
    return l < 0 ? JsErr.noMessageFound() : l + 1;
  }
  if (next !== '') {
    const view = await js.freshView(name);
    if (view !== null) {
      const n = view.nextMatching(next, seq);
      return n > 0 ? n : JsErr.noMessageFound();
    }
    const n = await firstMatching(js.engine, name, Math.max(0, seq - 1), (m) => subjectMatches(next, m.topic));
    return n < 0 ? JsErr.noMessageFound() : n + 1;
  }
  return seq;
}

/**
 * last_by_subj / next_by_subj on a multi-partition stream (partition-seq.ts numbering; no view): the last is the
 * latest record of the subject by timestamp over the partitions (the higher sequence on a tie), as deliver_policy
 * last takes it; the next from `seq` is the lowest sequence at or above it.
 */
async function partitionedSeq(js: JetStreamState, name: string, parts: number, last: string, next: string, seq: number): Promise<number | ApiError> {
  let best = -1;
  let bestTs = -Infinity;
  for (let p = 0; p < parts; p++) {
    if (last !== '') {
      const o = await lastMatching(js.engine, name, (m) => subjectMatches(last, m.topic), p);
      if (o < 0) continue;
      const m = await readAt(js.engine, name, p, o);
      const s = seqOf(parts, p, o);
      if (m !== null && (m.timestamp > bestTs || (m.timestamp === bestTs && s > best))) {
        best = s;
        bestTs = m.timestamp;
      }
    } else {
      const o = await firstMatching(js.engine, name, firstOffsetFrom(parts, p, Math.max(1, seq)), (m) => subjectMatches(next, m.topic), p);
      if (o >= 0 && (best < 0 || seqOf(parts, p, o) < best)) best = seqOf(parts, p, o);
    }
  }
  return best > 0 ? best : JsErr.noMessageFound();
}

/** The stored message at `seq`, or null when the stream does not hold it (never written, trimmed or deleted). */
async function readStored(js: JetStreamState, name: string, seq: number): Promise<Message | null> {
  const def = js.engine.getAnyStream(name)?.def;
  const parts = def === undefined ? 1 : consumedPartitions(def);
  if (parts > 1) {
    // A multi-partition stream's sequences (partition-seq.ts); it has no view (consumer-api.ts).
    const { partition, offset } = placeOf(parts, seq);
    return readAt(js.engine, name, partition, offset);
  }
  const { logStartOffset, highWatermark } = js.engine.offsets(name, 0);
  if (seq - 1 < logStartOffset || seq - 1 >= highWatermark) return null;
  const view = await js.freshView(name);
  if (view !== null && view.isDeleted(seq)) return null;
  const batches = await js.engine.read(name, 0, seq - 1, 1);
  for (const b of batches) for (const rec of decodeBatch(b)) if (rec.offset === seq - 1) return recordToMessage(rec, name.split('.').join('/'));
  return null;
}

/** STREAM.MSG.DELETE: the message becomes a gap (a delete rule, stream-view.ts); `no_erase` is implied. */
export async function msgDelete(js: JetStreamState, name: string, body: string): Promise<Json> {
  await js.freshen(name);
  const T_ = 'stream_msg_delete_response';
  const e = js.engine.getAnyStream(name);
  if (!e) return typed(T_, { error: JsErr.streamNotFound() });
  const raw = parseJson(body);
  if (raw === BAD_JSON || raw === null || typeof raw !== 'object') return typed(T_, { error: JsErr.invalidJson() });
  if (jsOptions(e.def).sealed) return typed(T_, { error: JsErr.streamSealed() });
  if (jsOptions(e.def).denyDelete) return typed(T_, { error: JsErr.msgDeleteFailed('message delete not permitted') });
  const seq = (raw as Json).seq;
  if (!isCount(seq) || seq === 0) return typed(T_, { error: JsErr.badRequest() });
  if (e.def.partitions !== 1) return typed(T_, { error: JsErr.msgDeleteFailed('deleting single messages needs a single-partition stream') });
  // nats-server: past the last sequence the store's EOF; a sequence it no longer has, not found.
  if (seq > js.engine.offsets(name, 0).highWatermark) return typed(T_, { error: JsErr.msgDeleteFailed('stream store EOF') });
  if ((await readStored(js, name, seq)) === null) return typed(T_, { error: JsErr.sequenceNotFound(seq) });
  let n: number | string;
  try {
    n = await js.addRule(name, () => ({ at: 0, seq }));
  } catch (err) {
    return typed(T_, { error: JsErr.msgDeleteFailed(errText(err)) });
  }
  if (typeof n === 'string') return typed(T_, { error: JsErr.msgDeleteFailed(n) });
  if (n === 0) return typed(T_, { error: JsErr.sequenceNotFound(seq) });
  return typed(T_, { success: true });
}

/**
 * Direct get (`$JS.API.DIRECT.GET.<stream>` with a JSON body, `.<stream>.<subject...>` for the last message of a
 * subject), served on streams with allow_direct as nats-server does: the stored message itself, its headers led by
 * Nats-Stream, Nats-Subject, Nats-Sequence and Nats-Time-Stamp; `404 Message Not Found` or `408 Bad Request` as a
 * status otherwise.
 */
export async function directGet(js: JetStreamState, t: string[], body: string, reply: string, server: string | undefined = t[2]): Promise<void> {
  // `server`: the stream that answers (stream-api.ts directServer): this one, or a mirror of it with mirror_direct.
  const asked = t[2];
  const name = server;
  const status = (s: string): void => js.send(makeMessage(reply, Buffer.alloc(0), { status: s }));
  const e = name === undefined ? undefined : js.engine.getAnyStream(name);
  const o = e === undefined ? null : jsOptions(e.def);
  // nats-server serves direct gets only for streams that allow them (or their mirrors): nobody else answers.
  if (name === undefined || o === null || !(name === asked ? o.allowDirect : o.mirrorDirect && o.mirror?.name === asked)) return status('503');
  await js.freshen(name);
  let r: Json;
  if (t.length > 3) {
    if (body.trim() !== '') return status('408 Bad Request');
    r = { last_by_subj: t.slice(3).join('.') };
  } else {
    const raw = parseJson(body);
    if (raw === BAD_JSON || raw === null || typeof raw !== 'object' || Array.isArray(raw)) return status('408 Bad Request');
    r = raw as Json;
  }
  // Nothing asked for (nats-server 2.9 has no multi_last: such a request asks for nothing it knows).
  if ((r.seq ?? 0) === 0 && (r.last_by_subj ?? '') === '' && (r.next_by_subj ?? '') === '') return status('408 Empty Request');
  const seq = await requestedSeq(js, name, r);
  if (typeof seq !== 'number') return status(seq.code === 404 ? '404 Message Not Found' : '408 Bad Request');
  const m = await readStored(js, name, seq);
  if (m === null) return status('404 Message Not Found');
  const own: Header[] = [
    { key: 'Nats-Stream', value: Buffer.from(ownStream(name)) },
    { key: 'Nats-Subject', value: Buffer.from(dotsSubject(namesOf(name).outTopic(m.topic))) },
    { key: 'Nats-Sequence', value: Buffer.from(String(seq)) },
    { key: 'Nats-Time-Stamp', value: Buffer.from(isoTime(m.timestamp)) },
  ];
  const { topic: _t, retain: _r, deliverTopic: _d, guardTopic: _g, status: _s, origin: _o, natsHeaders: _n, responseTopic: _rt, ...rest } = m;
  const stored = m.natsHeaders !== undefined ? storedHeaders(m.natsHeaders) : m.headers;
  // Only receivers allowed to read the stored message's own topic get it.
  // A republished message stored here carries its origin's Nats-Stream, Nats-Subject, ...: the answer's own replace
  // them (nats.js reads the last value; nats-server sets, not adds, these headers).
  const kept = stored.filter((h) => !own.some((o) => o.key === h.key));
  js.send({ ...rest, topic: reply, guardTopic: m.topic, headers: [...own, ...kept], retain: false, qos: 0 });
}

/** The entries of a NATS/1.0 header block as published (what FlowMQ could not parse is left out). */
function storedHeaders(block: Buffer): Header[] {
  const out: Header[] = [];
  const lines = block.toString('utf8').split('\r\n');
  for (let i = 1; i < lines.length; i++) {
    const l = lines[i];
    const c = l.indexOf(':');
    if (c <= 0) continue;
    out.push({ key: l.slice(0, c).trim(), value: Buffer.from(l.slice(c + 1).trim()) });
  }
  return out;
}

function headerValue(msg: Message, key: string): string | undefined {
  for (const h of msg.headers) if (h.key === key) return h.value === null ? '' : h.value.toString('utf8');
  return undefined;
}

function dotsSubject(topic: string): string {
  return dotsToUnified(topic);
}

/** The unified topic of the stored message a STREAM.MSG.GET answer carries (the separator swap is its own inverse). */
export function storedTopic(out: Json): string | undefined {
  const m = out.message;
  if (m === null || typeof m !== 'object' || Array.isArray(m)) return undefined;
  const subject = (m as Json).subject;
  return typeof subject === 'string' ? dotsToUnified(subject) : undefined;
}

/** NATS/1.0 header block of a stored message's headers (STREAM.MSG.GET `hdrs`), or null when it has none. */
function encodeHeaderBlock(m: Message): Buffer | null {
  // Published by a NATS client: the block as it sent it, as nats-server stores it.
  if (m.natsHeaders !== undefined) return m.natsHeaders;
  const entries: Array<[string, string]> = m.headers.map((h) => [h.key, h.value === null ? '' : h.value.toString('utf8')]);
  if (m.messageId !== undefined && !entries.some(([k]) => k === 'Nats-Msg-Id')) entries.push(['Nats-Msg-Id', m.messageId]);
  if (entries.length === 0) return null;
  let s = 'NATS/1.0\r\n';
  for (const [k, v] of entries) s += `${k}: ${v.replace(/[\r\n]/g, ' ')}\r\n`;
  return Buffer.from(s + '\r\n');
}
