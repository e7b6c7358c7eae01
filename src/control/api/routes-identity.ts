/**
 * Identities: login sessions, users, groups, policies, namespaces and API tokens. Managing them is `admin
 * cluster:*`, except what concerns the caller: reading itself, changing its own password, its own tokens.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { FlowError } from '../../core/index.js';
import { parseDuration } from '../../util/units.js';
import type { GroupDef, NamespaceDef, TokenInfo, UserInfo } from '../directory.js';
import type { PolicyDef } from '../policy.js';
import { PUBLIC_MAX_BODY, SESSION_COOKIE } from './auth.js';
import { HttpError, NAME_PARAM, PAGE_QUERY, authOf, authorizeAdmin, may, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';

const iso = (ms: number | null | undefined) => (ms === null || ms === undefined || ms === 0 ? null : new Date(ms).toISOString());

export const userView = (u: UserInfo) => ({ username: u.username, groups: u.groups, namespace: u.namespace, mechanisms: u.mechanisms, source: u.source, createdAt: iso(u.createdAt) });
export const groupView = (g: GroupDef & { members?: string[] }) => ({ name: g.name, description: g.description ?? null, members: g.members ?? [], createdAt: iso(g.createdAt) });
export const policyView = (p: PolicyDef) => ({
  name: p.name,
  effect: p.effect,
  actions: p.actions,
  resources: p.resources,
  principals: p.principals,
  description: p.description ?? null,
  source: p.source ?? 'api',
  createdAt: iso(p.createdAt),
});
export const tokenView = (t: TokenInfo) => ({ id: t.id, user: t.user, description: t.description ?? null, createdAt: iso(t.createdAt), expiresAt: iso(t.expiresAt) });

const STRINGS = { type: 'array', items: { type: 'string', minLength: 1, maxLength: 1024 }, maxItems: 1000 } as const;
const QUOTAS = {
  type: 'object',
  additionalProperties: false,
  properties: Object.fromEntries(['maxConnections', 'publishRate', 'bytesInRate', 'bytesOutRate', 'maxStorageBytes'].map((k) => [k, { type: ['number', 'null'], minimum: 0 }])),
} as const;
const POLICY_BODY = {
  effect: { type: 'string', enum: ['allow', 'deny'] },
  actions: { ...STRINGS, minItems: 1, description: 'publish, subscribe, create, delete, describe, alter, admin or *' },
  resources: { ...STRINGS, minItems: 1, description: 'kind:pattern (topic:a/+/#, stream:orders-*, queue:q, exchange:x, group:g, cluster:*, *:*)' },
  principals: { ...STRINGS, minItems: 1, description: 'user:NAME, group:NAME or everyone' },
  description: { type: 'string', maxLength: 1024 },
} as const;

function isSelf(req: FastifyRequest, username: string): boolean {
  const a = authOf(req);
  return a.via !== 'bootstrap' && a.via !== 'anonymous' && a.principal.user === username;
}

function ttlMs(ttl: string | number | undefined): number | undefined {
  if (ttl === undefined) return undefined;
  const ms = parseDuration(ttl);
  if (ms === null || ms <= 0) throw new FlowError('INVALID_ARGUMENT', '"ttl" must be a duration such as 30d, 12h or a number of ms');
  return ms;
}

export function identityRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access, sessions } = ctx;
  const dir = access.directory;

  // ------------------------------------------------------------------------------------------ sessions

  app.post<{ Body: { username: string; password: string } }>(
    '/api/v1/login',
    {
      config: { rateLimit: { max: ctx.loginRateLimit, timeWindow: 60_000 } },
      // Anyone may call it: a user name and a password, not the 1 MiB an authenticated request may carry.
      bodyLimit: PUBLIC_MAX_BODY,
      schema: {
        tags: ['session'],
        summary: 'Log in (dashboard): sets the session cookie, answers the CSRF token; rate-limited per address',
        security: [],
        body: {
          type: 'object',
          required: ['username', 'password'],
          additionalProperties: false,
          properties: { username: { type: 'string', minLength: 1, maxLength: 256 }, password: { type: 'string', minLength: 1, maxLength: 1024 } },
        },
      },
    },
    async (req, reply) => {
      const { username, password } = req.body;
      const outcome = await access.password(username, password, req.socket.remoteAddress, 'http');
      if (outcome.verdict === 'busy') throw new HttpError(503, 'BUSY', 'too many password checks under way or failed from this address: retry later', { 'retry-after': '1' });
      // No WWW-Authenticate here: a browser would pop up its own login dialog over the dashboard's.
      if (outcome.verdict !== 'ok') {
        ctx.logger.warn({ remote: req.socket.remoteAddress, username }, 'admin API login refused: invalid username or password');
        throw new HttpError(401, 'UNAUTHENTICATED', 'invalid username or password');
      }
      if (dir.lookup(username) === undefined) throw new HttpError(403, 'FORBIDDEN', 'dashboard sessions are for users of the directory');
      const s = await sessions.create(username);
      void reply.setCookie(SESSION_COOKIE, s.cookie, { httpOnly: true, sameSite: 'strict', path: '/', expires: new Date(s.expiresAt), secure: req.protocol === 'https' });
      ctx.logger.info({ user: username, remote: req.socket.remoteAddress }, 'dashboard login');
      return { user: username, groups: outcome.principal.groups, namespace: outcome.principal.namespace, csrfToken: s.csrfToken, expiresAt: iso(s.expiresAt) };
    },
  );

  app.post('/api/v1/logout', { schema: { tags: ['session'], summary: 'End the dashboard session (clears the cookie)' } }, async (req, reply) => {
    const a = authOf(req);
    if (a.session) await sessions.delete(a.session.key);
    void reply.clearCookie(SESSION_COOKIE, { path: '/' });
    return reply.code(204).send();
  });

  app.get('/api/v1/session', { schema: { tags: ['session'], summary: 'Who the caller is (and the CSRF token of its session)' } }, async (req) => {
    const a = authOf(req);
    return {
      user: a.principal.user,
      groups: a.principal.groups,
      namespace: a.principal.namespace,
      via: a.via,
      csrfToken: a.session?.csrfToken ?? null,
      expiresAt: iso(a.session?.expiresAt),
      admin: may(access, req, 'admin', 'cluster', '*'),
    };
  });

  // ------------------------------------------------------------------------------------------ users

  app.get<{ Querystring: { limit?: number; cursor?: string } }>(
    '/api/v1/users',
    { schema: { tags: ['users'], summary: 'Users of the directory', querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY } } },
    async (req) => {
      authorizeAdmin(access, req);
      return paginate(dir.listUsers().map(userView), (u) => u.username, req.query);
    },
  );

  app.post<{ Body: { username: string; password: string; groups?: string[]; namespace?: string } }>(
    '/api/v1/users',
    {
      schema: {
        tags: ['users'],
        summary: 'Add a user (the password is stored as scrypt and SCRAM credentials only)',
        body: {
          type: 'object',
          required: ['username', 'password'],
          additionalProperties: false,
          properties: { username: { type: 'string', minLength: 1, maxLength: 256 }, password: { type: 'string', minLength: 1, maxLength: 1024 }, groups: STRINGS, namespace: { type: 'string' } },
        },
      },
    },
    async (req, reply) => {
      authorizeAdmin(access, req);
      const u = await dir.addUser({ ...req.body, source: 'api' });
      ctx.logger.info({ user: u.username, groups: u.groups, by: req.auth?.principal.user ?? null }, 'user added');
      return reply.code(201).send(userView(u));
    },
  );

  app.get<{ Params: { name: string } }>('/api/v1/users/:name', { schema: { tags: ['users'], summary: 'One user', params: NAME_PARAM } }, async (req) => {
    if (!isSelf(req, req.params.name)) authorizeAdmin(access, req);
    const u = dir.user(req.params.name);
    if (!u) throw notFound('user', req.params.name);
    return userView(u);
  });

  app.patch<{ Params: { name: string }; Body: { password?: string; groups?: string[]; namespace?: string } }>(
    '/api/v1/users/:name',
    {
      schema: {
        tags: ['users'],
        summary: 'Change a password (a user may change its own), groups or namespace',
        params: NAME_PARAM,
        body: { type: 'object', additionalProperties: false, properties: { password: { type: 'string', minLength: 1, maxLength: 1024 }, groups: STRINGS, namespace: { type: 'string' } } },
      },
    },
    async (req) => {
      const { name } = req.params;
      const { password, groups, namespace } = req.body ?? {};
      if (groups !== undefined || namespace !== undefined || !isSelf(req, name)) authorizeAdmin(access, req);
      if (!dir.user(name)) throw notFound('user', name);
      if (password !== undefined) await dir.setPassword(name, password);
      if (groups !== undefined || namespace !== undefined) await dir.updateUser(name, { groups, namespace });
      ctx.logger.info({ user: name, password: password !== undefined, groups, namespace, by: req.auth?.principal.user ?? null }, 'user changed');
      return userView(dir.user(name)!);
    },
  );

  app.delete<{ Params: { name: string } }>('/api/v1/users/:name', { schema: { tags: ['users'], summary: 'Delete a user (its tokens and sessions end)', params: NAME_PARAM } }, async (req, reply) => {
    authorizeAdmin(access, req);
    await dir.deleteUser(req.params.name);
    ctx.logger.info({ user: req.params.name, by: req.auth?.principal.user ?? null }, 'user deleted');
    return reply.code(204).send();
  });

  // ------------------------------------------------------------------------------------------ groups

  app.get<{ Querystring: { limit?: number; cursor?: string } }>(
    '/api/v1/groups',
    { schema: { tags: ['groups'], summary: 'Groups (defined, or named by a user) with their members', querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY } } },
    async (req) => {
      authorizeAdmin(access, req);
      return paginate(dir.listGroups().map(groupView), (g) => g.name, req.query);
    },
  );

  app.post<{ Body: { name: string; description?: string } }>(
    '/api/v1/groups',
    {
      schema: {
        tags: ['groups'],
        summary: 'Define a group',
        body: { type: 'object', required: ['name'], additionalProperties: false, properties: { name: { type: 'string' }, description: { type: 'string', maxLength: 1024 } } },
      },
    },
    async (req, reply) => {
      authorizeAdmin(access, req);
      if (dir.listGroups().some((g) => g.name === req.body.name && g.createdAt !== 0)) throw new FlowError('ALREADY_EXISTS', `group "${req.body.name}" already exists`);
      const g = await dir.putGroup(req.body);
      return reply.code(201).send(groupView(dir.listGroups().find((x) => x.name === g.name) ?? g));
    },
  );

  app.get<{ Params: { name: string } }>('/api/v1/groups/:name', { schema: { tags: ['groups'], summary: 'One group', params: NAME_PARAM } }, async (req) => {
    authorizeAdmin(access, req);
    const g = dir.listGroups().find((x) => x.name === req.params.name);
    if (!g) throw notFound('group', req.params.name);
    return groupView(g);
  });

  app.delete<{ Params: { name: string } }>('/api/v1/groups/:name', { schema: { tags: ['groups'], summary: 'Delete a group without members', params: NAME_PARAM } }, async (req, reply) => {
    authorizeAdmin(access, req);
    await dir.deleteGroup(req.params.name);
    return reply.code(204).send();
  });

  // ------------------------------------------------------------------------------------------ policies

  const findPolicy = (name: string) => dir.policies.defs().find((p) => p.name === name);

  app.get<{ Querystring: { limit?: number; cursor?: string } }>(
    '/api/v1/policies',
    { schema: { tags: ['policies'], summary: 'Authorization policies', querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY } } },
    async (req) => {
      authorizeAdmin(access, req);
      return paginate(dir.policies.defs().map(policyView), (p) => p.name, req.query);
    },
  );

  app.post<{ Body: Omit<PolicyDef, 'createdAt' | 'source'> }>(
    '/api/v1/policies',
    {
      schema: {
        tags: ['policies'],
        summary: 'Add a policy (applies to open connections at their next request)',
        body: { type: 'object', required: ['name', 'effect', 'actions', 'resources', 'principals'], additionalProperties: false, properties: { name: { type: 'string' }, ...POLICY_BODY } },
      },
    },
    async (req, reply) => {
      authorizeAdmin(access, req);
      if (findPolicy(req.body.name)) throw new FlowError('ALREADY_EXISTS', `policy "${req.body.name}" already exists`);
      const p = await dir.putPolicy({ ...req.body, source: 'api' });
      ctx.logger.info({ policy: p.name, by: req.auth?.principal.user ?? null }, 'policy added');
      return reply.code(201).send(policyView(p));
    },
  );

  app.get<{ Params: { name: string } }>('/api/v1/policies/:name', { schema: { tags: ['policies'], summary: 'One policy', params: NAME_PARAM } }, async (req) => {
    authorizeAdmin(access, req);
    const p = findPolicy(req.params.name);
    if (!p) throw notFound('policy', req.params.name);
    return policyView(p);
  });

  app.put<{ Params: { name: string }; Body: Omit<PolicyDef, 'createdAt' | 'source' | 'name'> }>(
    '/api/v1/policies/:name',
    {
      schema: {
        tags: ['policies'],
        summary: 'Create or replace a policy',
        params: NAME_PARAM,
        body: { type: 'object', required: ['effect', 'actions', 'resources', 'principals'], additionalProperties: false, properties: POLICY_BODY },
      },
    },
    async (req, reply) => {
      authorizeAdmin(access, req);
      const prev = findPolicy(req.params.name);
      const p = await dir.putPolicy({ ...req.body, name: req.params.name, source: prev?.source ?? 'api', createdAt: prev?.createdAt });
      ctx.logger.info({ policy: p.name, replaced: prev !== undefined, by: req.auth?.principal.user ?? null }, 'policy put');
      return reply.code(prev ? 200 : 201).send(policyView(p));
    },
  );

  app.delete<{ Params: { name: string } }>('/api/v1/policies/:name', { schema: { tags: ['policies'], summary: 'Delete a policy', params: NAME_PARAM } }, async (req, reply) => {
    authorizeAdmin(access, req);
    await dir.deletePolicy(req.params.name);
    ctx.logger.info({ policy: req.params.name, by: req.auth?.principal.user ?? null }, 'policy deleted');
    return reply.code(204).send();
  });

  // ------------------------------------------------------------------------------------------ namespaces

  const namespaceView = (n: NamespaceDef) => {
    const f = access.quotas.figures()[n.name];
    return {
      name: n.name,
      description: n.description ?? null,
      quotas: n.quotas,
      createdAt: iso(n.createdAt),
      usage: {
        users: dir.listUsers().filter((u) => u.namespace === n.name).length,
        connections: f?.connections ?? 0,
        throttled: f?.throttled ?? 0,
        throttledMs: f?.throttledMs ?? 0,
        refusedConnections: f?.refusedConnections ?? 0,
      },
    };
  };

  app.get<{ Querystring: { limit?: number; cursor?: string } }>(
    '/api/v1/namespaces',
    { schema: { tags: ['namespaces'], summary: 'Namespaces with quotas and usage', querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY } } },
    async (req) => {
      authorizeAdmin(access, req);
      return paginate(dir.listNamespaces().map(namespaceView), (n) => n.name, req.query);
    },
  );

  app.post<{ Body: { name: string; description?: string; quotas?: Record<string, number | null> } }>(
    '/api/v1/namespaces',
    {
      schema: {
        tags: ['namespaces'],
        summary: 'Add a namespace',
        body: { type: 'object', required: ['name'], additionalProperties: false, properties: { name: { type: 'string' }, description: { type: 'string', maxLength: 1024 }, quotas: QUOTAS } },
      },
    },
    async (req, reply) => {
      authorizeAdmin(access, req);
      if (dir.namespace(req.body.name)) throw new FlowError('ALREADY_EXISTS', `namespace "${req.body.name}" already exists`);
      const n = await dir.putNamespace(req.body as { name: string; description?: string; quotas?: Record<string, number> });
      return reply.code(201).send(namespaceView(n));
    },
  );

  app.get<{ Params: { name: string } }>('/api/v1/namespaces/:name', { schema: { tags: ['namespaces'], summary: 'One namespace', params: NAME_PARAM } }, async (req) => {
    authorizeAdmin(access, req);
    const n = dir.namespace(req.params.name);
    if (!n) throw notFound('namespace', req.params.name);
    return namespaceView(n);
  });

  app.patch<{ Params: { name: string }; Body: { description?: string; quotas?: Record<string, number | null> } }>(
    '/api/v1/namespaces/:name',
    {
      schema: {
        tags: ['namespaces'],
        summary: 'Change a namespace: quotas given are set (null removes one), others kept',
        params: NAME_PARAM,
        body: { type: 'object', additionalProperties: false, properties: { description: { type: 'string', maxLength: 1024 }, quotas: QUOTAS } },
      },
    },
    async (req) => {
      authorizeAdmin(access, req);
      const prev = dir.namespace(req.params.name);
      if (!prev) throw notFound('namespace', req.params.name);
      const quotas = { ...prev.quotas, ...(req.body?.quotas ?? {}) } as Record<string, number>;
      const n = await dir.putNamespace({ name: prev.name, description: req.body?.description ?? prev.description, quotas });
      ctx.logger.info({ namespace: n.name, quotas: n.quotas, by: req.auth?.principal.user ?? null }, 'namespace changed');
      return namespaceView(n);
    },
  );

  app.delete<{ Params: { name: string } }>('/api/v1/namespaces/:name', { schema: { tags: ['namespaces'], summary: 'Delete a namespace without users', params: NAME_PARAM } }, async (req, reply) => {
    authorizeAdmin(access, req);
    await dir.deleteNamespace(req.params.name);
    return reply.code(204).send();
  });

  // ------------------------------------------------------------------------------------------ tokens

  app.get<{ Querystring: { user?: string; limit?: number; cursor?: string } }>(
    '/api/v1/tokens',
    {
      schema: {
        tags: ['tokens'],
        summary: "API tokens: the caller's own; administrators see every user's (or ?user=)",
        querystring: { type: 'object', additionalProperties: false, properties: { user: { type: 'string' }, ...PAGE_QUERY } },
      },
    },
    async (req) => {
      const me = authOf(req).principal.user;
      let user = req.query.user;
      if (user === undefined || user !== me) {
        if (!may(access, req, 'admin', 'cluster', '*')) {
          if (user !== undefined || me === null) authorizeAdmin(access, req); // throws
          user = me!;
        }
      }
      return paginate(dir.listTokens(user).map(tokenView), (t) => t.id, req.query);
    },
  );

  app.post<{ Body: { user?: string; description?: string; ttl?: string | number } }>(
    '/api/v1/tokens',
    {
      schema: {
        tags: ['tokens'],
        summary: 'Create an API token (for the caller unless `user` names another, which needs admin); the secret is in this answer only',
        body: {
          type: 'object',
          additionalProperties: false,
          properties: { user: { type: 'string' }, description: { type: 'string', maxLength: 1024 }, ttl: { type: ['string', 'number'], description: 'lifetime: 30d, 12h, ms; none: no expiry' } },
        },
      },
    },
    async (req, reply) => {
      const me = authOf(req).principal.user;
      const body = req.body ?? {};
      const user = body.user ?? me;
      if (user === null) throw new FlowError('INVALID_ARGUMENT', '"user" is required: this caller is not a user');
      if (user !== me || authOf(req).via === 'anonymous') authorizeAdmin(access, req);
      const t = await dir.createToken({ user, description: body.description, ttlMs: ttlMs(body.ttl) });
      ctx.logger.info({ token: t.info.id, user, by: me }, 'API token created');
      return reply.code(201).send({ ...tokenView(t.info), token: t.token });
    },
  );

  app.delete<{ Params: { id: string } }>(
    '/api/v1/tokens/:id',
    { schema: { tags: ['tokens'], summary: 'Revoke an API token (own, or any with admin)', params: { type: 'object', required: ['id'], properties: { id: { type: 'string', minLength: 1, maxLength: 128 } } } } },
    async (req, reply) => {
      const t = dir.listTokens().find((x) => x.id === req.params.id);
      if (!t || t.user !== authOf(req).principal.user) authorizeAdmin(access, req);
      if (!t) throw notFound('token', req.params.id);
      await dir.deleteToken(t.id);
      return reply.code(204).send();
    },
  );
}
