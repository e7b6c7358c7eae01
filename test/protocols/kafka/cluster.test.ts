/**
 * The Kafka protocol's views of a cluster, in one process: three brokers (Cluster over one MemoryClusterStore, each
 * with its own Engine and Kafka listener), a 'partition' ownership handler standing in for the streams part (each
 * engine keeps every partition locally; only the owner is asked for data, which is what is under test), raw
 * protocol clients for the exact error codes, KafkaJS for what real clients make of them. The fenced offset
 * commit runs against a real PostgreSQL (the fence is a SQL check).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import kafkajs from 'kafkajs';
import { MemoryClusterStore } from '../../../src/cluster/index.js';
import { PostgresClusterStore } from '../../../src/cluster/pg-store.js';
import { MemoryOffsetStore, encodeBatch } from '../../../src/core/index.js';
import {
  ConsumerGroupDescribeApi,
  ConsumerGroupHeartbeatApi,
  CreateTopicsApi,
  DeleteRecordsApi,
  DescribeClusterApi,
  DescribeGroupsApi,
  DeleteGroupsApi,
  LeaveGroupApi,
  FetchApi,
  FindCoordinatorApi,
  InitProducerIdApi,
  EndTxnApi,
  HeartbeatApi,
  JoinGroupApi,
  KafkaErrorCode as E,
  ListGroupsApi,
  ListOffsetsApi,
  MetadataApi,
  ZERO_UUID,
  OffsetCommitApi,
  OffsetFetchApi,
  OffsetForLeaderEpochApi,
  ProduceApi,
  SyncGroupApi,
  type ConsumerGroupHeartbeatRequest,
  type FetchRequest,
  type JoinGroupRequest,
  type OffsetCommitRequest,
  type ProduceRequest,
} from '../../../src/protocols/kafka/codec/index.js';
import { PostgresMetastore } from '../../../src/storage/metastore/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { startPostgres, type PostgresServer } from '../../helpers/postgres.js';
import { RawClient, metadataRequest as md } from './helpers.js';
import { logger, ownerOf, settle, startBroker, stopAll, type Broker } from './cluster-helpers.js';

const { Kafka, logLevel } = kafkajs;
const records = (n: number, tag = 'v') =>
  encodeBatch(Array.from({ length: n }, (_, i) => ({ key: null, value: Buffer.from(`${tag}${i}`), headers: [], timestamp: Date.now() })));
const produce = (topic: string, partition: number, n: number): ProduceRequest => ({
  transactionalId: null,
  acks: -1,
  timeoutMs: 5000,
  topics: [{ name: topic, partitions: [{ index: partition, records: records(n) }] }],
});
const fetchReq = (topic: string, partition: number, currentLeaderEpoch: number): FetchRequest => ({
  replicaId: -1,
  maxWaitMs: 0,
  minBytes: 1,
  maxBytes: 1 << 20,
  isolationLevel: 0,
  sessionId: 0,
  sessionEpoch: -1,
  topics: [{ topic, partitions: [{ partition, currentLeaderEpoch, fetchOffset: 0, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 1 << 20 }] }],
  forgottenTopics: [],
  rackId: '',
  clusterId: null,
});
const join = (groupId: string, memberId: string): JoinGroupRequest => ({
  groupId,
  sessionTimeoutMs: 10_000,
  rebalanceTimeoutMs: 2000,
  memberId,
  groupInstanceId: null,
  protocolType: 'consumer',
  protocols: [{ name: 'range', metadata: Buffer.from('m') }],
  reason: null,
});
const commit = (groupId: string, generationId: number, memberId: string, topic: string, offset: number): OffsetCommitRequest => ({
  groupId,
  generationId,
  memberId,
  groupInstanceId: null,
  retentionTimeMs: -1,
  topics: [
    { name: topic, partitions: [{ partitionIndex: 0, committedOffset: offset, committedLeaderEpoch: -1, commitTimestamp: -1, committedMetadata: null }] },
  ],
});

/** A ConsumerGroupHeartbeat (KIP-848) joining `groupId` as `memberId`, subscribed to `topic`. */
const cgJoin = (groupId: string, memberId: string, topic: string): ConsumerGroupHeartbeatRequest => ({
  groupId,
  memberId,
  memberEpoch: 0,
  instanceId: null,
  rackId: null,
  rebalanceTimeoutMs: 5000,
  subscribedTopicNames: [topic],
  subscribedTopicRegex: null,
  serverAssignor: null,
  topicPartitions: [],
});

