/**
 * The SQLite schema migrations, apart from the metastore's module so that the queue store's worker thread, which
 * runs them on its own database, loads only this (its boot was ~50 ms with the metastore's and the core's modules).
 */
import type Database from 'better-sqlite3';
import { FlowError } from '../../core/errors.js';
import { migrations, type Migration } from './migrations.js';

/**
 * Brings the schema up to date, all pending migrations in one transaction so a failure leaves the database as
 * it was. Exported for tests.
 */
export function migrate(db: Database.Database, list: readonly Migration[] = migrations): number {
  list.forEach((m, i) => {
    if (m.version !== i + 1) throw new Error(`metastore migration list out of order at ${m.name}`);
  });
  const latest = list.length;
  const run = db.transaction(() => {
    db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version    INTEGER PRIMARY KEY,
      name       TEXT    NOT NULL,
      applied_at INTEGER NOT NULL
    )`);
    const row = db.prepare('SELECT MAX(version) AS v FROM schema_migrations').get() as { v: number | null };
    const current = row.v ?? 0;
    if (current > latest) {
      throw new FlowError(
        'STORAGE_ERROR',
        `metastore schema version ${current} is newer than this FlowMQ knows (${latest}); upgrade FlowMQ or use another data directory`,
      );
    }
    const record = db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)');
    for (const m of list.slice(current)) {
      db.exec(m.sql);
      record.run(m.version, m.name, Date.now());
    }
    return latest;
  });
  // IMMEDIATE takes the write lock up front, so two processes opening one file cannot both migrate it.
  return run.immediate();
}
