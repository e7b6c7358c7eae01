/**
 * Namespaces: list (with quotas and usage), create, read, change, delete. A namespace administrator lists and reads
 * its own namespaces (the others are absent for it); making, changing (quotas) and deleting them is a global
 * administrator's (403).
 */
import type { FastifyInstance } from 'fastify';
import { FlowError, type ExportConfig, type ImportConfig } from '../../core/index.js';

/** NATS account exports or imports (src/core/links-config.ts validates them; an invalid one is 400). */
const LINKS = { type: 'array', maxItems: 1024, items: { type: 'object' } } as const;
import type { NamespaceDef } from '../directory.js';
import { removeNamespace } from '../namespace-removal.js';
import { NAME_PARAM, PAGE_QUERY, administers, authorizeAdmin, authorizeAdminOf, authorizeSomeAdmin, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';
import { iso, QUOTAS } from './identity-common.js';

export function namespaceRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access } = ctx;
  const dir = access.directory;

  /**
   * Usage of every namespace at once (one walk over the client registry; stored bytes from the quotas' shared,
   * cached per-namespace figure): messages and bytes in and out by protocol summed, connections, stored bytes.
   */
  const usageAll = () => {
    const traffic = new Map<string, { messagesIn: number; messagesOut: number; bytesIn: number; bytesOut: number; connections: number }>();
    for (const t of access.clients.totals()) {
      let e = traffic.get(t.namespace);
      if (!e) traffic.set(t.namespace, (e = { messagesIn: 0, messagesOut: 0, bytesIn: 0, bytesOut: 0, connections: 0 }));
      e.messagesIn += t.messagesIn;
      e.messagesOut += t.messagesOut;
      e.bytesIn += t.bytesIn;
      e.bytesOut += t.bytesOut;
      e.connections += t.connections;
    }
    return { traffic, stored: access.quotas.storedBytes(), figures: access.quotas.figures() };
  };
  const usageOf = (name: string, all: ReturnType<typeof usageAll>) => {
    const t = all.traffic.get(name);
    const s = all.stored.get(name);
    const f = all.figures[name];
    return {
      users: dir.listUsers().filter((u) => u.namespace === name).length,
      connections: f?.connections ?? t?.connections ?? 0,
      messagesIn: t?.messagesIn ?? 0,
      messagesOut: t?.messagesOut ?? 0,
      bytesIn: t?.bytesIn ?? 0,
      bytesOut: t?.bytesOut ?? 0,
      storedHotBytes: s?.hot ?? 0,
      storedObjectBytes: s?.objects ?? 0,
      storedBytes: s === undefined ? 0 : s.hot + s.objects,
      throttled: f?.throttled ?? 0,
      throttledMs: f?.throttledMs ?? 0,
      refusedConnections: f?.refusedConnections ?? 0,
      refusedWrites: f?.refusedWrites ?? 0,
    };
  };
  const namespaceView = (n: NamespaceDef, all = usageAll()) => ({
    name: n.name,
    description: n.description ?? null,
    quotas: n.quotas,
    exports: n.exports ?? [],
    imports: n.imports ?? [],
    createdAt: iso(n.createdAt),
    usage: usageOf(n.name, all),
  });

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
      authorizeSomeAdmin(access, req);
      const all = usageAll();
      return paginate(
        dir
          .listNamespaces()
          .filter((n) => administers(access, req, n.name))
          .map((n) => namespaceView(n, all)),
        (n) => n.name,
        req.query,
      );
    },
  );

  app.post<{ Body: { name: string; description?: string; quotas?: Record<string, number | null>; exports?: ExportConfig[]; imports?: ImportConfig[] } }>(
    '/api/v1/namespaces',
    {
      schema: {
        tags: ['namespaces'],
        summary: 'Add a namespace',
        body: {
          type: 'object',
          required: ['name'],
          additionalProperties: false,
          properties: { name: { type: 'string' }, description: { type: 'string', maxLength: 1024 }, quotas: QUOTAS, exports: LINKS, imports: LINKS },
        },
      },
    },
    async (req, reply) => {
      authorizeAdmin(access, req);
      if (dir.namespace(req.body.name)) throw new FlowError('ALREADY_EXISTS', `namespace "${req.body.name}" already exists`);
      const n = await dir.putNamespace(
        req.body as { name: string; description?: string; quotas?: Record<string, number>; exports?: ExportConfig[]; imports?: ImportConfig[] },
      );
      return reply.code(201).send(namespaceView(n));
    },
  );

  app.get<{ Params: { name: string } }>(
    '/api/v1/namespaces/:name',
    { schema: { tags: ['namespaces'], summary: 'One namespace', params: NAME_PARAM } },
    async (req) => {
      authorizeAdminOf(access, req, req.params.name, 'namespace', req.params.name);
      const n = dir.namespace(req.params.name);
      if (!n) throw notFound('namespace', req.params.name);
      return namespaceView(n);
    },
  );

  app.get<{ Params: { name: string } }>(
    '/api/v1/namespaces/:name/usage',
    {
      schema: {
        tags: ['namespaces'],
        summary: "A namespace's usage: messages and bytes in and out, connections, bytes stored (hot tier, objects)",
        params: NAME_PARAM,
      },
    },
    async (req) => {
      authorizeAdminOf(access, req, req.params.name, 'namespace', req.params.name);
      const n = dir.namespace(req.params.name);
      if (!n) throw notFound('namespace', req.params.name);
      const q = n.quotas.maxStorageBytes;
      return { name: n.name, ...usageOf(n.name, usageAll()), maxStorageBytes: q ?? null };
    },
  );

  app.patch<{
    Params: { name: string };
    Body: { description?: string; quotas?: Record<string, number | null>; exports?: ExportConfig[]; imports?: ImportConfig[] };
  }>(
    '/api/v1/namespaces/:name',
    {
      schema: {
        tags: ['namespaces'],
        summary: 'Change a namespace: quotas given are set (null removes one), others kept; exports or imports given replace them',
        params: NAME_PARAM,
        body: {
          type: 'object',
          additionalProperties: false,
          properties: { description: { type: 'string', maxLength: 1024 }, quotas: QUOTAS, exports: LINKS, imports: LINKS },
        },
      },
    },
    async (req) => {
      authorizeAdmin(access, req);
      const prev = dir.namespace(req.params.name);
      if (!prev) throw notFound('namespace', req.params.name);
      const quotas = { ...prev.quotas, ...(req.body?.quotas ?? {}) } as Record<string, number>;
      const n = await dir.putNamespace({
        name: prev.name,
        description: req.body?.description ?? prev.description,
        quotas,
        ...(req.body?.exports !== undefined ? { exports: req.body.exports } : {}),
        ...(req.body?.imports !== undefined ? { imports: req.body.imports } : {}),
      });
      ctx.logger.info({ namespace: n.name, quotas: n.quotas, by: req.auth?.principal.user ?? null }, 'namespace changed');
      return namespaceView(n);
    },
  );

  app.delete<{ Params: { name: string } }>(
    '/api/v1/namespaces/:name',
    {
      schema: {
        tags: ['namespaces'],
        summary:
          'Delete a namespace without users, with its queues, exchanges, streams, consumer groups, MQTT sessions, retained messages and the policies scoped to it',
        params: NAME_PARAM,
      },
    },
    async (req, reply) => {
      authorizeAdmin(access, req);
      const gone = await removeNamespace(access, ctx.engine, req.params.name, { groups: ctx.groups, mqttSessions: ctx.mqttSessions });
      ctx.logger.info({ namespace: req.params.name, ...gone, by: req.auth?.principal.user ?? null }, 'namespace deleted');
      return reply.code(204).send();
    },
  );
}
