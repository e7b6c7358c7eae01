/**
 * Namespaces on Kafka (src/core/namespaces.ts): the names of a request are qualified by the connection's namespace
 * before its handler runs, and the names of the response are stripped (listings filtered to the namespace) before it
 * is encoded, so handlers, the group and transaction coordinators and the engine work on internal names only. One
 * translator per API that carries names; route.ts applies them.
 *
 * - topics (streams): `NamespaceNames.kafkaStream` / `kafkaOwnStream` (`t1~orders`; in `default` a name holding `~`
 *   is escaped so that it stays invalid: INVALID_TOPIC_EXCEPTION under the name the client wrote);
 * - group ids and transactional ids: `kafkaName` / `kafkaOwnName` (`$ns/t1/g`; in `default` an id spelling `$ns/`
 *   is kept apart as `$ns//<id>`, reaching nothing of a tenant's);
 * - topic ids (KIP-516) of another namespace's topic are replaced by the zero id: UNKNOWN_TOPIC_ID;
 * - error messages lose the namespace's prefixes (they name only what the client named).
 *
 * Every API that names things has a translator. The KIP-848 consumer group APIs qualify the group and the subscribed
 * topic names (a subscribed regex is matched against the namespace's own topics under their client names,
 * handlers/consumer-groups.ts); DescribeLogDirs and ElectLeaders of every partition list only the namespace's
 * topics (handlers/partition-ops.ts). ACLs are the namespace's scoped policies (handlers/acls.ts); client quotas and
 * SCRAM credentials name users, one space for the broker, behind `cluster:*`.
 */
import type { NamespaceNames } from '../../core/index.js';
import {
  ApiKey,
  ConfigResourceType,
  ZERO_UUID,
  type ConsumerGroupDescribeRequest,
  type ConsumerGroupDescribeResponse,
  type ConsumerGroupHeartbeatRequest,
  type ConsumerGroupHeartbeatResponse,
  type CreateTopicsRequest,
  type CreateTopicsResponse,
  type DeleteGroupsRequest,
  type DeleteGroupsResponse,
  type DeleteTopicsRequest,
  type DeleteTopicsResponse,
  type DescribeConfigsResponse,
  type DescribeLogDirsRequest,
  type DescribeLogDirsResponse,
  type ElectLeadersRequest,
  type ElectLeadersResponse,
  type DescribeTransactionsRequest,
  type DescribeTransactionsResponse,
  type DescribeGroupsRequest,
  type DescribeGroupsResponse,
  type FetchRequest,
  type FetchResponse,
  type FindCoordinatorRequest,
  type FindCoordinatorResponse,
  type ListGroupsResponse,
  type ListTransactionsResponse,
  type ListOffsetsRequest,
  type ListOffsetsResponse,
  type MetadataRequest,
  type MetadataResponse,
  type OffsetCommitRequest,
  type OffsetCommitResponse,
  type OffsetFetchRequest,
  type OffsetFetchResponse,
  type ProduceRequest,
  type ProduceResponse,
  type Uuid,
} from './codec/index.js';
import type { KafkaAdapter } from './adapter.js';
import { streamByTopicId } from './topic-ids.js';

/** Qualifies a decoded request in place; strips a response in place. */
export interface NamesTranslator {
  in(req: unknown, n: NamespaceNames, adapter: KafkaAdapter): void;
  out(res: unknown, n: NamespaceNames): void;
}

const stream = (n: NamespaceNames, name: string): string => n.kafkaStream(name);
/** An echoed name: the client's spelling (a name of another namespace never reaches a response unasked). */
const ownStream = (n: NamespaceNames, internal: string): string => n.kafkaOwnStream(internal) ?? internal;
const ownName = (n: NamespaceNames, internal: string): string => n.kafkaOwnName(internal) ?? internal;

/** A topic id naming another namespace's topic becomes the zero id (UNKNOWN_TOPIC_ID, as for a deleted one). */
function topicId(n: NamespaceNames, adapter: KafkaAdapter, id: Uuid | undefined): Uuid | undefined {
  if (id === undefined || id.equals(ZERO_UUID)) return id;
  const e = streamByTopicId(adapter.engine, id);
  return e === undefined || n.kafkaOwnStream(e.def.name) !== null ? id : ZERO_UUID;
}

/** An error message names only what the client named: the namespace's prefixes go. */
function message(n: NamespaceNames, m: string | null | undefined): string | null {
  if (m === null || m === undefined || n.isDefault) return m ?? null;
  return m.replaceAll(n.streamPrefix, '').replaceAll(n.topicPrefix, '');
}

