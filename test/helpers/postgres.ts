/**
 * A real, throwaway PostgreSQL server for tests and benchmarks, from Debian's `postgresql` package: a data
 * directory in a fresh temporary directory (a copy of one initdb made once, see fromTemplate), a free loopback port, the unix socket inside that directory (so it never clashes
 * with a system cluster), trust authentication for the role `flowmq`. PostgreSQL refuses to run as root, so as
 * root every binary runs as the `postgres` OS user (runuser) on a directory owned by it; as anyone else it runs
 * directly. A plain module (no node:test import) so that bench/ can use it too.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chown, mkdtemp, readdir, readFile, rename, rm } from 'node:fs/promises';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from './ports.js';

const run = promisify(execFile);

export interface PostgresServer {
  port: number;
  /** Connection URL of a database (default: `postgres`). */
  url(db?: string): string;
  /** Creates a database (a fresh name unless given) and returns its URL. */
  createDatabase(name?: string): Promise<string>;
  /** Stops the server (fast shutdown: open connections are cut) and starts it again on the same port. */
  restart(): Promise<void>;
  /** Stops the server; `start()` brings it back. Between the two, connections are refused. */
  stopServer(): Promise<void>;
  startServer(): Promise<void>;
  /** Stops the server and removes its directory. */
  stop(): Promise<void>;
  /**
   * CPU time (user + system, ms) the server has used so far: the postmaster with its reaped children (backends that
   * ended) and the live ones (backends, checkpointer, WAL writer...), from /proc. For a benchmark's CPU per MB.
   */
  cpuMs?(): number;
}

export interface StartPostgresOptions {
  /** Keep fsync and full-page writes on (a benchmark measuring real commits); default off, for speed. */
  durable?: boolean;
  /** max_connections (default 200); a cluster of brokers, each with several pools, needs more. */
  maxConnections?: number;
}

/** The bin directory of the highest PostgreSQL version installed by Debian's packages. */
export async function findPostgresBin(): Promise<string> {
  const base = '/usr/lib/postgresql';
  let versions: string[] = [];
  try {
    versions = (await readdir(base)).filter((v) => existsSync(join(base, v, 'bin', 'initdb')));
  } catch {
    // no PostgreSQL at all: reported below
  }
  versions.sort((a, b) => Number(b) - Number(a));
  if (versions.length === 0) throw new Error(`no PostgreSQL under ${base}/<version>/bin (apt-get install postgresql)`);
  return join(base, versions[0], 'bin');
}

let dbCounter = 0;

const INITDB_ARGS = ['-U', 'flowmq', '--auth=trust', '-E', 'UTF8', '--locale=C'];

/**
 * A fresh data directory copied from a template that initdb made once per machine (per PostgreSQL version and
 * user): initdb takes 2-3 s, a copy of its 40 MB a fifth of a second, and some thirty test files start a server.
 * The template is made in a directory of its own and renamed into place, so concurrent test files never see half
 * of one; if the copy fails for any reason, initdb runs as before.
 */
async function fromTemplate(bin: string, data: string, pgExec: (name: string, args: string[]) => Promise<void>, asRoot: boolean): Promise<void> {
  const template = join(tmpdir(), `flowmq-pg-template-${bin.replace(/\W+/g, '_')}-${process.getuid?.() ?? 0}`);
  try {
    if (!existsSync(join(template, 'data', 'PG_VERSION'))) {
      const building = await mkdtemp(`${template}.tmp-`);
      try {
        if (asRoot) await chown(building, pgUid(), pgGid());
        await pgExec('initdb', ['-D', join(building, 'data'), ...INITDB_ARGS, '--no-sync']);
        await rename(building, template);
      } catch (err) {
        await rm(building, { recursive: true, force: true });
        // Another test file renamed its template into place first: use that one.
        if (!existsSync(join(template, 'data', 'PG_VERSION'))) throw err;
      }
    }
    // -a keeps the owner (postgres, when running as root) and the 0700 mode PostgreSQL insists on.
    await run('cp', ['-a', join(template, 'data'), data]);
  } catch {
    await rm(data, { recursive: true, force: true });
    await pgExec('initdb', ['-D', data, ...INITDB_ARGS, '--no-sync']);
  }
}

function pgUid(): number {
  return Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
}
function pgGid(): number {
  return Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
}