/** Joins a one-member group at `c` (KIP-394 handshake, then SyncGroup): its member id and generation. */
async function joinAlone(c: RawClient, groupId: string): Promise<{ memberId: string; generationId: number }> {
  const first = await c.call(JoinGroupApi, 7, join(groupId, ''));
  assert.equal(first.errorCode, E.MEMBER_ID_REQUIRED);
  const j = await c.call(JoinGroupApi, 7, join(groupId, first.memberId));
  assert.equal(j.errorCode, E.NONE);
  const s = await c.call(SyncGroupApi, 5, {
    groupId,
    generationId: j.generationId,
    memberId: j.memberId,
    groupInstanceId: null,
    protocolType: 'consumer',
    protocolName: j.protocolName,
    assignments: [{ memberId: j.memberId, assignment: Buffer.alloc(0) }],
  });
  assert.equal(s.errorCode, E.NONE);
  return { memberId: j.memberId, generationId: j.generationId };
}

describe('kafka in a cluster of three brokers (one process)', () => {
  const store = new MemoryClusterStore();
  // One offset store for every broker, as the shared metastore is in a cluster.
  const offsets = new MemoryOffsetStore();
  let brokers: Broker[] = [];
  const clients: RawClient[] = [];
  const connect = async (b: Broker): Promise<RawClient> => {
    const c = await RawClient.connect(b.port);
    clients.push(c);
    return c;
  };

  before(async () => {
    for (const id of [1, 2, 3]) {
      const m = new MemoryStreams({ offsets });
      brokers.push(
        await startBroker(store, id, m, m, [
          ['ct', 6],
          ['kjs', 6],
        ]),
      );
    }
    await settle(brokers, 12);
  });
  after(async () => {
    for (const c of clients) c.close();
    await stopAll(brokers);
  });

  it("Metadata names every broker and each partition's owner as its leader, with the ownership epoch, from any broker", async () => {
    const leaders = new Set<number>();
    for (const b of brokers) {
      const c = await connect(b);
      const m = await c.call(MetadataApi, 9, md(['ct']));
      assert.deepEqual(
        m.brokers.map((x) => [x.nodeId, x.host, x.port]),
        brokers.map((x) => [x.id, '127.0.0.1', x.port]),
      );
      assert.equal(m.controllerId, 1, 'the lowest live id');
      assert.equal(m.topics[0].errorCode, E.NONE);
      for (const p of m.topics[0].partitions) {
        const owner = ownerOf(brokers, `ct/${p.partitionIndex}`);
        assert.equal(p.errorCode, E.NONE);
        assert.equal(p.leaderId, owner.id, `broker ${b.id} names the owner of ct/${p.partitionIndex}`);
        assert.equal(p.leaderEpoch, owner.held.get(`ct/${p.partitionIndex}`));
        assert.deepEqual([p.replicaNodes, p.isrNodes], [[owner.id], [owner.id]]);
        leaders.add(p.leaderId);
      }
      const dc = await c.call(DescribeClusterApi, 0, { includeClusterAuthorizedOperations: false, endpointType: 1 });
      assert.deepEqual([dc.controllerId, dc.brokers.map((x) => [x.brokerId, x.port])], [1, brokers.map((x) => [x.id, x.port])]);
    }
    assert.ok(leaders.size >= 2, `the partitions are led by several brokers (${[...leaders]})`);
  });

  it('Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and DeleteRecords are served by the leader only, under its epoch', async () => {
    const leader = ownerOf(brokers, 'ct/0');
    const other = brokers.find((b) => b !== leader)!;
    const epoch = leader.held.get('ct/0')!;
    const atLeader = await connect(leader);
    const elsewhere = await connect(other);

    const refused = await elsewhere.call(ProduceApi, 9, produce('ct', 0, 2));
    assert.equal(refused.topics[0].partitions[0].errorCode, E.NOT_LEADER_OR_FOLLOWER);
    assert.deepEqual(other.engine.offsets('ct', 0), { logStartOffset: 0, highWatermark: 0 }, 'nothing appended at a non-leader');
    const ok = await atLeader.call(ProduceApi, 9, produce('ct', 0, 3));
    assert.deepEqual([ok.topics[0].partitions[0].errorCode, ok.topics[0].partitions[0].baseOffset], [E.NONE, 0]);

    assert.equal((await elsewhere.call(FetchApi, 12, fetchReq('ct', 0, -1))).responses[0].partitions[0].errorCode, E.NOT_LEADER_OR_FOLLOWER);
    // KIP-951: from Produce v10 and Fetch v16 (by topic id, v13+) the refusal names the leader, its epoch and endpoint.
    const leaderNode = [{ nodeId: leader.id, host: '127.0.0.1', port: leader.port, rack: null }];
    const refused10 = await elsewhere.call(ProduceApi, 10, produce('ct', 0, 1));
    assert.deepEqual(refused10.topics[0].partitions[0].currentLeader, { leaderId: leader.id, leaderEpoch: epoch });
    assert.deepEqual(refused10.nodeEndpoints, leaderNode);
    const byId = fetchReq('ct', 0, -1);
    byId.topics[0].topicId = Buffer.from(other.engine.getStream('ct')!.def.id!, 'hex');
    const refused16 = await elsewhere.call(FetchApi, 16, byId);
    assert.deepEqual(
      refused16.responses[0].partitions.map((p) => [p.errorCode, p.currentLeader]),
      [[E.NOT_LEADER_OR_FOLLOWER, { leaderId: leader.id, leaderEpoch: epoch }]],
    );
    assert.deepEqual(refused16.nodeEndpoints, leaderNode);
    const f = (await atLeader.call(FetchApi, 12, fetchReq('ct', 0, epoch))).responses[0].partitions[0];
    assert.deepEqual([f.errorCode, f.highWatermark, f.records?.length], [E.NONE, 3, 1]);
    // A client whose metadata is older than the leader's epoch is fenced; one ahead of it is told to wait.
    assert.equal((await atLeader.call(FetchApi, 12, fetchReq('ct', 0, epoch - 1))).responses[0].partitions[0].errorCode, E.FENCED_LEADER_EPOCH);
    assert.equal((await atLeader.call(FetchApi, 12, fetchReq('ct', 0, epoch + 1))).responses[0].partitions[0].errorCode, E.UNKNOWN_LEADER_EPOCH);

    const lo = (c: RawClient, currentLeaderEpoch: number) =>
      c.call(ListOffsetsApi, 7, {
        replicaId: -1,
        isolationLevel: 0,
        topics: [{ name: 'ct', partitions: [{ partitionIndex: 0, currentLeaderEpoch, timestamp: -1 }] }],
      });
    assert.equal((await lo(elsewhere, -1)).topics[0].partitions[0].errorCode, E.NOT_LEADER_OR_FOLLOWER);
    const latest = (await lo(atLeader, epoch)).topics[0].partitions[0];
    assert.deepEqual([latest.errorCode, latest.offset, latest.leaderEpoch], [E.NONE, 3, epoch]);
    assert.equal((await lo(atLeader, epoch - 1)).topics[0].partitions[0].errorCode, E.FENCED_LEADER_EPOCH);

    const ofle = (c: RawClient, leaderEpoch: number) =>
      c.call(OffsetForLeaderEpochApi, 4, { replicaId: -1, topics: [{ topic: 'ct', partitions: [{ partition: 0, currentLeaderEpoch: -1, leaderEpoch }] }] });
    assert.equal((await ofle(elsewhere, epoch)).topics[0].partitions[0].errorCode, E.NOT_LEADER_OR_FOLLOWER);
    // Nothing is ever truncated by a change of leader: an earlier epoch ends at the high watermark too.
    for (const asked of [epoch, Math.max(0, epoch - 1)]) {
      const r = (await ofle(atLeader, asked)).topics[0].partitions[0];
      assert.deepEqual([r.errorCode, r.leaderEpoch, r.endOffset], [E.NONE, asked, 3]);
    }

    const dr = (c: RawClient) => c.call(DeleteRecordsApi, 2, { topics: [{ name: 'ct', partitions: [{ partitionIndex: 0, offset: 1 }] }], timeoutMs: 1000 });
    assert.equal((await dr(elsewhere)).topics[0].partitions[0].errorCode, E.NOT_LEADER_OR_FOLLOWER);
    assert.deepEqual((await dr(atLeader)).topics[0].partitions[0], { partitionIndex: 0, lowWatermark: 1, errorCode: E.NONE });
  });

  it('serves a transactional id at its placement broker only (FindCoordinator TRANSACTION names it; elsewhere NOT_COORDINATOR)', async () => {
    const id = 'tx-cluster-1';
    const coordinator = brokers.find((b) => b.id === b.cluster.placement('txn', id))!;
    for (const b of brokers) {
      const c = await connect(b);
      const fc = await c.call(FindCoordinatorApi, 3, { key: id, keyType: 1, coordinatorKeys: [] });
      assert.deepEqual([fc.errorCode, fc.nodeId, fc.port], [E.NONE, coordinator.id, coordinator.port]);
      if (b === coordinator) continue;
      const init = await c.call(InitProducerIdApi, 4, { transactionalId: id, transactionTimeoutMs: 60000, producerId: -1, producerEpoch: -1 });
      assert.equal(init.errorCode, E.NOT_COORDINATOR);
      const end = await c.call(EndTxnApi, 3, { transactionalId: id, producerId: 1, producerEpoch: 0, committed: true });
      assert.equal(end.errorCode, E.NOT_COORDINATOR);
    }
    const c = await connect(coordinator);
    const init = await c.call(InitProducerIdApi, 4, { transactionalId: id, transactionTimeoutMs: 60000, producerId: -1, producerEpoch: -1 });
    assert.deepEqual([init.errorCode, init.producerEpoch], [E.NONE, 0]);
    assert.notEqual(coordinator.cluster.owns('txn', id), null, 'the coordinator took the id');
    const again = await c.call(InitProducerIdApi, 4, { transactionalId: id, transactionTimeoutMs: 60000, producerId: -1, producerEpoch: -1 });
    assert.deepEqual([again.errorCode, again.producerId, again.producerEpoch], [E.NONE, init.producerId, 1], 'the epoch is bumped');
    const idem = await c.call(InitProducerIdApi, 4, { transactionalId: null, transactionTimeoutMs: 60000, producerId: -1, producerEpoch: -1 });
    assert.equal(idem.errorCode, E.NONE, 'idempotent producers are served');
  });

  it("FindCoordinator names the group's placement broker from every broker; the others answer NOT_COORDINATOR", async () => {
    const group = 'cg-1';
    const coordinator = brokers.find((b) => b.id === b.cluster.placement('group', group))!;
    for (const b of brokers) {
      const c = await connect(b);
      const fc = await c.call(FindCoordinatorApi, 3, { key: group, keyType: 0, coordinatorKeys: [] });
      assert.deepEqual([fc.errorCode, fc.nodeId, fc.port], [E.NONE, coordinator.id, coordinator.port]);
      if (b === coordinator) continue;
      assert.equal((await c.call(JoinGroupApi, 7, join(group, ''))).errorCode, E.NOT_COORDINATOR);
      assert.equal((await c.call(HeartbeatApi, 4, { groupId: group, generationId: 1, memberId: 'm', groupInstanceId: null })).errorCode, E.NOT_COORDINATOR);
      const oc = await c.call(OffsetCommitApi, 8, commit(group, -1, '', 'ct', 1));
      assert.equal(oc.topics[0].partitions[0].errorCode, E.NOT_COORDINATOR);
      const of = await c.call(OffsetFetchApi, 7, { groupId: group, topics: [{ name: 'ct', partitionIndexes: [0] }], requireStable: false, groups: [] });
      assert.equal(of.errorCode, E.NOT_COORDINATOR);
    }
    const c = await connect(coordinator);
    // Describing a group that does not exist takes nothing.
    const dead = (await c.call(DescribeGroupsApi, 5, { groups: [group], includeAuthorizedOperations: false })).groups[0];
    assert.deepEqual([dead.errorCode, dead.groupState], [E.NONE, 'Dead']);
    assert.equal(coordinator.cluster.owns('group', group), null, 'nothing taken before first use');
    assert.equal(await store.owner('group', group), null);
    const m = await joinAlone(c, group);
    assert.ok(coordinator.cluster.owns('group', group)! >= 1, 'the coordinator owns the group once used');
    const oc = await c.call(OffsetCommitApi, 8, commit(group, m.generationId, m.memberId, 'ct', 2));
    assert.equal(oc.topics[0].partitions[0].errorCode, E.NONE);
    // Each broker lists the groups it coordinates.
    for (const b of brokers) {
      const lg = await (await connect(b)).call(ListGroupsApi, 4, { statesFilter: [], typesFilter: [] });
      assert.equal(
        lg.groups.some((g) => g.groupId === group),
        b === coordinator,
        `broker ${b.id} lists ${group} iff it coordinates it`,
      );
    }
    // Deleted (once empty): its owner row goes too.
    assert.equal(
      (await c.call(LeaveGroupApi, 4, { groupId: group, memberId: '', members: [{ memberId: m.memberId, groupInstanceId: null, reason: null }] })).errorCode,
      E.NONE,
    );
    assert.deepEqual((await c.call(DeleteGroupsApi, 2, { groupsNames: [group] })).results, [{ groupId: group, errorCode: E.NONE }]);
    assert.equal(await store.owner('group', group), null);
    assert.equal(coordinator.cluster.owns('group', group), null);
  });

  it('a consumer-protocol group (KIP-848) is served by its placement broker, under the group ownership, as a classic one', async () => {
    const group = 'cp-1';
    const coordinator = brokers.find((b) => b.id === b.cluster.placement('group', group))!;
    for (const b of brokers) {
      if (b === coordinator) continue;
      const c = await connect(b);
      assert.equal((await c.call(ConsumerGroupHeartbeatApi, 1, cgJoin(group, 'm1', 'ct'))).errorCode, E.NOT_COORDINATOR);
      assert.equal(
        (await c.call(ConsumerGroupDescribeApi, 1, { groupIds: [group], includeAuthorizedOperations: false })).groups[0].errorCode,
        E.NOT_COORDINATOR,
      );
    }
    assert.equal(coordinator.cluster.owns('group', group), null);
    const c = await connect(coordinator);
    const j = await c.call(ConsumerGroupHeartbeatApi, 1, cgJoin(group, 'm1', 'ct'));
    assert.deepEqual([j.errorCode, j.memberEpoch, j.assignment?.topicPartitions[0].partitions], [E.NONE, 1, [0, 1, 2, 3, 4, 5]]);
    assert.ok(coordinator.cluster.owns('group', group)! >= 1, 'the coordinator owns the group once used');
    // Commits at the member epoch, fenced by the group's ownership epoch like classic ones.
    const oc = await c.call(OffsetCommitApi, 9, commit(group, 1, 'm1', 'ct', 3));
    assert.equal(oc.topics[0].partitions[0].errorCode, E.NONE);
    for (const b of brokers) {
      const lg = await (await connect(b)).call(ListGroupsApi, 5, { statesFilter: [], typesFilter: ['consumer'] });
      assert.equal(
        lg.groups.some((g) => g.groupId === group),
        b === coordinator,
        `broker ${b.id} lists ${group} iff it coordinates it`,
      );
    }
    const left = await c.call(ConsumerGroupHeartbeatApi, 1, {
      ...cgJoin(group, 'm1', 'ct'),
      memberEpoch: -1,
      rebalanceTimeoutMs: -1,
      subscribedTopicNames: null,
      topicPartitions: null,
    });
    assert.equal(left.errorCode, E.NONE);
    assert.deepEqual((await c.call(DeleteGroupsApi, 2, { groupsNames: [group] })).results, [{ groupId: group, errorCode: E.NONE }]);
    assert.equal(coordinator.cluster.owns('group', group), null);
  });

  it('CreateTopics accepts an assignment naming live brokers, refuses one naming an unknown broker', async () => {
    const c = await connect(brokers[1]);
    const topic = (name: string, brokerIds: number[][]) => ({
      name,
      numPartitions: -1,
      replicationFactor: -1,
      assignments: brokerIds.map((ids, partitionIndex) => ({ partitionIndex, brokerIds: ids })),
      configs: [],
    });
    const r = await c.call(CreateTopicsApi, 5, {
      topics: [topic('asg.ok', [[1], [3]]), topic('asg.bad', [[9]]), topic('asg.two', [[1, 2]])],
      timeoutMs: 1000,
      validateOnly: true,
    });
    assert.deepEqual(
      r.topics.map((t) => [t.name, t.errorCode]),
      [
        ['asg.ok', E.NONE],
        ['asg.bad', E.INVALID_REPLICA_ASSIGNMENT],
        ['asg.two', E.INVALID_REPLICA_ASSIGNMENT],
      ],
    );
  });

  it('KafkaJS: a group of consumers bootstrapped at three different brokers, an idempotent producer, each record once', async () => {
    const kafka = (b: Broker, clientId: string) =>
      new Kafka({ clientId, brokers: [`127.0.0.1:${b.port}`], logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 50 } });
    const group = 'kjs-group';
    const coordinator = brokers.find((b) => b.id === b.cluster.placement('group', group))!;
    const got = new Map<string, string>();
    const consumers = brokers.map((b) =>
      kafka(b, `c${b.id}`).consumer({ groupId: group, sessionTimeout: 6000, heartbeatInterval: 200, rebalanceTimeout: 3000, maxWaitTimeInMs: 100 }),
    );
    let done!: () => void;
    const all = new Promise<void>((r) => (done = r));
    const total = 60;
    try {
      for (const [i, c] of consumers.entries()) {
        await c.connect();
        await c.subscribe({ topic: 'kjs', fromBeginning: true });
        void c.run({
          eachMessage: async ({ message }) => {
            const v = message.value!.toString();
            assert.equal(got.has(v), false, `${v} consumed once`);
            got.set(v, `c${i}`);
            if (got.size === total) done();
          },
        });
      }
      // The group settles at its coordinator with the three members, whichever broker each was bootstrapped at.
      const dg = await RawClient.connect(coordinator.port);
      clients.push(dg);
      const deadline = Date.now() + 20_000;
      for (;;) {
        const d = (await dg.call(DescribeGroupsApi, 5, { groups: [group], includeAuthorizedOperations: false })).groups[0];
        if (d.groupState === 'Stable' && d.members.length === 3) break;
        assert.ok(Date.now() < deadline, `the group did not settle (${d.groupState}, ${d.members.length} members)`);
        await new Promise((r) => setTimeout(r, 50));
      }

      const producer = kafka(brokers[0], 'p').producer({ idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      for (let i = 0; i < total; i += 12) {
        await producer.send({ topic: 'kjs', acks: -1, messages: Array.from({ length: 12 }, (_, j) => ({ value: `m${i + j}`, partition: j % 6 })) });
      }
      await producer.disconnect();
      // Every record is at its partition's leader, whichever broker the producer was bootstrapped at.
      let stored = 0;
      for (let p = 0; p < 6; p++) stored += ownerOf(brokers, `kjs/${p}`).engine.offsets('kjs', p).highWatermark;
      assert.equal(stored, total);

      const timer = setTimeout(done, 20_000);
      await all;
      clearTimeout(timer);
    } finally {
      for (const c of consumers) await c.disconnect();
    }
    assert.deepEqual([...got.keys()].sort(), Array.from({ length: total }, (_, i) => `m${i}`).sort());
    assert.equal(new Set(got.values()).size, 3, 'every member consumed its share');
    assert.ok(coordinator.cluster.owns('group', group) !== null, 'the group lives at its placement broker');
  });
});

describe('kafka in a cluster: a coordinator change', () => {
  it('moves the group when its coordinator leaves: members find the new one, committed offsets are kept', async () => {
    const store = new MemoryClusterStore();
    const offsets = new MemoryOffsetStore();
    const brokers: Broker[] = [];
    for (const id of [1, 2, 3]) {
      const m = new MemoryStreams({ offsets });
      brokers.push(await startBroker(store, id, m, m, [['mv', 3]]));
    }
    const clients: RawClient[] = [];
    try {
      await settle(brokers, 3);
      const group = 'moving';
      const first = brokers.find((b) => b.id === b.cluster.placement('group', group))!;
      const a = await RawClient.connect(first.port);
      clients.push(a);
      const m = await joinAlone(a, group);
      assert.equal((await a.call(OffsetCommitApi, 8, commit(group, m.generationId, m.memberId, 'mv', 7))).topics[0].partitions[0].errorCode, E.NONE);
      const oldEpoch = first.cluster.owns('group', group)!;
      // A consumer-protocol group coordinated by the same broker.
      let cpGroup = '';
      for (let i = 0; cpGroup === ''; i++) if (first.cluster.placement('group', `moving-cp-${i}`) === first.id) cpGroup = `moving-cp-${i}`;
      const cpJoin = await a.call(ConsumerGroupHeartbeatApi, 1, cgJoin(cpGroup, 'cp-m', 'mv'));
      assert.deepEqual([cpJoin.errorCode, cpJoin.memberEpoch], [E.NONE, 1]);

      // The coordinator leaves (graceful: hands everything over).
      await first.cluster.leave();
      const rest = brokers.filter((b) => b !== first);
      await settle(rest, 3);
      // The leaver serves the group no more. Its own view (no heartbeat once leaving) still places the group
      // here, so it answers "loading" and the client retries, until the broker closes and the client asks another.
      assert.equal(first.cluster.owns('group', group), null);
      assert.equal(
        (await a.call(HeartbeatApi, 4, { groupId: group, generationId: m.generationId, memberId: m.memberId, groupInstanceId: null })).errorCode,
        E.COORDINATOR_LOAD_IN_PROGRESS,
      );
      // Metadata elsewhere no longer names the leaver; FindCoordinator names the new placement.
      const b = await RawClient.connect(rest[0].port);
      clients.push(b);
      const meta = await b.call(MetadataApi, 9, md(['mv']));
      assert.deepEqual(
        meta.brokers.map((x) => x.nodeId),
        rest.map((x) => x.id),
      );
      for (const p of meta.topics[0].partitions) assert.notEqual(p.leaderId, first.id);
      const fc = await b.call(FindCoordinatorApi, 3, { key: group, keyType: 0, coordinatorKeys: [] });
      const next = rest.find((x) => x.id === fc.nodeId);
      assert.ok(next, `a remaining broker coordinates (${fc.nodeId})`);
      const c = await RawClient.connect(next.port);
      clients.push(c);
      // The old member is unknown there: it rejoins, and finds its committed offset.
      assert.equal(
        (await c.call(HeartbeatApi, 4, { groupId: group, generationId: m.generationId, memberId: m.memberId, groupInstanceId: null })).errorCode,
        E.UNKNOWN_MEMBER_ID,
      );
      await joinAlone(c, group);
      assert.ok(next.cluster.owns('group', group)! > oldEpoch, 'a later epoch');
      // The consumer-protocol member too: unknown at its new coordinator, it joins again there.
      const cpNext = rest.find((x) => x.id === x.cluster.placement('group', cpGroup))!;
      const d = await RawClient.connect(cpNext.port);
      clients.push(d);
      const beat = await d.call(ConsumerGroupHeartbeatApi, 1, {
        ...cgJoin(cpGroup, 'cp-m', 'mv'),
        memberEpoch: 1,
        rebalanceTimeoutMs: -1,
        subscribedTopicNames: null,
        topicPartitions: null,
      });
      assert.equal(beat.errorCode, E.UNKNOWN_MEMBER_ID);
      const rejoined = await d.call(ConsumerGroupHeartbeatApi, 1, cgJoin(cpGroup, 'cp-m', 'mv'));
      assert.deepEqual([rejoined.errorCode, rejoined.assignment?.topicPartitions[0].partitions], [E.NONE, [0, 1, 2]]);
      const of = await c.call(OffsetFetchApi, 7, { groupId: group, topics: [{ name: 'mv', partitionIndexes: [0] }], requireStable: false, groups: [] });
      assert.deepEqual([of.errorCode, of.topics[0].partitions[0].committedOffset], [E.NONE, 7]);
    } finally {
      for (const c of clients) c.close();
      await stopAll(brokers);
    }
  });
});

describe('kafka in a cluster: offset commits fenced by the group epoch (PostgreSQL)', () => {
  let server: PostgresServer;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server.stop();
  });

  it('a coordinator whose group was taken over cannot commit any more, and stops serving the group', async () => {
    const url = await server.createDatabase();
    const clusterStore = await PostgresClusterStore.open({ url, poolSize: 2, logger });
    const metas: PostgresMetastore[] = [];
    const brokers: Broker[] = [];
    const clients: RawClient[] = [];
    try {
      for (const id of [1, 2]) {
        const meta = await PostgresMetastore.open({ url, poolSize: 2 });
        metas.push(meta);
        // Records in memory, the catalog and offsets in PostgreSQL (shared by both brokers).
        brokers.push(await startBroker(clusterStore, id, new MemoryStreams(), meta, [['fx', 1]]));
      }
      await settle(brokers, 1);
      // Topic ids come from the shared metastore: every broker reports the same one (KIP-516).
      const storedId = (await metas[0].listStreams()).find((d) => d.name === 'fx')?.id;
      assert.match(String(storedId), /^[0-9a-f]{32}$/);
      for (const b of brokers) {
        const mc = await RawClient.connect(b.port);
        clients.push(mc);
        const md = await mc.call(MetadataApi, 12, {
          topics: [{ topicId: ZERO_UUID, name: 'fx' }],
          allowAutoTopicCreation: false,
          includeClusterAuthorizedOperations: false,
          includeTopicAuthorizedOperations: false,
        });
        assert.equal(md.topics[0].topicId.toString('hex'), storedId, `broker ${b.id} reports the stored topic id`);
      }
      const group = 'fenced-group';
      const coord = brokers.find((b) => b.id === b.cluster.placement('group', group))!;
      const other = brokers.find((b) => b !== coord)!;
      const c = await RawClient.connect(coord.port);
      clients.push(c);
      const m = await joinAlone(c, group);
      assert.equal((await c.call(OffsetCommitApi, 8, commit(group, m.generationId, m.memberId, 'fx', 5))).topics[0].partitions[0].errorCode, E.NONE);
      const epoch = coord.cluster.owns('group', group)!;

      // Another broker takes the group while the coordinator still believes it owns it (a paused process, a
      // partition from the database): its owner row moves to a later epoch.
      const row = await clusterStore.claim('group', group, other.id, other.cluster.incarnation, { force: true });
      assert.ok(row.epoch > epoch);
      assert.equal(coord.cluster.owns('group', group), epoch, 'the old coordinator has not noticed');

      const late = await c.call(OffsetCommitApi, 8, commit(group, m.generationId, m.memberId, 'fx', 9));
      assert.equal(late.topics[0].partitions[0].errorCode, E.NOT_COORDINATOR, 'the late commit is refused');
      assert.equal((await metas[0].fetchOffset(group, 'fx', 0))?.offset, 5, 'the committed offset is the last one the owner could commit');
      // The fenced broker stops serving the group at once.
      assert.equal(coord.cluster.owns('group', group), null);
      // Placement still gives it this broker, but another live one holds it: "loading" until that one hands it back.
      assert.equal(
        (await c.call(HeartbeatApi, 4, { groupId: group, generationId: m.generationId, memberId: m.memberId, groupInstanceId: null })).errorCode,
        E.COORDINATOR_LOAD_IN_PROGRESS,
      );
    } finally {
      for (const c of clients) c.close();
      await stopAll(brokers);
      for (const meta of metas) await meta.close();
      await clusterStore.close();
    }
  });

  it('a transaction coordinator whose transactional id was taken over cannot write its state any more', async () => {
    const url = await server.createDatabase();
    const clusterStore = await PostgresClusterStore.open({ url, poolSize: 2, logger });
    const metas: PostgresMetastore[] = [];
    const brokers: Broker[] = [];
    const clients: RawClient[] = [];
    try {
      for (const id of [1, 2]) {
        const meta = await PostgresMetastore.open({ url, poolSize: 2 });
        metas.push(meta);
        brokers.push(await startBroker(clusterStore, id, new MemoryStreams(), meta, [['tfx', 1]]));
      }
      await settle(brokers, 1);
      const id = 'fenced-txn';
      const coord = brokers.find((b) => b.id === b.cluster.placement('txn', id))!;
      const other = brokers.find((b) => b !== coord)!;
      const c = await RawClient.connect(coord.port);
      clients.push(c);
      const init = (producerEpoch: number) => c.call(InitProducerIdApi, 4, { transactionalId: id, transactionTimeoutMs: 60000, producerId: -1, producerEpoch });
      assert.equal((await init(-1)).errorCode, E.NONE);
      const epoch = coord.cluster.owns('txn', id)!;
      const stored = async () => (await metas[0].getControl('txn', id))?.data.producerEpoch;
      assert.equal(await stored(), 0);

      // Another broker takes the id while the coordinator still believes it owns it.
      const row = await clusterStore.claim('txn', id, other.id, other.cluster.incarnation, { force: true });
      assert.ok(row.epoch > epoch);
      assert.equal(coord.cluster.owns('txn', id), epoch, 'the old coordinator has not noticed');
      const late = await init(-1);
      assert.equal(late.errorCode, E.NOT_COORDINATOR, 'the late InitProducerId is refused');
      assert.equal(await stored(), 0, 'its epoch bump was not written');
      assert.equal(coord.cluster.owns('txn', id), null, 'the fenced broker stops coordinating the id');
    } finally {
      for (const x of clients) x.close();
      await stopAll(brokers);
      for (const m of metas) await m.close();
      await clusterStore.close();
    }
  });
});
