/**
 * Errors of the Kafka codec, and the Kafka protocol's own numeric error codes.
 */
import { FlowError } from '../../../core/index.js';

/** Why a frame could not be decoded. */
export type KafkaProtocolErrorReason =
  /** The frame ends before a field does. */
  | 'TRUNCATED'
  /** A length or count is negative where the field is not nullable. */
  | 'NEGATIVE_LENGTH'
  /** A varint runs past its maximum width. */
  | 'BAD_VARINT'
  /** A field holds a value outside its domain (e.g. a boolean that is neither 0 nor 1). */
  | 'BAD_VALUE'
  /** Bytes are left over after the last field of a request body. */
  | 'TRAILING_BYTES'
  /** The API key is not one this broker implements. */
  | 'UNKNOWN_API'
  /** The API is known but not at this version. */
  | 'UNSUPPORTED_VERSION';

/**
 * A malformed or unsupported Kafka frame. It is a FlowError with code PROTOCOL_ERROR, so callers that only know
 * the core's errors still classify it; `reason` says what exactly was wrong.
 */
export class KafkaProtocolError extends FlowError {
  readonly reason: KafkaProtocolErrorReason;
  constructor(reason: KafkaProtocolErrorReason, message: string, options?: { cause?: unknown }) {
    super('PROTOCOL_ERROR', message, options);
    this.reason = reason;
    this.name = 'KafkaProtocolError';
  }
}

/**
 * Kafka error codes (the `ErrorCode` int16 of responses), as numbered by the protocol
 * (org.apache.kafka.common.protocol.Errors). Only the ones FlowMQ answers with or tests for are listed.
 */
export const KafkaErrorCode = {
  UNKNOWN_SERVER_ERROR: -1,
  NONE: 0,
  OFFSET_OUT_OF_RANGE: 1,
  CORRUPT_MESSAGE: 2,
  UNKNOWN_TOPIC_OR_PARTITION: 3,
  INVALID_FETCH_SIZE: 4,
  LEADER_NOT_AVAILABLE: 5,
  NOT_LEADER_OR_FOLLOWER: 6,
  REQUEST_TIMED_OUT: 7,
  MESSAGE_TOO_LARGE: 10,
  OFFSET_METADATA_TOO_LARGE: 12,
  COORDINATOR_LOAD_IN_PROGRESS: 14,
  COORDINATOR_NOT_AVAILABLE: 15,
  NOT_COORDINATOR: 16,
  INVALID_TOPIC_EXCEPTION: 17,
  RECORD_LIST_TOO_LARGE: 18,
  INVALID_REQUIRED_ACKS: 21,
  ILLEGAL_GENERATION: 22,
  INCONSISTENT_GROUP_PROTOCOL: 23,
  INVALID_GROUP_ID: 24,
  UNKNOWN_MEMBER_ID: 25,
  INVALID_SESSION_TIMEOUT: 26,
  REBALANCE_IN_PROGRESS: 27,
  TOPIC_AUTHORIZATION_FAILED: 29,
  GROUP_AUTHORIZATION_FAILED: 30,
  CLUSTER_AUTHORIZATION_FAILED: 31,
  UNSUPPORTED_SASL_MECHANISM: 33,
  ILLEGAL_SASL_STATE: 34,
  UNSUPPORTED_FOR_MESSAGE_FORMAT: 43,
  UNSUPPORTED_VERSION: 35,
  TOPIC_ALREADY_EXISTS: 36,
  INVALID_PARTITIONS: 37,
  INVALID_REPLICATION_FACTOR: 38,
  INVALID_REPLICA_ASSIGNMENT: 39,
  INVALID_CONFIG: 40,
  INVALID_REQUEST: 42,
  POLICY_VIOLATION: 44,
  OUT_OF_ORDER_SEQUENCE_NUMBER: 45,
  DUPLICATE_SEQUENCE_NUMBER: 46,
  INVALID_PRODUCER_EPOCH: 47,
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED: 53,
  SECURITY_DISABLED: 54,
  KAFKA_STORAGE_ERROR: 56,
  SASL_AUTHENTICATION_FAILED: 58,
  UNKNOWN_PRODUCER_ID: 59,
  NON_EMPTY_GROUP: 68,
  GROUP_ID_NOT_FOUND: 69,
  FETCH_SESSION_ID_NOT_FOUND: 70,
  INVALID_FETCH_SESSION_EPOCH: 71,
  FENCED_LEADER_EPOCH: 74,
  UNKNOWN_LEADER_EPOCH: 75,
  UNSUPPORTED_COMPRESSION_TYPE: 76,
  MEMBER_ID_REQUIRED: 79,
  GROUP_MAX_SIZE_REACHED: 81,
  FENCED_INSTANCE_ID: 82,
  INVALID_RECORD: 87,
  UNKNOWN_TOPIC_ID: 100,
  INCONSISTENT_TOPIC_ID: 103,
  FETCH_SESSION_TOPIC_ID_ERROR: 106,
  // Admin APIs (DescribeLogDirs, ElectLeaders, OffsetDelete, client quotas, SCRAM credentials).
  NOT_CONTROLLER: 41,
  PREFERRED_LEADER_NOT_AVAILABLE: 80,
  ELIGIBLE_LEADERS_NOT_AVAILABLE: 83,
  ELECTION_NOT_NEEDED: 84,
  GROUP_SUBSCRIBED_TO_TOPIC: 86,
  RESOURCE_NOT_FOUND: 91,
  DUPLICATE_RESOURCE: 92,
  UNACCEPTABLE_CREDENTIAL: 93,
  // The consumer group protocol (KIP-848).
  FENCED_MEMBER_EPOCH: 110,
  UNRELEASED_INSTANCE_ID: 111,
  UNSUPPORTED_ASSIGNOR: 112,
  STALE_MEMBER_EPOCH: 113,
  INVALID_REGULAR_EXPRESSION: 128,
  // Transactions (KIP-98, KIP-588, KIP-664).
  INVALID_TXN_STATE: 48,
  INVALID_PRODUCER_ID_MAPPING: 49,
  INVALID_TRANSACTION_TIMEOUT: 50,
  CONCURRENT_TRANSACTIONS: 51,
  TRANSACTION_COORDINATOR_FENCED: 52,
  TRANSACTIONAL_ID_NOT_FOUND: 105,
  OPERATION_NOT_ATTEMPTED: 55,
  PRODUCER_FENCED: 90,
} as const;

export type KafkaErrorCodeValue = (typeof KafkaErrorCode)[keyof typeof KafkaErrorCode];
