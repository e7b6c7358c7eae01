/**
 * What every protocol adapter gets from the broker, and what it hands back.
 */
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Engine, SessionStore } from '../core/index.js';

export interface AdapterContext {
  engine: Engine;
  logger: Logger;
  /** Identifier of this broker instance (Kafka node id, $SYS topics...). */
  brokerId: number;
  /**
   * Durable client sessions (MQTT persistent sessions), keyed by client id. Optional: without it, adapters
   * keep sessions in process memory (tests, throwaway brokers).
   */
  sessions?: SessionStore;
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
