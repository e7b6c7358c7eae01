/**
 * Durable client sessions and retained messages, as the core sees them: storage interfaces (implemented by
 * the metastore backends, and in memory here for tests and storage-less brokers) and a compact binary form
 * for messages kept in them.
 *
 * A session is keyed by client id, not by connection or broker: any broker that can reach the store can resume
 * it, so the in-memory state of a connection is only a cache of what is stored here. The core does not
 * interpret the adapter's session `state` nor its queue entries (they carry protocol details such as packet
 * identifiers); it only keeps them, bounded.
 */
import { FlowError } from './errors.js';
import type { Header, Message, QoS } from './message.js';
import { encodeDeaths, parseDeaths } from './properties.js';

export interface SessionRecord {
  clientId: string;
  /** Owning adapter, e.g. "mqtt". */
  protocol: string;
  /** Adapter state as JSON text (subscriptions, pending will, inbound QoS 2 ids...). */
  state: string;
  /** When the session ends if no client resumes it, ms since epoch; null while a client is connected. */
  expiresAt: number | null;
  updatedAt: number;
  /**
   * The publish keys the session's queue took (QueueChanges.marks, merged): the highest sequence per producer.
   * Read back by getSession / listSessions; putSession ignores it.
   */
  marks?: Record<string, number>;
}

export interface QueuedEntry {
  /** Increasing per session; the queue is read in this order. */
  seq: number;
  data: Buffer;
}

/**
 * Fencing (cluster mode): a write given `fence`, the epoch under which the writing broker owns the session (its
 * 'session' owner row, src/cluster), is refused with FlowError FENCED, with nothing written, unless the owner row
 * still holds that epoch: a broker that lost the session (another took it over, or its lease expired) can never
 * write to it again. Only a store shared by brokers checks it (PostgreSQL, in the same statement as the write;
 * MemorySessionStore when given a `fence` check for tests); the embedded SQLite store, never clustered, ignores it.
 *
 * Order: calls naming the same client id take effect in the order they were issued, awaited or not, and a read
 * sees every write issued before it (the metastore's per-key order; see src/storage/metastore/types.ts).
 *
 * Durability: a resolved write has been committed and survives a crash of the broker process. Queue writes
 * (ackQueue, updateQueue) may resolve before their commit is also safe from a power loss, which a
 * backend then brings about promptly (the embedded one syncs its journal at once, without making the caller
 * wait); the other writes resolve only once durable.
 */
export interface SessionStore {
  getSession(clientId: string): Promise<SessionRecord | null>;
  /** Creates or replaces the record; the queue is left as it is. */
  putSession(rec: SessionRecord, fence?: number): Promise<void>;
  /** Removes the record and its queue; no error when absent. */
  deleteSession(clientId: string, fence?: number): Promise<void>;
  listSessions(protocol: string): Promise<SessionRecord[]>;
  /** Up to `limit` entries, oldest first. */
  readQueue(clientId: string, limit: number): Promise<QueuedEntry[]>;
  /** Removes every entry with seq <= `upTo`. */
  ackQueue(clientId: string, upTo: number, fence?: number): Promise<void>;
  /**
   * Applies one batch of changes to a session's queue atomically, in this order: entries rewritten in place
   * (`replace`, same seq), entries removed by seq (`remove`), then `append` (oldest first); when the queue then
   * holds more than `maxLength` entries the oldest are removed (drop-oldest policy). Seqs that are not in the queue
   * are ignored. Returns the seqs given to the appended entries, in order, and how many entries the bound removed.
   * Seqs only increase for a client id (a backend keeps a counter; never MAX(seq)+1, which two concurrent writers
   * can both read) until deleteSession, after which they may start again; so a caller may keep them to rewrite or
   * remove its own entries later: this is how a protocol adapter keeps the in-flight messages of a connected
   * session in the store (write-through).
   */
  updateQueue(clientId: string, changes: QueueChanges, maxLength: number, fence?: number): Promise<{ seqs: number[]; dropped: number }>;
}

export interface QueueChanges {
  replace?: QueuedEntry[];
  remove?: number[];
  append?: Buffer[];
  /**
   * Publish keys of the appended messages (Message.pubKey: the highest sequence per producer), merged into the
   * session's marks in the same transaction as the append (a later value replaces an earlier one), kept until
   * deleteSession, and read back with the session record (SessionRecord.marks).
   */
  marks?: Record<string, number>;
}

export interface RetainedEntry {
  topic: string;
  /** The message in `encodeStoredMessage` form. */
  data: Buffer;
}

export interface RetainedStore {
  putRetained(topic: string, data: Buffer): Promise<void>;
  /** No error when absent. */
  deleteRetained(topic: string): Promise<void>;
  listRetained(): Promise<RetainedEntry[]>;
}

