/**
 * Connection floods and the memory they leave behind (`mqtt-flood-memory`, `kafka-flood-memory`).
 *
 * A flood opens N raw connections, as a hostile or misbehaving fleet would, holds them open, then closes them all:
 * - MQTT: CONNECT (keep-alive 0, so the broker has no reason to close it) and CONNACK, then silence; a share of them
 *   (`halfShare`) then send the first KiB of a PUBLISH that announces 64 KiB and never finish it.
 * - Kafka: ApiVersions v0 and its response, then silence; a share of them then send a size prefix announcing a
 *   large request (`kafkaPrefixBytes`) followed by a few bytes of it.
 * Three floods in a row against the same broker process, with the broker's VmRSS (/proc/<pid>/status) sampled
 * before each, at its peak (polled every 100 ms while the flood is open) and `settleS` seconds after the broker
 * has closed every connection; for FlowMQ also its V8 heap and external memory (`process` in GET /api/v1/broker).
 * Memory a flood leaves that the next flood reuses shows as "after" staying level from flood to flood; a leak shows
 * as "after" (and the peak) growing with every flood.
 */
import { connect, type Socket } from 'node:net';
import { rssKiB } from './brokers.js';
import { connectFrame, mqttString, remainingLength } from './mqtt.js';
import { HOST, mapLimit, sleep } from './util.js';

export interface FloodOptions {
  /** Connections per flood. */
  connections: number;
  /** Floods in a row. */
  floods: number;
  /** Share (0..1) of the connections that then leave a request unfinished. */
  halfShare: number;
  /** Size a Kafka half-request's prefix announces. */
  kafkaPrefixBytes: number;
  /** Seconds waited after the broker has closed every connection before "after" is sampled. */
  settleS: number;
  /** Handshakes in progress at once. */
  concurrency: number;
}

/** The broker's own memory figures (FlowMQ: GET /api/v1/broker → process), bytes. */
export interface ProcessMemory {
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  oldSpaceSize?: number;
  oldSpaceUsed?: number;
  /** FlowMQ's collections after floods (src/control/memory.ts). */
  floodCollector?: { enabled: boolean; collections: number; last: { pauseMs: number } | null };
}

export interface MemorySample {
  rssKiB: number;
  process: ProcessMemory | null;
}

export interface FloodRound {
  opened: number;
  halfOpen: number;
  openSeconds: number;
  closeSeconds: number;
  before: MemorySample;
  /** With every connection of the flood open. */
  open: MemorySample;
  /** Highest VmRSS polled while the flood was opening and open. */
  peakRssKiB: number;
  after: MemorySample;
}

export interface FloodResult {
  protocol: 'mqtt' | 'kafka';
  options: FloodOptions;
  rounds: FloodRound[];
}

// ------------------------------------------------------------------ frames

/** The first KiB of a QoS 0 PUBLISH that announces a 64 KiB body. */
const HALF_PUBLISH = (() => {
  const topic = mqttString('flood/half');
  const head = Buffer.concat([Buffer.from([0x30]), remainingLength(64 * 1024), topic]);
  return Buffer.concat([head, Buffer.alloc(1024 - head.length, 0x61)]);
})();

/** Kafka ApiVersions v0 request (header v1: api key, version, correlation id, client id). */
function apiVersionsFrame(): Buffer {
  const clientId = Buffer.from('flood');
  const b = Buffer.alloc(4 + 2 + 2 + 4 + 2 + clientId.length);
  b.writeInt32BE(b.length - 4, 0);
  b.writeInt16BE(18, 4);
  b.writeInt16BE(0, 6);
  b.writeInt32BE(1, 8);
  b.writeInt16BE(clientId.length, 12);
  clientId.copy(b, 14);
  return b;
}

