/** The ClusterStore conformance suite against the in-memory store (one store per `dir`, shared by its handles). */
import { MemoryClusterStore } from '../../src/cluster/index.js';
import { clusterStoreConformance } from './cluster.suite.js';

const stores = new Map<string, MemoryClusterStore>();
clusterStoreConformance('MemoryClusterStore', async (dir) => {
  let store = stores.get(dir);
  if (!store) stores.set(dir, (store = new MemoryClusterStore()));
  const s = store;
  return { store: s, check: async (kind, name, epoch) => s.check(kind, name, epoch), close: async () => undefined };
});
