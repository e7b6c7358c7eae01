/**
 * Options of the AMQP 0-9-1 adapter (the broker fills them from the amqp-* config keys).
 */
import { totalmem } from 'node:os';
import { FlowError } from '../../core/index.js';
import type { CertUserField } from '../../control/certs.js';

export interface AmqpOptions {
  /** frame-max offered in connection.tune; a larger frame closes the connection (501). Default 128 KiB (RabbitMQ's). */
  frameMax?: number;
  /** channel-max offered in connection.tune. Default 2047 (RabbitMQ's). */
  channelMax?: number;
  /** Heartbeat offered in connection.tune, seconds (0: none unless the client asks). Default 60 (RabbitMQ's). */
  heartbeatSec?: number;
  /** Connections over every AMQP listener of the broker; more are closed at once. Default 100,000. */
  maxConnections?: number;
  /** Protocol header to connection.open-ok within this, or the connection is closed. Default 10 s. */
  handshakeTimeoutMs?: number;
  /** Largest message body; a larger one closes its channel with 406 (RabbitMQ's max_message_size). Default 128 MiB. */
  maxMessageSize?: number;
  /** Process RSS above which publishers are blocked (connection.blocked); 0: never. Default 40% of the machine. */
  memoryHighWatermark?: number;
  /**
   * Bytes a connection's socket may hold unsent: above it its consumers stop getting deliveries (their hasCredit is
   * false until the socket drains) and the connection is not read (replies, confirms, basic.get answers count too:
   * a client that sends requests and never reads cannot make the broker queue more). A slow reader costs this much
   * memory, not a queue's worth. Default 1 MiB.
   */
  socketHighWater?: number;
  /**
   * A connection over socketHighWater whose unsent bytes do not go down for this long is closed (RabbitMQ's
   * send_timeout: 15 s by default; a little more here for slow links). Default 30 s.
   */
  sendTimeoutMs?: number;
  /**
   * Bytes one connection's partly received message bodies may hold (bodies spanning several body frames, all its
   * channels together); more closes the connection with 506 RESOURCE_ERROR. Default: maxMessageSize (one largest
   * message in progress).
   */
  maxPartialBodyBytes?: number;
  /**
   * Bytes the partly received bodies of all AMQP connections may hold together; above it a connection that adds to
   * them is not read until bodies complete (so that the memory follows what can be stored). Default: a quarter of
   * memoryHighWatermark (1 GiB when that is 0), at least maxPartialBodyBytes.
   */
  partialBodyBudget?: number;
  /**
   * Bytes of frames spanning socket reads that may be taken whole before their bytes arrive, all connections
   * together; beyond it a frame grows with the bytes that arrive (one more copy). Default 32 MiB: 256 frames of
   * 128 KiB in flight at once take the fast path.
   */
  frameAheadBudget?: number;
  /**
   * After a write refused for lack of disk space, publishers stay blocked this long, then may try again (the
   * adapter does not watch the disk itself; a refusal blocks them again). Default 5 s.
   */
  diskBlockMs?: number;
  /**
   * Publishes of one connection whose writes (queue or stream appends) have not settled, past which the
   * connection's socket is not read until half of them settled (RabbitMQ's credit_flow: 400, more after 200). Small
   * enough that a publisher without confirms cannot fill the store's queue ahead of other clients: at 10,000 one
   * such publisher took another client's confirm p99 from 12 ms to 786 ms (issue 24). Default 400.
   */
  maxPendingWrites?: number;
  /** The same bound in body bytes (at least one write is always let through). Default 2 MiB. */
  maxPendingWriteBytes?: number;
  /** Which field of a verified client certificate names the user of an EXTERNAL login (tls-cert-user). */
  certUser?: CertUserField;
}

export type ResolvedAmqpOptions = Required<AmqpOptions>;

