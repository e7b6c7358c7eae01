/**
 * The routes of RabbitMQ policies and operator policies (`/api/policies`, `/api/operator-policies`), per vhost (a
 * vhost is a namespace); what they are and how they apply to queues is policy-store.ts.
 *
 * Who may: the broker's administrators (`admin cluster:*`, the tag `administrator`) in every vhost; a namespace's
 * administrator (`admin namespace:<ns>`) and a user with the tag `policymaker` in the vhost of their own namespace
 * (RabbitMQ: policymakers in the vhosts they may use). A path's `{vhost}` resolves as `/api/queues/{vhost}` resolves
 * it (ctx.vhost: for a tenant's user `/` is its own namespace); a vhost no namespace has, or another tenant's, is
 * RabbitMQ's answer for a missing vhost: 404 (`vhost_not_found` for a PUT), whoever asks.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { DEFAULT_NAMESPACE } from '../../core/namespaces.js';
import { RabbitError, notFound, type RabbitContext } from './context.js';
import { parsePolicy, policyJson } from './policy-store.js';
import { namespaceOfLabel } from './vhost-labels.js';

type VN = { vhost: string; name: string };
type Body = Record<string, unknown> | undefined;

export function policyRoutes(app: FastifyInstance, ctx: RabbitContext): void {
  const policies = ctx.policies;
  /** The caller's reach: every vhost, or its own namespace's (401 for one with no right to policies at all). */
  const reach = (req: FastifyRequest): 'all' | 'own' => {
    if (ctx.can(req, 'admin', 'cluster', '*')) return 'all';
    const p = ctx.caller(req).principal;
    if (p !== null && p.removed !== true && p.groups.includes('policymaker')) return 'own';
    if (p !== null && p.namespace !== DEFAULT_NAMESPACE && ctx.can(req, 'admin', 'namespace', p.namespace)) return 'own';
    throw new RabbitError(401, 'not_authorized', 'Access refused: admin cluster:*');
  };
  /** A path's vhost as a namespace, for a caller that may manage its policies. */
  const vhostOf = (req: FastifyRequest, vhost: string, put = false): string => {
    reach(req);
    try {
      // Another tenant's vhost (or `default` for a tenant) is 404 here, as one no namespace has.
      return namespaceOfLabel(ctx.vhost(req, vhost));
    } catch (e) {
      if (put && e instanceof RabbitError && e.status === 404) throw new RabbitError(404, 'not_found', 'vhost_not_found');
      throw e;
    }
  };
  for (const [path, kind] of [
    ['policies', 'policy'],
    ['operator-policies', 'operator'],
  ] as const) {
    app.get(`/api/${path}`, async (req) => {
      const own = reach(req) === 'own' ? namespaceOfLabel(ctx.vhost(req, '/')) : undefined;
      return policies.list(kind, own).map(policyJson);
    });
    app.get<{ Params: { vhost: string } }>(`/api/${path}/:vhost`, async (req) => policies.list(kind, vhostOf(req, req.params.vhost)).map(policyJson));
    app.get<{ Params: VN }>(`/api/${path}/:vhost/:name`, async (req) => {
      const p = policies.get(kind, vhostOf(req, req.params.vhost), req.params.name);
      if (p === undefined) throw notFound();
      return policyJson(p);
    });
    app.put<{ Params: VN; Body: Body }>(`/api/${path}/:vhost/:name`, async (req, reply) => {
      const ns = vhostOf(req, req.params.vhost, true);
      const created = await policies.put(kind, parsePolicy(kind, ns, req.params.name, req.body));
      return reply.code(created ? 201 : 204).send();
    });
    app.delete<{ Params: VN }>(`/api/${path}/:vhost/:name`, async (req, reply) => {
      const ns = vhostOf(req, req.params.vhost);
      if (policies.get(kind, ns, req.params.name) === undefined) throw notFound();
      await policies.delete(kind, ns, req.params.name);
      return reply.code(204).send();
    });
  }
}
