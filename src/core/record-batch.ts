/**
 * Kafka RecordBatch v2 — FlowMQ's storage format for every stream (see DESIGN.md, "Write path"). Batches are
 * stored exactly as a Kafka Fetch serves them, so Kafka reads need no re-encoding; messages that arrive through
 * other protocols are encoded into batches here, carrying their unified topic and properties as reserved `flowmq.*`
 * headers (properties.ts).
 *
 * Layout (big-endian): baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
 * attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 | producerId i64 |
 * producerEpoch i16 | baseSequence i32 | recordCount i32 | records...
 * The CRC-32C covers attributes..end, so baseOffset and the leader epoch may be rewritten without re-hashing.
 */
import { isUtf8 } from 'node:buffer';
import { gunzipSync, gzipSync } from 'node:zlib';
import { MAX_DECOMPRESSED_BYTES, lz4Decompress, snappyDecompress, zstdDecompressBuffer } from './compression.js';
import { crc32c } from './crc32c.js';
import { FlowError } from './errors.js';
import type { Header, Message } from './message.js';
import { PROPERTY_HEADERS, RESERVED_HEADER_PREFIX, hasHeaderProperties, isPropertyHeader, readPropertyHeader, writePropertyHeaders } from './properties.js';

export const BATCH_HEADER_SIZE = 61;
/** Bytes of baseOffset + batchLength: the batch's total size is batchLength + this. */
export const BATCH_LOG_OVERHEAD = 12;
/** Header carrying the unified topic of a record whose topic differs from its stream's own topic. */
export const TOPIC_HEADER = PROPERTY_HEADERS.topic;

export const enum Compression {
  None = 0,
  Gzip = 1,
  Snappy = 2,
  Lz4 = 3,
  Zstd = 4,
}

const OFF_BATCH_LENGTH = 8;
const OFF_MAGIC = 16;
export const OFF_CRC = 17;
export const OFF_ATTRIBUTES = 21;
const OFF_LAST_OFFSET_DELTA = 23;
export const OFF_BASE_TS = 27;
export const OFF_MAX_TS = 35;
const OFF_PRODUCER_ID = 43;
const OFF_PRODUCER_EPOCH = 51;
const OFF_BASE_SEQUENCE = 53;
const OFF_RECORD_COUNT = 57;

export interface BatchInfo {
  baseOffset: number;
  /** Total bytes of the batch, including the 12-byte log overhead. */
  size: number;
  magic: number;
  attributes: number;
  compression: number;
  lastOffsetDelta: number;
  baseTimestamp: number;
  maxTimestamp: number;
  producerId: bigint;
  producerEpoch: number;
  baseSequence: number;
  recordCount: number;
}

export interface Record {
  offset: number;
  timestamp: number;
  key: Buffer | null;
  value: Buffer | null;
  headers: Header[];
}

/** Reads the header of the batch starting at `pos`; throws CORRUPT_DATA if it is truncated or not v2. */
export function readBatchInfo(buf: Buffer, pos = 0): BatchInfo {
  if (buf.length - pos < BATCH_HEADER_SIZE) throw new FlowError('CORRUPT_DATA', 'record batch truncated');
  const batchLength = buf.readInt32BE(pos + OFF_BATCH_LENGTH);
  const size = batchLength + BATCH_LOG_OVERHEAD;
  if (batchLength < BATCH_HEADER_SIZE - BATCH_LOG_OVERHEAD || buf.length - pos < size) {
    throw new FlowError('CORRUPT_DATA', `record batch length ${batchLength} does not fit`);
  }
  const magic = buf.readInt8(pos + OFF_MAGIC);
  if (magic !== 2) throw new FlowError('CORRUPT_DATA', `unsupported record batch magic ${magic}`);
  const attributes = buf.readInt16BE(pos + OFF_ATTRIBUTES);
  const recordCount = buf.readInt32BE(pos + OFF_RECORD_COUNT);
  const lastOffsetDelta = buf.readInt32BE(pos + OFF_LAST_OFFSET_DELTA);
  if (recordCount < 0 || lastOffsetDelta < 0) throw new FlowError('CORRUPT_DATA', 'negative record count');
  return {
    baseOffset: Number(buf.readBigInt64BE(pos)),
    size,
    magic,
    attributes,
    compression: attributes & 0x07,
    lastOffsetDelta,
    baseTimestamp: Number(buf.readBigInt64BE(pos + OFF_BASE_TS)),
    maxTimestamp: Number(buf.readBigInt64BE(pos + OFF_MAX_TS)),
    producerId: buf.readBigInt64BE(pos + OFF_PRODUCER_ID),
    producerEpoch: buf.readInt16BE(pos + OFF_PRODUCER_EPOCH),
    baseSequence: buf.readInt32BE(pos + OFF_BASE_SEQUENCE),
    recordCount,
  };
}

