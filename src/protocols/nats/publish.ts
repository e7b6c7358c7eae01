/**
 * PUB / HPUB of a NATS connection: the subject as a unified topic (cached for a publisher repeating it), pedantic
 * checks, permissions and quotas, the core's publish (not awaited: a captured publish counts as a pending write and
 * past MAX_PENDING_WRITES the socket is not read), requests with a reply subject through the adapter's NatsPublisher
 * (JetStream PubAcks), and no_responders' 503 status when a request reached nobody.
 */
import { isReservedTopic, type Message } from '../../core/index.js';
import { OK, isValidLiteralSubject, parseHeaders } from './codec/index.js';
import { applyNatsHeaders, subjectToTopic } from './mapping.js';
import { NatsErr, natsErrTextOf } from './errors.js';
import { EMPTY, MAX_PENDING_WRITES, NatsConnectionState, natsMatch, NO_RESPONDERS_BLOCK, PAUSE_WRITES, quote, St } from './connection-state.js';
import { permissionViolation, quotaWait } from './control.js';
import { mayPublishOrReply } from './responses.js';
import { countDelivery } from './deliver.js';
import { WriteBarrier } from './write-barrier.js';

export function publish(conn: NatsConnectionState, subject: string, reply: string | null, hdr: Buffer | null, payload: Buffer): void {
  // `topic`: the client's own (what policies name); `internal`: inside its namespace (the same in `default`).
  let topic: string;
  let internal: string;
  if (subject === conn.lastPubSubject) {
    topic = conn.lastPubTopic;
    internal = conn.lastPubInternal;
  } else {
    const t = conn.pedantic && !isValidLiteralSubject(subject) ? null : subjectToTopic(subject);
    // `$ns` is no client's subject (namespaces.ts); in `default` the core refuses it too.
    if (t === null || isReservedTopic(t)) return conn.invalid(NatsErr.INVALID_PUBLISH_SUBJECT, subject);
    topic = t;
    internal = conn.names.topic(t);
    conn.lastPubSubject = subject;
    conn.lastPubTopic = t;
    conn.lastPubInternal = internal;
  }
  if (!conn.access.open && !mayPublishOrReply(conn, topic)) return permissionViolation(conn, `Publish to ${quote(subject)}`, 'publish', subject);
  const stats = conn.adapter.stats;
  const size = payload.length + (hdr === null ? 0 : hdr.length);
  stats.msgsIn++;
  stats.bytesIn += size;
  conn.inMsgs++;
  conn.inBytes += size;
  conn.lastActivity = conn.now;
  if (conn.entry !== null) conn.entry.messagesIn++;
  if (conn.lease !== null) {
    const wait = conn.lease.chargeIn(1, payload.length + (hdr === null ? 0 : hdr.length));
    if (wait > 0) quotaWait(conn, wait);
  }
  // The payload is a view into the chunk the stream emitted, which no one reuses (a 'data' chunk is the
  // stream's own): it may be kept as is. Whatever keeps a message beyond delivery copies it (retained messages,
  // stream records) as it must for every protocol.
  const msg: Message = { topic: internal, payload, key: null, headers: [], timestamp: conn.now, qos: 0, retain: false, origin: conn.id };
  if (!conn.names.isDefault) msg.namespace = conn.names.namespace;
  // An HPUB with a zero-length header block is a message without headers (nats.js sends `HPUB <subj> 0 <n>` for
  // an empty headers object: every js.publish without options); nats-server accepts it.
  if (hdr !== null && hdr.length > 0) {
    // nats-server passes headers on unread: NATS subscribers get the block byte for byte (a status line with extra
    // blanks, a block with no entries, a non-numeric status included). What parses is mapped for the other
    // protocols and for JetStream's own headers; a block that does not parse reaches them without headers.
    // A copy (the block is small): a view would keep the whole socket chunk alive as long as a retained message or
    // a queued delivery holds it.
    msg.natsHeaders = Buffer.from(hdr);
    try {
      applyNatsHeaders(msg, parseHeaders(hdr));
    } catch {
      // Not a block FlowMQ can read (parseHeaders threw before anything was applied): no mapped headers.
    }
  }
  if (reply !== null) {
    // A JetStream API request waits for this connection's earlier writes (STREAM.INFO after PUBs counts them).
    const b = conn.barrier;
    if (b !== null && b.busy && isJsApi(conn, topic)) return b.after(() => request(conn, msg, subject, reply));
    return request(conn, msg, subject, reply);
  }
  // nats-server acknowledges a verbose PUB before delivering it (a subscriber on the same connection sees +OK first).
  if (conn.verbose) conn.send(OK);
  let durable: Promise<void> | null;
  try {
    durable = conn.adapter.engine.publish(msg);
  } catch (err) {
    return publishFailed(conn, err, subject);
  }
  if (durable !== null) {
    const b = barrier(conn);
    const then = b.write();
    if (b.pending >= MAX_PENDING_WRITES) conn.pauseReading(PAUSE_WRITES);
    void durable.then(...then);
  }
}

