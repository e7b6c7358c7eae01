/**
 * `PUT` and `DELETE /api/vhosts/{vhost}` (rabbitmqadmin's `declare vhost` / `delete vhost`): a vhost is a namespace
 * (docs/namespaces.md), made and deleted by the broker's administrators only (`admin cluster:*`, the tag
 * `administrator`), as RabbitMQ allows administrators only; anyone else gets RabbitMQ's 401.
 *
 * PUT makes the namespace (201) or keeps it (204; a `description` given replaces its description). Its name must be
 * a namespace's (1-128 letters, digits and `. _ @ -`), else 400; `tags`, `default_queue_type` and `tracing` are
 * accepted and not kept. As RabbitMQ, the user who makes a vhost gets every permission in it (`.*` for configure,
 * write and read: grantCreator, which the definitions import uses too). DELETE deletes the namespace with its queues, exchanges, streams, the permissions and
 * policies scoped to it and its RabbitMQ policies (../namespace-removal.ts), 204; a vhost no namespace has is 404;
 * `/` (the namespace `default`) and a namespace users still live in are refused (400).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { DEFAULT_NAMESPACE, isFlowError } from '../../core/index.js';
import { validateName } from '../directory.js';
import { removeNamespace } from '../namespace-removal.js';
import { badRequest, notFound, type RabbitContext } from './context.js';
import { namespaceOfVhost } from './vhost-labels.js';
import { putPermission } from './permissions.js';

/** RabbitMQ grants the user who makes a vhost every permission in it; the bootstrap caller is no user. */
export async function grantCreator(ctx: RabbitContext, req: FastifyRequest, vhost: string): Promise<void> {
  const user = ctx.caller(req).principal?.user;
  if (user === undefined || user === null || ctx.access.directory.user(user) === undefined) return;
  await putPermission(ctx, { user, vhost, configure: '.*', write: '.*', read: '.*' });
}

export function vhostRoutes(app: FastifyInstance, ctx: RabbitContext): void {
  const dir = ctx.access.directory;
  app.put<{ Params: { vhost: string }; Body: Record<string, unknown> | undefined }>('/api/vhosts/:vhost', async (req, reply) => {
    ctx.require(req, 'admin', 'cluster', '*');
    const description = req.body?.description;
    if (description !== undefined && typeof description !== 'string') throw badRequest('description must be a string');
    const existing = namespaceOfVhost(ctx, req.params.vhost);
    if (existing === DEFAULT_NAMESPACE) return reply.code(204).send();
    try {
      validateName('namespace', req.params.vhost);
    } catch (e) {
      throw badRequest(`${(e as Error).message} (a vhost is a FlowMQ namespace)`);
    }
    await dir.putNamespace({ name: req.params.vhost, ...(description !== undefined ? { description } : {}) });
    if (existing === null) await grantCreator(ctx, req, req.params.vhost);
    return reply.code(existing === null ? 201 : 204).send();
  });
  app.delete<{ Params: { vhost: string } }>('/api/vhosts/:vhost', async (req, reply) => {
    ctx.require(req, 'admin', 'cluster', '*');
    const ns = namespaceOfVhost(ctx, req.params.vhost);
    if (ns === null) throw notFound();
    try {
      await removeNamespace(ctx.access, ctx.engine, ns, ctx.removal);
    } catch (e) {
      if (isFlowError(e) && e.code === 'INVALID_ARGUMENT') throw badRequest(e.message);
      throw e;
    }
    return reply.code(204).send();
  });
}
