/**
 * Translation of FlowMQ's typed errors into Kafka error codes.
 */
import { FlowError } from '../../core/index.js';
import { KafkaErrorCode, KafkaProtocolError } from './codec/index.js';

export function kafkaErrorCode(err: unknown): number {
  if (err instanceof KafkaProtocolError) return KafkaErrorCode.INVALID_REQUEST;
  if (!(err instanceof FlowError)) return KafkaErrorCode.UNKNOWN_SERVER_ERROR;
  switch (err.code) {
    case 'NOT_FOUND':
      return KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION;
    case 'INVALID_TOPIC':
      return KafkaErrorCode.INVALID_TOPIC_EXCEPTION;
    case 'ALREADY_EXISTS':
      return KafkaErrorCode.TOPIC_ALREADY_EXISTS;
    case 'CORRUPT_DATA':
      return KafkaErrorCode.CORRUPT_MESSAGE;
    // A full disk (or the free-space reserve) and an I/O error: nothing was stored, try again later. Of the codes
    // that say so, KAFKA_STORAGE_ERROR (56) names the cause, and both clients retry a Produce on it: KafkaJS 2.2.4
    // marks it retriable (src/protocol/error.js) and its producer refreshes metadata and retries; librdkafka 2.0.2
    // (kcat) gives it REFRESH|RETRY|MSG_NOT_PERSISTED (rd_kafka_handle_Produce_error in rdkafka_request.c), as the
    // Java client does (KafkaStorageException is retriable). NOT_ENOUGH_REPLICAS (19) is retried as well but would
    // send operators looking at replication; NOT_ENOUGH_REPLICAS_AFTER_APPEND (20) says the records were written,
    // which librdkafka takes as "possibly persisted": both wrong here.
    case 'STORAGE_ERROR':
    case 'STORAGE_FULL':
      return KafkaErrorCode.KAFKA_STORAGE_ERROR;
    // The partition's owner is going away (shutdown, lease lost): NOT_LEADER_OR_FOLLOWER is retriable and makes
    // clients refresh metadata and retry, which is what they should do.
    case 'CLOSED':
      return KafkaErrorCode.NOT_LEADER_OR_FOLLOWER;
    // The partition was taken by another broker (a later ownership epoch): this one no longer leads it. Same answer:
    // the client refreshes its metadata and goes where the partition is now.
    case 'FENCED':
      return KafkaErrorCode.NOT_LEADER_OR_FOLLOWER;
    case 'OUT_OF_ORDER_SEQUENCE':
      return KafkaErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER;
    // For a non-transactional idempotent producer an old epoch is INVALID_PRODUCER_EPOCH (PRODUCER_FENCED is
    // for transactional ids, KIP-588).
    case 'PRODUCER_FENCED':
      return KafkaErrorCode.INVALID_PRODUCER_EPOCH;
    case 'LIMIT_EXCEEDED':
      return KafkaErrorCode.POLICY_VIOLATION;
    case 'INVALID_ARGUMENT':
    case 'INVALID_FILTER':
    case 'PROTOCOL_ERROR':
      return KafkaErrorCode.INVALID_REQUEST;
    default:
      return KafkaErrorCode.UNKNOWN_SERVER_ERROR;
  }
}
