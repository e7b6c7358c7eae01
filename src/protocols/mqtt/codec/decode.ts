/**
 * MQTT packet decoder: pure functions over bytes, no sockets, no state between calls.
 *
 * `parsePacket` is streaming-friendly: it looks at the bytes from `offset`, and returns either one decoded
 * packet with the number of bytes it used, or INCOMPLETE when more bytes are needed. Bad input throws
 * `MqttProtocolError` (and nothing else): the caller closes the connection, after a CONNACK or (v5) a
 * DISCONNECT carrying the error's reason code. Checks that need only the first byte or the length field run
 * before the whole packet has arrived, so garbage and oversized packets are refused at once instead of being
 * buffered.
 *
 * Payloads (PUBLISH payload, will message, password, binary properties) are views into the input buffer, not
 * copies: the input must not be modified afterwards (socket chunks never are).
 */
import { isUtf8 } from 'node:buffer';
import type { QoS } from '../../../core/index.js';
import { MqttProtocolError } from './errors.js';
import {
  ConnackCode,
  PacketType,
  ReasonCode,
  SUBACK_FAILURE,
  type ConnectPacket,
  type MqttPacket,
  type Properties,
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

/** Protocol levels this codec decodes. */
export const SUPPORTED_LEVELS: readonly ProtocolLevel[] = [3, 4, 5];

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
  'AUTH',
];

