export { EnginePublisher, NATS_SERVER_VERSION, NatsAdapter } from './adapter.js';
export { applyNatsHeaders, natsHeaderBlock, subjectToTopic, topicToSubject } from './mapping.js';
export type { NatsAuthOutcome, NatsConnectionMeta, NatsListenerTls, NatsPublisher } from './types.js';
export { NatsConnection, natsMatch } from './connection.js';
export { NatsErr } from './errors.js';
export { resolveNatsOptions, type NatsOptions, type ResolvedNatsOptions } from './options.js';
