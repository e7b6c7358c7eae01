// test-runner: alone (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another file
/**
 * Compacted topics in cluster mode (issue 27): separate `bin/flowmq --cluster` processes on PostgreSQL and s3rver
 * (test/helpers/cluster.ts). A compacted topic's partitions are spread over the brokers; a cleaner pass asked of
 * every broker cleans only the partitions that broker owns (epoch-fenced swaps); after kill -9 of an owner, its
 * partitions' new owners serve the compacted segments: a KafkaJS consumer from offset 0 sees the last record of
 * each key at its offset. The end of each partition is a marker record produced after the cleaners ran.
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

async function consumeToMarkers(brokers: string[], topic: string): Promise<Seen[]> {
  const kafka = new Kafka({ clientId: 'cluster-compaction-reader', brokers, logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: `reader-${Date.now()}`, maxWaitTimeInMs: 200 });
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
            if (key === 'marker') {
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
  before(async () => {
    c = await startCluster({ brokers: 2, leaseMs: 1500, haproxy: false });
  });
  after(async () => {
    await c?.close();
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
    const rows = await c.waitSettled({ kinds: ['partition'], min: { partition: PARTITIONS } });
    const owners = new Map(rows.filter((r) => r.name.startsWith('ctable')).map((r) => [r.name, r.owner]));
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
    // Every broker is asked: each cleans what it owns (a broker holds no other partition to clean).
    for (const b of c.running) await b.proc.api('POST', '/api/v1/streams/ctable/compact');

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
});
