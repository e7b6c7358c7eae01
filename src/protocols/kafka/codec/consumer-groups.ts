/**
 * The consumer group protocol (KIP-848): ConsumerGroupHeartbeat (key 68) and ConsumerGroupDescribe (key 69). Both are
 * flexible in every version.
 *
 * Version notes (from the protocol's message definitions), at the versions of Kafka 4.3, the newest release (Kafka's
 * trunk has a v2 of both with the group's creation time, KIP-1327, for 4.4):
 * - ConsumerGroupHeartbeat 0-1: v1 adds SubscribedTopicRegex and makes the member id the client's own (KIP-1082:
 *   a client-generated UUID, never empty) and INVALID_REGULAR_EXPRESSION.
 * - ConsumerGroupDescribe 0-1: v1 adds the member type (-1 unknown, 0 classic, 1 consumer; KIP-1099).
 */
import { ApiKey } from './api.js';
import type { Reader, Writer } from './primitives.js';
import { array, bool, Field, int16, int32, int8, messageApi, nullableArray, nullableString, string, struct, uuid, type ValueOf } from './schema.js';

/** Authorized operations "not requested" (INT32_MIN), the protocol's default. */
const OPS_OMITTED = -2147483648;

/** A nullable struct: an INT8 -1 for null, else 1 followed by the struct (flexible versions only). */
function nullableStruct<T>(inner: Field<T>): Field<T | null> {
  return new Field<T | null>(
    (r: Reader, v: number) => (r.int8() < 0 ? null : inner.read(r, v)),
    (w: Writer, v: number, x: T | null) => {
      if (x === null) {
        w.int8(-1);
        return;
      }
      w.int8(1);
      inner.write(w, v, x);
    },
    () => null,
  );
}

const heartbeatTopicPartitions = struct({ topicId: uuid(), partitions: array(int32()) });

export const ConsumerGroupHeartbeatApi = messageApi(
  { apiKey: ApiKey.ConsumerGroupHeartbeat, name: 'ConsumerGroupHeartbeat', minVersion: 0, maxVersion: 1, firstFlexibleVersion: 0 },
  {
    groupId: string(),
    memberId: string(),
    /** 0 joins, -1 leaves, -2 leaves for now (a static member that will come back). */
    memberEpoch: int32(),
    instanceId: nullableString(),
    rackId: nullableString(),
    /** -1: unchanged since the last heartbeat. */
    rebalanceTimeoutMs: int32().orElse(-1),
    subscribedTopicNames: nullableArray(string()),
    subscribedTopicRegex: nullableString().v(1),
    serverAssignor: nullableString(),
    /** The partitions the member owns; null: unchanged since the last heartbeat. */
    topicPartitions: nullableArray(heartbeatTopicPartitions),
  },
  {
    throttleTimeMs: int32(),
    errorCode: int16(),
    errorMessage: nullableString(),
    memberId: nullableString(),
    memberEpoch: int32(),
    heartbeatIntervalMs: int32(),
    /** null: no change to tell. */
    assignment: nullableStruct(struct({ topicPartitions: array(heartbeatTopicPartitions) })),
  },
);
export type ConsumerGroupHeartbeatRequest = ValueOf<typeof ConsumerGroupHeartbeatApi.request>;
export type ConsumerGroupHeartbeatResponse = ValueOf<typeof ConsumerGroupHeartbeatApi.response>;

const describedAssignment = struct({
  topicPartitions: array(struct({ topicId: uuid(), topicName: string(), partitions: array(int32()) })),
});

export const ConsumerGroupDescribeApi = messageApi(
  { apiKey: ApiKey.ConsumerGroupDescribe, name: 'ConsumerGroupDescribe', minVersion: 0, maxVersion: 1, firstFlexibleVersion: 0 },
  { groupIds: array(string()), includeAuthorizedOperations: bool() },
  {
    throttleTimeMs: int32(),
    groups: array(
      struct({
        errorCode: int16(),
        errorMessage: nullableString(),
        groupId: string(),
        groupState: string(),
        groupEpoch: int32(),
        assignmentEpoch: int32(),
        assignorName: string(),
        members: array(
          struct({
            memberId: string(),
            instanceId: nullableString(),
            rackId: nullableString(),
            memberEpoch: int32(),
            clientId: string(),
            clientHost: string(),
            subscribedTopicNames: array(string()),
            subscribedTopicRegex: nullableString(),
            assignment: describedAssignment,
            targetAssignment: describedAssignment,
            memberType: int8().v(1, Infinity, -1),
          }),
        ),
        authorizedOperations: int32().orElse(OPS_OMITTED),
      }),
    ),
  },
);
export type ConsumerGroupDescribeRequest = ValueOf<typeof ConsumerGroupDescribeApi.request>;
export type ConsumerGroupDescribeResponse = ValueOf<typeof ConsumerGroupDescribeApi.response>;
export type ConsumerGroupDescribed = ConsumerGroupDescribeResponse['groups'][number];
export type ConsumerGroupDescribedAssignment = ValueOf<typeof describedAssignment>;
