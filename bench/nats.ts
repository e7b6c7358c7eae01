/**
 * The NATS load generator of `npm run bench -- nats`: raw sockets, pre-encoded frames, the same bytes against
 * FlowMQ and against a private nats-server (nats-server.ts). It imports nothing from src/protocols: the brokers are
 * black boxes speaking the NATS client protocol.
 *
 * Why raw sockets: the `nats` npm client (2.29) moved ~410,000 16-byte messages/s (~160,000 of 1 KiB) through
 * nats-server from one process publishing and subscribing, a fraction of what nats-server forwards on these cores;
 * measured with it, both brokers would be held by the client. Here a publisher writes blocks of identical
 * `PUB bench.s <n>\r\n<payload>\r\n` frames (~128 KiB per socket write), and subscribers, in a worker thread, count
 * MSG frames with a scanner whose fast path only checks that a frame's control line is byte for byte the one seen
 * before and that its payload ends in CRLF (any other frame goes through the full parser and is counted too).
 *
 * Pub/sub: 1 publisher → N subscribers on `bench.s` (each receiving every message), or → a queue group of N
 * members (each message to one of them). The publisher is kept at most `aheadBytes` of frames ahead of what its
 * slowest subscriber (a queue group: all members together) has received, well under both brokers' 64 MiB
 * pending limit per connection, so neither closes a subscriber as slow and the figure is how fast a broker moves
 * messages, not how much it buffers. A warm-up phase publishes and drains first; then the measured phase
 * publishes for `seconds`, and the figure is deliveries counted at the subscribers divided by the time from its
 * first publish to its last delivery (every delivery of the phase is waited for; those that never come are
 * reported as lost).
 *
 * Request/reply: a responder (in the worker) subscribes to `bench.req` and answers each request with a message of
 * the same size on its reply subject; the requester keeps `inflight` requests outstanding, each on a reply
 * subject of its own (`_INBOX.bench.<slot>`, one `_INBOX.bench.*` subscription), and sends the next on a slot as
 * soon as its reply arrives → round trips per second and round-trip p50/p99 over the measured window.
 */
import { connect, type Socket } from 'node:net';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { HOST, nowS, percentiles, sleep, type Percentiles } from './util.js';

// ------------------------------------------------------------------ frames

/** CONNECT as the official clients send it (nats.js: headers and no_responders on), so a broker takes the same paths. */
export function connectFrame(name: string): Buffer {
  const opts = {
    verbose: false,
    pedantic: false,
    tls_required: false,
    name,
    lang: 'flowmq-bench',
    version: '1',
    protocol: 1,
    echo: true,
    headers: true,
    no_responders: true,
  };
  return Buffer.from(`CONNECT ${JSON.stringify(opts)}\r\n`);
}

export const subFrame = (subject: string, sid: number, queue?: string): Buffer => Buffer.from(`SUB ${subject}${queue ? ` ${queue}` : ''} ${sid}\r\n`);

export function pubFrame(subject: string, payload: Buffer, reply?: string): Buffer {
  return Buffer.concat([Buffer.from(`PUB ${subject}${reply ? ` ${reply}` : ''} ${payload.length}\r\n`), payload, CRLF]);
}

const CRLF = Buffer.from('\r\n');
const PING = Buffer.from('PING\r\n');
const PONG = Buffer.from('PONG\r\n');

/** `copies` copies of `frame` back to back, for one large socket write. */
export function block(frame: Buffer, copies: number): Buffer {
  const out = Buffer.allocUnsafe(frame.length * copies);
  for (let i = 0; i < copies; i++) frame.copy(out, i * frame.length);
  return out;
}

// ------------------------------------------------------------------ reading

const MAX_LINE = 64 * 1024;

/**
 * What a NATS client reads, in the shape the bench needs: `count` counts MSG/HMSG frames; `onMsg`, when set, is
 * also given each one (subject, reply subject and payload bounds; the buffer is only valid during the call).
 * PING is answered with PONG; -ERR is recorded; INFO, +OK and PONG are skipped. With `fast` on, a MSG frame whose
 * control line is the same bytes as the first MSG seen is counted without parsing it.
 */
