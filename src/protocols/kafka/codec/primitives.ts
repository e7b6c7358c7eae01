/**
 * Kafka protocol primitive types (https://kafka.apache.org/protocol#protocol_types): fixed-width big-endian
 * integers, (unsigned) varints, classic INT16/INT32-length strings, bytes and arrays, and the "compact"
 * encodings of flexible versions (KIP-482): unsigned-varint lengths stored as length + 1 (0 = null) and a tagged
 * field section at the end of each structure.
 *
 * Both Reader and Writer carry a `flexible` flag; the unqualified methods (`string()`, `array()`, `bytes()`,
 * `taggedFields()`...) pick the classic or compact encoding from it, so one message codec serves every version.
 * The explicitly named methods (`string16()`, `compactString()`...) exist for the few fields that do not follow
 * the message's flexibility, such as the client id of request header v2.
 */
import { KafkaProtocolError } from './errors.js';

/** A Kafka UUID (16 bytes). */
export type Uuid = Buffer;
export const ZERO_UUID: Uuid = Buffer.alloc(16);

/** Raw tagged fields by tag (KIP-482): unknown tags are skipped by decoders, as the protocol requires. */
export type TaggedFields = Map<number, Buffer>;

const MAX_INT32 = 0x7fffffff;

export class Reader {
  pos: number;
  readonly end: number;
  /** Whether the structure being read uses the compact encodings of flexible versions. */
  flexible = false;

  constructor(
    readonly buf: Buffer,
    start = 0,
    end = buf.length,
  ) {
    this.pos = start;
    this.end = end;
  }

  remaining(): number {
    return this.end - this.pos;
  }

  private need(n: number, what: string): void {
    if (this.end - this.pos < n) {
      throw new KafkaProtocolError('TRUNCATED', `${what} needs ${n} bytes at ${this.pos}, ${this.end - this.pos} left`);
    }
  }

  /** Throws unless every byte was consumed: trailing garbage means a version mismatch or a corrupt frame. */
  expectEnd(what: string): void {
    if (this.pos !== this.end) {
      throw new KafkaProtocolError('TRAILING_BYTES', `${this.end - this.pos} unexpected bytes after ${what}`);
    }
  }

  // ---------------------------------------------------------------- fixed width

  int8(): number {
    this.need(1, 'int8');
    return this.buf.readInt8(this.pos++);
  }
  int16(): number {
    this.need(2, 'int16');
    const v = this.buf.readInt16BE(this.pos);
    this.pos += 2;
    return v;
  }
  int32(): number {
    this.need(4, 'int32');
    const v = this.buf.readInt32BE(this.pos);
    this.pos += 4;
    return v;
  }
  uint32(): number {
    this.need(4, 'uint32');
    const v = this.buf.readUInt32BE(this.pos);
    this.pos += 4;
    return v;
  }
  /** INT64 as a bigint, exact. */
  bigint64(): bigint {
    this.need(8, 'int64');
    const v = this.buf.readBigInt64BE(this.pos);
    this.pos += 8;
    return v;
  }
  /**
   * INT64 as a number: offsets and timestamps fit in 2^53 in practice (2^53 offsets is 285 years at a million
   * records a second), so they are handled as plain numbers throughout the broker.
   */
  int64(): number {
    return Number(this.bigint64());
  }
  /** FLOAT64: an IEEE 754 double, big-endian (client quota values). */
  float64(): number {
    this.need(8, 'float64');
    const v = this.buf.readDoubleBE(this.pos);
    this.pos += 8;
    return v;
  }
  /** Any byte but 0 is true, as Kafka's generated readers take it (`readByte() != 0`). */
  bool(): boolean {
    this.need(1, 'boolean');
    return this.buf[this.pos++] !== 0;
  }
  uuid(): Uuid {
    this.need(16, 'uuid');
    const v = this.buf.subarray(this.pos, this.pos + 16);
    this.pos += 16;
    return v;
  }

  // ---------------------------------------------------------------- varints

