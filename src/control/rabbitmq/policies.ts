/**
 * The routes of RabbitMQ policies and operator policies (`/api/policies`, `/api/operator-policies`), per vhost (a
 * vhost is a namespace); what they are and how they apply to queues is policy-store.ts.
 *
 * Who may: the broker's administrators (`admin cluster:*`, the tag `administrator`) in every vhost; a namespace's
 * administrator (`admin namespace:<ns>`) and a user with the tag `policymaker` in the vhost of their own namespace;
 * a policymaker also the policies (not the operator policies, which RabbitMQ 3.10 leaves to administrators) of every
 * vhost it is a guest of (RabbitMQ: policymakers in the vhosts they have permissions in; here: the namespace grants it
 * something, as connection.open asks of a guest). A path's `{vhost}` resolves as `/api/queues/{vhost}` resolves it
 * (ctx.vhost: for a tenant's user `/` is its own namespace); a vhost no namespace has, or another tenant's, is
 * RabbitMQ's answer for a missing vhost: 404 (`vhost_not_found` for a PUT), whoever asks.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { DEFAULT_NAMESPACE } from '../../core/namespaces.js';
import { guestIn } from '../policy.js';
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
  /** Whether the caller is a policymaker with a guest's grant in namespace `ns` (not its own). */
  const guestOf = (req: FastifyRequest, ns: string): boolean => {
    const p = ctx.caller(req).principal;
    if (p === null || p.removed === true || !p.groups.includes('policymaker')) return false;
    if (ns === (p.home ?? p.namespace) || ctx.access.directory.namespace(ns) === undefined) return false;
    return ctx.access.accessFor(guestIn(p, ns), 'http', req.ip).grantsAny();
  };
  /** The namespaces a policymaker is a guest of (GET /api/policies lists theirs too). */
  const guestNamespaces = (req: FastifyRequest): string[] =>
    [DEFAULT_NAMESPACE, ...ctx.access.directory.listNamespaces().map((n) => n.name)].filter((ns, i, all) => all.indexOf(ns) === i && guestOf(req, ns));
  /** A path's vhost as a namespace, for a caller that may manage its policies. */
  const vhostOf = (req: FastifyRequest, kind: 'policy' | 'operator', vhost: string, put = false): string => {
    reach(req);
    try {
      // Another tenant's vhost (or `default` for a tenant) is 404 here, as one no namespace has.
      return namespaceOfLabel(ctx.vhost(req, vhost));
    } catch (e) {
      if (e instanceof RabbitError && e.status === 404) {
        // A tenant's `/` resolved above; `/` here is `default`'s.
        const ns = namespaceOfLabel(vhost);
        if (kind === 'policy' && guestOf(req, ns)) return ns;
        if (put) throw new RabbitError(404, 'not_found', 'vhost_not_found');
      }
      throw e;
    }
  };
  for (const [path, kind] of [
    ['policies', 'policy'],
    ['operator-policies', 'operator'],
  ] as const) {
    app.get(`/api/${path}`, async (req) => {
      if (reach(req) === 'all') return policies.list(kind).map(policyJson);
      const own = [namespaceOfLabel(ctx.vhost(req, '/')), ...(kind === 'policy' ? guestNamespaces(req) : [])];
      return policies
        .list(kind)
        .filter((p) => own.includes(p.namespace))
        .map(policyJson);
    });
    app.get<{ Params: { vhost: string } }>(`/api/${path}/:vhost`, async (req) => policies.list(kind, vhostOf(req, kind, req.params.vhost)).map(policyJson));
    app.get<{ Params: VN }>(`/api/${path}/:vhost/:name`, async (req) => {
      const p = policies.get(kind, vhostOf(req, kind, req.params.vhost), req.params.name);
      if (p === undefined) throw notFound();
      return policyJson(p);
    });
    app.put<{ Params: VN; Body: Body }>(`/api/${path}/:vhost/:name`, async (req, reply) => {
      const ns = vhostOf(req, kind, req.params.vhost, true);
      const created = await policies.put(kind, parsePolicy(kind, ns, req.params.name, req.body));
      return reply.code(created ? 201 : 204).send();
    });
    app.delete<{ Params: VN }>(`/api/${path}/:vhost/:name`, async (req, reply) => {
      const ns = vhostOf(req, kind, req.params.vhost);
      if (policies.get(kind, ns, req.params.name) === undefined) throw notFound();
      await policies.delete(kind, ns, req.params.name);
      return reply.code(204).send();
    });
  }
}
