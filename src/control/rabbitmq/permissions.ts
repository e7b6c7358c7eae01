/**
 * RabbitMQ users, tags and permissions (`/api/users`, `/api/whoami`, `/api/permissions`, `/api/users/{u}/permissions`,
 * `/api/permissions/{vhost}/{user}`) on the FlowMQ control plane, so the same users log in on every protocol.
 *
 * Users are the directory's (src/control/directory.ts). A `password` becomes FlowMQ's credentials (scrypt, SCRAM) and
 * a RabbitMQ hash of it (for exports); a `password_hash` alone is kept and checked as RabbitMQ checks it
 * (src/control/rabbit-hash.ts). Tags are the user's groups: `administrator` is the group `admins` (FlowMQ's
 * administrators, allowed everything), any other tag a group of the same name (`monitoring` also lets the user see
 * node-wide figures here, as RabbitMQ's monitoring tag does; policies may name any of them as `group:<tag>`).
 *
 * A permission (configure, write and read regular expressions of a user in a vhost) becomes FlowMQ policies of that
 * user (source `rabbitmq-permission`): unscoped in the user's own namespace's vhost (as before vhosts had
 * permissions), scoped to the namespace of any other vhost, where they make the user a guest (policy.ts `guestIn`:
 * an AMQP client of the user may open that vhost and has there what they grant, minus every deny that applies), whose resources are the regular expressions themselves (`queue:~<regex>`, see
 * policy.ts), matched exactly as RabbitMQ matches them: an unanchored search, `""` matching nothing but the empty
 * name, the default exchange checked as `amq.default`. RabbitMQ's operations map onto the actions FlowMQ checks:
 *
 *   policy              actions             resources                        RabbitMQ operations
 *   rabbitmq.<u>.configure  create, delete  queue|exchange|stream:~configure  declare, delete
 *   rabbitmq.<u>.write  alter               queue|exchange|stream:~write     bind to it (queue.bind, exchange.bind destination)
 *   rabbitmq.<u>.publish publish            exchange:~write (+ queue:*, stream:* when write matches amq.default: a
 *                                           default-exchange publish, which FlowMQ checks on the queue it names)
 *   rabbitmq.<u>.read   subscribe           queue|exchange|stream:~read      consume, get, bind from it (source)
 *   rabbitmq.<u>.access describe            queue:*, exchange:*, stream:*    passive declares, management listings
 *   rabbitmq.<u>.topics publish, subscribe  topic:#                          amq.topic routing keys (RabbitMQ without
 *                                                                            topic permissions allows every key; a
 *                                                                            topic permission narrows it with a deny
 *                                                                            policy: topic-permissions.ts)
 *
 * Being policies, they hold on every protocol that names queues and exchanges (MQTT `$queue/...` too), and, as every
 * policy, the first one ends the open default of mode `auto` (docs/security.md).
 */
import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { FlowError } from '../../core/index.js';
import { ADMIN_GROUP, PERMISSION_SOURCE, type PolicyDef } from '../policy.js';
import { rabbitAlgorithm, type RabbitHash } from '../rabbit-hash.js';
import { RabbitError, badRequest, notFound, type RabbitContext } from './context.js';
import { vhostOfNamespace } from './format.js';
import { deleteTopicPermissions } from './topic-permissions.js';
import { homeOf, namespaceOfVhost, vhostLabel } from './vhost-labels.js';

export { PERMISSION_SOURCE };
type Part = 'configure' | 'write' | 'publish' | 'read' | 'access' | 'topics';
const KINDS = ['queue', 'exchange', 'stream'] as const;

export interface Permission {
  user: string;
  vhost: string;
  configure: string;
  write: string;
  read: string;
}

/** RabbitMQ tags from a user's groups (`admins` is `administrator`). */
export function tagsOf(groups: readonly string[]): string[] {
  return groups.map((g) => (g === ADMIN_GROUP ? 'administrator' : g));
}

