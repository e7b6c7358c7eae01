/**
 * Kafka wire-protocol adapter: public surface.
 */
export { startKafkaListener } from './server.js';
export { KafkaConnection, type KafkaConnectionInit } from './connection.js';
export { KafkaAdapter } from './adapter.js';
export { KAFKA_ROUTES } from './routes.js';
export { resolveKafkaOptions, DEFAULT_MAX_REQUEST_BYTES, type KafkaOptions, type ResolvedKafkaOptions } from './options.js';
export { kafkaErrorCode } from './errors.js';
export * as codec from './codec/index.js';