// ------------------------------------------------------------------ in-memory backends

/** Sessions in process memory: for tests and for a broker started without a metastore. */
export class MemorySessionStore implements SessionStore {
  private readonly records = new Map<string, SessionRecord>();
  private readonly queues = new Map<string, QueuedEntry[]>();
  private readonly marks = new Map<string, Record<string, number>>();
  private seq = 0;

  /**
   * `fence`: how a write given an epoch is checked (throws FENCED), e.g. MemoryClusterStore.check for the
   * 'session' kind; without it epochs are ignored.
   */
  constructor(private readonly opts: { fence?: (clientId: string, epoch: number) => void } = {}) {}

  private fenced(clientId: string, epoch: number | undefined): void {
    if (epoch !== undefined && this.opts.fence) this.opts.fence(clientId, epoch);
  }

  async getSession(clientId: string): Promise<SessionRecord | null> {
    const r = this.records.get(clientId);
    return r ? this.withMarks(r) : null;
  }
  private withMarks(r: SessionRecord): SessionRecord {
    const m = this.marks.get(r.clientId);
    const { marks: _, ...rec } = r;
    return m === undefined ? rec : { ...rec, marks: { ...m } };
  }
  async putSession(rec: SessionRecord, fence?: number): Promise<void> {
    this.fenced(rec.clientId, fence);
    this.records.set(rec.clientId, { ...rec });
  }
  async deleteSession(clientId: string, fence?: number): Promise<void> {
    this.fenced(clientId, fence);
    this.records.delete(clientId);
    this.queues.delete(clientId);
    this.marks.delete(clientId);
  }
  async listSessions(protocol: string): Promise<SessionRecord[]> {
    return [...this.records.values()].filter((r) => r.protocol === protocol).map((r) => this.withMarks(r));
  }
  async readQueue(clientId: string, limit: number): Promise<QueuedEntry[]> {
    return (this.queues.get(clientId) ?? []).slice(0, limit);
  }
  async ackQueue(clientId: string, upTo: number, fence?: number): Promise<void> {
    this.fenced(clientId, fence);
    const q = this.queues.get(clientId);
    if (!q) return;
    let k = 0;
    while (k < q.length && q[k].seq <= upTo) k++;
    q.splice(0, k);
  }
  async updateQueue(clientId: string, changes: QueueChanges, maxLength: number, fence?: number): Promise<{ seqs: number[]; dropped: number }> {
    checkMax(maxLength);
    this.fenced(clientId, fence);
    let q = this.queues.get(clientId);
    if (!q) this.queues.set(clientId, (q = []));
    if (changes.marks !== undefined) this.marks.set(clientId, { ...this.marks.get(clientId), ...changes.marks });
    for (const r of changes.replace ?? []) {
      const e = q.find((x) => x.seq === r.seq);
      if (e) e.data = Buffer.from(r.data);
    }
    if (changes.remove !== undefined && changes.remove.length > 0) {
      const gone = new Set(changes.remove);
      const kept = q.filter((x) => !gone.has(x.seq));
      q.length = 0;
      q.push(...kept);
    }
    const seqs: number[] = [];
    for (const data of changes.append ?? []) {
      seqs.push(++this.seq);
      q.push({ seq: this.seq, data: Buffer.from(data) });
    }
    const over = q.length - maxLength;
    if (over > 0) q.splice(0, over);
    return { seqs, dropped: over > 0 ? over : 0 };
  }
}

export class MemoryRetainedStore implements RetainedStore {
  private readonly map = new Map<string, Buffer>();
  async putRetained(topic: string, data: Buffer): Promise<void> {
    this.map.set(topic, Buffer.from(data));
  }
  async deleteRetained(topic: string): Promise<void> {
    this.map.delete(topic);
  }
  async listRetained(): Promise<RetainedEntry[]> {
    return [...this.map].map(([topic, data]) => ({ topic, data }));
  }
}

function checkMax(maxLength: number): void {
  if (!Number.isInteger(maxLength) || maxLength < 1) throw new FlowError('INVALID_ARGUMENT', `queue limit must be a positive integer, got ${maxLength}`);
}

// ------------------------------------------------------------------ stored message form

