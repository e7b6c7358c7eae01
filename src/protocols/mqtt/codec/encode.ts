/**
 * MQTT packet encoders: pure functions, one exactly-sized Buffer per packet (sizes are computed first, so no
 * growing or concatenating). Encoders check what the receiver would otherwise reject as malformed (lengths,
 * packet identifiers) and throw FlowError('INVALID_ARGUMENT'): that is a caller bug, not peer input.
 */
import { FlowError, type QoS } from '../../../core/index.js';
import { MAX_REMAINING_LENGTH } from './decode.js';
import {
  PacketType,
  type ConnackPacket,
  type ConnectPacket,
  type MqttPacket,
  type ProtocolLevel,
  type PublishPacket,
  type SubackPacket,
  type SubscribePacket,
  type UnsubscribePacket,
} from './types.js';

function invalid(msg: string): FlowError {
  return new FlowError('INVALID_ARGUMENT', `mqtt encode: ${msg}`);
}

/** Bytes taken by the Remaining Length field for `n`. */
export function varintSize(n: number): number {
  return n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : 4;
}

/** Allocates the packet and writes its fixed header; returns the buffer and the position after the header. */
function alloc(first: number, remaining: number): [Buffer, number] {
  if (remaining > MAX_REMAINING_LENGTH) throw invalid(`packet of ${remaining} bytes is too large`);
  const out = Buffer.allocUnsafe(1 + varintSize(remaining) + remaining);
  out[0] = first;
  let pos = 1;
  let n = remaining;
  do {
    let b = n & 0x7f;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out[pos++] = b;
  } while (n > 0);
  return [out, pos];
}

function strLen(s: string, what: string): number {
  const n = Buffer.byteLength(s, 'utf8');
  if (n > 0xffff) throw invalid(`${what} is longer than 65535 bytes`);
  return n;
}

function binLen(b: Buffer, what: string): number {
  if (b.length > 0xffff) throw invalid(`${what} is longer than 65535 bytes`);
  return b.length;
}

function putU16(out: Buffer, pos: number, v: number): number {
  out[pos] = v >> 8;
  out[pos + 1] = v & 0xff;
  return pos + 2;
}

function putStr(out: Buffer, pos: number, s: string, len: number): number {
  pos = putU16(out, pos, len);
  return pos + out.write(s, pos, len, 'utf8');
}

function putBin(out: Buffer, pos: number, b: Buffer): number {
  pos = putU16(out, pos, b.length);
  return pos + b.copy(out, pos);
}

function checkId(id: number, what: string): void {
  if (!Number.isInteger(id) || id < 1 || id > 0xffff) throw invalid(`${what} packet identifier ${id} is not in 1..65535`);
}

// ------------------------------------------------------------------ packets

export function encodeConnect(p: ConnectPacket): Buffer {
  const name = p.protocolName;
  const nameLen = strLen(name, 'protocol name');
  const idLen = strLen(p.clientId, 'client identifier');
  let rem = 2 + nameLen + 1 + 1 + 2 + 2 + idLen;
  let flags = p.cleanSession ? 0x02 : 0;
  let willTopicLen = 0;
  if (p.will) {
    willTopicLen = strLen(p.will.topic, 'will topic');
    rem += 2 + willTopicLen + 2 + binLen(p.will.payload, 'will message');
    flags |= 0x04 | (p.will.qos << 3) | (p.will.retain ? 0x20 : 0);
  }
  let userLen = 0;
  if (p.username !== null) {
    userLen = strLen(p.username, 'user name');
    rem += 2 + userLen;
    flags |= 0x80;
  }
  if (p.password !== null) {
    rem += 2 + binLen(p.password, 'password');
    flags |= 0x40;
  }
  if (p.keepalive < 0 || p.keepalive > 0xffff) throw invalid('keep alive must be in 0..65535');
  const [out, start] = alloc(PacketType.CONNECT << 4, rem);
  let pos = putStr(out, start, name, nameLen);
  out[pos++] = p.protocolLevel;
  out[pos++] = flags;
  pos = putU16(out, pos, p.keepalive);
  pos = putStr(out, pos, p.clientId, idLen);
  if (p.will) {
    pos = putStr(out, pos, p.will.topic, willTopicLen);
    pos = putBin(out, pos, p.will.payload);
  }
  if (p.username !== null) pos = putStr(out, pos, p.username, userLen);
  if (p.password !== null) putBin(out, pos, p.password);
  return out;
}

export function encodeConnack(p: ConnackPacket, _level: ProtocolLevel = 4): Buffer {
  const [out, pos] = alloc(PacketType.CONNACK << 4, 2);
  out[pos] = p.sessionPresent ? 1 : 0;
  out[pos + 1] = p.returnCode;
  return out;
}

/**
 * One PUBLISH frame from its parts, in a single allocation. The server's delivery path calls this directly
 * with a message's topic and payload, without building a PublishPacket first.
 */
