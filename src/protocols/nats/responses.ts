/**
 * allow_responses (nats-server's `allow_responses` / a user JWT's `resp`): a client that received a request on a
 * topic it may `respond` to may publish to that request's reply subject, up to `max` times within `ttl`, without any
 * publish permission for it (a responder needs no `publish topic:_INBOX/#`). The reply subjects a connection was
 * handed are remembered per connection (at most MAX_REPLIES, the oldest dropped first, expired ones pruned).
 *
 * Unlike nats-server, an explicit deny policy on the reply topic still wins (a deny is absolute in FlowMQ); what no
 * policy allows is what a remembered reply lets through.
 */
import { NatsConnectionState } from './connection-state.js';
import { mayPublish } from './control.js';

/** Reply subjects remembered per connection (nats-server prunes its map at 4096 too). */
export const MAX_REPLIES = 4096;

/** A request on `topic` with reply topic `reply` was delivered to the connection: remember its reply if it may respond. */
export function noteRequest(conn: NatsConnectionState, topic: string, reply: string): void {
  const access = conn.access;
  if (access.open || !access.permits('respond', 'topic', topic)) return;
  // Nothing to remember when the reply may be published anyway.
  if (access.permits('publish', 'topic', reply)) return;
  const limits = access.principal.responses ?? conn.adapter.responses;
  const now = Date.now();
  const map = (conn.replies ??= new Map<string, { left: number; until: number }>());
  if (map.size >= MAX_REPLIES) prune(map, now);
  map.delete(reply);
  map.set(reply, { left: limits.max < 0 ? Infinity : limits.max, until: limits.ttlMs > 0 ? now + limits.ttlMs : Infinity });
}

function prune(map: Map<string, { left: number; until: number }>, now: number): void {
  for (const [k, v] of map) if (v.until <= now) map.delete(k);
  // Still full: the oldest go (insertion order).
  for (const k of map.keys()) {
    if (map.size < MAX_REPLIES) break;
    map.delete(k);
  }
}

/**
 * May the connection publish on `topic`? Its policies first; else a remembered reply (one use taken), unless a
 * deny names the topic. Refusals are logged by mayPublish.
 */
export function mayPublishOrReply(conn: NatsConnectionState, topic: string): boolean {
  const map = conn.replies;
  const r = map?.get(topic);
  if (r === undefined) return mayPublish(conn, topic);
  if (conn.access.permits('publish', 'topic', topic)) return true;
  if (r.until <= conn.now) {
    map!.delete(topic);
    return mayPublish(conn, topic);
  }
  if (conn.access.deniesTopic('publish', topic)) return mayPublish(conn, topic);
  if (--r.left <= 0) map!.delete(topic);
  return true;
}
