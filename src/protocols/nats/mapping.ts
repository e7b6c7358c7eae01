/**
 * Message mapping between NATS and the core: subjects and unified topics, and NATS headers onto a message and back.
 */
import type { Header, Message } from '../../core/index.js';
import { encodeHeaders, type NatsHeaders } from './codec/index.js';

/** The unified topic of a NATS subject, or null when the topic space cannot hold it (`+`, `#`, NUL). */
export function subjectToTopic(subject: string): string | null {
  for (let i = 0; i < subject.length; i++) {
    const c = subject.charCodeAt(i);
    if (c === 0x2b || c === 0x23 || c === 0) return null;
  }
  return swap(subject);
}

/** The NATS subject of a unified topic. */
export function topicToSubject(topic: string): string {
  return swap(topic);
}

/** The separator swap (topic.ts swapSeparators), with the common no-`/` case first. */
function swap(s: string): string {
  if (s.indexOf('/') < 0) return s.indexOf('.') < 0 ? s : s.replaceAll('.', '/');
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    out += c === '.' ? '/' : c === '/' ? '.' : c;
  }
  return out;
}

const MSG_ID = 'nats-msg-id';

/** A parsed HPUB header block onto a message being built. */
export function applyNatsHeaders(msg: Message, h: NatsHeaders): void {
  const out: Header[] = [];
  for (const [k, v] of h.entries) {
    out.push({ key: k, value: Buffer.from(v, 'utf8') });
    if (msg.messageId === undefined && k.length === MSG_ID.length && k.toLowerCase() === MSG_ID) msg.messageId = v;
    // The correlation of a reply to an MQTT v5 or AMQP requester (kept as a header too, as Nats-Msg-Id is).
    else if (msg.correlationData === undefined && k.length === CORRELATION_ID.length && k.toLowerCase() === CORRELATION_ID)
      msg.correlationData = correlationOf(v);
  }
  msg.headers = out;
  if (h.status !== null) msg.status = h.description === '' ? String(h.status) : `${h.status} ${h.description}`;
}

// One entry: a message fanned out to several NATS connections (or several times to one) is rendered once.
let lastMsg: Message | null = null;
let lastBlock: Buffer | null = null;

/**
 * The NATS/1.0 header block a message is delivered with, or null when it has nothing to put in one (MSG).
 */
export function natsHeaderBlock(msg: Message): Buffer | null {
  if (msg === lastMsg) return lastBlock;
  // Published by a NATS client: its block as it sent it.
  if (msg.natsHeaders !== undefined) return msg.natsHeaders;
  let block: Buffer | null = null;
  if (msg.headers.length > 0 || msg.status !== undefined || msg.contentType !== undefined || msg.correlationData !== undefined || msg.messageId !== undefined) {
    block = renderHeaderBlock(msg);
  }
  lastMsg = msg;
  lastBlock = block;
  return block;
}

function renderHeaderBlock(msg: Message): Buffer {
  const entries: Array<[string, string]> = [];
  let present: Set<string> | null = null;
  for (const h of msg.headers) {
    // A key NATS cannot carry is left out rather than rewritten (a rewritten key could collide with a real one).
    if (!validKey(h.key)) continue;
    entries.push([h.key, h.value === null ? '' : h.value.toString('utf8')]);
    (present ??= new Set()).add(h.key.toLowerCase());
  }
  const add = (k: string, v: string) => {
    if (present === null || !present.has(k.toLowerCase())) entries.push([k, v]);
  };
  if (msg.contentType !== undefined) add('Content-Type', msg.contentType);
  if (msg.correlationData !== undefined) add('Correlation-Id', utf8OrBase64(msg.correlationData));
  if (msg.messageId !== undefined) add('Nats-Msg-Id', msg.messageId);
  // A status is three digits and an optional description ("404 No Messages"); anything else is not rendered.
  let status: number | null = null;
  let description = '';
  if (msg.status !== undefined) {
    const m = /^(\d{3})(?:\s+(.*))?$/.exec(msg.status.trim());
    if (m !== null) {
      status = Number(m[1]);
      description = m[2] ?? '';
    }
  }
  // encodeHeaders puts a value holding CR or LF on one line (they become spaces): an MQTT user property, an AMQP
  // header or a Kafka record header may hold anything, and must not split the block or inject a header.
  return encodeHeaders({ status, description, entries });
}

/** A header key NATS can carry: printable ASCII without ':' (nats.js and nats-server read up to the first ':'). */
function validKey(k: string): boolean {
  if (k.length === 0) return false;
  for (let i = 0; i < k.length; i++) {
    const c = k.charCodeAt(i);
    if (c <= 0x20 || c >= 0x7f || c === 0x3a) return false;
  }
  return true;
}

const CORRELATION_ID = 'correlation-id';
const B64 = 'base64:';

/**
 * Correlation data as a header value: the text when it is UTF-8 that survives a header line (no control
 * character, no blank at either end: clients trim values) and does not start with `base64:`; else `base64:` and
 * the bytes in base64. correlationOf reads it back, so the bytes survive a NATS responder that copies the header.
 */
function utf8OrBase64(b: Buffer): string {
  const s = b.toString('utf8');
  // eslint-disable-next-line no-control-regex -- control characters cannot stand in a header line
  const text = Buffer.byteLength(s) === b.length && !s.includes('\uFFFD') && !/[\x00-\x1f\x7f]/.test(s) && s.trim() === s && !s.startsWith(B64);
  return text ? s : B64 + b.toString('base64');
}

/** The correlation data of a `Correlation-Id` header value (see utf8OrBase64). */
function correlationOf(v: string): Buffer {
  if (v.startsWith(B64)) {
    const b = Buffer.from(v.slice(B64.length), 'base64');
    if (b.toString('base64') === v.slice(B64.length)) return b;
  }
  return Buffer.from(v, 'utf8');
}
