/**
 * Health, readiness, metrics, broker status, the overview the dashboard charts, connected clients, the log level.
 */
import type { FastifyInstance } from 'fastify';
import { FlowError } from '../../core/index.js';
import { PAGE_QUERY, adminScope, authorize, authorizeAdmin, namespaceAdmin, namespaceOf, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

export function brokerRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { engine, access } = ctx;

  app.get('/healthz', { schema: { tags: ['health'], summary: 'Liveness: the process answers', security: [] } }, async () => ({ status: 'ok' }));

  app.get(
    '/readyz',
    { schema: { tags: ['health'], summary: 'Readiness: storage recovered and listeners up (503 until then, and while shutting down)', security: [] } },
    async (_req, reply) => {
      const ready = ctx.ready?.() ?? true;
      return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not ready' });
    },
  );

  app.get('/metrics', { schema: { tags: ['health'], summary: 'Prometheus metrics (text exposition format)', security: [] } }, async (_req, reply) => {
    const m = ctx.metrics;
    if (!m) throw new FlowError('NOT_FOUND', 'metrics are not enabled in this broker');
    const text = m.text ? await m.text() : await m.metrics!();
    return reply.type(m.contentType).send(text);
  });

  app.get(
    '/api/v1/broker',
    { schema: { tags: ['broker'], summary: 'Broker status: id, version, uptime, listeners, storage, per-protocol figures' } },
    async (req) => {
      authorize(access, req, 'describe', 'cluster', '*');
      return {
        version: ctx.version ?? null,
        ready: ctx.ready?.() ?? true,
        ...(ctx.info?.() ?? {}),
        stats: engine.stats,
        access: { ...access.stats, policies: access.directory.policies.size, users: access.directory.size, quotas: access.quotas.figures() },
      };
    },
  );

  app.get(
    '/api/v1/overview',
    {
      schema: {
        tags: ['broker'],
        summary: "Cumulative counters for the dashboard (rates: difference of two samples); a namespace administrator's: its namespaces' only",
      },
    },
    async (req) => {
      // A namespace administrator (docs/namespaces.md) gets the figures of the namespaces it administers, counted as
      // the broker's are, without the engine's broker-wide counters.
      if (namespaceAdmin(access, req)) {
        const scope = adminScope(access, req) as ReadonlySet<string>;
        return {
          at: Date.now(),
          connections: access.clients.list().filter((c) => scope.has(c.namespace)).length,
          byProtocol: access.clients.totals().filter((t) => scope.has(t.namespace)),
          streams: engine.listAllStreams().filter((x) => scope.has(namespaceOf('stream', x.name)!)).length,
          queues: engine.listQueues().filter((q) => scope.has(namespaceOf('queue', q.name)!)).length,
          users: access.directory.listUsers().filter((u) => scope.has(u.namespace)).length,
          policies: access.directory.policies.defs().filter((p) => p.namespace !== undefined && scope.has(p.namespace)).length,
        };
      }
      authorize(access, req, 'describe', 'cluster', '*');
      return {
        at: Date.now(),
        connections: access.clients.size,
        byProtocol: access.clients.totals(),
        streams: engine.listAllStreams().length,
        queues: engine.listQueues().length,
        users: access.directory.size,
        policies: access.directory.policies.size,
        engine: engine.stats,
      };
    },
  );

  app.get<{ Querystring: { protocol?: string; user?: string; namespace?: string; q?: string; limit?: number; cursor?: string } }>(
    '/api/v1/clients',
    {
      schema: {
        tags: ['clients'],
        summary: "Connected clients of every protocol, filtered (a namespace administrator's: its namespaces' only)",
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            protocol: { type: 'string' },
            user: { type: 'string' },
            namespace: { type: 'string' },
            q: { type: 'string', description: 'substring of the id, client id, user or remote address' },
            ...PAGE_QUERY,
          },
        },
      },
    },
    async (req) => {
      // A namespace administrator lists the clients of the namespaces it administers.
      const scope = namespaceAdmin(access, req) ? (adminScope(access, req) as ReadonlySet<string>) : null;
      if (scope === null) authorize(access, req, 'describe', 'cluster', '*');
      const { protocol, user, namespace, q } = req.query;
      const list = access.clients
        .list()
        .filter((c) => scope === null || scope.has(c.namespace))
        .filter((c) => protocol === undefined || c.reg.protocol === protocol)
        .filter((c) => user === undefined || c.user === user)
        .filter((c) => namespace === undefined || c.namespace === namespace)
        .filter((c) => q === undefined || [c.id, c.clientId, c.user, c.reg.remoteAddress].some((s) => typeof s === 'string' && s.includes(q)))
        .map((c) => c.view());
      return paginate(list, (c) => String(c.id), req.query);
    },
  );

  const idParam = { type: 'object', required: ['id'], properties: { id: { type: 'string', minLength: 1, maxLength: 256 } } } as const;

  app.get<{ Params: { id: string } }>(
    '/api/v1/clients/:id',
    { schema: { tags: ['clients'], summary: 'One connected client', params: idParam } },
    async (req) => {
      const scope = namespaceAdmin(access, req) ? (adminScope(access, req) as ReadonlySet<string>) : null;
      if (scope === null) authorize(access, req, 'describe', 'cluster', '*');
      const c = access.clients.get(req.params.id);
      // Another namespace's client is answered as an absent one.
      if (!c || (scope !== null && !scope.has(c.namespace))) throw notFound('client', req.params.id);
      return c.view();
    },
  );

  app.delete<{ Params: { id: string } }>(
    '/api/v1/clients/:id',
    { schema: { tags: ['clients'], summary: "Kick a client (closed the protocol's way)", params: idParam } },
    async (req, reply) => {
      authorizeAdmin(access, req);
      const c = access.clients.get(req.params.id);
      if (!c) throw notFound('client', req.params.id);
      ctx.logger.info({ client: c.id, protocol: c.reg.protocol, user: c.user, by: req.auth?.principal.user ?? null }, 'client kicked through the admin API');
      access.clients.kick(c.id);
      return reply.code(204).send();
    },
  );

  app.get('/api/v1/log-level', { schema: { tags: ['broker'], summary: 'The log level' } }, async (req) => {
    authorize(access, req, 'describe', 'cluster', '*');
    return { level: ctx.rootLogger.level };
  });

  app.put<{ Body: { level: string } }>(
    '/api/v1/log-level',
    {
      schema: {
        tags: ['broker'],
        summary: 'Change the log level at run time (every component follows)',
        body: { type: 'object', required: ['level'], additionalProperties: false, properties: { level: { type: 'string', enum: LEVELS } } },
      },
    },
    async (req) => {
      authorizeAdmin(access, req);
      const from = ctx.rootLogger.level;
      ctx.rootLogger.level = req.body.level;
      ctx.rootLogger.info({ from, to: req.body.level, by: req.auth?.principal.user ?? null }, 'log level changed');
      return { level: ctx.rootLogger.level };
    },
  );
}
