/** The Metastore conformance suite against PostgreSQL: one server for the file, a database per suite `dir`. */
import { after, before } from 'node:test';
import { PostgresMetastore } from '../../src/storage/metastore/index.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';
import { metastoreConformance } from './metastore.suite.js';

let server: PostgresServer;
/** dir -> database URL: the suite reopens a `dir` to check what persists. */
const databases = new Map<string, string>();

before(async () => {
  server = await startPostgres();
});
after(async () => {
  await server.stop();
});

metastoreConformance('PostgresMetastore', async (dir) => {
  let url = databases.get(dir);
  if (url === undefined) databases.set(dir, (url = await server.createDatabase()));
  return PostgresMetastore.open({ url });
});
