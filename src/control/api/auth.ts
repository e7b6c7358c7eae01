/**
 * Who may use the admin API, checked on every request in this order:
 *
 * 1. Host (DNS rebinding). A web page whose name an attacker re-points at this machine makes the victim's browser
 *    send `Host: <attacker's name>`; the page cannot change that header. So the Host header's host name (its port
 *    is not compared: a port forwarder or proxy may change it) must be the bind address, an `--http-allowed-hosts`
 *    entry, a loopback name when bound to loopback, or (bound to a wildcard address) `localhost` or an address of
 *    the machine's interfaces (read at each request). Else 421 MISDIRECTED_REQUEST. Exempt: /healthz, /readyz and
 *    /metrics, which load balancers and scrapers call by any name (`--http-metrics-allow` restricts them by
 *    address instead).
 * 2. Credentials, under /api/v1 (but `POST /api/v1/login` and `GET /api/v1/openapi.json`):
 *    - `Authorization: Bearer fmq_<id>.<secret>`: an API token of the directory;
 *    - `Authorization: Basic` (RFC 7617): a user of the directory, checked through the PasswordGuard like every
 *      protocol's passwords (scrypt on its own thread, failures slowed; 503 BUSY with Retry-After when it cannot
 *      take the check now);
 *    - the dashboard's session cookie `flowmq_session` (HttpOnly, SameSite=Strict): a session document of the
 *      control store (so it works on every broker sharing the metastore and survives a restart); with it, every
 *      request but GET/HEAD must carry `X-CSRF-Token` equal to the session's token (403 otherwise);
 *    - nothing: while the directory has no user at all, a request from a loopback address acts as an administrator
 *      (bootstrap: it can create the first user); with the `anonymous` option (an embedding's choice, no flag sets it:
 *      `--allow-anonymous` does not open the admin API) the anonymous principal, which only `everyone` policies
 *      match; otherwise 401 with a Basic challenge.
 * 3. Content type (CSRF, belt and braces with SameSite). A request with any method but GET or HEAD must say
 *    `Content-Type: application/json`, body or not, else 415. An HTML form or any other "simple" cross-site request
 *    cannot carry it; a cross-site fetch that sets it needs a CORS preflight, which this API never grants.
 * 4. Body size, from Content-Length: 1 MiB, `PUBLIC_MAX_BODY` for what needs no credentials, else 413.
 *
 * All four run in fastify's onRequest stage, before a byte of the body is read, and a refusal closes the connection
 * rather than reading the rest of the body (http-guard.ts): a stranger's body costs the broker what arrived before
 * the 401, not what the stranger sends. `Expect: 100-continue` is answered after them.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { networkInterfaces } from 'node:os';
import type { FastifyRequest } from 'fastify';
import { FlowError } from '../../core/index.js';
import type { AccessControl } from '../access.js';
import type { ControlStore } from '../../storage/metastore/control-store.js';
import { BOOTSTRAP, HttpError, type AuthState } from './common.js';
import { ANONYMOUS } from '../policy.js';
import type { LogLimiter } from '../../util/log-limit.js';
import { logKey } from '../../util/log-limit.js';
import { hostName, isLoopback, isWildcard } from '../../util/address.js';

export const SESSION_COOKIE = 'flowmq_session';
/** Bodies a caller without credentials may send (POST /api/v1/login: a user name and a password). */
export const PUBLIC_MAX_BODY = 16 * 1024;
export const CSRF_HEADER = 'x-csrf-token';

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

/** The token of an `Authorization: Bearer` header (RFC 6750); null if none. */
export function parseBearer(header: string | undefined): string | null {
  if (header === undefined) return null;
  const m = /^bearer[ ]+([A-Za-z0-9\-._~+/]+=*)[ ]*$/i.exec(header);
  return m ? m[1] : null;
}

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '::1'];

/** The Host check of step 1; `bound()` is the address the server bound (known after listen). */
export class HostCheck {
  private readonly allowed = new Set<string>();
  bound = '';
  loopback = false;
  wildcard = false;

