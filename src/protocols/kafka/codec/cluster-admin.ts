/**
 * Operations APIs that admin tools and UIs call, described with the message schema (layouts as the protocol's
 * message definitions give them, clients/src/main/resources/common/message in Apache Kafka):
 *
 * - DescribeLogDirs 0-4: v2 flexible; v3 top-level error code; v4 total and usable bytes of the volume (KIP-827).
 * - ElectLeaders 0-2 (KIP-183, KIP-460): v1 election type and top-level error code; v2 flexible.
 * - OffsetDelete 0 (KIP-496): not flexible.
 * - DescribeProducers 0 (KIP-664): always flexible.
 * - DescribeClientQuotas 0-1, AlterClientQuotas 0-1 (KIP-546): v1 flexible.
 * - DescribeUserScramCredentials 0, AlterUserScramCredentials 0 (KIP-554): always flexible.
 */
import { ApiKey } from './api.js';
import { array, bool, bytes, float64, int16, int32, int64, int8, messageApi, nullableArray, nullableString, string, struct, type ValueOf } from './schema.js';

export const DescribeLogDirsApi = messageApi(
  { apiKey: ApiKey.DescribeLogDirs, name: 'DescribeLogDirs', minVersion: 0, maxVersion: 4, firstFlexibleVersion: 2 },
  {
    /** null: every topic. */
    topics: nullableArray(struct({ topic: string(), partitions: array(int32()) })),
  },
  {
    throttleTimeMs: int32(),
    errorCode: int16().v(3),
    results: array(
      struct({
        errorCode: int16(),
        logDir: string(),
        topics: array(
          struct({
            name: string(),
            partitions: array(struct({ partitionIndex: int32(), partitionSize: int64(), offsetLag: int64(), isFutureKey: bool() })),
          }),
        ),
        totalBytes: int64().v(4, Infinity, -1),
        usableBytes: int64().v(4, Infinity, -1),
      }),
    ),
  },
);
export type DescribeLogDirsRequest = ValueOf<typeof DescribeLogDirsApi.request>;
export type DescribeLogDirsResponse = ValueOf<typeof DescribeLogDirsApi.response>;

/** ElectLeaders election types (KIP-460). */
export const ElectionType = { PREFERRED: 0, UNCLEAN: 1 } as const;

export const ElectLeadersApi = messageApi(
  { apiKey: ApiKey.ElectLeaders, name: 'ElectLeaders', minVersion: 0, maxVersion: 2, firstFlexibleVersion: 2 },
  {
    electionType: int8().v(1),
    /** null: every partition. */
    topicPartitions: nullableArray(struct({ topic: string(), partitions: array(int32()) })),
    timeoutMs: int32().orElse(60000),
  },
  {
    throttleTimeMs: int32(),
    errorCode: int16().v(1),
    replicaElectionResults: array(
      struct({
        topic: string(),
        partitionResult: array(struct({ partitionId: int32(), errorCode: int16(), errorMessage: nullableString() })),
      }),
    ),
  },
);
export type ElectLeadersRequest = ValueOf<typeof ElectLeadersApi.request>;
export type ElectLeadersResponse = ValueOf<typeof ElectLeadersApi.response>;

export const OffsetDeleteApi = messageApi(
  { apiKey: ApiKey.OffsetDelete, name: 'OffsetDelete', minVersion: 0, maxVersion: 0, firstFlexibleVersion: Infinity },
  {
    groupId: string(),
    topics: array(struct({ name: string(), partitions: array(struct({ partitionIndex: int32() })) })),
  },
  {
    errorCode: int16(),
    throttleTimeMs: int32(),
    topics: array(struct({ name: string(), partitions: array(struct({ partitionIndex: int32(), errorCode: int16() })) })),
  },
);
export type OffsetDeleteRequest = ValueOf<typeof OffsetDeleteApi.request>;
export type OffsetDeleteResponse = ValueOf<typeof OffsetDeleteApi.response>;

