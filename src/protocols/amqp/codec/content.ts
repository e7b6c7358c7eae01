/**
 * Content: the header frame (type 2: class-id, weight 0, body-size, property flags, properties; §4.2.6) and body
 * frames (type 3) of basic.publish / return / deliver / get-ok.
 *
 * Basic's 14 properties, in flag order from bit 15 down to bit 2 (bit 0 of a flags word says another flags word
 * follows; bit 1 is unused):
 *   contentType shortstr, contentEncoding shortstr, headers table, deliveryMode octet, priority octet,
 *   correlationId shortstr, replyTo shortstr, expiration shortstr, messageId shortstr, timestamp u64 (seconds),
 *   type shortstr, userId shortstr, appId shortstr, clusterId shortstr (reserved, kept for pass-through).
 *
 * Headers come twice: `rawHeaders` is the encoded table exactly as sent (length prefix included, a copy, the form
 * of Message.amqpHeaders) so a consumer gets every value type back untouched; `headers` is the decoded table,
 * built only when asked (`decodeContentHeader(p, true)`), because the publish path may not need it.
 * When encoding, `headers` wins over `rawHeaders` when both are set, so a changed table is never shadowed by
 * stale bytes.
 */
import { AmqpCodecError } from './errors.js';
import { CLASS_BASIC, FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_OVERHEAD } from './constants.js';
import { Reader, checkUint, shortstrBytes, writeShortstr, writeU64 } from './reader.js';
import { decodeTable, skipTable, tableSize, writeTable, type FieldTable } from './table.js';
import { methodPayloadSize, writeMethodFrame, type AmqpMethod } from './methods.js';

export interface BasicProperties {
  contentType?: string;
  contentEncoding?: string;
  headers?: FieldTable;
  /** The headers table as encoded on the wire (4-byte length + pairs). */
  rawHeaders?: Buffer;
  /** 1 transient, 2 persistent. */
  deliveryMode?: number;
  /** 0-9. */
  priority?: number;
  correlationId?: string;
  replyTo?: string;
  /** Per-message TTL in ms, as text (RabbitMQ's reading of the spec's "expiration"). */
  expiration?: string;
  messageId?: string;
  /** Seconds since the epoch. */
  timestamp?: number;
  type?: string;
  userId?: string;
  appId?: string;
  clusterId?: string;
}

export interface ContentHeader {
  classId: number;
  /** Total bytes of the body frames that follow (0: none follow). */
  bodySize: number;
  properties: BasicProperties;
}

const F_CONTENT_TYPE = 0x8000;
const F_CONTENT_ENCODING = 0x4000;
const F_HEADERS = 0x2000;
const F_DELIVERY_MODE = 0x1000;
const F_PRIORITY = 0x0800;
const F_CORRELATION_ID = 0x0400;
const F_REPLY_TO = 0x0200;
const F_EXPIRATION = 0x0100;
const F_MESSAGE_ID = 0x0080;
const F_TIMESTAMP = 0x0040;
const F_TYPE = 0x0020;
const F_USER_ID = 0x0010;
const F_APP_ID = 0x0008;
const F_CLUSTER_ID = 0x0004;

/**
 * Decodes a content header frame's payload. Only class 60 (basic) has content in 0-9-1, so a header of any other
 * class cannot follow any content method: 505 unexpected-frame, as RabbitMQ answers a header whose class differs
 * from its method's. A non-zero weight, a flags bit 1, flags beyond basic's 14, truncation or leftover bytes: 502.
 */
