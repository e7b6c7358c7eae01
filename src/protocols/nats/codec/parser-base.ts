/**
 * NATS client-protocol parsers, their common part (`NatsParserBase`: lines, payloads and their memory, limits).
 * `NatsServerParser` (parser.ts) reads what a client sends (CONNECT, PUB, HPUB, SUB, UNSUB,
 * PING, PONG, and +OK / -ERR / INFO which clients rarely send), `NatsClientParser` reads what a server sends
 * (INFO, MSG, HMSG, +OK, -ERR, PING, PONG; client-parser.ts) for the benchmark's load generator and raw-socket tests.
 *
 * Both follow nats-server 2.9.10's parser (server/parser.go), checked against the Debian binary with raw sockets:
 * - operation names are case-insensitive (`pub`); arguments are separated by runs of spaces or tabs, trailing
 *   blanks are ignored; a line ends with `\r\n` or a bare `\n`; a payload must be followed by exactly `\r\n`.
 * - PING / PONG / +OK are recognised by their first letters, the rest of the line ignored (`PINGX` is a PING);
 *   INFO from a client is ignored, as nats-server ignores it from a client connection.
 * - sizes are 1 to 9 decimal digits (no sign); `UNSUB <sid> <max>` with a non-numeric max is a plain UNSUB.
 * - errors (a NatsProtocolError; the parser is dead afterwards: nats-server closes the connection):
 *   `Unknown Protocol Operation`, `maximum control line exceeded` (a line, op included and line end excluded,
 *   longer than maxControlLine: raised as soon as that many bytes arrived without a line end, so a client cannot
 *   make the parser buffer more), `Maximum Payload Violation` (raised at the control line, before any payload
 *   byte is buffered), and bad arguments of PUB/HPUB/SUB/UNSUB/CONNECT, which nats-server answers by closing
 *   without an -ERR (`errText` null). Subject validity (`Invalid Subject`) is the connection's business: nats-server
 *   keeps the connection open for it (see subject.ts).
 *
 * Payload memory (`payload`, `headers` in onPub/onHpub/onMsg/onHmsg); `parser.ownedPayload` tells, during the
 * call, which case holds:
 * - a payload that spanned chunks is a fresh buffer (owned by the handler, ownedPayload true: keep it without
 *   copying), got in one of two ways, so that the memory a payload holds follows the bytes that arrived and not
 *   the size its control line announced (a client announcing `PUB x 1048576` and sending nothing more must not
 *   cost a mebibyte: 200 such connections took +200 MiB of Buffers):
 *   - taken whole when its control line is read, if what has not arrived yet is at most FAST_AHEAD_BYTES (the
 *     usual case: a message cut by a read boundary) and fits the `budget` of memory ahead of arrival that all
 *     parsers of a broker share (PayloadBudget); the bytes are copied into it as they come.
 *   - otherwise gathered: pieces of the chunks as they arrive (views of them, as Node's 'data' chunks are the
 *     stream's own and sized to what was read; copies for pieces under VIEW_MIN_BYTES, whose views would cost more
 *     than their bytes, and for borrowed chunks), joined into one buffer when the last byte is in. The join is the
 *     one copy the first way makes too, so a large payload loses nothing by it; a gathered payload holds at most
 *     about twice the bytes that arrived.
 *   Without a budget (a client's parser, tests) every payload is taken whole, as before.
 * - a payload whole inside the pushed chunk (with its `\r\n`), chunks not borrowed (the default: Node's
 *   'data' chunks, fresh per read): a view into the chunk (ownedPayload false). The parser never writes into a
 *   chunk and keeps no reference to it, so the view stays valid as long as the caller does not reuse the chunk;
 *   keeping it keeps the whole chunk (64 KiB per socket read) alive, which a handler retaining messages for
 *   long may prefer to avoid by copying.
 * - the same with `borrowed: true` (chunks from the listeners' shared read buffer, src/protocols/read-into.ts,
 *   reused after push returns): a copy the parser made in memory of its own (Node's pool for small payloads),
 *   owned by the handler (ownedPayload true). One allocation a message either way: a view, or the copy.
 * - for HPUB/HMSG, `headers` (the NATS/1.0 block, parse it with parseHeaders) and `payload` follow the same
 *   rule (both views, or both owned; a spanning payload's two are views of one owned buffer).
 * The parser keeps nothing of a chunk after push returns: a partial control line is copied into its own line
 * buffer (at most maxControlLine + 1 bytes), a partial payload into the fresh payload buffer.
 *
 * Handlers are plain objects (class instances) with one method per operation, called synchronously from push:
 * no closures per message, and a connection class implementing the interface keeps the call sites monomorphic.
 * A handler that closes the connection from inside a call calls `parser.stop()`: push returns after that call.
 */
