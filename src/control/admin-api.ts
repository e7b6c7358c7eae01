/**
 * The admin HTTP API (control plane). JSON under /api/v1/; the `flowmq` CLI is a client of it.
 *
 *   GET    /healthz                      liveness
 *   GET    /api/v1/broker                listeners and counters
 *   GET    /api/v1/streams               every stream
 *   POST   /api/v1/streams               create {name, partitions, bindings?, retention?}
 *   GET    /api/v1/streams/{name}        one stream with per-partition offsets
 *   DELETE /api/v1/streams/{name}        delete a stream and its data
 *   POST   /api/v1/streams/{name}/flush  seal hot data of every stream into the object store now
 *
 * Errors are `{ "error": { "code": "...", "message": "..." } }` with a matching HTTP status.
 *
 * Who may use it (until the control plane has admin identities of its own), checked in this order on every
 * request but `GET|HEAD /healthz`, which stays open for load balancers and tells nothing:
 *
 * 1. Host (DNS rebinding). A web page whose name an attacker re-points at this machine makes the victim's browser
 *    send `Host: <attacker's name>`; the page cannot change that header. So the Host header's host name (its port
 *    is not compared: a port forwarder or proxy may change it, and a rebinding page cannot change the name) must
 *    be one of
 *      - the bind address as configured (`--http-host`, an IP address or a name) or as bound;
 *      - an `--http-allowed-hosts` entry (host names or IP addresses; a port in an entry is ignored);
 *      - when the API is bound to a loopback address: `localhost`, `127.0.0.1` and `[::1]`;
 *      - when bound to a wildcard address (`0.0.0.0`, `::`): `localhost` and every address of the machine's
 *        network interfaces (os.networkInterfaces(), read at each request, so addresses added later count).
 *    IP literals are compared in canonical form (`[0:0::1]` is `[::1]`), names case-insensitively without a
 *    trailing dot. Anything else, and a request without a Host header (HTTP/1.0), gets 421 MISDIRECTED_REQUEST.
 * 2. Credentials. With a users store (`--users-file`), HTTP Basic authentication (RFC 7617) naming one of its
 *    users, checked through the broker's PasswordGuard like every protocol's passwords (scrypt on its own thread,
 *    repeated failures slowed per address and per user; 503 BUSY with Retry-After when it cannot take the check
 *    now); otherwise 401 UNAUTHENTICATED with `WWW-Authenticate: Basic realm="flowmq"`. Without users anyone
 *    who can connect may use it (the start-up log line says so, and warns when the address is not loopback).
 * 3. Content type (CSRF). A request with any method but GET or HEAD must say `Content-Type: application/json`,
 *    body or not, else 415 UNSUPPORTED_MEDIA_TYPE. An HTML form or any other "simple" cross-site request
 *    (Fetch standard: CORS-safelisted content types only) cannot carry it; a cross-site fetch that sets it needs a
 *    CORS preflight, which this API never grants. That also stops a browser replaying cached Basic credentials.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { isIP, type AddressInfo } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { Logger } from 'pino';
import { FlowError, isFlowError, type Engine, type StreamDef } from '../core/index.js';
import { parseDuration } from '../config/units.js';
import { listenOn } from '../protocols/listener.js';
import { LogLimiter, logKey } from '../protocols/log-limit.js';
import type { PasswordGuard } from './password-guard.js';

/** Storage operations the control plane may ask for; implemented by the log engine. */
export interface StorageOps {
  flushAll(): Promise<void>;
  describe(stream: string): Array<Record<string, number>>;
}

export interface AdminApiOptions {
  engine: Engine;
  logger: Logger;
  storage?: StorageOps;
  /** Extra broker information for GET /api/v1/broker. */
  info?: () => Record<string, unknown>;
  /** Bind address (`--http-host`). */
  host: string;
  port: number;
  /** Users who may call /api/v1 (HTTP Basic); null or absent: no authentication. */
  guard?: PasswordGuard | null;
  /** Extra host names the Host header may carry (`--http-allowed-hosts`). */
  allowedHosts?: readonly string[];
}

