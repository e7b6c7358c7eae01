/**
 * The consumer group protocol's APIs (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe, translated to the
 * consumer-protocol coordinator (groups/consumer-coordinator.ts). Authorization as Kafka's KafkaApis: the group
 * (`subscribe group:`, `describe group:` to describe), and the subscribed topic names (`describe stream:`, else
 * TOPIC_AUTHORIZATION_FAILED); topics a regex brings in are only those the member may describe. In a cluster the
 * group's coordinator serves it, under the same ownership gate as the classic APIs (handlers/groups.ts).
 * Namespaces: route.ts qualifies the group id and topic names (namespaces.ts); a regex is matched against the
 * connection's namespace's own topics by the names its clients write.
 */
import {
  KafkaErrorCode,
  type ConsumerGroupDescribeRequest,
  type ConsumerGroupDescribeResponse,
  type ConsumerGroupDescribed,
  type ConsumerGroupDescribedAssignment,
  type ConsumerGroupHeartbeatRequest,
  type ConsumerGroupHeartbeatResponse,
} from '../codec/index.js';
import type { RequestContext } from '../route.js';
import { allowed, visible } from '../authz.js';
import type { Assignment } from '../groups/reconcile.js';
import { clientHost, gated, mayUseGroup } from './groups.js';

const OPS_OMITTED = -2147483648;
/** ConsumerGroupDescribe v1+: the member uses the consumer protocol. */
const MEMBER_TYPE_CONSUMER = 1;

function hex(id: Buffer): string {
  return id.toString('hex');
}

function heartbeatError(errorCode: number, errorMessage: string | null = null): ConsumerGroupHeartbeatResponse {
  return { throttleTimeMs: 0, errorCode, errorMessage, memberId: null, memberEpoch: -1, heartbeatIntervalMs: 0, assignment: null };
}

function wireAssignment(a: Assignment): Array<{ topicId: Buffer; partitions: number[] }> {
  return [...a].map(([t, ps]) => ({ topicId: Buffer.from(t, 'hex'), partitions: [...ps].sort((x, y) => x - y) }));
}

export function handleConsumerGroupHeartbeat(
  ctx: RequestContext,
  req: ConsumerGroupHeartbeatRequest,
): ConsumerGroupHeartbeatResponse | Promise<ConsumerGroupHeartbeatResponse> {
  if (!mayUseGroup(ctx, req.groupId)) return heartbeatError(KafkaErrorCode.GROUP_AUTHORIZATION_FAILED);
  if (req.subscribedTopicNames !== null && req.subscribedTopicNames.some((t) => !allowed(ctx, 'describe', 'stream', t))) {
    return heartbeatError(KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED);
  }
  return gated(
    ctx,
    req.groupId,
    (errorCode) => heartbeatError(errorCode),
    () => {
      const r = ctx.adapter.groups.consumer.heartbeat({
        apiVersion: ctx.header.apiVersion,
        groupId: req.groupId,
        memberId: req.memberId,
        memberEpoch: req.memberEpoch,
        instanceId: req.instanceId,
        rackId: req.rackId,
        rebalanceTimeoutMs: req.rebalanceTimeoutMs,
        subscribedTopicNames: req.subscribedTopicNames,
        subscribedTopicRegex: req.subscribedTopicRegex,
        serverAssignor: req.serverAssignor,
        owned: req.topicPartitions === null ? null : req.topicPartitions.map((t) => ({ topicId: hex(t.topicId), partitions: t.partitions })),
        clientId: ctx.header.clientId ?? '',
        clientHost: clientHost(ctx),
        mayRead: (topic) => visible(ctx, 'describe', 'stream', topic),
        // A regex matches the namespace's own topics, under the names its clients write (`default`: not a tenant's).
        nameOf: (topic) => ctx.conn.names.kafkaOwnStream(topic),
      });
      if (r.errorCode !== KafkaErrorCode.NONE && r.errorCode !== KafkaErrorCode.UNKNOWN_MEMBER_ID && r.errorCode !== KafkaErrorCode.FENCED_MEMBER_EPOCH) {
        ctx.conn.limitedLog(
          'info',
          { group: req.groupId, member: req.memberId, errorCode: r.errorCode, reason: r.errorMessage },
          'consumer group heartbeat refused',
        );
      }
      return {
        throttleTimeMs: 0,
        errorCode: r.errorCode,
        errorMessage: r.errorMessage,
        memberId: r.memberId,
        memberEpoch: r.memberEpoch,
        heartbeatIntervalMs: r.heartbeatIntervalMs,
        assignment: r.assignment === null ? null : { topicPartitions: wireAssignment(r.assignment) },
      };
    },
  );
}

