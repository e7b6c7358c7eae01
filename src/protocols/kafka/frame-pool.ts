/**
 * Reused memory for large request frames (Produce requests of hundreds of KB each).
 *
 * Allocating a fresh buffer per request costs more than the copy into it: V8 counts that memory as external, and
 * every ~64 MB of it allocated starts a full collection whose pauses show up in every client's latency. A frame
 * taken from here goes back once its request is finished and nothing refers to it any more: the connection gives
 * back only Produce frames, whose batches the storage copies during the append (StreamStorage.append borrows its
 * buffer), after the handler has settled.
 *
 * Buffers come in power-of-two sizes from MIN_FRAME_BYTES to MAX_FRAME_BYTES; a frame outside that range is a
 * plain allocation and is never given back. At most `maxFreeBytes` wait for reuse, smaller sizes first; beyond
 * that, buffers are left to the garbage collector.
 *
 * Memory ahead of arrival: a connection takes its whole frame here when the size prefix arrives, before the bytes
 * do (so that they can be copied straight into it). Those not-yet-arrived bytes are memory a client can pin by
 * announcing a size and sending nothing, so all connections together may hold at most `maxAheadBytes` of them
 * (`reserve`, given back as the bytes arrive or the connection closes); beyond that a connection gathers its frame
 * in pieces of exactly the bytes received and joins them when the last one is in (one more copy: the slow path,
 * taken only while frames waiting for their bytes use up the budget).
 */

export const MIN_FRAME_BYTES = 64 * 1024;
export const MAX_FRAME_BYTES = 16 * 1024 * 1024;

/** Default of `maxAheadBytes`: sixty-four 1 MB Produce requests arriving at once take the fast path. */
export const DEFAULT_AHEAD_BYTES = 64 * 1024 * 1024;

export interface FramePoolStats {
  allocated: number;
  reused: number;
  /** Bytes of frames taken whole whose bytes have not arrived yet (at most `aheadLimit`). */
  aheadBytes: number;
  aheadLimit: number;
  /** Frames being gathered in pieces now (the budget was used up when their size arrived). */
  gathering: number;
  /** Frames gathered in pieces since start. */
  gathered: number;
  /** Allocations that failed (the connection was closed). */
  allocationFailures: number;
}

export class FramePool {
  /** Free buffers per size class (index = log2(size / MIN_FRAME_BYTES)). */
  private readonly free: Buffer[][] = [];
  private freeBytes = 0;
  /** Buffers handed out from (or returned to) the pool, for the broker's stats. */
  reused = 0;
  allocated = 0;
  /** Memory reserved ahead of arrival (see `reserve`). */
  aheadBytes = 0;
  /** Frames being gathered in pieces, and how many were since start (kept by the connections). */
  gathering = 0;
  gathered = 0;
  allocationFailures = 0;
  /**
   * Allocates the memory of pooled frames and of frames above MAX_FRAME_BYTES. Replaceable so that tests can make
   * an allocation fail as it does when the process is out of memory (RangeError: Array buffer allocation failed).
   */
  allocate: (size: number) => Buffer = (size) => Buffer.allocUnsafeSlow(size);

  constructor(
    private readonly maxFreeBytes = 64 * 1024 * 1024,
    readonly maxAheadBytes = DEFAULT_AHEAD_BYTES,
  ) {}

  /** Counts `bytes` not yet arrived against the budget; false (nothing counted) when they do not fit. */
  reserve(bytes: number): boolean {
    if (this.aheadBytes + bytes > this.maxAheadBytes) return false;
    this.aheadBytes += bytes;
    return true;
  }

  /** Bytes reserved with `reserve` arrived, or will not. */
  unreserve(bytes: number): void {
    this.aheadBytes -= bytes;
  }

  stats(): FramePoolStats {
    return {
      allocated: this.allocated,
      reused: this.reused,
      aheadBytes: this.aheadBytes,
      aheadLimit: this.maxAheadBytes,
      gathering: this.gathering,
      gathered: this.gathered,
      allocationFailures: this.allocationFailures,
    };
  }

  /**
   * A buffer of exactly `size` bytes (a view of a pooled buffer when `size` is in the pooled range). Throws what
   * the allocation throws (RangeError when the memory is not there).
   */
  take(size: number): Buffer {
    if (size < MIN_FRAME_BYTES) return Buffer.allocUnsafe(size);
    if (size > MAX_FRAME_BYTES) return this.allocate(size);
    const cls = sizeClass(size);
    const list = this.free[cls];
    const whole = list !== undefined && list.length > 0 ? list.pop() : undefined;
    if (whole !== undefined) {
      this.freeBytes -= whole.length;
      this.reused++;
      return whole.subarray(0, size);
    }
    const buf = this.allocate(MIN_FRAME_BYTES << cls);
    this.allocated++;
    return buf.subarray(0, size);
  }

  /** Gives back a buffer from take(); the caller must hold no reference into it any more. */
  give(frame: Buffer): void {
    const whole = frame.buffer.byteLength;
    if (whole < MIN_FRAME_BYTES || whole > MAX_FRAME_BYTES || frame.byteOffset !== 0 || (whole & (whole - 1)) !== 0) return;
    const cls = sizeClass(whole);
    // Over the budget, the largest free buffers make room (a burst of big frames must not hold the budget that
    // the usual size needs), and if that is not enough this one is left to the garbage collector.
    for (let c = this.free.length - 1; c > cls && this.freeBytes + whole > this.maxFreeBytes; c--) {
      const list = this.free[c];
      while (list !== undefined && list.length > 0 && this.freeBytes + whole > this.maxFreeBytes) {
        this.freeBytes -= list.pop()!.length;
      }
    }
    if (this.freeBytes + whole > this.maxFreeBytes) return;
    (this.free[cls] ??= []).push(Buffer.from(frame.buffer, 0, whole));
    this.freeBytes += whole;
  }
}

function sizeClass(size: number): number {
  let cls = 0;
  while (MIN_FRAME_BYTES << cls < size) cls++;
  return cls;
}
