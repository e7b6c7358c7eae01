/**
 * Memory for input that has not fully arrived: frames that span socket reads, and message bodies that span body
 * frames (AMQP 0-9-1 §4.2.6: a content header announces the body size, then body frames carry it).
 *
 * Nothing is allocated from an announced length alone. A content header announcing 1 MiB followed by one 1-byte
 * body frame, on 2,000 channels of each of 40 connections, used to take 1 MiB per channel at the header: 5.4 MiB
 * sent cost the broker +82 GiB of virtual memory and +460 MiB of RSS (issue 24). Now:
 *
 * - A frame that spans reads is taken whole when its size arrives only while the broker-wide budget of memory ahead
 *   of arrival (`InputBudget.reserve`, as the Kafka listener's FramePool) has room; otherwise it grows with the bytes
 *   that arrive (`Gather`). Frames are at most frame-max (128 KiB by default) either way.
 * - A body that spans frames is kept as the frames' own payloads (no copy while they arrive; one copy to join them
 *   at the end, the same as the one a preallocated body cost), small payloads joined into pieces whose size follows
 *   what has arrived so far (a client sending 1-byte body frames must not cost a Buffer object per byte; memory
 *   stays within about 2.5 times the bytes received, see PartialBody.seal). A body in
 *   one frame, the common case, is the frame's payload itself (`PartialBody` is not involved).
 * - What partly received bodies hold counts against the connection (amqp maxPartialBodyBytes: over it the
 *   connection is closed with 506 RESOURCE_ERROR) and against the broker's budget (partialBodyBudget: over it the
 *   connection stops being read until bodies complete or connections close; see AmqpConnection.bodyBytes).
 */

/** Body frame payloads from this size on are kept as they are; smaller ones are copied into a shared piece. */
const KEEP_BYTES = 4096;
/** Largest piece small payloads are copied into. */
const PIECE_MAX = 64 * 1024;
/** Smallest buffer a gathered frame starts with. */
const GATHER_MIN = 256;

/** A connection waiting for the partly received bodies to fall under their budget. */
export interface BudgetWaiter {
  bodyBudgetFreed(): void;
}

/**
 * The budgets every AMQP connection of a broker shares: memory taken for frames before their bytes arrived, and
 * memory held by partly received message bodies.
 */
export class InputBudget {
  /** Bytes of frames taken whole whose bytes have not arrived yet (at most maxAheadBytes). */
  aheadBytes = 0;
  /** Bytes held by partly received bodies, all connections. */
  partialBytes = 0;
  /** Frames gathered as their bytes arrived because the ahead budget was used up. */
  gathered = 0;
  /** Connections that stopped reading because partialBytes was over its budget. */
  waiting = 0;
  /** Times a connection was closed for holding too much of a partly received body (its own cap or the broker's). */
  refusals = 0;
  private readonly waiters = new Set<BudgetWaiter>();

  constructor(
    readonly maxAheadBytes: number,
    readonly maxPartialBytes: number,
  ) {}

  /** Counts `bytes` not yet arrived against the ahead budget; false (nothing counted) when they do not fit. */
  reserve(bytes: number): boolean {
    if (this.aheadBytes + bytes > this.maxAheadBytes) return false;
    this.aheadBytes += bytes;
    return true;
  }

  unreserve(bytes: number): void {
    this.aheadBytes -= bytes;
  }

  get overPartial(): boolean {
    return this.partialBytes > this.maxPartialBytes;
  }

  /** Connections holding partly received bodies. */
  holders = 0;

  /**
   * A connection's partly received bodies went from `was` to `now` bytes (`delta`); a fall below the budget wakes the
   * connections waiting for it.
   */
  partial(delta: number, was: number, now: number): void {
    this.partialBytes += delta;
    if (was === 0 && now > 0) this.holders++;
    else if (was > 0 && now === 0) this.holders--;
    if (delta < 0 && this.waiters.size > 0 && !this.overPartial) {
      const w = [...this.waiters];
      this.waiters.clear();
      this.waiting = 0;
      for (const c of w) c.bodyBudgetFreed();
    }
  }

