export { NatsAdapter, type NatsConnectionMeta, type NatsListenerTls } from './adapter.js';
export { resolveNatsOptions, type NatsOptions, type ResolvedNatsOptions } from './options.js';
