/**
 * The WriteAheadLog conformance suite against PostgresWal (a database per `dir`). The suite's failing-disk cases
 * need a file opener (`io`), which this backend has no use for: the factory takes only `dir`, so the suite leaves
 * them out. Its own failure cases (the server stopped under appends) are in test/storage/postgres.test.ts.
 */
import { after, before } from 'node:test';
import { PostgresWal } from '../../src/storage/wal/index.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';
import { walConformance } from './wal.suite.js';

let server: PostgresServer;
const databases = new Map<string, string>();

before(async () => {
  server = await startPostgres();
});
after(async () => {
  await server.stop();
});

walConformance('PostgresWal', async (dir) => {
  let url = databases.get(dir);
  if (url === undefined) databases.set(dir, (url = await server.createDatabase()));
  return PostgresWal.open({ url });
});