export function verifyBatchCrc(batch: Buffer, pos = 0, size = batch.length - pos): boolean {
  return batch.readUInt32BE(pos + OFF_CRC) === crc32c(batch, pos + OFF_ATTRIBUTES, pos + size);
}

/** Rewrites the base offset of the batch at `pos` in place (not covered by the CRC). */
export function setBaseOffset(batch: Buffer, offset: number, pos = 0): void {
  batch.writeBigInt64BE(BigInt(offset), pos);
}

/** Stamps the batch with a producer id, epoch and base sequence, in place, and computes its CRC again. */
export function setProducer(batch: Buffer, producerId: number, epoch: number, baseSequence: number): void {
  batch.writeBigInt64BE(BigInt(producerId), OFF_PRODUCER_ID);
  batch.writeInt16BE(epoch, OFF_PRODUCER_EPOCH);
  batch.writeInt32BE(baseSequence, OFF_BASE_SEQUENCE);
  batch.writeUInt32BE(crc32c(batch, OFF_ATTRIBUTES, batch.length), OFF_CRC);
}

/** Attribute bit of a batch whose timestamps are the log's append time (Kafka's TimestampType.LOG_APPEND_TIME). */
export const ATTR_LOG_APPEND_TIME = 0x08;

/**
 * Stamps a whole batch with the log's append time `ts`, in place, as a Kafka broker does for a topic with
 * message.timestamp.type=LogAppendTime (LogValidator, DefaultRecordBatch.setMaxTimestamp): the timestamp-type bit
 * is set, maxTimestamp becomes `ts` and the CRC is computed again; the records are left as they are (compressed
 * ones too), and readers take the batch's maxTimestamp as every record's timestamp.
 */
export function setLogAppendTime(batch: Buffer, ts: number): void {
  batch.writeInt16BE(batch.readInt16BE(OFF_ATTRIBUTES) | ATTR_LOG_APPEND_TIME, OFF_ATTRIBUTES);
  batch.writeBigInt64BE(BigInt(ts), OFF_MAX_TS);
  batch.writeUInt32BE(crc32c(batch, OFF_ATTRIBUTES, batch.length), OFF_CRC);
}

/**
 * Splits a concatenation of batches (a Kafka `records` field) into its batches, validating each header and
 * CRC. A trailing partial batch is an error here: producers never send one.
 */
export function splitBatches(buf: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let pos = 0;
  while (pos < buf.length) {
    const info = readBatchInfo(buf, pos);
    if (!verifyBatchCrc(buf, pos, info.size)) throw new FlowError('CORRUPT_DATA', 'record batch CRC mismatch');
    out.push(buf.subarray(pos, pos + info.size));
    pos += info.size;
  }
  return out;
}

// ---- varints (zig-zag, as Kafka records use) ----

function varintSize(v: number): number {
  let z = v >= 0 ? v * 2 : -v * 2 - 1;
  let n = 1;
  while (z >= 0x80) {
    z = Math.floor(z / 128);
    n++;
  }
  return n;
}

function writeVarint(buf: Buffer, pos: number, v: number): number {
  let z = v >= 0 ? v * 2 : -v * 2 - 1;
  while (z >= 0x80) {
    buf[pos++] = (z & 0x7f) | 0x80;
    z = Math.floor(z / 128);
  }
  buf[pos++] = z;
  return pos;
}

class Reader {
  pos: number;
  constructor(
    readonly buf: Buffer,
    pos: number,
    readonly end: number,
  ) {
    this.pos = pos;
  }
  varint(): number {
    let z = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new FlowError('CORRUPT_DATA', 'record truncated');
      const b = this.buf[this.pos++];
      z += (b & 0x7f) * mul;
      if ((b & 0x80) === 0) return z % 2 === 0 ? z / 2 : -(z + 1) / 2;
      mul *= 128;
    }
    throw new FlowError('CORRUPT_DATA', 'varint too long');
  }
  bytes(len: number): Buffer | null {
    if (len < 0) return null;
    if (this.pos + len > this.end) throw new FlowError('CORRUPT_DATA', 'record truncated');
    const b = this.buf.subarray(this.pos, this.pos + len);
    this.pos += len;
    return b;
  }
}

