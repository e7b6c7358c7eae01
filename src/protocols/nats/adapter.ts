/**
 * The NATS adapter: shared state of every NATS connection of the broker (options, authentication, figures) and
 * the mapping between NATS messages and the core's. SKELETON: part B of issue 15 fills it in; the signatures are
 * what part C (server.ts, module.ts) codes against.
 */
import type { Duplex } from 'node:stream';
import type { PasswordGuard } from '../../control/index.js';
import type { AdapterContext } from '../types.js';
import type { ResolvedNatsOptions } from './options.js';

/** Where a connection comes from, as the listener knows it. */
export interface NatsConnectionMeta {
  remoteAddress: string;
  remotePort: number;
  /** The stream is TLS (upgraded after INFO, or TLS first). */
  tls: boolean;
  /** The listener already sent INFO on this stream (the TLS upgrade path): the connection must not send it again. */
  infoSent?: boolean;
  /** A WebSocket connection (INFO and figures say so). */
  websocket?: boolean;
}

/** What INFO says about TLS on the listener the client came in on. */
export interface NatsListenerTls {
  /** TLS is offered (tls_available) */
  available: boolean;
  /** TLS is required (tls_required): a client must upgrade before CONNECT. */
  required: boolean;
}

export class NatsAdapter {
  constructor(
    readonly ctx: AdapterContext,
    readonly options: ResolvedNatsOptions,
    readonly guard: PasswordGuard | null,
    readonly allowAnonymous: boolean,
    readonly token: string | null,
  ) {}

  /** The INFO object for a new connection (the listener sends it itself on the TLS upgrade path). */
  info(_meta: NatsConnectionMeta, _tls: NatsListenerTls): Record<string, unknown> {
    throw new Error('NatsAdapter.info: not implemented yet (issue 15 part B)');
  }

  /** Starts one client connection on the stream; the adapter owns it from here (closes it, logs, counts it). */
  handle(_stream: Duplex, _meta: NatsConnectionMeta, _tls: NatsListenerTls): void {
    throw new Error('NatsAdapter.handle: not implemented yet (issue 15 part B)');
  }

  /** Open client connections. */
  connections(): number {
    return 0;
  }

  /** True while another connection may be accepted (maxConnections). */
  accepting(): boolean {
    return true;
  }

  /** The protocol's figures for /api/v1/broker. */
  figures(): Record<string, unknown> {
    return {};
  }

  /** Broker shutdown: closes every connection; resolves when all are gone. */
  async closeAll(): Promise<void> {}
}
