/**
 * The cluster channel's state (`ChannelState`, the base of the channel) and its bookkeeping of peers: what this
 * broker knows of each peer (`Peer`: its outgoing connection, the requests pending on it, the backlog while the
 * connection is made or over the high-water mark, reconnection backoff, figures), and what the channel's parts use:
 * writing a peer's backlog in call order, failing its pending requests when its connection is lost and reconnecting
 * in the background, logging refusals. The parts are in channel.ts (the PeerChannel API), channel-handshake.ts
 * (dialing and accepting) and channel-requests.ts (frames on an open connection).
 */
import type { Server } from 'node:net';
import type { Logger } from 'pino';
import { FlowError } from '../core/index.js';
import { LogLimiter } from '../util/log-limit.js';
import { backoffDelay } from '../util/backoff.js';
import type { Cluster } from './cluster.js';
import { Conn, HEADER, newFigures, T } from './channel-conn.js';
import type { ChannelTls, ChannelTlsOptions } from './channel-tls.js';

export interface ChannelOptions {
  /** Peers' addresses come from the membership view (BrokerState.endpoints.cluster). */
  cluster: Cluster;
  host: string;
  port: number;
  /** The shared secret both ends prove knowledge of (--cluster-secret). */
  secret: string;
  /** TLS on the channel (channel-tls.ts): psk, cert or off (the default here; the broker's config picks psk). */
  tls?: ChannelTlsOptions;
  logger: Logger;
  /** Default request timeout (default 2 × the membership lease, at least 5 s). */
  requestTimeoutMs?: number;
  /** Largest frame either way (default 64 MiB). */
  maxFrameBytes?: number;
  /** Outgoing bytes per peer above which ready() and requests wait (default 4 MiB). */
  highWaterBytes?: number;
  /** Outgoing bytes per peer above which one-way messages are dropped (default 64 MiB). */
  maxQueuedBytes?: number;
  /** Time to finish the handshake (default 5 s). */
  handshakeTimeoutMs?: number;
  /** A PING after this long without traffic from the peer (default 2 s). */
  pingIntervalMs?: number;
  /** A connection that heard nothing for this long is closed (default 10 s). */
  silentAfterMs?: number;
  /** Requests of one accepted connection handled at once before it stops being read (default 4096). */
  maxInflight?: number;
}

/** Reconnect backoff: first retry, cap. Well under the lease, so a blip costs less than a failover. */
const BACKOFF_MIN_MS = 50;
const BACKOFF_MAX_MS = 1000;
export const reconnectDelay = (failures: number): number => backoffDelay(failures, BACKOFF_MIN_MS, BACKOFF_MAX_MS);

export interface Pending {
  resolve(b: Buffer): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

/** What this broker knows about one peer: its outgoing connection, the requests pending on it, figures. */
export class Peer {
  conn: Conn | null = null;
  connecting: Promise<Conn> | null = null;
  /** One-way and request frames queued while the connection is being made. */
  backlog: Array<{ type: number; id: number; method: string; body: Buffer }> = [];
  backlogBytes = 0;
  readonly pending = new Map<number, Pending>();
  readonly readyWaiters: Array<() => void> = [];
  /** Connection failures in a row (the reconnect backoff's attempt). */
  failures = 0;
  /** No connection attempt before this time (after a failure). */
  retryAt = 0;
  retryTimer: NodeJS.Timeout | null = null;
  lastError = '';
  /** The last attempt failed: read the peer's address from the store, not the view (it may have moved). */
  stale = false;
  /** The view listed this connection's peer alive (so its later absence means it left). */
  seenAlive = false;
  /** The store or view says the peer is dead or gone: no background reconnection (on use only). */
  gone = false;
  incarnation = '';
  /** The channel version both ends speak (rpc.ts), known once a connection was made. */
  version: number | undefined = undefined;
  readonly figures = newFigures();
  constructor(readonly id: number) {}

  get queued(): number {
    return this.backlogBytes + (this.conn ? this.conn.queued : 0);
  }
}

/** The channel's state (see the file header); the channel of channel.ts is its one subclass. */
export abstract class ChannelState {
  protected readonly server: Server;
  readonly cluster: Cluster;
  readonly secret: string;
  protected readonly logger: Logger;
  readonly limiter: LogLimiter;
  readonly handlers = new Map<string, (from: number, body: Buffer) => Promise<Buffer> | Buffer>();
  readonly listeners = new Map<string, (from: number, body: Buffer) => void>();
  protected readonly peers = new Map<number, Peer>();
  /** Accepted (authenticated) connections by peer id. */
  readonly accepted = new Map<number, Set<Conn>>();
  readonly handshaking = new Set<Conn>();
  protected readonly requestTimeoutMs: number;
  readonly maxFrame: number;
  readonly highWater: number;
  protected readonly maxQueued: number;
  readonly handshakeMs: number;
  protected readonly pingMs: number;
  protected readonly silentMs: number;
  readonly maxInflight: number;
  protected nextId = 1;
  closed = false;
  protected readonly refusals: Record<string, number> = {};
  /** Connections being dialed (closed at once by close()). */
  readonly dialing = new Set<Conn>();
  /** The channel's TLS (null: plaintext). */
  tls: ChannelTls | null = null;