export function decodeContentHeader(payload: Buffer, decodeHeaders = false): ContentHeader {
  const r = new Reader(payload, 0, payload.length);
  const classId = r.u16('content class-id');
  r.classId = classId;
  if (classId !== CLASS_BASIC) r.fail(`content header for class ${classId}: only basic (60) has content`, 505);
  const weight = r.u16('content weight');
  if (weight !== 0) r.fail(`content weight ${weight}, must be 0`);
  const bodySize = r.u64('body size');
  const flags = r.u16('property flags');
  if ((flags & 0x0002) !== 0) r.fail('property flag bit 1 is not a basic property');
  if ((flags & 0x0001) !== 0) {
    // A continuation word: basic has 14 properties, so every further flag must be clear.
    let more = true;
    while (more) {
      const f = r.u16('property flags');
      if ((f & 0xfffe) !== 0) r.fail('property flags beyond the 14 basic properties');
      more = (f & 1) !== 0;
    }
  }
  const p: BasicProperties = {};
  if (flags & F_CONTENT_TYPE) p.contentType = r.shortstr('content-type');
  if (flags & F_CONTENT_ENCODING) p.contentEncoding = r.shortstr('content-encoding');
  if (flags & F_HEADERS) {
    const start = r.pos;
    // A bad table is a syntax error whether or not it is decoded now: check it in place (no objects) first.
    skipHeaders(r);
    const raw = Buffer.from(payload.subarray(start, r.pos));
    p.rawHeaders = raw;
    // Decoding the copy keeps decoded values (Buffers of 'x', Typed 'S') off the socket chunk too.
    if (decodeHeaders) p.headers = decodeTable(raw);
  }
  if (flags & F_DELIVERY_MODE) p.deliveryMode = r.u8('delivery-mode');
  if (flags & F_PRIORITY) p.priority = r.u8('priority');
  if (flags & F_CORRELATION_ID) p.correlationId = r.shortstr('correlation-id');
  if (flags & F_REPLY_TO) p.replyTo = r.shortstr('reply-to');
  if (flags & F_EXPIRATION) p.expiration = r.shortstr('expiration');
  if (flags & F_MESSAGE_ID) p.messageId = r.shortstr('message-id');
  if (flags & F_TIMESTAMP) p.timestamp = r.u64('timestamp');
  if (flags & F_TYPE) p.type = r.shortstr('type');
  if (flags & F_USER_ID) p.userId = r.shortstr('user-id');
  if (flags & F_APP_ID) p.appId = r.shortstr('app-id');
  if (flags & F_CLUSTER_ID) p.clusterId = r.shortstr('cluster-id');
  if (r.pos !== payload.length) r.fail(`${payload.length - r.pos} bytes after the content properties`);
  return { classId, bodySize, properties: p };
}

