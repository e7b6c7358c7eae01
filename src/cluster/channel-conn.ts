/**
 * The cluster channel's wire (see channel.ts for the design): one TCP (or TLS, channel-tls.ts) connection, either end (`Conn`): frames of a
 * fixed 11-byte header ([u32 length][u8 type][u32 request id][u16 method code]) read in place from the socket's
 * chunks, method names bound to codes once per connection (DEFINE), and the batched writer (small frames staged into
 * one buffer, large bodies by reference, one write per event-loop turn). What the frames mean is the channel's
 * business (its dispatch callbacks).
 */
import type { Socket } from 'node:net';
import { FlowError } from '../core/index.js';

export const HEADER = 11;
export const PRE_AUTH_MAX_FRAME = 4096;
/** Small frames are concatenated into one buffer per write; bodies at least this big are written as they are. */
export const COPY_BELOW = 16 * 1024;
/** Size of a connection's staging buffer for small frames. */
export const STAGE_BYTES = 64 * 1024;
export const EMPTY = Buffer.alloc(0);

export const enum T {
  REQUEST = 1,
  REPLY = 2,
  ERROR = 3,
  ONEWAY = 4,
  DEFINE = 5,
  PING = 6,
  PONG = 7,
  HELLO = 10,
  AUTH = 11,
  WELCOME = 12,
  REFUSE = 13,
}

/** One frame with no method, outside a connection's writer (a refusal written before a Conn exists). */
export function encodeFrame(type: number, body: Buffer): Buffer {
  const out = Buffer.allocUnsafe(HEADER + body.length);
  out.writeUInt32BE(HEADER - 4 + body.length, 0);
  out[4] = type;
  out.writeUInt32BE(0, 5);
  out.writeUInt16BE(0, 9);
  body.copy(out, HEADER);
  return out;
}

/** Per-peer figures (both directions). */
export interface PeerFigures {
  sentFrames: number;
  sentBytes: number;
  receivedFrames: number;
  receivedBytes: number;
  dropped: number;
  connects: number;
  connectFailures: number;
  timeouts: number;
  rejectedOnLoss: number;
}

export function newFigures(): PeerFigures {
  return { sentFrames: 0, sentBytes: 0, receivedFrames: 0, receivedBytes: 0, dropped: 0, connects: 0, connectFailures: 0, timeouts: 0, rejectedOnLoss: 0 };
}

/**
 * One TCP connection, either end: framing, method codes, the batched writer. What the frames mean is the
 * channel's business (dispatch callbacks).
 */
export class Conn {
  readonly socket: Socket;
  /** Set once authenticated. */
  peer = -1;
  peerInc = '';
  authed = false;
  closed = false;
  lastRx = Date.now();
  private chunks: Buffer[] = [];
  /** Read position in chunks[0]. */
  private off = 0;
  /** Unread bytes in chunks. */
  private have = 0;
  /** Pieces ready for the socket, in order. */
  private out: Buffer[] = [];
  outBytes = 0;
  /**
   * The staging buffer small frames are written into. Bytes handed to the socket are never overwritten: writing
   * only moves forward, and a full buffer is replaced, not reused.
   */
  private stage: Buffer = EMPTY;
  private stagePos = 0;
  private stageStart = 0;
  private flushing = false;
  private readonly methodsOut = new Map<string, number>();
  readonly methodsIn = new Map<number, string>();
  figures: PeerFigures | null = null;
  /** Called after each write to the socket (the dialer's ready() waiters). */
  afterFlush: (() => void) | null = null;
  /** Accepted side: requests being handled. */
  inflight = 0;
  paused = false;

