/**
 * The NATS listeners: TCP (with TLS on the same port, as nats-server does it) and WebSocket. Every listener of a
 * broker hands its streams to one NatsAdapter (one connection count, one set of figures); the listener only
 * accepts, enforces the connection limit, and does what must happen before the NATS connection starts: the TLS
 * upgrade and refusing plain clients when TLS is required.
 *
 * TLS on the NATS port (nats-server's model, not a second port):
 * - TLS configured, not handshake-first: the listener sends INFO itself (with tls_required or tls_available), then
 *   reads the client's first byte. 0x16 is a TLS handshake record (a ClientHello): the socket is wrapped in a
 *   server-side TLSSocket with that byte put back, and once the handshake is done the adapter takes over the TLS
 *   stream without sending INFO again (`infoSent`), since the client already has it (the nats client reads INFO,
 *   upgrades, then sends CONNECT over TLS). Anything else is a plain client: refused with
 *   -ERR 'Secure Connection - TLS Required' when TLS is required, else handed over as it is (its bytes put back).
 * - handshake-first (nats-server 2.10's handshake_first): the TLS handshake starts at once, INFO follows on the TLS
 *   stream (the adapter sends it).
 * - no TLS: the socket is handed over untouched, paused and unread (accepted with pauseOnConnect), so that the
 *   connection may read it into a shared buffer (src/protocols/read-into.ts). A socket that was peeked at (the TLS
 *   paths above) has bytes in its JS-side buffer: `meta.infoSent` or `meta.tls` tell the connection so.
 *
 * Connection limit: counted at accept over the adapter's connections plus the sockets still in the listener's hands
 * (INFO sent, waiting for the client's first byte or in the TLS handshake), so a crowd of clients that never finish
 * a handshake cannot go past it either. Over the limit a client gets INFO and -ERR 'maximum connections exceeded'
 * and is closed, as nats-server does (the nats client reports that error instead of retrying blindly).
 */
import http from 'node:http';
import https from 'node:https';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import { ConnectionSet, TLS_HANDSHAKE_TIMEOUT_MS, listenOn } from '../listener.js';
import { logKey, type LogLimiter } from '../../util/log-limit.js';
import { plainAddress } from '../../util/address.js';
import type { ListenOptions, ProtocolListener } from '../types.js';
import type { NatsAdapter } from './adapter.js';
import type { NatsConnectionMeta, NatsListenerTls } from './types.js';
import { closeUnreadBody, httpServerOptions, type HttpTimeouts } from '../../control/index.js';
import type { NatsConnection } from './connection.js';
import { dropEarly, servePrebound, takePrebound, type EarlyInfo } from './prebound.js';

/** nats-server's wording (server/errors.go ErrTooManyConnections). */
export const ERR_MAX_CONNECTIONS = 'maximum connections exceeded';
/** nats-server's wording for a plain CONNECT where TLS is required (server/errors.go ErrSecureConnRequired). */
export const ERR_TLS_REQUIRED = 'Secure Connection - TLS Required';
/** First byte of a TLS record carrying a handshake message (RFC 8446 5.1, ContentType handshake(22)). */
const TLS_HANDSHAKE_RECORD = 0x16;
/** A refused client gets this long to read its -ERR and hang up before its socket is destroyed. */
const REFUSE_LINGER_MS = 2000;

export interface NatsTlsSettings {
  cert: string | Buffer;
  key: string | Buffer;
  ca?: string | Buffer;
  /** INFO tls_required: plain clients are refused. Else tls_available: plain and TLS clients are both served. */
  required: boolean;
  /** TLS before INFO (implies required). */
  handshakeFirst: boolean;
  /** INFO-to-first-byte plus the TLS handshake must finish within this. Default TLS_HANDSHAKE_TIMEOUT_MS. */
  handshakeTimeoutMs?: number;
  /**
   * Client certificates (mTLS, src/control/certs.ts tlsClientOptions): the CA they must chain to, whether one is
   * asked for, and whether the handshake fails without a valid one. `ca` above is the server's chain.
   */
  clientAuth?: { ca?: Buffer; requestCert?: boolean; rejectUnauthorized?: boolean };
}

export interface NatsListenOptions extends ListenOptions {
  tls?: NatsTlsSettings;
  /**
   * A port bound early (prebound.ts) holds its connections until this resolves (the module's other listeners are
   * open), and closes them if it rejects. Without it they are served at once.
   */
  serveAfter?: Promise<void>;
}

