/**
 * Pull requests (CONSUMER.MSG.NEXT, and the `+NXT` ack that asks for more) as nats-server 2.9.10 answers them: the
 * request body, the consumer's request limits (max_batch, max_expires, max_bytes, max_waiting) with their 409
 * statuses, and the statuses that end a request (`finishRequest`). A request's max_bytes counts each message as
 * nats-server does (`pullSize`): subject + ack reply subject + header block + payload of the stored message; a message
 * that does not fit in what is left ends the request with `409 Message Size Exceeds MaxBytes` and the
 * Nats-Pending-Messages / Nats-Pending-Bytes headers (the first message of a request too), one that fills it exactly
 * ends it without a status. The delivery loop is consumer.ts; the API side (CONSUMER.MSG.NEXT, `+NXT`) consumer-api.ts.
 */
import { makeMessage, type Header, type Message } from '../../../core/index.js';
import type { ConsumerConfig } from './config.js';
import { headerBlockLength } from './stream-view.js';

export interface PullRequest {
  /** Unified topic of the request's reply inbox. */
  reply: string;
  batch: number;
  /** Bytes left (0: no limit). */
  bytesLeft: number;
  maxBytes: number;
  /** ms since epoch; 0: no expiry. */
  expiresAt: number;
  noWait: boolean;
  /** Idle heartbeat interval, ms (0: none). */
  heartbeatMs: number;
  nextHeartbeat: number;
  delivered: number;
  /** A push consumer's standing request (deliver_subject): never satisfied, never expires. */
  push?: boolean;
  /** Cluster mode: the broker that forwarded the request (its client's inbox is there); absent: this broker. */
  origin?: number;
}

/** The status a message that does not fit in a request's max_bytes ends it with. */
export const SIZE_EXCEEDED = '409 Message Size Exceeds MaxBytes';

/** What a delivery of `stored` with ack subject `ack` counts against a request's max_bytes (nats-server's sum). */
export function pullSize(stored: Message, ack: string): number {
  return stored.topic.length + ack.length + headerBlockLength(stored) + stored.payload.length;
}

/**
 * Ends a request with a status (the client's fetch completes on it); `withPending`: with what the request had left,
 * as Nats-Pending-Messages and Nats-Pending-Bytes headers.
 */
export function finishRequest(send: (msg: Message, to?: number) => void, waiting: PullRequest[], req: PullRequest, status: string, withPending: boolean): void {
  const i = waiting.indexOf(req);
  if (i >= 0) waiting.splice(i, 1);
  const headers: Header[] = withPending
    ? [
        { key: 'Nats-Pending-Messages', value: Buffer.from(String(req.batch - req.delivered)) },
        { key: 'Nats-Pending-Bytes', value: Buffer.from(String(req.maxBytes > 0 ? req.bytesLeft : 0)) },
      ]
    : [];
  send(makeMessage(req.reply, Buffer.alloc(0), { headers, status }), req.origin);
}

/** A request's `100 Idle Heartbeat` (pull, or a push consumer's); `stalled`: the flow-control request not answered. */
export function idleHeartbeat(req: PullRequest, lastConsumer: number, lastStream: number, stalled: string | undefined): Message {
  return makeMessage(req.reply, Buffer.alloc(0), {
    status: '100 Idle Heartbeat',
    headers: [
      { key: 'Nats-Last-Consumer', value: Buffer.from(String(lastConsumer)) },
      { key: 'Nats-Last-Stream', value: Buffer.from(String(lastStream)) },
      ...(stalled !== undefined ? [{ key: 'Nats-Consumer-Stalled', value: Buffer.from(stalled) }] : []),
    ],
  });
}

/** The 409 a consumer's request limits give `req`, or null (negative limits, which nats-server keeps, limit nothing). */
export function requestRefusal(config: ConsumerConfig, waitingNow: number, req: PullRequest): string | null {
  const { max_batch: batch, max_expires: expires, max_bytes: bytes, max_waiting: waiting } = config;
  if (batch !== undefined && batch > 0 && req.batch > batch) return `409 Exceeded MaxRequestBatch of ${batch}`;
  if (expires !== undefined && expires > 0 && req.expiresAt > 0 && req.expiresAt - Date.now() > expires / 1e6) {
    return `409 Exceeded MaxRequestExpires of ${expires / 1e6}ms`;
  }
  if (bytes !== undefined && bytes > 0 && req.maxBytes > bytes) return `409 Exceeded MaxRequestMaxBytes of ${bytes}`;
  if (waitingNow >= (waiting ?? 512)) return '409 Exceeded MaxWaiting';
  return null;
}

/**
 * A pull request body: empty (one message, no expiry), a number (a batch), or nats-server's JSON
 * {batch, expires (ns), no_wait, max_bytes, idle_heartbeat (ns)}. Returns the request or a 400 status.
 */
export function parsePullRequest(body: string, reply: string): PullRequest | string {
  const now = Date.now();
  const req: PullRequest = { reply, batch: 1, bytesLeft: 0, maxBytes: 0, expiresAt: 0, noWait: false, heartbeatMs: 0, nextHeartbeat: 0, delivered: 0 };
  const text = body.trim();
  if (text === '') return req;
  if (/^\d+$/.test(text)) {
    req.batch = Math.max(1, Number(text));
    return req;
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return `400 Bad Request - ${err instanceof Error ? err.message : String(err)}`;
  }
  if (raw === null || typeof raw !== 'object') return '400 Bad Request';
  const r = raw as Record<string, unknown>;
  const int = (v: unknown) => (v === undefined || v === null ? 0 : typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : NaN);
  const batch = int(r.batch);
  const expires = int(r.expires);
  const maxBytes = int(r.max_bytes);
  const hb = int(r.idle_heartbeat);
  if ([batch, expires, maxBytes, hb].some(Number.isNaN)) return '400 Bad Request';
  req.batch = batch > 0 ? batch : 1;
  req.noWait = r.no_wait === true;
  if (expires > 0) req.expiresAt = now + expires / 1e6;
  if (maxBytes > 0) req.maxBytes = req.bytesLeft = maxBytes;
  if (hb > 0) {
    if (expires > 0 && hb > expires) return '400 Bad Request - heartbeat value too large';
    req.heartbeatMs = hb / 1e6;
    req.nextHeartbeat = now + req.heartbeatMs;
  }
  return req;
}
