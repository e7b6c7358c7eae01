/**
 * Compacted topics (issue 27) against a real `flowmq start` process, on the embedded storage and on PostgreSQL +
 * S3: the topics Kafka Connect and Schema Registry create, as they create and check them (CreateTopics with
 * cleanup.policy=compact, then DescribeConfigs of cleanup.policy, which Connect's TopicAdmin and Schema Registry's
 * KafkaStore require to be exactly "compact"); and a compacted topic written by KafkaJS with many versions per key
 * plus tombstones, cleaned by a pass asked for through the admin API, read from offset 0 by KafkaJS, kcat
 * (librdkafka) and kafka-python: the last record of each key at its original offset, tombstones kept (delete.retention.ms not
 * passed), the same after a restart. And a compacted topic written by a KafkaJS transactional producer with one
 * transaction aborted: after the cleaner, read_uncommitted readers (KafkaJS, kcat) no longer see the aborted records,
 * which did not displace the committed ones either: those keep their offsets. The end of each read is a marker
 * record produced after the cleaner ran.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg, { type Admin, type EachMessagePayload } from 'kafkajs';
import { existsSync } from 'node:fs';
import { FlowmqProcess, kcatConsume, run } from './harness.js';
import { storageConfigs } from './storage-configs.js';

const { Kafka, logLevel, ConfigResourceTypes } = kafkajsPkg;

const KEYS = 30;
const VERSIONS = 12;

interface Seen {
  offset: number;
  key: string | null;
  value: string | null;
}

/** Everything a fresh KafkaJS consumer reads from offset 0 up to the record keyed `marker`. */
async function consumeToMarker(brokers: string[], topic: string, readUncommitted = false): Promise<Seen[]> {
  const kafka = new Kafka({ clientId: 'compaction-reader', brokers, logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: `reader-${Date.now()}-${Math.random()}`, maxWaitTimeInMs: 200, readUncommitted });
  const seen: Seen[] = [];
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no marker after ${seen.length} records`)), 30_000);
      void consumer
        .run({
          eachMessage: async ({ message }: EachMessagePayload) => {
            const key = message.key === null ? null : message.key.toString();
            if (key === 'marker') {
              clearTimeout(timer);
              resolve();
              return;
            }
            seen.push({ offset: Number(message.offset), key, value: message.value === null ? null : message.value.toString() });
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return seen;
}

// Debian's interpreter, where python3-kafka is installed.
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

/** kafka-python (python3-kafka): partition 0 of `topic` from its beginning up to the record keyed `marker`. */
const PY_READ = `
import json, sys
from kafka import KafkaConsumer, TopicPartition
c = KafkaConsumer(bootstrap_servers=sys.argv[1], enable_auto_commit=False, consumer_timeout_ms=20000)
tp = TopicPartition(sys.argv[2], 0)
c.assign([tp]); c.seek_to_beginning(tp)
out = []
for m in c:
    k = None if m.key is None else m.key.decode()
    if k == 'marker': break
    out.append([m.offset, k, None if m.value is None else m.value.decode()])
print(json.dumps(out))
`;

async function pythonRead(bootstrap: string, topic: string): Promise<Seen[]> {
  const r = await run(PYTHON, ['-c', PY_READ, bootstrap, topic], { timeoutMs: 60_000 });
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as Array<[number, string | null, string | null]>).map(([offset, key, value]) => ({ offset, key, value }));
}

async function describeCleanupPolicy(admin: Admin, topic: string): Promise<string | undefined> {
  const r = await admin.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['cleanup.policy'] }],
  });
  return r.resources[0].configEntries.find((e) => e.configName === 'cleanup.policy')?.configValue;
}

for (const cfg of storageConfigs())
  describe(`kafka compacted topics [${cfg.name}]`, () => {
    let broker: FlowmqProcess;
    before(async () => {
      broker = await FlowmqProcess.start({ args: await cfg.brokerArgs(['--kafka-group-initial-rebalance-delay', '0']) });
    });
    after(async () => {
      await broker?.stop();
      broker?.cleanup();
    });

    it("creates Kafka Connect's and Schema Registry's topics as they do, and passes their start-up checks", async () => {
      const kafka = new Kafka({ clientId: 'connect-replay', brokers: [`127.0.0.1:${broker.ports.kafka}`], logLevel: logLevel.NOTHING });
      const admin = kafka.admin();
      await admin.connect();
      try {
        // Connect (distributed worker, TopicAdmin.createOrFindTopics): offsets 25 partitions, configs 1, status 5,
        // cleanup.policy=compact, the replication factor of its *.storage.replication.factor (-1: the broker's
        // default, KIP-464); Schema Registry (KafkaStore.createSchemaTopic): _schemas, 1 partition, compact.
        const specs = [
          { topic: 'connect-offsets', numPartitions: 25, replicationFactor: -1 },
          { topic: 'connect-configs', numPartitions: 1, replicationFactor: -1 },
          { topic: 'connect-status', numPartitions: 5, replicationFactor: -1 },
          { topic: '_schemas', numPartitions: 1, replicationFactor: 1 },
        ];
        const created = await admin.createTopics({
          waitForLeaders: true,
          topics: specs.map((s) => ({ ...s, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] })),
        });
        assert.equal(created, true);
        // A second worker finds them (TOPIC_ALREADY_EXISTS is "found", not a failure): createTopics answers false.
        assert.equal(await admin.createTopics({ topics: specs.map((s) => ({ ...s, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] })) }), false);
        const md = await admin.fetchTopicMetadata({ topics: specs.map((s) => s.topic) });
        for (const s of specs) {
          const t = md.topics.find((x) => x.name === s.topic)!;
          assert.equal(t.partitions.length, s.numPartitions, `${s.topic} partitions`);
          // Connect's verifyTopicCleanupPolicyOnlyCompact and Schema Registry's verifySchemaTopic: exactly "compact".
          assert.equal(await describeCleanupPolicy(admin, s.topic), 'compact', `${s.topic} is compacted`);
        }
      } finally {
        await admin.disconnect();
      }
    });

    it('keeps the last record per key at its offset, tombstones included, for KafkaJS and kcat, across a restart', async () => {
      const brokers = [`127.0.0.1:${broker.ports.kafka}`];
      const kafka = new Kafka({ clientId: 'compaction-writer', brokers, logLevel: logLevel.NOTHING });
      const admin = kafka.admin();
      await admin.connect();
      await admin.createTopics({
        topics: [
          {
            topic: 'table',
            numPartitions: 1,
            configEntries: [
              { name: 'cleanup.policy', value: 'compact' },
              { name: 'delete.retention.ms', value: '86400000' },
            ],
          },
        ],
      });
      await admin.disconnect();
      const producer = kafka.producer();
      await producer.connect();
      // What the cleaner must leave: per key, the offset and value of its last record (keys 0-4 end deleted).
      const latest = new Map<string, { offset: number; value: string | null }>();
      let produced = 0;
      for (let v = 0; v < VERSIONS; v++) {
        const messages = Array.from({ length: KEYS }, (_, k) => ({
          key: `k${k}`,
          value: v === VERSIONS - 1 && k < 5 ? null : `k${k}-v${v}-${'p'.repeat(200)}`,
        }));
        const [meta] = await producer.send({ topic: 'table', messages });
        const base = Number(meta.baseOffset);
        messages.forEach((m, i) => latest.set(m.key, { offset: base + i, value: m.value }));
        produced += messages.length;
      }
      // A keyless record is refused, as Kafka refuses it on a compacted topic.
      await assert.rejects(
        producer.send({ topic: 'table', messages: [{ value: 'no key' }] }),
        (e: unknown) => (e as { type?: string }).type === 'INVALID_RECORD',
      );

      const before = await broker.api('POST', '/api/v1/streams/table/compact');
      assert.ok(before !== null);
      await producer.send({ topic: 'table', messages: [{ key: 'marker', value: 'end' }] });
      await producer.disconnect();

      const expected = [...latest.entries()].map(([key, x]) => ({ offset: x.offset, key, value: x.value })).sort((a, b) => a.offset - b.offset);
      const check = (seen: Seen[], who: string): void => {
        assert.deepEqual(seen, expected, `${who}: the last record of each key at its offset`);
      };
      const seen = await consumeToMarker(brokers, 'table');
      check(seen, 'KafkaJS');
      assert.equal(seen.filter((s) => s.value === null).length, 5, 'tombstones kept until delete.retention.ms');
      assert.ok(seen.length < produced / 10, `${seen.length} of ${produced} records left`);

      const viaKcat = (await kcatConsume(brokers[0], 'table'))
        .filter((m) => m.key !== 'marker')
        .map((m) => ({ offset: m.offset, key: m.key, value: m.payload }));
      check(viaKcat, 'kcat');
      check(await pythonRead(brokers[0], 'table'), 'kafka-python');

      broker = await broker.restart();
      check(await consumeToMarker([`127.0.0.1:${broker.ports.kafka}`], 'table'), 'KafkaJS after a restart');
    });

    it('removes the records of an aborted transaction, for read_uncommitted KafkaJS and kcat; committed ones keep their offsets, across a restart', async () => {
      const brokers = [`127.0.0.1:${broker.ports.kafka}`];
      const kafka = new Kafka({ clientId: 'compaction-txn', brokers, logLevel: logLevel.NOTHING, retry: { retries: 2, initialRetryTime: 100 } });
      const admin = kafka.admin();
      await admin.connect();
      await admin.createTopics({ topics: [{ topic: 'txn.table', numPartitions: 1, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }] });
      await admin.disconnect();
      const producer = kafka.producer({ transactionalId: 'compaction-txn', idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      // Committed k0-k9; aborted k0-k9 and k10 (only there); committed k5-k9 again.
      const latest = new Map<string, { offset: number; value: string }>();
      const txn = async (prefix: string, keys: number[], commit: boolean): Promise<void> => {
        const t = await producer.transaction();
        const messages = keys.map((k) => ({ key: `k${k}`, value: `${prefix}-k${k}` }));
        const [meta] = await t.send({ topic: 'txn.table', messages });
        if (commit) {
          await t.commit();
          messages.forEach((m, i) => latest.set(m.key, { offset: Number(meta.baseOffset) + i, value: m.value }));
        } else await t.abort();
      };
      const range = (a: number, b: number) => Array.from({ length: b - a }, (_, i) => a + i);
      await txn('c1', range(0, 10), true);
      await txn('aborted', range(0, 11), false);
      await txn('c3', range(5, 10), true);
      await producer.disconnect();
      const plain = kafka.producer();
      await plain.connect();
      await plain.send({ topic: 'txn.table', messages: [{ key: 'marker', value: 'before' }] });
      // Before the cleaner, read_uncommitted sees the aborted records.
      const before = await consumeToMarker(brokers, 'txn.table', true);
      assert.equal(before.filter((r) => r.value?.startsWith('aborted-')).length, 11, 'the aborted records are in the log');

      assert.ok((await broker.api('POST', '/api/v1/streams/txn.table/compact')) !== null);
      await plain.send({ topic: 'txn.table', messages: [{ key: 'marker', value: 'end' }] });
      await plain.disconnect();

      const expected = [...latest.entries()].map(([key, x]) => ({ offset: x.offset, key, value: x.value })).sort((a, b) => a.offset - b.offset);
      assert.equal(expected.length, 10);
      assert.deepEqual(await consumeToMarker(brokers, 'txn.table', true), expected, 'KafkaJS read_uncommitted: the committed records at their offsets');
      assert.deepEqual(await consumeToMarker(brokers, 'txn.table'), expected, 'KafkaJS read_committed: the same');
      const viaKcat = (await kcatConsume(brokers[0], 'txn.table', ['-X', 'isolation.level=read_uncommitted']))
        .filter((m) => m.key !== 'marker')
        .map((m) => ({ offset: m.offset, key: m.key, value: m.payload }));
      assert.deepEqual(viaKcat, expected, 'kcat read_uncommitted');
      // Across a restart (the aborted list reloaded, the cleaner run again at the next compaction): the same.
      broker = await broker.restart();
      const after = [`127.0.0.1:${broker.ports.kafka}`];
      assert.ok((await broker.api('POST', '/api/v1/streams/txn.table/compact')) !== null);
      assert.deepEqual(await consumeToMarker(after, 'txn.table', true), expected, 'KafkaJS read_uncommitted after a restart');
    });
  });
