/**
 * What every Metastore backend must do. The factory opens (or reopens) the metastore kept in `dir`; a
 * networked backend may map `dir` to a database or schema of its own.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isFlowError, type BindingDef, type ExchangeDef, type QueueDef } from '../../src/core/index.js';
import type { Metastore, SegmentMeta, StreamDef } from '../../src/storage/metastore/index.js';

const stream = (name: string, over: Partial<StreamDef> = {}): StreamDef => ({
  name,
  partitions: 3,
  bindings: [`${name.replaceAll('.', '/')}`, 'factory/+/+/telemetry'],
  retentionMs: 86_400_000,
  createdAt: 1_700_000_000_000,
  ...over,
});

const segment = (streamName: string, partition: number, base: number, end: number): SegmentMeta => ({
  stream: streamName,
  partition,
  baseOffset: base,
  endOffset: end,
  objectKey: `streams/${streamName}/${partition}/${String(base).padStart(20, '0')}.seg`,
  size: (end - base) * 100,
  maxTimestamp: 1_700_000_000_000 + base,
  createdAt: 1_700_000_100_000,
});

const queueDef = (name: string, over: Partial<QueueDef> = {}): QueueDef => ({
  name,
  durable: true,
  exclusiveOwner: null,
  autoDelete: false,
  arguments: { messageTtlMs: 60_000, maxLength: 1000, overflow: 'reject-publish', deadLetterExchange: 'dlx' },
  rawArguments: { 'x-message-ttl': 60_000, 'x-max-length': 1000, 'x-overflow': 'reject-publish', 'x-dead-letter-exchange': 'dlx' },
  createdAt: 1_700_000_000_000,
  ...over,
});

const exchangeDef = (name: string, over: Partial<ExchangeDef> = {}): ExchangeDef => ({
  name,
  type: 'topic',
  durable: true,
  autoDelete: false,
  internal: false,
  rawArguments: {},
  createdAt: 1_700_000_000_000,
  ...over,
});

const binding = (source: string, destination: string, key: string, over: Partial<BindingDef> = {}): BindingDef => ({
  source,
  destinationKind: 'queue',
  destination,
  key,
  arguments: {},
  ...over,
});

const byName = <T extends { name: string }>(list: T[]): T[] => [...list].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
const sortBindings = (list: BindingDef[]): BindingDef[] => [...list].sort((a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1));

/** A stream's definition as listed, or null (the interface has no lookup by name: the core keeps its own index). */
async function getStream(m: Metastore, name: string): Promise<StreamDef | null> {
  return (await m.listStreams()).find((d) => d.name === name) ?? null;
}

