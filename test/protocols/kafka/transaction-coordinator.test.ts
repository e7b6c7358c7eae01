/**
 * The transaction coordinator's recovery (src/protocols/kafka/transactions/coordinator.ts): what a broker that
 * restarts finds in the metastore is finished the way it was decided. A transaction stored as PrepareCommit is
 * committed (markers, its offsets committed to the group, CompleteCommit), PrepareAbort and Ongoing are aborted
 * (markers, the partition's aborted list stored, CompleteAbort), and what was complete is left alone. The states are
 * written into the store directly, as a broker killed between two writes leaves them.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ATTR_CONTROL, Engine, TxnPartitions, crc32c, encodeBatch, encodeControlBatch, readBatchInfo, ATTR_TRANSACTIONAL } from '../../../src/core/index.js';
import { MemoryControlStore } from '../../../src/storage/metastore/control-store.js';
import { TransactionCoordinator, type TxnMeta } from '../../../src/protocols/kafka/transactions/coordinator.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { captureLogger } from './helpers.js';

function txnBatch(pid: number, values: string[]): Buffer {
  const b = encodeBatch(values.map((v) => ({ key: null, value: Buffer.from(v), headers: [], timestamp: 1000 })));
  b.writeInt16BE(ATTR_TRANSACTIONAL, 21);
  b.writeBigInt64BE(BigInt(pid), 43);
  b.writeInt16BE(0, 51);
  b.writeInt32BE(0, 53);
  b.writeUInt32BE(crc32c(b, 21, b.length), 17);
  return b;
}

function meta(id: string, pid: number, state: TxnMeta['state'], stream: string): TxnMeta {
  return {
    transactionalId: id,
    producerId: pid,
    producerEpoch: 0,
    timeoutMs: 60000,
    state,
    partitions: state.startsWith('Complete') ? [] : [{ stream, partition: 0, startOffset: 0 }],
    groups: ['g'],
    offsets: [{ group: 'g', stream, partition: 0, offset: 7, metadata: 'm' }],
    startTimeMs: 1,
    updatedAt: 1,
  };
}

/** The control type of the batch at `offset` (1 commit, 0 abort), or null when it is no marker. */
async function markerAt(engine: Engine, stream: string, offset: number): Promise<number | null> {
  const [b] = await engine.read(stream, 0, offset, 1 << 20);
  const info = readBatchInfo(b);
  if (info.baseOffset !== offset || (info.attributes & ATTR_CONTROL) === 0) return null;
  return b.readInt16BE(61 + 7);
}

describe('kafka transaction coordinator: recovery at start', () => {
  it('completes PrepareCommit, aborts PrepareAbort and Ongoing, leaves the completed alone', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    const store = new MemoryControlStore();
    const cases: Array<[string, TxnMeta['state']]> = [
      ['rc.commit', 'PrepareCommit'],
      ['rc.abort', 'PrepareAbort'],
      ['rc.open', 'Ongoing'],
      ['rc.done', 'CompleteCommit'],
    ];
    for (const [i, [stream, state]] of cases.entries()) {
      await engine.createStream({ name: stream, partitions: 1 });
      engine.produce(stream, 0, txnBatch(100 + i, ['a', 'b']));
      await store.putControl('txn', stream, meta(stream, 100 + i, state, stream) as unknown as Record<string, unknown>);
    }
    let allocated = 0;
    const c = new TransactionCoordinator(engine, store, async () => 500 + allocated++, captureLogger().logger);
    await c.start(0);
    c.close();

    assert.equal(c.get('rc.commit')?.state, 'CompleteCommit');
    assert.equal(await markerAt(engine, 'rc.commit', 2), 1, 'a commit marker after the transaction');
    assert.equal((await engine.store.fetchOffset('g', 'rc.commit', 0))?.offset, 7, "the transaction's offsets committed");
    for (const stream of ['rc.abort', 'rc.open']) {
      assert.equal(c.get(stream)?.state, 'CompleteAbort', stream);
      assert.equal(await markerAt(engine, stream, 2), 0, `${stream}: an abort marker`);
      assert.equal(await engine.store.fetchOffset('g', stream, 0), null, `${stream}: no offset committed`);
      assert.deepEqual(c.partitions.abortedIn(stream, 0, 0, 3), [{ producerId: cases.findIndex((x) => x[0] === stream) + 100, firstOffset: 0, lastOffset: 2 }]);
      const doc = await store.getControl('txn-aborted', `0:${stream}`);
      assert.deepEqual(doc?.data.aborted, c.partitions.abortedIn(stream, 0, 0, 3), 'the aborted list is stored');
    }
    assert.equal(c.get('rc.done')?.state, 'CompleteCommit');
    assert.equal(engine.offsets('rc.done', 0).highWatermark, 2, 'no marker for a completed transaction');
    assert.equal((await store.getControl('txn', 'rc.commit'))?.data.state, 'CompleteCommit', 'the outcome is stored');
    assert.equal(allocated, 0, 'no producer id allocated by recovery');

    // A coordinator started again (the next restart: its streams are there) knows the aborted transactions from the
    // store (those of streams that are gone it deletes).
    const m2 = new MemoryStreams();
    const engine2 = new Engine(m2, m2);
    for (const [stream] of cases) await engine2.createStream({ name: stream, partitions: 1 });
    const again = new TransactionCoordinator(engine2, store, async () => 900, captureLogger().logger);
    await again.start(0);
    again.close();
    assert.equal(again.partitions.abortedIn('rc.open', 0, 0, 3).length, 1);
    assert.equal(again.partitions.lso('rc.open', 0, 3), 3, 'nothing open after recovery');
  });
});

