/** The ConsumerStateStore conformance suite against the in-memory store and the SQLite metastore. */
import { join } from 'node:path';
import { MemoryConsumerStore, MemoryStore } from '../../src/core/index.js';
import { SqliteMetastore } from '../../src/storage/metastore/index.js';
import { consumerStoreConformance } from './consumers.suite.js';

consumerStoreConformance('SqliteMetastore', true, async (dir) => {
  const m = SqliteMetastore.open(join(dir, 'metastore.db'));
  return { store: m, close: () => m.close() };
});

consumerStoreConformance('in-memory', false, async () => ({ store: new MemoryConsumerStore(), close: async () => undefined }));

// MemoryStore (the core's all-in-memory CoreStore) hands the role to its MemoryConsumerStore.
consumerStoreConformance('MemoryStore', false, async () => ({ store: new MemoryStore(), close: async () => undefined }));
