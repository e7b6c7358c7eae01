/**
 * The NATS port bound at the very start of `flowmq start`, before the broker's modules load and storage recovers
 * (that takes 0.5–5 s: a restarted broker refused connections meanwhile, and clients' reconnect loops waited their
 * reconnect interval, or gave up). A connection accepted before the NATS listener starts gets its INFO at once
 * (`setEarlyInfo`: everything in INFO comes from the configuration, see info.ts), and is then left unread (paused):
 * its CONNECT, PING and PUBs wait in the socket until the listener starts and takes it over (startNatsListener
 * takes the bound server), with the client id and nonce INFO gave it, as if it had connected then and been sent
 * that INFO (the nonce its signature is checked against, the auth timeout from then on). nats.js's dial waits for
 * PONG up to its `timeout` (20 s by default), so its reconnect (or a first connect) succeeds as soon as the broker is
 * ready instead of failing on a refused port or an INFO that does not come; nats.js's test launcher is content once
 * INFO comes. When INFO cannot be told from the configuration (`setEarlyInfo(null)`: TLS before INFO, or an
 * anonymous access that depends on users kept where they cannot be read early) the connection gets INFO from the
 * listener, once the broker is up.
 * After its early INFO a connection is read into a buffer, bounded per connection (EARLY_BUFFER_BYTES) and in all
 * (EARLY_TOTAL_BYTES): past either it is left unread again, and the kernel's window holds the rest. Its bytes are put
 * back in order (unshift) when the listener takes it over. One that sends nothing within the NATS auth timeout of
 * its INFO gets `-ERR 'Authentication Timeout'` and is closed, as nats-server does (a client sends CONNECT at once).
 * A client that closes its side before the broker is up loses what it sent (nothing acknowledged it: no PONG, no
 * +OK).
 * This module imports only node:net, listener.ts and info.ts, so that binding costs no module loading.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { listenOn } from '../listener.js';
import { natsInfo, natsInfoLine, newNatsIdentity, type NatsIdentity, type NatsInfoSettings } from './info.js';
import type { NatsConnectionMeta, NatsListenerTls } from './types.js';
import { plainAddress } from '../../util/address.js';

/** Connections held before the listener starts; those beyond are closed. */
export const MAX_EARLY_CONNECTIONS = 4096;
/** Bytes read from one early connection before it is left unread (a CONNECT with a JWT and a few PUBs fit). */
export const EARLY_BUFFER_BYTES = 64 * 1024;
/** Bytes read from all early connections together before each is left unread after its next read. */
export const EARLY_TOTAL_BYTES = 16 * 1024 * 1024;

/** What the early INFO says: the settings and the TLS of the port, as the adapter and the listener will. */
export interface EarlyInfo {
  settings: NatsInfoSettings;
  tls: NatsListenerTls;
  /** A connection silent this long after its early INFO is closed (0: never). */
  authTimeoutMs: number;
}

/** A connection accepted early: its socket (paused, unread) and what the listener needs to take it over. */
export interface EarlyConnection {
  socket: Socket;
  /** infoSent, clientId and nonce set when it got its INFO. */
  meta: NatsConnectionMeta;
  /** Read after its INFO, in order, for the listener. */
  read: Buffer[];
  readBytes: number;
  idle: NodeJS.Timeout | null;
  onData: ((b: Buffer) => void) | null;
}

export interface Prebound {
  readonly host: string;
  readonly port: number;
  readonly server: Server;
  /** Accepted before the listener started, in arrival order. */
  readonly early: EarlyConnection[];
  /** The server id early INFO announced and the client ids it gave: the adapter goes on with them. */
  readonly identity: NatsIdentity;
  /** What early INFO said (null: none was sent, the connections wait for the listener's). */
  readonly sent: () => EarlyInfo | null;
  /** Stops reading an early connection and puts what it read back into its socket. */
  readonly detach: (c: EarlyConnection) => void;
}

let pending: { host: string; port: number; identity: NatsIdentity; setInfo: (e: EarlyInfo | null) => void; bound: Promise<Prebound | null> } | null = null;

/**
 * Binds host:port now and holds what connects. A bind that fails (port in use) is forgotten: the listener's own
 * bind then fails with the error the start reports. Resolves once bound (or failed): node binds a host's port a
 * tick after `listen`, and that tick would otherwise wait for whatever module loading the caller starts next.
 */
