/**
 * Helpers for the Kafka adapter tests: a capturing logger, a listener over in-memory storage, kcat runs with a
 * kill timer, a raw protocol client, and an in-memory duplex pair.
 */
import { spawn } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { pino, type Logger } from 'pino';
import { Engine } from '../../../src/core/index.js';
import { startKafkaListener, type KafkaOptions } from '../../../src/protocols/kafka/index.js';
import { ZERO_UUID, decodeResponse, encodeRequest, type ApiCodec, type MetadataRequest } from '../../../src/protocols/kafka/codec/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';

export interface CapturedLog {
  logger: Logger;
  lines: string[];
  /** Parsed entries whose message includes `msg`. */
  entries(msg: string): Array<Record<string, unknown>>;
}

export function captureLogger(level = 'debug'): CapturedLog {
  const lines: string[] = [];
  const logger = pino({ level }, { write: (s: string) => void lines.push(s) });
  return {
    logger,
    lines,
    entries: (msg) => lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((e) => typeof e.msg === 'string' && e.msg.includes(msg)),
  };
}

export interface MemoryKafka {
  engine: Engine;
  listener: ProtocolListener;
  port: number;
  /** host:port, as clients take it. */
  broker: string;
}

/** A Kafka listener (broker id 0) on an ephemeral loopback port over in-memory storage; close its listener. */
export async function startMemoryKafka(opts: KafkaOptions = {}): Promise<MemoryKafka> {
  const m = new MemoryStreams();
  const engine = new Engine(m, m);
  const listener = await startKafkaListener({ engine, logger: captureLogger().logger, brokerId: 0 }, { host: '127.0.0.1', port: 0 }, opts);
  const port = listener.address().port;
  return { engine, listener, port, broker: `127.0.0.1:${port}` };
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs kcat; kills it after `timeoutMs` so a test can never hang on it. */
export function kcat(args: string[], opts: { input?: string; timeoutMs?: number } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('kcat', args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 15000);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? '');
  });
}

/** A bare Kafka protocol client over TCP, for byte-level tests. */
export class RawClient {
  private buf = Buffer.alloc(0);
  private readonly frames: Buffer[] = [];
  private wake: (() => void) | null = null;
  private isClosed = false;
  readonly closed: Promise<void>;
  private nextCorrelation = 1;

  private constructor(readonly socket: Socket) {
    this.closed = new Promise((resolve) => {
      socket.on('close', () => {
        this.isClosed = true;
        this.wake?.();
        resolve();
      });
    });
    socket.on('error', () => undefined);
    socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      while (this.buf.length >= 4 && this.buf.length >= 4 + this.buf.readInt32BE(0)) {
        const n = this.buf.readInt32BE(0);
        this.frames.push(this.buf.subarray(4, 4 + n));
        this.buf = this.buf.subarray(4 + n);
      }
      this.wake?.();
    });
  }

  static connect(port: number): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => {
        s.off('error', reject);
        resolve(new RawClient(s));
      });
      s.once('error', reject);
    });
  }

  send(...frames: Buffer[]): void {
    this.socket.write(Buffer.concat(frames));
  }

  /** A size-prefixed request frame with a fresh correlation id. */
  frame<Req, Res>(codec: ApiCodec<Req, Res>, version: number, body: Req, correlationId = this.nextCorrelation++): Buffer {
    return encodeRequest(codec, { apiVersion: version, correlationId, clientId: 'raw' }, body, { sizePrefix: true });
  }

  /** The next response frame (without its size prefix). */
  async next(timeoutMs = 5000): Promise<Buffer> {
    const deadline = Date.now() + timeoutMs;
    while (this.frames.length === 0) {
      if (this.isClosed) throw new Error('connection closed');
      const left = deadline - Date.now();
      if (left <= 0) throw new Error('timed out waiting for a response');
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = null;
    }
    const f = this.frames.shift();
    if (!f) throw new Error('no frame');
    return f;
  }

  /** Sends one request and decodes its response. */
  async call<Req, Res>(codec: ApiCodec<Req, Res>, version: number, body: Req): Promise<Res> {
    const correlationId = this.nextCorrelation++;
    this.send(this.frame(codec, version, body, correlationId));
    const res = decodeResponse(codec, version, await this.next());
    if (res.correlationId !== correlationId) throw new Error(`correlation ${res.correlationId} != ${correlationId}`);
    return res.body;
  }

  /** Whether the server closes the connection within `ms`. */
  async closesWithin(ms: number): Promise<boolean> {
    const t = new Promise<false>((resolve) => setTimeout(() => resolve(false), ms).unref());
    return Promise.race([this.closed.then(() => true), t]);
  }

  close(): void {
    this.socket.destroy();
  }
}

/** Two connected in-memory duplex ends. */
export function duplexPair(): [Duplex, Duplex] {
  let a: Duplex | null = null;
  let b: Duplex | null = null;
  const make = (peer: () => Duplex | null): Duplex =>
    new Duplex({
      read() {},
      write(chunk: Buffer, _enc, cb) {
        peer()?.push(chunk);
        cb();
      },
      final(cb) {
        peer()?.push(null);
        cb();
      },
    });
  a = make(() => b);
  b = make(() => a);
  return [a, b];
}

/** A Metadata request for these topics (null: every topic), as a client sends it. */
export function metadataRequest(names: string[] | null, allowAutoTopicCreation = true): MetadataRequest {
  return {
    topics: names === null ? null : names.map((name) => ({ topicId: ZERO_UUID, name })),
    allowAutoTopicCreation,
    includeClusterAuthorizedOperations: false,
    includeTopicAuthorizedOperations: false,
  };
}
