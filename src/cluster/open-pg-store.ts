/**
 * Opens the PostgreSQL membership store, importing it (and the pg driver) only then: an embedded broker, which never
 * calls this, does not load pg at start (see src/storage/open.ts).
 */
import type { PostgresClusterStore } from './pg-store.js';

export async function openPostgresClusterStore(opts: Parameters<typeof PostgresClusterStore.open>[0]): Promise<PostgresClusterStore> {
  const { PostgresClusterStore } = await import('./pg-store.js');
  return PostgresClusterStore.open(opts);
}
