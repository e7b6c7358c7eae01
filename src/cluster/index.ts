/** Cluster mode: membership, ownership with epochs, the brokers' internal channel (see types.ts). */
export * from './types.js';
export { Cluster, rendezvous } from './cluster.js';
export type { PostgresClusterStore } from './pg-store.js';
export { openPostgresClusterStore } from './open-pg-store.js';
export { MemoryClusterStore } from './memory-store.js';
export { LocalHub } from './local-channel.js';
export { startChannel, type ChannelOptions, type TcpChannel } from './channel.js';
export type { ChannelTlsMode, ChannelTlsOptions } from './channel-tls.js';
export { encodeMessage, decodeMessage } from './wire.js';
export { RPC, CHANNEL_VERSION, ALL_MESSAGES, call, cast, serve, listen, type Rpc } from './rpc.js';
export { Live, followControl } from './live.js';
export { LocalInterest, RemoteInterest } from './interest.js';
export { ClusterStreams } from './streams.js';
