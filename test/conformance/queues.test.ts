/** The QueueStore conformance suite against the embedded backend (SQLite in a worker thread). */
import { join } from 'node:path';
import { SqliteQueueStore } from '../../src/storage/queues/index.js';
import { queueStoreConformance } from './queues.suite.js';

queueStoreConformance('SqliteQueueStore', true, (dir) => SqliteQueueStore.open(join(dir, 'queues.db')));
