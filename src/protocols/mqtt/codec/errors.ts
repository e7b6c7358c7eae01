/**
 * The one error the MQTT codec throws on bad input. A connection handler turns it into a clean close (after a
 * CONNACK when `connackReturnCode` is set, or for v5 a CONNACK / DISCONNECT with `reasonCode`), never into a
 * crash.
 */
import { FlowError } from '../../../core/index.js';
import type { ProtocolLevel } from './types.js';

export class MqttProtocolError extends FlowError {
  /** What is wrong, for logs. */
  readonly reason: string;
  /** The spec's normative statement, e.g. '[MQTT-3.3.2-2]', when one applies. */
  readonly normative: string | undefined;
  /**
   * When set, the server must answer with a CONNACK carrying this 3.1.1 return code before closing
   * (e.g. 0x01 for an unsupported protocol level, [MQTT-3.1.2-2]).
   */
  readonly connackReturnCode: number | undefined;
  /** MQTT 5.0 reason code for the CONNACK or DISCONNECT that reports it: 0x81 Malformed Packet by default. */
  readonly reasonCode: number;
  /** Level of the CONNECT being decoded when the error was found in one (decides the CONNACK layout). */
  protocolLevel: ProtocolLevel | undefined;

  constructor(reason: string, normative?: string, connackReturnCode?: number, reasonCode = 0x81) {
    super('PROTOCOL_ERROR', normative ? `${reason} ${normative}` : reason);
    this.name = 'MqttProtocolError';
    this.reason = reason;
    this.normative = normative;
    this.connackReturnCode = connackReturnCode;
    this.reasonCode = reasonCode;
    this.protocolLevel = undefined;
  }
}
