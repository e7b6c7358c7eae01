/**
 * A log engine and a routing core over given stores, opened as the broker opens them (log, engine, stream
 * definitions loaded, recovery finished), with the background task every 20 ms so that tests see seals soon.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { Engine } from '../../src/core/index.js';
import { LogManager, type LogOptions } from '../../src/storage/log/index.js';
import { SqliteMetastore, type Metastore } from '../../src/storage/metastore/index.js';
import { FsObjectStore, type ObjectStore } from '../../src/storage/objects/index.js';
import { FileWal, type WriteAheadLog } from '../../src/storage/wal/index.js';

export async function openLogEngine(
  stores: { wal: WriteAheadLog; objects: ObjectStore; metastore: Metastore },
  logger: Logger,
  options: Partial<LogOptions> = {},
): Promise<{ log: LogManager; engine: Engine }> {
  const log = await LogManager.open({ ...stores, logger, options: { checkIntervalMs: 20, ...options } });
  const engine = new Engine(log, stores.metastore);
  await engine.load();
  log.finishRecovery();
  return { log, engine };
}

/**
 * openLogEngine over the embedded stores in `dir` (SQLite metastore, file objects, file WAL; made if missing), with
 * a close() of everything it opened.
 */
export async function openFsLogEngine(dir: string, logger: Logger, options: Partial<LogOptions> = {}) {
  mkdirSync(dir, { recursive: true });
  const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
  const objects = new FsObjectStore(join(dir, 'objects'));
  const wal = await FileWal.open(join(dir, 'wal'));
  const { log, engine } = await openLogEngine({ wal, objects, metastore }, logger, options);
  return {
    log,
    engine,
    async close() {
      await log.close();
      await wal.close();
      await objects.close();
      await metastore.close();
    },
  };
}
