import { join } from 'node:path';
import { SqliteMetastore } from '../../src/storage/metastore/index.js';
import { metastoreConformance } from './metastore.suite.js';

metastoreConformance('SqliteMetastore', async (dir) => SqliteMetastore.open(join(dir, 'metastore.db')));
