/**
 * MQTT listeners: TCP, TLS and WebSocket (path /mqtt, subprotocol "mqtt" [MQTT-6.0.0-3]). All listeners of a
 * broker share one MqttHub, so a client id is one session whatever transport it arrives on (takeover works
 * across transports), and one tick serves every connection.
 */
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { ConnectionSet, TLS_HANDSHAKE_TIMEOUT_MS, listenOn, type TlsServerFiles } from '../listener.js';
import { logKey } from '../../util/log-limit.js';
import { plainAddress } from '../../util/address.js';
import type { AdapterContext, ListenOptions, ProtocolListener } from '../types.js';
import { MqttConnection, type CertificateLogin } from './connection.js';
import { resolveMqttOptions, type MqttOptions } from './options.js';
import { MqttHub } from './hub.js';
import { closeUnreadBody, httpServerOptions, type HttpTimeouts } from '../../control/index.js';

export interface MqttListener extends ProtocolListener {
  /** Connected client ids (of every listener sharing the hub). */
  readonly registry: MqttHub;
  readonly hub: MqttHub;
  /** Sum of messages dropped by flow control over the listener's open connections. */
  dropped(): number;
}

/** Creates the hub every MQTT listener of a broker shares, loads stored sessions and starts its tick. */
export async function createMqttHub(ctx: AdapterContext, opts: MqttOptions = {}): Promise<MqttHub> {
  const hub = new MqttHub(ctx, resolveMqttOptions(opts));
  await hub.start();
  return hub;
}

export interface TlsListenOptions extends ListenOptions, TlsServerFiles {
  /** The login a connection's verified certificate gives (src/control/certs.ts certificateLogin). */
  certificate?: (socket: tls.TLSSocket) => CertificateLogin;
}

export interface WsListenOptions extends ListenOptions {
  /** Default "/mqtt". */
  path?: string;
  /** The HTTP side's timeouts and lingering close (control/http-guard.ts); default its HTTP_TIMEOUTS. */
  timeouts?: HttpTimeouts;
}

/** MQTT over TCP. Without `hub` the listener gets a private one (closed with it). */
export async function startMqttListener(ctx: AdapterContext, listen: ListenOptions, opts: MqttOptions = {}, hub?: MqttHub): Promise<MqttListener> {
  const h = hub ?? (await createMqttHub(ctx, opts));
  // Small MQTT packets must not wait for Nagle's algorithm.
  const server = net.createServer({ noDelay: true });
  return serve('mqtt', server, 'connection', h, hub === undefined, ctx, listen);
}

/** MQTT over TLS (cert and key in PEM). */
export async function startMqttTlsListener(ctx: AdapterContext, listen: TlsListenOptions, hub: MqttHub): Promise<MqttListener> {
  const server = tls.createServer({
    cert: listen.cert,
    key: listen.key,
    ca: listen.ca,
    handshakeTimeout: listen.handshakeTimeoutMs ?? TLS_HANDSHAKE_TIMEOUT_MS,
    ...(listen.requestCert !== undefined ? { requestCert: listen.requestCert } : {}),
    ...(listen.rejectUnauthorized !== undefined ? { rejectUnauthorized: listen.rejectUnauthorized } : {}),
  });
  server.on('tlsClientError', (err, socket) => {
    hub.logLimit.log(
      'debug',
      logKey('mqtt tls handshake failed', socket.remoteAddress),
      { remote: socket.remoteAddress, err: err.message },
      'mqtt tls handshake failed',
    );
    // With a listener for this event, closing the socket is ours to do (a handshake timeout leaves it open).
    socket.destroy();
  });
  return serve('mqtts', server, 'secureConnection', hub, false, ctx, listen, listen.certificate);
}

/** MQTT over WebSocket: binary frames carry the MQTT byte stream [MQTT-6.0.0-1] [MQTT-6.0.0-2]. */
export async function startMqttWsListener(ctx: AdapterContext, listen: WsListenOptions, hub: MqttHub): Promise<MqttListener> {
  // ws is loaded with the first WebSocket listener, not at start (~23 ms of a broker's start without one).
  const { WebSocketServer, createWebSocketStream } = await import('ws');
  const path = listen.path ?? '/mqtt';
  // Idle and half-sent requests time out; a request that is not an upgrade is answered without reading its body,
  // and the connection closed (see control/http-guard.ts).
  const server = http.createServer(httpServerOptions(listen.timeouts), (req, res) => {
    closeUnreadBody(req, res, listen.timeouts?.lingerMs);
    res.writeHead(426, { 'content-type': 'text/plain' }).end('MQTT over WebSocket: upgrade required\n');
  });
  const wss = new WebSocketServer({
    server,
    path,
    // [MQTT-6.0.0-3] the server selects the "mqtt" subprotocol (3.1 clients offer "mqttv3.1").
    handleProtocols: (protocols) => (protocols.has('mqtt') ? 'mqtt' : protocols.has('mqttv3.1') ? 'mqttv3.1' : false),
    maxPayload: hub.opts.maxPacketSize + 16,
  });
  // ws re-emits the HTTP server's errors (EADDRINUSE at listen among them) on the WebSocketServer: the server's own
  // handler (listenOn) reports them, and without one here they would be thrown as an unhandled 'error' event.
  wss.on('error', () => undefined);
  const l = await serve('mqtt-ws', server, null, hub, false, ctx, listen);
  wss.on('connection', (ws, req) => {
    const stream = createWebSocketStream(ws);
    l.accept(stream, `${plainAddress(req.socket.remoteAddress) ?? '?'}:${req.socket.remotePort ?? '?'}`, req.socket);
  });
  const close = l.close;
  return {
    ...l,
    close: async () => {
      for (const c of wss.clients) c.terminate();
      wss.close();
      await close();
    },
  };
}

async function serve(
  protocol: string,
  server: net.Server,
  event: 'connection' | 'secureConnection' | null,
  hub: MqttHub,
  ownHub: boolean,
  ctx: AdapterContext,
  listen: ListenOptions,
  certificate?: (socket: tls.TLSSocket) => CertificateLogin,
): Promise<MqttListener & { accept(stream: Duplex, remote: string, socket?: net.Socket): void }> {
  const conns = new ConnectionSet<MqttConnection>();
  const accept = (stream: Duplex, remote: string, socket?: net.Socket) => {
    const cert = certificate !== undefined && socket instanceof tls.TLSSocket ? () => certificate(socket) : undefined;
    conns.add(new MqttConnection(stream, ctx, { hub, remote, listener: protocol, socket, certificate: cert }));
  };
  if (event !== null) {
    server.on(event, (socket: net.Socket) => {
      socket.setNoDelay(true);
      accept(socket, `${plainAddress(socket.remoteAddress) ?? '?'}:${socket.remotePort ?? '?'}`, socket);
    });
  }
  await listenOn(server, listen, (err) => ctx.logger.error({ err, protocol }, 'mqtt listener error'));
  let closing: Promise<void> | null = null;
  return {
    protocol,
    registry: hub,
    hub,
    accept,
    address: () => server.address() as AddressInfo,
    connections: () => conns.size,
    dropped: () => {
      let n = 0;
      for (const c of conns) n += c.stats.dropped;
      return n;
    },
    close() {
      closing ??= conns
        .closeAll(server, (c) => c.shutdown())
        .then(() => {
          if (ownHub) hub.close();
        });
      return closing;
    },
  };
}
