/**
 * Messages of JetStream streams: the JetStream publish (a NATS publish with a reply subject, as nats-server's
 * stream.go processJetStreamMsg): expectations (Nats-Expected-Stream, -Last-Sequence, -Last-Msg-Id), duplicate
 * detection by Nats-Msg-Id within the stream's duplicate window (in memory), the core's publish, and the PubAck once
 * every capturing stream has the message durably (in cluster mode checked where the partition is written); and the
 * message API, STREAM.MSG.GET (by sequence or last by subject) and STREAM.MSG.DELETE (refused: FlowMQ streams do
 * not delete single messages).
 */
import type { Cluster } from '../../../cluster/index.js';
import { call, encodeMessage, RPC } from '../../../cluster/index.js';
import { decodeBatch, dotsToUnified, matches, newPublishInfo, recordToMessage, type Message, type PublishInfo, type StreamDef } from '../../../core/index.js';
import { retriable } from './cluster.js';
import { JsErr, type ApiError } from './errors.js';
import { DEFAULT_DUPLICATE_WINDOW_NS, isoTime, lastMatching } from './stream-info.js';
import { subjectMatches } from './subjects.js';
import { BAD_JSON, errText, isCount, JetStreamState, type Json, parseJson, typed } from './service-state.js';

/** A JetStream publish whose PubAck (or error) goes to `to`: a reply topic, or (cluster mode) a callback. */
export function publishWith(js: JetStreamState, msg: Message, to: string | ((body: Json) => void), forward = true): PublishInfo {
  const info = newPublishInfo();
  // Plain requests (no headers: request/reply traffic, acks, API calls) skip the header look-ups.
  const plain = msg.headers.length === 0;
  const msgId = msg.messageId ?? (plain ? undefined : headerValue(msg, 'Nats-Msg-Id'));
  const expStream = plain ? undefined : headerValue(msg, 'Nats-Expected-Stream');
  const expLastSeq = plain ? undefined : headerValue(msg, 'Nats-Expected-Last-Sequence');
  const expLastId = plain ? undefined : headerValue(msg, 'Nats-Expected-Last-Msg-Id');
  const expLastSubj = plain ? undefined : headerValue(msg, 'Nats-Expected-Last-Subject-Sequence');
  if (msgId !== undefined || expStream !== undefined || expLastSeq !== undefined || expLastId !== undefined || expLastSubj !== undefined) {
    const targets = capturing(js, msg.topic);
    if (targets.length > 0) {
      const t = targets[0];
      // Cluster mode: ids and expectations are checked where the stream's partition is written, so that a
      // publish retried through another broker is still found a duplicate.
      if (forward && js.cluster !== null && t.partitions === 1) {
        const where = js.engine.storage.locate?.(t.name, 0);
        if (where !== undefined && !where.local && where.broker !== null) {
          forwardPublish(js, js.cluster, where.broker, msg, to);
          info.delivered++;
          return info;
        }
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
      } else if (expLastSubj !== undefined) {
        refusal = JsErr.badRequest('Nats-Expected-Last-Subject-Sequence is not supported by FlowMQ');
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

/**
 * Cluster mode: a publish carrying a Nats-Msg-Id or an expectation, sent to the broker writing the stream's
 * partition (`js.publish`), which checks and publishes it there and answers the PubAck. If that broker cannot be
 * reached, the publish is made here (its id checked against this broker's window only).
 */
export function forwardPublish(js: JetStreamState, cl: Cluster, broker: number, msg: Message, to: string | ((body: Json) => void)): void {
  // The origin names a connection of this broker: meaningless (or someone else's) at the other one.
  const { origin: _o, ...rest } = msg;
  js.clusterStats.publishesForwarded++;
  call(cl.channel!, broker, RPC.jsPublish, null, { tail: encodeMessage({ ...rest, payload: Buffer.from(msg.payload) }) }).then(
    ({ head: ack }) => {
      if (ack !== null) answer(js, to, ack);
    },
    (err: unknown) => {
      if (!retriable(err)) return answer(js, to, { error: JsErr.streamStoreFailed(errText(err)), stream: '', seq: 0 });
      publishWith(js, msg, to, false);
    },
  );
}

export function answer(js: JetStreamState, to: string | ((body: Json) => void), body: Json): void {
  if (typeof to === 'string') js.reply(to, body);
  else to(body);
}

export function capturing(js: JetStreamState, topic: string): StreamDef[] {
  return js.engine.listStreams().filter((d) => d.bindings.some((b) => matches(b, topic)));
}

export function windowMs(js: JetStreamState, stream: string): number {
  return (js.duplicateWindowNs.get(stream) ?? DEFAULT_DUPLICATE_WINDOW_NS) / 1e6;
}

export function seenSeq(js: JetStreamState, stream: string, id: string, now: number): number | undefined {
  const ids = js.dedup.get(stream);
  if (!ids) return undefined;
  prune(js, stream, ids, now);
  return ids.get(id)?.seq;
}

export function remember(js: JetStreamState, stream: string, id: string, seq: number, now: number): void {
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
  const e = js.engine.getStream(name);
  if (!e) return typed(T_, { error: JsErr.streamNotFound() });
  const raw = parseJson(body);
  if (raw === BAD_JSON || raw === null || typeof raw !== 'object') return typed(T_, { error: JsErr.invalidJson() });
  const r = raw as Json;
  if (r.next_by_subj !== undefined) {
    return typed(T_, { error: JsErr.badRequest('next_by_subj is not supported by FlowMQ streams') });
  }
  let seq: number;
  if (r.last_by_subj !== undefined) {
    const subj = r.last_by_subj;
    if (typeof subj !== 'string' || subj === '') return typed(T_, { error: JsErr.badRequest() });
    const last = await lastMatching(js.engine, name, (m) => subjectMatches(subj, m.topic));
    if (last < 0) return typed(T_, { error: JsErr.noMessageFound() });
    seq = last + 1;
  } else {
    if (!isCount(r.seq) || r.seq === 0) return typed(T_, { error: JsErr.badRequest() });
    seq = r.seq;
  }
  const { logStartOffset, highWatermark } = js.engine.offsets(name, 0);
  if (seq - 1 < logStartOffset || seq - 1 >= highWatermark) return typed(T_, { error: JsErr.noMessageFound() });
  const batches = await js.engine.read(name, 0, seq - 1, 1);
  for (const b of batches) {
    for (const rec of decodeBatch(b)) {
      if (rec.offset !== seq - 1) continue;
      const m = recordToMessage(rec, name.split('.').join('/'));
      const hdrs = encodeHeaderBlock(m);
      return typed(T_, {
        message: {
          subject: dotsSubject(m.topic),
          seq,
          ...(hdrs !== null ? { hdrs: hdrs.toString('base64') } : {}),
          data: m.payload.toString('base64'),
          time: isoTime(m.timestamp),
        },
      });
    }
  }
  return typed(T_, { error: JsErr.noMessageFound() });
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
