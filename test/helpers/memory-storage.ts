/**
 * An in-memory StreamStorage and CoreStore (the core's MemoryStore: definitions, offsets, sessions, retained
 * messages) for unit tests of the core and of protocol handlers, where the storage layer is not what is under
 * test: `new Engine(m, m)`. End-to-end tests use the real broker and its real storage.
 */
import type { AppendResult, PartitionOffsets, ProducerSnapshot, StreamDef, StreamStorage } from '../../src/core/index.js';
import { FlowError, MemoryStore, readBatchInfo, setBaseOffset, decodeBatch } from '../../src/core/index.js';

interface Part {
  batches: Buffer[];
  next: number;
  /** Log start offset moved by deleteRecordsBefore. */
  start?: number;
  waiters: Array<() => void>;
  /** Idempotent producers seen (no sequence checks here: only what DescribeProducers reports). */
  producers?: Map<number, ProducerSnapshot>;
}

export class MemoryStreams extends MemoryStore implements StreamStorage {
  private readonly parts = new Map<string, Part>();

  override async createStream(def: StreamDef): Promise<void> {
    if (this.defs.has(def.name)) throw new FlowError('ALREADY_EXISTS', def.name);
    this.defs.set(def.name, def);
  }
  override async updateStream(def: StreamDef): Promise<void> {
    this.defs.set(def.name, def);
  }
  override async deleteStream(name: string): Promise<void> {
    this.defs.delete(name);
  }
  override async listStreams(): Promise<StreamDef[]> {
    return [...this.defs.values()];
  }
  async openStream(def: StreamDef): Promise<void> {
    for (let p = 0; p < def.partitions; p++) {
      const k = `${def.name}/${p}`;
      if (!this.parts.has(k)) this.parts.set(k, { batches: [], next: 0, waiters: [] });
    }
  }
  async dropStream(name: string): Promise<void> {
    for (const k of [...this.parts.keys()]) if (k.startsWith(`${name}/`)) this.parts.delete(k);
  }
  private part(stream: string, partition: number): Part {
    const p = this.parts.get(`${stream}/${partition}`);
    if (!p) throw new FlowError('NOT_FOUND', `${stream}/${partition}`);
    return p;
  }
  append(stream: string, partition: number, batch: Buffer): AppendResult {
    const p = this.part(stream, partition);
    const info = readBatchInfo(batch);
    const baseOffset = p.next;
    setBaseOffset(batch, baseOffset);
    p.batches.push(Buffer.from(batch)); // the batch is borrowed (StreamStorage.append)
    p.next += info.lastOffsetDelta + 1;
    if (info.producerId >= 0n && info.baseSequence >= 0) {
      const id = Number(info.producerId);
      (p.producers ??= new Map()).set(id, {
        producerId: id,
        producerEpoch: info.producerEpoch,
        lastSequence: info.baseSequence + info.lastOffsetDelta,
        lastTimestamp: info.maxTimestamp,
      });
    }
    const w = p.waiters.splice(0);
    for (const f of w) f();
    return { baseOffset, durable: Promise.resolve() };
  }
  async read(stream: string, partition: number, offset: number, maxBytes: number): Promise<Buffer[]> {
    const out: Buffer[] = [];
    let bytes = 0;
    for (const b of this.part(stream, partition).batches) {
      const info = readBatchInfo(b);
      if (info.baseOffset + info.lastOffsetDelta < offset) continue;
      if (out.length > 0 && bytes + b.length > maxBytes) break;
      out.push(b);
      bytes += b.length;
    }
    return out;
  }
  offsets(stream: string, partition: number): PartitionOffsets {
    const p = this.part(stream, partition);
    return { logStartOffset: p.start ?? 0, highWatermark: p.next };
  }
  /** Bytes of the batches kept (those wholly before the log start offset are gone as far as readers know). */
  partitionSize(stream: string, partition: number): number | null {
    const p = this.parts.get(`${stream}/${partition}`);
    if (!p) return null;
    let size = 0;
    for (const b of p.batches) {
      const info = readBatchInfo(b);
      if (info.baseOffset + info.lastOffsetDelta >= (p.start ?? 0)) size += b.length;
    }
    return size;
  }
  producers(stream: string, partition: number): ProducerSnapshot[] | null {
    const p = this.parts.get(`${stream}/${partition}`);
    return p ? [...(p.producers?.values() ?? [])] : null;
  }
  async deleteRecordsBefore(stream: string, partition: number, offset: number): Promise<number> {
    const p = this.part(stream, partition);
    if (offset < 0 || offset > p.next) throw new FlowError('INVALID_ARGUMENT', `offset ${offset} out of range`);
    p.start = Math.max(p.start ?? 0, offset);
    return p.start;
  }
  async offsetForTimestamp(stream: string, partition: number, ts: number): Promise<number> {
    const p = this.part(stream, partition);
    for (const b of p.batches) for (const r of decodeBatch(b)) if (r.timestamp >= ts) return r.offset;
    return p.next;
  }
  waitFor(stream: string, partition: number, offset: number, timeoutMs: number): Promise<void> {
    const p = this.part(stream, partition);
    if (p.next > offset) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(resolve, timeoutMs);
      p.waiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }
}

/** Memory storage whose durable writes wait until released (or fail), to observe acknowledgement timing. */
export class GatedStreams extends MemoryStreams {
  hold = false;
  fail = false;
  private readonly waiting: Array<{ resolve: () => void; reject: (e: Error) => void }> = [];

  override append(stream: string, partition: number, batch: Buffer): AppendResult {
    const r = super.append(stream, partition, batch);
    if (this.fail) return { baseOffset: r.baseOffset, durable: Promise.reject(new Error('disk on fire')) };
    if (!this.hold) return r;
    const durable = new Promise<void>((resolve, reject) => this.waiting.push({ resolve, reject }));
    return { baseOffset: r.baseOffset, durable };
  }

  get held(): number {
    return this.waiting.length;
  }

  release(): void {
    for (const w of this.waiting.splice(0)) w.resolve();
  }
}
