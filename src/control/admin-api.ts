/**
 * The admin HTTP API: built on fastify in src/control/api/ (server.ts: the server, plugins and hooks; auth.ts:
 * who may call it; routes-*.ts: the routes by area). This module is its public entry point.
 */
export { startAdminApi, type AdminApi } from './api/server.js';
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
