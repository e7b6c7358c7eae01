/** Policies: list, create, read, replace, delete. */
import type { FastifyInstance } from 'fastify';
import { FlowError } from '../../core/index.js';
import type { PolicyDef } from '../policy.js';
import { NAME_PARAM, PAGE_QUERY, authorizeAdmin, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';
import { policyView, POLICY_BODY } from './identity-common.js';

export function policyRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access } = ctx;
  const dir = access.directory;

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
        body: {
          type: 'object',
          required: ['name', 'effect', 'actions', 'resources', 'principals'],
          additionalProperties: false,
          properties: { name: { type: 'string' }, ...POLICY_BODY },
        },
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

  app.get<{ Params: { name: string } }>(
    '/api/v1/policies/:name',
    { schema: { tags: ['policies'], summary: 'One policy', params: NAME_PARAM } },
    async (req) => {
      authorizeAdmin(access, req);
      const p = findPolicy(req.params.name);
      if (!p) throw notFound('policy', req.params.name);
      return policyView(p);
    },
  );

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

  app.delete<{ Params: { name: string } }>(
    '/api/v1/policies/:name',
    { schema: { tags: ['policies'], summary: 'Delete a policy', params: NAME_PARAM } },
    async (req, reply) => {
      authorizeAdmin(access, req);
      await dir.deletePolicy(req.params.name);
      ctx.logger.info({ policy: req.params.name, by: req.auth?.principal.user ?? null }, 'policy deleted');
      return reply.code(204).send();
    },
  );
}