export interface AdminApi {
  address(): AddressInfo;
  /** Who may use the API, for the start-up log line: "basic (N users from users file)" or "none: ...". */
  readonly auth: string;
  /** True when anyone who can connect may use it and the address is reachable from other machines. */
  readonly exposed: boolean;
  close(): Promise<void>;
}

/** An HTTP-level refusal (not a broker error): its own status and code. */
class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** Credentials of an `Authorization: Basic` header (RFC 7617: base64 of user-id ":" password); null if none or malformed. */
export function parseBasicAuth(header: string | undefined): { username: string; password: string } | null {
  if (header === undefined) return null;
  const m = /^basic[ ]+([A-Za-z0-9+/]+={0,2})[ ]*$/i.exec(header);
  if (!m) return null;
  const text = Buffer.from(m[1], 'base64').toString('utf8');
  const colon = text.indexOf(':');
  if (colon <= 0) return null;
  return { username: text.slice(0, colon), password: text.slice(colon + 1) };
}

/**
 * The canonical host name of a Host header value or an allowed-hosts entry (`name`, `name:port`, `1.2.3.4:80`,
 * `[::1]:80`), without its port; null if it is not one. IP literals come back canonical (IPv6 without brackets),
 * names lower case without a trailing dot.
 */
export function hostName(value: string): string | null {
  const v = value.trim().toLowerCase();
  let host: string;
  const bracket = /^\[([0-9a-f:.]+)\](?::\d{1,5})?$/.exec(v);
  if (bracket) {
    host = bracket[1];
    if (isIP(host) !== 6) return null;
  } else if (isIP(v) === 6) {
    host = v; // a bare IPv6 address (allowed-hosts entries; never a valid Host header, which brackets it)
  } else {
    const m = /^([a-z0-9_.-]+)(?::\d{1,5})?$/.exec(v);
    if (!m) return null;
    host = m[1].replace(/\.$/, '');
    if (host === '' || host.startsWith('.') || host.includes('..')) return null;
  }
  // The WHATWG URL parser gives IP literals one spelling ([0:0::1] and ::1, 127.1 and 127.0.0.1).
  try {
    const h = new URL(`http://${isIP(host) === 6 ? `[${host}]` : host}/`).hostname;
    return h.startsWith('[') ? h.slice(1, -1) : h;
  } catch {
    return null;
  }
}

function isLoopback(address: string): boolean {
  const a = address.startsWith('::ffff:') ? address.slice(7) : address;
  return a === '::1' || (isIP(a) === 4 && a.startsWith('127.'));
}

function isWildcard(address: string): boolean {
  return address === '0.0.0.0' || address === '::';
}

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '::1'];

const MAX_BODY = 1024 * 1024;

const STATUS: Record<string, number> = {
  INVALID_ARGUMENT: 400,
  INVALID_FILTER: 400,
  INVALID_TOPIC: 400,
  NOT_FOUND: 404,
  ALREADY_EXISTS: 409,
  LIMIT_EXCEEDED: 413,
};

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const data = status === 204 ? '' : JSON.stringify(body, null, 2) + '\n';
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) });
  res.end(data);
}

function readJson(req: IncomingMessage): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new FlowError('LIMIT_EXCEEDED', 'request body too large'));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      if (text.trim() === '') return resolve({});
      try {
        resolve(JSON.parse(text));
      } catch {
        reject(new FlowError('INVALID_ARGUMENT', 'request body is not valid JSON'));
      }
    });
    req.on('error', reject);
  });
}

/** A path segment with its %-escapes decoded; a malformed escape is the client's error (400), not ours. */
function decodePathSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new FlowError('INVALID_ARGUMENT', `malformed %-escape in the path segment "${segment}"`);
  }
}

export function streamView(def: StreamDef): Record<string, unknown> {
  return {
    name: def.name,
    partitions: def.partitions,
    bindings: def.bindings,
    retentionMs: def.retentionMs,
    createdAt: new Date(def.createdAt).toISOString(),
  };
}

