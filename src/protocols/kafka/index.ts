/**
 * Kafka wire-protocol adapter: public surface.
 */
export { createKafkaAdapter, startKafkaListener, type KafkaListenOptions } from './server.js';
export { SaslSession, type KafkaSaslExchange, type KafkaSaslOptions, type KafkaSaslStep } from './sasl.js';
export type { KafkaListenerInfo } from './route.js';
export { KafkaConnection, type KafkaConnectionInit } from './connection.js';
export { KafkaAdapter } from './adapter.js';
export { GroupCoordinator, DEFAULT_GROUP_OPTIONS, type GroupOptions, type GroupState } from './groups/coordinator.js';
export { KAFKA_ROUTES } from './routes.js';
export { resolveKafkaOptions, DEFAULT_MAX_REQUEST_BYTES, type KafkaOptions, type ResolvedKafkaOptions } from './options.js';
export { kafkaErrorCode } from './errors.js';
export * as codec from './codec/index.js';
export { KafkaGroupAdmin, decodeAssignment } from './group-admin.js';
