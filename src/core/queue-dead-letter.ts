/**
 * The message a queue dead-letters (src/core/queue.ts): RabbitMQ's x-death bookkeeping. One death record per
 * (queue, reason), the newest first: a message dead-lettered again for the same reason counts up its record and
 * moves it to the front.
 */
import type { DeathRecord, Message } from './message.js';

/** Unified topic → AMQP routing key on amq.topic (the separator swap of topic.ts, for death records). */
function dottedKey(topic: string): string {
  let out = '';
  for (const ch of topic) out += ch === '/' ? '.' : ch === '.' ? '/' : ch;
  return out;
}

/** The copy of `msg` that queue `queue` dead-letters for `reason`, routed with `deadLetterRoutingKey` when set. */
export function deadLettered(msg: Message, queue: string, reason: DeathRecord['reason'], deadLetterRoutingKey: string | undefined, now: number): Message {
  const exchange = msg.exchange ?? 'amq.topic';
  const routingKey = msg.routingKey ?? dottedKey(msg.topic);
  const deaths = msg.deaths ? msg.deaths.slice() : [];
  const i = deaths.findIndex((d) => d.queue === queue && d.reason === reason);
  let rec: DeathRecord;
  if (i >= 0) {
    rec = { ...deaths[i], count: deaths[i].count + 1 };
    deaths.splice(i, 1);
  } else {
    rec = { queue, reason, exchange, routingKeys: [routingKey], count: 1, time: now };
    if (msg.expiresAt !== undefined) rec.originalExpiration = String(Math.max(0, Math.round(msg.expiresAt - msg.timestamp)));
  }
  deaths.unshift(rec);
  // As RabbitMQ: the per-message expiration does not follow the message into the dead-letter queue.
  const out: Message = { ...msg, deaths, routingKey: deadLetterRoutingKey ?? routingKey };
  // A new publish: not the MQTT QoS 2 publish it came from (a destination would take it for a retry of that).
  delete out.pubKey;
  delete out.expiresAt;
  return out;
}
