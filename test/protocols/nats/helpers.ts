/**
 * Test helpers for the NATS connection: an Engine over memory storage, a NatsAdapter behind a plain net.Server on
 * loopback (what part C's listener does, without TLS), and a raw client that reads what the server sends with the
 * codec's NatsClientParser.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import { pino } from 'pino';
import { Engine } from '../../../src/core/index.js';
import { testControl, type TestControl } from '../../helpers/control.js';
import type { PasswordGuardOptions } from '../../../src/control/index.js';
import { NatsAdapter } from '../../../src/protocols/nats/adapter.js';
import type { NatsPublisher } from '../../../src/protocols/nats/types.js';
import { resolveNatsOptions, type NatsOptions } from '../../../src/protocols/nats/options.js';
import { NatsClientParser, type NatsClientHandler } from '../../../src/protocols/nats/codec/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';

export interface LogRecord {
  level: number;
  msg: string;
  [k: string]: unknown;
}

export interface NatsTestServer {
  port: number;
  access: TestAccess;
  adapter: NatsAdapter;
  engine: Engine;
  storage: MemoryStreams;
  logs: LogRecord[];
  close(): Promise<void>;
}

/** A control plane as the broker opens it (test/helpers/control.ts), NATS anonymous unless told otherwise. */
export type TestAccess = TestControl;

export function makeAccess(
  o: {
    users?: Array<{ username: string; password: string; groups?: string[]; namespace?: string }>;
    anonymous?: boolean;
    guard?: PasswordGuardOptions;
  } = {},
): Promise<TestAccess> {
  // The guard as the broker has it (failures slowed) unless told otherwise: the tests check the throttle too.
  return testControl({ users: o.users, anonymous: o.anonymous === false ? [] : ['nats'], guard: o.guard ?? {} });
}

export async function startNats(
  opts: NatsOptions = {},
  auth: {
    access?: TestAccess;
    allowAnonymous?: boolean;
    token?: string | null;
    tls?: { available: boolean; required: boolean };
    responses?: { max: number; ttlMs: number };
  } = {},
  publisher?: (engine: Engine) => NatsPublisher,
  storage: MemoryStreams = new MemoryStreams(),
): Promise<NatsTestServer> {
  const engine = new Engine(storage, storage);
  const logs: LogRecord[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => void logs.push(JSON.parse(s) as LogRecord) });
  const ownAccess = auth.access === undefined ? await makeAccess({ anonymous: auth.allowAnonymous ?? true }) : null;
  const testAccess = auth.access ?? ownAccess!;
  const adapter = new NatsAdapter(
    { engine, logger, brokerId: 1 },
    resolveNatsOptions(opts),
    { access: testAccess.access, token: auth.token ?? null, ...(auth.responses ? { responses: auth.responses } : {}) },
    publisher?.(engine),
  );
  const tls = auth.tls ?? { available: false, required: false };
  const sockets = new Set<Socket>();
  serverSockets = sockets;
  const server: Server = createServer((socket) => {
    socket.setNoDelay(true);
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    adapter.handle(socket, { remoteAddress: socket.remoteAddress ?? '?', remotePort: socket.remotePort ?? 0, tls: false }, tls);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    access: testAccess,
    adapter,
    engine,
    storage,
    logs,
    async close() {
      const stopped = new Promise<void>((r) => server.close(() => r()));
      await adapter.closeAll();
      for (const s of sockets) s.destroy();
      await stopped;
      await ownAccess?.close();
    },
  };
}

/** The server-side sockets of the last started test server (to look at flow control from the broker's side). */
export let serverSockets = new Set<Socket>();

export type ServerOp =
  | { op: 'info'; info: Record<string, unknown> }
  | { op: 'msg'; subject: string; sid: string; reply: string | null; payload: Buffer; headers: Buffer | null }
  | { op: 'ok' }
  | { op: 'err'; text: string }
  | { op: 'ping' }
  | { op: 'pong' };

/** A raw NATS client: writes bytes, collects what the server sends, and knows when the socket closed. */
export class RawClient implements NatsClientHandler {
  readonly ops: ServerOp[] = [];
  readonly socket: Socket;
  readonly closed: Promise<void>;
  private readonly parser = new NatsClientParser({ maxControlLine: 1024 * 1024, maxPayload: 64 * 1024 * 1024 });
  private waiters: Array<() => void> = [];
  isClosed = false;

  private constructor(socket: Socket) {
    this.socket = socket;
    this.closed = new Promise((r) =>
      socket.on('close', () => {
        this.isClosed = true;
        r();
        this.wake();
      }),
    );
    socket.on('error', () => undefined);
    socket.on('data', (b: Buffer) => {
      this.parser.push(b, this);
      this.wake();
    });
  }

  static async connect(port: number): Promise<RawClient> {
    const s = connect(port, '127.0.0.1');
    await new Promise<void>((r, j) => {
      s.once('connect', r);
      s.once('error', j);
    });
    return new RawClient(s);
  }

  send(s: string | Buffer): void {
    this.socket.write(s);
  }

  /** Resolves with the first op (after `from`) matching `pred`, or rejects when the socket closes first. */
  async waitFor(pred: (o: ServerOp) => boolean, from = 0, timeoutMs = 5000): Promise<ServerOp> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      for (let i = from; i < this.ops.length; i++) if (pred(this.ops[i]!)) return this.ops[i]!;
      if (this.isClosed) throw new Error(`closed before the expected op; got ${JSON.stringify(this.ops.map((o) => o.op))}`);
      if (Date.now() > deadline) throw new Error(`timed out; got ${JSON.stringify(this.ops.map((o) => (o.op === 'err' ? o.text : o.op)))}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, 50);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  /** Sends PING and waits for its PONG: everything sent before was processed. */
  async flush(): Promise<void> {
    const from = this.ops.length;
    this.send('PING\r\n');
    await this.waitFor((o) => o.op === 'pong', from);
  }

  msgs(): Array<Extract<ServerOp, { op: 'msg' }>> {
    return this.ops.filter((o): o is Extract<ServerOp, { op: 'msg' }> => o.op === 'msg');
  }

  errors(): string[] {
    return this.ops.filter((o): o is Extract<ServerOp, { op: 'err' }> => o.op === 'err').map((o) => o.text);
  }

  close(): void {
    this.socket.destroy();
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  onInfo(info: Record<string, unknown>): void {
    this.ops.push({ op: 'info', info });
  }
  onMsg(subject: string, sid: string, reply: string | null, payload: Buffer): void {
    this.ops.push({ op: 'msg', subject, sid, reply, payload: Buffer.from(payload), headers: null });
  }
  onHmsg(subject: string, sid: string, reply: string | null, headers: Buffer, payload: Buffer): void {
    this.ops.push({ op: 'msg', subject, sid, reply, payload: Buffer.from(payload), headers: Buffer.from(headers) });
  }
  onOk(): void {
    this.ops.push({ op: 'ok' });
  }
  onErr(text: string): void {
    this.ops.push({ op: 'err', text });
  }
  onPing(): void {
    this.ops.push({ op: 'ping' });
  }
  onPong(): void {
    this.ops.push({ op: 'pong' });
  }
}

/** Waits until `cond` holds (polling), or fails after `timeoutMs` (a safety net, not a timing assertion). */
export async function until(cond: () => boolean, timeoutMs = 5000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
