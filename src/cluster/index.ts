/** Cluster mode: membership, ownership with epochs, the brokers' internal channel (see types.ts). */
export * from './types.js';
export { Cluster, rendezvous, type ClusterOptions } from './cluster.js';
export { PostgresClusterStore } from './pg-store.js';
export { MemoryClusterStore } from './memory-store.js';
export { LocalHub } from './local-channel.js';
export { startChannel, type ChannelOptions, type TcpChannel } from './channel.js';
export { packBuffers, unpackBuffers, encodeMessage, decodeMessage } from './wire.js';
export {
  RPC,
  CHANNEL_VERSION,
  MIN_CHANNEL_VERSION,
  ALL_MESSAGES,
  call,
  cast,
  castAll,
  serve,
  listen,
  WithTail,
  type Rpc,
  type Cast,
  type RpcRequest,
  type RpcReply,
} from './rpc.js';
export { Live, followControl, CONTROL_SAFETY_POLL_MS, type LiveOptions, type FollowedDirectory } from './live.js';
export { LocalInterest, RemoteInterest, type InterestMessage, type RemoteEntry } from './interest.js';
export { ClusterStreams, partitionName, type ClusterStreamsOptions } from './streams.js';
