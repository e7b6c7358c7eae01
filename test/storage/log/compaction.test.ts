/**
 * The log cleaner of compacted streams (src/storage/log/compaction.ts) over a file WAL, a SQLite metastore and each
 * object store (fs, and S3 on s3rver): after many versions per key plus tombstones, a reader from offset 0 sees
 * the last record of each key at its own offset (gaps between), tombstones until delete.retention.ms, keyless
 * records kept, the tail untouched; a reader holding the replaced segment reads it whole until the delayed delete;
 * retention leaves a compact-only stream alone; and everything holds across a restart.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Compression, decodeBatch, encodeBatch, readBatchInfo, type RecordInput } from '../../../src/core/index.js';
import type { LogManager, LogOptions } from '../../../src/storage/log/index.js';
import { SqliteMetastore } from '../../../src/storage/metastore/index.js';
import { FsObjectStore, S3ObjectStore, type ObjectStore } from '../../../src/storage/objects/index.js';
import { FileWal } from '../../../src/storage/wal/index.js';
import { startS3, type S3TestServer } from '../../helpers/s3.js';
import { openLogEngine } from '../../helpers/log-engine.js';

const logger = pino({ level: 'silent' });
const KEYS = 20;
const VERSIONS = 10;
const TOMBSTONED = 5; // keys 0..4 end with a tombstone

/** Every record a reader from `from` sees, as a consumer does: batches in order, records at or past its position. */
async function readAll(log: LogManager, stream: string, from = 0): Promise<Array<{ offset: number; key: string | null; value: string | null }>> {
  const out: Array<{ offset: number; key: string | null; value: string | null }> = [];
  const hw = log.offsets(stream, 0).highWatermark;
  let offset = from;
  while (offset < hw) {
    const batches = await log.read(stream, 0, offset, 64 * 1024);
    assert.ok(batches.length > 0, `a read at ${offset} (high watermark ${hw}) returns batches`);
    for (const b of batches) {
      for (const r of decodeBatch(b)) {
        if (r.offset >= offset) out.push({ offset: r.offset, key: r.key?.toString() ?? null, value: r.value?.toString() ?? null });
      }
      const info = readBatchInfo(b);
      offset = Math.max(offset, info.baseOffset + info.lastOffsetDelta + 1);
    }
  }
  return out;
}

