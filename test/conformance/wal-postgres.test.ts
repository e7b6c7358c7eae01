/**
 * The WriteAheadLog conformance suite against PostgresWal (a database per `dir`). The suite's failing-disk cases
 * need a file opener (`io`), which this backend has no use for: the factory takes only `dir`, so the suite leaves
 * them out. Its own failure cases (the server stopped under appends) are in test/storage/postgres.test.ts.
 */
import { PostgresWal } from '../../src/storage/wal/index.js';
import { walConformance } from './wal.suite.js';
import { databasePerDir } from './postgres-fixture.js';

const database = databasePerDir();
walConformance('PostgresWal', async (dir) => PostgresWal.open({ url: await database(dir) }), { shared: true });
