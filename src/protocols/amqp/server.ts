/**
 * The AMQP listeners: plain TCP and TLS. Listeners of one broker share one AmqpAdapter (one connection count,
 * one set of alarms).
 */
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import tls from 'node:tls';
import { ConnectionSet, TLS_HANDSHAKE_TIMEOUT_MS, listenOn, type TlsServerFiles } from '../listener.js';
import { logKey } from '../../util/log-limit.js';
import { plainAddress } from '../../util/address.js';
import { readInto } from '../read-into.js';
import type { ListenOptions, ProtocolListener } from '../types.js';
import type { AmqpAdapter } from './adapter.js';
import { AmqpConnection } from './connection.js';

export interface AmqpListenOptions extends ListenOptions {
  /** Serve TLS (amqps) with this PEM certificate (chain) and key. */
  tls?: TlsServerFiles;
}

export async function startAmqpListener(adapter: AmqpAdapter, listen: AmqpListenOptions): Promise<ProtocolListener> {
  const isTls = listen.tls !== undefined;
  const name = isTls ? 'amqps' : 'amqp';
  const conns = new ConnectionSet<AmqpConnection>();
  let seq = 0;
  // Connection ids are the owners of exclusive queues: unique over every listener of the process.
  const prefix = `${isTls ? 'as' : 'a'}${process.pid.toString(36)}.${Date.now().toString(36)}.`;

  const accept = (socket: Socket) => {
    // Frames are batched by corking; Nagle would only delay each batch.
    socket.setNoDelay(true);
    conns.add(
      new AmqpConnection(socket, adapter, {
        id: `${prefix}${++seq}`,
        remoteAddress: plainAddress(socket.remoteAddress),
        remotePort: socket.remotePort,
        listener: name,
        attachInput: isTls ? undefined : (receive) => readInto(socket, receive),
      }),
    );
  };

  let server: Server;
  if (listen.tls) {
    const t = tls.createServer({
      cert: listen.tls.cert,
      key: listen.tls.key,
      ca: listen.tls.ca,
      handshakeTimeout: listen.tls.handshakeTimeoutMs ?? TLS_HANDSHAKE_TIMEOUT_MS,
      ...(listen.tls.requestCert !== undefined ? { requestCert: listen.tls.requestCert, rejectUnauthorized: listen.tls.rejectUnauthorized ?? false } : {}),
    });
    t.on('secureConnection', accept);
    t.on('tlsClientError', (err, socket) => {
      adapter.logLimit.log(
        'debug',
        logKey('amqp tls handshake failed', socket.remoteAddress),
        { remote: socket.remoteAddress, err: err.message },
        'amqp tls handshake failed',
      );
      socket.destroy();
    });
    server = t;
  } else {
    server = createServer({ pauseOnConnect: true }, accept);
  }
  await listenOn(server, listen, (err) => adapter.logger.error({ err, listener: name }, 'amqp listener error'));
  adapter.retain();

  // One sweep for every connection of the listener: handshake deadline, heartbeats, close-ok waits.
  const sweeper = setInterval(() => {
    const now = Date.now();
    for (const c of conns) c.sweep(now);
  }, 250);
  sweeper.unref();

  let closing: Promise<void> | null = null;
  return {
    protocol: name,
    address: () => server.address() as AddressInfo,
    connections: () => conns.size,
    close(): Promise<void> {
      closing ??= conns
        .closeAll(server, (c) => c.close())
        .then(() => {
          clearInterval(sweeper);
          adapter.release();
        });
      return closing;
    },
  };
}
