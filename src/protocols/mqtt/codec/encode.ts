/**
 * MQTT packet encoders: pure functions, one exactly-sized Buffer per packet (sizes are computed first, so no
 * growing or concatenating). Encoders check what the receiver would otherwise reject as malformed (lengths,
 * packet identifiers) and throw FlowError('INVALID_ARGUMENT'): that is a caller bug, not peer input.
 *
 * Every encoder takes the protocol level; at level 5 it writes reason codes and the property block, using
 * the short forms the spec allows (an acknowledgement with reason 0x00 and no properties is just its id).
 */
import { FlowError, type QoS } from '../../../core/index.js';
import { MAX_REMAINING_LENGTH, PROPERTY_DEFS } from './decode.js';
import {
  PacketType,
  type ConnackPacket,
  type ConnectPacket,
  type MqttPacket,
  type Properties,
  type ProtocolLevel,
  type PublishPacket,
  type SubackPacket,
  type SubscribePacket,
  type UnsubackPacket,
  type UnsubscribePacket,
} from './types.js';

function invalid(msg: string): FlowError {
  return new FlowError('INVALID_ARGUMENT', `mqtt encode: ${msg}`);
}

/** Bytes taken by a Variable Byte Integer (the Remaining Length field, property lengths) for `n`. */
export function varintSize(n: number): number {
  return n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : 4;
}

function putVarint(out: Buffer, pos: number, n: number): number {
  do {
    let b = n & 0x7f;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out[pos++] = b;
  } while (n > 0);
  return pos;
}

