/**
 * The JetStream consumer API (as nats-server's jetstream_api.go consumer handlers over consumer.go): CONSUMER.CREATE
 * (and the 2.9 DURABLE.CREATE), NAMES, LIST (over every broker in cluster mode), INFO, DELETE; MSG.NEXT pull requests
 * and `$JS.ACK.>` acknowledgements (forwarded to the consumer's owner in cluster mode); and durable consumers as
 * consumer groups for the admin API. The consumers themselves are consumer.ts, a pull request's body, limits and statuses consumer-pull.ts.
 */
import type { Cluster } from '../../../cluster/index.js';
import { call, cast, RPC } from '../../../cluster/index.js';
import type { ConsumerGroupAdmin, GroupDetail, GroupSummary } from '../../../control/index.js';
import { FlowError, makeMessage, type NamespaceNames } from '../../../core/index.js';
import { consumerKey, targetOf } from './cluster.js';
import { checkConsumerUpdate, normalizeConsumerConfig, type ConsumerConfig } from './config.js';
import { Consumer, type LastPerSubject } from './consumer.js';
import { parsePullRequest, requestRefusal } from './consumer-pull.js';
import { lastPerSubjectParts, startFloors } from './consumer-start.js';
import { JsErr } from './errors.js';
import { storedOthers, workqueueRefusal } from './retention.js';
import { jsOptions, needsView } from './stream-view.js';
import { isoTime, lastMatching, scanLog, streamSubjects } from './stream-info.js';
import { isValidApiName, levelsToTokens, subjectMatches } from './subjects.js';
import { inSubject, namesOf, outSubject, ownStream } from './names.js';
import {
  BAD_JSON,
  errText,
  isApiError,
  JetStreamState,
  type Json,
  LIST_LIMIT,
  NAMES_LIMIT,
  pageOffset,
  parseJson,
  randomName,
  typed,
} from './service-state.js';

