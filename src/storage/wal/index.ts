export type { WalEntry, WriteAheadLog } from './types.js';
export { FileWal, type FileWalOptions } from './file-wal.js';
