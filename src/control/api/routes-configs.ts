/**
 * Broker configs changed at run time (Kafka's dynamic broker configs, by their Kafka names; see
 * src/protocols/kafka/broker-configs.ts): the same settings IncrementalAlterConfigs on a BROKER resource changes,
 * kept in the metastore and applied by every broker. Authorization: `describe cluster:*` to read, `alter
 * cluster:*` to change (Kafka's DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster).
 *
 * `broker`: "default" (every broker: Kafka's resource name "") or a broker id. Only configs alterable at run time
 * may be set; others are refused (400) with the reason.
 */
import type { FastifyInstance } from 'fastify';
import { FlowError } from '../../core/index.js';
import type { ConfigScope } from '../settings.js';
import { authorize } from './common.js';
import type { ApiContext } from './types.js';

const SCOPE = { type: 'string', pattern: '^(default|[0-9]+)$', description: '"default" (every broker) or a broker id' };

function scopeOf(s: string | undefined, self: number | undefined): ConfigScope {
  if (s === undefined) return self ?? 'default';
  return s === 'default' ? 'default' : Number(s);
}

export function configRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access } = ctx;
  const admin = () => {
    const a = ctx.brokerConfigs?.();
    if (!a) throw new FlowError('NOT_FOUND', "broker configs are Kafka's: the kafka protocol is not running on this broker");
    return a;
  };

  app.get<{ Querystring: { broker?: string } }>(
    '/api/v1/broker/configs',
    {
      schema: {
        tags: ['broker'],
        summary: 'Broker configs (Kafka names): value in force, source, whether alterable at run time',
        querystring: { type: 'object', additionalProperties: false, properties: { broker: SCOPE } },
      },
    },
    async (req) => {
      authorize(access, req, 'describe', 'cluster', '*');
      return { configs: admin().describe(scopeOf(req.query.broker, ctx.brokerId)) };
    },
  );

  app.patch<{ Body: { broker?: string; configs: Record<string, string | null> } }>(
    '/api/v1/broker/configs',
    {
      schema: {
        tags: ['broker'],
        summary: 'Set (string) or remove (null) broker configs alterable at run time; kept in the metastore, applied by every broker',
        body: {
          type: 'object',
          required: ['configs'],
          additionalProperties: false,
          properties: {
            broker: SCOPE,
            configs: { type: 'object', additionalProperties: { type: ['string', 'null'] } },
          },
        },
      },
    },
    async (req) => {
      authorize(access, req, 'alter', 'cluster', '*');
      const scope = req.body.broker === undefined ? 'default' : scopeOf(req.body.broker, ctx.brokerId);
      const a = admin();
      await a.alter(scope, req.body.configs, req.auth?.principal.user ?? null);
      return { configs: a.describe(scope === 'default' ? (ctx.brokerId ?? 'default') : scope).filter((c) => c.name in req.body.configs) };
    },
  );
}
