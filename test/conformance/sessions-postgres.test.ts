/** The SessionStore / RetainedStore conformance suite against the PostgreSQL metastore (a database per `dir`). */
import { after, before } from 'node:test';
import { PostgresMetastore } from '../../src/storage/metastore/index.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';
import { sessionStoreConformance } from './sessions.suite.js';

let server: PostgresServer;
const databases = new Map<string, string>();

before(async () => {
  server = await startPostgres();
});
after(async () => {
  await server.stop();
});

sessionStoreConformance('PostgresMetastore', true, async (dir) => {
  let url = databases.get(dir);
  if (url === undefined) databases.set(dir, (url = await server.createDatabase()));
  const m = await PostgresMetastore.open({ url });
  return { sessions: m, retained: m, close: () => m.close() };
});
