/**
 * The admin HTTP API: built on fastify in src/control/api/ (server.ts: the server, plugins and hooks; auth.ts:
 * who may call it; routes-*.ts: the routes by area). This module is its public entry point.
 */
export { startAdminApi, type AdminApi, type AdminApiOptions, type MetricsSource, type StorageOps } from './api/server.js';
export { hostName, parseBasicAuth, parseBearer, SESSION_COOKIE, CSRF_HEADER } from './api/auth.js';
export { streamView } from './api/routes-streams.js';