function parseCreate(body: unknown): { name: string; partitions: number; bindings?: string[]; retentionMs: number | null } {
  if (typeof body !== 'object' || body === null) throw new FlowError('INVALID_ARGUMENT', 'expected a JSON object');
  const b = body as Record<string, unknown>;
  if (typeof b.name !== 'string') throw new FlowError('INVALID_ARGUMENT', '"name" must be a string');
  const partitions = b.partitions ?? 1;
  if (typeof partitions !== 'number') throw new FlowError('INVALID_ARGUMENT', '"partitions" must be a number');
  let bindings: string[] | undefined;
  if (b.bindings !== undefined) {
    if (!Array.isArray(b.bindings) || !b.bindings.every((x) => typeof x === 'string')) {
      throw new FlowError('INVALID_ARGUMENT', '"bindings" must be an array of topic filters');
    }
    bindings = b.bindings as string[];
  }
  let retentionMs: number | null = null;
  if (b.retention !== undefined && b.retention !== null) {
    const r = typeof b.retention === 'string' || typeof b.retention === 'number' ? parseDuration(b.retention) : null;
    if (r === null || r <= 0) throw new FlowError('INVALID_ARGUMENT', '"retention" must be a duration such as 7d, 12h or a number of ms');
    retentionMs = r;
  }
  return { name: b.name, partitions, bindings, retentionMs };
}

