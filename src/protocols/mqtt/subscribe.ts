/**
 * SUBSCRIBE and UNSUBSCRIBE of an MQTT connection (as Mosquitto's handle_subscribe.c and handle_unsubscribe.c):
 * topic filters (shared `$share/<group>/` ones included) become engine subscriptions of the session, `$queue/<name>`
 * filters queue consumers (queue-consumer.ts); authorization per filter; the SUBACK / UNSUBACK; then the retained
 * messages of new subscriptions (Retain Handling) and the start of new queue consumers.
 */
import type { QoS, Subscription } from '../../core/index.js';
import { isFlowError, isReservedName, isReservedTopic, validateFilter } from '../../core/index.js';
import {
  MqttProtocolError,
  ReasonCode,
  SUBACK_FAILURE,
  encodeSuback,
  encodeUnsuback,
  type SubscribePacket,
  type SubscriptionRequest,
  type UnsubscribePacket,
} from './codec/index.js';
import { newDelivery, splitShared, subscribeOptions, type SubData } from './session.js';
import { MqttQueueConsumer, QUEUE_PREFIX } from './queue-consumer.js';
import { levels, type MqttLink } from './link.js';
import { route } from './outbound.js';

export function onSubscribe(conn: MqttLink, p: SubscribePacket): void {
  const subId = p.properties?.subscriptionIdentifiers?.[0];
  // [MQTT-3.8.4-4] several filters are handled as a sequence of SUBSCRIBEs, answered by one SUBACK whose
  // return codes follow the request order [MQTT-3.8.4-5]. Retained messages follow the SUBACK.
  const retained: Array<{ sub: Subscription; isNew: boolean }> = [];
  const codes = p.subscriptions.map((s) => subscribeOne(conn, s, subId, retained));
  conn.reply(encodeSuback({ type: 'suback', packetId: p.packetId, returnCodes: codes, properties: conn.level === 5 ? {} : undefined }, conn.level));
  if (conn.session!.persistent) conn.hub.persist(conn.session!);
  for (const r of retained) sendRetained(conn, r.sub, r.isNew);
  const starts = conn.queueStarts;
  if (starts !== null) {
    conn.queueStarts = null;
    for (const c of starts) {
      c.started = true;
      c.handle.resume(c);
    }
  }
}

function subscribeOne(conn: MqttLink, req: SubscriptionRequest, subId: number | undefined, retained: Array<{ sub: Subscription; isNew: boolean }>): number {
  const v5 = conn.level === 5;
  const invalidFilter = v5 ? ReasonCode.TOPIC_FILTER_INVALID : SUBACK_FAILURE;
  if (req.filter.startsWith(QUEUE_PREFIX)) return subscribeQueue(conn, req);
  const { group, filter } = splitShared(req.filter);
  if (group !== undefined) {
    // Shared subscription `$share/<group>/<filter>` (standard in MQTT 5, accepted from 3.1.1 clients too).
    if (group.length === 0 || filter.length === 0 || group.includes('+') || group.includes('#')) return invalidFilter;
    // [MQTT-3.8.3-4] No Local on a shared subscription is a Protocol Error.
    if (req.noLocal) throw new MqttProtocolError('no local on a shared subscription', '[MQTT-3.8.3-4]', undefined, ReasonCode.PROTOCOL_ERROR);
  }
  try {
    validateFilter(filter);
  } catch {
    return invalidFilter;
  }
  if (levels(filter) > conn.opts.maxTopicLevels) return invalidFilter;
  // A shared subscription is authorized by its filter (the group name is not a resource). 'filter': granted, and
  // each delivery is checked by the admit predicate every subscription of the session carries.
  // `$ns/...` is the reserved space of namespaces (core namespaces.ts): refused as a deny, whoever asks.
  if (isReservedTopic(filter)) return v5 ? ReasonCode.NOT_AUTHORIZED : SUBACK_FAILURE;
  if (conn.access !== null && conn.access.subscription(filter) === 'deny') return v5 ? ReasonCode.NOT_AUTHORIZED : SUBACK_FAILURE;
  const granted = (req.qos < conn.opts.maxQos ? req.qos : conn.opts.maxQos) as QoS;
  const data: SubData = {
    filter: req.filter,
    noLocal: req.noLocal === true,
    retainAsPublished: req.retainAsPublished === true,
    retainHandling: req.retainHandling ?? 0,
    subscriptionId: subId,
  };
  const s = conn.session!;
  let sub: Subscription;
  try {
    sub = conn.ctx.engine.subscribe(conn.names.topic(filter), s, subscribeOptions(s, granted, group, data, conn.access !== null));
  } catch (err) {
    if (!isFlowError(err)) throw err;
    conn.logLimited(
      'debug',
      'subscription refused',
      { clientId: conn.clientId, remote: conn.remote, filter: req.filter, err: err.message },
      'mqtt subscription refused',
    );
    return invalidFilter;
  }
  // [MQTT-3.8.4-3] an identical filter replaces the existing subscription. The new one is added before the
  // old one is removed, so the flow of publications is not interrupted.
  const old = s.subs.get(req.filter);
  if (old) conn.ctx.engine.unsubscribe(old);
  s.subs.set(req.filter, sub);
  // Retained messages are not sent to shared subscriptions (v5 section 4.8.2); Retain Handling decides.
  if (group === undefined && data.retainHandling !== 2) retained.push({ sub, isNew: old === undefined });
  return granted;
}

