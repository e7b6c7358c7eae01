/**
 * Administration, producer-id, authentication and cluster APIs, described with the message schema.
 *
 * Version notes (from the protocol's message definitions):
 * - CreateTopics 0-7: v1 validate_only and error messages; v2 throttle; v5 flexible and the created topic's
 *   partitions, replication factor and configs in the response (KIP-525); v7 topic ids (KIP-516).
 * - DeleteTopics 0-6: v1 throttle; v4 flexible; v5 error message; v6 topics by name or id.
 * - CreatePartitions 0-3: v2 flexible.
 * - DeleteRecords 0-2: v2 flexible.
 * - DescribeConfigs 0-4: v1 synonyms and config source; v3 type and documentation (KIP-569); v4 flexible.
 * - AlterConfigs 0-2, IncrementalAlterConfigs 0-1 (KIP-339): last version flexible.
 * - InitProducerId 0-5: v2 flexible; v3 current producer id and epoch (KIP-360); v4 PRODUCER_FENCED; v5 adds no
 *   field (TRANSACTION_ABORTABLE, KIP-890). v6 (two-phase commit, KIP-939) is not yet a stable Kafka version.
 * - SaslHandshake 0-1: v1 means the tokens then travel in SaslAuthenticate requests (KIP-152).
 * - SaslAuthenticate 0-2: v1 session lifetime (KIP-368); v2 flexible.
 * - DescribeCluster 0-2 (KIP-700): always flexible; v1 endpoint type (KIP-919); v2 fenced brokers (KIP-1073).
 * - OffsetForLeaderEpoch 0-4 (KIP-101, KIP-320): v1 leader epoch in the response; v2 current leader epoch and
 *   throttle; v3 replica id; v4 flexible.
 */
