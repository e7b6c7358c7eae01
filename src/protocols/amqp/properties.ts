/**
 * AMQP basic properties ↔ the core's Message.
 *
 * - headers: the table's encoded bytes go to `msg.amqpHeaders` untouched, so an AMQP consumer gets every value
 *   back with its wire type (a 'b' stays a 'b', an 'l' an 'l'); the same entries go to `msg.headers` as bytes for
 *   the other protocols (MQTT v5 user properties, Kafka record headers): text as UTF-8, numbers in decimal,
 *   booleans as true/false, byte arrays as they are, nested tables and arrays as JSON. A message from another
 *   protocol reaches an AMQP consumer with its headers as long strings ('S') where they are UTF-8, else byte
 *   arrays ('x').
 * - delivery-mode 2 → persistent (and QoS 1 for MQTT subscribers), 1 → transient (QoS 0); absent: unsaid.
 * - expiration (per-message TTL in ms, a decimal string as RabbitMQ requires: anything else is 406) → expiresAt,
 *   counted from the broker's receipt, and amqpExpiration: AMQP consumers get the value back exactly as sent (as
 *   RabbitMQ passes properties on); messages from other protocols get the time left.
 * - timestamp (seconds) → msg.timestamp in ms. A publisher's timestamp is kept exactly (a multiple of 1000 ms);
 *   a message without one gets the broker's receipt time, never a multiple of 1000 ms (1 ms added when it falls on
 *   one), so that delivery can tell the two apart and add no timestamp the publisher did not send. Messages from
 *   other protocols carry their timestamp (seconds) to AMQP consumers.
 * - reply-to ↔ responseTopic as a unified topic: the name with its separators swapped (`a.b` ↔ `a/b`), the
 *   mapping of routing keys on `amq.topic`, so an MQTT v5 responder publishing to the Response Topic reaches an AMQP
 *   queue bound on amq.topic with the reply-to key, and an AMQP server replying on amq.topic with the routing key
 *   reply-to reaches the MQTT requester. A plain queue name survives the round trip unchanged (a bijection).
 * - correlation-id (shortstr) ↔ correlationData (UTF-8 bytes). MQTT v5 correlation data is binary: data that is no
 *   valid shortstr (not UTF-8, or above 255 bytes) travels in the header `x-correlation-id` (a byte array) instead,
 *   and that header (byte array or long string) of a publish without correlation-id becomes the correlation data
 *   again, as RabbitMQ's MQTT plugin maps it: an AMQP responder that copies the header answers an MQTT requester
 *   with its bytes intact. content-type, content-encoding, message-id, type,
 *   app-id, user-id, priority one to one; cluster-id (deprecated in 0-9-1) is dropped.
 * - dead-letter history (msg.deaths) → x-death and x-first-death-* headers as RabbitMQ writes them.
 */
import { isUtf8 } from 'node:buffer';
import { makeMessage, swapSeparators, type DeathRecord, type Header, type Message } from '../../core/index.js';
import { AmqpError } from './errors.js';
import { Typed, decodeTable, encodeTable, fieldNumber, type FieldTable, type FieldValue, type BasicProperties } from './codec/index.js';

/** The unified topic space: routing keys there are unified topics with the separators swapped. */
export const TOPIC_EXCHANGE = 'amq.topic';

export { swapSeparators };

/** Where correlation data that is no valid shortstr travels (RabbitMQ's MQTT plugin uses the same header). */
const CORRELATION_HEADER = 'x-correlation-id';

const TRUE = Buffer.from('true');
const FALSE = Buffer.from('false');

function jsonSafe(v: FieldValue): unknown {
  if (v === null || v === undefined) return null;
  if (typeof v === 'bigint') return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString();
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'string') return v;
  if (v instanceof Date) return Math.floor(v.getTime() / 1000);
  if (v instanceof Typed) {
    if (v.type === 'S') return (v.value as Buffer).toString('base64');
    if (v.type === 'T') return Number(v.value as bigint);
    const n = fieldNumber(v);
    if (n !== undefined) return n;
    return typeof v.value === 'bigint' ? v.value.toString() : null;
  }
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.length).toString('base64');
  if (Array.isArray(v)) return v.map(jsonSafe);
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(v)) out[k] = jsonSafe((v as FieldTable)[k]);
  return out;
}

/** A field table as JSON-safe values (definitions' rawArguments, equivalence checks). */
export function tableToJson(t: FieldTable | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (!t) return out;
  for (const k of Object.keys(t)) {
    const v = t[k];
    if (v !== undefined) out[k] = jsonSafe(v);
  }
  return out;
}

/** One header value as bytes for the other protocols. */
function headerBytes(v: FieldValue): Buffer | null {
  if (v === null || v === undefined) return null;
  if (typeof v === 'string') return Buffer.from(v, 'utf8');
  if (typeof v === 'boolean') return v ? TRUE : FALSE;
  if (typeof v === 'number' || typeof v === 'bigint') return Buffer.from(String(v));
  if (v instanceof Typed) {
    if (v.type === 'S') return v.value as Buffer;
    if (v.type === 'T' || typeof v.value === 'bigint') return Buffer.from(String(v.value));
    const n = fieldNumber(v);
    return Buffer.from(String(n));
  }
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.length);
  if (v instanceof Date) return Buffer.from(String(Math.floor(v.getTime() / 1000)));
  return Buffer.from(JSON.stringify(jsonSafe(v)));
}

