/**
 * Handlers that record what the NATS parsers call, as plain arrays (payloads copied as latin1 strings, so a view
 * into a chunk the test reuses cannot change a recorded value).
 */
import {
  NatsClientParser,
  NatsProtocolError,
  NatsServerParser,
  type ConnectOptions,
  type NatsClientHandler,
  type NatsLimits,
  type NatsParserOptions,
  type NatsServerHandler,
} from '../../../../src/protocols/nats/codec/index.js';

export type Op = Array<string | number | null | object>;

const str = (b: Buffer): string => b.toString('latin1');

export class ServerRecorder implements NatsServerHandler {
  readonly ops: Op[] = [];
  /** ownedPayload seen at each payload delivery. */
  readonly owned: boolean[] = [];
  constructor(private readonly parser?: NatsServerParser) {}
  onConnect(opts: ConnectOptions): void {
    this.ops.push(['CONNECT', opts]);
  }
  onPub(subject: string, reply: string | null, payload: Buffer): void {
    if (this.parser) this.owned.push(this.parser.ownedPayload);
    this.ops.push(['PUB', subject, reply, str(payload)]);
  }
  onHpub(subject: string, reply: string | null, headers: Buffer, payload: Buffer): void {
    if (this.parser) this.owned.push(this.parser.ownedPayload);
    this.ops.push(['HPUB', subject, reply, str(headers), str(payload)]);
  }
  onSub(subject: string, queue: string | null, sid: string): void {
    this.ops.push(['SUB', subject, queue, sid]);
  }
  onUnsub(sid: string, max: number | null): void {
    this.ops.push(['UNSUB', sid, max]);
  }
  onPing(): void {
    this.ops.push(['PING']);
  }
  onPong(): void {
    this.ops.push(['PONG']);
  }
  onOk(): void {
    this.ops.push(['+OK']);
  }
  onErr(text: string): void {
    this.ops.push(['-ERR', text]);
  }
}

export class ClientRecorder implements NatsClientHandler {
  readonly ops: Op[] = [];
  onInfo(info: Record<string, unknown>): void {
    this.ops.push(['INFO', info]);
  }
  onMsg(subject: string, sid: string, reply: string | null, payload: Buffer): void {
    this.ops.push(['MSG', subject, sid, reply, str(payload)]);
  }
  onHmsg(subject: string, sid: string, reply: string | null, headers: Buffer, payload: Buffer): void {
    this.ops.push(['HMSG', subject, sid, reply, str(headers), str(payload)]);
  }
  onOk(): void {
    this.ops.push(['+OK']);
  }
  onErr(text: string): void {
    this.ops.push(['-ERR', text]);
  }
  onPing(): void {
    this.ops.push(['PING']);
  }
  onPong(): void {
    this.ops.push(['PONG']);
  }
}

export const LIMITS: NatsLimits = { maxControlLine: 4096, maxPayload: 1024 * 1024 };

export interface Outcome {
  ops: Op[];
  /** The error's errText ('' for no error; null for an error closing silently). */
  error: string | null | undefined;
}

/** Feeds `chunks` to a fresh server parser; the ops seen and the error, if any. */
export function serverParse(chunks: Buffer[], limits: NatsParserOptions = LIMITS): Outcome & { owned: boolean[] } {
  const p = new NatsServerParser(limits);
  const r = new ServerRecorder(p);
  let error: string | null | undefined;
  try {
    for (const c of chunks) p.push(c, r);
  } catch (e) {
    if (!(e instanceof NatsProtocolError)) throw e;
    error = e.errText;
  }
  return { ops: r.ops, error, owned: r.owned };
}

export function clientParse(chunks: Buffer[], limits: NatsParserOptions = LIMITS): Outcome {
  const p = new NatsClientParser(limits);
  const r = new ClientRecorder();
  let error: string | null | undefined;
  try {
    for (const c of chunks) p.push(c, r);
  } catch (e) {
    if (!(e instanceof NatsProtocolError)) throw e;
    error = e.errText;
  }
  return { ops: r.ops, error };
}

/** `buf` cut at `points` (sorted offsets). */
export function cut(buf: Buffer, points: number[]): Buffer[] {
  const out: Buffer[] = [];
  let prev = 0;
  for (const p of points) {
    out.push(buf.subarray(prev, p));
    prev = p;
  }
  out.push(buf.subarray(prev));
  return out;
}

/** Every byte its own chunk, each a fresh copy (so a kept view would show). */
export function bytewise(buf: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < buf.length; i++) out.push(Buffer.from([buf[i]!]));
  return out;
}
