/**
 * Every method of AMQP 0-9-1 (amqp0-9-1.xml) for the classes connection, channel, exchange, queue, basic, tx and
 * confirm, with RabbitMQ's extensions (exchange.bind/unbind, basic.nack, confirm.*, connection.blocked/unblocked,
 * connection.update-secret), as one table. The TypeScript union `AmqpMethod` is derived from the table, so the
 * wire layout and the types cannot drift apart.
 *
 * Argument names are the spec's in camelCase (`reply-code` → `replyCode`, confirm.select's `nowait` → `noWait`
 * like every other no-wait). Reserved arguments (`reserved-1`: the old ticket, out-of-band, capabilities, insist,
 * known-hosts, channel-id, cluster-id) are not part of the objects: the decoder skips them and the encoder writes
 * their zero value (0, empty string, false), as §1.8 asks of reserved fields.
 *
 * Wire types (§4.2.5): octet (u8), short (u16), long (u32), longlong (u64, here a number: delivery tags beyond
 * 2^53 - 1 are refused as a syntax error), bit (consecutive bits share octets, first bit in the lowest bit),
 * shortstr (u8 length + UTF-8), longstr (u32 length + bytes, a Buffer), table (see table.ts). `longtext` is a
 * longstr known to hold text (connection.start's mechanisms and locales), decoded to a string.
 */
import { AmqpCodecError } from './errors.js';
import { FRAME_END, FRAME_METHOD } from './constants.js';
import { Reader, checkUint, shortstrBytes, writeShortstr, writeU64 } from './reader.js';
import { readTable, tableSize, writeTable, type FieldTable } from './table.js';

type Kind = 'octet' | 'short' | 'long' | 'longlong' | 'bit' | 'shortstr' | 'longstr' | 'longtext' | 'table';
type Arg = readonly [name: string, kind: Kind];
interface Def {
  readonly classId: number;
  readonly methodId: number;
  readonly args: readonly Arg[];
  /** Followed by a content header and body frames (§2.3.5.2). */
  readonly content?: true;
}

const def = <const A extends readonly Arg[]>(classId: number, methodId: number, args: A, content?: true) =>
  ({ classId, methodId, args, ...(content ? { content } : {}) }) as { classId: number; methodId: number; args: A; content?: true };

const R_SHORT = ['', 'short'] as const; // reserved-1 short: the old access ticket
const R_STR = ['', 'shortstr'] as const;
const CLOSE_ARGS = [
  ['replyCode', 'short'],
  ['replyText', 'shortstr'],
  ['classId', 'short'],
  ['methodId', 'short'],
] as const;

