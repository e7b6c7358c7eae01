/**
 * Idempotent producers (KIP-98) against a real `flowmq start` process: producer ids never repeat, retried
 * batches are not stored twice, gaps answer OUT_OF_ORDER_SEQUENCE_NUMBER and old epochs INVALID_PRODUCER_EPOCH,
 * and all of it holds after a crash (kill -9) whether the batches were still in the WAL or already sealed into a
 * segment (producer-state snapshot in the metastore). On the embedded storage and on PostgreSQL + S3
 * (storage-configs.ts): there the WAL replayed after the crash is a PostgreSQL table and the segment is in S3.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import { crc32c, encodeBatch } from '../../src/core/index.js';
import { InitProducerIdApi, KafkaErrorCode as E, ProduceApi } from '../../src/protocols/kafka/codec/index.js';
import { RawClient } from '../protocols/kafka/helpers.js';
import { FlowmqProcess } from './harness.js';
import { storageConfigs } from './storage-configs.js';

const { Kafka, logLevel } = kafkajsPkg;

/** A batch of `n` records from producer `pid`/`epoch` starting at sequence `seq`. */
function idemBatch(pid: number, epoch: number, seq: number, n: number, tag: string): Buffer {
  const b = encodeBatch(Array.from({ length: n }, (_, i) => ({ key: null, value: Buffer.from(`${tag}-${i}`), headers: [], timestamp: Date.now() })));
  b.writeBigInt64BE(BigInt(pid), 43);
  b.writeInt16BE(epoch, 51);
  b.writeInt32BE(seq, 53);
  b.writeUInt32BE(crc32c(b, 21, b.length), 17);
  return b;
}

async function send(c: RawClient, topic: string, partition: number, batch: Buffer): Promise<{ errorCode: number; baseOffset: number }> {
  const res = await c.call(ProduceApi, 7, {
    transactionalId: null,
    acks: -1,
    timeoutMs: 5000,
    topics: [{ name: topic, partitions: [{ index: partition, records: batch }] }],
  });
  return res.topics[0].partitions[0];
}

async function initPid(c: RawClient, version = 4): Promise<number> {
  const r = await c.call(InitProducerIdApi, version, { transactionalId: null, transactionTimeoutMs: 60000, producerId: -1, producerEpoch: -1 });
  assert.equal(r.errorCode, E.NONE);
  assert.equal(r.producerEpoch, 0);
  return r.producerId;
}

