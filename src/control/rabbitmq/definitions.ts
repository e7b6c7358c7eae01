/**
 * `/api/definitions` (and `/api/definitions/{vhost}`): the export and import that `rabbitmqadmin export` / `import`,
 * the management UI's "Export/Import definitions" and RabbitMQ's `load_definitions` files use. GET answers users,
 * vhosts, permissions, topic permissions, parameters (operator policies are parameters of component
 * `operator_policy`, as RabbitMQ exports them), global parameters, policies, queues, exchanges and bindings in
 * RabbitMQ 3.10's JSON; POST takes the same document and creates or replaces what it names (users, permissions,
 * policies, exchanges, queues, bindings), answering 204 as RabbitMQ does.
 *
 * As RabbitMQ's export: only durable, non-exclusive queues; no built-in exchanges (`""`, `amq.*`); no bindings from
 * the default exchange. Import order: users, permissions, topic permissions, policies and operator policies, exchanges, queues,
 * bindings; a binding whose source or destination is missing is skipped (RabbitMQ answers 204 then too). What
 * FlowMQ cannot hold is refused before anything changes (400): a vhost no namespace has (a vhost is a namespace,
 * `vhosts` lists every one; import makes none), queues, exchanges, bindings or policies of a vhost other than "/"
 * (only "/"'s are exported), runtime parameters other than operator policies (federation upstreams, shovels).
 * Permissions and topic permissions are per vhost (permissions.ts), in any namespace's. Topic permissions are imported after the permissions;
 * stream queues (x-queue-type stream) are made as AMQP's queue.declare makes them (src/protocols/amqp/admin.ts). Global parameters (cluster_name,
 * internal_cluster_id) are RabbitMQ's own and are ignored. A user FlowMQ holds no RabbitMQ hash of is exported with an
 * empty password_hash (RabbitMQ: no password login), and an empty one imported for an existing user keeps its password.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DEFAULT_NAMESPACE, FlowError, type ExchangeType } from '../../core/index.js';
import { RABBITMQ_API_VERSION, badRequest, notFound, type RabbitContext } from './context.js';
import { VHOST, bindingView, bindingVhost, partitionQueues, vhostOfName, vhostOfNamespace } from './format.js';
import { listPermissions, putPermission, putUser, userJson } from './permissions.js';
import { parsePolicy, policyJson, type PolicyKind } from './policy-store.js';
import { queueArguments } from './routes-write.js';
import { listTopicPermissions, putTopicPermission, topicPermissionBody } from './topic-permissions.js';
import { homeOf, namespaceOfVhost } from './vhost-labels.js';

type Doc = Record<string, unknown>;

const isBuiltinExchange = (name: string) => name === '' || name.startsWith('amq.');

/** Only `/`'s objects are exported: other vhosts' (namespaces', docs/namespaces.md) are not offered here yet. */
const inDefault = (name: string): boolean => vhostOfName(name).vhost === VHOST;

export function exportDefinitions(ctx: RabbitContext, vhostOnly: boolean): Doc {
  const { engine } = ctx;
  const dir = ctx.access.directory;
  const vh = (o: Doc): Doc => (vhostOnly ? o : { ...o, vhost: VHOST });
  const operator = ctx.policies.list('operator').map((p) => {
    const { vhost: _v, name, ...value } = policyJson(p);
    return vh({
      value: { pattern: value.pattern, definition: value.definition, priority: value.priority, 'apply-to': value['apply-to'] },
      component: 'operator_policy',
      name,
    });
  });
  const policies = ctx.policies.list('policy').map((p) => {
    const j = policyJson(p);
    if (vhostOnly) delete j.vhost;
    return j;
  });
  // Stream queues and super-stream partition queues (durable, never exclusive) with their x-queue-type, as RabbitMQ.
  const streams = (ctx.amqp()?.streamQueues() ?? []).filter((v) => inDefault(v.name));
  const queues = [
    ...engine
      .listQueues()
      .filter((q) => q.durable && q.exclusiveOwner === null && inDefault(q.name))
      .map((q) => ({ name: q.name, durable: q.durable, auto_delete: q.autoDelete, arguments: q.rawArguments })),
    ...streams.map((v) => ({ name: v.name, durable: true, auto_delete: false, arguments: v.arguments })),
  ]
    .sort((a, b) => (a.name < b.name ? -1 : 1))
    .map((q) => vh(q));
  const pq = partitionQueues(streams);
  const exchanges = engine
    .listExchanges()
    .filter((x) => !isBuiltinExchange(x.name) && inDefault(x.name))
    .sort((a, b) => (a.name < b.name ? -1 : 1))
    .map((x) =>
      vh({
        name: x.name,
        type: x.type,
        durable: x.durable,
        auto_delete: x.autoDelete,
        internal: x.internal,
        arguments: x.alternateExchange !== undefined ? { 'alternate-exchange': x.alternateExchange, ...x.rawArguments } : x.rawArguments,
      }),
    );
  const bindings = engine
    .listBindings()
    .filter((b) => b.source !== '' && bindingVhost(b) === VHOST)
    .map((b) => {
      const v = bindingView(b, pq);
      return vh({
        source: b.source,
        destination: v.destination,
        destination_type: b.destinationKind === 'exchange' ? 'exchange' : 'queue',
        routing_key: b.key,
        arguments: v.arguments,
      });
    });
  if (vhostOnly) return { rabbit_version: RABBITMQ_API_VERSION, parameters: operator, policies, queues, exchanges, bindings };
  return {
    rabbit_version: RABBITMQ_API_VERSION,
    rabbitmq_version: RABBITMQ_API_VERSION,
    product_name: 'FlowMQ',
    product_version: ctx.version,
    users: dir.listUsers().map((u) => userJson(ctx, u.username)),
    // Every namespace is a vhost (permissions may name any of them); only "/"'s queues, exchanges and the like are here.
    vhosts: [
      VHOST,
      ...dir
        .listNamespaces()
        .map((n) => n.name)
        .filter((n) => n !== DEFAULT_NAMESPACE)
        .sort(),
    ].map((name) => ({ name })),
    permissions: listPermissions(dir.policies.defs(), homeOf(ctx)),
    topic_permissions: listTopicPermissions(dir.policies.defs(), homeOf(ctx)),
    parameters: operator,
    global_parameters: [],
    policies,
    queues,
    exchanges,
    bindings,
  };
}