/** The method table: name → class id, method id, arguments in wire order. */
export const METHOD_DEFS = {
  'connection.start': def(10, 10, [
    ['versionMajor', 'octet'],
    ['versionMinor', 'octet'],
    ['serverProperties', 'table'],
    ['mechanisms', 'longtext'],
    ['locales', 'longtext'],
  ]),
  'connection.start-ok': def(10, 11, [
    ['clientProperties', 'table'],
    ['mechanism', 'shortstr'],
    ['response', 'longstr'],
    ['locale', 'shortstr'],
  ]),
  'connection.secure': def(10, 20, [['challenge', 'longstr']]),
  'connection.secure-ok': def(10, 21, [['response', 'longstr']]),
  'connection.tune': def(10, 30, [
    ['channelMax', 'short'],
    ['frameMax', 'long'],
    ['heartbeat', 'short'],
  ]),
  'connection.tune-ok': def(10, 31, [
    ['channelMax', 'short'],
    ['frameMax', 'long'],
    ['heartbeat', 'short'],
  ]),
  'connection.open': def(10, 40, [['virtualHost', 'shortstr'], R_STR, ['', 'bit']]),
  'connection.open-ok': def(10, 41, [R_STR]),
  'connection.close': def(10, 50, CLOSE_ARGS),
  'connection.close-ok': def(10, 51, []),
  'connection.blocked': def(10, 60, [['reason', 'shortstr']]),
  'connection.unblocked': def(10, 61, []),
  'connection.update-secret': def(10, 70, [
    ['newSecret', 'longstr'],
    ['reason', 'shortstr'],
  ]),
  'connection.update-secret-ok': def(10, 71, []),

  'channel.open': def(20, 10, [R_STR]),
  'channel.open-ok': def(20, 11, [['', 'longstr']]),
  'channel.flow': def(20, 20, [['active', 'bit']]),
  'channel.flow-ok': def(20, 21, [['active', 'bit']]),
  'channel.close': def(20, 40, CLOSE_ARGS),
  'channel.close-ok': def(20, 41, []),

  'exchange.declare': def(40, 10, [
    R_SHORT,
    ['exchange', 'shortstr'],
    ['type', 'shortstr'],
    ['passive', 'bit'],
    ['durable', 'bit'],
    ['autoDelete', 'bit'],
    ['internal', 'bit'],
    ['noWait', 'bit'],
    ['arguments', 'table'],
  ]),
  'exchange.declare-ok': def(40, 11, []),
  'exchange.delete': def(40, 20, [R_SHORT, ['exchange', 'shortstr'], ['ifUnused', 'bit'], ['noWait', 'bit']]),
  'exchange.delete-ok': def(40, 21, []),
  'exchange.bind': def(40, 30, [
    R_SHORT,
    ['destination', 'shortstr'],
    ['source', 'shortstr'],
    ['routingKey', 'shortstr'],
    ['noWait', 'bit'],
    ['arguments', 'table'],
  ]),
  'exchange.bind-ok': def(40, 31, []),
  'exchange.unbind': def(40, 40, [
    R_SHORT,
    ['destination', 'shortstr'],
    ['source', 'shortstr'],
    ['routingKey', 'shortstr'],
    ['noWait', 'bit'],
    ['arguments', 'table'],
  ]),
  // 51, not 41: RabbitMQ's extension numbered it so, and every client follows.
  'exchange.unbind-ok': def(40, 51, []),

  'queue.declare': def(50, 10, [
    R_SHORT,
    ['queue', 'shortstr'],
    ['passive', 'bit'],
    ['durable', 'bit'],
    ['exclusive', 'bit'],
    ['autoDelete', 'bit'],
    ['noWait', 'bit'],
    ['arguments', 'table'],
  ]),
  'queue.declare-ok': def(50, 11, [
    ['queue', 'shortstr'],
    ['messageCount', 'long'],
    ['consumerCount', 'long'],
  ]),
  'queue.bind': def(50, 20, [R_SHORT, ['queue', 'shortstr'], ['exchange', 'shortstr'], ['routingKey', 'shortstr'], ['noWait', 'bit'], ['arguments', 'table']]),
  'queue.bind-ok': def(50, 21, []),
  'queue.purge': def(50, 30, [R_SHORT, ['queue', 'shortstr'], ['noWait', 'bit']]),
  'queue.purge-ok': def(50, 31, [['messageCount', 'long']]),
  'queue.delete': def(50, 40, [R_SHORT, ['queue', 'shortstr'], ['ifUnused', 'bit'], ['ifEmpty', 'bit'], ['noWait', 'bit']]),
  'queue.delete-ok': def(50, 41, [['messageCount', 'long']]),
  'queue.unbind': def(50, 50, [R_SHORT, ['queue', 'shortstr'], ['exchange', 'shortstr'], ['routingKey', 'shortstr'], ['arguments', 'table']]),
  'queue.unbind-ok': def(50, 51, []),

  'basic.qos': def(60, 10, [
    ['prefetchSize', 'long'],
    ['prefetchCount', 'short'],
    ['global', 'bit'],
  ]),
  'basic.qos-ok': def(60, 11, []),
  'basic.consume': def(60, 20, [
    R_SHORT,
    ['queue', 'shortstr'],
    ['consumerTag', 'shortstr'],
    ['noLocal', 'bit'],
    ['noAck', 'bit'],
    ['exclusive', 'bit'],
    ['noWait', 'bit'],
    ['arguments', 'table'],
  ]),
  'basic.consume-ok': def(60, 21, [['consumerTag', 'shortstr']]),
  'basic.cancel': def(60, 30, [
    ['consumerTag', 'shortstr'],
    ['noWait', 'bit'],
  ]),
  'basic.cancel-ok': def(60, 31, [['consumerTag', 'shortstr']]),
  'basic.publish': def(60, 40, [R_SHORT, ['exchange', 'shortstr'], ['routingKey', 'shortstr'], ['mandatory', 'bit'], ['immediate', 'bit']], true),
  'basic.return': def(
    60,
    50,
    [
      ['replyCode', 'short'],
      ['replyText', 'shortstr'],
      ['exchange', 'shortstr'],
      ['routingKey', 'shortstr'],
    ],
    true,
  ),
  'basic.deliver': def(
    60,
    60,
    [
      ['consumerTag', 'shortstr'],
      ['deliveryTag', 'longlong'],
      ['redelivered', 'bit'],
      ['exchange', 'shortstr'],
      ['routingKey', 'shortstr'],
    ],
    true,
  ),
  'basic.get': def(60, 70, [R_SHORT, ['queue', 'shortstr'], ['noAck', 'bit']]),
  'basic.get-ok': def(
    60,
    71,
    [
      ['deliveryTag', 'longlong'],
      ['redelivered', 'bit'],
      ['exchange', 'shortstr'],
      ['routingKey', 'shortstr'],
      ['messageCount', 'long'],
    ],
    true,
  ),
  'basic.get-empty': def(60, 72, [R_STR]),
  'basic.ack': def(60, 80, [
    ['deliveryTag', 'longlong'],
    ['multiple', 'bit'],
  ]),
  'basic.reject': def(60, 90, [
    ['deliveryTag', 'longlong'],
    ['requeue', 'bit'],
  ]),
  'basic.recover-async': def(60, 100, [['requeue', 'bit']]),
  'basic.recover': def(60, 110, [['requeue', 'bit']]),
  'basic.recover-ok': def(60, 111, []),
  'basic.nack': def(60, 120, [
    ['deliveryTag', 'longlong'],
    ['multiple', 'bit'],
    ['requeue', 'bit'],
  ]),

  'confirm.select': def(85, 10, [['noWait', 'bit']]),
  'confirm.select-ok': def(85, 11, []),

  'tx.select': def(90, 10, []),
  'tx.select-ok': def(90, 11, []),
  'tx.commit': def(90, 20, []),
  'tx.commit-ok': def(90, 21, []),
  'tx.rollback': def(90, 30, []),
  'tx.rollback-ok': def(90, 31, []),
} as const;

