/**
 * The NATS monitoring port (`--nats-monitor-port`, off unless set): nats-server's HTTP monitoring endpoints, so the
 * tools that read them (the Prometheus NATS exporter, nats-top, Surveyor-style dashboards, health probes) work
 * against FlowMQ. Paths, query options, JSON and error texts as nats-server 2.9.10's monitor.go:
 *
 *   /varz      server figures (monitor-json.ts varz)
 *   /connz     connections: sort, limit, offset, subs (1 or detail), auth, cid, state, user
 *   /subsz     subscription stats; subs, offset, limit, test (a literal subject the listed subscriptions match)
 *   /jsz       JetStream summary; accounts, streams, consumers, config, acc
 *   /healthz   {"status":"ok"}; js-enabled-only, js-server-only, js-enabled accepted (JetStream is always on)
 *   /accountz  the accounts: `$G` (the `default` namespace) and every other namespace (a namespace is an account)
 *
 * Access: like nats-server's monitoring port it asks for no login (the tools send none); it is off by default,
 * listens on the broker's --host, and `--nats-monitor-allow` restricts it to addresses or CIDR blocks (others get
 * 403). Nothing secret is in any answer: no password, token or certificate; `/connz?auth=1` shows the user a
 * client logged in as (authorized_user), as nats-server does. Every list is bounded (MAX_LIST_SIZE, MAX_JSZ_DETAIL,
 * MAX_SUBS_PER_CONNECTION), and so are the HTTP connections held at once (MAX_MONITOR_CONNECTIONS). JSONP (`callback`) is not served: it would hand these answers to any web page.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { closeUnreadBody, httpServerOptions, type HttpTimeouts } from '../../control/index.js';
import { DEFAULT_NAMESPACE } from '../../core/index.js';
import { addressFilter } from '../../util/address.js';
import { listenOn } from '../listener.js';
import type { ProtocolListener } from '../types.js';
import type { NatsAdapter } from './adapter.js';
import { isValidLiteralSubject } from './codec/index.js';
import { natsMatch } from './connection-state.js';
import { jetstreamStats, jsz, type JetStream } from './jetstream/index.js';
import { connz, CpuSampler, GLOBAL_ACCOUNT, subsz, varz, type ConnzOptions, type MonitorSetting } from './monitor-json.js';

export interface NatsMonitorOptions {
  host: string;
  port: number;
  /** Addresses / CIDR blocks that may connect; empty: anyone. */
  allow: readonly string[];
  /** What /varz says of the NATS listeners (the monitor's own address is filled in once it listens). */
  setting: () => Omit<MonitorSetting, 'httpHost' | 'httpPort'>;
  /** Timeouts and lingering close of the HTTP server (control/http-guard.ts); default its HTTP_TIMEOUTS. */
  timeouts?: HttpTimeouts;
}

/** HTTP connections the monitoring port keeps open at once (monitoring tools hold one or two each); more are refused. */
export const MAX_MONITOR_CONNECTIONS = 256;

const PATHS = ['/varz', '/connz', '/subsz', '/jsz', '/healthz', '/accountz'] as const;

/** A query parameter nats-server could not decode: its 400 text. */
class QueryError extends Error {}

/** Go's strconv.ParseBool, as nats-server's decodeBool reads a parameter (absent or empty: false). */
function bool(q: URLSearchParams, name: string): boolean {
  const v = q.get(name) ?? '';
  if (v === '') return false;
  if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(v)) return true;
  if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(v)) return false;
  throw new QueryError(`Error decoding boolean for '${name}': strconv.ParseBool: parsing ${JSON.stringify(v)}: invalid syntax`);
}

/** Go's strconv.Atoi (decodeInt); FlowMQ also refuses what does not fit a safe integer. */
function int(q: URLSearchParams, name: string, what = 'int', fn = 'strconv.Atoi'): number {
  const v = q.get(name) ?? '';
  if (v === '') return 0;
  const n = Number(v);
  if (!/^[+-]?\d+$/.test(v)) throw new QueryError(`Error decoding ${what} for '${name}': ${fn}: parsing ${JSON.stringify(v)}: invalid syntax`);
  if (!Number.isSafeInteger(n)) throw new QueryError(`Error decoding ${what} for '${name}': ${fn}: parsing ${JSON.stringify(v)}: value out of range`);
  return n;
}

function connzOptions(q: URLSearchParams): ConnzOptions {
  const auth = bool(q, 'auth');
  const subsDetail = (q.get('subs') ?? '').toLowerCase() === 'detail';
  const subs = subsDetail ? false : bool(q, 'subs');
  const offset = int(q, 'offset');
  const limit = int(q, 'limit');
  const cidText = q.get('cid') ?? '';
  if (cidText.startsWith('-') || cidText.startsWith('+'))
    throw new QueryError(`Error decoding uint64 for 'cid': strconv.ParseUint: parsing ${JSON.stringify(cidText)}: invalid syntax`);
  const cid = int(q, 'cid', 'uint64', 'strconv.ParseUint');
  const stateText = (q.get('state') ?? '').toLowerCase();
  let state: ConnzOptions['state'];
  if (stateText === '' || stateText === 'open') state = 'open';
  else if (stateText === 'closed') state = 'closed';
  else if (stateText === 'any' || stateText === 'all') state = 'any';
  else throw new QueryError(`Error decoding state for ${q.get('state')}`);
  return { sort: q.get('sort') ?? '', auth, subs, subsDetail, offset, limit, cid, state, user: q.get('user') ?? '' };
}

