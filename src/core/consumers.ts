/**
 * Durable consumer state of JetStream-style consumers (the NATS adapter's JetStream API over FlowMQ streams): a
 * consumer's configuration and its position, kept in the metastore so a consumer survives a broker restart and,
 * in cluster mode, moves to another broker with its stream.
 *
 * Position model (JetStream's): stream sequences are offsets + 1 of a single-partition stream. Every sequence up to
 * `ackFloor` is acknowledged (or terminated); `acked` lists the sequences above the floor acknowledged out of
 * order; `deliveredSeq` is the highest stream sequence handed out. After a restart everything delivered but not
 * acknowledged is redelivered (at least once).
 *
 * Order: calls naming the same (stream, name) take effect in the order they were issued, awaited or not (as every
 * metastore role, src/storage/metastore/types.ts): the JetStream service writes a consumer's record without
 * waiting for the previous write. deleteConsumers and listConsumers of a stream come after every call issued before
 * them on that stream's consumers.
 *
 * Every backend refuses a record it could not give back as written with INVALID_ARGUMENT (checkConsumerRecord),
 * writing nothing: names and config not strings (or holding NUL), counters not safe integers >= 0, `acked` not
 * strictly ascending or not above `ackFloor`.
 */
import { FlowError } from './errors.js';

export interface ConsumerRecord {
  /** The stream's name. */
  stream: string;
  /** The consumer's name (durable name, or the generated name of an ephemeral consumer). */
  name: string;
  /** The consumer's configuration as JSON text (JetStream ConsumerConfig); opaque to storage. */
  config: string;
  /** Creation time, ms since epoch. */
  createdAt: number;
  /** Highest stream sequence delivered (0: none yet). */
  deliveredSeq: number;
  /** Consumer sequence of the last delivery (JetStream counts deliveries, redeliveries included). */
  deliveredConsumerSeq: number;
  /** Every stream sequence <= ackFloor is acknowledged. */
  ackFloor: number;
  /** Stream sequences above ackFloor acknowledged out of order, ascending. */
  acked: number[];
}

export interface ConsumerStateStore {
  /**
   * Creates or replaces the consumer's whole record. `epoch` (cluster mode only): the epoch under which this broker
   * owns the consumer (owner row 'consumer' "<stream>/<name>"); the write is refused with FENCED, writing nothing,
   * unless the owner row still holds it, so a broker that lost the consumer can never move it back. Backends that
   * cannot run in a cluster (SQLite, memory) ignore it: nothing passes one outside cluster mode.
   */
  putConsumer(rec: ConsumerRecord, epoch?: number): Promise<void>;
  getConsumer(stream: string, name: string): Promise<ConsumerRecord | null>;
  /** Every consumer of the stream, by name; every consumer of every stream when `stream` is omitted. */
  listConsumers(stream?: string): Promise<ConsumerRecord[]>;
  /** Deleting a consumer that does not exist is not an error. `epoch`: fenced as putConsumer's. */
  deleteConsumer(stream: string, name: string, epoch?: number): Promise<void>;
  /** Deletes every consumer of the stream (the stream was deleted). */
  deleteConsumers(stream: string): Promise<void>;
}

/**
 * What every backend checks before it writes a record (see the top of this file). The same check everywhere, so a
 * record the JetStream service gets wrong fails the same way on the memory store of a unit test as on SQLite.
 */
export function checkConsumerRecord(rec: ConsumerRecord): void {
  const bad = (why: string): never => {
    throw new FlowError('INVALID_ARGUMENT', `consumer record ${String(rec?.stream)}/${String(rec?.name)}: ${why}`);
  };
  if (typeof rec.stream !== 'string' || rec.stream.length === 0) bad('stream must be a non-empty string');
  if (typeof rec.name !== 'string' || rec.name.length === 0) bad('name must be a non-empty string');
  if (typeof rec.config !== 'string') bad('config must be a string (JSON text)');
  // PostgreSQL's text cannot hold NUL (and the memory store's keys join stream and name with it).
  if (rec.stream.includes('\u0000') || rec.name.includes('\u0000') || rec.config.includes('\u0000')) bad('NUL in stream, name or config');
  for (const k of ['createdAt', 'deliveredSeq', 'deliveredConsumerSeq', 'ackFloor'] as const) {
    const n = rec[k];
    if (!Number.isSafeInteger(n) || n < 0) bad(`${k} must be an integer >= 0, got ${String(n)}`);
  }
  if (!Array.isArray(rec.acked)) bad('acked must be an array');
  let prev = rec.ackFloor;
  for (const n of rec.acked) {
    if (!Number.isSafeInteger(n) || n <= prev) bad(`acked must be strictly ascending integers above ackFloor ${rec.ackFloor}, got ${String(n)} after ${prev}`);
    prev = n;
  }
}

/** In process memory: MemoryStore's part, and the reference behaviour of the conformance suite. */
export class MemoryConsumerStore implements ConsumerStateStore {
  private readonly recs = new Map<string, ConsumerRecord>();
  /**
   * The owner check a fenced write makes (PostgreSQL does it in SQL): in-process cluster tests point it at a
   * MemoryClusterStore's check('consumer', "<stream>/<name>", epoch). Null: epochs are ignored.
   */
  fence: ((name: string, epoch: number) => void) | null = null;

  async putConsumer(rec: ConsumerRecord, epoch?: number): Promise<void> {
    checkConsumerRecord(rec);
    if (epoch !== undefined) this.fence?.(`${rec.stream}/${rec.name}`, epoch);
    this.recs.set(key(rec.stream, rec.name), { ...rec, acked: rec.acked.slice() });
  }
  async getConsumer(stream: string, name: string): Promise<ConsumerRecord | null> {
    const r = this.recs.get(key(stream, name));
    return r ? { ...r, acked: r.acked.slice() } : null;
  }
  async listConsumers(stream?: string): Promise<ConsumerRecord[]> {
    const out: ConsumerRecord[] = [];
    for (const r of this.recs.values()) if (stream === undefined || r.stream === stream) out.push({ ...r, acked: r.acked.slice() });
    return out.sort((a, b) => (a.stream < b.stream ? -1 : a.stream > b.stream ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }
  async deleteConsumer(stream: string, name: string, epoch?: number): Promise<void> {
    if (epoch !== undefined) this.fence?.(`${stream}/${name}`, epoch);
    this.recs.delete(key(stream, name));
  }
  async deleteConsumers(stream: string): Promise<void> {
    for (const [k, r] of this.recs) if (r.stream === stream) this.recs.delete(k);
  }
}

function key(stream: string, name: string): string {
  return `${stream}\u0000${name}`;
}
