/** The QueueStore conformance suite against PostgreSQL: one server for the file, a database per suite `dir`. */
import { PostgresQueueStore } from '../../src/storage/queues/index.js';
import { databasePerDir } from './postgres-fixture.js';
import { queueStoreConformance } from './queues.suite.js';

const database = databasePerDir();
queueStoreConformance('PostgresQueueStore', true, async (dir) => PostgresQueueStore.open({ url: await database(dir) }));