function storeSuite(kind: 'fs' | 's3'): void {
  describe(`log cleaner over ${kind} objects`, () => {
    let s3: S3TestServer | null = null;
    let dir = '';
    before(async () => {
      if (kind === 's3') s3 = await startS3();
      dir = mkdtempSync(join(tmpdir(), `flowmq-compaction-${kind}-`));
    });
    after(async () => {
      await s3?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    const open = async (options: Partial<LogOptions>) => {
      const metastore = SqliteMetastore.open(join(dir, 'meta.db'));
      const objects: ObjectStore =
        s3 === null
          ? new FsObjectStore(join(dir, 'objects'))
          : await S3ObjectStore.open({
              bucket: s3.bucket,
              prefix: 'compaction',
              endpoint: s3.endpoint,
              region: s3.region,
              accessKeyId: s3.accessKeyId,
              secretAccessKey: s3.secretAccessKey,
              forcePathStyle: true,
              logger,
            });
      const wal = await FileWal.open(join(dir, 'wal'));
      const { log, engine } = await openLogEngine({ wal, objects, metastore }, logger, options);
      return {
        log,
        engine,
        objects,
        metastore,
        async close() {
          await log.close();
          await wal.close();
          await objects.close();
          await metastore.close();
        },
      };
    };

    it('keeps the last record per key at its offset, tombstones until delete.retention.ms, and the tail as it is; across a restart', async () => {
      // Small segments (several per partition) and replaced objects kept 3 s for readers (long enough for the read
      // of the old object below on a loaded machine; the wait for its deletion allows 10 s).
      const options = { segmentBytes: 4096, recentBytes: 1024 * 1024, compactionDeleteDelayMs: 3000 };
      let s = await open(options);
      const configs = { 'cleanup.policy': 'compact', 'min.cleanable.dirty.ratio': '0.5', 'delete.retention.ms': '3600000' };
      // Made as "delete" streams (without retention), made compacted once the state before is captured: the background
      // cleaner cannot run first.
      await s.engine.createStream({ name: 'c', partitions: 1 });
      await s.engine.createStream({ name: 'd', partitions: 1 });
      // What a reader must see in the end: by key, the offset and value of its last record.
      const latest = new Map<string, { offset: number; value: string | null }>();
      const keyless: number[] = [];
      let total = 0;
      for (const stream of ['c', 'd']) {
        for (let v = 0; v < VERSIONS; v++) {
          // Four records per batch, every other batch gzip-compressed: the cleaner rewrites both kinds.
          for (let k0 = 0; k0 < KEYS; k0 += 4) {
            const recs: RecordInput[] = [];
            for (let k = k0; k < k0 + 4; k++) {
              const tomb = v === VERSIONS - 1 && k < TOMBSTONED;
              recs.push({
                key: Buffer.from(`k${k}`),
                value: tomb ? null : Buffer.from(`${stream}-k${k}-v${v}-${'x'.repeat(40)}`),
                headers: [],
                timestamp: 1_000_000 + v,
              });
            }
            if (v === 3 && k0 === 0) recs.push({ key: null, value: Buffer.from(`${stream}-keyless`), headers: [], timestamp: 1_000_000 });
            const res = s.engine.produce(stream, 0, encodeBatch(recs, (k0 / 4) % 2 === 1 ? Compression.Gzip : Compression.None));
            await res.durable;
            recs.forEach((r, i) => {
              const offset = res.baseOffset + i;
              if (stream !== 'c') return;
              if (r.key === null) keyless.push(offset);
              else latest.set(r.key.toString(), { offset, value: r.value?.toString() ?? null });
            });
            total += recs.length;
          }
        }
      }
      assert.equal(total, 2 * (KEYS * VERSIONS + 1));
      await s.log.flushAll();
      // A record produced after the flush stays in the tail (Kafka's active segment): never cleaned.
      const tailRes = s.engine.produce('c', 0, encodeBatch([{ key: Buffer.from('k7'), value: Buffer.from('tail-k7'), headers: [], timestamp: 2_000_000 }]));
      await tailRes.durable;
      const before = await readAll(s.log, 'c');
      assert.equal(before.length, KEYS * VERSIONS + 2, 'everything readable before the cleaner');
      const segsBefore = s.log.describe('c')[0].segments;
      assert.ok(segsBefore >= 3, `${segsBefore} segments`);

      // A reader that looked the first segment up before the swap (its object key) reads it whole afterwards.
      const meta = (s.log as unknown as { parts: Map<string, { segments: Array<{ objectKey: string; size: number }> }> }).parts.get('c/0')!;
      const first = { ...meta.segments[0] };
      await s.engine.setSettings('c', { configs });
      await s.engine.setSettings('d', { configs: { ...configs, 'delete.retention.ms': '0' } });
      await s.log.compact('c');
      await s.log.compact('d');
      assert.notEqual(meta.segments[0].objectKey, first.objectKey, 'the first segment has a new object');
      assert.match(meta.segments[0].objectKey, /-\d+-c\d+\.seg$/, 'its key carries the epoch and a generation');
      const old = await s.objects.get(first.objectKey, { start: 0, end: first.size });
      assert.equal(old.length, first.size, 'the old object is still whole for the reader');

      const after1 = await readAll(s.log, 'c');
      const expected = [...[...latest.values()].map((x) => x.offset), ...keyless, tailRes.baseOffset].sort((a, b) => a - b);
      assert.deepEqual(
        after1.map((r) => r.offset),
        expected,
        'the last record per key at its own offset, the keyless record, the tail record',
      );
      for (const r of after1) {
        if (r.offset === tailRes.baseOffset) assert.equal(r.value, 'tail-k7');
        else if (r.key === null) assert.equal(r.value, 'c-keyless');
        else assert.deepEqual({ offset: r.offset, value: r.value }, latest.get(r.key), `key ${r.key}`);
      }
      assert.equal(after1.filter((r) => r.value === null).length, TOMBSTONED, 'tombstones kept (delete.retention.ms not passed)');
      // delete.retention.ms 0: the tombstones go too.
      const d = await readAll(s.log, 'd');
      assert.equal(d.filter((r) => r.value === null).length, 0, 'tombstones gone past delete.retention.ms');
      assert.equal(d.filter((r) => r.key !== null).length, KEYS - TOMBSTONED);
      assert.ok(s.log.stats.compactionRuns >= 2 && s.log.stats.compactedRecords > 0 && s.log.stats.compactedSegments > 0);
      const sizeBefore = first.size;
      assert.ok(meta.segments[0].size < sizeBefore, `the first segment shrank: ${sizeBefore} → ${meta.segments[0].size} bytes`);

      // After the delay, the old object is gone.
      const deadline = Date.now() + 10_000;
      for (;;) {
        const keys = (await s.objects.list('')).map((o) => o.key);
        if (!keys.includes(first.objectKey)) break;
        assert.ok(Date.now() < deadline, 'the replaced object is deleted after compactionDeleteDelayMs');
        await new Promise((r) => setTimeout(r, 50));
      }
      // A pass with nothing new to clean changes nothing.
      const rewritten = s.log.stats.compactedSegments;
      await s.log.compact('c');
      assert.equal(s.log.stats.compactedSegments, rewritten, 'a second pass rewrites nothing');

      // A copy left by a cleaner that stopped before its swap is swept at the next open.
      const prefix = (s.log as unknown as { objectPrefix(p: unknown): string }).objectPrefix(meta);
      const orphan = `${prefix}/${'0'.repeat(20)}-1-c999.seg`;
      await s.objects.put(orphan, [Buffer.from('left over')]);
      // Across a restart: the same records at the same offsets. The close sealed the tail: the next pass keeps its
      // k7 and removes the older one (one segment rewritten), nothing else.
      await s.close();
      s = await open(options);
      assert.deepEqual(await readAll(s.log, 'c'), after1);
      assert.ok(!(await s.objects.list('')).some((o) => o.key === orphan), 'the orphaned copy is deleted at open');
      await s.log.compact('c');
      assert.equal(s.log.stats.compactedSegments, 1, 'the segment of the older k7 rewritten after the restart');
      assert.deepEqual(
        await readAll(s.log, 'c'),
        after1.filter((r) => r.key !== 'k7' || r.offset === tailRes.baseOffset),
      );
      // A consumer positioned in a gap (a removed record's offset) goes on from the next kept one.
      const gap = expected.findIndex((o, i) => i > 0 && o > expected[i - 1] + 1);
      const fromGap = await readAll(s.log, 'c', expected[gap] - 1);
      assert.equal(fromGap[0].offset, expected[gap]);
      await s.close();
    });

    it('only the owner cleans: a log whose partition another opened since (a later epoch) swaps nothing', async () => {
      const a = await open({ segmentBytes: 2048, recentBytes: 0 });
      await a.engine.createStream({ name: 'own', partitions: 1 });
      for (let v = 0; v < 5; v++) {
        for (let k = 0; k < 10; k++) {
          await a.engine.produce('own', 0, encodeBatch([{ key: Buffer.from(`k${k}`), value: Buffer.alloc(80, v), headers: [], timestamp: 1000 }])).durable;
        }
      }
      await a.log.flushAll();
      const segs = async () => (await a.metastore.listSegments('own', 0)).map((x) => x.objectKey);
      const keysBefore = await segs();
      // A second log on the same metastore and objects takes the partition (as a new owner does in cluster mode).
      const metastore2 = SqliteMetastore.open(join(dir, 'meta.db'));
      const wal2 = await FileWal.open(join(dir, 'wal2'));
      const objects2 = s3 === null ? new FsObjectStore(join(dir, 'objects')) : a.objects;
      const b = await openLogEngine({ wal: wal2, objects: objects2, metastore: metastore2 }, logger, { segmentBytes: 2048, recentBytes: 0 });
      await a.engine.setSettings('own', { configs: { 'cleanup.policy': 'compact' } });
      await a.log.compact('own');
      assert.deepEqual(await segs(), keysBefore, 'the fenced log swapped no segment');
      assert.equal(a.log.stats.compactedSegments, 0);
      assert.equal(a.log.stats.fencedPartitions, 1, 'it learnt it was fenced');
      // The new owner cleans.
      await b.engine.setSettings('own', { configs: { 'cleanup.policy': 'compact' } });
      await b.log.compact('own');
      assert.ok(b.log.stats.compactedSegments > 0, 'the owner rewrote segments');
      assert.equal((await readAll(b.log, 'own')).length, 10, 'one record per key');
      await b.log.close();
      await wal2.close();
      await metastore2.close();
      await a.close();
    });

    it('retention deletes segments of compact,delete streams, never of compact-only ones', async () => {
      const s = await open({ segmentBytes: 2048, recentBytes: 0 });
      // Timestamps of 1970: far beyond a retention of a minute.
      await s.engine.createStream({ name: 'rc', partitions: 1, retentionMs: 60_000, configs: { 'cleanup.policy': 'compact' } });
      await s.engine.createStream({ name: 'rd', partitions: 1, retentionMs: 60_000, configs: { 'cleanup.policy': 'compact,delete' } });
      for (const name of ['rc', 'rd']) {
        for (let i = 0; i < 60; i++) {
          await s.engine.produce(name, 0, encodeBatch([{ key: Buffer.from(`k${i}`), value: Buffer.alloc(100, i), headers: [], timestamp: 1000 + i }])).durable;
        }
      }
      await s.log.flushAll();
      const deadline = Date.now() + 10_000;
      while (s.engine.offsets('rd', 0).logStartOffset === 0) {
        assert.ok(Date.now() < deadline, 'retention applies to compact,delete');
        await new Promise((r) => setTimeout(r, 20));
      }
      // The background pass that applied it to rd has looked at rc too: rc keeps its start and every record.
      assert.equal(s.engine.offsets('rc', 0).logStartOffset, 0);
      assert.equal((await readAll(s.log, 'rc')).length, 60);
      await s.close();
    });
  });
}

storeSuite('fs');
storeSuite('s3');
