/**
 * Two brokers on the same PostgreSQL (metastore and WAL) and the same S3 prefix, each with a data directory of its
 * own: the second takes every partition with a later epoch when it starts, which fences the first. The first
 * broker's next append of a partition is refused (Kafka NOT_LEADER_OR_FOLLOWER), and so is its next seal of
 * another one; each partition is logged once as fenced; the second broker serves everything the first had
 * acknowledged, whether it was sealed in S3 or still in the WAL.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { encodeBatch } from '../../src/core/index.js';
import { KafkaErrorCode as E, ProduceApi } from '../../src/protocols/kafka/codec/index.js';
import { RawClient } from '../protocols/kafka/helpers.js';
import { FlowmqProcess, kcatConsume } from './harness.js';
import { sharedArgs, sharedServices, type StorageFigures } from './storage-configs.js';

const TOPIC = 'fenced';

function batch(values: string[]): Buffer {
  return encodeBatch(values.map((v) => ({ key: null, value: Buffer.from(v), headers: [], timestamp: Date.now() })));
}

async function produce(c: RawClient, partition: number, values: string[]): Promise<{ errorCode: number; baseOffset: number }> {
  const res = await c.call(ProduceApi, 7, {
    transactionalId: null,
    acks: -1,
    timeoutMs: 10_000,
    topics: [{ name: TOPIC, partitions: [{ index: partition, records: batch(values) }] }],
  });
  const r = res.topics[0].partitions[0];
  return { errorCode: r.errorCode, baseOffset: Number(r.baseOffset) };
}

const range = (tag: string, from: number, n: number): string[] => Array.from({ length: n }, (_, i) => `${tag}-${from + i}`);

describe('a second broker on the same PostgreSQL + S3 fences the first', () => {
  const services = sharedServices();
  let a: FlowmqProcess;
  let b: FlowmqProcess | undefined;
  let args: string[];

  before(async () => {
    const svc = await services();
    args = sharedArgs(svc, await svc.pg.createDatabase(), `fencing-${process.pid}`);
    a = await FlowmqProcess.start({ args });
    await a.api('POST', '/api/v1/streams', { name: TOPIC, partitions: 2 });
  });
  after(async () => {
    for (const x of [a, b]) {
      await x?.stop('SIGKILL');
      x?.cleanup();
    }
  });

  it("refuses the first broker's next append and seal; the second serves everything the first acknowledged", async () => {
    const ca = await RawClient.connect(a.ports.kafka);
    try {
      // Partition 0: a batch sealed into S3, then one left in the WAL. Partition 1: a batch in the WAL only.
      assert.deepEqual(await produce(ca, 0, range('p0', 0, 5)), { errorCode: E.NONE, baseOffset: 0 });
      await a.api('POST', `/api/v1/streams/${TOPIC}/flush`);
      assert.equal((await produce(ca, 0, range('p0', 5, 5))).errorCode, E.NONE);
      assert.equal((await produce(ca, 1, range('p1', 0, 4))).errorCode, E.NONE);
      const before = await a.api<StorageFigures>('GET', '/api/v1/broker');
      assert.ok(before.storage.log.sealedSegments >= 1, 'partition 0 has a segment in S3');
      assert.equal(before.storage.log.fencedPartitions, 0);

      // Broker B: same metastore, WAL and bucket prefix; its own data directory.
      b = await FlowmqProcess.start({ args });
      assert.notEqual(b.dataDir, a.dataDir);

      // A's next append of partition 0 is refused, and again: the client is told to look for the leader.
      const r1 = await produce(ca, 0, range('late', 0, 1));
      assert.equal(r1.errorCode, E.NOT_LEADER_OR_FOLLOWER);
      const r2 = await produce(ca, 0, range('late', 1, 1));
      assert.equal(r2.errorCode, E.NOT_LEADER_OR_FOLLOWER);

      // A's next seal of partition 1 (a flush: the tail holds acknowledged data) is refused: no segment of A's
      // is committed for it, and the partition takes no more writes at A.
      await a.api('POST', `/api/v1/streams/${TOPIC}/flush`).catch(() => undefined);
      const afterFlush = await a.api<{ partitionDetails: Array<{ partition: number; flushedOffset: number }> }>('GET', `/api/v1/streams/${TOPIC}`);
      assert.equal(afterFlush.partitionDetails.find((p) => p.partition === 1)?.flushedOffset, 0, 'no seal of partition 1 at A');
      assert.equal((await produce(ca, 1, range('late', 2, 1))).errorCode, E.NOT_LEADER_OR_FOLLOWER);

      const fenced = a.logs.filter((l) => l.level >= 50 && l.msg.startsWith('partition fenced'));
      assert.deepEqual(
        // Partition keys name the stream's incarnation: `fenced@<created>/<partition>`.
        fenced.map((l) => String(l.partition).replace(/@\d+\//, '/')).sort(),
        [`${TOPIC}/0`, `${TOPIC}/1`].sort(),
        `one error line per fenced partition: ${JSON.stringify(fenced)}`,
      );
      const figures = await a.api<StorageFigures>('GET', '/api/v1/broker');
      assert.equal(figures.storage.log.fencedPartitions, 2);
      assert.equal(a.proc.exitCode, null, 'A keeps running (other partitions, other streams)');
    } finally {
      ca.close();
    }

    // B serves everything A acknowledged before B took the partitions, and nothing A was refused.
    assert.ok(b);
    const got = await kcatConsume(b.kafka, TOPIC);
    const byPartition = (p: number) => got.filter((m) => m.partition === p).map((m) => [m.offset, m.payload]);
    assert.deepEqual(
      byPartition(0),
      range('p0', 0, 10).map((v, i) => [i, v]),
    );
    assert.deepEqual(
      byPartition(1),
      range('p1', 0, 4).map((v, i) => [i, v]),
    );

    // B owns them: it appends after what A had, and seals into S3.
    const cb = await RawClient.connect(b.ports.kafka);
    try {
      assert.deepEqual(await produce(cb, 0, range('b', 0, 2)), { errorCode: E.NONE, baseOffset: 10 });
      assert.deepEqual(await produce(cb, 1, range('b', 2, 2)), { errorCode: E.NONE, baseOffset: 4 });
    } finally {
      cb.close();
    }
    const flushed = await b.api<{ partitionDetails: Array<{ partition: number; flushedOffset: number; highWatermark: number }> }>(
      'POST',
      `/api/v1/streams/${TOPIC}/flush`,
    );
    assert.deepEqual(
      flushed.partitionDetails.map((p) => [p.partition, p.flushedOffset, p.highWatermark]),
      [
        [0, 12, 12],
        [1, 6, 6],
      ],
    );
    const fb = await b.api<StorageFigures>('GET', '/api/v1/broker');
    assert.equal(fb.storage.log.fencedPartitions, 0);
  });
});