import { NatsErrText, NatsProtocolError } from './errors.js';

export interface NatsLimits {
  /** Longest control line accepted (op and arguments, line end excluded); nats-server's max_control_line (4096). */
  maxControlLine: number;
  /** Largest payload (HPUB/HMSG: headers + payload) accepted; nats-server's max_payload (1 MiB). */
  maxPayload: number;
}

export interface NatsParserOptions extends NatsLimits {
  /**
   * The pushed chunks are borrowed: their memory is reused once push returns (the listeners' shared read buffer,
   * src/protocols/read-into.ts). Every payload is then handed over as a copy the handler owns
   * (`ownedPayload` always true), made once by the parser, instead of a view the handler would have to copy.
   */
  borrowed?: boolean;
  /**
   * The broker-wide budget of payload memory taken ahead of its bytes (see "Payload memory" above). Absent: every
   * payload spanning chunks is allocated whole at its control line (for peers one trusts: a client's parser).
   */
  budget?: PayloadBudget;
}

/**
 * Payload memory all the parsers of a broker may hold ahead of the bytes arriving (a payload taken whole at its
 * control line), shared by every connection: what a crowd of clients announcing payloads and sending nothing can
 * pin. Past it, payloads are gathered as their bytes arrive (one more array of pieces, no more copies).
 */
export class PayloadBudget {
  /** Bytes reserved now (taken ahead of their arrival). */
  aheadBytes = 0;
  /** Payloads being gathered in pieces now, and since start. */
  gathering = 0;
  gathered = 0;

  constructor(readonly limit: number) {}

  /** Counts `bytes` not yet arrived against the budget; false (nothing counted) when they do not fit. */
  reserve(bytes: number): boolean {
    if (this.aheadBytes + bytes > this.limit) return false;
    this.aheadBytes += bytes;
    return true;
  }

  /** Bytes reserved with `reserve` arrived, or will not. */
  unreserve(bytes: number): void {
    this.aheadBytes -= bytes;
  }

  figures(): { aheadBytes: number; aheadLimit: number; gathering: number; gathered: number } {
    return { aheadBytes: this.aheadBytes, aheadLimit: this.limit, gathering: this.gathering, gathered: this.gathered };
  }
}

// Parser states.
export const LINE = 0;
export const PAYLOAD = 1;
export const END_CR = 2;
export const END_LF = 3;

// Pending operations (a payload spanning chunks).
export const OP_PUB = 0;
export const OP_HPUB = 1;
export const OP_MSG = 2;
export const OP_HMSG = 3;

export const CR = 13;
export const LF = 10;

/** The longest subject whose bytes the one-entry subject cache keeps. */
export const SUBJECT_CACHE_BYTES = 256;
/** The longest sid the client parser's one-entry sid cache keeps. */
export const SID_CACHE_BYTES = 32;
/** Arguments any operation takes at most (HMSG: subject sid reply hdr total); one more means "too many". */
export const MAX_ARGS = 5;

export const isBlank = (c: number): boolean => c === 0x20 || c === 0x09 || c === CR || c === LF;

/** Lower-cases an ASCII letter (other bytes never collide with the lower-case letters compared against). */
export const lc = (c: number): number => c | 0x20;

export function unknownOp(): NatsProtocolError {
  return new NatsProtocolError('unknown protocol operation', NatsErrText.UNKNOWN_OP);
}

export function badArgs(op: string, usage: string): NatsProtocolError {
  return new NatsProtocolError(`${op}: bad arguments, expected ${usage}`, null);
}

/** Decodes bytes as a string: latin1 (one byte a char, cheapest) when all are ASCII, else UTF-8. */
export function decode(buf: Buffer, s: number, e: number): string {
  for (let k = s; k < e; k++) if (buf[k]! > 0x7f) return buf.toString('utf8', s, e);
  return buf.toString('latin1', s, e);
}