describe("kafka transactions: a partition's LSO and aborted list", () => {
  it("the LSO is the oldest open transaction's first offset; aborts below the log start offset are dropped", () => {
    const p = new TxnPartitions();
    assert.equal(p.lso('s', 0, 10), 10, 'nothing open: the high watermark');
    p.onAppend('s', 0, 1, 4);
    p.onAppend('s', 0, 2, 6);
    p.onAppend('s', 0, 1, 8);
    assert.equal(p.lso('s', 0, 10), 4, 'the first append of each transaction counts');
    assert.equal(p.lso('s', 1, 10), 10, 'per partition');
    p.close('s', 0, 1);
    assert.equal(p.lso('s', 0, 10), 6);
    p.close('s', 0, 2);
    assert.equal(p.lso('s', 0, 10), 10);
    p.addAborted('s', 0, { producerId: 1, firstOffset: 0, lastOffset: 3 }, 0);
    p.addAborted('s', 0, { producerId: 2, firstOffset: 4, lastOffset: 9 }, 0);
    assert.deepEqual(
      p.abortedIn('s', 0, 5, 20).map((a) => a.producerId),
      [2],
      'only those overlapping the fetched range',
    );
    const kept = p.addAborted('s', 0, { producerId: 3, firstOffset: 10, lastOffset: 12 }, 5);
    assert.deepEqual(
      kept.map((a) => a.producerId),
      [2, 3],
      'the abort wholly below the log start offset is gone',
    );
  });
});

