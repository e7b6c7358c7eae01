/**
 * RabbitMQ topic permissions (`/api/topic-permissions`, `/api/topic-permissions/{vhost}/{user}[/{exchange}]`,
 * `/api/users/{u}/topic-permissions`, `/api/vhosts/{vhost}/topic-permissions`, definitions' `topic_permissions`).
 *
 * A topic permission of a user on one topic exchange holds a write and a read regular expression, matched against
 * routing keys: the write one on basic.publish to that exchange, the read one on the binding key of queue.bind,
 * queue.unbind, exchange.bind and exchange.unbind from it. A user without a topic permission on an exchange is not
 * limited there (RabbitMQ: topic permissions only narrow what the vhost permissions allow). `{username}` and
 * `{vhost}` in the expressions are expanded per user (RabbitMQ's variable expansion; `{client_id}` is only known to
 * RabbitMQ's MQTT plugin and stays as written, as it does for AMQP 0-9-1 clients of RabbitMQ).
 *
 * Each becomes two FlowMQ deny policies of the user (source `rabbitmq-topic-permission`) on the `routing-key`
 * resource (policy.ts), denying what the expression does not match:
 *
 *   policy                               action      resource
 *   rabbitmq.<u>.topic.<exchange>.write  publish     routing-key:<exchange>:!~<write>
 *   rabbitmq.<u>.topic.<exchange>.read   subscribe   routing-key:<exchange>:!~<read>
 *
 * (`<u>.topic.<exchange>` is a hash when the names do not fit a policy name.) The AMQP adapter asks the policies
 * whether a deny refuses the key on every topic exchange (channel-state.ts), so a topic permission holds like any
 * policy: on every broker of a cluster, changed live for open connections, listed by `flowmq policy list`.
 */
import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { FlowError } from '../../core/index.js';
import type { PolicyDef } from '../policy.js';
import { TOPIC_PERMISSION_SOURCE, escapeExchange } from '../policy.js';
import { RabbitError, badRequest, notFound, type RabbitContext } from './context.js';
import { vhostOfNamespace } from './format.js';
import { homeOf, namespaceOfLabel, namespaceOfVhost, vhostLabel } from './vhost-labels.js';

export { TOPIC_PERMISSION_SOURCE };

export interface TopicPermission {
  user: string;
  vhost: string;
  exchange: string;
  write: string;
  read: string;
}

type Part = 'write' | 'read';

const SAFE = /^[A-Za-z0-9._@-]+$/;

/** `scope`: the namespace of a vhost other than the user's own (policies scoped to it, named with `:<namespace>`). */
function policyName(user: string, exchange: string, part: Part, scope?: string): string {
  const at = scope === undefined ? '' : `:${scope}`;
  const plain = `rabbitmq.${user}${at}.topic.${exchange}.${part}`;
  if (SAFE.test(user) && SAFE.test(exchange) && plain.length <= 128) return plain;
  const seed = scope === undefined ? `${user}\u0000${exchange}` : `${user}\u0000${exchange}\u0000${scope}`;
  return `rabbitmq.h${createHash('sha256').update(seed).digest('hex').slice(0, 24)}${scope === undefined ? '' : ':'}.topic.${part}`;
}

function unescapeExchange(text: string): string {
  return text.replace(/%3A/g, ':').replace(/%25/g, '%');
}

/** The two deny policies a topic permission becomes (see the table above). */
export function topicPermissionPolicies(p: TopicPermission, scope?: string): Array<Omit<PolicyDef, 'createdAt'>> {
  const common = {
    effect: 'deny' as const,
    principals: [`user:${p.user}`],
    source: TOPIC_PERMISSION_SOURCE,
    description: `RabbitMQ topic permission of ${p.user} on exchange ${p.exchange} in vhost ${p.vhost}`,
    ...(scope === undefined ? {} : { namespace: scope }),
  };
  const x = escapeExchange(p.exchange);
  return [
    { ...common, name: policyName(p.user, p.exchange, 'write', scope), actions: ['publish'], resources: [`routing-key:${x}:!~${p.write}`] },
    { ...common, name: policyName(p.user, p.exchange, 'read', scope), actions: ['subscribe'], resources: [`routing-key:${x}:!~${p.read}`] },
  ];
}

