/**
 * Typed errors with a stable `code`. Adapters map these codes to their protocol's own error replies.
 */
export type ErrorCode =
  | 'INVALID_TOPIC'
  | 'INVALID_FILTER'
  | 'INVALID_ARGUMENT'
  | 'NOT_FOUND'
  | 'ALREADY_EXISTS'
  | 'CORRUPT_DATA'
  | 'STORAGE_ERROR'
  /**
   * No room to store: the disk (or a quota) is full, or free space fell below the broker's reserve
   * (--min-free-disk). Retriable: the partition accepts writes again by itself once space returns.
   */
  | 'STORAGE_FULL'
  | 'CLOSED'
  | 'CONFIG_ERROR'
  | 'PROTOCOL_ERROR'
  | 'LIMIT_EXCEEDED'
  /** An idempotent producer's batch does not follow its previous one (a gap or a reordering). */
  | 'OUT_OF_ORDER_SEQUENCE'
  /** An idempotent producer's batch carries an epoch older than one already seen (a fenced producer). */
  | 'PRODUCER_FENCED'
  /**
   * A partition mutation (WAL append, segment commit, log-start move, producer state) carries an ownership epoch
   * older than the partition's current one: another broker (or a later opening) owns the partition now. Not
   * retriable by the writer: it must stop writing the partition.
   */
  | 'FENCED'
  /**
   * Cluster mode: this broker does not own the partition, queue, consumer group, JetStream consumer or session the
   * call names (another broker does, or ownership is moving). The caller finds the owner (Kafka: Metadata,
   * FindCoordinator) and retries there; forwarding code refreshes its view of the owners and retries. Retriable.
   */
  | 'NOT_OWNER'
  /**
   * Cluster mode: the owner of what the call needs cannot be reached now (a broker died and its work has not moved
   * yet, or the internal channel is down). Retriable: ownership moves within the membership lease.
   */
  | 'UNAVAILABLE'
  /** A redeclaration differs from the existing definition, or a delete's if-unused / if-empty does not hold (AMQP 406). */
  | 'PRECONDITION_FAILED'
  /** An exclusive queue or consumer belongs to another connection (AMQP 405). */
  | 'RESOURCE_LOCKED'
  /** Not allowed (AMQP 403): publishing to an internal exchange, redeclaring a reserved `amq.` name. */
  | 'ACCESS_REFUSED';

export class FlowError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = 'FlowError';
  }
}

export const isFlowError = (e: unknown, code?: ErrorCode): e is FlowError => e instanceof FlowError && (code === undefined || e.code === code);
