/**
 * Field tables and field arrays (AMQP 0-9-1 §4.2.5.5) with the value types RabbitMQ uses, per its 0-9-1 errata
 * (https://www.rabbitmq.com/amqp-0-9-1-errata.html): the errata's tags, not the spec's, because every client
 * (RabbitMQ's own, amqplib, pika, the Java client) uses them — 's' is a signed 16-bit int (not a shortstr),
 * 'l' a signed 64-bit int, 'x' a byte array.
 *
 *   tag  wire                         decoded as                          encoded from
 *   t    octet 0/1                    boolean                             boolean
 *   b    int8                         Typed('b', number)                  Typed
 *   B    uint8                        Typed('B', number)                  Typed
 *   s    int16                        Typed('s', number)                  Typed
 *   u    uint16                       Typed('u', number)                  Typed
 *   I    int32                        number                              number that is an int32
 *   i    uint32                       Typed('i', number)                  Typed
 *   l    int64                        Typed('l', bigint)                  bigint, a safe integer outside int32, Typed
 *   L    int64 (see below)            Typed('L', bigint)                  Typed
 *   f    float32                      Typed('f', number)                  Typed
 *   d    float64                      Typed('d', number)                  a non-integer number, Typed
 *   D    scale octet + uint32         Typed('D', { scale, value })        Typed
 *   S    long string                  string (valid UTF-8) |              string
 *                                     Typed('S', Buffer) (not UTF-8)
 *   x    long byte array              Buffer                              Buffer / Uint8Array
 *   A    array of tagged values       FieldValue[]                        array
 *   T    uint64 seconds               Typed('T', bigint)                  Date (whole seconds), Typed
 *   F    nested table                 FieldTable                          plain object
 *   V    nothing                      null                                null (undefined entries are skipped)
 *
 * 'L' is read as a signed 64-bit integer like 'l', as RabbitMQ does (rabbit_binary_parser; its errata lists no
 * unsigned 64-bit type) and pika too, so the value a consumer sees is the one RabbitMQ would show; the tag is kept
 * all the same, so the bytes pass through unchanged.
 *
 * Where a JS type would be ambiguous (a number could be any of nine numeric tags) the decoder returns a `Typed`
 * that remembers the tag, so decode → encode reproduces the input bytes exactly (up to key order: JS objects
 * put integer-like keys first, and a repeated key keeps its last value). `fieldNumber` & co. read a value
 * whatever its tag. Decoded tables are null-prototype objects, so a key `__proto__` is just a key.
 *
 * Decoding is bounded: a nesting depth above MAX_FIELD_DEPTH is a syntax error rather than a stack overflow.
 */
import { isUtf8 } from 'node:buffer';
import { AmqpCodecError } from './errors.js';
import { Reader, utf8Length, writeUtf8 } from './reader.js';

export interface Decimal {
  /** Digits after the decimal point: the value is `value / 10 ** scale`. */
  scale: number;
  /** Unsigned 32-bit. */
  value: number;
}

export type TypedTag = 'b' | 'B' | 's' | 'u' | 'I' | 'i' | 'l' | 'L' | 'f' | 'd' | 'D' | 'T' | 'S';

type TypedValueOf<T extends TypedTag> = T extends 'l' | 'L' | 'T' ? bigint : T extends 'D' ? Decimal : T extends 'S' ? Buffer : number;

/** A field value that remembers its wire tag. */
export class Typed<T extends TypedTag = TypedTag> {
  constructor(
    readonly type: T,
    readonly value: TypedValueOf<T>,
  ) {}
}

export type FieldValue = boolean | number | bigint | string | Buffer | Uint8Array | Date | null | undefined | Typed | FieldValue[] | FieldTable;

export interface FieldTable {
  [key: string]: FieldValue;
}

/** Nesting depth (tables and arrays) beyond which a table is refused: real tables nest 2-3 levels (x-death). */
export const MAX_FIELD_DEPTH = 64;

const EMPTY_TABLE_BYTES = Buffer.alloc(4);

// ---------------------------------------------------------------------------------------------------------------
// Decoding

/** Decodes a field table at the reader's position (long length, then pairs). */
export function readTable(r: Reader, depth = 0): FieldTable {
  const size = r.u32('field table length');
  r.need(size, 'field table');
  const end = r.pos + size;
  const table: FieldTable = Object.create(null) as FieldTable;
  if (depth >= MAX_FIELD_DEPTH) r.fail(`field tables nested deeper than ${MAX_FIELD_DEPTH}`);
  const outer = r.end;
  r.end = end;
  while (r.pos < end) {
    const key = r.shortstr('field name');
    table[key] = readValue(r, depth);
  }
  r.end = outer;
  return table;
}

