/**
 * The routes of RabbitMQ policies and operator policies (`/api/policies`, `/api/operator-policies`); what they are
 * and how they apply to queues is policy-store.ts.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { RabbitError, notFound, type RabbitContext } from './context.js';
import { VHOST } from './format.js';
import { parsePolicy, policyJson } from './policy-store.js';

type VN = { vhost: string; name: string };
type Body = Record<string, unknown> | undefined;

export function policyRoutes(app: FastifyInstance, ctx: RabbitContext): void {
  const policies = ctx.policies;
  // RabbitMQ: administrators, and policymakers for the vhosts they may use.
  const may = (req: FastifyRequest) => {
    const p = ctx.caller(req).principal;
    if (p !== null && p.groups.includes('policymaker') && !p.removed) return;
    ctx.require(req, 'admin', 'cluster', '*');
  };
  for (const [path, kind] of [
    ['policies', 'policy'],
    ['operator-policies', 'operator'],
  ] as const) {
    app.get(`/api/${path}`, async (req) => {
      may(req);
      return policies.list(kind).map(policyJson);
    });
    app.get<{ Params: { vhost: string } }>(`/api/${path}/:vhost`, async (req) => {
      may(req);
      if (req.params.vhost !== VHOST) throw notFound();
      return policies.list(kind).map(policyJson);
    });
    app.get<{ Params: VN }>(`/api/${path}/:vhost/:name`, async (req) => {
      may(req);
      const p = req.params.vhost === VHOST ? policies.get(kind, req.params.name) : undefined;
      if (p === undefined) throw notFound();
      return policyJson(p);
    });
    app.put<{ Params: VN; Body: Body }>(`/api/${path}/:vhost/:name`, async (req, reply) => {
      may(req);
      if (req.params.vhost !== VHOST) throw new RabbitError(404, 'not_found', 'vhost_not_found');
      const created = await policies.put(kind, parsePolicy(kind, req.params.name, req.body));
      return reply.code(created ? 201 : 204).send();
    });
    app.delete<{ Params: VN }>(`/api/${path}/:vhost/:name`, async (req, reply) => {
      may(req);
      if (req.params.vhost !== VHOST || policies.get(kind, req.params.name) === undefined) throw notFound();
      await policies.delete(kind, req.params.name);
      return reply.code(204).send();
    });
  }
}
