/**
 * Users: list, create, read, change (a user may change its own password), delete. A namespace administrator sees and
 * manages the users of its namespaces only (see scopeGuard).
 */
import type { FastifyInstance } from 'fastify';
import { DEFAULT_NAMESPACE } from '../../core/index.js';
import { HttpError, NAME_PARAM, PAGE_QUERY, adminScope, administers, authorizeSomeAdmin, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';
import { isSelf, userView, STRINGS } from './identity-common.js';
import { userScopeGuard } from './user-scope.js';

/** A NATS user public NKey: `U` and 55 base32 letters (checked fully by the directory). */
const NKEY = { type: 'string', pattern: '^U[A-Z2-7]{55}$', description: 'NATS user public NKey (U...)' } as const;

export function userRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access } = ctx;
  const dir = access.directory;
  const guard = userScopeGuard(access);

  app.get<{ Querystring: { limit?: number; cursor?: string } }>(
    '/api/v1/users',
    { schema: { tags: ['users'], summary: 'Users of the directory', querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY } } },
    async (req) => {
      authorizeSomeAdmin(access, req);
      const users = dir.listUsers().filter((u) => administers(access, req, u.namespace));
      return paginate(users.map(userView), (u) => u.username, req.query);
    },
  );

  app.post<{ Body: { username: string; password?: string; nkey?: string; groups?: string[]; namespace?: string } }>(
    '/api/v1/users',
    {
      schema: {
        tags: ['users'],
        summary: 'Add a user (the password is stored as scrypt and SCRAM credentials only; nkey: a NATS user public NKey)',
        body: {
          type: 'object',
          required: ['username'],
          anyOf: [{ required: ['password'] }, { required: ['nkey'] }],
          additionalProperties: false,
          properties: {
            username: { type: 'string', minLength: 1, maxLength: 256 },
            password: { type: 'string', minLength: 1, maxLength: 1024 },
            nkey: NKEY,
            groups: STRINGS,
            namespace: { type: 'string' },
          },
        },
      },
    },
    async (req, reply) => {
      authorizeSomeAdmin(access, req);
      const scope = adminScope(access, req);
      // A namespace administrator's user lands in its namespace (it must say which when it has several).
      const namespace = req.body.namespace ?? (scope === 'all' || scope.size !== 1 ? undefined : [...scope][0]);
      if (!administers(access, req, namespace ?? DEFAULT_NAMESPACE)) {
        throw new HttpError(403, 'FORBIDDEN', `you do not administer namespace "${namespace ?? DEFAULT_NAMESPACE}": give "namespace"`);
      }
      guard.groups(req, req.body.groups ?? [], []);
      const u = await dir.addUser({ ...req.body, ...(namespace === undefined ? {} : { namespace }), source: 'api' });
      ctx.logger.info({ user: u.username, groups: u.groups, by: req.auth?.principal.user ?? null }, 'user added');
      return reply.code(201).send(userView(u));
    },
  );

  app.get<{ Params: { name: string } }>('/api/v1/users/:name', { schema: { tags: ['users'], summary: 'One user', params: NAME_PARAM } }, async (req) => {
    if (!isSelf(req, req.params.name)) guard.target(req, req.params.name);
    const u = dir.user(req.params.name);
    if (!u) throw notFound('user', req.params.name);
    return userView(u);
  });

  app.patch<{ Params: { name: string }; Body: { password?: string; nkey?: string | null; groups?: string[]; namespace?: string } }>(
    '/api/v1/users/:name',
    {
      schema: {
        tags: ['users'],
        summary: 'Change a password (a user may change its own), NATS nkey (null removes it), groups or namespace',
        params: NAME_PARAM,
        body: {
          type: 'object',
          additionalProperties: false,
          properties: {
            password: { type: 'string', minLength: 1, maxLength: 1024 },
            nkey: { ...NKEY, type: ['string', 'null'] },
            groups: STRINGS,
            namespace: { type: 'string' },
          },
        },
      },
    },
    async (req) => {
      const { name } = req.params;
      const { password, nkey, groups, namespace } = req.body ?? {};
      if (groups !== undefined || namespace !== undefined || nkey !== undefined || !isSelf(req, name)) {
        guard.target(req, name, true);
        if (namespace !== undefined && !administers(access, req, namespace)) {
          throw new HttpError(403, 'FORBIDDEN', `you do not administer namespace "${namespace}"`);
        }
        if (groups !== undefined) guard.groups(req, groups, dir.user(name)?.groups ?? []);
      }
      if (!dir.user(name)) throw notFound('user', name);
      if (password !== undefined) await dir.setPassword(name, password);
      if (nkey !== undefined) await dir.setNkey(name, nkey);
      if (groups !== undefined || namespace !== undefined) await dir.updateUser(name, { groups, namespace });
      ctx.logger.info({ user: name, password: password !== undefined, nkey, groups, namespace, by: req.auth?.principal.user ?? null }, 'user changed');
      return userView(dir.user(name)!);
    },
  );

  app.delete<{ Params: { name: string } }>(
    '/api/v1/users/:name',
    { schema: { tags: ['users'], summary: 'Delete a user (its tokens and sessions end)', params: NAME_PARAM } },
    async (req, reply) => {
      guard.target(req, req.params.name, true);
      await dir.deleteUser(req.params.name);
      ctx.logger.info({ user: req.params.name, by: req.auth?.principal.user ?? null }, 'user deleted');
      return reply.code(204).send();
    },
  );
}
