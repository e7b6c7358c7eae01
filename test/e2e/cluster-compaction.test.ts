// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Compacted topics in cluster mode (issue 27): separate `bin/flowmq --cluster` processes on PostgreSQL and s3rver
 * (test/helpers/cluster.ts). A compacted topic's partitions are spread over the brokers; a cleaner pass asked of one
 * broker runs at the owner of each partition (epoch-fenced swaps); after kill -9 of an owner, its
 * partitions' new owners serve the compacted segments: a KafkaJS consumer from offset 0 sees the last record of
 * each key at its offset. The end of each partition is a marker record produced after the cleaners ran.
 * And a compacted topic written by a KafkaJS transactional producer, with committed and aborted transactions over
 * partitions led by both brokers: each leader's cleaner has the partition's transaction state (aborted list, open
 * transactions, loaded when it took the partition), so the aborted records go and never displace committed values;
 * after the kill -9, broker 1 cleans an aborted transaction broker 2 left in the partitions it took over.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg, { type EachMessagePayload } from 'kafkajs';
import { startCluster, type TestCluster } from '../helpers/cluster.js';

const { Kafka, logLevel } = kafkajsPkg;
const PARTITIONS = 4;
const KEYS = 20;
const VERSIONS = 8;

interface Seen {
  partition: number;
  offset: number;
  key: string;
  value: string | null;
}