function t<Req, Res>(inFn: (req: Req, n: NamespaceNames, a: KafkaAdapter) => void, outFn: (res: Res, n: NamespaceNames) => void): NamesTranslator {
  return { in: inFn as NamesTranslator['in'], out: outFn as NamesTranslator['out'] };
}

/** Topic arrays of `{ name }` in and out (ListOffsets, DeleteRecords, CreatePartitions, DescribeProducers...). */
const namedTopics = t<
  { topics: Array<{ name: string }> },
  { topics?: Array<{ name: string }>; results?: Array<{ name: string; errorMessage?: string | null }> }
>(
  (req, n) => {
    for (const x of req.topics) x.name = stream(n, x.name);
  },
  (res, n) => {
    for (const x of res.topics ?? []) x.name = ownStream(n, x.name);
    for (const x of res.results ?? []) {
      x.name = ownStream(n, x.name);
      if (x.errorMessage !== undefined) x.errorMessage = message(n, x.errorMessage);
    }
  },
);

/** A request naming one group (`groupId`) and nothing else to translate (JoinGroup, SyncGroup, Heartbeat, LeaveGroup). */
const oneGroup = t<{ groupId: string }, unknown>(
  (req, n) => {
    req.groupId = n.kafkaName(req.groupId);
  },
  () => undefined,
);

/** A request of a transaction (`transactionalId`, maybe a `groupId` and topics). */
const txn = t<
  { transactionalId: string | null; groupId?: string; topics?: Array<{ name: string }> },
  { topics?: Array<{ name: string }>; results?: Array<{ name: string }> }
>(
  (req, n) => {
    if (req.transactionalId !== null) req.transactionalId = n.kafkaName(req.transactionalId);
    if (req.groupId !== undefined) req.groupId = n.kafkaName(req.groupId);
    for (const x of req.topics ?? []) x.name = stream(n, x.name);
  },
  (res, n) => {
    for (const x of res.topics ?? []) x.name = ownStream(n, x.name);
    for (const x of res.results ?? []) x.name = ownStream(n, x.name);
  },
);

/** Config resources: topics are streams; broker resources are not named by a namespace. */
const configs = t<
  { resources: Array<{ resourceType: number; resourceName: string }> },
  Partial<DescribeConfigsResponse> & { responses?: Array<{ resourceType: number; resourceName: string; errorMessage: string | null }> }
>(
  (req, n) => {
    for (const r of req.resources) if (r.resourceType === ConfigResourceType.TOPIC) r.resourceName = stream(n, r.resourceName);
  },
  (res, n) => {
    for (const r of [...(res.results ?? []), ...(res.responses ?? [])]) {
      if (r.resourceType === ConfigResourceType.TOPIC) r.resourceName = ownStream(n, r.resourceName);
      r.errorMessage = message(n, r.errorMessage);
    }
  },
);

