/**
 * MQTT packet decoder: pure functions over bytes, no sockets, no state between calls.
 *
 * `parsePacket` is streaming-friendly: it looks at the bytes from `offset`, and returns either one decoded
 * packet with the number of bytes it used, or INCOMPLETE when more bytes are needed. Bad input throws
 * `MqttProtocolError` (and nothing else): the caller closes the connection. Checks that need only the first
 * byte or the length field run before the whole packet has arrived, so garbage and oversized packets are
 * refused at once instead of being buffered.
 *
 * Payloads (PUBLISH payload, will message, password) are views into the input buffer, not copies: the input
 * must not be modified afterwards (socket chunks never are).
 */
import { isUtf8 } from 'node:buffer';
import type { QoS } from '../../../core/index.js';
import { MqttProtocolError } from './errors.js';
import {
  ConnackCode,
  PacketType,
  SUBACK_FAILURE,
  type ConnectPacket,
  type MqttPacket,
  type ProtocolLevel,
  type PublishPacket,
  type SubscriptionRequest,
  type Will,
} from './types.js';

export const INCOMPLETE = 'incomplete' as const;
export type Incomplete = typeof INCOMPLETE;

export interface ParseResult {
  packet: MqttPacket;
  bytesConsumed: number;
}

/** Largest value the 4-byte Remaining Length field can carry (section 2.2.3). */
export const MAX_REMAINING_LENGTH = 268_435_455;

/** Protocol levels this codec decodes. Level 5 (MQTT 5.0) is added with its property blocks. */
export const SUPPORTED_LEVELS: readonly ProtocolLevel[] = [3, 4];

const TYPE_NAMES = [
  'reserved(0)',
  'CONNECT',
  'CONNACK',
  'PUBLISH',
  'PUBACK',
  'PUBREC',
  'PUBREL',
  'PUBCOMP',
  'SUBSCRIBE',
  'SUBACK',
  'UNSUBSCRIBE',
  'UNSUBACK',
  'PINGREQ',
  'PINGRESP',
  'DISCONNECT',
  'reserved(15)',
];

/**
 * Checks the fixed-header flags of a non-PUBLISH packet (table 2.2): PUBREL, SUBSCRIBE and UNSUBSCRIBE carry
 * 0010, every other type 0000. Invalid flags close the connection [MQTT-2.2.2-1] [MQTT-2.2.2-2].
 */
function checkFlags(type: number, flags: number): void {
  switch (type) {
    case PacketType.PUBREL:
      if (flags !== 2) throw new MqttProtocolError('PUBREL fixed-header flags must be 0010', '[MQTT-3.6.1-1]');
      return;
    case PacketType.SUBSCRIBE:
      if (flags !== 2) throw new MqttProtocolError('SUBSCRIBE fixed-header flags must be 0010', '[MQTT-3.8.1-1]');
      return;
    case PacketType.UNSUBSCRIBE:
      if (flags !== 2) throw new MqttProtocolError('UNSUBSCRIBE fixed-header flags must be 0010', '[MQTT-3.10.1-1]');
      return;
    case PacketType.DISCONNECT:
      if (flags !== 0) throw new MqttProtocolError('DISCONNECT fixed-header flags must be 0000', '[MQTT-3.14.1-1]');
      return;
    default:
      if (flags !== 0) {
        throw new MqttProtocolError(`${TYPE_NAMES[type]} fixed-header flags must be 0000`, '[MQTT-2.2.2-2]');
      }
  }
}

/**
 * Total size (fixed header included) of the packet starting at `offset`, or -1 when its length field has not
 * fully arrived. Lets a reader wait for a large packet without re-parsing on every chunk. Does not validate.
 */
export function peekFrameLength(buf: Buffer, offset = 0): number {
  let len = 0;
  let mult = 1;
  for (let i = offset + 1; i < offset + 5; i++) {
    if (i >= buf.length) return -1;
    const b = buf[i];
    len += (b & 0x7f) * mult;
    if ((b & 0x80) === 0) return i + 1 - offset + len;
    mult *= 128;
  }
  return -1;
}

