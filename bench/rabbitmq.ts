/**
 * A private RabbitMQ node for the AMQP benchmark: Debian's `rabbitmq-server` (apt-get install rabbitmq-server; the
 * bench installs nothing itself), started by the bench as a child process with everything of its own, so that it
 * neither touches nor depends on a system node (/var/lib/rabbitmq, port 5672, the system epmd on 4369):
 *
 * - a temporary directory holding its Mnesia database (RABBITMQ_MNESIA_BASE), its logs (RABBITMQ_LOG_BASE), its
 *   config file, an empty enabled-plugins file (no plugins: nothing but AMQP 0-9-1 listens), an empty env file
 *   (so /etc/rabbitmq/rabbitmq-env.conf is not read) and HOME, where Erlang creates the node's cookie;
 * - a node name of its own and free loopback ports for AMQP (RABBITMQ_NODE_PORT), Erlang distribution
 *   (RABBITMQ_DIST_PORT) and epmd (ERL_EPMD_PORT: the node starts an epmd of its own on that port).
 *
 * It runs as the bench's own user, root included: Debian's /usr/sbin/rabbitmq-server wrapper switches to the
 * `rabbitmq` user only because /var/lib/rabbitmq belongs to it; the server itself (/usr/lib/rabbitmq/bin) does not
 * refuse root, and every file it writes here is in the bench's own temporary directory.
 *
 * Ready means an AMQP connection was opened (not just the port listening: the listener opens before the node has
 * finished booting). Stopped with SIGTERM (the start script passes it on and the node shuts down cleanly), SIGKILL
 * to its process group after a grace period, then its epmd — at the end, on failure and on Ctrl-C (cleanupAll).
 */
import amqp from 'amqplib';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { onCleanup, removeDir, tempDir } from './brokers.js';
import { freePort, HOST, sleep } from './util.js';

/** Where Debian keeps the server's own scripts (BENCH_RABBITMQ_BIN: another installation's sbin or bin dir). */
export function rabbitmqBinDir(): string | null {
  const dir = process.env.BENCH_RABBITMQ_BIN || '/usr/lib/rabbitmq/bin';
  return existsSync(join(dir, 'rabbitmq-server')) ? dir : null;
}

/** The installed version, from the release directory's name (e.g. rabbitmq_server-3.10.8), or null. */
export function rabbitmqVersion(binDir: string): string | null {
  try {
    for (const e of readdirSync(join(binDir, '../lib'))) {
      const m = /^rabbitmq_server-(.+)$/.exec(e);
      if (m) return m[1];
    }
  } catch {
    // not a Debian-like layout
  }
  return null;
}

export interface RabbitNode {
  kind: 'rabbitmq';
  /** The start script's pid, leader of the node's process group. */
  pid: number;
  amqpPort: number;
  /** The Erlang VM's pid (beam.smp), for RSS figures; null if it could not be found. */
  beamPid: number | null;
  version: string | null;
  dir: string;
  stop(): Promise<void>;
}

let nodes = 0;

function logTail(file: string, lines = 30): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/** Opens and closes an AMQP connection as guest; throws what the last attempt threw after `timeoutMs`. */
export async function waitAmqp(port: number, timeoutMs: number, alive: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const c = await amqp.connect({ hostname: HOST, port, username: 'guest', password: 'guest', heartbeat: 0 });
      await c.close();
      return;
    } catch (err) {
      if (!alive()) throw new Error(`the process exited before AMQP port ${port} accepted a connection`);
      if (Date.now() > deadline) throw new Error(`no AMQP connection on port ${port} within ${timeoutMs} ms: ${(err as Error).message}`);
      await sleep(200);
    }
  }
}

/** Pids of the epmd processes that were started for `port` (their ERL_EPMD_PORT), read from /proc. */
function epmdPids(port: number): number[] {
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      if (!readFileSync(`/proc/${e}/cmdline`, 'utf8').includes('epmd')) continue;
      const env = readFileSync(`/proc/${e}/environ`, 'utf8').split('\0');
      if (env.includes(`ERL_EPMD_PORT=${port}`)) out.push(Number(e));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return out;
}

/** The node's Erlang VM: the child of the start script whose command is beam.smp. */
function findBeam(shellPid: number): number | null {
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === shellPid && stat.includes('(beam')) return Number(e);
    } catch {
      // gone meanwhile
    }
  }
  return null;
}

function alive(p: ChildProcess): boolean {
  return p.exitCode === null && p.signalCode === null;
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // the group is gone
  }
}

