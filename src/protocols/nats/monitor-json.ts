/**
 * The JSON of nats-server's monitoring endpoints (server/monitor.go of nats-server 2.9.10: Varz, Connz, Subsz and
 * their options), built from the NATS adapter's connections and counters. Field names, nesting and types are
 * nats-server's; a field FlowMQ has nothing for is left out when nats-server marks it omitempty, and reported as
 * nats-server reports "nothing" otherwise (0, an empty object). What each figure covers is in docs/nats.md
 * ("Monitoring port"). Pure functions over a snapshot: monitor.ts serves them.
 */
import { availableParallelism } from 'node:os';
import type { NatsAdapter } from './adapter.js';
import { NATS_SERVER_VERSION } from './adapter.js';
import type { NatsConnection } from './connection.js';
import type { NatsSub } from './connection-state.js';

/** nats-server's default page size for /connz and /subsz (DefaultConnListSize, DefaultSubListSize). */
export const DEFAULT_LIST_SIZE = 1024;
/**
 * The largest page FlowMQ answers (nats-server takes any limit): a larger `limit` is answered with this many and
 * says so in the response's `limit`, so that one request cannot make the broker build an unbounded document.
 */
export const MAX_LIST_SIZE = 1024;
/** Subscriptions listed per connection in /connz?subs=1 (its `subscriptions` count is always the whole number). */
export const MAX_SUBS_PER_CONNECTION = 1024;

/** What /varz reports about the NATS listeners and the monitoring port itself. */
export interface MonitorSetting {
  host: string;
  port: number;
  httpHost: string;
  httpPort: number;
  tlsRequired: boolean;
  tlsVerify: boolean;
  websocket: { host: string; port: number; tls: boolean } | null;
}

/** Go's time.Duration.String() for a count of nanoseconds (the `rtt` of /connz). */
export function goDuration(ns: number): string {
  if (!(ns > 0)) return '0s';
  const frac = (x: number): string => String(Number(x.toFixed(9)));
  if (ns < 1e3) return `${Math.round(ns)}ns`;
  if (ns < 1e6) return `${frac(ns / 1e3)}µs`;
  if (ns < 1e9) return `${frac(ns / 1e6)}ms`;
  let s = ns / 1e9;
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  return `${h > 0 ? `${h}h` : ''}${h > 0 || m > 0 ? `${m}m` : ''}${frac(s)}s`;
}

/** nats-server's myUptime: whole seconds as `1y2d3h4m5s`, leading zero units left out. */
export function natsUptime(ms: number): string {
  const secs = Math.max(0, Math.floor(ms / 1000));
  const mins = Math.floor(secs / 60);
  const hrs = Math.floor(mins / 60);
  const days = Math.floor(hrs / 24);
  const yrs = Math.floor(days / 365);
  if (yrs > 0) return `${yrs}y${days % 365}d${hrs % 24}h${mins % 60}m${secs % 60}s`;
  if (days > 0) return `${days}d${hrs % 24}h${mins % 60}m${secs % 60}s`;
  if (hrs > 0) return `${hrs}h${mins % 60}m${secs % 60}s`;
  if (mins > 0) return `${mins}m${secs % 60}s`;
  return `${secs}s`;
}

const iso = (ms: number): string => new Date(ms).toISOString();

/** Process CPU as nats-server's `cpu`: percent of one core, averaged since the previous sample (at least 1 s apart). */
export class CpuSampler {
  private at = process.hrtime.bigint();
  private used = process.cpuUsage();
  private last = 0;

  percent(): number {
    const now = process.hrtime.bigint();
    const elapsedUs = Number(now - this.at) / 1e3;
    if (elapsedUs >= 1e6) {
      const u = process.cpuUsage(this.used);
      this.last = Math.round(((u.user + u.system) / elapsedUs) * 1000) / 10;
      this.at = now;
      this.used = process.cpuUsage();
    }
    return this.last;
  }
}

function subscriptionCount(adapter: NatsAdapter): number {
  let n = 0;
  for (const c of adapter.openConnections()) n += c.subscriptionCount;
  return n;
}

