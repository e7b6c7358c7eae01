/**
 * The MQTT TCP listener: one MqttConnection per accepted socket, a shared client-id registry for session
 * takeover, and an orderly close.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import type { AdapterContext, ListenOptions, ProtocolListener } from '../types.js';
import { MqttClientRegistry, MqttConnection, resolveMqttOptions, type MqttOptions } from './connection.js';

export interface MqttListener extends ProtocolListener {
  /** Client ids currently connected through this listener. */
  readonly registry: MqttClientRegistry;
  /** Sum of messages dropped by flow control over the listener's open connections. */
  dropped(): number;
}

export async function startMqttListener(
  ctx: AdapterContext,
  listen: ListenOptions,
  opts: MqttOptions = {},
): Promise<MqttListener> {
  const options = resolveMqttOptions(opts);
  const registry = new MqttClientRegistry();
  const conns = new Set<MqttConnection>();
  // Small MQTT packets must not wait for Nagle's algorithm.
  const server = net.createServer({ noDelay: true });
  server.on('connection', (socket) => {
    socket.setNoDelay(true);
    const remote = `${socket.remoteAddress ?? '?'}:${socket.remotePort ?? '?'}`;
    const conn = new MqttConnection(socket, ctx, { options, registry, remote });
    conns.add(conn);
    void conn.closed.then(() => conns.delete(conn));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(listen.port, listen.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.on('error', (err) => ctx.logger.error({ err }, 'mqtt listener error'));

  let closing: Promise<void> | null = null;
  return {
    protocol: 'mqtt',
    registry,
    address: () => server.address() as AddressInfo,
    connections: () => conns.size,
    dropped: () => {
      let n = 0;
      for (const c of conns) n += c.stats.dropped;
      return n;
    },
    close() {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        await Promise.all([...conns].map((c) => c.shutdown()));
        await stopped;
      })();
      return closing;
    },
  };
}
