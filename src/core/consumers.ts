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
 * writing nothing: names and config not strings, counters not safe integers >= 0, `acked` not strictly ascending
 * or not above `ackFloor`.
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
  /** Creates or replaces the consumer's whole record. */
  putConsumer(rec: ConsumerRecord): Promise<void>;
  getConsumer(stream: string, name: string): Promise<ConsumerRecord | null>;
  /** Every consumer of the stream, by name; every consumer of every stream when `stream` is omitted. */
  listConsumers(stream?: string): Promise<ConsumerRecord[]>;
  /** Deleting a consumer that does not exist is not an error. */
  deleteConsumer(stream: string, name: string): Promise<void>;
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

  async putConsumer(rec: ConsumerRecord): Promise<void> {
    checkConsumerRecord(rec);
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
  async deleteConsumer(stream: string, name: string): Promise<void> {
    this.recs.delete(key(stream, name));
  }
  async deleteConsumers(stream: string): Promise<void> {
    for (const [k, r] of this.recs) if (r.stream === stream) this.recs.delete(k);
  }
}

function key(stream: string, name: string): string {
  return `${stream}\u0000${name}`;
}
