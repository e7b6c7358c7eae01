/**
 * The ClusterStore conformance suite against PostgreSQL (a database per `dir`); the owner check is the SQL function
 * the other stores call in their fenced writes.
 */
import pg from 'pg';
import { PostgresClusterStore } from '../../src/cluster/pg-store.js';
import { pgError } from '../../src/storage/postgres-util.js';
import { clusterStoreConformance } from './cluster.suite.js';
import { databasePerDir } from './postgres-fixture.js';

const database = databasePerDir();
clusterStoreConformance('PostgresClusterStore', async (dir) => {
  const url = await database(dir);
  const store = await PostgresClusterStore.open({ url });
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return {
    store,
    async check(kind, name, epoch) {
      try {
        await client.query('SELECT flowmq_owner_check($1, $2, $3)', [kind, name, epoch]);
      } catch (err) {
        throw pgError('owner check', err, 'test');
      }
    },
    async close() {
      await client.end();
      await store.close();
    },
  };
});
