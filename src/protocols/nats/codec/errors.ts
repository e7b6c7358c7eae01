/**
 * The one error the NATS codec throws, and the `-ERR` texts of nats-server 2.9.10 that the codec and the
 * connection send. Each text was checked against Debian's nats-server 2.9.10 with raw sockets (note the
 * lower-case wording of the control-line error: that is what 2.9.10 sends, from its Go error value).
 */
import { FlowError } from '../../../core/index.js';

/** `-ERR '<text>'` texts, worded as nats-server 2.9.10 sends them. */
export const NatsErrText = {
  /** An unknown operation, an op missing its arguments, bytes after a payload other than `\r\n`; closes. */
  UNKNOWN_OP: 'Unknown Protocol Operation',
  /** A control line longer than max_control_line (lower case in 2.9.10); closes. */
  MAX_CONTROL_LINE: 'maximum control line exceeded',
  /** A PUB/HPUB size above max_payload, refused at the control line; closes. */
  MAX_PAYLOAD: 'Maximum Payload Violation',
  /** SUB to an invalid subject: the subscription is refused, the connection stays open. */
  INVALID_SUBJECT: 'Invalid Subject',
  /** PUB to an invalid subject with pedantic on: the message is dropped, the connection stays open. */
  INVALID_PUBLISH_SUBJECT: 'Invalid Publish Subject',
} as const;

export class NatsProtocolError extends FlowError {
  /**
   * What to send as `-ERR '<errText>'` before closing, or null when nats-server closes without a word (bad
   * PUB/SUB/UNSUB/HPUB arguments, a CONNECT that is not the expected JSON: it only logs those).
   */
  readonly errText: string | null;

  constructor(message: string, errText: string | null) {
    super('PROTOCOL_ERROR', message);
    this.name = 'NatsProtocolError';
    this.errText = errText;
  }
}

export const isNatsProtocolError = (e: unknown): e is NatsProtocolError => e instanceof NatsProtocolError;