export async function consumerCreate(js: JetStreamState, t: string[], body: string): Promise<Json> {
  const T_ = 'consumer_create_response';
  const legacyDurable = t[1] === 'DURABLE';
  const stream = legacyDurable ? t[3] : t[2];
  const subjectName = legacyDurable ? t[4] : t[3];
  const subjectFilter = !legacyDurable && t.length > 4 ? t.slice(4).join('.') : undefined;
  const raw = parseJson(body);
  if (raw === BAD_JSON || raw === null || typeof raw !== 'object' || Array.isArray(raw)) return typed(T_, { error: JsErr.invalidJson() });
  const req = raw as Json;
  if (req.stream_name !== undefined && req.stream_name !== ownStream(stream)) return typed(T_, { error: JsErr.streamMismatch() });
  const e = js.engine.getAnyStream(stream);
  if (!e) return typed(T_, { error: JsErr.streamNotFound() });
  const rc = (req.config ?? {}) as Json;
  if (typeof rc !== 'object' || Array.isArray(rc)) return typed(T_, { error: JsErr.invalidJson() });
  if (subjectName === undefined && typeof rc.durable_name === 'string' && rc.durable_name !== '') {
    return typed(T_, { error: JsErr.ephemeralWithDurable() });
  }
  let named = rc;
  if (subjectName !== undefined) {
    if (!isValidApiName(subjectName)) return typed(T_, { error: JsErr.consumerNameInvalid() });
    // DURABLE.CREATE names a durable. CONSUMER.CREATE names the consumer: a durable_name must be that name, the
    // body's `name` gives way to it (nats-server 2.9.10; without a durable_name the consumer is ephemeral).
    const durable = rc.durable_name === undefined || rc.durable_name === '' ? undefined : rc.durable_name;
    if (legacyDurable ? durable !== subjectName : durable !== undefined && durable !== subjectName) {
      return typed(T_, { error: JsErr.durableNameMismatch() });
    }
    if (subjectFilter !== undefined && rc.filter_subject !== subjectFilter) return typed(T_, { error: JsErr.filterMismatch() });
    if (!legacyDurable) named = { ...rc, name: subjectName };
  }
  const ephemeral = typeof rc.durable_name !== 'string' || rc.durable_name === '';
  // Its subjects are the client's, in the stream's namespace (names.ts).
  named = inConsumerConfig(namesOf(stream), named);
  // A mirror's or sourced stream's messages have their origins' subjects.
  const copies = jsOptions(e.def).mirror !== null || jsOptions(e.def).sources.length > 0;
  const cfg = normalizeConsumerConfig(named, ephemeral, copies ? ['>'] : streamSubjects(e.def));
  if (isApiError(cfg)) return typed(T_, { error: cfg });
  // A consumer's replicas are its stream's brokers' business in cluster mode; a single broker has one.
  if (cfg.num_replicas > 1 && js.cluster === null) return typed(T_, { error: JsErr.replicasNotSupported() });
  // A multi-partition stream is numbered as partition-seq.ts says; what a stream view keeps (deletes, limits, rollups,
  // workqueue and interest retention, mirrors) is partition 0's only, so those streams keep one partition.
  const parts = e.def.partitions;
  if (parts !== 1 && needsView(jsOptions(e.def))) {
    return typed(T_, {
      error: JsErr.badRequest(
        `stream has ${parts} partitions and JetStream limits, retention, deletes or a mirror: JetStream consumers need a single-partition stream there`,
      ),
    });
  }
  const name = cfg.name ?? randomName();
  if (cfg.name === undefined) cfg.name = name;
  const existing = js.getConsumer(stream, name);
  if (existing) {
    const refusal = checkConsumerUpdate(existing.config, cfg);
    if (refusal) return typed(T_, { error: refusal });
    existing.setConfig(cfg);
    existing.pump();
    js.changed(existing);
    return typed(T_, consumerInfoJson(existing));
  }
  const retention = jsOptions(e.def).retention;
  if (retention === 'workqueue') {
    // Cluster mode: consumers stored but not served here count too (nats-server checks every consumer).
    const stored = js.cluster !== null ? await storedOthers(js.engine, stream, name, (n) => js.getConsumer(stream, n) !== undefined) : [];
    const refusal = workqueueRefusal(cfg, [...js.sortedConsumers(stream), ...stored]);
    if (refusal !== null) return typed(T_, { error: refusal });
  }
  if (js.consumerCount() >= js.maxConsumers) return typed(T_, { error: JsErr.maximumConsumers() });
  let lps: LastPerSubject | null = null;
  let floor = 0;
  let floors: number[] | undefined;
  if (parts !== 1) {
    await js.freshen(stream);
    if (cfg.deliver_policy === 'last_per_subject') ({ lps, floors } = await lastPerSubjectParts(js.engine, stream, parts, cfg.filter_subject));
    else floors = continuation(js, stream, cfg) ?? (await startFloors(js.engine, stream, parts, cfg));
  } else if (cfg.deliver_policy === 'last_per_subject') {
    lps = await lastPerSubject(js, stream, cfg.filter_subject);
    floor = lps.sorted.length > 0 ? lps.sorted[0] - 1 : lps.until;
  } else floor = await startFloor(js, stream, cfg);
  // num_pending in the answer counts live messages: the view caught up first.
  await js.freshView(stream);
  const c = new Consumer(js, stream, name, cfg, Date.now(), !ephemeral, {
    deliveredSeq: floor,
    deliveredConsumerSeq: 0,
    ackFloor: floor,
    acked: [],
    ...(floors !== undefined ? { floors } : {}),
  });
  // The stream may have grown (CreatePartitions) while the start was looked up: made again over the new count.
  if (c.partitions !== parts) return typed(T_, { error: JsErr.consumerCreate('the stream changed its partition count meanwhile: try again') });
  c.lps = lps;
  // Interest streams: later messages wait for this consumer (retention.ts).
  if (retention === 'interest') c.since = js.engine.offsets(stream, 0).highWatermark;
  // A name may have been taken while the start position was looked up.
  const raced = js.getConsumer(stream, name);
  if (raced) return typed(T_, consumerInfoJson(raced));
  if (!js.engine.getAnyStream(stream)) return typed(T_, { error: JsErr.streamNotFound() });
  if (js.cluster !== null) {
    // Claimed by serveConsumer before this create; a create that lost it meanwhile makes nothing.
    const epoch = js.cluster.owns('consumer', consumerKey(stream, name));
    if (epoch === null) throw new FlowError('NOT_OWNER', `the consumer ${stream}/${name} is not served by js broker`);
    c.epoch = epoch;
  }
  js.add(c);
  js.consumerAction(c, 'create');
  if (c.isPush) c.pump();
  if (js.stores(c)) {
    try {
      await js.engine.store.putConsumer(c.record(), c.epoch);
    } catch (err) {
      js.warnStore(err);
      await js.deleteConsumer(c, false).catch(() => undefined);
      return typed(T_, { error: JsErr.consumerCreate(`consumer state could not be stored: ${errText(err)}`) });
    }
  }
  return typed(T_, consumerInfoJson(c));
}

