/**
 * What every HTTP listener of the broker (the admin API with the dashboard and /metrics, the MQTT and NATS
 * WebSocket listeners' HTTP side) does about clients that send slowly, send nothing, or send a body nobody reads.
 *
 * - Time: the request's headers must arrive within `headersTimeoutMs` of its first byte (or of the connection, for
 *   its first request), the whole request within `requestTimeoutMs`, and a kept-alive connection may wait
 *   `keepAliveTimeoutMs` for its next request; Node answers 408 and closes. Node's own defaults (60 s, 300 s)
 *   let a stranger hold a socket and a half-sent body for minutes; fastify's default turns the request timeout off.
 * - A body the server does not read (the request was refused before its body: 401, 403, 404, 413, 415, 421...; a
 *   GET with a body): Node would read it to its end after the response and discard it, so that the connection can
 *   carry the next request ("dumping"), which means a stranger's 200 MiB body is received whole after its 401.
 *   `closeUnreadBody` makes such a response say `Connection: close` and ends the connection after it instead,
 *   with a short lingering close: the response goes out, then our FIN; what the client still sends is discarded
 *   up to `LINGER_BYTES`, after which the server stops reading, and `lingerMs` (option http-linger, default 2 s)
 *   after the response the socket is destroyed. Destroying the socket at once (what Node does after a `Connection: close` response) resets the
 *   connection while the client's bytes are unread, and a reset can drop the response itself before the client
 *   read it (the lingering close of Apache and nginx exists for this).
 */
import type { IncomingMessage, Server, ServerOptions, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

export interface HttpTimeouts {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  /** How often Node checks the first two (its default, 30 s, would let a timeout run up to 30 s late). */
  checkIntervalMs: number;
  /** How long after a refusal sent before the body was read the connection waits before it is reset (see below). */
  lingerMs: number;
}

/**
 * Defaults: headers come in one packet from every real client (10 s is for a slow link); a request body is at most
 * the API's 1 MiB, which takes 30 s at ~35 KB/s; the dashboard polls every few seconds, so 10 s of keep-alive
 * keeps its connection between polls.
 */
export const HTTP_TIMEOUTS: HttpTimeouts = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 10_000,
  checkIntervalMs: 1000,
  lingerMs: 2000,
};

/**
 * The defaults with the two a broker's configuration sets (http-headers-timeout, http-linger). The request timeout
 * stays 30 s unless the headers timeout is longer (Node wants it no shorter than the headers timeout).
 */
export function httpTimeouts(o: { headersTimeoutMs?: number; lingerMs?: number } = {}): HttpTimeouts {
  const headersTimeoutMs = o.headersTimeoutMs ?? HTTP_TIMEOUTS.headersTimeoutMs;
  return {
    ...HTTP_TIMEOUTS,
    headersTimeoutMs,
    requestTimeoutMs: Math.max(HTTP_TIMEOUTS.requestTimeoutMs, headersTimeoutMs),
    lingerMs: o.lingerMs ?? HTTP_TIMEOUTS.lingerMs,
  };
}

/** Options of `http.createServer` / `https.createServer` that set the timeouts. */
export function httpServerOptions(t: HttpTimeouts = HTTP_TIMEOUTS): ServerOptions {
  return {
    headersTimeout: t.headersTimeoutMs,
    requestTimeout: t.requestTimeoutMs,
    keepAliveTimeout: t.keepAliveTimeoutMs,
    connectionsCheckingInterval: t.checkIntervalMs,
  };
}

/** Sets the timeouts on a server created elsewhere (all but the check interval, fixed at creation). */
export function applyHttpTimeouts(server: Server, t: HttpTimeouts = HTTP_TIMEOUTS): void {
  server.headersTimeout = t.headersTimeoutMs;
  server.requestTimeout = t.requestTimeoutMs;
  server.keepAliveTimeout = t.keepAliveTimeoutMs;
}

/** Bytes of an unread body read and discarded after the refusal; past them the server stops reading. */
export const LINGER_BYTES = 256 * 1024;
/** How long after the response the connection waits for the client to stop sending before it is reset (default). */
export const LINGER_MS = HTTP_TIMEOUTS.lingerMs;

const guarded = new WeakSet<Socket>();

/**
 * Call before a response is sent: when the request's body has not been received whole, the response closes the
 * connection instead of letting Node read the rest (see the module comment). Does nothing otherwise.
 */
export function closeUnreadBody(req: IncomingMessage, res: ServerResponse, lingerMs = LINGER_MS): void {
  if (req.complete) return;
  if (!res.headersSent) res.setHeader('connection', 'close');
  const socket = req.socket;
  if (guarded.has(socket) || socket.destroyed) return;
  guarded.add(socket);
  // Reading the body ourselves keeps Node from "dumping" it after the response (it only dumps a body nobody
  // reads, and a dumped body is read to its end unseen): these bytes are counted and dropped, and past
  // LINGER_BYTES the request is paused, which stops reading the socket (the rest waits in the kernel's buffers).
  let discarded = 0;
  const count = (chunk: Buffer) => {
    discarded += chunk.length;
    if (discarded > LINGER_BYTES) {
      req.off('data', count);
      req.pause();
    }
  };
  req.on('data', count);
  // After a `Connection: close` response Node calls the socket's destroySoon(): end, then destroy as soon as our
  // side is written, a reset while the client's bytes are unread. Ours lingers instead. Were Node to stop calling
  // destroySoon, the fallback is that plain close: still no body read to its end.
  socket.destroySoon = () => linger(socket, req, lingerMs);
}

function linger(socket: Socket, req: IncomingMessage, lingerMs: number): void {
  if (socket.destroyed) return;
  const stop = () => socket.destroy();
  // Our FIN follows the response: the client may read it all before it learns it should stop sending.
  socket.end();
  if (req.complete) {
    // Nothing left unread: close as Node would, once our side is written.
    if (socket.writableFinished) stop();
    else socket.once('finish', stop);
    return;
  }
  const timer = setTimeout(stop, lingerMs);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  // The client finished its body after all: the close is a clean one.
  req.once('end', stop);
}
