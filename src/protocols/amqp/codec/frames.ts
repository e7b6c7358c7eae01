/**
 * Frames (AMQP 0-9-1 §4.2.3): type octet, channel short, size long, payload, frame-end 0xCE; and the streaming
 * reader a connection handler feeds with socket chunks.
 */
import { AmqpCodecError } from './errors.js';
import { FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, FRAME_OVERHEAD, PROTOCOL_HEADER, type FrameType } from './constants.js';
import { checkUint } from './reader.js';

export interface AmqpFrame {
  type: FrameType;
  channel: number;
  /**
   * The payload. A view into the chunks given to `push` when the frame lay in one chunk (no copy): copy it
   * (`Buffer.from`) before keeping it beyond the handling of this frame, or it pins the whole chunk.
   */
  payload: Buffer;
}

/** What the client sent first (§4.2.2). */
export interface ProtocolHeaderFrame {
  type: 'protocol-header';
  /** The 8 bytes as received. */
  bytes: Buffer;
  /** True for 'AMQP' 0 0 9 1. Otherwise the server writes PROTOCOL_HEADER and closes the socket. */
  supported: boolean;
}

/** The heartbeat frame: type 8, channel 0, empty payload. */
export const HEARTBEAT_FRAME: Buffer = Buffer.from([FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END]);

/** One frame of any type around a payload (copies the payload). */
export function encodeFrame(type: FrameType, channel: number, payload: Uint8Array): Buffer {
  checkUint(channel, 0xffff, 'channel');
  const buf = Buffer.allocUnsafe(payload.length + FRAME_OVERHEAD);
  buf[0] = type;
  buf.writeUInt16BE(channel, 1);
  buf.writeUInt32BE(payload.length, 3);
  buf.set(payload, 7);
  buf[payload.length + 7] = FRAME_END;
  return buf;
}

export interface FrameReaderOptions {
  /**
   * Largest frame accepted, overhead included (0 = no limit). A frame announcing a larger size is refused with
   * 501 as soon as its 7-byte header is in, before its payload is buffered. Change it with `frameMax` after
   * connection.tune-ok.
   */
  frameMax?: number;
  /** Expect the 8-byte protocol header first (a server: true, the default). */
  protocolHeader?: boolean;
  /**
   * The chunks given to `push` are borrowed: their memory is reused once the caller returns (the listener's
   * shared read buffer, src/protocols/read-into.ts). The caller then calls `read` until it returns null before
   * returning, and the reader copies what it keeps of the chunk (an incomplete frame) at that point. Frames
   * returned are still views when they lay in one chunk: valid while the caller handles them.
   */
  borrowed?: boolean;
}

/**
 * Streaming frame reader: `push` socket chunks, then call `read` until it returns null. It copies only when a
 * frame spans chunks, keeps at most one incomplete frame (bounded by frameMax), and throws AmqpCodecError(501)
 * on an unknown frame type, a bad frame-end octet, an oversized frame, or a malformed heartbeat. After a throw
 * the reader is unusable: the connection is closed anyway.
 */
export class FrameReader {
  frameMax: number;
  private expectHeader: boolean;
  private chunks: Buffer[] = [];
  /** Index of the first live chunk, and the read offset in it. */
  private first = 0;
  private offset = 0;
  private size = 0;
  private readonly head = Buffer.alloc(7);
  private readonly borrowed: boolean;
  /** Chunks from this index on are borrowed and not yet copied (borrowed mode). */
  private borrowedFrom = 0;
  /**
   * The frame being received, once its header is in and it is incomplete (frame-max set): one buffer that the
   * following chunks are copied into, so a frame trickling in as many small reads holds one buffer of at most
   * frame-max bytes, not a list of chunks (each of which may pin a whole read buffer). It grows by doubling up to
   * the frame's size as bytes arrive, so 7 bytes announcing a large frame cost 4 KiB, not frame-max.
   */
  private pending: Buffer | null = null;
  private pendingTotal = 0;
  private pendingFill = 0;

  constructor(options: FrameReaderOptions = {}) {
    this.frameMax = options.frameMax ?? 0;
    this.expectHeader = options.protocolHeader ?? true;
    this.borrowed = options.borrowed ?? false;
  }

