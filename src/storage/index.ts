/**
 * Storage backends behind their role interfaces. The partition log engine lives in ./log and is imported from
 * there directly (it depends on these, not the other way round).
 */
export * from './wal/index.js';
export * from './objects/index.js';
export * from './metastore/index.js';