/**
 * A new consumer of a multi-partition stream from opt_start_seq S, where another consumer without acks of the same
 * stream and filter (live, or deleted within CONTINUE_MS) last delivered S - 1: it starts where that one was
 * (Consumer.continuationFrom), so that an ordered consumer's reset neither skips nor repeats a record.
 */
function continuation(js: JetStreamState, stream: string, cfg: ConsumerConfig): number[] | null {
  if (cfg.deliver_policy !== 'by_start_sequence' || cfg.ack_policy !== 'none') return null;
  const seq = cfg.opt_start_seq ?? 1;
  const now = Date.now();
  const candidates = [
    ...js.ended
      .filter((e) => now - e.at <= CONTINUE_MS)
      .map((e) => e.c)
      .reverse(),
    ...js.sortedConsumers(stream),
  ];
  for (const c of candidates) {
    if (c.stream !== stream || c.config.filter_subject !== cfg.filter_subject || c.lastDelivered !== seq - 1) continue;
    const floors = c.continuationFrom(seq);
    if (floors !== null && floors.length === js.engine.getAnyStream(stream)?.def.partitions) return floors;
  }
  return null;
}

/** How long a deleted consumer may be continued (an ordered consumer resets within seconds). */
const CONTINUE_MS = 10 * 60_000;

/** The last sequence of each subject the filter matches, as the stream is now (deliver_policy last_per_subject). */
export async function lastPerSubject(js: JetStreamState, stream: string, filter: string | undefined): Promise<LastPerSubject> {
  await js.freshen(stream);
  const view = await js.freshView(stream);
  if (view !== null) {
    const seqs = view.lastPerSubject(filter);
    return { until: view.scanned, seqs, sorted: [...seqs].sort((a, b) => a - b) };
  }
  // No view: one pass over the log.
  const { highWatermark } = js.engine.offsets(stream, 0);
  const last = new Map<string, number>();
  await scanLog(js.engine, stream, highWatermark, (seq, m) => {
    if (filter === undefined || subjectMatches(filter, m.topic)) last.set(m.topic, seq);
  });
  const seqs = new Set(last.values());
  return { until: highWatermark, seqs, sorted: [...seqs].sort((a, b) => a - b) };
}

/** The ack floor a new consumer starts from (its deliver policy). */
export async function startFloor(js: JetStreamState, stream: string, cfg: ConsumerConfig): Promise<number> {
  await js.freshen(stream);
  const { logStartOffset, highWatermark } = js.engine.offsets(stream, 0);
  switch (cfg.deliver_policy) {
    case 'new':
      return highWatermark;
    case 'by_start_sequence':
      return Math.max(0, (cfg.opt_start_seq ?? 1) - 1);
    case 'by_start_time':
      return js.engine.offsetForTimestamp(stream, 0, Date.parse(cfg.opt_start_time ?? ''));
    case 'last': {
      if (highWatermark <= logStartOffset) return highWatermark;
      if (cfg.filter_subject === undefined) return highWatermark - 1;
      const filter = cfg.filter_subject;
      const last = await lastMatching(js.engine, stream, (m) => subjectMatches(filter, m.topic));
      return last < 0 ? highWatermark : last;
    }
    default:
      return 0;
  }
}

/** A consumer configuration's subjects (filter, deliver subject) inside the stream's namespace. */
function inConsumerConfig(names: NamespaceNames, rc: Json): Json {
  if (names.isDefault) return rc;
  const out = { ...rc };
  for (const k of ['filter_subject', 'deliver_subject'] as const) if (typeof rc[k] === 'string' && rc[k] !== '') out[k] = inSubject(names, rc[k]);
  if (Array.isArray(rc.filter_subjects)) out.filter_subjects = rc.filter_subjects.map((s: unknown) => (typeof s === 'string' ? inSubject(names, s) : s));
  return out;
}