function readArray(r: Reader, depth: number): FieldValue[] {
  const size = r.u32('field array length');
  r.need(size, 'field array');
  if (depth >= MAX_FIELD_DEPTH) r.fail(`field arrays nested deeper than ${MAX_FIELD_DEPTH}`);
  const end = r.pos + size;
  const outer = r.end;
  r.end = end;
  const values: FieldValue[] = [];
  while (r.pos < end) values.push(readValue(r, depth));
  r.end = outer;
  return values;
}

function readValue(r: Reader, depth: number): FieldValue {
  const tag = r.u8('field type');
  const buf = r.buf;
  let v: FieldValue;
  switch (tag) {
    case 0x74: // t
      return r.u8('boolean') !== 0;
    case 0x62: // b
      r.need(1, 'int8');
      v = new Typed('b', buf.readInt8(r.pos));
      r.pos += 1;
      return v;
    case 0x42: // B
      return new Typed('B', r.u8('uint8'));
    case 0x73: // s
      r.need(2, 'int16');
      v = new Typed('s', buf.readInt16BE(r.pos));
      r.pos += 2;
      return v;
    case 0x75: // u
      return new Typed('u', r.u16('uint16'));
    case 0x49: // I
      r.need(4, 'int32');
      v = buf.readInt32BE(r.pos);
      r.pos += 4;
      return v;
    case 0x69: // i
      return new Typed('i', r.u32('uint32'));
    case 0x6c: // l
      r.need(8, 'int64');
      v = new Typed('l', buf.readBigInt64BE(r.pos));
      r.pos += 8;
      return v;
    case 0x4c: // L
      r.need(8, 'int64');
      v = new Typed('L', buf.readBigInt64BE(r.pos));
      r.pos += 8;
      return v;
    case 0x66: // f
      r.need(4, 'float');
      v = new Typed('f', buf.readFloatBE(r.pos));
      r.pos += 4;
      return v;
    case 0x64: // d
      r.need(8, 'double');
      v = new Typed('d', buf.readDoubleBE(r.pos));
      r.pos += 8;
      return v;
    case 0x44: {
      // D
      const scale = r.u8('decimal scale');
      return new Typed('D', { scale, value: r.u32('decimal value') });
    }
    case 0x53: {
      // S
      const n = r.u32('long string length');
      r.need(n, 'long string');
      const start = r.pos;
      r.pos += n;
      const bytes = buf.subarray(start, start + n);
      return isUtf8(bytes) ? buf.toString('utf8', start, start + n) : new Typed('S', Buffer.from(bytes));
    }
    case 0x78: // x
      return r.longstr('byte array');
    case 0x41: // A
      return readArray(r, depth + 1);
    case 0x54: // T
      r.need(8, 'timestamp');
      v = new Typed('T', buf.readBigUInt64BE(r.pos));
      r.pos += 8;
      return v;
    case 0x46: // F
      return readTable(r, depth + 1);
    case 0x56: // V
      return null;
    default:
      return r.fail(`unknown field type 0x${tag.toString(16).padStart(2, '0')}`);
  }
}

/** Fixed sizes of the scalar tags, 0 for the variable ones; -1 unknown. */
const FIXED_SIZE = new Int8Array(256).fill(-1);
for (const [tag, n] of [
  ['t', 1],
  ['b', 1],
  ['B', 1],
  ['s', 2],
  ['u', 2],
  ['I', 4],
  ['i', 4],
  ['l', 8],
  ['L', 8],
  ['f', 4],
  ['d', 8],
  ['D', 5],
  ['T', 8],
  ['V', 0],
  ['S', 0],
  ['x', 0],
  ['A', 0],
  ['F', 0],
] as const) {
  FIXED_SIZE[tag.charCodeAt(0)] = n;
}

/**
 * Checks that the field table at the reader's position is well formed (every tag known, every length within
 * bounds, nesting within MAX_FIELD_DEPTH) without building it: the publish path forwards header bytes it does
 * not decode, and must not forward a table a consumer could not read.
 */
export function skipTable(r: Reader, depth = 0): void {
  const size = r.u32('field table length');
  r.need(size, 'field table');
  if (depth >= MAX_FIELD_DEPTH) r.fail(`field tables nested deeper than ${MAX_FIELD_DEPTH}`);
  const end = r.pos + size;
  const outer = r.end;
  r.end = end;
  while (r.pos < end) {
    const k = r.u8('field name');
    r.need(k, 'field name');
    r.pos += k;
    skipValue(r, depth);
  }
  r.end = outer;
}

