/**
 * Topic administration: the KafkaJS admin client (classic versions) and a raw client at the flexible versions,
 * with the error codes the protocol prescribes.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import kafkajs from 'kafkajs';
import { Engine, encodeBatch } from '../../../src/core/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import {
  CreatePartitionsApi,
  CreateTopicsApi,
  DeleteRecordsApi,
  DeleteTopicsApi,
  DescribeClusterApi,
  DescribeConfigsApi,
  FetchApi,
  IncrementalAlterConfigsApi,
  KafkaErrorCode as E,
  OffsetForLeaderEpochApi,
  ZERO_UUID,
  type CreateTopicsRequest,
} from '../../../src/protocols/kafka/codec/index.js';
import { TOPIC_CONFIG_NAMES } from '../../../src/protocols/kafka/topic-configs.js';
import { RawClient, kcat, startMemoryKafka } from './helpers.js';

const { Kafka, logLevel, ConfigResourceTypes } = kafkajs;

const topic = (name: string, numPartitions: number, extra: Partial<CreateTopicsRequest['topics'][number]> = {}): CreateTopicsRequest['topics'][number] => ({
  name,
  numPartitions,
  replicationFactor: -1,
  assignments: [],
  configs: [],
  ...extra,
});

/** Matches a KafkaJS error (or aggregate of errors) carrying the Kafka error `type`. */
function errorType(type: string): (err: unknown) => boolean {
  return (err: unknown) => {
    const e = err as { type?: string; errors?: Array<{ type?: string }>; cause?: { type?: string } };
    const types = [e.type, e.cause?.type, ...(e.errors ?? []).map((x) => x.type)];
    assert.ok(types.includes(type), `expected ${type}, got ${JSON.stringify(types)} (${String(err)})`);
    return true;
  };
}

