/** The ControlStore conformance suite against the in-memory store and the SQLite metastore. */
import { join } from 'node:path';
import { MemoryControlStore } from '../../src/storage/metastore/control-store.js';
import { SqliteMetastore } from '../../src/storage/metastore/index.js';
import { controlStoreConformance } from './control.suite.js';

controlStoreConformance('SqliteMetastore', true, async (dir) => {
  const m = SqliteMetastore.open(join(dir, 'metastore.db'));
  return { store: m, close: () => m.close() };
});

controlStoreConformance('MemoryControlStore', false, async () => ({ store: new MemoryControlStore(), close: async () => undefined }));
