/**
 * The one error the AMQP codec throws. It carries the reply code of AMQP 0-9-1 §1.5.2 (amqp0-9-1.xml
 * `<constant>`s) that the connection handler puts in its connection.close, so a bad peer gets the spec's answer
 * and the broker never crashes on input bytes.
 */
import { FlowError } from '../../../core/index.js';

/** Reply codes of AMQP 0-9-1 (soft errors close a channel, hard errors the connection). */
export const ReplyCode = {
  REPLY_SUCCESS: 200,
  CONTENT_TOO_LARGE: 311,
  NO_ROUTE: 312,
  NO_CONSUMERS: 313,
  CONNECTION_FORCED: 320,
  INVALID_PATH: 402,
  ACCESS_REFUSED: 403,
  NOT_FOUND: 404,
  RESOURCE_LOCKED: 405,
  PRECONDITION_FAILED: 406,
  FRAME_ERROR: 501,
  SYNTAX_ERROR: 502,
  COMMAND_INVALID: 503,
  CHANNEL_ERROR: 504,
  UNEXPECTED_FRAME: 505,
  RESOURCE_ERROR: 506,
  NOT_ALLOWED: 530,
  NOT_IMPLEMENTED: 540,
  INTERNAL_ERROR: 541,
} as const;

/** The codes the codec itself raises: all are connection ("hard") errors. */
export type CodecReplyCode = 501 | 502 | 503 | 505 | 540;

export class AmqpCodecError extends FlowError {
  /** The spec's reply code for connection.close: 501 frame-error, 502 syntax-error, 505 unexpected-frame, 540 not-implemented (503 is in the type for callers that map their own errors through it). */
  readonly replyCode: CodecReplyCode;
  /**
   * Class and method of the method being decoded when the error was found (0 when none, e.g. a framing
   * error): connection.close reports them in its class-id / method-id fields.
   */
  readonly classId: number;
  readonly methodId: number;

  constructor(replyCode: CodecReplyCode, message: string, classId = 0, methodId = 0) {
    super('PROTOCOL_ERROR', message);
    this.name = 'AmqpCodecError';
    this.replyCode = replyCode;
    this.classId = classId;
    this.methodId = methodId;
  }
}

export const isAmqpCodecError = (e: unknown): e is AmqpCodecError => e instanceof AmqpCodecError;

/** A reply-text for connection.close: `FRAME_ERROR - <message>`, the form RabbitMQ uses. */
export function replyTextOf(e: AmqpCodecError): string {
  const names: Record<CodecReplyCode, string> = {
    501: 'FRAME_ERROR',
    502: 'SYNTAX_ERROR',
    503: 'COMMAND_INVALID',
    505: 'UNEXPECTED_FRAME',
    540: 'NOT_IMPLEMENTED',
  };
  // reply-text is a shortstr: at most 255 bytes.
  const text = `${names[e.replyCode]} - ${e.message}`;
  return Buffer.byteLength(text) <= 255 ? text : Buffer.from(text).subarray(0, 252).toString('utf8') + '...';
}