import { ApiKey } from './api.js';
import {
  array,
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

const createdConfig = struct({
  name: string(),
  value: nullableString(),
  readOnly: bool(),
  configSource: int8(),
  isSensitive: bool(),
});

export const CreateTopicsApi = messageApi(
  { apiKey: ApiKey.CreateTopics, name: 'CreateTopics', minVersion: 0, maxVersion: 7, firstFlexibleVersion: 5 },
  {
    topics: array(
      struct({
        name: string(),
        /** -1: the broker's default (KIP-464). */
        numPartitions: int32(),
        replicationFactor: int16(),
        assignments: array(struct({ partitionIndex: int32(), brokerIds: array(int32()) })),
        configs: array(struct({ name: string(), value: nullableString() })),
      }),
    ),
    timeoutMs: int32(),
    validateOnly: bool().v(1),
  },
  {
    throttleTimeMs: int32().v(2),
    topics: array(
      struct({
        name: string(),
        topicId: uuid().v(7),
        errorCode: int16(),
        errorMessage: nullableString().v(1),
        numPartitions: int32().v(5, Infinity, -1),
        replicationFactor: int16().v(5, Infinity, -1),
        configs: nullableArray(createdConfig).v(5),
      }),
    ),
  },
);
export type CreateTopicsRequest = ValueOf<typeof CreateTopicsApi.request>;
export type CreateTopicsResponse = ValueOf<typeof CreateTopicsApi.response>;

export const DeleteTopicsApi = messageApi(
  { apiKey: ApiKey.DeleteTopics, name: 'DeleteTopics', minVersion: 0, maxVersion: 6, firstFlexibleVersion: 4 },
  {
    topics: array(struct({ name: nullableString(), topicId: uuid() })).v(6),
    topicNames: array(string()).v(0, 5),
    timeoutMs: int32(),
  },
  {
    throttleTimeMs: int32().v(1),
    responses: array(
      struct({
        name: stringNullableFrom(6),
        topicId: uuid().v(6),
        errorCode: int16(),
        errorMessage: nullableString().v(5),
      }),
    ),
  },
);
export type DeleteTopicsRequest = ValueOf<typeof DeleteTopicsApi.request>;
export type DeleteTopicsResponse = ValueOf<typeof DeleteTopicsApi.response>;

export const CreatePartitionsApi = messageApi(
  { apiKey: ApiKey.CreatePartitions, name: 'CreatePartitions', minVersion: 0, maxVersion: 3, firstFlexibleVersion: 2 },
  {
    topics: array(struct({ name: string(), count: int32(), assignments: nullableArray(struct({ brokerIds: array(int32()) })) })),
    timeoutMs: int32(),
    validateOnly: bool(),
  },
  { throttleTimeMs: int32(), results: array(struct({ name: string(), errorCode: int16(), errorMessage: nullableString() })) },
);
export type CreatePartitionsRequest = ValueOf<typeof CreatePartitionsApi.request>;
export type CreatePartitionsResponse = ValueOf<typeof CreatePartitionsApi.response>;

export const DeleteRecordsApi = messageApi(
  { apiKey: ApiKey.DeleteRecords, name: 'DeleteRecords', minVersion: 0, maxVersion: 2, firstFlexibleVersion: 2 },
  {
    topics: array(struct({ name: string(), partitions: array(struct({ partitionIndex: int32(), offset: int64() })) })),
    timeoutMs: int32(),
  },
  {
    throttleTimeMs: int32(),
    topics: array(
      struct({
        name: string(),
        partitions: array(struct({ partitionIndex: int32(), lowWatermark: int64(), errorCode: int16() })),
      }),
    ),
  },
);
export type DeleteRecordsRequest = ValueOf<typeof DeleteRecordsApi.request>;
export type DeleteRecordsResponse = ValueOf<typeof DeleteRecordsApi.response>;

/** Config resource types (org.apache.kafka.common.config.ConfigResource.Type). */
export const ConfigResourceType = { TOPIC: 2, BROKER: 4, BROKER_LOGGER: 8 } as const;
/** Config sources of DescribeConfigs v1+. */
export const ConfigSource = {
  UNKNOWN: 0,
  DYNAMIC_TOPIC_CONFIG: 1,
  DYNAMIC_BROKER_CONFIG: 2,
  DYNAMIC_DEFAULT_BROKER_CONFIG: 3,
  STATIC_BROKER_CONFIG: 4,
  DEFAULT_CONFIG: 5,
} as const;
/** Config types of DescribeConfigs v3+ (KIP-569). */
export const ConfigType = { UNKNOWN: 0, BOOLEAN: 1, STRING: 2, INT: 3, SHORT: 4, LONG: 5, DOUBLE: 6, LIST: 7, CLASS: 8, PASSWORD: 9 } as const;

const describedConfig = struct({
  name: string(),
  value: nullableString(),
  readOnly: bool(),
  isDefault: bool().v(0, 0),
  configSource: int8().v(1, Infinity, -1),
  isSensitive: bool(),
  synonyms: array(struct({ name: string(), value: nullableString(), source: int8() })).v(1),
  configType: int8().v(3),
  documentation: nullableString().v(3),
});
export type DescribedConfig = ValueOf<typeof describedConfig>;

export const DescribeConfigsApi = messageApi(
  { apiKey: ApiKey.DescribeConfigs, name: 'DescribeConfigs', minVersion: 0, maxVersion: 4, firstFlexibleVersion: 4 },
  {
    resources: array(struct({ resourceType: int8(), resourceName: string(), configurationKeys: nullableArray(string()) })),
    includeSynonyms: bool().v(1),
    includeDocumentation: bool().v(3),
  },
  {
    throttleTimeMs: int32(),
    results: array(
      struct({
        errorCode: int16(),
        errorMessage: nullableString(),
        resourceType: int8(),
        resourceName: string(),
        configs: array(describedConfig),
      }),
    ),
  },
);
export type DescribeConfigsRequest = ValueOf<typeof DescribeConfigsApi.request>;
export type DescribeConfigsResponse = ValueOf<typeof DescribeConfigsApi.response>;

const alterResponse = {
  throttleTimeMs: int32(),
  responses: array(struct({ errorCode: int16(), errorMessage: nullableString(), resourceType: int8(), resourceName: string() })),
};

export const AlterConfigsApi = messageApi(
  { apiKey: ApiKey.AlterConfigs, name: 'AlterConfigs', minVersion: 0, maxVersion: 2, firstFlexibleVersion: 2 },
  {
    resources: array(struct({ resourceType: int8(), resourceName: string(), configs: array(struct({ name: string(), value: nullableString() })) })),
    validateOnly: bool(),
  },
  alterResponse,
);
export type AlterConfigsRequest = ValueOf<typeof AlterConfigsApi.request>;
export type AlterConfigsResponse = ValueOf<typeof AlterConfigsApi.response>;

/** IncrementalAlterConfigs operations (KIP-339). */
export const AlterConfigOp = { SET: 0, DELETE: 1, APPEND: 2, SUBTRACT: 3 } as const;

export const IncrementalAlterConfigsApi = messageApi(
  {
    apiKey: ApiKey.IncrementalAlterConfigs,
    name: 'IncrementalAlterConfigs',
    minVersion: 0,
    maxVersion: 1,
    firstFlexibleVersion: 1,
  },
  {
    resources: array(
      struct({
        resourceType: int8(),
        resourceName: string(),
        configs: array(struct({ name: string(), configOperation: int8(), value: nullableString() })),
      }),
    ),
    validateOnly: bool(),
  },
  alterResponse,
);
export type IncrementalAlterConfigsRequest = ValueOf<typeof IncrementalAlterConfigsApi.request>;
export type IncrementalAlterConfigsResponse = ValueOf<typeof IncrementalAlterConfigsApi.response>;

export const InitProducerIdApi = messageApi(
  { apiKey: ApiKey.InitProducerId, name: 'InitProducerId', minVersion: 0, maxVersion: 5, firstFlexibleVersion: 2 },
  {
    transactionalId: nullableString(),
    transactionTimeoutMs: int32(),
    producerId: int64().v(3, Infinity, -1),
    producerEpoch: int16().v(3, Infinity, -1),
  },
  { throttleTimeMs: int32(), errorCode: int16(), producerId: int64().orElse(-1), producerEpoch: int16().orElse(-1) },
);
export type InitProducerIdRequest = ValueOf<typeof InitProducerIdApi.request>;
export type InitProducerIdResponse = ValueOf<typeof InitProducerIdApi.response>;

export const SaslHandshakeApi = messageApi(
  { apiKey: ApiKey.SaslHandshake, name: 'SaslHandshake', minVersion: 0, maxVersion: 1, firstFlexibleVersion: Infinity },
  { mechanism: string() },
  { errorCode: int16(), mechanisms: array(string()) },
);
export type SaslHandshakeRequest = ValueOf<typeof SaslHandshakeApi.request>;
export type SaslHandshakeResponse = ValueOf<typeof SaslHandshakeApi.response>;

export const SaslAuthenticateApi = messageApi(
  { apiKey: ApiKey.SaslAuthenticate, name: 'SaslAuthenticate', minVersion: 0, maxVersion: 2, firstFlexibleVersion: 2 },
  { authBytes: bytes() },
  { errorCode: int16(), errorMessage: nullableString(), authBytes: bytes(), sessionLifetimeMs: int64().v(1) },
);
export type SaslAuthenticateRequest = ValueOf<typeof SaslAuthenticateApi.request>;
export type SaslAuthenticateResponse = ValueOf<typeof SaslAuthenticateApi.response>;

export const DescribeClusterApi = messageApi(
  { apiKey: ApiKey.DescribeCluster, name: 'DescribeCluster', minVersion: 0, maxVersion: 2, firstFlexibleVersion: 0 },
  { includeClusterAuthorizedOperations: bool(), endpointType: int8().v(1, Infinity, 1), includeFencedBrokers: bool().v(2).optional() },
  {
    throttleTimeMs: int32(),
    errorCode: int16(),
    errorMessage: nullableString(),
    endpointType: int8().v(1, Infinity, 1),
    clusterId: string(),
    controllerId: int32(),
    brokers: array(struct({ brokerId: int32(), host: string(), port: int32(), rack: nullableString(), isFenced: bool().v(2).optional() })),
    clusterAuthorizedOperations: int32(),
  },
);
export type DescribeClusterRequest = ValueOf<typeof DescribeClusterApi.request>;
export type DescribeClusterResponse = ValueOf<typeof DescribeClusterApi.response>;

export const OffsetForLeaderEpochApi = messageApi(
  {
    apiKey: ApiKey.OffsetForLeaderEpoch,
    name: 'OffsetForLeaderEpoch',
    minVersion: 0,
    maxVersion: 4,
    firstFlexibleVersion: 4,
  },
  {
    replicaId: int32().v(3, Infinity, -2),
    topics: array(
      struct({
        topic: string(),
        partitions: array(struct({ partition: int32(), currentLeaderEpoch: int32().v(2, Infinity, -1), leaderEpoch: int32() })),
      }),
    ),
  },
  {
    throttleTimeMs: int32().v(2),
    topics: array(
      struct({
        topic: string(),
        partitions: array(struct({ errorCode: int16(), partition: int32(), leaderEpoch: int32().v(1, Infinity, -1), endOffset: int64() })),
      }),
    ),
  },
);
export type OffsetForLeaderEpochRequest = ValueOf<typeof OffsetForLeaderEpochApi.request>;
export type OffsetForLeaderEpochResponse = ValueOf<typeof OffsetForLeaderEpochApi.response>;