  constructor(
    socket: Socket,
    private readonly maxFrame: number,
    private readonly onFrame: (c: Conn, type: number, id: number, method: number, body: Buffer) => void,
    private readonly onError: (c: Conn, reason: string) => void,
  ) {
    this.socket = socket;
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 10_000);
    socket.on('data', (chunk: Buffer) => this.data(chunk));
  }

  private data(chunk: Buffer): void {
    this.lastRx = Date.now();
    this.chunks.push(chunk);
    this.have += chunk.length;
    // Frames are read in place (`off` into the first chunk); a frame spanning chunks costs one concat when it is
    // complete, never one per chunk.
    while (!this.closed && this.have >= 4) {
      let head = this.chunks[0];
      let off = this.off;
      if (head.length - off < 4) {
        head = this.merge();
        off = 0;
      }
      const len = head.readUInt32BE(off);
      const limit = this.authed ? this.maxFrame + HEADER - 4 : PRE_AUTH_MAX_FRAME;
      if (len < HEADER - 4 || len > limit) {
        this.onError(this, len < HEADER - 4 ? `malformed frame (length ${len})` : `frame of ${len} bytes over the limit of ${limit}`);
        return;
      }
      const total = 4 + len;
      if (this.have < total) return;
      if (head.length - off < total) {
        head = this.merge();
        off = 0;
      }
      const type = head[off + 4];
      const id = head.readUInt32BE(off + 5);
      const code = head.readUInt16BE(off + 9);
      // Bodies are views of the socket's chunk, except a request's or reply's that is a small part of a large chunk:
      // it is copied, so that a handler keeping it (a forwarded batch in a partition's in-memory tail) does not pin
      // the whole chunk (64 KiB for a 1 KiB batch). One-way bodies (live messages, at the highest rates) are not
      // copied: measured, the copy costs 20-30% of the channel's CPU per small message, and their listeners decode
      // them into fresh buffers anyway (decodeStoredMessage copies). A listener that keeps a one-way body copies it.
      let body = head.subarray(off + HEADER, off + total);
      if (type !== T.ONEWAY && total * 4 < head.length) body = Buffer.from(body);
      if (head.length - off === total) {
        this.chunks.shift();
        this.off = 0;
      } else this.off = off + total;
      this.have -= total;
      if (this.figures) {
        this.figures.receivedFrames++;
        this.figures.receivedBytes += total;
      }
      this.onFrame(this, type, id, code, body);
    }
  }

  /** The unread bytes as one buffer. */
  private merge(): Buffer {
    this.chunks[0] = this.chunks[0].subarray(this.off);
    this.off = 0;
    const all = Buffer.concat(this.chunks, this.have);
    this.chunks = [all];
    return all;
  }

  /** Queues a frame; written with the others of this event-loop turn. */
  write(type: number, id: number, method: string | null, body: Buffer): void {
    if (this.closed) return;
    let code = 0;
    if (method !== null) {
      const known = this.methodsOut.get(method);
      if (known === undefined) {
        code = this.methodsOut.size + 1;
        if (code > 0xffff) throw new FlowError('LIMIT_EXCEEDED', 'too many channel methods');
        this.methodsOut.set(method, code);
        this.write(T.DEFINE, code, null, Buffer.from(method));
      } else code = known;
    }
    // Header and small body are copied into the staging buffer (no allocation per frame; the bytes of a turn end
    // up contiguous); a large body is referenced as it is, after the staged bytes before it.
    const small = body.length < COPY_BELOW;
    const need = HEADER + (small ? body.length : 0);
    let st = this.stage;
    if (st.length - this.stagePos < need) {
      this.cut();
      st = this.stage = Buffer.allocUnsafe(Math.max(STAGE_BYTES, need));
      this.stagePos = this.stageStart = 0;
    }
    let pos = this.stagePos;
    st.writeUInt32BE(HEADER - 4 + body.length, pos);
    st[pos + 4] = type;
    st.writeUInt32BE(id, pos + 5);
    st.writeUInt16BE(code, pos + 9);
    pos += HEADER;
    if (small) pos += body.copy(st, pos);
    this.stagePos = pos;
    if (!small) {
      this.cut();
      this.out.push(body);
    }
    this.outBytes += HEADER + body.length;
    if (this.figures) {
      this.figures.sentFrames++;
      this.figures.sentBytes += HEADER + body.length;
    }
    if (!this.flushing) {
      this.flushing = true;
      setImmediate(() => this.flush());
    }
  }

  /** Bytes not yet on the wire. */
  get queued(): number {
    return this.outBytes + this.socket.writableLength;
  }

  /** The staged bytes not yet handed out become one piece of the output. */
  private cut(): void {
    if (this.stagePos > this.stageStart) {
      this.out.push(this.stage.subarray(this.stageStart, this.stagePos));
      this.stageStart = this.stagePos;
    }
  }

  flush(): void {
    this.flushing = false;
    if (this.closed) return;
    this.cut();
    if (this.out.length === 0) return;
    const out = this.out;
    this.out = [];
    this.outBytes = 0;
    const s = this.socket;
    if (out.length === 1) s.write(out[0]);
    else {
      s.cork();
      for (const b of out) s.write(b);
      s.uncork();
    }
    this.afterFlush?.();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.out = [];
    this.outBytes = 0;
    this.chunks = [];
    this.socket.destroy();
  }

  /** Writes what is queued, then ends the connection (a graceful close). */
  end(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    this.socket.end();
  }
}
