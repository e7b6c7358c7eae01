/**
 * NATS encoders. Server side: INFO, +OK, PING, PONG, -ERR, and MSG / HMSG deliveries written into a NatsWriter,
 * so a connection batches many deliveries into one socket write. Client side (benchmark, raw-socket tests):
 * CONNECT, PUB, HPUB, SUB, UNSUB, also as writer methods for a load generator.
 *
 * Strings (subjects, sids, replies) are written by a per-character loop while they are ASCII, which for the
 * short strings of a delivery is cheaper than Buffer.write's native call; a non-ASCII remainder goes through
 * Buffer.write (UTF-8). Room is reserved for the worst case (3 bytes per UTF-16 unit), so there is one capacity
 * check per message.
 */
import type { ConnectOptions } from './parser.js';

export const OK = Buffer.from('+OK\r\n', 'latin1');
export const PING = Buffer.from('PING\r\n', 'latin1');
export const PONG = Buffer.from('PONG\r\n', 'latin1');

/** `INFO <json>\r\n`. */
export function encodeInfo(info: object): Buffer {
  return Buffer.from(`INFO ${JSON.stringify(info)}\r\n`, 'utf8');
}

/** `-ERR '<text>'\r\n`, worded as nats-server does (see NatsErrText). */
export function encodeErr(text: string): Buffer {
  return Buffer.from(`-ERR '${text.replace(/[\r\n]/g, ' ')}'\r\n`, 'utf8');
}

/** Below this many bytes a payload is copied by a loop; above, by TypedArray.set (memmove). */
const SMALL_COPY = 64;

/** Writes `s` at `pos` (room for 3 bytes per char reserved); returns the position after it. */
function putStr(buf: Buffer, pos: number, s: string): number {
  const n = s.length;
  for (let k = 0; k < n; k++) {
    const c = s.charCodeAt(k);
    if (c > 0x7f) return pos + buf.write(k === 0 ? s : s.slice(k), pos, 'utf8');
    buf[pos++] = c;
  }
  return pos;
}

/** Writes a non-negative integer in decimal. */
function putInt(buf: Buffer, pos: number, v: number): number {
  if (v < 10) {
    buf[pos] = 0x30 + v;
    return pos + 1;
  }
  let digits = 1;
  for (let t = v; t >= 10; t = Math.floor(t / 10)) digits++;
  let p = pos + digits;
  for (let t = v; p > pos; t = Math.floor(t / 10)) buf[--p] = 0x30 + (t % 10);
  return pos + digits;
}

function putBytes(buf: Buffer, pos: number, b: Uint8Array): number {
  const n = b.length;
  if (n < SMALL_COPY) {
    for (let k = 0; k < n; k++) buf[pos + k] = b[k]!;
  } else {
    buf.set(b, pos);
  }
  return pos + n;
}

/** Largest slab a writer grows to by itself (a single batch larger than this gets a buffer of its size). */
const MAX_SLAB = 1024 * 1024;

/** Bytes reserved for a decimal size and the separators around it. */
const INT_ROOM = 12;

/**
 * A growable output buffer for one connection. Writes append; `take()` returns everything written since the
 * last take as one Buffer (a view of the writer's slab, which the writer never writes again: hand it to
 * socket.write as is) and the next writes go after it. When a slab is full a new one is allocated (the taken
 * views keep the old one alive until written) and what was written since the last take is copied over; each
 * time that happens the writer's slab size doubles, up to 1 MiB, so a busy connection rarely copies.
 */
export class NatsWriter {
  private buf: Buffer;
  private start = 0;
  private pos = 0;
  /** Size of the next slab: starts at the constructor's, doubles (to MAX_SLAB) each time a batch straddles two. */
  private slab: number;

  constructor(slabBytes = 64 * 1024) {
    this.slab = slabBytes;
    this.buf = Buffer.allocUnsafe(slabBytes);
  }

  /** Makes the next slab at least `bytes` (a writer made small for a connection that turns out to get deliveries). */
  minSlab(bytes: number): void {
    if (this.slab < bytes) this.slab = Math.min(MAX_SLAB, bytes);
  }

  /** Bytes written and not yet taken. */
  get length(): number {
    return this.pos - this.start;
  }

  /** Makes room for `n` more bytes. */
  reserve(n: number): void {
    if (this.pos + n > this.buf.length) this.grow(n);
  }

  private grow(n: number): void {
    const pending = this.pos - this.start;
    // A batch that does not fit the rest of the slab is copied to the new one: a busy writer gets bigger slabs,
    // so that such copies stay rare compared with the bytes written (a 1 KiB fan-out with 64 KiB flushes copied
    // about one byte in two with fixed 64 KiB slabs).
    if (pending > 0 && this.slab < MAX_SLAB) this.slab = Math.min(MAX_SLAB, 2 * this.slab);
    const size = Math.max(this.slab, 2 * (pending + n));
    const next = Buffer.allocUnsafe(size);
    if (pending > 0) this.buf.copy(next, 0, this.start, this.pos);
    this.buf = next;
    this.start = 0;
    this.pos = pending;
  }

  /** Everything written since the last take, or null when nothing was. */
  take(): Buffer | null {
    if (this.pos === this.start) return null;
    const out = this.buf.subarray(this.start, this.pos);
    this.start = this.pos;
    return out;
  }

  /** Drops what was written and not taken (a connection closing). */
  clear(): void {
    this.pos = this.start;
  }

  writeBytes(b: Uint8Array): void {
    this.reserve(b.length);
    this.pos = putBytes(this.buf, this.pos, b);
  }

