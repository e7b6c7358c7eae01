/**
 * A fault-injecting TCP proxy for tests and the chaos runner (bench/reliability/chaos.ts): listens on a free loopback
 * port and forwards every connection to `target`; whoever holds it switches its mode at any moment:
 * - `pass`: bytes flow both ways (the default);
 * - `stall`: nothing moves: open connections stop reading (their bytes wait in the kernel's buffers, TCP flow control
 *   holds the senders), new connections are accepted but not connected onward; back to `pass`, everything queued
 *   flows on, late. This is a network partition short enough for TCP to survive it: a stalled writer's requests
 *   arrive after the partition heals;
 * - `cut`: every open connection is destroyed (reset) and new ones are closed at once, until `pass` again;
 * - `tear`: a write cut in the middle, as a process killed while writing leaves it: each open connection passes on
 *   the first half of the next chunk its client sends, then nothing more either way (answers are held back, so the
 *   client never learns the torn write's outcome); new connections wait as in `stall`. Leaving `tear` closes every
 *   connection that was open in it (the server sees a request cut short, then the connection's end). The chaos
 *   runner (`torn-write`) tears a broker's PostgreSQL and S3 connections, then kills it -9.
 * A plain module (no node:test imports), so bench/ can use it too.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export type ProxyMode = 'pass' | 'stall' | 'cut' | 'tear';

interface Pair {
  client: Socket;
  upstream: Socket | null;
  /** Open while the proxy was in `tear`; `torn`: half of a chunk passed on, the rest held back. */
  tearing?: boolean;
  torn?: boolean;
  /** Connects onward (for a connection accepted while stalled). */
  open(): void;
}

export class FaultProxy {
  private mode: ProxyMode = 'pass';
  private readonly pairs = new Set<Pair>();
  /** Connections accepted, and cut by a fault, since the start. */
  accepted = 0;
  cutConnections = 0;
  /** Writes cut in the middle by `tear` since the start. */
  tornWrites = 0;

  private constructor(
    private readonly server: Server,
    readonly port: number,
    readonly target: { host: string; port: number },
  ) {}

  /** A proxy on 127.0.0.1:<free port> to `target`. */
  static async start(target: { host?: string; port: number }): Promise<FaultProxy> {
    const server = createServer({ noDelay: true });
    const port = await new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port));
    });
    const p = new FaultProxy(server, port, { host: target.host ?? '127.0.0.1', port: target.port });
    server.on('connection', (s) => p.accept(s));
    return p;
  }

  get current(): ProxyMode {
    return this.mode;
  }

  /** `host:port` clients connect to. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  private accept(client: Socket): void {
    this.accepted++;
    client.on('error', () => undefined);
    if (this.mode === 'cut') {
      client.resetAndDestroy();
      return;
    }
    client.setNoDelay(true);
    const pair: Pair = {
      client,
      upstream: null,
      open: () => {
        if (pair.upstream || client.destroyed) return;
        const up = createConnection({ host: this.target.host, port: this.target.port, noDelay: true });
        pair.upstream = up;
        const end = (): void => {
          this.pairs.delete(pair);
          client.destroy();
          up.destroy();
        };
        client.on('data', (d: Buffer) => {
          if (this.mode === 'tear' || pair.tearing) {
            if (!pair.torn && d.length > 1) {
              pair.torn = true;
              this.tornWrites++;
              up.write(d.subarray(0, d.length >> 1));
            }
            client.pause();
            return;
          }
          if (!up.write(d)) client.pause();
        });
        up.on('data', (d: Buffer) => {
          if (!client.write(d)) up.pause();
        });
        up.on('drain', () => {
          if (this.mode === 'pass') client.resume();
        });
        client.on('drain', () => {
          if (this.mode === 'pass') up.resume();
        });
        up.on('error', end);
        up.on('close', end);
        client.on('close', end);
        if (this.mode === 'stall' || this.mode === 'tear') {
          client.pause();
          up.pause();
        }
      },
    };
    client.on('error', () => {
      this.pairs.delete(pair);
      client.destroy();
      pair.upstream?.destroy();
    });
    client.on('close', () => {
      if (!pair.upstream) this.pairs.delete(pair);
    });
    this.pairs.add(pair);
    if (this.mode === 'pass') pair.open();
    else client.pause();
  }

  /** Switches the mode; `cut` resets every open connection. */
  set(mode: ProxyMode): void {
    const was = this.mode;
    this.mode = mode;
    for (const pair of [...this.pairs]) {
      if (was === 'tear' && mode !== 'tear' && pair.upstream) {
        // Torn (or at least held in the tear): the connection ends here, its request cut short.
        this.pairs.delete(pair);
        pair.client.destroy();
        pair.upstream.destroy();
      } else if (mode === 'tear') {
        // The next chunk the client sends is cut in half (the client's data handler), answers are held back.
        pair.tearing = true;
        pair.upstream?.pause();
        if (pair.upstream) pair.client.resume();
      } else if (mode === 'cut') {
        this.cutConnections++;
        this.pairs.delete(pair);
        pair.client.resetAndDestroy();
        pair.upstream?.resetAndDestroy();
      } else if (mode === 'stall') {
        pair.client.pause();
        pair.upstream?.pause();
      } else {
        if (!pair.upstream) pair.open();
        pair.client.resume();
        pair.upstream?.resume();
      }
    }
  }

  /** Resets every connection and stops listening. */
  async close(): Promise<void> {
    this.set('cut');
    this.server.unref();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
