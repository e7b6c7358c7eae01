/**
 * The Kafka listener with real clients (kcat / librdkafka 2.0, KafkaJS 2.2) and a raw protocol client, over an
 * Engine on in-memory storage.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import kafkajs from 'kafkajs';
import {
  Engine,
  ReadLease,
  crc32c,
  decodeBatch,
  encodeBatch,
  isCompressionSupported,
  makeMessage,
  partitionFor,
  readBatchInfo,
  type AppendResult,
  type RecordInput,
  type StreamDef,
} from '../../../src/core/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import {
  KAFKA_ROUTES,
  KafkaAdapter,
  KafkaConnection,
  createKafkaAdapter,
  resolveKafkaOptions,
  startKafkaListener,
} from '../../../src/protocols/kafka/index.js';
import {
  ApiVersionsApi,
  FetchApi,
  KafkaErrorCode,
  ListOffsetsApi,
  MetadataApi,
  ProduceApi,
  decodeResponse,
  encodeRequest,
  readRequestPrefix,
  type ApiCodec,
  type FetchRequest,
  type ProduceRequest,
} from '../../../src/protocols/kafka/codec/index.js';
import { GatedStreams, MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger, duplexPair, kcat, metadataRequest, type CapturedLog } from './helpers.js';

const { Kafka, logLevel } = kafkajs;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

/** librdkafka options that keep kcat runs short: quick EOF detection, no long retries against a test broker. */
const FAST = ['-X', 'fetch.wait.max.ms=50', '-m', '10'];

function produceRequest(topic: string, partition: number, records: Buffer | null, acks = -1): ProduceRequest {
  return { transactionalId: null, acks, timeoutMs: 5000, topics: [{ name: topic, partitions: [{ index: partition, records }] }] };
}

function fetchRequest(topic: string, partition: number, offset: number, maxWaitMs = 0, minBytes = 1): FetchRequest {
  return {
    replicaId: -1,
    maxWaitMs,
    minBytes,
    maxBytes: 1 << 20,
    isolationLevel: 0,
    sessionId: 0,
    sessionEpoch: -1,
    topics: [
      {
        topic,
        partitions: [{ partition, currentLeaderEpoch: -1, fetchOffset: offset, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 1 << 20 }],
      },
    ],
    forgottenTopics: [],
    rackId: '',
    clusterId: null,
  };
}

const recordBytes = (p: { records: Buffer[] | null }): number => Buffer.concat(p.records ?? []).length;

const rec = (value: string, extra: Partial<RecordInput> = {}): RecordInput => ({
  key: null,
  value: Buffer.from(value),
  headers: [],
  timestamp: Date.now(),
  ...extra,
});

function jsonLines(out: string): Array<Record<string, unknown>> {
  return out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** Minimal view of KafkaJS's internal cluster/broker objects (not part of its typed public API). */
interface LowLevelMessage {
  offset: string;
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, Buffer | undefined>;
}
interface LowLevelBroker {
  fetch(req: {
    replicaId: number;
    isolationLevel: number;
    maxWaitTime: number;
    minBytes: number;
    maxBytes: number;
    topics: Array<{ topic: string; partitions: Array<{ partition: number; fetchOffset: string; maxBytes: number }> }>;
  }): Promise<{
    responses: Array<{ topicName: string; partitions: Array<{ partition: number; errorCode: number; highWatermark: string; messages: LowLevelMessage[] }> }>;
  }>;
}
interface LowLevelCluster {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  addTargetTopic(topic: string): Promise<void>;
  findLeaderForPartitions(topic: string, partitions: number[]): Record<string, number[]>;
  findBroker(q: { nodeId: string }): Promise<LowLevelBroker>;
}

/**
 * KafkaJS has no public way to fetch a partition by offset without a consumer group (group APIs come with the
 * next issue), so this reaches its internal cluster factory, the same object its consumer uses.
 */
function lowLevelCluster(kafka: InstanceType<typeof Kafka>): LowLevelCluster {
  const sym = Object.getOwnPropertySymbols(kafka).find((s) => s.description === 'private:Kafka:createCluster');
  assert.ok(sym, 'KafkaJS internals changed');
  const create = (kafka as unknown as Record<symbol, (o: object) => LowLevelCluster>)[sym];
  return create({});
}

/** A listener over `m` with an adapter of its own, and a raw client connected to it. */
async function rawSetup(m: MemoryStreams) {
  const engine = new Engine(m, m);
  const ctx = { engine, logger: captureLogger().logger, brokerId: 1 };
  const adapter = createKafkaAdapter(ctx);
  const listener = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0 }, {}, adapter);
  const c = await RawClient.connect(listener.address().port);
  return {
    engine,
    adapter,
    c,
    async close() {
      c.close();
      await listener.close();
    },
  };
}