/**
 * A payload spanning chunks is taken whole at its control line only when at most this much of it is still to come
 * (a message cut by a read boundary; a read is up to 64 KiB): a larger one arrives over several reads anyway, and
 * gathering those costs the same one copy (the join) as filling a buffer taken ahead would.
 */
export const FAST_AHEAD_BYTES = 64 * 1024;
/** A gathered piece at least this long is kept as a view of its chunk; a shorter one is copied (a view costs ~100 bytes). */
export const VIEW_MIN_BYTES = 512;
/** The smallest copy buffer of a gathered payload (later ones are as large as what arrived before, see gather). */
export const GATHER_MIN_BYTES = 64;

/** Borrowed mode: payloads up to this size are copied into the parser's slab, larger ones get their own buffer. */
export const SLAB_COPY_MAX = 4096;
/** Borrowed mode's copy slab (the size of one socket read, so it pins no more than a view of a read would). */
export const COPY_SLAB = 64 * 1024;

/** A size: 1 to 9 ASCII digits (nats-server's parseSize), else -1. */
export function parseSize(buf: Buffer, s: number, e: number): number {
  const n = e - s;
  if (n < 1 || n > 9) return -1;
  let v = 0;
  for (let k = s; k < e; k++) {
    const d = buf[k]! - 0x30;
    if (d < 0 || d > 9) return -1;
    v = v * 10 + d;
  }
  return v;
}

/**
 * Argument boundaries of the line being parsed, shared by every parser of the thread (one less allocation per
 * connection): a line's arguments are read before its handler is called, so a handler that made another parser
 * parse could not disturb them.
 */
export const ARGS = new Int32Array(2 * (MAX_ARGS + 1));

/** A payload being gathered (see "Payload memory"): pieces so far, then the copy buffer acc[accStart, accFill). */
export class Gather {
  readonly parts: Buffer[] = [];
  /** How many pieces are views of chunks. */
  views = 0;
  acc: Buffer | null = null;
  accStart = 0;
  accFill = 0;

  /** The copy buffer's bytes not yet in parts go there (its rest serves the next copies). */
  flushAcc(): void {
    const acc = this.acc;
    if (acc === null) return;
    if (this.accFill > this.accStart) {
      this.parts.push(acc.subarray(this.accStart, this.accFill));
      this.accStart = this.accFill;
    }
    if (this.accFill === acc.length) this.acc = null;
  }
}

export abstract class NatsParserBase<H> {
  readonly maxControlLine: number;
  readonly maxPayload: number;
  /**
   * During an onPub/onHpub/onMsg/onHmsg call: true when payload (and headers) is a fresh buffer the handler
   * owns, false when it is a view into the pushed chunk (copy before keeping it).
   */
  ownedPayload = false;

  private state = LINE;
  private dead: NatsProtocolError | null = null;
  private stopped = false;

  // A control line split across chunks: its first bytes (allocated when a line is first split).
  private lineBuf: Buffer | null = null;
  private lineLen = 0;

  // A payload split across chunks: its size and the bytes that arrived so far, in payBuf (taken whole, or the
  // joined pieces once complete) or in g (gathered).
  private payBuf: Buffer | null = null;
  private paySize = 0;
  private payFill = 0;
  /** The payload handed over is the parser's own (taken whole, or joined), not a view of a chunk. */
  private payOwned = true;
  /** Bytes of payBuf counted against the budget, still to arrive. */
  private reserved = 0;
  private g: Gather | null = null;
  private readonly budget: PayloadBudget | null;
  /**
   * Counts the operations that were left partial by a chunk (a control line, or a payload): the caller tells a new
   * partial operation from the one it already saw by it (a deadline for half-sent operations).
   */
  partials = 0;
  protected pOp = OP_PUB;
  protected pSubject = '';
  protected pReply: string | null = null;
  protected pSid = '';
  protected pHdr = 0;

  /** Argument boundaries of the current line: [start0, end0, start1, end1, ...]. */
  protected readonly args = ARGS;

  // One-entry subject cache: a publisher usually repeats its subject; equal bytes give the same string, with no
  // decoding and no new string. Allocated at the first publish (an idle connection never needs it).
  private lastSubjectBytes: Buffer | null = null;
  private lastSubjectLen = -1;
  private lastSubject = '';

