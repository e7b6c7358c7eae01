/**
 * The JetStream account (nats-server 2.9's jsAccount, jetstream.go): `$JS.API.INFO`'s usage and limits, and the
 * limits' checks on stream and consumer creation, with nats-server's errors.
 *
 * A NATS account is the FlowMQ namespace of the user asking (ANONYMOUS's without a login); its JetStream limits are
 * that namespace's quotas (control/directory.ts Quotas): maxStorageBytes is max_storage, maxMemoryBytes max_memory,
 * maxStreams, maxConsumers (per stream, as nats-server applies its account max_consumers), maxStreamBytes
 * (memory_max_stream_bytes and storage_max_stream_bytes), maxAckPending and maxBytesRequired (1: true). A quota not
 * set is -1 (none). As nats-server's, a max_streams, max_consumers or max_ack_pending of 0 limits nothing, and the
 * storage limits bound the streams' reservations (the sum of their max_bytes, a stream without one counting 1 byte)
 * when a stream is created or updated.
 *
 * The account's streams: the namespace's (names.ts: a tenant's JetStream streams are `<ns>~<name>`, made through its
 * own API; `default`'s are every stream without a namespace, Kafka topics and admin API streams included). Each
 * account lists, reads and counts its own streams only (STREAM.NAMES, LIST, INFO).
 */
import { ANONYMOUS, type Access } from '../../../control/index.js';
import { splitStreamName, type Message, type StreamDef } from '../../../core/index.js';
import { JsErr, type ApiError } from './errors.js';
import type { AccountLimits } from './jwt-limits.js';
import { subjectLength } from './names.js';
import { type AccountUsage, BAD_JSON, type JetStreamState, type Json, parseJson, typed } from './service-state.js';
import type { StreamSpecFromJs } from './stream-info.js';
import { API_STREAM_KEY, jsOptions, storedSize, type StreamView } from './stream-view.js';
import { filterToSubject, subjectsCollide } from './subjects.js';

export type { AccountLimits };

/** nats-server's JsDefaultMaxAckPending: a consumer's max_ack_pending when it asks for none. */
const DEFAULT_MAX_ACK_PENDING = 1000;

/** Marks a stream made through the JetStream API (stream-view.ts), with the namespace of who made it. */
export { API_STREAM_KEY };

/** The namespace a request comes from. */
export function namespaceOf(access: Access | null): string {
  return access?.principal.namespace ?? ANONYMOUS.namespace;
}

/**
 * Whether the account has JetStream, as nats-server decides it for an account of a server with JetStream on: an
 * account JWT enables it with JetStream limits (jwt-limits.ts), a namespace unless its `jetstream` quota is 0 (the
 * shape of a nats-server config account without `jetstream`: test/interop/natsjs-suite/shim-conf.mjs says so).
 */
export function jetstreamEnabled(js: JetStreamState, namespace: string): boolean {
  const jwt = js.authorizer?.jwtLimits?.(namespace);
  if (jwt !== undefined) return jwt !== null;
  return js.authorizer?.control.directory.namespace(namespace)?.quotas.jetstream !== 0;
}

/** The API a request is, as nats-server routes it (`STREAM.INFO`, `CONSUMER.CREATE`...), or null for others. */
function apiOf(t: readonly string[]): string | null {
  const [a, b, c] = t;
  const n = t.length;
  if (a === 'INFO') return n === 1 ? 'INFO' : null;
  if (a === 'STREAM') {
    if ((b === 'NAMES' || b === 'LIST') && n === 2) return `STREAM.${b}`;
    if ((b === 'CREATE' || b === 'UPDATE' || b === 'DELETE' || b === 'INFO' || b === 'PURGE') && n === 3) return `STREAM.${b}`;
    if (b === 'MSG' && (c === 'GET' || c === 'DELETE') && n === 4) return `STREAM.MSG.${c}`;
  }
  if (a === 'CONSUMER') {
    if ((b === 'CREATE' && n >= 3 && n <= 5) || (b === 'DURABLE' && c === 'CREATE' && n === 5)) return 'CONSUMER.CREATE';
    if ((b === 'NAMES' || b === 'LIST') && n === 3) return `CONSUMER.${b}`;
    if ((b === 'INFO' || b === 'DELETE') && n === 4) return `CONSUMER.${b}`;
  }
  return null;
}

/**
 * nats-server 2.9.10's answer to an account without JetStream (checked side by side: test/e2e/nats-account-off):
 * each API it serves answers `JetStream not enabled for account` (503, 10039) in that API's response (the lists with
 * empty paging, a purge with `purged: 0`); a pull request, a direct get or another subject gets none (null here).
 * `t`: the request's tokens after `$JS.API`.
 */