export function request(conn: NatsConnectionState, msg: Message, subject: string, reply: string): void {
  const own = subjectToTopic(reply);
  if (own === null) return conn.invalid(NatsErr.INVALID_PUBLISH_SUBJECT, reply);
  // The reply subject is in the requester's namespace: a responder of that namespace answers into it.
  const rt = conn.names.topic(own);
  msg.responseTopic = rt;
  if (conn.verbose) conn.send(OK);
  let reached: number;
  try {
    const info = conn.adapter.publisher.publish(msg, rt);
    reached = info.delivered + info.captured.length + info.queued;
  } catch (err) {
    return publishFailed(conn, err, subject);
  }
  if (reached === 0 && conn.noResponders && conn.st === St.Live) sendNoResponders(conn, reply);
}

/** The 503 status to this connection's own subscriptions matching the reply subject. */
export function sendNoResponders(conn: NatsConnectionState, reply: string): void {
  conn.adapter.stats.noResponders++;
  for (const ns of conn.subs.values()) {
    if (!natsMatch(ns.subject, reply)) continue;
    conn.writer().writeHmsg(reply, ns.sid, null, NO_RESPONDERS_BLOCK, EMPTY);
    conn.batchMsgs++;
    countDelivery(conn, ns);
  }
  conn.scheduleFlush();
}

export function publishFailed(conn: NatsConnectionState, err: unknown, subject: string): void {
  const text = natsErrTextOf(err);
  if (text !== null) return conn.invalid(text, subject);
  conn.adapter.writeFailed(err);
}

/** The connection's barrier of pending writes (made at its first durable publish: most connections never need it). */
export function barrier(conn: NatsConnectionState): WriteBarrier {
  return (conn.barrier ??= new WriteBarrier(
    () => {
      if (conn.barrier!.pending <= MAX_PENDING_WRITES >> 1) conn.resumeReading(PAUSE_WRITES);
    },
    (err: unknown) => conn.adapter.writeFailed(err),
  ));
}

/** A JetStream API topic (this server's, or its domain's). */
function isJsApi(conn: NatsConnectionState, topic: string): boolean {
  if (topic.startsWith('$JS/API/')) return true;
  const d = conn.adapter.jsDomainApi;
  return d !== null && topic.startsWith(d);
}

/**
 * The per-delivery policy check every subscription of this connection carries (cheap while nothing is denied). The
 * core's topic is judged as the client knows it (policies name a namespace's topics unqualified).
 */
export function admit(conn: NatsConnectionState): (topic: string) => boolean {
  const names = conn.names;
  return (conn.admitFn ??= names.isDefault
    ? (topic: string): boolean => conn.access.admits(topic)
    : (topic: string): boolean => conn.access.admits(names.outTopic(topic)));
}
