/**
 * The AMQP 0-9-1 load generator of `npm run bench -- amqp`: the same code, with amqplib (a real client, as
 * applications use it), against FlowMQ and against a private RabbitMQ node (rabbitmq.ts).
 *
 * One queue, declared by the generator; publishers on the default exchange with the queue's name as routing key,
 * each on a connection of its own; consumers on connections of their own in a worker thread (amqp-consumer.ts), as
 * a consuming application would be another process: on two cores one event loop publishing and consuming was
 * itself the bottleneck. Two shapes:
 *
 * - persistent: delivery mode 2 into a durable queue, publisher confirms with at most `window` unconfirmed
 *   publishes per publisher; consumers with manual acks (one basic.ack per message) and basic.qos prefetch `prefetch`
 *   per consumer → confirms/s, deliveries/s, and confirm latency (publish call → its basic.ack arriving) p50/p99;
 * - transient: delivery mode 1, no confirms (the publisher waits only for its socket to drain), consumers with
 *   no-ack (auto-ack) → publishes/s and deliveries/s.
 *
 * Every message carries its publish instant (nowS, the same clock in every thread) in its first 8 bytes, so the
 * consumers also measure publish → delivery latency. Publishers stay at most `ahead` messages ahead of what the
 * consumers have received (0: no bound), so the figure is how fast a broker moves messages through a queue, not
 * how large a backlog it can build in the run's seconds (a backlog would also be paged to disk by RabbitMQ and kept
 * out of memory by FlowMQ, which then measures that instead).
 */
import amqp from 'amqplib';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { HOST, nowS, percentiles, sleep, type Percentiles } from './util.js';
import type { AmqpFlooderData } from './amqp-flooder.js';

export interface AmqpLoadOptions {
  port: number;
  queue: string;
  /** Queue declared durable (survives a restart) or not. */
  durableQueue: boolean;
  /** Delivery mode 2 (persistent) or 1 (transient). */
  persistent: boolean;
  /** Publisher confirms (confirm.select) with at most `window` unconfirmed publishes per publisher. */
  confirms: boolean;
  window: number;
  publishers: number;
  consumers: number;
  /** basic.qos prefetch count per consumer (manual acks only). */
  prefetch: number;
  /** Consume with no-ack (auto-ack) instead of one basic.ack per delivery. */
  autoAck: boolean;
  /** Most messages published and not yet delivered to a consumer (0: no bound). */
  ahead: number;
  payloadBytes: number;
  warmupS: number;
  seconds: number;
  /** The broker's process, whose CPU time over the window is reported (null: not reported). */
  brokerPid: number | null;
}

export interface AmqpLoadResult {
  /** Publishes per second in the measured window: confirmed ones with confirms, written ones without. */
  publishPerSec: number;
  /** Deliveries per second at the consumers in the measured window. */
  consumePerSec: number;
  /** Publish → basic.ack p50/p99 (ms), of the publishes made in the window; null without confirms. */
  confirm: Percentiles | null;
  /** Publish → delivery at a consumer (ms), of the deliveries in the window. */
  endToEnd: Percentiles;
  published: number;
  confirmed: number;
  nacked: number;
  consumed: number;
  /** Published but not yet delivered when the window ended. */
  backlogAtEnd: number;
  /** Published (and not nacked) but never delivered, after up to 15 s of draining once publishing stopped (expected: 0; negative: more deliveries than publishes). */
  undelivered: number;
  /** Share of the window the publishers spent held back by `ahead` (0..1). */
  heldByAhead: number;
  /** Deliveries flagged redelivered (none are expected). */
  redelivered: number;
  /**
   * CPU used over the window, in cores (1 = one core busy the whole window): the broker's process (null when not
   * known) and this generator (publishers and the consumer thread). On a shared machine these say who had the cores.
   */
  cpu: { broker: number | null; generator: number };
  errors: string[];
}

let clockTicks: number | null = null;

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat; null if it cannot be read. */
function processCpuSeconds(pid: number): number | null {
  try {
    clockTicks ??= Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Fields 14 and 15 of proc(5) (utime, stime) are the 12th and 13th after the command.
    return (Number(f[11]) + Number(f[12])) / clockTicks;
  } catch {
    return null;
  }
}

const ownCpuSeconds = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

/** What the consumer worker (amqp-consumer.ts) is given, told at the end, and answers. */
export interface AmqpConsumerData {
  port: number;
  queue: string;
  consumers: number;
  prefetch: number;
  autoAck: boolean;
  /** Int32 slot 0: deliveries so far (Atomics), read by the publishers for `ahead`. */
  counter: SharedArrayBuffer;
  windowStart: number;
  windowEnd: number;
}
export interface AmqpConsumerResult {
  consumed: number;
  consumedInWindow: number;
  redelivered: number;
  endToEnd: Percentiles;
  errors: string[];
}

