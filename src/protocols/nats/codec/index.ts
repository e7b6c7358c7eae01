/**
 * NATS client-protocol codec: pure parsing and encoding, no sockets. See parser-base.ts for the parsers' rules,
 * their errors and who owns a payload's memory; encode.ts for the writer a connection batches deliveries into.
 *
 *   const parser = new NatsServerParser({ maxControlLine: 4096, maxPayload: 1048576 });
 *   socket bytes → parser.push(chunk, connection)   // connection implements NatsServerHandler
 *   deliveries   → writer.writeMsg(subject, sid, reply, payload); … socket.write(writer.take())
 */
export { NatsErrText, NatsProtocolError } from './errors.js';
export { PayloadBudget, type NatsLimits, type NatsParserOptions } from './parser-base.js';
export { NatsServerParser, type ConnectOptions, type NatsServerHandler } from './parser.js';
export { NatsClientParser, type NatsClientHandler } from './client-parser.js';
export { encodeHeaders, parseHeaders, type NatsHeaders } from './headers.js';
export {
  NatsWriter,
  OK,
  PING,
  PONG,
  encodeConnect,
  encodeErr,
  encodeHmsg,
  encodeHpub,
  encodeInfo,
  encodeMsg,
  encodePub,
  encodeSub,
  encodeUnsub,
  writeHmsg,
  writeMsg,
} from './encode.js';
export { isValidLiteralSubject, isValidQueueName, isValidSubject } from './subject.js';
