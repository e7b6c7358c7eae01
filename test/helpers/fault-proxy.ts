/**
 * A fault-injecting TCP proxy for tests and the chaos runner (bench/reliability/chaos.ts): listens on a free loopback
 * port and forwards every connection to `target`; whoever holds it switches its mode at any moment:
 * - `pass`: bytes flow both ways (the default);
 * - `delay`: bytes flow both ways, each chunk held `delayMs` (a slow network or a slow server; order kept; flow
 *   control is not applied to what is held). Back to `pass`, what is held goes at once;
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

export type ProxyMode = 'pass' | 'delay' | 'stall' | 'cut' | 'tear';

/** Writes each chunk `delayMs` after it came (at the earliest), in the order they came. */
class DelayedWriter {
  private readonly queue: Array<{ due: number; data: Buffer }> = [];
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly to: Socket) {}

  write(data: Buffer, delayMs: number): void {
    const last = this.queue.at(-1)?.due ?? 0;
    this.queue.push({ due: Math.max(Date.now() + delayMs, last), data });
    this.schedule();
  }

  /** Everything still held, written now (the delay lifted). */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const q of this.queue.splice(0)) if (!this.to.destroyed) this.to.write(q.data);
  }

  get pending(): boolean {
    return this.queue.length > 0;
  }

  private schedule(): void {
    if (this.timer || this.queue.length === 0) return;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        const now = Date.now();
        while (this.queue.length > 0 && this.queue[0]!.due <= now) {
          const q = this.queue.shift()!;
          if (!this.to.destroyed) this.to.write(q.data);
        }
        this.schedule();
      },
      Math.max(0, this.queue[0]!.due - Date.now()),
    );
  }
}

interface Pair {
  client: Socket;
  upstream: Socket | null;
  /** Chunks held back by `delay`, per direction (made on first use). */
  toUpstream?: DelayedWriter;
  toClient?: DelayedWriter;
  /** Open while the proxy was in `tear`; `torn`: half of a chunk passed on, the rest held back. */
  tearing?: boolean;
  torn?: boolean;
  /** Connects onward (for a connection accepted while stalled). */
  open(): void;
}

export class FaultProxy {
  private mode: ProxyMode = 'pass';
  /** `delay`: how long each chunk is held, ms. */
  private delayMs = 0;
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
    readonly host = '127.0.0.1',
  ) {}

  /** A proxy on `listen` (default 127.0.0.1), a free port, to `target`. */
  static async start(target: { host?: string; port: number }, listen = '127.0.0.1'): Promise<FaultProxy> {
    const server = createServer({ noDelay: true });
    const port = await new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, listen, () => resolve((server.address() as { port: number }).port));
    });
    const p = new FaultProxy(server, port, { host: target.host ?? '127.0.0.1', port: target.port }, listen);
    server.on('connection', (s) => p.accept(s));
    return p;
  }

  get current(): ProxyMode {
    return this.mode;
  }

  /** `host:port` clients connect to. */
  get address(): string {
    return `${this.host}:${this.port}`;
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
          if (this.mode === 'delay' || pair.toUpstream?.pending) {
            (pair.toUpstream ??= new DelayedWriter(up)).write(d, this.delayMs);
            return;
          }
          if (!up.write(d)) client.pause();
        });
        up.on('data', (d: Buffer) => {
          if (this.mode === 'delay' || pair.toClient?.pending) {
            (pair.toClient ??= new DelayedWriter(client)).write(d, this.delayMs);
            return;
          }
          if (!client.write(d)) up.pause();
        });
        up.on('drain', () => {
          if (this.mode === 'pass' || this.mode === 'delay') client.resume();
        });
        client.on('drain', () => {
          if (this.mode === 'pass' || this.mode === 'delay') up.resume();
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
    if (this.mode === 'pass' || this.mode === 'delay') pair.open();
    else client.pause();
  }

  /** Switches the mode (`delay`: each chunk held `delayMs`); `cut` resets every open connection. */
  set(mode: ProxyMode, delayMs = 0): void {
    const was = this.mode;
    this.mode = mode;
    this.delayMs = mode === 'delay' ? delayMs : 0;
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
        if (mode === 'pass') {
          pair.toUpstream?.flush();
          pair.toClient?.flush();
        }
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