const connectOptions = (port: number) => ({ hostname: HOST, port, username: 'guest', password: 'guest', heartbeat: 0 });

/** The consumer side, run in the worker: resolves with its figures once `stopped` resolves. */
export async function consumeQueue(d: AmqpConsumerData, ready: () => void, stopped: Promise<void>): Promise<AmqpConsumerResult> {
  const count = new Int32Array(d.counter);
  const errors: string[] = [];
  const conns: amqp.ChannelModel[] = [];
  let consumed = 0;
  let consumedInWindow = 0;
  let redelivered = 0;
  const latencies: number[] = [];
  try {
    for (let i = 0; i < d.consumers; i++) {
      const c = await amqp.connect(connectOptions(d.port));
      conns.push(c);
      c.on('error', (e: Error) => errors.push(`consumer connection: ${e.message}`));
      const ch = await c.createChannel();
      ch.on('error', (e: Error) => errors.push(`consumer channel: ${e.message}`));
      if (!d.autoAck) await ch.prefetch(d.prefetch, false);
      await ch.consume(
        d.queue,
        (msg) => {
          if (msg === null) {
            errors.push('consumer cancelled by the broker');
            return;
          }
          const at = nowS();
          consumed++;
          Atomics.add(count, 0, 1);
          if (msg.fields.redelivered) redelivered++;
          if (at >= d.windowStart && at < d.windowEnd) {
            consumedInWindow++;
            if (msg.content.length >= 8) latencies.push((at - msg.content.readDoubleLE(0)) * 1000);
          }
          if (!d.autoAck) ch.ack(msg);
        },
        { noAck: d.autoAck },
      );
    }
    ready();
    await stopped;
  } finally {
    for (const c of conns) await c.close().catch(() => undefined);
  }
  return { consumed, consumedInWindow, redelivered, endToEnd: percentiles(latencies), errors };
}

interface Publisher {
  conn: amqp.ChannelModel;
  ch: amqp.Channel | amqp.ConfirmChannel;
  unconfirmed: number;
  blocked: boolean;
}

/**
 * Declares the queue (fresh broker: it is new), starts the consumers, then publishes for `warmupS` + `seconds` and
 * reports the measured window. The queue is deleted at the end.
 */
