/**
 * The Kafka adapter's request plumbing that does not depend on the adapter itself: the listener and connection a
 * request arrived on, what a handler may answer, and the shape of a route (route.ts builds them; the adapter keeps
 * them by API key).
 */
import type { Logger } from 'pino';
import type { NamespaceNames, ReadLease } from '../../core/index.js';
import type { Access, ClientEntry, QuotaLease } from '../../control/index.js';
import type { AnyApiCodec } from './codec/index.js';
import type { SaslSession } from './sasl-session.js';

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
  /**
   * The namespace of the connection's principal (core namespaces.ts): route.ts qualifies the names of its requests
   * and strips those of its responses with it. `default` until a principal of another namespace logs in.
   */
  readonly names: NamespaceNames;
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
  /** A KIP-368 re-authentication succeeded: the connection takes the renewed principal (same user). */
  reauthenticated(): void;
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

/** An encoded response frame, null for none, CLOSE_CONNECTION, or a frame to write before closing. */
export type RouteResult = Buffer[] | null | typeof CLOSE_CONNECTION | { readonly frame: Buffer[]; readonly close: true };

export interface Route<A = unknown> {
  readonly codec: AnyApiCodec;
  /**
   * Decodes the frame and starts the handler; resolves to the encoded response frame (null: no response).
   *
   * Decoding happens synchronously and a malformed frame THROWS (KafkaProtocolError) rather than rejecting, so
   * the connection stops before looking at any later pipelined request. The handler's synchronous part also
   * runs before this returns, so requests of one connection reach the engine in arrival order (Produce appends
   * without an await when its topics exist). A failing handler rejects.
   */
  run(adapter: A, conn: ConnectionInfo, frame: Buffer, lease: ReadLease): Promise<RouteResult>;
}
