/**
 * Cold replay: how fast a stream is read back from the object store by a consumer that starts at offset 0 after a
 * restart (nothing of it in memory, the WAL trimmed, the block cache empty). The log is written through one
 * LogManager, sealed and closed, then read by a fresh one, one partition after another, with reads of `fetchBytes`
 * as a Kafka fetch of one partition would ask (max.partition.fetch.bytes, 1 MiB by default).
 *
 * `measureColdReplay({ openObjects })` takes a factory so that the read runs on a new store (a cold cache);
 * `s3ColdReplay()` runs it on s3rver with the S3 store behind the block cache, as the broker is configured with
 * `--object-store s3://… --object-cache-bytes …`. Run alone: `node dist/bench/cold-replay.js [MiB [readAheadBlocks [blockKiB]]]`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { pino } from 'pino';
import { encodeBatch, Engine } from '../src/core/index.js';
import { LogManager } from '../src/storage/log/index.js';
import { SqliteMetastore } from '../src/storage/metastore/index.js';
import { CachedObjectStore, FsObjectStore, S3ObjectStore, type ObjectStore } from '../src/storage/objects/index.js';
import { FileWal } from '../src/storage/wal/index.js';
import { startS3 } from '../test/helpers/s3.js';
import { nowS } from './util.js';

export interface ColdReplayOptions {
  /** Opens the object store; called once to write and once (a fresh, cold store) to read. */
  openObjects: () => Promise<ObjectStore>;
  /** Bytes of batches written, over all partitions. Default 256 MiB. */
  bytes?: number;
  partitions?: number;
  /** Default 16 MiB (the broker's default). */
  segmentBytes?: number;
  /** Bytes asked for per read. Default 1 MiB. */
  fetchBytes?: number;
  /** Records of 1 KiB per batch. Default 16. */
  recordsPerBatch?: number;
}

export interface ColdReplayResult {
  bytes: number;
  seconds: number;
  mbPerSec: number;
  reads: number;
  segments: number;
  /** The read store's figures (cache hits, read-ahead, GETs by operation). */
  figures: Record<string, unknown> | null;
}

export async function measureColdReplay(opts: ColdReplayOptions): Promise<ColdReplayResult> {
  const total = opts.bytes ?? 256 * 1024 * 1024;
  const partitions = opts.partitions ?? 1;
  const segmentBytes = opts.segmentBytes ?? 16 * 1024 * 1024;
  const fetchBytes = opts.fetchBytes ?? 1024 * 1024;
  const perBatch = opts.recordsPerBatch ?? 16;
  const dir = await mkdtemp(join(tmpdir(), 'flowmq-cold-replay-'));
  const logger = pino({ level: 'warn' });
  const open = async (objects: ObjectStore) => {
    const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
    const wal = await FileWal.open(join(dir, 'wal'));
    const log = await LogManager.open({ wal, objects, metastore, logger, options: { segmentBytes, recentBytes: 0, maxUnsealedBytes: 4 * segmentBytes } });
    const engine = new Engine(log, metastore);
    await engine.load();
    log.finishRecovery();
    return {
      log,
      engine,
      metastore,
      close: async () => {
        await log.close(60_000);
        await wal.close();
        await objects.close();
        await metastore.close();
      },
    };
  };
  try {
    // Write: batches of 1 KiB records, acknowledged a window at a time.
    const w = await open(await opts.openObjects());
    await w.engine.createStream({ name: 'replay', partitions });
    const value = Buffer.alloc(1024, 0x61);
    let written = 0;
    let n = 0;
    let window: Array<Promise<void>> = [];
    while (written < total) {
      const batch = encodeBatch(Array.from({ length: perBatch }, (_, i) => ({ key: null, value, headers: [], timestamp: 1_000_000 + n * perBatch + i })));
      window.push(w.engine.produce('replay', n % partitions, batch).durable);
      written += batch.length;
      n++;
      if (window.length >= 64) {
        await Promise.all(window);
        window = [];
      }
    }
    await Promise.all(window);
    await w.log.flushAll();
    await w.close();

    // Read, cold.
    const objects = await opts.openObjects();
    const r = await open(objects);
    let bytes = 0;
    let reads = 0;
    let segments = 0;
    const t0 = nowS();
    for (let p = 0; p < partitions; p++) {
      segments += (await r.metastore.listSegments('replay', p)).length;
      let offset = 0;
      for (;;) {
        const batches = await r.engine.read('replay', p, offset, fetchBytes);
        reads++;
        if (batches.length === 0) break;
        for (const b of batches) bytes += b.length;
        // The next offset: the last batch's base offset + its record count (lastOffsetDelta + 1).
        const last = batches[batches.length - 1];
        offset = Number(last.readBigInt64BE(0)) + last.readInt32BE(23) + 1;
      }
    }
    const seconds = nowS() - t0;
    const figures = objects.figures?.() ?? null;
    await r.close();
    return { bytes, seconds, mbPerSec: bytes / 1e6 / seconds, reads, segments, figures };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Cold replay from s3rver (started here, in a process of its own) through the block cache. */
export async function s3ColdReplay(
  o: Omit<ColdReplayOptions, 'openObjects'> & { cacheBytes?: number; readAheadBlocks?: number; blockBytes?: number } = {},
): Promise<ColdReplayResult> {
  const s3 = await startS3();
  try {
    return await measureColdReplay({
      ...o,
      openObjects: async () =>
        new CachedObjectStore(
          await S3ObjectStore.open({
            bucket: s3.bucket,
            prefix: 'cold-replay',
            endpoint: s3.endpoint,
            region: s3.region,
            accessKeyId: s3.accessKeyId,
            secretAccessKey: s3.secretAccessKey,
            forcePathStyle: true,
          }),
          { maxBytes: o.cacheBytes ?? 64 * 1024 * 1024, readAheadBlocks: o.readAheadBlocks, blockBytes: o.blockBytes },
        ),
    });
  } finally {
    await s3.close();
  }
}

/** The same replay from the filesystem store (the embedded configuration), for comparison. */
export async function fsColdReplay(o: Omit<ColdReplayOptions, 'openObjects'> = {}): Promise<ColdReplayResult> {
  const root = await mkdtemp(join(tmpdir(), 'flowmq-cold-replay-fs-'));
  try {
    return await measureColdReplay({ ...o, openObjects: async () => new FsObjectStore(root) });
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const mib = Number(process.argv[2] ?? 256);
  const ra = process.argv[3] === undefined ? undefined : Number(process.argv[3]);
  const blockKiB = process.argv[4] === undefined ? undefined : Number(process.argv[4]);
  const show = (name: string, r: ColdReplayResult): void =>
    console.log(
      `${name}: ${(r.bytes / 1048576).toFixed(0)} MiB in ${r.seconds.toFixed(2)} s = ${r.mbPerSec.toFixed(1)} MB/s (${r.reads} reads, ${r.segments} segments)`,
    );
  const fsr = await fsColdReplay({ bytes: mib * 1024 * 1024 });
  show('fs', fsr);
  const s3r = await s3ColdReplay({ bytes: mib * 1024 * 1024, readAheadBlocks: ra, blockBytes: blockKiB === undefined ? undefined : blockKiB * 1024 });
  show('s3 (s3rver) + cache', s3r);
  console.log(JSON.stringify(s3r.figures));
}
