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

/** Who hears, once, that a connection has closed (the listener's ConnectionSet). */
export interface CloseWatcher {
  connectionClosed(conn: unknown): void;
}

/**
 * A connection's end, told to its listener's set directly and, only to those who ask, as a promise. A promise made
 * for every connection, with the set's `then` on it, cost ~300 bytes of heap per idle connection (the promise, its
 * resolver closure, the reaction and the promise `then` makes); this is one small object.
 */
export class CloseSignal {
  private promise: Promise<void> | null = null;
  private resolve: (() => void) | null = null;
  private done = false;
  /** Set by ConnectionSet.add. */
  watcher: CloseWatcher | null = null;

  /** Resolves once the connection has closed and released what it held (made when first asked for). */
  get closed(): Promise<void> {
    if (this.promise === null) {
      this.promise = this.done
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            this.resolve = resolve;
          });
    }
    return this.promise;
  }

  get isClosed(): boolean {
    return this.done;
  }

  /** The connection has closed: tells the watcher and settles the promise. Idempotent. */
  fire(conn: unknown): void {
    if (this.done) return;
    this.done = true;
    this.resolve?.();
    this.resolve = null;
    this.watcher?.connectionClosed(conn);
  }
}

/** The open connections of a listener; each leaves the set when its CloseSignal fires. */
export class ConnectionSet<C extends { readonly closed: Promise<void>; readonly closeSignal: CloseSignal }> implements Iterable<C>, CloseWatcher {
  private readonly set = new Set<C>();
  private closing: Promise<void> | null = null;

  add(conn: C): C {
    this.set.add(conn);
    connectionTotals.opened++;
    if (conn.closeSignal.isClosed) this.connectionClosed(conn);
    else conn.closeSignal.watcher = this;
    return conn;
  }

  connectionClosed(conn: unknown): void {
    if (this.set.delete(conn as C)) connectionTotals.closed++;
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
      await Promise.all(
        all.map(async (c) => {
          await end(c);
          await c.closed;
        }),
      );
      await stopped;
    })();
    return this.closing;
  }
}