  /** `MSG <subject> <sid> [reply] <size>\r\n<payload>\r\n` */
  writeMsg(subject: string, sid: string, reply: string | null, payload: Uint8Array): void {
    this.frame(OP_MSG, subject, sid, reply, null, payload);
  }

  /** `HMSG <subject> <sid> [reply] <header size> <total size>\r\n<headers><payload>\r\n` */
  writeHmsg(subject: string, sid: string, reply: string | null, headers: Uint8Array, payload: Uint8Array): void {
    this.frame(OP_HMSG, subject, sid, reply, headers, payload);
  }

  /** Client side: `PUB <subject> [reply] <size>\r\n<payload>\r\n` */
  writePub(subject: string, reply: string | null, payload: Uint8Array): void {
    this.frame(OP_PUB, subject, null, reply, null, payload);
  }

  /** Client side: `HPUB <subject> [reply] <header size> <total size>\r\n<headers><payload>\r\n` */
  writeHpub(subject: string, reply: string | null, headers: Uint8Array, payload: Uint8Array): void {
    this.frame(OP_HPUB, subject, null, reply, headers, payload);
  }

  /**
   * One frame of the four kinds: `<op> <subject> [sid] [reply] [<header size>] <size>\r\n[headers]<payload>\r\n`.
   * The op bytes include their trailing space. Strings are reserved at 3 bytes per UTF-16 unit (their UTF-8 worst
   * case), so one reserve covers the whole frame.
   */
  private frame(op: Uint8Array, subject: string, sid: string | null, reply: string | null, headers: Uint8Array | null, payload: Uint8Array): void {
    const strs = subject.length + (sid === null ? 0 : sid.length + 1) + (reply === null ? 0 : reply.length + 1);
    const hlen = headers === null ? 0 : headers.length;
    this.reserve(op.length + 3 * strs + 2 * INT_ROOM + hlen + payload.length + 4);
    const buf = this.buf;
    let p = putBytes(buf, this.pos, op);
    p = putStr(buf, p, subject);
    buf[p++] = 0x20;
    if (sid !== null) {
      p = putStr(buf, p, sid);
      buf[p++] = 0x20;
    }
    if (reply !== null) {
      p = putStr(buf, p, reply);
      buf[p++] = 0x20;
    }
    if (headers !== null) {
      p = putInt(buf, p, hlen);
      buf[p++] = 0x20;
    }
    p = putInt(buf, p, hlen + payload.length);
    buf[p] = 0x0d;
    buf[p + 1] = 0x0a;
    p += 2;
    if (headers !== null) p = putBytes(buf, p, headers);
    p = putBytes(buf, p, payload);
    buf[p] = 0x0d;
    buf[p + 1] = 0x0a;
    this.pos = p + 2;
  }
}

const OP_MSG = Buffer.from('MSG ');
const OP_HMSG = Buffer.from('HMSG ');
const OP_PUB = Buffer.from('PUB ');
const OP_HPUB = Buffer.from('HPUB ');

/** Free-function forms of the writer's delivery methods. */
export function writeMsg(w: NatsWriter, subject: string, sid: string, reply: string | null, payload: Uint8Array): void {
  w.writeMsg(subject, sid, reply, payload);
}

export function writeHmsg(w: NatsWriter, subject: string, sid: string, reply: string | null, headers: Uint8Array, payload: Uint8Array): void {
  w.writeHmsg(subject, sid, reply, headers, payload);
}

/** One MSG as its own Buffer (tests, rare paths). */
export function encodeMsg(subject: string, sid: string, reply: string | null, payload: Uint8Array): Buffer {
  const w = new NatsWriter(64 + payload.length);
  w.writeMsg(subject, sid, reply, payload);
  return w.take()!;
}

/** One HMSG as its own Buffer. */
export function encodeHmsg(subject: string, sid: string, reply: string | null, headers: Uint8Array, payload: Uint8Array): Buffer {
  const w = new NatsWriter(64 + headers.length + payload.length);
  w.writeHmsg(subject, sid, reply, headers, payload);
  return w.take()!;
}

// ------------------------------------------------------------------------------------------------ client side

/** `CONNECT <json>\r\n` */
export function encodeConnect(opts: ConnectOptions & Record<string, unknown>): Buffer {
  return Buffer.from(`CONNECT ${JSON.stringify(opts)}\r\n`, 'utf8');
}

export function encodePub(subject: string, reply: string | null, payload: Uint8Array): Buffer {
  const w = new NatsWriter(64 + payload.length);
  w.writePub(subject, reply, payload);
  return w.take()!;
}

export function encodeHpub(subject: string, reply: string | null, headers: Uint8Array, payload: Uint8Array): Buffer {
  const w = new NatsWriter(64 + headers.length + payload.length);
  w.writeHpub(subject, reply, headers, payload);
  return w.take()!;
}

/** `SUB <subject> [queue] <sid>\r\n` */
export function encodeSub(subject: string, sid: string, queue: string | null = null): Buffer {
  return Buffer.from(queue === null ? `SUB ${subject} ${sid}\r\n` : `SUB ${subject} ${queue} ${sid}\r\n`, 'utf8');
}

/** `UNSUB <sid> [max]\r\n` */
export function encodeUnsub(sid: string, max: number | null = null): Buffer {
  return Buffer.from(max === null ? `UNSUB ${sid}\r\n` : `UNSUB ${sid} ${max}\r\n`, 'utf8');
}