export interface RecordInput {
  key: Buffer | null;
  value: Buffer | null;
  headers: Header[];
  timestamp: number;
}

/** Encodes records into one uncompressed batch (base offset 0, no producer id). */
export function encodeBatch(records: RecordInput[], compression: Compression = Compression.None): Buffer {
  if (records.length === 0) throw new FlowError('INVALID_ARGUMENT', 'a batch needs at least one record');
  let baseTs = records[0].timestamp;
  let maxTs = baseTs;
  for (const r of records) {
    if (r.timestamp < baseTs) baseTs = r.timestamp;
    if (r.timestamp > maxTs) maxTs = r.timestamp;
  }
  // Size pass, so the batch is written into one allocation.
  const bodySizes = new Array<number>(records.length);
  const headerKeys = new Array<Buffer[]>(records.length);
  let recordsSize = 0;
  for (let i = 0; i < records.length; i++) {
    const r = records[i];
    const keys = r.headers.map((h) => Buffer.from(h.key));
    headerKeys[i] = keys;
    let s = 1 + varintSize(r.timestamp - baseTs) + varintSize(i);
    s += r.key ? varintSize(r.key.length) + r.key.length : 1;
    s += r.value ? varintSize(r.value.length) + r.value.length : 1;
    s += varintSize(r.headers.length);
    for (let h = 0; h < r.headers.length; h++) {
      const v = r.headers[h].value;
      s += varintSize(keys[h].length) + keys[h].length + (v ? varintSize(v.length) + v.length : 1);
    }
    bodySizes[i] = s;
    recordsSize += varintSize(s) + s;
  }
  let body = Buffer.allocUnsafe(recordsSize);
  let p = 0;
  for (let i = 0; i < records.length; i++) {
    const r = records[i];
    p = writeVarint(body, p, bodySizes[i]);
    body[p++] = 0; // record attributes: unused
    p = writeVarint(body, p, r.timestamp - baseTs);
    p = writeVarint(body, p, i);
    if (r.key) {
      p = writeVarint(body, p, r.key.length);
      p += r.key.copy(body, p);
    } else p = writeVarint(body, p, -1);
    if (r.value) {
      p = writeVarint(body, p, r.value.length);
      p += r.value.copy(body, p);
    } else p = writeVarint(body, p, -1);
    p = writeVarint(body, p, r.headers.length);
    for (let h = 0; h < r.headers.length; h++) {
      const k = headerKeys[i][h];
      p = writeVarint(body, p, k.length);
      p += k.copy(body, p);
      const v = r.headers[h].value;
      if (v) {
        p = writeVarint(body, p, v.length);
        p += v.copy(body, p);
      } else p = writeVarint(body, p, -1);
    }
  }
  if (compression === Compression.Gzip) body = gzipSync(body);
  else if (compression !== Compression.None) {
    throw new FlowError('INVALID_ARGUMENT', `compression ${compression} is not supported for encoding`);
  }
  const out = Buffer.allocUnsafe(BATCH_HEADER_SIZE + body.length);
  out.writeBigInt64BE(0n, 0);
  out.writeInt32BE(out.length - BATCH_LOG_OVERHEAD, OFF_BATCH_LENGTH);
  out.writeInt32BE(-1, 12); // partition leader epoch: unknown
  out.writeInt8(2, OFF_MAGIC);
  out.writeInt16BE(compression, OFF_ATTRIBUTES); // CreateTime, not transactional
  out.writeInt32BE(records.length - 1, OFF_LAST_OFFSET_DELTA);
  out.writeBigInt64BE(BigInt(baseTs), OFF_BASE_TS);
  out.writeBigInt64BE(BigInt(maxTs), OFF_MAX_TS);
  out.writeBigInt64BE(-1n, OFF_PRODUCER_ID);
  out.writeInt16BE(-1, OFF_PRODUCER_EPOCH);
  out.writeInt32BE(-1, OFF_BASE_SEQUENCE);
  out.writeInt32BE(records.length, OFF_RECORD_COUNT);
  body.copy(out, BATCH_HEADER_SIZE);
  out.writeUInt32BE(crc32c(out, OFF_ATTRIBUTES, out.length), OFF_CRC);
  return out;
}

/** Decompressors by codec id: every codec Kafka defines (KIP-110), for every protocol that reads a batch. */
const decompressors = new Map<number, (b: Buffer) => Buffer>([
  // zlib stops (RangeError) once the output would pass the bound, instead of inflating a bomb to its end.
  [Compression.Gzip, (b) => gunzipSync(b, { maxOutputLength: MAX_DECOMPRESSED_BYTES })],
  [Compression.Snappy, snappyDecompress],
  [Compression.Lz4, lz4Decompress],
  [Compression.Zstd, zstdDecompressBuffer],
]);

