/**
 * How soon a restarted broker serves clients again (issue 28: clients' reconnect loops give up after a few hundred
 * milliseconds). Each broker keeps its data directory from one start to the next; the time is from the spawn of the
 * process to the first line a NATS client reads (nats-server's and FlowMQ's `INFO`), and, for FlowMQ, to the moment
 * each of its other listeners accepts a TCP connection. Ports are polled every 2 ms.
 *
 * FlowMQ runs as users start it (`bin/flowmq start`, every protocol, the MQTT WebSocket listener on, a stream of
 * 4 partitions with records in it, so that its restart opens the metastore, WAL and objects it left); nats-server
 * runs with JetStream on and a stream holding messages in its store directory, as a NATS deployment that FlowMQ
 * replaces would.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { ROOT, onCleanup, removeDir, stopProcess, tempDir } from './brokers.js';
import { freePort, HOST, percentiles, sleep, type Percentiles } from './util.js';

/** Restarts measured per broker (after one start that lays down the data). */
const RESTARTS = 5;
const POLL_MS = 2;
const GIVE_UP_MS = 20_000;

export interface StartupResult {
  restarts: number;
  /** Spawn to the NATS INFO line, ms. */
  natsInfoMs: Percentiles;
  /** FlowMQ: spawn to a TCP accept on each other listener, ms (median of the restarts). */
  listenersMs?: Record<string, number>;
}

/** Resolves with the ms from `t0` at which `port` first accepted (and, with `info`, sent a line starting `INFO `). */
async function readyAt(port: number, t0: number, info: boolean, alive: () => boolean): Promise<number> {
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect({ port, host: HOST });
      const done = (v: boolean) => {
        s.destroy();
        resolve(v);
      };
      if (info) {
        let buf = '';
        s.on('data', (d) => {
          buf += d.toString('latin1');
          if (buf.includes('\n')) done(buf.startsWith('INFO '));
        });
      } else s.on('connect', () => done(true));
      s.on('error', () => done(false));
    });
    if (ok) return performance.now() - t0;
    if (!alive()) throw new Error(`the process exited before port ${port} was ready`);
    if (performance.now() - t0 > GIVE_UP_MS) throw new Error(`port ${port} not ready within ${GIVE_UP_MS} ms`);
    await sleep(POLL_MS);
  }
}

interface Launch {
  p: ChildProcess;
  t0: number;
  alive: () => boolean;
}

function launch(cmd: string, args: string[], log: string, env?: NodeJS.ProcessEnv): Launch {
  const fd = openSync(log, 'a');
  const t0 = performance.now();
  const p = spawn(cmd, args, { stdio: ['ignore', fd, fd], env: env ?? process.env });
  closeSync(fd);
  return { p, t0, alive: () => p.exitCode === null && p.signalCode === null };
}

/** FlowMQ: one start that creates a stream with records, then RESTARTS timed restarts on the same data. */
export async function flowmqRestarts(): Promise<StartupResult> {
  const dir = tempDir('flowmq-startup-');
  const ports: Record<string, number> = {};
  for (const name of ['nats', 'mqtt', 'mqttWs', 'kafka', 'amqp', 'http']) {
    let p = await freePort();
    while (Object.values(ports).includes(p)) p = await freePort();
    ports[name] = p;
  }
  const args = [
    'start',
    ...['--data-dir', join(dir, 'data'), '--host', HOST, '--log-level', 'warn'],
    ...['--protocols', 'mqtt,kafka,amqp,nats'],
    ...['--nats-port', String(ports.nats), '--mqtt-port', String(ports.mqtt), '--mqtt-ws-port', String(ports.mqttWs)],
    ...['--kafka-port', String(ports.kafka), '--amqp-port', String(ports.amqp), '--http-port', String(ports.http)],
  ];
  const env = { ...process.env, FLOWMQ_NODE: process.execPath };
  const log = join(dir, 'flowmq.log');
  let current: Launch | null = null;
  const unregister = onCleanup(async () => {
    if (current) await stopProcess(current.p);
    removeDir(dir);
  });
  try {
    current = launch(join(ROOT, 'bin/flowmq'), args, log, env);
    await readyAt(ports.http, current.t0, false, current.alive);
    const res = await fetch(`http://${HOST}:${ports.http}/api/v1/streams`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'startup', partitions: 4, bindings: ['startup'] }),
    });
    if (!res.ok) throw new Error(`create stream: ${res.status} ${await res.text()}`);
    await publishNats(ports.nats, 'startup', 1000);
    await stopProcess(current.p);
    const nats: number[] = [];
    const others: Record<string, number[]> = { mqtt: [], mqttWs: [], kafka: [], amqp: [] };
    for (let i = 0; i < RESTARTS; i++) {
      const l: Launch = (current = launch(join(ROOT, 'bin/flowmq'), args, log, env));
      const [n, ...rest] = await Promise.all([
        readyAt(ports.nats, l.t0, true, l.alive),
        ...Object.keys(others).map((k) => readyAt(ports[k], l.t0, false, l.alive)),
      ]);
      nats.push(n);
      Object.keys(others).forEach((k, j) => others[k].push(rest[j]));
      await stopProcess(l.p);
    }
    current = null;
    return {
      restarts: RESTARTS,
      natsInfoMs: percentiles(nats),
      listenersMs: Object.fromEntries(Object.entries(others).map(([k, v]) => [k, percentiles(v).p50])),
    };
  } finally {
    unregister();
    if (current) await stopProcess(current.p);
    removeDir(dir);
  }
}

