/**
 * The shared-storage configuration of the storage scenarios: FlowMQ with a PostgreSQL metastore and WAL and an
 * S3 object store, against a real PostgreSQL (Debian's package, fsync and full-page writes on, as a production
 * server runs) and s3rver, both on this machine, started once per run and stopped by cleanupAll.
 *
 * Every broker gets a database and a bucket prefix of its own, so brokers of one run never see each other's data.
 *
 * The sharded configuration (shardedStorageArgs) is the same with the WAL sharded over two PostgreSQL servers
 * (`--wal-shard`): a shard database on the server above, beside the metastore's, and one on a second server, started
 * at its first use with the same settings.
 */
import pg from 'pg';
import { copyFile, mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { onCleanup, ROOT } from './brokers.js';
import { startPostgres, type PostgresServer } from '../test/helpers/postgres.js';
import { startS3, type S3TestServer } from '../test/helpers/s3.js';

export interface SharedServices {
  postgres: PostgresServer;
  s3: S3TestServer;
}

let services: Promise<SharedServices> | null = null;
let brokers = 0;

/** PostgreSQL and s3rver, started at the first call. */
export function sharedServices(): Promise<SharedServices> {
  services ??= (async () => {
    const postgres = await startPostgres({ durable: true });
    let log: string | null = null;
    onCleanup(async () => {
      // The server's log goes with its directory: kept as bench/results/postgres.log when settings were given.
      if (log !== null) await copyFile(log, join(ROOT, 'bench/results/postgres.log')).catch(() => undefined);
      await postgres.stop();
    });
    log = await applySettings(postgres, process.env.BENCH_PG_SETTINGS ?? '');
    const s3 = await startS3({ bucket: 'flowmq-bench' });
    onCleanup(() => s3.close());
    return { postgres, s3 };
  })();
  return services;
}

let second: Promise<PostgresServer> | null = null;

/** The second PostgreSQL server of the sharded configuration, started at the first call. */
function secondPostgres(): Promise<PostgresServer> {
  second ??= (async () => {
    const postgres = await startPostgres({ durable: true });
    onCleanup(() => postgres.stop());
    await applySettings(postgres, process.env.BENCH_PG_SETTINGS ?? '');
    return postgres;
  })();
  return second;
}

/**
 * Broker options for fresh databases and a bucket prefix: PostgreSQL metastore, the WAL sharded over a database on
 * each of two servers (the metastore's and a second one), S3 objects.
 */
export async function shardedStorageArgs(): Promise<string[]> {
  const [{ postgres }, other] = await Promise.all([sharedServices(), secondPostgres()]);
  const args = await sharedStorageArgs();
  const n = brokers;
  const shards = [await postgres.createDatabase(`bench_${n}_wal0`), await other.createDatabase(`bench_${n}_wal1`)];
  return [...args, ...shards.flatMap((u) => ['--wal-shard', u])];
}

/**
 * Broker options for the diskless configuration: the PostgreSQL metastore, the WAL on S3 objects indexed in it
 * (`--wal object`, its default 100 ms windows), S3 objects.
 */
export async function disklessStorageArgs(): Promise<string[]> {
  const args = await sharedStorageArgs();
  const at = args.indexOf('--wal');
  return [...args.slice(0, at + 1), 'object', ...args.slice(at + 2)];
}

/** CPU ms the PostgreSQL servers of this run have used so far (both, once the sharded configuration started the second). */
export async function postgresCpuMs(): Promise<number> {
  const { postgres } = await sharedServices();
  const servers = [postgres, ...(second ? [await second] : [])];
  return servers.reduce((sum, s) => sum + (s.cpuMs?.() ?? 0), 0);
}

/** The PostgreSQL servers' CPU use with no broker writing (background work: checkpoints, statistics), ms per s, over 2 s. */
export async function postgresIdleMsPerSec(): Promise<number> {
  const a = await postgresCpuMs();
  const t = performance.now();
  await new Promise((r) => setTimeout(r, 2000));
  return ((await postgresCpuMs()) - a) / ((performance.now() - t) / 1000);
}

/** Broker options for a fresh database and bucket prefix: PostgreSQL metastore and WAL, S3 objects. */
export async function sharedStorageArgs(): Promise<string[]> {
  const { postgres, s3 } = await sharedServices();
  const n = ++brokers;
  const db = await postgres.createDatabase(`bench_${n}`);
  return [
    '--metastore',
    db,
    '--wal',
    'postgres',
    '--object-store',
    `s3://${s3.bucket}/broker-${n}`,
    '--s3-endpoint',
    s3.endpoint,
    '--s3-region',
    s3.region,
    '--s3-access-key-id',
    s3.accessKeyId,
    '--s3-secret-access-key',
    s3.secretAccessKey,
    // BENCH_SHARED_ARGS: more broker options for this configuration only (e.g. `--segment-bytes 8MiB`).
    ...(process.env.BENCH_SHARED_ARGS ?? '').split(/\s+/).filter((a) => a !== ''),
  ];
}

/**
 * BENCH_PG_SETTINGS: `name=value` pairs separated by `;` (e.g. `log_min_duration_statement=100;log_checkpoints=on`),
 * set with ALTER SYSTEM and a configuration reload (and a restart of the server for settings read only at start,
 * such as wal_buffers), to look into or tune the server while the bench runs. Settings that the test helper sets on
 * its command line (shared_buffers, fsync, full_page_writes, max_connections) are not changed so.
 */
async function applySettings(server: PostgresServer, settings: string): Promise<string | null> {
  const pairs = settings
    .split(';')
    .map((p) => p.trim())
    .filter((p) => p !== '');
  if (pairs.length === 0) return null;
  const c = new pg.Client({ connectionString: server.url() });
  await c.connect();
  let restart = false;
  try {
    for (const p of pairs) {
      const m = /^([a-z_.]+)\s*=\s*(.*)$/.exec(p);
      if (!m) throw new Error(`BENCH_PG_SETTINGS: "${p}" is not name=value`);
      await c.query(`ALTER SYSTEM SET ${m[1]} = '${m[2].replaceAll("'", "''")}'`);
    }
    await c.query('SELECT pg_reload_conf()');
    const r = await c.query<{ d: string }>("SELECT current_setting('data_directory') AS d");
    // Settings read only at start (wal_buffers...): the server is restarted for them.
    const names = pairs.map((p) => p.split('=')[0].trim());
    const pending = await c.query("SELECT name FROM pg_settings WHERE context = 'postmaster' AND name = ANY($1::text[])", [names]);
    if (pending.rows.length > 0) restart = true;
    await mkdir(join(ROOT, 'bench/results'), { recursive: true });
    return join(dirname(r.rows[0].d), 'server.log');
  } finally {
    await c.end();
    if (restart) await server.restart();
  }
}