export class NatsReader {
  count = 0;
  pongs = 0;
  errors: string[] = [];
  onMsg: ((subject: string, reply: string | null, buf: Buffer, start: number, end: number) => void) | null = null;
  onPong: (() => void) | null = null;
  /** Called after each pushed chunk has been consumed. */
  afterChunk: (() => void) | null = null;
  private tail: Buffer | null = null;
  private line: Buffer | null = null;
  private frameLen = 0;

  constructor(
    private readonly socket: Socket,
    private readonly fast: boolean,
  ) {}

  push(chunk: Buffer): void {
    let buf = chunk;
    if (this.tail) {
      buf = Buffer.concat([this.tail, chunk]);
      this.tail = null;
    }
    const n = buf.length;
    let pos = 0;
    let line = this.line;
    let lineLen = line ? line.length : 0;
    let frameLen = this.frameLen;
    while (pos < n) {
      if (line !== null && n - pos >= frameLen && buf[pos] === 0x4d) {
        // Compare from the end: the size and the sid differ first when the frame is another one.
        let j = lineLen - 1;
        while (j >= 0 && buf[pos + j] === line[j]) j--;
        if (j < 0 && buf[pos + frameLen - 2] === 13 && buf[pos + frameLen - 1] === 10) {
          this.count++;
          pos += frameLen;
          continue;
        }
      }
      const nl = buf.indexOf(10, pos);
      if (nl < 0) {
        if (n - pos > MAX_LINE) throw new Error('control line from the broker longer than 64 KiB');
        break;
      }
      const used = this.op(buf, pos, nl);
      if (used < 0) break; // payload not all here yet
      pos = used;
      if (line === null && this.line !== null) {
        // The first MSG: the rest of this chunk may already take the fast path.
        line = this.line;
        lineLen = line.length;
        frameLen = this.frameLen;
      }
    }
    if (pos < n) this.tail = Buffer.from(buf.subarray(pos));
    this.afterChunk?.();
  }

  /** One operation whose control line ends at `nl`; returns the position after it, or -1 when its payload is incomplete. */
  private op(buf: Buffer, pos: number, nl: number): number {
    const end = nl > pos && buf[nl - 1] === 13 ? nl - 1 : nl;
    const text = buf.toString('latin1', pos, end);
    const sp = text.search(/[ \t]/);
    const name = (sp < 0 ? text : text.slice(0, sp)).toUpperCase();
    switch (name) {
      case 'MSG':
      case 'HMSG': {
        const args = text
          .slice(sp + 1)
          .trim()
          .split(/[ \t]+/);
        const total = Number(args[args.length - 1]);
        const withReply = args.length === (name === 'MSG' ? 4 : 5);
        if (!Number.isInteger(total) || total < 0 || args.length < (name === 'MSG' ? 3 : 4))
          throw new Error(`malformed ${name} line from the broker: ${text.slice(0, 80)}`);
        const start = nl + 1;
        if (buf.length < start + total + 2) return -1;
        if (buf[start + total] !== 13 || buf[start + total + 1] !== 10) throw new Error(`${name} payload not followed by CRLF: ${text.slice(0, 80)}`);
        this.count++;
        if (this.fast && this.line === null && name === 'MSG') {
          this.line = Buffer.from(buf.subarray(pos, nl + 1));
          this.frameLen = this.line.length + total + 2;
        }
        this.onMsg?.(args[0], withReply ? args[2] : null, buf, start + (name === 'HMSG' ? Number(args[args.length - 2]) : 0), start + total);
        return start + total + 2;
      }
      case 'PING':
        this.socket.write(PONG);
        return nl + 1;
      case 'PONG':
        this.pongs++;
        this.onPong?.();
        return nl + 1;
      case '-ERR':
        this.errors.push(text);
        return nl + 1;
      case 'INFO':
      case '+OK':
        return nl + 1;
      default:
        throw new Error(`unknown operation from the broker: ${text.slice(0, 80)}`);
    }
  }
}

