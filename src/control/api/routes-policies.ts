/**
 * Policies: list, create, read, replace, delete. A global administrator manages them all; a namespace administrator
 * (`allow admin namespace:t1`) only those scoped to its namespaces (`namespace: "t1"`): the others are absent for it
 * (404, left out of the list), and what it writes must be scoped to one of its namespaces.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { FlowError } from '../../core/index.js';
import type { PolicyDef } from '../policy.js';
import { HttpError, NAME_PARAM, PAGE_QUERY, adminScope, administers, authorizeSomeAdmin, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';
import { policyView, POLICY_BODY } from './identity-common.js';

type PolicyBody = Omit<PolicyDef, 'createdAt' | 'source' | 'name' | 'namespace'> & { namespace?: string | null };

export function policyRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access } = ctx;
  const dir = access.directory;

  const findPolicy = (name: string) => dir.policies.defs().find((p) => p.name === name);
  /** Whether the caller may see and change the policy (a global one needs a global administrator). */
  const mine = (req: FastifyRequest, p: PolicyDef) => (p.namespace === undefined ? adminScope(access, req) === 'all' : administers(access, req, p.namespace));
  /** The policy of that name when the caller may see it; 404 otherwise (the same answer as for no such policy). */
  const visible = (req: FastifyRequest, name: string) => {
    const p = findPolicy(name);
    if (!p || !mine(req, p)) throw notFound('policy', name);
    return p;
  };
  /** The body's namespace, checked: a namespace administrator writes only inside its namespaces. */
  const scopeOf = (req: FastifyRequest, body: PolicyBody): string | undefined => {
    const ns = body.namespace ?? undefined;
    const scope = adminScope(access, req);
    if (ns === undefined) {
      if (scope === 'all') return undefined;
      throw new HttpError(403, 'FORBIDDEN', 'a namespace administrator writes policies scoped to its namespace: give "namespace"');
    }
    if (!administers(access, req, ns)) throw new HttpError(403, 'FORBIDDEN', `you do not administer namespace "${ns}"`);
    if (!dir.namespace(ns)) throw notFound('namespace', ns);
    return ns;
  };
  const def = (body: PolicyBody, name: string, namespace: string | undefined) => {
    const { namespace: _ns, ...rest } = body;
    return { ...rest, name, ...(namespace === undefined ? {} : { namespace }) };
  };

  app.get<{ Querystring: { limit?: number; cursor?: string; namespace?: string } }>(
    '/api/v1/policies',
    {
      schema: {
        tags: ['policies'],
        summary: 'Authorization policies (a namespace administrator: those of its namespaces)',
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { ...PAGE_QUERY, namespace: { type: 'string', maxLength: 256, description: 'only the policies scoped to this namespace' } },
        },
      },
    },
    async (req) => {
      authorizeSomeAdmin(access, req);
      const { namespace } = req.query;
      const ps = dir.policies.defs().filter((p) => mine(req, p) && (namespace === undefined || p.namespace === namespace));
      return paginate(ps.map(policyView), (p) => p.name, req.query);
    },
  );

  app.post<{ Body: PolicyBody & { name: string } }>(
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
      authorizeSomeAdmin(access, req);
      const namespace = scopeOf(req, req.body);
      if (findPolicy(req.body.name)) throw new FlowError('ALREADY_EXISTS', `policy "${req.body.name}" already exists`);
      const p = await dir.putPolicy({ ...def(req.body, req.body.name, namespace), source: 'api' });
      ctx.logger.info({ policy: p.name, namespace: p.namespace ?? null, by: req.auth?.principal.user ?? null }, 'policy added');
      return reply.code(201).send(policyView(p));
    },
  );

  app.get<{ Params: { name: string } }>(
    '/api/v1/policies/:name',
    { schema: { tags: ['policies'], summary: 'One policy', params: NAME_PARAM } },
    async (req) => {
      authorizeSomeAdmin(access, req);
      return policyView(visible(req, req.params.name));
    },
  );

  app.put<{ Params: { name: string }; Body: PolicyBody }>(
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
      authorizeSomeAdmin(access, req);
      const namespace = scopeOf(req, req.body);
      const prev = findPolicy(req.params.name);
      // Another namespace's (or a global) policy of that name: names are one space, so it cannot be made here.
      if (prev && !mine(req, prev)) throw new FlowError('ALREADY_EXISTS', `policy name "${req.params.name}" is taken`);
      const p = await dir.putPolicy({ ...def(req.body, req.params.name, namespace), source: prev?.source ?? 'api', createdAt: prev?.createdAt });
      ctx.logger.info({ policy: p.name, namespace: p.namespace ?? null, replaced: prev !== undefined, by: req.auth?.principal.user ?? null }, 'policy put');
      return reply.code(prev ? 200 : 201).send(policyView(p));
    },
  );

  app.delete<{ Params: { name: string } }>(
    '/api/v1/policies/:name',
    { schema: { tags: ['policies'], summary: 'Delete a policy', params: NAME_PARAM } },
    async (req, reply) => {
      authorizeSomeAdmin(access, req);
      if (adminScope(access, req) !== 'all') visible(req, req.params.name);
      await dir.deletePolicy(req.params.name);
      ctx.logger.info({ policy: req.params.name, by: req.auth?.principal.user ?? null }, 'policy deleted');
      return reply.code(204).send();
    },
  );
}
