/**
 * Aliveness and health checks as RabbitMQ 3.x answers them: 200 `{"status":"ok"}`, or 503
 * `{"status":"failed","reason":...}` with what failed. They need `describe cluster:*` (RabbitMQ: the monitoring tag);
 * the aliveness test also declares, publishes to and reads the queue `aliveness-test`, so it needs `create` and
 * `subscribe` on that queue and `publish` on the default exchange.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { makeMessage } from '../../core/index.js';
import { PROTOCOL_NAMES } from './routes-read.js';
import { badRequest, type RabbitContext } from './context.js';

const ALIVENESS_QUEUE = 'aliveness-test';

/** RabbitMQ's aliases for protocol names in protocol-listener checks. */
const PROTOCOL_ALIASES: Record<string, string> = {
  amqp091: 'amqp',
  'amqp0.9.1': 'amqp',
  'amqp0-9-1': 'amqp',
  amqps: 'amqp/ssl',
  mqtts: 'mqtt/ssl',
  https: 'https',
};

const failed = (reply: FastifyReply, body: Record<string, unknown>) => reply.code(503).send({ status: 'failed', ...body });

export function healthRoutes(app: FastifyInstance, ctx: RabbitContext): void {
  const { engine } = ctx;

  app.get<{ Params: { vhost: string } }>('/api/aliveness-test/:vhost', async (req, reply) => {
    ctx.vhost(req, req.params.vhost);
    ctx.require(req, 'create', 'queue', ALIVENESS_QUEUE);
    ctx.require(req, 'subscribe', 'queue', ALIVENESS_QUEUE);
    ctx.require(req, 'publish', 'exchange', '');
    try {
      const h = await engine.declareQueue({
        name: ALIVENESS_QUEUE,
        durable: false,
        autoDelete: false,
        exclusiveOwner: null,
        arguments: {},
        rawArguments: {},
      });
      const id = `aliveness-${process.hrtime.bigint()}`;
      const msg = makeMessage(ALIVENESS_QUEUE, Buffer.from('test_message'), { exchange: '', routingKey: ALIVENESS_QUEUE });
      msg.messageId = id;
      msg.persistent = false;
      const r = engine.publishTo('', ALIVENESS_QUEUE, msg);
      if (r.durable !== null) await r.durable;
      if (r.routed === 0) return failed(reply, { reason: 'the test message was not routed' });
      // Messages left by an earlier test that failed half way are taken out on the way to ours.
      for (;;) {
        const d = await h.get('management/aliveness', true);
        if (d === null) return failed(reply, { reason: 'the test message did not arrive' });
        if (d.msg.messageId === id) return { status: 'ok' };
      }
    } catch (err) {
      return failed(reply, { reason: (err as Error).message });
    }
  });

  const alarmCheck = (reason: string) => async (req: FastifyRequest, reply: FastifyReply) => {
    ctx.require(req, 'describe', 'cluster', '*');
    const a = ctx.amqp()?.alarms() ?? { memory: false, disk: false };
    const alarms = [...(a.memory ? [{ node: ctx.node, resource: 'memory' }] : []), ...(a.disk ? [{ node: ctx.node, resource: 'disk' }] : [])];
    if (alarms.length === 0) return { status: 'ok' };
    return failed(reply, { reason, alarms });
  };
  app.get('/api/health/checks/alarms', alarmCheck('There are alarms in effect in the cluster'));
  app.get('/api/health/checks/local-alarms', alarmCheck('There are alarms in effect on the node'));

  app.get('/api/health/checks/virtual-hosts', async (req) => {
    ctx.require(req, 'describe', 'cluster', '*');
    return { status: 'ok' };
  });

  app.get('/api/health/checks/node-is-quorum-critical', async (req) => {
    ctx.require(req, 'describe', 'cluster', '*');
    return { status: 'ok' };
  });

  app.get<{ Params: { port: string } }>('/api/health/checks/port-listener/:port', async (req, reply) => {
    ctx.require(req, 'describe', 'cluster', '*');
    if (!/^\d{1,5}$/.test(req.params.port)) throw badRequest(`Invalid port: ${req.params.port}`);
    const port = Number(req.params.port);
    const ports = ctx.listeners().map((l) => l.port);
    if (ports.includes(port)) return { status: 'ok', port };
    return failed(reply, { reason: 'No active listener', missing: port, ports });
  });

  app.get<{ Params: { protocol: string } }>('/api/health/checks/protocol-listener/:protocol', async (req, reply) => {
    ctx.require(req, 'describe', 'cluster', '*');
    const asked = req.params.protocol.toLowerCase();
    const protocol = PROTOCOL_ALIASES[asked] ?? asked;
    const protocols = [...new Set(ctx.listeners().map((l) => PROTOCOL_NAMES[l.name] ?? l.name))];
    if (protocols.includes(protocol)) return { status: 'ok', protocol };
    return failed(reply, { reason: 'No active listener', missing: protocol, protocols });
  });
}
