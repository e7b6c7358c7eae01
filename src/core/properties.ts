/**
 * Message properties as reserved `flowmq.*` record headers: how a message keeps its content type, correlation,
 * reply address, expiry, AMQP properties and dead-letter history when it passes through a stream (a stream
 * stores Kafka records, which only have key, value, headers and timestamp).
 *
 * The names and value encodings are a public contract: Kafka consumers of a stream see these headers, and a
 * Kafka producer may write them (docs/concepts.md, "Message properties across protocols"). Values are UTF-8 text where
 * the property is text or a number (so `kcat` and logs show them as they are), raw bytes where the property is
 * bytes, and JSON for the one structured property (the dead-letter history).
 *
 * What a record's producer may claim: a record's headers are whatever its producer wrote, and any Kafka client
 * with produce rights can write any header. So a reserved header is read back as the property it names when that
 * property is the publisher's to set (an AMQP publisher sets content-type, correlation-id, reply-to, expiration,
 * message-id, priority, delivery-mode, type, app-id, headers; an MQTT v5 publisher the MQTT ones), and is never
 * read back when the property is a fact the broker vouches for: `flowmq.user-id` (AMQP user-id, which the broker
 * checks against the authenticated user at publish, as RabbitMQ does) is written for Kafka consumers to see,
 * and dropped when a record becomes a message again. `flowmq.topic` is read back, and the engine limits a
 * produced record's topic to what its stream could have captured (engine.ts, produce).
 */
import type { DeathRecord, Header, Message } from './message.js';

/** Every reserved header name starts with this; names this broker does not know are passed on as plain headers. */
export const RESERVED_HEADER_PREFIX = 'flowmq.';

/** The reserved record headers, by the Message field they carry. */
export const PROPERTY_HEADERS = {
  /** The unified topic, when it differs from the stream's own topic. UTF-8. */
  topic: 'flowmq.topic',
  contentType: 'flowmq.content-type',
  contentEncoding: 'flowmq.content-encoding',
  /** Bytes, as published (MQTT v5 Correlation Data, AMQP correlation-id). */
  correlationData: 'flowmq.correlation-id',
  /** The unified topic a reply goes to (MQTT v5 Response Topic, AMQP reply-to). UTF-8. */
  responseTopic: 'flowmq.reply-to',
  /** Absolute expiry, ms since the epoch, decimal text. */
  expiresAt: 'flowmq.expires-at',
  messageId: 'flowmq.message-id',
  /** Decimal text, 0-255. */
  priority: 'flowmq.priority',
  /** "2" persistent, "1" transient (AMQP delivery-mode). */
  persistent: 'flowmq.delivery-mode',
  /** Decimal text, 0-255 (MQTT v5 Payload Format Indicator: 1 = UTF-8 text). */
  payloadFormat: 'flowmq.payload-format',
  type: 'flowmq.type',
  appId: 'flowmq.app-id',
  /** Written, never read back (see above). */
  userId: 'flowmq.user-id',
  /** The AMQP headers table, its encoded bytes as Message.amqpHeaders holds them. */
  amqpHeaders: 'flowmq.amqp-headers',
  /** The AMQP expiration property as published (a TTL in ms, decimal text). */
  amqpExpiration: 'flowmq.expiration',
  /** The NATS header block as published, its bytes as Message.natsHeaders holds them. */
  natsHeaders: 'flowmq.nats-headers',
  exchange: 'flowmq.exchange',
  routingKey: 'flowmq.routing-key',
  /** JSON: an array of DeathRecord objects, newest first. */
  deaths: 'flowmq.deaths',
} as const;

const H = PROPERTY_HEADERS;
const KNOWN = new Set<string>(Object.values(PROPERTY_HEADERS));

/** True for a header name this broker writes from a message's fields (and interprets when reading a record). */
export function isPropertyHeader(key: string): boolean {
  return key.startsWith(RESERVED_HEADER_PREFIX) && KNOWN.has(key);
}

