export type { FileLayout, SegmentFileSource, WalEntry, WriteAheadLog } from './types.js';
export { PartitionWal, type PartitionWalOptions } from './partition-wal.js';
export { FileWal, WAL_FILE_HEADER_BYTES, type FileWalOptions } from './file-wal.js';
export { PostgresWal, type PostgresWalOptions } from './postgres-wal.js';
