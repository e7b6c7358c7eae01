export type { Metastore, SegmentMeta, StreamDef } from './types.js';
export { SqliteMetastore } from './sqlite.js';
export { migrations } from './migrations.js';
export { PostgresMetastore } from './postgres.js';
export { postgresMigrations } from './postgres-migrations.js';
