/**
 * The group coordinator over the wire with a raw protocol client, at flexible and classic versions: the member
 * id handshake (KIP-394), rebalances, generation fencing, session expiry, offsets and the admin group APIs, each
 * with the error code the protocol prescribes.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Engine } from '../../../src/core/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { startKafkaListener } from '../../../src/protocols/kafka/index.js';
import {
  DeleteGroupsApi,
  DescribeGroupsApi,
  FindCoordinatorApi,
  HeartbeatApi,
  JoinGroupApi,
  KafkaErrorCode as E,
  LeaveGroupApi,
  ListGroupsApi,
  OffsetCommitApi,
  OffsetFetchApi,
  SyncGroupApi,
  type JoinGroupRequest,
  type JoinGroupResponse,
  type OffsetCommitRequest,
} from '../../../src/protocols/kafka/codec/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger } from './helpers.js';

const join = (groupId: string, memberId: string, extra: Partial<JoinGroupRequest> = {}): JoinGroupRequest => ({
  groupId,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 2000,
  memberId,
  groupInstanceId: null,
  protocolType: 'consumer',
  protocols: [{ name: 'range', metadata: Buffer.from('m') }],
  reason: null,
  ...extra,
});

const commit = (groupId: string, generationId: number, memberId: string, offset: number): OffsetCommitRequest => ({
  groupId,
  generationId,
  memberId,
  groupInstanceId: null,
  retentionTimeMs: -1,
  topics: [
    { name: 'gt', partitions: [{ partitionIndex: 0, committedOffset: offset, committedLeaderEpoch: -1, commitTimestamp: -1, committedMetadata: 'md' }] },
  ],
});

/** JoinGroup v4+ handshake: MEMBER_ID_REQUIRED, then the join with the id handed out. */
async function joinNew(c: RawClient, version: number, groupId: string, extra: Partial<JoinGroupRequest> = {}): Promise<JoinGroupResponse> {
  const first = await c.call(JoinGroupApi, version, join(groupId, '', extra));
  assert.equal(first.errorCode, E.MEMBER_ID_REQUIRED);
  assert.match(first.memberId, /^raw-/);
  return c.call(JoinGroupApi, version, join(groupId, first.memberId, extra));
}