/** Groups from RabbitMQ tags: a comma-separated string or a list (RabbitMQ takes both). */
export function groupsOf(tags: unknown): string[] {
  const list = typeof tags === 'string' ? tags.split(',') : Array.isArray(tags) ? tags.map(String) : null;
  if (list === null) throw badRequest('tags must be a comma-separated string or a list');
  const out = list.map((t) => t.trim()).filter((t) => t !== '');
  return [...new Set(out.map((t) => (t === 'administrator' ? ADMIN_GROUP : t)))];
}

/** A policy-name-safe id of a user: the name itself when it can be, else a hash of it. */
function userId(user: string): string {
  return /^[A-Za-z0-9._@-]{1,96}$/.test(user) ? user : `h${createHash('sha256').update(user).digest('hex').slice(0, 24)}`;
}

/**
 * The name of a permission's policy: `rabbitmq.<user>.<part>` in the user's own vhost, `rabbitmq.<user>:<namespace>.<part>`
 * in another (`:` is in no user id nor namespace name), a hash of both when that is too long.
 */
function policyName(user: string, part: Part, scope?: string): string {
  if (scope === undefined) return `rabbitmq.${userId(user)}.${part}`;
  const plain = `rabbitmq.${userId(user)}:${scope}.${part}`;
  if (plain.length <= 128) return plain;
  return `rabbitmq.:${createHash('sha256').update(`${user}\u0000${scope}`).digest('hex').slice(0, 24)}.${part}`;
}

/** Whether a RabbitMQ permission regex matches a name (as policy.ts matches `~` patterns). */
function regexMatches(source: string, name: string): boolean {
  return new RegExp(source === '' ? '^$' : source).test(name);
}

/**
 * The FlowMQ policies a permission becomes (see the table above); `scope`: the namespace of a vhost not the user's own
 * (the policies are scoped to it), undefined in its own.
 */
export function permissionPolicies(p: Permission, scope?: string): Array<Omit<PolicyDef, 'createdAt'>> {
  const principals = [`user:${p.user}`];
  const common = {
    effect: 'allow' as const,
    principals,
    source: PERMISSION_SOURCE,
    description: `RabbitMQ permission of ${p.user} in vhost ${p.vhost}`,
    ...(scope === undefined ? {} : { namespace: scope }),
  };
  const name = (part: Part) => policyName(p.user, part, scope);
  const on = (re: string) => KINDS.map((k) => `${k}:~${re}`);
  return [
    { ...common, name: name('configure'), actions: ['create', 'delete'], resources: on(p.configure) },
    { ...common, name: name('write'), actions: ['alter'], resources: on(p.write) },
    {
      ...common,
      name: name('publish'),
      actions: ['publish'],
      resources: [`exchange:~${p.write}`, ...(regexMatches(p.write, 'amq.default') ? ['queue:*', 'stream:*'] : [])],
    },
    { ...common, name: name('read'), actions: ['subscribe'], resources: on(p.read) },
    { ...common, name: name('access'), actions: ['describe'], resources: KINDS.map((k) => `${k}:*`) },
    { ...common, name: name('topics'), actions: ['publish', 'subscribe'], resources: ['topic:#'] },
  ];
}

/**
 * The permissions held as policies (read back from the `configure`, `write` and `read` ones), each with its vhost: the
 * namespace a policy is scoped to, else the user's own (`home`).
 */