export function prebindNats(host: string, port: number): Promise<void> {
  releasePrebound();
  const early: EarlyConnection[] = [];
  const identity = newNatsIdentity();
  /** undefined: not known yet (INFO waits for setEarlyInfo); null: none early. */
  let info: EarlyInfo | null | undefined;
  const onError = (): void => {};
  let total = 0;
  const sendInfo = (c: EarlyConnection): void => {
    if (info === undefined || info === null || c.meta.infoSent === true || c.socket.destroyed) return;
    const s = c.socket;
    c.meta.infoSent = true;
    s.write(natsInfoLine(natsInfo(identity, info.settings, c.meta, info.tls)));
    c.onData = (b: Buffer) => {
      if (c.idle !== null) clearTimeout(c.idle);
      c.idle = null;
      c.read.push(b);
      c.readBytes += b.length;
      total += b.length;
      if (c.readBytes >= EARLY_BUFFER_BYTES || total >= EARLY_TOTAL_BYTES) s.pause();
    };
    s.on('data', c.onData);
    // Past the total the connection stays unread: its silence then tells nothing, and no timer judges it.
    if (total >= EARLY_TOTAL_BYTES) return void s.pause();
    s.resume();
    if (info.authTimeoutMs > 0) {
      c.idle = setTimeout(() => {
        c.idle = null;
        s.end(`-ERR 'Authentication Timeout'\r\n`);
        s.destroySoon();
      }, info.authTimeoutMs);
    }
  };
  /** Stops reading `c` (its timer too); what it read goes back into the socket, first in line. */
  const detach = (c: EarlyConnection): void => {
    if (c.idle !== null) clearTimeout(c.idle);
    c.idle = null;
    if (c.onData !== null) c.socket.off('data', c.onData);
    c.onData = null;
    c.socket.pause();
    total -= c.readBytes;
    if (c.read.length > 0 && !c.socket.destroyed) c.socket.unshift(c.read.length === 1 ? c.read[0]! : Buffer.concat(c.read));
    c.read = [];
    c.readBytes = 0;
  };
  const server = createServer({ pauseOnConnect: true }, (s) => {
    if (early.length >= MAX_EARLY_CONNECTIONS) return void s.destroy();
    // An early socket reset by its peer: destroyed (the listener finds it destroyed).
    s.on('error', onError);
    const c: EarlyConnection = {
      socket: s,
      meta: { remoteAddress: plainAddress(s.remoteAddress) ?? '?', remotePort: s.remotePort ?? 0, tls: false },
      read: [],
      readBytes: 0,
      idle: null,
      onData: null,
    };
    s.once('close', () => {
      detach(c);
      const i = early.indexOf(c);
      if (i >= 0) early.splice(i, 1);
    });
    early.push(c);
    // Deliveries are batched by the connection's writer; Nagle would only delay each batch (the listener sets it too).
    s.setNoDelay(true);
    sendInfo(c);
  });
  const setInfo = (e: EarlyInfo | null): void => {
    if (info !== undefined) return;
    info = e;
    for (const c of early) sendInfo(c);
  };
  const bound = listenOn(server, { host, port }, () => {}).then(
    (): Prebound => ({ host, port, server, early, identity, sent: () => info ?? null, detach }),
    () => null,
  );
  pending = { host, port, identity, setInfo, bound };
  return bound.then(() => undefined);
}

/**
 * What INFO the port bound early sends from now on (and to the connections waiting for it); null: none, they get
 * the listener's INFO once the broker is up. Only the first call counts.
 */
export function setEarlyInfo(e: EarlyInfo | null): void {
  pending?.setInfo(e);
}

/** The identity (server id, client ids) of the port bound early for host:port, for the adapter; null without one. */
export function preboundIdentity(host: string, port: number): NatsIdentity | null {
  const p = pending;
  return p !== null && p.host === host && p.port === port ? p.identity : null;
}

/**
 * The server bound for host:port, handed over once (it goes on holding what connects until `servePrebound`); null
 * when none was bound for that address.
 */
export async function takePrebound(host: string, port: number): Promise<Prebound | null> {
  const p = pending;
  if (p === null) return null;
  pending = null;
  // No early INFO from here on: a connection that has none yet gets the listener's.
  p.setInfo(null);
  const b = await p.bound;
  if (b === null) return null;
  if (p.host !== host || p.port !== port) {
    close(b);
    return null;
  }
  return b;
}

/**
 * The listener serves `b` from now on: `accept` gets the connections held so far (in order, with their meta: those
 * that got INFO early say so), then every new one.
 */
export function servePrebound(b: Prebound, accept: (s: Socket, early?: NatsConnectionMeta) => void, onError: (err: Error) => void): void {
  b.server.removeAllListeners('connection');
  b.server.removeAllListeners('error');
  b.server.on('connection', (s: Socket) => accept(s));
  b.server.on('error', onError);
  for (const c of b.early.splice(0)) {
    b.detach(c);
    c.socket.removeAllListeners('error').removeAllListeners('close');
    if (!c.socket.destroyed) accept(c.socket, c.meta);
  }
}

/** A start that failed after taking `b`: what it held is closed (the listener closes the server). */
export function dropEarly(b: Prebound): void {
  for (const c of b.early.splice(0)) {
    b.detach(c);
    c.socket.destroy();
  }
}

/** Closes what was bound and not taken (a start that failed, or NATS not started). */
export function releasePrebound(): void {
  const p = pending;
  pending = null;
  if (p !== null) void p.bound.then((b) => b !== null && close(b));
}

function close(b: Prebound): void {
  b.server.close();
  for (const c of b.early) {
    b.detach(c);
    c.socket.destroy();
  }
  b.early.length = 0;
}