for (const cfg of storageConfigs())
  describe(`kafka idempotent producer across a crash [${cfg.name}]`, () => {
    let broker: FlowmqProcess;
    before(async () => {
      broker = await FlowmqProcess.start({ args: await cfg.brokerArgs() });
    });
    after(async () => {
      await broker?.stop();
      broker?.cleanup();
    });

    it('drops duplicates and refuses gaps and old epochs, before and after kill -9', async () => {
      await broker.api('POST', '/api/v1/streams', { name: 'idem', partitions: 2 });
      let c = await RawClient.connect(broker.ports.kafka);
      const pid = await initPid(c);
      const other = await initPid(c, 1);
      assert.notEqual(pid, other);
      const tx = await c.call(InitProducerIdApi, 1, { transactionalId: 'tx-1', transactionTimeoutMs: 60000, producerId: -1, producerEpoch: -1 });
      assert.equal(tx.errorCode, E.NONE, 'a transactional id gets its producer id from the transaction coordinator');
      assert.ok(tx.producerId !== pid && tx.producerId !== other, 'from the same never-repeating blocks');

      // Partition 1: one batch sealed into a segment (flush), one left in the WAL.
      const p1a = idemBatch(pid, 0, 0, 2, 'p1a');
      assert.deepEqual([(await send(c, 'idem', 1, p1a)).baseOffset], [0]);
      await broker.api('POST', '/api/v1/streams/idem/flush');
      const a = idemBatch(pid, 0, 0, 3, 'a');
      const b = idemBatch(pid, 0, 3, 2, 'b');
      const ra = await send(c, 'idem', 0, a);
      assert.deepEqual([ra.errorCode, ra.baseOffset], [E.NONE, 0]);
      const rb = await send(c, 'idem', 0, b);
      assert.deepEqual([rb.errorCode, rb.baseOffset], [E.NONE, 3]);
      const dupB = await send(c, 'idem', 0, Buffer.from(b));
      assert.deepEqual([dupB.errorCode, dupB.baseOffset], [E.NONE, 3], 'a retried batch gets its original offset');
      const dupA = await send(c, 'idem', 0, Buffer.from(a));
      assert.deepEqual([dupA.errorCode, dupA.baseOffset], [E.NONE, 0], 'any of the last five batches is recognised');
      const gap = await send(c, 'idem', 0, idemBatch(pid, 0, 10, 1, 'gap'));
      assert.equal(gap.errorCode, E.OUT_OF_ORDER_SEQUENCE_NUMBER);

      const p1b = idemBatch(pid, 0, 2, 1, 'p1b');
      assert.equal((await send(c, 'idem', 1, p1b)).baseOffset, 2);
      const described = await broker.api<{ partitionDetails: Array<{ partition: number; highWatermark: number; flushedOffset: number }> }>(
        'GET',
        '/api/v1/streams/idem',
      );
      assert.deepEqual(
        described.partitionDetails.map((p) => [p.partition, p.highWatermark, p.flushedOffset]),
        [
          [0, 5, 0],
          [1, 3, 2],
        ],
      );
      c.close();

      // Crash: no final flush; partition 0 lives only in the WAL, partition 1 half in a segment.
      await broker.stop('SIGKILL');
      broker = await FlowmqProcess.start({ dataDir: broker.dataDir, args: broker.args });
      c = await RawClient.connect(broker.ports.kafka);
      try {
        const again = await send(c, 'idem', 0, Buffer.from(b));
        assert.deepEqual([again.errorCode, again.baseOffset], [E.NONE, 3], 'duplicate after the crash (WAL replay)');
        assert.equal((await send(c, 'idem', 0, idemBatch(pid, 0, 9, 1, 'gap'))).errorCode, E.OUT_OF_ORDER_SEQUENCE_NUMBER);
        const next = await send(c, 'idem', 0, idemBatch(pid, 0, 5, 1, 'c'));
        assert.deepEqual([next.errorCode, next.baseOffset], [E.NONE, 5]);
        const sealedDup = await send(c, 'idem', 1, Buffer.from(p1a));
        assert.deepEqual([sealedDup.errorCode, sealedDup.baseOffset], [E.NONE, 0], 'duplicate of a sealed batch (snapshot)');
        const tailDup = await send(c, 'idem', 1, Buffer.from(p1b));
        assert.deepEqual([tailDup.errorCode, tailDup.baseOffset], [E.NONE, 2]);
        // A new epoch starts at sequence 0; the old epoch is then fenced.
        const e1 = await send(c, 'idem', 1, idemBatch(pid, 1, 0, 1, 'e1'));
        assert.deepEqual([e1.errorCode, e1.baseOffset], [E.NONE, 3]);
        assert.equal((await send(c, 'idem', 1, idemBatch(pid, 0, 3, 1, 'old'))).errorCode, E.INVALID_PRODUCER_EPOCH);
        assert.equal((await send(c, 'idem', 1, idemBatch(pid, 2, 5, 1, 'bad'))).errorCode, E.OUT_OF_ORDER_SEQUENCE_NUMBER);
        // Producer ids keep growing across the restart.
        const after = await initPid(c, 3);
        assert.ok(after > Math.max(pid, other), `new id ${after} after ${pid}, ${other}`);
        const d = await broker.api<{ partitionDetails: Array<{ highWatermark: number }> }>('GET', '/api/v1/streams/idem');
        assert.deepEqual(
          d.partitionDetails.map((p) => p.highWatermark),
          [6, 4],
          'nothing was stored twice',
        );
      } finally {
        c.close();
      }
    });

    it('KafkaJS idempotent producer writes once per record', async () => {
      const kafka = new Kafka({ brokers: [broker.kafka], clientId: 'idem-kjs', logLevel: logLevel.NOTHING });
      const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      for (let i = 0; i < 5; i++) await producer.send({ topic: 'idem.kjs', acks: -1, messages: [{ value: `v${i}` }, { value: `w${i}` }] });
      await producer.disconnect();
      const admin = kafka.admin();
      await admin.connect();
      const offs = await admin.fetchTopicOffsets('idem.kjs');
      await admin.disconnect();
      assert.deepEqual(
        offs.map((o) => o.high),
        ['10'],
      );
    });
  });