/** Allocates the packet and writes its fixed header; returns the buffer and the position after the header. */
function alloc(first: number, remaining: number): [Buffer, number] {
  if (remaining > MAX_REMAINING_LENGTH) throw invalid(`packet of ${remaining} bytes is too large`);
  const out = Buffer.allocUnsafe(1 + varintSize(remaining) + remaining);
  out[0] = first;
  return [out, putVarint(out, 1, remaining)];
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

// ------------------------------------------------------------------ properties

/** Size of the property block's content (without its own length field). */
export function propertiesSize(p: Properties | undefined): number {
  if (p === undefined) return 0;
  let n = 0;
  const bag = p as Record<string, unknown>;
  for (const d of PROPERTY_DEFS) {
    const v = bag[d.name];
    if (v === undefined) continue;
    switch (d.kind) {
      case 'byte':
        n += 2;
        break;
      case 'u16':
        n += 3;
        break;
      case 'u32':
        n += 5;
        break;
      case 'varint':
        for (const x of v as number[]) n += 1 + varintSize(x);
        break;
      case 'utf8':
        n += 3 + strLen(v as string, d.name);
        break;
      case 'binary':
        n += 3 + binLen(v as Buffer, d.name);
        break;
      default:
        for (const [k, val] of v as Array<[string, string]>) n += 5 + strLen(k, 'user property') + strLen(val, 'user property');
    }
  }
  return n;
}

/** Writes the property block (length, then properties in identifier order). */
function putProperties(out: Buffer, pos: number, p: Properties | undefined, size: number): number {
  pos = putVarint(out, pos, size);
  if (p === undefined || size === 0) return pos;
  const bag = p as Record<string, unknown>;
  for (const d of PROPERTY_DEFS) {
    const v = bag[d.name];
    if (v === undefined) continue;
    switch (d.kind) {
      case 'byte':
        out[pos++] = d.id;
        out[pos++] = v as number;
        break;
      case 'u16':
        out[pos++] = d.id;
        pos = putU16(out, pos, v as number);
        break;
      case 'u32':
        out[pos++] = d.id;
        out.writeUInt32BE((v as number) >>> 0, pos);
        pos += 4;
        break;
      case 'varint':
        for (const x of v as number[]) {
          out[pos++] = d.id;
          pos = putVarint(out, pos, x);
        }
        break;
      case 'utf8': {
        out[pos++] = d.id;
        const s = v as string;
        pos = putStr(out, pos, s, Buffer.byteLength(s));
        break;
      }
      case 'binary':
        out[pos++] = d.id;
        pos = putBin(out, pos, v as Buffer);
        break;
      default:
        for (const [k, val] of v as Array<[string, string]>) {
          out[pos++] = d.id;
          pos = putStr(out, pos, k, Buffer.byteLength(k));
          pos = putStr(out, pos, val, Buffer.byteLength(val));
        }
    }
  }
  return pos;
}

const propBlock = (size: number): number => varintSize(size) + size;

function isEmptyProps(p: Properties | undefined): boolean {
  if (p === undefined) return true;
  for (const k in p) if ((p as Record<string, unknown>)[k] !== undefined) return false;
  return true;
}

// ------------------------------------------------------------------ packets

export function encodeConnect(p: ConnectPacket): Buffer {
  const v5 = p.protocolLevel === 5;
  const name = p.protocolName;
  const nameLen = strLen(name, 'protocol name');
  const idLen = strLen(p.clientId, 'client identifier');
  const propsSize = v5 ? propertiesSize(p.properties) : 0;
  let rem = 2 + nameLen + 1 + 1 + 2 + 2 + idLen + (v5 ? propBlock(propsSize) : 0);
  let flags = p.cleanSession ? 0x02 : 0;
  let willTopicLen = 0;
  let willPropsSize = 0;
  if (p.will) {
    willTopicLen = strLen(p.will.topic, 'will topic');
    rem += 2 + willTopicLen + 2 + binLen(p.will.payload, 'will message');
    if (v5) {
      willPropsSize = propertiesSize(p.will.properties);
      rem += propBlock(willPropsSize);
    }
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
  if (v5) pos = putProperties(out, pos, p.properties, propsSize);
  pos = putStr(out, pos, p.clientId, idLen);
  if (p.will) {
    if (v5) pos = putProperties(out, pos, p.will.properties, willPropsSize);
    pos = putStr(out, pos, p.will.topic, willTopicLen);
    pos = putBin(out, pos, p.will.payload);
  }
  if (p.username !== null) pos = putStr(out, pos, p.username, userLen);
  if (p.password !== null) putBin(out, pos, p.password);
  return out;
}

export function encodeConnack(p: ConnackPacket, level: ProtocolLevel = 4): Buffer {
  if (level !== 5) {
    const [out, pos] = alloc(PacketType.CONNACK << 4, 2);
    out[pos] = p.sessionPresent ? 1 : 0;
    out[pos + 1] = p.returnCode;
    return out;
  }
  const size = propertiesSize(p.properties);
  const [out, start] = alloc(PacketType.CONNACK << 4, 2 + propBlock(size));
  out[start] = p.sessionPresent ? 1 : 0;
  out[start + 1] = p.returnCode;
  putProperties(out, start + 2, p.properties, size);
  return out;
}

/**
 * One PUBLISH frame from its parts, in a single allocation. The server's delivery path calls this directly
 * with a message's topic and payload, without building a PublishPacket first. `props` !== undefined writes a
 * v5 property block (empty when `props` has no property).
 */
export function encodePublishFrame(topic: string, payload: Buffer, qos: QoS, retain: boolean, dup: boolean, packetId: number, props?: Properties): Buffer {
  const tlen = strLen(topic, 'topic name');
  if (qos > 0) checkId(packetId, 'PUBLISH');
  const psize = props !== undefined ? propertiesSize(props) : 0;
  const rem = 2 + tlen + (qos > 0 ? 2 : 0) + (props !== undefined ? propBlock(psize) : 0) + payload.length;
  // [MQTT-3.3.1-2] DUP is never set on QoS 0.
  const first = (PacketType.PUBLISH << 4) | (dup && qos > 0 ? 0x08 : 0) | (qos << 1) | (retain ? 0x01 : 0);
  const [out, start] = alloc(first, rem);
  let pos = putStr(out, start, topic, tlen);
  if (qos > 0) pos = putU16(out, pos, packetId);
  if (props !== undefined) pos = putProperties(out, pos, props, psize);
  payload.copy(out, pos);
  return out;
}

export function encodePublish(p: PublishPacket, level: ProtocolLevel = 4): Buffer {
  return encodePublishFrame(p.topic, p.payload, p.qos, p.retain, p.dup, p.packetId, level === 5 ? (p.properties ?? {}) : undefined);
}

function ackFirstByte(type: 'puback' | 'pubrec' | 'pubrel' | 'pubcomp' | 'unsuback'): number {
  switch (type) {
    case 'puback':
      return PacketType.PUBACK << 4;
    case 'pubrec':
      return PacketType.PUBREC << 4;
    case 'pubrel':
      return (PacketType.PUBREL << 4) | 0x02; // [MQTT-3.6.1-1]
    case 'pubcomp':
      return PacketType.PUBCOMP << 4;
    default:
      return PacketType.UNSUBACK << 4;
  }
}

/**
 * PUBACK, PUBREC, PUBREL, PUBCOMP (and the 3.1.1 UNSUBACK): a packet identifier, plus at level 5 a reason code
 * and properties, both omitted when they are 0x00 and empty (section 3.4.2.1).
 */
export function encodeIdOnly(
  type: 'puback' | 'pubrec' | 'pubrel' | 'pubcomp' | 'unsuback',
  packetId: number,
  level: ProtocolLevel = 4,
  reasonCode = 0,
  properties?: Properties,
): Buffer {
  checkId(packetId, type.toUpperCase());
  const first = ackFirstByte(type);
  if (level !== 5 || (reasonCode === 0 && isEmptyProps(properties))) {
    const out = Buffer.allocUnsafe(4);
    out[0] = first;
    out[1] = 2;
    putU16(out, 2, packetId);
    return out;
  }
  if (isEmptyProps(properties)) {
    const out = Buffer.allocUnsafe(5);
    out[0] = first;
    out[1] = 3;
    putU16(out, 2, packetId);
    out[4] = reasonCode;
    return out;
  }
  const size = propertiesSize(properties);
  const [out, start] = alloc(first, 3 + propBlock(size));
  let pos = putU16(out, start, packetId);
  out[pos++] = reasonCode;
  putProperties(out, pos, properties, size);
  return out;
}

export function encodeSubscribe(p: SubscribePacket, level: ProtocolLevel = 4): Buffer {
  checkId(p.packetId, 'SUBSCRIBE');
  if (p.subscriptions.length === 0) throw invalid('SUBSCRIBE needs at least one filter');
  const v5 = level === 5;
  const lens = p.subscriptions.map((s) => strLen(s.filter, 'topic filter'));
  const psize = v5 ? propertiesSize(p.properties) : 0;
  let rem = 2 + (v5 ? propBlock(psize) : 0);
  for (const l of lens) rem += 2 + l + 1;
  const [out, start] = alloc((PacketType.SUBSCRIBE << 4) | 0x02, rem); // [MQTT-3.8.1-1]
  let pos = putU16(out, start, p.packetId);
  if (v5) pos = putProperties(out, pos, p.properties, psize);
  p.subscriptions.forEach((s, k) => {
    pos = putStr(out, pos, s.filter, lens[k]);
    out[pos++] = v5 ? s.qos | (s.noLocal ? 0x04 : 0) | (s.retainAsPublished ? 0x08 : 0) | ((s.retainHandling ?? 0) << 4) : s.qos;
  });
  return out;
}

export function encodeSuback(p: SubackPacket, level: ProtocolLevel = 4): Buffer {
  checkId(p.packetId, 'SUBACK');
  const v5 = level === 5;
  const psize = v5 ? propertiesSize(p.properties) : 0;
  const [out, start] = alloc(PacketType.SUBACK << 4, 2 + (v5 ? propBlock(psize) : 0) + p.returnCodes.length);
  let pos = putU16(out, start, p.packetId);
  if (v5) pos = putProperties(out, pos, p.properties, psize);
  for (const c of p.returnCodes) out[pos++] = c;
  return out;
}

export function encodeUnsubscribe(p: UnsubscribePacket, level: ProtocolLevel = 4): Buffer {
  checkId(p.packetId, 'UNSUBSCRIBE');
  if (p.filters.length === 0) throw invalid('UNSUBSCRIBE needs at least one filter');
  const v5 = level === 5;
  const lens = p.filters.map((f) => strLen(f, 'topic filter'));
  const psize = v5 ? propertiesSize(p.properties) : 0;
  let rem = 2 + (v5 ? propBlock(psize) : 0);
  for (const l of lens) rem += 2 + l;
  const [out, start] = alloc((PacketType.UNSUBSCRIBE << 4) | 0x02, rem); // [MQTT-3.10.1-1]
  let pos = putU16(out, start, p.packetId);
  if (v5) pos = putProperties(out, pos, p.properties, psize);
  p.filters.forEach((f, k) => {
    pos = putStr(out, pos, f, lens[k]);
  });
  return out;
}

export function encodeUnsuback(p: UnsubackPacket, level: ProtocolLevel = 4): Buffer {
  if (level !== 5) return encodeIdOnly('unsuback', p.packetId, level);
  checkId(p.packetId, 'UNSUBACK');
  const codes = p.reasonCodes ?? [];
  if (codes.length === 0) throw invalid('a v5 UNSUBACK needs one reason code per filter');
  const psize = propertiesSize(p.properties);
  const [out, start] = alloc(PacketType.UNSUBACK << 4, 2 + propBlock(psize) + codes.length);
  let pos = putU16(out, start, p.packetId);
  pos = putProperties(out, pos, p.properties, psize);
  for (const c of codes) out[pos++] = c;
  return out;
}

export function encodePingreq(): Buffer {
  return Buffer.from([PacketType.PINGREQ << 4, 0]);
}

export function encodePingresp(): Buffer {
  return Buffer.from([PacketType.PINGRESP << 4, 0]);
}

/** DISCONNECT; at level 5 with a reason code and properties (both omitted when 0x00 and empty). */
export function encodeDisconnect(level: ProtocolLevel = 4, reasonCode = 0, properties?: Properties): Buffer {
  return encodeReasonPacket(PacketType.DISCONNECT, level === 5, reasonCode, properties);
}

export function encodeAuth(reasonCode = 0, properties?: Properties): Buffer {
  return encodeReasonPacket(PacketType.AUTH, true, reasonCode, properties);
}

function encodeReasonPacket(type: number, v5: boolean, reasonCode: number, properties: Properties | undefined): Buffer {
  if (!v5 || (reasonCode === 0 && isEmptyProps(properties))) return Buffer.from([type << 4, 0]);
  if (isEmptyProps(properties)) return Buffer.from([type << 4, 1, reasonCode]);
  const size = propertiesSize(properties);
  const [out, start] = alloc(type << 4, 1 + propBlock(size));
  out[start] = reasonCode;
  putProperties(out, start + 1, properties, size);
  return out;
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
      return encodeIdOnly(p.type, p.packetId, level, p.reasonCode ?? 0, p.properties);
    case 'unsuback':
      return encodeUnsuback(p, level);
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
      return encodeDisconnect(level, p.reasonCode ?? 0, p.properties);
    case 'auth':
      return encodeAuth(p.reasonCode, p.properties);
  }
}
