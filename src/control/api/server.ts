/**
 * The admin HTTP API (control plane) on fastify: JSON under /api/v1/ (the `flowmq` CLI and the dashboard are its
 * clients), /healthz, /readyz, /metrics, and the dashboard's static files when part of the build.
 *
 * Who may call what: auth.ts (Host check, credentials, the JSON content-type rule) and common.ts (`authorize`:
 * GET → describe, POST → create, PATCH/PUT → alter, DELETE → delete on the resource; users, groups, policies,
 * namespaces, other users' tokens, kicks and the log level → `admin cluster:*`; broker status and clients →
 * `describe cluster:*`). Errors are `{ "error": { "code": "...", "message": "..." } }` with a matching status;
 * lists are `{ "items": [...], "next": cursor|null }` (`?limit=`, `?cursor=`).
 *
 * Every route carries JSON schemas (fastify validates body, params and query with them) from which
 * @fastify/swagger builds the OpenAPI 3 document at /api/v1/openapi.json; a test checks that every route is in
 * the document and every documented route exists.
 */
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import fastifyCookie from '@fastify/cookie';
import { AjvCompiler } from '@fastify/ajv-compiler';
import fastifyHelmet from '@fastify/helmet';
import fastifyRateLimit from '@fastify/rate-limit';
import fastifySwagger from '@fastify/swagger';
import { LogLimiter, logKey } from '../../util/log-limit.js';
import { HostCheck, PUBLIC_MAX_BODY, Sessions, authenticate } from './auth.js';
import { addressFilter } from '../../util/address.js';
import { HTTP_TIMEOUTS, closeUnreadBody, httpServerOptions } from '../http-guard.js';
import { HttpError, sendError } from './common.js';
import { brokerRoutes } from './routes-broker.js';
import { identityRoutes } from './routes-identity.js';
import { streamRoutes } from './routes-streams.js';
import { queueRoutes } from './routes-queues.js';
import { groupRoutes } from './routes-groups.js';
import { configRoutes } from './routes-configs.js';
import { mqttRoutes } from './routes-mqtt.js';
import { clusterRoutes } from './routes-cluster.js';
import type { AdminApiOptions } from './types.js';

export interface AdminApi {
  address(): AddressInfo;
  /** Who may use the API, for the start-up log line. */
  readonly auth: string;
  /** True when anyone who can connect may use it and the address is reachable from other machines. */
  readonly exposed: boolean;
  /** The fastify instance (tests inject requests). */
  readonly app: FastifyInstance;
  /** Every route registered, as fastify saw it (the OpenAPI test walks them). */
  readonly routes: ReadonlyArray<{ method: string; url: string; hidden: boolean }>;
  close(): Promise<void>;
}

const MAX_BODY = 1024 * 1024;
const OPEN_PATHS = new Set(['/healthz', '/readyz', '/metrics']);
/** Under /api/v1 but callable without credentials. */
const PUBLIC_API = new Set(['POST /api/v1/login', 'GET /api/v1/openapi.json', 'HEAD /api/v1/openapi.json']);

/** The dashboard module (part H) when the build has it; null otherwise. */
async function defaultDashboard(): Promise<((app: FastifyInstance) => Promise<void> | void) | null> {
  // A computed specifier: the dashboard is another part of the build and may be absent from it.
  const spec = new URL('../dashboard.js', import.meta.url).href;
  try {
    const mod = (await import(spec)) as { registerDashboard?: (app: FastifyInstance) => Promise<void> | void };
    return mod.registerDashboard ?? null;
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_MODULE_NOT_FOUND') return null;
    throw err;
  }
}

/**
 * Route validators compiled at a route's first request instead of at start. Compiling every route's JSON schema
 * with ajv was most of the admin API's start (~240 ms of CPU out of ~340 ms, profiled), paid by every broker start
 * (and the test suite starts hundreds) for routes most runs never call. The compiled function is kept once built;
 * fastify reads a failed check's `errors` from the function it holds, so the wrapper carries them over.
 */
function lazyValidators(external: Parameters<ReturnType<typeof AjvCompiler>>[0], options: Parameters<ReturnType<typeof AjvCompiler>>[1]) {
  const compile = buildAjvValidators(external, options);
  return (route: Parameters<typeof compile>[0]) => {
    let fn: ReturnType<typeof compile> | undefined;
    const validate = ((data: unknown) => {
      fn ??= compile(route);
      const ok = fn(data);
      validate.errors = fn.errors;
      return ok;
    }) as ReturnType<typeof compile>;
    return validate;
  };
}
const buildAjvValidators = AjvCompiler();

