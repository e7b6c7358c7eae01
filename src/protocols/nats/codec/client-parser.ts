/**
 * The NATS parser of a client's side of a connection (`NatsClientParser`): what a server sends (INFO, MSG, HMSG,
 * +OK, -ERR, PING, PONG), for the benchmark's load generator and raw-socket tests. The rules every parser follows
 * are in parser-base.ts.
 */
import {
  badArgs,
  CR,
  decode,
  isBlank,
  lc,
  LF,
  matchLower,
  NatsParserBase,
  type NatsParserOptions,
  OP_HMSG,
  OP_MSG,
  parseSize,
  SID_CACHE_BYTES,
  unknownOp,
} from './parser-base.js';

/** What a client reads. */
export interface NatsClientHandler {
  onInfo(info: Record<string, unknown>): void;
  onMsg(subject: string, sid: string, reply: string | null, payload: Buffer): void;
  onHmsg(subject: string, sid: string, reply: string | null, headers: Buffer, payload: Buffer): void;
  onOk(): void;
  onErr(text: string): void;
  onPing(): void;
  onPong(): void;
}

/** Reads what a NATS server sends (a client's side: the benchmark's load generator, raw-socket tests). */
export class NatsClientParser extends NatsParserBase<NatsClientHandler> {
  // One-entry sid cache: a subscriber's messages mostly carry the same sid.
  private lastSidBytes: Buffer | null = null;
  private lastSidLen = -1;
  private lastSid = '';

  constructor(options: NatsParserOptions) {
    super(options);
    this.fastA = 0x6d; // m (MSG; HMSG's h is always tried)
  }

  private sidAt(b: Buffer, s: number, e: number): string {
    const len = e - s;
    if (len === this.lastSidLen) {
      const c = this.lastSidBytes!;
      let k = 0;
      while (k < len && c[k] === b[s + k]) k++;
      if (k === len) return this.lastSid;
    }
    const sid = decode(b, s, e);
    if (len <= SID_CACHE_BYTES) {
      b.copy((this.lastSidBytes ??= Buffer.allocUnsafe(SID_CACHE_BYTES)), 0, s, e);
      this.lastSidLen = len;
      this.lastSid = sid;
    }
    return sid;
  }

  /** MSG/HMSG's fast path (see opInChunk). */
  protected override opInChunk(chunk: Buffer, i: number, h: NatsClientHandler): number {
    let k: number;
    let withHeaders: boolean;
    if (lc(chunk[i]!) === 0x6d) {
      if (lc(chunk[i + 1]!) !== 0x73 || lc(chunk[i + 2]!) !== 0x67) return -2;
      k = i + 3;
      withHeaders = false;
    } else {
      if (lc(chunk[i + 1]!) !== 0x6d || lc(chunk[i + 2]!) !== 0x73 || lc(chunk[i + 3]!) !== 0x67) return -2;
      k = i + 4;
      withHeaders = true;
    }
    const sep = chunk[k];
    if (sep !== 0x20 && sep !== 0x09) return -2;
    const nl = this.scanArgs(chunk, i, k + 1);
    if (nl < 0) return -2;
    const count = this.argCount;
    const args = this.args;
    // MSG <subject> <sid> [reply] <size>, HMSG <subject> <sid> [reply] <header size> <total size>
    const base = withHeaders ? 4 : 3;
    if (count !== base && count !== base + 1) return -2;
    const size = parseSize(chunk, args[2 * count - 2]!, args[2 * count - 1]!);
    const hdr = withHeaders ? parseSize(chunk, args[2 * count - 4]!, args[2 * count - 3]!) : 0;
    if (size < 0 || hdr < 0 || hdr > size || size > this.maxPayload) return -2;
    const subject = this.subjectAt(chunk, args[0]!, args[1]!);
    const sid = this.sidAt(chunk, args[2]!, args[3]!);
    const reply = count === base + 1 ? this.scannedArg(chunk, 2) : null;
    const next = nl + 1;
    const end = next + size;
    if (end + 2 <= chunk.length) {
      if (chunk[end] !== CR || chunk[end + 1] !== LF) throw unknownOp();
      if (withHeaders) {
        h.onHmsg(subject, sid, reply, this.payloadOf(chunk, next, next + hdr), this.payloadOf(chunk, next + hdr, end));
      } else h.onMsg(subject, sid, reply, this.payloadOf(chunk, next, end));
      return end + 2;
    }
    this.pOp = withHeaders ? OP_HMSG : OP_MSG;
    this.pSubject = subject;
    this.pSid = sid;
    this.pReply = reply;
    this.pHdr = hdr;
    return this.startPayload(chunk, next, size, h);
  }

