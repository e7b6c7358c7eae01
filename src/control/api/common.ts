/**
 * What every admin API route file shares: the HTTP refusal type, the error envelope's status mapping, the
 * authorization check, pagination, and the request decorations the authentication hook sets.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { DEFAULT_NAMESPACE, FlowError, isFlowError, namespaceNames, splitName, splitStreamName, splitTopic } from '../../core/index.js';
import type { Action, Principal, ResourceKind } from '../policy.js';
import type { AccessControl } from '../access.js';

/** An HTTP-level refusal (not a broker error): its own status and code, and headers to send with it. */
export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** FlowError codes as HTTP statuses; anything else is a 500. */
export const STATUS: Record<string, number> = {
  INVALID_ARGUMENT: 400,
  INVALID_FILTER: 400,
  INVALID_TOPIC: 400,
  NOT_FOUND: 404,
  ALREADY_EXISTS: 409,
  PRECONDITION_FAILED: 409,
  RESOURCE_LOCKED: 409,
  ACCESS_REFUSED: 403,
  LIMIT_EXCEEDED: 413,
  STORAGE_FULL: 507,
  CLOSED: 503,
};

/** How a request authenticated. `bootstrap`: loopback while no user exists; `anonymous`: no credentials, allowed. */
export type AuthVia = 'basic' | 'token' | 'jwt' | 'session' | 'bootstrap' | 'anonymous';

export interface AuthState {
  principal: Principal;
  via: AuthVia;
  /** The session's id hash and CSRF token (via session). */
  session?: { key: string; csrfToken: string; expiresAt: number };
  /** The token's id (via token). */
  tokenId?: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    auth: AuthState | null;
  }
}

/** The principal the bootstrap (no users yet, loopback) acts as: an administrator. */
export const BOOTSTRAP: Principal = Object.freeze({ user: null, groups: Object.freeze(['admins']) as readonly string[], namespace: 'default' });

export function authOf(req: FastifyRequest): AuthState {
  if (!req.auth) throw new HttpError(401, 'UNAUTHENTICATED', 'credentials required');
  return req.auth;
}

/**
 * The namespaces the caller administers: `all` for a global administrator (`admin cluster:*`), else those an
 * `admin namespace:<name>` allow names (empty for a plain user). Read once per request.
 */
export type AdminScope = 'all' | ReadonlySet<string>;
const scopes = new WeakMap<FastifyRequest, AdminScope>();

export function adminScope(access: AccessControl, req: FastifyRequest): AdminScope {
  let s = scopes.get(req);
  if (s !== undefined) return s;
  const a = authOf(req);
  s = a.via === 'bootstrap' ? 'all' : principalScope(access, a.principal.expiresAt !== undefined ? a.principal : access.principal(a.principal.user));
  scopes.set(req, s);
  return s;
}

/** The namespaces a principal administers (adminScope without a request: the dashboard's login answer). */
export function principalScope(access: AccessControl, p: Principal): AdminScope {
  if (access.allows(p, 'admin', 'cluster', '*')) return 'all';
  const set = new Set<string>();
  for (const n of access.directory.listNamespaces()) if (access.allows(p, 'admin', 'namespace', n.name)) set.add(n.name);
  return set;
}

/** Whether the caller administers namespace `ns` (a global administrator administers every one). */
export function administers(access: AccessControl, req: FastifyRequest, ns: string): boolean {
  const s = adminScope(access, req);
  return s === 'all' || s.has(ns);
}

/** A namespace administrator: administers some namespaces, not the broker. */
export function namespaceAdmin(access: AccessControl, req: FastifyRequest): boolean {
  const s = adminScope(access, req);
  return s !== 'all' && s.size > 0;
}

/** The kinds whose admin API objects belong to a namespace by their internal name, and their 404 wording. */
const NAMESPACED: Partial<Record<ResourceKind, string>> = { stream: 'stream', queue: 'queue', exchange: 'exchange', group: 'consumer group' };

/** The namespace an internal name of `kind` belongs to (null: the kind is no namespace's). */
export function namespaceOf(kind: ResourceKind, name: string): string | null {
  if (kind === 'stream') return splitStreamName(name).namespace;
  if (kind === 'queue' || kind === 'exchange' || kind === 'group' || kind === 'topic') return splitName(name).namespace;
  return null;
}

