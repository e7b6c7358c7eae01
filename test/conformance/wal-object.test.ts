/**
 * The WriteAheadLog conformance suite against ObjectWal (`--wal object`): the index in a PostgreSQL database per
 * `dir`, the objects in a local object store per `dir` (test/storage/wal/object-wal.test.ts has its own cases: what
 * PostgreSQL holds, objects collected by trim, orphans swept; test/e2e/wal-object.test.ts runs it on s3rver). A short
 * window, so that the suite's many small appends are quick.
 */
import { join } from 'node:path';
import { FsObjectStore } from '../../src/storage/objects/fs-store.js';
import { ObjectWal } from '../../src/storage/wal/index.js';
import { walConformance } from './wal.suite.js';
import { databasePerDir } from './postgres-fixture.js';

const database = databasePerDir();
walConformance('ObjectWal', async (dir) => ObjectWal.open({ url: await database(dir), objects: new FsObjectStore(join(dir, 'objects')), windowMs: 5 }), {
  shared: true,
});
