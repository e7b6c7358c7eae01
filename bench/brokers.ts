/**
 * The brokers under test, as real processes: FlowMQ (`bin/flowmq start`, embedded storage, fsync on) and
 * Debian's Mosquitto with a generated config. Both are started through `sh -c 'ulimit -n …; exec …'`, so they
 * can hold the idle-connection scenario's sockets and their pid is the broker's own (for /proc/<pid>/status).
 *
 * Every process and temporary directory is registered here and removed by `cleanupAll` (called at the end of
 * the run, on error and on SIGINT/SIGTERM), and as a last resort by a synchronous 'exit' hook.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, HOST, sleep, waitPort } from './util.js';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Descriptor limit asked for in the brokers' shells (falls back to the hard limit when not permitted). */
export const BROKER_NOFILE = 65536;

/** Per-client MQTT limits both brokers are configured with, so neither gets a bigger window or queue. */
export const MQTT_LIMITS = { maxInflight: 100, maxQueued: 1000 };

const procs = new Set<ChildProcess>();
const dirs = new Set<string>();
/** Services other than brokers (PostgreSQL, s3rver) the run started: stopped by cleanupAll after the brokers. */
const services = new Set<() => Promise<void>>();

/** Registers a service's stop for cleanupAll; the returned function unregisters it (after stopping it oneself). */
export function onCleanup(stop: () => Promise<void>): () => void {
  services.add(stop);
  return () => services.delete(stop);
}

/** A temporary directory removed at cleanup; under BENCH_DATA_DIR when set (pick a disk like production's). */
export function tempDir(prefix: string): string {
  const base = process.env.BENCH_DATA_DIR ? resolve(process.env.BENCH_DATA_DIR) : tmpdir();
  const d = mkdtempSync(join(base, prefix));
  dirs.add(d);
  return d;
}

export function removeDir(d: string): void {
  rmSync(d, { recursive: true, force: true });
  dirs.delete(d);
}

function shellWithLimit(argv: string[], opts: { stdio: ['ignore', number, number]; env?: NodeJS.ProcessEnv }): ChildProcess {
  const script = `ulimit -n ${BROKER_NOFILE} 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec "$@"`;
  const p = spawn('sh', ['-c', script, 'sh', ...argv], { stdio: opts.stdio, env: opts.env ?? process.env });
  procs.add(p);
  p.once('exit', () => procs.delete(p));
  return p;
}

export function stopProcess(p: ChildProcess, graceMs = 10_000): Promise<void> {
  return new Promise((r) => {
    if (p.exitCode !== null || p.signalCode !== null) return r();
    const t = setTimeout(() => p.kill('SIGKILL'), graceMs);
    p.once('exit', () => {
      clearTimeout(t);
      r();
    });
    p.kill('SIGTERM');
  });
}

export async function cleanupAll(): Promise<void> {
  await Promise.all([...procs].map((p) => stopProcess(p, 5000)));
  for (const stop of [...services]) {
    services.delete(stop);
    await stop().catch(() => undefined);
  }
  for (const d of [...dirs]) removeDir(d);
}

process.on('exit', () => {
  for (const p of procs) {
    try {
      p.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** Resident set size of a process in KiB, from /proc/<pid>/status (VmRSS). */
export function rssKiB(pid: number): number {
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]);
}

/** Max open files of a running process (the limit its shell set). */
export function nofile(pid: number): number {
  const m = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync(`/proc/${pid}/limits`, 'utf8'));
  return !m || m[1] === 'unlimited' ? Infinity : Number(m[1]);
}

export interface Broker {
  kind: 'flowmq' | 'mosquitto';
  pid: number;
  mqttPort: number;
  kafkaPort: number;
  httpPort: number;
  /** FlowMQ: the port given to --amqp-port (listening only when AMQP is among --protocols); 0 for Mosquitto. */
  amqpPort: number;
  dir: string;
  stop(): Promise<void>;
  /**
   * FlowMQ only: stops the broker (SIGTERM, a clean shutdown) and starts it again on the same ports and data, so
   * that nothing read or written before is in its memory. `pid` is the new process's afterwards.
   */
  restart?(): Promise<void>;
}

function logTail(file: string): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-20).join('\n');
  } catch {
    return '';
  }
}

async function started(p: ChildProcess, ports: number[], log: string, what: string): Promise<void> {
  try {
    await Promise.all(ports.map((port) => waitPort(port, 30_000, () => p.exitCode === null && p.signalCode === null)));
  } catch (err) {
    await stopProcess(p, 2000);
    throw new Error(`${what} did not start: ${(err as Error).message}\n${logTail(log)}`);
  }
}

/**
 * Starts `bin/flowmq start` on free loopback ports with a fresh data directory (warn-level logs to a file). A port
 * found free can be taken by another socket before the broker binds it (freePort closes its probe first): a start
 * that fails with EADDRINUSE is tried again on other ports, at most twice, and says so.
 */
export async function startFlowmq(extraArgs: readonly string[] = []): Promise<Broker> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startFlowmqOnce(extraArgs);
    } catch (err) {
      if (attempt >= 3 || !/EADDRINUSE/.test((err as Error).message)) throw err;
      console.error(`flowmq start: a port was taken meanwhile (EADDRINUSE), trying other ports (attempt ${attempt + 1})`);
    }
  }
}