function skipValue(r: Reader, depth: number): void {
  const tag = r.u8('field type');
  const n = FIXED_SIZE[tag]!;
  if (n > 0) {
    r.need(n, 'field value');
    r.pos += n;
  } else if (n < 0) {
    r.fail(`unknown field type 0x${tag.toString(16).padStart(2, '0')}`);
  } else if (tag === 0x46) {
    skipTable(r, depth + 1);
  } else if (tag === 0x41) {
    const size = r.u32('field array length');
    r.need(size, 'field array');
    if (depth + 1 >= MAX_FIELD_DEPTH) r.fail(`field arrays nested deeper than ${MAX_FIELD_DEPTH}`);
    const end = r.pos + size;
    const outer = r.end;
    r.end = end;
    while (r.pos < end) skipValue(r, depth + 1);
    r.end = outer;
  } else if (tag !== 0x56) {
    // S, x
    const len = r.u32('long string length');
    r.need(len, 'long string');
    r.pos += len;
  }
}

/**
 * Decodes an encoded field table: the long length prefix and exactly that many bytes after it (the form of
 * Message.amqpHeaders and of BasicProperties.rawHeaders).
 */
export function decodeTable(bytes: Buffer): FieldTable {
  const r = new Reader(bytes, 0, bytes.length);
  const t = readTable(r);
  if (r.pos !== bytes.length) r.fail(`${bytes.length - r.pos} bytes after the field table`);
  return t;
}

/** Decodes field-value pairs without the length prefix (the inside of a table), e.g. for tests. */
export function decodeTableEntries(bytes: Buffer): FieldTable {
  const withLength = Buffer.allocUnsafe(bytes.length + 4);
  withLength.writeUInt32BE(bytes.length, 0);
  bytes.copy(withLength, 4);
  return decodeTable(withLength);
}

// ---------------------------------------------------------------------------------------------------------------
// Encoding: size first, then write into an exactly-sized buffer.

const INT32_MIN = -0x80000000;
const INT32_MAX = 0x7fffffff;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const UINT64_MAX = 2n ** 64n - 1n;

function bad(message: string): never {
  throw new AmqpCodecError(502, message);
}

function isPlainTable(v: object): v is FieldTable {
  const p = Object.getPrototypeOf(v) as unknown;
  return p === null || p === Object.prototype;
}

/** Bytes of a table's encoding including its 4-byte length prefix. */
export function tableSize(t: FieldTable | undefined, depth = 0): number {
  if (t === undefined) return 4;
  if (depth >= MAX_FIELD_DEPTH) bad(`field tables nested deeper than ${MAX_FIELD_DEPTH}`);
  let n = 4;
  for (const key in t) {
    const v = t[key];
    if (v === undefined) continue;
    const k = utf8Length(key);
    if (k > 255) bad(`field name of ${k} bytes, at most 255`);
    n += 1 + k + valueSize(v, depth);
  }
  return n;
}

function valueSize(v: FieldValue, depth: number): number {
  switch (typeof v) {
    case 'boolean':
      return 2;
    case 'number':
      return Number.isInteger(v) && v >= INT32_MIN && v <= INT32_MAX ? 5 : 9;
    case 'bigint':
      return 9;
    case 'string':
      return 5 + utf8Length(v);
    case 'object':
      if (v === null) return 1;
      if (v instanceof Typed) return typedSize(v);
      if (v instanceof Uint8Array) return 5 + v.length;
      if (v instanceof Date) return 9;
      if (Array.isArray(v)) {
        if (depth + 1 >= MAX_FIELD_DEPTH) bad(`field arrays nested deeper than ${MAX_FIELD_DEPTH}`);
        let n = 5;
        for (const e of v) n += e === undefined ? 1 : valueSize(e, depth + 1);
        return n;
      }
      if (isPlainTable(v)) return 1 + tableSize(v, depth + 1);
      return bad(`cannot encode a ${(v as object).constructor?.name ?? 'object'} in a field table`);
    default:
      return bad(`cannot encode a ${typeof v} in a field table`);
  }
}

