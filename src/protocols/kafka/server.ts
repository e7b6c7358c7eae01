/**
 * The Kafka TCP listener.
 */
import { createServer, type AddressInfo, type Socket } from 'node:net';
import type { AdapterContext, ListenOptions, ProtocolListener } from '../types.js';
import { KafkaAdapter, type KafkaStores } from './adapter.js';
import { KafkaConnection } from './connection.js';
import { resolveKafkaOptions, type KafkaOptions } from './options.js';
import { KAFKA_ROUTES } from './routes.js';

export async function startKafkaListener(
  ctx: AdapterContext,
  listen: ListenOptions,
  opts: KafkaOptions = {},
  stores: KafkaStores = {},
): Promise<ProtocolListener> {
  const adapter = new KafkaAdapter(ctx, resolveKafkaOptions(opts), KAFKA_ROUTES, stores);
  const conns = new Set<KafkaConnection>();
  let seq = 0;

  // allowHalfOpen: a client that shuts down its sending side still gets the responses to what it sent; the
  // connection ends its side once they are written.
  const server = createServer({ allowHalfOpen: true }, (socket: Socket) => {
    // Responses are already batched by corking; Nagle would only add latency to each of them.
    socket.setNoDelay(true);
    const conn = new KafkaConnection(socket, adapter, {
      id: `k${++seq}`,
      localAddress: socket.localAddress,
      localPort: socket.localPort,
      remoteAddress: socket.remoteAddress,
      remotePort: socket.remotePort,
    });
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
  server.on('error', (err) => ctx.logger.error({ err }, 'kafka listener error'));

  return {
    protocol: 'kafka',
    address: () => server.address() as AddressInfo,
    connections: () => conns.size,
    async close(): Promise<void> {
      adapter.groups.close();
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      const all = [...conns];
      for (const c of all) c.close();
      await Promise.all([stopped, ...all.map((c) => c.closed)]);
    },
  };
}