export function encodePublishFrame(
  topic: string,
  payload: Buffer,
  qos: QoS,
  retain: boolean,
  dup: boolean,
  packetId: number,
): Buffer {
  const tlen = strLen(topic, 'topic name');
  if (qos > 0) checkId(packetId, 'PUBLISH');
  const rem = 2 + tlen + (qos > 0 ? 2 : 0) + payload.length;
  // [MQTT-3.3.1-2] DUP is never set on QoS 0.
  const first = (PacketType.PUBLISH << 4) | (dup && qos > 0 ? 0x08 : 0) | (qos << 1) | (retain ? 0x01 : 0);
  const [out, start] = alloc(first, rem);
  let pos = putStr(out, start, topic, tlen);
  if (qos > 0) pos = putU16(out, pos, packetId);
  payload.copy(out, pos);
  return out;
}

export function encodePublish(p: PublishPacket, _level: ProtocolLevel = 4): Buffer {
  return encodePublishFrame(p.topic, p.payload, p.qos, p.retain, p.dup, p.packetId);
}

/** PUBACK, PUBREC, PUBREL, PUBCOMP and UNSUBACK: a packet identifier and nothing else (in 3.1.1). */
export function encodeIdOnly(
  type: 'puback' | 'pubrec' | 'pubrel' | 'pubcomp' | 'unsuback',
  packetId: number,
  _level: ProtocolLevel = 4,
): Buffer {
  checkId(packetId, type.toUpperCase());
  let first: number;
  switch (type) {
    case 'puback':
      first = PacketType.PUBACK << 4;
      break;
    case 'pubrec':
      first = PacketType.PUBREC << 4;
      break;
    case 'pubrel':
      first = (PacketType.PUBREL << 4) | 0x02; // [MQTT-3.6.1-1]
      break;
    case 'pubcomp':
      first = PacketType.PUBCOMP << 4;
      break;
    default:
      first = PacketType.UNSUBACK << 4;
  }
  const out = Buffer.allocUnsafe(4);
  out[0] = first;
  out[1] = 2;
  putU16(out, 2, packetId);
  return out;
}

export function encodeSubscribe(p: SubscribePacket, _level: ProtocolLevel = 4): Buffer {
  checkId(p.packetId, 'SUBSCRIBE');
  if (p.subscriptions.length === 0) throw invalid('SUBSCRIBE needs at least one filter');
  const lens = p.subscriptions.map((s) => strLen(s.filter, 'topic filter'));
  let rem = 2;
  for (const l of lens) rem += 2 + l + 1;
  const [out, start] = alloc((PacketType.SUBSCRIBE << 4) | 0x02, rem); // [MQTT-3.8.1-1]
  let pos = putU16(out, start, p.packetId);
  p.subscriptions.forEach((s, k) => {
    pos = putStr(out, pos, s.filter, lens[k]);
    out[pos++] = s.qos;
  });
  return out;
}

export function encodeSuback(p: SubackPacket, _level: ProtocolLevel = 4): Buffer {
  checkId(p.packetId, 'SUBACK');
  const [out, start] = alloc(PacketType.SUBACK << 4, 2 + p.returnCodes.length);
  let pos = putU16(out, start, p.packetId);
  for (const c of p.returnCodes) out[pos++] = c;
  return out;
}

export function encodeUnsubscribe(p: UnsubscribePacket, _level: ProtocolLevel = 4): Buffer {
  checkId(p.packetId, 'UNSUBSCRIBE');
  if (p.filters.length === 0) throw invalid('UNSUBSCRIBE needs at least one filter');
  const lens = p.filters.map((f) => strLen(f, 'topic filter'));
  let rem = 2;
  for (const l of lens) rem += 2 + l;
  const [out, start] = alloc((PacketType.UNSUBSCRIBE << 4) | 0x02, rem); // [MQTT-3.10.1-1]
  let pos = putU16(out, start, p.packetId);
  p.filters.forEach((f, k) => {
    pos = putStr(out, pos, f, lens[k]);
  });
  return out;
}

export function encodePingreq(): Buffer {
  return Buffer.from([PacketType.PINGREQ << 4, 0]);
}

export function encodePingresp(): Buffer {
  return Buffer.from([PacketType.PINGRESP << 4, 0]);
}

export function encodeDisconnect(_level: ProtocolLevel = 4): Buffer {
  return Buffer.from([PacketType.DISCONNECT << 4, 0]);
}

/** Encodes any packet (tests, load generators); the server's hot paths call the specific encoders. */
export function encodePacket(p: MqttPacket, level: ProtocolLevel = 4): Buffer {
  switch (p.type) {
    case 'connect':
      return encodeConnect(p);
    case 'connack':
      return encodeConnack(p, level);
    case 'publish':
      return encodePublish(p, level);
    case 'puback':
    case 'pubrec':
    case 'pubrel':
    case 'pubcomp':
    case 'unsuback':
      return encodeIdOnly(p.type, p.packetId, level);
    case 'subscribe':
      return encodeSubscribe(p, level);
    case 'suback':
      return encodeSuback(p, level);
    case 'unsubscribe':
      return encodeUnsubscribe(p, level);
    case 'pingreq':
      return encodePingreq();
    case 'pingresp':
      return encodePingresp();
    case 'disconnect':
      return encodeDisconnect(level);
  }
}
