/**
 * The NATS parser of a server's side of a connection (`NatsServerParser`): what a client sends (CONNECT, PUB, HPUB,
 * SUB, UNSUB, PING, PONG, and +OK / -ERR / INFO which clients rarely send), as nats-server 2.9.10's parser reads
 * it. The rules every parser follows (case, blanks, line ends, limits, errors, who owns a payload's memory) are in
 * parser-base.ts; the client's side is client-parser.ts.
 */
import { badArgs, CR, isBlank, lc, LF, matchLower, NatsParserBase, type NatsParserOptions, OP_HPUB, OP_PUB, parseSize, unknownOp } from './parser-base.js';

/**
 * CONNECT's JSON, typed. Fields absent from the JSON (or null) are absent here: the connection applies
 * nats-server's defaults (verbose/pedantic false as nats.js sends them, echo true, headers false, ...).
 * A field of the wrong type refuses the CONNECT (nats-server's JSON decoding fails the same way); unknown fields
 * are ignored.
 */
export interface ConnectOptions {
  verbose?: boolean;
  pedantic?: boolean;
  tls_required?: boolean;
  auth_token?: string;
  user?: string;
  pass?: string;
  name?: string;
  lang?: string;
  version?: string;
  protocol?: number;
  echo?: boolean;
  headers?: boolean;
  no_responders?: boolean;
  sig?: string;
  jwt?: string;
  nkey?: string;
}

/** What a server reads. `reply` and `queue` are null when absent. */
export interface NatsServerHandler {
  onConnect(opts: ConnectOptions): void;
  onPub(subject: string, reply: string | null, payload: Buffer): void;
  onHpub(subject: string, reply: string | null, headers: Buffer, payload: Buffer): void;
  onSub(subject: string, queue: string | null, sid: string): void;
  /** `max` null: no max given (or not a number, as nats-server reads it); 0 is passed through. */
  onUnsub(sid: string, max: number | null): void;
  onPing(): void;
  onPong(): void;
  /** A client's `+OK` (nats-server ignores it). */
  onOk(): void;
  /** A client's `-ERR '<text>'`, quotes removed (nats-server closes the connection on it). */
  onErr(text: string): void;
}

const CONNECT_BOOLS = ['verbose', 'pedantic', 'tls_required', 'echo', 'headers', 'no_responders'] as const;
const CONNECT_STRINGS = ['auth_token', 'user', 'pass', 'name', 'lang', 'version', 'sig', 'jwt', 'nkey'] as const;

/** CONNECT's JSON as typed options, or null when a known field has the wrong type. */
export function connectOptionsOf(o: Record<string, unknown>): ConnectOptions | null {
  const out: ConnectOptions = {};
  for (const k of CONNECT_BOOLS) {
    const v = o[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'boolean') return null;
    out[k] = v;
  }
  for (const k of CONNECT_STRINGS) {
    const v = o[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'string') return null;
    out[k] = v;
  }
  const p = o['protocol'];
  if (p !== undefined && p !== null) {
    if (typeof p !== 'number' || !Number.isInteger(p)) return null;
    out.protocol = p;
  }
  return out;
}

/** Reads what a NATS client sends (the broker's side of a connection). */
export class NatsServerParser extends NatsParserBase<NatsServerHandler> {
  constructor(options: NatsParserOptions) {
    super(options);
    this.fastA = 0x70; // p (PUB; HPUB's h is always tried)
  }

