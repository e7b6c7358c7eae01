/** Namespaces: list (with quotas and usage), create, read, change, delete. */
import type { FastifyInstance } from 'fastify';
import { FlowError } from '../../core/index.js';
import type { NamespaceDef } from '../directory.js';
import { NAME_PARAM, PAGE_QUERY, authorizeAdmin, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';
import { iso, QUOTAS } from './identity-common.js';

export function namespaceRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access } = ctx;
  const dir = access.directory;

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
    {
      schema: {
        tags: ['namespaces'],
        summary: 'Namespaces with quotas and usage',
        querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY },
      },
    },
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
        body: {
          type: 'object',
          required: ['name'],
          additionalProperties: false,
          properties: { name: { type: 'string' }, description: { type: 'string', maxLength: 1024 }, quotas: QUOTAS },
        },
      },
    },
    async (req, reply) => {
      authorizeAdmin(access, req);
      if (dir.namespace(req.body.name)) throw new FlowError('ALREADY_EXISTS', `namespace "${req.body.name}" already exists`);
      const n = await dir.putNamespace(req.body as { name: string; description?: string; quotas?: Record<string, number> });
      return reply.code(201).send(namespaceView(n));
    },
  );

  app.get<{ Params: { name: string } }>(
    '/api/v1/namespaces/:name',
    { schema: { tags: ['namespaces'], summary: 'One namespace', params: NAME_PARAM } },
    async (req) => {
      authorizeAdmin(access, req);
      const n = dir.namespace(req.params.name);
      if (!n) throw notFound('namespace', req.params.name);
      return namespaceView(n);
    },
  );

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

  app.delete<{ Params: { name: string } }>(
    '/api/v1/namespaces/:name',
    { schema: { tags: ['namespaces'], summary: 'Delete a namespace without users', params: NAME_PARAM } },
    async (req, reply) => {
      authorizeAdmin(access, req);
      await dir.deleteNamespace(req.params.name);
      return reply.code(204).send();
    },
  );
}