  /** Chunks are borrowed: payloads are copied before the handler sees them. */
  readonly borrowed: boolean;

  constructor(limits: NatsParserOptions) {
    this.borrowed = limits.borrowed ?? false;
    if (!(limits.maxControlLine >= 16) || !(limits.maxPayload >= 0)) {
      throw new RangeError(`NATS parser limits out of range: ${JSON.stringify(limits)}`);
    }
    this.maxControlLine = limits.maxControlLine;
    this.maxPayload = limits.maxPayload;
    this.budget = limits.budget ?? null;
  }

  /**
   * Makes the current push return after the handler call in progress, and later pushes do nothing. A partial
   * payload is dropped (its budget given back).
   */
  stop(): void {
    this.stopped = true;
    this.dropPayload();
  }

  /** Forgets a partial payload and gives back what it held of the budget. */
  private dropPayload(): void {
    if (this.reserved > 0) {
      this.budget!.unreserve(this.reserved);
      this.reserved = 0;
    }
    if (this.g !== null) {
      this.budget!.gathering--;
      this.g = null;
    }
    this.payBuf = null;
  }

  /** Whether a control line or payload is partly read (bytes are buffered). */
  get midOperation(): boolean {
    return this.state !== LINE || this.lineLen > 0;
  }

  /**
   * Parses `chunk`, calling `h` for each complete operation. Throws NatsProtocolError on bad bytes (and anything
   * a handler throws); after a throw the parser is dead and every later push throws the same error.
   */
  push(chunk: Buffer, h: H): void {
    if (this.dead !== null) throw this.dead;
    if (this.stopped) return;
    try {
      this.run(chunk, h);
    } catch (e) {
      this.dead = e instanceof NatsProtocolError ? e : new NatsProtocolError('NATS parser used after a handler failed', null);
      this.dropPayload();
      throw e;
    }
  }

  private run(chunk: Buffer, h: H): void {
    const n = chunk.length;
    let i = 0;
    if (this.state !== LINE || this.lineLen > 0) {
      i = this.resume(chunk, 0, h);
      if (i < 0) return;
    }
    const max = this.maxControlLine;
    while (i < n) {
      if (this.stopped) return;
      const f = lc(chunk[i]!);
      if (f === this.fastA || f === 0x68 /* h */) {
        const r = this.opInChunk(chunk, i, h);
        if (r === -1) return;
        if (r >= 0) {
          i = r;
          continue;
        }
        // -2: not a plain PUB / HPUB / MSG / HMSG whose line is whole in the chunk: the general path decides.
      }
      // Find the line end, looking no further than a line may be long: content max bytes, a '\r', the '\n'.
      let lim = i + max + 2;
      if (lim > n) lim = n;
      let nl = i;
      while (nl < lim && chunk[nl] !== LF) nl++;
      if (nl === lim) {
        if (lim < n) throw this.controlLineExceeded();
        this.partials++;
        this.saveLine(chunk, i, n);
        return;
      }
      let e = nl;
      if (e > i && chunk[e - 1] === CR) e--;
      if (e - i > max) throw this.controlLineExceeded();
      i = this.line(chunk, i, e, chunk, nl + 1, h);
      if (i < 0) return;
    }
  }

