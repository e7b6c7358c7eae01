export * from './errors.js';
export * from './message.js';
export * from './topic.js';
export * from './trie.js';
export * from './streams.js';
export * from './engine.js';
export * from './record-batch.js';
export { crc32c } from './crc32c.js';