/** True when the message has a property that is carried as a reserved header (the topic aside). */
export function hasHeaderProperties(m: Message): boolean {
  return (
    m.contentType !== undefined ||
    m.correlationData !== undefined ||
    m.responseTopic !== undefined ||
    m.expiresAt !== undefined ||
    m.payloadFormat !== undefined ||
    m.messageId !== undefined ||
    m.priority !== undefined ||
    m.persistent !== undefined ||
    m.contentEncoding !== undefined ||
    m.type !== undefined ||
    m.appId !== undefined ||
    m.userId !== undefined ||
    m.amqpHeaders !== undefined ||
    m.amqpExpiration !== undefined ||
    m.natsHeaders !== undefined ||
    m.exchange !== undefined ||
    m.routingKey !== undefined ||
    m.deaths !== undefined
  );
}

const text = (s: string) => Buffer.from(s, 'utf8');

/** Appends the reserved headers of the message's set properties to `out`, in a fixed order. */
export function writePropertyHeaders(m: Message, out: Header[]): void {
  if (m.contentType !== undefined) out.push({ key: H.contentType, value: text(m.contentType) });
  if (m.contentEncoding !== undefined) out.push({ key: H.contentEncoding, value: text(m.contentEncoding) });
  if (m.correlationData !== undefined) out.push({ key: H.correlationData, value: m.correlationData });
  if (m.responseTopic !== undefined) out.push({ key: H.responseTopic, value: text(m.responseTopic) });
  if (m.expiresAt !== undefined) out.push({ key: H.expiresAt, value: text(String(m.expiresAt)) });
  if (m.messageId !== undefined) out.push({ key: H.messageId, value: text(m.messageId) });
  if (m.priority !== undefined) out.push({ key: H.priority, value: text(String(m.priority)) });
  if (m.persistent !== undefined) out.push({ key: H.persistent, value: text(m.persistent ? '2' : '1') });
  if (m.payloadFormat !== undefined) out.push({ key: H.payloadFormat, value: text(String(m.payloadFormat)) });
  if (m.type !== undefined) out.push({ key: H.type, value: text(m.type) });
  if (m.appId !== undefined) out.push({ key: H.appId, value: text(m.appId) });
  if (m.userId !== undefined) out.push({ key: H.userId, value: text(m.userId) });
  if (m.amqpHeaders !== undefined) out.push({ key: H.amqpHeaders, value: m.amqpHeaders });
  if (m.amqpExpiration !== undefined) out.push({ key: H.amqpExpiration, value: text(m.amqpExpiration) });
  if (m.natsHeaders !== undefined) out.push({ key: H.natsHeaders, value: m.natsHeaders });
  if (m.exchange !== undefined) out.push({ key: H.exchange, value: text(m.exchange) });
  if (m.routingKey !== undefined) out.push({ key: H.routingKey, value: text(m.routingKey) });
  if (m.deaths !== undefined) out.push({ key: H.deaths, value: text(encodeDeaths(m.deaths)) });
}

/**
 * Sets the property a reserved header names on `m` (`topic` included). The first header of a name wins; a value
 * that does not parse, a repeated name and `flowmq.user-id` set nothing. Returns false for a name this broker does
 * not interpret (the caller keeps it as a plain header), true when the header was consumed.
 */