export function headersOf(t: FieldTable): Header[] {
  const out: Header[] = [];
  for (const key of Object.keys(t)) {
    const v = t[key];
    if (v === undefined) continue;
    out.push({ key, value: headerBytes(v) });
  }
  return out;
}

/** A field value's type class as RabbitMQ's headers exchange compares it (rabbit_misc:type_class); null: void. */
function headerClass(v: FieldValue): string | null {
  if (v === null || v === undefined) return null;
  if (typeof v === 'boolean') return 'bool';
  if (typeof v === 'number' || typeof v === 'bigint') return 'int';
  if (typeof v === 'string') return 'str';
  if (v instanceof Typed) {
    if (v.type === 'f' || v.type === 'd') return 'float';
    if (v.type === 'S') return 'str';
    if (v.type === 'T') return 'timestamp';
    if (v.type === 'D') return 'decimal';
    return 'int';
  }
  if (v instanceof Uint8Array) return 'bytes';
  if (v instanceof Date) return 'timestamp';
  return Array.isArray(v) ? 'array' : 'table';
}

/** The type classes of a publish's headers, by key (Message.amqpHeaderClasses). */
export function headerClassesOf(t: FieldTable): Map<string, string> {
  const out = new Map<string, string>();
  for (const key of Object.keys(t)) {
    const c = headerClass(t[key]);
    if (c !== null) out.set(key, c);
  }
  return out;
}

/** The parts of a publish the message is built from. */
export interface PublishInput {
  exchange: string;
  routingKey: string;
  props: BasicProperties;
  body: Buffer;
  /** Connection id (for no-local). */
  origin: string;
  /** The authenticated user, when the broker checks credentials: user-id must match it (as RabbitMQ). */
  user: string | null;
}

/** Builds the core message of a basic.publish; AmqpError 406 for an invalid expiration or a foreign user-id. */
export function messageOfPublish(p: PublishInput, now: number): Message {
  const props = p.props;
  let timestamp: number;
  if (props.timestamp !== undefined) {
    timestamp = Number(props.timestamp) * 1000;
  } else {
    timestamp = now % 1000 === 0 ? now + 1 : now;
  }
  const msg = makeMessage(p.exchange === TOPIC_EXCHANGE ? swapSeparators(p.routingKey) : p.routingKey, p.body, { timestamp, origin: AMQP_ORIGIN + p.origin });
  if (props.deliveryMode !== undefined) {
    msg.persistent = props.deliveryMode === 2;
    if (msg.persistent) msg.qos = 1;
  }
  if (props.expiration !== undefined) {
    const e = props.expiration;
    if (!/^\d{1,15}$/.test(e)) throw new AmqpError(406, `invalid expiration '${e}': not a non-negative integer of milliseconds`, 60, 40);
    // Counted from receipt: msg.timestamp is the receipt time unless the publisher set its own.
    msg.expiresAt = (props.timestamp === undefined ? timestamp : now) + Number(e);
    msg.amqpExpiration = e;
  }
  if (props.contentType !== undefined) msg.contentType = props.contentType;
  if (props.contentEncoding !== undefined) msg.contentEncoding = props.contentEncoding;
  if (props.correlationId !== undefined) msg.correlationData = Buffer.from(props.correlationId, 'utf8');
  if (props.replyTo !== undefined) msg.responseTopic = swapSeparators(props.replyTo);
  if (props.messageId !== undefined) msg.messageId = props.messageId;
  if (props.type !== undefined) msg.type = props.type;
  if (props.appId !== undefined) msg.appId = props.appId;
  if (props.userId !== undefined) {
    if (p.user !== null && props.userId !== p.user) {
      throw new AmqpError(406, `user_id property set to '${props.userId}' but authenticated user was '${p.user}'`, 60, 40);
    }
    msg.userId = props.userId;
  }
  if (props.priority !== undefined) msg.priority = props.priority;
  if (props.rawHeaders !== undefined && props.rawHeaders.length > 4) {
    msg.amqpHeaders = props.rawHeaders;
    const table = props.headers ?? decodeTable(props.rawHeaders);
    msg.headers = headersOf(table);
    msg.amqpHeaderClasses = headerClassesOf(table);
  } else if (props.headers !== undefined && Object.keys(props.headers).length > 0) {
    msg.amqpHeaders = encodeTable(props.headers);
    msg.headers = headersOf(props.headers);
    msg.amqpHeaderClasses = headerClassesOf(props.headers);
  }
  if (props.correlationId === undefined && msg.headers.length > 0) {
    // Binary correlation data (see the top of this file): the correlation again, not a user property.
    const i = msg.headers.findIndex((h) => h.key === CORRELATION_HEADER);
    const v = i >= 0 ? msg.headers[i]!.value : null;
    if (v !== null) {
      msg.correlationData = v;
      msg.headers.splice(i, 1);
    }
  }
  return msg;
}