export function listPermissions(policies: readonly PolicyDef[], home: (user: string) => string): Permission[] {
  const found = new Map<string, Partial<Permission>>();
  for (const d of policies) {
    if (d.source !== PERMISSION_SOURCE) continue;
    const user = d.principals[0]?.startsWith('user:') ? d.principals[0].slice(5) : null;
    if (user === null) continue;
    const part = d.name.slice(d.name.lastIndexOf('.') + 1);
    if (part !== 'configure' && part !== 'write' && part !== 'read') continue;
    if (d.name !== policyName(user, part, d.namespace)) continue;
    const r = d.resources[0] ?? '';
    const vhost = vhostOfNamespace(d.namespace ?? home(user));
    const key = `${user}\u0000${vhost}`;
    const p = found.get(key) ?? found.set(key, { user, vhost }).get(key)!;
    p[part] = r.slice(r.indexOf(':~') + 2);
  }
  const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  return [...found.values()]
    .filter((p): p is Permission => p.configure !== undefined && p.write !== undefined && p.read !== undefined)
    .map((p) => ({ user: p.user, vhost: p.vhost, configure: p.configure, write: p.write, read: p.read }))
    .sort((a, b) => cmp(a.user, b.user) || cmp(a.vhost, b.vhost));
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

export function userJson(ctx: RabbitContext, name: string): Record<string, unknown> | null {
  const u = ctx.access.directory.user(name);
  if (u === undefined) return null;
  const h: RabbitHash | undefined = ctx.access.directory.rabbitHash(name);
  return { name, password_hash: h?.hash ?? '', hashing_algorithm: h?.algorithm ?? 'rabbit_password_hashing_sha256', tags: tagsOf(u.groups), limits: {} };
}

/** Creates or replaces a user from RabbitMQ's JSON (PUT /api/users/{name}, a definitions import); true: created. */
export async function putUser(ctx: RabbitContext, name: string, body: Record<string, unknown>): Promise<boolean> {
  if (body.tags === undefined) throw badRequest('tags_not_present');
  const groups = groupsOf(body.tags);
  const hasPassword = body.password !== undefined;
  const hasHash = body.password_hash !== undefined;
  if (hasPassword && hasHash) throw badRequest('both_password_and_password_hash_are_provided');
  if (hasPassword && typeof body.password !== 'string') throw badRequest('password must be a string');
  if (hasHash && typeof body.password_hash !== 'string') throw badRequest('password_hash must be a string');
  let hash: RabbitHash | undefined;
  if (hasHash) {
    const text = body.password_hash as string;
    if (text !== '' && Buffer.from(text, 'base64').toString('base64') !== text) throw badRequest(`not_base64: ${text}`);
    hash = { algorithm: rabbitAlgorithm(body.hashing_algorithm), hash: text };
  }
  return ctx.access.directory.putRabbitUser({
    username: name,
    groups,
    ...(hasPassword ? { password: body.password as string } : {}),
    ...(hash ? { hash } : {}),
  });
}

/** Sets a user's permission in a vhost (its policies); true: it had none there. */
export async function putPermission(ctx: RabbitContext, p: Permission): Promise<boolean> {
  const dir = ctx.access.directory;
  const ns = namespaceOfVhost(ctx, p.vhost);
  const u = dir.user(p.user);
  if (ns === null || u === undefined) throw badRequest('vhost_or_user_not_found');
  const vhost = vhostOfNamespace(ns);
  const existed = listPermissions(dir.policies.defs(), homeOf(ctx)).some((x) => x.user === p.user && x.vhost === vhost);
  for (const def of permissionPolicies({ ...p, vhost }, ns === u.namespace ? undefined : ns)) await dir.putPolicy(def);
  return !existed;
}

/** Removes a user's permission policies (in one vhost, or in all); false when it had none there. */
export async function deletePermission(ctx: RabbitContext, user: string, vhost?: string): Promise<boolean> {
  const dir = ctx.access.directory;
  const home = homeOf(ctx);
  const mine = dir.policies
    .defs()
    .filter((d) => d.source === PERMISSION_SOURCE && d.principals[0] === `user:${user}`)
    .filter((d) => vhost === undefined || vhostOfNamespace(d.namespace ?? home(user)) === vhost);
  for (const d of mine)
    await dir.deletePolicy(d.name).catch((e: unknown) => (e instanceof FlowError && e.code === 'NOT_FOUND' ? undefined : Promise.reject(e)));
  return mine.length > 0;
}

function permissionBody(body: Record<string, unknown> | undefined): { configure: string; write: string; read: string } {
  const b = body ?? {};
  const missing = ['configure', 'write', 'read'].filter((k) => b[k] === undefined);
  if (missing.length > 0) throw badRequest(`[${missing.map((k) => `{key_missing,${k}}`).join(',')}]`);
  return { configure: checkRegex(b.configure, 'configure'), write: checkRegex(b.write, 'write'), read: checkRegex(b.read, 'read') };
}

type Body = Record<string, unknown> | undefined;

export function permissionRoutes(app: FastifyInstance, ctx: RabbitContext): void {
  const dir = ctx.access.directory;
  const admin = (req: FastifyRequest) => ctx.require(req, 'admin', 'cluster', '*');
  const perms = () => listPermissions(dir.policies.defs(), homeOf(ctx));
  const label = (vhost: string) => vhostLabel(ctx, vhost);

  app.get('/api/whoami', async (req) => {
    const c = ctx.caller(req);
    if (c.principal === null) return { name: c.name, tags: ['administrator'] };
    const u = dir.user(c.name);
    return { name: c.name, tags: u !== undefined ? tagsOf(u.groups) : [] };
  });

  app.get('/api/users', async (req) => {
    admin(req);
    return dir.listUsers().map((u) => userJson(ctx, u.username));
  });
  app.get('/api/users/without-permissions', async (req) => {
    admin(req);
    const have = new Set(perms().map((p) => p.user));
    return dir
      .listUsers()
      .filter((u) => !have.has(u.username))
      .map((u) => userJson(ctx, u.username));
  });
  app.get<{ Params: { name: string } }>('/api/users/:name', async (req) => {
    admin(req);
    const u = userJson(ctx, req.params.name);
    if (u === null) throw notFound();
    return u;
  });
  app.put<{ Params: { name: string }; Body: Body }>('/api/users/:name', async (req, reply) => {
    admin(req);
    const created = await putUser(ctx, req.params.name, req.body ?? {});
    return reply.code(created ? 201 : 204).send();
  });
  app.delete<{ Params: { name: string } }>('/api/users/:name', async (req, reply) => {
    admin(req);
    if (dir.user(req.params.name) === undefined) throw notFound();
    await deletePermission(ctx, req.params.name);
    await deleteTopicPermissions(ctx, req.params.name);
    await dir.deleteUser(req.params.name);
    return reply.code(204).send();
  });
  app.post<{ Body: Body }>('/api/users/bulk-delete', async (req, reply) => {
    admin(req);
    const users = req.body?.users;
    if (!Array.isArray(users)) throw badRequest('users must be a list');
    for (const u of users.map(String)) {
      if (dir.user(u) === undefined) continue;
      await deletePermission(ctx, u);
      await deleteTopicPermissions(ctx, u);
      await dir.deleteUser(u);
    }
    return reply.code(204).send();
  });
  app.get<{ Params: { name: string } }>('/api/users/:name/permissions', async (req) => {
    admin(req);
    if (dir.user(req.params.name) === undefined) throw notFound();
    return perms().filter((p) => p.user === req.params.name);
  });

  app.get('/api/permissions', async (req) => {
    admin(req);
    return perms();
  });
  app.get<{ Params: { vhost: string } }>('/api/vhosts/:vhost/permissions', async (req) => {
    admin(req);
    const vhost = label(req.params.vhost);
    // vhost first, as RabbitMQ lists a vhost's permissions.
    return perms()
      .filter((p) => p.vhost === vhost)
      .map((p) => ({ vhost: p.vhost, user: p.user, configure: p.configure, write: p.write, read: p.read }));
  });
  app.get<{ Params: { vhost: string; user: string } }>('/api/permissions/:vhost/:user', async (req) => {
    admin(req);
    const vhost = label(req.params.vhost);
    const p = perms().find((x) => x.user === req.params.user && x.vhost === vhost);
    if (p === undefined) throw notFound();
    return p;
  });
  app.put<{ Params: { vhost: string; user: string }; Body: Body }>('/api/permissions/:vhost/:user', async (req, reply) => {
    admin(req);
    const created = await putPermission(ctx, { user: req.params.user, vhost: req.params.vhost, ...permissionBody(req.body) });
    return reply.code(created ? 201 : 204).send();
  });
  app.delete<{ Params: { vhost: string; user: string } }>('/api/permissions/:vhost/:user', async (req, reply) => {
    admin(req);
    if (!(await deletePermission(ctx, req.params.user, label(req.params.vhost)))) throw notFound();
    return reply.code(204).send();
  });
}