export function resolveAmqpOptions(o: AmqpOptions = {}): ResolvedAmqpOptions {
  const r: ResolvedAmqpOptions = {
    frameMax: o.frameMax ?? 131_072,
    channelMax: o.channelMax ?? 2047,
    heartbeatSec: o.heartbeatSec ?? 60,
    maxConnections: o.maxConnections ?? 100_000,
    handshakeTimeoutMs: o.handshakeTimeoutMs ?? 10_000,
    maxMessageSize: o.maxMessageSize ?? 128 * 1024 * 1024,
    memoryHighWatermark: o.memoryHighWatermark ?? Math.floor(totalmem() * 0.4),
    socketHighWater: o.socketHighWater ?? 1024 * 1024,
    sendTimeoutMs: o.sendTimeoutMs ?? 30_000,
    maxPartialBodyBytes: 0,
    partialBodyBudget: 0,
    frameAheadBudget: o.frameAheadBudget ?? 32 * 1024 * 1024,
    diskBlockMs: o.diskBlockMs ?? 5000,
    maxPendingWrites: o.maxPendingWrites ?? 400,
    maxPendingWriteBytes: o.maxPendingWriteBytes ?? 2 * 1024 * 1024,
    certUser: o.certUser ?? 'cn',
  };
  r.maxPartialBodyBytes = o.maxPartialBodyBytes ?? r.maxMessageSize;
  r.partialBodyBudget =
    o.partialBodyBudget ?? Math.max(r.maxPartialBodyBytes, r.memoryHighWatermark > 0 ? Math.floor(r.memoryHighWatermark / 4) : 1024 * 1024 * 1024);
  const int = (v: number, min: number, max: number) => Number.isInteger(v) && v >= min && v <= max;
  if (!int(r.frameMax, 4096, 0x7fffffff)) throw new FlowError('CONFIG_ERROR', 'amqp frameMax must be an integer of at least 4096');
  if (!int(r.channelMax, 1, 65535)) throw new FlowError('CONFIG_ERROR', 'amqp channelMax must be 1..65535');
  if (!int(r.heartbeatSec, 0, 65535)) throw new FlowError('CONFIG_ERROR', 'amqp heartbeat must be 0..65535 seconds');
  if (!int(r.maxConnections, 0, Number.MAX_SAFE_INTEGER)) throw new FlowError('CONFIG_ERROR', 'amqp maxConnections must be a non-negative integer');
  if (!int(r.handshakeTimeoutMs, 1, 0x7fffffff)) throw new FlowError('CONFIG_ERROR', 'amqp handshakeTimeoutMs must be a positive integer');
  if (!int(r.maxPendingWrites, 2, 0x7fffffff)) throw new FlowError('CONFIG_ERROR', 'amqp maxPendingWrites must be an integer of at least 2');
  if (!int(r.maxPendingWriteBytes, 1, Number.MAX_SAFE_INTEGER)) throw new FlowError('CONFIG_ERROR', 'amqp maxPendingWriteBytes must be a positive integer');
  if (!int(r.maxMessageSize, 1, Number.MAX_SAFE_INTEGER)) throw new FlowError('CONFIG_ERROR', 'amqp maxMessageSize must be a positive integer');
  if (!int(r.socketHighWater, 1, Number.MAX_SAFE_INTEGER)) throw new FlowError('CONFIG_ERROR', 'amqp socketHighWater must be a positive integer');
  if (!int(r.sendTimeoutMs, 1, 0x7fffffff)) throw new FlowError('CONFIG_ERROR', 'amqp sendTimeoutMs must be a positive integer');
  if (!int(r.maxPartialBodyBytes, 1, Number.MAX_SAFE_INTEGER)) throw new FlowError('CONFIG_ERROR', 'amqp maxPartialBodyBytes must be a positive integer');
  if (!int(r.partialBodyBudget, 1, Number.MAX_SAFE_INTEGER)) throw new FlowError('CONFIG_ERROR', 'amqp partialBodyBudget must be a positive integer');
  if (!int(r.frameAheadBudget, 0, Number.MAX_SAFE_INTEGER)) throw new FlowError('CONFIG_ERROR', 'amqp frameAheadBudget must be a non-negative integer');
  return r;
}