/** The topic permissions held as policies (each read back from its write and read policies). */
export function listTopicPermissions(policies: readonly PolicyDef[], home: (user: string) => string): TopicPermission[] {
  const found = new Map<string, Partial<TopicPermission>>();
  for (const d of policies) {
    if (d.source !== TOPIC_PERMISSION_SOURCE) continue;
    const user = d.principals[0]?.startsWith('user:') ? d.principals[0].slice(5) : null;
    const r = d.resources[0] ?? '';
    const m = /^routing-key:([^:]*):!~([\s\S]*)$/.exec(r);
    if (user === null || m === null) continue;
    const exchange = unescapeExchange(m[1]);
    const part = d.name.endsWith('.write') ? 'write' : d.name.endsWith('.read') ? 'read' : null;
    if (part === null || d.name !== policyName(user, exchange, part, d.namespace)) continue;
    const vhost = vhostOfNamespace(d.namespace ?? home(user));
    const key = `${user}\u0000${vhost}\u0000${exchange}`;
    const p = found.get(key) ?? found.set(key, { user, vhost, exchange }).get(key)!;
    p[part] = m[2];
  }
  return [...found.values()]
    .filter((p): p is TopicPermission => p.write !== undefined && p.read !== undefined)
    .map((p) => ({ user: p.user, vhost: p.vhost, exchange: p.exchange, write: p.write, read: p.read }))
    .sort((a, b) => cmp(a.user, b.user) || cmp(a.vhost, b.vhost) || cmp(a.exchange, b.exchange));
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Sets a user's topic permission on one exchange of a vhost (replacing the one there); true: the user had none in the vhost. */
export async function putTopicPermission(ctx: RabbitContext, p: TopicPermission): Promise<boolean> {
  const dir = ctx.access.directory;
  const ns = namespaceOfVhost(ctx, p.vhost);
  const u = dir.user(p.user);
  if (ns === null || u === undefined) throw badRequest('vhost_or_user_not_found');
  const vhost = vhostOfNamespace(ns);
  const existed = listTopicPermissions(dir.policies.defs(), homeOf(ctx)).some((x) => x.user === p.user && x.vhost === vhost);
  for (const def of topicPermissionPolicies({ ...p, vhost }, ns === u.namespace ? undefined : ns)) await dir.putPolicy(def);
  return !existed;
}

/**
 * Removes a user's topic permissions (in one vhost or all; all of them there, or the one on `exchange`); false when
 * the user had none there.
 */
export async function deleteTopicPermissions(ctx: RabbitContext, user: string, exchange?: string, vhost?: string): Promise<boolean> {
  const dir = ctx.access.directory;
  const home = homeOf(ctx);
  const had = listTopicPermissions(dir.policies.defs(), home).filter((x) => x.user === user && (vhost === undefined || x.vhost === vhost));
  if (had.length === 0) return false;
  for (const p of had) {
    if (exchange !== undefined && p.exchange !== exchange) continue;
    const ns = namespaceOfLabel(p.vhost);
    for (const d of topicPermissionPolicies(p, ns === home(user) ? undefined : ns))
      await dir.deletePolicy(d.name).catch((e: unknown) => (e instanceof FlowError && e.code === 'NOT_FOUND' ? undefined : Promise.reject(e)));
  }
  return true;
}

/** Checks a regex as RabbitMQ does (invalid: 400 invalid_regexp). */
function checkRegex(source: unknown, key: string): string {
  if (typeof source !== 'string') throw badRequest(`${key} must be a string`);
  try {
    new RegExp(source);
  } catch (e) {
    throw new RabbitError(400, 'bad_request', `invalid_regexp: ${(e as Error).message}`);
  }
  return source;
}

/** A topic permission from RabbitMQ's JSON (a PUT body, a definitions entry): exchange, write and read required. */
export function topicPermissionBody(body: Record<string, unknown> | undefined): { exchange: string; write: string; read: string } {
  const b = body ?? {};
  const missing = ['exchange', 'write', 'read'].filter((k) => b[k] === undefined);
  if (missing.length > 0) throw badRequest(`[${missing.map((k) => `{key_missing,${k}}`).join(',')}]`);
  if (typeof b.exchange !== 'string') throw badRequest('exchange must be a string');
  return { exchange: b.exchange, write: checkRegex(b.write, 'write'), read: checkRegex(b.read, 'read') };
}

type Body = Record<string, unknown> | undefined;

export function topicPermissionRoutes(app: FastifyInstance, ctx: RabbitContext): void {
  const dir = ctx.access.directory;
  const admin = (req: FastifyRequest) => ctx.require(req, 'admin', 'cluster', '*');
  const all = () => listTopicPermissions(dir.policies.defs(), homeOf(ctx));
  const label = (vhost: string) => vhostLabel(ctx, vhost);

  app.get('/api/topic-permissions', async (req) => {
    admin(req);
    return all();
  });
  app.get<{ Params: { vhost: string } }>('/api/vhosts/:vhost/topic-permissions', async (req) => {
    admin(req);
    const vhost = label(req.params.vhost);
    return all()
      .filter((p) => p.vhost === vhost)
      .map((p) => ({ vhost: p.vhost, user: p.user, exchange: p.exchange, write: p.write, read: p.read }));
  });
  app.get<{ Params: { name: string } }>('/api/users/:name/topic-permissions', async (req) => {
    admin(req);
    if (dir.user(req.params.name) === undefined) throw notFound();
    return all().filter((p) => p.user === req.params.name);
  });
  app.get<{ Params: { vhost: string; user: string } }>('/api/topic-permissions/:vhost/:user', async (req) => {
    admin(req);
    const vhost = label(req.params.vhost);
    const mine = all().filter((p) => p.user === req.params.user && p.vhost === vhost);
    if (mine.length === 0) throw notFound();
    return mine;
  });
  app.put<{ Params: { vhost: string; user: string }; Body: Body }>('/api/topic-permissions/:vhost/:user', async (req, reply) => {
    admin(req);
    const created = await putTopicPermission(ctx, { user: req.params.user, vhost: req.params.vhost, ...topicPermissionBody(req.body) });
    return reply.code(created ? 201 : 204).send();
  });
  app.delete<{ Params: { vhost: string; user: string } }>('/api/topic-permissions/:vhost/:user', async (req, reply) => {
    admin(req);
    if (!(await deleteTopicPermissions(ctx, req.params.user, undefined, label(req.params.vhost)))) throw notFound();
    return reply.code(204).send();
  });
  app.delete<{ Params: { vhost: string; user: string; exchange: string } }>('/api/topic-permissions/:vhost/:user/:exchange', async (req, reply) => {
    admin(req);
    if (!(await deleteTopicPermissions(ctx, req.params.user, req.params.exchange, label(req.params.vhost)))) throw notFound();
    return reply.code(204).send();
  });
}