  /** UNSIGNED_VARINT: at most 5 bytes, a 32-bit unsigned value. */
  uvarint(): number {
    let v = 0;
    let mul = 1;
    for (let i = 0; i < 5; i++) {
      this.need(1, 'unsigned varint');
      const b = this.buf[this.pos++];
      v += (b & 0x7f) * mul;
      if ((b & 0x80) === 0) {
        if (v > 0xffffffff) throw new KafkaProtocolError('BAD_VARINT', 'unsigned varint exceeds 32 bits');
        return v;
      }
      mul *= 128;
    }
    throw new KafkaProtocolError('BAD_VARINT', 'unsigned varint longer than 5 bytes');
  }
  /** VARINT: zig-zag encoded signed 32-bit value. */
  varint(): number {
    const z = this.uvarint();
    return z % 2 === 0 ? z / 2 : -(z + 1) / 2;
  }
  /** Unsigned 64-bit varint (at most 10 bytes). */
  uvarlong(): bigint {
    let v = 0n;
    let shift = 0n;
    for (let i = 0; i < 10; i++) {
      this.need(1, 'unsigned varlong');
      const b = this.buf[this.pos++];
      v |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) {
        if (v > 0xffffffffffffffffn) throw new KafkaProtocolError('BAD_VARINT', 'varlong exceeds 64 bits');
        return v;
      }
      shift += 7n;
    }
    throw new KafkaProtocolError('BAD_VARINT', 'varlong longer than 10 bytes');
  }
  /** VARLONG: zig-zag encoded signed 64-bit value. */
  varlong(): bigint {
    const z = this.uvarlong();
    return (z >> 1n) ^ -(z & 1n);
  }

  // ---------------------------------------------------------------- lengths

  /** A compact length: uvarint N+1, 0 = null (-1 returned). */
  private compactLength(what: string): number {
    const n = this.uvarint() - 1;
    if (n > MAX_INT32) throw new KafkaProtocolError('BAD_VALUE', `${what} length ${n} too large`);
    return n;
  }
  private bytesOf(len: number, what: string): Buffer {
    this.need(len, what);
    const v = this.buf.subarray(this.pos, this.pos + len);
    this.pos += len;
    return v;
  }
  private text(len: number, what: string): string {
    this.need(len, what);
    const s = this.buf.toString('utf8', this.pos, this.pos + len);
    this.pos += len;
    return s;
  }
  /**
   * An array's element count. Every element takes at least one byte on the wire, so a count beyond the bytes
   * left is rejected before anything is allocated: a 4-byte garbage count must not allocate gigabytes.
   */
  private checkCount(n: number, what: string): void {
    if (n > this.end - this.pos) {
      throw new KafkaProtocolError('TRUNCATED', `${what} claims ${n} elements with ${this.end - this.pos} bytes left`);
    }
  }

  // ---------------------------------------------------------------- classic encodings

  string16(): string {
    const len = this.int16();
    if (len < 0) throw new KafkaProtocolError('NEGATIVE_LENGTH', `non-nullable string has length ${len}`);
    return this.text(len, 'string');
  }
  nullableString16(): string | null {
    const len = this.int16();
    if (len < -1) throw new KafkaProtocolError('NEGATIVE_LENGTH', `nullable string has length ${len}`);
    return len === -1 ? null : this.text(len, 'string');
  }
  bytes32(): Buffer {
    const len = this.int32();
    if (len < 0) throw new KafkaProtocolError('NEGATIVE_LENGTH', `non-nullable bytes have length ${len}`);
    return this.bytesOf(len, 'bytes');
  }
  nullableBytes32(): Buffer | null {
    const len = this.int32();
    if (len < -1) throw new KafkaProtocolError('NEGATIVE_LENGTH', `nullable bytes have length ${len}`);
    return len === -1 ? null : this.bytesOf(len, 'bytes');
  }
  array32<T>(item: (r: Reader) => T): T[] {
    const n = this.int32();
    if (n < 0) throw new KafkaProtocolError('NEGATIVE_LENGTH', `non-nullable array has length ${n}`);
    return this.items(n, item);
  }
  nullableArray32<T>(item: (r: Reader) => T): T[] | null {
    const n = this.int32();
    if (n < -1) throw new KafkaProtocolError('NEGATIVE_LENGTH', `nullable array has length ${n}`);
    return n === -1 ? null : this.items(n, item);
  }
  private items<T>(n: number, item: (r: Reader) => T): T[] {
    this.checkCount(n, 'array');
    const out: T[] = new Array<T>(n);
    for (let i = 0; i < n; i++) out[i] = item(this);
    return out;
  }

  // ---------------------------------------------------------------- compact encodings (KIP-482)

  compactString(): string {
    const len = this.compactLength('compact string');
    if (len < 0) throw new KafkaProtocolError('NEGATIVE_LENGTH', 'non-nullable compact string is null');
    return this.text(len, 'compact string');
  }
  compactNullableString(): string | null {
    const len = this.compactLength('compact string');
    return len < 0 ? null : this.text(len, 'compact string');
  }
  compactBytes(): Buffer {
    const len = this.compactLength('compact bytes');
    if (len < 0) throw new KafkaProtocolError('NEGATIVE_LENGTH', 'non-nullable compact bytes are null');
    return this.bytesOf(len, 'compact bytes');
  }
  compactNullableBytes(): Buffer | null {
    const len = this.compactLength('compact bytes');
    return len < 0 ? null : this.bytesOf(len, 'compact bytes');
  }
  compactArray<T>(item: (r: Reader) => T): T[] {
    const n = this.compactLength('compact array');
    if (n < 0) throw new KafkaProtocolError('NEGATIVE_LENGTH', 'non-nullable compact array is null');
    return this.items(n, item);
  }
  compactNullableArray<T>(item: (r: Reader) => T): T[] | null {
    const n = this.compactLength('compact array');
    return n < 0 ? null : this.items(n, item);
  }

  /**
   * The tagged-field section of a flexible structure: a count, then (tag, size, bytes). Returns undefined when
   * empty or when the structure is not flexible (no section at all).
   *
   * KIP-482 asks writers for increasing tags, but Kafka's generated readers do not check the order: they take
   * each (tag, size) as it comes, a known tag's field as often as it appears (the last one wins) and an unknown
   * one skipped by its size. Readers here do the same, so a client that writes its tags in another order, or
   * twice, is understood as a Kafka broker understands it.
   */
  taggedFields(): TaggedFields | undefined {
    if (!this.flexible) return undefined;
    const n = this.uvarint();
    if (n === 0) return undefined;
    this.checkCount(n, 'tagged fields');
    const out: TaggedFields = new Map();
    for (let i = 0; i < n; i++) {
      const tag = this.uvarint();
      const size = this.uvarint();
      out.set(tag, this.bytesOf(size, 'tagged field'));
    }
    return out;
  }

  // ---------------------------------------------------------------- version-aware

  string(): string {
    return this.flexible ? this.compactString() : this.string16();
  }
  nullableString(): string | null {
    return this.flexible ? this.compactNullableString() : this.nullableString16();
  }
  bytes(): Buffer {
    return this.flexible ? this.compactBytes() : this.bytes32();
  }
  nullableBytes(): Buffer | null {
    return this.flexible ? this.compactNullableBytes() : this.nullableBytes32();
  }
  array<T>(item: (r: Reader) => T): T[] {
    return this.flexible ? this.compactArray(item) : this.array32(item);
  }
  nullableArray<T>(item: (r: Reader) => T): T[] | null {
    return this.flexible ? this.compactNullableArray(item) : this.nullableArray32(item);
  }
}

