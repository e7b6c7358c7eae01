import { join } from 'node:path';
import { MemoryRetainedStore, MemorySessionStore } from '../../src/core/index.js';
import { SqliteMetastore } from '../../src/storage/metastore/index.js';
import { sessionStoreConformance } from './sessions.suite.js';

sessionStoreConformance('SqliteMetastore', true, async (dir) => {
  const m = SqliteMetastore.open(join(dir, 'metastore.db'));
  return { sessions: m, retained: m, close: () => m.close() };
});

sessionStoreConformance('in-memory', false, async () => ({
  sessions: new MemorySessionStore(),
  retained: new MemoryRetainedStore(),
  close: async () => undefined,
}));