/**
 * Decodes the packet starting at `buf[offset]`.
 * @param maxPacketSize largest accepted packet, fixed header included; a larger one throws as soon as its
 *   length field is known.
 * @param protocolLevel level negotiated by CONNECT (use 4 before CONNECT; CONNECT itself carries its level).
 */
export function parsePacket(
  buf: Buffer,
  offset = 0,
  maxPacketSize = MAX_REMAINING_LENGTH + 5,
  protocolLevel: ProtocolLevel = 4,
): ParseResult | Incomplete {
  const avail = buf.length - offset;
  if (avail < 1) return INCOMPLETE;
  const b0 = buf[offset];
  const type = b0 >> 4;
  const flags = b0 & 0x0f;
  if (type === 0 || type === 15) {
    throw new MqttProtocolError(`reserved packet type ${type}`, '[MQTT-4.8.0-1]');
  }
  if (type !== PacketType.PUBLISH) checkFlags(type, flags);
  else if ((flags & 0x06) === 0x06) {
    throw new MqttProtocolError('PUBLISH with QoS 3', '[MQTT-3.3.1-4]');
  }

  // Remaining Length: 7 bits a byte, least significant first, at most four bytes (section 2.2.3).
  let remaining = 0;
  let mult = 1;
  let i = offset + 1;
  for (let n = 1; ; n++) {
    if (i >= buf.length) return INCOMPLETE;
    const b = buf[i++];
    remaining += (b & 0x7f) * mult;
    if ((b & 0x80) === 0) break;
    if (n === 4) throw new MqttProtocolError('remaining length field longer than four bytes (section 2.2.3)');
    mult *= 128;
  }
  const total = i - offset + remaining;
  if (total > maxPacketSize) {
    throw new MqttProtocolError(`packet of ${total} bytes exceeds the maximum packet size of ${maxPacketSize}`);
  }
  if (avail < total) return INCOMPLETE;
  const end = offset + total;

  if (type === PacketType.CONNECT) return { packet: decodeConnect(buf, i, end), bytesConsumed: total };
  if (protocolLevel !== 3 && protocolLevel !== 4) {
    // MQTT 5.0 packets carry reason codes and properties; they are decoded once level 5 is supported.
    throw new MqttProtocolError(`protocol level ${protocolLevel} is not supported`);
  }
  let packet: MqttPacket;
  switch (type) {
    case PacketType.PUBLISH:
      packet = decodePublish(buf, flags, i, end);
      break;
    case PacketType.CONNACK:
      packet = decodeConnack(buf, i, end);
      break;
    case PacketType.PUBACK:
      packet = { type: 'puback', packetId: decodeIdOnly(buf, i, end, 'PUBACK') };
      break;
    case PacketType.PUBREC:
      packet = { type: 'pubrec', packetId: decodeIdOnly(buf, i, end, 'PUBREC') };
      break;
    case PacketType.PUBREL:
      packet = { type: 'pubrel', packetId: decodeIdOnly(buf, i, end, 'PUBREL') };
      break;
    case PacketType.PUBCOMP:
      packet = { type: 'pubcomp', packetId: decodeIdOnly(buf, i, end, 'PUBCOMP') };
      break;
    case PacketType.SUBSCRIBE:
      packet = decodeSubscribe(buf, i, end);
      break;
    case PacketType.SUBACK:
      packet = decodeSuback(buf, i, end);
      break;
    case PacketType.UNSUBSCRIBE:
      packet = decodeUnsubscribe(buf, i, end);
      break;
    case PacketType.UNSUBACK:
      packet = { type: 'unsuback', packetId: decodeIdOnly(buf, i, end, 'UNSUBACK') };
      break;
    case PacketType.PINGREQ:
      expectEmpty(i, end, 'PINGREQ');
      packet = { type: 'pingreq' };
      break;
    case PacketType.PINGRESP:
      expectEmpty(i, end, 'PINGRESP');
      packet = { type: 'pingresp' };
      break;
    default: // PacketType.DISCONNECT: 0 and 15 were refused above
      expectEmpty(i, end, 'DISCONNECT');
      packet = { type: 'disconnect' };
  }
  return { packet, bytesConsumed: total };
}

