/**
 * The classic consumer-group protocol (KIP-62 and its successors): FindCoordinator, JoinGroup, SyncGroup,
 * Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups.
 *
 * Version notes (from the protocol's message definitions):
 * - FindCoordinator 0-6: v1 key type and error message; v3 flexible; v4 batches keys (KIP-699); v5 adds no field
 *   (TRANSACTION_ABORTABLE, KIP-890); v6 the share-group key type 2 (KIP-932).
 * - JoinGroup 0-9: v1 rebalance timeout; v2 throttle time; v4 MEMBER_ID_REQUIRED (KIP-394); v5 static
 *   membership (KIP-345); v6 flexible; v7 protocol type/name in the response; v8 reason (KIP-800); v9 skip
 *   assignment.
 * - SyncGroup 0-5: v3 group instance id; v4 flexible; v5 protocol type and name (KIP-559).
 * - Heartbeat 0-4: v3 group instance id; v4 flexible.
 * - LeaveGroup 0-5: v3 leaves several members at once (KIP-345); v4 flexible; v5 reason.
 * - OffsetCommit 0-10: v1 generation, member and per-partition commit timestamp; v2-4 retention time; v3
 *   throttle time; v6 leader epoch; v7 group instance id; v8 flexible; v9 the same (the generation is a member
 *   epoch for KIP-848 groups); v10 topic ids instead of names.
 * - OffsetFetch 0-10: v2 null topics = all, top-level error; v3 throttle; v5 leader epoch; v6 flexible;
 *   v7 require_stable (KIP-447); v8 several groups per request (KIP-709); v9 member id and epoch (KIP-848);
 *   v10 topic ids instead of names.
 * - DescribeGroups 0-6: v1 throttle; v3 authorized operations; v4 group instance id; v5 flexible; v6 an error
 *   message, and GROUP_ID_NOT_FOUND for an unknown group (KIP-1043).
 * - ListGroups 0-5: v1 throttle; v3 flexible; v4 state filter (KIP-518); v5 type filter and group type (KIP-848).
 * - DeleteGroups 0-2: v2 flexible.
 */
import { ApiKey } from './api.js';
import {
  array,
  arrayNullableFrom,
  bool,
  bytes,
  int16,
  int32,
  int64,
  int8,
  messageApi,
  nullableArray,
  nullableString,
  string,
  stringNullableFrom,
  struct,
  uuid,
  type ValueOf,
} from './schema.js';

/** Authorized operations "not requested" (INT32_MIN), the protocol's default. */
const OPS_OMITTED = -2147483648;

export const FindCoordinatorApi = messageApi(
  { apiKey: ApiKey.FindCoordinator, name: 'FindCoordinator', minVersion: 0, maxVersion: 6, firstFlexibleVersion: 3 },
  {
    key: string().v(0, 3),
    /** 0 group, 1 transaction, 2 share group (v6+). */
    keyType: int8().v(1),
    coordinatorKeys: array(string()).v(4),
  },
  {
    throttleTimeMs: int32().v(1),
    errorCode: int16().v(0, 3),
    errorMessage: nullableString().v(1, 3),
    nodeId: int32().v(0, 3),
    host: string().v(0, 3),
    port: int32().v(0, 3),
    coordinators: array(
      struct({
        key: string(),
        nodeId: int32(),
        host: string(),
        port: int32(),
        errorCode: int16(),
        errorMessage: nullableString(),
      }),
    ).v(4),
  },
);
export type FindCoordinatorRequest = ValueOf<typeof FindCoordinatorApi.request>;
export type FindCoordinatorResponse = ValueOf<typeof FindCoordinatorApi.response>;