function list(doc: Doc, key: string): Doc[] {
  const v = doc[key];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'object' && x !== null && !Array.isArray(x))) throw badRequest(`${key} must be a list of objects`);
  return v as Doc[];
}

const str = (o: Doc, k: string): string => {
  const v = o[k];
  if (typeof v !== 'string') throw badRequest(`${k} must be a string`);
  return v;
};
const obj = (o: Doc, k: string): Doc => {
  const v = o[k];
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw badRequest(`${k} must be an object`);
  return v as Doc;
};

export async function importDefinitions(ctx: RabbitContext, doc: unknown, vhost: string | null): Promise<void> {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw badRequest('failed_to_parse_json');
  const d = doc as Doc;
  const { engine } = ctx;
  // Refuse what FlowMQ cannot hold before changing anything.
  // A vhost is a namespace (vhost-labels.ts): `vhosts`, permissions and topic permissions may name any that exists
  // (importing does not make namespaces); queues, exchanges, bindings and policies are imported into "/" only.
  const known = (v: unknown): string => {
    const ns = typeof v === 'string' ? namespaceOfVhost(ctx, v) : null;
    if (ns === null) throw badRequest(`no_such_vhost: ${String(v)} (a vhost is a FlowMQ namespace; create it first)`);
    return vhostOfNamespace(ns);
  };
  for (const o of list(d, 'vhosts')) known(o.name);
  for (const key of ['parameters', 'policies', 'queues', 'exchanges', 'bindings']) {
    for (const o of list(d, key)) {
      const v = o.vhost ?? vhost ?? VHOST;
      if (v !== VHOST) throw badRequest(`no_such_vhost: ${String(v)} (FlowMQ imports ${key} into "/" only)`);
    }
  }
  const permissions = list(d, 'permissions').map((p) => ({
    user: str(p, 'user'),
    vhost: known(p.vhost ?? vhost ?? VHOST),
    configure: str(p, 'configure'),
    write: str(p, 'write'),
    read: str(p, 'read'),
  }));
  // A stream queue is a FlowMQ stream made through the AMQP module: it needs AMQP running.
  const amqp = ctx.amqp();
  for (const q of list(d, 'queues')) {
    if (obj(q, 'arguments')['x-queue-type'] === 'stream' && amqp === undefined)
      throw badRequest(`stream queue ${str(q, 'name')}: stream queues need the AMQP protocol (--protocols)`);
  }
  const topicPermissions = list(d, 'topic_permissions').map((t) => ({
    user: str(t, 'user'),
    vhost: known(t.vhost ?? vhost ?? VHOST),
    ...topicPermissionBody(t),
  }));
  const params = list(d, 'parameters');
  for (const p of params)
    if (p.component !== 'operator_policy') throw badRequest(`runtime parameters of component ${String(p.component)} are not supported by FlowMQ`);
  const policyBodies: Array<[PolicyKind, string, Doc]> = [
    ...list(d, 'policies').map((p): [PolicyKind, string, Doc] => ['policy', str(p, 'name'), p]),
    ...params.map((p): [PolicyKind, string, Doc] => ['operator', str(p, 'name'), obj(p, 'value')]),
  ];
  const parsed = policyBodies.map(([kind, name, body]) => [kind, parsePolicy(kind, name, body)] as const);

  for (const u of list(d, 'users')) {
    const name = str(u, 'name');
    await putUser(ctx, name, { tags: u.tags ?? '', ...pickPassword(u, ctx.access.directory.user(name) !== undefined) });
  }
  for (const p of permissions) await putPermission(ctx, p);
  for (const t of topicPermissions) await putTopicPermission(ctx, t);
  for (const [kind, p] of parsed) await ctx.policies.put(kind, p);
  for (const x of list(d, 'exchanges')) {
    const name = str(x, 'name');
    if (isBuiltinExchange(name)) continue;
    const type = x.type;
    if (type !== 'direct' && type !== 'fanout' && type !== 'topic' && type !== 'headers') throw badRequest(`invalid exchange type: ${String(type)}`);
    const args = obj(x, 'arguments');
    const alternate = args['alternate-exchange'];
    await engine.declareExchange({
      name,
      type: type as ExchangeType,
      durable: x.durable !== false,
      autoDelete: x.auto_delete === true,
      internal: x.internal === true,
      ...(typeof alternate === 'string' ? { alternateExchange: alternate } : {}),
      rawArguments: args,
    });
  }
  for (const q of list(d, 'queues')) {
    const args = obj(q, 'arguments');
    if (args['x-queue-type'] === 'stream') {
      const r = await amqp!.declareStreamQueue(str(q, 'name'), args, q.durable !== false, q.auto_delete === true);
      if ('error' in r) throw badRequest(r.error);
      continue;
    }
    await engine.declareQueue({
      name: str(q, 'name'),
      durable: q.durable !== false,
      autoDelete: q.auto_delete === true,
      exclusiveOwner: null,
      arguments: queueArguments(args),
      rawArguments: args,
    });
  }
  for (const b of list(d, 'bindings')) {
    const kind = b.destination_type === 'exchange' ? 'exchange' : 'queue';
    const source = str(b, 'source');
    const destination = str(b, 'destination');
    const there = kind === 'queue' ? engine.getQueue(destination) !== undefined : engine.getExchange(destination) !== undefined;
    if (source === '' || engine.getExchange(source) === undefined || !there) continue;
    try {
      await engine.bind({
        source,
        destinationKind: kind,
        destination,
        key: typeof b.routing_key === 'string' ? b.routing_key : '',
        arguments: obj(b, 'arguments'),
      });
    } catch (e) {
      if (!(e instanceof FlowError && e.code === 'NOT_FOUND')) throw e;
    }
  }
}