export function notEnabledAnswer(t: readonly string[]): Json | null {
  const api = apiOf(t);
  if (api === null) return null;
  const type = api === 'INFO' ? 'account_info_response' : `${api.toLowerCase().replace(/\./g, '_')}_response`;
  const body: Json = { error: JsErr.notEnabledForAccount() };
  if (api === 'STREAM.NAMES' || api === 'STREAM.LIST' || api === 'STREAM.INFO' || api === 'CONSUMER.NAMES' || api === 'CONSUMER.LIST') {
    Object.assign(body, { total: 0, offset: 0, limit: 0 });
    if (api === 'STREAM.NAMES') body.streams = null;
    if (api === 'STREAM.LIST') body.streams = [];
    if (api.startsWith('CONSUMER.')) body.consumers = [];
  }
  if (api === 'STREAM.PURGE') body.purged = 0;
  return typed(type, body);
}

export function accountLimits(js: JetStreamState, namespace: string): AccountLimits {
  // Operator mode: the account JWT's limits, its R1 tier's when tiered (jwt-limits.ts).
  const jwt = js.authorizer?.jwtLimits?.(namespace) ?? null;
  const fromJwt = jwt === null ? undefined : (jwt.limits ?? jwt.tiers.R1);
  if (fromJwt !== undefined) return fromJwt;
  const q = js.authorizer?.control.directory.namespace(namespace)?.quotas ?? {};
  const n = (v: number | undefined): number => (v === undefined || v === null ? -1 : v);
  return {
    maxMemory: n(q.maxMemoryBytes),
    maxStorage: n(q.maxStorageBytes),
    maxStreams: n(q.maxStreams),
    maxConsumers: n(q.maxConsumers),
    maxAckPending: n(q.maxAckPending),
    maxStreamBytes: n(q.maxStreamBytes),
    maxBytesRequired: (q.maxBytesRequired ?? 0) > 0,
  };
}

/** The account's streams (see the file header): its namespace's, by their names (`t1~orders` is t1's). */
function accountStreams(js: JetStreamState, namespace: string): StreamDef[] {
  return js.engine.listAllStreams().filter((d) => splitStreamName(d.name).namespace === namespace);
}

/**
 * A stream's `state.bytes` as nats-server counts them (storedSize): the view's sum, or the subject tally's of
 * partition 0 once `counted` (caught up with the log). Estimates: a tally still reading a long log reports the
 * partition's stored size (its RecordBatch bytes, hot tier and segments), as do a multi-partition stream's other
 * partitions (JetStream cannot address them); a partition another broker owns adds 0 (cluster mode).
 */
export function bytesOf(js: JetStreamState, def: StreamDef, view: StreamView | null, counted: boolean): number {
  const t = js.tallies.get(def.name);
  let bytes = view !== null ? view.bytes : counted && t !== undefined ? t.bytes : (js.engine.partitionSize(def.name, 0) ?? 0);
  for (let p = 1; p < def.partitions; p++) bytes += js.engine.partitionSize(def.name, p) ?? 0;
  return bytes;
}

/**
 * A stream's bytes in the account's sums (INFO, /jsz, checkAccounts): its `state.bytes` (bytesOf, the tally read on
 * for at most its backlog limit, service-state.ts) for streams made through the JetStream API and streams with a
 * view; the stored-size estimate for the others (a Kafka topic, an AMQP stream queue: summing them exactly would read
 * everything their producers append at every look; STREAM.INFO of one of them is still exact).
 */
export async function streamBytes(js: JetStreamState, def: StreamDef): Promise<number> {
  const view = await js.freshView(def.name);
  if (view === null && def.configs?.[API_STREAM_KEY] === undefined) return bytesOf(js, def, null, false);
  const counted = await js.subjectCounts(def, view, false);
  return bytesOf(js, def, view, counted !== null);
}

/** `$JS.API.INFO`: nats-server's JSApiAccountInfoResponse. */
export async function accountInfo(js: JetStreamState, namespace: string): Promise<Json> {
  let memory = 0;
  let storage = 0;
  const defs = accountStreams(js, namespace);
  let consumers = 0;
  for (const d of defs) {
    consumers += js.consumerCount(d.name);
    const bytes = await streamBytes(js, d);
    if (jsOptions(d).memory) memory += bytes;
    else storage += bytes;
  }
  const jwt = js.authorizer?.jwtLimits?.(namespace) ?? null;
  // A tiered account JWT: nats-server reports each tier (R1 holds every stream here) and zero account-wide limits.
  const tiered = jwt !== null && jwt.limits === null;
  const usage = { memory, storage, streams: defs.length, consumers };
  const tiers = tiered ? Object.fromEntries(Object.entries(jwt.tiers).map(([t, l]) => [t, { ...(t === 'R1' ? usage : ZERO_USE), limits: limitsJson(l) }])) : {};
  if (tiered && tiers.R1 === undefined && defs.length > 0) tiers.R1 = { ...usage, limits: limitsJson(NO_LIMITS) };
  return typed('account_info_response', {
    ...usage,
    limits: limitsJson(tiered ? NO_LIMITS : accountLimits(js, namespace)),
    ...(tiered ? { tiers } : {}),
    ...(js.domain !== null ? { domain: js.domain } : {}),
    api: { total: js.api.total, errors: js.api.errors },
  });
}