  protected line(lb: Buffer, s: number, e: number, chunk: Buffer, next: number, h: NatsClientHandler): number {
    const len = e - s;
    if (len === 0) throw unknownOp();
    const c0 = lc(lb[s]!);
    switch (c0) {
      case 0x6d /* m */:
        if (len >= 3 && lc(lb[s + 1]!) === 0x73 && lc(lb[s + 2]!) === 0x67) {
          if (len === 3 || !isBlank(lb[s + 3]!)) throw unknownOp();
          return this.msg(lb, s + 4, e, chunk, next, h, false);
        }
        throw unknownOp();
      case 0x68 /* h */:
        if (len >= 4 && lc(lb[s + 1]!) === 0x6d && lc(lb[s + 2]!) === 0x73 && lc(lb[s + 3]!) === 0x67) {
          if (len === 4 || !isBlank(lb[s + 4]!)) throw unknownOp();
          return this.msg(lb, s + 5, e, chunk, next, h, true);
        }
        throw unknownOp();
      case 0x70 /* p */:
        if (len >= 4 && lc(lb[s + 2]!) === 0x6e && lc(lb[s + 3]!) === 0x67) {
          const c1 = lc(lb[s + 1]!);
          if (c1 === 0x69) {
            h.onPing();
            return next;
          }
          if (c1 === 0x6f) {
            h.onPong();
            return next;
          }
        }
        throw unknownOp();
      case 0x69 /* i */:
        if (len >= 4 && matchLower(lb, s + 1, 'nfo')) {
          if (len === 4 || !isBlank(lb[s + 4]!)) throw unknownOp();
          const o = this.jsonObject(lb, s + 5, e);
          if (o === null) throw badArgs('INFO', '<json object>');
          h.onInfo(o);
          return next;
        }
        throw unknownOp();
      case 0x2b /* + */:
        if (len >= 3 && lc(lb[s + 1]!) === 0x6f && lc(lb[s + 2]!) === 0x6b) {
          h.onOk();
          return next;
        }
        throw unknownOp();
      case 0x2d /* - */:
        if (len >= 4 && lc(lb[s + 1]!) === 0x65 && lc(lb[s + 2]!) === 0x72 && lc(lb[s + 3]!) === 0x72) {
          h.onErr(this.errText(lb, s + 4, e));
          return next;
        }
        throw unknownOp();
      default:
        throw unknownOp();
    }
  }

  private msg(lb: Buffer, s: number, e: number, chunk: Buffer, next: number, h: NatsClientHandler, withHeaders: boolean): number {
    const n = this.splitArgs(lb, s, e);
    const base = withHeaders ? 4 : 3;
    const usage = withHeaders ? '<subject> <sid> [reply] <header size> <total size>' : '<subject> <sid> [reply] <size>';
    const op = withHeaders ? 'HMSG' : 'MSG';
    if (n !== base && n !== base + 1) throw badArgs(op, usage);
    const size = this.sizeArg(lb, n - 1);
    const hdr = withHeaders ? this.sizeArg(lb, n - 2) : 0;
    if (size < 0 || hdr < 0 || hdr > size) throw badArgs(op, usage);
    if (size > this.maxPayload) throw this.payloadTooLarge(size);
    const subject = this.subjectArg(lb, 0);
    const sid = this.arg(lb, 1);
    const reply = n === base + 1 ? this.arg(lb, 2) : null;
    const end = next + size;
    if (end + 2 <= chunk.length) {
      if (chunk[end] !== CR || chunk[end + 1] !== LF) throw unknownOp();
      if (withHeaders) {
        h.onHmsg(subject, sid, reply, this.payloadOf(chunk, next, next + hdr), this.payloadOf(chunk, next + hdr, end));
      } else h.onMsg(subject, sid, reply, this.payloadOf(chunk, next, end));
      return end + 2;
    }
    this.pOp = withHeaders ? OP_HMSG : OP_MSG;
    this.pSubject = subject;
    this.pSid = sid;
    this.pReply = reply;
    this.pHdr = hdr;
    return this.startPayload(chunk, next, size, h);
  }

  protected deliverPending(buf: Buffer, h: NatsClientHandler): void {
    if (this.pOp === OP_MSG) h.onMsg(this.pSubject, this.pSid, this.pReply, buf);
    else h.onHmsg(this.pSubject, this.pSid, this.pReply, buf.subarray(0, this.pHdr), buf.subarray(this.pHdr));
  }
}