/** A size prefix announcing `size` bytes, followed by the first 12 bytes of a Produce v3 header. */
function kafkaHalfRequest(size: number): Buffer {
  const b = Buffer.alloc(4 + 12);
  b.writeInt32BE(size, 0);
  b.writeInt16BE(0, 4); // Produce
  b.writeInt16BE(3, 6);
  b.writeInt32BE(2, 8);
  b.writeInt16BE(-1, 12);
  return b;
}

// ------------------------------------------------------------------ connections

/**
 * Opens one connection, writes `hello` and resolves once `answered(bytes so far)` says the broker's answer is
 * complete; the socket is then left open and silent.
 */
function handshake(port: number, hello: Buffer, answered: (got: Buffer) => boolean | string, timeoutMs = 30_000): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: HOST, noDelay: true });
    let got = Buffer.alloc(0);
    const fail = (e: Error) => {
      clearTimeout(timer);
      s.destroy();
      reject(e);
    };
    const timer = setTimeout(() => fail(new Error('handshake timed out')), timeoutMs);
    s.once('connect', () => s.write(hello));
    s.on('error', (e) => fail(e));
    s.once('close', () => fail(new Error('closed during the handshake')));
    const onData = (d: Buffer) => {
      got = Buffer.concat([got, d]);
      const r = answered(got);
      if (r === false) return;
      clearTimeout(timer);
      s.removeListener('data', onData);
      s.removeAllListeners('close');
      if (typeof r === 'string') {
        s.destroy();
        reject(new Error(r));
        return;
      }
      // From here on the flood only ever closes it; whatever the broker sends is read and dropped.
      s.removeAllListeners('error');
      s.on('error', () => undefined);
      s.on('data', () => undefined);
      resolve(s);
    };
    s.on('data', onData);
  });
}

const connackOk = (b: Buffer): boolean | string => (b.length < 4 ? false : b[0] >> 4 === 2 && b[3] === 0 ? true : `CONNACK ${b.toString('hex')}`);
const kafkaAnswered = (b: Buffer): boolean => b.length >= 4 && b.length >= 4 + b.readInt32BE(0);

async function openFlood(protocol: 'mqtt' | 'kafka', port: number, o: FloodOptions, round: number): Promise<{ sockets: Socket[]; half: number }> {
  const tag = `${process.pid}-${round}-${Date.now().toString(36)}`;
  const sockets: Socket[] = [];
  const everyHalf = o.halfShare > 0 ? Math.max(1, Math.round(1 / o.halfShare)) : 0;
  let half = 0;
  const api = apiVersionsFrame();
  const prefix = kafkaHalfRequest(o.kafkaPrefixBytes);
  try {
    await mapLimit(o.connections, o.concurrency, async (i) => {
      const s = protocol === 'mqtt' ? await handshake(port, connectFrame(`flood-${tag}-${i}`, 0), connackOk) : await handshake(port, api, kafkaAnswered);
      sockets.push(s);
      if (everyHalf > 0 && i % everyHalf === 0) {
        s.write(protocol === 'mqtt' ? HALF_PUBLISH : prefix);
        half++;
      }
    });
  } catch (e) {
    await closeSockets(sockets);
    throw e;
  }
  return { sockets, half };
}

/** Destroys every socket and resolves once all have closed. */
function closeSockets(sockets: Socket[]): Promise<void> {
  return Promise.all(
    sockets.map(
      (s) =>
        new Promise<void>((resolve) => {
          if (s.closed) return resolve();
          s.once('close', () => resolve());
          s.destroy();
        }),
    ),
  ).then(() => undefined);
}

// ------------------------------------------------------------------ measuring

export interface FloodTarget {
  pid: number;
  port: number;
  /** The broker's own figures, when it reports them (FlowMQ). */
  memory?: () => Promise<ProcessMemory>;
  /** Open connections as the broker counts them, when it reports them (FlowMQ); else the flood trusts its sockets. */
  connections?: () => Promise<number>;
}

async function sample(t: FloodTarget): Promise<MemorySample> {
  return { rssKiB: rssKiB(t.pid), process: t.memory ? await t.memory() : null };
}

