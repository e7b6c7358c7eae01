/**
 * Helpers of the AMQP end-to-end tests: a broker with the AMQP listener on a free port, amqplib connections, and a
 * raw AMQP client (frames encoded with amqplib's own codec, the reference) for what a well-behaved client never
 * sends.
 */
import { connect as netConnect, type Socket } from 'node:net';
import { after, before } from 'node:test';
import amqp, { type Channel, type ChannelModel, type ConsumeMessage } from 'amqplib';
import { createRequire } from 'node:module';
import { FlowmqProcess } from './harness.js';

const require = createRequire(import.meta.url);
// amqplib's frame codec (the reference encoder, used in tests only).
// eslint-disable-next-line @typescript-eslint/no-require-imports
const defs = require('amqplib/lib/defs') as {
  encodeMethod(id: number, channel: number, fields: Record<string, unknown>): Buffer;
  encodeProperties(id: number, channel: number, size: number, fields: Record<string, unknown>): Buffer;
  decode(id: number, buf: Buffer): Record<string, unknown>;
  info(id: number): { name: string };
  [k: string]: unknown;
};
export { defs };

export async function startAmqpBroker(args: string[] = [], opts: { defaultHost?: boolean } = {}): Promise<FlowmqProcess> {
  return FlowmqProcess.start({ args: ['--protocols', 'mqtt,kafka,amqp', '--amqp-port', '0', '--amqp-heartbeat', '0', ...args], ...opts });
}

/** What a describe block of AMQP tests shares: one broker and, when asked, one amqplib connection and channel. */
export interface AmqpFixture {
  broker: FlowmqProcess;
  conn: ChannelModel;
  ch: Channel;
}

/**
 * Starts the fixture before the block's tests (startAmqpBroker with `args`; a connection with `connect`, also a
 * channel with `channel`) and closes it after them.
 */
export function amqpFixture(opts: { args?: string[]; connect?: boolean; channel?: boolean } = {}): AmqpFixture {
  const f = {} as AmqpFixture;
  before(async () => {
    f.broker = await startAmqpBroker(opts.args);
    if (opts.connect === true || opts.channel === true) f.conn = await connectAmqp(f.broker);
    if (opts.channel === true) f.ch = await f.conn.createChannel();
  });
  after(async () => {
    await f.conn?.close().catch(() => undefined);
    await f.broker?.stop();
    f.broker?.cleanup();
  });
  return f;
}

export function amqpUrl(b: FlowmqProcess, user = 'guest', pass = 'guest', vhost = ''): string {
  return `amqp://${encodeURIComponent(user)}:${encodeURIComponent(pass)}@127.0.0.1:${b.ports.amqp}${vhost === '' ? '' : '/' + encodeURIComponent(vhost)}`;
}

export function connectAmqp(b: FlowmqProcess, opts: { user?: string; pass?: string; heartbeat?: number } = {}) {
  return amqp.connect(amqpUrl(b, opts.user, opts.pass) + (opts.heartbeat !== undefined ? `?heartbeat=${opts.heartbeat}` : ''));
}

/** Resolves with the first `n` messages consumed from `queue` (manual ack unless noAck; acks each unless told not to). */
export function take(ch: Channel, queue: string, n: number, opts: { noAck?: boolean; ack?: boolean } = {}): Promise<ConsumeMessage[]> {
  return new Promise((resolve, reject) => {
    const got: ConsumeMessage[] = [];
    // Deliveries can arrive in the same read as consume-ok, before amqplib resolves consume(): cancel once known.
    let tagKnown!: (t: string) => void;
    const tag = new Promise<string>((r) => (tagKnown = r));
    const timer = setTimeout(() => reject(new Error(`timed out: ${got.length} of ${n} messages from ${queue}`)), 15_000);
    ch.consume(
      queue,
      (m) => {
        if (m === null) return;
        got.push(m);
        if (!opts.noAck && opts.ack !== false) ch.ack(m);
        if (got.length === n) {
          clearTimeout(timer);
          void tag.then((t) => ch.cancel(t)).then(() => resolve(got), reject);
        }
      },
      { noAck: opts.noAck ?? false },
    ).then((ok) => tagKnown(ok.consumerTag), reject);
  });
}

/**
 * A raw AMQP client: sends frames built by hand or by amqplib's encoder and reads what comes back, for bad input
 * tests. `handshake()` goes through start / tune / open like a client.
 */