/**
 * What decides on `kind:name` (an internal name) for the caller: `allow` (the object is in a namespace it
 * administers: everything is allowed there), `hide` (the object is of a namespace neither its own nor administered
 * by it: answered as absent, no existence leak), or `{ check }`: the policies decide, on the name as the caller's
 * namespace writes it (policies name a tenant's objects unqualified, docs/namespaces.md). A global administrator's
 * requests, and kinds no namespace owns, are checked as they come.
 */
function scoped(access: AccessControl, req: FastifyRequest, kind: ResourceKind, name: string): 'allow' | 'hide' | { check: string } {
  if (NAMESPACED[kind] === undefined && kind !== 'topic') return { check: name };
  const s = adminScope(access, req);
  if (s === 'all') return { check: name };
  const ns = namespaceOf(kind, name)!;
  if (s.has(ns)) return 'allow';
  if (ns !== authOf(req).principal.namespace) return 'hide';
  return { check: kind === 'stream' ? splitStreamName(name).name : kind === 'topic' ? splitTopic(name).topic : splitName(name).name };
}

/** A tenant's view of names (its streams' feeding filters are judged unqualified); null for `default`. */
function tenantNames(ns: string) {
  return ns === DEFAULT_NAMESPACE ? null : namespaceNames(ns);
}

/** Whether the request's principal may do `action` on `kind:name` (no log line: for filtering lists). */
export function may(access: AccessControl, req: FastifyRequest, action: Action, kind: ResourceKind, name: string): boolean {
  const a = authOf(req);
  if (a.via === 'bootstrap') return true;
  const v = scoped(access, req, kind, name);
  if (typeof v === 'string') return v === 'allow';
  // A token identity (OIDC) is no directory user: its claims are its principal.
  const p = a.principal.expiresAt !== undefined ? a.principal : access.principal(a.principal.user);
  return access.allows(p, action, kind, v.check, tenantNames(a.principal.namespace));
}

/** Throws 403 FORBIDDEN unless the request's principal may do `action` on `kind:name` (denials are logged). */
export function authorize(access: AccessControl, req: FastifyRequest, action: Action, kind: ResourceKind, name: string): void {
  const a = authOf(req);
  if (a.via === 'bootstrap') return;
  // A namespace administrator manages its namespaces' objects and does not see the others' (no existence leak).
  const v = scoped(access, req, kind, name);
  if (v === 'allow') return;
  if (v === 'hide') throw notFound(NAMESPACED[kind] ?? kind, name);
  const names = tenantNames(a.principal.namespace);
  const acc = names === null ? access.accessFor(a.principal, 'http', req.ip) : access.namespacedAccessFor(a.principal, names, 'http', req.ip);
  if (acc.can(action, kind, v.check)) return;
  const who = a.principal.user === null ? 'anonymous callers' : `user "${a.principal.user}"`;
  throw new HttpError(403, 'FORBIDDEN', `${who} may not ${action} ${kind}:${name}`);
}

/**
 * Throws 403 FORBIDDEN unless the request's principal may bind each topic filter to a stream or queue (Access.mayBind:
 * subscribe on every topic it matches; a binding is a standing subscription nobody filters).
 */
export function authorizeBindings(access: AccessControl, req: FastifyRequest, filters: readonly string[]): void {
  const a = authOf(req);
  if (a.via === 'bootstrap' || filters.length === 0) return;
  // A namespace administrator binds its namespaces' topics (the core keeps a binding inside its stream's namespace).
  if (filters.every((f) => scoped(access, req, 'topic', f) === 'allow')) return;
  const acc = access.accessFor(a.principal, 'http', req.ip);
  for (const f of filters) {
    if (acc.mayBind(f)) continue;
    const who = a.principal.user === null ? 'anonymous callers' : `user "${a.principal.user}"`;
    throw new HttpError(403, 'FORBIDDEN', `${who} may not bind topic:${f} (binding needs subscribe on every topic the filter matches)`);
  }
}

/** `admin cluster:*`: users, groups, policies, namespaces, other users' tokens, kicks, the log level. */
export function authorizeAdmin(access: AccessControl, req: FastifyRequest): void {
  authorize(access, req, 'admin', 'cluster', '*');
}