// ------------------------------------------------------------------ primitives

function truncated(what: string): MqttProtocolError {
  return new MqttProtocolError(`malformed packet: ${what} runs past the end of the packet`);
}

function expectEmpty(pos: number, end: number, name: string): void {
  if (pos !== end) throw new MqttProtocolError(`malformed ${name}: remaining length must be 0`);
}

function decodeIdOnly(buf: Buffer, pos: number, end: number, name: string): number {
  if (end - pos !== 2) throw new MqttProtocolError(`malformed ${name}: remaining length must be 2`);
  const id = (buf[pos] << 8) | buf[pos + 1];
  // Acknowledgements echo the identifier of their request [MQTT-2.3.1-6] [MQTT-2.3.1-7], which is never 0.
  if (id === 0) throw new MqttProtocolError(`${name} with packet identifier 0`, '[MQTT-2.3.1-1]');
  return id;
}

/**
 * Decodes bytes [start, stop) as an MQTT UTF-8 string: well-formed UTF-8 without surrogates or overlong forms
 * [MQTT-1.5.3-1] and without U+0000 [MQTT-1.5.3-2]. A 0x00 byte can only encode U+0000 in valid UTF-8, so a
 * byte scan finds it. ASCII (the common case) skips the full validator.
 */
function decodeUtf8(buf: Buffer, start: number, stop: number, what: string): string {
  let ascii = true;
  for (let k = start; k < stop; k++) {
    const b = buf[k];
    if (b === 0) throw new MqttProtocolError(`${what} contains U+0000`, '[MQTT-1.5.3-2]');
    if (b >= 0x80) ascii = false;
  }
  if (ascii) return buf.toString('latin1', start, stop);
  if (!isUtf8(buf.subarray(start, stop))) {
    throw new MqttProtocolError(`${what} is not well-formed UTF-8`, '[MQTT-1.5.3-1]');
  }
  return buf.toString('utf8', start, stop);
}

/** Sequential reader over [pos, end) of one packet; every read is bounds-checked against `end`. */
class Reader {
  constructor(
    private readonly buf: Buffer,
    public pos: number,
    private readonly end: number,
  ) {}

  get left(): number {
    return this.end - this.pos;
  }

  u8(what: string): number {
    if (this.pos >= this.end) throw truncated(what);
    return this.buf[this.pos++];
  }

  u16(what: string): number {
    if (this.end - this.pos < 2) throw truncated(what);
    const v = (this.buf[this.pos] << 8) | this.buf[this.pos + 1];
    this.pos += 2;
    return v;
  }

  /** A length-prefixed UTF-8 string (section 1.5.3). */
  utf8(what: string): string {
    const len = this.u16(what);
    if (this.end - this.pos < len) throw truncated(what);
    const s = decodeUtf8(this.buf, this.pos, this.pos + len, what);
    this.pos += len;
    return s;
  }

  /** Length-prefixed binary data (will message, password). */
  binary(what: string): Buffer {
    const len = this.u16(what);
    if (this.end - this.pos < len) throw truncated(what);
    const b = this.buf.subarray(this.pos, this.pos + len);
    this.pos += len;
    return b;
  }
}

/** A topic name for publishing (PUBLISH topic, will topic): non-empty and without wildcards. */
function checkTopicName(topic: string, what: string): void {
  if (topic.length === 0) throw new MqttProtocolError(`${what} is empty`, '[MQTT-4.7.3-1]');
  for (let k = 0; k < topic.length; k++) {
    const c = topic.charCodeAt(k);
    if (c === 0x2b || c === 0x23) {
      throw new MqttProtocolError(`${what} "${topic}" contains a wildcard`, '[MQTT-3.3.2-2]');
    }
  }
}