export function handleConsumerGroupDescribe(ctx: RequestContext, req: ConsumerGroupDescribeRequest): ConsumerGroupDescribeResponse {
  const { groups } = ctx.adapter;
  const describeAssignment = (a: Assignment): ConsumerGroupDescribedAssignment => ({
    topicPartitions: [...a].flatMap(([t, ps]) => {
      const topic = ctx.adapter.engine.getAnyStreamById(t);
      return topic ? [{ topicId: Buffer.from(t, 'hex'), topicName: topic.def.name, partitions: [...ps].sort((x, y) => x - y) }] : [];
    }),
  });
  const out = req.groupIds.map((groupId): ConsumerGroupDescribed => {
    const base: ConsumerGroupDescribed = {
      errorCode: KafkaErrorCode.NONE,
      errorMessage: null,
      groupId,
      groupState: '',
      groupEpoch: -1,
      assignmentEpoch: -1,
      assignorName: '',
      members: [],
      authorizedOperations: OPS_OMITTED,
    };
    if (groupId === '') return { ...base, errorCode: KafkaErrorCode.INVALID_GROUP_ID };
    if (!allowed(ctx, 'describe', 'group', groupId)) return { ...base, errorCode: KafkaErrorCode.GROUP_AUTHORIZATION_FAILED };
    const served = ctx.adapter.cluster?.reads(groupId) ?? KafkaErrorCode.NONE;
    if (served !== KafkaErrorCode.NONE) return { ...base, errorCode: served };
    const d = groups.consumer.describe(groupId);
    if (!d) {
      // A classic group (or none): clients then ask DescribeGroups, as librdkafka does on this error.
      const classic = groups.describe(groupId) !== null;
      return {
        ...base,
        errorCode: KafkaErrorCode.GROUP_ID_NOT_FOUND,
        errorMessage: classic ? `Group ${groupId} is not a consumer group.` : `Group ${groupId} not found.`,
      };
    }
    // As Kafka (4.1+): a client that may not describe one of the topics involved may not describe the group.
    const topics = new Set<string>();
    for (const m of d.members) {
      for (const t of m.subscribedTopicNames) topics.add(t);
      for (const a of [m.assignment, m.targetAssignment]) for (const id of a.keys()) topics.add(ctx.adapter.engine.getAnyStreamById(id)?.def.name ?? '');
    }
    topics.delete('');
    if ([...topics].some((t) => !visible(ctx, 'describe', 'stream', t))) return { ...base, errorCode: KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED };
    return {
      ...base,
      groupState: d.state,
      groupEpoch: d.groupEpoch,
      assignmentEpoch: d.assignmentEpoch,
      assignorName: d.assignorName,
      members: d.members.map((m) => ({
        memberId: m.memberId,
        instanceId: m.instanceId,
        rackId: m.rackId,
        memberEpoch: m.memberEpoch,
        clientId: m.clientId,
        clientHost: m.clientHost,
        subscribedTopicNames: m.subscribedTopicNames,
        subscribedTopicRegex: m.subscribedTopicRegex,
        assignment: describeAssignment(m.assignment),
        targetAssignment: describeAssignment(m.targetAssignment),
        memberType: MEMBER_TYPE_CONSUMER,
      })),
    };
  });
  return { throttleTimeMs: 0, groups: out };
}
