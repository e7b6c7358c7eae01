/**
 * A highly available PostgreSQL for tests and the chaos runner, from Debian's packages (pg-auto-failover-cli and
 * postgresql-<v>-auto-failover, pg_auto_failover 2.0): a monitor and two data nodes, each a `pg_autoctl run`
 * supervising its own PostgreSQL, in a fresh temporary directory on free loopback ports, trust authentication for
 * the role `flowmq`. The standby is synchronous (pg_auto_failover's default with one standby and
 * replication-quorum true: `synchronous_standby_names = 'ANY 1 (...)'`), so a COMMIT returns only once the standby
 * has the transaction; the monitor's health checks are tightened so that a failover takes seconds, not half a
 * minute. As root every process runs as the `postgres` OS user (runuser), as test/helpers/postgres.ts does.
 *
 *   const ha = await startHaPostgres();
 *   ha.url('flowmq')        // postgres://flowmq@127.0.0.1:p1,127.0.0.1:p2/flowmq?target_session_attrs=read-write
 *   await ha.killPrimary(); // kill -9 of the primary node: its postmaster and its pg_autoctl (a machine lost)
 *   await ha.waitForFailover();
 *
 * A plain module (no node:test import) so that bench/ can use it too.
 */
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { openSync } from 'node:fs';
import { chown, mkdtemp, readFile, rm, appendFile } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { findPostgresBin } from './postgres.js';
import { freePort } from './ports.js';

const run = promisify(execFile);

/** What the monitor says of a data node. */
export interface HaNodeState {
  name: string;
  port: number;
  reported: string;
  goal: string;
}

export interface HaPostgres {
  /** The data nodes' ports, node1 first (the first primary). */
  readonly ports: number[];
  /** The multi-host URL of a database (default `flowmq`, made at start), every data node in order. */
  url(db?: string, attrs?: string): string;
  /** The URL of one data node (by index) alone. */
  nodeUrl(i: number, db?: string): string;
  /** Creates a database on the primary (a fresh name unless given) and returns its multi-host URL. */
  createDatabase(name?: string): Promise<string>;
  /** The monitor's view of the data nodes. */
  state(): Promise<HaNodeState[]>;
  /** Index of the current primary (the node the monitor has as primary or wait_primary), or -1. */
  primary(): Promise<number>;
  /** kill -9 of the primary node's whole process group (postmaster, backends, pg_autoctl): a machine lost. */
  killPrimary(): Promise<number>;
  /** Starts a lost node's pg_autoctl again: it rejoins as the standby; resolves once the monitor has it as secondary. */
  restartNode(i: number, timeoutMs?: number): Promise<void>;
  /** Waits until a node other than `was` is read-write (promoted), returns its index and the ms it took. */
  waitForFailover(was: number, timeoutMs?: number): Promise<{ index: number; ms: number }>;
  /** Stops every process and removes the directory. */
  stop(): Promise<void>;
  /** The logs of the monitor and the nodes (for a failing test). */
  logs(): Promise<string>;
}

export interface StartHaOptions {
  /** Monitor settings (ms) that decide how fast a failover goes; defaults make it a few seconds. */
  unhealthyTimeoutMs?: number;
  demoteTimeoutMs?: number;
}

function pgUser(): { uid: number; gid: number } {
  return { uid: Number(execFileSync('id', ['-u', 'postgres']).toString().trim()), gid: Number(execFileSync('id', ['-g', 'postgres']).toString().trim()) };
}

/** Whether Debian's pg_auto_failover is installed (pg_autoctl and the extension of the PostgreSQL found). */
export async function haPostgresAvailable(): Promise<boolean> {
  try {
    await run('pg_autoctl', ['--version']);
    const bin = await findPostgresBin();
    const lib = (await run(join(bin, 'pg_config'), ['--pkglibdir'])).stdout.trim();
    await readFile(join(lib, 'pgautofailover.so')).then(() => undefined);
    return true;
  } catch {
    return false;
  }
}

