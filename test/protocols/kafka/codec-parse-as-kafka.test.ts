/**
 * The request decoder is exactly as lenient as Kafka's own request parsing, and no stricter: bytes after a body,
 * booleans, tagged-field order, nullable and empty arrays, empty strings. Kafka's rules are those of its generated
 * readers (generator/.../MessageDataGenerator.java: `readByte() != 0`, tagged fields read in a loop without an
 * order check, "non-nullable field was serialized as null") and of RequestContext.parseRequest, which never looks
 * at the bytes a version's fields leave. Each case is a frame written out byte by byte.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  API_CODECS,
  ApiVersionsApi,
  CreateTopicsApi,
  FetchApi,
  JoinGroupApi,
  KafkaProtocolError,
  ListOffsetsApi,
  MetadataApi,
  ProduceApi,
  ZERO_UUID,
  decodeRequest,
  decodeRequestWith,
  encodeRequest,
  type AnyApiCodec,
} from '../../../src/protocols/kafka/codec/index.js';
import { API_SAMPLES } from './samples.js';

const hex = (...parts: string[]): Buffer => Buffer.from(parts.join('').replace(/\s+/g, ''), 'hex');

function expectProtocolError(fn: () => unknown, reason: string): void {
  assert.throws(fn, (err: unknown) => err instanceof KafkaProtocolError && err.reason === reason);
}

/** One request body per hand-written codec (the schema-described ones have theirs in samples.ts). */
const HAND_WRITTEN: Array<{ codec: AnyApiCodec; body: unknown }> = [
  { codec: ApiVersionsApi, body: { clientSoftwareName: 'c', clientSoftwareVersion: '1' } },
  {
    codec: MetadataApi,
    body: {
      topics: [{ topicId: ZERO_UUID, name: 't' }],
      allowAutoTopicCreation: false,
      includeClusterAuthorizedOperations: true,
      includeTopicAuthorizedOperations: true,
    },
  },
  {
    codec: ProduceApi,
    body: { transactionalId: null, acks: 1, timeoutMs: 100, topics: [{ name: 't', partitions: [{ index: 0, records: null }] }] },
  },
  {
    codec: FetchApi,
    body: {
      replicaId: -1,
      maxWaitMs: 1,
      minBytes: 1,
      maxBytes: 1,
      isolationLevel: 0,
      sessionId: 0,
      sessionEpoch: -1,
      topics: [
        { topic: 't', partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 0, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 1 }] },
      ],
      forgottenTopics: [],
      rackId: '',
      clusterId: null,
    },
  },
  {
    codec: ListOffsetsApi,
    body: { replicaId: -1, isolationLevel: 0, topics: [{ name: 't', partitions: [{ partitionIndex: 0, currentLeaderEpoch: -1, timestamp: -1 }] }] },
  },
];