export class RawAmqp {
  private buf = Buffer.alloc(0);
  private waiters: Array<() => void> = [];
  closed = false;
  private constructor(readonly socket: Socket) {
    socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      for (const w of this.waiters.splice(0)) w();
    });
    socket.on('close', () => {
      this.closed = true;
      for (const w of this.waiters.splice(0)) w();
    });
    socket.on('error', () => undefined);
  }

  static open(port: number): Promise<RawAmqp> {
    return new Promise((resolve, reject) => {
      const s = netConnect(port, '127.0.0.1', () => resolve(new RawAmqp(s)));
      s.once('error', reject);
    });
  }

  write(b: Buffer): void {
    this.socket.write(b);
  }

  /** Waits for `n` bytes (or the close); returns what there is. */
  async bytes(n: number, timeoutMs = 10_000): Promise<Buffer> {
    const deadline = Date.now() + timeoutMs;
    while (this.buf.length < n && !this.closed) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${n} bytes (have ${this.buf.length})`);
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 100);
      });
    }
    const out = this.buf.subarray(0, Math.min(n, this.buf.length));
    this.buf = this.buf.subarray(out.length);
    return out;
  }

  /** The next frame: type, channel, and for method frames the method name and fields (amqplib's decoder). */
  async frame(): Promise<{ type: number; channel: number; payload: Buffer; method?: string; fields?: Record<string, unknown> } | null> {
    const head = await this.bytes(7);
    if (head.length < 7) return null;
    const size = head.readUInt32BE(3);
    const rest = await this.bytes(size + 1);
    const payload = rest.subarray(0, size);
    const f: { type: number; channel: number; payload: Buffer; method?: string; fields?: Record<string, unknown> } = {
      type: head[0]!,
      channel: head.readUInt16BE(1),
      payload,
    };
    if (f.type === 1) {
      const id = payload.readUInt32BE(0);
      f.method = defs.info(id).name;
      f.fields = defs.decode(id, payload.subarray(4));
    }
    return f;
  }

  /** The next method frame, skipping heartbeats. */
  async method(): Promise<{ channel: number; method: string; fields: Record<string, unknown> } | null> {
    for (;;) {
      const f = await this.frame();
      if (f === null) return null;
      if (f.type === 1) return { channel: f.channel, method: f.method!, fields: f.fields! };
    }
  }

  send(name: string, channel: number, fields: Record<string, unknown>): void {
    this.write(defs.encodeMethod(defs[name] as number, channel, fields));
  }

  /** Protocol header, start-ok (PLAIN guest/guest), tune-ok, open; then channel 1 open. */
  async handshake(opts: { frameMax?: number } = {}): Promise<void> {
    this.write(Buffer.from('AMQP\x00\x00\x09\x01', 'latin1'));
    const start = await this.method();
    if (start?.method !== 'ConnectionStart') throw new Error(`expected ConnectionStart, got ${start?.method}`);
    this.send('ConnectionStartOk', 0, { clientProperties: {}, mechanism: 'PLAIN', response: Buffer.from('\0guest\0guest'), locale: 'en_US' });
    const tune = await this.method();
    if (tune?.method !== 'ConnectionTune') throw new Error(`expected ConnectionTune, got ${tune?.method}`);
    this.send('ConnectionTuneOk', 0, { channelMax: 0, frameMax: opts.frameMax ?? (tune.fields.frameMax as number), heartbeat: 0 });
    this.send('ConnectionOpen', 0, { virtualHost: '/', capabilities: '', insist: false });
    const ok = await this.method();
    if (ok?.method !== 'ConnectionOpenOk') throw new Error(`expected ConnectionOpenOk, got ${ok?.method}`);
    this.send('ChannelOpen', 1, { outOfBand: '' });
    const cok = await this.method();
    if (cok?.method !== 'ChannelOpenOk') throw new Error(`expected ChannelOpenOk, got ${cok?.method}`);
  }

  close(): void {
    this.socket.destroy();
  }
}

export function frame(type: number, channel: number, payload: Buffer, end = 0xce): Buffer {
  const b = Buffer.alloc(8 + payload.length);
  b[0] = type;
  b.writeUInt16BE(channel, 1);
  b.writeUInt32BE(payload.length, 3);
  payload.copy(b, 7);
  b[7 + payload.length] = end;
  return b;
}

/** Consumes `queue` (acking) until a message with body `marker`; returns the messages before it. */
export function takeUntil(ch: Channel, queue: string, marker: string, timeoutMs = 15_000): Promise<ConsumeMessage[]> {
  return new Promise((resolve, reject) => {
    const out: ConsumeMessage[] = [];
    let done = false;
    const timer = setTimeout(() => reject(new Error(`no marker ${marker} in ${queue} after ${out.map((m) => m.content.toString()).join(', ')}`)), timeoutMs);
    ch.consume(queue, (m) => {
      if (m === null || done) return;
      ch.ack(m);
      if (m.content.toString() !== marker) {
        out.push(m);
        return;
      }
      done = true;
      clearTimeout(timer);
      void ch.cancel(m.fields.consumerTag).then(() => resolve(out), reject);
    }).catch(reject);
  });
}