  /** Continues a payload or control line left partial by the previous chunk; -1 when `chunk` is used up. */
  private resume(chunk: Buffer, i: number, h: H): number {
    const n = chunk.length;
    if (this.state === PAYLOAD) {
      let take = this.paySize - this.payFill;
      if (take > n - i) take = n - i;
      if (take > 0) {
        const buf = this.payBuf;
        if (buf !== null) {
          chunk.copy(buf, this.payFill, i, i + take);
          // What is still to come stays reserved (the bytes of the first chunk were never counted).
          const left = this.paySize - this.payFill - take;
          if (left < this.reserved) {
            this.budget!.unreserve(this.reserved - left);
            this.reserved = left;
          }
        } else this.gather(chunk, i, i + take);
        this.payFill += take;
        i += take;
      }
      if (this.payFill < this.paySize) return -1;
      if (this.payBuf === null) this.join();
      this.state = END_CR;
    }
    if (this.state === END_CR) {
      if (i >= n) return -1;
      if (chunk[i] !== CR) throw unknownOp();
      i++;
      this.state = END_LF;
    }
    if (this.state === END_LF) {
      if (i >= n) return -1;
      if (chunk[i] !== LF) throw unknownOp();
      i++;
      this.state = LINE;
      const buf = this.payBuf!;
      this.payBuf = null;
      this.ownedPayload = this.payOwned;
      this.deliverPending(buf, h);
      return this.stopped ? -1 : i;
    }
    if (this.lineLen > 0) {
      // The rest of a split control line: at most max + 1 bytes before the '\n' in all (content and a '\r').
      let lim = i + (this.maxControlLine + 2 - this.lineLen);
      if (lim > n) lim = n;
      let nl = i;
      while (nl < lim && chunk[nl] !== LF) nl++;
      if (nl === lim) {
        if (lim < n) throw this.controlLineExceeded();
        this.saveLine(chunk, i, n);
        return -1;
      }
      this.saveLine(chunk, i, nl);
      const lb = this.lineBuf!;
      let e = this.lineLen;
      this.lineLen = 0;
      if (lb[e - 1] === CR) e--;
      if (e > this.maxControlLine) throw this.controlLineExceeded();
      return this.line(lb, 0, e, chunk, nl + 1, h);
    }
    return i;
  }

  private saveLine(chunk: Buffer, s: number, e: number): void {
    const need = this.lineLen + (e - s);
    if (need > this.maxControlLine + 1) throw this.controlLineExceeded();
    let lb = this.lineBuf;
    if (lb === null || need > lb.length) {
      const have = lb === null ? 0 : lb.length;
      const bigger = Buffer.allocUnsafe(Math.min(this.maxControlLine + 1, Math.max(need, 2 * have, 256)));
      if (lb !== null) lb.copy(bigger, 0, 0, this.lineLen);
      this.lineBuf = lb = bigger;
    }
    chunk.copy(lb, this.lineLen, s, e);
    this.lineLen = need;
  }

  private controlLineExceeded(): NatsProtocolError {
    return new NatsProtocolError(`control line longer than max_control_line (${this.maxControlLine} bytes)`, NatsErrText.MAX_CONTROL_LINE);
  }

  protected payloadTooLarge(size: number): NatsProtocolError {
    return new NatsProtocolError(`payload of ${size} bytes exceeds max_payload (${this.maxPayload} bytes)`, NatsErrText.MAX_PAYLOAD);
  }

  /** `chunk[s, e)` as the handler gets it: a view, or an owned copy when chunks are borrowed. */
  protected payloadOf(chunk: Buffer, s: number, e: number): Buffer {
    this.ownedPayload = this.borrowed;
    return this.borrowed ? this.copyOut(chunk, s, e) : chunk.subarray(s, e);
  }

  // Borrowed mode: copies go into a slab (one allocation per 64 KiB, not per payload: Buffer.allocUnsafe's 8 KiB
  // pool made a 1 KiB copy cost 3x a slab copy). A kept payload keeps its slab alive, as a view keeps its chunk.
  private slab: Buffer | null = null;
  private slabPos = 0;

  /** A copy of `chunk[s, e)` the handler owns. */
  private copyOut(chunk: Buffer, s: number, e: number): Buffer {
    const n = e - s;
    if (n > SLAB_COPY_MAX) {
      const own = Buffer.allocUnsafeSlow(n);
      chunk.copy(own, 0, s, e);
      return own;
    }
    let slab = this.slab;
    if (slab === null || this.slabPos + n > slab.length) {
      slab = this.slab = Buffer.allocUnsafeSlow(COPY_SLAB);
      this.slabPos = 0;
    }
    const at = this.slabPos;
    // A loop for the few bytes of a small payload: cheaper than the native copy call.
    if (n < 64) for (let k = 0; k < n; k++) slab[at + k] = chunk[s + k]!;
    else chunk.copy(slab, at, s, e);
    // Keep copies 8-byte aligned, as Node's pool does.
    this.slabPos = (at + n + 7) & ~7;
    return slab.subarray(at, at + n);
  }

  /** First letter (lower case) of the hot op besides its `h` form: `p` (PUB) for the server parser, `m` (MSG). */
  protected fastA = -1;