/** A raw NATS connection: INFO read, CONNECT sent and a PING answered (so the server took the CONNECT). */
export interface NatsConn {
  socket: Socket;
  reader: NatsReader;
  /** Set when the connection closed before `close()` was called. */
  closedEarly: boolean;
  /** Sends PING and resolves at its PONG (every earlier SUB has then been processed). */
  ping(timeoutMs?: number): Promise<void>;
  close(): void;
}

export function natsOpen(port: number, name: string, fast: boolean, timeoutMs = 10_000): Promise<NatsConn> {
  return new Promise((resolve, reject) => {
    const readBuf = Buffer.allocUnsafe(256 * 1024);
    let reader: NatsReader;
    let closing = false;
    let settled = false;
    const pongWaiters: Array<() => void> = [];
    const socket = connect({
      port,
      host: HOST,
      noDelay: true,
      onread: {
        buffer: readBuf,
        callback: (n) => {
          try {
            reader.push(readBuf.subarray(0, n));
          } catch (e) {
            socket.destroy(e as Error);
          }
          return true;
        },
      },
    });
    reader = new NatsReader(socket, fast);
    reader.onPong = () => pongWaiters.shift()?.();
    const conn: NatsConn = {
      socket,
      reader,
      closedEarly: false,
      ping: (ms = 15_000) =>
        new Promise<void>((res, rej) => {
          const t = setTimeout(() => rej(new Error(`${name}: no PONG within ${ms} ms${reader.errors.length ? ` (${reader.errors.join('; ')})` : ''}`)), ms);
          const onClose = () => rej(new Error(`${name}: connection closed${reader.errors.length ? ` (${reader.errors.join('; ')})` : ''}`));
          socket.once('close', onClose);
          pongWaiters.push(() => {
            clearTimeout(t);
            socket.removeListener('close', onClose);
            res();
          });
          socket.write(PING);
        }),
      close: () => {
        closing = true;
        socket.end();
        setTimeout(() => socket.destroy(), 1000).unref();
      },
    };
    const timer = setTimeout(() => fail(new Error(`${name}: connect to ${HOST}:${port} timed out`)), timeoutMs);
    const fail = (e: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      reject(e);
    };
    socket.on('error', (e) => fail(e));
    socket.on('close', () => {
      if (!closing) conn.closedEarly = true;
      fail(new Error(`${name}: connection closed by the broker${reader.errors.length ? ` (${reader.errors.join('; ')})` : ''}`));
    });
    socket.once('connect', () => {
      socket.write(connectFrame(name));
      conn.ping(timeoutMs).then(
        () => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          if (reader.errors.length) return reject(new Error(`${name}: ${reader.errors.join('; ')}`));
          resolve(conn);
        },
        (e: Error) => fail(e),
      );
    });
  });
}

// ------------------------------------------------------------------ CPU

let clockTicks: number | null = null;

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat; null if it cannot be read. */
export function processCpuSeconds(pid: number): number | null {
  try {
    clockTicks ??= Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / clockTicks;
  } catch {
    return null;
  }
}

/**
 * Seconds the process's threads have spent runnable but waiting for a CPU (the second field of each thread's
 * /proc/<pid>/task/<tid>/schedstat, summed); null if it cannot be read. On a machine busy with other work this says
 * how much a broker was held back by the scheduler rather than by its own work.
 */
export function processRunDelaySeconds(pid: number): number | null {
  try {
    let ns = 0;
    for (const t of readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[1]);
      } catch {
        // the thread ended meanwhile
      }
    }
    return ns / 1e9;
  } catch {
    return null;
  }
}

const ownCpuSeconds = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

interface CpuMark {
  t: number;
  broker: number | null;
  brokerWait: number | null;
  own: number;
}
const cpuMark = (pid: number | null): CpuMark => ({
  t: nowS(),
  broker: pid === null ? null : processCpuSeconds(pid),
  brokerWait: pid === null ? null : processRunDelaySeconds(pid),
  own: ownCpuSeconds(),
});

/** CPU over a phase, in cores (1 = one core busy the whole phase). */
export interface CpuUse {
  broker: number | null;
  /** The broker's threads runnable but waiting for a CPU, in cores (summed over threads). */
  brokerWaiting: number | null;
  generator: number;
}

