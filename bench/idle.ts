/**
 * Idle connections (`npm run bench -- idle`): the resident memory one more connection that does nothing costs a
 * broker, for each protocol, beside the peer broker of that protocol and beside Node.js's own floor, in one run.
 *
 * What a connection does before it idles, as a device or service client would:
 * - MQTT: CONNECT (3.1.1, keep-alive 600 s; clean session, or clean session 0 for a persistent one), CONNACK, one
 *   SUBSCRIBE at QoS 1 to a filter of its own (`idle/<run>-<i>/cmd`, a device's command topic), SUBACK.
 * - Kafka: ApiVersions v0 and Metadata v1 (no topics) with their responses.
 * - AMQP 0-9-1: protocol header, Start / Start-Ok (PLAIN guest), Tune / Tune-Ok (the server's proposals taken, so
 *   heartbeats stay on: the client answers each heartbeat frame), Open / Open-Ok on `/`, one channel opened.
 * - NATS: INFO, CONNECT (as nats.js sends it), one SUB to a subject of its own, PING / PONG; a PING from the server
 *   is answered.
 *
 * How it is measured: the broker's VmRSS (/proc/<pid>/status) before, once half of the connections are open and
 * once all are, 2 s after the last handshake each time. The figure is the growth per connection over the second
 * half: the first connections also pay one-time costs that are not theirs (V8 growing and first touching its
 * young generation under the burst of handshakes, code being compiled, tables sized for the first thousands), which
 * moved the 0 → N figure of the same broker by up to 2 KiB per connection at 10,000 connections. Both figures are
 * reported; no collection is forced (the brokers run as they do for users: FlowMQ through bin/flowmq's flags).
 *
 * The Node.js floor is a process that accepts MQTT connections and answers CONNECT and SUBSCRIBE with fixed bytes,
 * keeping nothing but the sockets (idle-floor.ts), started with bin/flowmq's V8 flags and a young generation as
 * large as a running FlowMQ's: what the same handshakes cost Node.js itself (net.Socket, its stream state, the
 * libuv handle, the reads and writes), under which no Node.js broker can go.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { ROOT, rssKiB, stopProcess } from './brokers.js';
import { frame as kafkaFrame } from './kafka.js';
import { mqttString, packet, subscribeFrame } from './mqtt.js';
import { connectFrame as natsConnectFrame } from './nats.js';
import { freePort, HOST, mapLimit, nowS, sleep, waitPort } from './util.js';

export type IdleProtocol = 'mqtt' | 'mqtt-persistent' | 'kafka' | 'amqp' | 'nats';

export interface IdleResult {
  connections: number;
  /** VmRSS in KiB: before, with half of the connections open, with all of them. */
  rssKiB: [number, number, number];
  /** Growth per connection over the second half, KiB: the figure. */
  kibPerConnection: number;
  /** Growth per connection from none to all, KiB. */
  kibPerConnectionFromZero: number;
  /** Seconds the handshakes took, both halves. */
  connectSeconds: number;
}

// ------------------------------------------------------------------ handshakes

/** One exchange of a handshake: what to send (given what the previous step received), and when its answer is whole. */
interface Step {
  send: (previous: Buffer) => Buffer | null;
  /** true: complete; false: wait for more; a string: the broker refused (the handshake fails with it). */
  done: (got: Buffer) => boolean | string;
}

/**
 * Connects, runs the steps, and resolves with the socket, left open; from then on whatever the broker sends goes
 * to `keepAlive`, which answers what must be answered (NATS PING, AMQP heartbeats).
 */
function handshake(port: number, steps: Step[], keepAlive: (s: Socket, data: Buffer) => void, timeoutMs = 60_000): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: HOST, noDelay: true });
    let got = Buffer.alloc(0);
    let previous = Buffer.alloc(0);
    let k = 0;
    const fail = (e: Error) => {
      clearTimeout(timer);
      s.destroy();
      reject(e);
    };
    const timer = setTimeout(() => fail(new Error(`handshake step ${k + 1} timed out`)), timeoutMs);
    const next = () => {
      const out = steps[k].send(previous);
      if (out !== null) s.write(out);
    };
    s.once('connect', next);
    s.on('error', fail);
    s.once('close', () => fail(new Error(`closed by the broker during handshake step ${k + 1}`)));
    const onData = (d: Buffer) => {
      got = Buffer.concat([got, d]);
      const r = steps[k].done(got);
      if (r === false) return;
      if (typeof r === 'string') return fail(new Error(r));
      previous = got;
      got = Buffer.alloc(0);
      if (++k < steps.length) return next();
      clearTimeout(timer);
      s.removeListener('data', onData);
      s.removeAllListeners('close');
      s.removeAllListeners('error');
      s.on('error', () => undefined);
      s.on('data', (b: Buffer) => keepAlive(s, b));
      resolve(s);
    };
    s.on('data', onData);
  });
}

