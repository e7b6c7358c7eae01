/** Cluster mode: membership, ownership with epochs, the brokers' internal channel (see types.ts). */
export * from './types.js';
export { Cluster, rendezvous, type ClusterOptions } from './cluster.js';
export { PostgresClusterStore } from './pg-store.js';
export { MemoryClusterStore } from './memory-store.js';
export { LocalHub } from './local-channel.js';
export { startChannel, type ChannelOptions, type TcpChannel } from './channel.js';
export { encodeBody, decodeBody, packBuffers, unpackBuffers, encodeMessage, decodeMessage } from './wire.js';
export { ClusterStreams, partitionName, type ClusterStreamsOptions } from './streams.js';
