/**
 * Consumer groups of every protocol that offers them (RunningProtocol.groups: Kafka groups, JetStream durable
 * consumers). Authorization: `describe group:<name>` (lists filtered), `alter group:` to reset offsets (and
 * `subscribe stream:` on the stream, as committing offsets needs in Kafka), `delete group:`.
 */
import type { FastifyInstance } from 'fastify';
import { FlowError } from '../../core/index.js';
import { NAME_PARAM, PAGE_QUERY, authorize, may, notFound, paginate } from './common.js';
import type { ApiContext, ConsumerGroupAdmin, OffsetResetTarget } from './types.js';

export function groupRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access } = ctx;

  /** The protocol holding the group named `name` (the first that knows it). */
  const find = async (name: string): Promise<{ protocol: string; admin: ConsumerGroupAdmin }> => {
    for (const g of ctx.groups()) if ((await g.admin.describe(name)) !== null) return g;
    throw notFound('consumer group', name);
  };

  app.get<{ Querystring: { protocol?: string; limit?: number; cursor?: string } }>(
    '/api/v1/consumer-groups',
    {
      schema: {
        tags: ['consumer-groups'],
        summary: 'Consumer groups (Kafka, JetStream) with state, members and lag',
        querystring: { type: 'object', additionalProperties: false, properties: { protocol: { type: 'string' }, ...PAGE_QUERY } },
      },
    },
    async (req) => {
      const all = [];
      for (const g of ctx.groups()) {
        if (req.query.protocol !== undefined && g.protocol !== req.query.protocol) continue;
        all.push(...(await g.admin.list()));
      }
      return paginate(
        all.filter((g) => may(access, req, 'describe', 'group', g.name)),
        (g) => `${g.name}\u0000${g.protocol}`,
        req.query,
      );
    },
  );

  app.get<{ Params: { name: string } }>(
    '/api/v1/consumer-groups/:name',
    { schema: { tags: ['consumer-groups'], summary: 'One group: members, assignments, offsets and lag', params: NAME_PARAM } },
    async (req) => {
      authorize(access, req, 'describe', 'group', req.params.name);
      for (const g of ctx.groups()) {
        const d = await g.admin.describe(req.params.name);
        if (d !== null) return d;
      }
      throw notFound('consumer group', req.params.name);
    },
  );

  app.post<{ Params: { name: string }; Body: { stream: string; to: OffsetResetTarget['to']; offset?: number; timestamp?: number | string } }>(
    '/api/v1/consumer-groups/:name/reset',
    {
      schema: {
        tags: ['consumer-groups'],
        summary: "Move an empty group's committed offsets on a stream (every partition)",
        params: NAME_PARAM,
        body: {
          type: 'object',
          required: ['stream', 'to'],
          additionalProperties: false,
          properties: {
            stream: { type: 'string', minLength: 1 },
            to: { type: 'string', enum: ['earliest', 'latest', 'offset', 'timestamp'] },
            offset: { type: 'integer', minimum: 0 },
            timestamp: { type: ['integer', 'string'], description: 'ms since the epoch or an ISO 8601 date' },
          },
        },
      },
    },
    async (req) => {
      const { name } = req.params;
      const b = req.body;
      authorize(access, req, 'alter', 'group', name);
      authorize(access, req, 'subscribe', 'stream', b.stream);
      let target: OffsetResetTarget;
      if (b.to === 'offset') {
        if (b.offset === undefined) throw new FlowError('INVALID_ARGUMENT', '"offset" is required with to: offset');
        target = { to: 'offset', offset: b.offset };
      } else if (b.to === 'timestamp') {
        const ts = typeof b.timestamp === 'string' ? Date.parse(b.timestamp) : b.timestamp;
        if (ts === undefined || !Number.isFinite(ts)) throw new FlowError('INVALID_ARGUMENT', '"timestamp" (ms or an ISO date) is required with to: timestamp');
        target = { to: 'timestamp', timestamp: ts };
      } else target = { to: b.to };
      const g = await find(name);
      const d = await g.admin.resetOffsets(name, b.stream, target);
      ctx.logger.info({ group: name, stream: b.stream, to: b.to, by: req.auth?.principal.user ?? null }, 'consumer group offsets reset');
      return d;
    },
  );

  app.delete<{ Params: { name: string } }>(
    '/api/v1/consumer-groups/:name',
    { schema: { tags: ['consumer-groups'], summary: 'Delete an empty group and its offsets', params: NAME_PARAM } },
    async (req, reply) => {
      authorize(access, req, 'delete', 'group', req.params.name);
      const g = await find(req.params.name);
      await g.admin.delete(req.params.name);
      ctx.logger.info({ group: req.params.name, by: req.auth?.principal.user ?? null }, 'consumer group deleted');
      return reply.code(204).send();
    },
  );
}
