/**
 * The adapter's one doorway to the codec (src/protocols/amqp/codec): frame payloads in, frames out.
 */
import {
  AmqpCodecError,
  FRAME_MIN_SIZE,
  PROTOCOL_HEADER,
  decodeContentHeader,
  decodeMethod,
  encodeContent,
  encodeMethodFrame,
  type AmqpMethod,
  type BasicProperties,
} from './codec/index.js';

export { AmqpCodecError, FRAME_MIN_SIZE, PROTOCOL_HEADER, type AmqpMethod, type BasicProperties };

export type MethodName = AmqpMethod['name'];
/** The method of a given name. */
export type MethodOf<N extends MethodName> = Extract<AmqpMethod, { name: N }>;

/** A heartbeat frame: type 8, channel 0, empty payload. */
export const HEARTBEAT_FRAME = Buffer.from([8, 0, 0, 0, 0, 0, 0, 0xce]);

export function decodeMethodPayload(payload: Buffer): AmqpMethod {
  return decodeMethod(payload);
}

export function methodFrame(channel: number, m: AmqpMethod): Buffer {
  return encodeMethodFrame(channel, m);
}

export function decodeHeaderPayload(payload: Buffer): { classId: number; bodySize: number; properties: BasicProperties } {
  return decodeContentHeader(payload);
}

/** Content header + body frames of one message, split at frameMax. */
export function contentFrames(channel: number, props: BasicProperties, body: Buffer, frameMax: number): Buffer | Buffer[] {
  return encodeContent(channel, 60, props, body, frameMax);
}
