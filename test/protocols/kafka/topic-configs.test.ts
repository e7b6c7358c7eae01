/**
 * Kafka topic configs on streams (topic-configs.ts): every name Kafka defines accepted with Kafka's validators in
 * CreateTopics, AlterConfigs and IncrementalAlterConfigs, refused per topic or resource only for an unknown name
 * or an invalid value; the honoured ones reaching the stream (retention and segment settings) or the Produce path
 * (max.message.bytes, LogAppendTime); DescribeConfigs reporting each with its source and synonyms.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Engine, decodeBatch, encodeBatch, readBatchInfo, verifyBatchCrc } from '../../../src/core/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import {
  AlterConfigsApi,
  CreateTopicsApi,
  DescribeConfigsApi,
  FetchApi,
  IncrementalAlterConfigsApi,
  KafkaErrorCode as E,
  ProduceApi,
  type CreateTopicsRequest,
} from '../../../src/protocols/kafka/codec/index.js';
import { HONOURED_TOPIC_CONFIGS, TOPIC_CONFIG_NAMES } from '../../../src/protocols/kafka/topic-configs.js';
import { RawClient, kcat, startMemoryKafka } from './helpers.js';

/** Kafka's topic configs: TopicConfig's names, plus the two throttled-replica lists LogConfig defines for topics. */
const KAFKA_TOPIC_CONFIGS = [
  'cleanup.policy',
  'compression.gzip.level',
  'compression.lz4.level',
  'compression.type',
  'compression.zstd.level',
  'delete.retention.ms',
  'file.delete.delay.ms',
  'flush.messages',
  'flush.ms',
  'follower.replication.throttled.replicas',
  'index.interval.bytes',
  'leader.replication.throttled.replicas',
  'local.retention.bytes',
  'local.retention.ms',
  'max.compaction.lag.ms',
  'max.message.bytes',
  'message.downconversion.enable',
  'message.format.version',
  'message.timestamp.after.max.ms',
  'message.timestamp.before.max.ms',
  'message.timestamp.difference.max.ms',
  'message.timestamp.type',
  'min.cleanable.dirty.ratio',
  'min.compaction.lag.ms',
  'min.insync.replicas',
  'preallocate',
  'remote.log.copy.disable',
  'remote.log.delete.on.disable',
  'remote.storage.enable',
  'retention.bytes',
  'retention.ms',
  'segment.bytes',
  'segment.index.bytes',
  'segment.jitter.ms',
  'segment.ms',
  'unclean.leader.election.enable',
];

/** A valid value other than the default for each config. */
const NON_DEFAULT: Record<string, string> = {
  'cleanup.policy': 'delete',
  'compression.gzip.level': '6',
  'compression.lz4.level': '12',
  'compression.type': 'zstd',
  'compression.zstd.level': '-5',
  'delete.retention.ms': '1000',
  'file.delete.delay.ms': '1',
  'flush.messages': '10',
  'flush.ms': '1000',
  'follower.replication.throttled.replicas': '0:0,1:0',
  'index.interval.bytes': '100',
  'leader.replication.throttled.replicas': '*',
  'local.retention.bytes': '1000',
  'local.retention.ms': '-1',
  'max.compaction.lag.ms': '60000',
  'max.message.bytes': '2000000',
  'message.downconversion.enable': 'false',
  'message.format.version': '2.8-IV1',
  'message.timestamp.after.max.ms': '3600000',
  'message.timestamp.before.max.ms': '3600000',
  'message.timestamp.difference.max.ms': '3600000',
  'message.timestamp.type': 'LogAppendTime',
  'min.cleanable.dirty.ratio': '0.25',
  'min.compaction.lag.ms': '5',
  'min.insync.replicas': '2',
  preallocate: 'true',
  'remote.log.copy.disable': 'true',
  'remote.log.delete.on.disable': 'true',
  'remote.storage.enable': 'true',
  'retention.bytes': '1073741824',
  'retention.ms': '86400000',
  'segment.bytes': '52428800',
  'segment.index.bytes': '4096',
  'segment.jitter.ms': '10',
  'segment.ms': '3600000',
  'unclean.leader.election.enable': 'true',
};

