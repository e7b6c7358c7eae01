/** The ControlStore conformance suite against the PostgreSQL metastore (a database per `dir`). */
import { PostgresMetastore } from '../../src/storage/metastore/index.js';
import { controlStoreConformance } from './control.suite.js';
import { databasePerDir } from './postgres-fixture.js';

const database = databasePerDir();
controlStoreConformance('PostgresMetastore', true, async (dir) => {
  const m = await PostgresMetastore.open({ url: await database(dir) });
  return { store: m, close: () => m.close() };
});