  constructor(host: string, allowedHosts: readonly string[]) {
    for (const entry of allowedHosts) {
      const h = hostName(entry);
      if (h === null) throw new FlowError('CONFIG_ERROR', `http-allowed-hosts: "${entry}" is not a host name or IP address`);
      this.allowed.add(h);
    }
    const configured = hostName(host);
    if (configured !== null) this.allowed.add(configured);
  }

  setBound(address: string): void {
    this.bound = hostName(address) ?? '';
    this.loopback = isLoopback(address);
    this.wildcard = isWildcard(address);
  }

  allows(header: string | undefined): boolean {
    if (header === undefined) return false;
    const h = hostName(header);
    if (h === null) return false;
    if (this.allowed.has(h) || h === this.bound) return true;
    if ((this.loopback || this.wildcard) && LOOPBACK_NAMES.includes(h)) return true;
    if (this.wildcard) {
      for (const list of Object.values(networkInterfaces())) {
        for (const i of list ?? []) if (hostName(i.address) === h) return true;
      }
    }
    return false;
  }
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/** What a dashboard session of an OIDC token user keeps of the token: its claims, and when it expires. */
export interface TokenSession {
  groups: string[];
  namespace: string;
  expiresAt: number;
}

/**
 * Dashboard login sessions, kept in the control store as kind `session` under the SHA-256 of the cookie value (the
 * store never holds a usable cookie). A session names its user: deleting the user ends it.
 */
export class Sessions {
  constructor(
    private readonly store: ControlStore,
    readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * `token`: the session of an OIDC token user (no directory user): it keeps the token's groups and namespace and
   * ends when the token expires, if that comes before the session's own end.
   */
  async create(user: string, token?: TokenSession): Promise<{ cookie: string; key: string; csrfToken: string; expiresAt: number }> {
    const cookie = randomBytes(32).toString('base64url');
    const csrfToken = randomBytes(24).toString('base64url');
    const key = sha256(cookie);
    const at = this.now();
    const expiresAt = Math.min(at + this.ttlMs, token?.expiresAt ?? Infinity);
    await this.store.putControl('session', key, { user, csrfToken, createdAt: at, expiresAt, ...(token ? { token } : {}) });
    this.sweep().catch(() => undefined);
    return { cookie, key, csrfToken, expiresAt };
  }

  async get(cookie: string): Promise<{ key: string; user: string; csrfToken: string; expiresAt: number; token?: TokenSession } | null> {
    if (!/^[A-Za-z0-9_-]{20,100}$/.test(cookie)) return null;
    const key = sha256(cookie);
    const rec = await this.store.getControl('session', key);
    if (!rec) return null;
    const expiresAt = Number(rec.data.expiresAt);
    if (!(expiresAt > this.now())) {
      await this.store.deleteControl('session', key);
      return null;
    }
    const t = rec.data.token as TokenSession | undefined;
    const token = t && Array.isArray(t.groups) ? { groups: t.groups.map(String), namespace: String(t.namespace), expiresAt: Number(t.expiresAt) } : undefined;
    return { key, user: String(rec.data.user), csrfToken: String(rec.data.csrfToken), expiresAt, ...(token ? { token } : {}) };
  }

  async delete(key: string): Promise<void> {
    await this.store.deleteControl('session', key);
  }

  /** Deletes expired sessions (at each login: sessions are few, one list per login is cheap). */
  async sweep(): Promise<number> {
    let n = 0;
    const at = this.now();
    for (const r of await this.store.listControl('session')) {
      if (!(Number(r.data.expiresAt) > at) && (await this.store.deleteControl('session', r.name))) n++;
    }
    return n;
  }
}

function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export interface Authenticator {
  access: AccessControl;
  sessions: Sessions;
  /** Anonymous callers (no credentials) get the anonymous principal instead of 401. */
  anonymous: boolean;
  refusals: LogLimiter;
}

const BASIC_CHALLENGE = { 'www-authenticate': 'Basic realm="flowmq"' };

/**
 * The Basic challenge, for clients that can answer it (curl, the CLI, a browser's address bar). A page script's
 * fetch (Fetch metadata: a browser sends `Sec-Fetch-Dest: empty` for fetch and XHR) gets none: the browser would
 * open its own login dialog over the dashboard's form.
 */
function challenge(req: FastifyRequest): Record<string, string> {
  return req.headers['sec-fetch-dest'] === 'empty' ? {} : BASIC_CHALLENGE;
}

/** Step 2 of the module comment: who is calling. Throws the refusal. */
export async function authenticate(a: Authenticator, req: FastifyRequest): Promise<AuthState> {
  const remote = req.socket.remoteAddress;
  const header = req.headers.authorization;
  if (header !== undefined) {
    const bearer = parseBearer(header);
    const basic = bearer === null ? parseBasicAuth(header) : null;
    const outcome =
      bearer !== null
        ? await a.access.token(bearer, remote, 'http')
        : basic !== null
          ? await a.access.password(basic.username, basic.password, remote, 'http')
          : ({ verdict: 'bad' } as const);
    if (outcome.verdict === 'busy') {
      throw new HttpError(503, 'BUSY', 'too many password checks under way or failed from this address: retry later', { 'retry-after': '1' });
    }
    if (outcome.verdict !== 'ok') {
      const username = basic?.username ?? (bearer !== null ? '(token)' : null);
      a.refusals.log('warn', logKey('admin login refused', remote), { remote, username }, 'admin API login refused: invalid username or password');
      throw new HttpError(
        401,
        'UNAUTHENTICATED',
        bearer !== null ? (a.access.oidc !== null ? 'invalid or expired API token or JWT' : 'invalid or expired API token') : 'invalid username or password',
        challenge(req),
      );
    }
    // An OIDC JWT (its principal carries the token's expiry) is no API token: it has no id to show or delete.
    if (outcome.principal.expiresAt !== undefined) return { principal: outcome.principal, via: 'jwt' };
    return bearer !== null
      ? { principal: outcome.principal, via: 'token', tokenId: bearer.slice(4, bearer.indexOf('.')) }
      : { principal: outcome.principal, via: 'basic' };
  }
  const cookie = req.cookies?.[SESSION_COOKIE];
  if (cookie !== undefined && cookie !== '') {
    const s = await a.sessions.get(cookie);
    if (s === null || (s.token === undefined && a.access.directory.lookup(s.user) === undefined)) {
      throw new HttpError(401, 'UNAUTHENTICATED', 'the session has expired or ended: log in again');
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      const sent = req.headers[CSRF_HEADER];
      if (typeof sent !== 'string' || !sameSecret(sent, s.csrfToken)) {
        throw new HttpError(403, 'CSRF_TOKEN_MISMATCH', `a request with the session cookie must carry the session's ${CSRF_HEADER} header`);
      }
    }
    // An OIDC token user's session carries the token's claims (there is no directory user to read them from).
    const principal = s.token
      ? { user: s.user, groups: s.token.groups, namespace: s.token.namespace, expiresAt: s.token.expiresAt }
      : a.access.principal(s.user);
    return { principal, via: 'session', session: { key: s.key, csrfToken: s.csrfToken, expiresAt: s.expiresAt } };
  }
  if (!a.access.hasUsers) {
    if (isLoopback(remote)) return { principal: BOOTSTRAP, via: 'bootstrap' };
    throw new HttpError(
      401,
      'UNAUTHENTICATED',
      'no user exists yet: create the first one from the broker machine (loopback), e.g. `flowmq user add`',
      challenge(req),
    );
  }
  if (a.anonymous) return { principal: ANONYMOUS, via: 'anonymous' };
  throw new HttpError(401, 'UNAUTHENTICATED', 'credentials required: an API token (Bearer), HTTP Basic as a user, or a dashboard session', challenge(req));
}
