/**
 * What every admin API route file shares: the HTTP refusal type, the error envelope's status mapping, the
 * authorization check, pagination, and the request decorations the authentication hook sets.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { FlowError, isFlowError } from '../../core/index.js';
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

/** Whether the request's principal may do `action` on `kind:name` (no log line: for filtering lists). */
export function may(access: AccessControl, req: FastifyRequest, action: Action, kind: ResourceKind, name: string): boolean {
  const a = authOf(req);
  if (a.via === 'bootstrap') return true;
  // A token identity (OIDC) is no directory user: its claims are its principal.
  return access.allows(a.principal.expiresAt !== undefined ? a.principal : access.principal(a.principal.user), action, kind, name);
}

/** Throws 403 FORBIDDEN unless the request's principal may do `action` on `kind:name` (denials are logged). */
export function authorize(access: AccessControl, req: FastifyRequest, action: Action, kind: ResourceKind, name: string): void {
  const a = authOf(req);
  if (a.via === 'bootstrap') return;
  if (access.accessFor(a.principal, 'http', req.ip).can(action, kind, name)) return;
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