function cpuSince(m: CpuMark, pid: number | null): CpuUse {
  const now = cpuMark(pid);
  const s = now.t - m.t;
  const d = (a: number | null, b: number | null) => (a === null || b === null ? null : (a - b) / s);
  return { broker: d(now.broker, m.broker), brokerWaiting: d(now.brokerWait, m.brokerWait), generator: (now.own - m.own) / s };
}

// ------------------------------------------------------------------ worker

/** What the worker (nats-worker.ts) is given. */
export interface NatsWorkerData {
  port: number;
  role: 'count' | 'respond';
  /** count: one connection per entry, each subscribing to `subject` (in `queue` when set). */
  subscribers: Array<{ subject: string; queue?: string }>;
  /** count: Int32 slot i = MSG frames received so far by subscriber i (Atomics). */
  counts: SharedArrayBuffer;
  /** count: Float64 slot i = nowS() at the last chunk that brought subscriber i a message. */
  lastAt: SharedArrayBuffer;
}
export interface NatsWorkerResult {
  errors: string[];
  /** Connections the broker closed while the run went on. */
  closed: number;
}

/** The worker's side: opens the connections, says ready, and answers with its result once `stopped` resolves. */
export async function workerMain(d: NatsWorkerData, ready: () => void, stopped: Promise<void>): Promise<NatsWorkerResult> {
  const errors: string[] = [];
  const conns: NatsConn[] = [];
  try {
    if (d.role === 'count') {
      const counts = new Int32Array(d.counts);
      const lastAt = new Float64Array(d.lastAt);
      for (let i = 0; i < d.subscribers.length; i++) {
        const c = await natsOpen(d.port, `bench-sub-${i}`, true);
        conns.push(c);
        const r = c.reader;
        let seen = 0;
        // After each chunk: publish the count and the time (the time first: the main thread reads it after the count).
        r.afterChunk = () => {
          if (r.count !== seen) {
            seen = r.count;
            lastAt[i] = nowS();
            Atomics.store(counts, i, seen);
          }
        };
        c.socket.write(subFrame(d.subscribers[i].subject, 1, d.subscribers[i].queue));
        await c.ping();
      }
    } else {
      const c = await natsOpen(d.port, 'bench-responder', false);
      conns.push(c);
      let out: Buffer[] = [];
      let scheduled = false;
      c.reader.onMsg = (_subject, reply, buf, start, end) => {
        if (reply === null) return;
        out.push(Buffer.from(`PUB ${reply} ${end - start}\r\n`), Buffer.from(buf.subarray(start, end)), CRLF);
        if (!scheduled) {
          scheduled = true;
          // One write for everything the chunk brought (the reader calls onMsg synchronously for a whole chunk).
          queueMicrotask(() => {
            scheduled = false;
            const b = out;
            out = [];
            c.socket.write(Buffer.concat(b));
          });
        }
      };
      c.socket.write(subFrame('bench.req', 1));
      await c.ping();
    }
    ready();
    await stopped;
  } catch (e) {
    // Not ready: the result (with this error) goes back at once.
    errors.push((e as Error).message);
  } finally {
    for (const c of conns) {
      if (c.closedEarly)
        errors.push(
          `a ${d.role === 'count' ? 'subscriber' : 'responder'} connection was closed by the broker${c.reader.errors.length ? ` (${c.reader.errors.join('; ')})` : ''}`,
        );
      c.close();
    }
  }
  return { errors, closed: conns.filter((c) => c.closedEarly).length };
}

class WorkerHandle {
  readonly worker: Worker;
  readonly ready: Promise<void>;
  readonly done: Promise<NatsWorkerResult>;

  constructor(data: NatsWorkerData) {
    this.worker = new Worker(new URL('./nats-worker.js', import.meta.url), { workerData: data });
    let onReady: () => void = () => undefined;
    this.ready = new Promise<void>((resolve) => (onReady = resolve));
    this.done = new Promise<NatsWorkerResult>((resolve, reject) => {
      this.worker.on('message', (m: 'ready' | NatsWorkerResult) => (m === 'ready' ? onReady() : resolve(m)));
      this.worker.once('error', reject);
      this.worker.once('exit', (code) => reject(new Error(`NATS bench worker exited with code ${code}`)));
    });
    void this.done.catch(() => undefined);
  }

