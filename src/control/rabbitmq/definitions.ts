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
 * bindings; a binding whose source or destination is missing is skipped (RabbitMQ answers 204 then too). Queues,
 * exchanges and bindings are every vhost's (a vhost is a namespace): exported with their vhost and the names its
 * clients use, imported into the vhost they name with the names qualified as the write routes and the AMQP channel
 * qualify them (core vhosts.ts). Policies and operator policies are per vhost too (policy-store.ts), exported with
 * their `vhost` field (a per-vhost document's too, as RabbitMQ). The whole document's import makes the namespaces its
 * `vhosts` name that do not exist yet, before anything else, their importer getting every permission there as in
 * RabbitMQ (the route is a broker administrator's; a name no namespace may have is 400); the per-vhost import ignores `vhosts`, as RabbitMQ. What FlowMQ cannot hold is
 * refused before anything changes (400): an object, permission or policy naming a vhost that neither exists nor is
 * made by the document, or one the caller may not see; runtime parameters other than operator policies (federation
 * upstreams, shovels).
 * Permissions and topic permissions are per vhost (permissions.ts), in any namespace's. Topic permissions are imported after the permissions;
 * stream queues (x-queue-type stream) are made as AMQP's queue.declare makes them (src/protocols/amqp/admin.ts). Global parameters (cluster_name,
 * internal_cluster_id) are RabbitMQ's own and are ignored. A user FlowMQ holds no RabbitMQ hash of is exported with an
 * empty password_hash (RabbitMQ: no password login), and an empty one imported for an existing user keeps its password.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  DEFAULT_NAMESPACE,
  FlowError,
  ensureVhost,
  namespaceNames,
  vhostExchange,
  vhostKey,
  vhostQueue,
  type ExchangeType,
  type NamespaceNames,
} from '../../core/index.js';
import { RABBITMQ_API_VERSION, RabbitError, badRequest, type RabbitContext } from './context.js';
import { noSuchVhost } from './errors.js';
import { VHOST, bindingJson, bindingVhost, exchangeJson, ownArguments, partitionQueues, vhostOfName, vhostOfNamespace } from './format.js';
import { listPermissions, putPermission, putUser, userJson } from './permissions.js';
import { parsePolicy, policyJson, type PolicyKind } from './policy-store.js';
import { checkName, checkTopicKey, queueArguments, vhostQueueArgs } from './routes-write.js';
import { listTopicPermissions, putTopicPermission, topicPermissionBody } from './topic-permissions.js';
import { homeOf, namespaceOfLabel, namespaceOfVhost } from './vhost-labels.js';
import { validateName } from '../directory.js';
import { grantCreator } from './vhosts.js';

type Doc = Record<string, unknown>;

const isBuiltinExchange = (name: string) => name === '' || name.startsWith('amq.');

/**
 * The definitions document (GET). `only`: the vhost label of `/api/definitions/{vhost}` (RabbitMQ's per-vhost shape:
 * no vhost fields, no users, vhosts or permissions); null for the whole document, whose queues, exchanges and
 * bindings are those of every vhost the caller sees (ctx.sees: all for the admins group, else its own namespace's),
 * each with its `vhost` and its names as that vhost's clients know them (format.ts, as `/api/queues`).
 */