const nothing = () => undefined;

/** CONNECT 3.1.1, keep-alive 600 s. */
function mqttConnect(clientId: string, clean: boolean): Buffer {
  return packet(0x10, Buffer.concat([mqttString('MQTT'), Buffer.from([4, clean ? 0x02 : 0x00, 600 >> 8, 600 & 0xff]), mqttString(clientId)]));
}

function mqttSteps(id: string, clean: boolean): Step[] {
  return [
    { send: () => mqttConnect(id, clean), done: (b) => (b.length < 4 ? false : b[0] >> 4 === 2 && b[3] === 0 ? true : `CONNACK ${b.toString('hex')}`) },
    {
      send: () => subscribeFrame(`idle/${id}/cmd`, 1),
      done: (b) => (b.length < 5 ? false : b[0] === 0x90 && b[4] !== 0x80 ? true : `SUBACK ${b.toString('hex')}`),
    },
  ];
}

/** A Kafka response is whole once its size prefix and that many bytes are in. */
const kafkaWhole = (b: Buffer): boolean => b.length >= 4 && b.length >= 4 + b.readInt32BE(0);

function kafkaSteps(): Step[] {
  const noTopics = Buffer.alloc(4); // Metadata v1: an empty topic array (null would mean every topic)
  return [
    { send: () => kafkaFrame(18, 0, 1, []), done: kafkaWhole },
    { send: () => kafkaFrame(3, 1, 2, [noTopics]), done: kafkaWhole },
  ];
}

// AMQP 0-9-1 (section 4.2.3 of the spec): frame = type u8, channel u16, size u32, payload, 0xCE.
function amqpFrame(type: number, channel: number, payload: Buffer): Buffer {
  const f = Buffer.alloc(7 + payload.length + 1);
  f[0] = type;
  f.writeUInt16BE(channel, 1);
  f.writeUInt32BE(payload.length, 3);
  payload.copy(f, 7);
  f[f.length - 1] = 0xce;
  return f;
}

function amqpMethod(channel: number, classId: number, methodId: number, args: Buffer[]): Buffer {
  const head = Buffer.alloc(4);
  head.writeUInt16BE(classId, 0);
  head.writeUInt16BE(methodId, 2);
  return amqpFrame(1, channel, Buffer.concat([head, ...args]));
}

const shortstr = (s: string) => Buffer.concat([Buffer.from([Buffer.byteLength(s)]), Buffer.from(s)]);
const longstr = (b: Buffer) => {
  const l = Buffer.alloc(4);
  l.writeUInt32BE(b.length);
  return Buffer.concat([l, b]);
};

/** The payload of the first method frame of (classId, methodId) in `b`; null while not complete; an error text for Close. */
function amqpFind(b: Buffer, classId: number, methodId: number): Buffer | null | string {
  let p = 0;
  while (b.length - p >= 7) {
    const size = b.readUInt32BE(p + 3);
    if (b.length - p < 8 + size) return null;
    if (b[p] === 1 && size >= 4) {
      const c = b.readUInt16BE(p + 7);
      const m = b.readUInt16BE(p + 9);
      if (c === classId && m === methodId) return b.subarray(p + 7, p + 7 + size);
      if ((c === 10 || c === 20) && m === 40) return `AMQP ${c === 10 ? 'connection' : 'channel'}.close: ${b.toString('latin1', p + 14, p + 14 + b[p + 13])}`;
    }
    p += 8 + size;
  }
  return null;
}

const amqpDone = (classId: number, methodId: number) => (b: Buffer) => {
  const r = amqpFind(b, classId, methodId);
  return r === null ? false : typeof r === 'string' ? r : true;
};

function amqpSteps(): Step[] {
  const props = Buffer.alloc(4); // an empty client-properties table
  return [
    { send: () => Buffer.from('AMQP\x00\x00\x09\x01', 'latin1'), done: amqpDone(10, 10) },
    // Start-Ok: PLAIN guest/guest.
    { send: () => amqpMethod(0, 10, 11, [props, shortstr('PLAIN'), longstr(Buffer.from('\0guest\0guest')), shortstr('en_US')]), done: amqpDone(10, 30) },
    {
      // Tune-Ok with the server's channel-max, frame-max and heartbeat, then Open.
      send: (tune) => {
        const t = amqpFind(tune, 10, 30) as Buffer;
        return Buffer.concat([amqpMethod(0, 10, 31, [t.subarray(4, 12)]), amqpMethod(0, 10, 40, [shortstr('/'), shortstr(''), Buffer.from([0])])]);
      },
      done: amqpDone(10, 41),
    },
    { send: () => amqpMethod(1, 20, 10, [shortstr('')]), done: amqpDone(20, 11) },
  ];
}

