/**
 * Codec of the APIs described with the message schema (groups, admin, producer ids, SASL, cluster): golden frames
 * written out field by field from the protocol's message definitions (classic and flexible versions), and round
 * trips of a full sample at every supported version.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  ConsumerGroupHeartbeatApi,
  DescribeClusterApi,
  FindCoordinatorApi,
  HeartbeatApi,
  InitProducerIdApi,
  JoinGroupApi,
  KafkaProtocolError,
  OffsetCommitApi,
  OffsetFetchApi,
  SaslAuthenticateApi,
  SaslHandshakeApi,
  SyncGroupApi,
  decodeRequest,
  decodeRequestWith,
  decodeResponse,
  encodeRequest,
  encodeResponse,
  type AnyApiCodec,
} from '../../../src/protocols/kafka/codec/index.js';
import { API_SAMPLES } from './samples.js';

const hex = (...parts: string[]): Buffer => Buffer.from(parts.join('').replace(/\s+/g, ''), 'hex');

interface Golden {
  name: string;
  codec: AnyApiCodec;
  version: number;
  frame: Buffer;
  body: unknown;
}

const requestGoldens: Golden[] = [
  {
    name: 'FindCoordinator v0',
    codec: FindCoordinatorApi,
    version: 0,
    frame: hex('000a 0000 00000005 0003 726177', '0001 67'),
    body: { key: 'g', keyType: 0, coordinatorKeys: [] },
  },
  {
    name: 'FindCoordinator v4 (flexible, batched keys)',
    codec: FindCoordinatorApi,
    version: 4,
    frame: hex('000a 0004 00000001 0003 616263 00', '00', '03 0267 036731', '00'),
    body: { key: '', keyType: 0, coordinatorKeys: ['g', 'g1'] },
  },
  {
    name: 'JoinGroup v5 (static membership field, classic)',
    codec: JoinGroupApi,
    version: 5,
    frame: hex(
      '000b 0005 00000002 0003 6b6a73',
      '0001 67', // group "g"
      '00007530 0000ea60', // session 30000, rebalance 60000
      '0000', // member id ""
      'ffff', // group instance id null
      '0008 636f6e73756d6572', // "consumer"
      '00000001 0005 72616e6765 00000002 0102', // one protocol "range", metadata 01 02
    ),
    body: {
      groupId: 'g',
      sessionTimeoutMs: 30000,
      rebalanceTimeoutMs: 60000,
      memberId: '',
      groupInstanceId: null,
      protocolType: 'consumer',
      protocols: [{ name: 'range', metadata: hex('0102') }],
      reason: null,
    },
  },
  {
    name: 'Heartbeat v4 (flexible)',
    codec: HeartbeatApi,
    version: 4,
    frame: hex('000c 0004 00000003 0003 616263 00', '02 67', '00000007', '03 6d31', '00', '00'),
    body: { groupId: 'g', generationId: 7, memberId: 'm1', groupInstanceId: null },
  },
  {
    name: 'OffsetCommit v2 (retention time)',
    codec: OffsetCommitApi,
    version: 2,
    frame: hex(
      '0008 0002 00000004 ffff',
      '0001 67 00000003 0002 6d31', // group g, generation 3, member m1
      'ffffffffffffffff', // retention -1
      '00000001 0001 74 00000001', // topic "t", one partition
      '00000000 000000000000002a ffff', // p0, offset 42, metadata null
    ),
    body: {
      groupId: 'g',
      generationId: 3,
      memberId: 'm1',
      groupInstanceId: null,
      retentionTimeMs: -1,
      topics: [{ name: 't', partitions: [{ partitionIndex: 0, committedOffset: 42, committedLeaderEpoch: -1, commitTimestamp: -1, committedMetadata: null }] }],
    },
  },
  {
    name: 'OffsetFetch v8 (flexible, batched groups, all topics)',
    codec: OffsetFetchApi,
    version: 8,
    frame: hex('0009 0008 00000005 0003 616263 00', '02 0267 00 00', '01', '00'),
    body: { groupId: '', topics: null, groups: [{ groupId: 'g', topics: null }], requireStable: true },
  },
  {
    name: 'OffsetFetch v9 (member id and epoch, KIP-848)',
    codec: OffsetFetchApi,
    version: 9,
    frame: hex('0009 0009 00000005 0003 616263 00', '02 0267 026d 00000003 00 00', '01', '00'),
    body: { groupId: '', topics: null, groups: [{ groupId: 'g', memberId: 'm', memberEpoch: 3, topics: null }], requireStable: true },
  },
  {
    name: 'ConsumerGroupHeartbeat v1 (a librdkafka join: names, empty regex, no owned partitions)',
    codec: ConsumerGroupHeartbeatApi,
    version: 1,
    frame: hex(
      '0044 0001 00000007 0003 616263 00',
      '02 67', // group "g"
      '02 6d', // member "m"
      '00000000', // epoch 0: join
      '00 00', // instance id, rack id: null
      '000493e0', // rebalance timeout 300000
      '02 02 74', // topic names ["t"]
      '01', // regex ""
      '00', // server assignor null
      '01', // owned partitions []
      '00',
    ),
    body: {
      groupId: 'g',
      memberId: 'm',
      memberEpoch: 0,
      instanceId: null,
      rackId: null,
      rebalanceTimeoutMs: 300000,
      subscribedTopicNames: ['t'],
      subscribedTopicRegex: '',
      serverAssignor: null,
      topicPartitions: [],
    },
  },
  {
    name: 'InitProducerId v4 (flexible, KIP-360)',
    codec: InitProducerIdApi,
    version: 4,
    frame: hex('0016 0004 00000006 0003 616263 00', '00', '7fffffff', 'ffffffffffffffff', 'ffff', '00'),
    body: { transactionalId: null, transactionTimeoutMs: 0x7fffffff, producerId: -1, producerEpoch: -1 },
  },
  {
    name: 'SaslAuthenticate v1',
    codec: SaslAuthenticateApi,
    version: 1,
    frame: hex('0024 0001 00000007 ffff', '00000005 0075 007031'),
    body: { authBytes: hex('0075007031') },
  },
  {
    name: 'SaslHandshake v1 (KIP-152: tokens follow in SaslAuthenticate)',
    codec: SaslHandshakeApi,
    version: 1,
    frame: hex('0011 0001 00000008 0003 616263', '000d 534352414d2d5348412d353132'),
    body: { mechanism: 'SCRAM-SHA-512' },
  },
  {
    name: 'SaslAuthenticate v2 (flexible)',
    codec: SaslAuthenticateApi,
    version: 2,
    frame: hex('0024 0002 00000009 0003 616263 00', '04 6e2c2c', '00'),
    body: { authBytes: Buffer.from('n,,') },
  },
];

const responseGoldens: Golden[] = [
  {
    name: 'SaslHandshake v0 (error 33 with the offered mechanisms)',
    codec: SaslHandshakeApi,
    version: 0,
    frame: hex('0000000a', '0021', '00000002 0005 504c41494e 000d 534352414d2d5348412d323536'),
    body: { errorCode: 33, mechanisms: ['PLAIN', 'SCRAM-SHA-256'] },
  },
  {
    name: 'SaslAuthenticate v2 (flexible, server-final message, session lifetime 0)',
    codec: SaslAuthenticateApi,
    version: 2,
    frame: hex('0000000b 00', '0000', '00', '03 763d', '0000000000000000', '00'),
    body: { errorCode: 0, errorMessage: null, authBytes: Buffer.from('v='), sessionLifetimeMs: 0 },
  },
  {
    name: 'FindCoordinator v1',
    codec: FindCoordinatorApi,
    version: 1,
    frame: hex('00000001', '00000000 0000 ffff 00000000 0009 3132372e302e302e31 00002384'),
    body: { throttleTimeMs: 0, errorCode: 0, errorMessage: null, nodeId: 0, host: '127.0.0.1', port: 9092, coordinators: [] },
  },
  {
    name: 'JoinGroup v6 (flexible)',
    codec: JoinGroupApi,
    version: 6,
    frame: hex(
      '00000001 00', // header v1
      '00000000 0000 00000001', // throttle, no error, generation 1
      '06 72616e6765', // protocol name "range"
      '03 6d31 03 6d31', // leader m1, member id m1
      '02 03 6d31 00 03 0102 00', // one member: m1, instance null, metadata 01 02, tags
      '00',
    ),
    body: {
      throttleTimeMs: 0,
      errorCode: 0,
      generationId: 1,
      protocolType: null,
      protocolName: 'range',
      leader: 'm1',
      skipAssignment: false,
      memberId: 'm1',
      members: [{ memberId: 'm1', groupInstanceId: null, metadata: hex('0102') }],
    },
  },
  {
    name: 'JoinGroup v4 MEMBER_ID_REQUIRED',
    codec: JoinGroupApi,
    version: 4,
    frame: hex('00000002', '00000000 004f ffffffff 0000 0000 0003 6d2d31 00000000'),
    body: {
      throttleTimeMs: 0,
      errorCode: 79,
      generationId: -1,
      protocolType: null,
      protocolName: '',
      leader: '',
      skipAssignment: false,
      memberId: 'm-1',
      members: [],
    },
  },
  {
    name: 'SyncGroup v5 (flexible, protocol type and name)',
    codec: SyncGroupApi,
    version: 5,
    frame: hex('00000003 00', '00000000 0000', '09 636f6e73756d6572 06 72616e6765', '03 0a0b', '00'),
    body: { throttleTimeMs: 0, errorCode: 0, protocolType: 'consumer', protocolName: 'range', assignment: hex('0a0b') },
  },
  {
    name: 'DescribeCluster v0 (flexible from v0)',
    codec: DescribeClusterApi,
    version: 0,
    frame: hex(
      '00000004 00',
      '00000000 0000 00', // throttle, error, message null
      '07 666c6f776d71 00000000', // cluster "flowmq", controller 0
      '02 00000000 0a 3132372e302e302e31 00002384 00 00', // one broker: 0 127.0.0.1:9092 rack null
      '80000000 00',
    ),
    body: {
      throttleTimeMs: 0,
      errorCode: 0,
      errorMessage: null,
      endpointType: 1,
      clusterId: 'flowmq',
      controllerId: 0,
      brokers: [{ brokerId: 0, host: '127.0.0.1', port: 9092, rack: null }],
      clusterAuthorizedOperations: -2147483648,
    },
  },
];

function responseFrame(codec: AnyApiCodec, version: number, correlationId: number, body: unknown): Buffer {
  const whole = Buffer.concat(encodeResponse(codec, version, correlationId, body));
  assert.equal(whole.readInt32BE(0), whole.length - 4);
  return whole.subarray(4);
}

describe('kafka schema-described APIs: golden frames', () => {
  for (const g of requestGoldens) {
    it(`decodes and re-encodes request ${g.name}`, () => {
      const { header, body, codec } = decodeRequest(g.frame);
      assert.equal(codec, g.codec);
      assert.equal(header.apiVersion, g.version);
      assert.deepEqual(body, g.body);
      assert.deepEqual(encodeRequest(g.codec, { apiVersion: g.version, correlationId: header.correlationId, clientId: header.clientId }, body), g.frame);
    });
  }
  for (const g of responseGoldens) {
    it(`encodes and decodes response ${g.name}`, () => {
      const frame = responseFrame(g.codec, g.version, g.frame.readInt32BE(0), g.body);
      assert.deepEqual(frame, g.frame);
      assert.deepEqual(decodeResponse(g.codec, g.version, g.frame).body, g.body);
    });
  }
});

describe('kafka schema-described APIs: round trips', () => {
  it('decodes what it encodes, requests and responses, at every supported version', () => {
    let checked = 0;
    for (const s of API_SAMPLES) {
      for (let v = s.codec.minVersion; v <= s.codec.maxVersion; v++) {
        const frame = encodeRequest(s.codec, { apiVersion: v, correlationId: v, clientId: 'rt' }, s.request);
        const { body } = decodeRequestWith(s.codec, frame);
        assert.deepEqual(encodeRequest(s.codec, { apiVersion: v, correlationId: v, clientId: 'rt' }, body), frame, `${s.codec.name} v${v} request`);
        const res = responseFrame(s.codec, v, 9, s.response);
        const decoded = decodeResponse(s.codec, v, res);
        assert.equal(decoded.correlationId, 9);
        assert.deepEqual(responseFrame(s.codec, v, 9, decoded.body), res, `${s.codec.name} v${v} response`);
        checked++;
      }
    }
    assert.ok(checked > 80, `${checked} versions checked`);
  });

  it('carries every field of the samples in at least one version, requests and responses', () => {
    for (const s of API_SAMPLES) {
      const kept = new Set<string>();
      const keptRes = new Set<string>();
      for (let v = s.codec.minVersion; v <= s.codec.maxVersion; v++) {
        const { body } = decodeRequestWith(s.codec, encodeRequest(s.codec, { apiVersion: v, correlationId: 1, clientId: null }, s.request));
        for (const [k, value] of Object.entries(body as Record<string, unknown>)) {
          if (JSON.stringify(value) === JSON.stringify((s.request as Record<string, unknown>)[k])) kept.add(k);
        }
        const res = decodeResponse(s.codec, v, responseFrame(s.codec, v, 1, s.response)).body as Record<string, unknown>;
        for (const [k, value] of Object.entries(res)) {
          if (JSON.stringify(value) === JSON.stringify((s.response as Record<string, unknown>)[k])) keptRes.add(k);
        }
      }
      assert.deepEqual([...kept].sort(), Object.keys(s.request as object).sort(), `${s.codec.name} request fields`);
      assert.deepEqual([...keptRes].sort(), Object.keys(s.response as object).sort(), `${s.codec.name} response fields`);
    }
  });

  it('reads flexible frames whose tagged fields are out of order (as Kafka does), rejects truncations', () => {
    const ok = hex('000c 0004 00000003 0003 616263 00', '02 67', '00000007', '03 6d31', '00', '00');
    assert.doesNotThrow(() => decodeRequest(ok));
    const unorderedTags = hex('000c 0004 00000003 0003 616263 00', '02 67', '00000007', '03 6d31', '00', '02 05 00 01 00');
    assert.deepEqual(decodeRequest(unorderedTags).body, decodeRequest(ok).body);
    for (let n = 0; n < ok.length; n++) assert.throws(() => decodeRequest(ok.subarray(0, n)), KafkaProtocolError);
  });
});