/** /varz (nats-server's Varz). `jetstream` is what /jsz reports as its summary's config and stats. */
export function varz(
  adapter: NatsAdapter,
  s: MonitorSetting,
  cpu: number,
  httpReqStats: Record<string, number>,
  jetstream: Record<string, unknown>,
): Record<string, unknown> {
  const o = adapter.options;
  const now = Date.now();
  const st = adapter.stats;
  return {
    server_id: adapter.serverId,
    server_name: adapter.serverName,
    version: NATS_SERVER_VERSION,
    proto: 1,
    host: s.host,
    port: s.port,
    ...(adapter.authRequired ? { auth_required: true } : {}),
    ...(s.tlsRequired ? { tls_required: true } : {}),
    ...(s.tlsVerify ? { tls_verify: true } : {}),
    max_connections: o.maxConnections,
    ...(o.maxSubscriptions > 0 ? { max_subscriptions: o.maxSubscriptions } : {}),
    ping_interval: o.pingIntervalMs * 1e6,
    ping_max: o.maxPingsOut,
    http_host: s.httpHost,
    http_port: s.httpPort,
    http_base_path: '',
    https_port: 0,
    auth_timeout: o.authTimeoutMs / 1000,
    max_control_line: o.maxControlLine,
    max_payload: o.maxPayload,
    max_pending: o.maxPending,
    cluster: {},
    gateway: {},
    leaf: {},
    mqtt: {},
    websocket: s.websocket === null ? {} : { host: s.websocket.host, port: s.websocket.port, ...(s.websocket.tls ? {} : { no_tls: true }) },
    jetstream,
    tls_timeout: 2,
    write_deadline: o.writeDeadlineMs * 1e6,
    start: iso(adapter.startedAt),
    now: iso(now),
    uptime: natsUptime(now - adapter.startedAt),
    mem: process.memoryUsage().rss,
    cores: availableParallelism(),
    cpu,
    connections: adapter.connections(),
    total_connections: st.connectionsTotal - st.connectionsRefused,
    routes: 0,
    remotes: 0,
    leafnodes: 0,
    in_msgs: st.msgsIn,
    out_msgs: st.msgsOut,
    in_bytes: st.bytesIn,
    out_bytes: st.bytesOut,
    slow_consumers: st.slowConsumers,
    subscriptions: subscriptionCount(adapter),
    http_req_stats: httpReqStats,
    config_load_time: iso(adapter.startedAt),
  };
}

// ------------------------------------------------------------------------------------------------------- connz

/** nats-server's sort options (monitor_sort_opts.go); `stop` and `reason` only apply to closed connections. */
export const SORT_OPTIONS = ['cid', 'start', 'subs', 'pending', 'msgs_to', 'msgs_from', 'bytes_to', 'bytes_from', 'last', 'idle', 'uptime', 'stop', 'reason'];

export interface ConnzOptions {
  sort: string;
  auth: boolean;
  subs: boolean;
  subsDetail: boolean;
  offset: number;
  limit: number;
  cid: number;
  state: 'open' | 'closed' | 'any';
  user: string;
}

/** The sort key of a connection (larger first, but for cid/start and uptime, as nats-server orders them). */
function sortKey(c: NatsConnection, sort: string, now: number): number {
  switch (sort) {
    case 'subs':
      return c.subscriptionCount;
    case 'pending':
      return c.pendingBytes;
    case 'msgs_to':
      return c.outMsgs;
    case 'msgs_from':
      return c.inMsgs;
    case 'bytes_to':
      return c.outBytes;
    case 'bytes_from':
      return c.inBytes;
    case 'last':
      return c.lastActivity;
    case 'idle':
      // nats-server's byIdle compares last activity minus start, descending.
      return c.lastActivity - c.openedAt;
    case 'uptime':
      return now - c.openedAt;
    default:
      return c.clientId;
  }
}

/**
 * The NATS account of a connection: its namespace (the subjects it lives in), `$G` (nats-server's global account)
 * for `default`'s.
 */
export function accountOf(c: NatsConnection): string {
  return c.names.isDefault ? GLOBAL_ACCOUNT : c.names.namespace;
}

export const GLOBAL_ACCOUNT = '$G';

function subDetail(c: NatsConnection, ns: NatsSub, account: boolean): Record<string, unknown> {
  return {
    ...(account ? { account: accountOf(c) } : {}),
    subject: ns.subject,
    ...(ns.queue !== null ? { qgroup: ns.queue } : {}),
    sid: ns.sid,
    msgs: ns.delivered,
    ...(ns.max > 0 ? { max: ns.max } : {}),
    cid: c.clientId,
  };
}

function connInfo(c: NatsConnection, o: ConnzOptions, now: number): Record<string, unknown> {
  const info: Record<string, unknown> = {
    cid: c.clientId,
    kind: 'Client',
    type: 'nats',
    ip: c.remoteAddress.startsWith('::ffff:') ? c.remoteAddress.slice(7) : c.remoteAddress,
    port: c.meta.remotePort,
    start: iso(c.openedAt),
    last_activity: iso(c.lastActivity),
    rtt: goDuration(c.rttNs),
    uptime: natsUptime(now - c.openedAt),
    idle: natsUptime(now - c.lastActivity),
    pending_bytes: c.pendingBytes,
    in_msgs: c.inMsgs,
    out_msgs: c.outMsgs,
    in_bytes: c.inBytes,
    out_bytes: c.outBytes,
    subscriptions: c.subscriptionCount,
  };
  if (c.name) info.name = c.name;
  if (c.lang) info.lang = c.lang;
  if (c.version) info.version = c.version;
  const tlsSocket = c.meta.tlsSocket;
  if (c.meta.tls && tlsSocket !== undefined) {
    const v = tlsSocket.getProtocol();
    const cipher = tlsSocket.getCipher();
    if (v) info.tls_version = v.replace(/^TLSv/, '');
    if (cipher) info.tls_cipher_suite = cipher.standardName;
  }
  // Who the client is, never how it proved it: no password, token or certificate is in any answer.
  if (o.auth && c.user !== null) info.authorized_user = c.user;
  // nats-server names the account with auth, unless it is the global one.
  if (o.auth && !c.names.isDefault) info.account = c.names.namespace;
  if (c.subscriptionCount > 0 && (o.subs || o.subsDetail)) {
    const list: unknown[] = [];
    for (const ns of c.subs.values()) {
      if (list.length >= MAX_SUBS_PER_CONNECTION) break;
      list.push(o.subsDetail ? subDetail(c, ns, false) : ns.subject);
    }
    info[o.subsDetail ? 'subscriptions_list_detail' : 'subscriptions_list'] = list;
  }
  return info;
}

