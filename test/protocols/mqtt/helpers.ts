/**
 * Helpers for the MQTT adapter tests: a broker (listener + in-memory engine + capturing logger), a raw-socket
 * MQTT client built on our own codec, and small async utilities. No side effects on import.
 */
import net from 'node:net';
import { spawn } from 'node:child_process';
import { pino, type Logger } from 'pino';
import { Engine } from '../../../src/core/index.js';
import type { RetainedStore, SessionStore } from '../../../src/core/index.js';
import { startMqttListener, type MqttListener, type MqttOptions } from '../../../src/protocols/mqtt/index.js';
import { INCOMPLETE, encodePacket, parsePacket, type ConnectPacket, type MqttPacket } from '../../../src/protocols/mqtt/codec/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import type { AccessControl, Directory, ExternalAuthenticator } from '../../../src/control/index.js';
import { testControl } from '../../helpers/control.js';

export interface LogLine {
  level: number;
  msg: string;
  [k: string]: unknown;
}

export interface TestBroker {
  engine: Engine;
  storage: MemoryStreams;
  listener: MqttListener;
  port: number;
  url: string;
  logs: LogLine[];
  logger: Logger;
  close(): Promise<void>;
}

export async function startBroker(
  opts: MqttOptions = {},
  given?: MemoryStreams,
  /** Kept by the test (across brokers, or to look into); used when no `given` storage is. */
  stores: { sessions?: SessionStore; retained?: RetainedStore } = {},
): Promise<TestBroker> {
  if (given !== undefined && (stores.sessions !== undefined || stores.retained !== undefined)) {
    throw new Error('give the stores to the MemoryStreams given instead');
  }
  const storage = given ?? new MemoryStreams(stores);
  const logs: LogLine[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => void logs.push(JSON.parse(s) as LogLine) });
  const engine = new Engine(storage, storage);
  await engine.load();
  const listener = await startMqttListener({ engine, logger, brokerId: 1 }, { host: '127.0.0.1', port: 0 }, opts);
  const port = listener.address().port;
  return {
    engine,
    storage,
    listener,
    port,
    url: `mqtt://127.0.0.1:${port}`,
    logs,
    logger,
    close: () => listener.close(),
  };
}

export { GatedStreams } from '../../helpers/memory-storage.js';

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export async function until(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

export function connectPacket(clientId: string, init: Partial<ConnectPacket> = {}): ConnectPacket {
  return {
    type: 'connect',
    protocolName: 'MQTT',
    protocolLevel: 4,
    cleanSession: true,
    keepalive: 0,
    clientId,
    will: null,
    username: null,
    password: null,
    ...init,
  };
}

/** A bare MQTT client over a TCP socket: sends raw bytes, decodes what comes back with our codec. */
export class RawClient {
  readonly packets: MqttPacket[] = [];
  readonly closed: Promise<void>;
  isClosed = false;
  /** Protocol level to decode server packets at (set to 5 after a v5 CONNECT). */
  level: 3 | 4 | 5 = 4;
  private buf = Buffer.alloc(0);

  private constructor(readonly socket: net.Socket) {
    socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      for (;;) {
        const r = parsePacket(this.buf, 0, 1 << 28, this.level);
        if (r === INCOMPLETE) break;
        this.packets.push(r.packet);
        this.buf = this.buf.subarray(r.bytesConsumed);
      }
    });
    socket.on('error', () => {});
    this.closed = new Promise((resolve) =>
      socket.on('close', () => {
        this.isClosed = true;
        resolve();
      }),
    );
  }

  static open(port: number): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      // No Nagle: a lone small packet (an ack) must not wait for the broker's delayed TCP ACK.
      const s = net.connect({ port, host: '127.0.0.1', noDelay: true }, () => resolve(new RawClient(s)));
      s.once('error', reject);
    });
  }

  /** Opens a socket, sends CONNECT and waits for the CONNACK. */
  static async connect(port: number, clientId: string, init: Partial<ConnectPacket> = {}): Promise<RawClient> {
    const c = await RawClient.open(port);
    c.send(connectPacket(clientId, init));
    await c.next('connack');
    return c;
  }

  /** Writes raw bytes, or a packet encoded at the client's `level`. */
  send(p: MqttPacket | Buffer): void {
    this.socket.write(Buffer.isBuffer(p) ? p : encodePacket(p, this.level));
  }

  /** Waits for the next received packet of `type` not yet consumed by an earlier `next`. */
  async next<T extends MqttPacket['type']>(type: T, timeoutMs = 3000): Promise<Extract<MqttPacket, { type: T }>> {
    const t0 = Date.now();
    for (;;) {
      const i = this.packets.findIndex((p) => p.type === type);
      if (i >= 0) return this.packets.splice(i, 1)[0] as Extract<MqttPacket, { type: T }>;
      if (Date.now() - t0 > timeoutMs) throw new Error(`no ${type} within ${timeoutMs} ms`);
      if (this.isClosed) throw new Error(`connection closed while waiting for ${type}`);
      await sleep(2);
    }
  }

  async waitClosed(timeoutMs = 3000): Promise<void> {
    // The guard timer is cleared once closed: left armed, it kept a test file's process alive for up to timeoutMs
    // after its last test (15 s in e2e/mqtt-hostile).
    let t: NodeJS.Timeout | undefined;
    try {
      await Promise.race([this.closed, new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error('connection was not closed')), timeoutMs)))]);
    } finally {
      clearTimeout(t);
    }
  }

  destroy(): void {
    this.socket.destroy();
  }
}

export interface ProcResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion (with a hard timeout), feeding `input` on stdin. */
export function run(cmd: string, args: string[], input?: string, timeoutMs = 15_000): Promise<ProcResult> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const t = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('error', (e) => {
      clearTimeout(t);
      reject(e);
    });
    p.on('close', (code) => {
      clearTimeout(t);
      resolve({ code, stdout, stderr });
    });
    p.stdin.end(input ?? '');
  });
}

/**
 * A control plane as the broker builds it (src/broker.ts openControlPlane), over an in-memory control store: the
 * directory, the password guard (scrypt on its worker) and AccessControl. `anonymous`: MQTT clients without
 * credentials are let in.
 */
export async function makeAccess(
  opts: { anonymous?: boolean; logger?: Logger; external?: ExternalAuthenticator } = {},
): Promise<{ access: AccessControl; directory: Directory; close(): Promise<void> }> {
  return testControl({
    anonymous: opts.anonymous ? ['mqtt'] : [],
    logger: opts.logger,
    external: opts.external,
    guard: { verifier: { threads: 1 }, throttle: { freeFailures: 1000 } },
  });
}
