/**
 * What the newest versions' new fields mean, at the protocol level with a raw client: ListOffsets' special
 * timestamps of v8, v9 and v11, OffsetCommit and OffsetFetch v9/v10, DescribeGroups v6, ListGroups v5, DescribeCluster
 * v2 and FindCoordinator v6. (Topic ids and fetch sessions have their own tests: topic-ids, fetch-sessions.)
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { encodeBatch } from '../../../src/core/index.js';
import {
  DescribeClusterApi,
  DescribeGroupsApi,
  FindCoordinatorApi,
  KafkaErrorCode as E,
  ListGroupsApi,
  ListOffsetsApi,
  OffsetCommitApi,
  OffsetFetchApi,
} from '../../../src/protocols/kafka/codec/index.js';
import { RawClient, startMemoryKafka, type MemoryKafka } from './helpers.js';

describe("kafka: the newest versions' fields, served", () => {
  let k: MemoryKafka;
  let c: RawClient;
  let topicId: Buffer;

  before(async () => {
    k = await startMemoryKafka();
    const def = await k.engine.createStream({ name: 'lv.t', partitions: 1 });
    topicId = Buffer.from(def.id!, 'hex');
    for (let i = 0; i < 4; i++) k.engine.produce('lv.t', 0, encodeBatch([{ key: null, value: Buffer.from(`r${i}`), headers: [], timestamp: 1000 + i }]));
    await k.engine.deleteRecords('lv.t', 0, 1);
    c = await RawClient.connect(k.port);
  });
  after(async () => {
    c?.close();
    await k.listener.close();
  });

  it('ListOffsets: earliest local (-4, v8+) is the log start offset; latest tiered (-5, v9+) and earliest pending upload (-6, v11+) are -1', async () => {
    const lo = async (v: number, timestamp: number) => {
      const r = await c.call(ListOffsetsApi, v, {
        replicaId: -1,
        isolationLevel: 0,
        topics: [{ name: 'lv.t', partitions: [{ partitionIndex: 0, currentLeaderEpoch: -1, timestamp }] }],
        timeoutMs: 1000,
      });
      const p = r.topics[0]!.partitions[0]!;
      return [p.errorCode, p.offset, p.timestamp, p.leaderEpoch];
    };
    assert.deepEqual(await lo(11, -2), [E.NONE, 1, -1, 0]);
    assert.deepEqual(await lo(11, -1), [E.NONE, 4, -1, 0]);
    assert.deepEqual(await lo(8, -4), [E.NONE, 1, -1, 0]);
    assert.deepEqual(await lo(9, -5), [E.NONE, -1, -1, -1]);
    assert.deepEqual(await lo(11, -6), [E.NONE, -1, -1, -1]);
    // A special timestamp from a later version than the request's is no query that version has.
    assert.equal((await lo(7, -4))[0], E.INVALID_REQUEST);
    assert.equal((await lo(10, -6))[0], E.INVALID_REQUEST);
    assert.deepEqual(await lo(10, 1002), [E.NONE, 2, 1002, 0]);
  });

  it('OffsetCommit v10 and OffsetFetch v10 by topic id; OffsetFetch v9 reads a classic group whatever member it names', async () => {
    const oc = await c.call(OffsetCommitApi, 10, {
      groupId: 'lv.g',
      generationId: -1,
      memberId: '',
      groupInstanceId: null,
      retentionTimeMs: -1,
      topics: [
        { name: '', topicId, partitions: [{ partitionIndex: 0, committedOffset: 3, committedLeaderEpoch: -1, commitTimestamp: -1, committedMetadata: 'm' }] },
      ],
    });
    assert.deepEqual(
      oc.topics.map((t) => [t.topicId?.toString('hex'), t.partitions[0]!.errorCode]),
      [[topicId.toString('hex'), E.NONE]],
    );
    const of9 = await c.call(OffsetFetchApi, 9, {
      groupId: '',
      topics: null,
      groups: [{ groupId: 'lv.g', memberId: 'someone', memberEpoch: 7, topics: [{ name: 'lv.t', partitionIndexes: [0] }] }],
      requireStable: false,
    });
    assert.deepEqual(
      of9.groups.map((g) => [g.errorCode, g.topics[0]!.name, g.topics[0]!.partitions[0]!.committedOffset]),
      [[E.NONE, 'lv.t', 3]],
    );
    // Every topic of the group (null topics), by id in v10.
    const of10 = await c.call(OffsetFetchApi, 10, {
      groupId: '',
      topics: null,
      groups: [{ groupId: 'lv.g', memberId: null, memberEpoch: -1, topics: null }],
      requireStable: false,
    });
    assert.deepEqual(
      of10.groups[0]!.topics.map((t) => [t.name, t.topicId?.toString('hex'), t.partitions[0]!.committedOffset]),
      [['', topicId.toString('hex'), 3]],
    );
  });

  it('DescribeGroups v6 answers GROUP_ID_NOT_FOUND for an unknown group (v5: Dead, no error); ListGroups v5 filters by type', async () => {
    const d6 = await c.call(DescribeGroupsApi, 6, { groups: ['lv.none', 'lv.g'], includeAuthorizedOperations: false });
    assert.deepEqual(
      d6.groups.map((g) => [g.groupId, g.errorCode, g.errorMessage, g.groupState]),
      [
        ['lv.none', E.GROUP_ID_NOT_FOUND, 'Group lv.none not found.', 'Dead'],
        ['lv.g', E.NONE, null, 'Empty'],
      ],
    );
    const d5 = await c.call(DescribeGroupsApi, 5, { groups: ['lv.none'], includeAuthorizedOperations: false });
    assert.deepEqual(
      d5.groups.map((g) => [g.errorCode, g.groupState]),
      [[E.NONE, 'Dead']],
    );

    const all = await c.call(ListGroupsApi, 5, { statesFilter: [], typesFilter: [] });
    assert.deepEqual(
      all.groups.filter((g) => g.groupId === 'lv.g').map((g) => g.groupType),
      ['classic'],
    );
    const classic = await c.call(ListGroupsApi, 5, { statesFilter: [], typesFilter: ['Classic'] });
    assert.ok(classic.groups.some((g) => g.groupId === 'lv.g'));
    const consumer = await c.call(ListGroupsApi, 5, { statesFilter: [], typesFilter: ['consumer', 'share'] });
    assert.deepEqual([consumer.errorCode, consumer.groups], [E.NONE, []]);
  });

  it('DescribeCluster v2 names no fenced broker; FindCoordinator v6 refuses share-group keys (no share groups)', async () => {
    const dc = await c.call(DescribeClusterApi, 2, { includeClusterAuthorizedOperations: false, endpointType: 1, includeFencedBrokers: true });
    assert.deepEqual(
      dc.brokers.map((b) => [b.brokerId, b.isFenced]),
      [[0, false]],
    );
    const share = await c.call(FindCoordinatorApi, 6, { key: '', keyType: 2, coordinatorKeys: ['lv.g:lv.t:0'] });
    assert.deepEqual(
      share.coordinators.map((x) => [x.key, x.errorCode, x.nodeId]),
      [['lv.g:lv.t:0', E.INVALID_REQUEST, -1]],
    );
    const group = await c.call(FindCoordinatorApi, 6, { key: '', keyType: 0, coordinatorKeys: ['lv.g'] });
    assert.deepEqual(
      group.coordinators.map((x) => [x.errorCode, x.nodeId, x.port]),
      [[E.NONE, 0, k.port]],
    );
  });
});
