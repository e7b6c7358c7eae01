/** Login sessions of the dashboard: log in, log out, who the caller is. */
import type { FastifyInstance } from 'fastify';
import { PUBLIC_MAX_BODY, SESSION_COOKIE } from './auth.js';
import { HttpError, adminScope, authOf, may, principalScope, type AdminScope } from './common.js';
import type { ApiContext } from './types.js';
import { iso } from './identity-common.js';

export function sessionRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access, sessions } = ctx;
  const dir = access.directory;
  const namespacesOf = (s: AdminScope): string[] => (s === 'all' ? dir.listNamespaces().map((n) => n.name) : [...s].sort());
  const adminNamespaces = (req: Parameters<typeof authOf>[0]): string[] => namespacesOf(adminScope(access, req));

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
      if (outcome.verdict === 'busy')
        throw new HttpError(503, 'BUSY', 'too many password checks under way or failed from this address: retry later', { 'retry-after': '1' });
      // No WWW-Authenticate here: a browser would pop up its own login dialog over the dashboard's.
      if (outcome.verdict !== 'ok') {
        ctx.logger.warn({ remote: req.socket.remoteAddress, username }, 'admin API login refused: invalid username or password');
        throw new HttpError(401, 'UNAUTHENTICATED', 'invalid username or password');
      }
      // An OIDC token (the password field holds it) opens a session for the token's user, with its claims.
      const p = outcome.principal;
      const viaToken = p.expiresAt !== undefined && p.user !== null;
      if (!viaToken && dir.lookup(username) === undefined) throw new HttpError(403, 'FORBIDDEN', 'dashboard sessions are for users of the directory');
      const user = viaToken ? p.user! : username;
      const s = await sessions.create(user, viaToken ? { groups: [...p.groups], namespace: p.namespace, expiresAt: p.expiresAt! } : undefined);
      void reply.setCookie(SESSION_COOKIE, s.cookie, {
        httpOnly: true,
        sameSite: 'strict',
        path: '/',
        expires: new Date(s.expiresAt),
        secure: req.protocol === 'https',
      });
      ctx.logger.info({ user, remote: req.socket.remoteAddress, token: viaToken || undefined }, 'dashboard login');
      const scope = principalScope(access, viaToken ? p : access.principal(user));
      return {
        user,
        groups: outcome.principal.groups,
        namespace: outcome.principal.namespace,
        csrfToken: s.csrfToken,
        expiresAt: iso(s.expiresAt),
        admin: scope === 'all',
        adminNamespaces: namespacesOf(scope),
      };
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
      expiresAt: iso(a.session?.expiresAt ?? a.principal.expiresAt),
      admin: may(access, req, 'admin', 'cluster', '*'),
      // The namespaces the caller administers (every one for a global administrator): what the dashboard shows.
      adminNamespaces: adminNamespaces(req),
    };
  });
}
