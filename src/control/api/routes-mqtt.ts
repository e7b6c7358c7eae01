/**
 * MQTT sessions and retained messages, from the core's stores. Authorization: sessions are broker state,
 * `describe cluster:*` to list and `admin cluster:*` to delete; a retained message is read like a subscription
 * receives it (`subscribe topic:<topic>`: the list is filtered) and cleared like a publish replaces it (`publish
 * topic:<topic>`).
 *
 * A connected client owns its live session: deleting the session of a connected client kicks the client first
 * (through the client registry) and waits for its connection to end, so that the adapter's last write of the
 * session does not land after the delete.
 */
import type { FastifyInstance } from 'fastify';
import { FlowError, splitName, type SessionRecord } from '../../core/index.js';
import { PAGE_QUERY, authorize, authorizeAdmin, may, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';

function sessionView(r: SessionRecord, connected: boolean): Record<string, unknown> {
  let subscriptions: Array<{ filter: string; qos: number }> = [];
  try {
    const state = JSON.parse(r.state) as { subs?: Array<{ f: string; q: number }> };
    subscriptions = (state.subs ?? []).map((s) => ({ filter: s.f, qos: s.q }));
  } catch {
    // an unreadable state is shown without subscriptions
  }
  return {
    clientId: r.clientId,
    // Namespaces (core namespaces.ts): a tenant's session is keyed `$ns/<ns>/<client id>`.
    namespace: splitName(r.clientId).namespace,
    connected,
    expiresAt: r.expiresAt === null ? null : new Date(r.expiresAt).toISOString(),
    updatedAt: new Date(r.updatedAt).toISOString(),
    subscriptions,
  };
}

export function mqttRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { engine, access } = ctx;
  const connectedIds = () =>
    new Set(
      access.clients
        .list()
        .filter((c) => c.reg.protocol === 'mqtt' && c.clientId !== null)
        .map((c) => c.clientId!),
    );

  app.get<{ Querystring: { limit?: number; cursor?: string } }>(
    '/api/v1/mqtt/sessions',
    {
      schema: {
        tags: ['mqtt'],
        summary: 'Stored MQTT sessions (persistent ones: connected or waiting to be resumed)',
        querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY },
      },
    },
    async (req) => {
      authorize(access, req, 'describe', 'cluster', '*');
      const live = connectedIds();
      const list = (await engine.store.listSessions('mqtt')).map((r) => sessionView(r, live.has(r.clientId)));
      return paginate(list, (s) => String(s.clientId), req.query);
    },
  );

  app.delete<{ Params: { clientId: string } }>(
    '/api/v1/mqtt/sessions/:clientId',
    {
      schema: {
        tags: ['mqtt'],
        summary: 'Delete an MQTT session (its client is kicked first when connected)',
        params: { type: 'object', required: ['clientId'], properties: { clientId: { type: 'string', minLength: 1, maxLength: 65535 } } },
      },
    },
    async (req, reply) => {
      authorizeAdmin(access, req);
      const { clientId } = req.params;
      const stored = await engine.store.getSession(clientId);
      const clients = access.clients.list().filter((c) => c.reg.protocol === 'mqtt' && c.clientId === clientId);
      for (const c of clients) access.clients.kick(c.id, 'session deleted by an administrator');
      // Wait (bounded) for the kicked connections to end: their last session write must come before the delete.
      const deadline = Date.now() + 5000;
      while (clients.some((c) => access.clients.get(c.id) !== undefined)) {
        if (Date.now() > deadline) throw new FlowError('CLOSED', `the client "${clientId}" did not disconnect in time; try again`);
        await new Promise((r) => setTimeout(r, 10));
      }
      // The MQTT module keeps offline sessions in memory too: it ends its copy (subscriptions, queue, record); the
      // store delete below covers a session only the store holds (another broker's, or no MQTT module here).
      const inMemory = (await ctx.mqttSessions?.()?.delete(clientId)) ?? false;
      if (!stored && !inMemory && clients.length === 0) throw notFound('MQTT session', clientId);
      await engine.store.deleteSession(clientId);
      ctx.logger.info({ clientId, kicked: clients.length, by: req.auth?.principal.user ?? null }, 'MQTT session deleted');
      return reply.code(204).send();
    },
  );

  app.get<{ Querystring: { filter?: string; limit?: number; cursor?: string } }>(
    '/api/v1/mqtt/retained',
    {
      schema: {
        tags: ['mqtt'],
        summary: 'Retained messages whose topic matches `filter` (default #)',
        querystring: { type: 'object', additionalProperties: false, properties: { filter: { type: 'string', minLength: 1 }, ...PAGE_QUERY } },
      },
    },
    async (req) => {
      const filter = req.query.filter ?? '#';
      const items: Array<Record<string, unknown>> = [];
      try {
        engine.retained.match(filter, (m) => {
          if (!may(access, req, 'subscribe', 'topic', m.topic)) return;
          const utf8 = m.payload.length === 0 || Buffer.from(m.payload.toString('utf8'), 'utf8').equals(m.payload);
          items.push({
            topic: m.topic,
            payload: m.payload.toString(utf8 ? 'utf8' : 'base64'),
            encoding: utf8 ? 'utf8' : 'base64',
            bytes: m.payload.length,
            qos: m.qos,
            timestamp: new Date(m.timestamp).toISOString(),
            ...(m.contentType !== undefined ? { contentType: m.contentType } : {}),
          });
        });
      } catch (err) {
        throw new FlowError('INVALID_FILTER', `"${filter}" is not a topic filter: ${(err as Error).message}`);
      }
      return paginate(items, (m) => String(m.topic), req.query);
    },
  );

  app.delete<{ Params: { topic: string } }>(
    '/api/v1/mqtt/retained/:topic',
    {
      schema: {
        tags: ['mqtt'],
        summary: 'Clear the retained message of a topic (%-encode the topic: a%2Fb)',
        params: { type: 'object', required: ['topic'], properties: { topic: { type: 'string', minLength: 1, maxLength: 65535 } } },
      },
    },
    async (req, reply) => {
      const { topic } = req.params;
      authorize(access, req, 'publish', 'topic', topic);
      // Through the engine: in cluster mode the other brokers drop it too.
      if (!(await engine.clearRetained(topic))) throw notFound('retained message of topic', topic);
      ctx.logger.info({ topic, by: req.auth?.principal.user ?? null }, 'retained message cleared');
      return reply.code(204).send();
    },
  );
}
