/** MQTT codec: pure encode/decode of control packets (no sockets, no state). */
export * from './types.js';
export * from './errors.js';
export { INCOMPLETE, parsePacket, peekFrameLength, type ParseResult } from './decode.js';
export { encodeAuth, encodeConnack, encodeDisconnect, encodeIdOnly, encodePacket, encodePublishFrame, encodeSuback, encodeUnsuback } from './encode.js';