  private stopped: Promise<NatsWorkerResult> | null = null;

  /** Asks the worker for its result and ends it (once; later calls get the same result). */
  stop(): Promise<NatsWorkerResult> {
    this.stopped ??= (async () => {
      this.worker.postMessage('stop');
      let timer: NodeJS.Timeout | undefined;
      try {
        const late = new Promise<NatsWorkerResult>((resolve) => (timer = setTimeout(() => resolve({ errors: ['the worker did not stop'], closed: 0 }), 5000)));
        return await Promise.race([this.done, late]);
      } catch (e) {
        return { errors: [(e as Error).message], closed: 0 };
      } finally {
        clearTimeout(timer);
        await this.worker.terminate().catch(() => undefined);
      }
    })();
    return this.stopped;
  }
}

// ------------------------------------------------------------------ pub/sub

export interface NatsPubSubOptions {
  port: number;
  payloadBytes: number;
  subscribers: number;
  /** Subscribers form one queue group (each message to one member) instead of each receiving every message. */
  queueGroup: boolean;
  /** Frame bytes the publisher may be ahead of its slowest subscriber (a queue group: of all members together). */
  aheadBytes: number;
  warmupS: number;
  seconds: number;
  /** The broker's process, whose CPU over the measured phase is reported (null: not reported). */
  brokerPid: number | null;
  /** Deliveries still missing after this long without a new one are counted lost (default 10 s). */
  lostAfterMs?: number;
}

export interface NatsPubSubResult {
  /** Deliveries counted at the subscribers / (last delivery − first publish) of the measured phase. */
  deliveriesPerSec: number;
  /** Messages published per second of the measured phase's publishing. */
  publishesPerSec: number;
  /** Payload MB/s delivered (deliveries × payload bytes). */
  payloadMBPerSec: number;
  published: number;
  expected: number;
  delivered: number;
  /** Expected deliveries of the measured phase that never came (`lostAfterMs` without a new delivery). */
  lost: number;
  /** Seconds from the phase's first publish to its last delivery. */
  seconds: number;
  /** Deliveries of the least and the most served subscriber (queue group: how evenly it was shared). */
  perSubscriberMin: number;
  perSubscriberMax: number;
  /** Share of the measured publishing the publisher spent held back by `aheadBytes` (0..1). */
  heldByAhead: number;
  /** CPU in cores over the measured phase: broker process (null: unknown) and this generator (all threads). */
  cpu: CpuUse;
  errors: string[];
}