type Defs = typeof METHOD_DEFS;
export type MethodName = keyof Defs;

type KindType<K extends Kind> = K extends 'bit'
  ? boolean
  : K extends 'shortstr' | 'longtext'
    ? string
    : K extends 'longstr'
      ? Buffer
      : K extends 'table'
        ? FieldTable
        : number;

type ArgsOf<A extends readonly Arg[]> = {
  -readonly [E in A[number] as E[0] extends '' ? never : E[0]]: KindType<E[1]>;
};

/** One method by name, e.g. `Method<'basic.publish'>` = { name, exchange, routingKey, mandatory, immediate }. */
export type Method<N extends MethodName> = { name: N } & ArgsOf<Defs[N]['args']>;

/** Every method: a discriminated union on `name`. */
export type AmqpMethod = { [N in MethodName]: Method<N> }[MethodName];

/** Names of the methods followed by content (basic.publish, basic.return, basic.deliver, basic.get-ok). */
export type ContentMethodName = { [N in MethodName]: Defs[N] extends { content: true } ? N : never }[MethodName];

// ---------------------------------------------------------------------------------------------------------------
// Compiled form: kinds as small integers, lookups by id and by name.

const K_OCTET = 0;
const K_SHORT = 1;
const K_LONG = 2;
const K_LONGLONG = 3;
const K_BIT = 4;
const K_SHORTSTR = 5;
const K_LONGSTR = 6;
const K_LONGTEXT = 7;
const K_TABLE = 8;
const KIND_CODE: Record<Kind, number> = {
  octet: K_OCTET,
  short: K_SHORT,
  long: K_LONG,
  longlong: K_LONGLONG,
  bit: K_BIT,
  shortstr: K_SHORTSTR,
  longstr: K_LONGSTR,
  longtext: K_LONGTEXT,
  table: K_TABLE,
};

export interface MethodInfo {
  readonly name: MethodName;
  readonly classId: number;
  readonly methodId: number;
  /** Followed by a content header and body (basic.publish, basic.return, basic.deliver, basic.get-ok). */
  readonly hasContent: boolean;
  /** Argument names in wire order ('' for a reserved one). */
  readonly keys: readonly string[];
  readonly kinds: readonly number[];
}

const BY_ID = new Map<number, MethodInfo>();
const BY_NAME = new Map<string, MethodInfo>();
for (const [name, d] of Object.entries(METHOD_DEFS) as [MethodName, Def][]) {
  const info: MethodInfo = {
    name,
    classId: d.classId,
    methodId: d.methodId,
    hasContent: d.content === true,
    keys: d.args.map((a) => a[0]),
    kinds: d.args.map((a) => KIND_CODE[a[1]]),
  };
  BY_ID.set(d.classId * 65536 + d.methodId, info);
  BY_NAME.set(name, info);
}

/** Class id, method id and layout of a method, by name; undefined for an unknown name. */
export function methodInfo(name: string): MethodInfo | undefined {
  return BY_NAME.get(name);
}

