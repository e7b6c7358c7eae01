/**
 * NATS message headers (HPUB / HMSG, ADR-4): a block `NATS/1.0[ <status>[ <description>]]\r\n`, then
 * `Key: value\r\n` lines, then an empty line. Keys keep their case (nats.js and nats-server compare them as
 * given); a key sent several times keeps every value, in order. A status line is how a server tells a requester
 * "503" (no responders) or "404 No Messages" / "408 Request Timeout" (JetStream pull).
 */
import { NatsProtocolError } from './errors.js';

export interface NatsHeaders {
  /** The status code of the first line (`503`), null when the line is only `NATS/1.0`. */
  status: number | null;
  /** The text after the status (`No Messages`), '' when none. */
  description: string;
  /** Header lines in order, one entry per line; values with surrounding blanks removed. */
  entries: Array<[string, string]>;
}

const VERSION = 'NATS/1.0';

function malformed(why: string): NatsProtocolError {
  return new NatsProtocolError(`malformed NATS header block: ${why}`, null);
}

const isBlank = (c: number): boolean => c === 0x20 || c === 0x09;

/**
 * Parses a header block (the first `headerSize` bytes of an HPUB/HMSG payload). Throws NatsProtocolError
 * (errText null: nats-server does not look inside headers, so the connection decides what to answer) when the
 * block does not start with `NATS/1.0`, a line does not end with `\r\n`, a header line has no `:` or an empty
 * key, the status is not three digits, or bytes follow the closing empty line.
 */
export function parseHeaders(block: Buffer): NatsHeaders {
  const n = block.length;
  let eol = block.indexOf('\r\n', 0, 'latin1');
  if (eol < 0) throw malformed('no line end after the version');
  if (eol < VERSION.length || block.toString('latin1', 0, VERSION.length) !== VERSION) {
    throw malformed('it does not start with NATS/1.0');
  }
  let status: number | null = null;
  let description = '';
  let k = VERSION.length;
  if (k < eol) {
    if (!isBlank(block[k]!)) throw malformed('the version is not followed by a blank');
    while (k < eol && isBlank(block[k]!)) k++;
    if (k < eol) {
      const s = k;
      while (k < eol && !isBlank(block[k]!)) k++;
      if (k - s !== 3) throw malformed('the status is not three digits');
      status = 0;
      for (let d = s; d < k; d++) {
        const v = block[d]! - 0x30;
        if (v < 0 || v > 9) throw malformed('the status is not three digits');
        status = status * 10 + v;
      }
      while (k < eol && isBlank(block[k]!)) k++;
      let e = eol;
      while (e > k && isBlank(block[e - 1]!)) e--;
      description = block.toString('utf8', k, e);
    }
  }
  const entries: Array<[string, string]> = [];
  let pos = eol + 2;
  for (;;) {
    if (pos >= n) throw malformed('no empty line at its end');
    eol = block.indexOf('\r\n', pos, 'latin1');
    if (eol < 0) throw malformed('a line does not end with CRLF');
    if (eol === pos) {
      if (eol + 2 !== n) throw malformed('bytes after its closing empty line');
      return { status, description, entries };
    }
    const colon = block.indexOf(0x3a, pos);
    if (colon < 0 || colon > eol) throw malformed('a header line has no colon');
    let ks = pos;
    let ke = colon;
    while (ks < ke && isBlank(block[ks]!)) ks++;
    while (ke > ks && isBlank(block[ke - 1]!)) ke--;
    if (ke === ks) throw malformed('a header line has an empty key');
    let vs = colon + 1;
    let ve = eol;
    while (vs < ve && isBlank(block[vs]!)) vs++;
    while (ve > vs && isBlank(block[ve - 1]!)) ve--;
    entries.push([block.toString('utf8', ks, ke), block.toString('utf8', vs, ve)]);
    pos = eol + 2;
  }
}

/**
 * Keys become tokens: characters a header line cannot carry (CR, LF, `:`, blanks, other control characters)
 * become `_` (an MQTT user property or AMQP header may hold anything; this keeps one key one header line).
 */
function safeKey(k: string): string {
  // eslint-disable-next-line no-control-regex
  return /[\u0000-\u0020:\u007f]/.test(k) ? k.replace(/[\u0000-\u0020:\u007f]/g, '_') : k;
}

/** Values cannot hold a line end: CR and LF become spaces (a value from another protocol must not add headers). */
function safeValue(v: string): string {
  return v.includes('\r') || v.includes('\n') ? v.replace(/[\r\n]/g, ' ') : v;
}

/**
 * Encodes a header block. A status must be 100..999; a description without a status is ignored. Keys and values
 * are made safe as safeKey / safeValue say, and an empty key is dropped: the result always parses back.
 */
export function encodeHeaders(h: { status?: number | null; description?: string; entries: ReadonlyArray<readonly [string, string]> }): Buffer {
  let s = VERSION;
  if (h.status !== undefined && h.status !== null) {
    if (!Number.isInteger(h.status) || h.status < 100 || h.status > 999) {
      throw new RangeError(`NATS header status must be three digits, not ${h.status}`);
    }
    s += ` ${h.status}`;
    if (h.description) s += ` ${safeValue(h.description)}`;
  }
  s += '\r\n';
  for (const [k, v] of h.entries) {
    const key = safeKey(k);
    if (key === '') continue;
    s += `${key}: ${safeValue(v)}\r\n`;
  }
  s += '\r\n';
  return Buffer.from(s, 'utf8');
}