function typedSize(v: Typed): number {
  switch (v.type) {
    case 'b':
    case 'B':
      return 2;
    case 's':
    case 'u':
      return 3;
    case 'I':
    case 'i':
    case 'f':
      return 5;
    case 'D':
      return 6;
    case 'l':
    case 'L':
    case 'd':
    case 'T':
      return 9;
    case 'S': {
      const x = v.value as Buffer | string;
      return 5 + (typeof x === 'string' ? Buffer.byteLength(x) : x.length);
    }
    default:
      return bad(`unknown field type ${String((v as Typed).type)}`);
  }
}

/** Writes a table (length prefix included) at pos; returns the position after it. */
export function writeTable(buf: Buffer, pos: number, t: FieldTable | undefined): number {
  const start = pos;
  pos += 4;
  if (t !== undefined) {
    for (const key in t) {
      const v = t[key];
      if (v === undefined) continue;
      const k = utf8Length(key);
      buf[pos] = k;
      writeUtf8(buf, pos + 1, key, k);
      pos = writeValue(buf, pos + 1 + k, v);
    }
  }
  buf.writeUInt32BE(pos - start - 4, start);
  return pos;
}

function writeBig(buf: Buffer, pos: number, v: number | bigint, signed: boolean, what: string): number {
  let b: bigint;
  if (typeof v === 'bigint') b = v;
  else if (Number.isSafeInteger(v)) b = BigInt(v);
  else return bad(`${what} must be an integer, got ${v}`);
  if (signed) {
    if (b < INT64_MIN || b > INT64_MAX) bad(`${what} out of int64 range`);
    buf.writeBigInt64BE(b, pos);
  } else {
    if (b < 0n || b > UINT64_MAX) bad(`${what} out of uint64 range`);
    buf.writeBigUInt64BE(b, pos);
  }
  return pos + 8;
}

function intIn(v: unknown, min: number, max: number, what: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) bad(`${what} must be an integer in ${min}..${max}, got ${String(v)}`);
  return v;
}

function writeValue(buf: Buffer, pos: number, v: FieldValue): number {
  switch (typeof v) {
    case 'boolean':
      buf[pos] = 0x74;
      buf[pos + 1] = v ? 1 : 0;
      return pos + 2;
    case 'number':
      if (Number.isInteger(v) && v >= INT32_MIN && v <= INT32_MAX) {
        buf[pos] = 0x49;
        buf.writeInt32BE(v, pos + 1);
        return pos + 5;
      }
      if (Number.isSafeInteger(v)) {
        buf[pos] = 0x6c;
        buf.writeBigInt64BE(BigInt(v), pos + 1);
        return pos + 9;
      }
      buf[pos] = 0x64;
      buf.writeDoubleBE(v, pos + 1);
      return pos + 9;
    case 'bigint':
      buf[pos] = 0x6c;
      return writeBig(buf, pos + 1, v, true, 'bigint field');
    case 'string': {
      buf[pos] = 0x53;
      const n = utf8Length(v);
      writeUtf8(buf, pos + 5, v, n);
      buf.writeUInt32BE(n, pos + 1);
      return pos + 5 + n;
    }
    case 'undefined':
      buf[pos] = 0x56; // only inside arrays: an array keeps its length
      return pos + 1;
    default:
      break;
  }
  if (v === null) {
    buf[pos] = 0x56;
    return pos + 1;
  }
  if (v instanceof Typed) return writeTyped(buf, pos, v);
  if (v instanceof Uint8Array) {
    buf[pos] = 0x78;
    buf.writeUInt32BE(v.length, pos + 1);
    buf.set(v, pos + 5);
    return pos + 5 + v.length;
  }
  if (v instanceof Date) {
    buf[pos] = 0x54;
    const s = Math.floor(v.getTime() / 1000);
    return writeBig(buf, pos + 1, s, false, 'timestamp');
  }
  if (Array.isArray(v)) {
    buf[pos] = 0x41;
    const start = pos + 1;
    pos += 5;
    for (const e of v) pos = writeValue(buf, pos, e);
    buf.writeUInt32BE(pos - start - 4, start);
    return pos;
  }
  buf[pos] = 0x46;
  return writeTable(buf, pos + 1, v as FieldTable);
}

