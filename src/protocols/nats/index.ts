export {
  EnginePublisher,
  NATS_SERVER_VERSION,
  NatsAdapter,
  applyNatsHeaders,
  natsHeaderBlock,
  subjectToTopic,
  topicToSubject,
  type NatsAuthOutcome,
  type NatsConnectionMeta,
  type NatsListenerTls,
  type NatsPublisher,
} from './adapter.js';
export { NatsConnection, natsMatch } from './connection.js';
export { NatsErr } from './errors.js';
export { resolveNatsOptions, type NatsOptions, type ResolvedNatsOptions } from './options.js';