describe('kafka listener with real clients', () => {
  let m: MemoryStreams;
  let engine: Engine;
  let log: CapturedLog;
  let listener: ProtocolListener;
  let port: number;
  let broker: string;

  before(async () => {
    m = new MemoryStreams();
    engine = new Engine(m, m);
    log = captureLogger();
    listener = await startKafkaListener({ engine, logger: log.logger, brokerId: 1 }, { host: '127.0.0.1', port: 0 });
    port = listener.address().port;
    broker = `127.0.0.1:${port}`;
  });

  after(async () => {
    await listener.close();
    assert.equal(listener.connections(), 0);
  });

  // ------------------------------------------------------------------------------------------- kcat

  it('kcat -L lists this broker and every stream as a topic', async () => {
    await engine.createStream({ name: 'orders', partitions: 3 });
    const r = await kcat(['-b', broker, '-L', '-J', ...FAST]);
    assert.equal(r.code, 0, r.stderr);
    const md = JSON.parse(r.stdout) as {
      brokers: Array<{ id: number; name: string }>;
      topics: Array<{ topic: string; partitions: Array<{ partition: number; leader: number; replicas: Array<{ id: number }> }> }>;
    };
    assert.deepEqual(md.brokers, [{ id: 1, name: broker }]);
    const orders = md.topics.find((t) => t.topic === 'orders');
    assert.ok(orders);
    assert.deepEqual(
      orders.partitions.map((p) => [p.partition, p.leader, p.replicas.map((x) => x.id)]),
      [
        [0, 1, [1]],
        [1, 1, [1]],
        [2, 1, [1]],
      ],
    );
  });

  it('kcat -P auto-creates a topic and kcat -C reads keys, headers and offsets back', async () => {
    const p = await kcat(['-b', broker, '-P', '-t', 'kc.lines', '-p', '0', '-K', ':', '-H', 'src=kcat', ...FAST], {
      input: 'k1:v1\nk2:v2\nk3:v3\n',
    });
    assert.equal(p.code, 0, p.stderr);
    assert.ok(engine.getStream('kc.lines'), 'auto-created');
    assert.ok(log.entries('auto-created topic').some((e) => e.topic === 'kc.lines'));
    assert.equal(engine.getStream('kc.lines')?.ownTopic, 'kc/lines');
    const c = await kcat(['-b', broker, '-C', '-t', 'kc.lines', '-o', 'beginning', '-e', '-J', ...FAST]);
    assert.equal(c.code, 0, c.stderr);
    const msgs = jsonLines(c.stdout);
    assert.deepEqual(
      msgs.map((x) => [x.partition, x.offset, x.key, x.payload, x.headers]),
      [
        [0, 0, 'k1', 'v1', ['src', 'kcat']],
        [0, 1, 'k2', 'v2', ['src', 'kcat']],
        [0, 2, 'k3', 'v3', ['src', 'kcat']],
      ],
    );
    // A consumer starting at an offset sees only what follows.
    const from = await kcat(['-b', broker, '-C', '-t', 'kc.lines', '-p', '0', '-o', '2', '-e', '-J', ...FAST]);
    assert.deepEqual(
      jsonLines(from.stdout).map((x) => x.offset),
      [2],
    );
  });

  it('kcat -Q finds offsets by timestamp', async () => {
    await engine.createStream({ name: 'kc.times', partitions: 1 });
    engine.produce('kc.times', 0, encodeBatch([rec('a', { timestamp: 1000 }), rec('b', { timestamp: 2000 })]));
    engine.produce('kc.times', 0, encodeBatch([rec('c', { timestamp: 3000 })]));
    const q1 = await kcat(['-b', broker, '-Q', '-t', 'kc.times:0:1500', ...FAST]);
    assert.equal(q1.code, 0, q1.stderr);
    assert.match(q1.stdout, /kc\.times \[0\] offset 1\n/);
    const q2 = await kcat(['-b', broker, '-Q', '-t', 'kc.times:0:3000', ...FAST]);
    assert.match(q2.stdout, /kc\.times \[0\] offset 2\n/);
  });

  it('kcat -C reads a record published from MQTT into a bound 3-partition stream', async () => {
    await engine.createStream({ name: 'telemetry', partitions: 3, bindings: ['factory/+/+/telemetry'] });
    const msg = makeMessage('factory/berlin/m7/telemetry', Buffer.from('{"t":21.5}'), { qos: 1 });
    const durable = engine.publish(msg);
    assert.ok(durable, 'captured by the stream');
    await durable;
    const expected = partitionFor(msg, 3);
    const c = await kcat(['-b', broker, '-C', '-t', 'telemetry', '-o', 'beginning', '-e', '-J', ...FAST]);
    assert.equal(c.code, 0, c.stderr);
    const msgs = jsonLines(c.stdout);
    assert.equal(msgs.length, 1);
    assert.equal(msgs[0].partition, expected);
    assert.equal(msgs[0].offset, 0);
    assert.equal(msgs[0].payload, '{"t":21.5}');
    assert.deepEqual(msgs[0].headers, ['flowmq.topic', 'factory/berlin/m7/telemetry']);
  });

  // ------------------------------------------------------------------------------------------- KafkaJS

  it('KafkaJS produces with keys and headers; kcat reads them; admin sees topics and offsets', async () => {
    const kafka = new Kafka({ brokers: [broker], clientId: 'kjs-test', logLevel: logLevel.NOTHING });
    const producer = kafka.producer();
    await producer.connect();
    try {
      const res = await producer.send({
        topic: 'kjs.events',
        acks: -1,
        messages: [
          { key: 'dev-1', value: 'one', headers: { trace: 'abc', n: '1' } },
          { key: 'dev-2', value: 'two', headers: { trace: 'def' } },
          { key: null, value: 'three' },
        ],
      });
      assert.deepEqual(
        res.map((r) => [r.topicName, r.partition, r.errorCode, r.baseOffset]),
        [['kjs.events', 0, 0, '0']],
      );
      const res2 = await producer.send({ topic: 'kjs.events', acks: 1, messages: [{ value: 'four' }] });
      assert.equal(res2[0].baseOffset, '3');
    } finally {
      await producer.disconnect();
    }

    const c = await kcat(['-b', broker, '-C', '-t', 'kjs.events', '-o', 'beginning', '-e', '-J', ...FAST]);
    assert.equal(c.code, 0, c.stderr);
    assert.deepEqual(
      jsonLines(c.stdout).map((x) => [x.offset, x.key, x.payload, x.headers ?? null]),
      [
        [0, 'dev-1', 'one', ['trace', 'abc', 'n', '1']],
        [1, 'dev-2', 'two', ['trace', 'def']],
        [2, null, 'three', null],
        [3, null, 'four', null],
      ],
    );

    const admin = kafka.admin();
    await admin.connect();
    try {
      assert.ok((await admin.listTopics()).includes('kjs.events'));
      assert.deepEqual(await admin.fetchTopicOffsets('kjs.events'), [{ partition: 0, offset: '4', high: '4', low: '0' }]);
      assert.deepEqual(await admin.fetchTopicOffsetsByTimestamp('kjs.events', 0), [{ partition: 0, offset: '0' }]);
      // Past every record the broker answers -1, which KafkaJS turns into the high watermark.
      assert.deepEqual(await admin.fetchTopicOffsetsByTimestamp('kjs.events', Date.now() + 60_000), [{ partition: 0, offset: '4' }]);
    } finally {
      await admin.disconnect();
    }
  });

  it('KafkaJS reads a partition by offset through its low-level fetch', async () => {
    await engine.createStream({ name: 'kjs.read', partitions: 2 });
    engine.produce('kjs.read', 1, encodeBatch([rec('r0', { key: Buffer.from('a') }), rec('r1', { headers: [{ key: 'h', value: Buffer.from('v') }] })]));
    engine.produce('kjs.read', 1, encodeBatch([rec('r2')]));
    const kafka = new Kafka({ brokers: [broker], clientId: 'kjs-low', logLevel: logLevel.NOTHING });
    const cluster = lowLevelCluster(kafka);
    await cluster.connect();
    try {
      await cluster.addTargetTopic('kjs.read');
      const leaders = cluster.findLeaderForPartitions('kjs.read', [1]);
      assert.deepEqual(Object.keys(leaders), ['1']);
      const b = await cluster.findBroker({ nodeId: '1' });
      const res = await b.fetch({
        replicaId: -1,
        isolationLevel: 1,
        maxWaitTime: 100,
        minBytes: 1,
        maxBytes: 1 << 20,
        topics: [{ topic: 'kjs.read', partitions: [{ partition: 1, fetchOffset: '1', maxBytes: 1 << 20 }] }],
      });
      const p = res.responses[0].partitions[0];
      assert.equal(p.errorCode, 0);
      assert.equal(p.highWatermark, '3');
      // The batch holding offset 1 starts at 0; clients skip records before their fetch offset.
      const got = p.messages.filter((x) => Number(x.offset) >= 1).map((x) => [x.offset, x.value?.toString(), x.headers.h?.toString() ?? null]);
      assert.deepEqual(got, [
        ['1', 'r1', 'v'],
        ['2', 'r2', null],
      ]);
    } finally {
      await cluster.disconnect();
    }
  });

  // ------------------------------------------------------------------------------------------- raw protocol

  it('answers flexible versions end to end: Metadata v12, Produce v9, Fetch v12, ListOffsets v7', async () => {
    const c = await RawClient.connect(port);
    try {
      const av = await c.call(ApiVersionsApi, 3, { clientSoftwareName: 'raw', clientSoftwareVersion: '1' });
      assert.equal(av.errorCode, 0);
      assert.deepEqual(
        av.apiKeys.map((k) => [k.apiKey, k.minVersion, k.maxVersion]),
        [
          [0, 0, 13],
          [1, 4, 18],
          [2, 1, 11],
          [3, 0, 13],
          [8, 0, 10],
          [9, 0, 10],
          [10, 0, 6],
          [11, 0, 9],
          [12, 0, 4],
          [13, 0, 5],
          [14, 0, 5],
          [15, 0, 6],
          [16, 0, 5],
          [18, 0, 4],
          [19, 0, 7],
          [20, 0, 6],
          [21, 0, 2],
          [22, 0, 5],
          [23, 0, 4],
          [24, 0, 3],
          [25, 0, 3],
          [26, 0, 3],
          [28, 0, 3],
          // DescribeAcls, CreateAcls, DeleteAcls: advertised always (SECURITY_DISABLED without access control).
          [29, 0, 3],
          [30, 0, 3],
          [31, 0, 3],
          [32, 0, 4],
          [33, 0, 2],
          [35, 0, 4],
          [37, 0, 3],
          [42, 0, 2],
          [43, 0, 2],
          [44, 0, 1],
          [47, 0, 0],
          [60, 0, 2],
          [61, 0, 0],
          [65, 0, 0],
          [66, 0, 1],
          // ConsumerGroupHeartbeat, ConsumerGroupDescribe (KIP-848).
          [68, 0, 1],
          [69, 0, 1],
        ],
      );
      const md = await c.call(MetadataApi, 12, metadataRequest(['flex.t']));
      assert.equal(md.brokers[0].port, port);
      assert.equal(md.brokers[0].host, '127.0.0.1');
      assert.equal(md.clusterId, 'flowmq');
      assert.deepEqual(
        md.topics.map((t) => [t.name, t.errorCode, t.partitions.length]),
        [['flex.t', 0, 1]],
      );
      const batch = encodeBatch([rec('x', { timestamp: 5000 }), rec('y', { timestamp: 7000 }), rec('z', { timestamp: 6000 })]);
      const pr = await c.call(ProduceApi, 9, produceRequest('flex.t', 0, batch, 1));
      assert.deepEqual(
        pr.topics[0].partitions.map((p) => [p.errorCode, p.baseOffset, p.logAppendTimeMs, p.logStartOffset]),
        [[0, 0, -1, 0]],
      );
      const f = await c.call(FetchApi, 12, fetchRequest('flex.t', 0, 0));
      const fp = f.responses[0].partitions[0];
      assert.equal(f.sessionId, 0);
      assert.deepEqual([fp.errorCode, fp.highWatermark, fp.lastStableOffset, fp.logStartOffset], [0, 3, 3, 0]);
      assert.deepEqual(Buffer.concat(fp.records ?? []).subarray(12), batch.subarray(12), 'the stored batch is served as produced');
      const lo = await c.call(ListOffsetsApi, 7, {
        replicaId: -1,
        isolationLevel: 0,
        topics: [
          {
            name: 'flex.t',
            partitions: [-1, -2, -3, 5500, 99999].map((timestamp) => ({ partitionIndex: 0, currentLeaderEpoch: -1, timestamp })),
          },
        ],
      });
      assert.deepEqual(
        lo.topics[0].partitions.map((p) => [p.errorCode, p.offset, p.timestamp]),
        [
          [0, 3, -1],
          [0, 0, -1],
          [0, 1, 7000],
          [0, 1, 7000],
          [0, -1, -1],
        ],
      );
    } finally {
      c.close();
    }
  });

  it('answers an unsupported ApiVersions version with UNSUPPORTED_VERSION in v0 layout (KIP-511)', async () => {
    const c = await RawClient.connect(port);
    try {
      // ApiVersions v9 does not exist: the body is unparseable, only the header prefix matters.
      c.send(Buffer.from('0000000b' + '0012' + '0009' + '0000007b' + 'ffff' + '00', 'hex'));
      const res = decodeResponse(ApiVersionsApi, 0, await c.next());
      assert.equal(res.correlationId, 123);
      assert.equal(res.body.errorCode, KafkaErrorCode.UNSUPPORTED_VERSION);
      assert.ok(res.body.apiKeys.some((k) => k.apiKey === 18 && k.maxVersion === 4));
      // The connection stays usable.
      const av = await c.call(ApiVersionsApi, 0, { clientSoftwareName: null, clientSoftwareVersion: null });
      assert.equal(av.errorCode, 0);
    } finally {
      c.close();
    }
  });

  it('long-polls a fetch until data arrives, and returns empty after max wait', async () => {
    await engine.createStream({ name: 'lp', partitions: 1 });
    const c = await RawClient.connect(port);
    try {
      let t0 = Date.now();
      const empty = await c.call(FetchApi, 11, fetchRequest('lp', 0, 0, 300));
      const waited = Date.now() - t0;
      assert.ok(waited >= 250, `waited ${waited} ms`);
      assert.equal(recordBytes(empty.responses[0].partitions[0]), 0, 'fetchOffset == HW is valid and empty');
      assert.equal(empty.responses[0].partitions[0].errorCode, 0);

      t0 = Date.now();
      setTimeout(() => engine.produce('lp', 0, encodeBatch([rec('late')])), 150);
      const got = await c.call(FetchApi, 11, fetchRequest('lp', 0, 0, 10_000));
      const elapsed = Date.now() - t0;
      assert.ok(elapsed < 5000, `answered after ${elapsed} ms`);
      assert.ok(recordBytes(got.responses[0].partitions[0]) > 0);
      assert.equal(got.responses[0].partitions[0].highWatermark, 1);
    } finally {
      c.close();
    }
  });

  it('writes pipelined responses in request order even when an earlier handler is slower', async () => {
    await engine.createStream({ name: 'pipe', partitions: 1 });
    const c = await RawClient.connect(port);
    try {
      c.send(
        c.frame(FetchApi, 11, fetchRequest('pipe', 0, 0, 400), 1), // long poll: finishes last
        c.frame(MetadataApi, 4, metadataRequest(['pipe']), 2),
        c.frame(ProduceApi, 7, produceRequest('pipe', 0, encodeBatch([rec('p')]), 0), 3), // acks=0: no response
        c.frame(ApiVersionsApi, 2, { clientSoftwareName: null, clientSoftwareVersion: null }, 4),
      );
      const ids: number[] = [];
      for (let i = 0; i < 3; i++) ids.push((await c.next()).readInt32BE(0));
      assert.deepEqual(ids, [1, 2, 4]);
      assert.equal(engine.offsets('pipe', 0).highWatermark, 1, 'acks=0 produce was stored');
    } finally {
      c.close();
    }
  });

  it('closes the connection after earlier responses when an acks=0 produce fails (no response to carry the error)', async () => {
    await engine.createStream({ name: 'acks0', partitions: 1 });
    const c = await RawClient.connect(port);
    try {
      c.send(
        c.frame(ApiVersionsApi, 0, { clientSoftwareName: null, clientSoftwareVersion: null }, 1),
        c.frame(ProduceApi, 7, produceRequest('acks0', 4, encodeBatch([rec('x')]), 0), 2),
        c.frame(ApiVersionsApi, 0, { clientSoftwareName: null, clientSoftwareVersion: null }, 3),
      );
      assert.equal((await c.next()).readInt32BE(0), 1);
      assert.ok(await c.closesWithin(2000));
      await assert.rejects(c.next(100), /closed/);
      assert.ok(log.entries('acks=0 produce failed').length > 0);
    } finally {
      c.close();
    }
  });

  it('refuses a batch with a bad CRC with CORRUPT_MESSAGE and stores nothing', async () => {
    await engine.createStream({ name: 'crc', partitions: 1 });
    const c = await RawClient.connect(port);
    try {
      const batch = encodeBatch([rec('payload')]);
      batch[batch.length - 3] ^= 0xff;
      const res = await c.call(ProduceApi, 8, produceRequest('crc', 0, batch));
      const p = res.topics[0].partitions[0];
      assert.equal(p.errorCode, KafkaErrorCode.CORRUPT_MESSAGE);
      assert.match(p.errorMessage ?? '', /CRC/);
      assert.equal(engine.offsets('crc', 0).highWatermark, 0);
      assert.ok(log.entries('corrupt record batch').some((e) => e.topic === 'crc'));

      // A batch whose CRC is right but whose records do not parse is refused too.
      const bad = encodeBatch([rec('payload')]);
      bad[61] = 0x7f; // first record's length varint: far beyond the batch
      bad.writeUInt32BE(crc32c(bad, 21, bad.length), 17);
      const res2 = await c.call(ProduceApi, 9, produceRequest('crc', 0, bad));
      assert.equal(res2.topics[0].partitions[0].errorCode, KafkaErrorCode.CORRUPT_MESSAGE);
      assert.equal(engine.offsets('crc', 0).highWatermark, 0);

      // The same connection keeps working.
      const ok = await c.call(ProduceApi, 8, produceRequest('crc', 0, encodeBatch([rec('fine')])));
      assert.equal(ok.topics[0].partitions[0].errorCode, 0);
      assert.equal(engine.offsets('crc', 0).highWatermark, 1);
    } finally {
      c.close();
    }
  });

  it('accepts every defined compression codec id and refuses the undefined ones (5-7)', async () => {
    // Codecs 1-4 decode through the core (gzip) and the adapter's registered decompressors (snappy, lz4, zstd);
    // compressed produce and fetch with each are exercised end to end in compression.test.ts.
    for (const codec of [0, 1, 2, 3, 4]) assert.ok(isCompressionSupported(codec), `codec ${codec}`);
    for (const codec of [5, 6, 7]) assert.ok(!isCompressionSupported(codec), `codec ${codec}`);
    await engine.createStream({ name: 'comp', partitions: 1 });
    const batch = encodeBatch([rec('x')]);
    batch.writeInt16BE(6, 21);
    batch.writeUInt32BE(crc32c(batch, 21, batch.length), 17);
    const c = await RawClient.connect(port);
    try {
      const res = await c.call(ProduceApi, 7, produceRequest('comp', 0, batch));
      assert.equal(res.topics[0].partitions[0].errorCode, KafkaErrorCode.UNSUPPORTED_COMPRESSION_TYPE);
      assert.equal(engine.offsets('comp', 0).highWatermark, 0);
      const gz = await c.call(ProduceApi, 7, produceRequest('comp', 0, encodeBatch([rec('g')], 1)));
      assert.equal(gz.topics[0].partitions[0].errorCode, 0);
    } finally {
      c.close();
    }
  });

  it('maps unknown partitions, out-of-range offsets, invalid names and bad acks to Kafka error codes', async () => {
    await engine.createStream({ name: 'errs', partitions: 2 });
    engine.produce('errs', 0, encodeBatch([rec('a'), rec('b')]));
    const c = await RawClient.connect(port);
    try {
      const f = await c.call(FetchApi, 11, {
        ...fetchRequest('errs', 0, 3),
        topics: [
          {
            topic: 'errs',
            partitions: [3, 2, 1].map((fetchOffset, partition) => ({
              partition: partition === 2 ? 7 : partition,
              currentLeaderEpoch: -1,
              fetchOffset,
              lastFetchedEpoch: -1,
              logStartOffset: -1,
              partitionMaxBytes: 1000,
            })),
          },
          {
            topic: 'no.such.topic',
            partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 0, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 1000 }],
          },
        ],
      });
      assert.deepEqual(
        f.responses.flatMap((t) => t.partitions.map((p) => [t.topic, p.partitionIndex, p.errorCode, p.highWatermark])),
        [
          ['errs', 0, KafkaErrorCode.OFFSET_OUT_OF_RANGE, 2],
          ['errs', 1, KafkaErrorCode.OFFSET_OUT_OF_RANGE, 0],
          ['errs', 7, KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1],
          ['no.such.topic', 0, KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1],
        ],
      );
      assert.equal(engine.getStream('no.such.topic'), undefined, 'fetch never creates topics');

      const p = await c.call(ProduceApi, 7, produceRequest('errs', 5, encodeBatch([rec('x')])));
      assert.equal(p.topics[0].partitions[0].errorCode, KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION);
      const bad = await c.call(ProduceApi, 7, produceRequest('bad name!', 0, encodeBatch([rec('x')])));
      assert.equal(bad.topics[0].partitions[0].errorCode, KafkaErrorCode.INVALID_TOPIC_EXCEPTION);
      const acks = await c.call(ProduceApi, 7, produceRequest('errs', 0, encodeBatch([rec('x')]), 2));
      assert.equal(acks.topics[0].partitions[0].errorCode, KafkaErrorCode.INVALID_REQUIRED_ACKS);
      assert.equal(engine.offsets('errs', 0).highWatermark, 2);

      const md = await c.call(MetadataApi, 9, metadataRequest(['bad name!', 'not.created'], false));
      assert.deepEqual(
        md.topics.map((t) => [t.name, t.errorCode]),
        [
          ['bad name!', KafkaErrorCode.INVALID_TOPIC_EXCEPTION],
          ['not.created', KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION],
        ],
      );
      assert.equal(engine.getStream('not.created'), undefined, 'allow_auto_topic_creation=false is respected');

      const lo = await c.call(ListOffsetsApi, 1, {
        replicaId: -1,
        isolationLevel: 0,
        topics: [{ name: 'errs', partitions: [{ partitionIndex: 9, currentLeaderEpoch: -1, timestamp: -1 }] }],
      });
      assert.equal(lo.topics[0].partitions[0].errorCode, KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION);

      const sess = await c.call(FetchApi, 11, { ...fetchRequest('errs', 0, 0), sessionId: 77, sessionEpoch: 3 });
      assert.equal(sess.errorCode, KafkaErrorCode.FETCH_SESSION_ID_NOT_FOUND);
    } finally {
      c.close();
    }
  });

  it('respects the response max bytes but always returns the first batch', async () => {
    await engine.createStream({ name: 'big', partitions: 2 });
    const value = 'v'.repeat(3000);
    for (let i = 0; i < 5; i++) engine.produce('big', 0, encodeBatch([rec(value)]));
    engine.produce('big', 1, encodeBatch([rec(value)]));
    const c = await RawClient.connect(port);
    try {
      const req = fetchRequest('big', 0, 0);
      req.maxBytes = 100; // smaller than one batch
      req.topics[0].partitions.push({ ...req.topics[0].partitions[0], partition: 1 });
      const res = await c.call(FetchApi, 11, req);
      const [p0, p1] = res.responses[0].partitions;
      const first = Buffer.concat(p0.records ?? []);
      assert.equal(first.readBigInt64BE(0), 0n);
      assert.equal(first.length, readBatchInfo(first).size, 'exactly the first batch');
      assert.equal(recordBytes(p1), 0, 'nothing more once the response is full');
      assert.equal(p1.highWatermark, 1);
    } finally {
      c.close();
    }
  });

  // ------------------------------------------------------------------------------------------- malformed input

  it('closes a connection whose size prefix is negative or oversized, and others keep working', async () => {
    const before = log.entries('invalid request size').length;
    const a = await RawClient.connect(port);
    a.send(Buffer.from('ffffff00', 'hex'));
    assert.ok(await a.closesWithin(2000), 'negative size closes');
    const b = await RawClient.connect(port);
    b.send(Buffer.from('7fffffff00000000', 'hex'));
    assert.ok(await b.closesWithin(2000), 'oversized request closes');
    assert.equal(log.entries('invalid request size').length, before + 2);

    const r = await kcat(['-b', broker, '-L', '-J', ...FAST]);
    assert.equal(r.code, 0, r.stderr);
  });

  it('closes a connection sending a truncated request, with a log line', async () => {
    const c = await RawClient.connect(port);
    const other = await RawClient.connect(port);
    try {
      const full = c.frame(MetadataApi, 4, metadataRequest(['some.topic']));
      // Keep the size prefix consistent with the bytes sent, but cut the body: the topic string is truncated.
      const cut = full.subarray(4, full.length - 6);
      const frame = Buffer.concat([Buffer.alloc(4), cut]);
      frame.writeInt32BE(cut.length, 0);
      c.send(frame);
      assert.ok(await c.closesWithin(2000));
      const e = log.entries('malformed request').at(-1);
      assert.ok(e);
      assert.equal(e.api, 'Metadata');
      assert.equal(e.reason, 'TRUNCATED');
      const ok = await other.call(MetadataApi, 1, metadataRequest(null));
      assert.ok(ok.topics.length > 0);
    } finally {
      c.close();
      other.close();
    }
  });

  it('answers a request with bytes after its body, as Kafka does, and logs them at debug', async () => {
    if (!engine.getStream('trailing.t')) await engine.createStream({ name: 'trailing.t', partitions: 1 });
    const c = await RawClient.connect(port);
    try {
      // librdkafka 2.1+'s all-topics Metadata v12: a 4-byte placeholder for the compact topics length (null).
      const body = Buffer.from('0003000c' + '00000077' + '0007' + Buffer.from('rdkafka').toString('hex') + '00' + '00000000' + '010000', 'hex');
      const frame = Buffer.alloc(4 + body.length);
      frame.writeInt32BE(body.length, 0);
      body.copy(frame, 4);
      c.send(frame);
      const res = decodeResponse(MetadataApi, 12, await c.next());
      assert.equal(res.correlationId, 0x77);
      assert.equal(res.body.brokers.length, 1);
      assert.ok(
        res.body.topics.some((t) => t.name === 'trailing.t'),
        'every topic',
      );
      const e = log.entries('bytes after the request body ignored').at(-1);
      assert.equal(e?.api, 'Metadata');
      assert.equal(e?.trailingBytes, 3);
      assert.equal(e?.level, 20, 'debug');
      // The connection goes on.
      const md = await c.call(MetadataApi, 12, metadataRequest(null));
      assert.equal(md.brokers.length, 1);
    } finally {
      c.close();
    }
  });

  it('answers an API or version it does not advertise with UNSUPPORTED_VERSION and keeps the connection', async () => {
    const c = await RawClient.connect(port);
    try {
      // API key 99 does not exist: header v0 + error code 35, whatever the body.
      c.send(Buffer.from('0000000b' + '0063' + '0000' + '00000005' + 'ffff' + '01', 'hex'));
      const r = await c.next();
      assert.deepEqual([r.readInt32BE(0), r.readInt16BE(4), r.length], [5, KafkaErrorCode.UNSUPPORTED_VERSION, 6]);
      assert.equal(log.entries('unsupported API').at(-1)?.apiKey, 99);
      // A known API at a version it does not advertise.
      const f = encodeRequest(MetadataApi, { apiVersion: 4, correlationId: 6, clientId: null }, metadataRequest(null), { sizePrefix: true });
      f.writeInt16BE(14, 6); // Metadata v14 is not advertised
      c.send(f);
      const r2 = await c.next();
      assert.deepEqual([r2.readInt32BE(0), r2.readInt16BE(4)], [6, KafkaErrorCode.UNSUPPORTED_VERSION]);
      assert.ok(log.entries('unsupported API version').length > 0);
      // Still usable.
      const md = await c.call(MetadataApi, 4, metadataRequest(null));
      assert.equal(md.brokers.length, 1);
    } finally {
      c.close();
    }
  });
});