export function metastoreConformance(name: string, open: (dir: string) => Promise<Metastore>): void {
  describe(`Metastore conformance: ${name}`, () => {
    let root = '';
    let n = 0;
    const freshDir = (): string => join(root, `case-${n++}`);

    before(async () => {
      root = await mkdtemp(join(tmpdir(), 'flowmq-metastore-conformance-'));
    });
    after(async () => {
      await rm(root, { recursive: true, force: true });
    });

    it('has a kind', async () => {
      const m = await open(freshDir());
      assert.ok(m.kind.length > 0);
      await m.close();
    });

    it('creates, reads, lists, updates and deletes streams', async () => {
      const m = await open(freshDir());
      assert.equal(await getStream(m, 'orders'), null);
      assert.deepEqual(await m.listStreams(), []);

      const orders = stream('orders');
      const forever = stream('audit.log', { partitions: 1, bindings: [], retentionMs: null });
      await m.createStream(orders);
      await m.createStream(forever);
      assert.deepEqual(await getStream(m, 'orders'), orders);
      assert.deepEqual(await getStream(m, 'audit.log'), forever);
      assert.deepEqual(await m.listStreams(), [forever, orders], 'listed by name');

      const changed = { ...orders, partitions: 6, bindings: ['orders/#'], retentionMs: 1000 };
      await m.updateStream(changed);
      assert.deepEqual(await getStream(m, 'orders'), changed);

      await m.deleteStream('orders');
      assert.equal(await getStream(m, 'orders'), null);
      assert.deepEqual(await m.listStreams(), [forever]);
      await m.close();
    });

    it("keeps a stream's settings (size retention, segment size and age, protocol configs) and clears them", async () => {
      const dir = freshDir();
      const m = await open(dir);
      const tuned = stream('tuned', {
        retentionBytes: 10_485_760,
        segmentBytes: 52_428_800,
        segmentMs: 3_600_000,
        configs: { 'max.message.bytes': '2097152', 'message.timestamp.type': 'LogAppendTime' },
      });
      await m.createStream(tuned);
      assert.deepEqual(await getStream(m, 'tuned'), tuned);
      await m.close();
      const m2 = await open(dir);
      assert.deepEqual(await getStream(m2, 'tuned'), tuned, 'after a reopen');
      const some = { ...stream('tuned'), retentionBytes: 0, configs: { 'compression.type': 'zstd' } };
      await m2.updateStream(some);
      assert.deepEqual(await getStream(m2, 'tuned'), some);
      // A definition without them (as every stream made before they existed) reads back without them.
      await m2.updateStream(stream('tuned'));
      assert.deepEqual(await getStream(m2, 'tuned'), stream('tuned'));
      await m2.close();
    });

    it('refuses a duplicate stream with ALREADY_EXISTS and leaves the first one alone', async () => {
      const m = await open(freshDir());
      await m.createStream(stream('dup'));
      await assert.rejects(m.createStream(stream('dup', { partitions: 9 })), (e: unknown) => isFlowError(e, 'ALREADY_EXISTS'));
      assert.equal((await getStream(m, 'dup'))?.partitions, 3);
      await m.close();
    });

    it('throws NOT_FOUND when updating or deleting an absent stream', async () => {
      const m = await open(freshDir());
      await assert.rejects(m.updateStream(stream('ghost')), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
      await assert.rejects(m.deleteStream('ghost'), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
      await m.close();
    });

    it('commits contiguous segments and advances the flushed offset', async () => {
      const m = await open(freshDir());
      await m.createStream(stream('s'));
      assert.equal(await m.getPartitionState('s', 0), null);

      await m.commitSegment(segment('s', 0, 0, 10), 0);
      assert.deepEqual(await m.getPartitionState('s', 0), { stream: 's', partition: 0, logStartOffset: 0, flushedOffset: 10, epoch: 0 });
      await m.commitSegment(segment('s', 0, 10, 25), 0);
      await m.commitSegment(segment('s', 0, 25, 26), 0);
      assert.equal((await m.getPartitionState('s', 0))?.flushedOffset, 26);
      assert.deepEqual(await m.listSegments('s', 0), [segment('s', 0, 0, 10), segment('s', 0, 10, 25), segment('s', 0, 25, 26)]);

      // Partitions are independent.
      assert.deepEqual(await m.listSegments('s', 1), []);
      await m.commitSegment(segment('s', 1, 0, 3), 0);
      assert.equal((await m.getPartitionState('s', 1))?.flushedOffset, 3);
      assert.equal((await m.getPartitionState('s', 0))?.flushedOffset, 26);
      await m.close();
    });

    it('refuses a segment that does not start at the flushed offset, changing nothing', async () => {
      const m = await open(freshDir());
      await m.createStream(stream('s'));
      const invalid = (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT');
      // Nothing flushed yet: a segment must start at 0.
      await assert.rejects(m.commitSegment(segment('s', 0, 5, 10), 0), invalid);
      assert.equal(await m.getPartitionState('s', 0), null);

      await m.commitSegment(segment('s', 0, 0, 10), 0);
      await assert.rejects(m.commitSegment(segment('s', 0, 11, 20), 0), invalid, 'gap');
      await assert.rejects(m.commitSegment(segment('s', 0, 5, 20), 0), invalid, 'overlap');
      await assert.rejects(m.commitSegment({ ...segment('s', 0, 0, 10), objectKey: 'other' }, 0), invalid, 'another segment over the same range');
      assert.equal((await m.getPartitionState('s', 0))?.flushedOffset, 10);
      assert.deepEqual(await m.listSegments('s', 0), [segment('s', 0, 0, 10)]);
      await m.close();
    });

    it('takes the latest segment committed again as a no-op (a retry whose first commit landed)', async () => {
      // A commit whose journal sync failed (a full disk) is retried by the log; it must not block the partition.
      const m = await open(freshDir());
      await m.createStream(stream('s'));
      await m.commitSegment(segment('s', 0, 0, 10), 0);
      await m.commitSegment(segment('s', 0, 10, 20), 0);
      await m.commitSegment(segment('s', 0, 10, 20), 0);
      await assert.rejects(m.commitSegment(segment('s', 0, 0, 10), 0), (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT'), 'an older one is refused');
      assert.equal((await m.getPartitionState('s', 0))?.flushedOffset, 20);
      assert.deepEqual(await m.listSegments('s', 0), [segment('s', 0, 0, 10), segment('s', 0, 10, 20)]);
      await m.close();
    });

    it('keeps the log start offset apart from the flushed offset', async () => {
      const m = await open(freshDir());
      await m.createStream(stream('s'));
      await m.setLogStartOffset('s', 2, 0, 0);
      assert.deepEqual(await m.getPartitionState('s', 2), { stream: 's', partition: 2, logStartOffset: 0, flushedOffset: 0, epoch: 0 });
      await m.commitSegment(segment('s', 2, 0, 10), 0);
      await m.commitSegment(segment('s', 2, 10, 20), 0);
      await m.setLogStartOffset('s', 2, 10, 0);
      assert.deepEqual(await m.getPartitionState('s', 2), { stream: 's', partition: 2, logStartOffset: 10, flushedOffset: 20, epoch: 0 });
      await m.commitSegment(segment('s', 2, 20, 30), 0);
      assert.deepEqual(await m.getPartitionState('s', 2), { stream: 's', partition: 2, logStartOffset: 10, flushedOffset: 30, epoch: 0 });
      await m.close();
    });

    it('deletes segments without touching the offsets', async () => {
      const m = await open(freshDir());
      await m.createStream(stream('s'));
      await m.commitSegment(segment('s', 0, 0, 10), 0);
      await m.commitSegment(segment('s', 0, 10, 20), 0);
      await m.deleteSegment('s', 0, 0, 0);
      assert.deepEqual(await m.listSegments('s', 0), [segment('s', 0, 10, 20)]);
      assert.equal((await m.getPartitionState('s', 0))?.flushedOffset, 20);
      await m.deleteSegment('s', 0, 0, 0); // already gone: no error
      await m.close();
    });

    it("swaps a segment's object for a compacted copy only where the old one is still named (replaceSegment)", async () => {
      const m = await open(freshDir());
      await m.createStream(stream('s'));
      await m.commitSegment(segment('s', 0, 0, 10), 0);
      await m.commitSegment(segment('s', 0, 10, 20), 0);
      const old = segment('s', 0, 0, 10);
      const copy = { ...old, objectKey: `${old.objectKey}-c1`, size: 7, maxTimestamp: old.maxTimestamp - 1 };
      assert.equal(await m.replaceSegment(copy, old.objectKey, 0), true);
      assert.deepEqual(await m.listSegments('s', 0), [copy, segment('s', 0, 10, 20)]);
      // The old key is named no more: a second cleaner (or a stale view) changes nothing.
      assert.equal(await m.replaceSegment({ ...copy, objectKey: 'other', size: 1 }, old.objectKey, 0), false);
      // Another range, or a deleted row: nothing to swap.
      assert.equal(await m.replaceSegment({ ...copy, endOffset: 11 }, copy.objectKey, 0), false);
      await m.deleteSegment('s', 0, 10, 0);
      const second = segment('s', 0, 10, 20);
      assert.equal(await m.replaceSegment({ ...second, objectKey: 'x' }, second.objectKey, 0), false);
      assert.deepEqual(await m.listSegments('s', 0), [copy]);
      assert.equal((await m.getPartitionState('s', 0))?.flushedOffset, 20);
      await m.close();
    });

    it('upserts and reads consumer offsets', async () => {
      const m = await open(freshDir());
      await m.createStream(stream('a'));
      await m.createStream(stream('b'));
      assert.equal(await m.fetchOffset('g1', 'a', 0), null);

      const t0 = Date.now();
      await m.commitOffsets('g1', [{ stream: 'a', partition: 0, offset: 5, metadata: null }]);
      const first = await m.fetchOffset('g1', 'a', 0);
      assert.ok(first);
      assert.equal(first.offset, 5);
      assert.equal(first.metadata, null);
      assert.ok(first.committedAt >= t0 - 1000 && first.committedAt <= Date.now() + 1000, 'committedAt is now');

      await m.commitOffsets('g1', [{ stream: 'a', partition: 0, offset: 42, metadata: 'consumer-1' }]);
      await m.commitOffsets('g1', [{ stream: 'b', partition: 1, offset: 7, metadata: '' }]);
      await m.commitOffsets('g1', [{ stream: 'a', partition: 2, offset: 3, metadata: null }]);
      await m.commitOffsets('g2', [{ stream: 'a', partition: 0, offset: 1, metadata: null }]);

      const strip = (o: { group: string; stream: string; partition: number; offset: number; metadata: string | null }) => ({
        group: o.group,
        stream: o.stream,
        partition: o.partition,
        offset: o.offset,
        metadata: o.metadata,
      });
      assert.deepEqual((await m.listOffsets('g1')).map(strip), [
        { group: 'g1', stream: 'a', partition: 0, offset: 42, metadata: 'consumer-1' },
        { group: 'g1', stream: 'a', partition: 2, offset: 3, metadata: null },
        { group: 'g1', stream: 'b', partition: 1, offset: 7, metadata: '' },
      ]);
      assert.deepEqual((await m.listOffsets('g2')).map(strip), [{ group: 'g2', stream: 'a', partition: 0, offset: 1, metadata: null }]);
      assert.deepEqual(await m.listOffsets('nobody'), []);
      await m.close();
    });

    it('commits offsets in batches, lists groups and deletes a group (OffsetStore)', async () => {
      const m = await open(freshDir());
      await m.createStream(stream('a'));
      assert.deepEqual(await m.listGroups(), []);
      await m.commitOffsets('g2', [
        { stream: 'a', partition: 0, offset: 4, metadata: null },
        { stream: 'a', partition: 1, offset: -1, metadata: 'none yet' },
      ]);
      await m.commitOffsets('g1', [{ stream: 'a', partition: 2, offset: 9, metadata: 'x' }]);
      assert.deepEqual(await m.listGroups(), ['g1', 'g2']);
      assert.deepEqual(
        (await m.listOffsets('g2')).map((o) => [o.partition, o.offset, o.metadata]),
        [
          [0, 4, null],
          [1, -1, 'none yet'],
        ],
      );
      // All or nothing: one unknown stream fails the whole batch.
      await assert.rejects(
        m.commitOffsets('g1', [
          { stream: 'a', partition: 2, offset: 10, metadata: null },
          { stream: 'missing', partition: 0, offset: 1, metadata: null },
        ]),
        (e: unknown) => isFlowError(e, 'NOT_FOUND'),
      );
      assert.equal((await m.fetchOffset('g1', 'a', 2))?.offset, 9);
      await m.deleteGroup('g2');
      await m.deleteGroup('never'); // no error
      assert.deepEqual(await m.listGroups(), ['g1']);
      assert.deepEqual(await m.listOffsets('g2'), []);
      await m.close();
    });

    it("deletes some of a group's offsets, atomically, and the group with its last one (OffsetStore.deleteOffsets)", async () => {
      const m = await open(freshDir());
      await m.createStream(stream('a'));
      await m.createStream(stream('b'));
      await m.commitOffsets('g', [
        { stream: 'a', partition: 0, offset: 4, metadata: null },
        { stream: 'a', partition: 1, offset: 5, metadata: null },
        { stream: 'b', partition: 0, offset: 6, metadata: null },
      ]);
      await m.commitOffsets('other', [{ stream: 'a', partition: 0, offset: 1, metadata: null }]);
      // A partition without an offset (and a group without any) is no error.
      await m.deleteOffsets('g', [
        { stream: 'a', partition: 1 },
        { stream: 'b', partition: 0 },
        { stream: 'b', partition: 7 },
      ]);
      await m.deleteOffsets('nobody', [{ stream: 'a', partition: 0 }]);
      assert.deepEqual(
        (await m.listOffsets('g')).map((o) => [o.stream, o.partition, o.offset]),
        [['a', 0, 4]],
      );
      assert.equal((await m.fetchOffset('other', 'a', 0))?.offset, 1, "another group's offset of the same partition stays");
      await m.deleteOffsets('g', [{ stream: 'a', partition: 0 }]);
      assert.deepEqual(await m.listGroups(), ['other'], 'a group whose last offset went is no longer listed');
      await m.close();
    });

    it('allocates producer ids that never repeat, across reopen (ProducerIdStore)', async () => {
      const dir = freshDir();
      const m = await open(dir);
      const a = await m.allocateProducerIds(10);
      const b = await m.allocateProducerIds(5);
      assert.ok(b >= a + 10, `${b} after block ${a}..${a + 9}`);
      await m.close();
      const m2 = await open(dir);
      const c = await m2.allocateProducerIds(1);
      assert.ok(c >= b + 5, `${c} after block ${b}..${b + 4}`);
      await m2.close();
    });

    it('keeps the producer-state snapshot of a partition, replaced on each write and deleted with its stream', async () => {
      const dir = freshDir();
      const m = await open(dir);
      await m.createStream(stream('ps'));
      assert.equal(await m.getProducerState('ps', 0), null);
      await m.putProducerState('ps', 0, 10, '[[1,{"epoch":0,"batches":[]}]]', 0);
      await m.putProducerState('ps', 0, 20, '[]', 0);
      await m.putProducerState('ps', 1, 5, '[[2,{"epoch":1,"batches":[]}]]', 0);
      await m.close();
      const m2 = await open(dir);
      assert.deepEqual(await m2.getProducerState('ps', 0), { endOffset: 20, state: '[]' });
      assert.deepEqual(await m2.getProducerState('ps', 1), { endOffset: 5, state: '[[2,{"epoch":1,"batches":[]}]]' });
      await m2.deleteStream('ps');
      assert.equal(await m2.getProducerState('ps', 1), null);
      await m2.close();
    });

    it('deletes a stream together with its partitions, segments and offsets', async () => {
      const m = await open(freshDir());
      await m.createStream(stream('gone'));
      await m.createStream(stream('kept'));
      for (const s of ['gone', 'kept']) {
        await m.commitSegment(segment(s, 0, 0, 10), 0);
        await m.setLogStartOffset(s, 1, 0, 0);
        await m.commitOffsets('g', [{ stream: s, partition: 0, offset: 9, metadata: null }]);
      }
      await m.deleteStream('gone');
      assert.equal(await m.getPartitionState('gone', 0), null);
      assert.equal(await m.getPartitionState('gone', 1), null);
      assert.deepEqual(await m.listSegments('gone', 0), []);
      assert.equal(await m.fetchOffset('g', 'gone', 0), null);
      assert.deepEqual(
        (await m.listOffsets('g')).map((o) => o.stream),
        ['kept'],
      );
      assert.equal((await m.getPartitionState('kept', 0))?.flushedOffset, 10);
      assert.equal((await m.listSegments('kept', 0)).length, 1);

      // A stream recreated under the same name starts from scratch.
      await m.createStream(stream('gone'));
      assert.equal(await m.getPartitionState('gone', 0), null);
      await m.commitSegment(segment('gone', 0, 0, 4), 0);
      assert.equal((await m.getPartitionState('gone', 0))?.flushedOffset, 4);
      await m.close();
    });

    describe('partition ownership epochs (fencing)', () => {
      const fenced = (e: unknown) => isFlowError(e, 'FENCED');

      it('bumps the epoch at each openPartition (1, 2, ...), per partition, across reopen; NOT_FOUND for an unknown stream', async () => {
        const dir = freshDir();
        const m = await open(dir);
        await m.createStream(stream('e'));
        assert.equal(await m.openPartition('e', 0), 1);
        assert.equal(await m.openPartition('e', 0), 2);
        assert.equal(await m.openPartition('e', 1), 1, 'partitions are independent');
        assert.deepEqual(await m.getPartitionState('e', 0), { stream: 'e', partition: 0, logStartOffset: 0, flushedOffset: 0, epoch: 2 });
        await assert.rejects(m.openPartition('ghost', 0), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
        await m.close();
        const m2 = await open(dir);
        assert.equal(await m2.openPartition('e', 0), 3);
        // A stream recreated under the same name starts again from scratch.
        await m2.deleteStream('e');
        await m2.createStream(stream('e'));
        assert.equal(await m2.openPartition('e', 0), 1);
        await m2.close();
      });

      it('refuses every partition mutation carrying a stale epoch with FENCED, changing nothing', async () => {
        const m = await open(freshDir());
        await m.createStream(stream('f'));
        const e1 = await m.openPartition('f', 0);
        await m.commitSegment(segment('f', 0, 0, 10), e1);
        await m.commitSegment(segment('f', 0, 10, 20), e1);
        await m.setLogStartOffset('f', 0, 5, e1);
        await m.putProducerState('f', 0, 20, '"one"', e1);
        const e2 = await m.openPartition('f', 0);
        assert.ok(e2 > e1);

        await assert.rejects(m.commitSegment(segment('f', 0, 20, 30), e1), fenced, 'commitSegment');
        await assert.rejects(m.setLogStartOffset('f', 0, 15, e1), fenced, 'setLogStartOffset');
        await assert.rejects(m.deleteSegment('f', 0, 0, e1), fenced, 'deleteSegment');
        const s0 = segment('f', 0, 0, 10);
        await assert.rejects(m.replaceSegment({ ...s0, objectKey: 'stale-copy' }, s0.objectKey, e1), fenced, 'replaceSegment');
        await assert.rejects(m.putProducerState('f', 0, 30, '"stale"', e1), fenced, 'putProducerState');
        assert.deepEqual(await m.getPartitionState('f', 0), { stream: 'f', partition: 0, logStartOffset: 5, flushedOffset: 20, epoch: e2 });
        assert.deepEqual(await m.listSegments('f', 0), [segment('f', 0, 0, 10), segment('f', 0, 10, 20)]);
        assert.deepEqual(await m.getProducerState('f', 0), { endOffset: 20, state: '"one"' });

        // The current owner's epoch is taken; another partition's epoch is its own.
        await m.commitSegment(segment('f', 0, 20, 30), e2);
        await m.setLogStartOffset('f', 0, 15, e2);
        await m.deleteSegment('f', 0, 0, e2);
        await m.putProducerState('f', 0, 30, '"two"', e2);
        assert.deepEqual(await m.getPartitionState('f', 0), { stream: 'f', partition: 0, logStartOffset: 15, flushedOffset: 30, epoch: e2 });
        assert.deepEqual(await m.listSegments('f', 0), [segment('f', 0, 10, 20), segment('f', 0, 20, 30)]);
        assert.deepEqual(await m.getProducerState('f', 0), { endOffset: 30, state: '"two"' });
        await m.commitSegment(segment('f', 1, 0, 10), e1);
        await m.close();
      });

      it('a second instance opened on the same store fences the first', async () => {
        const dir = freshDir();
        const first = await open(dir);
        await first.createStream(stream('g'));
        const e1 = await first.openPartition('g', 0);
        await first.commitSegment(segment('g', 0, 0, 10), e1);
        const second = await open(dir);
        try {
          const e2 = await second.openPartition('g', 0);
          assert.ok(e2 > e1, `${e2} after ${e1}`);
          await assert.rejects(first.commitSegment(segment('g', 0, 10, 20), e1), fenced);
          await assert.rejects(first.setLogStartOffset('g', 0, 5, e1), fenced);
          await assert.rejects(first.putProducerState('g', 0, 10, '[]', e1), fenced);
          await assert.rejects(first.deleteSegment('g', 0, 0, e1), fenced);
          await second.commitSegment(segment('g', 0, 10, 25), e2);
          // Each sees the other's writes: one store.
          assert.deepEqual(await first.getPartitionState('g', 0), { stream: 'g', partition: 0, logStartOffset: 0, flushedOffset: 25, epoch: e2 });
          assert.deepEqual(await first.listSegments('g', 0), [segment('g', 0, 0, 10), segment('g', 0, 10, 25)]);
          // The first takes the partition back: now the second is fenced.
          const e3 = await first.openPartition('g', 0);
          assert.ok(e3 > e2);
          await assert.rejects(second.commitSegment(segment('g', 0, 25, 30), e2), fenced);
        } finally {
          await second.close();
          await first.close();
        }
      });
    });

    describe('per-key order: operations issued without awaiting take effect in the order issued', () => {
      it('setLogStartOffset and commitSegment on one partition', async () => {
        const m = await open(freshDir());
        await m.createStream(stream('o'));
        const e = await m.openPartition('o', 0);
        const ops = [
          m.commitSegment(segment('o', 0, 0, 10), e),
          m.setLogStartOffset('o', 0, 5, e),
          m.commitSegment(segment('o', 0, 10, 20), e),
          m.setLogStartOffset('o', 0, 12, e),
          m.commitSegment(segment('o', 0, 20, 30), e),
          m.deleteSegment('o', 0, 0, e),
        ];
        await Promise.all(ops);
        assert.deepEqual(await m.getPartitionState('o', 0), { stream: 'o', partition: 0, logStartOffset: 12, flushedOffset: 30, epoch: e });
        assert.deepEqual(await m.listSegments('o', 0), [segment('o', 0, 10, 20), segment('o', 0, 20, 30)]);
        await m.close();
      });

      it('an openPartition issued before a mutation with the old epoch fences it', async () => {
        const m = await open(freshDir());
        await m.createStream(stream('o'));
        const e1 = await m.openPartition('o', 0);
        const reopen = m.openPartition('o', 0);
        const stale = assert.rejects(m.commitSegment(segment('o', 0, 0, 10), e1), (err: unknown) => isFlowError(err, 'FENCED'));
        const e2 = await reopen;
        await stale;
        const fresh = m.commitSegment(segment('o', 0, 0, 10), e2);
        const moved = m.setLogStartOffset('o', 0, 3, e2);
        await Promise.all([fresh, moved]);
        assert.deepEqual(await m.getPartitionState('o', 0), { stream: 'o', partition: 0, logStartOffset: 3, flushedOffset: 10, epoch: e2 });
        await m.close();
      });

      it('commitOffsets twice for the same group: the later one stays', async () => {
        const m = await open(freshDir());
        await m.createStream(stream('a'));
        const ops = [];
        for (let i = 1; i <= 20; i++) ops.push(m.commitOffsets('g', [{ stream: 'a', partition: 0, offset: i, metadata: `m${i}` }]));
        const read = m.fetchOffset('g', 'a', 0);
        ops.push(m.commitOffsets('g', [{ stream: 'a', partition: 0, offset: 100, metadata: 'last' }]));
        await Promise.all(ops);
        const seen = await read;
        assert.equal(seen?.offset, 20, 'a read sees every write issued before it');
        const o = await m.fetchOffset('g', 'a', 0);
        assert.deepEqual([o?.offset, o?.metadata], [100, 'last']);
        await m.close();
      });

      it('a stream created, updated and deleted, then created again', async () => {
        const m = await open(freshDir());
        const ops = [
          m.createStream(stream('d')),
          m.updateStream(stream('d', { partitions: 7 })),
          m.deleteStream('d'),
          m.createStream(stream('d', { partitions: 2 })),
          m.updateStream(stream('d', { partitions: 5 })),
        ];
        await Promise.all(ops);
        assert.equal((await getStream(m, 'd'))?.partitions, 5);
        await m.close();
      });
    });

    describe('queue catalog (QueueCatalog)', () => {
      it('puts, replaces, lists and deletes queue definitions, arguments intact', async () => {
        const m = await open(freshDir());
        assert.deepEqual(await m.listQueues(), []);
        const orders = queueDef('orders');
        const plain = queueDef('plain', { arguments: {}, rawArguments: {}, autoDelete: true });
        const owned = queueDef('amq.gen-1', { exclusiveOwner: 'conn-7', durable: false });
        const bytes = queueDef('bytes', { rawArguments: { 'x-note': Buffer.from([0, 1, 255]), nested: { a: [1, 'two', null, true] } } });
        for (const d of [orders, plain, owned, bytes]) await m.putQueue(d);
        assert.deepEqual(byName(await m.listQueues()), byName([orders, plain, owned, bytes]));
        const changed = { ...orders, arguments: { maxLength: 5 }, rawArguments: { 'x-max-length': 5 } };
        await m.putQueue(changed);
        assert.deepEqual(byName(await m.listQueues()), byName([changed, plain, owned, bytes]), 'a put replaces');
        await m.deleteQueue('plain');
        await m.deleteQueue('plain');
        await m.deleteQueue('never-there');
        assert.deepEqual(byName(await m.listQueues()), byName([changed, owned, bytes]));
        await m.close();
      });

      it('puts, replaces, lists and deletes exchange definitions', async () => {
        const m = await open(freshDir());
        assert.deepEqual(await m.listExchanges(), []);
        const logs = exchangeDef('logs', { type: 'fanout' });
        const alt = exchangeDef('with-alt', {
          type: 'direct',
          alternateExchange: 'logs',
          internal: true,
          autoDelete: true,
          rawArguments: { 'alternate-exchange': 'logs' },
        });
        const hdr = exchangeDef('hdr', { type: 'headers', durable: false });
        for (const d of [logs, alt, hdr]) await m.putExchange(d);
        assert.deepEqual(byName(await m.listExchanges()), byName([logs, alt, hdr]));
        const { alternateExchange: _gone, ...noAlt } = alt;
        await m.putExchange(noAlt);
        assert.deepEqual(byName(await m.listExchanges()), byName([logs, noAlt, hdr]), 'a put replaces, optional fields too');
        await m.deleteExchange('hdr');
        await m.deleteExchange('never-there');
        assert.deepEqual(byName(await m.listExchanges()), byName([logs, noAlt]));
        await m.close();
      });

      it('keeps bindings by everything they say: idempotent puts, deletes of absent ones are no-ops', async () => {
        const m = await open(freshDir());
        assert.deepEqual(await m.listBindings(), []);
        const b1 = binding('amq.topic', 'orders', 'orders.*');
        const b2 = binding('amq.topic', 'orders', 'orders/+', { rule: 'mqtt' });
        const b3 = binding('hdr', 'orders', '', { arguments: { 'x-match': 'any', a: 1, b: 'x' } });
        const b4 = binding('hdr', 'orders', '', { arguments: { b: 'x', a: 1, 'x-match': 'all' } });
        const b5 = binding('amq.topic', 'logs', '#', { destinationKind: 'exchange' });
        const b6 = binding('amq.topic', 'telemetry', 'factory/+/+/telemetry', { destinationKind: 'stream', rule: 'mqtt' });
        for (const b of [b1, b2, b3, b4, b5, b6, b1, b3]) await m.putBinding(b);
        assert.deepEqual(sortBindings(await m.listBindings()), sortBindings([b1, b2, b3, b4, b5, b6]));
        // Arguments in another key order name the same binding.
        await m.deleteBinding(binding('hdr', 'orders', '', { arguments: { b: 'x', 'x-match': 'any', a: 1 } }));
        await m.deleteBinding(binding('hdr', 'orders', 'nope'));
        // Same source, destination and key, another rule: another binding.
        await m.deleteBinding(binding('amq.topic', 'orders', 'orders.*', { rule: 'nats' }));
        assert.deepEqual(sortBindings(await m.listBindings()), sortBindings([b1, b2, b4, b5, b6]));
        await m.close();
      });

      it('deleting a queue deletes the bindings to it; deleting an exchange, the bindings from and to it', async () => {
        const m = await open(freshDir());
        await m.putQueue(queueDef('q1'));
        await m.putQueue(queueDef('q2'));
        await m.putExchange(exchangeDef('x1'));
        await m.putExchange(exchangeDef('x2'));
        const toQ1 = binding('x1', 'q1', 'a');
        const toQ2 = binding('x1', 'q2', 'a');
        const x2ToQ1 = binding('x2', 'q1', 'b');
        const x1ToX2 = binding('x1', 'x2', 'c', { destinationKind: 'exchange' });
        const x2ToX1 = binding('x2', 'x1', 'd', { destinationKind: 'exchange' });
        // A stream and an exchange may share a queue's name: only the queue's bindings go with it.
        const streamNamedQ1 = binding('x2', 'q1', 'e', { destinationKind: 'stream' });
        for (const b of [toQ1, toQ2, x2ToQ1, x1ToX2, x2ToX1, streamNamedQ1]) await m.putBinding(b);
        await m.deleteQueue('q1');
        assert.deepEqual(sortBindings(await m.listBindings()), sortBindings([toQ2, x1ToX2, x2ToX1, streamNamedQ1]));
        await m.deleteExchange('x1');
        assert.deepEqual(sortBindings(await m.listBindings()), sortBindings([streamNamedQ1]));
        assert.deepEqual(
          (await m.listExchanges()).map((e) => e.name),
          ['x2'],
        );
        assert.deepEqual(
          (await m.listQueues()).map((q) => q.name),
          ['q2'],
        );
        await m.close();
      });

      it('calls made without awaiting take effect in order', async () => {
        const m = await open(freshDir());
        const ops = [
          m.putQueue(queueDef('q')),
          m.putBinding(binding('x', 'q', 'k')),
          m.deleteQueue('q'),
          m.putQueue(queueDef('q', { autoDelete: true })),
          m.putBinding(binding('x', 'q', 'k2')),
        ];
        await Promise.all(ops);
        assert.deepEqual(await m.listQueues(), [queueDef('q', { autoDelete: true })]);
        assert.deepEqual(await m.listBindings(), [binding('x', 'q', 'k2')]);
        await m.close();
      });

      it('keeps definitions across reopen', async () => {
        const dir = freshDir();
        const m = await open(dir);
        await m.putQueue(queueDef('q'));
        await m.putExchange(exchangeDef('x', { alternateExchange: 'alt' }));
        await m.putBinding(binding('x', 'q', 'a.#', { arguments: { n: 1 } }));
        await m.close();
        const m2 = await open(dir);
        assert.deepEqual(await m2.listQueues(), [queueDef('q')]);
        assert.deepEqual(await m2.listExchanges(), [exchangeDef('x', { alternateExchange: 'alt' })]);
        assert.deepEqual(await m2.listBindings(), [binding('x', 'q', 'a.#', { arguments: { n: 1 } })]);
        await m2.close();
      });
    });

    it('keeps everything across reopen', async () => {
      const dir = freshDir();
      const m = await open(dir);
      const def = stream('durable', { bindings: ['a/+/b', 'c/#'] });
      await m.createStream(def);
      await m.commitSegment(segment('durable', 1, 0, 100), 0);
      await m.setLogStartOffset('durable', 1, 50, 0);
      await m.commitOffsets('g', [{ stream: 'durable', partition: 1, offset: 77, metadata: 'm' }]);
      await m.close();

      const m2 = await open(dir);
      assert.deepEqual(await getStream(m2, 'durable'), def);
      assert.deepEqual(await m2.getPartitionState('durable', 1), {
        stream: 'durable',
        partition: 1,
        logStartOffset: 50,
        flushedOffset: 100,
        epoch: 0,
      });
      assert.deepEqual(await m2.listSegments('durable', 1), [segment('durable', 1, 0, 100)]);
      const o = await m2.fetchOffset('g', 'durable', 1);
      assert.equal(o?.offset, 77);
      assert.equal(o?.metadata, 'm');
      // Commits continue from where they were.
      await m2.commitSegment(segment('durable', 1, 100, 120), 0);
      await m2.close();
    });
  });
}
