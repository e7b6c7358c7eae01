import { FileWal, PartitionWal } from '../../src/storage/wal/index.js';
import { walConformance } from './wal.suite.js';

walConformance('FileWal', (dir, io) => FileWal.open(dir, { io }));
// Small files, so that replay across files, rolling and trimming of closed files are exercised too.
walConformance('FileWal (4 KiB files)', (dir, io) => FileWal.open(dir, { maxFileBytes: 4096, io }));
// Direct I/O: groups padded to whole blocks, written from aligned staging memory.
walConformance('FileWal (direct I/O)', (dir, io) => FileWal.open(dir, { directIo: true, io }));
walConformance('PartitionWal', (dir, io) => PartitionWal.open(dir, { io }));
walConformance('PartitionWal (page cache)', (dir, io) => PartitionWal.open(dir, { directIo: false, io }));
