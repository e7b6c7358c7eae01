/**
 * The AMQP and JetStream loads of the kill -9 test (bench/reliability/crash.ts): each keeps a few publishes in
 * flight through every restart, records what the broker acknowledged, and reads back afterwards what was stored.
 * - AMQP: amqplib, a confirm channel, persistent messages into a durable queue on the default exchange; a message
 *   counts as acknowledged when its `basic.ack` arrives. Read back by consuming the queue up to a marker message
 *   published (and confirmed) after the load stopped.
 * - JetStream: the `@nats-io` client's `js.publish` to a subject a FlowMQ stream captures; a message counts as
 *   acknowledged when its PubAck arrives. Read back from the stream by the caller (kcat, as the other streams).
 * The chaos runner (bench/reliability/chaos.ts) gives each a list of brokers: after a failure it reconnects to the
 * next one, and `onSend` tells it when each message number is sent (its fault window).
 */
import amqplib from 'amqplib';
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { sleep } from '../../test/e2e/harness.js';

/**
 * Waits for `p` or `ms`, whichever comes first, and clears the timer: a 30 s timer left behind by a drain kept the
 * crash test's process alive ~28 s after it had finished.
 */
async function settledWithin(p: Promise<unknown>, ms: number): Promise<void> {
  let t: NodeJS.Timeout | undefined;
  try {
    await Promise.race([p, new Promise<void>((r) => (t = setTimeout(r, ms)))]);
  } finally {
    clearTimeout(t);
  }
}

/** `p`, or a rejection after `ms` (a broker paused or cut off never answers; the load moves to another). */
async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error(`no ${what} in ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(t);
  }
}

export const AMQP_QUEUE = 'crash.amqp';
/** The FlowMQ stream the JetStream publishes go into (bound to `crash/js/#`, NATS subject `crash.js.>`). */
export const JS_STREAM = 'crash.js';
export const JS_SUBJECT = 'crash.js.p';
const MARKER = 'amqp:marker';

/** Options of the AMQP and JetStream loads. */
export interface LoadOptions {
  /** The durable queue (AMQP) or the subject (JetStream); default AMQP_QUEUE / JS_SUBJECT. */
  name?: string;
  /** Called as each message number is sent. */
  onSend?: (n: number) => void;
}

/** Something that publishes through restarts and records what was acknowledged. */
export interface CrashLoad {
  readonly acked: Set<number>;
  /** Publishes that failed (connection lost before the acknowledgement): not acknowledged, not counted. */
  failures: number;
  drain(timeoutMs: number): Promise<void>;
}

/** Persistent AMQP publishes with confirms, `window` unconfirmed at most, reconnecting after each failure. */
export class AmqpConfirmLoad implements CrashLoad {
  readonly acked = new Set<number>();
  failures = 0;
  private next = 0;
  private running = true;
  private conn: amqplib.ChannelModel | null = null;
  private readonly loop: Promise<void>;
  private readonly urls: string[];
  /** Index in `urls` of the broker used now (the next one after a failure). */
  private at = 0;
  private readonly queue: string;
  constructor(
    url: string | string[],
    private readonly window = 20,
    private readonly opts: LoadOptions = {},
  ) {
    this.urls = typeof url === 'string' ? [url] : url;
    this.queue = opts.name ?? AMQP_QUEUE;
    this.loop = this.run();
  }

  private async channel(): Promise<amqplib.ConfirmChannel> {
    const conn = await amqplib.connect(this.urls[this.at % this.urls.length], { timeout: 3000 });
    conn.on('error', () => undefined);
    this.conn = conn;
    const ch = await conn.createConfirmChannel();
    ch.on('error', () => undefined);
    await ch.assertQueue(this.queue, { durable: true });
    return ch;
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        const ch = await withTimeout(this.channel(), 10_000, 'channel');
        while (this.running) {
          const batch = Array.from({ length: this.window }, () => this.next++);
          await withTimeout(
            Promise.all(
              batch.map(
                (n) =>
                  new Promise<void>((resolve, reject) => {
                    this.opts.onSend?.(n);
                    ch.sendToQueue(this.queue, Buffer.from(`amqp:${n}`), { persistent: true }, (err) => {
                      if (err) return reject(err instanceof Error ? err : new Error(String(err)));
                      this.acked.add(n);
                      resolve();
                    });
                  }),
              ),
            ),
            15_000,
            'confirms',
          );
        }
      } catch {
        this.failures++;
        this.at++;
        await this.close();
        await sleep(100);
      }
    }
  }

  private async close(): Promise<void> {
    const c = this.conn;
    this.conn = null;
    await c?.close().catch(() => undefined);
  }

  async drain(timeoutMs: number): Promise<void> {
    this.running = false;
    await settledWithin(this.loop, timeoutMs);
    await this.close();
  }

  /**
   * Consumes the queue up to a marker published (and confirmed) now, acknowledging as it goes, and counts each
   * message number seen. Every message published before the marker is ahead of it in the queue.
   */
  async readBack(timeoutMs: number): Promise<Map<number, number>> {
    const counts = new Map<number, number>();
    const conn = await amqplib.connect(this.urls[this.at % this.urls.length], { timeout: 3000 });
    try {
      const ch = await conn.createConfirmChannel();
      await ch.assertQueue(this.queue, { durable: true });
      await new Promise<void>((resolve, reject) =>
        ch.sendToQueue(this.queue, Buffer.from(MARKER), { persistent: true }, (err) => (err ? reject(new Error(String(err))) : resolve())),
      );
      await ch.prefetch(500);
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`the AMQP marker did not arrive within ${timeoutMs} ms`)), timeoutMs);
        void ch.consume(this.queue, (msg) => {
          if (!msg) return;
          ch.ack(msg);
          const body = msg.content.toString();
          if (body === MARKER) {
            clearTimeout(timer);
            resolve();
            return;
          }
          const n = Number(body.split(':')[1]);
          counts.set(n, (counts.get(n) ?? 0) + 1);
        });
      });
    } finally {
      await conn.close().catch(() => undefined);
    }
    return counts;
  }
}

