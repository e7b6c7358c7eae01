export type { WalEntry, WriteAheadLog } from './types.js';
export { FileWal, WAL_FILE_HEADER_BYTES, type FileWalOptions } from './file-wal.js';
