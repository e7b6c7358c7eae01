/**
 * Queues, exchanges and bindings of the routing core (AMQP's view, shared by MQTT `$queue/`). Authorization:
 * `describe|create|delete queue:<name>` / `exchange:<name>`; purging a queue deletes its messages: `delete queue:`.
 */
import type { FastifyInstance } from 'fastify';
import { refreshQueueStats, type ExchangeDef, type QueueArguments, type QueueDef } from '../../core/index.js';
import { NAME_PARAM, PAGE_QUERY, authorize, may, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';

/** QueueArguments fields and the AMQP x-arguments they are declared as (rawArguments, for redeclare checks). */
const X_ARGS: Record<keyof QueueArguments, string> = {
  messageTtlMs: 'x-message-ttl',
  expiresMs: 'x-expires',
  maxLength: 'x-max-length',
  maxLengthBytes: 'x-max-length-bytes',
  overflow: 'x-overflow',
  deadLetterExchange: 'x-dead-letter-exchange',
  deadLetterRoutingKey: 'x-dead-letter-routing-key',
  singleActiveConsumer: 'x-single-active-consumer',
  deliveryLimit: 'x-delivery-limit',
};

const QUEUE_ARGUMENTS = {
  type: 'object',
  additionalProperties: false,
  properties: {
    messageTtlMs: { type: 'integer', minimum: 0 },
    expiresMs: { type: 'integer', minimum: 1 },
    maxLength: { type: 'integer', minimum: 0 },
    maxLengthBytes: { type: 'integer', minimum: 0 },
    overflow: { type: 'string', enum: ['drop-head', 'reject-publish', 'reject-publish-dlx'] },
    deadLetterExchange: { type: 'string' },
    deadLetterRoutingKey: { type: 'string' },
    singleActiveConsumer: { type: 'boolean' },
    deliveryLimit: { type: 'integer', minimum: 1 },
  },
} as const;

export function queueRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { engine, access } = ctx;

  const queueView = (def: QueueDef) => {
    const s = engine.getQueue(def.name)?.stats() ?? { ready: 0, unacked: 0, bytes: 0, consumers: 0 };
    return {
      name: def.name,
      durable: def.durable,
      exclusive: def.exclusiveOwner !== null,
      autoDelete: def.autoDelete,
      arguments: def.rawArguments,
      messages: s.ready,
      unacked: s.unacked,
      bytes: s.bytes,
      consumers: s.consumers,
      createdAt: new Date(def.createdAt).toISOString(),
    };
  };
  const exchangeView = (def: ExchangeDef) => ({
    name: def.name,
    type: def.type,
    durable: def.durable,
    autoDelete: def.autoDelete,
    internal: def.internal,
    arguments: def.rawArguments,
    createdAt: def.createdAt === 0 ? null : new Date(def.createdAt).toISOString(),
  });

  app.get<{ Querystring: { limit?: number; cursor?: string } }>(
    '/api/v1/queues',
    {
      schema: {
        tags: ['queues'],
        summary: 'Queues the caller may describe, with depth and consumers',
        querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY },
      },
    },
    async (req) => {
      const page = paginate(
        engine.listQueues().filter((q) => may(access, req, 'describe', 'queue', q.name)),
        (q) => q.name,
        req.query,
      );
      // Cluster mode: the counts of the page's queues owned elsewhere, from their owners.
      await refreshQueueStats(page.items.map((d) => engine.getQueue(d.name)));
      return { items: page.items.map(queueView), next: page.next };
    },
  );

  app.post<{ Body: { name: string; durable?: boolean; autoDelete?: boolean; arguments?: QueueArguments } }>(
    '/api/v1/queues',
    {
      schema: {
        tags: ['queues'],
        summary: 'Declare a queue (same definition again: no change)',
        body: {
          type: 'object',
          required: ['name'],
          additionalProperties: false,
          properties: {
            name: { type: 'string', minLength: 1, maxLength: 255 },
            durable: { type: 'boolean', default: true },
            autoDelete: { type: 'boolean', default: false },
            arguments: QUEUE_ARGUMENTS,
          },
        },
      },
    },
    async (req, reply) => {
      const b = req.body;
      authorize(access, req, 'create', 'queue', b.name);
      const args = b.arguments ?? {};
      const raw = Object.fromEntries(Object.entries(args).map(([k, v]) => [X_ARGS[k as keyof QueueArguments], v]));
      const existed = engine.getQueue(b.name) !== undefined;
      const q = await engine.declareQueue({
        name: b.name,
        durable: b.durable ?? true,
        autoDelete: b.autoDelete ?? false,
        exclusiveOwner: null,
        arguments: args,
        rawArguments: raw,
      });
      if (!existed) ctx.logger.info({ queue: b.name, by: req.auth?.principal.user ?? null }, 'queue declared');
      return reply.code(existed ? 200 : 201).send(queueView(q.def));
    },
  );

  app.get<{ Params: { name: string } }>('/api/v1/queues/:name', { schema: { tags: ['queues'], summary: 'One queue', params: NAME_PARAM } }, async (req) => {
    authorize(access, req, 'describe', 'queue', req.params.name);
    const q = engine.getQueue(req.params.name);
    if (!q) throw notFound('queue', req.params.name);
    await refreshQueueStats([q]);
    return queueView(q.def);
  });

  app.delete<{ Params: { name: string } }>(
    '/api/v1/queues/:name',
    { schema: { tags: ['queues'], summary: 'Delete a queue and its messages', params: NAME_PARAM } },
    async (req) => {
      authorize(access, req, 'delete', 'queue', req.params.name);
      if (!engine.getQueue(req.params.name)) throw notFound('queue', req.params.name);
      const messages = await engine.deleteQueue(req.params.name);
      ctx.logger.info({ queue: req.params.name, messages, by: req.auth?.principal.user ?? null }, 'queue deleted');
      return { messages };
    },
  );

  app.post<{ Params: { name: string } }>(
    '/api/v1/queues/:name/purge',
    { schema: { tags: ['queues'], summary: 'Remove the ready messages of a queue', params: NAME_PARAM } },
    async (req) => {
      authorize(access, req, 'delete', 'queue', req.params.name);
      if (!engine.getQueue(req.params.name)) throw notFound('queue', req.params.name);
      const messages = await engine.purgeQueue(req.params.name);
      ctx.logger.info({ queue: req.params.name, messages, by: req.auth?.principal.user ?? null }, 'queue purged');
      return { messages };
    },
  );

  app.get<{ Querystring: { limit?: number; cursor?: string } }>(
    '/api/v1/exchanges',
    {
      schema: {
        tags: ['exchanges'],
        summary: 'Exchanges the caller may describe',
        querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY },
      },
    },
    async (req) =>
      paginate(
        engine
          .listExchanges()
          .filter((x) => may(access, req, 'describe', 'exchange', x.name))
          .map(exchangeView),
        (x) => x.name,
        req.query,
      ),
  );

  app.post<{ Body: { name: string; type: ExchangeDef['type']; durable?: boolean; autoDelete?: boolean; internal?: boolean } }>(
    '/api/v1/exchanges',
    {
      schema: {
        tags: ['exchanges'],
        summary: 'Declare an exchange',
        body: {
          type: 'object',
          required: ['name', 'type'],
          additionalProperties: false,
          properties: {
            name: { type: 'string', minLength: 1, maxLength: 255 },
            type: { type: 'string', enum: ['direct', 'fanout', 'topic', 'headers'] },
            durable: { type: 'boolean', default: true },
            autoDelete: { type: 'boolean', default: false },
            internal: { type: 'boolean', default: false },
          },
        },
      },
    },
    async (req, reply) => {
      const b = req.body;
      authorize(access, req, 'create', 'exchange', b.name);
      const existed = engine.getExchange(b.name) !== undefined;
      const x = await engine.declareExchange({
        name: b.name,
        type: b.type,
        durable: b.durable ?? true,
        autoDelete: b.autoDelete ?? false,
        internal: b.internal ?? false,
        rawArguments: {},
      });
      return reply.code(existed ? 200 : 201).send(exchangeView(x));
    },
  );

  app.get<{ Params: { name: string } }>(
    '/api/v1/exchanges/:name',
    { schema: { tags: ['exchanges'], summary: 'One exchange with the bindings it is the source of', params: NAME_PARAM } },
    async (req) => {
      authorize(access, req, 'describe', 'exchange', req.params.name);
      const x = engine.getExchange(req.params.name);
      if (!x) throw notFound('exchange', req.params.name);
      return { ...exchangeView(x), bindings: engine.listBindings().filter((b) => b.source === x.name) };
    },
  );

  app.delete<{ Params: { name: string } }>(
    '/api/v1/exchanges/:name',
    { schema: { tags: ['exchanges'], summary: 'Delete an exchange', params: NAME_PARAM } },
    async (req, reply) => {
      authorize(access, req, 'delete', 'exchange', req.params.name);
      if (!engine.getExchange(req.params.name)) throw notFound('exchange', req.params.name);
      await engine.deleteExchange(req.params.name);
      return reply.code(204).send();
    },
  );

  app.get<{ Querystring: { limit?: number; cursor?: string } }>(
    '/api/v1/bindings',
    {
      schema: {
        tags: ['exchanges'],
        summary: 'Bindings whose source exchange the caller may describe',
        querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY },
      },
    },
    async (req) => {
      const list = engine.listBindings().filter((b) => may(access, req, 'describe', 'exchange', b.source));
      return paginate(list, (b) => `${b.source}\u0000${b.destinationKind}\u0000${b.destination}\u0000${b.key}\u0000${JSON.stringify(b.arguments)}`, req.query);
    },
  );
}