// ------------------------------------------------------------------ packets

function decodeConnect(buf: Buffer, pos: number, end: number): ConnectPacket {
  const r = new Reader(buf, pos, end);
  const protocolName = r.utf8('protocol name');
  const level = r.u8('protocol level');
  if (protocolName !== 'MQTT' && protocolName !== 'MQIsdp') {
    // [MQTT-3.1.2-1] allows a plain close; nothing tells us which protocol this is, so no CONNACK.
    throw new MqttProtocolError(`unknown protocol name "${protocolName}"`, '[MQTT-3.1.2-1]');
  }
  if ((protocolName === 'MQTT' && level !== 4) || (protocolName === 'MQIsdp' && level !== 3)) {
    throw new MqttProtocolError(
      `unsupported protocol level ${level} for "${protocolName}"`,
      '[MQTT-3.1.2-2]',
      ConnackCode.UNACCEPTABLE_PROTOCOL_VERSION,
    );
  }
  const protocolLevel = level as ProtocolLevel;
  const flags = r.u8('connect flags');
  if (flags & 0x01) throw new MqttProtocolError('CONNECT reserved flag is set', '[MQTT-3.1.2-3]');
  const cleanSession = (flags & 0x02) !== 0;
  const willFlag = (flags & 0x04) !== 0;
  const willQos = (flags >> 3) & 0x03;
  const willRetain = (flags & 0x20) !== 0;
  const passwordFlag = (flags & 0x40) !== 0;
  const usernameFlag = (flags & 0x80) !== 0;
  if (willFlag) {
    if (willQos === 3) throw new MqttProtocolError('will QoS 3', '[MQTT-3.1.2-14]');
  } else {
    if (willQos !== 0) throw new MqttProtocolError('will QoS set without the will flag', '[MQTT-3.1.2-13]');
    if (willRetain) throw new MqttProtocolError('will retain set without the will flag', '[MQTT-3.1.2-15]');
  }
  if (passwordFlag && !usernameFlag) {
    throw new MqttProtocolError('password flag set without the user name flag', '[MQTT-3.1.2-22]');
  }
  const keepalive = r.u16('keep alive');
  // Payload order is fixed: client id, will topic, will message, user name, password [MQTT-3.1.3-1].
  const clientId = r.utf8('client identifier');
  let will: Will | null = null;
  if (willFlag) {
    const topic = r.utf8('will topic');
    checkTopicName(topic, 'will topic');
    const payload = r.binary('will message');
    will = { topic, payload, qos: willQos as QoS, retain: willRetain };
  }
  const username = usernameFlag ? r.utf8('user name') : null;
  const password = passwordFlag ? r.binary('password') : null;
  if (r.left !== 0) {
    throw new MqttProtocolError('CONNECT has bytes after its payload', '[MQTT-3.1.4-1]');
  }
  return {
    type: 'connect',
    protocolName,
    protocolLevel,
    cleanSession,
    keepalive,
    clientId,
    will,
    username,
    password,
  };
}

function decodeConnack(buf: Buffer, pos: number, end: number): MqttPacket {
  if (end - pos !== 2) throw new MqttProtocolError('malformed CONNACK: remaining length must be 2');
  const ackFlags = buf[pos];
  const returnCode = buf[pos + 1];
  if (ackFlags & 0xfe) throw new MqttProtocolError('CONNACK reserved acknowledge flags are set');
  if (returnCode > ConnackCode.NOT_AUTHORIZED) {
    throw new MqttProtocolError(`CONNACK reserved return code ${returnCode}`);
  }
  const sessionPresent = ackFlags === 1;
  if (sessionPresent && returnCode !== 0) {
    throw new MqttProtocolError('CONNACK session present with a non-zero return code', '[MQTT-3.2.2-4]');
  }
  return { type: 'connack', sessionPresent, returnCode };
}

