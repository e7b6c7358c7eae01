export type { WalEntry, WriteAheadLog } from './types.js';
export { PartitionWal } from './partition-wal.js';
export { FileWal, WAL_FILE_HEADER_BYTES, type FileWalOptions } from './file-wal.js';
export { PostgresWal } from './postgres-wal.js';
export { ObjectWal, type ObjectWalOptions } from './object-wal.js';
export { ShardedWal, keyHash, shardOf } from './sharded-wal.js';
export { openPostgresWal, checkShardList, type OpenPostgresWalOptions } from './shard-list.js';