export async function runNatsPubSub(o: NatsPubSubOptions): Promise<NatsPubSubResult> {
  const counts = new SharedArrayBuffer(4 * o.subscribers);
  const lastAtBuf = new SharedArrayBuffer(8 * o.subscribers);
  const count = new Int32Array(counts);
  const lastAt = new Float64Array(lastAtBuf);
  const subs = Array.from({ length: o.subscribers }, () => ({ subject: 'bench.s', queue: o.queueGroup ? 'bench-q' : undefined }));
  const w = new WorkerHandle({ port: o.port, role: 'count', subscribers: subs, counts, lastAt: lastAtBuf });
  const errors: string[] = [];
  let pub: NatsConn | null = null;
  try {
    const early = await Promise.race([w.ready.then(() => null), w.done]);
    if (early !== null) throw new Error(early.errors.join('; ') || 'the NATS bench worker stopped before it was ready');
    pub = await natsOpen(o.port, 'bench-pub', false);
    const p = pub;
    const frame = pubFrame('bench.s', Buffer.alloc(o.payloadBytes, 0x61));
    const perBlock = Math.max(1, Math.floor((128 * 1024) / frame.length));
    const blk = block(frame, perBlock);
    const aheadMsgs = Math.max(perBlock * 2, Math.floor(o.aheadBytes / frame.length));
    // Deliveries the slowest subscriber has had (queue group: all members together, per message published).
    const received = (): number => {
      if (o.queueGroup) {
        let s = 0;
        for (let i = 0; i < o.subscribers; i++) s += Atomics.load(count, i);
        return s;
      }
      let m = Infinity;
      for (let i = 0; i < o.subscribers; i++) m = Math.min(m, Atomics.load(count, i));
      return m;
    };
    const total = (): number => {
      let s = 0;
      for (let i = 0; i < o.subscribers; i++) s += Atomics.load(count, i);
      return s;
    };
    const perMessage = o.queueGroup ? 1 : o.subscribers;
    let published = 0;

    /** Publishes for `s` seconds; resolves with the first write's time and the held-back seconds. */
    const publishFor = (s: number): Promise<{ t0: number; tEnd: number; held: number }> =>
      new Promise((resolve, reject) => {
        const t0 = nowS();
        const until = t0 + s;
        let held = 0;
        let heldSince: number | null = null;
        const onClose = () =>
          reject(new Error(`the publisher's connection was closed by the broker${p.reader.errors.length ? ` (${p.reader.errors.join('; ')})` : ''}`));
        p.socket.once('close', onClose);
        const finish = () => {
          p.socket.removeListener('close', onClose);
          if (heldSince !== null) held += nowS() - heldSince;
          resolve({ t0, tEnd: nowS(), held });
        };
        const pump = () => {
          for (;;) {
            const now = nowS();
            if (now >= until) return finish();
            if (published - received() > aheadMsgs) {
              heldSince ??= now;
              setTimeout(pump, 0);
              return;
            }
            if (heldSince !== null) {
              held += now - heldSince;
              heldSince = null;
            }
            published += perBlock;
            if (!p.socket.write(blk)) {
              p.socket.once('drain', pump);
              return;
            }
          }
        };
        pump();
      });

    /** Waits until every expected delivery has come, or `lostAfterMs` without a new one; returns whether all came. */
    const drain = async (expected: number): Promise<boolean> => {
      let last = total();
      let since = Date.now();
      while (total() < expected) {
        await sleep(5);
        const t = total();
        if (t !== last) {
          last = t;
          since = Date.now();
        } else if (Date.now() - since > (o.lostAfterMs ?? 10_000)) return false;
      }
      return true;
    };

    // Warm-up: the same traffic, drained, not counted.
    if (o.warmupS > 0) {
      await publishFor(o.warmupS);
      if (!(await drain(published * perMessage))) errors.push('warm-up deliveries missing');
    }
    const base = total();
    const basePublished = published;
    const perSubBase = Array.from(count);
    const mark = cpuMark(o.brokerPid);
    const phase = await publishFor(o.seconds);
    const phasePublished = published - basePublished;
    const expected = phasePublished * perMessage;
    await drain(base + expected);
    const cpu = cpuSince(mark, o.brokerPid);
    await sleep(20); // the worker's last lastAt store lands before its count store; read both after a pause
    const delivered = total() - base;
    let tLast = phase.t0;
    for (let i = 0; i < o.subscribers; i++) if (Atomics.load(count, i) > perSubBase[i]) tLast = Math.max(tLast, lastAt[i]);
    const secs = Math.max(1e-6, tLast - phase.t0);
    const perSub = Array.from(count).map((c, i) => c - perSubBase[i]);
    if (p.reader.errors.length) errors.push(...p.reader.errors.map((e) => `publisher: ${e}`));
    const wr = await w.stop();
    errors.push(...wr.errors);
    return {
      deliveriesPerSec: delivered / secs,
      publishesPerSec: phasePublished / Math.max(1e-6, phase.tEnd - phase.t0),
      payloadMBPerSec: (delivered * o.payloadBytes) / secs / 1e6,
      published: phasePublished,
      expected,
      delivered,
      lost: Math.max(0, expected - delivered),
      seconds: secs,
      perSubscriberMin: Math.min(...perSub),
      perSubscriberMax: Math.max(...perSub),
      heldByAhead: phase.held / Math.max(1e-6, phase.tEnd - phase.t0),
      cpu,
      errors,
    };
  } finally {
    pub?.close();
    await w.stop().catch(() => undefined);
  }
}

// ------------------------------------------------------------------ request/reply

