import { FileWal, PartitionWal } from '../../src/storage/wal/index.js';
import { walConformance } from './wal.suite.js';

walConformance('FileWal', (dir) => FileWal.open(dir));
// Small files, so that replay across files, rolling and trimming of closed files are exercised too.
walConformance('FileWal (4 KiB files)', (dir) => FileWal.open(dir, { maxFileBytes: 4096 }));
walConformance('PartitionWal', (dir) => PartitionWal.open(dir));
walConformance('PartitionWal (page cache)', (dir) => PartitionWal.open(dir, { directIo: false }));