/** What the listeners of one broker share besides the adapter. */
export interface NatsListenerShared {
  adapter: NatsAdapter;
  logLimit: LogLimiter;
  /** Ends every connection of the adapter (once, whichever listener asks first). */
  endConnections(): Promise<void>;
  /** Listener-side counts, for the module's figures. */
  counts: NatsListenerCounts;
}

export interface NatsListenerCounts {
  /** Clients closed at accept because the connection limit was reached. */
  refusedMaxConnections: number;
  /** Plain clients refused where TLS is required. */
  refusedTlsRequired: number;
  /** TLS handshakes that failed or timed out (and clients that said nothing before the deadline). */
  tlsHandshakeFailures: number;
  /** Sockets in the listeners' hands right now (before the adapter takes them). */
  pending: number;
}

export function newListenerCounts(): NatsListenerCounts {
  return { refusedMaxConnections: 0, refusedTlsRequired: 0, tlsHandshakeFailures: 0, pending: 0 };
}

/** The INFO line for `meta` as the adapter builds it (throws what the adapter throws). */
function infoLine(adapter: NatsAdapter, meta: NatsConnectionMeta, t: NatsListenerTls): string {
  return `INFO ${JSON.stringify(adapter.info(meta, t))}\r\n`;
}

/**
 * Closes a stream the adapter never got: writes `text` (INFO and an -ERR) and ends it, then destroys it if the
 * client does not hang up by itself.
 */
function refuse(stream: Duplex, text: string): void {
  const timer = setTimeout(() => stream.destroy(), REFUSE_LINGER_MS);
  timer.unref();
  stream.once('close', () => clearTimeout(timer));
  stream.on('error', () => stream.destroy());
  // Read (and drop) what the client sends, so that its hang-up is seen at once (sockets are accepted paused).
  stream.resume();
  stream.end(text);
}

/** True when one more client may be accepted: the adapter's own check and the count with the listeners' pending sockets. */
function underLimit(shared: NatsListenerShared): boolean {
  const max = shared.adapter.options.maxConnections;
  return shared.adapter.accepting() && shared.adapter.connections() + shared.counts.pending < max;
}

/**
 * Over the connection limit: INFO (as nats-server sends it first) and -ERR 'maximum connections exceeded'. When the
 * adapter cannot build INFO the -ERR goes alone.
 */
function refuseMaxConnections(shared: NatsListenerShared, stream: Duplex, meta: NatsConnectionMeta, t: NatsListenerTls): void {
  shared.counts.refusedMaxConnections++;
  shared.logLimit.log(
    'warn',
    logKey('nats max connections', meta.remoteAddress),
    { remote: meta.remoteAddress, max: shared.adapter.options.maxConnections },
    'nats connection refused: maximum connections exceeded',
  );
  let info = '';
  try {
    // A connection accepted by the port bound early has its INFO already.
    if (meta.infoSent !== true) info = infoLine(shared.adapter, meta, t);
  } catch {
    // The -ERR alone still tells the client why.
  }
  refuse(stream, `${info}-ERR '${ERR_MAX_CONNECTIONS}'\r\n`);
}

/**
 * Hands a stream to the adapter, and tracks the connection it makes until it closes (listener figures, shutdown);
 * a throwing adapter closes the stream instead of the listener.
 */
function handOver(shared: NatsListenerShared, conns: ConnectionSet<NatsConnection>, stream: Duplex, meta: NatsConnectionMeta, t: NatsListenerTls): void {
  let c: NatsConnection;
  try {
    c = shared.adapter.handle(stream, meta, t);
  } catch (err) {
    shared.logLimit.log('error', 'nats handle failed', { remote: meta.remoteAddress, err: (err as Error).message }, 'nats connection could not start');
    stream.destroy();
    return;
  }
  conns.add(c);
}

/**
 * Starts the NATS TCP listener (TLS on the same port when `listen.tls` is given). Closing it stops accepting,
 * destroys the sockets still in its hands, and ends the adapter's connections (`shared.endConnections`).
 */