export const TRANSLATORS: ReadonlyMap<number, NamesTranslator> = new Map<number, NamesTranslator>([
  [
    ApiKey.Produce,
    t<ProduceRequest, ProduceResponse>(
      (req, n, a) => {
        if (req.transactionalId !== null) req.transactionalId = n.kafkaName(req.transactionalId);
        for (const x of req.topics) {
          x.name = stream(n, x.name);
          if (x.topicId !== undefined) x.topicId = topicId(n, a, x.topicId);
        }
      },
      (res, n) => {
        for (const x of res.topics) {
          x.name = ownStream(n, x.name);
          for (const p of x.partitions) if (p.errorMessage !== null) p.errorMessage = message(n, p.errorMessage);
        }
      },
    ),
  ],
  [
    ApiKey.Fetch,
    t<FetchRequest, FetchResponse>(
      (req, n, a) => {
        for (const x of [...req.topics, ...req.forgottenTopics]) {
          x.topic = stream(n, x.topic);
          if (x.topicId !== undefined) x.topicId = topicId(n, a, x.topicId);
        }
      },
      (res, n) => {
        for (const x of res.responses) x.topic = ownStream(n, x.topic);
      },
    ),
  ],
  [
    ApiKey.ListOffsets,
    t<ListOffsetsRequest, ListOffsetsResponse>(
      (req, n) => {
        for (const x of req.topics) x.name = stream(n, x.name);
      },
      (res, n) => {
        for (const x of res.topics) x.name = ownStream(n, x.name);
      },
    ),
  ],
  [
    ApiKey.Metadata,
    t<MetadataRequest, MetadataResponse>(
      (req, n, a) => {
        for (const x of req.topics ?? []) {
          if (x.name !== null) x.name = stream(n, x.name);
          x.topicId = topicId(n, a, x.topicId) ?? x.topicId;
        }
      },
      (res, n) => {
        // The listing of every topic holds only the namespace's, under the names its clients write.
        res.topics = res.topics.filter((x) => {
          if (x.name === null) return true;
          const own = n.kafkaOwnStream(x.name);
          if (own === null) return false;
          x.name = own;
          return true;
        });
      },
    ),
  ],
  [
    ApiKey.CreateTopics,
    t<CreateTopicsRequest, CreateTopicsResponse>(
      (req, n) => {
        for (const x of req.topics) x.name = stream(n, x.name);
      },
      (res, n) => {
        for (const x of res.topics) {
          x.name = ownStream(n, x.name);
          x.errorMessage = message(n, x.errorMessage);
        }
      },
    ),
  ],
  [
    ApiKey.DeleteTopics,
    t<DeleteTopicsRequest, DeleteTopicsResponse>(
      (req, n, a) => {
        req.topicNames = req.topicNames.map((x) => stream(n, x));
        for (const x of req.topics) {
          if (x.name !== null) x.name = stream(n, x.name);
          x.topicId = topicId(n, a, x.topicId) ?? x.topicId;
        }
      },
      (res, n) => {
        for (const x of res.responses) {
          if (x.name !== null) x.name = ownStream(n, x.name);
          x.errorMessage = message(n, x.errorMessage);
        }
      },
    ),
  ],
  [ApiKey.DeleteRecords, namedTopics],
  [ApiKey.CreatePartitions, namedTopics],
  [ApiKey.DescribeProducers, namedTopics],
  [
    ApiKey.OffsetForLeaderEpoch,
    t<{ topics: Array<{ topic: string }> }, { topics: Array<{ topic: string }> }>(
      (req, n) => {
        for (const x of req.topics) x.topic = stream(n, x.topic);
      },
      (res, n) => {
        for (const x of res.topics) x.topic = ownStream(n, x.topic);
      },
    ),
  ],
  [ApiKey.DescribeConfigs, configs],
  [ApiKey.AlterConfigs, configs],
  [ApiKey.IncrementalAlterConfigs, configs],
  [
    ApiKey.FindCoordinator,
    t<FindCoordinatorRequest, FindCoordinatorResponse>(
      (req, n) => {
        // Group and transaction coordinators are placed by their key: the internal one.
        req.key = n.kafkaName(req.key);
        req.coordinatorKeys = req.coordinatorKeys.map((k) => n.kafkaName(k));
      },
      (res, n) => {
        for (const c of res.coordinators) {
          c.key = ownName(n, c.key);
          c.errorMessage = message(n, c.errorMessage);
        }
        res.errorMessage = message(n, res.errorMessage);
      },
    ),
  ],
  [ApiKey.JoinGroup, oneGroup],
  [ApiKey.SyncGroup, oneGroup],
  [ApiKey.Heartbeat, oneGroup],
  [ApiKey.LeaveGroup, oneGroup],
  [
    ApiKey.OffsetCommit,
    t<OffsetCommitRequest, OffsetCommitResponse>(
      (req, n, a) => {
        req.groupId = n.kafkaName(req.groupId);
        for (const x of req.topics) {
          x.name = stream(n, x.name);
          if (x.topicId !== undefined) x.topicId = topicId(n, a, x.topicId);
        }
      },
      (res, n) => {
        for (const x of res.topics) x.name = ownStream(n, x.name);
      },
    ),
  ],
  [
    ApiKey.OffsetFetch,
    t<OffsetFetchRequest, OffsetFetchResponse>(
      (req, n, a) => {
        req.groupId = n.kafkaName(req.groupId);
        for (const x of req.topics ?? []) x.name = stream(n, x.name);
        for (const g of req.groups) {
          g.groupId = n.kafkaName(g.groupId);
          for (const x of g.topics ?? []) {
            x.name = stream(n, x.name);
            if (x.topicId !== undefined) x.topicId = topicId(n, a, x.topicId);
          }
        }
      },
      (res, n) => {
        for (const x of res.topics) x.name = ownStream(n, x.name);
        for (const g of res.groups) {
          g.groupId = ownName(n, g.groupId);
          for (const x of g.topics) x.name = ownStream(n, x.name);
        }
      },
    ),
  ],
  [
    ApiKey.DescribeGroups,
    t<DescribeGroupsRequest, DescribeGroupsResponse>(
      (req, n) => {
        req.groups = req.groups.map((g) => n.kafkaName(g));
      },
      (res, n) => {
        for (const g of res.groups) {
          g.groupId = ownName(n, g.groupId);
          if (g.errorMessage !== undefined) g.errorMessage = message(n, g.errorMessage);
        }
      },
    ),
  ],
  [
    ApiKey.ListGroups,
    t<unknown, ListGroupsResponse>(
      () => undefined,
      (res, n) => {
        // Only the namespace's groups, under their own ids.
        res.groups = res.groups.filter((g) => {
          const own = n.kafkaOwnName(g.groupId);
          if (own === null) return false;
          g.groupId = own;
          return true;
        });
      },
    ),
  ],
  [
    ApiKey.DeleteGroups,
    t<DeleteGroupsRequest, DeleteGroupsResponse>(
      (req, n) => {
        req.groupsNames = req.groupsNames.map((g) => n.kafkaName(g));
      },
      (res, n) => {
        for (const r of res.results) r.groupId = ownName(n, r.groupId);
      },
    ),
  ],
  [
    ApiKey.OffsetDelete,
    t<{ groupId: string; topics: Array<{ name: string }> }, { topics: Array<{ name: string }> }>(
      (req, n) => {
        req.groupId = n.kafkaName(req.groupId);
        for (const x of req.topics) x.name = stream(n, x.name);
      },
      (res, n) => {
        for (const x of res.topics) x.name = ownStream(n, x.name);
      },
    ),
  ],
  [
    ApiKey.DescribeTransactions,
    t<DescribeTransactionsRequest, DescribeTransactionsResponse>(
      (req, n) => {
        req.transactionalIds = req.transactionalIds.map((id) => n.kafkaName(id));
      },
      (res, n) => {
        for (const s of res.transactionStates) {
          s.transactionalId = ownName(n, s.transactionalId);
          for (const x of s.topics) x.topic = ownStream(n, x.topic);
        }
      },
    ),
  ],
  [
    ApiKey.ListTransactions,
    t<unknown, ListTransactionsResponse>(
      () => undefined,
      (res, n) => {
        // Only the namespace's transactional ids, as its clients write them.
        res.transactionStates = res.transactionStates.filter((s) => {
          const own = n.kafkaOwnName(s.transactionalId);
          if (own === null) return false;
          s.transactionalId = own;
          return true;
        });
      },
    ),
  ],
  [
    ApiKey.ConsumerGroupHeartbeat,
    t<ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse>(
      (req, n) => {
        req.groupId = n.kafkaName(req.groupId);
        if (req.subscribedTopicNames !== null) req.subscribedTopicNames = req.subscribedTopicNames.map((x) => stream(n, x));
      },
      (res, n) => {
        // The assignment names topics by id only.
        res.errorMessage = message(n, res.errorMessage);
      },
    ),
  ],
  [
    ApiKey.ConsumerGroupDescribe,
    t<ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse>(
      (req, n) => {
        req.groupIds = req.groupIds.map((g) => n.kafkaName(g));
      },
      (res, n) => {
        for (const g of res.groups) {
          g.groupId = ownName(n, g.groupId);
          g.errorMessage = message(n, g.errorMessage);
          for (const m of g.members) {
            m.subscribedTopicNames = m.subscribedTopicNames.map((x) => ownStream(n, x));
            for (const a of [m.assignment, m.targetAssignment]) for (const x of a.topicPartitions) x.topicName = ownStream(n, x.topicName);
          }
        }
      },
    ),
  ],
  [
    ApiKey.DescribeLogDirs,
    t<DescribeLogDirsRequest, DescribeLogDirsResponse>(
      (req, n) => {
        for (const x of req.topics ?? []) x.topic = stream(n, x.topic);
      },
      (res, n) => {
        // The handler lists the namespace's own topics only (every topic asked: those of the namespace).
        for (const r of res.results) for (const x of r.topics) x.name = ownStream(n, x.name);
      },
    ),
  ],
  [
    ApiKey.ElectLeaders,
    t<ElectLeadersRequest, ElectLeadersResponse>(
      (req, n) => {
        for (const x of req.topicPartitions ?? []) x.topic = stream(n, x.topic);
      },
      (res, n) => {
        for (const x of res.replicaElectionResults) {
          x.topic = ownStream(n, x.topic);
          for (const p of x.partitionResult) p.errorMessage = message(n, p.errorMessage);
        }
      },
    ),
  ],
  [ApiKey.InitProducerId, txn],
  [ApiKey.AddPartitionsToTxn, txn],
  [ApiKey.AddOffsetsToTxn, txn],
  [ApiKey.EndTxn, txn],
  [ApiKey.TxnOffsetCommit, txn],
]);
