/**
 * Opens the storage backends a broker is configured with: the metastore (SQLite in the data directory, or
 * PostgreSQL), the hot tier (WAL files in the data directory, or a PostgreSQL table) and the object store (a
 * directory, or an S3-compatible bucket behind a block cache). Embedded is the default and needs no service.
 *
 * A backend that cannot be reached at start fails the start with one line naming it (the CLI exits 1); a
 * malformed setting never gets here (the config rejects it, exit 2).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config/index.js';
import { redactUrl } from '../config/index.js';
import { FlowError, type QueueStore } from '../core/index.js';
import { LogManager, type LogOptions } from './log/index.js';
// The embedded backends from their own files, and the service backends (PostgreSQL, S3) imported only when
// configured: the barrels would load pg and the AWS SDK, ~100 of the ~290 ms an embedded broker spent loading
// modules before it listened (test/storage/open-imports.test.ts keeps them off the start path).
import type { Metastore } from './metastore/index.js';
import { SqliteMetastore } from './metastore/sqlite.js';
import type { ObjectStore } from './objects/index.js';
import { CachedObjectStore } from './objects/cache.js';
import { FsObjectStore } from './objects/fs-store.js';
import { SqliteQueueStore } from './queues/sqlite-queue-store.js';
import type { WriteAheadLog } from './wal/index.js';
import { FileWal } from './wal/file-wal.js';
import { PartitionWal } from './wal/partition-wal.js';
import { SQLITE_METASTORE_FILE } from './metastore/sqlite-peek.js';

export interface Storage {
  metastore: Metastore;
  objects: ObjectStore;
  /**
   * Where durable queues keep their messages: SQLite (`queues.db` in the data directory, run by a worker thread)
   * beside a SQLite metastore, PostgreSQL beside a PostgreSQL one.
   */
  queues: QueueStore;
  /**
   * Settles once every backend opened in the background can be used (the SQLite queue store's worker thread boots
   * while the broker opens the rest); rejects, naming the backend, when one cannot be opened.
   */
  ready: Promise<void>;
  /** The configured WAL; `layout` picks the file layout (the broker opens the other one to drain it). */
  openWal(layout?: 'partition' | 'shared'): Promise<WriteAheadLog>;
  /** One phrase for the start-up line, e.g. "postgres metastore, postgres WAL, s3 objects (bucket/prefix)". */
  readonly description: string;
  /**
   * Figures of the backends that keep some, for `GET /api/v1/broker` beside the backends' kinds (`storage.metastore`,
   * `storage.objects`): `metastoreFigures`, `objectFigures`.
   */
  figures(): Record<string, unknown>;
  /** Closes the queue store, the object store and the metastore (the broker closes the WAL it opened). */
  close(): Promise<void>;
}

/** Names the service in a failure to reach it at start, so the one line the CLI prints says what to fix. */
async function reach<T>(what: string, open: () => Promise<T>): Promise<T> {
  try {
    return await open();
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new FlowError('STORAGE_ERROR', `cannot open the ${what}: ${why}`, { cause: err });
  }
}

