/** MQTT codec: pure encode/decode of control packets (no sockets, no state). */
export * from './types.js';
export * from './errors.js';
export {
  INCOMPLETE,
  MAX_REMAINING_LENGTH,
  PROPERTY_DEFS,
  SUPPORTED_LEVELS,
  parsePacket,
  peekFrameLength,
  type Incomplete,
  type ParseResult,
} from './decode.js';
export {
  encodeAuth,
  encodeConnack,
  encodeConnect,
  encodeDisconnect,
  encodeIdOnly,
  encodePacket,
  encodePingreq,
  encodePingresp,
  encodePublish,
  encodePublishFrame,
  encodeSuback,
  encodeSubscribe,
  encodeUnsuback,
  encodeUnsubscribe,
  propertiesSize,
  varintSize,
} from './encode.js';
