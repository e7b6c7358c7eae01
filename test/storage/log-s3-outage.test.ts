/**
 * An outage of the object store under a producing LogManager (file WAL, SQLite metastore, S3ObjectStore behind the
 * block cache, on s3rver): while the store is down, acknowledgements keep coming from the WAL until the unsealed
 * tails reach maxUnsealedBytes, then appends wait (none fails); the log logs its failed seals and retries them;
 * once the store is back on the same port it catches up by itself, and everything acknowledged reads back byte
 * for byte from the objects after a restart.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { decodeBatch, encodeBatch } from '../../src/core/index.js';
import type { LogOptions } from '../../src/storage/log/index.js';
import { SqliteMetastore } from '../../src/storage/metastore/index.js';
import { CachedObjectStore, S3ObjectStore } from '../../src/storage/objects/index.js';
import { FileWal } from '../../src/storage/wal/index.js';
import { startS3, type S3TestServer } from '../helpers/s3.js';
import { openLogEngine } from '../helpers/log-engine.js';

async function until(cond: () => boolean, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A payload of its own for each batch, so that a misplaced or altered byte shows. */
const payload = (i: number): Buffer => {
  const b = Buffer.alloc(1000 + (i % 7) * 13);
  for (let k = 0; k < b.length; k++) b[k] = (k * 17 + i * 101) & 0xff;
  return b;
};
const batchOf = (i: number): Buffer => encodeBatch([{ key: Buffer.from(`k${i}`), value: payload(i), headers: [], timestamp: 1_000_000 + i }]);

