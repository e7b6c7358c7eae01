/**
 * Outbound delivery of an MQTT connection (as Mosquitto's database.c and send_publish.c, handle_pubackcomp.c and
 * handle_pubrec.c): the engine's deliveries (through the session) become PUBLISH frames under flow control: the
 * in-flight window (min(maxInflight, the client's Receive Maximum)), packet ids, a bounded queue behind it, the
 * socket's write high-water mark, the slow-consumer policy; v5 properties, topic aliases and the Maximum Packet
 * Size; the client's PUBACK / PUBREC / PUBCOMP (and the PUBREL we send); the resumed session's stored messages
 * (`restore()`); and deliveries from `$queue/` subscriptions (the QueueConsumerHost side).
 *
 * This is the per-message path: nothing here allocates per delivery beyond the Delivery itself (none at all for a
 * plain QoS 0 message, whose frame is encoded once for every subscriber).
 */
import type { Message, NamespaceNames, QoS, QueueDelivery, Subscription } from '../../core/index.js';
import { ReasonCode, encodeIdOnly, encodePublishFrame, type Properties } from './codec/index.js';
import type { MqttDropCounts } from './hub.js';
import { newDelivery, type Delivery, type MqttSession, type SubData } from './session.js';
import { isQueueBound, type MqttQueueConsumer, type QueueBoundDelivery } from './queue-consumer.js';
import { NO_INFLIGHT, State, errText, type MqttLink } from './link.js';

/**
 * Fan-out cache: the engine delivers one message to every matching subscriber back to back, and a QoS 0
 * frame with retain=0 and no per-subscriber properties is the same bytes for all of them, so it is encoded
 * once per protocol generation.
 */
let lastFrameMsg: Message | null = null;
let lastFrameNames: NamespaceNames | null = null;
let lastFrame4: Buffer | null = null;
let lastFrame5: Buffer | null = null;

function plainQos0Frame(msg: Message, v5: boolean, names: NamespaceNames): Buffer {
  // One message's subscribers are all of its topic's namespace (core namespaces.ts: `$ns/` is refused to every
  // client and no wildcard reaches into it); the names are part of the key all the same.
  if (msg !== lastFrameMsg || names !== lastFrameNames) {
    lastFrameMsg = msg;
    lastFrameNames = names;
    lastFrame4 = lastFrame5 = null;
  }
  const topic = names.isDefault ? msg.topic : names.outTopic(msg.topic);
  // [MQTT-3.3.1-9] live deliveries carry RETAIN 0 (unless Retain As Published, which takes the slow path).
  if (v5) return (lastFrame5 ??= encodePublishFrame(topic, msg.payload, 0, false, false, 0, messageProps(msg, Date.now(), names)));
  return (lastFrame4 ??= encodePublishFrame(topic, msg.payload, 0, false, false, 0));
}

/**
 * The v5 PUBLISH properties a message carries to every subscriber (before subscription ids and alias). A message
 * from another protocol (a Kafka record's flowmq.* headers, an AMQP publish) may hold what no MQTT publisher could
 * send; such a property is left out rather than sent malformed, which would make the client close the connection
 * [MQTT-1.5.4-2] [MQTT-3.3.2-4] [MQTT-3.3.2-14]: a payload format other than 0 or 1, a response topic that is not a
 * topic name, strings with U+0000 or over 65535 bytes, binary data over 65535 bytes. The expiry is capped at the
 * largest interval MQTT can say (about 136 years).
 */