async function consumeToMarkers(brokers: string[], topic: string, readUncommitted = false, marker = 'marker'): Promise<Seen[]> {
  const kafka = new Kafka({ clientId: 'cluster-compaction-reader', brokers, logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: `reader-${Date.now()}-${Math.random()}`, maxWaitTimeInMs: 200, readUncommitted });
  const seen: Seen[] = [];
  const markers = new Set<number>();
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`markers of ${[...markers].join(',')} only, after ${seen.length} records`)), 60_000);
      void consumer
        .run({
          eachMessage: async ({ partition, message }: EachMessagePayload) => {
            const key = message.key!.toString();
            if (key === marker) {
              markers.add(partition);
              if (markers.size === PARTITIONS) {
                clearTimeout(timer);
                resolve();
              }
              return;
            }
            seen.push({ partition, offset: Number(message.offset), key, value: message.value === null ? null : message.value.toString() });
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return seen.sort((a, b) => a.partition - b.partition || a.offset - b.offset);
}

describe('compacted topics across broker processes', { timeout: 180_000 }, () => {
  let c: TestCluster;
  /** The transactional topic's committed records, as the first test left them, for the last one. */
  let committed: Seen[] = [];
  before(async () => {
    c = await startCluster({ brokers: 2, leaseMs: 1500, haproxy: false, args: ['--kafka-group-initial-rebalance-delay', '0'] });
  });
  after(async () => {
    await c?.close();
  });

  it("each leader's cleaner removes aborted transactions' records; committed ones keep their offsets and latest values", async () => {
    const brokers = c.running.map((b) => b.kafka);
    const kafka = new Kafka({ clientId: 'cluster-compaction-txn', brokers, logLevel: logLevel.NOTHING, retry: { retries: 10, initialRetryTime: 100 } });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({
      waitForLeaders: true,
      topics: [{ topic: 'ttable', numPartitions: PARTITIONS, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }],
    });
    await admin.disconnect();
    const rows = await c.waitSettled({ kinds: ['partition'], min: { partition: PARTITIONS } });
    const owners = new Map(rows.filter((r) => r.name.startsWith('ttable/')).map((r) => [r.name, r.owner]));
    assert.equal(owners.size, PARTITIONS);
    assert.equal(new Set(owners.values()).size, 2, `partitions led by both brokers: ${JSON.stringify([...owners])}`);

    const producer = kafka.producer({ transactionalId: 'cluster-compaction-txn', idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    // In every partition: committed k0-k9; aborted k0-k10 (k10 only there); committed k5-k9 again.
    const latest = new Map<string, Seen>();
    const txn = async (prefix: string, from: number, to: number, commit: boolean): Promise<void> => {
      const t = await producer.transaction();
      const sent: Array<{ partition: number; keys: string[]; values: string[]; base: number }> = [];
      for (let p = 0; p < PARTITIONS; p++) {
        const keys = Array.from({ length: to - from }, (_, i) => `p${p}-k${from + i}`);
        const values = keys.map((k) => `${prefix}-${k}`);
        const [meta] = await t.send({ topic: 'ttable', messages: keys.map((key, i) => ({ key, value: values[i], partition: p })) });
        sent.push({ partition: p, keys, values, base: Number(meta.baseOffset) });
      }
      if (!commit) return t.abort();
      await t.commit();
      for (const x of sent) x.keys.forEach((key, i) => latest.set(key, { partition: x.partition, offset: x.base + i, key, value: x.values[i] }));
    };
    await txn('c1', 0, 10, true);
    await txn('aborted', 0, 11, false);
    await txn('c3', 5, 10, true);
    await producer.disconnect();
    const plain = kafka.producer();
    await plain.connect();
    await plain.send({ topic: 'ttable', messages: Array.from({ length: PARTITIONS }, (_, p) => ({ key: 'marker', value: 'end', partition: p })) });
    await plain.disconnect();
    const before = await consumeToMarkers(brokers, 'ttable', true);
    assert.equal(before.filter((s) => s.value?.startsWith('aborted-')).length, 11 * PARTITIONS, 'before the cleaners, the aborted records are in the log');

    // Every broker is asked: each cleans the partitions it leads (sealing them first).
    for (const b of c.running) await b.proc.api('POST', '/api/v1/streams/ttable/compact');
    const expected = [...latest.values()].sort((a, b) => a.partition - b.partition || a.offset - b.offset);
    assert.equal(expected.length, 10 * PARTITIONS);
    const uncommitted = await consumeToMarkers(brokers, 'ttable', true);
    assert.deepEqual(
      uncommitted.filter((s) => s.value?.startsWith('aborted-')),
      [],
      'read_uncommitted from offset 0 sees no aborted record',
    );
    assert.deepEqual(uncommitted, expected, 'read_uncommitted: the last committed record of each key, at its offset');
    assert.deepEqual(await consumeToMarkers(brokers, 'ttable'), expected, 'read_committed: the same');
    committed = expected;

    // Left for the last test: one more aborted transaction, not cleaned before broker 2 dies (markers 'marker2' after it).
    await producer.connect();
    await txn('aborted2', 0, 11, false);
    await producer.disconnect();
    await plain.connect();
    await plain.send({ topic: 'ttable', messages: Array.from({ length: PARTITIONS }, (_, p) => ({ key: 'marker2', value: 'end', partition: p })) });
    await plain.disconnect();
    const pending = await consumeToMarkers(brokers, 'ttable', true, 'marker2');
    assert.equal(pending.filter((s) => s.value?.startsWith('aborted2-')).length, 11 * PARTITIONS);
  });

  it('each owner cleans its partitions; after kill -9 of one, the new owner serves the compacted data', async () => {
    const kafka = new Kafka({ clientId: 'cluster-compaction', brokers: [c.broker(1).kafka], logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({
      waitForLeaders: true,
      topics: [{ topic: 'ctable', numPartitions: PARTITIONS, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }],
    });
    await admin.disconnect();
    const rows = await c.waitSettled({ kinds: ['partition'], min: { partition: 2 * PARTITIONS } });
    const owners = new Map(rows.filter((r) => r.name.startsWith('ctable/')).map((r) => [r.name, r.owner]));
    assert.equal(new Set(owners.values()).size, 2, `partitions on both brokers: ${JSON.stringify([...owners])}`);

    const producer = kafka.producer();
    await producer.connect();
    const latest = new Map<string, Seen>();
    for (let v = 0; v < VERSIONS; v++) {
      for (let p = 0; p < PARTITIONS; p++) {
        const messages = Array.from({ length: KEYS }, (_, k) => ({
          key: `p${p}-k${k}`,
          value: v === VERSIONS - 1 && k === 0 ? null : `p${p}-k${k}-v${v}`,
          partition: p,
        }));
        const [meta] = await producer.send({ topic: 'ctable', messages });
        messages.forEach((m, i) => latest.set(m.key, { partition: p, offset: Number(meta.baseOffset) + i, key: m.key, value: m.value }));
      }
    }
    // Asked of broker 1 only: it cleans what it owns and has broker 2 clean the partitions broker 2 owns.
    await c.broker(1).proc.api('POST', '/api/v1/streams/ctable/compact');

    // kill -9 of broker 2: its partitions move to broker 1, which reads the compacted segments it did not write.
    await c.kill(2);
    await c.waitBrokerDead(2);
    for (let p = 0; p < PARTITIONS; p++) await producer.send({ topic: 'ctable', messages: [{ key: 'marker', value: 'end', partition: p }] });
    await producer.disconnect();

    const seen = await consumeToMarkers([c.broker(1).kafka], 'ctable');
    const expected = [...latest.values()].sort((a, b) => a.partition - b.partition || a.offset - b.offset);
    assert.deepEqual(seen, expected, 'the last record of each key, at its offset, in every partition');
    assert.equal(seen.filter((s) => s.value === null).length, PARTITIONS, 'one tombstone per partition kept');
  });

  it("after kill -9 of a leader, the new leader's cleaner removes the aborted transaction it took over", async () => {
    // Broker 2 died in the test above: broker 1 leads every partition of ttable now, having loaded their aborted
    // lists (the abort of 'aborted2' was stored by broker 2) before serving them.
    await c.broker(1).proc.api('POST', '/api/v1/streams/ttable/compact');
    const seen = (await consumeToMarkers([c.broker(1).kafka], 'ttable', true, 'marker2')).filter((s) => s.key !== 'marker');
    assert.deepEqual(
      seen.filter((s) => s.value?.startsWith('aborted')),
      [],
      'read_uncommitted from offset 0 sees no aborted record',
    );
    assert.deepEqual(seen, committed, 'the committed records at their offsets');
  });
});