  /**
   * The fast path of the hot ops (PUB/HPUB, MSG/HMSG) at `chunk[i]` when the control line is whole in the chunk:
   * scanned once (the general path finds the line end, then splits the arguments). Returns as resume does, or -2
   * when it is another op, the line is not whole in the chunk, or anything about it is unusual (wrong argument
   * count, a bad size, too long): the general path then parses it and raises the same errors as for any line.
   */
  protected opInChunk(chunk: Buffer, i: number, h: H): number {
    void chunk;
    void i;
    void h;
    return -2;
  }

  /** Arguments found by scanArgs, and the OR of their bytes (below 0x80: all ASCII). */
  protected argCount = 0;
  protected argHigh = 0;

  /**
   * Splits the arguments of the line starting at `chunk[i]`, from `chunk[k]` to its `\n`, into this.args in one
   * pass. Returns the index of the `\n`, or -2 when there is none within the control-line limit in this chunk, or
   * more than MAX_ARGS arguments, or the line is too long.
   */
  protected scanArgs(chunk: Buffer, i: number, k: number): number {
    const n = chunk.length;
    let lim = i + this.maxControlLine + 2;
    if (lim > n) lim = n;
    const args = this.args;
    let count = 0;
    let high = 0;
    for (;;) {
      while (k < lim) {
        const c = chunk[k]!;
        if (c === 0x20 || c === 0x09 || c === CR) k++;
        else break;
      }
      if (k >= lim) return -2;
      if (chunk[k] === LF) break;
      if (count === MAX_ARGS) return -2;
      args[2 * count] = k;
      while (k < lim) {
        const c = chunk[k]!;
        // Most bytes are printable: one comparison lets them through.
        if (c > 0x20 || (c !== 0x20 && c !== 0x09 && c !== CR && c !== LF)) {
          high |= c;
          k++;
        } else break;
      }
      if (k >= lim) return -2;
      args[2 * count + 1] = k;
      count++;
    }
    if ((chunk[k - 1] === CR ? k - 1 : k) - i > this.maxControlLine) return -2;
    this.argCount = count;
    this.argHigh = high;
    return k;
  }

  /** Argument `idx` of the last scanArgs, decoded as latin1 when the line was ASCII. */
  protected scannedArg(chunk: Buffer, idx: number): string {
    return chunk.toString(this.argHigh < 0x80 ? 'latin1' : 'utf8', this.args[2 * idx]!, this.args[2 * idx + 1]!);
  }

  /**
   * Handles one control line `lb[s, e)` (the op and its arguments, line end excluded) whose payload, if any,
   * starts at `chunk[next]`. Returns the index in `chunk` after the operation, or -1 when the chunk is used up.
   */
  protected abstract line(lb: Buffer, s: number, e: number, chunk: Buffer, next: number, h: H): number;

  /** Delivers the operation whose payload spanned chunks, now whole in `buf`; the pending fields describe it. */
  protected abstract deliverPending(buf: Buffer, h: H): void;

  /**
   * Starts a payload of `size` bytes at `chunk[at]` that is not whole in the chunk (with its `\r\n`): the
   * operation's fields must be in the pending fields. Returns as resume does.
   */
  protected startPayload(chunk: Buffer, at: number, size: number, h: H): number {
    this.partials++;
    this.paySize = size;
    this.payFill = 0;
    this.payOwned = true;
    this.state = PAYLOAD;
    const budget = this.budget;
    if (budget === null) this.payBuf = Buffer.allocUnsafe(size);
    else {
      let here = chunk.length - at;
      if (here > size) here = size;
      const ahead = size - here;
      if (ahead <= FAST_AHEAD_BYTES && budget.reserve(ahead)) {
        this.reserved = ahead;
        this.payBuf = Buffer.allocUnsafe(size);
      } else {
        this.g = new Gather();
        budget.gathering++;
        budget.gathered++;
      }
    }
    return this.resume(chunk, at, h);
  }