  protected constructor(opts: ChannelOptions, server: Server) {
    this.server = server;
    this.cluster = opts.cluster;
    this.secret = opts.secret;
    this.logger = opts.logger;
    this.limiter = new LogLimiter(opts.logger);
    this.requestTimeoutMs = opts.requestTimeoutMs ?? Math.max(5000, 2 * opts.cluster.leaseMs);
    this.maxFrame = opts.maxFrameBytes ?? 64 * 1024 * 1024;
    this.highWater = opts.highWaterBytes ?? 4 * 1024 * 1024;
    this.maxQueued = opts.maxQueuedBytes ?? 64 * 1024 * 1024;
    this.handshakeMs = opts.handshakeTimeoutMs ?? 5000;
    this.pingMs = opts.pingIntervalMs ?? 2000;
    this.silentMs = opts.silentAfterMs ?? 10_000;
    this.maxInflight = opts.maxInflight ?? 4096;
  }

  /**
   * Writes the backlog in call order: one-way messages at once, requests while the connection is under the
   * high-water mark (a request stops the queue behind it, so that the order of calls is the order on the wire).
   */
  protected pump(peer: Peer): void {
    const c = peer.conn;
    if (!c) return;
    while (peer.backlog.length > 0) {
      const f = peer.backlog[0];
      if (f.type === T.REQUEST && peer.pending.has(f.id) && c.queued >= this.highWater) break;
      peer.backlog.shift();
      peer.backlogBytes -= HEADER + f.body.length;
      if (f.type !== T.REQUEST || peer.pending.has(f.id)) c.write(f.type, f.id, f.method, f.body);
    }
  }

  // --- outgoing side ---

  peer(id: number): Peer {
    let p = this.peers.get(id);
    if (!p) {
      p = new Peer(id);
      this.peers.set(id, p);
    }
    return p;
  }

  /**
   * Reconnects in the background after a lost connection while the peer is alive in the view, so that its next
   * messages need no dial. A peer never reached (or refusing us) is only tried again on use, after the backoff.
   */
  protected scheduleRetry(peer: Peer): void {
    if (this.closed || peer.retryTimer || peer.figures.connects === 0 || peer.gone) return;
    peer.retryTimer = setTimeout(
      () => {
        peer.retryTimer = null;
        if (!this.closed && !peer.conn && !peer.connecting && !peer.gone) void this.connect(peer).catch(() => undefined);
      },
      Math.max(0, peer.retryAt - Date.now()),
    );
    peer.retryTimer.unref();
  }

  /** The peer's connection is gone: every pending request fails now (UNAVAILABLE), and we reconnect with backoff. */
  lose(peer: Peer, c: Conn, why: string): void {
    c.close();
    if (peer.conn !== c) return;
    peer.conn = null;
    peer.lastError = why;
    peer.stale = true;
    peer.retryAt = Date.now() + reconnectDelay(++peer.failures);
    const n = this.rejectAll(peer, new FlowError('UNAVAILABLE', `the connection to broker ${peer.id} was lost (${why})`));
    peer.figures.rejectedOnLoss += n;
    peer.figures.dropped += peer.backlog.filter((f) => f.type === T.ONEWAY).length;
    peer.backlog = [];
    peer.backlogBytes = 0;
    for (const w of peer.readyWaiters.splice(0)) w();
    if (!this.closed) {
      this.limiter.log('info', `lost|${peer.id}`, { peer: peer.id, why, rejected: n }, 'cluster channel: connection to a peer lost');
      this.scheduleRetry(peer);
    }
  }

  protected rejectAll(peer: Peer, err: FlowError): number {
    const n = peer.pending.size;
    for (const p of peer.pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    peer.pending.clear();
    return n;
  }

  /** The connection wrote or drained: move the backlog on, wake ready() waiters once under the high-water mark. */
  drained(peer: Peer): void {
    if (peer.backlog.length > 0) this.pump(peer);
    if (peer.readyWaiters.length === 0 || peer.queued >= this.highWater) return;
    for (const w of peer.readyWaiters.splice(0)) w();
  }

  // --- accepting side ---

  refused(kind: string, address: string | undefined, fields: Record<string, unknown>, msg: string): void {
    this.refusals[kind] = (this.refusals[kind] ?? 0) + 1;
    this.limiter.log('warn', logKey(`refuse-${kind}`, address), { ...fields, remote: address, kind }, msg);
  }

  /** The peer's authenticated connection, made now if needed (channel.ts). */
  abstract connect(peer: Peer): Promise<Conn>;
}

export function parseJson<X>(b: Buffer): X | null {
  try {
    const v = JSON.parse(b.toString('utf8')) as unknown;
    return v !== null && typeof v === 'object' ? (v as X) : null;
  } catch {
    return null;
  }
}

export function logKey(event: string, address: string | undefined): string {
  return `${event}|${address ?? '?'}`;
}