export const JoinGroupApi = messageApi(
  { apiKey: ApiKey.JoinGroup, name: 'JoinGroup', minVersion: 0, maxVersion: 9, firstFlexibleVersion: 6 },
  {
    groupId: string(),
    sessionTimeoutMs: int32(),
    /** v0: the session timeout is also the rebalance timeout (-1 here says "not given"). */
    rebalanceTimeoutMs: int32().v(1, Infinity, -1),
    memberId: string(),
    groupInstanceId: nullableString().v(5),
    protocolType: string(),
    protocols: array(struct({ name: string(), metadata: bytes() })),
    reason: nullableString().v(8),
  },
  {
    throttleTimeMs: int32().v(2),
    errorCode: int16(),
    generationId: int32().orElse(-1),
    protocolType: nullableString().v(7),
    protocolName: stringNullableFrom(7),
    leader: string(),
    skipAssignment: bool().v(9),
    memberId: string(),
    members: array(struct({ memberId: string(), groupInstanceId: nullableString().v(5), metadata: bytes() })),
  },
);
export type JoinGroupRequest = ValueOf<typeof JoinGroupApi.request>;
export type JoinGroupResponse = ValueOf<typeof JoinGroupApi.response>;

export const SyncGroupApi = messageApi(
  { apiKey: ApiKey.SyncGroup, name: 'SyncGroup', minVersion: 0, maxVersion: 5, firstFlexibleVersion: 4 },
  {
    groupId: string(),
    generationId: int32(),
    memberId: string(),
    groupInstanceId: nullableString().v(3),
    protocolType: nullableString().v(5),
    protocolName: nullableString().v(5),
    assignments: array(struct({ memberId: string(), assignment: bytes() })),
  },
  {
    throttleTimeMs: int32().v(1),
    errorCode: int16(),
    protocolType: nullableString().v(5),
    protocolName: nullableString().v(5),
    assignment: bytes(),
  },
);
export type SyncGroupRequest = ValueOf<typeof SyncGroupApi.request>;
export type SyncGroupResponse = ValueOf<typeof SyncGroupApi.response>;

export const HeartbeatApi = messageApi(
  { apiKey: ApiKey.Heartbeat, name: 'Heartbeat', minVersion: 0, maxVersion: 4, firstFlexibleVersion: 4 },
  { groupId: string(), generationId: int32(), memberId: string(), groupInstanceId: nullableString().v(3) },
  { throttleTimeMs: int32().v(1), errorCode: int16() },
);
export type HeartbeatRequest = ValueOf<typeof HeartbeatApi.request>;
export type HeartbeatResponse = ValueOf<typeof HeartbeatApi.response>;

export const LeaveGroupApi = messageApi(
  { apiKey: ApiKey.LeaveGroup, name: 'LeaveGroup', minVersion: 0, maxVersion: 5, firstFlexibleVersion: 4 },
  {
    groupId: string(),
    memberId: string().v(0, 2),
    members: array(struct({ memberId: string(), groupInstanceId: nullableString(), reason: nullableString().v(5) })).v(3),
  },
  {
    throttleTimeMs: int32().v(1),
    errorCode: int16(),
    members: array(struct({ memberId: string(), groupInstanceId: nullableString(), errorCode: int16() })).v(3),
  },
);
export type LeaveGroupRequest = ValueOf<typeof LeaveGroupApi.request>;
export type LeaveGroupResponse = ValueOf<typeof LeaveGroupApi.response>;

export const OffsetCommitApi = messageApi(
  { apiKey: ApiKey.OffsetCommit, name: 'OffsetCommit', minVersion: 0, maxVersion: 10, firstFlexibleVersion: 8 },
  {
    groupId: string(),
    generationId: int32().v(1, Infinity, -1),
    memberId: string().v(1),
    groupInstanceId: nullableString().v(7),
    retentionTimeMs: int64().v(2, 4, -1),
    topics: array(
      struct({
        name: string().v(0, 9),
        topicId: uuid().v(10).optional(),
        partitions: array(
          struct({
            partitionIndex: int32(),
            committedOffset: int64(),
            committedLeaderEpoch: int32().v(6, Infinity, -1),
            commitTimestamp: int64().v(1, 1, -1),
            committedMetadata: nullableString(),
          }),
        ),
      }),
    ),
  },
  {
    throttleTimeMs: int32().v(3),
    topics: array(
      struct({ name: string().v(0, 9), topicId: uuid().v(10).optional(), partitions: array(struct({ partitionIndex: int32(), errorCode: int16() })) }),
    ),
  },
);
export type OffsetCommitRequest = ValueOf<typeof OffsetCommitApi.request>;
export type OffsetCommitResponse = ValueOf<typeof OffsetCommitApi.response>;