function deathTable(d: DeathRecord): FieldTable {
  const t: FieldTable = {
    count: new Typed('l', BigInt(d.count)),
    reason: d.reason,
    queue: d.queue,
    time: new Typed('T', BigInt(Math.floor(d.time / 1000))),
    exchange: d.exchange,
    'routing-keys': d.routingKeys.slice(),
  };
  if (d.originalExpiration !== undefined) t['original-expiration'] = d.originalExpiration;
  return t;
}

/** The headers table of a delivery: the publisher's bytes, or one built from msg.headers, plus x-death. */
function headersTableOf(msg: Message): { raw?: Buffer; table?: FieldTable } {
  const deaths = msg.deaths;
  if (deaths === undefined || deaths.length === 0) {
    if (msg.amqpHeaders !== undefined) return { raw: msg.amqpHeaders };
    if (msg.headers.length === 0) return {};
  }
  const t: FieldTable = msg.amqpHeaders !== undefined ? decodeTable(msg.amqpHeaders) : {};
  if (msg.amqpHeaders === undefined) {
    for (const h of msg.headers) t[h.key] = h.value === null ? null : isUtf8(h.value) ? h.value.toString('utf8') : h.value;
  }
  if (deaths !== undefined && deaths.length > 0) {
    t['x-death'] = deaths.map(deathTable);
    const first = deaths[deaths.length - 1]!;
    if (t['x-first-death-reason'] === undefined) {
      t['x-first-death-reason'] = first.reason;
      t['x-first-death-queue'] = first.queue;
      t['x-first-death-exchange'] = first.exchange;
    }
  }
  return { table: t };
}

/**
 * Origin of AMQP publishes: `amqp:` and the connection id (no other protocol's origin has this form: MQTT's is a
 * client id used for no-local, which AMQP does not implement, as RabbitMQ does not).
 */
export const AMQP_ORIGIN = 'amqp:';

/** True when the message was published over AMQP (its timestamp and expiration follow the rules above). */
function fromAmqp(msg: Message): boolean {
  return msg.origin !== undefined && msg.origin.startsWith(AMQP_ORIGIN);
}

/** The basic properties a consumer receives for `msg`. */
export function propertiesOf(msg: Message, now: number): BasicProperties {
  const p: BasicProperties = {};
  if (msg.contentType !== undefined) p.contentType = msg.contentType;
  if (msg.contentEncoding !== undefined) p.contentEncoding = msg.contentEncoding;
  let h = headersTableOf(msg);
  const corr = msg.correlationData;
  if (corr !== undefined) {
    if (corr.length <= 255 && isUtf8(corr)) p.correlationId = corr.toString('utf8');
    else {
      // No shortstr: the bytes go in x-correlation-id (unless the publisher's own headers carry it already).
      const t = h.table ?? (h.raw !== undefined ? decodeTable(h.raw) : {});
      if (t[CORRELATION_HEADER] === undefined) t[CORRELATION_HEADER] = Buffer.from(corr);
      h = { table: t };
    }
  }
  if (h.raw !== undefined) p.rawHeaders = h.raw;
  else if (h.table !== undefined) p.headers = h.table;
  // A message whose publisher did not say (MQTT, Kafka) is persistent when it was published with a delivery guarantee
  // (MQTT QoS >= 1), as RabbitMQ's MQTT plugin marks it; QoS 0 stays unsaid.
  if (msg.persistent !== undefined) p.deliveryMode = msg.persistent ? 2 : 1;
  else if (msg.qos > 0) p.deliveryMode = 2;
  if (msg.priority !== undefined) p.priority = msg.priority;
  if (msg.responseTopic !== undefined) {
    const r = swapSeparators(msg.responseTopic);
    if (Buffer.byteLength(r) <= 255) p.replyTo = r;
  }
  const amqp = fromAmqp(msg);
  const ownTimestamp = msg.timestamp % 1000 === 0;
  // An AMQP publisher's expiration as it sent it (RabbitMQ passes it on unchanged); for other protocols' messages (and
  // AMQP messages stored before it was kept) the time left, or the TTL when the receipt time is known.
  if (msg.amqpExpiration !== undefined) p.expiration = msg.amqpExpiration;
  else if (msg.expiresAt !== undefined) {
    p.expiration = String(amqp && !ownTimestamp ? msg.expiresAt - msg.timestamp : Math.max(0, msg.expiresAt - now));
  }
  if (msg.messageId !== undefined) p.messageId = msg.messageId;
  if (!amqp || ownTimestamp) p.timestamp = Math.floor(msg.timestamp / 1000);
  if (msg.type !== undefined) p.type = msg.type;
  if (msg.userId !== undefined) p.userId = msg.userId;
  if (msg.appId !== undefined) p.appId = msg.appId;
  return p;
}