  /** Bytes pushed and not yet returned as frames. */
  get buffered(): number {
    return this.size + this.pendingFill;
  }

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    if (this.borrowed && this.borrowedFrom < this.chunks.length) {
      // The earlier chunk's memory may already hold these bytes: its rest is lost. A caller bug, not bad input.
      throw new Error('FrameReader: push() before read() returned null, with borrowed chunks');
    }
    this.chunks.push(chunk);
    this.size += chunk.length;
  }

  /** The next complete frame (or the protocol header first), or null until more bytes arrive. */
  read(): AmqpFrame | ProtocolHeaderFrame | null {
    const f = this.next();
    if (f === null && this.borrowed) this.retain();
    return f;
  }

  /**
   * Borrowed mode: copies the unread bytes of the borrowed chunks (each byte is copied once while it waits).
   * `read` does it when it returns null; call it to stop reading frames earlier (e.g. to pause a busy connection)
   * and still keep the rest of the chunk.
   */
  retain(): void {
    for (let i = Math.max(this.first, this.borrowedFrom); i < this.chunks.length; i++) {
      const c = this.chunks[i]!;
      if (i === this.first) {
        this.chunks[i] = Buffer.from(c.subarray(this.offset));
        this.offset = 0;
      } else {
        this.chunks[i] = Buffer.from(c);
      }
    }
    this.borrowedFrom = this.chunks.length;
  }

  private next(): AmqpFrame | ProtocolHeaderFrame | null {
    if (this.expectHeader) {
      if (this.size < 8) return null;
      const bytes = this.take(8);
      this.expectHeader = false;
      return { type: 'protocol-header', bytes, supported: bytes.equals(PROTOCOL_HEADER) };
    }
    if (this.pending !== null) {
      const n = Math.min(this.pendingTotal - this.pendingFill, this.size);
      const frame = this.room(this.pendingFill + n);
      this.copyOut(frame, this.pendingFill, n);
      this.skip(n);
      this.pendingFill += n;
      if (this.pendingFill < this.pendingTotal) return null;
      this.pending = null;
      this.pendingFill = 0;
      // its header was checked when it started; `room` never grows it past the frame's size
      return frameOf(frame[0] as FrameType, frame.readUInt16BE(1), frame, 7, frame.length - 1);
    }
    if (this.size < 7) return null;
    const chunk = this.chunks[this.first]!;
    let head: Buffer;
    let at: number;
    if (chunk.length - this.offset >= 7) {
      head = chunk;
      at = this.offset;
    } else {
      this.copyOut(this.head, 0, 7);
      head = this.head;
      at = 0;
    }
    const type = head[at]!;
    const channel = head.readUInt16BE(at + 1);
    const length = head.readUInt32BE(at + 3);
    if (type !== FRAME_METHOD && type !== FRAME_HEADER && type !== FRAME_BODY && type !== FRAME_HEARTBEAT) {
      // Also what a client sending a second protocol header, or TLS to a plain port, looks like.
      throw new AmqpCodecError(501, `unknown frame type ${type}`);
    }
    if (this.frameMax !== 0 && length + FRAME_OVERHEAD > this.frameMax) {
      throw new AmqpCodecError(501, `frame of ${length + FRAME_OVERHEAD} bytes exceeds frame-max ${this.frameMax}`);
    }
    if (type === FRAME_HEARTBEAT && (channel !== 0 || length !== 0)) {
      throw new AmqpCodecError(501, `heartbeat frame on channel ${channel} with ${length} payload bytes`);
    }
    const total = length + FRAME_OVERHEAD;
    if (this.size < total) {
      if (this.frameMax !== 0) {
        // bounded by frame-max (checked above): start the frame's own buffer. Without a frame-max a hostile
        // size could be anything, so the chunks stay as they are until the frame is complete.
        this.pending = Buffer.allocUnsafe(Math.min(total, Math.max(4096, 2 * this.size)));
        this.pendingTotal = total;
        this.pendingFill = this.size;
        this.copyOut(this.pending, 0, this.size);
        this.skip(this.size);
      }
      return null;
    }
    if (chunk.length - this.offset >= total) {
      const at = this.offset;
      this.skip(total);
      return frameOf(type as FrameType, channel, chunk, at + 7, at + 7 + length);
    }
    return frameOf(type as FrameType, channel, this.take(total), 7, 7 + length);
  }

  /** The pending frame's buffer with room for `need` bytes: doubled (capped at the frame's size) when short. */
  private room(need: number): Buffer {
    const cur = this.pending!;
    if (cur.length >= need) return cur;
    const grown = Buffer.allocUnsafe(Math.min(this.pendingTotal, Math.max(need, 2 * cur.length)));
    cur.copy(grown, 0, 0, this.pendingFill);
    this.pending = grown;
    return grown;
  }

  /** Copies `n` buffered bytes starting at the read position into dst (does not consume). */
  private copyOut(dst: Buffer, dstAt: number, n: number): void {
    let i = this.first;
    let off = this.offset;
    while (n > 0) {
      const c = this.chunks[i]!;
      const k = Math.min(n, c.length - off);
      c.copy(dst, dstAt, off, off + k);
      dstAt += k;
      n -= k;
      i++;
      off = 0;
    }
  }

  private take(n: number): Buffer {
    const out = Buffer.allocUnsafe(n);
    this.copyOut(out, 0, n);
    this.skip(n);
    return out;
  }

  private skip(n: number): void {
    this.size -= n;
    while (n > 0) {
      const c = this.chunks[this.first]!;
      const left = c.length - this.offset;
      if (n < left) {
        this.offset += n;
        return;
      }
      n -= left;
      this.chunks[this.first] = undefined as unknown as Buffer; // release it now
      this.first++;
      this.offset = 0;
    }
    if (this.first === this.chunks.length) {
      this.chunks.length = 0;
      this.first = 0;
      this.borrowedFrom = 0;
    } else if (this.first > 64) {
      this.chunks = this.chunks.slice(this.first);
      this.borrowedFrom = Math.max(0, this.borrowedFrom - this.first);
      this.first = 0;
    }
  }
}

/** The frame whose payload is buf[start, end), after checking the frame-end octet at buf[end]. */
function frameOf(type: FrameType, channel: number, buf: Buffer, start: number, end: number): AmqpFrame {
  const octet = buf[end]!;
  if (octet !== FRAME_END) {
    throw new AmqpCodecError(501, `frame-end octet 0x${octet.toString(16).padStart(2, '0')}, expected 0xce`);
  }
  return { type, channel, payload: buf.subarray(start, end) };
}
