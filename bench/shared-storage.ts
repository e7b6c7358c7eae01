/**
 * The shared-storage configuration of the storage scenarios: FlowMQ with a PostgreSQL metastore and WAL and an
 * S3 object store, against a real PostgreSQL (Debian's package, fsync and full-page writes on, as a production
 * server runs) and s3rver, both on this machine, started once per run and stopped by cleanupAll.
 *
 * Every broker gets a database and a bucket prefix of its own, so brokers of one run never see each other's data.
 */
import { onCleanup } from './brokers.js';
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
    onCleanup(() => postgres.stop());
    const s3 = await startS3({ bucket: 'flowmq-bench' });
    onCleanup(() => s3.close());
    return { postgres, s3 };
  })();
  return services;
}

/** Broker options for a fresh database and bucket prefix: PostgreSQL metastore and WAL, S3 objects. */
export async function sharedStorageArgs(): Promise<string[]> {
  const { postgres, s3 } = await sharedServices();
  const n = ++brokers;
  const db = await postgres.createDatabase(`bench_${n}`);
  return [
    '--metastore', db,
    '--wal', 'postgres',
    '--object-store', `s3://${s3.bucket}/broker-${n}`,
    '--s3-endpoint', s3.endpoint,
    '--s3-region', s3.region,
    '--s3-access-key-id', s3.accessKeyId,
    '--s3-secret-access-key', s3.secretAccessKey,
  ];
}