export function exportDefinitions(ctx: RabbitContext, req: FastifyRequest, only: string | null): Doc {
  const { engine } = ctx;
  const dir = ctx.access.directory;
  const seen = (label: string): boolean => (only !== null ? label === only : ctx.sees(req, label));
  /** RabbitMQ's object with its vhost field (the whole document) or without (per vhost). */
  const vh = (o: Doc, label: string): Doc => (only !== null ? o : { ...o, vhost: label });
  // Policies and operator policies (parameters of component operator_policy) of every vhost shown, each with its vhost
  // (RabbitMQ 3.10 keeps their vhost fields in a per-vhost document too).
  const policiesOf = (kind: PolicyKind) =>
    ctx.policies.list(kind, only === null ? undefined : namespaceOfLabel(only)).filter((p) => seen(vhostOfNamespace(p.namespace)));
  const operator = policiesOf('operator').map((p) => {
    const { vhost, name, ...value } = policyJson(p);
    return {
      value: { pattern: value.pattern, definition: value.definition, priority: value.priority, 'apply-to': value['apply-to'] },
      vhost,
      component: 'operator_policy',
      name,
    };
  });
  const policies = policiesOf('policy').map(policyJson);
  // Stream queues and super-stream partition queues (durable, never exclusive) with their x-queue-type, as RabbitMQ.
  const allStreams = ctx.amqp()?.streamQueues() ?? [];
  const queues = [
    ...engine
      .listQueues()
      .filter((q) => q.durable && q.exclusiveOwner === null)
      .map((q) => ({ at: vhostOfName(q.name), durable: q.durable, auto_delete: q.autoDelete, arguments: ownArguments(q.name, q.rawArguments) })),
    ...allStreams.map((v) => ({ at: vhostOfName(v.name), durable: true, auto_delete: false, arguments: v.arguments })),
  ]
    .filter((q) => seen(q.at.vhost))
    .sort((a, b) => (a.at.vhost !== b.at.vhost ? (a.at.vhost < b.at.vhost ? -1 : 1) : a.at.name < b.at.name ? -1 : 1))
    .map(({ at, ...q }) => vh({ name: at.name, ...q }, at.vhost));
  const pq = partitionQueues(allStreams);
  const exchanges = engine
    .listExchanges()
    .map((x) => ({ x, at: vhostOfName(x.name) }))
    .filter(({ at }) => !isBuiltinExchange(at.name) && seen(at.vhost))
    .sort((a, b) => (a.at.vhost !== b.at.vhost ? (a.at.vhost < b.at.vhost ? -1 : 1) : a.at.name < b.at.name ? -1 : 1))
    .map(({ x }) => {
      const j = exchangeJson(x);
      return vh({ name: j.name, type: j.type, durable: j.durable, auto_delete: j.auto_delete, internal: j.internal, arguments: j.arguments }, String(j.vhost));
    });
  const bindings = engine
    .listBindings()
    .filter((b) => b.source !== '' && seen(bindingVhost(b)))
    .map((b) => {
      const j = bindingJson(b, pq);
      return vh(
        { source: j.source, destination: j.destination, destination_type: j.destination_type, routing_key: j.routing_key, arguments: j.arguments },
        String(j.vhost),
      );
    });
  if (only !== null) return { rabbit_version: RABBITMQ_API_VERSION, parameters: operator, policies, queues, exchanges, bindings };
  return {
    rabbit_version: RABBITMQ_API_VERSION,
    rabbitmq_version: RABBITMQ_API_VERSION,
    product_name: 'FlowMQ',
    product_version: ctx.version,
    users: dir.listUsers().map((u) => userJson(ctx, u.username)),
    // Every namespace is a vhost (permissions may name any of them).
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

/**
 * Imports a definitions document. `only`: the vhost label of `POST /api/definitions/{vhost}`: as RabbitMQ, every
 * parameter, policy, queue, exchange and binding goes into that vhost whatever its `vhost` field says, and users,
 * vhosts, permissions and topic permissions are not looked at. Null (`POST /api/definitions`): each object goes into
 * the vhost it names ("/" when none), one the caller cannot see (ctx.sees) refused as one no namespace has.
 */
export async function importDefinitions(ctx: RabbitContext, req: FastifyRequest, doc: unknown, only: string | null): Promise<void> {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw badRequest('failed_to_parse_json');
  const d = doc as Doc;
  const { engine } = ctx;
  // Refuse what FlowMQ cannot hold before changing anything.
  // A vhost is a namespace (vhost-labels.ts). The whole document's `vhosts` that no namespace has yet are made first
  // (the route is a broker administrator's, as making a namespace is); permissions, topic permissions and policies
  // may name any vhost that exists or is made; queues, exchanges and bindings any the caller sees.
  const whole = only === null;
  const made = new Map<string, string | undefined>();
  if (whole)
    for (const o of list(d, 'vhosts')) {
      const name = str(o, 'name');
      if (namespaceOfVhost(ctx, name) !== null || made.has(name)) continue;
      try {
        validateName('namespace', name);
      } catch (e) {
        throw badRequest(`vhost ${JSON.stringify(name)}: ${(e as Error).message} (a vhost is a FlowMQ namespace)`);
      }
      const meta = o.metadata;
      const description = o.description ?? (typeof meta === 'object' && meta !== null ? (meta as Doc).description : undefined);
      made.set(name, typeof description === 'string' ? description : undefined);
    }
  const unknown = (v: unknown) => noSuchVhost(String(v));
  const known = (v: unknown): string => {
    if (typeof v === 'string' && made.has(v)) return v;
    const ns = typeof v === 'string' ? namespaceOfVhost(ctx, v) : null;
    if (ns === null) throw unknown(v);
    return vhostOfNamespace(ns);
  };
  /** The vhost of a queue, exchange, binding or policy: the path's, else its own field's, if the caller may see it. */
  const objectVhost = (o: Doc): NamespaceNames => {
    if (only !== null) return namespaceNames(namespaceOfLabel(only));
    const label = known(o.vhost ?? VHOST);
    if (!made.has(label) && !ctx.sees(req, label)) throw unknown(o.vhost);
    return namespaceNames(namespaceOfLabel(label));
  };
  const permissions = !whole
    ? []
    : list(d, 'permissions').map((p) => ({
        user: str(p, 'user'),
        vhost: known(p.vhost ?? VHOST),
        configure: str(p, 'configure'),
        write: str(p, 'write'),
        read: str(p, 'read'),
      }));
  const topicPermissions = !whole
    ? []
    : list(d, 'topic_permissions').map((t) => ({ user: str(t, 'user'), vhost: known(t.vhost ?? VHOST), ...topicPermissionBody(t) }));
  const users = whole ? list(d, 'users') : [];
  // Queues, exchanges and bindings with their vhost's names, checked as the write routes check theirs.
  const exchanges = list(d, 'exchanges')
    .map((x) => ({ x, ns: objectVhost(x), own: str(x, 'name') }))
    .filter(({ own }) => !isBuiltinExchange(own));
  for (const { x, own } of exchanges) {
    checkName('exchange', own);
    const type = x.type;
    if (type !== 'direct' && type !== 'fanout' && type !== 'topic' && type !== 'headers') throw badRequest(`invalid exchange type: ${String(type)}`);
    const ae = obj(x, 'arguments')['alternate-exchange'];
    if (typeof ae === 'string') checkName('exchange', ae);
  }
  // A stream queue is a FlowMQ stream made through the AMQP module: it needs AMQP running.
  const amqp = ctx.amqp();
  const queues = list(d, 'queues').map((q) => ({ q, ns: objectVhost(q), own: str(q, 'name'), args: obj(q, 'arguments') }));
  for (const { own, args } of queues) {
    checkName('queue', own);
    if (args['x-queue-type'] === 'stream' && amqp === undefined) throw badRequest(`stream queue ${own}: stream queues need the AMQP protocol (--protocols)`);
  }
  const bindings = list(d, 'bindings').map((b) => ({
    b,
    ns: objectVhost(b),
    kind: b.destination_type === 'exchange' ? ('exchange' as const) : ('queue' as const),
    source: str(b, 'source'),
    destination: str(b, 'destination'),
    key: typeof b.routing_key === 'string' ? b.routing_key : '',
  }));
  for (const b of bindings) {
    checkName('exchange', b.source);
    checkName(b.kind, b.destination);
    if (b.source === 'amq.topic') checkTopicKey(b.key);
  }
  const params = list(d, 'parameters');
  for (const p of params)
    if (p.component !== 'operator_policy') throw badRequest(`runtime parameters of component ${String(p.component)} are not supported by FlowMQ`);
  const policyBodies: Array<[PolicyKind, string, string, Doc]> = [
    ...list(d, 'policies').map((p): [PolicyKind, string, string, Doc] => ['policy', objectVhost(p).namespace, str(p, 'name'), p]),
    ...params.map((p): [PolicyKind, string, string, Doc] => ['operator', objectVhost(p).namespace, str(p, 'name'), obj(p, 'value')]),
  ];
  const parsed = policyBodies.map(([kind, ns, name, body]) => [kind, parsePolicy(kind, ns, name, body)] as const);

  for (const [name, description] of made) {
    await ctx.access.directory.putNamespace({ name, ...(description !== undefined ? { description } : {}) });
    await grantCreator(ctx, req, name);
  }
  for (const u of users) {
    const name = str(u, 'name');
    await putUser(ctx, name, { tags: u.tags ?? '', ...pickPassword(u, ctx.access.directory.user(name) !== undefined) });
  }
  for (const p of permissions) await putPermission(ctx, p);
  for (const t of topicPermissions) await putTopicPermission(ctx, t);
  for (const [kind, p] of parsed) await ctx.policies.put(kind, p);
  // The vhosts' predeclared exchanges (amq.direct...), as their first AMQP client or management write makes them.
  for (const o of [...exchanges, ...queues, ...bindings]) await ensureVhost(engine, o.ns);
  for (const { x, ns, own } of exchanges) {
    let args = obj(x, 'arguments');
    const ae = args['alternate-exchange'];
    const alternate = typeof ae === 'string' ? vhostExchange(ns, engine, ae) : undefined;
    if (alternate !== undefined && alternate !== ae) args = { ...args, 'alternate-exchange': alternate };
    await engine.declareExchange({
      name: vhostExchange(ns, engine, own),
      type: x.type as ExchangeType,
      durable: x.durable !== false,
      autoDelete: x.auto_delete === true,
      internal: x.internal === true,
      ...(alternate !== undefined ? { alternateExchange: alternate } : {}),
      rawArguments: args,
    });
  }
  for (const { q, ns, own, args } of queues) {
    // A reserved `amq.` name stays as written: the core refuses it as in `/` (as queue.declare in a vhost).
    const name = own.startsWith('amq.') ? own : vhostQueue(ns, own);
    if (args['x-queue-type'] === 'stream') {
      const r = await amqp!.declareStreamQueue(name, args, q.durable !== false, q.auto_delete === true);
      if ('error' in r) throw badRequest(r.error);
      continue;
    }
    const raw = vhostQueueArgs(ns, engine, args);
    await engine.declareQueue({
      name,
      durable: q.durable !== false,
      autoDelete: q.auto_delete === true,
      exclusiveOwner: null,
      arguments: queueArguments(raw),
      rawArguments: raw,
    });
  }
  for (const { b, ns, kind, source: ownSource, destination: ownDestination, key } of bindings) {
    if (ownSource === '') continue;
    const source = vhostExchange(ns, engine, ownSource);
    const destination = kind === 'queue' ? vhostQueue(ns, ownDestination) : vhostExchange(ns, engine, ownDestination);
    const there = kind === 'queue' ? engine.getQueue(destination) !== undefined : engine.getExchange(destination) !== undefined;
    if (engine.getExchange(source) === undefined || !there) continue;
    try {
      await engine.bind({ source, destinationKind: kind, destination, key: vhostKey(ns, source, key), arguments: obj(b, 'arguments') });
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
  /**
   * A per-vhost path's vhost label, resolved as `/api/queues/{vhost}` resolves it (ctx.vhost: a tenant's `/` is its
   * own namespace, another namespace is 404). The broker's administrators may use any; a namespace's administrator
   * (`admin namespace:<ns>`) its own namespace's vhost, which ctx.vhost gives it (not `/`: its policies are the broker's).
   */
  const vhostAdmin = (req: FastifyRequest, vhost: string, write: boolean): string => {
    let label: string;
    try {
      label = ctx.vhost(req, vhost);
    } catch (e) {
      // RabbitMQ's answers for a vhost it does not have (Debian's rabbitmq-server 3.10: GET 400, POST 404); another
      // tenant's is the same (nothing tells them apart).
      if (e instanceof RabbitError && e.status === 404)
        throw write ? new RabbitError(404, 'not_found', 'vhost_not_found') : new RabbitError(400, 'bad_request', 'vhost_not_found');
      throw e;
    }
    if (label === VHOST || !ctx.can(req, 'admin', 'namespace', namespaceOfLabel(label))) admin(req);
    return label;
  };
  const download = (req: FastifyRequest, reply: FastifyReply) => {
    // The management UI asks for a file with ?download=<name>.
    const name = (req.query as Record<string, string> | undefined)?.download;
    if (typeof name === 'string' && name !== '') reply.header('content-disposition', `attachment; filename=${JSON.stringify(name)}`);
  };
  app.get('/api/definitions', async (req, reply) => {
    admin(req);
    download(req, reply);
    return exportDefinitions(ctx, req, null);
  });
  app.get<{ Params: { vhost: string } }>('/api/definitions/:vhost', async (req, reply) => {
    const label = vhostAdmin(req, req.params.vhost, false);
    download(req, reply);
    return exportDefinitions(ctx, req, label);
  });
  app.post<{ Body: unknown }>('/api/definitions', async (req, reply) => {
    admin(req);
    await importDefinitions(ctx, req, req.body, null);
    return reply.code(204).send();
  });
  app.post<{ Params: { vhost: string }; Body: unknown }>('/api/definitions/:vhost', async (req, reply) => {
    const label = vhostAdmin(req, req.params.vhost, true);
    await importDefinitions(ctx, req, req.body, label);
    return reply.code(204).send();
  });
}
