/**
 * Operations APIs at the byte level, every version: DescribeLogDirs 0-4, ElectLeaders 0-2, DescribeProducers 0,
 * OffsetDelete 0, and DescribeConfigs / IncrementalAlterConfigs / AlterConfigs of the BROKER and BROKER_LOGGER
 * resources (what a broker config set at run time does: stream defaults, Produce's limits).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { crc32c, encodeBatch, type Engine } from '../../../src/core/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import {
  AlterConfigsApi,
  ApiVersionsApi,
  DescribeConfigsApi,
  DescribeLogDirsApi,
  DescribeProducersApi,
  ElectLeadersApi,
  IncrementalAlterConfigsApi,
  JoinGroupApi,
  KafkaErrorCode as E,
  OffsetDeleteApi,
  ProduceApi,
  type JoinGroupRequest,
} from '../../../src/protocols/kafka/codec/index.js';
import { KAFKA_BROKER_CONFIGS } from '../../../src/protocols/kafka/kafka-broker-config-defs.js';
import { RawClient, startMemoryKafka } from './helpers.js';

const BROKER = 4;
const BROKER_LOGGER = 8;

function idemBatch(pid: number, epoch: number, seq: number, n: number, timestamp: number): Buffer {
  const b = encodeBatch(Array.from({ length: n }, (_, i) => ({ key: null, value: Buffer.from(`v${i}`), headers: [], timestamp })));
  b.writeBigInt64BE(BigInt(pid), 43);
  b.writeInt16BE(epoch, 51);
  b.writeInt32BE(seq, 53);
  b.writeUInt32BE(crc32c(b, 21, b.length), 17);
  return b;
}

/** A ConsumerProtocolSubscription v0: version, topics, no user data. */
function subscription(topics: string[]): Buffer {
  const parts = [Buffer.from([0, 0]), Buffer.alloc(4)];
  parts[1].writeInt32BE(topics.length);
  for (const t of topics) {
    const len = Buffer.alloc(2);
    len.writeInt16BE(Buffer.byteLength(t));
    parts.push(len, Buffer.from(t));
  }
  parts.push(Buffer.from([0xff, 0xff, 0xff, 0xff]));
  return Buffer.concat(parts);
}

const join3 = (groupId: string, protocolType: string, metadata: Buffer): JoinGroupRequest => ({
  groupId,
  sessionTimeoutMs: 30000,
  rebalanceTimeoutMs: 30000,
  memberId: '',
  groupInstanceId: null,
  protocolType,
  protocols: [{ name: 'range', metadata }],
  reason: null,
});