/** JetStream publishes (each awaited for its PubAck, `window` in flight), over a connection that reconnects. */
export class JetStreamLoad implements CrashLoad {
  readonly acked = new Set<number>();
  failures = 0;
  private next = 0;
  private running = true;
  private nc: NatsConnection | null = null;
  private readonly loop: Promise<void>;
  /** Loopback ports or `host:port`s. */
  private readonly ports: Array<number | string>;
  /** Index in `ports` of the broker used now (the next one after a failure). */
  private at = 0;
  constructor(
    port: number | Array<number | string>,
    private readonly window = 10,
    private readonly opts: LoadOptions = {},
  ) {
    this.ports = typeof port === 'number' ? [port] : port;
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        if (!this.nc || this.nc.isClosed()) {
          const a = this.ports[this.at % this.ports.length]!;
          this.nc = await natsConnect({ servers: typeof a === 'number' ? `127.0.0.1:${a}` : a, reconnect: false, timeout: 3000 });
        }
        const js = jetstream(this.nc, { timeout: 5000 });
        const batch = Array.from({ length: this.window }, () => this.next++);
        const subject = this.opts.name ?? JS_SUBJECT;
        const results = await Promise.allSettled(
          batch.map((n) => {
            this.opts.onSend?.(n);
            return js.publish(subject, `js:${n}`);
          }),
        );
        results.forEach((r, i) => {
          if (r.status === 'fulfilled') this.acked.add(batch[i]);
          else this.failures++;
        });
        if (results.some((r) => r.status === 'rejected')) throw new Error('publish failed');
      } catch {
        this.at++;
        const nc = this.nc;
        this.nc = null;
        await nc?.close().catch(() => undefined);
        await sleep(100);
      }
    }
  }

  async drain(timeoutMs: number): Promise<void> {
    this.running = false;
    await settledWithin(this.loop, timeoutMs);
    await this.nc?.close().catch(() => undefined);
  }
}