export interface NatsRequestOptions {
  port: number;
  payloadBytes: number;
  /** Requests outstanding at once (each on a reply subject of its own). */
  inflight: number;
  warmupS: number;
  seconds: number;
  brokerPid: number | null;
}

export interface NatsRequestResult {
  /** Replies received per second of the measured window. */
  roundTripsPerSec: number;
  /** Request written → reply read (ms), of the requests sent in the window. */
  rtt: Percentiles;
  completed: number;
  /** Requests still without a reply 5 s after the window (expected: none). */
  unanswered: number;
  cpu: CpuUse;
  errors: string[];
}

export async function runNatsRequest(o: NatsRequestOptions): Promise<NatsRequestResult> {
  const w = new WorkerHandle({ port: o.port, role: 'respond', subscribers: [], counts: new SharedArrayBuffer(4), lastAt: new SharedArrayBuffer(8) });
  const errors: string[] = [];
  let req: NatsConn | null = null;
  try {
    const early = await Promise.race([w.ready.then(() => null), w.done]);
    if (early !== null) throw new Error(early.errors.join('; ') || 'the NATS bench worker stopped before it was ready');
    req = await natsOpen(o.port, 'bench-requester', false);
    const r = req;
    r.socket.write(subFrame('_INBOX.bench.*', 1));
    await r.ping();
    const payload = Buffer.alloc(o.payloadBytes, 0x62);
    const frames = Array.from({ length: o.inflight }, (_, k) => pubFrame('bench.req', payload, `_INBOX.bench.${k}`));
    const sentAt = new Float64Array(o.inflight);
    const t0 = nowS();
    const windowStart = t0 + o.warmupS;
    const windowEnd = windowStart + o.seconds;
    let running = true;
    let outstanding = 0;
    let completed = 0;
    const rtts: number[] = [];
    let out: Buffer[] = [];
    let scheduled = false;
    const flush = () => {
      scheduled = false;
      const b = out;
      out = [];
      if (b.length) r.socket.write(b.length === 1 ? b[0] : Buffer.concat(b));
    };
    const send = (k: number, at: number) => {
      sentAt[k] = at;
      outstanding++;
      out.push(frames[k]);
      if (!scheduled) {
        scheduled = true;
        queueMicrotask(flush);
      }
    };
    r.reader.onMsg = (subject) => {
      const k = Number(subject.slice(subject.lastIndexOf('.') + 1));
      if (!(k >= 0 && k < o.inflight) || sentAt[k] === 0) return;
      const now = nowS();
      outstanding--;
      if (now >= windowStart && now < windowEnd) completed++;
      if (sentAt[k] >= windowStart && sentAt[k] < windowEnd) rtts.push((now - sentAt[k]) * 1000);
      sentAt[k] = 0;
      if (running && now < windowEnd) send(k, now);
    };
    let mark: CpuMark | null = null;
    const cpuTimer = setTimeout(() => (mark = cpuMark(o.brokerPid)), Math.max(0, (windowStart - nowS()) * 1000));
    const now = nowS();
    for (let k = 0; k < o.inflight; k++) send(k, now);
    const onClose = new Promise<void>((resolve) => r.socket.once('close', () => resolve()));
    await Promise.race([sleep((windowEnd - nowS()) * 1000), onClose, w.done]);
    running = false;
    clearTimeout(cpuTimer);
    const m = mark as CpuMark | null;
    const cpu: CpuUse = m ? cpuSince(m, o.brokerPid) : { broker: null, brokerWaiting: null, generator: NaN };
    const settleBy = Date.now() + 5000;
    while (outstanding > 0 && Date.now() < settleBy && !r.closedEarly) await sleep(5);
    if (r.closedEarly) errors.push(`the requester's connection was closed by the broker${r.reader.errors.length ? ` (${r.reader.errors.join('; ')})` : ''}`);
    else if (r.reader.errors.length) errors.push(...r.reader.errors.map((e) => `requester: ${e}`));
    const wr = await w.stop();
    errors.push(...wr.errors);
    return { roundTripsPerSec: completed / o.seconds, rtt: percentiles(rtts), completed, unanswered: outstanding, cpu, errors };
  } finally {
    req?.close();
    await w.stop().catch(() => undefined);
  }
}
