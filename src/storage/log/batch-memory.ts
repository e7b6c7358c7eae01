/**
 * Memory for the batches the log keeps in its partitions' tails, reused instead of reallocated.
 *
 * Appended batches stay in memory until their segment is sealed (and are read from there while hot). Copying
 * each large batch into a fresh buffer would leave V8 to collect hundreds of MB a second of external memory, and
 * its full collections (one per ~64 MB allocated) stall the event loop for milliseconds. Here a partition copies
 * its large batches into chunks of CHUNK_BYTES, one after another; a chunk is reused once it is full and none of
 * its batches is held any more, by the tail (until sealed) or by a reader (through a ReadLease).
 *
 * Small batches (under MIN_POOLED_BYTES) get a buffer of their own, so a quiet partition does not pin a whole
 * chunk, as do batches larger than a chunk, and every batch once the chunks in use reach `maxBytes` (the
 * garbage collector then does the work, as it would without this). Free chunks that went unused for a while are
 * let go (trim).
 */
import type { Pin } from '../../core/index.js';

export const CHUNK_BYTES = 4 * 1024 * 1024;
export const MIN_POOLED_BYTES = 64 * 1024;

export class Chunk implements Pin {
  /** Bytes used from the start. */
  used = 0;
  /** Batches in this chunk still held (tail entries and reader pins). */
  refs = 0;
  /** Still the current chunk of a partition (more batches may go in). */
  current = true;
  private abandoned = false;

  constructor(
    readonly buf: Buffer,
    private readonly pool: BatchMemory,
  ) {}

  pin(): this {
    this.refs++;
    return this;
  }

  unpin(): void {
    if (--this.refs === 0 && !this.current && !this.abandoned) this.pool.recycle(this);
  }

  /**
   * Never reused (its partition was deleted while WAL appends or a seal may still read it): the garbage collector
   * takes it once nothing refers to it.
   */
  abandon(): void {
    if (this.abandoned) return;
    this.abandoned = true;
    this.pool.forget();
  }

  /** The partition moved on to another chunk: reusable once nothing holds its batches. */
  retire(): void {
    this.current = false;
    if (this.refs === 0 && !this.abandoned) this.pool.recycle(this);
  }
}

/** Where a partition's next batches go. */
export interface ChunkCursor {
  chunk: Chunk | null;
}

export class BatchMemory {
  private readonly free: Chunk[] = [];
  /** The fewest free chunks since the last trim: that many were not needed at all meanwhile. */
  private idleFree = 0;
  /** Chunks in existence (in use or free). */
  private chunks = 0;
  /** Batches copied into chunks, and into buffers of their own. */
  pooledBatches = 0;
  ownBatches = 0;

  constructor(private readonly maxBytes: number) {}

  /**
   * A copy of `batch` the log may keep, and the chunk it pins (already counted once for the caller, who unpins it
   * when the batch leaves the tail); null when the copy is a buffer of its own.
   */
  copy(cursor: ChunkCursor, batch: Buffer): { data: Buffer; chunk: Chunk | null } {
    const n = batch.length;
    if (n >= MIN_POOLED_BYTES && n <= CHUNK_BYTES) {
      let c = cursor.chunk;
      if (c !== null && c.buf.length - c.used < n) {
        c.retire();
        c = cursor.chunk = null;
      }
      c ??= cursor.chunk = this.take();
      if (c !== null) {
        const data = c.buf.subarray(c.used, c.used + n);
        // Cannot happen unless a chunk still in use was handed out again: fail the append rather than store a cut batch.
        if (data.length !== n) throw new Error(`batch memory: a chunk in use was reused (${data.length} of ${n} bytes left)`);
        batch.copy(data);
        // Batches start 8-byte aligned, as allocations do.
        c.used = Math.min(c.buf.length, c.used + ((n + 7) & ~7));
        this.pooledBatches++;
        return { data, chunk: c.pin() };
      }
    }
    this.ownBatches++;
    // Memory of its own, never a slice of Node's shared 8 KiB allocation pool: a small batch kept in a tail or the
    // read cache would keep its whole slab (and whatever else was cut from it) alive, many times its size.
    const data = Buffer.allocUnsafeSlow(n);
    batch.copy(data);
    return { data, chunk: null };
  }

  /** An abandoned chunk no longer counts against maxBytes. */
  forget(): void {
    this.chunks--;
  }

  recycle(c: Chunk): void {
    c.used = 0;
    c.current = true;
    this.free.push(c);
  }

  /** Bytes of chunk memory in existence. */
  get bytes(): number {
    return this.chunks * CHUNK_BYTES;
  }

  /**
   * Lets go of the free chunks that no copy needed since the last call (the garbage collector returns their memory),
   * so a burst does not leave its peak allocated for good. Called every few seconds.
   */
  trim(): void {
    const idle = Math.min(this.idleFree, this.free.length);
    this.free.splice(0, idle);
    this.chunks -= idle;
    this.idleFree = this.free.length;
  }

  private take(): Chunk | null {
    const c = this.free.pop();
    if (this.free.length < this.idleFree) this.idleFree = this.free.length;
    if (c !== undefined) return c;
    if ((this.chunks + 1) * CHUNK_BYTES > this.maxBytes) return null;
    this.chunks++;
    return new Chunk(Buffer.allocUnsafeSlow(CHUNK_BYTES), this);
  }
}
