/** The Metastore conformance suite against PostgreSQL: one server for the file, a database per suite `dir`. */
import { PostgresMetastore } from '../../src/storage/metastore/index.js';
import { metastoreConformance } from './metastore.suite.js';
import { databasePerDir } from './postgres-fixture.js';

const database = databasePerDir();
metastoreConformance('PostgresMetastore', async (dir) => PostgresMetastore.open({ url: await database(dir) }));
