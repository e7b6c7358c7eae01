/**
 * A log engine and a routing core over given stores, opened as the broker opens them (log, engine, stream
 * definitions loaded, recovery finished), with the background task every 20 ms so that tests see seals soon.
 */
import type { Logger } from 'pino';
import { Engine } from '../../src/core/index.js';
import { LogManager, type LogOptions } from '../../src/storage/log/index.js';
import type { Metastore } from '../../src/storage/metastore/index.js';
import type { ObjectStore } from '../../src/storage/objects/index.js';
import type { WriteAheadLog } from '../../src/storage/wal/index.js';

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
