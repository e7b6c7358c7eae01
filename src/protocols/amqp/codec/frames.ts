/**
 * Frames (AMQP 0-9-1 §4.2.3): type octet, channel short, size long, payload, frame-end 0xCE; and the streaming
 * reader a connection handler feeds with socket chunks.
 */
import { AmqpCodecError } from './errors.js';
import {
  FRAME_BODY,
  FRAME_END,
  FRAME_HEADER,
  FRAME_HEARTBEAT,
  FRAME_METHOD,
  FRAME_OVERHEAD,
  PROTOCOL_HEADER,
  type FrameType,
} from './constants.js';
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

  constructor(options: FrameReaderOptions = {}) {
    this.frameMax = options.frameMax ?? 0;
    this.expectHeader = options.protocolHeader ?? true;
  }

  /** Bytes pushed and not yet returned as frames. */
  get buffered(): number {
    return this.size;
  }

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.size += chunk.length;
  }

  /** The next complete frame (or the protocol header first), or null until more bytes arrive. */
  read(): AmqpFrame | ProtocolHeaderFrame | null {
    if (this.expectHeader) {
      if (this.size < 8) return null;
      const bytes = this.take(8);
      this.expectHeader = false;
      return { type: 'protocol-header', bytes, supported: bytes.equals(PROTOCOL_HEADER) };
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
    if (this.size < total) return null;
    let payload: Buffer;
    let end: number;
    if (chunk.length - this.offset >= total) {
      payload = chunk.subarray(this.offset + 7, this.offset + 7 + length);
      end = chunk[this.offset + 7 + length]!;
      this.skip(total);
    } else {
      const all = this.take(total);
      payload = all.subarray(7, 7 + length);
      end = all[7 + length]!;
    }
    if (end !== FRAME_END) {
      throw new AmqpCodecError(501, `frame-end octet 0x${end.toString(16).padStart(2, '0')}, expected 0xce`);
    }
    return { type: type as FrameType, channel, payload };
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
    } else if (this.first > 64) {
      this.chunks = this.chunks.slice(this.first);
      this.first = 0;
    }
  }
}