export async function startPostgres(opts: StartPostgresOptions = {}): Promise<PostgresServer> {
  const bin = await findPostgresBin();
  const asRoot = process.getuid?.() === 0;
  const dir = await mkdtemp(join(tmpdir(), 'flowmq-pg-'));
  if (asRoot) {
    await chown(dir, pgUid(), pgGid());
  }
  const data = join(dir, 'data');
  const logFile = join(dir, 'server.log');
  /** Runs a PostgreSQL binary as the right user, from the temp dir (postgres may not read the caller's cwd). */
  const pgExec = async (name: string, args: string[]): Promise<void> => {
    const file = asRoot ? 'runuser' : join(bin, name);
    const argv = asRoot ? ['-u', 'postgres', '--', join(bin, name), ...args] : args;
    await run(file, argv, { cwd: dir, timeout: 120_000 });
  };

  if (opts.durable) await pgExec('initdb', ['-D', data, ...INITDB_ARGS]);
  else await fromTemplate(bin, data, pgExec, asRoot);

  const settings = [
    'listen_addresses=127.0.0.1',
    `unix_socket_directories=${dir}`,
    `max_connections=${opts.maxConnections ?? 200}`,
    'shared_buffers=32MB',
    ...(opts.durable ? ['fsync=on', 'full_page_writes=on'] : ['fsync=off', 'full_page_writes=off']),
    // synchronous_commit stays at its default (on): FlowMQ acknowledges after COMMIT.
  ];
  let port = 0;
  const startOn = async (p: number): Promise<void> => {
    const o = [`-p ${p}`, ...settings.map((s) => `-c ${s}`)].join(' ');
    await pgExec('pg_ctl', ['-D', data, '-l', logFile, '-o', o, '-w', '-t', '60', 'start']);
  };
  const stopFast = async (): Promise<void> => {
    await pgExec('pg_ctl', ['-D', data, '-m', 'fast', '-w', '-t', '60', 'stop']);
  };

  // A free port can be taken by someone else before the server binds it: try a few.
  for (let attempt = 0; ; attempt++) {
    port = await freePort();
    try {
      await startOn(port);
      break;
    } catch (err) {
      if (attempt >= 4) {
        const log = await readFile(logFile, 'utf8').catch(() => '');
        await rm(dir, { recursive: true, force: true });
        throw new Error(`PostgreSQL did not start: ${(err as Error).message}\n${log}`);
      }
    }
  }

  let running = true;
  // If the process ends without stop() (a crashed test), do not leave a server behind.
  const onExit = (): void => {
    if (!running) return;
    try {
      const file = asRoot ? 'runuser' : join(bin, 'pg_ctl');
      const argv = ['-D', data, '-m', 'immediate', '-w', 'stop'];
      execFileSync(file, asRoot ? ['-u', 'postgres', '--', join(bin, 'pg_ctl'), ...argv] : argv, { cwd: dir, stdio: 'ignore' });
      execFileSync('rm', ['-rf', dir]);
    } catch {
      // best effort at exit
    }
  };
  process.on('exit', onExit);

  const url = (db = 'postgres'): string => `postgres://flowmq@127.0.0.1:${port}/${encodeURIComponent(db)}`;

  return {
    get port() {
      return port;
    },
    url,
    cpuMs: () => serverCpuMs(Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0])),
    async createDatabase(name?: string): Promise<string> {
      const db = name ?? `t_${process.pid}_${++dbCounter}`;
      const c = new pg.Client({ connectionString: url() });
      await c.connect();
      try {
        await c.query(`CREATE DATABASE "${db.replaceAll('"', '""')}"`);
      } finally {
        await c.end();
      }
      return url(db);
    },
    async restart(): Promise<void> {
      await stopFast();
      await startOn(port);
    },
    async stopServer(): Promise<void> {
      await stopFast();
    },
    async startServer(): Promise<void> {
      await startOn(port);
    },
    async stop(): Promise<void> {
      if (!running) return;
      running = false;
      process.off('exit', onExit);
      await pgExec('pg_ctl', ['-D', data, '-m', 'fast', '-w', '-t', '60', 'stop']).catch(() => undefined);
      await rm(dir, { recursive: true, force: true, maxRetries: 5 });
    },
  };
}

/** /proc/<pid>/stat's fields after the command name: [state, ppid, ...]; null when the process is gone. */
function statFields(pid: number): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** CPU ms of a postmaster (with its reaped children: cutime, cstime) and its live children (clock ticks of 10 ms). */
function serverCpuMs(postmaster: number): number {
  const ticks = (f: string[], children: boolean): number => Number(f[11]) + Number(f[12]) + (children ? Number(f[13]) + Number(f[14]) : 0);
  const own = statFields(postmaster);
  if (!own) return 0;
  let sum = ticks(own, true);
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const f = statFields(Number(name));
    if (f && Number(f[1]) === postmaster) sum += ticks(f, false);
  }
  return sum * 10;
}
