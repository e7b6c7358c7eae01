/** The SessionStore / RetainedStore conformance suite against the PostgreSQL metastore (a database per `dir`). */
import { PostgresMetastore } from '../../src/storage/metastore/index.js';
import { sessionStoreConformance } from './sessions.suite.js';
import { databasePerDir } from './postgres-fixture.js';

const database = databasePerDir();
sessionStoreConformance('PostgresMetastore', true, async (dir) => {
  const m = await PostgresMetastore.open({ url: await database(dir) });
  return { sessions: m, retained: m, close: () => m.close() };
});