/** A consumer configuration as the stream's namespace's clients see it. */
function outConsumerConfig(names: NamespaceNames, c: ConsumerConfig): ConsumerConfig {
  if (names.isDefault) return c;
  const out = { ...c };
  if (c.filter_subject !== undefined) out.filter_subject = outSubject(names, c.filter_subject);
  if (c.deliver_subject !== undefined) out.deliver_subject = outSubject(names, c.deliver_subject);
  return out;
}

export function consumerInfoJson(c: Consumer): Json {
  const delivered: Json = { consumer_seq: c.cseq, stream_seq: c.deliveredSeq };
  if (c.lastDelivered > 0) delivered.last_active = isoTime(c.lastActive);
  const ackFloor: Json = { consumer_seq: c.floorCseq, stream_seq: c.ackFloor };
  if (c.lastAcked > 0) ackFloor.last_active = isoTime(c.lastAcked);
  let numPending = 0;
  try {
    numPending = c.numPending();
  } catch {
    // stream gone
  }
  return {
    stream_name: ownStream(c.stream),
    name: c.name,
    created: isoTime(c.created),
    config: outConsumerConfig(namesOf(c.stream), c.config),
    delivered,
    ack_floor: ackFloor,
    num_ack_pending: c.pending.size,
    num_redelivered: c.rdc.size,
    num_waiting: c.isPush ? 0 : c.waiting.length,
    num_pending: numPending,
    ...(c.isPush && c.pushBound ? { push_bound: true } : {}),
  };
}

export function consumerInfoReq(js: JetStreamState, stream: string, name: string): Json {
  const T_ = 'consumer_info_response';
  if (!js.engine.getAnyStream(stream)) return typed(T_, { error: JsErr.streamNotFound() });
  const c = js.getConsumer(stream, name);
  if (!c) return typed(T_, { error: JsErr.consumerNotFound() });
  return typed(T_, consumerInfoJson(c));
}

export async function consumerNames(js: JetStreamState, stream: string, body: string): Promise<Json> {
  const T_ = 'consumer_names_response';
  if (!js.engine.getAnyStream(stream)) return typed(T_, { error: JsErr.streamNotFound() });
  const all = js.cluster !== null ? (await clusterConsumers(js, js.cluster, stream)).map((i) => String(i.name)) : js.sortedConsumers(stream).map((c) => c.name);
  const offset = pageOffset(body);
  return typed(T_, { total: all.length, offset, limit: NAMES_LIMIT, consumers: all.slice(offset, offset + NAMES_LIMIT) });
}

export async function consumerList(js: JetStreamState, stream: string, body: string): Promise<Json> {
  const T_ = 'consumer_list_response';
  if (!js.engine.getAnyStream(stream)) return typed(T_, { error: JsErr.streamNotFound() });
  const all = js.cluster !== null ? await clusterConsumers(js, js.cluster, stream) : js.sortedConsumers(stream).map((c) => consumerInfoJson(c));
  const offset = pageOffset(body);
  return typed(T_, {
    total: all.length,
    offset,
    limit: LIST_LIMIT,
    consumers: all.slice(offset, offset + LIST_LIMIT),
  });
}

/** CONSUMER.NAMES / LIST over the cluster: every broker's consumers of the stream, and stored ones served nowhere. */
export async function clusterConsumers(js: JetStreamState, cl: Cluster, stream: string): Promise<Json[]> {
  const byName = new Map<string, Json>();
  const asked = cl
    .brokers()
    .filter((b) => b.alive && b.id !== cl.id)
    .map(async (b) => {
      try {
        const { head } = await call(cl.channel!, b.id, RPC.jsConsumers, { stream });
        for (const i of head.infos) byName.set(String(i.name), i);
      } catch {
        // A broker that cannot answer now: its consumers are listed from their stored state below.
      }
    });
  await Promise.all(asked);
  for (const c of js.sortedConsumers(stream)) byName.set(c.name, consumerInfoJson(c));
  for (const r of await js.engine.store.listConsumers(stream)) {
    if (byName.has(r.name)) continue;
    try {
      const c = new Consumer(js, stream, r.name, JSON.parse(r.config) as ConsumerConfig, r.createdAt, true, r);
      c.closed = true;
      byName.set(r.name, consumerInfoJson(c));
    } catch {
      // unreadable config: skipped, as at load
    }
  }
  return [...byName.values()].sort((a, b) => (String(a.name) < String(b.name) ? -1 : String(a.name) > String(b.name) ? 1 : 0));
}

