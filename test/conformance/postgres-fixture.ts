/**
 * One real PostgreSQL for a conformance test file, and a database per suite `dir` (the suites reopen a `dir` to
 * check what persists, so the same `dir` maps to the same database).
 */
import { after, before } from 'node:test';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';

export function databasePerDir(): (dir: string) => Promise<string> {
  let server: PostgresServer;
  const databases = new Map<string, string>();
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server.stop();
  });
  return async (dir) => {
    let url = databases.get(dir);
    if (url === undefined) databases.set(dir, (url = await server.createDatabase()));
    return url;
  };
}