/** /connz (nats-server's Connz): an error text (400) or the answer. */
export function connz(adapter: NatsAdapter, o: ConnzOptions): Record<string, unknown> | string {
  if (!SORT_OPTIONS.includes(o.sort) && o.sort !== '') return `invalid sorting option: ${o.sort}`;
  if (o.sort === 'stop' && o.state !== 'closed') return 'sort by stop only valid on closed connections';
  if (o.sort === 'reason' && o.state !== 'closed') return 'sort by reason only valid on closed connections';
  const nowMs = Date.now();
  const offset = Math.max(0, o.offset);
  let limit = o.limit <= 0 ? DEFAULT_LIST_SIZE : Math.min(o.limit, MAX_LIST_SIZE);
  let picked: NatsConnection[] = [];
  // FlowMQ keeps no closed connections: state=closed lists none, state=any the open ones.
  if (o.state !== 'closed') {
    if (o.cid > 0) {
      limit = 1;
      const c = adapter.connection(o.cid);
      if (c !== undefined) picked.push(c);
    } else {
      for (const c of adapter.openConnections()) if (o.user === '' || c.user === o.user) picked.push(c);
    }
  }
  const total = o.cid > 0 ? picked.length : o.state === 'closed' ? 0 : adapter.connections();
  const sort = o.sort === '' || o.sort === 'start' ? 'cid' : o.sort;
  if (sort !== 'cid') {
    const keys = new Map(picked.map((c) => [c, sortKey(c, sort, nowMs)]));
    // Descending but for uptime (nats-server sorts byUptime ascending); ties by cid, so pages do not overlap.
    const dir = sort === 'uptime' ? 1 : -1;
    picked.sort((a, b) => dir * (keys.get(a)! - keys.get(b)!) || a.clientId - b.clientId);
  } else picked.sort((a, b) => a.clientId - b.clientId);
  picked = picked.slice(Math.min(offset, picked.length), Math.min(offset + limit, picked.length));
  const connections = picked.map((c) => connInfo(c, o, nowMs));
  // The next answer has a round trip for those that had none (the PING goes after this answer's pending_bytes).
  for (const c of picked) c.measureRtt();
  return { server_id: adapter.serverId, now: iso(nowMs), num_connections: picked.length, total, offset, limit, connections };
}

// ------------------------------------------------------------------------------------------------------- subsz

export interface SubszOptions {
  subs: boolean;
  offset: number;
  limit: number;
  test: string | null;
}

/** nats-server's SublistStats over the NATS clients' subscriptions (FlowMQ's router keeps no match cache). */
export function sublistStats(adapter: NatsAdapter): Record<string, unknown> {
  const st = adapter.stats;
  return {
    num_subscriptions: subscriptionCount(adapter),
    num_cache: 0,
    num_inserts: st.subInserts,
    num_removes: st.subRemoves,
    num_matches: st.matches,
    cache_hit_rate: 0,
    max_fanout: st.maxFanout,
    avg_fanout: st.matches === 0 ? 0 : st.fanoutTotal / st.matches,
  };
}

/** /subsz (nats-server's Subsz: the stats alone unless subscriptions are listed), or an error text. */
export function subsz(adapter: NatsAdapter, o: SubszOptions, matches: (filter: string, subject: string) => boolean): Record<string, unknown> | string {
  const stats = sublistStats(adapter);
  if (!o.subs) return stats;
  const offset = Math.max(0, o.offset);
  const limit = o.limit <= 0 ? DEFAULT_LIST_SIZE : Math.min(o.limit, MAX_LIST_SIZE);
  const list: unknown[] = [];
  let total = 0;
  const conns = [...adapter.openConnections()].sort((a, b) => a.clientId - b.clientId);
  for (const c of conns) {
    for (const ns of c.subs.values()) {
      if (o.test !== null && !matches(ns.subject, o.test)) continue;
      if (total >= offset && list.length < limit) list.push(subDetail(c, ns, true));
      total++;
    }
  }
  // nats-server answers the stats alone when the page is empty.
  if (list.length === 0) return stats;
  return { server_id: adapter.serverId, now: iso(Date.now()), ...stats, total, offset, limit, subscriptions_list: list };
}