describe('kafka group coordinator over the wire', () => {
  let listener: ProtocolListener;
  let port: number;
  const clients: RawClient[] = [];
  const connect = async (): Promise<RawClient> => {
    const c = await RawClient.connect(port);
    clients.push(c);
    return c;
  };

  before(async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    await engine.createStream({ name: 'gt', partitions: 2 });
    listener = await startKafkaListener(
      { engine, logger: captureLogger().logger, brokerId: 3 },
      { host: '127.0.0.1', port: 0 },
      { groupInitialRebalanceDelayMs: 0, groupMinSessionTimeoutMs: 100 },
    );
    port = listener.address().port;
  });
  after(async () => {
    for (const c of clients) c.close();
    await listener.close();
  });

  it('names this broker as the coordinator, for single and batched keys', async () => {
    const c = await connect();
    const v0 = await c.call(FindCoordinatorApi, 0, { key: 'g', keyType: 0, coordinatorKeys: [] });
    assert.deepEqual([v0.errorCode, v0.nodeId, v0.host, v0.port], [0, 3, '127.0.0.1', port]);
    const v4 = await c.call(FindCoordinatorApi, 4, { key: '', keyType: 0, coordinatorKeys: ['a', 'b'] });
    assert.deepEqual(
      v4.coordinators.map((x) => [x.key, x.nodeId, x.errorCode]),
      [
        ['a', 3, 0],
        ['b', 3, 0],
      ],
    );
    const bad = await c.call(FindCoordinatorApi, 3, { key: 'g', keyType: 7, coordinatorKeys: [] });
    assert.equal(bad.errorCode, E.INVALID_REQUEST);
  });

  it('runs a two-member rebalance with fencing and offsets (flexible versions)', async () => {
    const a = await connect();
    const b = await connect();
    const j1 = await joinNew(a, 6, 'g1');
    assert.deepEqual([j1.errorCode, j1.generationId, j1.leader, j1.protocolName], [0, 1, j1.memberId, 'range']);
    assert.deepEqual(
      j1.members.map((m) => m.memberId),
      [j1.memberId],
    );
    const s1 = await a.call(SyncGroupApi, 5, {
      groupId: 'g1',
      generationId: 1,
      memberId: j1.memberId,
      groupInstanceId: null,
      protocolType: 'consumer',
      protocolName: 'range',
      assignments: [{ memberId: j1.memberId, assignment: Buffer.from('all') }],
    });
    assert.deepEqual([s1.errorCode, s1.assignment.toString(), s1.protocolName], [0, 'all', 'range']);
    const hb = (c: RawClient, generationId: number, memberId: string) =>
      c.call(HeartbeatApi, 4, { groupId: 'g1', generationId, memberId, groupInstanceId: null }).then((r) => r.errorCode);
    assert.equal(await hb(a, 1, j1.memberId), E.NONE);
    assert.equal(await hb(a, 0, j1.memberId), E.ILLEGAL_GENERATION);
    assert.equal(await hb(a, 1, 'nobody'), E.UNKNOWN_MEMBER_ID);

    // OffsetCommit v8 from the current generation is stored; OffsetFetch v8 reads it back.
    const c1 = await a.call(OffsetCommitApi, 8, commit('g1', 1, j1.memberId, 5));
    assert.equal(c1.topics[0].partitions[0].errorCode, E.NONE);

    // b joins: the group rebalances; a learns it from its heartbeat and rejoins.
    const bFirst = await b.call(JoinGroupApi, 7, join('g1', ''));
    assert.equal(bFirst.errorCode, E.MEMBER_ID_REQUIRED);
    const bJoin = b.call(JoinGroupApi, 7, join('g1', bFirst.memberId));
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(await hb(a, 1, j1.memberId), E.REBALANCE_IN_PROGRESS);
    // A member of the generation being replaced may still commit while the group prepares the rebalance.
    const c2 = await a.call(OffsetCommitApi, 8, commit('g1', 1, j1.memberId, 6));
    assert.equal(c2.topics[0].partitions[0].errorCode, E.NONE);
    const [aJoin, bJoined] = await Promise.all([a.call(JoinGroupApi, 6, join('g1', j1.memberId)), bJoin]);
    assert.deepEqual([aJoin.generationId, bJoined.generationId], [2, 2]);
    assert.equal(aJoin.leader, j1.memberId, 'the leader stays');
    assert.equal(aJoin.members.length, 2);
    assert.deepEqual(bJoined.members, [], 'only the leader gets the member list');
    assert.equal(bJoined.protocolType, 'consumer', 'v7 names the protocol type');

    // Before the leader syncs: commits are refused with REBALANCE_IN_PROGRESS, old generations fenced.
    const c3 = await a.call(OffsetCommitApi, 8, commit('g1', 2, j1.memberId, 7));
    assert.equal(c3.topics[0].partitions[0].errorCode, E.REBALANCE_IN_PROGRESS);
    const bSync = b.call(SyncGroupApi, 3, {
      groupId: 'g1',
      generationId: 2,
      memberId: bFirst.memberId,
      groupInstanceId: null,
      protocolType: null,
      protocolName: null,
      assignments: [],
    });
    const stale = await a.call(SyncGroupApi, 4, {
      groupId: 'g1',
      generationId: 1,
      memberId: j1.memberId,
      groupInstanceId: null,
      protocolType: null,
      protocolName: null,
      assignments: [],
    });
    assert.equal(stale.errorCode, E.ILLEGAL_GENERATION);
    const aSync = await a.call(SyncGroupApi, 4, {
      groupId: 'g1',
      generationId: 2,
      memberId: j1.memberId,
      groupInstanceId: null,
      protocolType: null,
      protocolName: null,
      assignments: [
        { memberId: j1.memberId, assignment: Buffer.from('p0') },
        { memberId: bFirst.memberId, assignment: Buffer.from('p1') },
      ],
    });
    assert.equal(aSync.assignment.toString(), 'p0');
    assert.equal((await bSync).assignment.toString(), 'p1');
    const oldGen = await a.call(OffsetCommitApi, 8, commit('g1', 1, j1.memberId, 8));
    assert.equal(oldGen.topics[0].partitions[0].errorCode, E.ILLEGAL_GENERATION);
    const c4 = await b.call(OffsetCommitApi, 2, commit('g1', 2, bFirst.memberId, 9));
    assert.equal(c4.topics[0].partitions[0].errorCode, E.NONE);
    const unknownTopic = await b.call(OffsetCommitApi, 2, {
      ...commit('g1', 2, bFirst.memberId, 9),
      topics: [
        { name: 'nope', partitions: [{ partitionIndex: 0, committedOffset: 1, committedLeaderEpoch: -1, commitTimestamp: -1, committedMetadata: null }] },
      ],
    });
    assert.equal(unknownTopic.topics[0].partitions[0].errorCode, E.UNKNOWN_TOPIC_OR_PARTITION);
    const f8 = await a.call(OffsetFetchApi, 8, {
      groupId: '',
      topics: null,
      groups: [{ groupId: 'g1', memberId: null, memberEpoch: -1, topics: [{ name: 'gt', partitionIndexes: [0, 1] }] }],
      requireStable: true,
    });
    assert.deepEqual(
      f8.groups[0].topics[0].partitions.map((p) => [p.partitionIndex, p.committedOffset, p.metadata, p.errorCode]),
      [
        [0, 9, 'md', 0],
        [1, -1, '', 0],
      ],
    );
    const f1 = await a.call(OffsetFetchApi, 1, { groupId: 'g1', topics: [{ name: 'gt', partitionIndexes: [0] }], groups: [], requireStable: false });
    assert.equal(f1.topics[0].partitions[0].committedOffset, 9);

    // DescribeGroups v5 and ListGroups v4 with a state filter.
    const d = await a.call(DescribeGroupsApi, 5, { groups: ['g1', 'none'], includeAuthorizedOperations: false });
    assert.deepEqual([d.groups[0].groupState, d.groups[0].protocolData, d.groups[0].members.length], ['Stable', 'range', 2]);
    assert.deepEqual(d.groups[0].members.map((m) => m.memberAssignment.toString()).sort(), ['p0', 'p1']);
    assert.match(d.groups[0].members[0].clientHost, /127\.0\.0\.1/);
    assert.deepEqual([d.groups[1].errorCode, d.groups[1].groupState], [0, 'Dead']);
    const l = await a.call(ListGroupsApi, 4, { statesFilter: ['stable'], typesFilter: [] });
    assert.deepEqual(
      l.groups.map((g) => [g.groupId, g.groupState]),
      [['g1', 'Stable']],
    );

    // A group with members cannot be deleted.
    const del = await a.call(DeleteGroupsApi, 2, { groupsNames: ['g1', 'ghost'] });
    assert.deepEqual(
      del.results.map((r) => r.errorCode),
      [E.NON_EMPTY_GROUP, E.GROUP_ID_NOT_FOUND],
    );

    // Both leave (v5 batch, v0 single); the group is then Empty and can be deleted with its offsets.
    const lv = await a.call(LeaveGroupApi, 5, {
      groupId: 'g1',
      memberId: '',
      members: [
        { memberId: j1.memberId, groupInstanceId: null, reason: 'bye' },
        { memberId: 'x', groupInstanceId: null, reason: null },
      ],
    });
    assert.deepEqual(
      lv.members.map((m) => m.errorCode),
      [E.NONE, E.UNKNOWN_MEMBER_ID],
    );
    const lv0 = await b.call(LeaveGroupApi, 0, { groupId: 'g1', memberId: bFirst.memberId, members: [] });
    assert.equal(lv0.errorCode, E.NONE);
    const empty = await a.call(DescribeGroupsApi, 0, { groups: ['g1'], includeAuthorizedOperations: false });
    assert.equal(empty.groups[0].groupState, 'Empty');
    const del2 = await a.call(DeleteGroupsApi, 0, { groupsNames: ['g1'] });
    assert.equal(del2.results[0].errorCode, E.NONE);
    const gone = await a.call(OffsetFetchApi, 7, { groupId: 'g1', topics: null, groups: [], requireStable: false });
    assert.deepEqual(gone.topics, []);
  });

  it('expires a silent member after its session timeout and rebalances the others', async () => {
    const a = await connect();
    const b = await connect();
    const ja = await joinNew(a, 5, 'g2', { sessionTimeoutMs: 400 });
    const sync = (c: RawClient, gen: number, memberId: string, assignments: Array<{ memberId: string; assignment: Buffer }>) =>
      c.call(SyncGroupApi, 2, { groupId: 'g2', generationId: gen, memberId, groupInstanceId: null, protocolType: null, protocolName: null, assignments });
    await sync(a, 1, ja.memberId, []);
    // b joins with a long session; a (short session) rejoins, then goes silent.
    const bFirst = await b.call(JoinGroupApi, 5, join('g2', '', { sessionTimeoutMs: 10_000 }));
    const bJoin = b.call(JoinGroupApi, 5, join('g2', bFirst.memberId, { sessionTimeoutMs: 10_000 }));
    await new Promise((r) => setTimeout(r, 30));
    await a.call(JoinGroupApi, 5, join('g2', ja.memberId, { sessionTimeoutMs: 400 }));
    const jb = await bJoin;
    await Promise.all([sync(a, 2, ja.memberId, []), sync(b, 2, bFirst.memberId, [])]);
    const hb = () => b.call(HeartbeatApi, 2, { groupId: 'g2', generationId: 2, memberId: bFirst.memberId, groupInstanceId: null });
    assert.equal((await hb()).errorCode, E.NONE);
    await new Promise((r) => setTimeout(r, 600));
    assert.equal((await hb()).errorCode, E.REBALANCE_IN_PROGRESS, 'a expired');
    const again = await b.call(JoinGroupApi, 5, join('g2', jb.memberId, { sessionTimeoutMs: 10_000 }));
    assert.deepEqual([again.generationId, again.leader], [3, jb.memberId]);
    const gone = await a.call(HeartbeatApi, 2, { groupId: 'g2', generationId: 2, memberId: ja.memberId, groupInstanceId: null });
    assert.equal(gone.errorCode, E.UNKNOWN_MEMBER_ID);
  });

  it('refuses bad joins with the protocol error codes', async () => {
    const a = await connect();
    const short = await a.call(JoinGroupApi, 1, join('g3', '', { sessionTimeoutMs: 10 }));
    assert.equal(short.errorCode, E.INVALID_SESSION_TIMEOUT);
    const noGroup = await a.call(JoinGroupApi, 1, join('', ''));
    assert.equal(noGroup.errorCode, E.INVALID_GROUP_ID);
    const unknown = await a.call(JoinGroupApi, 4, join('g3', 'made-up'));
    assert.equal(unknown.errorCode, E.UNKNOWN_MEMBER_ID);
    // v0-3 join without the member-id round trip.
    const j = await a.call(JoinGroupApi, 3, join('g3', ''));
    assert.equal(j.errorCode, E.NONE);
    const b = await connect();
    const other = await b.call(JoinGroupApi, 3, join('g3', '', { protocols: [{ name: 'other', metadata: Buffer.alloc(0) }] }));
    assert.equal(other.errorCode, E.INCONSISTENT_GROUP_PROTOCOL);
    const waiting = await b.call(OffsetCommitApi, 3, commit('g3', -1, '', 1));
    assert.equal(waiting.topics[0].partitions[0].errorCode, E.REBALANCE_IN_PROGRESS, 'the group awaits its assignment');
    await a.call(SyncGroupApi, 0, {
      groupId: 'g3',
      generationId: j.generationId,
      memberId: j.memberId,
      groupInstanceId: null,
      protocolType: null,
      protocolName: null,
      assignments: [],
    });
    const commitNoGen = await b.call(OffsetCommitApi, 3, commit('g3', -1, '', 1));
    assert.equal(commitNoGen.topics[0].partitions[0].errorCode, E.UNKNOWN_MEMBER_ID, 'a generation-less commit to a live group');
    const standalone = await b.call(OffsetCommitApi, 3, commit('solo', -1, '', 4));
    assert.equal(standalone.topics[0].partitions[0].errorCode, E.NONE, 'a generation-less commit to an unknown group');
    const restartLike = await b.call(OffsetCommitApi, 3, commit('unknown-group', 5, 'm', 4));
    assert.equal(restartLike.topics[0].partitions[0].errorCode, E.ILLEGAL_GENERATION);
    const list = await b.call(ListGroupsApi, 0, { statesFilter: [], typesFilter: [] });
    assert.ok(
      list.groups.some((g) => g.groupId === 'solo'),
      'a group known only by its offsets is listed',
    );
  });

  it('keeps the protocol type of a group that became Empty without committing (as Kafka does)', async () => {
    const a = await connect();
    const j = await joinNew(a, 9, 'g-empty');
    assert.equal(j.errorCode, E.NONE);
    const left = await a.call(LeaveGroupApi, 5, { groupId: 'g-empty', memberId: '', members: [{ memberId: j.memberId, groupInstanceId: null, reason: null }] });
    assert.equal(left.errorCode, E.NONE);
    const listed = (await a.call(ListGroupsApi, 5, { statesFilter: [], typesFilter: [] })).groups.find((g) => g.groupId === 'g-empty');
    assert.deepEqual(listed, { groupId: 'g-empty', protocolType: 'consumer', groupState: 'Empty', groupType: 'classic' });
    const described = (await a.call(DescribeGroupsApi, 5, { groups: ['g-empty'], includeAuthorizedOperations: false })).groups[0];
    assert.deepEqual([described.groupState, described.protocolType, described.members.length], ['Empty', 'consumer', 0]);
    // The next first member may bring another protocol type, which the group takes (Kafka's ClassicGroup.add).
    const other = await joinNew(a, 9, 'g-empty', { protocolType: 'connect' });
    assert.equal(other.errorCode, E.NONE);
    assert.equal(other.protocolType, 'connect');
  });
});