export class NatsMonitor {
  private readonly server: http.Server;
  private readonly cpu = new CpuSampler();
  private readonly reqStats: Record<string, number> = {};
  private readonly allowed: ((address: string | undefined) => boolean) | null;

  constructor(
    private readonly adapter: NatsAdapter,
    private readonly jetstream: JetStream,
    private readonly o: NatsMonitorOptions,
  ) {
    this.allowed = addressFilter(o.allow);
    this.server = http.createServer(httpServerOptions(o.timeouts), (req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        adapter.logger.error({ err, path: req.url }, 'nats monitor: request failed');
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
        res.end();
      });
    });
    this.server.maxConnections = MAX_MONITOR_CONNECTIONS;
  }

  async listen(): Promise<ProtocolListener> {
    await listenOn(this.server, { host: this.o.host, port: this.o.port }, (err) =>
      this.adapter.logger.error({ err, listener: 'nats-monitor' }, 'nats monitor listener error'),
    );
    return {
      protocol: 'nats',
      address: () => this.server.address() as AddressInfo,
      connections: () => 0,
      close: () =>
        new Promise<void>((resolve) => {
          this.server.close(() => resolve());
          this.server.closeAllConnections();
        }),
    };
  }

  private setting(): MonitorSetting {
    const a = this.server.address() as AddressInfo;
    return { ...this.o.setting(), httpHost: this.o.host, httpPort: a.port };
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    closeUnreadBody(req, res, this.o.timeouts?.lingerMs);
    if (this.allowed !== null && !this.allowed(req.socket.remoteAddress)) {
      res.writeHead(403, { 'content-type': 'text/plain; charset=utf-8' }).end('403 forbidden\n');
      return;
    }
    const url = new URL(req.url ?? '/', 'http://monitor');
    const path = url.pathname;
    if (path === '/') {
      const links = PATHS.map((p) => `<a href="${p}">${p.slice(1)}</a><br/>`).join('\n');
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(`<html><body>\n${links}\n</body></html>\n`);
      return;
    }
    if (!(PATHS as readonly string[]).includes(path)) {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('404 page not found\n');
      return;
    }
    this.reqStats[path] = (this.reqStats[path] ?? 0) + 1;
    let body: Record<string, unknown> | string;
    try {
      body = await this.answer(path, url.searchParams);
    } catch (err) {
      if (!(err instanceof QueryError)) throw err;
      body = err.message;
    }
    if (typeof body === 'string') {
      res.writeHead(400, { 'content-type': 'text/plain; charset=utf-8' }).end(body);
      return;
    }
    // nats-server indents every answer but /healthz's.
    const text = path === '/healthz' ? JSON.stringify(body) : JSON.stringify(body, null, 2);
    res.writeHead(200, { 'content-type': 'application/json' }).end(text);
  }

  private async answer(path: string, q: URLSearchParams): Promise<Record<string, unknown> | string> {
    const a = this.adapter;
    switch (path) {
      case '/varz': {
        const js = jetstreamStats(this.jetstream);
        return varz(a, this.setting(), this.cpu.percent(), { ...this.reqStats }, { config: js.config, stats: js.stats });
      }
      case '/connz':
        return connz(a, connzOptions(q));
      case '/subsz': {
        const subs = bool(q, 'subs');
        const offset = int(q, 'offset');
        const limit = int(q, 'limit');
        const test = q.get('test') ?? '';
        if (test !== '' && !isValidLiteralSubject(test)) return `invalid test subject, must be valid publish subject: ${test}`;
        return subsz(a, { subs, offset, limit, test: test === '' ? null : test }, natsMatch);
      }
      case '/jsz': {
        const o = {
          accounts: bool(q, 'accounts'),
          streams: bool(q, 'streams'),
          consumers: bool(q, 'consumers'),
          config: bool(q, 'config'),
          account: q.get('acc') ?? '',
        };
        int(q, 'offset');
        int(q, 'limit');
        bool(q, 'leader-only');
        return jsz(this.jetstream, a.serverId, o);
      }
      case '/healthz':
        // JetStream is part of every FlowMQ NATS adapter and the broker serves once its listeners are up: the
        // js-* options have nothing more to check on one broker.
        bool(q, 'js-enabled');
        bool(q, 'js-enabled-only');
        bool(q, 'js-server-only');
        return { status: 'ok' };
      case '/accountz':
        return { server_id: a.serverId, now: new Date().toISOString(), accounts: accounts(a) };
      default:
        return `unknown path ${path}`;
    }
  }
}

/** /accountz's accounts: `$G` for `default`, then the other namespaces by name (each one a NATS account). */
function accounts(a: NatsAdapter): string[] {
  const names = a.access.directory
    .listNamespaces()
    .map((n) => n.name)
    .filter((n) => n !== DEFAULT_NAMESPACE)
    .sort();
  return [GLOBAL_ACCOUNT, ...names];
}
