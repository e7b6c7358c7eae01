/**
 * Whether the embedded metastore of a data directory holds users, read before the broker opens it (`flowmq start`
 * decides with it what the NATS port bound early announces: anonymous access is on, by default, exactly while no
 * user exists). A read-only look at the SQLite file, which the broker then opens as usual; better-sqlite3 is
 * loaded here (the broker loads it anyway, and gets this copy). This module imports only node: modules.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

/** The embedded metastore's file in a data directory (storage/open.ts opens the same). */
export const SQLITE_METASTORE_FILE = 'metastore.db';

/** True or false when the file answers (no file: no users); null when it cannot be read (then nobody can tell). */
export function sqliteHasUsers(dataDir: string): boolean | null {
  const file = join(dataDir, SQLITE_METASTORE_FILE);
  if (!existsSync(file)) return false;
  try {
    type Db = { prepare(sql: string): { get(...a: unknown[]): unknown }; close(): void };
    const Database = createRequire(import.meta.url)('better-sqlite3') as new (f: string, o: { readonly: boolean; fileMustExist: boolean }) => Db;
    const db = new Database(file, { readonly: true, fileMustExist: true });
    try {
      const table = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'control_docs'").get();
      if (table === undefined) return false;
      return db.prepare("SELECT 1 FROM control_docs WHERE kind = 'user' LIMIT 1").get() !== undefined;
    } finally {
      db.close();
    }
  } catch {
    return null;
  }
}