/**
 * The password fields of an imported user. An empty password_hash for a user that exists keeps its password: FlowMQ
 * exports users it has no RabbitMQ hash of (made by the admin API or the users file) with an empty one, and
 * re-importing its own export must not take their passwords away.
 */
function pickPassword(u: Doc, exists: boolean): Doc {
  if (u.password !== undefined) return { password: u.password };
  if (u.password_hash === '' && exists) return {};
  if (u.password_hash !== undefined) return { password_hash: u.password_hash, hashing_algorithm: u.hashing_algorithm };
  return {};
}

export function definitionRoutes(app: FastifyInstance, ctx: RabbitContext): void {
  const admin = (req: FastifyRequest) => ctx.require(req, 'admin', 'cluster', '*');
  const download = (req: FastifyRequest, reply: FastifyReply) => {
    // The management UI asks for a file with ?download=<name>.
    const name = (req.query as Record<string, string> | undefined)?.download;
    if (typeof name === 'string' && name !== '') reply.header('content-disposition', `attachment; filename=${JSON.stringify(name)}`);
  };
  app.get('/api/definitions', async (req, reply) => {
    admin(req);
    download(req, reply);
    return exportDefinitions(ctx, false);
  });
  app.get<{ Params: { vhost: string } }>('/api/definitions/:vhost', async (req, reply) => {
    admin(req);
    if (req.params.vhost !== VHOST) throw notFound();
    download(req, reply);
    return exportDefinitions(ctx, true);
  });
  app.post<{ Body: unknown }>('/api/definitions', async (req, reply) => {
    admin(req);
    await importDefinitions(ctx, req.body, null);
    return reply.code(204).send();
  });
  app.post<{ Params: { vhost: string }; Body: unknown }>('/api/definitions/:vhost', async (req, reply) => {
    admin(req);
    if (req.params.vhost !== VHOST) throw notFound();
    await importDefinitions(ctx, req.body, VHOST);
    return reply.code(204).send();
  });
}