  /**
   * Keeps `chunk[s, e)`, the next bytes of a gathered payload: a view of the chunk (not borrowed, at least
   * VIEW_MIN_BYTES), else a copy into the copy buffer. A new copy buffer is as large as the bytes of the payload
   * that arrived before it (at least GATHER_MIN_BYTES, at most what is still to come): copies take O(log size)
   * allocations, and the memory held stays within twice what arrived.
   */
  private gather(chunk: Buffer, s: number, e: number): void {
    const g = this.g!;
    if (!this.borrowed && e - s >= VIEW_MIN_BYTES) {
      g.flushAcc();
      g.parts.push(chunk.subarray(s, e));
      g.views++;
      return;
    }
    const s0 = s;
    while (s < e) {
      let acc = g.acc;
      if (acc === null || g.accFill === acc.length) {
        g.flushAcc();
        const arrived = this.payFill + (s - s0);
        const toCome = this.paySize - arrived;
        let cap = Math.max(e - s, arrived, GATHER_MIN_BYTES);
        if (cap > toCome) cap = toCome;
        acc = g.acc = Buffer.allocUnsafe(cap);
        g.accStart = 0;
        g.accFill = 0;
      }
      let t = acc.length - g.accFill;
      if (t > e - s) t = e - s;
      chunk.copy(acc, g.accFill, s, s + t);
      g.accFill += t;
      s += t;
    }
  }

  /** A gathered payload is complete: its pieces joined into payBuf (one piece: as it is). */
  private join(): void {
    const g = this.g!;
    g.flushAcc();
    const parts = g.parts;
    if (parts.length === 1) {
      this.payBuf = parts[0]!;
      this.payOwned = g.views === 0;
    } else this.payBuf = Buffer.concat(parts, this.paySize);
    this.g = null;
    this.budget!.gathering--;
  }

  /**
   * Splits `lb[s, e)` at runs of blanks into this.args; returns the count (MAX_ARGS + 1 means more than any
   * operation takes).
   */
  protected splitArgs(lb: Buffer, s: number, e: number): number {
    const args = this.args;
    let count = 0;
    let k = s;
    while (k < e) {
      while (k < e && isBlank(lb[k]!)) k++;
      if (k >= e) break;
      if (count > MAX_ARGS) return count;
      const start = k;
      while (k < e && !isBlank(lb[k]!)) k++;
      args[2 * count] = start;
      args[2 * count + 1] = k;
      count++;
    }
    return count;
  }

  protected arg(lb: Buffer, idx: number): string {
    return decode(lb, this.args[2 * idx]!, this.args[2 * idx + 1]!);
  }

  protected sizeArg(lb: Buffer, idx: number): number {
    return parseSize(lb, this.args[2 * idx]!, this.args[2 * idx + 1]!);
  }

  /** The subject argument, from the one-entry cache when its bytes repeat the previous subject's. */
  protected subjectArg(lb: Buffer, idx: number): string {
    return this.subjectAt(lb, this.args[2 * idx]!, this.args[2 * idx + 1]!);
  }

  protected subjectAt(lb: Buffer, s: number, e: number): string {
    const len = e - s;
    if (len === this.lastSubjectLen) {
      const c = this.lastSubjectBytes!;
      let k = 0;
      while (k < len && c[k] === lb[s + k]) k++;
      if (k === len) return this.lastSubject;
    }
    const subject = decode(lb, s, e);
    if (len <= SUBJECT_CACHE_BYTES) {
      lb.copy((this.lastSubjectBytes ??= Buffer.allocUnsafe(SUBJECT_CACHE_BYTES)), 0, s, e);
      this.lastSubjectLen = len;
      this.lastSubject = subject;
    }
    return subject;
  }

  /** The text of a `-ERR` line (from `lb[s]`, after the op), single quotes removed. */
  protected errText(lb: Buffer, s: number, e: number): string {
    while (s < e && (lb[s] === 0x20 || lb[s] === 0x09)) s++;
    while (e > s && (lb[e - 1] === 0x20 || lb[e - 1] === 0x09)) e--;
    if (e - s >= 2 && lb[s] === 0x27 && lb[e - 1] === 0x27) {
      s++;
      e--;
    }
    return lb.toString('utf8', s, e);
  }

  /** The JSON object after an INFO / CONNECT op, or null when it is not one. */
  protected jsonObject(lb: Buffer, s: number, e: number): Record<string, unknown> | null {
    let v: unknown;
    try {
      v = JSON.parse(lb.toString('utf8', s, e));
    } catch {
      return null;
    }
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  }
}

/** Whether `lb[s...]` holds the lower-case ASCII `word`, case-insensitively. */
export function matchLower(lb: Buffer, s: number, word: string): boolean {
  if (s + word.length > lb.length) return false;
  for (let k = 0; k < word.length; k++) if (lc(lb[s + k]!) !== word.charCodeAt(k)) return false;
  return true;
}