describe('LogManager over S3 during an outage of the object store', () => {
  let s3: S3TestServer;
  let dir = '';
  before(async () => {
    s3 = await startS3();
    dir = mkdtempSync(join(tmpdir(), 'flowmq-s3-outage-'));
  });
  after(async () => {
    await s3.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Log lines at warn and above, as objects. */
  const warnings: Array<{ msg: string; partition?: string }> = [];
  const logger = pino(
    { level: 'warn' },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const line of chunk.toString().split('\n')) if (line.trim() !== '') warnings.push(JSON.parse(line) as { msg: string });
        done();
      },
    }),
  );

  const open = async (options: Partial<LogOptions>) => {
    const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
    const s3store = await S3ObjectStore.open({
      bucket: s3.bucket,
      prefix: 'outage',
      endpoint: s3.endpoint,
      region: s3.region,
      accessKeyId: s3.accessKeyId,
      secretAccessKey: s3.secretAccessKey,
      forcePathStyle: true,
      maxAttempts: 2,
      retryBaseDelayMs: 20,
      requestTimeoutMs: 5000,
      logger,
    });
    const objects = new CachedObjectStore(s3store, { maxBytes: 4 * 1024 * 1024, blockBytes: 64 * 1024 });
    const wal = await FileWal.open(join(dir, 'wal'));
    const { log, engine } = await openLogEngine({ wal, objects, metastore }, logger, options);
    return {
      s3store,
      log,
      engine,
      metastore,
      async close() {
        await log.close();
        await wal.close();
        await objects.close();
        await metastore.close();
      },
    };
  };

  it('keeps every acknowledged batch, throttles instead of failing, and catches up when the store returns', async () => {
    const batchBytes = batchOf(0).length;
    const maxUnsealedBytes = 40 * batchBytes;
    const s = await open({ segmentBytes: 8 * batchBytes, maxUnsealedBytes, recentBytes: 0 });
    await s.engine.createStream({ name: 'o', partitions: 2 });
    const acked = new Set<number>();
    const failed: unknown[] = [];
    const produce = (i: number): Promise<void> =>
      s.engine.produce('o', i % 2, batchOf(i)).durable.then(
        () => void acked.add(i),
        (err: unknown) => void failed.push(err),
      );

    // The store is up: segments are sealed into it.
    for (let i = 0; i < 30; i++) await produce(i);
    await until(() => s.log.stats.sealedSegments >= 2, 'segments sealed while the store is up');

    await s3.stop();
    // Four producers, each sending its next batch once the last is acknowledged (as clients with a bounded
    // window do), until far more than maxUnsealedBytes was sent.
    const total = 130;
    let next = 30;
    const producers = Array.from({ length: 4 }, async () => {
      while (next < total) await produce(next++);
    });
    // They get acknowledgements from the WAL until the tails reach the limit, then each waits for its own.
    const durable = (): number => s.engine.offsets('o', 0).highWatermark + s.engine.offsets('o', 1).highWatermark;
    await until(() => next - acked.size === 4 && durable() === next, 'the producers held back, their batches durable');
    await until(() => s.log.stats.failedSeals >= 3, 'seals tried and failed during the outage');
    // (A seal whose upload ended just before the stop may have been committed after it: counted from here.)
    const sealedBefore = s.log.stats.sealedSegments;
    assert.ok(
      warnings.some((w) => w.msg === 'segment flush failed; will retry'),
      'the failure is logged',
    );
    assert.equal(failed.length, 0, `no append failed: ${failed.map(String).join('; ')}`);
    assert.ok(s.log.stats.throttledAppends >= 4, 'appends over the limit wait');
    assert.ok(next < total, 'the producers are slowed down');
    const unsealed = s.log.describe('o').reduce((n, p) => n + p.tailBytes, 0);
    assert.ok(unsealed > maxUnsealedBytes && unsealed <= maxUnsealedBytes + 4 * batchBytes, `${unsealed} bytes waiting in the hot tier`);
    assert.ok(acked.size > 30, `acknowledged ${acked.size} batches, ${acked.size - 30} of them during the outage`);
    await until(() => s.log.stats.failedSeals >= 5, 'more seals tried and failed');
    assert.equal(s.log.stats.sealedSegments, sealedBefore, 'nothing sealed while the store is down');

    // The store returns on the same port: the log catches up by itself, every producer gets its acknowledgement.
    await s3.start();
    await Promise.all(producers);
    assert.equal(failed.length, 0);
    assert.equal(acked.size, total);
    await until(() => s.log.describe('o').every((p) => p.tailBytes < 8 * batchBytes), 'the backlog sealed without help');
    await s.log.flushAll();
    for (const p of s.log.describe('o')) assert.equal(p.flushedOffset, p.highWatermark, `partition ${p.partition} all in objects`);
    const figures = s.s3store.figures() as { operations: Record<string, { errors: number; requests: number }> };
    assert.ok(figures.operations.put.errors > 0, 'the store saw the failed uploads');
    for (let p = 0; p < 2; p++) {
      const segs = await s.metastore.listSegments('o', p);
      for (let k = 1; k < segs.length; k++) assert.equal(segs[k].baseOffset, segs[k - 1].endOffset, 'segments are contiguous');
      assert.equal(segs[segs.length - 1].endOffset, total / 2);
    }
    await s.close();

    // After a restart with nothing left in the WAL, every acknowledged batch reads back from the objects, exactly.
    const r = await open({ segmentBytes: 8 * batchBytes, maxUnsealedBytes });
    for (let p = 0; p < 2; p++) {
      const values: Buffer[] = [];
      let offset = 0;
      for (;;) {
        const batches = await r.engine.read('o', p, offset, 16 * 1024);
        if (batches.length === 0) break;
        for (const b of batches) {
          for (const rec of decodeBatch(b)) {
            values.push(rec.value!);
            offset = rec.offset + 1;
          }
        }
      }
      const expected = Array.from({ length: total }, (_, i) => i).filter((i) => i % 2 === p);
      assert.equal(values.length, expected.length, `partition ${p}: record count`);
      expected.forEach((i, k) => assert.ok(values[k].equals(payload(i)), `partition ${p}: record ${k} (batch ${i})`));
    }
    assert.ok(r.log.stats.objectReads > 0, 'read from the object store');
    await r.close();
  });
});
