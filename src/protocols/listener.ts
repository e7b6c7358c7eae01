/**
 * What every protocol listener does the same way: bind a server, keep the set of its open connections, and on
 * close stop accepting, end each connection and wait until all are gone.
 */
import type { AddressInfo, Server } from 'node:net';

/**
 * A TLS handshake not finished by then closes the socket. Node's default is 120 s, which lets a stranger hold a
 * socket (and the TLS state behind it) for two minutes with a few bytes; a real handshake takes a few round trips.
 */
export const TLS_HANDSHAKE_TIMEOUT_MS = 10_000;

/** What a TLS listener is given: its PEM certificate (chain) and key, and client certificates (mTLS) if wanted. */
export interface TlsServerFiles {
  cert: string | Buffer;
  key: string | Buffer;
  /** The CA client certificates must chain to (src/control/certs.ts tlsClientOptions). */
  ca?: string | Buffer;
  /** Default TLS_HANDSHAKE_TIMEOUT_MS. */
  handshakeTimeoutMs?: number;
  /** Ask the client for a certificate (mTLS). */
  requestCert?: boolean;
  /** Fail the handshake without a valid client certificate. */
  rejectUnauthorized?: boolean;
}
import type { ListenOptions } from './types.js';

/** Binds `server`; a bind error (port in use...) rejects, later server errors go to `onError`. */
export function listenOn(server: Server, listen: ListenOptions, onError: (err: Error) => void): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(listen.port, listen.host, () => {
      server.off('error', reject);
      server.on('error', onError);
      resolve();
    });
  });
}

/** `host:port` as logs show a bound address (`[::1]:port` for IPv6). */
export function formatAddress(a: AddressInfo): string {
  return a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
}

/**
 * Connections accepted and closed by every listener of this process since it started (the garbage a closed
 * connection leaves is process-wide too: see FloodCollector in src/control/memory.ts).
 */
export const connectionTotals = { opened: 0, closed: 0 };

/** The open connections of a listener; each leaves the set when its `closed` promise settles. */
export class ConnectionSet<C extends { readonly closed: Promise<void> }> implements Iterable<C> {
  private readonly set = new Set<C>();
  private closing: Promise<void> | null = null;

  add(conn: C): C {
    this.set.add(conn);
    connectionTotals.opened++;
    void conn.closed.then(() => {
      this.set.delete(conn);
      connectionTotals.closed++;
    });
    return conn;
  }

  get size(): number {
    return this.set.size;
  }

  [Symbol.iterator](): Iterator<C> {
    return this.set[Symbol.iterator]();
  }

  /**
   * Stops `server` accepting, ends every connection with `end` and resolves once the server and every
   * connection are closed. Idempotent: later calls return the first call's promise.
   */
  closeAll(server: Server, end: (conn: C) => unknown): Promise<void> {
    this.closing ??= (async () => {
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      const all = [...this.set];
      await Promise.all(all.map(async (c) => {
        await end(c);
        await c.closed;
      }));
      await stopped;
    })();
    return this.closing;
  }
}
