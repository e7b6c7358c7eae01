/**
 * The brokers' internal channel over TCP (the PeerChannel contract in types.ts). Part "channel" of issue 17 writes
 * it; until then a cluster broker cannot start.
 */
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { FlowError } from '../core/index.js';
import type { Cluster } from './cluster.js';
import type { PeerChannel } from './types.js';

export interface ChannelOptions {
  /** Peers' addresses come from the membership view (BrokerState.endpoints.cluster). */
  cluster: Cluster;
  host: string;
  port: number;
  /** The shared secret both ends prove knowledge of (--cluster-secret). */
  secret: string;
  logger: Logger;
}

export interface TcpChannel extends PeerChannel {
  address(): AddressInfo;
}

export async function startChannel(opts: ChannelOptions): Promise<TcpChannel> {
  void opts;
  throw new FlowError('CONFIG_ERROR', 'the cluster channel is not written yet');
}