async function startFlowmqOnce(extraArgs: readonly string[]): Promise<Broker> {
  const dir = tempDir('flowmq-bench-');
  // Different ports: each probe closes before the next, so the kernel may hand out the same one again. The AMQP
  // port is free too, so that a broker with AMQP enabled never reaches for 5672 (the AMQP bench waits for it itself).
  const ports = new Set<number>();
  while (ports.size < 4) ports.add(await freePort());
  const [mqttPort, kafkaPort, httpPort, amqpPort] = [...ports];
  const log = join(dir, 'flowmq.log');
  // The launcher itself (not `node bin/flowmq`), so the broker runs as `flowmq start` does for users.
  const argv = [
    join(ROOT, 'bin/flowmq'),
    'start',
    '--data-dir',
    join(dir, 'data'),
    '--host',
    HOST,
    '--mqtt-port',
    String(mqttPort),
    '--kafka-port',
    String(kafkaPort),
    '--http-port',
    String(httpPort),
    '--amqp-port',
    String(amqpPort),
    '--log-level',
    'warn',
    ...extraArgs,
  ];
  // Keep optional listeners (WebSocket) off so they neither add work nor collide with other brokers' ports;
  // the in-flight window and queue are FlowMQ's defaults, stated explicitly to match Mosquitto's config.
  const env = {
    ...process.env,
    FLOWMQ_NODE: process.execPath,
    FLOWMQ_MQTT_WS: 'false',
    FLOWMQ_MQTT_MAX_INFLIGHT: String(MQTT_LIMITS.maxInflight),
    FLOWMQ_MQTT_MAX_QUEUED_MESSAGES: String(MQTT_LIMITS.maxQueued),
  };
  const launch = async (): Promise<ChildProcess> => {
    const fd = openSync(log, 'a');
    const p = shellWithLimit(argv, { stdio: ['ignore', fd, fd], env });
    closeSync(fd);
    await started(p, [mqttPort, kafkaPort, httpPort], log, 'flowmq');
    return p;
  };
  let p = await launch();
  const broker: Broker = {
    kind: 'flowmq',
    pid: p.pid!,
    mqttPort,
    kafkaPort,
    httpPort,
    amqpPort,
    dir,
    stop: async () => {
      await stopProcess(p);
      removeDir(dir);
    },
    restart: async () => {
      await stopProcess(p);
      // The ports were the broker's own a moment ago; nobody else is expected to take them in between.
      p = await launch();
      broker.pid = p.pid!;
    },
  };
  return broker;
}

export function mosquittoBinary(): string | null {
  if (process.env.BENCH_MOSQUITTO) return process.env.BENCH_MOSQUITTO;
  const r = spawnSync('sh', ['-c', 'command -v mosquitto || true'], { encoding: 'utf8' });
  const found = r.stdout.trim().split('\n')[0];
  if (found) return found;
  return existsSync('/usr/sbin/mosquitto') ? '/usr/sbin/mosquitto' : null;
}

export function mosquittoVersion(bin: string): string {
  const r = spawnSync(bin, ['-h'], { encoding: 'utf8' });
  const m = /mosquitto version (\S+)/.exec(`${r.stdout}${r.stderr}`);
  return m ? m[1] : 'unknown';
}

/**
 * Starts Mosquitto on a free loopback port: anonymous, no persistence (FlowMQ keeps nothing for plain MQTT
 * pub/sub either), and the same per-client in-flight window and queue as FlowMQ (Mosquitto's own default
 * in-flight window is 20).
 */
export async function startMosquitto(bin: string): Promise<Broker> {
  const dir = tempDir('mosquitto-bench-');
  const port = await freePort();
  const conf = join(dir, 'mosquitto.conf');
  writeFileSync(
    conf,
    [
      `listener ${port} ${HOST}`,
      'allow_anonymous true',
      'persistence false',
      `max_inflight_messages ${MQTT_LIMITS.maxInflight}`,
      `max_queued_messages ${MQTT_LIMITS.maxQueued}`,
      'log_dest stderr',
      'log_type error',
      'log_type warning',
      '',
    ].join('\n'),
  );
  const log = join(dir, 'mosquitto.log');
  const fd = openSync(log, 'a');
  const p = shellWithLimit([bin, '-c', conf], { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  await started(p, [port], log, 'mosquitto');
  return {
    kind: 'mosquitto',
    pid: p.pid!,
    mqttPort: port,
    kafkaPort: 0,
    httpPort: 0,
    amqpPort: 0,
    dir,
    stop: async () => {
      await stopProcess(p);
      removeDir(dir);
    },
  };
}

/** Creates a FlowMQ stream through the admin API. */
/** `auth`: a user of the broker's users file (its admin API then requires one). */
export async function createStream(b: Broker, name: string, partitions: number, auth?: { username: string; password: string }): Promise<void> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (auth) headers.authorization = `Basic ${Buffer.from(`${auth.username}:${auth.password}`).toString('base64')}`;
  const res = await fetch(`http://${HOST}:${b.httpPort}/api/v1/streams`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ name, partitions }),
  });
  if (!res.ok) throw new Error(`create stream ${name}: ${res.status} ${await res.text()}`);
  await sleep(50);
}
