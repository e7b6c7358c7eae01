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
  INVALID_TOPIC_EXCEPTION: 17,
  RECORD_LIST_TOO_LARGE: 18,
  INVALID_REQUIRED_ACKS: 21,
  UNSUPPORTED_FOR_MESSAGE_FORMAT: 43,
  UNSUPPORTED_VERSION: 35,
  TOPIC_ALREADY_EXISTS: 36,
  INVALID_PARTITIONS: 37,
  INVALID_REQUEST: 42,
  POLICY_VIOLATION: 44,
  KAFKA_STORAGE_ERROR: 56,
  FETCH_SESSION_ID_NOT_FOUND: 70,
  INVALID_FETCH_SESSION_EPOCH: 71,
  UNSUPPORTED_COMPRESSION_TYPE: 76,
  INVALID_RECORD: 87,
  UNKNOWN_TOPIC_ID: 100,
} as const;

export type KafkaErrorCodeValue = (typeof KafkaErrorCode)[keyof typeof KafkaErrorCode];
