/**
 * Deliveries of a NATS connection: the engine's deliver() for every matching subscription becomes a MSG (or HMSG
 * for a message with headers, to a client that announced headers) in the connection's writer, echo and per-topic
 * policies applied, UNSUB max counted down; no closure or promise per message.
 */
import type { Message, Subscription } from '../../core/index.js';
import { natsHeaderBlock, topicToSubject } from './mapping.js';
import { deliverableSubject, NatsConnectionState, type NatsSub, St } from './connection-state.js';
import { holdOutput, quotaWait } from './control.js';
import { noteRequest } from './responses.js';

/** The engine's delivery: one MSG/HMSG per matching subscription of this connection. Never throws. */
export function deliver(conn: NatsConnectionState, msg: Message, subs: Subscription[]): void {
  if (conn.st !== St.Live) return;
  if (!conn.echo && msg.origin === conn.id) return notEchoed(conn, msg, subs);
  let hdr: Buffer | null = null;
  if (conn.headers) hdr = natsHeaderBlock(msg);
  else if (msg.status !== undefined) return; // a bare status means nothing to a client without headers
  const dt = msg.deliverTopic;
  // The topics as the connection's namespace names them (namespaces.ts: the core's carry `$ns/<ns>/`).
  const names = conn.names;
  const topic = names.isDefault ? (dt ?? msg.topic) : names.outTopic(dt ?? msg.topic);
  const replyTopic = msg.responseTopic === undefined || names.isDefault ? msg.responseTopic : names.outTopic(msg.responseTopic);
  // A response topic that is no NATS subject (whitespace: MSG's arguments are space-separated) is left out.
  let reply = replyTopic === undefined ? null : topicToSubject(replyTopic);
  if (reply !== null && !deliverableSubject(reply)) reply = null;
  const payload = msg.payload;
  const w = conn.deliveryWriter();
  const stats = conn.adapter.stats;
  const before = stats.msgsOut;
  const size = payload.length + (hdr === null ? 0 : hdr.length);
  for (let i = 0; i < subs.length; i++) {
    const ns = subs[i]!.options.data as NatsSub;
    if (ns.sub === null) continue;
    let subject: string;
    if (ns.literal && dt === undefined) subject = ns.subject;
    else if (ns.lastTopic === topic) subject = ns.lastSubject;
    else {
      subject = topicToSubject(topic);
      // An MQTT topic may hold a space or a tab; as a MSG subject it would split the control line and corrupt
      // the client's protocol stream. nats-server never has such a subject: not delivered ('' = skip).
      if (!deliverableSubject(subject)) subject = '';
      ns.lastTopic = topic;
      ns.lastSubject = subject;
    }
    if (subject === '') continue;
    if (hdr === null) w.writeMsg(subject, ns.sid, reply, payload);
    else w.writeHmsg(subject, ns.sid, reply, hdr, payload);
    conn.batchMsgs++;
    stats.msgsOut++;
    stats.bytesOut += size;
    countDelivery(conn, ns);
  }
  const sent = stats.msgsOut - before;
  // A request reached this connection: it may answer it (allow_responses) if its policies let it respond.
  if (sent > 0 && reply !== null && !conn.access.open) noteRequest(conn, names.isDefault ? msg.topic : names.outTopic(msg.topic), replyTopic!);
  if (sent > 0) {
    conn.outMsgs += sent;
    conn.outBytes += sent * size;
    stats.matches++;
    stats.fanoutTotal += sent;
    if (sent > stats.maxFanout) stats.maxFanout = sent;
    if (conn.entry !== null) conn.entry.messagesOut += sent;
    if (conn.lease !== null) {
      const wait = conn.lease.chargeOut(sent * payload.length);
      if (wait > 0) {
        quotaWait(conn, wait);
        holdOutput(conn, wait);
      }
    }
  }
  if (!conn.flushScheduled) {
    conn.flushScheduled = true;
    setImmediate(conn.flusher());
  }
  // A burst (a publisher's reads of one loop turn) is handed to the socket in pieces of flushAt bytes; what the
  // socket could not pass on to the kernel at once stays in its buffer (writableLength): that, not the size of
  // a burst, is what makes a consumer slow.
  if (w.length >= conn.flushAt) conn.flushNow();
  const o = conn.adapter.options;
  if (w.length + conn.stream.writableLength > o.maxPending || (o.maxPendingMsgs > 0 && conn.pendingMsgs + conn.batchMsgs > o.maxPendingMsgs)) {
    conn.slowConsumer();
  }
}

/**
 * A publish of this connection, which asked not to get its own messages: a queue group picked one of its
 * members here, so the message goes to another member (nats-server leaves a no-echo client's subscriptions out
 * of the match, and another member gets it).
 */
export function notEchoed(conn: NatsConnectionState, msg: Message, subs: Subscription[]): void {
  for (const s of subs) if (s.options.group !== undefined) conn.adapter.engine.redeliverShared(s, msg);
}

export function countDelivery(conn: NatsConnectionState, ns: NatsSub): void {
  ns.delivered++;
  if (ns.max > 0 && ns.delivered >= ns.max) removeSub(conn, ns);
}

export function removeSub(conn: NatsConnectionState, ns: NatsSub): void {
  conn.adapter.stats.subRemoves++;
  if (ns.sub !== null) conn.adapter.engine.unsubscribe(ns.sub);
  ns.sub = null;
  conn.subs.delete(ns.sid);
}