const AMQP_HEARTBEAT = amqpFrame(8, 0, Buffer.alloc(0));

/** Answers heartbeat frames (a broker that sends them closes a connection that does not). */
function amqpKeepAlive(s: Socket, data: Buffer): void {
  if (data.includes(AMQP_HEARTBEAT)) s.write(AMQP_HEARTBEAT);
}

function natsSteps(id: string): Step[] {
  return [
    { send: () => null, done: (b) => b.includes('\r\n') && (b.subarray(0, 5).toString() === 'INFO ' ? true : `no INFO: ${b.toString().slice(0, 80)}`) },
    {
      send: () => Buffer.concat([natsConnectFrame(`idle-${id}`), Buffer.from(`SUB idle.${id}.cmd 1\r\nPING\r\n`)]),
      done: (b) => (b.includes('-ERR') ? b.toString().trim() : b.includes('PONG\r\n')),
    },
  ];
}

function natsKeepAlive(s: Socket, data: Buffer): void {
  if (data.includes('PING\r\n')) s.write('PONG\r\n');
}

/** Opens one idle connection of `protocol`; `id` makes its client id, filter or subject its own. */
export function openIdle(protocol: IdleProtocol, port: number, id: string): Promise<Socket> {
  switch (protocol) {
    case 'mqtt':
      return handshake(port, mqttSteps(id, true), nothing);
    case 'mqtt-persistent':
      return handshake(port, mqttSteps(id, false), nothing);
    case 'kafka':
      return handshake(port, kafkaSteps(), nothing);
    case 'amqp':
      return handshake(port, amqpSteps(), amqpKeepAlive);
    case 'nats':
      return handshake(port, natsSteps(id), natsKeepAlive);
  }
}

// ------------------------------------------------------------------ measurement

/**
 * Opens `n` idle connections of `protocol` to the broker `pid` listening on `port` (two halves, at most
 * `concurrency` handshakes at a time) and measures its VmRSS; closes them all before returning.
 */
export async function measureIdle(protocol: IdleProtocol, pid: number, port: number, n: number, concurrency = 200): Promise<IdleResult> {
  const half = Math.floor(n / 2);
  const run = `${process.pid}-${Date.now().toString(36)}`;
  const sockets: Socket[] = [];
  let connectSeconds = 0;
  const openHalf = async (from: number, count: number) => {
    const t0 = nowS();
    await mapLimit(count, concurrency, async (i) => {
      sockets.push(await openIdle(protocol, port, `${run}-${from + i}`));
    });
    connectSeconds += nowS() - t0;
    await sleep(2000);
  };
  try {
    await sleep(1000);
    const r0 = rssKiB(pid);
    await openHalf(0, half);
    const r1 = rssKiB(pid);
    await openHalf(half, n - half);
    const r2 = rssKiB(pid);
    return {
      connections: n,
      rssKiB: [r0, r1, r2],
      kibPerConnection: (r2 - r1) / (n - half),
      kibPerConnectionFromZero: (r2 - r0) / n,
      connectSeconds,
    };
  } finally {
    for (const s of sockets) s.destroy();
    await sleep(500);
  }
}

// ------------------------------------------------------------------ the Node.js floor

export interface FloorServer {
  pid: number;
  port: number;
  stop(): Promise<void>;
}

/**
 * The V8 flags bin/flowmq starts the broker with (FLOWMQ_NODE_FLAGS replaces them, as it does for the broker), and a
 * young generation of the size a running FlowMQ's has grown to (16 MiB semi-spaces, V8's maximum on 64-bit: 32 MiB
 * of new space after startup), so that growing it is not counted against the floor's connections.
 */
function floorFlags(): string[] {
  const flags = process.env.FLOWMQ_NODE_FLAGS ?? '--initial-old-space-size=128 --expose-gc';
  return [...flags.split(/\s+/).filter((f) => f !== ''), '--min-semi-space-size=16'];
}

/** Starts idle-floor.js on a free loopback port (raising its descriptor limit as the brokers' shells do). */
export async function startFloor(): Promise<FloorServer> {
  const port = await freePort();
  const script = `ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec "$@"`;
  const p: ChildProcess = spawn('sh', ['-c', script, 'sh', process.execPath, ...floorFlags(), join(ROOT, 'dist/bench/idle-floor.js'), String(port)], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const exitHook = () => p.kill('SIGKILL');
  process.on('exit', exitHook);
  try {
    await waitPort(port, 20_000, () => p.exitCode === null && p.signalCode === null);
  } catch (e) {
    p.kill('SIGKILL');
    throw e;
  }
  return {
    pid: p.pid!,
    port,
    stop: async () => {
      await stopProcess(p, 2000);
      process.removeListener('exit', exitHook);
    },
  };
}