export async function consumerDelete(js: JetStreamState, stream: string, name: string): Promise<Json> {
  const T_ = 'consumer_delete_response';
  if (!js.engine.getAnyStream(stream)) return typed(T_, { error: JsErr.streamNotFound() });
  const c = js.getConsumer(stream, name);
  if (!c) return typed(T_, { error: JsErr.consumerNotFound() });
  await js.deleteConsumer(c, true);
  return typed(T_, { success: true });
}

/** CONSUMER.MSG.NEXT: a pull request; answered with messages and statuses on the reply inbox, never with JSON. */
export function pullRequest(js: JetStreamState, stream: string, name: string, body: string, reply: string, origin: number | undefined): void {
  const status = (s: string) => js.send(makeMessage(reply, Buffer.alloc(0), { status: s }), origin);
  const c = js.getConsumer(stream, name);
  // No such consumer: what a NATS client sees when nobody serves a request (nats.js stops a fetch on it).
  if (!c) return status('503');
  if (c.isPush) return status('409 Consumer is push based');
  const req = parsePullRequest(body, reply);
  if (typeof req === 'string') return status(req);
  const refusal = requestRefusal(c.config, c.waiting.length, req);
  if (refusal !== null) return status(refusal);
  if (origin !== undefined && origin !== js.cluster?.id) req.origin = origin;
  c.addRequest(req);
}

export function onAck(js: JetStreamState, levels: string[], body: string, reply: string | undefined, origin?: number): void {
  // $JS/ACK/<stream>/<consumer>/<delivered>/<sseq>/<cseq>/<ts>/<pending>
  if (levels.length < 9) return;
  const tokens = levelsToTokens(levels);
  const c = js.getConsumer(tokens[2], tokens[3]);
  const seq = Number(tokens[5]);
  if (c === undefined && js.cluster !== null && origin === undefined && Number.isSafeInteger(seq) && seq >= 1) {
    // Served by another broker: the ack goes there (one-way; a lost ack means a redelivery).
    forwardAck(js, js.cluster, consumerKey(tokens[2], tokens[3]), levels, body, reply);
    return;
  }
  if (!c || !Number.isSafeInteger(seq) || seq < 1) return;
  const r = c.ack(seq, body.trim());
  if (!r.ok) {
    js.logger.debug({ stream: c.stream, consumer: c.name, body: body.slice(0, 64) }, 'unknown JetStream ack ignored');
    return;
  }
  if (r.next !== undefined) {
    if (reply === undefined) return;
    const req = parsePullRequest(r.next, reply);
    if (typeof req === 'string') js.send(makeMessage(reply, Buffer.alloc(0), { status: req }), origin);
    else {
      if (origin !== undefined && origin !== js.cluster?.id) req.origin = origin;
      c.addRequest(req);
    }
    return;
  }
  // An ack with a reply subject (nats.this ackAck) is confirmed with an empty message, a repeated one too.
  if (reply === undefined) return;
  const confirm = (): void => js.send(makeMessage(reply, Buffer.alloc(0)), origin);
  // Cluster mode, workqueue and interest streams: confirmed once stored, so that what a client saw confirmed is
  // removed by whichever broker owns the stream after a crash (service-cluster.ts checkRetention).
  const def = js.cluster !== null && c.durable ? js.engine.getAnyStream(c.stream)?.def : undefined;
  if (def !== undefined && jsOptions(def).retention !== 'limits') void js.written(c).then(confirm);
  else confirm();
}