function writeTyped(buf: Buffer, pos: number, t: Typed): number {
  const v = t.value as unknown;
  buf[pos] = t.type.charCodeAt(0);
  pos += 1;
  switch (t.type) {
    case 'b':
      buf.writeInt8(intIn(v, -128, 127, 'int8 field'), pos);
      return pos + 1;
    case 'B':
      buf[pos] = intIn(v, 0, 255, 'uint8 field');
      return pos + 1;
    case 's':
      buf.writeInt16BE(intIn(v, -0x8000, 0x7fff, 'int16 field'), pos);
      return pos + 2;
    case 'u':
      buf.writeUInt16BE(intIn(v, 0, 0xffff, 'uint16 field'), pos);
      return pos + 2;
    case 'I':
      buf.writeInt32BE(intIn(v, INT32_MIN, INT32_MAX, 'int32 field'), pos);
      return pos + 4;
    case 'i':
      buf.writeUInt32BE(intIn(v, 0, 0xffffffff, 'uint32 field'), pos);
      return pos + 4;
    case 'l':
      return writeBig(buf, pos, v as number | bigint, true, 'int64 field');
    case 'L':
      return writeBig(buf, pos, v as number | bigint, true, 'int64 (L) field');
    case 'T':
      return writeBig(buf, pos, v as number | bigint, false, 'timestamp field');
    case 'f':
      if (typeof v !== 'number') bad('float field must be a number');
      buf.writeFloatBE(v, pos);
      return pos + 4;
    case 'd':
      if (typeof v !== 'number') bad('double field must be a number');
      buf.writeDoubleBE(v, pos);
      return pos + 8;
    case 'D': {
      const d = v as Decimal;
      if (d === null || typeof d !== 'object') bad('decimal field must be { scale, value }');
      buf[pos] = intIn(d.scale, 0, 255, 'decimal scale');
      buf.writeUInt32BE(intIn(d.value, 0, 0xffffffff, 'decimal value'), pos + 1);
      return pos + 5;
    }
    case 'S': {
      if (typeof v === 'string') {
        const n = buf.write(v, pos + 4, 'utf8');
        buf.writeUInt32BE(n, pos);
        return pos + 4 + n;
      }
      if (!(v instanceof Uint8Array)) bad('long string field must be a Buffer or a string');
      buf.writeUInt32BE(v.length, pos);
      buf.set(v, pos + 4);
      return pos + 4 + v.length;
    }
    default:
      return bad(`unknown field type ${String(t.type)}`);
  }
}

/** Encodes a table with its 4-byte length prefix. `undefined` is the empty table. */
export function encodeTable(t: FieldTable | undefined): Buffer {
  if (t === undefined) return EMPTY_TABLE_BYTES;
  const buf = Buffer.allocUnsafe(tableSize(t));
  writeTable(buf, 0, t);
  return buf;
}

/** Encodes one field value with its tag (e.g. for tests and for building arrays by hand). */
export function encodeFieldValue(v: FieldValue): Buffer {
  const buf = Buffer.allocUnsafe(valueSize(v, 0));
  writeValue(buf, 0, v);
  return buf;
}

// ---------------------------------------------------------------------------------------------------------------
// Reading values whatever their tag (arguments such as x-message-ttl arrive as 'b', 's', 'I', 'l'... depending on
// the client and the number).

/** The numeric value of any integer or floating tag (bigints converted when safe), else undefined. */
export function fieldNumber(v: FieldValue): number | undefined {
  if (typeof v === 'number') return v;
  if (typeof v === 'bigint') return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : undefined;
  if (v instanceof Typed) {
    const x = v.value;
    if (typeof x === 'number') return x;
    if (typeof x === 'bigint') return fieldNumber(x);
    if (v.type === 'D') return (x as Decimal).value / 10 ** (x as Decimal).scale;
  }
  return undefined;
}

/** An integer value of any tag (floats with an integral value included), else undefined. */
export function fieldInteger(v: FieldValue): number | undefined {
  const n = fieldNumber(v);
  return n !== undefined && Number.isSafeInteger(n) ? n : undefined;
}

/** The text of a long string ('S', also when not UTF-8, or 'x' bytes), else undefined. */
export function fieldString(v: FieldValue): string | undefined {
  if (typeof v === 'string') return v;
  if (v instanceof Typed && v.type === 'S') return (v.value as Buffer).toString('utf8');
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.length).toString('utf8');
  return undefined;
}

/** A boolean ('t'), else undefined. */
export function fieldBoolean(v: FieldValue): boolean | undefined {
  return typeof v === 'boolean' ? v : undefined;
}

/** A nested table ('F'), else undefined. */
export function fieldTable(v: FieldValue): FieldTable | undefined {
  return v !== null && typeof v === 'object' && !(v instanceof Typed) && !(v instanceof Uint8Array) && !(v instanceof Date) && !Array.isArray(v)
    ? (v as FieldTable)
    : undefined;
}