/** Stops the node's epmd: `epmd -kill` on its port, then SIGKILL by pid if it is still there. */
function stopEpmd(port: number): void {
  spawnSync('epmd', ['-port', String(port), '-kill'], { stdio: 'ignore', env: { ...process.env, ERL_EPMD_PORT: String(port) }, timeout: 5000 });
  for (const pid of epmdPids(port)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
}

/**
 * Starts a private RabbitMQ node on free loopback ports and waits until it accepts an AMQP connection (guest/guest,
 * which RabbitMQ allows from loopback). BENCH_RABBITMQ_CONF: more lines for its rabbitmq.conf.
 */
export async function startRabbitmq(binDir: string, timeoutMs = 90_000): Promise<RabbitNode> {
  const dir = tempDir('rabbitmq-bench-');
  const home = join(dir, 'home');
  mkdirSync(home);
  mkdirSync(join(dir, 'mnesia'));
  mkdirSync(join(dir, 'log'));
  const ports = new Set<number>();
  while (ports.size < 3) ports.add(await freePort());
  const [amqpPort, distPort, epmdPort] = [...ports];
  const conf = join(dir, 'rabbitmq.conf');
  writeFileSync(
    conf,
    [
      // Only the broker's own log file, warnings and worse; nothing on stdout.
      'log.console = false',
      'log.file.level = warning',
      ...(process.env.BENCH_RABBITMQ_CONF ?? '')
        .split(';')
        .map((l) => l.trim())
        .filter((l) => l !== ''),
      '',
    ].join('\n'),
  );
  writeFileSync(join(dir, 'enabled_plugins'), '[].\n');
  writeFileSync(join(dir, 'rabbitmq-env.conf'), '');
  const nodename = `flowmq-bench-${process.pid}-${++nodes}@localhost`;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: home,
    RABBITMQ_NODENAME: nodename,
    RABBITMQ_NODE_IP_ADDRESS: HOST,
    RABBITMQ_NODE_PORT: String(amqpPort),
    RABBITMQ_DIST_PORT: String(distPort),
    ERL_EPMD_PORT: String(epmdPort),
    ERL_EPMD_ADDRESS: HOST,
    // Distribution on loopback too (it listens on every interface otherwise).
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS: '-kernel inet_dist_use_interface {127,0,0,1}',
    RABBITMQ_MNESIA_BASE: join(dir, 'mnesia'),
    RABBITMQ_LOG_BASE: join(dir, 'log'),
    RABBITMQ_CONFIG_FILE: conf,
    RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, 'enabled_plugins'),
    RABBITMQ_CONF_ENV_FILE: join(dir, 'rabbitmq-env.conf'),
    RABBITMQ_PID_FILE: join(dir, 'rabbitmq.pid'),
  };
  const out = join(dir, 'stdout.log');
  const fd = openSync(out, 'a');
  // detached: a process group of its own (setsid), so that a stop reaches the script and the VM together. The same
  // descriptor limit as the other brokers' shells.
  const script = `ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec "$@"`;
  const p = spawn('sh', ['-c', script, 'sh', join(binDir, 'rabbitmq-server')], { stdio: ['ignore', fd, fd], env, detached: true });
  closeSync(fd);
  const pid = p.pid!;
  let stopped = false;
  const exitHook = () => {
    // Last resort when the bench exits without cleanupAll (synchronous: kill and move on).
    killGroup(pid, 'SIGKILL');
    stopEpmd(epmdPort);
  };
  process.on('exit', exitHook);
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    unregister();
    if (alive(p)) {
      const exited = new Promise<void>((r) => p.once('exit', () => r()));
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        // already gone
      }
      // After 30 s the group is killed (a timer that is cleared, so that it keeps nothing alive after a clean stop).
      const timer = setTimeout(() => killGroup(pid, 'SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    }
    // Whatever of the group is left (nothing after a clean stop).
    killGroup(pid, 'SIGKILL');
    stopEpmd(epmdPort);
    process.removeListener('exit', exitHook);
    removeDir(dir);
  };
  const unregister = onCleanup(stop);
  try {
    await waitAmqp(amqpPort, timeoutMs, () => alive(p));
  } catch (err) {
    const log = `${logTail(out)}\n${logTail(join(dir, 'log', `${nodename}.log`))}`.trim();
    await stop();
    throw new Error(`rabbitmq did not start: ${(err as Error).message}\n${log}`);
  }
  return { kind: 'rabbitmq', pid, amqpPort, beamPid: findBeam(pid), version: rabbitmqVersion(binDir), dir, stop };
}