  protected override opInChunk(chunk: Buffer, i: number, h: NatsServerHandler): number {
    let k: number;
    let withHeaders: boolean;
    if (lc(chunk[i]!) === 0x70) {
      if (lc(chunk[i + 1]!) !== 0x75 || lc(chunk[i + 2]!) !== 0x62) return -2;
      k = i + 3;
      withHeaders = false;
    } else {
      if (lc(chunk[i + 1]!) !== 0x70 || lc(chunk[i + 2]!) !== 0x75 || lc(chunk[i + 3]!) !== 0x62) return -2;
      k = i + 4;
      withHeaders = true;
    }
    const sep = chunk[k];
    if (sep !== 0x20 && sep !== 0x09) return -2;
    const nl = this.scanArgs(chunk, i, k + 1);
    if (nl < 0) return -2;
    const count = this.argCount;
    const args = this.args;
    // PUB <subject> [reply] <size>, HPUB <subject> [reply] <header size> <total size>
    const base = withHeaders ? 3 : 2;
    if (count !== base && count !== base + 1) return -2;
    const size = parseSize(chunk, args[2 * count - 2]!, args[2 * count - 1]!);
    const hdr = withHeaders ? parseSize(chunk, args[2 * count - 4]!, args[2 * count - 3]!) : 0;
    if (size < 0 || hdr < 0 || hdr > size || size > this.maxPayload) return -2;
    const subject = this.subjectAt(chunk, args[0]!, args[1]!);
    const reply = count === base + 1 ? this.scannedArg(chunk, 1) : null;
    const next = nl + 1;
    const end = next + size;
    if (end + 2 <= chunk.length) {
      if (chunk[end] !== CR || chunk[end + 1] !== LF) throw unknownOp();
      if (withHeaders) {
        h.onHpub(subject, reply, this.payloadOf(chunk, next, next + hdr), this.payloadOf(chunk, next + hdr, end));
      } else h.onPub(subject, reply, this.payloadOf(chunk, next, end));
      return end + 2;
    }
    this.pOp = withHeaders ? OP_HPUB : OP_PUB;
    this.pSubject = subject;
    this.pReply = reply;
    this.pHdr = hdr;
    return this.startPayload(chunk, next, size, h);
  }

