/**
 * Opens the PostgreSQL WAL (`--wal postgres`): one database (the metastore's, by default) or several shards
 * (`--wal-shard`, sharded-wal.ts), and checks the list against the one recorded in the metastore's database.
 *
 * Where a key's entries live depends on the list (shardOf: a hash modulo the shard count, in list order), so every
 * broker of a cluster, and every restart of a single broker, must use the same list. Each shard database has an
 * identity (wal_shard_identity, a uuid made by its first migration); the first broker to start records the ids, in
 * order, in `wal_shard_list` of the metastore's database, and every later start compares its own list with it:
 * another database, another order, a shard more or less, or one database named twice (two URLs of one server)
 * refuses the start with both lists in the message. Changing the list would move partitions between shards with
 * their unsealed entries and fences: it is refused, not migrated (docs/storage.md).
 *
 * A deployment from before sharding has no record: its WAL lives in the metastore's database. It is recorded as it
 * is, unless that WAL still holds entries and the broker was given another list: refused too, since those entries
 * would never be read back.
 */
import type { Logger } from 'pino';
import { FlowError, LatencyHistogram } from '../../core/index.js';
import { connectPool, migratePostgres, type PgMigration, type PostgresOptions } from '../postgres-util.js';
import { PostgresWal, type PostgresWalOptions } from './postgres-wal.js';
import { ShardedWal } from './sharded-wal.js';
import type { WriteAheadLog } from './types.js';

/** The record of the list, in the metastore's database; recorded apart from the metastore's own migrations. */
const shardListMigrations: readonly PgMigration[] = [
  {
    version: 1,
    name: 'wal shard list',
    sql: `
      -- The WAL's shards in their configured order (a key's shard is its hash modulo their count), by identity.
      CREATE TABLE wal_shard_list (
        position    integer PRIMARY KEY,
        shard_id    uuid NOT NULL UNIQUE,
        endpoint    text NOT NULL,  -- host:port as the first broker named it, for messages only
        recorded_at timestamptz NOT NULL DEFAULT now()
      );
    `,
  },
];

/** Advisory transaction lock of the check-and-record: brokers starting together record one list ("FMWALS"). */
const SHARD_LIST_LOCK = 0x464d57414c53;

export interface OpenPostgresWalOptions {
  /** The metastore's database: where the list is recorded, and the only shard when `shards` is empty. */
  metastoreUrl: string;
  /** The shard databases' URLs in order (--wal-shard); empty: the metastore's database alone. */
  shards: readonly string[];
  /** Pool and timeouts of each shard (poolSize: per shard; default 4). */
  pg: Omit<PostgresOptions, 'url'>;
  maxGroupBytes?: number;
  logger?: Logger;
}

interface Recorded {
  position: number;
  shard_id: string;
  endpoint: string;
}

const describeList = (l: ReadonlyArray<{ id: string; endpoint: string }>): string =>
  l.length === 0 ? '(none)' : l.map((s, i) => `${i}: ${s.endpoint} (${s.id.slice(0, 8)})`).join(', ');

/**
 * Compares the shards opened (`given`, in order) with the recorded list, recording it when there is none. Throws
 * CONFIG_ERROR, naming both lists, when they differ.
 */