export function isCompressionSupported(codec: number): boolean {
  return codec === Compression.None || decompressors.has(codec);
}

/** Attribute bit 4: the batch belongs to a transaction (KIP-98). */
export const ATTR_TRANSACTIONAL = 0x10;
/** Attribute bit 5: a control batch (a transaction's commit or abort marker), written by the broker only. */
export const ATTR_CONTROL = 0x20;

/**
 * A transaction marker (KIP-98): a control batch of one record whose key is version 0 and the control type (0
 * abort, 1 commit) and whose value is version 0 and the coordinator epoch, carrying the producer's id and epoch
 * with no sequence, as Kafka's transaction markers are written.
 */
export function encodeControlBatch(producerId: number, producerEpoch: number, commit: boolean, coordinatorEpoch: number, timestamp: number): Buffer {
  const key = Buffer.alloc(4);
  key.writeInt16BE(0, 0);
  key.writeInt16BE(commit ? 1 : 0, 2);
  const value = Buffer.alloc(6);
  value.writeInt16BE(0, 0);
  value.writeInt32BE(coordinatorEpoch, 2);
  const out = encodeBatch([{ key, value, headers: [], timestamp }]);
  out.writeInt16BE(ATTR_CONTROL | ATTR_TRANSACTIONAL, OFF_ATTRIBUTES);
  out.writeBigInt64BE(BigInt(producerId), OFF_PRODUCER_ID);
  out.writeInt16BE(producerEpoch, OFF_PRODUCER_EPOCH);
  out.writeUInt32BE(crc32c(out, OFF_ATTRIBUTES, out.length), OFF_CRC);
  return out;
}

/**
 * Decodes every record of one batch (decompressing when needed). A control batch (a transaction marker) holds no
 * message and decodes to no record, so that no protocol delivers a marker as data.
 */
export function decodeBatch(batch: Buffer, pos = 0): Record[] {
  const info = readBatchInfo(batch, pos);
  if ((info.attributes & ATTR_CONTROL) !== 0) return [];
  let body = batch.subarray(pos + BATCH_HEADER_SIZE, pos + info.size);
  if (info.compression !== Compression.None) {
    const fn = decompressors.get(info.compression);
    if (!fn) throw new FlowError('CORRUPT_DATA', `unsupported compression codec ${info.compression}`);
    try {
      body = fn(body);
    } catch (cause) {
      throw new FlowError('CORRUPT_DATA', 'record batch does not decompress', { cause });
    }
  }
  const r = new Reader(body, 0, body.length);
  const out: Record[] = [];
  for (let i = 0; i < info.recordCount; i++) {
    const len = r.varint();
    const end = r.pos + len;
    if (len < 0 || end > body.length) throw new FlowError('CORRUPT_DATA', 'record length does not fit');
    const rr = new Reader(body, r.pos, end);
    rr.pos++; // attributes
    const tsDelta = rr.varint();
    const offDelta = rr.varint();
    const key = rr.bytes(rr.varint());
    const value = rr.bytes(rr.varint());
    const hc = rr.varint();
    if (hc < 0 || hc > len) throw new FlowError('CORRUPT_DATA', 'bad header count');
    const headers: Header[] = [];
    for (let h = 0; h < hc; h++) {
      const k = rr.bytes(rr.varint());
      if (!k) throw new FlowError('CORRUPT_DATA', 'null header key');
      headers.push({ key: k.toString('utf8'), value: rr.bytes(rr.varint()) });
    }
    r.pos = end;
    // A batch stamped with the log's append time gives every record that time (Kafka's DefaultRecordBatch).
    const timestamp = (info.attributes & ATTR_LOG_APPEND_TIME) !== 0 ? info.maxTimestamp : info.baseTimestamp + tsDelta;
    out.push({ offset: info.baseOffset + offDelta, timestamp, key, value, headers });
  }
  return out;
}

/**
 * A record of a stream as a normalized message; `ownTopic` is the stream's own unified topic. Reserved
 * `flowmq.*` headers become the message's properties (properties.ts says which, and why `flowmq.user-id` does
 * not); the other headers stay headers. A record without reserved headers costs one prefix test per header.
 */
