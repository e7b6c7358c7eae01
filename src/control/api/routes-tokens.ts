/** API tokens: list (a user its own), create, revoke. */
import type { FastifyInstance } from 'fastify';
import { FlowError } from '../../core/index.js';
import { PAGE_QUERY, authOf, authorizeAdmin, may, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';
import { ttlMs, tokenView } from './identity-common.js';

export function tokenRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access } = ctx;
  const dir = access.directory;

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
          properties: {
            user: { type: 'string' },
            description: { type: 'string', maxLength: 1024 },
            ttl: { type: ['string', 'number'], description: 'lifetime: 30d, 12h, ms; none: no expiry' },
          },
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
    {
      schema: {
        tags: ['tokens'],
        summary: 'Revoke an API token (own, or any with admin)',
        params: { type: 'object', required: ['id'], properties: { id: { type: 'string', minLength: 1, maxLength: 128 } } },
      },
    },
    async (req, reply) => {
      const t = dir.listTokens().find((x) => x.id === req.params.id);
      if (!t || t.user !== authOf(req).principal.user) authorizeAdmin(access, req);
      if (!t) throw notFound('token', req.params.id);
      await dir.deleteToken(t.id);
      return reply.code(204).send();
    },
  );
}