function skipHeaders(r: Reader): void {
  try {
    skipTable(r);
  } catch (e) {
    if (e instanceof AmqpCodecError) throw new AmqpCodecError(e.replyCode, `headers: ${e.message}`, CLASS_BASIC, 0);
    throw e;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Encoding

/** Scratch from the size pass: byte lengths of the shortstr properties, in flag order. */
const lens = new Array<number>(14).fill(0);

function str(v: string | undefined, i: number, what: string): number {
  if (v === undefined) return 0;
  if (typeof v !== 'string') throw new AmqpCodecError(502, `${what} must be a string`);
  const n = shortstrBytes(v, what);
  lens[i] = n;
  return 1 + n;
}

/** Bytes of the properties part (flags word included). */
function propertiesSize(p: BasicProperties): number {
  let n = 2;
  n += str(p.contentType, 0, 'content-type');
  n += str(p.contentEncoding, 1, 'content-encoding');
  if (p.headers !== undefined) n += tableSize(p.headers);
  else if (p.rawHeaders !== undefined) n += checkRawHeaders(p.rawHeaders);
  if (p.deliveryMode !== undefined) {
    checkUint(p.deliveryMode, 0xff, 'delivery-mode');
    n += 1;
  }
  if (p.priority !== undefined) {
    checkUint(p.priority, 0xff, 'priority');
    n += 1;
  }
  n += str(p.correlationId, 5, 'correlation-id');
  n += str(p.replyTo, 6, 'reply-to');
  n += str(p.expiration, 7, 'expiration');
  n += str(p.messageId, 8, 'message-id');
  if (p.timestamp !== undefined) n += 8;
  n += str(p.type, 10, 'type');
  n += str(p.userId, 11, 'user-id');
  n += str(p.appId, 12, 'app-id');
  n += str(p.clusterId, 13, 'cluster-id');
  return n;
}

function checkRawHeaders(raw: Buffer): number {
  if (raw.length < 4 || raw.readUInt32BE(0) !== raw.length - 4) {
    throw new AmqpCodecError(502, 'rawHeaders must be an encoded field table (4-byte length + pairs)');
  }
  return raw.length;
}

function writeProperties(buf: Buffer, pos: number, p: BasicProperties): number {
  const flagsAt = pos;
  let flags = 0;
  pos += 2;
  if (p.contentType !== undefined) {
    flags |= F_CONTENT_TYPE;
    pos = writeShortstr(buf, pos, p.contentType, lens[0]!);
  }
  if (p.contentEncoding !== undefined) {
    flags |= F_CONTENT_ENCODING;
    pos = writeShortstr(buf, pos, p.contentEncoding, lens[1]!);
  }
  if (p.headers !== undefined) {
    flags |= F_HEADERS;
    pos = writeTable(buf, pos, p.headers);
  } else if (p.rawHeaders !== undefined) {
    flags |= F_HEADERS;
    buf.set(p.rawHeaders, pos);
    pos += p.rawHeaders.length;
  }
  if (p.deliveryMode !== undefined) {
    flags |= F_DELIVERY_MODE;
    buf[pos++] = p.deliveryMode;
  }
  if (p.priority !== undefined) {
    flags |= F_PRIORITY;
    buf[pos++] = p.priority;
  }
  if (p.correlationId !== undefined) {
    flags |= F_CORRELATION_ID;
    pos = writeShortstr(buf, pos, p.correlationId, lens[5]!);
  }
  if (p.replyTo !== undefined) {
    flags |= F_REPLY_TO;
    pos = writeShortstr(buf, pos, p.replyTo, lens[6]!);
  }
  if (p.expiration !== undefined) {
    flags |= F_EXPIRATION;
    pos = writeShortstr(buf, pos, p.expiration, lens[7]!);
  }
  if (p.messageId !== undefined) {
    flags |= F_MESSAGE_ID;
    pos = writeShortstr(buf, pos, p.messageId, lens[8]!);
  }
  if (p.timestamp !== undefined) {
    flags |= F_TIMESTAMP;
    pos = writeU64(buf, pos, p.timestamp, 'timestamp');
  }
  if (p.type !== undefined) {
    flags |= F_TYPE;
    pos = writeShortstr(buf, pos, p.type, lens[10]!);
  }
  if (p.userId !== undefined) {
    flags |= F_USER_ID;
    pos = writeShortstr(buf, pos, p.userId, lens[11]!);
  }
  if (p.appId !== undefined) {
    flags |= F_APP_ID;
    pos = writeShortstr(buf, pos, p.appId, lens[12]!);
  }
  if (p.clusterId !== undefined) {
    flags |= F_CLUSTER_ID;
    pos = writeShortstr(buf, pos, p.clusterId, lens[13]!);
  }
  buf.writeUInt16BE(flags, flagsAt);
  return pos;
}

function checkFrameMax(frameMax: number): number {
  if (frameMax === 0) return 0x7fffffff; // no limit negotiated: one body frame per 2 GiB
  if (!Number.isInteger(frameMax) || frameMax <= FRAME_OVERHEAD) {
    throw new AmqpCodecError(502, `frame-max ${frameMax} leaves no room for a body`);
  }
  return frameMax - FRAME_OVERHEAD;
}

function checkHeaderFits(propsSize: number, frameMax: number): void {
  if (frameMax !== 0 && 12 + propsSize + FRAME_OVERHEAD > frameMax) {
    throw new AmqpCodecError(502, `content header frame of ${12 + propsSize + FRAME_OVERHEAD} bytes exceeds frame-max ${frameMax}`);
  }
}

/** Bytes of header frame + body frames for a body of `bodySize` split at frameMax. */
function contentSize(propsSize: number, bodySize: number, maxPayload: number): number {
  const bodyFrames = bodySize === 0 ? 0 : Math.ceil(bodySize / maxPayload);
  return FRAME_OVERHEAD + 12 + propsSize + bodyFrames * FRAME_OVERHEAD + bodySize;
}

function writeContent(
  buf: Buffer,
  pos: number,
  channel: number,
  classId: number,
  props: BasicProperties,
  propsSize: number,
  body: Uint8Array,
  maxPayload: number,
): number {
  buf[pos] = FRAME_HEADER;
  buf.writeUInt16BE(channel, pos + 1);
  buf.writeUInt32BE(12 + propsSize, pos + 3);
  buf.writeUInt16BE(classId, pos + 7);
  buf.writeUInt16BE(0, pos + 9);
  writeU64(buf, pos + 11, body.length, 'body size');
  pos = writeProperties(buf, pos + 19, props);
  buf[pos++] = FRAME_END;
  for (let off = 0; off < body.length; off += maxPayload) {
    const n = Math.min(maxPayload, body.length - off);
    buf[pos] = FRAME_BODY;
    buf.writeUInt16BE(channel, pos + 1);
    buf.writeUInt32BE(n, pos + 3);
    buf.set(n === body.length ? body : body.subarray(off, off + n), pos + 7);
    pos += 7 + n;
    buf[pos++] = FRAME_END;
  }
  return pos;
}

/** The payload of a content header frame alone. */
export function encodeContentHeader(classId: number, bodySize: number, props: BasicProperties): Buffer {
  checkUint(classId, 0xffff, 'class-id');
  const size = 12 + propertiesSize(props);
  const buf = Buffer.allocUnsafe(size);
  buf.writeUInt16BE(classId, 0);
  buf.writeUInt16BE(0, 2);
  writeU64(buf, 4, bodySize, 'body size');
  writeProperties(buf, 12, props);
  return buf;
}

/**
 * The content header frame followed by the body in frames of at most `frameMax` bytes (frame-max counts the
 * whole frame, 8 bytes of overhead included; 0 = no limit), in one buffer (one socket write; the body is copied
 * once). An empty body has no body frame (§4.2.6.2).
 */
export function encodeContent(channel: number, classId: number, props: BasicProperties, body: Uint8Array, frameMax: number): Buffer {
  checkUint(channel, 0xffff, 'channel');
  checkUint(classId, 0xffff, 'class-id');
  const maxPayload = checkFrameMax(frameMax);
  const propsSize = propertiesSize(props);
  checkHeaderFits(propsSize, frameMax);
  const buf = Buffer.allocUnsafe(contentSize(propsSize, body.length, maxPayload));
  writeContent(buf, 0, channel, classId, props, propsSize, body, maxPayload);
  return buf;
}

/**
 * A content-carrying method (basic.deliver, basic.get-ok, basic.return, basic.publish) with its header and body
 * frames, in one buffer: the delivery hot path makes one allocation and one write per message.
 */
export function encodeMessageFrames(channel: number, method: AmqpMethod, props: BasicProperties, body: Uint8Array, frameMax: number): Buffer {
  checkUint(channel, 0xffff, 'channel');
  const maxPayload = checkFrameMax(frameMax);
  const propsSize = propertiesSize(props);
  const methodSize = methodPayloadSize(method);
  if (frameMax !== 0 && methodSize + FRAME_OVERHEAD > frameMax) {
    throw new AmqpCodecError(502, `${method.name} frame of ${methodSize + FRAME_OVERHEAD} bytes exceeds frame-max ${frameMax}`);
  }
  checkHeaderFits(propsSize, frameMax);
  const buf = Buffer.allocUnsafe(methodSize + FRAME_OVERHEAD + contentSize(propsSize, body.length, maxPayload));
  const pos = writeMethodFrame(buf, 0, channel, method, methodSize);
  writeContent(buf, pos, channel, CLASS_BASIC, props, propsSize, body, maxPayload);
  return buf;
}