/** The method with these ids, or undefined (e.g. to name a class-id/method-id pair in a log). */
export function methodInfoById(classId: number, methodId: number): MethodInfo | undefined {
  return BY_ID.get(classId * 65536 + methodId);
}

/** Every method, in table order (tests iterate it). */
export const METHOD_NAMES: readonly MethodName[] = Object.keys(METHOD_DEFS) as MethodName[];

// ---------------------------------------------------------------------------------------------------------------
// Decoding

/**
 * Decodes a method frame's payload (class-id, method-id, arguments). Unknown class or method: 540; truncated
 * arguments, bytes left over, a bad table or a delivery tag beyond 2^53 - 1: 502.
 */
export function decodeMethod(payload: Buffer): AmqpMethod {
  const r = new Reader(payload, 0, payload.length);
  const classId = r.u16('class-id');
  const methodId = r.u16('method-id');
  const info = BY_ID.get(classId * 65536 + methodId);
  if (info === undefined) {
    throw new AmqpCodecError(540, `unknown method ${classId}.${methodId}`, classId, methodId);
  }
  r.classId = classId;
  r.methodId = methodId;
  const m: Record<string, unknown> = { name: info.name };
  const keys = info.keys;
  const kinds = info.kinds;
  let bits = 0;
  let bit = 8; // next bit in `bits`; 8 = none read yet
  for (let i = 0; i < kinds.length; i++) {
    const kind = kinds[i]!;
    let v: unknown;
    if (kind === K_BIT) {
      if (bit === 8) {
        bits = r.u8(keys[i] || 'reserved bit');
        bit = 0;
      }
      v = ((bits >> bit) & 1) === 1;
      bit++;
    } else {
      bit = 8;
      const what = keys[i] || 'reserved field';
      switch (kind) {
        case K_OCTET:
          v = r.u8(what);
          break;
        case K_SHORT:
          v = r.u16(what);
          break;
        case K_LONG:
          v = r.u32(what);
          break;
        case K_LONGLONG:
          v = r.u64(what);
          break;
        case K_SHORTSTR:
          v = r.shortstr(what);
          break;
        case K_LONGSTR:
          v = r.longstr(what);
          break;
        case K_LONGTEXT:
          v = r.longtext(what);
          break;
        default:
          v = readTable(r);
      }
    }
    const key = keys[i]!;
    if (key !== '') m[key] = v;
  }
  if (r.pos !== payload.length) r.fail(`${payload.length - r.pos} bytes after the arguments of ${info.name}`);
  return m as unknown as AmqpMethod;
}

// ---------------------------------------------------------------------------------------------------------------
// Encoding: size pass then one exactly-sized buffer.

/** Byte lengths of shortstrs / sizes of tables found by the size pass, reused by the write pass. */
const scratch: number[] = [];

function fieldError(info: MethodInfo, key: string, message: string): never {
  throw new AmqpCodecError(502, `${info.name} ${key}: ${message}`, info.classId, info.methodId);
}

function payloadSize(info: MethodInfo, m: Record<string, unknown>): number {
  let n = 4;
  let inBits = false;
  const keys = info.keys;
  const kinds = info.kinds;
  for (let i = 0; i < kinds.length; i++) {
    const kind = kinds[i]!;
    if (kind === K_BIT) {
      // up to 8 consecutive bits share an octet (no method has more than 5)
      if (!inBits) n += 1;
      inBits = true;
      continue;
    }
    inBits = false;
    const key = keys[i]!;
    const v = key === '' ? undefined : m[key];
    switch (kind) {
      case K_OCTET:
        n += 1;
        break;
      case K_SHORT:
        n += 2;
        break;
      case K_LONG:
        n += 4;
        break;
      case K_LONGLONG:
        n += 8;
        break;
      case K_SHORTSTR: {
        if (v !== undefined && typeof v !== 'string') fieldError(info, key, 'must be a string');
        const len = v === undefined ? 0 : shortstrBytes(v, `${info.name} ${key}`);
        scratch[i] = len;
        n += 1 + len;
        break;
      }
      case K_LONGSTR:
      case K_LONGTEXT: {
        let len = 0;
        if (typeof v === 'string') len = Buffer.byteLength(v);
        else if (v instanceof Uint8Array) len = v.length;
        else if (v !== undefined) fieldError(info, key, 'must be a Buffer or a string');
        scratch[i] = len;
        n += 4 + len;
        break;
      }
      default: {
        if (v !== undefined && (v === null || typeof v !== 'object')) fieldError(info, key, 'must be a field table');
        const len = tableSize(v as FieldTable | undefined);
        scratch[i] = len;
        n += len;
      }
    }
  }
  return n;
}

