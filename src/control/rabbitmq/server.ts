/**
 * The RabbitMQ management HTTP API subset that monitoring and scripts use (rabbitmqadmin-style scripts, Debian's
 * nagios-plugins-rabbitmq, Prometheus exporters that read /api/overview), on its own port
 * (`--amqp-management-port`, RabbitMQ's 15672), with RabbitMQ 3.x's paths, JSON fields, status codes and errors.
 *
 * Its own port rather than the admin API's because the two disagree on what a client sees: RabbitMQ tools answer a
 * Basic challenge only for the realm "RabbitMQ Management" (Perl LWP sends credentials after a 401 naming that
 * realm; the nagios checks do so), errors are `{"error":..,"reason":..}`, not FlowMQ's envelope, and tools are
 * configured with a host and port whose every /api/ path is RabbitMQ's.
 *
 * Who may call: every request needs HTTP Basic credentials of a FlowMQ user (checked by the control plane's
 * password guard, failures slowed as every other login: a failed check waits its turn, then 401), RabbitMQ leaves
 * nothing of its API open either. While no user exists at all, loopback callers act as an administrator with any
 * credentials (RabbitMQ's guest/guest, which it allows from loopback only); others get 401. The Host header must
 * name this server (DNS rebinding, as the admin API: see ../api/auth.ts). What a user sees follows its policies:
 * lists keep what it may `describe` (queue:, exchange:), its own connections and channels unless it may
 * `describe cluster:*`, which the node, health and overview figures beyond its own objects need too.
 */
import { DEFAULT_NAMESPACE, namespaceNames, type NamespaceNames } from '../../core/namespaces.js';
import { ownVhostText } from '../../core/vhosts.js';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { isFlowError } from '../../core/index.js';
import { ADMIN_GROUP, type Action, type ResourceKind } from '../policy.js';
import { HostCheck, parseBasicAuth } from '../api/auth.js';
import { HTTP_TIMEOUTS, closeUnreadBody, httpServerOptions } from '../http-guard.js';
import { isLoopback } from '../../util/address.js';
import { LogLimiter, logKey } from '../../util/log-limit.js';
import { CHALLENGE, RabbitError, badRequest, nodeName, notFound, type Caller, type RabbitContext, type RabbitManagementOptions } from './context.js';
import { Rates, connectionFigures, overviewStats, queueFigures, streamQueueFigures } from './format.js';
import { readRoutes } from './routes-read.js';
import { writeRoutes } from './routes-write.js';
import { healthRoutes } from './routes-health.js';
import { permissionRoutes } from './permissions.js';
import { topicPermissionRoutes } from './topic-permissions.js';
import { policyRoutes } from './policies.js';
import { RabbitPolicies } from './policy-store.js';
import { definitionRoutes } from './definitions.js';
import { vhostRoutes } from './vhosts.js';

export type { RabbitManagementOptions } from './context.js';

export interface RabbitManagement {
  address(): AddressInfo;
  readonly app: FastifyInstance;
  close(): Promise<void>;
}

