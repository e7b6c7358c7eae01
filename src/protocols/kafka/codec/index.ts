/** Pure Kafka wire-protocol codec: no sockets, no broker state. */
export * from './errors.js';
export * from './primitives.js';
export * from './api.js';
export * from './api-versions.js';
export * from './metadata.js';
export * from './produce.js';
export * from './fetch.js';
export * from './list-offsets.js';
export * from './schema.js';
export * from './groups.js';
export * from './consumer-groups.js';
export * from './admin.js';
export * from './acls.js';
export * from './cluster-admin.js';
export * from './transactions.js';
export * from './frames.js';