  /** `c.bodyBudgetFreed` is called once the partial bytes are under the budget again (unless `unwait` came first). */
  wait(c: BudgetWaiter): void {
    this.waiters.add(c);
    this.waiting = this.waiters.size;
  }

  unwait(c: BudgetWaiter): void {
    if (this.waiters.delete(c)) this.waiting = this.waiters.size;
  }

  figures(): Record<string, number> {
    return {
      aheadBytes: this.aheadBytes,
      aheadLimit: this.maxAheadBytes,
      partialBodyBytes: this.partialBytes,
      partialBodyBudget: this.maxPartialBytes,
      framesGathered: this.gathered,
      waitingForBodyBudget: this.waiting,
      bodyBudgetRefusals: this.refusals,
    };
  }
}

/**
 * A frame being gathered as its bytes arrive: a buffer that grows (doubling, never past the frame's size) so that
 * its memory stays within twice what has arrived.
 */
export class Gather {
  private buf: Buffer;
  have = 0;
  constructor(
    readonly size: number,
    first: Buffer,
  ) {
    this.buf = Buffer.allocUnsafe(Math.min(size, Math.max(first.length * 2, GATHER_MIN)));
    this.add(first);
  }

  /** Appends received bytes (copied); true once the frame is complete. */
  add(bytes: Buffer): boolean {
    const need = this.have + bytes.length;
    if (need > this.buf.length) {
      const grown = Buffer.allocUnsafe(Math.min(this.size, Math.max(need, this.buf.length * 2)));
      this.buf.copy(grown, 0, 0, this.have);
      this.buf = grown;
    }
    bytes.copy(this.buf, this.have);
    this.have = need;
    return need === this.size;
  }

  /** The whole frame (once add returned true). */
  get frame(): Buffer {
    return this.buf;
  }
}

/** A message body arriving in several body frames. `held` is the memory it holds, for the budgets. */
export class PartialBody {
  private parts: Buffer[] = [];
  private piece: Buffer | null = null;
  private pieceHave = 0;
  have = 0;
  held = 0;

  constructor(readonly size: number) {}

  /**
   * Adds one body frame's payload (`owned`: the payload's memory is the frame's own, else a view into a reused
   * read buffer) and returns how much more memory the body holds now.
   */
  add(payload: Buffer, owned: boolean): number {
    const n = payload.length;
    const before = this.held;
    if (n >= KEEP_BYTES) {
      this.seal();
      this.parts.push(owned ? payload : Buffer.from(payload));
      this.held += n;
    } else if (n > 0) {
      if (this.piece === null || this.piece.length - this.pieceHave < n) {
        this.seal();
        // A piece half as large as what has arrived so far (at most PIECE_MAX, and not past the body's end): its room
        // not yet filled is never more than half the bytes received, and the pieces grow geometrically to PIECE_MAX.
        const room = Math.min(this.size - this.have, Math.max(n, Math.min(PIECE_MAX, this.have >> 1)));
        this.piece = Buffer.allocUnsafe(room);
        this.held += room;
      }
      payload.copy(this.piece, this.pieceHave);
      this.pieceHave += n;
    }
    this.have += n;
    return this.held - before;
  }

  /**
   * Ends the current piece (a large payload follows, or it is full). One less than half full is copied to its size,
   * so that small and large payloads in turn cannot leave mostly empty pieces behind: every finished piece is at
   * least half used, and what a body holds stays within about 2.5 times what arrived.
   */
  private seal(): void {
    const piece = this.piece;
    if (piece === null) return;
    const used = this.pieceHave;
    if (used < piece.length >> 1) {
      this.parts.push(Buffer.from(piece.subarray(0, used)));
      this.held -= piece.length - used;
    } else {
      this.parts.push(piece.subarray(0, used));
    }
    this.piece = null;
    this.pieceHave = 0;
  }

  get complete(): boolean {
    return this.have === this.size;
  }

  /** The whole body, once complete: the one part itself, or the parts joined. */
  body(): Buffer {
    this.seal();
    const p = this.parts;
    this.parts = [];
    return p.length === 1 ? p[0]! : Buffer.concat(p, this.size);
  }
}