function writePayload(buf: Buffer, pos: number, info: MethodInfo, m: Record<string, unknown>): number {
  buf.writeUInt16BE(info.classId, pos);
  buf.writeUInt16BE(info.methodId, pos + 2);
  pos += 4;
  const keys = info.keys;
  const kinds = info.kinds;
  let bitsAt = -1;
  let bit = 8;
  for (let i = 0; i < kinds.length; i++) {
    const kind = kinds[i]!;
    const key = keys[i]!;
    const v = key === '' ? undefined : m[key];
    if (kind === K_BIT) {
      if (bit === 8) {
        bitsAt = pos;
        buf[pos++] = 0;
        bit = 0;
      }
      if (v === true) buf[bitsAt] |= 1 << bit;
      else if (v !== undefined && v !== false) fieldError(info, key, 'must be a boolean');
      bit++;
      continue;
    }
    bit = 8;
    switch (kind) {
      case K_OCTET:
        if (v !== undefined) checkUint(v as number, 0xff, `${info.name} ${key}`);
        buf[pos] = (v as number | undefined) ?? 0;
        pos += 1;
        break;
      case K_SHORT:
        if (v !== undefined) checkUint(v as number, 0xffff, `${info.name} ${key}`);
        buf.writeUInt16BE((v as number | undefined) ?? 0, pos);
        pos += 2;
        break;
      case K_LONG:
        if (v !== undefined) checkUint(v as number, 0xffffffff, `${info.name} ${key}`);
        buf.writeUInt32BE((v as number | undefined) ?? 0, pos);
        pos += 4;
        break;
      case K_LONGLONG:
        pos = writeU64(buf, pos, (v as number | undefined) ?? 0, `${info.name} ${key}`);
        break;
      case K_SHORTSTR:
        pos = writeShortstr(buf, pos, (v as string | undefined) ?? '', scratch[i]!);
        break;
      case K_LONGSTR:
      case K_LONGTEXT: {
        const len = scratch[i]!;
        buf.writeUInt32BE(len, pos);
        if (typeof v === 'string') buf.write(v, pos + 4, len, 'utf8');
        else if (v !== undefined) buf.set(v as Uint8Array, pos + 4);
        pos += 4 + len;
        break;
      }
      default:
        pos = writeTable(buf, pos, v as FieldTable | undefined);
    }
  }
  return pos;
}

function infoOf(method: { name: string }): MethodInfo {
  const info = BY_NAME.get(method.name);
  if (info === undefined) throw new AmqpCodecError(540, `unknown method name ${String(method.name)}`);
  return info;
}

/** Size of a method frame's payload (class-id, method-id, arguments). */
export function methodPayloadSize(method: AmqpMethod): number {
  return payloadSize(infoOf(method), method as unknown as Record<string, unknown>);
}

/** A method frame's payload alone. */
export function encodeMethod(method: AmqpMethod): Buffer {
  const info = infoOf(method);
  const m = method as unknown as Record<string, unknown>;
  const buf = Buffer.allocUnsafe(payloadSize(info, m));
  writePayload(buf, 0, info, m);
  return buf;
}

/**
 * Writes a whole method frame at `pos` of `buf`, which must have room for `size + 8` bytes, where `size` comes
 * from the size pass just before (`methodPayloadSize` of the same object, with no other encode in between).
 * For encoders that put several frames in one buffer.
 */
export function writeMethodFrame(buf: Buffer, pos: number, channel: number, method: AmqpMethod, size: number): number {
  buf[pos] = FRAME_METHOD;
  buf.writeUInt16BE(channel, pos + 1);
  buf.writeUInt32BE(size, pos + 3);
  const end = writePayload(buf, pos + 7, infoOf(method), method as unknown as Record<string, unknown>);
  buf[end] = FRAME_END;
  return end + 1;
}

/** A complete method frame (type 1, channel, size, payload, frame-end). */
export function encodeMethodFrame(channel: number, method: AmqpMethod): Buffer {
  checkUint(channel, 0xffff, 'channel');
  const info = infoOf(method);
  const m = method as unknown as Record<string, unknown>;
  const size = payloadSize(info, m);
  const buf = Buffer.allocUnsafe(size + 8);
  buf[0] = FRAME_METHOD;
  buf.writeUInt16BE(channel, 1);
  buf.writeUInt32BE(size, 3);
  writePayload(buf, 7, info, m);
  buf[size + 7] = FRAME_END;
  return buf;
}