export async function runAmqpLoad(o: AmqpLoadOptions): Promise<AmqpLoadResult> {
  const errors: string[] = [];
  const admin = await amqp.connect(connectOptions(o.port));
  admin.on('error', (e: Error) => errors.push(`admin connection: ${e.message}`));
  const adminCh = await admin.createChannel();
  await adminCh.assertQueue(o.queue, { durable: o.durableQueue, autoDelete: false, exclusive: false });

  const counter = new SharedArrayBuffer(4);
  const delivered = new Int32Array(counter);
  const t0 = nowS();
  // The window is fixed up front (the worker needs it); start-up of the consumers and publishers is part of the warm-up.
  const windowStart = t0 + o.warmupS;
  const windowEnd = windowStart + o.seconds;
  const inWindow = (t: number) => t >= windowStart && t < windowEnd;

  const worker = new Worker(new URL('./amqp-consumer.js', import.meta.url), {
    workerData: {
      port: o.port,
      queue: o.queue,
      consumers: o.consumers,
      prefetch: o.prefetch,
      autoAck: o.autoAck,
      counter,
      windowStart,
      windowEnd,
    } satisfies AmqpConsumerData,
  });
  let onReady: () => void = () => undefined;
  const workerReady = new Promise<void>((resolve) => (onReady = resolve));
  const workerDone = new Promise<AmqpConsumerResult>((resolve, reject) => {
    worker.on('message', (m: 'ready' | AmqpConsumerResult) => (m === 'ready' ? onReady() : resolve(m)));
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`consumer worker exited with code ${code}`)));
  });
  void workerDone.catch(() => undefined);

  const pubs: Publisher[] = [];
  let published = 0;
  let publishedInWindow = 0;
  let confirmed = 0;
  let confirmedInWindow = 0;
  let nacked = 0;
  let heldS = 0;
  let heldSince: number | null = null;
  let running = true;
  const confirmMs: number[] = [];
  const template = Buffer.alloc(o.payloadBytes, 0x61);
  const props = { deliveryMode: o.persistent ? 2 : 1, contentType: 'application/octet-stream' };

  let failed: ((e: Error) => void) | null = null;
  const failure = new Promise<never>((_, reject) => (failed = reject));
  void failure.catch(() => undefined);
  const fail = (e: Error) => {
    running = false;
    failed?.(e);
  };

  try {
    const early = await Promise.race([workerReady.then(() => null), workerDone]);
    if (early !== null) throw new Error(early.errors.join('; ') || 'the consumers stopped before they were ready');
    for (let i = 0; i < o.publishers; i++) {
      const conn = await amqp.connect(connectOptions(o.port));
      conn.on('error', (e: Error) => errors.push(`publisher connection: ${e.message}`));
      conn.on('close', () => running && fail(new Error('a publisher connection was closed by the broker')));
      const ch = o.confirms ? await conn.createConfirmChannel() : await conn.createChannel();
      ch.on('error', (e: Error) => errors.push(`publisher channel: ${e.message}`));
      const p: Publisher = { conn, ch, unconfirmed: 0, blocked: false };
      ch.on('drain', () => {
        p.blocked = false;
        pump(p);
      });
      pubs.push(p);
    }

    const aheadTimer = setInterval(() => {
      for (const p of pubs) pump(p);
    }, 1);

    // Publishes what the window, `ahead` and the socket allow; called again by confirms, 'drain' and the 1 ms timer.
    function pump(p: Publisher): void {
      let n = 0;
      while (running && !p.blocked && n < 500) {
        if (o.confirms && p.unconfirmed >= o.window) return;
        if (o.ahead > 0 && published - Atomics.load(delivered, 0) >= o.ahead) {
          heldSince ??= nowS();
          return;
        }
        if (heldSince !== null) {
          const now = nowS();
          heldS += Math.max(0, Math.min(now, windowEnd) - Math.max(heldSince, windowStart));
          heldSince = null;
        }
        const body = Buffer.from(template);
        const at = nowS();
        if (o.payloadBytes >= 8) body.writeDoubleLE(at, 0);
        published++;
        const counted = inWindow(at);
        if (counted) publishedInWindow++;
        n++;
        let ok: boolean;
        try {
          if (o.confirms) {
            p.unconfirmed++;
            ok = (p.ch as amqp.ConfirmChannel).publish('', o.queue, body, props, (err) => {
              const done = nowS();
              p.unconfirmed--;
              if (err) nacked++;
              else {
                confirmed++;
                if (inWindow(done)) confirmedInWindow++;
                if (counted) confirmMs.push((done - at) * 1000);
              }
              if (running) pump(p);
            });
          } else ok = p.ch.publish('', o.queue, body, props);
        } catch (e) {
          // amqplib throws on a channel the broker has closed.
          return fail(e as Error);
        }
        if (!ok) p.blocked = true;
      }
      // More to do: let I/O in first.
      if (running && !p.blocked && n >= 500) setImmediate(() => pump(p));
    }

    let cpuAtStart: { broker: number | null; own: number } | null = null;
    const cpuTimer = setTimeout(
      () => {
        cpuAtStart = { broker: o.brokerPid === null ? null : processCpuSeconds(o.brokerPid), own: ownCpuSeconds() };
      },
      Math.max(0, (windowStart - nowS()) * 1000),
    );
    let cpu: AmqpLoadResult['cpu'] = { broker: null, generator: NaN };
    try {
      for (const p of pubs) pump(p);
      await Promise.race([sleep(Math.max(0, (windowEnd - nowS()) * 1000)), failure, workerDone]);
      const start = cpuAtStart as { broker: number | null; own: number } | null;
      if (start !== null) {
        const b = o.brokerPid === null ? null : processCpuSeconds(o.brokerPid);
        cpu = { broker: b === null || start.broker === null ? null : (b - start.broker) / o.seconds, generator: (ownCpuSeconds() - start.own) / o.seconds };
      }
    } finally {
      running = false;
      clearInterval(aheadTimer);
      clearTimeout(cpuTimer);
    }
    if (heldSince !== null) heldS += Math.max(0, windowEnd - Math.max(heldSince, windowStart));
    const backlogAtEnd = published - Atomics.load(delivered, 0);
    // Outstanding confirms of the window's last publishes (they belong to the latency figures).
    const settleBy = Date.now() + 10_000;
    while (o.confirms && Date.now() < settleBy && pubs.some((p) => p.unconfirmed > 0)) await sleep(10);
    // Then let the consumers drain the queue: every publish the broker took must be delivered (none lost).
    const drainBy = Date.now() + 15_000;
    while (Date.now() < drainBy && Atomics.load(delivered, 0) < published - nacked && errors.length === 0) await sleep(10);
    worker.postMessage('stop');
    const got = await workerDone;
    errors.push(...got.errors);
    if (nacked > 0) errors.push(`${nacked} publishes nacked`);
    const confirm = o.confirms ? percentiles(confirmMs) : null;
    return {
      publishPerSec: (o.confirms ? confirmedInWindow : publishedInWindow) / o.seconds,
      consumePerSec: got.consumedInWindow / o.seconds,
      confirm,
      endToEnd: got.endToEnd,
      published,
      confirmed,
      nacked,
      consumed: got.consumed,
      backlogAtEnd,
      undelivered: published - nacked - got.consumed,
      heldByAhead: heldS / o.seconds,
      redelivered: got.redelivered,
      cpu,
      errors,
    };
  } finally {
    running = false;
    for (const p of pubs) await p.conn.close().catch(() => undefined);
    await worker.terminate().catch(() => undefined);
    await adminCh.deleteQueue(o.queue).catch(() => undefined);
    await admin.close().catch(() => undefined);
  }
}