const offsetFetchPartition = struct({
  partitionIndex: int32(),
  committedOffset: int64(),
  committedLeaderEpoch: int32().v(5, Infinity, -1),
  metadata: nullableString(),
  errorCode: int16(),
});

export const OffsetFetchApi = messageApi(
  { apiKey: ApiKey.OffsetFetch, name: 'OffsetFetch', minVersion: 0, maxVersion: 10, firstFlexibleVersion: 6 },
  {
    groupId: string().v(0, 7),
    topics: arrayNullableFrom(2, struct({ name: string(), partitionIndexes: array(int32()) })).v(0, 7),
    groups: array(
      struct({
        groupId: string(),
        memberId: nullableString().v(9).optional(),
        memberEpoch: int32().v(9, Infinity, -1).optional(),
        topics: nullableArray(struct({ name: string().v(8, 9), topicId: uuid().v(10).optional(), partitionIndexes: array(int32()) })),
      }),
    ).v(8),
    requireStable: bool().v(7),
  },
  {
    throttleTimeMs: int32().v(3),
    topics: array(struct({ name: string(), partitions: array(offsetFetchPartition) })).v(0, 7),
    errorCode: int16().v(2, 7),
    groups: array(
      struct({
        groupId: string(),
        topics: array(struct({ name: string().v(8, 9), topicId: uuid().v(10).optional(), partitions: array(offsetFetchPartition) })),
        errorCode: int16(),
      }),
    ).v(8),
  },
);
export type OffsetFetchRequest = ValueOf<typeof OffsetFetchApi.request>;
export type OffsetFetchResponse = ValueOf<typeof OffsetFetchApi.response>;
export type OffsetFetchPartitionResponse = ValueOf<typeof offsetFetchPartition>;

export const DescribeGroupsApi = messageApi(
  { apiKey: ApiKey.DescribeGroups, name: 'DescribeGroups', minVersion: 0, maxVersion: 6, firstFlexibleVersion: 5 },
  { groups: array(string()), includeAuthorizedOperations: bool().v(3) },
  {
    throttleTimeMs: int32().v(1),
    groups: array(
      struct({
        errorCode: int16(),
        errorMessage: nullableString().v(6).optional(),
        groupId: string(),
        groupState: string(),
        protocolType: string(),
        protocolData: string(),
        members: array(
          struct({
            memberId: string(),
            groupInstanceId: nullableString().v(4),
            clientId: string(),
            clientHost: string(),
            memberMetadata: bytes(),
            memberAssignment: bytes(),
          }),
        ),
        authorizedOperations: int32().v(3, Infinity, OPS_OMITTED),
      }),
    ),
  },
);
export type DescribeGroupsRequest = ValueOf<typeof DescribeGroupsApi.request>;
export type DescribeGroupsResponse = ValueOf<typeof DescribeGroupsApi.response>;
export type DescribedGroup = DescribeGroupsResponse['groups'][number];

export const ListGroupsApi = messageApi(
  { apiKey: ApiKey.ListGroups, name: 'ListGroups', minVersion: 0, maxVersion: 5, firstFlexibleVersion: 3 },
  { statesFilter: array(string()).v(4), typesFilter: array(string()).v(5).optional() },
  {
    throttleTimeMs: int32().v(1),
    errorCode: int16(),
    groups: array(struct({ groupId: string(), protocolType: string(), groupState: string().v(4), groupType: string().v(5).optional() })),
  },
);
export type ListGroupsRequest = ValueOf<typeof ListGroupsApi.request>;
export type ListGroupsResponse = ValueOf<typeof ListGroupsApi.response>;

export const DeleteGroupsApi = messageApi(
  { apiKey: ApiKey.DeleteGroups, name: 'DeleteGroups', minVersion: 0, maxVersion: 2, firstFlexibleVersion: 2 },
  { groupsNames: array(string()) },
  { throttleTimeMs: int32(), results: array(struct({ groupId: string(), errorCode: int16() })) },
);
export type DeleteGroupsRequest = ValueOf<typeof DeleteGroupsApi.request>;
export type DeleteGroupsResponse = ValueOf<typeof DeleteGroupsApi.response>;
