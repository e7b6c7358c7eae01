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
 */

export const MIN_FRAME_BYTES = 64 * 1024;
export const MAX_FRAME_BYTES = 16 * 1024 * 1024;

export class FramePool {
  /** Free buffers per size class (index = log2(size / MIN_FRAME_BYTES)). */
  private readonly free: Buffer[][] = [];
  private freeBytes = 0;
  /** Buffers handed out from (or returned to) the pool, for the broker's stats. */
  reused = 0;
  allocated = 0;

  constructor(private readonly maxFreeBytes = 64 * 1024 * 1024) {}

  /** A buffer of exactly `size` bytes (a view of a pooled buffer when `size` is in the pooled range). */
  take(size: number): Buffer {
    if (size < MIN_FRAME_BYTES || size > MAX_FRAME_BYTES) return Buffer.allocUnsafe(size);
    const cls = sizeClass(size);
    const list = this.free[cls];
    const whole = list !== undefined && list.length > 0 ? list.pop() : undefined;
    if (whole !== undefined) {
      this.freeBytes -= whole.length;
      this.reused++;
      return whole.subarray(0, size);
    }
    this.allocated++;
    return Buffer.allocUnsafeSlow(MIN_FRAME_BYTES << cls).subarray(0, size);
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