const ZERO_USE = { memory: 0, storage: 0, streams: 0, consumers: 0 };
/** nats-server's JetStreamAccountLimits zero value (the account-wide limits of a tiered account). */
const NO_LIMITS: AccountLimits = {
  maxMemory: 0,
  maxStorage: 0,
  maxStreams: 0,
  maxConsumers: 0,
  maxAckPending: 0,
  maxStreamBytes: 0,
  maxBytesRequired: false,
};

function limitsJson(l: AccountLimits): Json {
  return {
    max_memory: l.maxMemory,
    max_storage: l.maxStorage,
    max_streams: l.maxStreams,
    max_consumers: l.maxConsumers,
    max_ack_pending: l.maxAckPending,
    memory_max_stream_bytes: l.maxMemoryStreamBytes ?? l.maxStreamBytes,
    storage_max_stream_bytes: l.maxStreamBytes,
    max_bytes_required: l.maxBytesRequired,
  };
}

/**
 * A stream configuration the account does not take (nats-server's checkStreamCfg): max_bytes required, or over the
 * account's per-stream maximum.
 */
export function streamConfigRefusal(l: AccountLimits, spec: StreamSpecFromJs): ApiError | null {
  const maxBytes = spec.options.maxBytes;
  if (l.maxBytesRequired && maxBytes <= 0) return JsErr.streamMaxBytesRequired();
  const streamMax = spec.options.memory ? (l.maxMemoryStreamBytes ?? l.maxStreamBytes) : l.maxStreamBytes;
  if (streamMax > 0 && maxBytes > streamMax) return JsErr.streamMaxStreamBytesExceeded();
  return null;
}

/**
 * The account's stream count and reservations (jsNonClusteredStreamLimitsCheck, checkBytesLimits): `existing` is
 * the stream being updated (its count and reservation are its own), null on create.
 */
export function streamLimitRefusal(
  js: JetStreamState,
  l: AccountLimits,
  namespace: string,
  name: string,
  spec: StreamSpecFromJs,
  existing: StreamDef | null,
): ApiError | null {
  const defs = accountStreams(js, namespace);
  if (existing === null && l.maxStreams > 0 && defs.length >= l.maxStreams) return JsErr.maximumStreams();
  const memory = spec.options.memory;
  const limit = memory ? l.maxMemory : l.maxStorage;
  if (limit < 0) return null;
  let reserved = 0;
  for (const d of defs) {
    const o = jsOptions(d);
    if (d.name !== name && o.memory === memory && o.maxBytes > 0) reserved += o.maxBytes;
  }
  const asked = spec.options.maxBytes > 0 ? spec.options.maxBytes : existing === null ? 1 : 0;
  if (reserved + asked > limit) return memory ? JsErr.memoryResourcesExceeded() : JsErr.storageResourcesExceeded();
  return null;
}

/**
 * Cluster mode: the stream catalog read again from the metastore before the account's streams are looked at, so
 * that a stream another broker has just made counts (a create racing another broker's is not seen: no lock).
 */
export async function freshCatalog(js: JetStreamState): Promise<void> {
  if (js.cluster === null) return;
  const storage = js.engine.storage as { refresh?(): Promise<void> };
  await storage.refresh?.();
}

/**
 * Subjects of another stream made through the JetStream API that overlap the asked ones (nats-server's
 * subjectsOverlap: some message could be captured by both). Streams of Kafka, AMQP or MQTT bindings, and JetStream
 * streams made before FlowMQ marked them (API_STREAM_KEY), may share filters with anything and are not looked at.
 * Only the namespace's own streams are looked at: its subjects are its own (as nats-server's are per account).
 */
export function overlapRefusal(js: JetStreamState, name: string, spec: StreamSpecFromJs): ApiError | null {
  if (spec.options.mirror !== null) return null;
  const asked = spec.bindings.map(filterToSubject);
  const namespace = splitStreamName(name).namespace;
  for (const d of js.engine.listAllStreams()) {
    if (d.name === name || d.configs?.[API_STREAM_KEY] === undefined || jsOptions(d).mirror !== null) continue;
    // An account's subjects are its own (a tenant's are qualified: `$ns/t1/...`), as nats-server's accounts' are.
    if (splitStreamName(d.name).namespace !== namespace) continue;
    for (const b of d.bindings) {
      const s = filterToSubject(b);
      if (asked.some((a) => subjectsCollide(a, s))) return JsErr.subjectOverlap();
    }
  }
  return null;
}

