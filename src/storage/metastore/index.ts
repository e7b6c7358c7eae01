export type { ConsumerOffset, Metastore, PartitionState, SegmentMeta, StreamDef } from './types.js';
export { SqliteMetastore } from './sqlite.js';
export { migrations, type Migration } from './migrations.js';
export { PostgresMetastore, type PostgresOptions } from './postgres.js';
export { postgresMigrations } from './postgres-migrations.js';
export { CONTROL_KINDS, MemoryControlStore, isControlStore, type ControlKind, type ControlRecord, type ControlStore } from './control-store.js';