const topic = (name: string, configs: Array<{ name: string; value: string | null }>): CreateTopicsRequest['topics'][number] => ({
  name,
  numPartitions: 1,
  replicationFactor: -1,
  assignments: [],
  configs,
});

describe('kafka topic configs', () => {
  let engine: Engine;
  let listener: ProtocolListener;
  let port: number;
  let broker: string;
  let c: RawClient;

  before(async () => {
    ({ engine, listener, port, broker } = await startMemoryKafka());
    c = await RawClient.connect(port);
  });
  after(async () => {
    c.close();
    await listener.close();
  });

  const describeTopic = async (name: string, keys: string[] | null = null) => {
    const res = await c.call(DescribeConfigsApi, 4, {
      resources: [{ resourceType: 2, resourceName: name, configurationKeys: keys }],
      includeSynonyms: true,
      includeDocumentation: true,
    });
    assert.equal(res.results[0].errorCode, E.NONE, res.results[0].errorMessage ?? '');
    return new Map(res.results[0].configs.map((x) => [x.name, x]));
  };

  it('knows every topic config name Kafka defines', () => {
    assert.deepEqual(TOPIC_CONFIG_NAMES, [...KAFKA_TOPIC_CONFIGS].sort());
    assert.deepEqual([...HONOURED_TOPIC_CONFIGS].sort(), [
      'cleanup.policy',
      'delete.retention.ms',
      'max.compaction.lag.ms',
      'max.message.bytes',
      'message.timestamp.type',
      'min.cleanable.dirty.ratio',
      'min.compaction.lag.ms',
      'retention.bytes',
      'retention.ms',
      'segment.bytes',
      'segment.ms',
    ]);
  });

  it('creates a topic with every config set, honours some, stores and reports all of them', async () => {
    const configs = KAFKA_TOPIC_CONFIGS.map((name) => ({ name, value: NON_DEFAULT[name] }));
    const ct = await c.call(CreateTopicsApi, 7, { topics: [topic('cfg.all', configs)], timeoutMs: 1000, validateOnly: false });
    assert.equal(ct.topics[0].errorCode, E.NONE, ct.topics[0].errorMessage ?? '');
    const reported = new Map((ct.topics[0].configs ?? []).map((x) => [x.name, x.value]));
    for (const name of KAFKA_TOPIC_CONFIGS) assert.equal(reported.get(name), NON_DEFAULT[name], `CreateTopics v5+ reports ${name}`);
    const def = engine.getStream('cfg.all')!.def;
    assert.deepEqual([def.retentionMs, def.retentionBytes, def.segmentBytes, def.segmentMs], [86_400_000, 1_073_741_824, 52_428_800, 3_600_000]);
    const described = await describeTopic('cfg.all');
    assert.deepEqual([...described.keys()], [...KAFKA_TOPIC_CONFIGS].sort(), 'every config, sorted by name');
    for (const name of KAFKA_TOPIC_CONFIGS) {
      const d = described.get(name)!;
      assert.deepEqual([d.value, d.configSource, d.readOnly, d.isSensitive], [NON_DEFAULT[name], 1, false, false], name);
      assert.deepEqual(d.synonyms[0], { name, value: NON_DEFAULT[name], source: 1 }, `${name}: the topic's own value first`);
      assert.ok(d.documentation !== null && d.documentation.length > 0);
    }
    // The broker-level fallback: FlowMQ keeps data forever (log.retention.hours -1, its own static setting), then
    // Kafka's default (168 hours), in Kafka's order of precedence.
    assert.deepEqual(described.get('retention.ms')!.synonyms.slice(1), [
      { name: 'log.retention.hours', value: '-1', source: 4 },
      { name: 'log.retention.hours', value: '168', source: 5 },
    ]);
    assert.match(described.get('min.insync.replicas')!.documentation ?? '', /no effect/);
  });

  it('reports defaults with their source, and only the keys asked for (all of them for none, as Kafka)', async () => {
    await c.call(CreateTopicsApi, 7, { topics: [topic('cfg.plain', [])], timeoutMs: 1000, validateOnly: false });
    const all = await describeTopic('cfg.plain', []);
    assert.equal(all.size, KAFKA_TOPIC_CONFIGS.length, 'an empty key list is every config');
    const d = all.get('segment.bytes')!;
    // Not set on the topic: the broker's log.segment.bytes, FlowMQ's --segment-bytes (STATIC_BROKER_CONFIG), then
    // Kafka's default as the last synonym.
    assert.deepEqual([d.value, d.configSource, d.isDefault], [String(16 * 1024 * 1024), 4, false]);
    assert.deepEqual(d.synonyms, [
      { name: 'log.segment.bytes', value: String(16 * 1024 * 1024), source: 4 },
      { name: 'log.segment.bytes', value: '1073741824', source: 5 },
    ]);
    const rm = all.get('retention.ms')!;
    assert.deepEqual([rm.value, rm.configSource], ['-1', 4], "forever: FlowMQ's default retention");
    assert.equal(all.get('max.message.bytes')!.value, String(100 * 1024 * 1024), 'the largest request, by default');
    const two = await describeTopic('cfg.plain', ['retention.ms', 'cleanup.policy', 'no.such.config']);
    assert.deepEqual([...two.keys()], ['cleanup.policy', 'retention.ms']);
  });

  it('refuses unknown names and invalid values per topic, with INVALID_CONFIG naming the config', async () => {
    const bad: Array<[string, string | null]> = [
      ['no.such.config', '1'],
      ['log.retention.ms', '1'], // a broker config
      ['segment.bytes', '13'], // Kafka: at least 14
      ['segment.bytes', 'big'],
      ['retention.ms', '-2'],
      ['retention.ms', '0'], // Kafka takes it; FlowMQ's streams do not (a positive retention or none)
      ['max.message.bytes', '3000000000'], // an INT
      ['preallocate', 'yes'],
      ['min.cleanable.dirty.ratio', '1.5'],
      ['message.timestamp.type', 'ProducerTime'],
      ['compression.type', 'brotli'],
      ['compression.gzip.level', '0'],
      ['cleanup.policy', 'compact,shrink'],
      ['leader.replication.throttled.replicas', 'all'],
      ['min.insync.replicas', null],
    ];
    const topics = [
      topic('cfg.good', [{ name: 'segment.bytes', value: '52428800' }]),
      ...bad.map(([name, value], i) =>
        topic(`cfg.bad${i}`, [
          { name: 'retention.ms', value: '60000' },
          { name, value },
        ]),
      ),
    ];
    const ct = await c.call(CreateTopicsApi, 7, { topics, timeoutMs: 1000, validateOnly: false });
    assert.deepEqual([ct.topics[0].name, ct.topics[0].errorCode], ['cfg.good', E.NONE]);
    bad.forEach(([name], i) => {
      const t = ct.topics[i + 1];
      assert.equal(t.errorCode, E.INVALID_CONFIG, `${name}=${bad[i][1]}`);
      assert.ok(t.errorMessage?.includes(name), t.errorMessage ?? '');
      assert.equal(engine.getStream(t.name), undefined, `${t.name} not created`);
    });
  });

  it('alters configs incrementally (SET, DELETE, APPEND, SUBTRACT), all or nothing per resource', async () => {
    await c.call(CreateTopicsApi, 7, { topics: [topic('cfg.inc', [{ name: 'segment.bytes', value: '52428800' }])], timeoutMs: 1000, validateOnly: false });
    const inc = (configs: Array<{ name: string; configOperation: number; value: string | null }>, validateOnly = false) =>
      c.call(IncrementalAlterConfigsApi, 1, { resources: [{ resourceType: 2, resourceName: 'cfg.inc', configs }], validateOnly });
    let r = await inc([
      { name: 'retention.bytes', configOperation: 0, value: '1048576' },
      { name: 'min.insync.replicas', configOperation: 0, value: '2' },
      { name: 'leader.replication.throttled.replicas', configOperation: 2, value: '0:0' },
      { name: 'segment.bytes', configOperation: 1, value: null },
    ]);
    assert.equal(r.responses[0].errorCode, E.NONE, r.responses[0].errorMessage ?? '');
    r = await inc([{ name: 'leader.replication.throttled.replicas', configOperation: 2, value: '1:0,0:0' }]);
    assert.equal(r.responses[0].errorCode, E.NONE, r.responses[0].errorMessage ?? '');
    let d = await describeTopic('cfg.inc');
    assert.deepEqual(
      [d.get('retention.bytes')!.value, d.get('min.insync.replicas')!.value, d.get('leader.replication.throttled.replicas')!.value],
      ['1048576', '2', '0:0,1:0'],
    );
    assert.equal(d.get('segment.bytes')!.configSource, 4, "deleted: back to the broker's (FlowMQ's --segment-bytes)");
    assert.deepEqual([engine.getStream('cfg.inc')!.def.retentionBytes, engine.getStream('cfg.inc')!.def.segmentBytes ?? null], [1_048_576, null]);
    r = await inc([{ name: 'leader.replication.throttled.replicas', configOperation: 3, value: '0:0' }]);
    assert.equal(r.responses[0].errorCode, E.NONE);
    assert.equal((await describeTopic('cfg.inc')).get('leader.replication.throttled.replicas')!.value, '1:0');
    // One bad config refuses the resource: the valid change before it is not applied either.
    for (const bad of [
      { name: 'retention.ms', configOperation: 2, value: '1' }, // APPEND to a config that is not a list
      { name: 'cleanup.policy', configOperation: 2, value: 'shrink' },
      { name: 'no.such.config', configOperation: 0, value: '1' },
    ]) {
      r = await inc([{ name: 'min.insync.replicas', configOperation: 0, value: '3' }, bad]);
      assert.equal(r.responses[0].errorCode, E.INVALID_CONFIG, JSON.stringify(bad));
    }
    // As Kafka (ConfigAdminManager.preprocess): a null value to set, or a config named twice, is INVALID_REQUEST.
    for (const bad of [
      [{ name: 'retention.bytes', configOperation: 0, value: null }],
      [
        { name: 'leader.replication.throttled.replicas', configOperation: 2, value: '2:0' },
        { name: 'leader.replication.throttled.replicas', configOperation: 2, value: '3:0' },
      ],
    ]) {
      r = await inc([{ name: 'min.insync.replicas', configOperation: 0, value: '3' }, ...bad]);
      assert.equal(r.responses[0].errorCode, E.INVALID_REQUEST, JSON.stringify(bad));
      assert.ok((r.responses[0].errorMessage ?? '').length > 0);
    }
    // The same resource twice in one request: both refused, INVALID_REQUEST.
    const twice = await c.call(IncrementalAlterConfigsApi, 1, {
      resources: [
        { resourceType: 2, resourceName: 'cfg.inc', configs: [{ name: 'min.insync.replicas', configOperation: 0, value: '3' }] },
        { resourceType: 2, resourceName: 'cfg.inc', configs: [{ name: 'min.insync.replicas', configOperation: 0, value: '4' }] },
      ],
      validateOnly: false,
    });
    assert.deepEqual(
      twice.responses.map((x) => x.errorCode),
      [E.INVALID_REQUEST, E.INVALID_REQUEST],
    );
    r = await inc([{ name: 'min.insync.replicas', configOperation: 0, value: '3' }], true);
    assert.equal(r.responses[0].errorCode, E.NONE);
    d = await describeTopic('cfg.inc');
    assert.equal(d.get('min.insync.replicas')!.value, '2', 'refused and validate-only changes change nothing');
  });

  it('replaces the whole set with AlterConfigs', async () => {
    await c.call(CreateTopicsApi, 7, {
      topics: [
        topic('cfg.alt', [
          { name: 'retention.ms', value: '60000' },
          { name: 'compression.type', value: 'lz4' },
        ]),
      ],
      timeoutMs: 1000,
      validateOnly: false,
    });
    const r = await c.call(AlterConfigsApi, 2, {
      resources: [{ resourceType: 2, resourceName: 'cfg.alt', configs: [{ name: 'segment.ms', value: '600000' }] }],
      validateOnly: false,
    });
    assert.equal(r.responses[0].errorCode, E.NONE, r.responses[0].errorMessage ?? '');
    // Kafka refuses a null value in AlterConfigs (INVALID_REQUEST), changing nothing.
    const withNull = await c.call(AlterConfigsApi, 2, {
      resources: [
        {
          resourceType: 2,
          resourceName: 'cfg.alt',
          configs: [
            { name: 'segment.ms', value: '700000' },
            { name: 'flush.ms', value: null },
          ],
        },
      ],
      validateOnly: false,
    });
    assert.equal(withNull.responses[0].errorCode, E.INVALID_REQUEST);
    assert.match(withNull.responses[0].errorMessage ?? '', /flush\.ms/);
    const d = await describeTopic('cfg.alt');
    assert.deepEqual(
      ['retention.ms', 'compression.type', 'segment.ms', 'flush.ms'].map((n) => [n, d.get(n)!.value, d.get(n)!.configSource]),
      [
        ['retention.ms', '-1', 4],
        ['compression.type', 'producer', 5],
        ['segment.ms', '600000', 1],
        ['flush.ms', '9223372036854775807', 5],
      ],
    );
    const def = engine.getStream('cfg.alt')!.def;
    assert.deepEqual([def.retentionMs, def.segmentMs], [null, 600_000]);
  });

  it('takes cleanup.policy compact and compact,delete (normalized as Kafka lists them), and APPEND compact to delete', async () => {
    const ct = await c.call(CreateTopicsApi, 7, {
      topics: [
        topic('cfg.compact', [{ name: 'cleanup.policy', value: 'compact' }]),
        topic('cfg.both', [{ name: 'cleanup.policy', value: 'delete, compact' }]),
        topic('cfg.append', [{ name: 'cleanup.policy', value: 'delete' }]),
      ],
      timeoutMs: 1000,
      validateOnly: false,
    });
    assert.deepEqual(
      ct.topics.map((t) => t.errorCode),
      [E.NONE, E.NONE, E.NONE],
    );
    assert.equal((await describeTopic('cfg.compact', ['cleanup.policy'])).get('cleanup.policy')!.value, 'compact');
    assert.equal((await describeTopic('cfg.both', ['cleanup.policy'])).get('cleanup.policy')!.value, 'compact,delete');
    const r = await c.call(IncrementalAlterConfigsApi, 1, {
      resources: [{ resourceType: 2, resourceName: 'cfg.append', configs: [{ name: 'cleanup.policy', configOperation: 2, value: 'compact' }] }],
      validateOnly: false,
    });
    assert.equal(r.responses[0].errorCode, E.NONE, r.responses[0].errorMessage ?? '');
    const d = (await describeTopic('cfg.append', ['cleanup.policy'])).get('cleanup.policy')!;
    assert.deepEqual([d.value, d.configSource], ['compact,delete', 1]);
    assert.equal(engine.getStream('cfg.append')!.def.configs?.['cleanup.policy'], 'compact,delete');
  });

  it('refuses a batch holding a record without a key on a compacted topic with INVALID_RECORD, as Kafka', async () => {
    await c.call(CreateTopicsApi, 7, { topics: [topic('cfg.keys', [{ name: 'cleanup.policy', value: 'compact' }])], timeoutMs: 1000, validateOnly: false });
    const produce = (records: Buffer) =>
      c.call(ProduceApi, 9, { transactionalId: null, acks: -1, timeoutMs: 1000, topics: [{ name: 'cfg.keys', partitions: [{ index: 0, records }] }] });
    const keyed = encodeBatch([{ key: Buffer.from('k'), value: Buffer.from('v'), headers: [], timestamp: Date.now() }]);
    const mixed = encodeBatch([
      { key: Buffer.from('k'), value: Buffer.from('v'), headers: [], timestamp: Date.now() },
      { key: null, value: Buffer.from('no key'), headers: [], timestamp: Date.now() },
    ]);
    assert.equal((await produce(keyed)).topics[0].partitions[0].errorCode, E.NONE);
    const refused = (await produce(mixed)).topics[0].partitions[0];
    assert.equal(refused.errorCode, E.INVALID_RECORD);
    assert.match(refused.errorMessage ?? '', /without a key/);
    // A tombstone (a key, no value) is a compacted topic's delete: taken.
    assert.equal(
      (await produce(encodeBatch([{ key: Buffer.from('k'), value: null, headers: [], timestamp: Date.now() }]))).topics[0].partitions[0].errorCode,
      E.NONE,
    );
    assert.equal(engine.offsets('cfg.keys', 0).highWatermark, 2, 'the refused batch was not appended');
  });

  it('refuses a batch larger than max.message.bytes with MESSAGE_TOO_LARGE', async () => {
    await c.call(CreateTopicsApi, 7, { topics: [topic('cfg.max', [{ name: 'max.message.bytes', value: '200' }])], timeoutMs: 1000, validateOnly: false });
    const small = encodeBatch([{ key: null, value: Buffer.alloc(50, 1), headers: [], timestamp: Date.now() }]);
    const big = encodeBatch([{ key: null, value: Buffer.alloc(200, 1), headers: [], timestamp: Date.now() }]);
    const produce = (records: Buffer) =>
      c.call(ProduceApi, 9, { transactionalId: null, acks: -1, timeoutMs: 1000, topics: [{ name: 'cfg.max', partitions: [{ index: 0, records }] }] });
    assert.equal((await produce(small)).topics[0].partitions[0].errorCode, E.NONE);
    const refused = (await produce(big)).topics[0].partitions[0];
    assert.equal(refused.errorCode, E.MESSAGE_TOO_LARGE);
    assert.match(refused.errorMessage ?? '', /max\.message\.bytes \(200\)/);
    assert.equal(engine.offsets('cfg.max', 0).highWatermark, 1);
    // Raised: taken.
    await c.call(IncrementalAlterConfigsApi, 1, {
      resources: [{ resourceType: 2, resourceName: 'cfg.max', configs: [{ name: 'max.message.bytes', configOperation: 0, value: '1000' }] }],
      validateOnly: false,
    });
    assert.equal((await produce(big)).topics[0].partitions[0].errorCode, E.NONE);
  });

  it('stamps batches with the log append time when message.timestamp.type is LogAppendTime', async () => {
    await c.call(CreateTopicsApi, 7, {
      topics: [topic('cfg.lat', [{ name: 'message.timestamp.type', value: 'LogAppendTime' }])],
      timeoutMs: 1000,
      validateOnly: false,
    });
    const old = 1_600_000_000_000;
    const batch = encodeBatch([
      { key: null, value: Buffer.from('a'), headers: [], timestamp: old },
      { key: null, value: Buffer.from('b'), headers: [], timestamp: old + 5 },
    ]);
    const before = Date.now();
    const pr = await c.call(ProduceApi, 9, {
      transactionalId: null,
      acks: -1,
      timeoutMs: 1000,
      topics: [{ name: 'cfg.lat', partitions: [{ index: 0, records: batch }] }],
    });
    const p = pr.topics[0].partitions[0];
    assert.equal(p.errorCode, E.NONE);
    assert.ok(p.logAppendTimeMs >= before && p.logAppendTimeMs <= Date.now(), `logAppendTimeMs ${p.logAppendTimeMs}`);
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
          topic: 'cfg.lat',
          partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 0, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 1 << 20 }],
        },
      ],
      forgottenTopics: [],
      rackId: '',
      clusterId: null,
    });
    const stored = Buffer.concat(f.responses[0].partitions[0].records ?? []);
    const info = readBatchInfo(stored);
    assert.equal(info.attributes & 0x08, 0x08, 'timestamp type: LogAppendTime');
    assert.equal(info.maxTimestamp, p.logAppendTimeMs);
    assert.ok(verifyBatchCrc(stored), 'the CRC is computed again');
    assert.deepEqual(
      decodeBatch(stored).map((r) => r.timestamp),
      [p.logAppendTimeMs, p.logAppendTimeMs],
    );
    // librdkafka reads the batch's type and time.
    const k = await kcat(['-b', broker, '-C', '-t', 'cfg.lat', '-o', 'beginning', '-e', '-J', '-q', '-X', 'fetch.wait.max.ms=50']);
    const msgs = k.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { tstype: string; ts: number; payload: string });
    assert.deepEqual(
      msgs.map((m) => [m.payload, m.tstype, m.ts]),
      [
        ['a', 'logappend', p.logAppendTimeMs],
        ['b', 'logappend', p.logAppendTimeMs],
      ],
    );
  });
});