/**
 * CONSUMER.CREATE / DURABLE.CREATE against the account's limits (consumer.go): a new consumer beyond max_consumers
 * on its stream (10026), a max_ack_pending above the account's (10121). Returns the body to serve instead when the
 * consumer takes the account's max_ack_pending as its default (nats-server's: the lower of 1000 and the limit), or
 * the error. Cluster mode: the count is that of the consumers this broker holds (consumer_count's caveat).
 */
export function consumerLimitCheck(js: JetStreamState, l: AccountLimits, t: string[], body: string): { error: ApiError } | { body: string } {
  if (l.maxConsumers <= 0 && l.maxAckPending <= 0) return { body };
  const durable = t[1] === 'DURABLE';
  const stream = durable ? t[3] : t[2];
  const raw = parseJson(body);
  if (stream === undefined || raw === BAD_JSON || raw === null || typeof raw !== 'object' || Array.isArray(raw)) return { body };
  const req = raw as Json;
  const cfg = req.config;
  if (cfg === null || typeof cfg !== 'object' || Array.isArray(cfg)) return { body };
  const c = cfg as Json;
  const named = durable ? t[4] : (t[3] ?? c.durable_name ?? c.name);
  const name = typeof named === 'string' && named !== '' ? named : undefined;
  // nats-server's order: the configuration (checkConsumerCfg), then the count (addConsumer).
  const pending = c.max_ack_pending;
  if (l.maxAckPending > 0 && typeof pending === 'number' && pending > l.maxAckPending) {
    return { error: JsErr.consumerMaxPendingAckExcess(l.maxAckPending) };
  }
  const exists = name !== undefined && js.getConsumer(stream, name) !== undefined;
  if (!exists && l.maxConsumers > 0 && js.consumerCount(stream) >= l.maxConsumers) return { error: JsErr.maximumConsumers() };
  const ack = c.ack_policy ?? 'explicit';
  if (l.maxAckPending > 0 && (pending === undefined || pending === 0) && (ack === 'explicit' || ack === 'all') && l.maxAckPending < DEFAULT_MAX_ACK_PENDING) {
    return { body: JSON.stringify({ ...req, config: { ...c, max_ack_pending: l.maxAckPending } }) };
  }
  return { body };
}

/**
 * The accounts' usage against their storage limits, for accountRefusal: each account with `max_storage`,
 * `max_memory` or a max stream bytes gets its streams' bytes summed (streamBytes), per storage type. Run about once a
 * second (service.ts); JetStream publishes accepted meanwhile are added as they come.
 */
export async function checkAccounts(js: JetStreamState): Promise<void> {
  const byNamespace = new Map<string, StreamDef[]>();
  for (const d of js.engine.listAllStreams()) {
    const ns = splitStreamName(d.name).namespace;
    let l = byNamespace.get(ns);
    if (l === undefined) byNamespace.set(ns, (l = []));
    l.push(d);
  }
  const next = new Map<string, AccountUsage>();
  for (const [ns, defs] of byNamespace) {
    const l = accountLimits(js, ns);
    // nats-server's limitsExceeded: over the account's limit, or (sic) over the max stream bytes, for the storage type.
    const limitOf = (max: number, streamMax: number): number => Math.min(max >= 0 ? max : Infinity, streamMax > 0 ? streamMax : Infinity);
    const limits = { memory: limitOf(l.maxMemory, l.maxMemoryStreamBytes ?? l.maxStreamBytes), file: limitOf(l.maxStorage, l.maxStreamBytes) };
    if (limits.memory === Infinity && limits.file === Infinity) continue;
    const use = { memory: { used: 0, limit: limits.memory, memory: true }, file: { used: 0, limit: limits.file, memory: false } };
    for (const d of defs) {
      const u = jsOptions(d).memory ? use.memory : use.file;
      u.used += await streamBytes(js, d);
      if (u.limit !== Infinity) next.set(d.name, u);
    }
  }
  js.accountUsage.clear();
  for (const [k, v] of next) js.accountUsage.set(k, v);
}

/**
 * A JetStream publish to `stream` that would take its account over a storage limit: nats-server stores it, sees
 * the account over, removes it and answers `resource limits exceeded for account` (10002); FlowMQ answers the same
 * without storing it. Counted otherwise (until the next checkAccounts).
 */
export function accountRefusal(js: JetStreamState, stream: string, msg: Message): ApiError | null {
  const u = js.accountUsage.get(stream);
  if (u === undefined) return null;
  const size = storedSize(subjectLength(msg.topic), msg.natsHeaders?.length ?? 0, msg.payload.length, u.memory);
  if (u.used + size > u.limit) return JsErr.accountResourcesExceeded();
  u.used += size;
  return null;
}