export function readPropertyHeader(m: Message, h: Header, topicSeen: boolean): boolean {
  const v = h.value;
  switch (h.key) {
    case H.topic:
      if (!topicSeen && v !== null) m.topic = v.toString('utf8');
      return true;
    case H.contentType:
      if (m.contentType === undefined && v !== null) m.contentType = v.toString('utf8');
      return true;
    case H.contentEncoding:
      if (m.contentEncoding === undefined && v !== null) m.contentEncoding = v.toString('utf8');
      return true;
    case H.correlationData:
      // A copy: the record's bytes may point into a borrowed batch.
      if (m.correlationData === undefined && v !== null) m.correlationData = Buffer.from(v);
      return true;
    case H.responseTopic:
      if (m.responseTopic === undefined && v !== null) m.responseTopic = v.toString('utf8');
      return true;
    case H.expiresAt: {
      const n = v === null ? NaN : parseDecimal(v.toString('latin1'));
      if (m.expiresAt === undefined && Number.isFinite(n)) m.expiresAt = n;
      return true;
    }
    case H.messageId:
      if (m.messageId === undefined && v !== null) m.messageId = v.toString('utf8');
      return true;
    case H.priority: {
      const n = v === null ? NaN : parseOctet(v.toString('latin1'));
      if (m.priority === undefined && !Number.isNaN(n)) m.priority = n;
      return true;
    }
    case H.persistent: {
      const s = v?.toString('latin1');
      if (m.persistent === undefined && (s === '1' || s === '2')) m.persistent = s === '2';
      return true;
    }
    case H.payloadFormat: {
      const n = v === null ? NaN : parseOctet(v.toString('latin1'));
      if (m.payloadFormat === undefined && !Number.isNaN(n)) m.payloadFormat = n;
      return true;
    }
    case H.type:
      if (m.type === undefined && v !== null) m.type = v.toString('utf8');
      return true;
    case H.appId:
      if (m.appId === undefined && v !== null) m.appId = v.toString('utf8');
      return true;
    case H.userId:
      // Never read back: whoever wrote the record could have written any user id (see the top of this file).
      return true;
    case H.amqpHeaders:
      if (m.amqpHeaders === undefined && v !== null) m.amqpHeaders = Buffer.from(v);
      return true;
    case H.amqpExpiration:
      if (m.amqpExpiration === undefined && v !== null) m.amqpExpiration = v.toString('utf8');
      return true;
    case H.natsHeaders:
      if (m.natsHeaders === undefined && v !== null) m.natsHeaders = Buffer.from(v);
      return true;
    case H.exchange:
      if (m.exchange === undefined && v !== null) m.exchange = v.toString('utf8');
      return true;
    case H.routingKey:
      if (m.routingKey === undefined && v !== null) m.routingKey = v.toString('utf8');
      return true;
    case H.deaths: {
      const d = m.deaths === undefined && v !== null ? parseDeaths(v.toString('utf8')) : null;
      if (d !== null) m.deaths = d;
      return true;
    }
    default:
      return false;
  }
}

/** A number as String(n) writes it (decimal, possibly with a fraction or an exponent), or NaN. */
function parseDecimal(s: string): number {
  return /^-?\d+(\.\d+)?(e[+-]?\d+)?$/.test(s) ? Number(s) : NaN;
}

/** An integer 0-255 in decimal, or NaN. */
function parseOctet(s: string): number {
  if (!/^\d{1,3}$/.test(s)) return NaN;
  const n = Number(s);
  return n <= 255 ? n : NaN;
}

const DEATH_REASONS: ReadonlySet<string> = new Set<DeathRecord['reason']>(['rejected', 'expired', 'maxlen', 'delivery_limit']);

/** The dead-letter history as JSON, each record with its fields in a fixed order. */
export function encodeDeaths(deaths: readonly DeathRecord[]): string {
  return JSON.stringify(
    deaths.map((d) => ({
      queue: d.queue,
      reason: d.reason,
      exchange: d.exchange,
      routingKeys: d.routingKeys,
      count: d.count,
      time: d.time,
      ...(d.originalExpiration !== undefined ? { originalExpiration: d.originalExpiration } : {}),
    })),
  );
}

/** Inverse of encodeDeaths; null when the text is not such an array (nothing is guessed from a partial one). */
export function parseDeaths(json: string): DeathRecord[] | null {
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch {
    return null;
  }
  if (!Array.isArray(raw)) return null;
  const out: DeathRecord[] = [];
  for (const r of raw as unknown[]) {
    if (typeof r !== 'object' || r === null) return null;
    const o = r as { [k: string]: unknown };
    if (typeof o.queue !== 'string' || typeof o.reason !== 'string' || !DEATH_REASONS.has(o.reason)) return null;
    if (typeof o.exchange !== 'string' || !Array.isArray(o.routingKeys) || !o.routingKeys.every((k) => typeof k === 'string')) return null;
    if (typeof o.count !== 'number' || !Number.isInteger(o.count) || o.count < 0) return null;
    if (typeof o.time !== 'number' || !Number.isFinite(o.time)) return null;
    if (o.originalExpiration !== undefined && typeof o.originalExpiration !== 'string') return null;
    out.push({
      queue: o.queue,
      reason: o.reason as DeathRecord['reason'],
      exchange: o.exchange,
      routingKeys: (o.routingKeys as string[]).slice(),
      count: o.count,
      time: o.time,
      ...(o.originalExpiration !== undefined ? { originalExpiration: o.originalExpiration } : {}),
    });
  }
  return out;
}
