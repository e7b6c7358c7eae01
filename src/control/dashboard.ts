/**
 * The web dashboard: static HTML, CSS and JavaScript (no framework, no CDN: everything comes from the broker),
 * served at `/` and `/dashboard/*` by the admin API's fastify server. The page is a client of /api/v1 like the
 * CLI: it logs in with POST /api/v1/login (session cookie + CSRF token) and draws what the API answers, so the
 * files themselves hold nothing secret and are served without login; every datum behind them needs the session.
 *
 * The files live in src/control/dashboard/ and the build copies them to dist/src/control/dashboard/ (package.json
 * `build`), beside this module once compiled, which is where they are looked for.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance, FastifySchema } from 'fastify';

/** Where the static files are: next to this module (dist/src/control/dashboard/ once built). */
export const DASHBOARD_ROOT = fileURLToPath(new URL('./dashboard/', import.meta.url));

export interface DashboardOptions {
  /** Another directory of files (tests); default DASHBOARD_ROOT. */
  root?: string;
}

/**
 * Adds the dashboard's routes to the admin API server: `GET /` (the page), `GET /dashboard` (redirect) and
 * `GET /dashboard/*` (its files). Call it once, before `listen`; it may also be registered as a fastify plugin
 * (`app.register(registerDashboard)`).
 */
export async function registerDashboard(app: FastifyInstance, opts: DashboardOptions = {}): Promise<void> {
  const root = opts.root ?? DASHBOARD_ROOT;
  // Read once: a missing build copy step fails at start, not at the first page load.
  const index = readFileSync(`${root.replace(/\/$/, '')}/index.html`);
  // A context of its own: the static plugin's decorations concern the dashboard only, whatever `app` is.
  await app.register(async (d) => {
    await d.register(fastifyStatic, {
      root,
      prefix: '/dashboard/',
      // The server may use @fastify/static for something else: do not claim reply.sendFile.
      decorateReply: false,
      index: ['index.html'],
      // File names carry no content hash, so a browser must revalidate (ETag) to see a new version after an upgrade.
      cacheControl: false,
      setHeaders: (reply) => void reply.header('cache-control', 'no-cache'),
    });
    // Hidden from the OpenAPI document (@fastify/swagger reads `hide`), as @fastify/static hides its own routes.
    d.get('/', { schema: { hide: true } as FastifySchema }, (_req, reply) =>
      reply.type('text/html; charset=utf-8').header('cache-control', 'no-cache').send(index),
    );
    // Relative links from /dashboard would resolve one level up; with `ignoreTrailingSlash` fastify already routes it.
    if (!d.hasRoute({ method: 'GET', url: '/dashboard' })) {
      d.get('/dashboard', { schema: { hide: true } as FastifySchema }, (_req, reply) => reply.redirect('/dashboard/', 301));
    }
  });
}