const MALFORMED = ReasonCode.MALFORMED_PACKET;
const PROTOCOL = ReasonCode.PROTOCOL_ERROR;

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
export function parsePacket(buf: Buffer, offset = 0, maxPacketSize = MAX_REMAINING_LENGTH + 5, protocolLevel: ProtocolLevel = 4): ParseResult | Incomplete {
  const avail = buf.length - offset;
  if (avail < 1) return INCOMPLETE;
  const b0 = buf[offset];
  const type = b0 >> 4;
  const flags = b0 & 0x0f;
  const v5 = protocolLevel === 5;
  if (type === 0 || (type === PacketType.AUTH && !v5)) {
    throw new MqttProtocolError(`reserved packet type ${type}`, '[MQTT-4.8.0-1]', undefined, MALFORMED);
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
    // [MQTT-3.2.2-15] (v5: the server's Maximum Packet Size) -> reason code 0x95 Packet too large.
    throw new MqttProtocolError(
      `packet of ${total} bytes exceeds the maximum packet size of ${maxPacketSize}`,
      '[MQTT-3.2.2-15]',
      undefined,
      ReasonCode.PACKET_TOO_LARGE,
    );
  }
  if (avail < total) return INCOMPLETE;
  const end = offset + total;

  if (type === PacketType.CONNECT) return { packet: decodeConnect(buf, i, end), bytesConsumed: total };
  let packet: MqttPacket;
  switch (type) {
    case PacketType.PUBLISH:
      packet = decodePublish(buf, flags, i, end, v5);
      break;
    case PacketType.CONNACK:
      packet = v5 ? decodeConnack5(buf, i, end) : decodeConnack(buf, i, end);
      break;
    case PacketType.PUBACK:
    case PacketType.PUBREC:
    case PacketType.PUBREL:
    case PacketType.PUBCOMP:
      packet = decodeAck(buf, type, i, end, v5);
      break;
    case PacketType.SUBSCRIBE:
      packet = decodeSubscribe(buf, i, end, v5);
      break;
    case PacketType.SUBACK:
      packet = decodeSuback(buf, i, end, v5);
      break;
    case PacketType.UNSUBSCRIBE:
      packet = decodeUnsubscribe(buf, i, end, v5);
      break;
    case PacketType.UNSUBACK:
      packet = decodeUnsuback(buf, i, end, v5);
      break;
    case PacketType.PINGREQ:
      expectEmpty(i, end, 'PINGREQ');
      packet = { type: 'pingreq' };
      break;
    case PacketType.PINGRESP:
      expectEmpty(i, end, 'PINGRESP');
      packet = { type: 'pingresp' };
      break;
    case PacketType.DISCONNECT:
      packet = v5 ? decodeDisconnect5(buf, i, end) : (expectEmpty(i, end, 'DISCONNECT'), { type: 'disconnect' });
      break;
    default: // AUTH, v5 only (refused above for other levels)
      packet = decodeAuth(buf, i, end);
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

/**
 * Decodes bytes [start, stop) as an MQTT UTF-8 string: well-formed UTF-8 without surrogates or overlong forms
 * [MQTT-1.5.3-1] (v5 [MQTT-1.5.4-1]) and without U+0000 [MQTT-1.5.3-2] (v5 [MQTT-1.5.4-2]). A 0x00 byte can
 * only encode U+0000 in valid UTF-8, so a byte scan finds it. ASCII (the common case) skips the full validator.
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
    public end: number,
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

  u32(what: string): number {
    if (this.end - this.pos < 4) throw truncated(what);
    const v = this.buf.readUInt32BE(this.pos);
    this.pos += 4;
    return v;
  }

  /** Variable Byte Integer (section 1.5.5): at most four bytes [MQTT-1.5.5-1]. */
  varint(what: string): number {
    let v = 0;
    let mult = 1;
    for (let n = 1; ; n++) {
      const b = this.u8(what);
      v += (b & 0x7f) * mult;
      if ((b & 0x80) === 0) return v;
      if (n === 4) throw new MqttProtocolError(`${what}: variable byte integer longer than four bytes`, '[MQTT-1.5.5-1]');
      mult *= 128;
    }
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
function checkTopicName(topic: string, what: string, allowEmpty = false): void {
  if (topic.length === 0) {
    if (allowEmpty) return;
    throw new MqttProtocolError(`${what} is empty`, '[MQTT-4.7.3-1]', undefined, PROTOCOL);
  }
  for (let k = 0; k < topic.length; k++) {
    const c = topic.charCodeAt(k);
    if (c === 0x2b || c === 0x23) {
      throw new MqttProtocolError(`${what} "${topic}" contains a wildcard`, '[MQTT-3.3.2-2]', undefined, ReasonCode.TOPIC_NAME_INVALID);
    }
  }
}

// ------------------------------------------------------------------ v5 properties

type PropKind = 'byte' | 'u16' | 'u32' | 'varint' | 'utf8' | 'binary' | 'pair';

/** Where a property may appear: bit per packet type, plus bit 0 for the will properties of CONNECT. */
const WILL = 0;
const bit = (...types: number[]): number => types.reduce((m, t) => m | (1 << t), 0);
const T = PacketType;
const ACKS = bit(T.PUBACK, T.PUBREC, T.PUBREL, T.PUBCOMP);

interface PropDef {
  id: number;
  name: keyof Properties;
  kind: PropKind;
  where: number;
  /** Allowed values for byte properties that are booleans or QoS. */
  max?: number;
  /** 0 is a Protocol Error (Receive Maximum, Maximum Packet Size, Topic Alias, Subscription Identifier). */
  nonZero?: boolean;
}

/** Table 2-4 of MQTT 5.0. */
export const PROPERTY_DEFS: readonly PropDef[] = [
  { id: 0x01, name: 'payloadFormatIndicator', kind: 'byte', where: bit(T.PUBLISH, WILL), max: 1 },
  { id: 0x02, name: 'messageExpiryInterval', kind: 'u32', where: bit(T.PUBLISH, WILL) },
  { id: 0x03, name: 'contentType', kind: 'utf8', where: bit(T.PUBLISH, WILL) },
  { id: 0x08, name: 'responseTopic', kind: 'utf8', where: bit(T.PUBLISH, WILL) },
  { id: 0x09, name: 'correlationData', kind: 'binary', where: bit(T.PUBLISH, WILL) },
  { id: 0x0b, name: 'subscriptionIdentifiers', kind: 'varint', where: bit(T.PUBLISH, T.SUBSCRIBE), nonZero: true },
  { id: 0x11, name: 'sessionExpiryInterval', kind: 'u32', where: bit(T.CONNECT, T.CONNACK, T.DISCONNECT) },
  { id: 0x12, name: 'assignedClientIdentifier', kind: 'utf8', where: bit(T.CONNACK) },
  { id: 0x13, name: 'serverKeepAlive', kind: 'u16', where: bit(T.CONNACK) },
  { id: 0x15, name: 'authenticationMethod', kind: 'utf8', where: bit(T.CONNECT, T.CONNACK, T.AUTH) },
  { id: 0x16, name: 'authenticationData', kind: 'binary', where: bit(T.CONNECT, T.CONNACK, T.AUTH) },
  { id: 0x17, name: 'requestProblemInformation', kind: 'byte', where: bit(T.CONNECT), max: 1 },
  { id: 0x18, name: 'willDelayInterval', kind: 'u32', where: bit(WILL) },
  { id: 0x19, name: 'requestResponseInformation', kind: 'byte', where: bit(T.CONNECT), max: 1 },
  { id: 0x1a, name: 'responseInformation', kind: 'utf8', where: bit(T.CONNACK) },
  { id: 0x1c, name: 'serverReference', kind: 'utf8', where: bit(T.CONNACK, T.DISCONNECT) },
  {
    id: 0x1f,
    name: 'reasonString',
    kind: 'utf8',
    where: bit(T.CONNACK, T.SUBACK, T.UNSUBACK, T.DISCONNECT, T.AUTH) | ACKS,
  },
  { id: 0x21, name: 'receiveMaximum', kind: 'u16', where: bit(T.CONNECT, T.CONNACK), nonZero: true },
  { id: 0x22, name: 'topicAliasMaximum', kind: 'u16', where: bit(T.CONNECT, T.CONNACK) },
  { id: 0x23, name: 'topicAlias', kind: 'u16', where: bit(T.PUBLISH), nonZero: true },
  { id: 0x24, name: 'maximumQoS', kind: 'byte', where: bit(T.CONNACK), max: 1 },
  { id: 0x25, name: 'retainAvailable', kind: 'byte', where: bit(T.CONNACK), max: 1 },
  { id: 0x26, name: 'userProperties', kind: 'pair', where: 0xffff },
  { id: 0x27, name: 'maximumPacketSize', kind: 'u32', where: bit(T.CONNECT, T.CONNACK), nonZero: true },
  { id: 0x28, name: 'wildcardSubscriptionAvailable', kind: 'byte', where: bit(T.CONNACK), max: 1 },
  { id: 0x29, name: 'subscriptionIdentifierAvailable', kind: 'byte', where: bit(T.CONNACK), max: 1 },
  { id: 0x2a, name: 'sharedSubscriptionAvailable', kind: 'byte', where: bit(T.CONNACK), max: 1 },
];

const DEF_BY_ID: Array<PropDef | undefined> = [];
for (const d of PROPERTY_DEFS) DEF_BY_ID[d.id] = d;

/**
 * Reads a property block (its length, then properties) for packet type `where` (0 = will properties).
 * An identifier not valid for the packet is a Malformed Packet [MQTT-2.2.2-2]; a repeated single-valued
 * property or a forbidden value is a Protocol Error (section 3.x.2.x of each property).
 */
function readProperties(r: Reader, where: number, name: string): Properties {
  const len = r.varint(`${name} property length`);
  if (r.left < len) throw truncated(`${name} properties`);
  const stop = r.pos + len;
  const outerEnd = r.end;
  r.end = stop;
  const props: Properties = {};
  const bag = props as Record<string, unknown>;
  while (r.pos < stop) {
    const id = r.varint(`${name} property identifier`);
    const def = id < DEF_BY_ID.length ? DEF_BY_ID[id] : undefined;
    if (def === undefined || (def.where & (1 << where)) === 0) {
      throw new MqttProtocolError(`${name} has property 0x${id.toString(16)} which it may not carry`, '[MQTT-2.2.2-2]');
    }
    let value: number | string | Buffer | [string, string];
    switch (def.kind) {
      case 'byte':
        value = r.u8(def.name);
        break;
      case 'u16':
        value = r.u16(def.name);
        break;
      case 'u32':
        value = r.u32(def.name);
        break;
      case 'varint':
        value = r.varint(def.name);
        break;
      case 'utf8':
        value = r.utf8(def.name);
        break;
      case 'binary':
        value = r.binary(def.name);
        break;
      default:
        value = [r.utf8('user property name'), r.utf8('user property value')];
    }
    if (typeof value === 'number') {
      if (def.max !== undefined && value > def.max) {
        throw new MqttProtocolError(`${name} property ${def.name} has value ${value}`, '[MQTT-3.1.2-11]', undefined, PROTOCOL);
      }
      if (def.nonZero && value === 0) {
        throw new MqttProtocolError(`${name} property ${def.name} is 0`, '[MQTT-3.3.4-6]', undefined, PROTOCOL);
      }
    }
    if (def.name === 'userProperties') {
      (props.userProperties ??= []).push(value as [string, string]);
    } else if (def.name === 'subscriptionIdentifiers') {
      // [MQTT-3.8.2-1] SUBSCRIBE carries at most one; PUBLISH one per matching subscription.
      if (props.subscriptionIdentifiers !== undefined && where !== PacketType.PUBLISH) {
        throw new MqttProtocolError(`${name} repeats the subscription identifier`, '[MQTT-3.8.2-1]', undefined, PROTOCOL);
      }
      (props.subscriptionIdentifiers ??= []).push(value as number);
    } else {
      if (bag[def.name] !== undefined) {
        throw new MqttProtocolError(`${name} repeats property ${def.name}`, '[MQTT-2.2.2-2]', undefined, PROTOCOL);
      }
      bag[def.name] = value;
    }
  }
  r.end = outerEnd;
  return props;
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
  if ((protocolName === 'MQTT' && level !== 4 && level !== 5) || (protocolName === 'MQIsdp' && level !== 3)) {
    // Answered with the 3.1.1 CONNACK 0x01: a client of an unknown level can read that layout [MQTT-3.1.2-2].
    throw new MqttProtocolError(
      `unsupported protocol level ${level} for "${protocolName}"`,
      '[MQTT-3.1.2-2]',
      ConnackCode.UNACCEPTABLE_PROTOCOL_VERSION,
      ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
    );
  }
  const protocolLevel = level as ProtocolLevel;
  try {
    return decodeConnectBody(r, protocolName, protocolLevel);
  } catch (err) {
    // Once the level is known, the reply to a bad CONNECT is a CONNACK of that level (v5: with a reason code).
    if (err instanceof MqttProtocolError && err.protocolLevel === undefined) err.protocolLevel = protocolLevel;
    throw err;
  }
}

function decodeConnectBody(r: Reader, protocolName: string, protocolLevel: ProtocolLevel): ConnectPacket {
  const v5 = protocolLevel === 5;
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
  // v5 allows a password without a user name (section 3.1.2.9); 3.1.1 does not.
  if (passwordFlag && !usernameFlag && !v5) {
    throw new MqttProtocolError('password flag set without the user name flag', '[MQTT-3.1.2-22]');
  }
  const keepalive = r.u16('keep alive');
  const properties = v5 ? readProperties(r, PacketType.CONNECT, 'CONNECT') : undefined;
  if (properties?.authenticationData !== undefined && properties.authenticationMethod === undefined) {
    throw new MqttProtocolError('authentication data without a method', '[MQTT-3.1.2-11]', undefined, PROTOCOL);
  }
  // Payload order is fixed: client id, will topic, will message, user name, password [MQTT-3.1.3-1].
  const clientId = r.utf8('client identifier');
  let will: Will | null = null;
  if (willFlag) {
    const willProps = v5 ? readProperties(r, WILL, 'will') : undefined;
    const topic = r.utf8('will topic');
    checkTopicName(topic, 'will topic');
    const payload = r.binary('will message');
    will = { topic, payload, qos: willQos as QoS, retain: willRetain };
    if (willProps !== undefined) will.properties = willProps;
  }
  const username = usernameFlag ? r.utf8('user name') : null;
  const password = passwordFlag ? r.binary('password') : null;
  if (r.left !== 0) {
    throw new MqttProtocolError('CONNECT has bytes after its payload', '[MQTT-3.1.4-1]');
  }
  const p: ConnectPacket = {
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
  if (properties !== undefined) p.properties = properties;
  return p;
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

function decodeConnack5(buf: Buffer, pos: number, end: number): MqttPacket {
  const r = new Reader(buf, pos, end);
  const ackFlags = r.u8('acknowledge flags');
  const returnCode = r.u8('reason code');
  if (ackFlags & 0xfe) throw new MqttProtocolError('CONNACK reserved acknowledge flags are set', '[MQTT-3.2.2-1]');
  const sessionPresent = ackFlags === 1;
  if (sessionPresent && returnCode !== 0) {
    throw new MqttProtocolError('CONNACK session present with a non-zero reason code', '[MQTT-3.2.2-6]');
  }
  const properties = readProperties(r, PacketType.CONNACK, 'CONNACK');
  if (r.left !== 0) throw new MqttProtocolError('CONNACK has bytes after its properties');
  return { type: 'connack', sessionPresent, returnCode, properties };
}

/** The hot path: inlined reads, one string decode, the payload as a view. */
function decodePublish(buf: Buffer, flags: number, pos: number, end: number, v5: boolean): PublishPacket {
  const qos = ((flags >> 1) & 0x03) as QoS; // 3 was refused from the first byte
  const dup = (flags & 0x08) !== 0;
  if (dup && qos === 0) throw new MqttProtocolError('PUBLISH QoS 0 with DUP set', '[MQTT-3.3.1-2]');
  if (end - pos < 2) throw truncated('topic name');
  const tlen = (buf[pos] << 8) | buf[pos + 1];
  pos += 2;
  if (end - pos < tlen) throw truncated('topic name');
  const topic = decodeUtf8(buf, pos, pos + tlen, 'topic name');
  // v5: an empty topic is allowed when a Topic Alias stands for it (checked below, after the properties).
  checkTopicName(topic, 'topic name', v5);
  pos += tlen;
  let packetId = 0;
  if (qos > 0) {
    if (end - pos < 2) throw truncated('packet identifier');
    packetId = (buf[pos] << 8) | buf[pos + 1];
    pos += 2;
    if (packetId === 0) throw new MqttProtocolError('PUBLISH QoS > 0 with packet identifier 0', '[MQTT-2.3.1-1]');
  }
  if (!v5) {
    return { type: 'publish', dup, qos, retain: (flags & 0x01) !== 0, topic, packetId, payload: buf.subarray(pos, end) };
  }
  const r = new Reader(buf, pos, end);
  const properties = readProperties(r, PacketType.PUBLISH, 'PUBLISH');
  if (topic.length === 0 && properties.topicAlias === undefined) {
    throw new MqttProtocolError('PUBLISH without topic name or topic alias', '[MQTT-3.3.4-1]', undefined, PROTOCOL);
  }
  const payload = buf.subarray(r.pos, end);
  // [MQTT-3.3.2-6] a receiver MAY check a payload announced as UTF-8; we do, it is cheap next to delivery.
  if (properties.payloadFormatIndicator === 1 && !isUtf8(payload)) {
    throw new MqttProtocolError('PUBLISH payload announced as UTF-8 is not', '[MQTT-3.3.2-6]', undefined, ReasonCode.PAYLOAD_FORMAT_INVALID);
  }
  return { type: 'publish', dup, qos, retain: (flags & 0x01) !== 0, topic, packetId, payload, properties };
}

const ACK_NAMES: Record<number, 'puback' | 'pubrec' | 'pubrel' | 'pubcomp'> = {
  [PacketType.PUBACK]: 'puback',
  [PacketType.PUBREC]: 'pubrec',
  [PacketType.PUBREL]: 'pubrel',
  [PacketType.PUBCOMP]: 'pubcomp',
};

function decodeAck(buf: Buffer, type: number, pos: number, end: number, v5: boolean): MqttPacket {
  const name = ACK_NAMES[type];
  const upper = name.toUpperCase();
  if (!v5 && end - pos !== 2) throw new MqttProtocolError(`malformed ${upper}: remaining length must be 2`);
  const r = new Reader(buf, pos, end);
  const packetId = r.u16('packet identifier');
  // Acknowledgements echo the identifier of their request [MQTT-2.3.1-6] [MQTT-2.3.1-7], which is never 0.
  if (packetId === 0) throw new MqttProtocolError(`${upper} with packet identifier 0`, '[MQTT-2.3.1-1]');
  if (!v5) return { type: name, packetId };
  // v5: reason code and properties may be omitted, meaning 0x00 and none (section 3.4.2.1).
  const reasonCode = r.left > 0 ? r.u8('reason code') : 0;
  const properties = r.left > 0 ? readProperties(r, type, upper) : {};
  if (r.left !== 0) throw new MqttProtocolError(`${upper} has bytes after its properties`);
  return { type: name, packetId, reasonCode, properties };
}

function decodeSubscribe(buf: Buffer, pos: number, end: number, v5: boolean): MqttPacket {
  const r = new Reader(buf, pos, end);
  const packetId = r.u16('packet identifier');
  if (packetId === 0) throw new MqttProtocolError('SUBSCRIBE with packet identifier 0', '[MQTT-2.3.1-1]');
  const properties = v5 ? readProperties(r, PacketType.SUBSCRIBE, 'SUBSCRIBE') : undefined;
  const subscriptions: SubscriptionRequest[] = [];
  while (r.left > 0) {
    const filter = r.utf8('topic filter');
    const options = r.u8('subscription options');
    if (v5) {
      // [MQTT-3.8.3-5] bits 6-7 reserved; retain handling 3 is a Protocol Error.
      if (options & 0xc0) throw new MqttProtocolError('SUBSCRIBE reserved option bits are set', '[MQTT-3.8.3-5]');
      if ((options & 0x03) === 3) throw new MqttProtocolError('SUBSCRIBE requests QoS 3', '[MQTT-3.8.3-5]', undefined, PROTOCOL);
      const rh = (options >> 4) & 0x03;
      if (rh === 3) throw new MqttProtocolError('SUBSCRIBE retain handling 3', '[MQTT-3.8.3-5]', undefined, PROTOCOL);
      subscriptions.push({
        filter,
        qos: (options & 0x03) as QoS,
        noLocal: (options & 0x04) !== 0,
        retainAsPublished: (options & 0x08) !== 0,
        retainHandling: rh as 0 | 1 | 2,
      });
      continue;
    }
    // The spec prints this id as "MQTT-3-8.3-4": reserved bits must be 0 and QoS must be 0, 1 or 2.
    if (options & 0xfc) throw new MqttProtocolError('SUBSCRIBE reserved option bits are set', '[MQTT-3.8.3-4]');
    if (options === 3) throw new MqttProtocolError('SUBSCRIBE requests QoS 3', '[MQTT-3.8.3-4]');
    subscriptions.push({ filter, qos: options as QoS });
  }
  if (subscriptions.length === 0) {
    throw new MqttProtocolError('SUBSCRIBE without any topic filter', '[MQTT-3.8.3-3]', undefined, PROTOCOL);
  }
  return properties !== undefined ? { type: 'subscribe', packetId, subscriptions, properties } : { type: 'subscribe', packetId, subscriptions };
}

/** v5 SUBACK reason codes (section 3.9.3). */
const SUBACK5_CODES = new Set([0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8f, 0x91, 0x97, 0x9e, 0xa1, 0xa2]);

function decodeSuback(buf: Buffer, pos: number, end: number, v5: boolean): MqttPacket {
  const r = new Reader(buf, pos, end);
  const packetId = r.u16('packet identifier');
  if (packetId === 0) throw new MqttProtocolError('SUBACK with packet identifier 0', '[MQTT-2.3.1-1]');
  const properties = v5 ? readProperties(r, PacketType.SUBACK, 'SUBACK') : undefined;
  const returnCodes: number[] = [];
  while (r.left > 0) {
    const c = r.u8('return code');
    if (v5 ? !SUBACK5_CODES.has(c) : c > 2 && c !== SUBACK_FAILURE) {
      throw new MqttProtocolError(`SUBACK reserved return code 0x${c.toString(16)}`, '[MQTT-3.9.3-2]');
    }
    returnCodes.push(c);
  }
  if (returnCodes.length === 0) throw new MqttProtocolError('SUBACK without any return code');
  return properties !== undefined ? { type: 'suback', packetId, returnCodes, properties } : { type: 'suback', packetId, returnCodes };
}

function decodeUnsubscribe(buf: Buffer, pos: number, end: number, v5: boolean): MqttPacket {
  const r = new Reader(buf, pos, end);
  const packetId = r.u16('packet identifier');
  if (packetId === 0) throw new MqttProtocolError('UNSUBSCRIBE with packet identifier 0', '[MQTT-2.3.1-1]');
  const properties = v5 ? readProperties(r, PacketType.UNSUBSCRIBE, 'UNSUBSCRIBE') : undefined;
  const filters: string[] = [];
  while (r.left > 0) filters.push(r.utf8('topic filter'));
  if (filters.length === 0) {
    throw new MqttProtocolError('UNSUBSCRIBE without any topic filter', '[MQTT-3.10.3-2]', undefined, PROTOCOL);
  }
  return properties !== undefined ? { type: 'unsubscribe', packetId, filters, properties } : { type: 'unsubscribe', packetId, filters };
}

function decodeUnsuback(buf: Buffer, pos: number, end: number, v5: boolean): MqttPacket {
  const r = new Reader(buf, pos, end);
  if (!v5 && end - pos !== 2) throw new MqttProtocolError('malformed UNSUBACK: remaining length must be 2');
  const packetId = r.u16('packet identifier');
  if (packetId === 0) throw new MqttProtocolError('UNSUBACK with packet identifier 0', '[MQTT-2.3.1-1]');
  if (!v5) return { type: 'unsuback', packetId };
  const properties = readProperties(r, PacketType.UNSUBACK, 'UNSUBACK');
  const reasonCodes: number[] = [];
  while (r.left > 0) reasonCodes.push(r.u8('reason code'));
  if (reasonCodes.length === 0) throw new MqttProtocolError('UNSUBACK without any reason code');
  return { type: 'unsuback', packetId, reasonCodes, properties };
}

function decodeDisconnect5(buf: Buffer, pos: number, end: number): MqttPacket {
  const r = new Reader(buf, pos, end);
  // Remaining length 0 means reason 0x00 and no properties (section 3.14.2.1).
  const reasonCode = r.left > 0 ? r.u8('reason code') : 0;
  const properties = r.left > 0 ? readProperties(r, PacketType.DISCONNECT, 'DISCONNECT') : {};
  if (r.left !== 0) throw new MqttProtocolError('DISCONNECT has bytes after its properties');
  return { type: 'disconnect', reasonCode, properties };
}

function decodeAuth(buf: Buffer, pos: number, end: number): MqttPacket {
  const r = new Reader(buf, pos, end);
  const reasonCode = r.left > 0 ? r.u8('reason code') : 0;
  // [MQTT-3.15.2-1] only 0x00, 0x18 and 0x19 exist.
  if (reasonCode !== 0x00 && reasonCode !== 0x18 && reasonCode !== 0x19) {
    throw new MqttProtocolError(`AUTH reason code 0x${reasonCode.toString(16)}`, '[MQTT-3.15.2-1]');
  }
  const properties = r.left > 0 ? readProperties(r, PacketType.AUTH, 'AUTH') : {};
  if (r.left !== 0) throw new MqttProtocolError('AUTH has bytes after its properties');
  return { type: 'auth', reasonCode, properties };
}