/**
 * `$queue/<name>`: consume the queue `<name>` (everything after the prefix, verbatim). Granted QoS 1 (the PUBACK
 * is the queue ack) or 0 (no-ack); refused when the queue does not exist, is another connection's exclusive
 * queue, or has an exclusive consumer. Not kept with a persistent session: the client subscribes again on
 * reconnect (the queue keeps the messages meanwhile).
 */
function subscribeQueue(conn: MqttLink, req: SubscriptionRequest): number {
  const refused = conn.level === 5 ? ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR : SUBACK_FAILURE;
  const name = req.filter.slice(QUEUE_PREFIX.length);
  if (isReservedName(name) || (conn.access !== null && !conn.access.can('subscribe', 'queue', name))) {
    return conn.level === 5 ? ReasonCode.NOT_AUTHORIZED : SUBACK_FAILURE;
  }
  const handle = name.length > 0 ? conn.ctx.engine.getQueue(conn.names.name(name)) : undefined;
  if (handle === undefined || handle.def.exclusiveOwner !== null) {
    conn.logLimited(
      'debug',
      'queue subscription refused',
      { clientId: conn.clientId, remote: conn.remote, filter: req.filter },
      'mqtt queue subscription refused: no such queue',
    );
    return refused;
  }
  const max = conn.opts.maxQos < 1 ? conn.opts.maxQos : 1;
  const granted = (req.qos < max ? req.qos : max) as QoS;
  const c = new MqttQueueConsumer(handle, req.filter, conn.session!.clientId, granted === 0, conn);
  const subs = (conn.queueSubs ??= new Map<string, MqttQueueConsumer>());
  // [MQTT-3.8.4-3] the same filter again replaces the subscription (deliveries in flight stay acknowledgeable).
  const old = subs.get(req.filter);
  if (old) {
    subs.delete(req.filter);
    old.handle.cancel(old);
  }
  try {
    handle.consume(c);
  } catch (err) {
    if (!isFlowError(err)) throw err;
    conn.logLimited(
      'debug',
      'queue subscription refused',
      { clientId: conn.clientId, remote: conn.remote, filter: req.filter, err: err.message },
      'mqtt queue subscription refused',
    );
    return refused;
  }
  subs.set(req.filter, c);
  // Deliveries start after the SUBACK (onSubscribe), as retained messages do.
  (conn.queueStarts ??= []).push(c);
  return granted;
}

/** [MQTT-3.3.1-6] retained messages matching a new subscription, with RETAIN 1 [MQTT-3.3.1-8]. */
function sendRetained(conn: MqttLink, sub: Subscription, isNew: boolean): void {
  const d = sub.options.data as SubData;
  // [MQTT-3.3.1-10] Retain Handling 1: only when the subscription did not exist.
  if (d.retainHandling === 1 && !isNew) return;
  const now = Date.now();
  const admit = conn.session!.admit;
  conn.ctx.engine.retained.match(sub.filter, (msg) => {
    if (msg.expiresAt !== undefined && msg.expiresAt <= now) return;
    // Retained messages follow the subscription's policy as live ones do.
    if (!admit(msg.topic)) return;
    const qos = (msg.qos < sub.options.qos ? msg.qos : sub.options.qos) as QoS;
    route(conn, newDelivery(msg, qos, true, d.subscriptionId !== undefined ? [d.subscriptionId] : null, null, false));
  });
}

export function onUnsubscribe(conn: MqttLink, p: UnsubscribePacket): void {
  const s = conn.session!;
  const codes: number[] = [];
  for (const f of p.filters) {
    // [MQTT-3.10.4-1] filters compare character by character.
    const qc = conn.queueSubs?.get(f);
    if (qc) {
      // Deliveries in flight stay acknowledgeable (their PUBACK still acks them) until the connection ends.
      conn.queueSubs!.delete(f);
      qc.handle.cancel(qc);
      codes.push(ReasonCode.SUCCESS);
      continue;
    }
    const sub = s.subs.get(f);
    if (sub) {
      conn.ctx.engine.unsubscribe(sub);
      s.subs.delete(f);
      codes.push(ReasonCode.SUCCESS);
    } else codes.push(ReasonCode.NO_SUBSCRIPTION_EXISTED);
  }
  if (s.persistent) conn.hub.persist(s);
  // [MQTT-3.10.4-4] [MQTT-3.10.4-5] UNSUBACK even when nothing matched (v5 says so per filter).
  conn.reply(encodeUnsuback({ type: 'unsuback', packetId: p.packetId, reasonCodes: codes, properties: {} }, conn.level));
}
