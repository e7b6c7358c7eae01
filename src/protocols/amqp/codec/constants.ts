/** Frame-level constants of AMQP 0-9-1 §4.2.3 and amqp0-9-1.xml. */

/** What a 0-9-1 client sends first, and what a server replies with when the client asked for anything else. */
export const PROTOCOL_HEADER: Buffer = Buffer.from([0x41, 0x4d, 0x51, 0x50, 0, 0, 9, 1]); // "AMQP" 0 0 9 1

export const FRAME_METHOD = 1;
export const FRAME_HEADER = 2;
export const FRAME_BODY = 3;
export const FRAME_HEARTBEAT = 8;
export type FrameType = 1 | 2 | 3 | 8;

/** The octet after every frame's payload. */
export const FRAME_END = 0xce;
/** type(1) + channel(2) + size(4) before the payload, frame-end(1) after it. */
export const FRAME_OVERHEAD = 8;
/** Every peer accepts frames this large before tuning (frame-min-size). */
export const FRAME_MIN_SIZE = 4096;

/** The one class with content in 0-9-1. */
export const CLASS_BASIC = 60;
