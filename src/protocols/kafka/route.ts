/**
 * A route binds an API codec to its handler. The request and response types meet here, once; the connection
 * only sees erased routes.
 */
import type { Logger } from 'pino';
import type { KafkaAdapter } from './adapter.js';
import type { SaslSession } from './sasl.js';
import type { ReadLease } from '../../core/index.js';
import type { Access, ClientEntry, QuotaLease } from '../../control/index.js';
import { decodeRequestWith, encodeResponse, type AnyApiCodec, type ApiCodec, type RequestHeader } from './codec/index.js';

/** The listener a connection arrived on. */
export interface KafkaListenerInfo {
  /** "kafka" (plaintext) or "kafka-tls". */
  readonly name: string;
  readonly tls: boolean;
  /** Every API but ApiVersions, SaslHandshake and SaslAuthenticate needs SASL authentication first. */
  readonly saslRequired: boolean;
  /** Host advertised to clients of this listener; default the adapter's `advertisedHost`, else the local address. */
  readonly advertisedHost?: string;
  /** Port advertised to clients of this listener (Metadata, FindCoordinator); default the local port. */
  readonly advertisedPort?: number;
}

/** What a handler knows about the connection its request arrived on. */
export interface ConnectionInfo {
  readonly id: string;
  readonly log: Logger;
  readonly listener: KafkaListenerInfo;
  /** SASL state of this connection (handshake, exchange, principal). */
  readonly sasl: SaslSession;
  /** Local address/port the client connected to (advertised in Metadata unless configured). */
  readonly localAddress: string | undefined;
  readonly localPort: number | undefined;
  /** Address of the client (DescribeGroups reports it as the member's host). */
  readonly remoteAddress: string | undefined;
  /** Resolves when the connection closes. */
  readonly closed: Promise<void>;
  isClosed(): boolean;
  /**
   * Calls `fn` once when the connection closes (at once if it is closed); returns a function that removes it.
   * Long polls use this rather than `closed.then(...)`, whose reactions could not be removed and would pile up
   * on a connection that lives for days.
   */
  onClose(fn: () => void): () => void;
  /**
   * Logs a line this client caused (a refused or failed request) through the adapter's LogLimiter, keyed by the
   * message and the client's address, so that no client can flood the log.
   */
  limitedLog(level: 'debug' | 'info' | 'warn' | 'error', fields: Record<string, unknown>, msg: string): void;
  /**
   * The connection's authorization handle, set before any API but ApiVersions/SaslHandshake/SaslAuthenticate
   * runs (the SASL principal, else anonymous); null when the adapter has no access control (everything allowed).
   */
  readonly access: Access | null;
  /** The namespace quota lease taken with `access` (null: no access control). */
  readonly quota: QuotaLease | null;
  /** The connection's entry in the client registry (null: no access control). */
  readonly client: ClientEntry | null;
  /**
   * Holds the connection's next request back for `ms` (KIP-219: the response carries throttle_time_ms and the
   * broker mutes the channel for that long).
   */
  throttle(ms: number): void;
  /**
   * SASL succeeded: the connection takes its principal (replacing an anonymous one) and a quota lease. False when
   * the namespace's connection quota refused it: the caller closes the connection.
   */
  authenticated(): boolean;
}

export interface RequestContext {
  readonly adapter: KafkaAdapter;
  readonly conn: ConnectionInfo;
  readonly header: RequestHeader;
  /**
   * Holds the storage memory that buffers read for the response point into (pass it to engine.read); the
   * connection releases it once the response is written or dropped.
   */
  readonly lease: ReadLease;
}

/**
 * Returned by a handler to close the connection once every earlier response is written, instead of answering
 * (Produce with acks=0 that failed: the client reads no response, so closing is the only way to tell it).
 */
export const CLOSE_CONNECTION: unique symbol = Symbol('close-connection');

/** A response after which the connection is closed (failed SASL authentication, as Kafka does). */
export class ThenClose<Res> {
  constructor(readonly response: Res) {}
}

export function thenClose<Res>(res: Res): ThenClose<Res> {
  return new ThenClose(res);
}

export type HandlerResult<Res> = Res | null | typeof CLOSE_CONNECTION | ThenClose<Res>;

/** Returns the response, null for no response at all (Produce with acks=0), or CLOSE_CONNECTION. */
export type Handler<Req, Res> = (ctx: RequestContext, req: Req) => HandlerResult<Res> | Promise<HandlerResult<Res>>;

/** An encoded response frame, null for none, CLOSE_CONNECTION, or a frame to write before closing. */
export type RouteResult = Buffer[] | null | typeof CLOSE_CONNECTION | { readonly frame: Buffer[]; readonly close: true };

export interface Route {
  readonly codec: AnyApiCodec;
  /**
   * Decodes the frame and starts the handler; resolves to the encoded response frame (null: no response).
   *
   * Decoding happens synchronously and a malformed frame THROWS (KafkaProtocolError) rather than rejecting, so
   * the connection stops before looking at any later pipelined request. The handler's synchronous part also
   * runs before this returns, so requests of one connection reach the engine in arrival order (Produce appends
   * without an await when its topics exist). A failing handler rejects.
   */
  run(adapter: KafkaAdapter, conn: ConnectionInfo, frame: Buffer, lease: ReadLease): Promise<RouteResult>;
}

export function route<Req, Res>(codec: ApiCodec<Req, Res>, handler: Handler<Req, Res>): Route {
  return {
    codec,
    run(adapter, conn, frame, lease) {
      const { header, body, trailingBytes } = decodeRequestWith(codec, frame);
      if (trailingBytes > 0 && conn.log.isLevelEnabled('debug')) {
        // Kafka ignores them too (see decodeRequestWith); logged for whoever debugs a client's encoder.
        conn.limitedLog('debug', { api: codec.name, version: header.apiVersion, trailingBytes }, 'bytes after the request body ignored');
      }
      // The client registry shows Kafka's client.id (the first one a request names).
      if (conn.client !== null && conn.client.clientId === null && header.clientId) conn.client.clientId = header.clientId;
      let out: HandlerResult<Res> | Promise<HandlerResult<Res>>;
      try {
        out = handler({ adapter, conn, header, lease }, body);
      } catch (err) {
        return Promise.reject(err);
      }
      return Promise.resolve(out).then((res): RouteResult => {
        if (res === null) return null;
        if (res === CLOSE_CONNECTION) return CLOSE_CONNECTION;
        if (res instanceof ThenClose) {
          return { frame: encodeResponse(codec, header.apiVersion, header.correlationId, (res as ThenClose<Res>).response), close: true };
        }
        // Awaited<Res> is Res for response objects (they are never thenables).
        return encodeResponse(codec, header.apiVersion, header.correlationId, res as Res);
      });
    },
  };
}