export async function startNatsListener(shared: NatsListenerShared, listen: NatsListenOptions): Promise<ProtocolListener> {
  const { adapter, counts } = shared;
  const conns = new ConnectionSet<NatsConnection>();
  /** Sockets accepted but not handed over yet (waiting for a first byte, or in the TLS handshake). */
  const pending = new Set<Socket>();
  const timedOut = new WeakSet<Socket>();
  const settings = listen.tls;
  const listenerTls: NatsListenerTls = settings
    ? { available: true, required: settings.required || settings.handshakeFirst }
    : { available: false, required: false };
  const clientAuth = settings?.clientAuth ?? {};
  const handshakeMs = settings?.handshakeTimeoutMs ?? TLS_HANDSHAKE_TIMEOUT_MS;

  /** Keeps `socket` in the listener's hands until `release` is called, with a deadline. */
  const hold = (socket: Socket, meta: NatsConnectionMeta): (() => void) => {
    pending.add(socket);
    counts.pending++;
    const onError = () => socket.destroy();
    socket.on('error', onError);
    const timer = setTimeout(() => {
      timedOut.add(socket);
      counts.tlsHandshakeFailures++;
      shared.logLimit.log(
        'debug',
        logKey('nats tls handshake timeout', meta.remoteAddress),
        { remote: meta.remoteAddress, timeoutMs: handshakeMs },
        'nats tls handshake timed out',
      );
      socket.destroy();
    }, handshakeMs);
    let held = true;
    const release = () => {
      if (!held) return;
      held = false;
      clearTimeout(timer);
      socket.off('error', onError);
      pending.delete(socket);
      counts.pending--;
    };
    socket.once('close', release);
    return release;
  };

  /** TLS on `socket` (its first bytes, if already read, put back); the adapter gets the TLS stream once secure. */
  /**
   * The TLS side is a tls.Server that never listens: each socket that starts a handshake is handed to it
   * (`emit('connection')`, its ClientHello bytes put back), so Node does the server handshake and checks a client
   * certificate as for any TLS listener (`authorized`, which a hand-made server TLSSocket does not get). Its secure
   * sockets come back by their peer's address and port.
   */
  const handshaking = new Map<string, { socket: Socket; meta: NatsConnectionMeta; release: () => void }>();
  const peerKey = (s: { remoteAddress?: string; remotePort?: number }) => `${s.remoteAddress ?? '?'}|${s.remotePort ?? 0}`;
  const tlsServer = settings
    ? tls.createServer({
        cert: settings.cert,
        key: settings.key,
        ca: clientAuth.ca ?? settings.ca,
        requestCert: clientAuth.requestCert === true,
        rejectUnauthorized: clientAuth.rejectUnauthorized === true,
        // The listener's own timer (hold) bounds the handshake.
        handshakeTimeout: 0,
      })
    : null;
  tlsServer?.on('secureConnection', (secure: tls.TLSSocket) => {
    const key = peerKey(secure);
    const h = handshaking.get(key);
    handshaking.delete(key);
    if (h === undefined || h.socket.destroyed) {
      secure.destroy();
      return;
    }
    h.release();
    // The same meta object INFO was built from: the adapter keeps what info() put in it (the client id).
    h.meta.tls = true;
    h.meta.tlsSocket = secure;
    handOver(shared, conns, secure, h.meta, listenerTls);
  });
  tlsServer?.on('tlsClientError', (err: Error, secure: tls.TLSSocket) => {
    const h = handshaking.get(peerKey(secure));
    secure.destroy();
    // A timeout destroys the socket and the TLS side then fails too: counted once, by the timer.
    if (h !== undefined && timedOut.has(h.socket)) return;
    counts.tlsHandshakeFailures++;
    shared.logLimit.log(
      'debug',
      logKey('nats tls handshake failed', h?.meta.remoteAddress),
      { remote: h?.meta.remoteAddress, err: err.message },
      'nats tls handshake failed',
    );
    h?.socket.destroy();
  });

  /** TLS on `socket` (its first bytes, if already read, put back); the adapter gets the TLS stream once secure. */
  const startTls = (socket: Socket, meta: NatsConnectionMeta, release: () => void) => {
    const key = peerKey(socket);
    handshaking.set(key, { socket, meta, release });
    socket.once('close', () => {
      if (handshaking.get(key)?.socket === socket) handshaking.delete(key);
    });
    if (!settings!.handshakeFirst) meta.infoSent = true;
    tlsServer!.emit('connection', socket);
  };

  /** `early`: the meta of a connection accepted by the port bound early (prebound.ts), which may have had INFO. */
  const accept = (socket: Socket, early?: NatsConnectionMeta) => {
    // Deliveries are batched by the connection's writer; Nagle would only delay each batch.
    socket.setNoDelay(true);
    const meta: NatsConnectionMeta = early ?? { remoteAddress: plainAddress(socket.remoteAddress) ?? '?', remotePort: socket.remotePort ?? 0, tls: false };
    if (!underLimit(shared)) {
      refuseMaxConnections(shared, socket, meta, listenerTls);
      return;
    }
    if (!settings) {
      handOver(shared, conns, socket, meta, listenerTls);
      return;
    }
    const release = hold(socket, meta);
    if (settings.handshakeFirst) {
      startTls(socket, meta, release);
      return;
    }
    // INFO first, in the clear (it tells the client whether to upgrade), then the client's first byte decides. The
    // TLS path hands over with infoSent too: the client read INFO before upgrading and gets no second one. A
    // connection accepted early had its INFO then.
    if (meta.infoSent !== true) {
      let info: string;
      try {
        info = infoLine(adapter, meta, listenerTls);
      } catch (err) {
        release();
        shared.logLimit.log('error', 'nats info failed', { err: (err as Error).message }, 'nats INFO could not be built');
        socket.destroy();
        return;
      }
      socket.write(info);
    }
    socket.once('data', (first: Buffer) => {
      socket.pause();
      socket.unshift(first);
      if (first[0] === TLS_HANDSHAKE_RECORD) {
        startTls(socket, meta, release);
        return;
      }
      release();
      if (listenerTls.required) {
        counts.refusedTlsRequired++;
        shared.logLimit.log(
          'debug',
          logKey('nats tls required', meta.remoteAddress),
          { remote: meta.remoteAddress },
          'nats plain client refused: TLS required',
        );
        refuse(socket, `-ERR '${ERR_TLS_REQUIRED}'\r\n`);
        return;
      }
      meta.infoSent = true;
      handOver(shared, conns, socket, meta, listenerTls);
    });
    socket.resume();
  };

  const onError = (err: Error) => adapter.ctx.logger.error({ err, listener: 'nats' }, 'nats listener error');
  // Bound at the start of `flowmq start` (prebound.ts): the same server, and the connections it accepted meanwhile.
  const pre = await takePrebound(listen.host, listen.port);
  if (pre !== null) {
    // The early INFO came from the configuration (start.ts); what the adapter says now must be the same.
    const sent = pre.sent();
    if (sent !== null && !sameInfo(sent, { settings: adapter.infoSettings, tls: listenerTls })) {
      adapter.ctx.logger.warn(
        { early: sent, now: { settings: adapter.infoSettings, tls: listenerTls } },
        'nats: the INFO sent before the broker was up differs from its INFO now',
      );
    }
    // Served once the module's other listeners are open too (nats-server accepts clients last).
    (listen.serveAfter ?? Promise.resolve()).then(
      () => servePrebound(pre, accept, onError),
      () => dropEarly(pre),
    );
    return listenerOf('nats', pre.server, conns, pending, shared);
  }
  const server: Server = createServer({ pauseOnConnect: true }, accept);
  await listenOn(server, listen, onError);
  return listenerOf('nats', server, conns, pending, shared);
}