export async function startAdminApi(opts: AdminApiOptions): Promise<AdminApi> {
  const { engine, logger } = opts;
  const guard = opts.guard ?? null;
  const users = guard?.store ?? null;
  const refusals = new LogLimiter(logger);
  const allowed = new Set<string>();
  for (const entry of opts.allowedHosts ?? []) {
    const h = hostName(entry);
    if (h === null) throw new FlowError('CONFIG_ERROR', `http-allowed-hosts: "${entry}" is not a host name or IP address`);
    allowed.add(h);
  }
  const configured = hostName(opts.host);
  if (configured !== null) allowed.add(configured);
  let bound = '';
  let loopback = false;
  let wildcard = false;

  const hostAllowed = (header: string | undefined): boolean => {
    if (header === undefined) return false;
    const h = hostName(header);
    if (h === null) return false;
    if (allowed.has(h) || h === bound) return true;
    if ((loopback || wildcard) && LOOPBACK_NAMES.includes(h)) return true;
    if (wildcard) {
      for (const list of Object.values(networkInterfaces())) {
        for (const i of list ?? []) if (hostName(i.address) === h) return true;
      }
    }
    return false;
  };

  /** Steps 1-3 of the module comment; throws the refusal. */
  const admit = async (req: IncomingMessage, method: string): Promise<void> => {
    const remote = req.socket.remoteAddress;
    if (!hostAllowed(req.headers.host)) {
      const host = req.headers.host;
      refusals.log('warn', logKey('admin host refused', remote), { remote, host: host ?? null }, 'admin API request for a host name it does not serve refused');
      throw new HttpError(
        421,
        'MISDIRECTED_REQUEST',
        host === undefined
          ? 'a Host header is required'
          : `this server does not answer for host "${host}"; use its address or add the name to --http-allowed-hosts`,
      );
    }
    if (guard !== null) {
      const creds = parseBasicAuth(req.headers.authorization);
      // The same guard as every protocol's password check: bounded scrypt off the thread pool, failures slowed.
      const verdict = creds === null ? 'bad' : await guard.check(creds.username, creds.password, remote, 'http');
      if (verdict === 'busy') {
        throw new HttpError(503, 'BUSY', 'too many password checks under way or failed from this address: retry later', { 'retry-after': '1' });
      }
      if (verdict !== 'ok') {
        if (creds !== null) {
          refusals.log('warn', logKey('admin login refused', remote), { remote, username: creds.username }, 'admin API login refused: invalid username or password');
        }
        throw new HttpError(
          401,
          'UNAUTHENTICATED',
          creds === null ? 'credentials required: HTTP Basic authentication as a user of the users file' : 'invalid username or password',
          { 'www-authenticate': 'Basic realm="flowmq"' },
        );
      }
    }
    if (method !== 'GET' && method !== 'HEAD') {
      const type = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
      if (type !== 'application/json') {
        throw new HttpError(415, 'UNSUPPORTED_MEDIA_TYPE', `${method} requests must have Content-Type: application/json (body or not)`);
      }
    }
  };

  const describe = (name: string) => {
    const e = engine.getStream(name);
    if (!e) throw new FlowError('NOT_FOUND', `stream "${name}" does not exist`);
    const detail = opts.storage?.describe(name);
    const partitions = detail ?? Array.from({ length: e.def.partitions }, (_, p) => ({ partition: p, ...engine.offsets(name, p) }));
    return { ...streamView(e.def), topic: e.ownTopic, partitionDetails: partitions };
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const method = req.method ?? 'GET';
    if (url.pathname === '/healthz' && (method === 'GET' || method === 'HEAD')) return send(res, 200, { status: 'ok' });
    await admit(req, method);
    const parts = url.pathname.split('/').filter(Boolean).map(decodePathSegment);
    if (parts[0] !== 'api' || parts[1] !== 'v1') throw new FlowError('NOT_FOUND', `no such endpoint ${url.pathname}`);
    const [, , resource, name, action] = parts;
    if (resource === 'broker' && parts.length === 3 && method === 'GET') {
      return send(res, 200, { ...(opts.info?.() ?? {}), stats: engine.stats });
    }
    if (resource === 'streams') {
      if (name === undefined) {
        if (method === 'GET') return send(res, 200, { streams: engine.listStreams().map(streamView) });
        if (method === 'POST') {
          const def = await engine.createStream(parseCreate(await readJson(req)));
          logger.info({ stream: def.name, partitions: def.partitions, bindings: def.bindings }, 'stream created');
          return send(res, 201, streamView(def));
        }
      } else if (action === undefined) {
        if (method === 'GET') return send(res, 200, describe(name));
        if (method === 'DELETE') {
          await engine.deleteStream(name);
          logger.info({ stream: name }, 'stream deleted');
          return send(res, 204, null);
        }
      } else if (action === 'flush' && method === 'POST' && parts.length === 5) {
        if (!engine.getStream(name)) throw new FlowError('NOT_FOUND', `stream "${name}" does not exist`);
        await opts.storage?.flushAll();
        return send(res, 200, describe(name));
      }
    }
    res.setHeader('allow', 'GET, POST, DELETE');
    throw new FlowError('NOT_FOUND', `no such endpoint ${method} ${url.pathname}`);
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      const http = err instanceof HttpError ? err : null;
      const code = http?.code ?? (isFlowError(err) ? err.code : 'INTERNAL');
      const status = http?.status ?? (isFlowError(err) ? STATUS[err.code] ?? 500 : 500);
      if (status >= 500) logger.error({ err, url: req.url }, 'admin API request failed');
      if (!res.headersSent) {
        // A refused request's body is left unread: node's server drains it after the response (bounded by its
        // requestTimeout), so the client reads the refusal instead of a connection reset.
        send(res, status, { error: { code, message: (err as Error).message } }, http?.headers);
      } else res.destroy();
    });
  });
  await listenOn(server, opts, (err) => logger.error({ err }, 'admin API server error'));
  const address = server.address() as AddressInfo;
  bound = hostName(address.address) ?? '';
  loopback = isLoopback(address.address);
  wildcard = isWildcard(address.address);
  return {
    address: () => server.address() as AddressInfo,
    auth: users !== null ? `basic (${users.size} user${users.size === 1 ? '' : 's'} from users file)` : 'none: anyone who can connect',
    exposed: users === null && !loopback,
    close: () =>
      new Promise<void>((resolve) => {
        refusals.stop();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