export async function startAdminApi(opts: AdminApiOptions): Promise<AdminApi> {
  const { logger, access } = opts;
  const refusals = new LogLimiter(logger);
  const hosts = new HostCheck(opts.host, opts.allowedHosts ?? []);
  const openAllowed = addressFilter(opts.metricsAllow ?? []);
  const sessions = new Sessions(access.directory.store, opts.sessionTtlMs ?? 12 * 3_600_000);
  const anonymous = opts.anonymous ?? false;

  const timeouts = opts.timeouts ?? HTTP_TIMEOUTS;
  const app = Fastify({
    logger: false,
    bodyLimit: MAX_BODY,
    // Idle, slow and half-sent requests end (408): see http-guard.ts. fastify sets the last two on the server itself.
    http: httpServerOptions(timeouts),
    requestTimeout: timeouts.requestTimeoutMs,
    keepAliveTimeout: timeouts.keepAliveTimeoutMs,
    // Unknown fields are refused, not silently dropped: a typo in a policy must not widen or narrow it unnoticed.
    ajv: { customOptions: { removeAdditional: false, coerceTypes: 'array', allErrors: false, allowUnionTypes: true } },
    // A malformed %-escape or URL is the client's error (400), in the same envelope as every other error.
    frameworkErrors: (err, _req, reply) => {
      void (reply as unknown as FastifyReply).code(400).send({ error: { code: 'INVALID_ARGUMENT', message: err.message } });
    },
    exposeHeadRoutes: true,
    return503OnClosing: true,
    schemaController: { compilersFactory: { buildValidator: lazyValidators } },
  });
  app.decorateRequest('auth', null);
  const routes: Array<{ method: string; url: string; hidden: boolean }> = [];
  app.addHook('onRoute', (r) => {
    for (const method of [r.method].flat()) routes.push({ method, url: r.url, hidden: (r.schema as { hide?: boolean } | undefined)?.hide === true });
  });

  // An empty body with the JSON content type is no body (DELETE and POST .../flush carry the type but nothing else).
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: MAX_BODY }, (_req, body, done) => {
    const text = String(body);
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch {
      done(new HttpError(400, 'INVALID_ARGUMENT', 'request body is not valid JSON'), undefined);
    }
  });

  await app.register(fastifyCookie);
  await app.register(fastifyHelmet, {
    // The dashboard's own scripts only (no inline script, no CDN: an injected <script> cannot run); inline styles
    // are allowed, they cannot run code.
    contentSecurityPolicy: {
      useDefaults: true,
      // No upgrade-insecure-requests (one of helmet's defaults): the API is plain HTTP unless a TLS proxy fronts it,
      // and a browser loading the dashboard over http:// from any address but loopback would fetch the page's own
      // scripts over https:// from a port that does not speak TLS (a blank page). Behind an HTTPS proxy every
      // request is https:// already, so the directive would add nothing there.
      directives: {
        'script-src': ["'self'"],
        'style-src': ["'self'", "'unsafe-inline'"],
        'img-src': ["'self'", 'data:'],
        'connect-src': ["'self'"],
        'upgrade-insecure-requests': null,
      },
    },
    // Plain HTTP: a TLS-terminating proxy in front sets its own Strict-Transport-Security.
    hsts: false,
  });
  await app.register(fastifyRateLimit, {
    global: false,
    errorResponseBuilder: (_req, ctx) =>
      new HttpError(429, 'RATE_LIMITED', `too many login attempts from this address: retry in ${Math.ceil(ctx.ttl / 1000)} s`, {
        'retry-after': String(Math.ceil(ctx.ttl / 1000)),
      }),
  });
  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.0.3',
      info: { title: 'FlowMQ admin API', version: opts.version ?? '0.0.0', description: 'Control plane of a FlowMQ broker.' },
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', description: 'an API token fmq_<id>.<secret>' },
          basic: { type: 'http', scheme: 'basic' },
          session: { type: 'apiKey', in: 'cookie', name: 'flowmq_session', description: 'dashboard session; non-GET requests need X-CSRF-Token' },
        },
      },
      security: [{ bearer: [] }, { basic: [] }, { session: [] }],
    },
  });

  app.setErrorHandler((err, req, reply) => {
    const status = (err as { statusCode?: number }).statusCode;
    if (!(err instanceof HttpError) && (status === undefined || status >= 500) && (err as { code?: string }).code === undefined) {
      logger.error({ err, method: req.method, url: req.url }, 'admin API request failed');
    }
    return sendError(reply, err);
  });
  app.setNotFoundHandler((req, reply) => sendError(reply, new HttpError(404, 'NOT_FOUND', `no such endpoint ${req.method} ${req.url.split('?')[0]}`)));

  // A response sent before the request's body was read (a refusal in onRequest, a 404, a GET with a body, fastify's
  // own 413) closes the connection instead of letting Node read the rest of the body: see http-guard.ts.
  app.addHook('onSend', async (req, reply) => {
    closeUnreadBody(req.raw, reply.raw, timeouts.lingerMs);
  });
  // `Expect: 100-continue` is answered only once the request passed the checks below (the end of the onRequest
  // hook), so that a refused client learns it before it sends its body (RFC 9110 section 10.1.1); Node would send
  // 100 Continue as soon as the headers are in.
  app.server.on('checkContinue', (req, res) => app.server.emit('request', req, res));

  app.addHook('onRequest', async (req, reply) => {
    const path = req.url.split('?')[0];
    const remote = req.socket.remoteAddress;
    if (OPEN_PATHS.has(path)) {
      if (openAllowed !== null && !openAllowed(remote)) throw new HttpError(403, 'FORBIDDEN', `${path} is not open to ${remote}: see --http-metrics-allow`);
      return;
    }
    if (!hosts.allows(req.headers.host)) {
      const host = req.headers.host;
      refusals.log('warn', logKey('admin host refused', remote), { remote, host: host ?? null }, 'admin API request for a host name it does not serve refused');
      throw new HttpError(
        421,
        'MISDIRECTED_REQUEST',
        host === undefined
          ? 'a Host header is required'
          : `this server does not answer for host "${host}"; use its address or add the name to --http-allowed-hosts`,
      );
    }
    const open = !path.startsWith('/api/') || PUBLIC_API.has(`${req.method} ${path}`);
    if (!open) req.auth = await authenticate({ access, sessions, anonymous, refusals }, req);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      const type = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
      if (type !== 'application/json') {
        throw new HttpError(415, 'UNSUPPORTED_MEDIA_TYPE', `${req.method} requests must have Content-Type: application/json (body or not)`);
      }
    }
    // The body limit from the announced length, before a byte of the body is read (a chunked body is counted as
    // it arrives, by the JSON parser's own limit).
    const length = Number(req.headers['content-length'] ?? 0);
    const limit = open ? PUBLIC_MAX_BODY : MAX_BODY;
    if (length > limit) throw new HttpError(413, 'LIMIT_EXCEEDED', `request body of ${length} bytes is over the limit of ${limit}`);
    if (/^100-continue$/i.test(String(req.headers.expect ?? '').trim())) reply.raw.writeContinue();
  });

  const ctx = {
    ...opts,
    access,
    sessions,
    rootLogger: opts.rootLogger ?? logger,
    groups: opts.groups ?? (() => []),
    loginRateLimit: opts.loginRateLimit ?? 10,
  };
  await app.register(async (api) => {
    brokerRoutes(api, ctx);
    identityRoutes(api, ctx);
    streamRoutes(api, ctx);
    queueRoutes(api, ctx);
    groupRoutes(api, ctx);
    mqttRoutes(api, ctx);
    clusterRoutes(api, ctx);
    configRoutes(api, ctx);
    api.get('/api/v1/openapi.json', { schema: { tags: ['meta'], summary: 'This document (OpenAPI 3)' } }, async () => app.swagger());
  });
  const dashboard = opts.dashboard === undefined ? await defaultDashboard() : opts.dashboard;
  if (dashboard) await app.register(async (d) => dashboard(d));

  await app.listen({ host: opts.host, port: opts.port });
  const address = app.server.address() as AddressInfo;
  hosts.setBound(address.address);
  return {
    app,
    routes,
    address: () => app.server.address() as AddressInfo,
    get auth(): string {
      const n = access.directory.size;
      if (n === 0 && !access.hasUsers) return 'bootstrap: loopback callers act as an administrator until the first user exists';
      return `users (${n} in the directory), API tokens, dashboard sessions${anonymous ? '; anonymous callers as the anonymous principal' : ''}`;
    },
    get exposed(): boolean {
      return anonymous && !hosts.loopback;
    },
    close: async () => {
      refusals.stop();
      app.server.closeAllConnections();
      await app.close();
    },
  };
}
