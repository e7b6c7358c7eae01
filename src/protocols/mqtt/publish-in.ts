/**
 * Inbound PUBLISH of an MQTT connection and its acknowledgements (as Mosquitto's handle_publish.c and
 * handle_pubrel.c): topic aliases, the Receive Maximum, authorization and quotas, the core `Message` handed to
 * `engine.publish()`; the QoS 2 inbound state (packet ids awaiting PUBREL, kept with the session once the message
 * is durable); and PUBACK / PUBREC sent strictly in arrival order once storage has the message (`queueAck()`,
 * `flushAcks()`), reading paused while too many wait. Storage refusals become v5 negative acks (3.1.1: a close).
 */
import type { Message, PubKey } from '../../core/index.js';
import { isFlowError, isReservedTopic } from '../../core/index.js';
import { storageRefusal } from '../storage-refusal.js';
import { MqttProtocolError, ReasonCode, encodeIdOnly, type PublishPacket } from './codec/index.js';
import { State, errText, levels, type MqttLink, type PendingAck } from './link.js';
import { forgetKey, newKey } from './qos2.js';

/**
 * A test fault (test/e2e/mqtt-qos2-crash.test.ts): the broker kills itself with SIGKILL once a QoS 2 message on this
 * topic is in every store it was routed to, before its PUBREC goes out: the crash exactly once must survive.
 */
const KILL_AFTER_STORED = process.env.FLOWMQ_TEST_KILL_AFTER_QOS2_STORED;

function faultPoint(msg: Message, durable: Promise<void> | null): void {
  if (KILL_AFTER_STORED === undefined || msg.qos !== 2 || msg.topic !== KILL_AFTER_STORED) return;
  void (durable ?? Promise.resolve()).then(() => process.kill(process.pid, 'SIGKILL'));
}

function onDurableError(conn: MqttLink, err: unknown): void {
  if (conn.state === State.Closed) return;
  conn.ctx.logger.warn({ clientId: conn.clientId, remote: conn.remote, err: errText(err) }, 'mqtt publish could not be stored, closing connection');
  // 3.1.1 has no negative PUBACK: closing tells the client the message was not accepted. v5 says why.
  conn.disconnectWith(ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR, 'message could not be stored');
}

