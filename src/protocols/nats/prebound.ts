/**
 * The NATS port bound at the very start of `flowmq start`, before the broker's modules load and storage recovers
 * (that took 0.5–5 s: a restarted broker refused connections meanwhile, and clients' reconnect loops waited their
 * reconnect interval, or gave up). Connections accepted before the NATS listener starts wait, unread (paused), and
 * are handed to it when it does (startNatsListener takes the bound server): the client gets INFO then, as from a
 * server slow to answer. nats.js's dial waits for INFO and PONG up to its `timeout` (20 s by default), so its
 * reconnect (or a first connect) succeeds as soon as the broker is ready instead of failing on a refused port.
 * This module imports only node:net and listener.ts, so that binding costs no module loading.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { listenOn } from '../listener.js';

/** Connections held before the listener starts; those beyond are closed. */
export const MAX_EARLY_CONNECTIONS = 4096;

export interface Prebound {
  readonly host: string;
  readonly port: number;
  readonly server: Server;
  /** Accepted before the listener started, in arrival order (paused, unread). */
  readonly early: Socket[];
}

let pending: { host: string; port: number; bound: Promise<Prebound | null> } | null = null;

/**
 * Binds host:port now and holds what connects. A bind that fails (port in use) is forgotten: the listener's own
 * bind then fails with the error the start reports.
 */
export function prebindNats(host: string, port: number): void {
  releasePrebound();
  const early: Socket[] = [];
  const onError = (): void => {};
  const server = createServer({ pauseOnConnect: true }, (s) => {
    if (early.length >= MAX_EARLY_CONNECTIONS) return void s.destroy();
    // An early socket reset by its peer: destroyed (a paused socket sees no EOF; the listener finds it destroyed).
    s.on('error', onError);
    s.once('close', () => {
      const i = early.indexOf(s);
      if (i >= 0) early.splice(i, 1);
    });
    early.push(s);
  });
  const bound = listenOn(server, { host, port }, () => {}).then(
    () => ({ host, port, server, early }),
    () => null,
  );
  pending = { host, port, bound };
}

/**
 * The server bound for host:port, handed over once (it goes on holding what connects until `servePrebound`); null
 * when none was bound for that address.
 */
export async function takePrebound(host: string, port: number): Promise<Prebound | null> {
  const p = pending;
  if (p === null) return null;
  pending = null;
  const b = await p.bound;
  if (b === null) return null;
  if (p.host !== host || p.port !== port) {
    close(b);
    return null;
  }
  return b;
}

/** The listener serves `b` from now on: `accept` gets the connections held so far (in order), then every new one. */
export function servePrebound(b: Prebound, accept: (s: Socket) => void, onError: (err: Error) => void): void {
  b.server.removeAllListeners('connection');
  b.server.removeAllListeners('error');
  b.server.on('connection', accept);
  b.server.on('error', onError);
  for (const s of b.early.splice(0)) {
    s.removeAllListeners('error').removeAllListeners('close');
    if (!s.destroyed) accept(s);
  }
}

/** A start that failed after taking `b`: what it held is closed (the listener closes the server). */
export function dropEarly(b: Prebound): void {
  for (const s of b.early.splice(0)) s.destroy();
}

/** Closes what was bound and not taken (a start that failed, or NATS not started). */
export function releasePrebound(): void {
  const p = pending;
  pending = null;
  if (p !== null) void p.bound.then((b) => b !== null && close(b));
}

function close(b: Prebound): void {
  b.server.close();
  for (const s of b.early) s.destroy();
  b.early.length = 0;
}
