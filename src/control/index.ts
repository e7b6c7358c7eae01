export { startAdminApi, streamView, type AdminApi, type AdminApiOptions, type StorageOps } from './admin-api.js';