export function recordToMessage(rec: Record, ownTopic: string): Message {
  const msg: Message = {
    topic: ownTopic,
    payload: rec.value ?? Buffer.alloc(0),
    key: rec.key,
    headers: rec.headers,
    timestamp: rec.timestamp,
    qos: 1,
    retain: false,
  };
  const hs = rec.headers;
  for (let i = 0; i < hs.length; i++) {
    if (hs[i].key.startsWith(RESERVED_HEADER_PREFIX)) {
      readReserved(msg, hs, i);
      break;
    }
  }
  return msg;
}

function readReserved(msg: Message, hs: Header[], first: number): void {
  const plain = hs.slice(0, first);
  let topicSeen = false;
  for (let i = first; i < hs.length; i++) {
    const h = hs[i];
    if (h.key.startsWith(RESERVED_HEADER_PREFIX) && readPropertyHeader(msg, h, topicSeen)) {
      if (h.key === TOPIC_HEADER) topicSeen = true;
    } else plain.push(h);
  }
  msg.headers = plain;
  // A payload that claims to be UTF-8 text must be (an MQTT v5 receiver may refuse it otherwise [MQTT-3.3.2-4]); an
  // MQTT publisher's claim was checked when it published, a Kafka producer's is checked here.
  if (msg.payloadFormat === 1 && !isUtf8(msg.payload)) delete msg.payloadFormat;
}

function hasPropertyHeader(hs: Header[]): boolean {
  for (let i = 0; i < hs.length; i++) if (isPropertyHeader(hs[i].key)) return true;
  return false;
}

/**
 * A normalized message as a record of a stream whose own topic is `ownTopic`: its topic (when not the stream's own)
 * and its set properties become reserved headers ahead of its own headers. A header of the message that has a
 * reserved name the broker interprets is not copied: it would be read back as a property it is not (an MQTT user
 * property named `flowmq.topic` must not redirect the record). A message without properties keeps its headers
 * array as it is.
 */
export function messageToRecord(msg: Message, ownTopic: string): RecordInput {
  let headers = msg.headers;
  if (msg.topic !== ownTopic || hasHeaderProperties(msg) || hasPropertyHeader(headers)) {
    headers = [];
    if (msg.topic !== ownTopic) headers.push({ key: TOPIC_HEADER, value: Buffer.from(msg.topic) });
    writePropertyHeaders(msg, headers);
    for (const h of msg.headers) if (!isPropertyHeader(h.key)) headers.push(h);
  }
  return { key: msg.key, value: msg.payload, headers, timestamp: msg.timestamp };
}

/**
 * The batch with only the records `keep` accepts (the log's cleaner, for compacted streams): the same buffer when
 * it keeps them all, null when it keeps none, else a new batch with the same base offset, last offset delta,
 * timestamps, producer fields and attributes (uncompressed: the compression bits cleared), whose records are the
 * kept ones byte for byte, so their offset deltas (and offsets) stay: gaps are normal in a compacted Kafka log.
 */
export function filterBatch(batch: Buffer, keep: (rec: Record) => boolean): Buffer | null {
  const info = readBatchInfo(batch);
  let body = batch.subarray(BATCH_HEADER_SIZE, info.size);
  if (info.compression !== Compression.None) {
    const fn = decompressors.get(info.compression);
    if (!fn) throw new FlowError('CORRUPT_DATA', `unsupported compression codec ${info.compression}`);
    body = fn(body);
  }
  const records = decodeBatch(batch);
  const spans: Array<[number, number]> = [];
  const r = new Reader(body, 0, body.length);
  for (let i = 0; i < info.recordCount; i++) {
    const start = r.pos;
    const len = r.varint();
    r.pos += len;
    if (keep(records[i])) spans.push([start, r.pos]);
  }
  if (spans.length === info.recordCount) return batch;
  if (spans.length === 0) return null;
  let size = BATCH_HEADER_SIZE;
  for (const [s, e] of spans) size += e - s;
  const out = Buffer.allocUnsafe(size);
  batch.copy(out, 0, 0, BATCH_HEADER_SIZE);
  let p = BATCH_HEADER_SIZE;
  for (const [s, e] of spans) p += body.copy(out, p, s, e);
  out.writeInt32BE(size - BATCH_LOG_OVERHEAD, OFF_BATCH_LENGTH);
  out.writeInt16BE(info.attributes & ~0x07, OFF_ATTRIBUTES);
  out.writeInt32BE(spans.length, OFF_RECORD_COUNT);
  out.writeUInt32BE(crc32c(out, OFF_ATTRIBUTES, out.length), OFF_CRC);
  return out;
}