export async function checkShardList(
  metastoreUrl: string,
  given: ReadonlyArray<{ id: string; endpoint: string }>,
  pgOpts: Omit<PostgresOptions, 'url'>,
): Promise<'recorded' | 'matched'> {
  const seen = new Map<string, number>();
  given.forEach((s, i) => {
    const j = seen.get(s.id);
    if (j !== undefined) {
      throw new FlowError('CONFIG_ERROR', `--wal-shard ${j} and ${i} (${given[j].endpoint}, ${s.endpoint}) are the same database: list each shard once`);
    }
    seen.set(s.id, i);
  });
  const home = await connectPool({ ...pgOpts, url: metastoreUrl, poolSize: 1 }, 'wal shard list');
  try {
    await migratePostgres(home, shardListMigrations, 'flowmq_wal_shard_list_migrations', 'WAL shard list');
    return await home.transaction('WAL shard list', async (c) => {
      await c.query('SELECT pg_advisory_xact_lock($1)', [SHARD_LIST_LOCK]);
      const r = await c.query<Recorded>('SELECT position, shard_id::text AS shard_id, endpoint FROM wal_shard_list ORDER BY position');
      const recorded = r.rows.map((x) => ({ id: x.shard_id, endpoint: x.endpoint }));
      if (recorded.length > 0) {
        const same = recorded.length === given.length && recorded.every((x, i) => x.id === given[i].id);
        if (same) return 'matched';
        throw new FlowError(
          'CONFIG_ERROR',
          `the PostgreSQL WAL's shard list recorded in the metastore is [${describeList(recorded)}], this broker was given [${describeList(given)}]: ` +
            'every broker must be given the same --wal-shard list, in the same order (none: the metastore database alone). ' +
            'Changing the list would move partitions and their unsealed entries between shards: it is refused (docs/storage.md, "Sharding the PostgreSQL WAL")',
        );
      }
      // No record yet: a new deployment, or one from before sharding, whose WAL is in the metastore's database.
      const t = await c.query<{ entries: boolean; identity: boolean }>(
        `SELECT to_regclass('wal_entries') IS NOT NULL AS entries, to_regclass('wal_shard_identity') IS NOT NULL AS identity`,
      );
      const held = t.rows[0].entries && (await c.query('SELECT 1 FROM wal_entries LIMIT 1')).rows.length > 0;
      const id = t.rows[0].identity ? (await c.query<{ id: string }>('SELECT id::text AS id FROM wal_shard_identity')).rows[0]?.id : undefined;
      if (held && !(given.length === 1 && given[0].id === id)) {
        throw new FlowError(
          'CONFIG_ERROR',
          `the PostgreSQL WAL in the metastore's database still holds entries, and this broker was given [${describeList(given)}] as its WAL: ` +
            'start without --wal-shard (they are read back and sealed into segments as usual); changing the list is refused (docs/storage.md)',
        );
      }
      for (let i = 0; i < given.length; i++) {
        await c.query('INSERT INTO wal_shard_list (position, shard_id, endpoint) VALUES ($1, $2, $3)', [i, given[i].id, given[i].endpoint]);
      }
      return 'recorded';
    });
  } finally {
    await home.end().catch(() => undefined);
  }
}

/** Opens every shard (in parallel), checks the list, and returns the WAL: one PostgresWal, or a ShardedWal. */
export async function openPostgresWal(opts: OpenPostgresWalOptions): Promise<WriteAheadLog> {
  const urls = opts.shards.length > 0 ? opts.shards : [opts.metastoreUrl];
  const commitLatency = new LatencyHistogram();
  const walOpts = (url: string): PostgresWalOptions => ({
    ...opts.pg,
    url,
    commitLatency,
    ...(opts.maxGroupBytes !== undefined ? { maxGroupBytes: opts.maxGroupBytes } : {}),
    ...(opts.logger ? { logger: opts.logger } : {}),
  });
  const settled = await Promise.allSettled(urls.map((url) => PostgresWal.open(walOpts(url))));
  const shards = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  try {
    const failed = settled.findIndex((s) => s.status === 'rejected');
    if (failed >= 0) {
      const why = (settled[failed] as PromiseRejectedResult).reason as Error;
      throw urls.length > 1 ? new FlowError('STORAGE_ERROR', `WAL shard ${failed}: ${why.message}`, { cause: why }) : why;
    }
    const outcome = await checkShardList(
      opts.metastoreUrl,
      shards.map((s) => ({ id: s.shardId, endpoint: s.endpoint })),
      opts.pg,
    );
    if (outcome === 'recorded' && urls.length > 1) opts.logger?.info({ shards: shards.map((s) => s.endpoint) }, 'WAL shard list recorded in the metastore');
    return shards.length === 1 ? shards[0] : new ShardedWal(shards, commitLatency);
  } catch (err) {
    await Promise.all(shards.map((s) => s.close().catch(() => undefined)));
    throw err;
  }
}