export async function startRabbitManagement(opts: RabbitManagementOptions): Promise<RabbitManagement> {
  const { access, logger } = opts;
  const refusals = new LogLimiter(logger);
  const hosts = new HostCheck(opts.host, opts.allowedHosts ?? []);
  const node = nodeName();
  const rates = new Rates((put) => {
    let messages = 0;
    let ready = 0;
    let unacked = 0;
    const handles = [];
    for (const def of opts.engine.listQueues()) {
      const h = opts.engine.getQueue(def.name);
      if (h === undefined) continue;
      handles.push(h);
      queueFigures(h, put);
      const s = h.stats();
      messages += s.ready + s.unacked;
      ready += s.ready;
      unacked += s.unacked;
    }
    for (const v of opts.amqp()?.streamQueues() ?? []) {
      streamQueueFigures(v, put);
      messages += v.messages;
      ready += v.messages;
    }
    for (const [k, v] of Object.entries(overviewStats(handles, opts.amqp()))) put(`o.${k}`, v);
    put('t.messages', messages);
    put('t.messages_ready', ready);
    put('t.messages_unacknowledged', unacked);
    for (const c of opts.amqp()?.connections() ?? []) connectionFigures(c, put);
  });

  // Policies apply to queues from now on; another broker's change (the directory reloads) is picked up too.
  const applyPolicies = () => opts.engine.setQueuePolicy((def) => policies.effectiveArguments(def));
  const policies = new RabbitPolicies(
    access.directory.store,
    () => {
      applyPolicies();
      access.directory.announce?.();
    },
    opts.engine,
  );
  await policies.reload();
  applyPolicies();
  const stopWatching = access.directory.onChange(() => {
    policies
      .reload()
      .then(applyPolicies)
      .catch((err: unknown) => logger.warn({ err }, 'RabbitMQ policies could not be reloaded; keeping the last ones'));
  });

  const timeouts = opts.timeouts ?? HTTP_TIMEOUTS;
  const app = Fastify({
    logger: false,
    bodyLimit: 1024 * 1024,
    http: httpServerOptions(timeouts),
    requestTimeout: timeouts.requestTimeoutMs,
    keepAliveTimeout: timeouts.keepAliveTimeoutMs,
    frameworkErrors: (err, _req, reply) => {
      void (reply as unknown as FastifyReply).code(400).send({ error: 'bad_request', reason: err.message });
    },
  });
  app.decorateRequest('rabbitCaller', null);
  app.decorateRequest('rabbitNames', null);
  // RabbitMQ takes JSON bodies whatever the content type the client names (rabbitmqadmin and curl scripts vary).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => {
    const text = String(body);
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch {
      done(badRequest('failed to decode JSON'), undefined);
    }
  });
  app.addHook('onSend', async (req, reply) => {
    closeUnreadBody(req.raw, reply.raw, timeouts.lingerMs);
  });
  app.setErrorHandler((err, req, reply) => {
    // In a vhost other than `/`, texts name things as its clients do (core vhosts.ts).
    const own = (text: string) => (req.rabbitNames === null ? text : ownVhostText(req.rabbitNames, text));
    if (err instanceof RabbitError)
      return reply
        .code(err.status)
        .headers(err.headers)
        .send({ error: err.error, reason: err.reasonJson ?? own(err.reason) });
    if (isFlowError(err)) {
      const status = err.code === 'NOT_FOUND' ? 404 : err.code === 'ACCESS_REFUSED' ? 401 : err.code === 'RESOURCE_LOCKED' ? 405 : 400;
      const error = status === 404 ? 'Object Not Found' : status === 401 ? 'not_authorized' : 'bad_request';
      return reply.code(status).send({ error, reason: own(err.message) });
    }
    const status = (err as { statusCode?: number }).statusCode;
    const message = (err as Error).message;
    if (typeof status === 'number' && status >= 400 && status < 500) return reply.code(status).send({ error: 'bad_request', reason: message });
    logger.error({ err, method: req.method, url: req.url }, 'RabbitMQ management request failed');
    return reply.code(500).send({ error: 'internal_server_error', reason: message });
  });
  app.setNotFoundHandler((_req, reply) => reply.code(404).send({ error: 'Object Not Found', reason: 'Not Found' }));

  app.addHook('onRequest', async (req) => {
    const remote = req.socket.remoteAddress;
    if (!hosts.allows(req.headers.host)) {
      refusals.log(
        'warn',
        logKey('rabbit host refused', remote),
        { remote, host: req.headers.host ?? null },
        'management API request for a host name it does not serve refused',
      );
      throw new RabbitError(421, 'bad_request', 'this server does not answer for that host name; see --http-allowed-hosts');
    }
    const basic = parseBasicAuth(req.headers.authorization);
    if (basic === null) throw new RabbitError(401, 'not_authorized', 'Not_Authorized', CHALLENGE);
    if (!access.hasUsers) {
      if (isLoopback(remote)) {
        req.rabbitCaller = { principal: null, name: basic.username };
        return;
      }
      throw new RabbitError(401, 'not_authorized', 'Login failed', CHALLENGE);
    }
    const outcome = await access.password(basic.username, basic.password, remote, 'http');
    if (outcome.verdict === 'busy') throw new RabbitError(503, 'service_unavailable', 'too many login attempts: retry later', { 'retry-after': '1' });
    if (outcome.verdict !== 'ok') {
      refusals.log('warn', logKey('rabbit login refused', remote), { remote, username: basic.username }, 'management API login refused');
      throw new RabbitError(401, 'not_authorized', 'Login failed', CHALLENGE);
    }
    // An OIDC token in the password names its user itself (the Basic username is not looked at).
    req.rabbitCaller = { principal: outcome.principal, name: outcome.principal.user ?? basic.username };
  });

  const caller = (req: FastifyRequest): Caller => {
    if (req.rabbitCaller === null) throw new RabbitError(401, 'not_authorized', 'Not_Authorized', CHALLENGE);
    return req.rabbitCaller;
  };
  const can = (req: FastifyRequest, action: Action, kind: ResourceKind, name: string, names?: NamespaceNames): boolean => {
    const c = caller(req);
    if (c.principal === null) return true;
    // RabbitMQ's monitoring tag (a group here, see permissions.ts): node-wide figures.
    if (action === 'describe' && kind === 'cluster' && c.principal.groups.includes('monitoring') && c.principal.removed !== true) return true;
    // A vhost's names are judged unqualified, as the AMQP adapter judges its clients' (feeding topics too).
    if (names !== undefined && !names.isDefault) return access.namespacedAccessFor(c.principal, names, 'http', req.ip).can(action, kind, name);
    return access.accessFor(c.principal, 'http', req.ip).can(action, kind, name);
  };
  const ctx: RabbitContext = {
    ...opts,
    node,
    rates,
    policies,
    can,
    caller,
    require(req, action, kind, name, names) {
      if (!can(req, action, kind, name, names)) throw new RabbitError(401, 'not_authorized', `Access refused: ${action} ${kind}:${name}`);
    },
    sees(req, vhost) {
      const p = caller(req).principal;
      if (p === null || p.groups.includes(ADMIN_GROUP)) return true;
      return vhost === (p.namespace === DEFAULT_NAMESPACE ? '/' : p.namespace);
    },
    vhost(req, vhost) {
      const p = caller(req).principal;
      const tenant = p !== null && p.namespace !== DEFAULT_NAMESPACE && !p.groups.includes(ADMIN_GROUP);
      if (vhost === '/' || vhost === DEFAULT_NAMESPACE) {
        if (!tenant) return '/';
        // A tenant's `/` is its own namespace, as at AMQP connection.open; `default` is another tenant's vhost.
        if (vhost === DEFAULT_NAMESPACE) throw notFound();
        return p.namespace;
      }
      if (opts.access.directory.namespace(vhost) === undefined) throw notFound();
      if (p === null || vhost === p.namespace || p.groups.includes(ADMIN_GROUP)) return vhost;
      throw notFound();
    },
    writeVhost(req, vhost) {
      const v = this.vhost(req, vhost);
      const names = namespaceNames(v === '/' ? DEFAULT_NAMESPACE : v);
      req.rabbitNames = names;
      return names;
    },
  };
  readRoutes(app, ctx);
  writeRoutes(app, ctx);
  healthRoutes(app, ctx);
  permissionRoutes(app, ctx);
  topicPermissionRoutes(app, ctx);
  policyRoutes(app, ctx);
  definitionRoutes(app, ctx);
  vhostRoutes(app, ctx);

  await app.listen({ host: opts.host, port: opts.port });
  hosts.setBound((app.server.address() as AddressInfo).address);
  rates.start();
  return {
    app,
    address: () => app.server.address() as AddressInfo,
    close: async () => {
      rates.stop();
      refusals.stop();
      stopWatching();
      opts.engine.setQueuePolicy(null);
      app.server.closeAllConnections();
      await app.close();
    },
  };
}