/**
 * Version 2 layout, big-endian (version 1 is the same without flags3 and the fields it flags):
 *   u8 version | u8 flags (qos:2, retain:1, key:1, expires:1, contentType:1, responseTopic:1, correlation:1)
 *   | u8 flags2 (payloadFormat:1, origin:1, messageId:1, priority:1, persistent:1, persistentValue:1,
 *   contentEncoding:1, type:1) | [v2: u8 flags3 (appId:1, userId:1, amqpHeaders:1, exchange:1, routingKey:1,
 *   deaths:1, natsHeaders:1, amqpExpiration:1)] | f64 timestamp | [f64 expiresAt] | str topic | bytes payload | [bytes key] | [str contentType]
 *   | [str responseTopic] | [bytes correlationData] | [u8 payloadFormat] | [str origin] | [v2: str messageId]
 *   | [u8 priority] | [str contentEncoding] | [str type] | [str appId] | [str userId] | [bytes amqpHeaders]
 *   | [str exchange] | [str routingKey] | [str deaths (JSON, properties.ts)] | [bytes natsHeaders] | [str amqpExpiration]] | u32 headerCount
 *   | (str key, i32 len (-1 = null), value)*
 * where str = u32 length + UTF-8 and bytes = u32 length + bytes; payloadFormat and priority keep their low 8 bits.
 * A message with none of the version-2 fields is written as version 1, byte for byte as before: the plain path
 * costs nothing more, and what it stored stays readable by the release before version 2.
 */
export function encodeStoredMessage(m: Message, carryKey = false): Buffer {
  const parts: Buffer[] = [];
  let flags = m.qos & 3;
  if (m.retain) flags |= 4;
  if (m.key !== null) flags |= 8;
  if (m.expiresAt !== undefined) flags |= 16;
  if (m.contentType !== undefined) flags |= 32;
  if (m.responseTopic !== undefined) flags |= 64;
  if (m.correlationData !== undefined) flags |= 128;
  let flags2 = 0;
  if (m.payloadFormat !== undefined) flags2 |= 1;
  if (m.origin !== undefined) flags2 |= 2;
  if (m.messageId !== undefined) flags2 |= 4;
  if (m.priority !== undefined) flags2 |= 8;
  if (m.persistent !== undefined) flags2 |= m.persistent ? 16 | 32 : 16;
  if (m.contentEncoding !== undefined) flags2 |= 64;
  if (m.type !== undefined) flags2 |= 128;
  let flags3 = 0;
  if (m.appId !== undefined) flags3 |= 1;
  if (m.userId !== undefined) flags3 |= 2;
  if (m.amqpHeaders !== undefined) flags3 |= 4;
  if (m.exchange !== undefined) flags3 |= 8;
  if (m.routingKey !== undefined) flags3 |= 16;
  if (m.deaths !== undefined) flags3 |= 32;
  if (m.natsHeaders !== undefined) flags3 |= 64;
  if (m.amqpExpiration !== undefined) flags3 |= 128;
  const v3 = carryKey && m.pubKey !== undefined;
  const v2 = v3 || flags3 !== 0 || (flags2 & ~3) !== 0;
  const head = Buffer.allocUnsafe(v2 ? 12 : 11);
  head[0] = v3 ? 3 : v2 ? 2 : 1;
  head[1] = flags;
  head[2] = flags2;
  if (v2) head[3] = flags3;
  head.writeDoubleBE(m.timestamp, v2 ? 4 : 3);
  parts.push(head);
  if (m.expiresAt !== undefined) {
    const b = Buffer.allocUnsafe(8);
    b.writeDoubleBE(m.expiresAt, 0);
    parts.push(b);
  }
  const str = (s: string) => bytes(Buffer.from(s, 'utf8'));
  const bytes = (b: Buffer) => {
    const l = Buffer.allocUnsafe(4);
    l.writeUInt32BE(b.length, 0);
    parts.push(l, b);
  };
  str(m.topic);
  bytes(m.payload);
  if (m.key !== null) bytes(m.key);
  if (m.contentType !== undefined) str(m.contentType);
  if (m.responseTopic !== undefined) str(m.responseTopic);
  if (m.correlationData !== undefined) bytes(m.correlationData);
  if (m.payloadFormat !== undefined) parts.push(Buffer.from([m.payloadFormat & 0xff]));
  if (m.origin !== undefined) str(m.origin);
  if (v2) {
    if (m.messageId !== undefined) str(m.messageId);
    if (m.priority !== undefined) parts.push(Buffer.from([m.priority & 0xff]));
    if (m.contentEncoding !== undefined) str(m.contentEncoding);
    if (m.type !== undefined) str(m.type);
    if (m.appId !== undefined) str(m.appId);
    if (m.userId !== undefined) str(m.userId);
    if (m.amqpHeaders !== undefined) bytes(m.amqpHeaders);
    if (m.exchange !== undefined) str(m.exchange);
    if (m.routingKey !== undefined) str(m.routingKey);
    if (m.deaths !== undefined) str(encodeDeaths(m.deaths));
    if (m.natsHeaders !== undefined) bytes(m.natsHeaders);
    if (m.amqpExpiration !== undefined) str(m.amqpExpiration);
  }
  if (v3) {
    // Version 3: version 2 and the QoS 2 publish key (f64 producer, u32 sequence); cluster forwarding only.
    const k = Buffer.allocUnsafe(12);
    k.writeDoubleBE(m.pubKey!.producer, 0);
    k.writeUInt32BE(m.pubKey!.seq >>> 0, 8);
    parts.push(k);
  }
  const hc = Buffer.allocUnsafe(4);
  hc.writeUInt32BE(m.headers.length, 0);
  parts.push(hc);
  for (const h of m.headers) {
    str(h.key);
    const l = Buffer.allocUnsafe(4);
    l.writeInt32BE(h.value === null ? -1 : h.value.length, 0);
    parts.push(l);
    if (h.value !== null) parts.push(h.value);
  }
  return Buffer.concat(parts);
}