describe('kafka transaction coordinator: cluster mode (takeover of a transactional id, of a partition)', () => {
  it('a successor completes the PrepareCommit it takes over through the partition leaders, keeps an open transaction open', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    const store = new MemoryControlStore();
    await engine.createStream({ name: 'tk.a', partitions: 1 });
    engine.produce('tk.a', 0, txnBatch(200, ['a', 'b']));
    await store.putControl('txn', 'tk.commit', meta('tk.commit', 200, 'PrepareCommit', 'tk.a') as unknown as Record<string, unknown>);
    await store.putControl('txn', 'tk.open', meta('tk.open', 201, 'Ongoing', 'tk.a') as unknown as Record<string, unknown>);
    const c = new TransactionCoordinator(engine, store, async () => 999, captureLogger().logger);
    // The markers go to the partition's leader, wherever it is: here a stand-in that records them, then writes here.
    const sent: string[] = [];
    c.markers = async (t) => {
      sent.push(`${t.stream}/${t.partition} ${t.producerId} ${t.commit ? 'commit' : 'abort'}`);
      return c.writeMarker(t);
    };
    await c.start(0, true);
    assert.equal(c.get('tk.commit'), undefined, 'nothing loaded before the id is taken');
    await c.acquire('tk.commit', 1);
    // The completion runs first on the id's chain: a request after the takeover sees it done.
    const code = await c.endTxn('tk.commit', 200, 0, true, 90);
    assert.equal(code, 0, 'a retried EndTxn(commit) is answered as it was decided');
    assert.deepEqual(sent, ['tk.a/0 200 commit']);
    assert.equal(c.get('tk.commit')?.state, 'CompleteCommit');
    assert.equal((await store.getControl('txn', 'tk.commit'))?.data.state, 'CompleteCommit');
    assert.equal(await markerAt(engine, 'tk.a', 2), 1);
    assert.equal((await engine.store.fetchOffset('g', 'tk.a', 0))?.offset, 7, "the transaction's offsets reach the group at the commit");

    await c.acquire('tk.open', 1);
    assert.equal(c.get('tk.open')?.state, 'Ongoing', 'an open transaction goes on with the new coordinator');
    assert.equal(await c.endTxn('tk.open', 201, 0, false, 90), 0);
    assert.deepEqual(sent.slice(1), ['tk.a/0 201 abort']);

    await c.release('tk.open', false);
    assert.equal(c.get('tk.open'), undefined, 'released: forgotten here');
    c.close();
  });

  it("a new leader of a partition loads its aborted list and the open transactions' first offsets (the LSO)", async () => {
    const store = new MemoryControlStore();
    await store.putControl('txn-aborted', '0:lp.a', { stream: 'lp.a', partition: 0, aborted: [{ producerId: 5, firstOffset: 1, lastOffset: 4 }] });
    const open = meta('lp.open', 6, 'Ongoing', 'lp.a');
    open.partitions = [{ stream: 'lp.a', partition: 0, startOffset: 9 }];
    await store.putControl('txn', 'lp.open', open as unknown as Record<string, unknown>);
    await store.putControl('txn', 'lp.done', meta('lp.done', 7, 'CompleteAbort', 'lp.a') as unknown as Record<string, unknown>);
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    await engine.createStream({ name: 'lp.a', partitions: 1 });
    engine.produce('lp.a', 0, encodeBatch(Array.from({ length: 9 }, (_, i) => ({ key: null, value: Buffer.from(`r${i}`), headers: [], timestamp: 1000 }))));
    engine.produce('lp.a', 0, txnBatch(6, ['open'])); // the open transaction's record, at 9
    const c = new TransactionCoordinator(engine, store, async () => 999, captureLogger().logger);
    c.partitions.onAppend('lp.a', 0, 77, 2); // stale state of an earlier leadership: dropped
    await c.loadPartition('lp.a', 0);
    assert.deepEqual(c.partitions.abortedIn('lp.a', 0, 0, 20), [{ producerId: 5, firstOffset: 1, lastOffset: 4 }]);
    assert.equal(c.partitions.lso('lp.a', 0, 20), 9, 'the open transaction holds the LSO from its first record');
    assert.equal(c.partitions.firstOffset('lp.a', 0, 77), undefined);
    // A partition leader that does not coordinate the producer refuses an epoch older than one it saw.
    c.markers = async () => 0;
    assert.equal(c.checkProduce(6, 3, 'lp.a', 0), 0);
    assert.equal(c.checkProduce(6, 2, 'lp.a', 0), 47, 'INVALID_PRODUCER_EPOCH');
  });
  it("a new leader takes the open transaction's first offset from the log, not from the coordinator's old view", async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    const store = new MemoryControlStore();
    await engine.createStream({ name: 'st.a', partitions: 1 });
    // Producer 8's earlier transactions, committed (records 0-1, marker 2; records 3-4, marker 5), another
    // producer's record (6), then the open transaction's records (7-8).
    engine.produce('st.a', 0, txnBatch(8, ['c1', 'c1']));
    engine.appendControl('st.a', 0, encodeControlBatch(8, 0, true, 0, 1000));
    engine.produce('st.a', 0, txnBatch(8, ['c2', 'c2']));
    engine.appendControl('st.a', 0, encodeControlBatch(8, 0, true, 0, 1000));
    engine.produce('st.a', 0, encodeBatch([{ key: null, value: Buffer.from('other'), headers: [], timestamp: 1000 }]));
    engine.produce('st.a', 0, txnBatch(8, ['open', 'open']));
    // Its coordinator, on another broker, saw the partition at 0 when it joined the transaction (a cluster broker's
    // offsets of a partition led elsewhere come from a cache, 0 when never asked).
    const open = meta('st.open', 8, 'Ongoing', 'st.a');
    open.partitions = [{ stream: 'st.a', partition: 0, startOffset: 0 }];
    await store.putControl('txn', 'st.open', open as unknown as Record<string, unknown>);
    const c = new TransactionCoordinator(engine, store, async () => 999, captureLogger().logger);
    await c.loadPartition('st.a', 0);
    assert.equal(c.partitions.lso('st.a', 0, 9), 7, "the LSO is held at the open transaction's first record");
    // The next incarnation of the producer aborts it: the abort covers its records only, not the committed ones.
    const marker = await c.writeMarker({ stream: 'st.a', partition: 0, producerId: 8, producerEpoch: 1, commit: false, startOffset: 0 });
    assert.equal(marker, 9);
    assert.deepEqual(c.partitions.abortedIn('st.a', 0, 0, 10), [{ producerId: 8, firstOffset: 7, lastOffset: 9 }]);

    // A transaction that added the partition and wrote nothing there: its abort covers nothing but its marker.
    const none = await c.writeMarker({ stream: 'st.a', partition: 0, producerId: 8, producerEpoch: 2, commit: false, startOffset: 0 });
    assert.deepEqual(c.partitions.abortedIn('st.a', 0, 10, 11), [{ producerId: 8, firstOffset: none, lastOffset: none }]);
  });
});
