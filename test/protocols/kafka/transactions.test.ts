/**
 * The transaction APIs at the protocol level with a raw client (KIP-98, KIP-360, KIP-588): each error code the
 * coordinator answers and the version that decides between PRODUCER_FENCED and INVALID_PRODUCER_EPOCH, the
 * validation of transactional produce, and what Fetch and ListOffsets answer around an open and an aborted
 * transaction (last stable offset, aborted transactions, the marker batch itself). The clients' view is in
 * test/e2e/kafka-transactions*.test.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  ATTR_CONTROL,
  ATTR_TRANSACTIONAL,
  crc32c,
  decodeBatch,
  encodeBatch,
  encodeControlBatch,
  readBatchInfo,
  splitBatches,
} from '../../../src/core/index.js';
import {
  AddOffsetsToTxnApi,
  AddPartitionsToTxnApi,
  DescribeProducersApi,
  EndTxnApi,
  FetchApi,
  InitProducerIdApi,
  KafkaErrorCode as E,
  ListOffsetsApi,
  ProduceApi,
  TxnOffsetCommitApi,
  ZERO_UUID,
  type FetchPartitionResponse,
} from '../../../src/protocols/kafka/codec/index.js';
import { RawClient, startMemoryKafka, type MemoryKafka } from './helpers.js';

/** A transactional batch of `n` records (attribute bit 4) from producer `pid`/`epoch` at sequence `seq`. */
function txnBatch(pid: number, epoch: number, seq: number, values: string[]): Buffer {
  const b = encodeBatch(values.map((v) => ({ key: null, value: Buffer.from(v), headers: [], timestamp: Date.now() })));
  b.writeInt16BE(ATTR_TRANSACTIONAL, 21);
  b.writeBigInt64BE(BigInt(pid), 43);
  b.writeInt16BE(epoch, 51);
  b.writeInt32BE(seq, 53);
  b.writeUInt32BE(crc32c(b, 21, b.length), 17);
  return b;
}

/** The batches of a fetched partition (the decoder hands its records as one buffer). */
const batchesOf = (p: FetchPartitionResponse): Buffer[] => splitBatches(Buffer.concat(p.records ?? []));

