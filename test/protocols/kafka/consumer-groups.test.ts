/**
 * The consumer group protocol (KIP-848) over the wire with a raw protocol client: joining, the revoke-then-assign
 * hand-over between members (a partition never has two owners), member epochs and their fencing, leaving, static
 * members leaving for a while and coming back, session and rebalance timeouts, regex subscriptions, offsets at the
 * member epoch, OffsetDelete of a consumer group's offsets, and the group as the classic APIs and ConsumerGroupDescribe
 * see it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Engine } from '../../../src/core/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { startKafkaListener } from '../../../src/protocols/kafka/index.js';
import {
  ApiVersionsApi,
  ConsumerGroupDescribeApi,
  ConsumerGroupHeartbeatApi,
  DescribeGroupsApi,
  JoinGroupApi,
  KafkaErrorCode as E,
  ListGroupsApi,
  OffsetCommitApi,
  OffsetDeleteApi,
  OffsetFetchApi,
  type ConsumerGroupHeartbeatRequest,
  type ConsumerGroupHeartbeatResponse,
} from '../../../src/protocols/kafka/codec/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger } from './helpers.js';

type Owned = Array<{ topicId: Buffer; partitions: number[] }>;

const hb = (groupId: string, memberId: string, memberEpoch: number, extra: Partial<ConsumerGroupHeartbeatRequest> = {}): ConsumerGroupHeartbeatRequest => ({
  groupId,
  memberId,
  memberEpoch,
  instanceId: null,
  rackId: null,
  rebalanceTimeoutMs: -1,
  subscribedTopicNames: null,
  subscribedTopicRegex: null,
  serverAssignor: null,
  topicPartitions: null,
  ...extra,
});

const joinReq = (groupId: string, memberId: string, topics: string[], extra: Partial<ConsumerGroupHeartbeatRequest> = {}): ConsumerGroupHeartbeatRequest =>
  hb(groupId, memberId, 0, { rebalanceTimeoutMs: 5000, subscribedTopicNames: topics, subscribedTopicRegex: '', topicPartitions: [], ...extra });

/** The partitions of an assignment as "<topic>:<p>" (topic ids named through `names`). */
function parts(a: ConsumerGroupHeartbeatResponse['assignment'] | Owned, names: Map<string, string>): string[] {
  const list = a === null ? [] : Array.isArray(a) ? a : a.topicPartitions;
  return list.flatMap((t) => t.partitions.map((p) => `${names.get(t.topicId.toString('hex')) ?? '?'}:${p}`)).sort();
}

/** A member as a client: it applies what it is told and reports what it owns. */
class Member {
  epoch = 0;
  owned: Owned = [];
  constructor(
    readonly c: RawClient,
    readonly groupId: string,
    readonly memberId: string,
  ) {}

  async send(req: ConsumerGroupHeartbeatRequest): Promise<ConsumerGroupHeartbeatResponse> {
    const r = await this.c.call(ConsumerGroupHeartbeatApi, 1, req);
    if (r.errorCode === E.NONE) {
      this.epoch = r.memberEpoch;
      if (r.assignment !== null) this.owned = r.assignment.topicPartitions.map((t) => ({ topicId: t.topicId, partitions: [...t.partitions] }));
    }
    return r;
  }

  join(topics: string[], extra: Partial<ConsumerGroupHeartbeatRequest> = {}): Promise<ConsumerGroupHeartbeatResponse> {
    this.epoch = 0;
    this.owned = [];
    return this.send(joinReq(this.groupId, this.memberId, topics, extra));
  }

  /** A heartbeat reporting what it owns (as clients do when acknowledging an assignment). */
  beat(): Promise<ConsumerGroupHeartbeatResponse> {
    return this.send(hb(this.groupId, this.memberId, this.epoch, { topicPartitions: this.owned }));
  }
}