/**
 * Reads one tagged field's value with a sub-reader over its bytes. A value shorter than its field is TRUNCATED;
 * bytes of the value after the field are ignored, like bytes after a request body (Kafka's generated readers
 * read a known tag's field and do not compare it with the size the tag declared).
 */
export function readTag<T>(fields: TaggedFields | undefined, tag: number, flexible: boolean, read: (r: Reader) => T): T | undefined {
  const raw = fields?.get(tag);
  if (raw === undefined) return undefined;
  const r = new Reader(raw);
  r.flexible = flexible;
  return read(r);
}

export interface TaggedField {
  tag: number;
  /** Encoded value, written with its size. */
  value: Buffer;
}

/** Attached buffers below this size are copied instead of becoming separate chunks. */
const ATTACH_COPY_LIMIT = 1024;

/**
 * A growable output buffer that can also attach large external buffers (stored record batches) without copying:
 * the result is a list of chunks, written to a socket with one corked writev.
 */
export class Writer {
  /** Whether the structure being written uses the compact encodings of flexible versions. */
  flexible = false;
  private buf: Buffer;
  /** Start of the bytes of `buf` not yet moved to `chunks`. */
  private start = 0;
  private pos = 0;
  private readonly chunks: Buffer[] = [];
  private chunkBytes = 0;
  private readonly sizePrefix: boolean;