function sameInfo(a: Pick<EarlyInfo, 'settings' | 'tls'>, b: Pick<EarlyInfo, 'settings' | 'tls'>): boolean {
  const s = (e: Pick<EarlyInfo, 'settings' | 'tls'>) =>
    JSON.stringify([e.settings.serverName, e.settings.maxPayload, e.settings.authRequired, e.settings.jetstream, e.tls.available, e.tls.required]);
  return s(a) === s(b);
}

export interface NatsWsListenOptions extends ListenOptions {
  /** Largest WebSocket message accepted. Default: max payload + max control line + 1 MiB (a client batches writes). */
  maxFrameBytes?: number;
  /** The HTTP side's timeouts and lingering close (control/http-guard.ts); default its HTTP_TIMEOUTS. */
  timeouts?: HttpTimeouts;
  /** Serve wss:// with this PEM certificate (chain) and key (INFO then says tls_required). */
  tls?: {
    cert: string | Buffer;
    key: string | Buffer;
    ca?: string | Buffer;
    handshakeTimeoutMs?: number;
    clientAuth?: { ca?: Buffer; requestCert?: boolean; rejectUnauthorized?: boolean };
  };
}

/**
 * NATS over WebSocket, as nats-server's websocket block serves it to nats.ws and the other browser clients: any
 * path, no subprotocol, binary frames carrying the NATS byte stream; INFO is the first frame. ws:// or, with
 * `listen.tls`, wss:// (TLS from the first byte, as HTTPS).
 */
