/**
 * The adapter's one doorway to the codec (src/protocols/amqp/codec): frame payloads in, frames out.
 */
import {
  AmqpCodecError,
  FRAME_MIN_SIZE,
  HEARTBEAT_FRAME,
  PROTOCOL_HEADER,
  decodeContentHeader,
  decodeMethod,
  encodeMessageFrames,
  encodeMethodFrame,
  type AmqpMethod,
  type BasicProperties,
  type Method,
} from './codec/index.js';

export { AmqpCodecError, FRAME_MIN_SIZE, HEARTBEAT_FRAME, PROTOCOL_HEADER, type AmqpMethod, type BasicProperties };

/** The method of a given name. */
export type MethodOf<N extends AmqpMethod['name']> = Method<N>;

export function decodeMethodPayload(payload: Buffer): AmqpMethod {
  return decodeMethod(payload);
}

export function methodFrame(channel: number, m: AmqpMethod): Buffer {
  return encodeMethodFrame(channel, m);
}

export function decodeHeaderPayload(payload: Buffer): { classId: number; bodySize: number; properties: BasicProperties } {
  return decodeContentHeader(payload);
}

/** A content method (deliver, get-ok, return) with its header and body frames, in one buffer. */
export function messageFrames(channel: number, m: AmqpMethod, props: BasicProperties, body: Buffer, frameMax: number): Buffer {
  return encodeMessageFrames(channel, m, props, body, frameMax);
}