describe('kafka request parsing: as lenient as Kafka, no stricter', () => {
  it('decodes the all-topics Metadata v12 request of librdkafka 2.15 (3 bytes after the body) as Kafka does', () => {
    // Captured from @confluentinc/kafka-javascript 1.10.1 (librdkafka 2.15.1): the compact topics array length is
    // written into a 4-byte placeholder (varint 0 = null, then 00 00 00), and the request's own fields follow.
    const frame = hex(
      '0003 000c 00000003 0005 70726f6265 00', // header v2: Metadata v12, correlation 3, client "probe", no tags
      '00 000000', // topics: null, in a 4-byte placeholder
      '01', // allow_auto_topic_creation (librdkafka's)
      '00', // include_topic_authorized_operations
      '00', // tags
    );
    const { body, trailingBytes } = decodeRequest(frame);
    // Kafka's MetadataRequestData reads null topics, then the placeholder's zeros as the two booleans and the
    // tag count; the request's own three bytes are left unread.
    assert.deepEqual(body, {
      topics: null,
      allowAutoTopicCreation: false,
      includeClusterAuthorizedOperations: false,
      includeTopicAuthorizedOperations: false,
    });
    assert.equal(trailingBytes, 3);
    // Its brokers-only Metadata (an empty topics array in the same placeholder) is 4 bytes in all: Kafka reads an
    // empty array and the placeholder's zeros as the rest, and nothing is left over.
    const brokersOnly = decodeRequest(hex('0003 000c 00000002 0005 70726f6265 00', '01 000000'));
    assert.deepEqual(brokersOnly.body, {
      topics: [],
      allowAutoTopicCreation: false,
      includeClusterAuthorizedOperations: false,
      includeTopicAuthorizedOperations: false,
    });
    assert.equal(brokersOnly.trailingBytes, 0);
  });

  it('ignores bytes after the body on every API and version, and counts them', () => {
    let checked = 0;
    const samples = [...HAND_WRITTEN, ...API_SAMPLES.map((s) => ({ codec: s.codec, body: s.request }))];
    assert.deepEqual(new Set(samples.map((s) => s.codec)), new Set(API_CODECS), 'a sample for every API');
    for (const s of samples) {
      for (let v = s.codec.minVersion; v <= s.codec.maxVersion; v++) {
        const frame = encodeRequest(s.codec, { apiVersion: v, correlationId: 9, clientId: 'x' }, s.body);
        const plain = decodeRequestWith(s.codec, frame);
        assert.equal(plain.trailingBytes, 0);
        for (const extra of [hex('000000'), hex('ff'), hex('0102030405060708')]) {
          const got = decodeRequestWith(s.codec, Buffer.concat([frame, extra]));
          assert.deepEqual(got.body, plain.body, `${s.codec.name} v${v}`);
          assert.deepEqual(got.header, plain.header);
          assert.equal(got.trailingBytes, extra.length);
          checked++;
        }
      }
    }
    assert.ok(checked > 300, `${checked} frames`);
  });

  it('takes any non-zero byte as true in a boolean, as readByte() != 0 does', () => {
    const frame = (b: string) =>
      hex(
        '0013 0001 00000007 ffff', // CreateTopics v1, correlation 7, null client id
        '00000001 0001 74 00000001 0001 00000000 00000000', // topic "t", 1 partition, rf 1, no assignments, no configs
        '00007530', // timeout 30000
        b, // validate_only
      );
    assert.equal(decodeRequestWith(CreateTopicsApi, frame('00')).body.validateOnly, false);
    assert.equal(decodeRequestWith(CreateTopicsApi, frame('01')).body.validateOnly, true);
    assert.equal(decodeRequestWith(CreateTopicsApi, frame('02')).body.validateOnly, true);
    assert.equal(decodeRequestWith(CreateTopicsApi, frame('ff')).body.validateOnly, true);
  });

  it('reads tagged fields in any order, a repeated known tag last one winning, unknown tags skipped', () => {
    const fetchV12 = (tags: string) =>
      hex(
        '0001 000c 00000001 0001 63 00', // Fetch v12, correlation 1, client "c", no header tags
        'ffffffff 000001f4 00000001 00100000 00', // replica -1, max wait 500, min bytes 1, max bytes 1 MiB, read uncommitted
        '00000000 ffffffff', // no session, epoch -1
        '01', // no topics
        '01', // no forgotten topics
        '01', // rack id ""
        tags,
      );
    // Tag 9 (unknown) before tag 0 (cluster id): out of order for KIP-482's writers, read by Kafka all the same.
    const outOfOrder = decodeRequestWith(FetchApi, fetchV12('02 09 02 abcd 00 03 036331'));
    assert.equal(outOfOrder.body.clusterId, 'c1');
    assert.equal(outOfOrder.trailingBytes, 0);
    // The cluster id twice: the last one is the field's value.
    assert.equal(decodeRequestWith(FetchApi, fetchV12('02 00 03 036331 00 03 036332')).body.clusterId, 'c2');
    // A known tag whose declared size is longer than its field: the field is read, the rest of the tag skipped.
    assert.equal(decodeRequestWith(FetchApi, fetchV12('01 00 05 036331 ffff')).body.clusterId, 'c1');
    // A tag whose size runs past the frame is still a truncation.
    expectProtocolError(() => decodeRequestWith(FetchApi, fetchV12('01 09 05 ab')), 'TRUNCATED');
    // Unknown tags in the request header v2 are skipped too.
    const header = hex('0012 0003 00000004 0001 63', '02 05 01 aa 01 00', '02 61 02 31 00');
    assert.deepEqual(decodeRequest(header).body, { clientSoftwareName: 'a', clientSoftwareVersion: '1' });
  });

  it('tells null from empty arrays by the versions that make them nullable', () => {
    const metadata = (version: number, topics: string) => hex(`0003 ${version.toString(16).padStart(4, '0')} 00000001 ffff`, topics, version >= 4 ? '01' : '');
    // v0: not nullable, and an empty list means every topic.
    assert.equal(decodeRequestWith(MetadataApi, metadata(0, '00000000')).body.topics, null);
    expectProtocolError(() => decodeRequestWith(MetadataApi, metadata(0, 'ffffffff')), 'NEGATIVE_LENGTH');
    // v1+: null is every topic, empty is none (the brokers only).
    assert.equal(decodeRequestWith(MetadataApi, metadata(1, 'ffffffff')).body.topics, null);
    assert.deepEqual(decodeRequestWith(MetadataApi, metadata(1, '00000000')).body.topics, []);
    assert.deepEqual(decodeRequestWith(MetadataApi, metadata(4, '00000000')).body.topics, []);
    // A non-nullable array serialized as null is refused, as Kafka refuses it ("was serialized as null").
    const createTopicsNull = hex('0013 0000 00000001 ffff', 'ffffffff', '00007530');
    expectProtocolError(() => decodeRequestWith(CreateTopicsApi, createTopicsNull), 'NEGATIVE_LENGTH');
  });

  it('reads zero-length strings, classic and compact, and refuses a null where a string is not nullable', () => {
    const joinV0 = hex(
      '000b 0000 00000001 0000', // JoinGroup v0, client id "" (not null)
      '0001 67 00007530', // group "g", session timeout 30000
      '0000', // member id ""
      '0008 636f6e73756d6572', // protocol type "consumer"
      '00000001 0005 72616e6765 00000000', // one protocol "range", empty metadata
    );
    const v0 = decodeRequestWith(JoinGroupApi, joinV0);
    assert.equal(v0.header.clientId, '');
    assert.equal(v0.body.memberId, '');
    assert.deepEqual(v0.body.protocols, [{ name: 'range', metadata: Buffer.alloc(0) }]);
    const joinV6 = (memberId: string) =>
      hex(
        '000b 0006 00000001 0000 00', // JoinGroup v6, client id "", no header tags
        '02 67 00007530 0000ea60', // group "g", session 30000, rebalance 60000
        memberId,
        '00', // group instance id null
        '09 636f6e73756d6572', // protocol type "consumer"
        '02 06 72616e6765 01 00', // one protocol "range", empty metadata, no tags
        '00', // tags
      );
    assert.equal(decodeRequestWith(JoinGroupApi, joinV6('01')).body.memberId, '');
    expectProtocolError(() => decodeRequestWith(JoinGroupApi, joinV6('00')), 'NEGATIVE_LENGTH');
    // ApiVersions v3 with empty software name and version: decoded (the handler answers it).
    assert.deepEqual(decodeRequest(hex('0012 0003 00000001 ffff 00', '01 01 00')).body, { clientSoftwareName: '', clientSoftwareVersion: '' });
  });
});