export async function startHaPostgres(opts: StartHaOptions = {}): Promise<HaPostgres> {
  const bin = await findPostgresBin();
  const asRoot = process.getuid?.() === 0;
  const dir = await mkdtemp(join(tmpdir(), 'flowmq-pgha-'));
  if (asRoot) {
    const u = pgUser();
    await chown(dir, u.uid, u.gid);
  }
  const osUser = asRoot ? 'postgres' : userInfo().username;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: dir,
    XDG_CONFIG_HOME: join(dir, 'config'),
    XDG_DATA_HOME: join(dir, 'share'),
    XDG_RUNTIME_DIR: join(dir, 'run'),
    PGHOST: dir,
    PG_CONFIG: join(bin, 'pg_config'),
  };
  delete env.PGUSER;
  delete env.PGDATABASE;
  delete env.PGPORT;
  /** argv to run a command as the PostgreSQL user, with the helper's environment. */
  const cmd = (name: string, args: string[]): [string, string[]] => {
    const envArgs = ['HOME', 'XDG_CONFIG_HOME', 'XDG_DATA_HOME', 'XDG_RUNTIME_DIR', 'PGHOST', 'PG_CONFIG'].map((k) => `${k}=${env[k]}`);
    return asRoot ? ['runuser', ['-u', 'postgres', '--', 'env', ...envArgs, name, ...args]] : [name, args];
  };
  const exec = async (name: string, args: string[], timeout = 120_000): Promise<string> => {
    const [f, a] = cmd(name, args);
    return (await run(f, a, { cwd: dir, env, timeout })).stdout;
  };
  const procs: ChildProcess[] = [];
  const nodeProc: ChildProcess[] = [];
  const startRun = async (pgdata: string, log: string): Promise<ChildProcess> => {
    const [f, a] = cmd('pg_autoctl', ['run', '--pgdata', pgdata]);
    const fd = openSync(join(dir, log), 'a');
    // detached: a process group of its own, which kill -9 takes down whole (postmaster and backends included).
    const p = spawn(f, a, { cwd: dir, env, detached: true, stdio: ['ignore', fd, fd] });
    p.unref();
    procs.push(p);
    return p;
  };
  const killGroup = (p: ChildProcess, signal: NodeJS.Signals): void => {
    try {
      if (p.pid !== undefined) process.kill(-p.pid, signal);
    } catch {
      // already gone
    }
  };
  let running = true;
  const onExit = (): void => {
    if (!running) return;
    for (const p of procs) killGroup(p, 'SIGKILL');
    try {
      execFileSync('rm', ['-rf', dir]);
    } catch {
      // best effort at exit
    }
  };
  process.on('exit', onExit);

  const initdb = async (name: string, port: number): Promise<string> => {
    const data = join(dir, name);
    await exec(join(bin, 'initdb'), ['-D', data, '--auth=trust', '-E', 'UTF8', '--locale=C', '--no-sync']);
    // The unix socket in our directory (never the system's), and the speed settings of the test servers.
    // fsync stays off as in test/helpers/postgres.ts: the faults here kill processes, not the machine's page cache.
    const conf = [
      `unix_socket_directories = '${dir}'`,
      'fsync = off',
      'full_page_writes = off',
      'max_connections = 300',
      'shared_buffers = 32MB',
      `port = ${port}`,
    ];
    await appendFile(join(data, 'postgresql.conf'), conf.join('\n') + '\n');
    return data;
  };

  const monitorPort = await freePort();
  const ports = [await freePort(), await freePort()];
  const ctl = join(bin, 'pg_ctl');
  try {
    const mon = await initdb('monitor', monitorPort);
    const monitorSettings = [
      'pgautofailover.health_check_period = 1000',
      'pgautofailover.health_check_timeout = 1000',
      'pgautofailover.health_check_max_retries = 1',
      'pgautofailover.health_check_retry_delay = 500',
      `pgautofailover.node_considered_unhealthy_timeout = ${opts.unhealthyTimeoutMs ?? 2000}`,
      `pgautofailover.primary_demote_timeout = ${opts.demoteTimeoutMs ?? 3000}`,
    ];
    await appendFile(join(mon, 'postgresql.conf'), monitorSettings.join('\n') + '\n');
    await exec('pg_autoctl', [
      'create',
      'monitor',
      '--pgctl',
      ctl,
      '--pgdata',
      mon,
      '--pgport',
      String(monitorPort),
      '--hostname',
      '127.0.0.1',
      '--auth',
      'trust',
      '--no-ssl',
    ]);
    await startRun(mon, 'monitor.log');
    const monitorUri = `postgres://autoctl_node@127.0.0.1:${monitorPort}/pg_auto_failover?sslmode=disable`;
    await waitFor(async () => (await tryQuery(`postgres://${osUser}@127.0.0.1:${monitorPort}/pg_auto_failover`, 'SELECT 1')) !== null, 60_000, 'the monitor');
    for (let i = 0; i < 2; i++) {
      // The first node's data directory is made here (initdb settings above); the second is a base backup of it.
      const data = i === 0 ? await initdb('node1', ports[0]) : join(dir, 'node2');
      await exec('pg_autoctl', [
        'create',
        'postgres',
        '--pgctl',
        ctl,
        '--pgdata',
        data,
        '--pgport',
        String(ports[i]),
        '--hostname',
        '127.0.0.1',
        '--listen',
        '127.0.0.1',
        '--name',
        `node${i + 1}`,
        '--monitor',
        monitorUri,
        '--auth',
        'trust',
        '--no-ssl',
        '--dbname',
        'flowmq',
        '--username',
        'flowmq',
      ]);
      nodeProc.push(await startRun(data, `node${i + 1}.log`));
      if (i === 0) await waitFor(async () => (await nodeStates()).some((n) => n.reported === 'single'), 60_000, 'node1 as single');
    }
    await waitFor(
      async () => {
        const s = await nodeStates();
        return s.some((n) => n.reported === 'primary' && n.goal === 'primary') && s.some((n) => n.reported === 'secondary' && n.goal === 'secondary');
      },
      90_000,
      'a primary and a synchronous secondary',
    );
  } catch (err) {
    const logs = await allLogs();
    onExit();
    running = false;
    process.off('exit', onExit);
    throw new Error(`pg_auto_failover did not start: ${(err as Error).message}\n${logs}`);
  }

  async function allLogs(): Promise<string> {
    let out = '';
    for (const f of ['monitor.log', 'node1.log', 'node2.log']) out += `--- ${f}\n${(await readFile(join(dir, f), 'utf8').catch(() => '')).slice(-6000)}\n`;
    return out;
  }

  async function nodeStates(): Promise<HaNodeState[]> {
    const rows = await tryQuery<{ nodename: string; nodeport: number; reportedstate: string; goalstate: string }>(
      `postgres://${osUser}@127.0.0.1:${monitorPort}/pg_auto_failover`,
      'SELECT nodename, nodeport, reportedstate::text, goalstate::text FROM pgautofailover.node ORDER BY nodeid',
    );
    return (rows ?? []).map((r) => ({ name: r.nodename, port: r.nodeport, reported: r.reportedstate, goal: r.goalstate }));
  }

  const url = (db = 'flowmq', attrs = 'read-write'): string =>
    `postgres://flowmq@${ports.map((p) => `127.0.0.1:${p}`).join(',')}/${encodeURIComponent(db)}?target_session_attrs=${attrs}`;
  const nodeUrl = (i: number, db = 'flowmq'): string => `postgres://flowmq@127.0.0.1:${ports[i]}/${encodeURIComponent(db)}`;
  const readWrite = async (i: number): Promise<boolean> => {
    const rows = await tryQuery<{ ro: string }>(nodeUrl(i), "SELECT current_setting('transaction_read_only') AS ro");
    return rows !== null && rows[0]?.ro === 'off';
  };
  const primary = async (): Promise<number> => {
    const s = await nodeStates();
    const i = s.findIndex((n) => ['primary', 'wait_primary', 'single'].includes(n.reported) && n.reported === n.goal);
    return i < 0 ? -1 : ports.indexOf(s[i].port);
  };
  let dbCounter = 0;

  return {
    ports,
    url,
    nodeUrl,
    async createDatabase(name?: string): Promise<string> {
      const db = name ?? `t_${process.pid}_${++dbCounter}`;
      const p = await primary();
      // As the servers' superuser (flowmq, made by pg_autoctl, may not create databases); flowmq owns it.
      const c = new pg.Client({ connectionString: `postgres://${osUser}@127.0.0.1:${ports[p]}/postgres` });
      await c.connect();
      try {
        await c.query(`CREATE DATABASE "${db.replaceAll('"', '""')}" OWNER flowmq`);
      } finally {
        await c.end();
      }
      return url(db);
    },
    state: nodeStates,
    primary,
    async killPrimary(): Promise<number> {
      const p = await primary();
      if (p < 0) throw new Error(`no primary to kill: ${JSON.stringify(await nodeStates())}`);
      killGroup(nodeProc[p], 'SIGKILL');
      return p;
    },
    async restartNode(i: number, timeoutMs = 120_000): Promise<void> {
      nodeProc[i] = await startRun(join(dir, `node${i + 1}`), `node${i + 1}.log`);
      await waitFor(
        async () => (await nodeStates()).some((n) => n.port === ports[i] && n.reported === 'secondary' && n.goal === 'secondary'),
        timeoutMs,
        `node${i + 1} as secondary again`,
      ).catch(async (err: Error) => {
        throw new Error(`${err.message}: ${JSON.stringify(await nodeStates())}\n${await allLogs()}`);
      });
    },
    async waitForFailover(was: number, timeoutMs = 60_000): Promise<{ index: number; ms: number }> {
      const t0 = Date.now();
      const other = ports.map((_, i) => i).filter((i) => i !== was);
      let found = -1;
      await waitFor(
        async () => {
          for (const i of other) if (await readWrite(i)) found = i;
          return found >= 0;
        },
        timeoutMs,
        'a promoted standby',
      ).catch(async (err: Error) => {
        throw new Error(`${err.message}: ${JSON.stringify(await nodeStates())}\n${await allLogs()}`);
      });
      return { index: found, ms: Date.now() - t0 };
    },
    async stop(): Promise<void> {
      if (!running) return;
      running = false;
      process.off('exit', onExit);
      for (const p of procs) killGroup(p, 'SIGTERM');
      const deadline = Date.now() + 15_000;
      while (Date.now() < deadline && procs.some((p) => p.exitCode === null && p.signalCode === null)) await sleep(100);
      for (const p of procs) killGroup(p, 'SIGKILL');
      await rm(dir, { recursive: true, force: true });
    },
    logs: allLogs,
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function waitFor(fn: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(200);
  }
}

/** Runs one query on a fresh connection; null when the server cannot be reached or the query fails. */
async function tryQuery<R extends pg.QueryResultRow>(url: string, sql: string): Promise<R[] | null> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  c.on('error', () => undefined);
  try {
    await c.connect();
    return (await c.query<R>(sql)).rows;
  } catch {
    return null;
  } finally {
    await c.end().catch(() => undefined);
  }
}
