/**
 * AMQP errors as the adapter raises them, and the map from the core's FlowError codes to AMQP reply codes.
 *
 * AMQP 0-9-1 §1.5.2 splits reply codes into soft errors, which close only the channel the failing method came on
 * (403 access-refused, 404 not-found, 405 resource-locked, 406 precondition-failed), and hard errors, which close
 * the whole connection (320, 402, 501-506, 530, 540, 541). The reply text follows RabbitMQ's form,
 * `NOT_FOUND - no queue 'q' in vhost '/'`, which clients show as is.
 */
import { isFlowError } from '../../core/index.js';

const NAMES: Record<number, string> = {
  311: 'CONTENT_TOO_LARGE',
  312: 'NO_ROUTE',
  313: 'NO_CONSUMERS',
  320: 'CONNECTION_FORCED',
  402: 'INVALID_PATH',
  403: 'ACCESS_REFUSED',
  404: 'NOT_FOUND',
  405: 'RESOURCE_LOCKED',
  406: 'PRECONDITION_FAILED',
  501: 'FRAME_ERROR',
  502: 'SYNTAX_ERROR',
  503: 'COMMAND_INVALID',
  504: 'CHANNEL_ERROR',
  505: 'UNEXPECTED_FRAME',
  506: 'RESOURCE_ERROR',
  530: 'NOT_ALLOWED',
  540: 'NOT_IMPLEMENTED',
  541: 'INTERNAL_ERROR',
};

/** Soft error codes: they close the channel only. */
const SOFT = new Set([311, 312, 313, 403, 404, 405, 406]);

/** `NOT_FOUND - text`, cut to a shortstr's 255 bytes. */
export function replyText(code: number, text: string): string {
  const full = `${NAMES[code] ?? 'ERROR'} - ${text}`;
  if (Buffer.byteLength(full) <= 255) return full;
  return (
    Buffer.from(full)
      .subarray(0, 250)
      .toString('utf8')
      .replace(/\uFFFD+$/, '') + '...'
  );
}

/**
 * An error a method handler raises: a soft code closes the channel, a hard one the connection (a soft code raised
 * on channel 0 closes the connection too, as there is no channel to close).
 */
export class AmqpError extends Error {
  constructor(
    readonly code: number,
    message: string,
    /** The class and method that failed (connection.close / channel.close report them). */
    readonly classId = 0,
    readonly methodId = 0,
  ) {
    super(message);
    this.name = 'AmqpError';
  }

  get hard(): boolean {
    return !SOFT.has(this.code);
  }
}

/** The reply code for an error thrown by the core (or anything else: 541 internal error, a hard error). */
export function replyCodeOf(err: unknown): number {
  if (err instanceof AmqpError) return err.code;
  if (isFlowError(err)) {
    switch (err.code) {
      case 'NOT_FOUND':
        return 404;
      case 'PRECONDITION_FAILED':
      case 'INVALID_ARGUMENT':
      case 'INVALID_TOPIC':
      case 'INVALID_FILTER':
      case 'ALREADY_EXISTS':
        return 406;
      case 'RESOURCE_LOCKED':
        return 405;
      case 'ACCESS_REFUSED':
        return 403;
      case 'LIMIT_EXCEEDED':
        return 406;
      default:
        return 541;
    }
  }
  return 541;
}

/** Turns anything a handler threw into an AmqpError with the right code. */
export function toAmqpError(err: unknown, classId = 0, methodId = 0): AmqpError {
  if (err instanceof AmqpError) return err;
  const code = replyCodeOf(err);
  const msg = err instanceof Error ? err.message : String(err);
  return new AmqpError(code, code === 541 ? `internal error: ${msg}` : msg, classId, methodId);
}