export const DescribeProducersApi = messageApi(
  { apiKey: ApiKey.DescribeProducers, name: 'DescribeProducers', minVersion: 0, maxVersion: 0, firstFlexibleVersion: 0 },
  { topics: array(struct({ name: string(), partitionIndexes: array(int32()) })) },
  {
    throttleTimeMs: int32(),
    topics: array(
      struct({
        name: string(),
        partitions: array(
          struct({
            partitionIndex: int32(),
            errorCode: int16(),
            errorMessage: nullableString(),
            activeProducers: array(
              struct({
                producerId: int64(),
                producerEpoch: int32(),
                lastSequence: int32().orElse(-1),
                lastTimestamp: int64().orElse(-1),
                coordinatorEpoch: int32(),
                currentTxnStartOffset: int64().orElse(-1),
              }),
            ),
          }),
        ),
      }),
    ),
  },
);
export type DescribeProducersRequest = ValueOf<typeof DescribeProducersApi.request>;
export type DescribeProducersResponse = ValueOf<typeof DescribeProducersApi.response>;

/** DescribeClientQuotas filter match types. */
export const QuotaMatchType = { EXACT: 0, DEFAULT: 1, SPECIFIED: 2 } as const;

const quotaEntity = struct({ entityType: string(), entityName: nullableString() });

export const DescribeClientQuotasApi = messageApi(
  { apiKey: ApiKey.DescribeClientQuotas, name: 'DescribeClientQuotas', minVersion: 0, maxVersion: 1, firstFlexibleVersion: 1 },
  {
    components: array(struct({ entityType: string(), matchType: int8(), match: nullableString() })),
    strict: bool(),
  },
  {
    throttleTimeMs: int32(),
    errorCode: int16(),
    errorMessage: nullableString(),
    entries: nullableArray(struct({ entity: array(quotaEntity), values: array(struct({ key: string(), value: float64() })) })),
  },
);
export type DescribeClientQuotasRequest = ValueOf<typeof DescribeClientQuotasApi.request>;
export type DescribeClientQuotasResponse = ValueOf<typeof DescribeClientQuotasApi.response>;

export const AlterClientQuotasApi = messageApi(
  { apiKey: ApiKey.AlterClientQuotas, name: 'AlterClientQuotas', minVersion: 0, maxVersion: 1, firstFlexibleVersion: 1 },
  {
    entries: array(struct({ entity: array(quotaEntity), ops: array(struct({ key: string(), value: float64(), remove: bool() })) })),
    validateOnly: bool(),
  },
  {
    throttleTimeMs: int32(),
    entries: array(struct({ errorCode: int16(), errorMessage: nullableString(), entity: array(quotaEntity) })),
  },
);
export type AlterClientQuotasRequest = ValueOf<typeof AlterClientQuotasApi.request>;
export type AlterClientQuotasResponse = ValueOf<typeof AlterClientQuotasApi.response>;

/** SCRAM mechanisms as the credential APIs number them (org.apache.kafka.clients.admin.ScramMechanism). */
export const ScramMechanismType = { UNKNOWN: 0, SCRAM_SHA_256: 1, SCRAM_SHA_512: 2 } as const;

export const DescribeUserScramCredentialsApi = messageApi(
  {
    apiKey: ApiKey.DescribeUserScramCredentials,
    name: 'DescribeUserScramCredentials',
    minVersion: 0,
    maxVersion: 0,
    firstFlexibleVersion: 0,
  },
  { users: nullableArray(struct({ name: string() })) },
  {
    throttleTimeMs: int32(),
    errorCode: int16(),
    errorMessage: nullableString(),
    results: array(
      struct({
        user: string(),
        errorCode: int16(),
        errorMessage: nullableString(),
        credentialInfos: array(struct({ mechanism: int8(), iterations: int32() })),
      }),
    ),
  },
);
export type DescribeUserScramCredentialsRequest = ValueOf<typeof DescribeUserScramCredentialsApi.request>;
export type DescribeUserScramCredentialsResponse = ValueOf<typeof DescribeUserScramCredentialsApi.response>;

export const AlterUserScramCredentialsApi = messageApi(
  {
    apiKey: ApiKey.AlterUserScramCredentials,
    name: 'AlterUserScramCredentials',
    minVersion: 0,
    maxVersion: 0,
    firstFlexibleVersion: 0,
  },
  {
    deletions: array(struct({ name: string(), mechanism: int8() })),
    upsertions: array(struct({ name: string(), mechanism: int8(), iterations: int32(), salt: bytes(), saltedPassword: bytes() })),
  },
  { throttleTimeMs: int32(), results: array(struct({ user: string(), errorCode: int16(), errorMessage: nullableString() })) },
);
export type AlterUserScramCredentialsRequest = ValueOf<typeof AlterUserScramCredentialsApi.request>;
export type AlterUserScramCredentialsResponse = ValueOf<typeof AlterUserScramCredentialsApi.response>;