/** The hot path: inlined reads, one string decode, the payload as a view. */
function decodePublish(buf: Buffer, flags: number, pos: number, end: number): PublishPacket {
  const qos = ((flags >> 1) & 0x03) as QoS; // 3 was refused from the first byte
  const dup = (flags & 0x08) !== 0;
  if (dup && qos === 0) throw new MqttProtocolError('PUBLISH QoS 0 with DUP set', '[MQTT-3.3.1-2]');
  if (end - pos < 2) throw truncated('topic name');
  const tlen = (buf[pos] << 8) | buf[pos + 1];
  pos += 2;
  if (end - pos < tlen) throw truncated('topic name');
  const topic = decodeUtf8(buf, pos, pos + tlen, 'topic name');
  checkTopicName(topic, 'topic name');
  pos += tlen;
  let packetId = 0;
  if (qos > 0) {
    if (end - pos < 2) throw truncated('packet identifier');
    packetId = (buf[pos] << 8) | buf[pos + 1];
    pos += 2;
    if (packetId === 0) throw new MqttProtocolError('PUBLISH QoS > 0 with packet identifier 0', '[MQTT-2.3.1-1]');
  }
  return { type: 'publish', dup, qos, retain: (flags & 0x01) !== 0, topic, packetId, payload: buf.subarray(pos, end) };
}

function decodeSubscribe(buf: Buffer, pos: number, end: number): MqttPacket {
  const r = new Reader(buf, pos, end);
  const packetId = r.u16('packet identifier');
  if (packetId === 0) throw new MqttProtocolError('SUBSCRIBE with packet identifier 0', '[MQTT-2.3.1-1]');
  const subscriptions: SubscriptionRequest[] = [];
  while (r.left > 0) {
    const filter = r.utf8('topic filter');
    const options = r.u8('requested QoS');
    // The spec prints this id as "MQTT-3-8.3-4": reserved bits must be 0 and QoS must be 0, 1 or 2.
    if (options & 0xfc) throw new MqttProtocolError('SUBSCRIBE reserved option bits are set', '[MQTT-3.8.3-4]');
    if (options === 3) throw new MqttProtocolError('SUBSCRIBE requests QoS 3', '[MQTT-3.8.3-4]');
    subscriptions.push({ filter, qos: options as QoS });
  }
  if (subscriptions.length === 0) {
    throw new MqttProtocolError('SUBSCRIBE without any topic filter', '[MQTT-3.8.3-3]');
  }
  return { type: 'subscribe', packetId, subscriptions };
}

function decodeSuback(buf: Buffer, pos: number, end: number): MqttPacket {
  const r = new Reader(buf, pos, end);
  const packetId = r.u16('packet identifier');
  if (packetId === 0) throw new MqttProtocolError('SUBACK with packet identifier 0', '[MQTT-2.3.1-1]');
  const returnCodes: number[] = [];
  while (r.left > 0) {
    const c = r.u8('return code');
    if (c > 2 && c !== SUBACK_FAILURE) {
      throw new MqttProtocolError(`SUBACK reserved return code 0x${c.toString(16)}`, '[MQTT-3.9.3-2]');
    }
    returnCodes.push(c);
  }
  if (returnCodes.length === 0) throw new MqttProtocolError('SUBACK without any return code');
  return { type: 'suback', packetId, returnCodes };
}

function decodeUnsubscribe(buf: Buffer, pos: number, end: number): MqttPacket {
  const r = new Reader(buf, pos, end);
  const packetId = r.u16('packet identifier');
  if (packetId === 0) throw new MqttProtocolError('UNSUBSCRIBE with packet identifier 0', '[MQTT-2.3.1-1]');
  const filters: string[] = [];
  while (r.left > 0) filters.push(r.utf8('topic filter'));
  if (filters.length === 0) {
    throw new MqttProtocolError('UNSUBSCRIBE without any topic filter', '[MQTT-3.10.3-2]');
  }
  return { type: 'unsubscribe', packetId, filters };
}
