/**
 * The one error the MQTT codec throws on bad input. A connection handler turns it into a clean close (after a
 * CONNACK when `connackReturnCode` is set), never into a crash.
 */
import { FlowError } from '../../../core/index.js';

export class MqttProtocolError extends FlowError {
  /** What is wrong, for logs. */
  readonly reason: string;
  /** The spec's normative statement, e.g. '[MQTT-3.3.2-2]', when one applies. */
  readonly normative: string | undefined;
  /**
   * When set, the server must answer with a CONNACK carrying this return code before closing
   * (e.g. 0x01 for an unsupported protocol level, [MQTT-3.1.2-2]).
   */
  readonly connackReturnCode: number | undefined;

  constructor(reason: string, normative?: string, connackReturnCode?: number) {
    super('PROTOCOL_ERROR', normative ? `${reason} ${normative}` : reason);
    this.name = 'MqttProtocolError';
    this.reason = reason;
    this.normative = normative;
    this.connackReturnCode = connackReturnCode;
  }
}

export const isMqttProtocolError = (e: unknown): e is MqttProtocolError => e instanceof MqttProtocolError;
