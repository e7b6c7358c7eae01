/**
 * A private nats-server for the NATS benchmark: Debian's `nats-server` (apt-get install nats-server; the bench
 * installs nothing itself; BENCH_NATS_SERVER names another binary), started by the bench as a child process on a
 * free loopback port with a config file of its own in a temporary directory, so that it neither touches nor
 * depends on a system server (port 4222, /etc/nats-server.conf).
 *
 * Its limits are stated in the config file rather than left to the binary's defaults, so that both brokers of the
 * comparison run with the same ones (FlowMQ's NATS options have the same defaults): 1 MiB max payload, 4 KiB max
 * control line, 64 MiB pending per connection before a slow consumer is closed. No JetStream, no monitoring port:
 * core NATS only, as the benchmark's scenarios use.
 *
 * Ready means a TCP connection received the server's INFO line (the port opens slightly before that). Stopped with
 * SIGTERM (nats-server shuts down at once), SIGKILL after a grace period — at the end, on failure and on Ctrl-C
 * (cleanupAll).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { onCleanup, removeDir, stopProcess, tempDir } from './brokers.js';
import { freePort, HOST, sleep } from './util.js';

/** The binary: BENCH_NATS_SERVER, else `nats-server` on PATH, else Debian's /usr/sbin/nats-server; null if none. */
export function natsServerBinary(): string | null {
  if (process.env.BENCH_NATS_SERVER) return process.env.BENCH_NATS_SERVER;
  const r = spawnSync('sh', ['-c', 'command -v nats-server || true'], { encoding: 'utf8' });
  const found = r.stdout.trim().split('\n')[0];
  if (found) return found;
  return existsSync('/usr/sbin/nats-server') ? '/usr/sbin/nats-server' : null;
}

/** `nats-server --version` → e.g. "2.9.10"; null if it cannot be run. */
export function natsServerVersion(bin: string): string | null {
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8', timeout: 5000 });
  const m = /v?(\d+\.\d+\.\d+\S*)/.exec(`${r.stdout ?? ''}${r.stderr ?? ''}`);
  return m ? m[1] : null;
}

/** Limits both brokers of the NATS comparison run with (nats-server's own defaults, and FlowMQ's). */
export const NATS_LIMITS = { maxPayload: 1024 * 1024, maxControlLine: 4096, maxPending: 64 * 1024 * 1024 };

export interface NatsServer {
  kind: 'nats-server';
  pid: number;
  port: number;
  version: string | null;
  dir: string;
  stop(): Promise<void>;
}

/**
 * Connects to 127.0.0.1:port and resolves once a line starting with `INFO ` has arrived (the server is serving
 * clients, not only listening); rejects after `timeoutMs` or when `alive()` turns false.
 */
export async function waitNatsInfo(port: number, timeoutMs: number, alive: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  for (;;) {
    const got = await new Promise<boolean>((resolve) => {
      const s = connect({ port, host: HOST });
      let buf = '';
      const done = (ok: boolean, why = '') => {
        clearTimeout(timer);
        s.destroy();
        if (why) last = why;
        resolve(ok);
      };
      const timer = setTimeout(() => done(false, 'no INFO within 1 s'), 1000);
      s.on('data', (d) => {
        buf += d.toString('latin1');
        if (buf.includes('\n')) done(buf.startsWith('INFO '), `first line was ${JSON.stringify(buf.slice(0, 40))}`);
      });
      s.on('error', (e) => done(false, e.message));
    });
    if (got) return;
    if (!alive()) throw new Error(`the process exited before port ${port} served INFO`);
    if (Date.now() > deadline) throw new Error(`no NATS INFO on port ${port} within ${timeoutMs} ms (${last})`);
    await sleep(50);
  }
}

function logTail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/** Starts nats-server on a free loopback port (anonymous, core NATS) and waits for its INFO. */
export async function startNatsServer(bin: string, timeoutMs = 20_000): Promise<NatsServer> {
  const dir = tempDir('nats-server-bench-');
  const port = await freePort();
  const conf = join(dir, 'nats-server.conf');
  writeFileSync(
    conf,
    [
      `listen: "${HOST}:${port}"`,
      `max_payload: ${NATS_LIMITS.maxPayload}`,
      `max_control_line: ${NATS_LIMITS.maxControlLine}`,
      `max_pending: ${NATS_LIMITS.maxPending}`,
      // Its own log file, errors and warnings only (nats-server logs notices and up unless told otherwise).
      `log_file: "${join(dir, 'nats-server.log')}"`,
      'debug: false',
      'trace: false',
      '',
    ].join('\n'),
  );
  const out = join(dir, 'stdout.log');
  const fd = openSync(out, 'a');
  const p: ChildProcess = spawn(bin, ['-c', conf], { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  const alive = () => p.exitCode === null && p.signalCode === null;
  let stopped = false;
  const exitHook = () => {
    // Last resort when the bench exits without cleanupAll.
    try {
      p.kill('SIGKILL');
    } catch {
      // already gone
    }
  };
  process.on('exit', exitHook);
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    unregister();
    await stopProcess(p, 5000);
    process.removeListener('exit', exitHook);
    removeDir(dir);
  };
  const unregister = onCleanup(stop);
  try {
    await waitNatsInfo(port, timeoutMs, alive);
  } catch (err) {
    const log = `${logTail(out)}\n${logTail(join(dir, 'nats-server.log'))}`.trim();
    await stop();
    throw new Error(`nats-server did not start: ${(err as Error).message}\n${log}`);
  }
  return { kind: 'nats-server', pid: p.pid!, port, version: natsServerVersion(bin), dir, stop };
}
