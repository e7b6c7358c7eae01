/**
 * What every protocol adapter gets from the broker, and what it hands back.
 */
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Engine } from '../core/index.js';

export interface AdapterContext {
  engine: Engine;
  logger: Logger;
  /** Identifier of this broker instance (Kafka node id, $SYS topics...). */
  brokerId: number;
}

export interface ListenOptions {
  host: string;
  /** 0 picks a free port. */
  port: number;
}

export interface ProtocolListener {
  readonly protocol: string;
  address(): AddressInfo;
  /** Number of open client connections. */
  connections(): number;
  /** Stops accepting, closes every client connection, resolves when all are closed. */
  close(): Promise<void>;
}