describe('kafka listener options', () => {
  it('does not create topics when auto-creation is off, and uses the advertised address', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    const log = captureLogger();
    const listener = await startKafkaListener(
      { engine, logger: log.logger, brokerId: 7 },
      { host: '127.0.0.1', port: 0 },
      { autoCreateTopics: false, advertisedHost: 'kafka.example', advertisedPort: 19999, defaultPartitions: 4 },
    );
    const c = await RawClient.connect(listener.address().port);
    try {
      const md = await c.call(MetadataApi, 4, metadataRequest(['nope']));
      assert.deepEqual(md.brokers, [{ nodeId: 7, host: 'kafka.example', port: 19999, rack: null }]);
      assert.equal(md.controllerId, 7);
      assert.equal(md.topics[0].errorCode, KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION);
      const p = await c.call(ProduceApi, 7, produceRequest('nope', 0, encodeBatch([rec('x')])));
      assert.equal(p.topics[0].partitions[0].errorCode, KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION);
      assert.equal(engine.getStream('nope'), undefined);
      assert.equal(listener.connections(), 1);
    } finally {
      await listener.close();
    }
    assert.equal(await c.closesWithin(1000), true, 'close() closes client connections');
  });

  it('creates auto-created topics with the default partition count', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    const listener = await startKafkaListener(
      { engine, logger: captureLogger().logger, brokerId: 1 },
      { host: '127.0.0.1', port: 0 },
      { defaultPartitions: 4 },
    );
    const c = await RawClient.connect(listener.address().port);
    try {
      // Two requests creating the same topic concurrently: it is created once.
      c.send(c.frame(MetadataApi, 1, metadataRequest(['auto.four'])), c.frame(ProduceApi, 3, produceRequest('auto.four', 3, encodeBatch([rec('x')]))));
      const md = decodeResponse(MetadataApi, 1, await c.next());
      assert.equal(md.body.topics[0].partitions.length, 4);
      const pr = decodeResponse(ProduceApi, 3, await c.next());
      assert.equal(pr.body.topics[0].partitions[0].errorCode, 0);
      assert.equal(engine.getStream('auto.four')?.def.partitions, 4);
    } finally {
      c.close();
      await listener.close();
    }
  });

  it('counts an acks=0 produce as unanswered until it is stored, so a producer not waiting for acks is held back', async () => {
    const m = new GatedStreams();
    const engine = new Engine(m, m);
    const listener = await startKafkaListener(
      { engine, logger: captureLogger().logger, brokerId: 1 },
      { host: '127.0.0.1', port: 0 },
      { maxInFlightRequests: 2 },
    );
    await engine.createStream({ name: 'held', partitions: 1 });
    m.hold = true;
    const c = await RawClient.connect(listener.address().port);
    try {
      const produce = (id: number) => c.frame(ProduceApi, 7, produceRequest('held', 0, encodeBatch([rec(`r${id}`)]), 0), id);
      c.send(produce(1), produce(2));
      await new Promise((r) => setTimeout(r, 100));
      c.send(produce(3), produce(4), c.frame(ApiVersionsApi, 2, { clientSoftwareName: null, clientSoftwareVersion: null }, 5));
      await new Promise((r) => setTimeout(r, 300));
      // Two produces taken and not yet stored fill the connection's window: it reads nothing more.
      assert.equal(engine.offsets('held', 0).highWatermark, 2);
      await assert.rejects(c.next(100), /timed out|timeout/i);
      m.release();
      // Released as they are taken: the rest are read, stored and released in turn.
      const t = setInterval(() => m.release(), 10);
      try {
        assert.equal((await c.next(2000)).readInt32BE(0), 5, 'the ApiVersions response, after the produces');
      } finally {
        clearInterval(t);
      }
      assert.equal(engine.offsets('held', 0).highWatermark, 4);
    } finally {
      c.close();
      await listener.close();
    }
  });

  it('gives a large Produce frame back to the pool once it is answered, and the storage holds its own copy', async () => {
    const m = new GatedStreams();
    const { engine, adapter, c, close } = await rawSetup(m);
    await engine.createStream({ name: 'pooled', partitions: 1 });
    try {
      const big = (fill: number) => encodeBatch(Array.from({ length: 40 }, () => rec('x'.repeat(4000).replace(/x/g, String.fromCharCode(97 + fill)))));
      m.hold = true;
      c.send(c.frame(ProduceApi, 7, produceRequest('pooled', 0, big(0)), 1));
      while (m.held === 0) await new Promise((r) => setTimeout(r, 5));
      // Not answered yet: the frame is still the request's. A second one gets other memory.
      c.send(c.frame(ProduceApi, 7, produceRequest('pooled', 0, big(1)), 2));
      while (m.held < 2) await new Promise((r) => setTimeout(r, 5));
      assert.deepEqual({ allocated: adapter.frames.allocated, reused: adapter.frames.reused }, { allocated: 2, reused: 0 });
      m.release();
      m.hold = false;
      await c.next(2000);
      await c.next(2000);
      for (let i = 2; i <= 5; i++) {
        c.send(c.frame(ProduceApi, 7, produceRequest('pooled', 0, big(i)), 1 + i));
        await c.next(2000);
      }
      assert.deepEqual({ allocated: adapter.frames.allocated, reused: adapter.frames.reused }, { allocated: 2, reused: 4 });
      // Every stored batch is intact although the frames it came in were reused.
      const stored = await engine.read('pooled', 0, 0, 1 << 24);
      assert.equal(stored.length, 6);
      stored.forEach((b, i) => {
        const recs = decodeBatch(b);
        assert.equal(recs.length, 40);
        assert.ok(
          recs.every((r) => r.value!.equals(Buffer.alloc(4000, 97 + i))),
          `batch ${i}`,
        );
      });
    } finally {
      await close();
    }
  });

  it('keeps a Produce frame until its request is answered, also when it waits for its topic to be created', async () => {
    // The first request's topic does not exist: its creation waits until the second request (same frame size) has
    // been stored. Were the first frame given back before its append, the second would have overwritten it.
    let secondStored!: () => void;
    const gate = new Promise<void>((r) => (secondStored = r));
    class SlowCreate extends MemoryStreams {
      override async createStream(def: StreamDef): Promise<void> {
        if (def.name === 'created-on-produce') await gate;
        return super.createStream(def);
      }
      override append(stream: string, partition: number, batch: Buffer): AppendResult {
        const r = super.append(stream, partition, batch);
        if (stream === 'exists') secondStored();
        return r;
      }
    }
    const { engine, adapter, c, close } = await rawSetup(new SlowCreate());
    await engine.createStream({ name: 'exists', partitions: 1 });
    try {
      const big = (fill: number) =>
        encodeBatch(Array.from({ length: 40 }, () => ({ key: null, value: Buffer.alloc(4000, fill), headers: [], timestamp: Date.now() })));
      c.send(c.frame(ProduceApi, 7, produceRequest('created-on-produce', 0, big(1)), 1), c.frame(ProduceApi, 7, produceRequest('exists', 0, big(2)), 2));
      await c.next(5000);
      await c.next(5000);
      const [first] = await engine.read('created-on-produce', 0, 0, 1 << 24);
      assert.ok(
        decodeBatch(first).every((r) => r.value!.equals(Buffer.alloc(4000, 1))),
        'the first batch is stored as sent',
      );
      const [second] = await engine.read('exists', 0, 0, 1 << 24);
      assert.ok(decodeBatch(second).every((r) => r.value!.equals(Buffer.alloc(4000, 2))));
      assert.equal(adapter.frames.allocated, 2);
    } finally {
      await close();
    }
  });

  it('takes a request larger than the frame pool serves (gathered as it arrives) and stores it intact', async () => {
    const { engine, c, close } = await rawSetup(new MemoryStreams());
    await engine.createStream({ name: 'large', partitions: 1 });
    try {
      const values = Array.from({ length: 20 }, (_, i) => Buffer.alloc(1 << 20, i + 1));
      const batch = encodeBatch(values.map((v) => ({ key: null, value: v, headers: [], timestamp: Date.now() })));
      const frame = c.frame(ProduceApi, 7, produceRequest('large', 0, batch), 1);
      assert.ok(frame.length > 16 * 1024 * 1024);
      c.send(frame);
      await c.next(10_000);
      const [stored] = await engine.read('large', 0, 0, 1 << 30);
      const recs = decodeBatch(stored);
      assert.equal(recs.length, 20);
      recs.forEach((r, i) => assert.ok(r.value!.equals(values[i]), `record ${i}`));
    } finally {
      await close();
    }
  });

  it('releases the storage memory a Fetch response points into once it is written, or when the connection closes', async () => {
    let pinned = 0;
    let unpinned = 0;
    class PinningStreams extends MemoryStreams {
      override async read(stream: string, partition: number, offset: number, maxBytes: number, lease?: ReadLease): Promise<Buffer[]> {
        const out = await super.read(stream, partition, offset, maxBytes);
        if (out.length > 0 && lease) {
          pinned++;
          lease.hold({ unpin: () => unpinned++ });
        }
        return out;
      }
    }
    const { engine, c, close } = await rawSetup(new PinningStreams());
    await engine.createStream({ name: 'leased', partitions: 1 });
    await engine.produce('leased', 0, encodeBatch([rec('a'), rec('b')])).durable;
    try {
      c.send(c.frame(FetchApi, 4, fetchRequest('leased', 0, 0), 1));
      const body = await c.next(2000);
      assert.equal(body.readInt32BE(0), 1);
      const deadline = Date.now() + 2000;
      while (unpinned < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
      assert.deepEqual({ pinned, unpinned }, { pinned: 1, unpinned: 1 });
      // A long poll that read some data and waits for more holds it until its response is written, here to a client
      // that has gone away meanwhile.
      c.send(c.frame(FetchApi, 4, fetchRequest('leased', 0, 0, 300, 1 << 20), 2));
      while (pinned < 2 && Date.now() < deadline + 2000) await new Promise((r) => setTimeout(r, 5));
      assert.deepEqual({ pinned, unpinned }, { pinned: 2, unpinned: 1 });
      c.close();
      // (it reads again when its wait ends: every read's pin is given back)
      while ((unpinned < pinned || unpinned < 2) && Date.now() < deadline + 4000) await new Promise((r) => setTimeout(r, 5));
      assert.ok(pinned >= 2);
      assert.equal(unpinned, pinned);
    } finally {
      await close();
    }
  });

  it('bounds unanswered requests per connection and still answers all of them in order', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    await engine.createStream({ name: 'slow', partitions: 1 });
    const listener = await startKafkaListener(
      { engine, logger: captureLogger().logger, brokerId: 1 },
      { host: '127.0.0.1', port: 0 },
      { maxInFlightRequests: 2, maxRequestBytes: 4096 },
    );
    const c = await RawClient.connect(listener.address().port);
    try {
      const frames: Buffer[] = [];
      for (let i = 1; i <= 6; i++) frames.push(c.frame(FetchApi, 11, fetchRequest('slow', 0, 0, 30), i));
      frames.push(c.frame(ApiVersionsApi, 0, { clientSoftwareName: null, clientSoftwareVersion: null }, 7));
      c.send(...frames);
      const ids: number[] = [];
      for (let i = 0; i < 7; i++) ids.push((await c.next()).readInt32BE(0));
      assert.deepEqual(ids, [1, 2, 3, 4, 5, 6, 7]);
      // A request over maxRequestBytes closes the connection.
      c.send(c.frame(ProduceApi, 7, produceRequest('slow', 0, encodeBatch([rec('x'.repeat(5000))]))));
      assert.ok(await c.closesWithin(2000));
      assert.equal(engine.offsets('slow', 0).highWatermark, 0);
    } finally {
      c.close();
      await listener.close();
    }
  });

  it('answers requests of a client that half-closes its side, then ends the connection', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    const listener = await startKafkaListener({ engine, logger: captureLogger().logger, brokerId: 1 }, { host: '127.0.0.1', port: 0 });
    const c = await RawClient.connect(listener.address().port);
    try {
      c.socket.end(c.frame(MetadataApi, 4, metadataRequest(['half.closed']), 9));
      assert.equal((await c.next()).readInt32BE(0), 9);
      assert.ok(await c.closesWithin(2000));
    } finally {
      c.close();
      await listener.close();
    }
  });

  it('rejects invalid options at start', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    await assert.rejects(
      startKafkaListener({ engine, logger: captureLogger().logger, brokerId: 1 }, { host: '127.0.0.1', port: 0 }, { defaultPartitions: 0 }),
      /defaultPartitions/,
    );
  });
});