describe('kafka topic administration', () => {
  let engine: Engine;
  let listener: ProtocolListener;
  let broker: string;
  let port: number;

  before(async () => {
    ({ engine, listener, port, broker } = await startMemoryKafka({ defaultPartitions: 2 }));
  });
  after(async () => {
    await listener.close();
  });

  it('KafkaJS admin: create, describe, alter retention, add partitions, delete records, delete topics', async () => {
    const kafka = new Kafka({ brokers: [broker], clientId: 'adm', logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    try {
      assert.equal(
        await admin.createTopics({ topics: [{ topic: 'adm.t', numPartitions: 3, configEntries: [{ name: 'retention.ms', value: '3600000' }] }] }),
        true,
      );
      assert.equal(engine.getStream('adm.t')?.def.partitions, 3);
      assert.equal(engine.getStream('adm.t')?.def.retentionMs, 3_600_000);
      assert.equal(engine.getStream('adm.t')?.ownTopic, 'adm/t', 'a.b is the unified topic a/b');
      // Creating it again: TOPIC_ALREADY_EXISTS, which KafkaJS reports as "false".
      assert.equal(await admin.createTopics({ topics: [{ topic: 'adm.t', numPartitions: 1 }] }), false);
      await assert.rejects(admin.createTopics({ topics: [{ topic: 'bad name!' }] }), errorType('INVALID_TOPIC_EXCEPTION'));
      await assert.rejects(admin.createTopics({ topics: [{ topic: 'adm.r3', replicationFactor: 3 }] }), errorType('INVALID_REPLICATION_FACTOR'));
      assert.ok((await admin.listTopics()).includes('adm.t'));

      const cfg = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: 'adm.t' }], includeSynonyms: false });
      const entries = new Map(cfg.resources[0].configEntries.map((c) => [c.configName, c]));
      assert.equal(entries.get('retention.ms')?.configValue, '3600000');
      assert.equal(entries.get('cleanup.policy')?.configValue, 'delete');
      assert.equal(entries.get('retention.ms')?.readOnly, false);
      // Every topic config Kafka defines is reported, and may be altered (those FlowMQ does not act on are stored).
      assert.equal(entries.size, TOPIC_CONFIG_NAMES.length);
      assert.deepEqual([entries.get('compression.type')?.configValue, entries.get('compression.type')?.readOnly], ['producer', false]);

      await admin.alterConfigs({
        validateOnly: false,
        resources: [{ type: ConfigResourceTypes.TOPIC, name: 'adm.t', configEntries: [{ name: 'retention.ms', value: '60000' }] }],
      });
      assert.equal(engine.getStream('adm.t')?.def.retentionMs, 60_000);
      await assert.rejects(
        admin.alterConfigs({
          validateOnly: false,
          resources: [{ type: ConfigResourceTypes.TOPIC, name: 'adm.t', configEntries: [{ name: 'cleanup.policy', value: 'shrink' }] }],
        }),
        errorType('INVALID_CONFIG'),
      );
      assert.equal(engine.getStream('adm.t')?.def.retentionMs, 60_000, 'a refused change changes nothing');

      await admin.createPartitions({ topicPartitions: [{ topic: 'adm.t', count: 5 }] });
      assert.equal(engine.getStream('adm.t')?.def.partitions, 5);
      const md = await admin.fetchTopicMetadata({ topics: ['adm.t'] });
      assert.deepEqual(md.topics[0].partitions.map((p) => p.partitionId).sort(), [0, 1, 2, 3, 4]);
      await assert.rejects(admin.createPartitions({ topicPartitions: [{ topic: 'adm.t', count: 2 }] }), errorType('INVALID_PARTITIONS'));

      for (let i = 0; i < 4; i++) engine.produce('adm.t', 4, encodeBatch([{ key: null, value: Buffer.from(`r${i}`), headers: [], timestamp: Date.now() }]));
      await admin.deleteTopicRecords({ topic: 'adm.t', partitions: [{ partition: 4, offset: '3' }] });
      assert.deepEqual(engine.offsets('adm.t', 4), { logStartOffset: 3, highWatermark: 4 });
      const offs = await admin.fetchTopicOffsets('adm.t');
      assert.deepEqual(
        offs.find((o) => o.partition === 4),
        { partition: 4, offset: '4', high: '4', low: '3' },
      );
      const c = await kcat(['-b', broker, '-C', '-t', 'adm.t', '-p', '4', '-o', 'beginning', '-e', '-q', '-X', 'fetch.wait.max.ms=50']);
      assert.equal(c.stdout.trim(), 'r3', 'only the records after the log start offset');

      const cluster = await admin.describeCluster();
      assert.deepEqual([cluster.controller, cluster.clusterId, cluster.brokers.length], [0, 'flowmq', 1]);

      await admin.deleteTopics({ topics: ['adm.t'] });
      assert.equal(engine.getStream('adm.t'), undefined);
      await assert.rejects(admin.deleteTopics({ topics: ['adm.t'] }), errorType('UNKNOWN_TOPIC_OR_PARTITION'));
    } finally {
      await admin.disconnect();
    }
  });

  it('answers the flexible versions with exact error codes', async () => {
    const c = await RawClient.connect(port);
    try {
      const ct = await c.call(CreateTopicsApi, 7, {
        topics: [
          topic('flex.a', -1, { configs: [{ name: 'retention.ms', value: '-1' }] }),
          topic('flex.b', 0),
          topic('flex.c', 1, { replicationFactor: 2 }),
          topic('flex.d', -1, { replicationFactor: -1, assignments: [{ partitionIndex: 0, brokerIds: [9] }], numPartitions: -1 }),
          topic('flex.e', 1, { configs: [{ name: 'log.retention.ms', value: '1' }] }), // a broker config, not a topic config
          topic('flex.f', 1, { configs: [{ name: 'retention.ms', value: 'soon' }] }),
          topic('flex.g', -1, {
            assignments: [
              { partitionIndex: 0, brokerIds: [0] },
              { partitionIndex: 1, brokerIds: [0] },
            ],
          }),
        ],
        timeoutMs: 1000,
        validateOnly: false,
      });
      assert.deepEqual(
        ct.topics.map((t) => [t.name, t.errorCode, t.numPartitions]),
        [
          ['flex.a', E.NONE, 2],
          ['flex.b', E.INVALID_PARTITIONS, -1],
          ['flex.c', E.INVALID_REPLICATION_FACTOR, -1],
          ['flex.d', E.INVALID_REPLICA_ASSIGNMENT, -1],
          ['flex.e', E.INVALID_CONFIG, -1],
          ['flex.f', E.INVALID_CONFIG, -1],
          ['flex.g', E.NONE, 2],
        ],
      );
      assert.equal(ct.topics[0].configs?.find((x) => x.name === 'retention.ms')?.value, '-1');
      const validate = await c.call(CreateTopicsApi, 5, { topics: [topic('flex.v', 4)], timeoutMs: 1000, validateOnly: true });
      assert.deepEqual([validate.topics[0].errorCode, validate.topics[0].numPartitions], [E.NONE, 4]);
      assert.equal(engine.getStream('flex.v'), undefined, 'validate only creates nothing');

      const cp = await c.call(CreatePartitionsApi, 3, {
        topics: [
          { name: 'flex.a', count: 3, assignments: null },
          { name: 'flex.a', count: 4, assignments: null },
          { name: 'nope', count: 3, assignments: null },
          { name: 'flex.g', count: 2, assignments: null },
        ],
        timeoutMs: 1000,
        validateOnly: false,
      });
      assert.deepEqual(
        cp.results.map((r) => r.errorCode),
        [E.INVALID_REQUEST, E.INVALID_REQUEST, E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_PARTITIONS],
      );

      const dc = await c.call(DescribeConfigsApi, 4, {
        resources: [
          { resourceType: 2, resourceName: 'flex.a', configurationKeys: ['retention.ms'] },
          { resourceType: 2, resourceName: 'nope', configurationKeys: null },
          { resourceType: 4, resourceName: '0', configurationKeys: ['num.partitions'] },
        ],
        includeSynonyms: true,
        includeDocumentation: true,
      });
      assert.deepEqual(
        dc.results.map((r) => r.errorCode),
        [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.NONE],
      );
      // Set explicitly to -1 at creation: reported as the topic's own, then the broker's default it overrides.
      assert.deepEqual(
        dc.results[0].configs.map((x) => [x.name, x.value, x.configType, x.configSource]),
        [['retention.ms', '-1', 5, 1]],
      );
      assert.deepEqual(dc.results[0].configs[0].synonyms, [
        { name: 'retention.ms', value: '-1', source: 1 },
        { name: 'log.retention.hours', value: '-1', source: 4 },
        { name: 'log.retention.hours', value: '168', source: 5 },
      ]);
      assert.equal(dc.results[2].configs[0].value, '2');

      const inc = await c.call(IncrementalAlterConfigsApi, 1, {
        resources: [
          { resourceType: 2, resourceName: 'flex.a', configs: [{ name: 'retention.ms', configOperation: 0, value: '5000' }] },
          { resourceType: 2, resourceName: 'flex.g', configs: [{ name: 'retention.ms', configOperation: 2, value: '1' }] },
        ],
        validateOnly: false,
      });
      assert.deepEqual(
        inc.responses.map((r) => r.errorCode),
        [E.NONE, E.INVALID_CONFIG],
      );
      assert.equal(engine.getStream('flex.a')?.def.retentionMs, 5000);
      const del = await c.call(IncrementalAlterConfigsApi, 1, {
        resources: [{ resourceType: 2, resourceName: 'flex.a', configs: [{ name: 'retention.ms', configOperation: 1, value: null }] }],
        validateOnly: false,
      });
      assert.equal(del.responses[0].errorCode, E.NONE);
      assert.equal(engine.getStream('flex.a')?.def.retentionMs, null);

      for (let i = 0; i < 3; i++) engine.produce('flex.a', 0, encodeBatch([{ key: null, value: Buffer.from('x'), headers: [], timestamp: 1000 }]));
      const dr = await c.call(DeleteRecordsApi, 2, {
        topics: [
          {
            name: 'flex.a',
            partitions: [
              { partitionIndex: 0, offset: 2 },
              { partitionIndex: 1, offset: 5 },
              { partitionIndex: 7, offset: 0 },
            ],
          },
        ],
        timeoutMs: 1000,
      });
      assert.deepEqual(
        dr.topics[0].partitions.map((p) => [p.errorCode, p.lowWatermark]),
        [
          [E.NONE, 2],
          [E.OFFSET_OUT_OF_RANGE, -1],
          [E.UNKNOWN_TOPIC_OR_PARTITION, -1],
        ],
      );
      // Reading below the new log start offset is out of range.
      const f = await c.call(FetchApi, 12, {
        replicaId: -1,
        maxWaitMs: 0,
        minBytes: 1,
        maxBytes: 1 << 20,
        isolationLevel: 0,
        sessionId: 0,
        sessionEpoch: -1,
        topics: [
          {
            topic: 'flex.a',
            partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 1, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 1 << 20 }],
          },
        ],
        forgottenTopics: [],
        rackId: '',
        clusterId: null,
      });
      assert.deepEqual([f.responses[0].partitions[0].errorCode, f.responses[0].partitions[0].logStartOffset], [E.OFFSET_OUT_OF_RANGE, 2]);

      const ofle = await c.call(OffsetForLeaderEpochApi, 4, {
        replicaId: -1,
        topics: [
          {
            topic: 'flex.a',
            partitions: [
              { partition: 0, currentLeaderEpoch: 0, leaderEpoch: 0 },
              { partition: 1, currentLeaderEpoch: 5, leaderEpoch: 5 },
            ],
          },
        ],
      });
      assert.deepEqual(
        ofle.topics[0].partitions.map((p) => [p.errorCode, p.leaderEpoch, p.endOffset]),
        [
          [E.NONE, 0, 3],
          [E.UNKNOWN_LEADER_EPOCH, -1, -1],
        ],
      );

      const cl = await c.call(DescribeClusterApi, 1, { includeClusterAuthorizedOperations: false, endpointType: 1 });
      assert.deepEqual(
        cl.brokers.map((b) => [b.brokerId, b.host, b.port]),
        [[0, '127.0.0.1', port]],
      );

      const dt = await c.call(DeleteTopicsApi, 6, {
        topics: [
          { name: 'flex.a', topicId: ZERO_UUID },
          { name: 'nope', topicId: ZERO_UUID },
          { name: null, topicId: Buffer.alloc(16, 1) },
        ],
        topicNames: [],
        timeoutMs: 1000,
      });
      assert.deepEqual(
        dt.responses.map((r) => r.errorCode),
        [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_ID],
      );
      const dt1 = await c.call(DeleteTopicsApi, 1, { topics: [], topicNames: ['flex.g'], timeoutMs: 1000 });
      assert.equal(dt1.responses[0].errorCode, E.NONE);
      assert.equal(engine.getStream('flex.g'), undefined);
    } finally {
      c.close();
    }
  });
});