describe('kafka operations APIs', () => {
  let engine: Engine;
  let listener: ProtocolListener;
  let port: number;
  let c: RawClient;
  const dir = mkdtempSync(join(tmpdir(), 'flowmq-logdir-'));

  before(async () => {
    ({ engine, listener, port } = await startMemoryKafka({ defaultPartitions: 2, groupInitialRebalanceDelayMs: 0, logDir: dir }));
    c = await RawClient.connect(port);
    await engine.createStream({ name: 'ops.a', partitions: 3 });
    await engine.createStream({ name: 'ops.b', partitions: 1 });
  });
  after(async () => {
    c.close();
    await listener.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('advertises the operations APIs at their Kafka versions', async () => {
    const av = await c.call(ApiVersionsApi, 3, { clientSoftwareName: 't', clientSoftwareVersion: '1' });
    const range = (k: number) => av.apiKeys.find((x) => x.apiKey === k);
    assert.deepEqual(
      [35, 43, 47, 61].map((k) => [range(k)?.minVersion, range(k)?.maxVersion]),
      [
        [0, 4],
        [0, 2],
        [0, 0],
        [0, 0],
      ],
    );
    // Client quotas and SCRAM credentials need a user directory: not offered without access control.
    assert.equal(range(48), undefined);
    assert.equal(range(51), undefined);
  });

  it('DescribeLogDirs v0-v4: one log dir, the partitions and their sizes, the volume from v4', async () => {
    const b1 = encodeBatch([{ key: null, value: Buffer.alloc(100, 1), headers: [], timestamp: 1 }]);
    const b2 = encodeBatch([{ key: null, value: Buffer.alloc(300, 2), headers: [], timestamp: 2 }]);
    engine.produce('ops.a', 1, b1);
    engine.produce('ops.a', 1, b2);
    for (let v = 0; v <= 4; v++) {
      const all = await c.call(DescribeLogDirsApi, v, { topics: null });
      assert.equal(all.errorCode, E.NONE);
      assert.equal(all.results.length, 1);
      const r = all.results[0];
      assert.deepEqual([r.errorCode, r.logDir], [E.NONE, dir]);
      const a = r.topics.find((t) => t.name === 'ops.a')!;
      assert.deepEqual(
        a.partitions.map((p) => [p.partitionIndex, p.partitionSize, p.offsetLag, p.isFutureKey]),
        [
          [0, 0, 0, false],
          [1, b1.length + b2.length, 0, false],
          [2, 0, 0, false],
        ],
        `v${v}`,
      );
      assert.ok(r.topics.some((t) => t.name === 'ops.b'));
      if (v >= 4) {
        assert.ok(r.totalBytes > 0 && r.usableBytes > 0 && r.usableBytes <= r.totalBytes, `${r.totalBytes} ${r.usableBytes}`);
      } else assert.deepEqual([r.totalBytes, r.usableBytes], [-1, -1]);
    }
    // Named partitions only; unknown topics and partitions are left out, as Kafka does.
    const some = await c.call(DescribeLogDirsApi, 4, {
      topics: [
        { topic: 'ops.a', partitions: [1, 7] },
        { topic: 'nope', partitions: [0] },
      ],
    });
    assert.deepEqual(
      some.results[0].topics.map((t) => [t.name, t.partitions.map((p) => p.partitionIndex)]),
      [['ops.a', [1]]],
    );
  });

  it('ElectLeaders v0-v2: one replica, so no election is needed; unknown partitions; the election type', async () => {
    for (let v = 0; v <= 2; v++) {
      const r = await c.call(ElectLeadersApi, v, {
        electionType: 0,
        topicPartitions: [
          { topic: 'ops.a', partitions: [0, 2, 9] },
          { topic: 'nope', partitions: [0] },
        ],
        timeoutMs: 1000,
      });
      assert.equal(r.errorCode, E.NONE);
      assert.deepEqual(
        r.replicaElectionResults.map((t) => [t.topic, t.partitionResult.map((p) => [p.partitionId, p.errorCode])]),
        [
          [
            'ops.a',
            [
              [0, E.ELECTION_NOT_NEEDED],
              [2, E.ELECTION_NOT_NEEDED],
              [9, E.UNKNOWN_TOPIC_OR_PARTITION],
            ],
          ],
          ['nope', [[0, E.UNKNOWN_TOPIC_OR_PARTITION]]],
        ],
        `v${v}`,
      );
      assert.match(r.replicaElectionResults[0].partitionResult[0].errorMessage ?? '', /no election needed/);
    }
    // Every partition: only those that needed an election are listed (none here).
    const all = await c.call(ElectLeadersApi, 2, { electionType: 1, topicPartitions: null, timeoutMs: 1000 });
    assert.deepEqual([all.errorCode, all.replicaElectionResults], [E.NONE, []]);
    const bad = await c.call(ElectLeadersApi, 1, { electionType: 7, topicPartitions: [{ topic: 'ops.a', partitions: [0] }], timeoutMs: 1000 });
    assert.equal(bad.errorCode, E.INVALID_REQUEST);
  });

  it('DescribeProducers v0: the idempotent producers of a partition, from its log', async () => {
    const produce = (b: Buffer) =>
      c.call(ProduceApi, 7, { transactionalId: null, acks: -1, timeoutMs: 5000, topics: [{ name: 'ops.b', partitions: [{ index: 0, records: b }] }] });
    assert.equal((await produce(idemBatch(4242, 3, 0, 5, 1_700_000_000_000))).topics[0].partitions[0].errorCode, E.NONE);
    assert.equal((await produce(idemBatch(4242, 3, 5, 2, 1_700_000_000_500))).topics[0].partitions[0].errorCode, E.NONE);
    assert.equal((await produce(idemBatch(77, 0, 0, 1, 1_700_000_001_000))).topics[0].partitions[0].errorCode, E.NONE);
    const r = await c.call(DescribeProducersApi, 0, {
      topics: [
        { name: 'ops.b', partitionIndexes: [0, 4] },
        { name: 'nope', partitionIndexes: [0] },
      ],
    });
    const p0 = r.topics[0].partitions[0];
    assert.equal(p0.errorCode, E.NONE);
    assert.deepEqual(
      p0.activeProducers
        .map((s) => [s.producerId, s.producerEpoch, s.lastSequence, s.lastTimestamp, s.coordinatorEpoch, s.currentTxnStartOffset])
        .sort((a, b) => a[0] - b[0]),
      [
        [77, 0, 0, 1_700_000_001_000, -1, -1],
        [4242, 3, 6, 1_700_000_000_500, -1, -1],
      ],
    );
    assert.equal(r.topics[0].partitions[1].errorCode, E.UNKNOWN_TOPIC_OR_PARTITION);
    assert.equal(r.topics[1].partitions[0].errorCode, E.UNKNOWN_TOPIC_OR_PARTITION);
  });

  it('OffsetDelete v0: deletes committed offsets; GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC, NON_EMPTY_GROUP as Kafka', async () => {
    const store = engine.store;
    await store.commitOffsets('od.g', [
      { stream: 'ops.a', partition: 0, offset: 5, metadata: null },
      { stream: 'ops.a', partition: 1, offset: 6, metadata: null },
      { stream: 'ops.b', partition: 0, offset: 7, metadata: null },
    ]);
    let r = await c.call(OffsetDeleteApi, 0, {
      groupId: 'od.g',
      topics: [
        { name: 'ops.a', partitions: [{ partitionIndex: 1 }, { partitionIndex: 2 }, { partitionIndex: 9 }] },
        { name: 'nope', partitions: [{ partitionIndex: 0 }] },
      ],
    });
    assert.equal(r.errorCode, E.NONE);
    assert.deepEqual(
      r.topics.map((t) => [t.name, t.partitions.map((p) => [p.partitionIndex, p.errorCode])]),
      [
        [
          'ops.a',
          [
            [1, E.NONE],
            [2, E.NONE],
            [9, E.UNKNOWN_TOPIC_OR_PARTITION],
          ],
        ],
        ['nope', [[0, E.UNKNOWN_TOPIC_OR_PARTITION]]],
      ],
    );
    assert.deepEqual(
      (await store.listOffsets('od.g')).map((o) => [o.stream, o.partition]),
      [
        ['ops.a', 0],
        ['ops.b', 0],
      ],
    );
    r = await c.call(OffsetDeleteApi, 0, { groupId: 'od.none', topics: [{ name: 'ops.a', partitions: [{ partitionIndex: 0 }] }] });
    assert.deepEqual([r.errorCode, r.topics], [E.GROUP_ID_NOT_FOUND, []]);

    // A consumer group with a member subscribed to ops.a: its offsets there stay; ops.b's may go.
    await store.commitOffsets('od.live', [
      { stream: 'ops.a', partition: 0, offset: 1, metadata: null },
      { stream: 'ops.b', partition: 0, offset: 2, metadata: null },
    ]);
    const member = await RawClient.connect(port);
    try {
      const j = await member.call(JoinGroupApi, 3, join3('od.live', 'consumer', subscription(['ops.a'])));
      assert.equal(j.errorCode, E.NONE);
      r = await c.call(OffsetDeleteApi, 0, {
        groupId: 'od.live',
        topics: [
          { name: 'ops.a', partitions: [{ partitionIndex: 0 }, { partitionIndex: 1 }] },
          { name: 'ops.b', partitions: [{ partitionIndex: 0 }] },
        ],
      });
      assert.equal(r.errorCode, E.NONE);
      assert.deepEqual(
        r.topics.map((t) => t.partitions.map((p) => p.errorCode)),
        [[E.GROUP_SUBSCRIBED_TO_TOPIC, E.GROUP_SUBSCRIBED_TO_TOPIC], [E.NONE]],
      );
      assert.deepEqual(
        (await store.listOffsets('od.live')).map((o) => [o.stream, o.partition]),
        [['ops.a', 0]],
      );
      // A group of another protocol type with members: NON_EMPTY_GROUP, nothing deleted.
      await store.commitOffsets('od.connect', [{ stream: 'ops.b', partition: 0, offset: 3, metadata: null }]);
      const jc = await member.call(JoinGroupApi, 3, join3('od.connect', 'connect', Buffer.from('x')));
      assert.equal(jc.errorCode, E.NONE);
      r = await c.call(OffsetDeleteApi, 0, { groupId: 'od.connect', topics: [{ name: 'ops.b', partitions: [{ partitionIndex: 0 }] }] });
      assert.deepEqual([r.errorCode, r.topics], [E.NON_EMPTY_GROUP, []]);
      assert.equal((await store.listOffsets('od.connect')).length, 1);
    } finally {
      member.close();
    }
  });

  it("DescribeConfigs of the broker, v0-v4: every Kafka broker config, with FlowMQ's values and their sources", async () => {
    for (let v = 0; v <= 4; v++) {
      const r = await c.call(DescribeConfigsApi, v, {
        resources: [{ resourceType: BROKER, resourceName: '0', configurationKeys: null }],
        includeSynonyms: v >= 1,
        includeDocumentation: v >= 3,
      });
      const res = r.results[0];
      assert.equal(res.errorCode, E.NONE, res.errorMessage ?? '');
      assert.deepEqual(
        res.configs.map((x) => x.name),
        KAFKA_BROKER_CONFIGS.map(([n]) => n),
        `v${v}: every config, by name`,
      );
      const get = (n: string) => res.configs.find((x) => x.name === n)!;
      assert.equal(get('broker.id').value, '0');
      assert.equal(get('num.partitions').value, '2', '--kafka-default-partitions');
      assert.equal(get('log.dirs').value, dir);
      if (v >= 1) {
        assert.equal(get('num.partitions').configSource, 4, 'STATIC_BROKER_CONFIG');
        assert.equal(get('num.io.threads').configSource, 5, "DEFAULT_CONFIG: Kafka's default");
        assert.deepEqual(get('log.retention.hours').synonyms, [
          { name: 'log.retention.hours', value: '-1', source: 4 },
          { name: 'log.retention.hours', value: '168', source: 5 },
        ]);
      } else {
        assert.equal(get('num.partitions').isDefault, false);
        assert.equal(get('num.io.threads').isDefault, true);
      }
      assert.deepEqual([get('num.io.threads').value, get('num.io.threads').readOnly], ['8', true]);
      assert.equal(get('log.retention.ms').readOnly, false, 'alterable at run time');
      assert.deepEqual([get('ssl.keystore.password').value, get('ssl.keystore.password').isSensitive], [null, true]);
      if (v >= 3) {
        assert.equal(get('message.max.bytes').configType, 3, 'INT');
        assert.match(get('log.retention.ms').documentation ?? '', /run time/);
      }
    }
    const keys = await c.call(DescribeConfigsApi, 4, {
      resources: [{ resourceType: BROKER, resourceName: '0', configurationKeys: ['message.max.bytes', 'nope'] }],
      includeSynonyms: false,
      includeDocumentation: false,
    });
    assert.deepEqual(
      keys.results[0].configs.map((x) => x.name),
      ['message.max.bytes'],
    );
    const other = await c.call(DescribeConfigsApi, 4, {
      resources: [{ resourceType: BROKER, resourceName: '3', configurationKeys: null }],
      includeSynonyms: false,
      includeDocumentation: false,
    });
    assert.equal(other.results[0].errorCode, E.INVALID_REQUEST);
  });

  it('alters broker configs at run time: cluster-wide and per broker, applied to streams and Produce', async () => {
    const inc = (name: string, configs: Array<{ name: string; configOperation: number; value: string | null }>, validateOnly = false) =>
      c.call(IncrementalAlterConfigsApi, 1, { resources: [{ resourceType: BROKER, resourceName: name, configs }], validateOnly });
    // Validate only: nothing changes.
    assert.equal((await inc('', [{ name: 'log.retention.ms', configOperation: 0, value: '3600000' }], true)).responses[0].errorCode, E.NONE);
    assert.equal(engine.streamDefaults.retentionMs, null);
    let r = await inc('', [
      { name: 'log.retention.ms', configOperation: 0, value: '3600000' },
      { name: 'log.retention.bytes', configOperation: 0, value: '1048576' },
      { name: 'log.segment.bytes', configOperation: 0, value: '4194304' },
    ]);
    assert.equal(r.responses[0].errorCode, E.NONE, r.responses[0].errorMessage ?? '');
    assert.deepEqual(engine.streamDefaults, { retentionMs: 3_600_000, retentionBytes: 1_048_576, segmentBytes: 4_194_304, segmentMs: null });
    // The cluster-wide resource lists what was set there; the broker's shows the source.
    const cw = await c.call(DescribeConfigsApi, 4, {
      resources: [{ resourceType: BROKER, resourceName: '', configurationKeys: null }],
      includeSynonyms: true,
      includeDocumentation: false,
    });
    assert.deepEqual(
      cw.results[0].configs.map((x) => [x.name, x.value, x.configSource]),
      [
        ['log.retention.bytes', '1048576', 3],
        ['log.retention.ms', '3600000', 3],
        ['log.segment.bytes', '4194304', 3],
      ],
    );
    // A topic without its own retention now reports the broker's, from DYNAMIC_DEFAULT_BROKER_CONFIG.
    const t = await c.call(DescribeConfigsApi, 4, {
      resources: [{ resourceType: 2, resourceName: 'ops.b', configurationKeys: ['retention.ms'] }],
      includeSynonyms: true,
      includeDocumentation: false,
    });
    assert.deepEqual([t.results[0].configs[0].value, t.results[0].configs[0].configSource], ['3600000', 3]);

    // Per broker: message.max.bytes makes Produce refuse larger batches on topics without max.message.bytes.
    r = await inc('0', [{ name: 'message.max.bytes', configOperation: 0, value: '200' }]);
    assert.equal(r.responses[0].errorCode, E.NONE);
    const big = encodeBatch([{ key: null, value: Buffer.alloc(500), headers: [], timestamp: Date.now() }]);
    const p = await c.call(ProduceApi, 7, {
      transactionalId: null,
      acks: -1,
      timeoutMs: 5000,
      topics: [{ name: 'ops.b', partitions: [{ index: 0, records: big }] }],
    });
    assert.equal(p.topics[0].partitions[0].errorCode, E.MESSAGE_TOO_LARGE);
    const mm = await c.call(DescribeConfigsApi, 4, {
      resources: [{ resourceType: BROKER, resourceName: '0', configurationKeys: ['message.max.bytes'] }],
      includeSynonyms: true,
      includeDocumentation: false,
    });
    assert.deepEqual([mm.results[0].configs[0].value, mm.results[0].configs[0].configSource], ['200', 2]);
    assert.deepEqual(
      mm.results[0].configs[0].synonyms.map((s) => [s.value, s.source]),
      [
        ['200', 2],
        [String(100 * 1024 * 1024), 4],
        ['1048588', 5],
      ],
    );
    assert.equal((await inc('0', [{ name: 'message.max.bytes', configOperation: 1, value: null }])).responses[0].errorCode, E.NONE);
    const p2 = await c.call(ProduceApi, 7, {
      transactionalId: null,
      acks: -1,
      timeoutMs: 5000,
      topics: [{ name: 'ops.b', partitions: [{ index: 0, records: big }] }],
    });
    assert.equal(p2.topics[0].partitions[0].errorCode, E.NONE, 'deleted: back to no limit but the request size');

    // Refusals, per resource: static configs (INVALID_REQUEST), bad values (INVALID_CONFIG), another broker's id.
    const refusals = await c.call(IncrementalAlterConfigsApi, 1, {
      resources: [
        { resourceType: BROKER, resourceName: '0', configs: [{ name: 'num.io.threads', configOperation: 0, value: '4' }] },
        { resourceType: BROKER, resourceName: '', configs: [{ name: 'no.such.config', configOperation: 0, value: '4' }] },
        { resourceType: BROKER, resourceName: '5', configs: [{ name: 'log.retention.ms', configOperation: 0, value: '1000' }] },
        { resourceType: 2, resourceName: 'ops.a', configs: [{ name: 'retention.ms', configOperation: 0, value: '60000' }] },
      ],
      validateOnly: false,
    });
    assert.deepEqual(
      refusals.responses.map((x) => x.errorCode),
      [E.INVALID_REQUEST, E.INVALID_REQUEST, E.INVALID_REQUEST, E.NONE],
    );
    assert.match(refusals.responses[0].errorMessage ?? '', /num\.io\.threads/);
    const badValue = await inc('0', [{ name: 'log.retention.ms', configOperation: 0, value: 'soon' }]);
    assert.equal(badValue.responses[0].errorCode, E.INVALID_CONFIG);
    assert.match(badValue.responses[0].errorMessage ?? '', /log\.retention\.ms/);
    // The same resource twice in one request: each refused.
    const twice = await c.call(IncrementalAlterConfigsApi, 1, {
      resources: [
        { resourceType: BROKER, resourceName: '0', configs: [{ name: 'log.retention.ms', configOperation: 0, value: '1000' }] },
        { resourceType: BROKER, resourceName: '0', configs: [{ name: 'log.retention.bytes', configOperation: 0, value: '1000' }] },
      ],
      validateOnly: false,
    });
    assert.deepEqual(
      twice.responses.map((x) => x.errorCode),
      [E.INVALID_REQUEST, E.INVALID_REQUEST],
    );
    assert.equal(engine.streamDefaults.retentionMs, 3_600_000, 'the refused change changed nothing');

    // AlterConfigs replaces the cluster-wide set: what it does not name goes.
    const alt = await c.call(AlterConfigsApi, 2, {
      resources: [{ resourceType: BROKER, resourceName: '', configs: [{ name: 'log.roll.ms', value: '120000' }] }],
      validateOnly: false,
    });
    assert.equal(alt.responses[0].errorCode, E.NONE, alt.responses[0].errorMessage ?? '');
    assert.deepEqual(engine.streamDefaults, { retentionMs: null, retentionBytes: null, segmentBytes: null, segmentMs: 120_000 });
    assert.equal(
      (await c.call(AlterConfigsApi, 2, { resources: [{ resourceType: BROKER, resourceName: '', configs: [] }], validateOnly: false })).responses[0].errorCode,
      E.NONE,
    );
    assert.equal((engine.streamDefaults as { segmentMs: number | null }).segmentMs, null);
  });

  it('BROKER_LOGGER: describes and sets log levels with IncrementalAlterConfigs only, as Kafka', async () => {
    const d = await c.call(DescribeConfigsApi, 4, {
      resources: [{ resourceType: BROKER_LOGGER, resourceName: '0', configurationKeys: null }],
      includeSynonyms: false,
      includeDocumentation: true,
    });
    assert.deepEqual(
      d.results[0].configs.map((x) => x.name),
      ['root', 'kafka'],
    );
    const level = () => d.results[0].configs.find((x) => x.name === 'kafka')!.value;
    assert.match(level() ?? '', /^(TRACE|DEBUG|INFO|WARN|ERROR|FATAL|OFF)$/);
    const set = (configs: Array<{ name: string; configOperation: number; value: string | null }>) =>
      c.call(IncrementalAlterConfigsApi, 1, { resources: [{ resourceType: BROKER_LOGGER, resourceName: '0', configs }], validateOnly: false });
    assert.equal((await set([{ name: 'kafka', configOperation: 0, value: 'WARN' }])).responses[0].errorCode, E.NONE);
    const after1 = await c.call(DescribeConfigsApi, 4, {
      resources: [{ resourceType: BROKER_LOGGER, resourceName: '0', configurationKeys: ['kafka'] }],
      includeSynonyms: false,
      includeDocumentation: false,
    });
    assert.equal(after1.results[0].configs[0].value, 'WARN');
    assert.equal((await set([{ name: 'kafka', configOperation: 1, value: null }])).responses[0].errorCode, E.NONE);
    assert.deepEqual(
      [
        (await set([{ name: 'root', configOperation: 1, value: null }])).responses[0].errorCode,
        (await set([{ name: 'nope', configOperation: 0, value: 'INFO' }])).responses[0].errorCode,
        (await set([{ name: 'kafka', configOperation: 0, value: 'LOUD' }])).responses[0].errorCode,
        (await set([{ name: 'kafka', configOperation: 2, value: 'INFO' }])).responses[0].errorCode,
      ],
      [E.INVALID_REQUEST, E.INVALID_CONFIG, E.INVALID_CONFIG, E.INVALID_REQUEST],
    );
    const legacy = await c.call(AlterConfigsApi, 2, {
      resources: [{ resourceType: BROKER_LOGGER, resourceName: '0', configs: [{ name: 'kafka', value: 'DEBUG' }] }],
      validateOnly: false,
    });
    assert.equal(legacy.responses[0].errorCode, E.INVALID_REQUEST);
  });
});