describe('kafka connection fuzz', () => {
  it('survives mutated requests on in-memory connections without crashing', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    await engine.createStream({ name: 'fz', partitions: 2 });
    const log = captureLogger('info');
    const adapter = new KafkaAdapter({ engine, logger: log.logger, brokerId: 1 }, resolveKafkaOptions({}), KAFKA_ROUTES);
    const enc = <Req, Res>(codec: ApiCodec<Req, Res>, v: number, body: Req) => encodeRequest(codec, { apiVersion: v, correlationId: 1, clientId: 'fz' }, body);
    const seeds = [
      enc(ApiVersionsApi, 3, { clientSoftwareName: 'a', clientSoftwareVersion: 'b' }),
      enc(MetadataApi, 9, metadataRequest(['fz', 'fz.new'])),
      enc(ProduceApi, 9, produceRequest('fz', 1, encodeBatch([rec('x'), rec('y')]))),
      enc(ProduceApi, 7, produceRequest('fz', 0, encodeBatch([rec('x')]))),
      enc(ListOffsetsApi, 7, {
        replicaId: -1,
        isolationLevel: 0,
        topics: [{ name: 'fz', partitions: [{ partitionIndex: 0, currentLeaderEpoch: -1, timestamp: -3 }] }],
      }),
    ];
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => void unhandled.push(e);
    process.on('unhandledRejection', onUnhandled);
    let seed = 12345;
    const rnd = () => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed / 4294967296;
    };
    let answered = 0;
    let closed = 0;
    try {
      for (let i = 0; i < 300; i++) {
        const src = seeds[i % seeds.length];
        const frame = Buffer.from(src);
        for (let k = 0; k < 1 + Math.floor(rnd() * 3); k++) frame[Math.floor(rnd() * frame.length)] = Math.floor(rnd() * 256);
        let body = frame;
        if (rnd() < 0.2) body = frame.subarray(0, Math.floor(rnd() * frame.length));
        // A mutated Fetch could ask to wait for hours on a storage timer; the decoder fuzz covers Fetch.
        if (body.length >= 8 && readRequestPrefix(body).apiKey === FetchApi.apiKey) continue;
        const [client, server] = duplexPair();
        const conn = new KafkaConnection(server, adapter, { id: `fz${i}` });
        let got = 0;
        client.on('data', () => got++);
        const size = Buffer.alloc(4);
        size.writeInt32BE(rnd() < 0.05 ? -5 : body.length, 0);
        client.write(Buffer.concat([size, body]));
        await new Promise((r) => setTimeout(r, 2));
        if (got > 0) answered++;
        if (conn.isClosed()) closed++;
        conn.close();
        await conn.closed;
      }
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
    assert.deepEqual(unhandled, []);
    assert.ok(answered > 0 && closed > 0, `answered ${answered}, closed ${closed}`);
    // Malformed input is a client's fault (warn); an error-level line would mean a handler bug.
    assert.deepEqual(log.entries('request failed'), []);
  });
});