export async function openStorage(config: Config, dataDir: string, logger: Logger): Promise<Storage> {
  const opened: Array<{ close(): Promise<void> }> = [];
  /** The SQLite queue store's worker boots beside the rest of the start (Storage.ready). */
  let ready: Promise<void> = Promise.resolve();
  const startSqliteQueues = (file: string): QueueStore => {
    const started = SqliteQueueStore.start(file);
    ready = reach(`queue store ${file}`, () => started.ready);
    ready.catch(() => undefined);
    return started.store;
  };
  try {
    const pg = config.metastore.kind === 'postgres' ? config.metastore : null;
    const pgOptions = pg ? { url: pg.url, poolSize: config.pgPoolSize, statementTimeoutMs: config.pgStatementTimeout, connectTimeoutMs: 10_000 } : null;
    const metastore: Metastore = pgOptions
      ? await reach(`PostgreSQL metastore at ${redactUrl(pgOptions.url)}`, () =>
          import('./metastore/postgres.js').then(({ PostgresMetastore }) =>
            PostgresMetastore.open({ ...pgOptions, logger: logger.child({ component: 'metastore' }) }),
          ),
        )
      : SqliteMetastore.open(join(dataDir, SQLITE_METASTORE_FILE));
    opened.push(metastore);

    const queues: QueueStore = pgOptions
      ? await reach(`PostgreSQL queue store at ${redactUrl(pgOptions.url)}`, () =>
          import('./queues/postgres-queue-store.js').then(({ PostgresQueueStore }) =>
            PostgresQueueStore.open({ ...pgOptions, logger: logger.child({ component: 'queues' }) }),
          ),
        )
      : startSqliteQueues(join(dataDir, 'queues.db'));
    opened.push(queues);

    let objects: ObjectStore;
    let objectsDescription = 'filesystem objects';
    if (config.objectStore.kind === 's3') {
      const { bucket, prefix } = config.objectStore;
      const endpoint = config.s3Endpoint ?? `AWS S3 (${config.s3Region})`;
      const { S3ObjectStore } = await import('./objects/s3-store.js');
      const s3 = await reach(`S3 object store s3://${bucket}/${prefix} at ${endpoint}`, () =>
        S3ObjectStore.open({
          bucket,
          prefix,
          ...(config.s3Endpoint !== null ? { endpoint: config.s3Endpoint } : {}),
          region: config.s3Region,
          ...(config.s3AccessKeyId !== null && config.s3SecretAccessKey !== null
            ? { accessKeyId: config.s3AccessKeyId, secretAccessKey: config.s3SecretAccessKey }
            : {}),
          forcePathStyle: config.s3PathStyle,
          requestTimeoutMs: config.s3RequestTimeout,
          maxAttempts: config.s3MaxAttempts,
          logger: logger.child({ component: 'objects' }),
        }),
      );
      // Cold reads come back over the network: blocks are cached and read ahead (see cache.ts). The local store
      // has the page cache for that.
      objects = config.objectCacheBytes > 0 ? new CachedObjectStore(s3, { maxBytes: config.objectCacheBytes }) : s3;
      objectsDescription = `s3 objects (s3://${bucket}/${prefix})`;
    } else {
      objects = new FsObjectStore(join(dataDir, 'objects'));
    }
    opened.push(objects);

    const walLogger = logger.child({ component: 'wal' });
    const openWal = (layout: 'partition' | 'shared' = config.walLayout): Promise<WriteAheadLog> => {
      if (config.wal === 'object') {
        if (!pgOptions) throw new FlowError('CONFIG_ERROR', 'wal object needs --metastore postgres://...');
        return reach(`object WAL indexed at ${redactUrl(pgOptions.url)}`, () =>
          import('./wal/object-wal.js').then(({ ObjectWal }) =>
            ObjectWal.open({ ...pgOptions, logger: walLogger, objects, windowMs: config.walObjectWindow, maxObjectBytes: config.walObjectMaxBytes }),
          ),
        );
      }
      if (config.wal === 'postgres') {
        if (!pgOptions) throw new FlowError('CONFIG_ERROR', 'wal postgres needs --metastore postgres://...');
        const shards = config.walShards;
        const where = shards.length > 0 ? `sharded over ${shards.map(redactUrl).join(', ')}` : `at ${redactUrl(pgOptions.url)}`;
        // Each shard has a pool of its own, sized and timed out as the single WAL's was.
        const { url: _metastoreUrl, ...pgShard } = pgOptions;
        return reach(`PostgreSQL WAL ${where}`, () =>
          import('./wal/shard-list.js').then(({ openPostgresWal }) => openPostgresWal({ metastoreUrl: pgOptions.url, shards, pg: pgShard, logger: walLogger })),
        );
      }
      return layout === 'partition'
        ? PartitionWal.open(join(dataDir, 'wal-partitions'), { fsync: config.walFsync, directIo: config.walDirectIo ?? true, logger: walLogger })
        : FileWal.open(join(dataDir, 'wal'), { fsync: config.walFsync, directIo: config.walDirectIo ?? false, logger: walLogger });
    };

    const walDescription =
      config.wal === 'postgres'
        ? config.walShards.length > 1
          ? `postgres WAL (${config.walShards.length} shards)`
          : 'postgres WAL'
        : config.wal === 'object'
          ? `object WAL (${config.walObjectWindow} ms windows)`
          : `file WAL (${config.walLayout} layout)`;
    const description = `${metastore.kind} metastore, ${walDescription}, ${objectsDescription}`;
    return {
      metastore,
      objects,
      queues,
      ready,
      openWal,
      description,
      figures() {
        const out: Record<string, unknown> = {};
        if (metastore.figures) out.metastoreFigures = metastore.figures();
        if (queues.figures) out.queueStoreFigures = queues.figures();
        if (objects.figures) out.objectFigures = objects.figures();
        return out;
      },
      async close() {
        // The object store first: the metastore is what a later start needs to make sense of what is there.
        for (const s of opened.reverse()) await s.close().catch(() => undefined);
        opened.length = 0;
      },
    };
  } catch (err) {
    for (const s of opened.reverse()) await s.close().catch(() => undefined);
    throw err;
  }
}

/**
 * The file WAL's two layouts keep their files in different directories. Entries left in the other layout's (the
 * broker last ran with it) are sealed into segments before the configured layout opens, so that switching layouts
 * loses nothing. Throws STORAGE_ERROR when some could not be sealed (the broker then starts with the other layout).
 */
export async function sealOtherWalLayout(config: Config, dataDir: string, storage: Storage, logOptions: Partial<LogOptions>, logger: Logger): Promise<void> {
  if (config.wal !== 'file') return;
  const other = config.walLayout === 'partition' ? 'shared' : 'partition';
  if (!existsSync(join(dataDir, other === 'shared' ? 'wal' : 'wal-partitions'))) return;
  const old = await storage.openWal(other);
  try {
    if (old.size() === 0) return;
    const { metastore, objects } = storage;
    const drain = await LogManager.open({ wal: old, objects, metastore, logger, options: logOptions });
    try {
      for (const def of await metastore.listStreams()) await drain.openStream(def);
      drain.finishRecovery();
      await drain.flushAll();
    } finally {
      await drain.close();
    }
    await drain.trimWal();
    if (old.size() > 0) throw new FlowError('STORAGE_ERROR', `the ${other} WAL layout's entries could not all be sealed; start with --wal-layout ${other}`);
    logger.info({ from: other, to: config.walLayout, recoveredBatches: drain.stats.recoveredBatches }, 'WAL of the other layout sealed into segments');
  } finally {
    await old.close();
  }
}