/**
 * Throws unless the caller administers some namespace (users, policies, namespaces' own pages): 403 FORBIDDEN as
 * authorizeAdmin for a plain user. What it may touch then is narrowed by `administers`.
 */
export function authorizeSomeAdmin(access: AccessControl, req: FastifyRequest): void {
  const s = adminScope(access, req);
  if (s === 'all' || s.size > 0) return;
  authorizeAdmin(access, req); // throws the usual 403 (and logs the denial)
}

/**
 * Throws unless the caller administers namespace `ns`: 404 `<what> "<name>"` for a namespace administrator (the
 * object is another namespace's: answered as absent), else authorizeAdmin's 403.
 */
export function authorizeAdminOf(access: AccessControl, req: FastifyRequest, ns: string, what: string, name: string): void {
  if (administers(access, req, ns)) return;
  if (namespaceAdmin(access, req)) throw notFound(what, name);
  authorizeAdmin(access, req);
}

export const DEFAULT_LIMIT = 100;
export const MAX_LIMIT = 1000;

/** Query schema of every list: `limit` (1-1000, default 100) and the opaque `cursor` of the previous page. */
export const PAGE_QUERY = {
  limit: { type: 'integer', minimum: 1, maximum: MAX_LIMIT, default: DEFAULT_LIMIT, description: 'items per page' },
  cursor: { type: 'string', maxLength: 2048, description: 'the `next` of the previous page' },
} as const;

/**
 * One page of `items` ordered by `key` (ascending, unique): the cursor is the last key returned, opaque to the
 * client (base64url), so a page after a deletion or an insertion goes on from where the previous one ended.
 */
export function paginate<T>(items: T[], key: (t: T) => string, q: { limit?: number; cursor?: string }): { items: T[]; next: string | null } {
  const limit = q.limit ?? DEFAULT_LIMIT;
  let after: string | null = null;
  if (q.cursor !== undefined && q.cursor !== '') {
    after = Buffer.from(q.cursor, 'base64url').toString('utf8');
    if (Buffer.from(after, 'utf8').toString('base64url') !== q.cursor) throw new FlowError('INVALID_ARGUMENT', 'malformed cursor');
  }
  const sorted = items.map((t) => [key(t), t] as const).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const rest = after === null ? sorted : sorted.filter(([k]) => k > after!);
  const page = rest.slice(0, limit);
  const next = rest.length > limit ? Buffer.from(page[page.length - 1][0], 'utf8').toString('base64url') : null;
  return { items: page.map(([, t]) => t), next };
}

/** An error as the envelope `{ error: { code, message } }` with its status and headers. */
export function errorReply(err: unknown): { status: number; code: string; message: string; headers: Record<string, string> } {
  if (err instanceof HttpError) return { status: err.statusCode, code: err.code, message: err.message, headers: err.headers };
  if (isFlowError(err)) return { status: STATUS[err.code] ?? 500, code: err.code, message: err.message, headers: {} };
  const e = err as { validation?: unknown; statusCode?: number; code?: string; message?: string };
  if (e.validation !== undefined) return { status: 400, code: 'INVALID_ARGUMENT', message: e.message ?? 'invalid request', headers: {} };
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    // fastify's own refusals (body too large, bad JSON, unsupported media type): keep the status, name it.
    const code =
      e.statusCode === 413
        ? 'LIMIT_EXCEEDED'
        : e.statusCode === 415
          ? 'UNSUPPORTED_MEDIA_TYPE'
          : e.statusCode === 404
            ? 'NOT_FOUND'
            : e.statusCode === 429
              ? 'RATE_LIMITED'
              : 'INVALID_ARGUMENT';
    return { status: e.statusCode, code, message: e.message ?? 'invalid request', headers: {} };
  }
  return { status: 500, code: 'INTERNAL', message: (err as Error)?.message ?? 'internal error', headers: {} };
}

export function sendError(reply: FastifyReply, err: unknown): FastifyReply {
  const r = errorReply(err);
  return reply
    .code(r.status)
    .headers(r.headers)
    .send({ error: { code: r.code, message: r.message } });
}

/** Schema pieces. */
export const NAME_PARAM = { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 1, maxLength: 1024 } } } as const;

export function notFound(what: string, name: string): FlowError {
  return new FlowError('NOT_FOUND', `${what} "${name}" does not exist`);
}