/** Runs `o.floods` floods of `protocol` connections against one broker process. */
export async function runFloods(protocol: 'mqtt' | 'kafka', t: FloodTarget, o: FloodOptions): Promise<FloodResult> {
  const rounds: FloodRound[] = [];
  await sleep(1000);
  for (let r = 0; r < o.floods; r++) {
    const before = await sample(t);
    let peak = before.rssKiB;
    const poll = setInterval(() => {
      try {
        peak = Math.max(peak, rssKiB(t.pid));
      } catch {
        // the broker is gone: the flood itself fails next
      }
    }, 100);
    let open: MemorySample;
    let closeSeconds: number;
    let opened: { sockets: Socket[]; half: number };
    const t0 = Date.now();
    try {
      opened = await openFlood(protocol, t.port, o, r);
      const openSeconds = (Date.now() - t0) / 1000;
      // Let the half requests reach the broker before the peak is taken.
      await sleep(1000);
      open = await sample(t);
      peak = Math.max(peak, open.rssKiB);
      const t1 = Date.now();
      await closeSockets(opened.sockets);
      if (t.connections) {
        const deadline = Date.now() + 60_000;
        while ((await t.connections()) > 0) {
          if (Date.now() > deadline) throw new Error('the broker still counts open connections 60 s after the flood closed');
          await sleep(100);
        }
      }
      closeSeconds = (Date.now() - t1) / 1000;
      clearInterval(poll);
      await sleep(o.settleS * 1000);
      rounds.push({ opened: opened.sockets.length, halfOpen: opened.half, openSeconds, closeSeconds, before, open, peakRssKiB: peak, after: await sample(t) });
    } finally {
      clearInterval(poll);
    }
  }
  return { protocol, options: o, rounds };
}

/** "before → peak → after" VmRSS of every flood, in MiB. */
export function floodCell(r: FloodResult): string {
  const mib = (k: number) => (k / 1024).toFixed(0);
  const rounds = r.rounds.map((x) => `${mib(x.before.rssKiB)} → ${mib(x.peakRssKiB)} → ${mib(x.after.rssKiB)}`).join('; ');
  const first = r.rounds[0];
  const last = r.rounds[r.rounds.length - 1];
  const held = (last.after.rssKiB - first.before.rssKiB) / 1024;
  const growth = (last.after.rssKiB - first.after.rssKiB) / 1024;
  return `RSS MiB ${rounds} (held after the last: ${signed(held)} MiB; after flood ${r.rounds.length} vs flood 1: ${signed(growth)} MiB)`;
}

/**
 * The V8 heap and Buffer memory of every flood, in MiB (FlowMQ). Buffers are `arrayBuffers`, not V8's `external`:
 * the latter was seen to keep counting a flood's freed 16 MiB frames (gigabytes) long after they were gone.
 */
export function heapCell(r: FloodResult): string {
  const mib = (b: number | undefined) => (b === undefined ? '?' : (b / 1048576).toFixed(1));
  const fc = r.rounds[r.rounds.length - 1].after.process?.floodCollector;
  const collections = fc
    ? `; ${fc.enabled ? `${fc.collections} collections after floods${fc.last ? `, last pause ${fc.last.pauseMs.toFixed(0)} ms` : ''}` : 'no collections after floods (node without --expose-gc)'}`
    : '';
  return (
    r.rounds
      .map((x) =>
        x.before.process && x.open.process && x.after.process
          ? `heap used ${mib(x.before.process.heapUsed)} → ${mib(x.open.process.heapUsed)} → ${mib(x.after.process.heapUsed)}, buffers ${mib(x.before.process.arrayBuffers)} → ${mib(x.open.process.arrayBuffers)} → ${mib(x.after.process.arrayBuffers)}`
          : '-',
      )
      .join('; ') + collections
  );
}

function signed(n: number): string {
  return `${n >= 0 ? '+' : '−'}${Math.abs(n).toFixed(0)}`;
}
