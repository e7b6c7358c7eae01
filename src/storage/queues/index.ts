/**
 * QueueStore backends (the interface is the core's, src/core/queues.ts): embedded SQLite run by a worker thread,
 * and PostgreSQL. Queue, exchange and binding definitions are not here but in the metastore (QueueCatalog).
 */
export { SqliteQueueStore } from './sqlite-queue-store.js';
export { PostgresQueueStore } from './postgres-queue-store.js';