  protected line(lb: Buffer, s: number, e: number, chunk: Buffer, next: number, h: NatsServerHandler): number {
    const len = e - s;
    if (len === 0) throw unknownOp();
    const c0 = lc(lb[s]!);
    if (c0 === 0x70 /* p */ && len >= 3) {
      const c1 = lc(lb[s + 1]!);
      if (c1 === 0x75 /* u */ && lc(lb[s + 2]!) === 0x62 /* b */) {
        if (len === 3 || !isBlank(lb[s + 3]!)) throw unknownOp();
        return this.pub(lb, s + 4, e, chunk, next, h);
      }
      if (len >= 4) {
        const c2 = lc(lb[s + 2]!);
        const c3 = lc(lb[s + 3]!);
        if (c1 === 0x69 /* i */ && c2 === 0x6e /* n */ && c3 === 0x67 /* g */) {
          h.onPing();
          return next;
        }
        if (c1 === 0x6f /* o */ && c2 === 0x6e /* n */ && c3 === 0x67 /* g */) {
          h.onPong();
          return next;
        }
      }
      throw unknownOp();
    }
    switch (c0) {
      case 0x68 /* h */:
        if (len >= 4 && lc(lb[s + 1]!) === 0x70 && lc(lb[s + 2]!) === 0x75 && lc(lb[s + 3]!) === 0x62) {
          if (len === 4 || !isBlank(lb[s + 4]!)) throw unknownOp();
          return this.hpub(lb, s + 5, e, chunk, next, h);
        }
        throw unknownOp();
      case 0x73 /* s */:
        if (len >= 3 && lc(lb[s + 1]!) === 0x75 && lc(lb[s + 2]!) === 0x62) {
          if (len === 3 || !isBlank(lb[s + 3]!)) throw unknownOp();
          const n = this.splitArgs(lb, s + 4, e);
          if (n === 2) h.onSub(this.arg(lb, 0), null, this.arg(lb, 1));
          else if (n === 3) h.onSub(this.arg(lb, 0), this.arg(lb, 1), this.arg(lb, 2));
          else throw badArgs('SUB', '<subject> [queue] <sid>');
          return next;
        }
        throw unknownOp();
      case 0x75 /* u */:
        if (len >= 5 && lc(lb[s + 1]!) === 0x6e && lc(lb[s + 2]!) === 0x73 && lc(lb[s + 3]!) === 0x75 && lc(lb[s + 4]!) === 0x62) {
          if (len === 5 || !isBlank(lb[s + 5]!)) throw unknownOp();
          const n = this.splitArgs(lb, s + 6, e);
          if (n === 1) h.onUnsub(this.arg(lb, 0), null);
          else if (n === 2) {
            const max = this.sizeArg(lb, 1);
            h.onUnsub(this.arg(lb, 0), max < 0 ? null : max);
          } else throw badArgs('UNSUB', '<sid> [max]');
          return next;
        }
        throw unknownOp();
      case 0x63 /* c */:
        if (len >= 7 && matchLower(lb, s + 1, 'onnect')) {
          // nats-server closes silently on a bare CONNECT (no JSON), and calls any other letter an unknown op.
          if (len === 7) throw badArgs('CONNECT', '<json>');
          if (!isBlank(lb[s + 7]!)) throw unknownOp();
          const o = this.jsonObject(lb, s + 8, e);
          const opts = o === null ? null : connectOptionsOf(o);
          if (opts === null) throw badArgs('CONNECT', 'a JSON object with typed fields');
          h.onConnect(opts);
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
      case 0x69 /* i */:
        // A client's INFO: nats-server reads it only from routes, gateways and leaf nodes.
        if (len >= 4 && lc(lb[s + 1]!) === 0x6e && lc(lb[s + 2]!) === 0x66 && lc(lb[s + 3]!) === 0x6f) return next;
        throw unknownOp();
      default:
        throw unknownOp();
    }
  }

  private pub(lb: Buffer, s: number, e: number, chunk: Buffer, next: number, h: NatsServerHandler): number {
    const n = this.splitArgs(lb, s, e);
    let reply: string | null = null;
    let size: number;
    if (n === 2) size = this.sizeArg(lb, 1);
    else if (n === 3) size = this.sizeArg(lb, 2);
    else throw badArgs('PUB', '<subject> [reply] <size>');
    if (size < 0) throw badArgs('PUB', '<subject> [reply] <size>');
    if (size > this.maxPayload) throw this.payloadTooLarge(size);
    const subject = this.subjectArg(lb, 0);
    if (n === 3) reply = this.arg(lb, 1);
    const end = next + size;
    if (end + 2 <= chunk.length) {
      if (chunk[end] !== CR || chunk[end + 1] !== LF) throw unknownOp();
      h.onPub(subject, reply, this.payloadOf(chunk, next, end));
      return end + 2;
    }
    this.pOp = OP_PUB;
    this.pSubject = subject;
    this.pReply = reply;
    return this.startPayload(chunk, next, size, h);
  }

  private hpub(lb: Buffer, s: number, e: number, chunk: Buffer, next: number, h: NatsServerHandler): number {
    const n = this.splitArgs(lb, s, e);
    if (n !== 3 && n !== 4) throw badArgs('HPUB', '<subject> [reply] <header size> <total size>');
    const hdr = this.sizeArg(lb, n - 2);
    const size = this.sizeArg(lb, n - 1);
    if (hdr < 0 || size < 0 || hdr > size) throw badArgs('HPUB', '<subject> [reply] <header size> <total size>');
    if (size > this.maxPayload) throw this.payloadTooLarge(size);
    const subject = this.subjectArg(lb, 0);
    const reply = n === 4 ? this.arg(lb, 1) : null;
    const end = next + size;
    if (end + 2 <= chunk.length) {
      if (chunk[end] !== CR || chunk[end + 1] !== LF) throw unknownOp();
      h.onHpub(subject, reply, this.payloadOf(chunk, next, next + hdr), this.payloadOf(chunk, next + hdr, end));
      return end + 2;
    }
    this.pOp = OP_HPUB;
    this.pSubject = subject;
    this.pReply = reply;
    this.pHdr = hdr;
    return this.startPayload(chunk, next, size, h);
  }

  protected deliverPending(buf: Buffer, h: NatsServerHandler): void {
    if (this.pOp === OP_PUB) h.onPub(this.pSubject, this.pReply, buf);
    else h.onHpub(this.pSubject, this.pReply, buf.subarray(0, this.pHdr), buf.subarray(this.pHdr));
  }
}