export function forwardAck(js: JetStreamState, cl: Cluster, key: string, levels: string[], body: string, reply: string | undefined): void {
  const ack = { l: levels, b: body, r: reply ?? null };
  const to = cl.owner('consumer', key);
  if (to !== null) {
    if (to.broker === cl.id) return;
    js.clusterStats.acksForwarded++;
    if (cl.channel) cast(cl.channel, to.broker, RPC.jsAck, ack);
    return;
  }
  void targetOf(cl, key, true)
    .then((b) => {
      if (b === cl.id) return;
      js.clusterStats.acksForwarded++;
      if (cl.channel) cast(cl.channel, b, RPC.jsAck, ack);
    })
    .catch(() => undefined);
}

/**
 * Durable consumers as consumer groups for the admin API: a group is a durable name, over every stream that has
 * a durable consumer of that name (as a Kafka group spans topics). Its committed offset on a stream is the ack
 * floor; its lag is what the consumer has not delivered yet (its filter applied) plus what waits for an ack. A
 * pull consumer with waiting requests, or a bound push consumer, is a member. Offsets are not reset here: a
 * JetStream consumer's position is its config (deliver policy) and its acks.
 */
export function groupAdmin(js: JetStreamState): ConsumerGroupAdmin {
  const byName = (): Map<string, Consumer[]> => {
    const out = new Map<string, Consumer[]>();
    for (const m of js.consumers.values()) {
      for (const c of m.values()) {
        if (!c.durable || c.closed) continue;
        const l = out.get(c.name);
        if (l) l.push(c);
        else out.set(c.name, [c]);
      }
    }
    return out;
  };
  const members = (c: Consumer) => (c.isPush ? (c.pushBound ? 1 : 0) : c.waiting.length > 0 ? 1 : 0);
  const lagOf = (c: Consumer): number | null => {
    try {
      return c.numPending() + c.pending.size;
    } catch {
      return null;
    }
  };
  const summary = (name: string, cs: Consumer[]): GroupSummary => {
    let n = 0;
    let lag: number | null = 0;
    for (const c of cs) {
      n += members(c);
      const l = lagOf(c);
      lag = lag === null || l === null ? null : lag + l;
    }
    return { name, protocol: 'jetstream', state: n > 0 ? 'active' : 'idle', members: n, lag };
  };
  const detail = (name: string, cs: Consumer[]): GroupDetail => ({
    ...summary(name, cs),
    memberDetails: cs
      .filter((c) => members(c) > 0)
      .map((c) => ({
        id: `${c.stream}/${c.name}`,
        clientId: c.isPush ? (c.config.deliver_subject ?? '') : 'pull',
        host: '',
        assignments: c.parts.map((pt) => ({ stream: c.stream, partition: pt.index })),
      })),
    offsets: cs.flatMap((c) => {
      if (c.partitions > 1) {
        // Per partition: offsets done, and what is not done (delivered or not) as its lag.
        const floors = c.floors();
        return c.parts.map((pt) => {
          let end = 0;
          try {
            end = js.engine.offsets(c.stream, pt.index).highWatermark;
          } catch {
            // stream gone
          }
          return { stream: c.stream, partition: pt.index, committed: floors[pt.index], end, lag: Math.max(0, end - floors[pt.index]) };
        });
      }
      let end = 0;
      try {
        end = js.engine.offsets(c.stream, 0).highWatermark;
      } catch {
        // stream gone
      }
      return [{ stream: c.stream, partition: 0, committed: c.ackFloor, end, lag: lagOf(c) }];
    }),
  });
  const unsupported = () =>
    new FlowError('INVALID_ARGUMENT', 'resetting offsets is not supported for JetStream consumers: delete the consumer and create it with a deliver policy');
  return {
    list: async () => [...byName()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([n, cs]) => summary(n, cs)),
    describe: async (name) => {
      const cs = byName().get(name);
      return cs === undefined ? null : detail(name, cs);
    },
    resetOffsets: async () => {
      throw unsupported();
    },
    delete: async (name) => {
      const cs = byName().get(name);
      if (cs === undefined) throw new FlowError('NOT_FOUND', `JetStream consumer "${name}" not found`);
      if (cs.some((c) => members(c) > 0)) throw new FlowError('INVALID_ARGUMENT', 'group has active members');
      for (const c of cs) await js.deleteConsumer(c, true);
    },
  };
}
