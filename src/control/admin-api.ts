/**
 * The admin HTTP API: built on fastify in src/control/api/ (server.ts: the server, plugins and hooks; auth.ts:
 * who may call it; routes-*.ts: the routes by area). This module is its public entry point.
 */
import type { AdminApi } from './api/server.js';
import type { AdminApiOptions } from './api/types.js';

export type { AdminApi } from './api/server.js';

/**
 * Starts the admin HTTP API, importing fastify and its plugins (~50 ms of module loading) only now: the broker
 * starts it after its protocol listeners, which so accept connections that much sooner after a (re)start.
 */
export async function startAdminApi(opts: AdminApiOptions): Promise<AdminApi> {
  const { startAdminApi: start } = await import('./api/server.js');
  return start(opts);
}
export type {
  AdminApiOptions,
  ConsumerGroupAdmin,
  GroupDetail,
  GroupSummary,
  MetricsSource,
  OffsetResetTarget,
  SessionAdmin,
  StorageOps,
} from './api/types.js';
export { parseBasicAuth, parseBearer } from './api/auth.js';
export { hostName } from '../util/address.js';
export { streamView } from './api/routes-streams.js';