describe('kafka consumer group protocol (KIP-848) over the wire', () => {
  let listener: ProtocolListener;
  let engine: Engine;
  let port: number;
  const names = new Map<string, string>();
  const clients: RawClient[] = [];
  const connect = async (): Promise<RawClient> => {
    const c = await RawClient.connect(port);
    clients.push(c);
    return c;
  };

  before(async () => {
    const m = new MemoryStreams();
    engine = new Engine(m, m);
    for (const [name, n] of [
      ['ct', 4],
      ['rx.a', 1],
      ['rx.b', 2],
      ['other', 1],
    ] as const) {
      const def = await engine.createStream({ name, partitions: n });
      names.set(def.id as string, name);
    }
    listener = await startKafkaListener(
      { engine, logger: captureLogger().logger, brokerId: 1 },
      { host: '127.0.0.1', port: 0 },
      { groupInitialRebalanceDelayMs: 0, consumerGroupSessionTimeoutMs: 700, consumerGroupHeartbeatIntervalMs: 100 },
    );
    port = listener.address().port;
  });
  after(async () => {
    for (const c of clients) c.close();
    await listener.close();
  });

  it('advertises ConsumerGroupHeartbeat and ConsumerGroupDescribe', async () => {
    const c = await connect();
    const r = await c.call(ApiVersionsApi, 3, { clientSoftwareName: 'raw', clientSoftwareVersion: '1' });
    const range = (k: number) => r.apiKeys.find((x) => x.apiKey === k);
    assert.deepEqual([range(68)?.minVersion, range(68)?.maxVersion], [0, 1]);
    assert.deepEqual([range(69)?.minVersion, range(69)?.maxVersion], [0, 1]);
    // OffsetCommit and OffsetFetch v9+: librdkafka uses the consumer protocol only with them.
    assert.ok((range(8)?.maxVersion ?? 0) >= 9, 'OffsetCommit v9+');
    assert.ok((range(9)?.maxVersion ?? 0) >= 9, 'OffsetFetch v9+');
  });

  it('hands partitions over from one member to a new one by revoking first, never two owners', async () => {
    const a = new Member(await connect(), 'cg1', 'member-a');
    const b = new Member(await connect(), 'cg1', 'member-b');
    const ja = await a.join(['ct']);
    assert.equal(ja.errorCode, E.NONE);
    assert.equal(ja.memberId, 'member-a');
    assert.equal(ja.memberEpoch, 1);
    assert.equal(ja.heartbeatIntervalMs, 100);
    assert.deepEqual(parts(ja.assignment, names), ['ct:0', 'ct:1', 'ct:2', 'ct:3']);

    const jb = await b.join(['ct']);
    assert.equal(jb.memberEpoch, 2);
    // Everything is still a's: b waits at the new epoch with nothing.
    assert.deepEqual(parts(jb.assignment, names), []);

    const owners = (): void => {
      const all = [...parts(a.owned, names), ...parts(b.owned, names)];
      assert.equal(new Set(all).size, all.length, `a partition owned twice: ${all.join(' ')}`);
    };
    // a is asked to give up two partitions and stays at epoch 1 until it has.
    const r1 = await a.beat();
    assert.equal(r1.memberEpoch, 1);
    assert.equal(parts(r1.assignment, names).length, 2);
    owners();
    // b still gets nothing: a has not acknowledged yet.
    assert.deepEqual(parts((await b.beat()).assignment, names), []);
    const r2 = await a.beat();
    assert.equal(r2.memberEpoch, 2);
    const r3 = await b.beat();
    assert.equal(r3.memberEpoch, 2);
    assert.equal(parts(r3.assignment, names).length, 2);
    owners();
    assert.deepEqual([...parts(a.owned, names), ...parts(b.owned, names)].sort(), ['ct:0', 'ct:1', 'ct:2', 'ct:3']);

    const d = await a.c.call(ConsumerGroupDescribeApi, 1, { groupIds: ['cg1'], includeAuthorizedOperations: false });
    const g = d.groups[0];
    assert.deepEqual([g.errorCode, g.groupState, g.groupEpoch, g.assignmentEpoch, g.assignorName], [0, 'Stable', 2, 2, 'uniform']);
    assert.deepEqual(g.members.map((m) => [m.memberId, m.memberEpoch, m.memberType, m.subscribedTopicNames]).sort(), [
      ['member-a', 2, 1, ['ct']],
      ['member-b', 2, 1, ['ct']],
    ]);
    assert.deepEqual(
      g.members.flatMap((m) => m.assignment.topicPartitions.map((t) => t.topicName)),
      ['ct', 'ct'],
    );

    // a leaves: b is given everything at the next epoch.
    const left = await a.send(hb('cg1', 'member-a', a.epoch));
    assert.equal(left.errorCode, E.NONE);
    const leave = await a.c.call(ConsumerGroupHeartbeatApi, 1, hb('cg1', 'member-a', -1));
    assert.deepEqual([leave.errorCode, leave.memberEpoch], [E.NONE, -1]);
    const r4 = await b.beat();
    assert.equal(r4.memberEpoch, 3);
    assert.deepEqual(parts(r4.assignment, names), ['ct:0', 'ct:1', 'ct:2', 'ct:3']);
    assert.equal((await a.c.call(ConsumerGroupHeartbeatApi, 1, hb('cg1', 'member-a', 3))).errorCode, E.UNKNOWN_MEMBER_ID);
  });

  it('fences wrong member epochs and accepts the previous one while the member owns only what it is assigned', async () => {
    const a = new Member(await connect(), 'cg2', 'm-a');
    await a.join(['ct']);
    assert.equal(a.epoch, 1);
    const ahead = await a.c.call(ConsumerGroupHeartbeatApi, 1, hb('cg2', 'm-a', 7));
    assert.equal(ahead.errorCode, E.FENCED_MEMBER_EPOCH);
    // b joins: a moves to epoch 2 after revoking; a's reply with epoch 2 "lost": it may still come with 1.
    const b = new Member(await connect(), 'cg2', 'm-b');
    await b.join(['ct']);
    await a.beat();
    await a.beat();
    assert.equal(a.epoch, 2);
    const prev = await a.c.call(ConsumerGroupHeartbeatApi, 1, hb('cg2', 'm-a', 1, { topicPartitions: a.owned }));
    assert.deepEqual([prev.errorCode, prev.memberEpoch], [E.NONE, 2]);
    const prevNoOwned = await a.c.call(ConsumerGroupHeartbeatApi, 1, hb('cg2', 'm-a', 1));
    assert.equal(prevNoOwned.errorCode, E.FENCED_MEMBER_EPOCH);
    assert.equal((await a.c.call(ConsumerGroupHeartbeatApi, 1, hb('cg2', 'nobody', 2))).errorCode, E.UNKNOWN_MEMBER_ID);
    // A fenced member joins again (epoch 0, same id) and is back at the group's epoch.
    const again = await a.join(['ct']);
    assert.deepEqual([again.errorCode, again.memberEpoch], [E.NONE, 2]);
  });

  it('refuses malformed heartbeats with Kafka error codes', async () => {
    const c = await connect();
    const call = (req: ConsumerGroupHeartbeatRequest, v = 1) => c.call(ConsumerGroupHeartbeatApi, v, req);
    assert.equal((await call(joinReq('cg3', '', ['ct']))).errorCode, E.INVALID_REQUEST, 'v1: member id required');
    assert.equal((await call(joinReq('', 'm', ['ct']))).errorCode, E.INVALID_REQUEST);
    assert.equal((await call(joinReq('cg3', 'm', ['ct'], { rebalanceTimeoutMs: -1 }))).errorCode, E.INVALID_REQUEST);
    assert.equal((await call(joinReq('cg3', 'm', ['ct'], { topicPartitions: null }))).errorCode, E.INVALID_REQUEST);
    assert.equal((await call(joinReq('cg3', 'm', ['ct'], { instanceId: '' }))).errorCode, E.INVALID_REQUEST);
    assert.equal((await call(hb('cg3', 'm', -3))).errorCode, E.INVALID_REQUEST);
    assert.equal((await call(hb('cg3', 'm', -2))).errorCode, E.INVALID_REQUEST, 'static leave needs the instance id');
    const noSub = await call(joinReq('cg3', 'm', ['ct'], { subscribedTopicNames: null, subscribedTopicRegex: null }));
    assert.equal(noSub.errorCode, E.INVALID_REQUEST);
    assert.match(noSub.errorMessage ?? '', /SubscribedTopicNames or SubscribedTopicRegex/);
    const assignor = await call(joinReq('cg3', 'm', ['ct'], { serverAssignor: 'sticky' }));
    assert.equal(assignor.errorCode, E.UNSUPPORTED_ASSIGNOR);
    const regex = await call(joinReq('cg3', 'm', [], { subscribedTopicRegex: '(a)\\1' }));
    assert.equal(regex.errorCode, E.INVALID_REGULAR_EXPRESSION);
    const nested = await call(joinReq('cg3', 'm', [], { subscribedTopicRegex: '(a+)+' }));
    assert.equal(nested.errorCode, E.INVALID_REGULAR_EXPRESSION);
    // v0: the coordinator makes the member id.
    const v0 = await call(joinReq('cg3', '', ['ct']), 0);
    assert.equal(v0.errorCode, E.NONE);
    assert.match(v0.memberId ?? '', /^[0-9a-f-]{36}$/);
  });

  it('subscribes by RE2 regex against whole topic names, and picks the range assignor when asked', async () => {
    const a = new Member(await connect(), 'cg4', 'rx-a');
    const r = await a.join([], { subscribedTopicRegex: '(^rx\\..*)', serverAssignor: 'range' });
    assert.equal(r.errorCode, E.NONE);
    assert.deepEqual(parts(r.assignment, names), ['rx.a:0', 'rx.b:0', 'rx.b:1']);
    const d = await a.c.call(ConsumerGroupDescribeApi, 0, { groupIds: ['cg4'], includeAuthorizedOperations: false });
    assert.deepEqual([d.groups[0].assignorName, d.groups[0].members[0].subscribedTopicRegex], ['range', '(^rx\\..*)']);
    // A topic created later that matches is assigned at a later heartbeat (the subscription is looked at again).
    const def = await engine.createStream({ name: 'rx.c', partitions: 1 });
    names.set(def.id as string, 'rx.c');
    let later = await a.beat();
    for (let i = 0; i < 6 && later.assignment === null; i++) {
      // Within the session timeout (700 ms), past the refresh interval (1 s) in all.
      await new Promise((res) => setTimeout(res, 300));
      later = await a.beat();
    }
    assert.equal(later.errorCode, E.NONE);
    assert.ok(later.memberEpoch > r.memberEpoch);
    assert.deepEqual(parts(later.assignment, names), ['rx.a:0', 'rx.b:0', 'rx.b:1', 'rx.c:0']);
  });

  it('static members: a -2 leave keeps the partitions, the next incarnation takes them with no change for others', async () => {
    const a = new Member(await connect(), 'cg5', 'st-a1');
    const b = new Member(await connect(), 'cg5', 'st-b');
    await a.join(['ct'], { instanceId: 'inst-a' });
    await b.join(['ct']);
    for (let i = 0; i < 3; i++) {
      await a.beat();
      await b.beat();
    }
    const aParts = parts(a.owned, names);
    const bEpoch = b.epoch;
    assert.equal(aParts.length, 2);
    // A second live incarnation is refused.
    const dup = await (await connect()).call(ConsumerGroupHeartbeatApi, 1, joinReq('cg5', 'st-a2', ['ct'], { instanceId: 'inst-a' }));
    assert.equal(dup.errorCode, E.UNRELEASED_INSTANCE_ID);
    // a leaves for now (-2), and comes back as a new member id.
    const leave = await a.c.call(ConsumerGroupHeartbeatApi, 1, hb('cg5', 'st-a1', -2, { instanceId: 'inst-a' }));
    assert.deepEqual([leave.errorCode, leave.memberEpoch], [E.NONE, -2]);
    const a2 = new Member(await connect(), 'cg5', 'st-a2');
    const back = await a2.join(['ct'], { instanceId: 'inst-a' });
    assert.equal(back.errorCode, E.NONE);
    assert.deepEqual(parts(back.assignment, names), aParts);
    assert.equal(back.memberEpoch, bEpoch, 'no new group epoch');
    const bNow = await b.beat();
    assert.deepEqual([bNow.memberEpoch, bNow.assignment], [bEpoch, null], 'b sees nothing new');
    // The old incarnation is fenced.
    const old = await a.c.call(ConsumerGroupHeartbeatApi, 1, hb('cg5', 'st-a1', bEpoch, { instanceId: 'inst-a' }));
    assert.equal(old.errorCode, E.FENCED_INSTANCE_ID);
  });

  it('removes a member after its session timeout, and fences one that does not revoke within its rebalance timeout', async () => {
    const a = new Member(await connect(), 'cg6', 'to-a');
    const b = new Member(await connect(), 'cg6', 'to-b');
    await a.join(['ct'], { rebalanceTimeoutMs: 300 });
    await b.join(['ct']);
    // a is asked to revoke and never acknowledges: fenced after 300 ms; b keeps heartbeating and gets everything.
    await a.send(hb('cg6', 'to-a', a.epoch, { topicPartitions: a.owned }));
    const deadline = Date.now() + 3000;
    let got: string[] = [];
    while (Date.now() < deadline && got.length < 4) {
      await new Promise((res) => setTimeout(res, 100));
      await b.beat();
      got = parts(b.owned, names);
    }
    assert.deepEqual(got, ['ct:0', 'ct:1', 'ct:2', 'ct:3']);
    assert.equal((await a.c.call(ConsumerGroupHeartbeatApi, 1, hb('cg6', 'to-a', a.epoch))).errorCode, E.UNKNOWN_MEMBER_ID);
    // b goes silent: after the session timeout (700 ms) the group is empty.
    await new Promise((res) => setTimeout(res, 1000));
    const d = await b.c.call(ConsumerGroupDescribeApi, 1, { groupIds: ['cg6'], includeAuthorizedOperations: false });
    assert.deepEqual([d.groups[0].groupState, d.groups[0].members.length], ['Empty', 0]);
  });

  it('commits offsets at the member epoch (OffsetCommit v9) and fetches them as the member', async () => {
    const c = await connect();
    const a = new Member(c, 'cg7', 'off-a');
    await a.join(['ct']);
    const commit = (v: number, epoch: number, memberId = 'off-a') =>
      c.call(OffsetCommitApi, v, {
        groupId: 'cg7',
        generationId: epoch,
        memberId,
        groupInstanceId: null,
        retentionTimeMs: -1,
        topics: [
          { name: 'ct', partitions: [{ partitionIndex: 0, committedOffset: 5, committedLeaderEpoch: -1, commitTimestamp: -1, committedMetadata: null }] },
        ],
      });
    assert.equal((await commit(9, a.epoch)).topics[0].partitions[0].errorCode, E.NONE);
    assert.equal((await commit(9, a.epoch + 1)).topics[0].partitions[0].errorCode, E.FENCED_MEMBER_EPOCH);
    assert.equal((await commit(9, a.epoch - 1)).topics[0].partitions[0].errorCode, E.STALE_MEMBER_EPOCH);
    assert.equal((await commit(9, a.epoch, 'nobody')).topics[0].partitions[0].errorCode, E.UNKNOWN_MEMBER_ID);
    assert.equal((await commit(8, a.epoch)).topics[0].partitions[0].errorCode, E.UNSUPPORTED_VERSION);
    assert.equal((await commit(9, -1, '')).topics[0].partitions[0].errorCode, E.UNKNOWN_MEMBER_ID, 'a group with members takes no commit from outside');
    const fetch = (epoch: number) =>
      c.call(OffsetFetchApi, 9, {
        groupId: '',
        topics: null,
        groups: [{ groupId: 'cg7', memberId: 'off-a', memberEpoch: epoch, topics: [{ name: 'ct', partitionIndexes: [0] }] }],
        requireStable: true,
      });
    const f = await fetch(a.epoch);
    assert.deepEqual([f.groups[0].errorCode, f.groups[0].topics[0].partitions[0].committedOffset], [E.NONE, 5]);
    assert.equal((await fetch(a.epoch + 3)).groups[0].errorCode, E.STALE_MEMBER_EPOCH);
  });

  it('shares the group namespace with the classic protocol: listed, described, and refusing the other protocol', async () => {
    const c = await connect();
    const a = new Member(c, 'cg8', 'mix-a');
    await a.join(['ct']);
    const join = await c.call(JoinGroupApi, 3, {
      groupId: 'cg8',
      sessionTimeoutMs: 10_000,
      rebalanceTimeoutMs: 1000,
      memberId: '',
      groupInstanceId: null,
      protocolType: 'consumer',
      protocols: [{ name: 'range', metadata: Buffer.from('m') }],
      reason: null,
    });
    assert.equal(join.errorCode, E.INCONSISTENT_GROUP_PROTOCOL);

    const list = await c.call(ListGroupsApi, 5, { statesFilter: [], typesFilter: ['consumer'] });
    const listed = list.groups.find((g) => g.groupId === 'cg8');
    assert.deepEqual(listed && [listed.protocolType, listed.groupType, listed.groupState], ['consumer', 'consumer', 'Stable']);
    assert.ok(!(await c.call(ListGroupsApi, 5, { statesFilter: [], typesFilter: ['classic'] })).groups.some((g) => g.groupId === 'cg8'));

    const dg = (await c.call(DescribeGroupsApi, 5, { groups: ['cg8'], includeAuthorizedOperations: false })).groups[0];
    assert.deepEqual([dg.errorCode, dg.groupState, dg.protocolType, dg.protocolData, dg.members.length], [0, 'Stable', 'consumer', 'uniform', 1]);
    // The member's assignment in the consumer protocol's encoding: version 0, topic "ct", partitions 0-3.
    const asg = dg.members[0].memberAssignment;
    assert.equal(asg.readInt16BE(0), 0);
    assert.equal(asg.readInt32BE(2), 1);
    assert.equal(asg.toString('utf8', 8, 10), 'ct');
    assert.equal(asg.readInt32BE(10), 4);

    // A classic group with members refuses the consumer protocol; ConsumerGroupDescribe sends clients to DescribeGroups.
    const classic = await c.call(JoinGroupApi, 3, {
      groupId: 'cg9',
      sessionTimeoutMs: 10_000,
      rebalanceTimeoutMs: 1000,
      memberId: '',
      groupInstanceId: null,
      protocolType: 'consumer',
      protocols: [{ name: 'range', metadata: Buffer.from('m') }],
      reason: null,
    });
    assert.equal(classic.errorCode, E.NONE);
    const refused = await c.call(ConsumerGroupHeartbeatApi, 1, joinReq('cg9', 'x', ['ct']));
    assert.equal(refused.errorCode, E.GROUP_ID_NOT_FOUND);
    const cgd = await c.call(ConsumerGroupDescribeApi, 1, { groupIds: ['cg9', 'none', ''], includeAuthorizedOperations: false });
    assert.deepEqual(
      cgd.groups.map((g) => g.errorCode),
      [E.GROUP_ID_NOT_FOUND, E.GROUP_ID_NOT_FOUND, E.INVALID_GROUP_ID],
    );
    assert.match(cgd.groups[0].errorMessage ?? '', /not a consumer group/);

    // Once empty, the consumer group gives way to a classic one.
    await c.call(ConsumerGroupHeartbeatApi, 1, hb('cg8', 'mix-a', -1));
    const now = await c.call(JoinGroupApi, 3, {
      groupId: 'cg8',
      sessionTimeoutMs: 10_000,
      rebalanceTimeoutMs: 1000,
      memberId: '',
      groupInstanceId: null,
      protocolType: 'consumer',
      protocols: [{ name: 'range', metadata: Buffer.from('m') }],
      reason: null,
    });
    assert.equal(now.errorCode, E.NONE);
  });

  it('OffsetDelete: GROUP_SUBSCRIBED_TO_TOPIC for a topic a member subscribes to by name or regex, else deleted', async () => {
    const c = await connect();
    const byName = new Member(c, 'cg10', 'od-name');
    const byRegex = new Member(await connect(), 'cg10', 'od-regex');
    const away = new Member(await connect(), 'cg10', 'od-static');
    assert.equal((await byName.join(['ct'])).errorCode, E.NONE);
    assert.equal((await byRegex.join([], { subscribedTopicRegex: '(^rx\\..*)' })).errorCode, E.NONE);
    assert.equal((await away.join(['other'], { instanceId: 'od-i' })).errorCode, E.NONE);
    // A static member away for now (-2) is still a member: its topics stay subscribed.
    assert.equal((await away.send(hb('cg10', 'od-static', -2, { instanceId: 'od-i' }))).errorCode, E.NONE);
    await engine.store.commitOffsets('cg10', [
      { stream: 'ct', partition: 0, offset: 3, metadata: null },
      { stream: 'rx.b', partition: 1, offset: 4, metadata: null },
      { stream: 'other', partition: 0, offset: 5, metadata: null },
    ]);
    const kept = async () => (await engine.store.listOffsets('cg10')).map((o) => `${o.stream}:${o.partition}`).sort();
    const del = (topics: Array<[string, number[]]>) =>
      c.call(OffsetDeleteApi, 0, { groupId: 'cg10', topics: topics.map(([name, ps]) => ({ name, partitions: ps.map((p) => ({ partitionIndex: p })) })) });
    const codes = (r: Awaited<ReturnType<typeof del>>) => [r.errorCode, r.topics.map((t) => [t.name, t.partitions.map((p) => p.errorCode)])];
    let r = await del([
      ['ct', [0, 1]],
      ['rx.b', [1]],
      ['other', [0]],
    ]);
    assert.deepEqual(codes(r), [
      E.NONE,
      [
        ['ct', [E.GROUP_SUBSCRIBED_TO_TOPIC, E.GROUP_SUBSCRIBED_TO_TOPIC]],
        ['rx.b', [E.GROUP_SUBSCRIBED_TO_TOPIC]],
        ['other', [E.GROUP_SUBSCRIBED_TO_TOPIC]],
      ],
    ]);
    assert.deepEqual(await kept(), ['ct:0', 'other:0', 'rx.b:1']);

    // The static member leaves for good: "other" is no one's now, its offsets go; a partition with no offset is no error.
    await away.send(hb('cg10', 'od-static', -1, { instanceId: 'od-i' }));
    r = await del([
      ['other', [0]],
      ['ct', [0]],
    ]);
    assert.deepEqual(codes(r), [
      E.NONE,
      [
        ['other', [E.NONE]],
        ['ct', [E.GROUP_SUBSCRIBED_TO_TOPIC]],
      ],
    ]);
    assert.deepEqual(await kept(), ['ct:0', 'rx.b:1']);

    // Every member gone: the group is Empty and any of its offsets may go (Kafka's ConsumerGroup accepts every state).
    await byName.send(hb('cg10', 'od-name', -1));
    await byRegex.send(hb('cg10', 'od-regex', -1));
    const dg = (await c.call(DescribeGroupsApi, 5, { groups: ['cg10'], includeAuthorizedOperations: false })).groups[0];
    assert.deepEqual([dg.groupState, dg.members.length], ['Empty', 0]);
    r = await del([
      ['ct', [0]],
      ['rx.b', [1]],
    ]);
    assert.deepEqual(codes(r), [
      E.NONE,
      [
        ['ct', [E.NONE]],
        ['rx.b', [E.NONE]],
      ],
    ]);
    assert.deepEqual(await kept(), []);
  });
});