// ------------------------------------------------------------------ fairness

export interface AmqpFairnessOptions {
  port: number;
  payloadBytes: number;
  /** Unconfirmed publishes the measured client allows itself. */
  window: number;
  /** Seconds the measured client publishes alone, then with the flooder (after `warmupS` of flooding). */
  aloneS: number;
  warmupS: number;
  floodS: number;
  /** The flooder's messages: persistent, or transient (stored all the same once the queue's window is full). */
  floodPersistent: boolean;
}

export interface AmqpFairnessResult {
  /** Publish → basic.ack of the measured client (ms): alone, and while the flooder publishes. */
  alone: Percentiles;
  flooded: Percentiles;
  /** Its confirmed publishes per second in each phase. */
  alonePerSec: number;
  floodedPerSec: number;
  /** The flooder's publishes per second (written to its socket) while measured. */
  floodPerSec: number;
  errors: string[];
}

/**
 * Fairness between publishers (issue 24): a client publishing persistent messages with confirms (at most `window`
 * unconfirmed) to a durable queue, measured alone, then while another connection floods another durable queue with
 * persistent messages without confirms (amqp-flooder.ts, in a worker thread). A broker that lets the flooder fill
 * the store's queue makes every confirm of the other client wait behind it.
 */
export async function runAmqpFairness(o: AmqpFairnessOptions): Promise<AmqpFairnessResult> {
  const errors: string[] = [];
  const conn = await amqp.connect(connectOptions(o.port));
  conn.on('error', (e: Error) => errors.push(`measured connection: ${e.message}`));
  const ch = await conn.createConfirmChannel();
  ch.on('error', (e: Error) => errors.push(`measured channel: ${e.message}`));
  await ch.assertQueue('bench-fair', { durable: true });
  const worker = new Worker(new URL('./amqp-flooder.js', import.meta.url), {
    workerData: { port: o.port, queue: 'bench-flood', payloadBytes: o.payloadBytes, persistent: o.floodPersistent } satisfies AmqpFlooderData,
  });
  const ready = new Promise<void>((resolve, reject) => {
    worker.once('message', () => resolve());
    worker.once('error', reject);
  });
  const template = Buffer.alloc(o.payloadBytes, 0x61);
  const props = { deliveryMode: 2, contentType: 'application/octet-stream' };
  let samples: number[] = [];
  let running = true;
  let unconfirmed = 0;
  let confirmed = 0;
  const pump = (): void => {
    while (running && unconfirmed < o.window) {
      const at = nowS();
      unconfirmed++;
      ch.publish('', 'bench-fair', Buffer.from(template), props, (err) => {
        unconfirmed--;
        if (err) errors.push('measured publish nacked');
        else {
          samples.push((nowS() - at) * 1000);
          confirmed++;
        }
        pump();
      });
    }
  };
  try {
    await ready;
    pump();
    await sleep(o.aloneS * 1000);
    const alone = percentiles(samples);
    const aloneCount = confirmed;
    worker.postMessage('start');
    await sleep(o.warmupS * 1000);
    samples = [];
    const confirmedAtStart = confirmed;
    const t0 = nowS();
    const floodDone = new Promise<{ published: number; errors: string[] }>((resolve) => worker.once('message', resolve));
    // The flooder's count over the measured window: asked for at its end (it stops then).
    await sleep(o.floodS * 1000);
    const flooded = percentiles(samples);
    const floodedCount = confirmed - confirmedAtStart;
    const elapsed = nowS() - t0;
    worker.postMessage('stop');
    running = false;
    const f = await floodDone;
    errors.push(...f.errors);
    return {
      alone,
      flooded,
      alonePerSec: aloneCount / o.aloneS,
      floodedPerSec: floodedCount / elapsed,
      floodPerSec: f.published / (o.warmupS + elapsed),
      errors,
    };
  } finally {
    running = false;
    await worker.terminate().catch(() => undefined);
    await ch.deleteQueue('bench-fair').catch(() => undefined);
    await ch.deleteQueue('bench-flood').catch(() => undefined);
    await conn.close().catch(() => undefined);
  }
}