  /** `sizePrefix`: reserve 4 bytes for a frame size that `toChunks()` fills in (the frame excludes them). */
  constructor(initialSize = 256, sizePrefix = false) {
    this.buf = Buffer.allocUnsafe(Math.max(16, initialSize));
    this.sizePrefix = sizePrefix;
    if (sizePrefix) this.int32(0);
  }

  /** Bytes written so far (including a reserved size prefix). */
  get length(): number {
    return this.chunkBytes + this.pos - this.start;
  }

  private ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const used = this.pos - this.start;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, used + n, 256));
    this.buf.copy(next, 0, this.start, this.pos);
    this.buf = next;
    this.start = 0;
    this.pos = used;
  }

  int8(v: number): this {
    this.ensure(1);
    this.buf.writeInt8(v, this.pos);
    this.pos += 1;
    return this;
  }
  int16(v: number): this {
    this.ensure(2);
    this.buf.writeInt16BE(v, this.pos);
    this.pos += 2;
    return this;
  }
  int32(v: number): this {
    this.ensure(4);
    this.buf.writeInt32BE(v, this.pos);
    this.pos += 4;
    return this;
  }
  uint32(v: number): this {
    this.ensure(4);
    this.buf.writeUInt32BE(v, this.pos);
    this.pos += 4;
    return this;
  }
  float64(v: number): this {
    this.ensure(8);
    this.buf.writeDoubleBE(v, this.pos);
    this.pos += 8;
    return this;
  }
  int64(v: number | bigint): this {
    this.ensure(8);
    this.buf.writeBigInt64BE(typeof v === 'bigint' ? v : BigInt(v), this.pos);
    this.pos += 8;
    return this;
  }
  bool(v: boolean): this {
    return this.int8(v ? 1 : 0);
  }
  uuid(v: Uuid): this {
    if (v.length !== 16) throw new KafkaProtocolError('BAD_VALUE', `uuid must be 16 bytes, not ${v.length}`);
    return this.raw(v);
  }

  uvarint(v: number): this {
    if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) throw new KafkaProtocolError('BAD_VALUE', `bad unsigned varint ${v}`);
    this.ensure(5);
    while (v >= 0x80) {
      this.buf[this.pos++] = (v & 0x7f) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buf[this.pos++] = v;
    return this;
  }
  varint(v: number): this {
    return this.uvarint(v >= 0 ? v * 2 : -v * 2 - 1);
  }
  uvarlong(v: bigint): this {
    if (v < 0n || v > 0xffffffffffffffffn) throw new KafkaProtocolError('BAD_VALUE', `bad unsigned varlong ${v}`);
    this.ensure(10);
    while (v >= 0x80n) {
      this.buf[this.pos++] = Number(v & 0x7fn) | 0x80;
      v >>= 7n;
    }
    this.buf[this.pos++] = Number(v);
    return this;
  }
  varlong(v: bigint): this {
    return this.uvarlong(v >= 0n ? v << 1n : (-v << 1n) - 1n);
  }

  /** Copies bytes. */
  raw(b: Uint8Array): this {
    this.ensure(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
    return this;
  }

  /** Appends buffers without copying them (small ones are copied, so tiny chunks do not pile up). */
  attach(bufs: readonly Buffer[]): this {
    for (const b of bufs) {
      if (b.length < ATTACH_COPY_LIMIT) {
        this.raw(b);
        continue;
      }
      if (this.pos > this.start) {
        this.chunks.push(this.buf.subarray(this.start, this.pos));
        this.chunkBytes += this.pos - this.start;
        this.start = this.pos;
      }
      this.chunks.push(b);
      this.chunkBytes += b.length;
    }
    return this;
  }

  private utf8(s: string, len: number): void {
    this.ensure(len);
    this.pos += this.buf.write(s, this.pos, len, 'utf8');
  }

  // ---------------------------------------------------------------- classic encodings

  string16(s: string): this {
    const len = Buffer.byteLength(s);
    if (len > 0x7fff) throw new KafkaProtocolError('BAD_VALUE', `string of ${len} bytes does not fit an INT16 length`);
    this.int16(len);
    this.utf8(s, len);
    return this;
  }
  nullableString16(s: string | null): this {
    return s === null ? this.int16(-1) : this.string16(s);
  }
  bytes32(b: Uint8Array): this {
    return this.int32(b.length).raw(b);
  }
  nullableBytes32(b: Uint8Array | null): this {
    return b === null ? this.int32(-1) : this.bytes32(b);
  }
  array32<T>(items: readonly T[], item: (w: Writer, v: T) => void): this {
    this.int32(items.length);
    for (const v of items) item(this, v);
    return this;
  }
  nullableArray32<T>(items: readonly T[] | null, item: (w: Writer, v: T) => void): this {
    return items === null ? this.int32(-1) : this.array32(items, item);
  }

  // ---------------------------------------------------------------- compact encodings (KIP-482)

  compactString(s: string): this {
    const len = Buffer.byteLength(s);
    this.uvarint(len + 1);
    this.utf8(s, len);
    return this;
  }
  compactNullableString(s: string | null): this {
    return s === null ? this.uvarint(0) : this.compactString(s);
  }
  compactBytes(b: Uint8Array): this {
    return this.uvarint(b.length + 1).raw(b);
  }
  compactNullableBytes(b: Uint8Array | null): this {
    return b === null ? this.uvarint(0) : this.compactBytes(b);
  }
  compactArray<T>(items: readonly T[], item: (w: Writer, v: T) => void): this {
    this.uvarint(items.length + 1);
    for (const v of items) item(this, v);
    return this;
  }
  compactNullableArray<T>(items: readonly T[] | null, item: (w: Writer, v: T) => void): this {
    return items === null ? this.uvarint(0) : this.compactArray(items, item);
  }

  /** The tagged-field section of a flexible structure (nothing at all in non-flexible versions). */
  taggedFields(fields?: readonly TaggedField[]): this {
    if (!this.flexible) return this;
    if (!fields || fields.length === 0) return this.uvarint(0);
    const sorted = [...fields].sort((a, b) => a.tag - b.tag);
    this.uvarint(sorted.length);
    for (const f of sorted) this.uvarint(f.tag).uvarint(f.value.length).raw(f.value);
    return this;
  }

  // ---------------------------------------------------------------- version-aware

  string(s: string): this {
    return this.flexible ? this.compactString(s) : this.string16(s);
  }
  nullableString(s: string | null): this {
    return this.flexible ? this.compactNullableString(s) : this.nullableString16(s);
  }
  bytes(b: Uint8Array): this {
    return this.flexible ? this.compactBytes(b) : this.bytes32(b);
  }
  nullableBytes(b: Uint8Array | null): this {
    return this.flexible ? this.compactNullableBytes(b) : this.nullableBytes32(b);
  }
  array<T>(items: readonly T[], item: (w: Writer, v: T) => void): this {
    return this.flexible ? this.compactArray(items, item) : this.array32(items, item);
  }
  nullableArray<T>(items: readonly T[] | null, item: (w: Writer, v: T) => void): this {
    return this.flexible ? this.compactNullableArray(items, item) : this.nullableArray32(items, item);
  }
  /** A RECORDS field (nullable bytes) given as chunks, attached without copying. */
  records(chunks: readonly Buffer[] | null): this {
    if (chunks === null) return this.flexible ? this.uvarint(0) : this.int32(-1);
    let n = 0;
    for (const c of chunks) n += c.length;
    if (this.flexible) this.uvarint(n + 1);
    else this.int32(n);
    return this.attach(chunks);
  }

  // ---------------------------------------------------------------- output

  /** The written bytes as chunks; with a size prefix, the first 4 bytes hold the size of the rest. */
  toChunks(): Buffer[] {
    if (this.pos > this.start) {
      this.chunks.push(this.buf.subarray(this.start, this.pos));
      this.chunkBytes += this.pos - this.start;
      this.start = this.pos;
    }
    if (this.sizePrefix && this.chunks.length > 0) this.chunks[0].writeInt32BE(this.chunkBytes - 4, 0);
    return this.chunks;
  }

  toBuffer(): Buffer {
    const chunks = this.toChunks();
    return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, this.chunkBytes);
  }
}
