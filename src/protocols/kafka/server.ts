/**
 * The Kafka listeners: plaintext TCP and TLS. Listeners of one broker share one KafkaAdapter, so a consumer
 * group has one coordinator whichever listener its members use.
 */
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import tls, { type TLSSocket } from 'node:tls';
import { certificateLogin, type CertUserField } from '../../control/index.js';
import { ConnectionSet, TLS_HANDSHAKE_TIMEOUT_MS, listenOn, type TlsServerFiles } from '../listener.js';
import type { AdapterContext, ListenOptions, ProtocolListener } from '../types.js';
import { KafkaAdapter } from './adapter.js';
import { KafkaConnection } from './connection.js';
import { readInto } from '../read-into.js';
import { logKey } from '../../util/log-limit.js';
import { plainAddress } from '../../util/address.js';
import { resolveKafkaOptions, type KafkaOptions } from './options.js';
import type { KafkaListenerInfo } from './route.js';
import { KAFKA_ROUTES } from './routes.js';

export interface KafkaListenOptions extends ListenOptions {
  /** Serve TLS with this PEM certificate (chain) and key (security.protocol SSL, or SASL_SSL with `sasl`). */
  tls?: TlsServerFiles & {
    /**
     * With the adapter's access control: a verified client certificate logs the client in as the user this field
     * names (Kafka's SSL principal), unless it authenticates with SASL, which wins; a certificate naming no known
     * user closes the connection.
     */
    certUser?: CertUserField;
  };
  /** Require SASL authentication before any API but ApiVersions/SaslHandshake/SaslAuthenticate. Default false. */
  sasl?: boolean;
  /** Host advertised to this listener's clients; default the adapter's `advertisedHost`, else the address they reached. */
  advertisedHost?: string;
  /** Port advertised to this listener's clients; default the local port they reached (plaintext: `opts.advertisedPort`). */
  advertisedPort?: number;
}

/** The state every Kafka listener of a broker shares. */
export function createKafkaAdapter(ctx: AdapterContext, opts: KafkaOptions = {}): KafkaAdapter {
  return new KafkaAdapter(ctx, resolveKafkaOptions(opts), KAFKA_ROUTES);
}

/**
 * A Kafka listener. Without `shared` it gets its own adapter built from `opts`; with it, `opts` is ignored and the
 * adapter's group timers stop when its last listener closes.
 */
export async function startKafkaListener(
  ctx: AdapterContext,
  listen: KafkaListenOptions,
  opts: KafkaOptions = {},
  shared?: KafkaAdapter,
): Promise<ProtocolListener> {
  const adapter = shared ?? createKafkaAdapter(ctx, opts);
  await adapter.startTransactions();
  if (listen.sasl && !adapter.options.sasl) {
    throw new Error("a Kafka listener requiring SASL needs the adapter's sasl options");
  }
  const isTls = listen.tls !== undefined;
  const info: KafkaListenerInfo = {
    name: isTls ? 'kafka-tls' : 'kafka',
    tls: isTls,
    saslRequired: listen.sasl === true,
    advertisedPort: listen.advertisedPort ?? (isTls ? undefined : adapter.options.advertisedPort),
    ...(listen.advertisedHost !== undefined ? { advertisedHost: listen.advertisedHost } : {}),
  };
  const conns = new ConnectionSet<KafkaConnection>();
  let seq = 0;
  const prefix = isTls ? 'ks' : 'k';

  const accept = (socket: Socket) => {
    // Responses are already batched by corking; Nagle would only add latency to each of them.
    socket.setNoDelay(true);
    let certUser: string | null = null;
    const ac = adapter.options.access;
    if (isTls && listen.tls?.certUser && ac) {
      const login = certificateLogin(ac, socket as TLSSocket, listen.tls.certUser);
      if (login?.verdict === 'bad') {
        // Refused like a wrong password: a certificate is a credential for a user that exists.
        adapter.logLimit.log(
          'warn',
          logKey('client certificate refused', socket.remoteAddress),
          { listener: info.name, remote: socket.remoteAddress, user: login.user },
          'client certificate names no known user: closing connection',
        );
        socket.destroy();
        return;
      }
      if (login) certUser = login.user;
    }
    conns.add(
      new KafkaConnection(socket, adapter, {
        id: `${prefix}${++seq}`,
        localAddress: socket.localAddress,
        localPort: socket.localPort,
        remoteAddress: plainAddress(socket.remoteAddress),
        remotePort: socket.remotePort,
        listener: info,
        socket,
        certUser,
        // Plain TCP sockets are accepted paused and read into one reused buffer (read-into.ts); TLS sockets
        // deliver decrypted 'data' events.
        attachInput: isTls ? undefined : (receive) => readInto(socket, receive),
      }),
    );
  };

  // allowHalfOpen: a client that shuts down its sending side still gets the responses to what it sent; the
  // connection ends its side once they are written.
  let server: Server;
  if (listen.tls) {
    const t = tls.createServer({
      cert: listen.tls.cert,
      key: listen.tls.key,
      ca: listen.tls.ca,
      requestCert: listen.tls.requestCert ?? false,
      rejectUnauthorized: listen.tls.rejectUnauthorized ?? false,
      allowHalfOpen: true,
      handshakeTimeout: listen.tls.handshakeTimeoutMs ?? TLS_HANDSHAKE_TIMEOUT_MS,
    });
    t.on('secureConnection', accept);
    // A failed handshake (wrong CA, plaintext client on the TLS port) concerns that client only.
    t.on('tlsClientError', (err, socket) => {
      ctx.logger.debug({ err: err.message, listener: info.name, remote: socket.remoteAddress }, 'kafka tls handshake failed');
      // With a listener for this event, closing the socket is ours to do (a handshake timeout leaves it open).
      socket.destroy();
    });
    server = t;
  } else {
    server = createServer({ allowHalfOpen: true, pauseOnConnect: true }, accept);
  }

  await listenOn(server, listen, (err) => ctx.logger.error({ err, listener: info.name }, 'kafka listener error'));
  adapter.retain();

  // One sweep over the listener's connections enforces the request, authentication and idle limits (thousands of
  // connections cost one timer, not one per connection or per request). It runs four times per shortest limit,
  // at most every second, so a limit is kept to within a quarter of itself (or 1 s).
  const o = adapter.options;
  const sweepMs = Math.max(
    10,
    Math.min(1000, Math.floor(Math.min(o.requestReceiveTimeoutMs, o.responseSendTimeoutMs, o.authTimeoutMs, o.connectionsMaxIdleMs) / 4)),
  );
  const sweeper = setInterval(() => {
    const now = Date.now();
    for (const c of conns) c.sweep(now);
  }, sweepMs);
  sweeper.unref();

  let closing: Promise<void> | null = null;
  return {
    protocol: info.name,
    address: () => server.address() as AddressInfo,
    connections: () => conns.size,
    close(): Promise<void> {
      clearInterval(sweeper);
      closing ??= conns.closeAll(server, (c) => c.close()).then(() => adapter.release());
      return closing;
    },
  };
}
