/**
 * JetStream in namespaces (NATS accounts): how a tenant's API request, stream, subject and consumer become the core's
 * names, and back. Everything below the API boundary (service.ts deliver) works on internal names: a stream `orders`
 * of namespace `t1` is `t1~orders`, its subjects `orders.>` are the binding `$ns/t1/orders/#` and, where a subject
 * is kept as a NATS subject (consumer filters, deliver subjects, republish), `$ns.t1.orders.>` (the namespace's
 * `natsPrefix`). Whatever is shown to a client is derived from the internal stream name it concerns (`namesOf`), so
 * a stream's info, its consumers' infos, its PubAcks, acks, flow-control requests, advisories and direct gets come
 * out in the stream's own namespace without the requester's namespace being passed around.
 *
 * `default` pays nothing: its NamespaceNames are the identity (`isDefault`), and no string is built for it.
 */
import { isQualifiedStream, namespaceNames, NS_PREFIX, splitStreamName, type NamespaceNames } from '../../../core/index.js';

/** The namespace names of an internal stream name (`t1~orders`: t1's; `orders`: default's). */
export function namesOf(stream: string): NamespaceNames {
  return namespaceNames(splitStreamName(stream).namespace);
}

/** A stream's name as its namespace's clients write it. */
export function ownStream(stream: string): string {
  return splitStreamName(stream).name;
}

/** A client's NATS subject or subject filter inside its namespace (`>` stays: all of a stream's subjects). */
export function inSubject(names: NamespaceNames, s: string): string {
  return names.isDefault || s === '>' ? s : names.natsPrefix + s;
}

/** An internal NATS subject as the namespace's clients write it. */
export function outSubject(names: NamespaceNames, s: string): string {
  return names.isDefault || !s.startsWith(names.natsPrefix) ? s : s.slice(names.natsPrefix.length);
}

/** Where an API request's tokens (after `$JS.API.`) name a stream; -1 when they name none. */
function streamToken(t: string[]): number {
  const [a, b, c] = t;
  if (a === 'STREAM') {
    if (b === 'MSG') return c === 'GET' || c === 'DELETE' ? 3 : -1;
    return b === 'CREATE' || b === 'UPDATE' || b === 'INFO' || b === 'DELETE' || b === 'PURGE' ? 2 : -1;
  }
  if (a === 'DIRECT') return b === 'GET' ? 2 : -1;
  if (a === 'CONSUMER') {
    if (b === 'DURABLE') return c === 'CREATE' ? 3 : -1;
    if (b === 'MSG') return c === 'NEXT' ? 3 : -1;
    return b === 'CREATE' || b === 'NAMES' || b === 'LIST' || b === 'INFO' || b === 'DELETE' ? 2 : -1;
  }
  return -1;
}

/**
 * An API request's tokens with the stream they name inside the requester's namespace (subjects in the request are
 * qualified by what reads them, from the stream's name: message-api.ts requestedSeq, consumer-api.ts, ...),
 * or null when the client wrote a qualified name (`~`): no namespace's client names another's stream, `default`'s
 * included (the engine's getAnyStream would find it).
 */
export function qualifyApi(names: NamespaceNames, t: string[]): string[] | null {
  const i = streamToken(t);
  if (i < 0 || t[i] === undefined) return t;
  if (isQualifiedStream(t[i])) return null;
  if (names.isDefault) return t;
  const q = t.slice();
  q[i] = names.stream(t[i]);
  return q;
}

/**
 * `$JS.ACK.<stream>.<consumer>...` / `$JS.FC.<stream>.<consumer>.<id>` levels (after the namespace's prefix) with
 * the stream qualified; null when the client wrote a qualified stream name.
 */
export function qualifyAckLevels(names: NamespaceNames, levels: string[]): string[] | null {
  const s = levels[2];
  if (s === undefined) return levels;
  if (isQualifiedStream(s)) return null;
  if (names.isDefault) return levels;
  const q = levels.slice();
  q[2] = names.stream(s);
  return q;
}

/** The topic prefix (`$ns/<ns>/`, '' in default) and own name of a consumer's stream, for its ack subjects. */
export function ackTopicPrefix(stream: string, consumer: string, kind: 'ACK' | 'FC'): string {
  return `${namesOf(stream).topicPrefix}$JS/${kind}/${ownStream(stream)}/${consumer}/`;
}

/**
 * The length of a stored message's subject as its namespace's clients wrote it (what nats-server counts in a
 * stream's and an account's bytes): the topic less its `$ns/<ns>/` prefix.
 */
export function subjectLength(topic: string): number {
  if (topic.charCodeAt(0) !== 0x24 || !topic.startsWith(NS_PREFIX)) return topic.length;
  const end = topic.indexOf('/', NS_PREFIX.length);
  return end < 0 ? topic.length : topic.length - end - 1;
}