export function onPublish(conn: MqttLink, p: PublishPacket): void {
  conn.stats.publishesIn++;
  conn.hub.stats.messagesReceived++;
  const v5 = conn.level === 5;
  const props = p.properties;
  let topic = p.topic;
  if (v5 && props !== undefined) {
    // [MQTT-3.3.4-6] a client's PUBLISH carries no Subscription Identifier.
    if (props.subscriptionIdentifiers !== undefined) {
      throw new MqttProtocolError('PUBLISH from a client with a subscription identifier', '[MQTT-3.3.4-6]', undefined, ReasonCode.PROTOCOL_ERROR);
    }
    const alias = props.topicAlias;
    if (alias !== undefined) {
      // [MQTT-3.3.2-10] an alias above the Topic Alias Maximum we granted is an error (0x94).
      if (alias > conn.opts.topicAliasMaximum) {
        throw new MqttProtocolError(`topic alias ${alias} above the maximum`, '[MQTT-3.3.2-10]', undefined, ReasonCode.TOPIC_ALIAS_INVALID);
      }
      conn.inAliases ??= new Map();
      if (topic.length > 0) conn.inAliases.set(alias, topic);
      else {
        const t = conn.inAliases.get(alias);
        if (t === undefined) {
          // Section 3.3.2.3.4: an alias with an empty topic must have been set on this connection.
          throw new MqttProtocolError(`topic alias ${alias} was never defined`, undefined, undefined, ReasonCode.PROTOCOL_ERROR);
        }
        topic = t;
      }
    }
  }
  const s = conn.session!;
  if (p.qos > 0 && v5 && conn.inQos1 + sessionAwaitingRel(conn) >= conn.opts.maxInflight && !(p.qos === 2 && s.awaitingRel.has(p.packetId))) {
    // [MQTT-3.3.4-7] the client sent more unacknowledged QoS 1/2 publishes than our Receive Maximum.
    throw new MqttProtocolError('receive maximum exceeded', '[MQTT-3.3.4-7]', undefined, ReasonCode.RECEIVE_MAXIMUM_EXCEEDED);
  }
  if (p.qos === 2 && s.awaitingRel.has(p.packetId) && !s.relUnknown.has(p.packetId)) {
    // Re-sent QoS 2 publish before PUBREL: acknowledge again, do not deliver twice (section 4.3.3), once the
    // first copy is durable. (An id read back from the store with a publish key is routed again below: qos2.ts.)
    queueAck(conn, 'pubrec', p.packetId, s.relNotDurable.get(p.packetId) ?? null, 0);
    return;
  }
  if (levels(topic) > conn.opts.maxTopicLevels) {
    // Our configured limit, not a spec rule: 3.1.1 can only close the connection.
    if (!v5) throw new MqttProtocolError(`topic has more than ${conn.opts.maxTopicLevels} levels`);
    if (p.qos === 0) throw new MqttProtocolError('topic has too many levels', undefined, undefined, ReasonCode.TOPIC_NAME_INVALID);
    // v5 refuses the message alone: PUBACK/PUBREC 0x90 (section 3.4.2.1), the connection stays.
    queueAck(conn, p.qos === 1 ? 'puback' : 'pubrec', p.packetId, null, ReasonCode.TOPIC_NAME_INVALID);
    return;
  }
  const access = conn.access;
  // A topic under `$ns/` is another namespace's (core namespaces.ts): refused as a deny, whoever asks. Only topics
  // starting with `$` pay for the check.
  if ((topic.charCodeAt(0) === 0x24 && isReservedTopic(topic)) || (access !== null && !access.open && !access.can('publish', 'topic', topic))) {
    conn.hub.stats.publishesDenied++;
    // v5 refuses the message alone: PUBACK / PUBREC 0x87 Not authorized (a PUBREC >= 0x80 ends a QoS 2 exchange,
    // section 4.3.3). 3.1.1 has no refusal for a PUBLISH: the message is acknowledged and dropped, as Mosquitto
    // does (closing would make the client resend it forever). QoS 0: dropped.
    if (p.qos === 0) return;
    if (v5) {
      queueAck(conn, p.qos === 1 ? 'puback' : 'pubrec', p.packetId, null, ReasonCode.NOT_AUTHORIZED);
      return;
    }
    // The plain PUBACK below gives back a receive-window slot: take it first. A 3.1.1 QoS 2 refusal is not
    // remembered: its PUBREL is answered with PUBCOMP all the same (onPubrel).
    if (p.qos === 1) conn.inQos1++;
    queueAck(conn, p.qos === 1 ? 'puback' : 'pubrec', p.packetId, null, 0);
    return;
  }
  // The namespace's storage quota (maxStorageBytes): over it, its publishers are refused as RabbitMQ's disk alarm
  // blocks them, until retention or deletion frees room. v5: PUBACK / PUBREC 0x97 Quota exceeded, the connection
  // stays; 3.1.1 has no refusal: QoS 1/2 closes the connection (the client resends once it reconnects), QoS 0 drops.
  const full = conn.lease !== null ? conn.lease.storageFull() : null;
  if (full !== null) {
    if (p.qos === 0) return;
    if (!v5) throw new MqttProtocolError(full);
    queueAck(conn, p.qos === 1 ? 'puback' : 'pubrec', p.packetId, null, ReasonCode.QUOTA_EXCEEDED);
    return;
  }
  if (conn.client !== null) conn.client.messagesIn++;
  if (conn.lease !== null) {
    const wait = conn.lease.chargeIn(1, p.payload.length);
    if (wait > 0) conn.throttle(wait);
  }
  const names = conn.names;
  const msg: Message = {
    topic: names.isDefault ? topic : names.topicPrefix + topic,
    payload: p.payload,
    key: null,
    headers: [],
    timestamp: Date.now(),
    qos: p.qos,
    retain: p.retain,
    origin: conn.session!.id,
  };
  if (!names.isDefault) msg.namespace = names.namespace;
  if (props !== undefined) {
    if (props.userProperties) msg.headers = props.userProperties.map(([k, v]) => ({ key: k, value: Buffer.from(v) }));
    if (props.messageExpiryInterval !== undefined) msg.expiresAt = msg.timestamp + props.messageExpiryInterval * 1000;
    if (props.contentType !== undefined) msg.contentType = props.contentType;
    if (props.responseTopic !== undefined) {
      // [MQTT-3.3.2-14] the Response Topic is a topic name: no wildcards.
      if (/[+#]/.test(props.responseTopic)) {
        throw new MqttProtocolError('response topic with wildcards', '[MQTT-3.3.2-14]', undefined, ReasonCode.PROTOCOL_ERROR);
      }
      // A response topic is a topic of the publisher's namespace; its responders (of the same namespace) are told
      // it unqualified (outbound.ts messageProps).
      msg.responseTopic = names.topic(props.responseTopic);
    }
    if (props.correlationData !== undefined) msg.correlationData = Buffer.from(props.correlationData);
    if (props.payloadFormatIndicator !== undefined) msg.payloadFormat = props.payloadFormatIndicator;
  }
  // QoS 2 of a persistent session: exactly once across a crash, the id and a publish key stored before the message is
  // routed (qos2.ts). An id read back from the store keeps its key: the re-sent message is routed again with it.
  let key: PubKey | Promise<PubKey> | undefined;
  if (p.qos === 2 && s.persistent) {
    const known = s.relUnknown.get(p.packetId);
    if (known !== undefined && s.producer !== null) {
      s.relUnknown.delete(p.packetId);
      key = { producer: s.producer, seq: known };
    } else key = newKey(s, p.packetId, conn.hub.producerIds, (x) => conn.hub.persisted(x));
  }
  if (s.routeGate !== null || key instanceof Promise) {
    routeLater(conn, p, msg, key);
    return;
  }
  if (key !== undefined) msg.pubKey = key;
  let durable: Promise<void> | null;
  try {
    // QoS 1/2: in cluster mode acknowledged only once the persistent sessions of other brokers it reaches stored it.
    durable = conn.ctx.engine.publish(msg, undefined, p.qos > 0);
  } catch (err) {
    if (storageRefusal(err) !== null) {
      storeRefused(conn, p.qos === 0 ? 'none' : p.qos === 1 ? 'puback' : 'pubrec', p.packetId, err, null);
      return;
    }
    // The core refused the message (its own topic rules): 3.1.1 can only close [MQTT-4.8.0-1].
    if (isFlowError(err)) throw new MqttProtocolError(`publish refused: ${err.message}`, '[MQTT-4.8.0-1]', undefined, ReasonCode.TOPIC_NAME_INVALID);
    throw err;
  }
  if (p.qos === 0) {
    // Nothing is sent back, but a captured message counts among the pending acks until it is stored, so a
    // QoS 0 publisher faster than the streams' storage is held back (reading stops) like a QoS 1 one.
    if (durable !== null) queueAck(conn, 'none', 0, durable, 0);
    return;
  }
  if (p.qos === 2) {
    const id = p.packetId;
    s.relIds().add(id);
    // With a publish key the id is stored already (qos2.ts); without, once the message is durable.
    const keyed = key !== undefined;
    if (durable === null) {
      if (s.persistent && !keyed) conn.hub.persist(s);
    } else {
      // Stored with the session only once the message is durable (see MqttSession.relNotDurable).
      const stored = durable.then(() => {
        if (s.relNotDurable.get(id) !== stored) return;
        s.relNotDurable.delete(id);
        if (s.persistent && !keyed) conn.hub.persist(s);
      });
      s.relPending().set(id, stored);
      stored.catch(() => {
        if (s.relNotDurable.get(id) === stored) s.relNotDurable.delete(id);
      });
    }
  } else conn.inQos1++;
  // ...and once the deliveries to persistent sessions are in their store queues (written at the next tick, so
  // that a kill -9 after the PUBACK loses none of them whatever the store's commit latency); refused when a session's
  // write was fenced (owned by another broker now: the message is stored for nobody there, hub.queueWritesFenced).
  const queued = conn.hub.queueWritesFenced();
  if (queued !== null) durable = durable === null ? queued : Promise.all([durable, queued]).then(() => undefined);
  faultPoint(msg, durable);
  // QoS 1: PUBACK once every capturing stream has the message durably; QoS 2: PUBREC likewise.
  queueAck(conn, p.qos === 1 ? 'puback' : 'pubrec', p.packetId, durable, 0);
}

/**
 * Routes a publish once what it waits for is done: its publish key stored with the session (qos2.ts), and every
 * publish of the session that arrived before it routed, so that a producer's keys reach every destination in
 * sequence order (and messages keep their order). Its acknowledgement is queued now, in arrival order.
 */
function routeLater(conn: MqttLink, p: PublishPacket, msg: Message, key: PubKey | Promise<PubKey> | undefined): void {
  const s = conn.session!;
  const prev = s.routeGate ?? Promise.resolve();
  const routing = prev
    .then(() => key)
    .then((k) => {
      if (k !== undefined) msg.pubKey = k;
      // Wrapped: the next publish follows once this one is routed (its writes issued), not once they are durable.
      return { durable: routeNow(conn, p.qos, msg) };
    });
  const routed: Promise<void> = routing.then((r) => r.durable ?? undefined);
  const gate: Promise<void> = routing.then(
    () => undefined,
    () => undefined,
  );
  s.routeGate = gate;
  void gate.then(() => {
    if (s.routeGate === gate) s.routeGate = null;
  });
  const id = p.packetId;
  if (p.qos === 2) {
    s.relIds().add(id);
    // A re-sent PUBLISH meanwhile is acknowledged once this one is durable (see MqttSession.relNotDurable).
    const stored = routed.then(() => {
      if (s.relNotDurable.get(id) === stored) s.relNotDurable.delete(id);
      if (s.persistent && key === undefined) conn.hub.persist(s);
    });
    s.relPending().set(id, stored);
    stored.catch(() => {
      if (s.relNotDurable.get(id) === stored) s.relNotDurable.delete(id);
      // Not stored (or not known to be): a re-sent PUBLISH must be taken again, not answered as a duplicate.
      forgetKey(s, id);
      if (s.awaitingRel.delete(id) && s.persistent) conn.hub.persist(s);
    });
  } else if (p.qos === 1) conn.inQos1++;
  queueAck(conn, p.qos === 0 ? 'none' : p.qos === 1 ? 'puback' : 'pubrec', id, routed, 0);
}

/** engine.publish and the persistent sessions' store writes it made: what the acknowledgement waits for. */
function routeNow(conn: MqttLink, qos: number, msg: Message): Promise<void> | null {
  let durable = conn.ctx.engine.publish(msg, undefined, qos > 0);
  if (qos === 0) return durable;
  const queued = conn.hub.queueWritesFenced();
  if (queued !== null) durable = durable === null ? queued : Promise.all([durable, queued]).then(() => undefined);
  faultPoint(msg, durable);
  return durable;
}

function sessionAwaitingRel(conn: MqttLink): number {
  return conn.session?.awaitingRel.size ?? 0;
}

export function onPubrel(conn: MqttLink, id: number): void {
  const s = conn.session!;
  // Exactly-once inbound: the message was published when it first arrived; forget its id (and key) now.
  const known = s.awaitingRel.delete(id);
  forgetKey(s, id);
  if (known && s.persistent) conn.hub.persist(s);
  // v5 (section 3.7.2.1): an unknown id is answered with 0x92 Packet Identifier not found.
  conn.reply(encodeIdOnly('pubcomp', id, conn.level, known || conn.level !== 5 ? 0 : ReasonCode.PACKET_IDENTIFIER_NOT_FOUND));
}

/** Acks go out in the order the publishes arrived, whatever order storage completes in. */
function queueAck(conn: MqttLink, type: PendingAck['type'], packetId: number, durable: Promise<void> | null, reason: number): void {
  if (durable === null && conn.acksHead === conn.acks.length) {
    sendAck(conn, type, packetId, reason);
    return;
  }
  const entry: PendingAck = { type, packetId, done: durable === null, reason };
  conn.acks.push(entry);
  if (durable !== null) {
    const session = conn.session;
    durable.then(
      () => {
        entry.done = true;
        flushAcks(conn);
      },
      (err: unknown) => {
        if (storageRefusal(err) === null) return onDurableError(conn, err);
        storeRefused(conn, type, packetId, err, entry, session);
      },
    );
  }
  if (conn.acks.length - conn.acksHead >= conn.opts.maxPendingAcks) conn.pauseReading();
}

/**
 * Storage could not take an inbound publish (a full disk, the free-space reserve, a failed write, a stream
 * partition fenced by another broker): nothing was stored, so the client must send it again later. v5 refuses the
 * message alone, the connection stays: PUBACK / PUBREC 0x97 Quota exceeded for a full disk or the reserve, 0x80
 * Unspecified error for an I/O error or a fenced partition (sections
 * 3.4.2.1, 3.5.2.1; a PUBREC >= 0x80 ends a QoS 2 exchange, 4.3.3). 3.1.1 has no negative acknowledgement: the
 * connection is closed, and the client sends the message again when it reconnects [MQTT-4.4.0-1]. QoS 0 is
 * dropped. Logged as a storage condition at a bounded rate, not as the client's protocol error. `entry` is the
 * acknowledgement already queued for it (a write that failed after the publish was accepted), or null.
 */
function storeRefused(conn: MqttLink, type: PendingAck['type'], packetId: number, err: unknown, entry: PendingAck | null, s = conn.session): void {
  // A QoS 2 message that was not stored must not be taken for a duplicate when it comes again (also when this
  // connection is gone by now: the session, `s`, lives on).
  // Its key goes too: sent again, it is a new message with a new key (a destination that took the first may have a
  // later one of this session by then, and would take it for a duplicate).
  if (type === 'pubrec' && s !== null) {
    forgetKey(s, packetId);
    if (s.awaitingRel.delete(packetId) && s.persistent) conn.hub.persist(s);
  }
  if (conn.state === State.Closed) return;
  const full = storageRefusal(err) === 'full';
  const v5 = conn.level === 5;
  conn.logLimited(
    'warn',
    'storage',
    {
      clientId: conn.clientId,
      remote: conn.remote,
      qos: type === 'none' ? 0 : type === 'puback' ? 1 : 2,
      err: err instanceof Error ? err.message : String(err),
    },
    type === 'none'
      ? 'mqtt QoS 0 publish dropped: storage cannot take it now'
      : v5
        ? 'mqtt publish refused: storage cannot take it now'
        : 'mqtt publish could not be stored: closing the connection (3.1.1 has no negative acknowledgement), the client resends it',
  );
  if (type !== 'none' && !v5) {
    conn.disconnectWith(ReasonCode.UNSPECIFIED_ERROR, 'message could not be stored');
    return;
  }
  const reason = type === 'none' ? 0 : full ? ReasonCode.QUOTA_EXCEEDED : ReasonCode.UNSPECIFIED_ERROR;
  if (entry === null) {
    queueAck(conn, type, packetId, null, reason);
    return;
  }
  // The publish counted in the client's window (inQos1) when it was accepted; a failure PUBACK does not uncount it.
  if (type === 'puback' && conn.inQos1 > 0) conn.inQos1--;
  entry.reason = reason;
  entry.done = true;
  flushAcks(conn);
}

function sendAck(conn: MqttLink, type: PendingAck['type'], packetId: number, reason: number): void {
  if (type === 'none') return;
  if (type === 'puback' && reason === 0 && conn.inQos1 > 0) conn.inQos1--;
  conn.reply(encodeIdOnly(type, packetId, conn.level, reason));
}

function flushAcks(conn: MqttLink): void {
  if (conn.state === State.Closed) return;
  const acks = conn.acks;
  while (conn.acksHead < acks.length && acks[conn.acksHead].done) {
    const a = acks[conn.acksHead++];
    sendAck(conn, a.type, a.packetId, a.reason);
  }
  if (conn.acksHead === acks.length) {
    acks.length = 0;
    conn.acksHead = 0;
  } else if (conn.acksHead > 1024 && conn.acksHead * 2 > acks.length) {
    acks.splice(0, conn.acksHead);
    conn.acksHead = 0;
  }
  if (conn.readPaused && conn.state === State.Connected && acks.length - conn.acksHead < conn.opts.maxPendingAcks / 2) {
    conn.resumeReading();
  }
}
