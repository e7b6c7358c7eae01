/**
 * Static membership of the classic protocol (KIP-345) over the wire: a static member that restarts (joins with no
 * member id and its group.instance.id) takes its previous place and assignment with no rebalance of the others, its
 * previous incarnation is fenced (FENCED_INSTANCE_ID), a static member away is kept through a rebalance until its
 * session times out, and LeaveGroup v3+ removes members by instance id.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Engine } from '../../../src/core/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { startKafkaListener } from '../../../src/protocols/kafka/index.js';
import {
  DescribeGroupsApi,
  HeartbeatApi,
  JoinGroupApi,
  KafkaErrorCode as E,
  LeaveGroupApi,
  OffsetCommitApi,
  SyncGroupApi,
  type JoinGroupRequest,
  type JoinGroupResponse,
} from '../../../src/protocols/kafka/codec/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger } from './helpers.js';

const join = (groupId: string, memberId: string, instance: string | null, extra: Partial<JoinGroupRequest> = {}): JoinGroupRequest => ({
  groupId,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 1000,
  memberId,
  groupInstanceId: instance,
  protocolType: 'consumer',
  protocols: [{ name: 'range', metadata: Buffer.from('m') }],
  reason: null,
  ...extra,
});

describe('kafka static group membership (KIP-345) over the wire', () => {
  let listener: ProtocolListener;
  let port: number;
  const clients: RawClient[] = [];
  const connect = async (): Promise<RawClient> => {
    const c = await RawClient.connect(port);
    clients.push(c);
    return c;
  };
  const sync = (
    c: RawClient,
    groupId: string,
    gen: number,
    memberId: string,
    instance: string | null,
    assignments: Array<{ memberId: string; assignment: Buffer }> = [],
  ) => c.call(SyncGroupApi, 3, { groupId, generationId: gen, memberId, groupInstanceId: instance, protocolType: null, protocolName: null, assignments });
  const hb = (c: RawClient, groupId: string, gen: number, memberId: string, instance: string | null) =>
    c.call(HeartbeatApi, 3, { groupId, generationId: gen, memberId, groupInstanceId: instance }).then((r) => r.errorCode);

  /** Two static members i1 (the leader, on `a`) and i2 (on `b`) in a Stable group, with assignments "A1" and "A2". */
  async function stableGroup(groupId: string, v = 5): Promise<{ a: RawClient; b: RawClient; ja: JoinGroupResponse; jb: JoinGroupResponse }> {
    const a = await connect();
    const b = await connect();
    // Static members get no MEMBER_ID_REQUIRED round (KIP-394 is for dynamic members).
    const first = await a.call(JoinGroupApi, v, join(groupId, '', 'i1'));
    assert.equal(first.errorCode, E.NONE);
    await sync(a, groupId, first.generationId, first.memberId, 'i1', [{ memberId: first.memberId, assignment: Buffer.from('A1') }]);
    const bJoin = b.call(JoinGroupApi, v, join(groupId, '', 'i2'));
    await new Promise((r) => setTimeout(r, 30));
    const [ja, jb] = await Promise.all([a.call(JoinGroupApi, v, join(groupId, first.memberId, 'i1')), bJoin]);
    assert.deepEqual([ja.errorCode, jb.errorCode, ja.leader, jb.generationId], [E.NONE, E.NONE, ja.memberId, ja.generationId]);
    const [sa, sb] = await Promise.all([
      sync(a, groupId, ja.generationId, ja.memberId, 'i1', [
        { memberId: ja.memberId, assignment: Buffer.from('A1') },
        { memberId: jb.memberId, assignment: Buffer.from('A2') },
      ]),
      sync(b, groupId, jb.generationId, jb.memberId, 'i2'),
    ]);
    assert.deepEqual([sa.assignment.toString(), sb.assignment.toString()], ['A1', 'A2']);
    return { a, b, ja, jb };
  }

  before(async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    await engine.createStream({ name: 'st', partitions: 2 });
    listener = await startKafkaListener(
      { engine, logger: captureLogger().logger, brokerId: 2 },
      { host: '127.0.0.1', port: 0 },
      { groupInitialRebalanceDelayMs: 0, groupMinSessionTimeoutMs: 100 },
    );
    port = listener.address().port;
  });
  after(async () => {
    for (const c of clients) c.close();
    await listener.close();
  });

  it('a restarted static follower gets its assignment back with no rebalance; its old id is fenced', async () => {
    const { a, b, ja, jb } = await stableGroup('s1');
    const gen = ja.generationId;
    // i2 restarts: a new connection, no member id.
    const b2 = await connect();
    const again = await b2.call(JoinGroupApi, 5, join('s1', '', 'i2'));
    assert.equal(again.errorCode, E.NONE);
    assert.notEqual(again.memberId, jb.memberId);
    assert.deepEqual([again.generationId, again.leader, again.members], [gen, ja.memberId, []]);
    const s = await sync(b2, 's1', gen, again.memberId, 'i2');
    assert.deepEqual([s.errorCode, s.assignment.toString()], [E.NONE, 'A2']);
    // The leader sees no rebalance: its heartbeats stay clean in the same generation.
    assert.equal(await hb(a, 's1', gen, ja.memberId, 'i1'), E.NONE);
    // The previous incarnation is fenced, whatever it sends.
    assert.equal(await hb(b, 's1', gen, jb.memberId, 'i2'), E.FENCED_INSTANCE_ID);
    assert.equal((await sync(b, 's1', gen, jb.memberId, 'i2')).errorCode, E.FENCED_INSTANCE_ID);
    const commit = await b.call(OffsetCommitApi, 7, {
      groupId: 's1',
      generationId: gen,
      memberId: jb.memberId,
      groupInstanceId: 'i2',
      retentionTimeMs: -1,
      topics: [{ name: 'st', partitions: [{ partitionIndex: 0, committedOffset: 1, committedLeaderEpoch: -1, commitTimestamp: -1, committedMetadata: null }] }],
    });
    assert.equal(commit.topics[0].partitions[0].errorCode, E.FENCED_INSTANCE_ID);
    assert.equal((await b.call(JoinGroupApi, 5, join('s1', jb.memberId, 'i2'))).errorCode, E.FENCED_INSTANCE_ID);
    const d = (await b2.call(DescribeGroupsApi, 5, { groups: ['s1'], includeAuthorizedOperations: false })).groups[0];
    assert.equal(d.groupState, 'Stable');
    assert.deepEqual(d.members.map((m) => [m.groupInstanceId, m.memberAssignment.toString()]).sort(), [
      ['i1', 'A1'],
      ['i2', 'A2'],
    ]);
  });

  it('a restarted static leader is told to skip the assignment (v9), or named a follower (older versions)', async () => {
    const { ja } = await stableGroup('s2', 9);
    const a2 = await connect();
    const v9 = await a2.call(JoinGroupApi, 9, join('s2', '', 'i1'));
    assert.deepEqual([v9.errorCode, v9.generationId, v9.skipAssignment, v9.leader], [E.NONE, ja.generationId, true, v9.memberId]);
    assert.equal(v9.members.length, 2, 'the leader learns the members');
    assert.equal((await sync(a2, 's2', ja.generationId, v9.memberId, 'i1')).assignment.toString(), 'A1');

    const a3 = await connect();
    const v5 = await a3.call(JoinGroupApi, 5, join('s2', '', 'i1'));
    assert.equal(v5.generationId, ja.generationId);
    // Named a follower (the leader field is the id it had): it does not assign again.
    assert.deepEqual([v5.leader, v5.members], [v9.memberId, []]);
    assert.equal((await sync(a3, 's2', ja.generationId, v5.memberId, 'i1')).assignment.toString(), 'A1');
  });

  it('keeps a static member that is away through a rebalance, and removes it when its session times out', async () => {
    const a = await connect();
    const b = await connect();
    const ja = await a.call(JoinGroupApi, 5, join('s3', '', 'i1', { sessionTimeoutMs: 10_000 }));
    // b's session (1.5 s) outlasts a rebalance (1 s rebalance timeout): a rebalance without it keeps it.
    const bJoin = b.call(JoinGroupApi, 5, join('s3', '', 'i2', { sessionTimeoutMs: 1500 }));
    await new Promise((r) => setTimeout(r, 30));
    // a rejoins for b's join (a new generation), then b goes away.
    const ja2 = await a.call(JoinGroupApi, 5, join('s3', ja.memberId, 'i1', { sessionTimeoutMs: 10_000 }));
    const jb = await bJoin;
    assert.equal(ja2.members.length, 2);
    await sync(a, 's3', ja2.generationId, ja.memberId, 'i1', []);
    await sync(b, 's3', ja2.generationId, jb.memberId, 'i2');
    // A dynamic member joins: the rebalance ends without b (after the rebalance timeout), b still a member.
    const c = await connect();
    const cFirst = await c.call(JoinGroupApi, 5, join('s3', '', null, { sessionTimeoutMs: 10_000 }));
    const cJoin = c.call(JoinGroupApi, 5, join('s3', cFirst.memberId, null, { sessionTimeoutMs: 10_000 }));
    await new Promise((r) => setTimeout(r, 50));
    const ja3 = await a.call(JoinGroupApi, 5, join('s3', ja.memberId, 'i1', { sessionTimeoutMs: 10_000 }));
    await cJoin;
    assert.deepEqual(ja3.members.map((m) => m.groupInstanceId ?? '-').sort(), ['-', 'i1', 'i2'], 'the absent static member is still in the group');
    await sync(a, 's3', ja3.generationId, ja.memberId, 'i1', []);
    // Its session then expires (1.5 s after the rebalance restarted every session): the group rebalances without it.
    assert.equal(await hb(a, 's3', ja3.generationId, ja.memberId, 'i1'), E.NONE);
    await new Promise((r) => setTimeout(r, 1900));
    assert.equal(await hb(a, 's3', ja3.generationId, ja.memberId, 'i1'), E.REBALANCE_IN_PROGRESS);
    const [ja4] = await Promise.all([a.call(JoinGroupApi, 5, join('s3', ja.memberId, 'i1')), c.call(JoinGroupApi, 5, join('s3', cFirst.memberId, null))]);
    assert.deepEqual(ja4.members.map((m) => m.groupInstanceId ?? '-').sort(), ['-', 'i1']);
  });

  it('LeaveGroup v3+ removes static members by instance id, with an error per member', async () => {
    const { a, ja } = await stableGroup('s4');
    const r = await a.call(LeaveGroupApi, 4, {
      groupId: 's4',
      memberId: '',
      members: [
        { memberId: '', groupInstanceId: 'i2', reason: null },
        { memberId: 'not-its-id', groupInstanceId: 'i1', reason: null },
        { memberId: '', groupInstanceId: 'i9', reason: null },
      ],
    });
    assert.equal(r.errorCode, E.NONE);
    assert.deepEqual(
      r.members.map((m) => [m.groupInstanceId, m.errorCode]),
      [
        ['i2', E.NONE],
        ['i1', E.FENCED_INSTANCE_ID],
        ['i9', E.UNKNOWN_MEMBER_ID],
      ],
    );
    // i2's leave rebalances the group; i1 is still in it.
    assert.equal(await hb(a, 's4', ja.generationId, ja.memberId, 'i1'), E.REBALANCE_IN_PROGRESS);
    const r2 = await a.call(LeaveGroupApi, 5, { groupId: 's4', memberId: '', members: [{ memberId: ja.memberId, groupInstanceId: 'i1', reason: 'bye' }] });
    assert.deepEqual(
      r2.members.map((m) => m.errorCode),
      [E.NONE],
    );
  });
});