describe('kafka transactions: the coordinator and the log at the protocol level', () => {
  let k: MemoryKafka;
  let c: RawClient;
  before(async () => {
    k = await startMemoryKafka();
    await k.engine.createStream({ name: 'tp.a', partitions: 2 });
    c = await RawClient.connect(k.port);
  });
  after(async () => {
    c?.close();
    await k.listener.close();
  });

  const init = (id: string, version = 4, current = { producerId: -1, producerEpoch: -1 }, timeoutMs = 60000) =>
    c.call(InitProducerIdApi, version, { transactionalId: id, transactionTimeoutMs: timeoutMs, ...current });
  const add = async (id: string, pid: number, epoch: number, parts: Array<[string, number]>, version = 3) =>
    (
      await c.call(AddPartitionsToTxnApi, version, {
        transactionalId: id,
        producerId: pid,
        producerEpoch: epoch,
        topics: [...new Set(parts.map((p) => p[0]))].map((name) => ({ name, partitions: parts.filter((p) => p[0] === name).map((p) => p[1]) })),
      })
    ).results.flatMap((t) => t.results.map((r) => r.errorCode));
  const end = async (id: string, pid: number, epoch: number, committed: boolean, version = 3) =>
    (await c.call(EndTxnApi, version, { transactionalId: id, producerId: pid, producerEpoch: epoch, committed })).errorCode;
  const produce = async (partition: number, batch: Buffer) =>
    (
      await c.call(ProduceApi, 9, {
        transactionalId: 'ignored',
        acks: -1,
        timeoutMs: 5000,
        topics: [{ name: 'tp.a', partitions: [{ index: partition, records: batch }] }],
      })
    ).topics[0].partitions[0];
  const fetch = async (partition: number, offset: number, isolationLevel: number): Promise<FetchPartitionResponse> =>
    (
      await c.call(FetchApi, 12, {
        replicaId: -1,
        maxWaitMs: 0,
        minBytes: 0,
        maxBytes: 1 << 20,
        isolationLevel,
        sessionId: 0,
        sessionEpoch: -1,
        topics: [
          {
            topic: 'tp.a',
            topicId: ZERO_UUID,
            partitions: [{ partition, currentLeaderEpoch: -1, fetchOffset: offset, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 1 << 20 }],
          },
        ],
        forgottenTopics: [],
        rackId: '',
        clusterId: null,
      })
    ).responses[0].partitions[0];

  it('InitProducerId: a stable producer id per transactional id, its epoch bumped by each initialization', async () => {
    assert.equal((await init('t-init', 4, undefined, 0)).errorCode, E.INVALID_TRANSACTION_TIMEOUT);
    assert.equal((await init('t-init', 4, undefined, 900_001)).errorCode, E.INVALID_TRANSACTION_TIMEOUT);
    const a = await init('t-init');
    assert.deepEqual([a.errorCode, a.producerEpoch], [E.NONE, 0]);
    const b = await init('t-init');
    assert.deepEqual([b.errorCode, b.producerId, b.producerEpoch], [E.NONE, a.producerId, 1]);
    // KIP-360: a producer naming an epoch that is not the current one is a zombie.
    const stale = { producerId: a.producerId, producerEpoch: 0 };
    assert.equal((await init('t-init', 4, stale)).errorCode, E.PRODUCER_FENCED);
    assert.equal((await init('t-init', 3, stale)).errorCode, E.INVALID_PRODUCER_EPOCH, 'v3 knows no PRODUCER_FENCED');
    const c2 = await init('t-init', 4, { producerId: a.producerId, producerEpoch: 1 });
    assert.deepEqual([c2.errorCode, c2.producerId, c2.producerEpoch], [E.NONE, a.producerId, 2], 'the current incarnation may re-initialize');
    const other = await init('t-other');
    assert.notEqual(other.producerId, a.producerId);
  });

  it('AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn: mapping, fencing and state errors', async () => {
    const { producerId: pid, producerEpoch: epoch } = await init('t-err');
    assert.deepEqual(await add('t-err', pid + 1000, epoch, [['tp.a', 0]]), [E.INVALID_PRODUCER_ID_MAPPING]);
    assert.deepEqual(await add('t-unknown', pid, epoch, [['tp.a', 0]]), [E.INVALID_PRODUCER_ID_MAPPING]);
    assert.deepEqual(await add('t-err', pid, epoch - 1, [['tp.a', 0]], 2), [E.PRODUCER_FENCED]);
    assert.deepEqual(await add('t-err', pid, epoch - 1, [['tp.a', 0]], 1), [E.INVALID_PRODUCER_EPOCH]);
    assert.deepEqual(
      await add('t-err', pid, epoch, [
        ['tp.a', 0],
        ['tp.nope', 0],
        ['tp.a', 9],
      ]),
      [E.OPERATION_NOT_ATTEMPTED, E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION],
    );
    assert.equal(await end('t-err', pid, epoch, true), E.INVALID_TXN_STATE, 'no transaction is open');
    // Offsets need AddOffsetsToTxn for their group first.
    const toc = async () =>
      (
        await c.call(TxnOffsetCommitApi, 3, {
          transactionalId: 't-err',
          groupId: 'g',
          producerId: pid,
          producerEpoch: epoch,
          generationId: -1,
          memberId: '',
          groupInstanceId: null,
          topics: [{ name: 'tp.a', partitions: [{ partitionIndex: 0, committedOffset: 3, committedLeaderEpoch: -1, committedMetadata: null }] }],
        })
      ).topics[0].partitions[0].errorCode;
    assert.equal(await toc(), E.INVALID_TXN_STATE);
    const ao = await c.call(AddOffsetsToTxnApi, 3, { transactionalId: 't-err', producerId: pid, producerEpoch: epoch, groupId: 'g' });
    assert.equal(ao.errorCode, E.NONE);
    assert.equal(await toc(), E.NONE);
    assert.equal(await k.engine.store.fetchOffset('g', 'tp.a', 0), null, 'not committed before the transaction');
    assert.equal(await end('t-err', pid, epoch, true), E.NONE);
    assert.equal((await k.engine.store.fetchOffset('g', 'tp.a', 0))?.offset, 3, 'committed with it');
    assert.equal(await end('t-err', pid, epoch, true), E.NONE, 'a retried EndTxn is answered as the first');
    assert.equal(await end('t-err', pid, epoch, false), E.INVALID_TXN_STATE, 'but not the opposite outcome');
    // A new incarnation fences this one's EndTxn (v2+: PRODUCER_FENCED).
    await init('t-err');
    assert.equal(await end('t-err', pid, epoch, false, 2), E.PRODUCER_FENCED);
    assert.equal(await end('t-err', pid, epoch, false, 1), E.INVALID_PRODUCER_EPOCH);
  });

  it('refuses a transactional produce outside the transaction: unknown producer, old epoch, partition not added', async () => {
    const { producerId: pid, producerEpoch: epoch } = await init('t-prod');
    assert.equal((await produce(0, txnBatch(pid + 5000, 0, 0, ['x']))).errorCode, E.INVALID_PRODUCER_ID_MAPPING);
    assert.equal((await produce(0, txnBatch(pid, epoch, 0, ['x']))).errorCode, E.INVALID_TXN_STATE, 'no AddPartitionsToTxn');
    assert.deepEqual(await add('t-prod', pid, epoch, [['tp.a', 0]]), [E.NONE]);
    assert.equal((await produce(1, txnBatch(pid, epoch, 0, ['x']))).errorCode, E.INVALID_TXN_STATE, 'another partition');
    assert.equal((await produce(0, txnBatch(pid, epoch + 1, 0, ['x']))).errorCode, E.INVALID_PRODUCER_EPOCH);
    assert.equal((await produce(0, txnBatch(pid, epoch, 0, ['ok']))).errorCode, E.NONE);
    assert.equal(await end('t-prod', pid, epoch, true), E.NONE);
  });

  it('Fetch: the last stable offset holds read_committed at an open transaction; an abort lists it with its marker', async () => {
    const hw0 = k.engine.offsets('tp.a', 1).highWatermark;
    const { producerId: pid, producerEpoch: epoch } = await init('t-fetch');
    assert.deepEqual(await add('t-fetch', pid, epoch, [['tp.a', 1]]), [E.NONE]);
    const r = await produce(1, txnBatch(pid, epoch, 0, ['a1', 'a2', 'a3']));
    assert.deepEqual([r.errorCode, r.baseOffset], [E.NONE, hw0]);
    // A non-transactional record after it.
    k.engine.produce('tp.a', 1, encodeBatch([{ key: null, value: Buffer.from('plain'), headers: [], timestamp: Date.now() }]));

    const rc = await fetch(1, hw0, 1);
    const bytes = (p: FetchPartitionResponse): number => (p.records ?? []).reduce((n, b) => n + b.length, 0);
    assert.deepEqual([rc.errorCode, rc.highWatermark, rc.lastStableOffset, bytes(rc)], [E.NONE, hw0 + 4, hw0, 0], 'nothing at or past the LSO');
    assert.deepEqual(rc.abortedTransactions, []);
    const ru = await fetch(1, hw0, 0);
    assert.deepEqual(
      [ru.lastStableOffset, batchesOf(ru).map((b) => readBatchInfo(b).baseOffset), ru.abortedTransactions],
      [hw0, [hw0, hw0 + 3], null],
      'read_uncommitted: everything',
    );
    const lo = async (isolationLevel: number) =>
      (
        await c.call(ListOffsetsApi, 5, {
          replicaId: -1,
          isolationLevel,
          topics: [{ name: 'tp.a', partitions: [{ partitionIndex: 1, currentLeaderEpoch: -1, timestamp: -1 }] }],
        })
      ).topics[0].partitions[0].offset;
    assert.deepEqual([await lo(1), await lo(0)], [hw0, hw0 + 4], 'ListOffsets latest: the LSO read_committed, the high watermark else');

    const described = async () =>
      (await c.call(DescribeProducersApi, 0, { topics: [{ name: 'tp.a', partitionIndexes: [1] }] })).topics[0].partitions[0].activeProducers.find(
        (a) => a.producerId === pid,
      );
    const open = await described();
    assert.deepEqual([open?.coordinatorEpoch, open?.currentTxnStartOffset], [0, hw0], 'DescribeProducers: the open transaction');
    assert.equal(await end('t-fetch', pid, epoch, false), E.NONE);
    assert.equal((await described())?.currentTxnStartOffset, -1, 'none open after the abort');
    const after = await fetch(1, hw0, 1);
    assert.deepEqual([after.highWatermark, after.lastStableOffset], [hw0 + 5, hw0 + 5]);
    assert.deepEqual(after.abortedTransactions, [{ producerId: BigInt(pid), firstOffset: hw0 }]);
    const batches = batchesOf(after);
    assert.deepEqual(
      batches.map((b) => readBatchInfo(b).baseOffset),
      [hw0, hw0 + 3, hw0 + 4],
      'the aborted batch, the plain one and the marker, as stored',
    );
    const marker = readBatchInfo(batches[2]);
    assert.deepEqual(
      [marker.baseOffset, marker.attributes & (ATTR_CONTROL | ATTR_TRANSACTIONAL), Number(marker.producerId), marker.baseSequence],
      [hw0 + 4, ATTR_CONTROL | ATTR_TRANSACTIONAL, pid, -1],
    );
    assert.deepEqual(decodeBatch(batches[2]), [], 'a marker decodes to no record: no protocol delivers it');
    // Past the aborted transaction nothing is listed.
    assert.deepEqual((await fetch(1, hw0 + 5, 1)).abortedTransactions, []);
  });

  it('encodes markers as Kafka does: key version 0 and type, value version 0 and coordinator epoch', () => {
    const b = encodeControlBatch(7, 3, true, 0, 1000);
    const info = readBatchInfo(b);
    assert.equal(info.attributes, ATTR_CONTROL | ATTR_TRANSACTIONAL);
    assert.equal(info.producerEpoch, 3);
    // One record: skip its length, attributes, timestamp and offset deltas (all single-byte varints here).
    const rec = b.subarray(61);
    assert.equal(rec[4], 8, 'key length 4 (zig-zag)');
    assert.deepEqual([...rec.subarray(5, 9)], [0, 0, 0, 1], 'version 0, type 1 (commit)');
    assert.equal(rec[9], 12, 'value length 6');
    assert.deepEqual([...rec.subarray(10, 16)], [0, 0, 0, 0, 0, 0], 'version 0, coordinator epoch 0');
  });
});