/** nats-server with JetStream: one start that fills a stream, then RESTARTS timed restarts on the same store. */
export async function natsServerRestarts(bin: string): Promise<StartupResult> {
  const dir = tempDir('nats-server-startup-');
  const port = await freePort();
  const conf = join(dir, 'nats-server.conf');
  writeFileSync(
    conf,
    [`listen: "${HOST}:${port}"`, `jetstream { store_dir: "${join(dir, 'js')}" }`, `log_file: "${join(dir, 'nats-server.log')}"`, ''].join('\n'),
  );
  const log = join(dir, 'stdout.log');
  let current: Launch | null = null;
  const unregister = onCleanup(async () => {
    if (current) await stopProcess(current.p, 5000);
    removeDir(dir);
  });
  try {
    current = launch(bin, ['-c', conf], log);
    await readyAt(port, current.t0, true, current.alive);
    await natsRequest(port, '$JS.API.STREAM.CREATE.startup', JSON.stringify({ name: 'startup', subjects: ['startup'], storage: 'file' }));
    await publishNats(port, 'startup', 1000);
    await stopProcess(current.p, 5000);
    const nats: number[] = [];
    for (let i = 0; i < RESTARTS; i++) {
      const l: Launch = (current = launch(bin, ['-c', conf], log));
      nats.push(await readyAt(port, l.t0, true, l.alive));
      await stopProcess(l.p, 5000);
    }
    current = null;
    return { restarts: RESTARTS, natsInfoMs: percentiles(nats) };
  } finally {
    unregister();
    if (current) await stopProcess(current.p, 5000);
    removeDir(dir);
  }
}

/**
 * A raw NATS connection: CONNECT with verbose off, then `lines`, then a PING; resolves with what it read once that
 * matches `until` (default: the PONG, so every line before it was processed).
 */
function natsSession(port: number, lines: string, until = /\r\nPONG\r\n/): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: HOST });
    let buf = '';
    s.on('data', (d) => {
      buf += d.toString('latin1');
      if (until.test(buf)) {
        s.destroy();
        resolve(buf);
      }
    });
    s.on('error', reject);
    s.write(`CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n${lines}PING\r\n`);
  });
}

/** Publishes `n` 100-byte messages to `subject` and waits until the server has read them. */
async function publishNats(port: number, subject: string, n: number): Promise<void> {
  const body = 'x'.repeat(100);
  await natsSession(port, `PUB ${subject} 100\r\n${body}\r\n`.repeat(n));
}

/** One JetStream API request; resolves once the reply arrived (the subscription and the request on one connection). */
async function natsRequest(port: number, subject: string, json: string): Promise<void> {
  const inbox = `_INBOX.startup${Date.now()}`;
  const len = Buffer.byteLength(json);
  const out = await natsSession(port, `SUB ${inbox} 1\r\nPUB ${subject} ${inbox} ${len}\r\n${json}\r\n`, /\r\nMSG [^\r]*\r\n[^\r]*\r\n/);
  if (out.includes('"error"')) throw new Error(`${subject}: ${out.slice(out.indexOf('{'), out.lastIndexOf('}') + 1)}`);
}
