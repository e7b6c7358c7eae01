/**
 * The transaction APIs of KIP-98 (with the admin APIs of KIP-664): AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
 * TxnOffsetCommit, DescribeTransactions, ListTransactions.
 *
 * Version notes (from the protocol's message definitions):
 * - AddPartitionsToTxn 0-3: v1 the same (the broker may answer ...); v2 the same (PRODUCER_FENCED allowed, KIP-588);
 *   v3 flexible. v4 (KIP-890) batches several transactions for broker-to-broker verification and is not served:
 *   clients send v3 or lower.
 * - AddOffsetsToTxn 0-3: v1 and v2 the same as v0 (newer error codes); v3 flexible.
 * - EndTxn 0-3: v1 and v2 the same as v0; v3 flexible. (v4 TRANSACTION_ABORTABLE and v5's producer id and epoch in
 *   the response are KIP-890's second phase, not served.)
 * - TxnOffsetCommit 0-3: v2 committed leader epoch; v3 flexible, generation, member and group instance id (KIP-447).
 * - DescribeTransactions 0: always flexible (KIP-664).
 * - ListTransactions 0-1: always flexible (KIP-664); v1 duration filter (KIP-994).
 */
import { ApiKey } from './api.js';
import { array, bool, int16, int32, int64, messageApi, nullableString, string, struct, type ValueOf } from './schema.js';

export const AddPartitionsToTxnApi = messageApi(
  { apiKey: ApiKey.AddPartitionsToTxn, name: 'AddPartitionsToTxn', minVersion: 0, maxVersion: 3, firstFlexibleVersion: 3 },
  {
    transactionalId: string(),
    producerId: int64(),
    producerEpoch: int16(),
    topics: array(struct({ name: string(), partitions: array(int32()) })),
  },
  {
    throttleTimeMs: int32(),
    results: array(struct({ name: string(), results: array(struct({ partitionIndex: int32(), errorCode: int16() })) })),
  },
);
export type AddPartitionsToTxnRequest = ValueOf<typeof AddPartitionsToTxnApi.request>;
export type AddPartitionsToTxnResponse = ValueOf<typeof AddPartitionsToTxnApi.response>;

export const AddOffsetsToTxnApi = messageApi(
  { apiKey: ApiKey.AddOffsetsToTxn, name: 'AddOffsetsToTxn', minVersion: 0, maxVersion: 3, firstFlexibleVersion: 3 },
  { transactionalId: string(), producerId: int64(), producerEpoch: int16(), groupId: string() },
  { throttleTimeMs: int32(), errorCode: int16() },
);
export type AddOffsetsToTxnRequest = ValueOf<typeof AddOffsetsToTxnApi.request>;
export type AddOffsetsToTxnResponse = ValueOf<typeof AddOffsetsToTxnApi.response>;

export const EndTxnApi = messageApi(
  { apiKey: ApiKey.EndTxn, name: 'EndTxn', minVersion: 0, maxVersion: 3, firstFlexibleVersion: 3 },
  { transactionalId: string(), producerId: int64(), producerEpoch: int16(), committed: bool() },
  { throttleTimeMs: int32(), errorCode: int16() },
);
export type EndTxnRequest = ValueOf<typeof EndTxnApi.request>;
export type EndTxnResponse = ValueOf<typeof EndTxnApi.response>;

export const TxnOffsetCommitApi = messageApi(
  { apiKey: ApiKey.TxnOffsetCommit, name: 'TxnOffsetCommit', minVersion: 0, maxVersion: 3, firstFlexibleVersion: 3 },
  {
    transactionalId: string(),
    groupId: string(),
    producerId: int64(),
    producerEpoch: int16(),
    generationId: int32().v(3, Infinity, -1),
    memberId: string().v(3),
    groupInstanceId: nullableString().v(3),
    topics: array(
      struct({
        name: string(),
        partitions: array(
          struct({
            partitionIndex: int32(),
            committedOffset: int64(),
            committedLeaderEpoch: int32().v(2, Infinity, -1),
            committedMetadata: nullableString(),
          }),
        ),
      }),
    ),
  },
  {
    throttleTimeMs: int32(),
    topics: array(struct({ name: string(), partitions: array(struct({ partitionIndex: int32(), errorCode: int16() })) })),
  },
);
export type TxnOffsetCommitRequest = ValueOf<typeof TxnOffsetCommitApi.request>;
export type TxnOffsetCommitResponse = ValueOf<typeof TxnOffsetCommitApi.response>;

export const DescribeTransactionsApi = messageApi(
  { apiKey: ApiKey.DescribeTransactions, name: 'DescribeTransactions', minVersion: 0, maxVersion: 0, firstFlexibleVersion: 0 },
  { transactionalIds: array(string()) },
  {
    throttleTimeMs: int32(),
    transactionStates: array(
      struct({
        errorCode: int16(),
        transactionalId: string(),
        transactionState: string(),
        transactionTimeoutMs: int32(),
        transactionStartTimeMs: int64(),
        producerId: int64(),
        producerEpoch: int16(),
        topics: array(struct({ topic: string(), partitions: array(int32()) })),
      }),
    ),
  },
);
export type DescribeTransactionsRequest = ValueOf<typeof DescribeTransactionsApi.request>;
export type DescribeTransactionsResponse = ValueOf<typeof DescribeTransactionsApi.response>;

export const ListTransactionsApi = messageApi(
  { apiKey: ApiKey.ListTransactions, name: 'ListTransactions', minVersion: 0, maxVersion: 1, firstFlexibleVersion: 0 },
  { stateFilters: array(string()), producerIdFilters: array(int64()), durationFilter: int64().v(1, Infinity, -1) },
  {
    throttleTimeMs: int32(),
    errorCode: int16(),
    unknownStateFilters: array(string()),
    transactionStates: array(struct({ transactionalId: string(), producerId: int64(), transactionState: string() })),
  },
);
export type ListTransactionsRequest = ValueOf<typeof ListTransactionsApi.request>;
export type ListTransactionsResponse = ValueOf<typeof ListTransactionsApi.response>;