function messageProps(msg: Message, now: number, names: NamespaceNames): Properties {
  const p: Properties = {};
  if (msg.payloadFormat === 0 || msg.payloadFormat === 1) p.payloadFormatIndicator = msg.payloadFormat;
  // [MQTT-3.3.2-6] the interval sent is the time the message has left.
  if (msg.expiresAt !== undefined) p.messageExpiryInterval = Math.min(0xffffffff, Math.max(1, Math.ceil((msg.expiresAt - now) / 1000)));
  if (msg.contentType !== undefined && isMqttString(msg.contentType)) p.contentType = msg.contentType;
  if (msg.responseTopic !== undefined && isMqttString(msg.responseTopic) && msg.responseTopic !== '' && !/[+#]/.test(msg.responseTopic)) {
    p.responseTopic = names.isDefault ? msg.responseTopic : names.outTopic(msg.responseTopic);
  }
  if (msg.correlationData !== undefined && msg.correlationData.length <= 0xffff) p.correlationData = msg.correlationData;
  // [MQTT-3.3.2-17] [MQTT-3.3.2-18] user properties are forwarded unaltered and in order.
  if (msg.headers.length > 0) {
    const up: Array<[string, string]> = [];
    for (const h of msg.headers) {
      const v = h.value === null ? '' : h.value.toString('utf8');
      if (isMqttString(h.key) && isMqttString(v)) up.push([h.key, v]);
    }
    if (up.length > 0) p.userProperties = up;
  }
  return p;
}

/** An MQTT UTF-8 string: at most 65535 bytes, no U+0000 [MQTT-1.5.4-1] [MQTT-1.5.4-2]. */
function isMqttString(s: string): boolean {
  return (s.length <= 0x5555 || Buffer.byteLength(s) <= 0xffff) && !s.includes('\u0000');
}

const isPlain = (msg: Message): boolean => msg.headers.length === 0 && msg.expiresAt === undefined;

function onQueueAckError(conn: MqttLink): (err: unknown) => void {
  return (conn.queueAckErrorFn ??= (err: unknown) => {
    conn.logLimited('warn', 'queue ack failed', { clientId: conn.clientId, remote: conn.remote, err: errText(err) }, 'mqtt queue ack failed');
  });
}

function onDrain(conn: MqttLink): () => void {
  return (conn.drainFn ??= () => {
    conn.drainArmed = false;
    resumeQueues(conn);
  });
}

/** `inflight`, the connection's own from the first delivery in flight on (to add to it). */
function ownInflight(conn: MqttLink): Map<number, Delivery> {
  if (conn.inflight === NO_INFLIGHT) conn.inflight = new Map();
  return conn.inflight;
}

/**
 * A resumed session: messages stored while it was offline (and the last connection's unacknowledged ones,
 * which are re-sent with DUP and their original packet ids [MQTT-4.4.0-1]) go out before anything newer.
 */
export function restore(conn: MqttLink, session: MqttSession): void {
  conn.restoring = true;
  conn.hub.takeQueue(session).then(
    (stored) => {
      if (conn.state === State.Closed) {
        // Closed meanwhile: the messages go back to the store with whatever else was unacknowledged.
        return;
      }
      conn.restoring = false;
      const fresh: Delivery[] = [];
      const now = Date.now();
      for (const d of stored) {
        if (d.msg.expiresAt !== undefined && d.msg.expiresAt <= now && !d.released) {
          conn.hub.untrack(session, d);
          drop(conn, 'expired', d.counted);
          continue;
        }
        // Queued while offline under another identity or other policies: this one must be allowed it now.
        if (!d.released && !session.admit(d.msg.topic)) {
          conn.hub.untrack(session, d);
          drop(conn, 'notAuthorized', d.counted);
          continue;
        }
        if (d.packetId !== 0 && !conn.inflight.has(d.packetId)) {
          ownInflight(conn).set(d.packetId, d);
          if (d.released) conn.send(encodeIdOnly('pubrel', d.packetId, conn.level));
          else writePublish(conn, d, d.packetId, true, now);
        } else fresh.push(d);
      }
      if (fresh.length > 0) {
        const rest = conn.queue.slice(conn.queueHead);
        conn.queue = fresh.concat(rest);
        conn.queueHead = 0;
      }
      drainQueue(conn);
      conn.resumeReading();
    },
    (err: unknown) => {
      conn.ctx.logger.error({ clientId: conn.clientId, err: errText(err) }, 'mqtt stored messages could not be read');
      conn.restoring = false;
      conn.resumeReading();
    },
  );
}

/**
 * Called (through the session) by the engine, synchronously, for every publish matching one or more of our
 * subscriptions. Never throws (a bug here must not break the publisher's connection).
 */
export function deliver(conn: MqttLink, msg: Message, subs: Subscription[]): void {
  if (conn.state !== State.Connected) {
    // Attached, CONNACK on its way: keep it for the connection (or the session, if the connection fails).
    if (conn.state !== State.Closed && (conn.early?.length ?? 0) < conn.opts.maxQueued) {
      (conn.early ??= []).push({ msg, subs });
      return;
    }
    // Closing: the message does not reach the client.
    conn.hub.dropped('closed', true);
    return;
  }
  try {
    // [MQTT-3.3.5-1] the maximum QoS over every matching subscription, capped by the message's own QoS.
    let granted = 0;
    let retain = false;
    let ids: number[] | null = null;
    let shared: Subscription | null = null;
    let allShared = true;
    let any = false;
    const selfOrigin = msg.origin === conn.session?.id;
    for (let k = 0; k < subs.length; k++) {
      const s = subs[k];
      const d = s.options.data as SubData | undefined;
      if (d !== undefined) {
        // [MQTT-3.8.3-3] No Local: not back to the connection that published it.
        if (d.noLocal && selfOrigin) continue;
        if (d.retainAsPublished && msg.retain) retain = true; // [MQTT-3.3.1-12]
        if (d.subscriptionId !== undefined) (ids ??= []).push(d.subscriptionId); // [MQTT-3.3.4-3]
      }
      any = true;
      if (s.options.qos > granted) granted = s.options.qos;
      if (s.options.group !== undefined) shared ??= s;
      else allShared = false;
    }
    if (!any) {
      conn.hub.notDelivered();
      return;
    }
    // [MQTT-3.3.2-5] an expired message is not delivered.
    if (msg.expiresAt !== undefined && msg.expiresAt <= Date.now()) {
      drop(conn, 'expired', true);
      return;
    }
    const qos = (msg.qos < granted ? msg.qos : granted) as QoS;
    if (
      qos === 0 &&
      !retain &&
      ids === null &&
      conn.queueHead === conn.queue.length &&
      !conn.restoring &&
      (conn.level !== 5 || (isPlain(msg) && conn.clientAliasMax === 0))
    ) {
      sendQos0Plain(conn, msg);
      return;
    }
    route(conn, newDelivery(msg, qos, retain, ids, allShared ? shared : null, true));
  } catch (err) {
    conn.fail(err);
  }
}

/** Sends now, or queues behind the window (order is kept: once anything waits, everything after it waits). */
export function route(conn: MqttLink, d: Delivery): void {
  if (conn.queueHead < conn.queue.length || conn.restoring) enqueue(conn, d);
  else if (d.qos === 0) sendQos0(conn, d, false);
  else if (conn.inflight.size < inflightWindow(conn)) sendQos(conn, d);
  else enqueue(conn, d);
}

/** [MQTT-3.3.4-9] no more unacknowledged QoS 1/2 than the client's Receive Maximum. */
function inflightWindow(conn: MqttLink): number {
  return conn.clientReceiveMax < conn.opts.maxInflight ? conn.clientReceiveMax : conn.opts.maxInflight;
}

/**
 * The namespace's bytes-out quota is spent for now: a QoS 0 delivery is dropped (QoS 0 is at most once; a client
 * that only subscribes sends nothing whose reading could be held back, so holding its socket would not slow it).
 * QoS 1/2 wait as before: its acknowledgements are not read while the quota holds the connection back.
 */
function outQuotaSpent(conn: MqttLink): boolean {
  if (conn.outHeldUntil === 0) return false;
  if (Date.now() < conn.outHeldUntil) return true;
  conn.outHeldUntil = 0;
  return false;
}

function sendQos0Plain(conn: MqttLink, msg: Message): void {
  if (outQuotaSpent(conn)) {
    drop(conn, 'quota', true);
    return;
  }
  // A client that does not read its socket gets no more QoS 0 messages until it catches up.
  if (conn.stream.writableLength > conn.opts.writeHighWaterMark) {
    if (conn.opts.slowConsumer === 'disconnect') {
      conn.queue.push(newDelivery(msg, 0, false, null, null, true));
      slowConsumer(conn, 'write buffer full');
    } else drop(conn, 'writeBuffer', true);
    return;
  }
  const frame = plainQos0Frame(msg, conn.level === 5, conn.names);
  // [MQTT-3.1.2-24] nothing larger than the client's Maximum Packet Size is sent; it is discarded.
  if (frame.length > conn.clientMaxPacket) {
    drop(conn, 'tooLarge', true);
    return;
  }
  conn.stats.publishesOut++;
  conn.hub.stats.messagesSent++;
  conn.send(frame);
  sent(conn, frame.length);
}

/** A PUBLISH went out: the registry counts it, the namespace's outbound byte quota is charged. */
function sent(conn: MqttLink, bytes: number): void {
  if (conn.client !== null) conn.client.messagesOut++;
  if (conn.lease !== null) {
    const wait = conn.lease.chargeOut(bytes);
    if (wait > 0) {
      conn.outHeldUntil = Date.now() + wait;
      conn.throttle(wait);
    }
  }
}

/** `queued`: `d` is the head of the queue (drainQueue), else it has not been queued. */
function sendQos0(conn: MqttLink, d: Delivery, queued: boolean): void {
  if (outQuotaSpent(conn)) {
    if (d.stored !== 'none') conn.hub.untrack(conn.session!, d);
    drop(conn, 'quota', d.counted);
    return;
  }
  if (conn.stream.writableLength > conn.opts.writeHighWaterMark) {
    if (conn.opts.slowConsumer === 'disconnect') {
      if (!queued) conn.queue.push(d);
      slowConsumer(conn, 'write buffer full');
    } else drop(conn, 'writeBuffer', d.counted);
    return;
  }
  writePublish(conn, d, 0, false, Date.now());
}

function sendQos(conn: MqttLink, d: Delivery): void {
  let id = conn.nextPacketId;
  while (conn.inflight.has(id)) id = id === 0xffff ? 1 : id + 1;
  conn.nextPacketId = id === 0xffff ? 1 : id + 1;
  if (!writePublish(conn, d, id, false, Date.now())) {
    if (d.stored !== 'none') conn.hub.untrack(conn.session!, d);
    return;
  }
  d.packetId = id;
  ownInflight(conn).set(id, d);
  // Persistent session: the message is in the store, with the packet id it was sent with, until acknowledged.
  if (d.stored === 'none') conn.hub.track(conn.session!, d);
  else conn.hub.touch(conn.session!, d);
}

/** Encodes and writes one PUBLISH; false when it was too large for the client and discarded. */
function writePublish(conn: MqttLink, d: Delivery, id: number, dup: boolean, now: number): boolean {
  const msg = d.msg;
  let frame: Buffer;
  if (conn.level === 5) {
    const names = conn.names;
    const props = messageProps(msg, now, names);
    if (d.subIds !== null) props.subscriptionIdentifiers = d.subIds;
    let topic = names.isDefault ? msg.topic : names.outTopic(msg.topic);
    // Server -> client topic aliases, never on re-sends (aliases do not outlive a connection [MQTT-3.3.2-7]).
    if (conn.clientAliasMax > 0 && !dup) {
      conn.outAliases ??= new Map();
      const a = conn.outAliases.get(topic);
      if (a !== undefined) {
        props.topicAlias = a;
        topic = '';
      } else if (conn.outAliases.size < conn.clientAliasMax) {
        const na = conn.outAliases.size + 1;
        conn.outAliases.set(topic, na);
        props.topicAlias = na;
      }
    }
    frame = encodePublishFrame(topic, msg.payload, d.qos, d.retain, dup, id, props);
  } else {
    frame = encodePublishFrame(conn.names.isDefault ? msg.topic : conn.names.outTopic(msg.topic), msg.payload, d.qos, d.retain, dup, id);
  }
  // [MQTT-3.1.2-24] a packet over the client's Maximum Packet Size is discarded, as if it had been sent.
  if (frame.length > conn.clientMaxPacket) {
    drop(conn, 'tooLarge', d.counted);
    return false;
  }
  conn.stats.publishesOut++;
  conn.hub.stats.messagesSent++;
  conn.send(frame);
  sent(conn, frame.length);
  return true;
}

/**
 * Bounded queue behind the in-flight window: when full, QoS 0 messages are dropped first, then the new
 * message; or, with the slow-consumer policy 'disconnect', the client is disconnected instead.
 */
function enqueue(conn: MqttLink, d: Delivery): void {
  if (conn.queue.length - conn.queueHead >= conn.opts.maxQueued) {
    if (conn.opts.slowConsumer === 'disconnect') {
      // The message goes to the session with the rest (kept if it is persistent), then the client goes.
      conn.queue.push(d);
      if (d.qos !== 0) conn.hub.track(conn.session!, d);
      slowConsumer(conn, 'queue full');
      return;
    }
    if (d.qos === 0) {
      drop(conn, 'queueFull', d.counted);
      return;
    }
    let k = conn.queueHead;
    while (k < conn.queue.length && conn.queue[k].qos !== 0) k++;
    if (k === conn.queue.length) {
      drop(conn, 'queueFull', d.counted);
      return;
    }
    const [evicted] = conn.queue.splice(k, 1);
    drop(conn, 'queueFull', evicted.counted);
  }
  conn.queue.push(d);
  if (d.qos !== 0) conn.hub.track(conn.session!, d);
}

/** A message for this client did not reach it: counted as dropped (and not delivered). */
function drop(conn: MqttLink, cause: keyof MqttDropCounts, counted: boolean): void {
  conn.stats.dropped++;
  conn.hub.dropped(cause, counted);
}

/**
 * Slow-consumer policy 'disconnect' (as nats-server does with a slow consumer): a client is over its limit
 * as soon as a message for it would be dropped because it does not keep up, i.e. its queue behind the
 * in-flight window holds `maxQueued` messages (the window full of unacknowledged QoS 1/2), or its socket
 * holds more than `writeHighWaterMark` unsent bytes. The queue is the grace; the message that finds it full
 * closes the connection (v5 DISCONNECT 0x97 Quota exceeded, section 3.14.2.1; 3.1.1 a plain close). A
 * persistent session keeps what was in flight and queued (already written through) and that message; in a
 * session that ends with its connection they are counted as dropped.
 */
function slowConsumer(conn: MqttLink, why: string): void {
  const s = conn.session!;
  conn.hub.stats.slowConsumerDisconnects++;
  conn.logLimited(
    'warn',
    'slow consumer',
    { clientId: conn.clientId, remote: conn.remote, why, inflight: conn.inflight.size, queued: conn.queued, bufferedBytes: conn.stream.writableLength },
    'mqtt slow consumer, disconnecting',
  );
  // Written while the session is still connected (the store's connected bound): nothing is trimmed.
  conn.hub.flushSession(s);
  conn.disconnectWith(ReasonCode.QUOTA_EXCEEDED, `slow consumer: ${why}`);
}

function drainQueue(conn: MqttLink): void {
  const q = conn.queue;
  const now = Date.now();
  while (conn.queueHead < q.length && conn.state === State.Connected && !conn.restoring) {
    const d = q[conn.queueHead];
    if (d.msg.expiresAt !== undefined && d.msg.expiresAt <= now) {
      // [MQTT-3.3.2-5] expired while waiting: not sent, and no longer kept.
      if (d.stored !== 'none') conn.hub.untrack(conn.session!, d);
      drop(conn, 'expired', d.counted);
      conn.queueHead++;
      continue;
    }
    if (d.qos === 0) {
      sendQos0(conn, d, true);
      // The slow-consumer policy closed the connection (the queue went to the session with d at its head).
      if ((conn.state as State) === State.Closed) return;
    } else if (conn.inflight.size < inflightWindow(conn)) sendQos(conn, d);
    else break;
    conn.queueHead++;
  }
  if (conn.queueHead === q.length) {
    conn.queue = [];
    conn.queueHead = 0;
  } else if (conn.queueHead > 1024 && conn.queueHead * 2 > q.length) {
    q.splice(0, conn.queueHead);
    conn.queueHead = 0;
  }
  if (conn.queueSubs !== null) resumeQueues(conn);
}

export function onPuback(conn: MqttLink, id: number): void {
  const e = conn.inflight.get(id);
  // An unknown id (or a QoS 2 id) is ignored: nothing in 3.1.1 lets us report it.
  if (e === undefined || e.qos !== 1) return;
  conn.inflight.delete(id);
  if (isQueueBound(e)) {
    // The queue ack: the message leaves its queue.
    e.queueConsumer.handle.ack(e.queueId).catch(onQueueAckError(conn));
  } else if (e.stored !== 'none') conn.hub.untrack(conn.session!, e);
  drainQueue(conn);
}

export function onPubrec(conn: MqttLink, id: number, reason: number): void {
  const e = conn.inflight.get(id);
  if (e === undefined || e.qos !== 2) {
    // v5: PUBREL 0x92 for an id we do not know (section 3.6.2.1).
    if (conn.level === 5) conn.reply(encodeIdOnly('pubrel', id, 5, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND));
    return;
  }
  if (reason >= 0x80) {
    // Section 4.3.3: a PUBREC with a failure code ends the exchange; the client refused the message.
    conn.inflight.delete(id);
    if (e.stored !== 'none') conn.hub.untrack(conn.session!, e);
    drainQueue(conn);
    return;
  }
  // The message is now the client's; from here only PUBREL/PUBCOMP remain (section 4.3.3), also after a
  // broker restart: the stored entry records it.
  e.released = true;
  if (e.stored === 'none') {
    conn.reply(encodeIdOnly('pubrel', id, conn.level));
    return;
  }
  conn.hub.touch(conn.session!, e);
  pubrelAfter(conn, id, releasedStored(conn, e));
}

/** PUBRELs of a connection waiting for their entries' rewrite: sent in PUBREC order [MQTT-4.6.0-3]. */
const pubrelChains = new WeakMap<MqttLink, Promise<void>>();

/**
 * Once the entry of a delivery just released (PUBREC) says so, or null at once. PUBREL sent before, a broker killed
 * in between came back with the entry saying "PUBLISH sent" and re-sent the PUBLISH to a client that had completed
 * the exchange (PUBCOMP), which took it for a new message (a duplicate at the subscriber; section 4.3.3).
 */
function releasedStored(conn: MqttLink, e: Delivery): Promise<void> | null {
  // Its append under way: rewritten once its seq is known (hub.flushSession), in the flush scheduled then.
  if (e.stored === 'writing') return new Promise((r) => (e.afterWrite ??= []).push(r));
  // 'queued' (encoded at the flush, released) or 'stored' (touched): the flush scheduled now.
  return e.stored === 'queued' || e.stored === 'stored' ? conn.hub.queueWrites() : null;
}

function pubrelAfter(conn: MqttLink, id: number, stored: Promise<void> | null): void {
  const prev = pubrelChains.get(conn);
  if (stored === null && prev === undefined) {
    conn.reply(encodeIdOnly('pubrel', id, conn.level));
    return;
  }
  const next = Promise.all([prev, stored]).then(() => conn.reply(encodeIdOnly('pubrel', id, conn.level)));
  pubrelChains.set(conn, next);
  void next.then(() => {
    if (pubrelChains.get(conn) === next) pubrelChains.delete(conn);
  });
}

export function onPubcomp(conn: MqttLink, id: number): void {
  const e = conn.inflight.get(id);
  if (e === undefined || e.qos !== 2 || !e.released) return;
  conn.inflight.delete(id);
  if (e.stored !== 'none') conn.hub.untrack(conn.session!, e);
  drainQueue(conn);
}

/** QueueConsumerHost: room for one more queue delivery (connected, nothing waiting, window and socket open). */
export function queueCredit(conn: MqttLink, c: MqttQueueConsumer): boolean {
  if (!c.started || conn.state !== State.Connected || conn.restoring || conn.queueHead < conn.queue.length || conn.queueSubs?.get(c.filter) !== c) return false;
  if (conn.stream.writableLength > conn.opts.writeHighWaterMark) {
    if (!conn.drainArmed && conn.stream.writableNeedDrain) {
      conn.drainArmed = true;
      conn.stream.once('drain', onDrain(conn));
    }
    return false;
  }
  return c.noAck || conn.inflight.size < inflightWindow(conn);
}

/** QueueConsumerHost: sends a queue delivery (the queue asked queueCredit just before). */
export function deliverFromQueue(conn: MqttLink, c: MqttQueueConsumer, qd: QueueDelivery): void {
  try {
    const access = conn.access;
    if (access !== null && !access.open && !access.can('subscribe', 'queue', conn.names.ownName(c.handle.def.name) ?? c.handle.def.name)) {
      // The policy changed since the SUBSCRIBE: the message goes back to its queue and the subscription ends.
      c.handle.nack(qd.id, true).catch(() => undefined);
      if (conn.queueSubs?.get(c.filter) === c) {
        conn.queueSubs.delete(c.filter);
        c.handle.cancel(c);
      }
      queueCancelled(conn, c, 'not authorized any more');
      return;
    }
    // A message without a topic (AMQP default exchange) is published under the subscription's filter.
    const msg = qd.msg.topic.length > 0 ? qd.msg : { ...qd.msg, topic: c.filter };
    const d = newDelivery(msg, c.noAck ? 0 : 1, false, null, null, false) as QueueBoundDelivery;
    d.queueConsumer = c;
    d.queueId = qd.id;
    if (c.noAck) {
      writePublish(conn, d, 0, false, Date.now());
      return;
    }
    let id = conn.nextPacketId;
    while (conn.inflight.has(id)) id = id === 0xffff ? 1 : id + 1;
    conn.nextPacketId = id === 0xffff ? 1 : id + 1;
    if (!writePublish(conn, d, id, false, Date.now())) {
      // Too large for this client: rejected (dead-lettered if the queue says so) rather than retried forever.
      c.handle.nack(qd.id, false).catch(() => undefined);
      return;
    }
    d.packetId = id;
    ownInflight(conn).set(id, d);
  } catch (err) {
    conn.fail(err);
  }
}

/** QueueConsumerHost: the queue was deleted; the subscription ends (MQTT cannot tell the client). */
export function queueCancelled(conn: MqttLink, c: MqttQueueConsumer, reason: string): void {
  if (conn.queueSubs?.get(c.filter) === c) conn.queueSubs.delete(c.filter);
  conn.logLimited(
    'debug',
    'queue subscription ended',
    { clientId: conn.clientId, remote: conn.remote, filter: c.filter, reason },
    'mqtt queue subscription ended',
  );
}

/** Window room again (PUBACK, drained socket or queue): queue consumers may take more. */
function resumeQueues(conn: MqttLink): void {
  if (conn.queueSubs === null || conn.state !== State.Connected) return;
  for (const c of conn.queueSubs.values()) c.handle.resume(c);
}
