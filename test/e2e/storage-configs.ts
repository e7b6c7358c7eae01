/**
 * The storage configurations the most important end-to-end scenarios run on: the embedded default (SQLite, WAL
 * files, objects in the data directory) and the shared backends (a real PostgreSQL as metastore and WAL, s3rver
 * as the object store). A test file writes its describe blocks once per configuration:
 *
 *   for (const cfg of storageConfigs()) describe(`... [${cfg.name}]`, () => { ...brokerArgs()... });
 *
 * One PostgreSQL server and one s3rver serve a whole test file (started by the first broker that needs them,
 * stopped by a file-level after hook that storageConfigs registers); each broker gets a database and an object
 * prefix of its own, so brokers of one file never see each other's data. A restart of a broker keeps its options
 * (FlowmqProcess.restart), hence its database and prefix.
 *
 * FLOWMQ_E2E_STORAGE=embedded (or postgres+s3) runs one configuration only, e.g. on a machine without PostgreSQL.
 */
import { after } from 'node:test';
import { ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';
import { startS3, type S3TestServer } from '../helpers/s3.js';

export interface SharedServices {
  pg: PostgresServer;
  s3: S3TestServer;
}

export interface StorageConfig {
  name: 'embedded' | 'postgres+s3';
  /** True when the metastore, the WAL and the objects live outside the data directory. */
  shared: boolean;
  /**
   * Options for a new broker (beyond data directory and ports). On shared storage: a fresh database and object
   * prefix at each call; `extra` is appended (e.g. small segments).
   */
  brokerArgs(extra?: string[]): Promise<string[]>;
  /** The running services (shared configuration only; starts them if no broker did yet). */
  services(): Promise<SharedServices>;
}

let counter = 0;

/** Options of a broker on PostgreSQL (metastore and WAL in `dbUrl`) and s3rver (objects under `prefix`). */
export function sharedArgs(svc: SharedServices, dbUrl: string, prefix: string): string[] {
  return [
    '--metastore',
    dbUrl,
    '--wal',
    'postgres',
    '--object-store',
    `s3://${svc.s3.bucket}/${prefix}`,
    '--s3-endpoint',
    svc.s3.endpoint,
    '--s3-region',
    svc.s3.region,
    '--s3-access-key-id',
    svc.s3.accessKeyId,
    '--s3-secret-access-key',
    svc.s3.secretAccessKey,
  ];
}

/** A PostgreSQL server and an s3rver for one test file, started on first use, stopped after the file's tests. */
export function sharedServices(): () => Promise<SharedServices> {
  let started: Promise<SharedServices> | null = null;
  after(async () => {
    if (started === null) return;
    const svc = await started.catch(() => null);
    if (svc === null) return;
    await Promise.all([svc.pg.stop(), svc.s3.close()]);
  });
  return () => {
    started ??= (async () => {
      const [pg, s3] = await Promise.all([startPostgres(), startS3()]);
      return { pg, s3 };
    })();
    return started;
  };
}

/** The configurations to run, selected by FLOWMQ_E2E_STORAGE (default: both). */
export function storageConfigs(): StorageConfig[] {
  const services = sharedServices();
  const all: StorageConfig[] = [
    {
      name: 'embedded',
      shared: false,
      brokerArgs: async (extra = []) => [...extra],
      services: () => Promise.reject(new Error('embedded storage has no services')),
    },
    {
      name: 'postgres+s3',
      shared: true,
      services,
      brokerArgs: async (extra = []) => {
        const svc = await services();
        const n = ++counter;
        const db = await svc.pg.createDatabase(`e2e_${process.pid}_${n}`);
        return [...sharedArgs(svc, db, `e2e-${process.pid}-${n}`), ...extra];
      },
    },
  ];
  const only = process.env.FLOWMQ_E2E_STORAGE;
  if (only === undefined || only === '') return all;
  const picked = all.filter((c) => c.name === only);
  if (picked.length === 0) throw new Error(`FLOWMQ_E2E_STORAGE: unknown configuration "${only}" (embedded, postgres+s3)`);
  return picked;
}

/** The value of option `name` in a broker's arguments. */
export function argValue(args: readonly string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

/** Keys of the objects a broker started with `args` (on s3rver) keeps under its prefix. */
export async function listObjects(svc: SharedServices, args: readonly string[]): Promise<string[]> {
  const target = argValue(args, '--object-store') ?? '';
  const prefix = target.replace(/^s3:\/\/[^/]+\/?/, '');
  const client = new S3Client({
    endpoint: svc.s3.endpoint,
    region: svc.s3.region,
    forcePathStyle: true,
    credentials: { accessKeyId: svc.s3.accessKeyId, secretAccessKey: svc.s3.secretAccessKey },
  });
  try {
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const r = await client.send(
        new ListObjectsV2Command({ Bucket: svc.s3.bucket, Prefix: prefix === '' ? undefined : `${prefix}/`, ContinuationToken: token }),
      );
      for (const o of r.Contents ?? []) if (o.Key) keys.push(o.Key);
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token !== undefined);
    return keys;
  } finally {
    client.destroy();
  }
}

/** The storage figures of GET /api/v1/broker that these tests read. */
export interface StorageFigures {
  storage: {
    wal: string;
    walBytes: number;
    log: {
      sealedSegments: number;
      objectReads: number;
      walTrimmedBytes: number;
      recoveredBatches: number;
      adoptedSegments: number;
      fencedPartitions: number;
      throttledAppends: number;
      refusedAppends: number;
      failedAppends: number;
      failedSeals: number;
    };
    objectFigures?: { inner?: { operations: Record<string, { requests: number; bytes: number; errors: number; retries: number }> } };
  };
}
