/**
 * A raw NATS client socket for e2e tests of what the `nats` client hides: the exact INFO, -ERR lines, the TLS
 * upgrade after INFO, what arrives before a close. Lines are read as text (the tests here send no binary payloads).
 */
import net from 'node:net';
import tls from 'node:tls';

/** Safety net only: a line that never comes fails the test instead of hanging it. */
const WAIT_MS = 10_000;

export class RawNats {
  private buf = '';
  private waiters: Array<() => void> = [];
  private closed = false;
  private readonly closedP: Promise<void>;

  private constructor(readonly socket: net.Socket) {
    socket.setEncoding('latin1');
    socket.on('data', this.onData);
    socket.on('error', () => undefined);
    this.closedP = new Promise<void>((resolve) =>
      socket.once('close', () => {
        this.closed = true;
        this.wake();
        resolve();
      }),
    );
  }

  private readonly onData = (chunk: string) => {
    this.buf += chunk;
    this.wake();
  };

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  static connect(port: number): Promise<RawNats> {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.off('error', reject);
        resolve(new RawNats(s));
      });
      s.once('error', reject);
    });
  }

  /** A socket already connected. */
  static wrap(socket: net.Socket): RawNats {
    return new RawNats(socket);
  }

  /** TLS from the first byte (a handshake-first listener). */
  static connectTls(port: number, opts: tls.ConnectionOptions): Promise<RawNats> {
    return new Promise((resolve, reject) => {
      const s = tls.connect({ ...opts, port, host: '127.0.0.1' }, () => {
        s.off('error', reject);
        resolve(new RawNats(s));
      });
      s.once('error', reject);
    });
  }

  /** Upgrades this socket to TLS in place (after INFO, as a client of a tls_available/tls_required server does). */
  upgrade(opts: tls.ConnectionOptions): Promise<RawNats> {
    this.socket.off('data', this.onData);
    return new Promise((resolve, reject) => {
      const s = tls.connect({ ...opts, socket: this.socket }, () => {
        s.off('error', reject);
        resolve(new RawNats(s));
      });
      s.once('error', reject);
    });
  }

  send(text: string): void {
    this.socket.write(text);
  }

  /** The next line (without its CRLF); rejects if the socket closes first or nothing comes for a long while. */
  async line(): Promise<string> {
    const deadline = Date.now() + WAIT_MS;
    for (;;) {
      const i = this.buf.indexOf('\r\n');
      if (i >= 0) {
        const l = this.buf.slice(0, i);
        this.buf = this.buf.slice(i + 2);
        return l;
      }
      if (this.closed) throw new Error(`closed before a whole line; have ${JSON.stringify(this.buf)}`);
      if (Date.now() > deadline) throw new Error(`no line within ${WAIT_MS} ms; have ${JSON.stringify(this.buf)}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 200);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** The INFO line's object. */
  async info(): Promise<Record<string, unknown>> {
    const l = await this.line();
    if (!l.startsWith('INFO ')) throw new Error(`expected INFO, got ${JSON.stringify(l)}`);
    return JSON.parse(l.slice(5)) as Record<string, unknown>;
  }

  /** Resolves when the broker has closed the connection (rejects after the safety net). */
  ended(): Promise<void> {
    return Promise.race([
      this.closedP,
      new Promise<void>((_, reject) =>
        setTimeout(() => reject(new Error(`still open after ${WAIT_MS} ms; have ${JSON.stringify(this.buf)}`)), WAIT_MS).unref(),
      ),
    ]);
  }

  /** What arrived and was not read as a line yet. */
  rest(): string {
    return this.buf;
  }

  destroy(): void {
    this.socket.destroy();
  }
}
