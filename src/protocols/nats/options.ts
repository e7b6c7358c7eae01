/**
 * Options of the NATS adapter (the broker fills them from the nats-* config keys). Part B of issue 15 owns the
 * defaults and their validation; part C adds the config rows.
 */
import { FlowError } from '../../core/index.js';

export interface NatsOptions {
  /** Largest PUB/HPUB payload (headers included), announced in INFO; larger: -ERR 'Maximum Payload Violation'. Default 1 MiB. */
  maxPayload?: number;
  /** Longest control line (operation and arguments); longer: -ERR 'Maximum Control Line Exceeded'. Default 4096. */
  maxControlLine?: number;
  /** Bytes queued for one connection's socket past which it is a slow consumer and closed. Default 64 MiB. */
  maxPending?: number;
  /**
   * Messages written for one connection and not yet taken by its socket past which it is a slow consumer and
   * closed (0: bytes alone bound it). Default 0: maxPending already bounds the memory.
   */
  maxPendingMsgs?: number;
  /** Server PINGs every this many ms. Default 2 min (nats-server's). */
  pingIntervalMs?: number;
  /** Unanswered server PINGs after which the connection is stale and closed. Default 2. */
  maxPingsOut?: number;
  /** CONNECT must arrive within this, or -ERR 'Authentication Timeout'. Default 2 s. */
  authTimeoutMs?: number;
  /** Connections over every NATS listener; more are refused. Default 100,000. */
  maxConnections?: number;
  /** Subscriptions per connection (0: no limit). Default 100,000. */
  maxSubscriptions?: number;
  /**
   * Payload memory all connections together may take ahead of its bytes (a payload cut by a read boundary is taken
   * whole when at most 64 KiB of it is still to come); past it, payloads are gathered as their bytes arrive (see
   * codec/parser-base.ts, "Payload memory"). What a crowd announcing payloads and sending nothing can pin. Default 8 MiB.
   */
  payloadReserveBytes?: number;
  /**
   * A control line or payload whose first bytes arrived must arrive whole within this while the connection is read,
   * or -ERR 'Stale Connection' and close (0: no deadline). Default 30 s, as MQTT's packet timeout and Kafka's
   * request receive timeout: a half-sent operation must not hold its memory forever.
   */
  opTimeoutMs?: number;
  /**
   * A client whose reading was stopped because its replies were not read (see connection.ts) is closed as a slow
   * consumer when its socket takes none of its bytes for this long (0: never). Default 10 s, nats-server's
   * write_deadline.
   */
  writeDeadlineMs?: number;
}

export type ResolvedNatsOptions = Required<NatsOptions>;

export function resolveNatsOptions(o: NatsOptions = {}): ResolvedNatsOptions {
  const r: ResolvedNatsOptions = {
    maxPayload: o.maxPayload ?? 1024 * 1024,
    maxControlLine: o.maxControlLine ?? 4096,
    maxPending: o.maxPending ?? 64 * 1024 * 1024,
    maxPendingMsgs: o.maxPendingMsgs ?? 0,
    pingIntervalMs: o.pingIntervalMs ?? 120_000,
    maxPingsOut: o.maxPingsOut ?? 2,
    authTimeoutMs: o.authTimeoutMs ?? 2000,
    maxConnections: o.maxConnections ?? 100_000,
    maxSubscriptions: o.maxSubscriptions ?? 100_000,
    payloadReserveBytes: o.payloadReserveBytes ?? 8 * 1024 * 1024,
    opTimeoutMs: o.opTimeoutMs ?? 30_000,
    writeDeadlineMs: o.writeDeadlineMs ?? 10_000,
  };
  for (const [k, v] of Object.entries(r)) {
    if (!Number.isInteger(v) || v < 0) throw new FlowError('CONFIG_ERROR', `nats ${k} must be a non-negative integer`);
  }
  // The parser needs room for an operation and its arguments; a payload of 0 would refuse every message.
  if (r.maxControlLine < 64) throw new FlowError('CONFIG_ERROR', 'nats maxControlLine must be at least 64');
  if (r.maxPayload < 1) throw new FlowError('CONFIG_ERROR', 'nats maxPayload must be at least 1');
  return r;
}