export async function startNatsWsListener(shared: NatsListenerShared, listen: NatsWsListenOptions): Promise<ProtocolListener> {
  // ws is loaded with the first WebSocket listener, not at start (~23 ms of a broker's start without one).
  const { WebSocketServer, createWebSocketStream } = await import('ws');
  const { adapter, counts } = shared;
  const conns = new ConnectionSet<NatsConnection>();
  // Idle and half-sent requests time out; a request that is not an upgrade is answered without reading its body,
  // and the connection closed (see control/http-guard.ts).
  const upgradeRequired = (req: http.IncomingMessage, res: http.ServerResponse) => {
    closeUnreadBody(req, res, listen.timeouts?.lingerMs);
    res.writeHead(426, { 'content-type': 'text/plain' }).end('NATS over WebSocket: upgrade required\n');
  };
  const server: http.Server | https.Server = listen.tls
    ? https.createServer(
        {
          ...httpServerOptions(listen.timeouts),
          cert: listen.tls.cert,
          key: listen.tls.key,
          ca: listen.tls.clientAuth?.ca ?? listen.tls.ca,
          requestCert: listen.tls.clientAuth?.requestCert === true,
          rejectUnauthorized: listen.tls.clientAuth?.rejectUnauthorized === true,
          handshakeTimeout: listen.tls.handshakeTimeoutMs ?? TLS_HANDSHAKE_TIMEOUT_MS,
        },
        upgradeRequired,
      )
    : http.createServer(httpServerOptions(listen.timeouts), upgradeRequired);
  if (listen.tls) {
    server.on('tlsClientError', (err: Error, socket: tls.TLSSocket) => {
      counts.tlsHandshakeFailures++;
      shared.logLimit.log(
        'debug',
        logKey('nats-ws tls handshake failed', socket.remoteAddress),
        { remote: socket.remoteAddress, err: err.message },
        'nats websocket tls handshake failed',
      );
      // With a listener for this event, closing the socket is ours to do (a handshake timeout leaves it open).
      socket.destroy();
    });
  }
  // One message may hold many operations (clients flush their outbound buffer as one frame), but never more than
  // one whole message beyond the client's own flush threshold: a bound per connection on what ws buffers.
  const maxPayload = listen.maxFrameBytes ?? adapter.options.maxPayload + adapter.options.maxControlLine + 1024 * 1024;
  const wss = new WebSocketServer({ server, maxPayload, perMessageDeflate: false });
  // ws re-emits the HTTP server's errors (EADDRINUSE at listen among them) here; the server's own handler reports them.
  wss.on('error', () => undefined);
  // Over wss:// the stream is TLS already: INFO says tls_required (nats-server's websocket INFO with TLS does).
  const listenerTls: NatsListenerTls = { available: false, required: listen.tls !== undefined };
  wss.on('connection', (ws, req) => {
    req.socket.setNoDelay(true);
    const stream = createWebSocketStream(ws);
    const meta: NatsConnectionMeta = {
      remoteAddress: plainAddress(req.socket.remoteAddress) ?? '?',
      remotePort: req.socket.remotePort ?? 0,
      tls: listen.tls !== undefined,
      websocket: true,
    };
    if (listen.tls !== undefined) meta.tlsSocket = req.socket as tls.TLSSocket;
    meta.byteCounter = req.socket;
    if (!underLimit(shared)) {
      refuseMaxConnections(shared, stream, meta, listenerTls);
      return;
    }
    handOver(shared, conns, stream, meta, listenerTls);
  });
  wss.on('error', (err) => adapter.ctx.logger.error({ err, listener: 'nats-ws' }, 'nats websocket listener error'));
  await listenOn(server, listen, (err) => adapter.ctx.logger.error({ err, listener: 'nats-ws' }, 'nats websocket listener error'));
  const l = listenerOf('nats-ws', server, conns, new Set(), shared);
  return {
    ...l,
    close: async () => {
      await l.close();
      // Whatever the adapter left open (an upgrade in progress) goes now.
      for (const c of wss.clients) c.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}

function listenerOf(
  protocol: string,
  server: Server,
  conns: ConnectionSet<NatsConnection>,
  pending: Set<Socket>,
  shared: NatsListenerShared,
): ProtocolListener {
  let closing: Promise<void> | null = null;
  return {
    protocol,
    address: () => server.address() as AddressInfo,
    connections: () => conns.size,
    close(): Promise<void> {
      closing ??= (() => {
        for (const s of pending) s.destroy();
        // The adapter ends its connections (they flush what they can); each closes its stream, and the set empties.
        // Anything still open once the adapter is done is destroyed, so that a shutdown cannot hang on one stream.
        const ended = shared.endConnections();
        return conns.closeAll(server, async (c) => {
          await ended;
          c.stream.destroy();
        });
      })();
      return closing;
    },
  };
}
