/**
 * The WriteAheadLog conformance suite against the PostgreSQL WAL sharded over two servers (openPostgresWal with two
 * --wal-shard databases, the list recorded in a third, the metastore's): a database per `dir` on each server.
 */
import { after, before } from 'node:test';
import { openPostgresWal } from '../../src/storage/wal/index.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';
import { walConformance } from './wal.suite.js';

let a: PostgresServer;
let b: PostgresServer;
before(async () => {
  [a, b] = await Promise.all([startPostgres(), startPostgres()]);
});
after(async () => {
  await Promise.all([a.stop(), b.stop()]);
});
const databases = new Map<string, Promise<{ metastore: string; shards: string[] }>>();
const dbsOf = (dir: string): Promise<{ metastore: string; shards: string[] }> => {
  let d = databases.get(dir);
  if (d === undefined) {
    d = Promise.all([a.createDatabase(), a.createDatabase(), b.createDatabase()]).then(([metastore, s0, s1]) => ({ metastore, shards: [s0, s1] }));
    databases.set(dir, d);
  }
  return d;
};

walConformance(
  'sharded PostgreSQL WAL (2 servers)',
  async (dir) => {
    const { metastore, shards } = await dbsOf(dir);
    return openPostgresWal({ metastoreUrl: metastore, shards, pg: {} });
  },
  { shared: true },
);
