/**
 * Log compaction (cleanup.policy=compact): how fast the cleaner rewrites sealed segments, and what it costs the
 * producers meanwhile. A LogManager over a file WAL (fsync on), SQLite and the fs object store, as the embedded
 * broker has them: a compacted stream is written with `keys` keys in many versions and sealed; then one producer
 * appends 4 KiB batches to another stream, each awaiting its acknowledgement, for `seconds` without the cleaner
 * (baseline), then while a cleaner pass runs over the written data (paced to `bytesPerSec`, 0: unpaced). Figures:
 * the pass's MB/s (segment bytes read, over its duration), the bytes it saved, and produce → ack p50 / p99 in both
 * phases.
 *
 * Run alone: `node dist/bench/compaction.js [MiB [bytesPerSec]]`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { pino } from 'pino';
import { encodeBatch, Engine } from '../src/core/index.js';
import { LogManager } from '../src/storage/log/index.js';
import { SqliteMetastore } from '../src/storage/metastore/index.js';
import { FsObjectStore } from '../src/storage/objects/index.js';
import { FileWal } from '../src/storage/wal/index.js';
import { nowS } from './util.js';

export interface CompactionBenchOptions {
  /** Bytes written to the compacted partition before the pass. Default 128 MiB. */
  bytes?: number;
  /** Distinct keys. Default 10,000 (with 128 MiB of 1 KiB records: about 13 versions each). */
  keys?: number;
  /** The cleaner's pace (--compaction-bytes-per-sec); 0: unpaced. Default 0. */
  bytesPerSec?: number;
  /** Length of the baseline produce phase, s. Default 3. */
  seconds?: number;
}

export interface CompactionBenchResult {
  writtenMb: number;
  segments: number;
  passSeconds: number;
  /** Segment bytes the pass read, per second of the pass (MB/s). */
  mbPerSec: number;
  savedMb: number;
  removedRecords: number;
  baseline: { p50: number; p99: number; appends: number };
  during: { p50: number; p99: number; appends: number };
}

const pct = (xs: number[], q: number): number => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

export async function measureCompaction(o: CompactionBenchOptions = {}): Promise<CompactionBenchResult> {
  const total = o.bytes ?? 128 * 1024 * 1024;
  const keys = o.keys ?? 10_000;
  const seconds = o.seconds ?? 3;
  const dir = await mkdtemp(join(tmpdir(), 'flowmq-bench-compaction-'));
  const logger = pino({ level: 'warn' });
  const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
  const wal = await FileWal.open(join(dir, 'wal'));
  const objects = new FsObjectStore(join(dir, 'objects'));
  const log = await LogManager.open({
    wal,
    objects,
    metastore,
    logger,
    options: { segmentBytes: 4 * 1024 * 1024, recentBytes: 0, compactionBytesPerSec: o.bytesPerSec ?? 0, compactionDeleteDelayMs: 0 },
  });
  const engine = new Engine(log, metastore);
  await engine.load();
  log.finishRecovery();
  try {
    // Made "delete" (no retention) so that no background pass starts before the measured one.
    await engine.createStream({ name: 'table', partitions: 1 });
    await engine.createStream({ name: 'other', partitions: 1 });
    const value = Buffer.alloc(1000, 0x62);
    let written = 0;
    let n = 0;
    let window: Array<Promise<void>> = [];
    while (written < total) {
      const batch = encodeBatch(
        Array.from({ length: 16 }, (_, i) => ({ key: Buffer.from(`key-${(n * 16 + i) % keys}`), value, headers: [], timestamp: 1_000_000 + n })),
      );
      window.push(engine.produce('table', 0, batch).durable);
      written += batch.length;
      n++;
      if (window.length >= 64) {
        await Promise.all(window);
        window = [];
      }
    }
    await Promise.all(window);
    await log.flushAll();
    const segments = (await metastore.listSegments('table', 0)).length;

    // One producer on another stream: a 4 KiB batch at a time, each awaiting its acknowledgement.
    const small = encodeBatch(Array.from({ length: 4 }, (_, i) => ({ key: Buffer.from(`p-${i}`), value, headers: [], timestamp: Date.now() })));
    const produceWhile = async (going: () => boolean): Promise<number[]> => {
      const lat: number[] = [];
      while (going()) {
        const t = nowS();
        await engine.produce('other', 0, small).durable;
        lat.push((nowS() - t) * 1000);
      }
      return lat;
    };
    const until = nowS() + seconds;
    const base = await produceWhile(() => nowS() < until);

    await engine.setSettings('table', { configs: { 'cleanup.policy': 'compact' } });
    let done = false;
    const t0 = nowS();
    const pass = log.compact('table').finally(() => (done = true));
    const during = await produceWhile(() => !done);
    await pass;
    const passSeconds = nowS() - t0;
    const s = log.stats;
    return {
      writtenMb: written / 1e6,
      segments,
      passSeconds,
      mbPerSec: s.compactedBytes / 1e6 / passSeconds,
      savedMb: s.compactionSavedBytes / 1e6,
      removedRecords: s.compactedRecords,
      baseline: { p50: pct(base, 0.5), p99: pct(base, 0.99), appends: base.length },
      during: { p50: pct(during, 0.5), p99: pct(during, 0.99), appends: during.length },
    };
  } finally {
    await log.close(60_000);
    await wal.close();
    await objects.close();
    await metastore.close();
    await rm(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const mib = Number(process.argv[2] ?? 128);
  const pace = Number(process.argv[3] ?? 0);
  console.log(JSON.stringify(await measureCompaction({ bytes: mib * 1024 * 1024, bytesPerSec: pace }), null, 2));
}