/** Inverse of `encodeStoredMessage` (versions 1 to 3); throws FlowError('CORRUPT_DATA') on anything it did not write. */
export function decodeStoredMessage(buf: Buffer): Message {
  let pos = 0;
  const need = (n: number) => {
    if (pos + n > buf.length) throw new FlowError('CORRUPT_DATA', 'stored message is truncated');
  };
  const u32 = () => {
    need(4);
    const v = buf.readUInt32BE(pos);
    pos += 4;
    return v;
  };
  const u8 = () => {
    need(1);
    return buf[pos++];
  };
  const bytes = () => {
    const n = u32();
    need(n);
    const b = Buffer.from(buf.subarray(pos, pos + n));
    pos += n;
    return b;
  };
  const str = () => bytes().toString('utf8');
  need(11);
  const version = buf[0];
  if (version !== 1 && version !== 2 && version !== 3) throw new FlowError('CORRUPT_DATA', `stored message version ${version} is unknown`);
  const flags = buf[1];
  const flags2 = buf[2];
  // Version 1 has no flags3: bits it did not define must be clear in what claims to be version 1.
  if (version === 1 && (flags2 & ~3) !== 0) throw new FlowError('CORRUPT_DATA', 'stored message version 1 has unknown flags');
  pos = 3;
  const flags3 = version >= 2 ? u8() : 0;
  need(8);
  const timestamp = buf.readDoubleBE(pos);
  pos += 8;
  let expiresAt: number | undefined;
  if (flags & 16) {
    need(8);
    expiresAt = buf.readDoubleBE(pos);
    pos += 8;
  }
  const topic = str();
  const payload = bytes();
  const key = flags & 8 ? bytes() : null;
  // Same shape as makeMessage (origin always present, possibly undefined).
  const m: Message = { topic, payload, key, headers: [], timestamp, qos: (flags & 3) as QoS, retain: (flags & 4) !== 0, origin: undefined };
  if (expiresAt !== undefined) m.expiresAt = expiresAt;
  if (flags & 32) m.contentType = str();
  if (flags & 64) m.responseTopic = str();
  if (flags & 128) m.correlationData = bytes();
  if (flags2 & 1) m.payloadFormat = u8();
  if (flags2 & 2) m.origin = str();
  if (flags2 & 4) m.messageId = str();
  if (flags2 & 8) m.priority = u8();
  if (flags2 & 16) m.persistent = (flags2 & 32) !== 0;
  if (flags2 & 64) m.contentEncoding = str();
  if (flags2 & 128) m.type = str();
  if (flags3 & 1) m.appId = str();
  if (flags3 & 2) m.userId = str();
  if (flags3 & 4) m.amqpHeaders = bytes();
  if (flags3 & 8) m.exchange = str();
  if (flags3 & 16) m.routingKey = str();
  if (flags3 & 32) {
    const deaths = parseDeaths(str());
    if (deaths === null) throw new FlowError('CORRUPT_DATA', 'stored message has a malformed dead-letter history');
    m.deaths = deaths;
  }
  if (flags3 & 64) m.natsHeaders = bytes();
  if (flags3 & 128) m.amqpExpiration = str();
  if (version === 3) {
    need(12);
    m.pubKey = { producer: buf.readDoubleBE(pos), seq: buf.readUInt32BE(pos + 8) };
    pos += 12;
  }
  const hc = u32();
  const headers: Header[] = [];
  for (let i = 0; i < hc; i++) {
    const k = str();
    need(4);
    const len = buf.readInt32BE(pos);
    pos += 4;
    if (len < -1) throw new FlowError('CORRUPT_DATA', 'stored message header length is negative');
    let value: Buffer | null = null;
    if (len >= 0) {
      need(len);
      value = Buffer.from(buf.subarray(pos, pos + len));
      pos += len;
    }
    headers.push({ key: k, value });
  }
  m.headers = headers;
  if (pos !== buf.length) throw new FlowError('CORRUPT_DATA', 'stored message has trailing bytes');
  return m;
}
