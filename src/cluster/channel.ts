/**
 * The brokers' internal channel over TCP: the PeerChannel contract of types.ts (requests with a reply, one-way
 * messages batched per peer) between the brokers of a cluster, addressed by broker id.
 *
 * Connections. Each broker dials its own connection to each peer it talks to and the peer answers on it: a
 * connection carries requests and one-way messages from its dialer, and replies from its acceptor, never the other
 * way. So two brokers that talk both ways hold two connections, and there is no "who keeps the connection when
 * both dial at once" race to settle; one-way messages keep their order because one connection carries them.
 * Connections are made on first use (a request or send to that peer) to the address the membership view gives
 * (`BrokerState.endpoints.cluster`, re-read from the store when the view does not know the peer or its address
 * fails), and made again with backoff after a loss while the peer is alive in the view.
 *
 * Authentication (mutual HMAC-SHA256 challenge–response; the secret never travels). The acceptor opens with HELLO
 * {its id, incarnation, a random nonce}; the dialer answers AUTH {its id, incarnation, its nonce, the id and
 * incarnation it saw, HMAC(secret, "dial" | both ids, incarnations and nonces)}; the acceptor checks the MAC (in
 * constant time), then that the dialer is a live registered broker of that incarnation (the store is asked when
 * its view does not know it), and answers WELCOME {HMAC(secret, "accept" | the same fields)}, which the dialer
 * checks: each side proves it holds the secret over the other's fresh nonce, so a recorded handshake cannot be
 * replayed, and the two labels keep one side's proof from being reflected as the other's. A dialer that reached a
 * broker other than the one it wanted (a stale address) gives up before proving anything. Refusals (wrong secret,
 * unknown broker, no handshake within `handshakeTimeoutMs`, an oversized frame) close the connection with a REFUSE
 * frame naming the reason and are logged rate-limited (log-limit.ts): the port may be reachable by anyone.
 *
 * Framing: [u32 length][u8 type][u32 request id][u16 method code][body] — a fixed 11-byte binary header, no JSON on
 * the hot path. Method names are sent once per connection (a DEFINE frame binds a code to a name) so that a small
 * live message does not carry "live.publish" each time. Frames over `maxFrameBytes` (64 MiB) are refused by both
 * ends (a sender rejects the request with LIMIT_EXCEEDED, or drops and counts a one-way message); before the
 * handshake completes, frames over 4 KiB are refused, so an unauthenticated client cannot make a broker buffer.
 *
 * Batching: frames are queued per connection and written once per event-loop turn (setImmediate), small frames
 * concatenated into one buffer, large bodies written as they are inside one cork/uncork: one syscall for many
 * forwarded batches or live messages instead of one per frame. TCP_NODELAY is set: the batching is ours.
 *
 * Back-pressure. A peer's outgoing bytes (queued frames + the socket's unwritten buffer) have a high-water mark
 * (`highWaterBytes`): `ready(to)` resolves once below it, and requests wait for it before queueing. One-way messages
 * are never waited for by the channel (their callers are live paths that must not block); past a hard cap
 * (`maxQueuedBytes`) they are dropped and counted, so a peer that stops reading cannot grow memory without bound.
 * On the accepting side a connection stops being read while its replies are not drained or too many of its
 * requests are in flight: TCP pushes back on the dialer.
 *
 * Order: requests and one-way messages to a peer go on the wire in call order (one backlog for both while the
 * connection is being made or a request waits for the high-water mark), so a forwarder may pipeline appends.
 *
 * Bodies: a received one-way body is a view of the socket's read buffer (valid as long as it is referenced; a
 * listener keeping a small one beyond the call copies it); a small request or reply body is copied out of a large
 * chunk (see Conn.data). A body handed to request() or send() must not be modified afterwards: large ones are
 * written by reference.
 *
 * Failures. A request not answered within its timeout (default 2 × the membership lease) rejects with UNAVAILABLE;
 * a lost connection rejects every request pending on it at once with UNAVAILABLE (the callers re-resolve the owner
 * and retry); a FlowError thrown by a handler arrives with its code and message. Idle connections: TCP keepalive,
 * and a PING every `pingIntervalMs` without traffic; a connection that heard nothing for `silentAfterMs` is
 * closed (a stopped peer), as is one to a peer the membership view declares dead (its work is moving: failing fast
 * lets the callers find the new owner instead of waiting for a timeout).
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import type { Logger } from 'pino';
import { FlowError, type ErrorCode } from '../core/index.js';
import { LogLimiter } from '../util/log-limit.js';
import { backoffDelay } from '../util/backoff.js';
import { CHANNEL_VERSION, MIN_CHANNEL_VERSION, RPC } from './rpc.js';
import type { Cluster } from './cluster.js';
import type { BrokerState, PeerChannel } from './types.js';

export interface ChannelOptions {
  /** Peers' addresses come from the membership view (BrokerState.endpoints.cluster). */
  cluster: Cluster;
  host: string;
  port: number;
  /** The shared secret both ends prove knowledge of (--cluster-secret). */
  secret: string;
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

export interface TcpChannel extends PeerChannel {
  address(): AddressInfo;
}

/** The handshake's format, part of its MAC (what messages a peer knows is the channel version of rpc.ts). */
const PROTOCOL_VERSION = 1;

/** The version both ends speak, given the peer's newest (absent: 1); null when the peer is too old to let in. */
function negotiate(peerMax: unknown): number | null {
  const v = typeof peerMax === 'number' && Number.isSafeInteger(peerMax) && peerMax >= 1 ? peerMax : 1;
  return v < MIN_CHANNEL_VERSION ? null : Math.min(v, CHANNEL_VERSION);
}
const HEADER = 11;
const PRE_AUTH_MAX_FRAME = 4096;
/** Connections still in their handshake at once (more are closed at accept). */
const MAX_HANDSHAKES = 256;
/** Reconnect backoff: first retry, cap. Well under the lease, so a blip costs less than a failover. */
const BACKOFF_MIN_MS = 50;
const BACKOFF_MAX_MS = 1000;
const reconnectDelay = (failures: number): number => backoffDelay(failures, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
/** Small frames are concatenated into one buffer per write; bodies at least this big are written as they are. */
const COPY_BELOW = 16 * 1024;
/** Size of a connection's staging buffer for small frames. */
const STAGE_BYTES = 64 * 1024;
const EMPTY = Buffer.alloc(0);

const enum T {
  REQUEST = 1,
  REPLY = 2,
  ERROR = 3,
  ONEWAY = 4,
  DEFINE = 5,
  PING = 6,
  PONG = 7,
  HELLO = 10,
  AUTH = 11,
  WELCOME = 12,
  REFUSE = 13,
}

/** Per-peer figures (both directions). */
interface PeerFigures {
  sentFrames: number;
  sentBytes: number;
  receivedFrames: number;
  receivedBytes: number;
  dropped: number;
  connects: number;
  connectFailures: number;
  timeouts: number;
  rejectedOnLoss: number;
}

function newFigures(): PeerFigures {
  return { sentFrames: 0, sentBytes: 0, receivedFrames: 0, receivedBytes: 0, dropped: 0, connects: 0, connectFailures: 0, timeouts: 0, rejectedOnLoss: 0 };
}

interface Pending {
  resolve(b: Buffer): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

interface Hello {
  /** The handshake's format (its MAC); the messages' version is `max`. */
  v: number;
  /** The newest channel version the sender speaks (absent: 1). */
  max?: number;
  id: number;
  inc: string;
  nonce: string;
}

interface Auth {
  v: number;
  max?: number;
  id: number;
  inc: string;
  nonce: string;
  to: number;
  toInc: string;
  mac: string;
}

function mac(secret: string, label: 'dial' | 'accept', h: Hello, a: Omit<Auth, 'mac' | 'to' | 'toInc' | 'v'>): Buffer {
  return createHmac('sha256', secret).update(`flowmq-cluster/${PROTOCOL_VERSION} ${label} ${a.id} ${a.inc} ${a.nonce} ${h.id} ${h.inc} ${h.nonce}`).digest();
}

function sameMac(expected: Buffer, hex: unknown): boolean {
  if (typeof hex !== 'string' || hex.length !== expected.length * 2) return false;
  const got = Buffer.from(hex, 'hex');
  return got.length === expected.length && timingSafeEqual(got, expected);
}

/**
 * One TCP connection, either end: framing, method codes, the batched writer. What the frames mean is the
 * channel's business (dispatch callbacks).
 */
class Conn {
  readonly socket: Socket;
  /** Set once authenticated. */
  peer = -1;
  peerInc = '';
  authed = false;
  closed = false;
  lastRx = Date.now();
  private chunks: Buffer[] = [];
  /** Read position in chunks[0]. */
  private off = 0;
  /** Unread bytes in chunks. */
  private have = 0;
  /** Pieces ready for the socket, in order. */
  private out: Buffer[] = [];
  outBytes = 0;
  /**
   * The staging buffer small frames are written into. Bytes handed to the socket are never overwritten: writing
   * only moves forward, and a full buffer is replaced, not reused.
   */
  private stage: Buffer = EMPTY;
  private stagePos = 0;
  private stageStart = 0;
  private flushing = false;
  private readonly methodsOut = new Map<string, number>();
  readonly methodsIn = new Map<number, string>();
  figures: PeerFigures | null = null;
  /** Called after each write to the socket (the dialer's ready() waiters). */
  afterFlush: (() => void) | null = null;
  /** Accepted side: requests being handled. */
  inflight = 0;
  paused = false;

  constructor(
    socket: Socket,
    private readonly maxFrame: number,
    private readonly onFrame: (c: Conn, type: number, id: number, method: number, body: Buffer) => void,
    private readonly onError: (c: Conn, reason: string) => void,
  ) {
    this.socket = socket;
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 10_000);
    socket.on('data', (chunk: Buffer) => this.data(chunk));
  }

  private data(chunk: Buffer): void {
    this.lastRx = Date.now();
    this.chunks.push(chunk);
    this.have += chunk.length;
    // Frames are read in place (`off` into the first chunk); a frame spanning chunks costs one concat when it is
    // complete, never one per chunk.
    while (!this.closed && this.have >= 4) {
      let head = this.chunks[0];
      let off = this.off;
      if (head.length - off < 4) {
        head = this.merge();
        off = 0;
      }
      const len = head.readUInt32BE(off);
      const limit = this.authed ? this.maxFrame + HEADER - 4 : PRE_AUTH_MAX_FRAME;
      if (len < HEADER - 4 || len > limit) {
        this.onError(this, len < HEADER - 4 ? `malformed frame (length ${len})` : `frame of ${len} bytes over the limit of ${limit}`);
        return;
      }
      const total = 4 + len;
      if (this.have < total) return;
      if (head.length - off < total) {
        head = this.merge();
        off = 0;
      }
      const type = head[off + 4];
      const id = head.readUInt32BE(off + 5);
      const code = head.readUInt16BE(off + 9);
      // Bodies are views of the socket's chunk, except a request's or reply's that is a small part of a large chunk:
      // it is copied, so that a handler keeping it (a forwarded batch in a partition's in-memory tail) does not pin
      // the whole chunk (64 KiB for a 1 KiB batch). One-way bodies (live messages, at the highest rates) are not
      // copied: measured, the copy costs 20-30% of the channel's CPU per small message, and their listeners decode
      // them into fresh buffers anyway (decodeStoredMessage copies). A listener that keeps a one-way body copies it.
      let body = head.subarray(off + HEADER, off + total);
      if (type !== T.ONEWAY && total * 4 < head.length) body = Buffer.from(body);
      if (head.length - off === total) {
        this.chunks.shift();
        this.off = 0;
      } else this.off = off + total;
      this.have -= total;
      if (this.figures) {
        this.figures.receivedFrames++;
        this.figures.receivedBytes += total;
      }
      this.onFrame(this, type, id, code, body);
    }
  }

  /** The unread bytes as one buffer. */
  private merge(): Buffer {
    this.chunks[0] = this.chunks[0].subarray(this.off);
    this.off = 0;
    const all = Buffer.concat(this.chunks, this.have);
    this.chunks = [all];
    return all;
  }

  /** Queues a frame; written with the others of this event-loop turn. */
  write(type: number, id: number, method: string | null, body: Buffer): void {
    if (this.closed) return;
    let code = 0;
    if (method !== null) {
      const known = this.methodsOut.get(method);
      if (known === undefined) {
        code = this.methodsOut.size + 1;
        if (code > 0xffff) throw new FlowError('LIMIT_EXCEEDED', 'too many channel methods');
        this.methodsOut.set(method, code);
        this.write(T.DEFINE, code, null, Buffer.from(method));
      } else code = known;
    }
    // Header and small body are copied into the staging buffer (no allocation per frame; the bytes of a turn end
    // up contiguous); a large body is referenced as it is, after the staged bytes before it.
    const small = body.length < COPY_BELOW;
    const need = HEADER + (small ? body.length : 0);
    let st = this.stage;
    if (st.length - this.stagePos < need) {
      this.cut();
      st = this.stage = Buffer.allocUnsafe(Math.max(STAGE_BYTES, need));
      this.stagePos = this.stageStart = 0;
    }
    let pos = this.stagePos;
    st.writeUInt32BE(HEADER - 4 + body.length, pos);
    st[pos + 4] = type;
    st.writeUInt32BE(id, pos + 5);
    st.writeUInt16BE(code, pos + 9);
    pos += HEADER;
    if (small) pos += body.copy(st, pos);
    this.stagePos = pos;
    if (!small) {
      this.cut();
      this.out.push(body);
    }
    this.outBytes += HEADER + body.length;
    if (this.figures) {
      this.figures.sentFrames++;
      this.figures.sentBytes += HEADER + body.length;
    }
    if (!this.flushing) {
      this.flushing = true;
      setImmediate(() => this.flush());
    }
  }

  /** Bytes not yet on the wire. */
  get queued(): number {
    return this.outBytes + this.socket.writableLength;
  }

  /** The staged bytes not yet handed out become one piece of the output. */
  private cut(): void {
    if (this.stagePos > this.stageStart) {
      this.out.push(this.stage.subarray(this.stageStart, this.stagePos));
      this.stageStart = this.stagePos;
    }
  }

  flush(): void {
    this.flushing = false;
    if (this.closed) return;
    this.cut();
    if (this.out.length === 0) return;
    const out = this.out;
    this.out = [];
    this.outBytes = 0;
    const s = this.socket;
    if (out.length === 1) s.write(out[0]);
    else {
      s.cork();
      for (const b of out) s.write(b);
      s.uncork();
    }
    this.afterFlush?.();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.out = [];
    this.outBytes = 0;
    this.chunks = [];
    this.socket.destroy();
  }

  /** Writes what is queued, then ends the connection (a graceful close). */
  end(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    this.socket.end();
  }
}

/** What this broker knows about one peer: its outgoing connection, the requests pending on it, figures. */
class Peer {
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

class Channel implements TcpChannel {
  private readonly server: Server;
  private readonly cluster: Cluster;
  private readonly secret: string;
  private readonly logger: Logger;
  private readonly limiter: LogLimiter;
  private readonly handlers = new Map<string, (from: number, body: Buffer) => Promise<Buffer> | Buffer>();
  private readonly listeners = new Map<string, (from: number, body: Buffer) => void>();
  private readonly peers = new Map<number, Peer>();
  /** Accepted (authenticated) connections by peer id. */
  private readonly accepted = new Map<number, Set<Conn>>();
  private readonly handshaking = new Set<Conn>();
  private readonly requestTimeoutMs: number;
  private readonly maxFrame: number;
  private readonly highWater: number;
  private readonly maxQueued: number;
  private readonly handshakeMs: number;
  private readonly pingMs: number;
  private readonly silentMs: number;
  private readonly maxInflight: number;
  private nextId = 1;
  private closed = false;
  private readonly ticker: NodeJS.Timeout;
  private readonly onMembership: () => void;
  private readonly refusals: Record<string, number> = {};
  /** Connections being dialed (closed at once by close()). */
  private readonly dialing = new Set<Conn>();

  constructor(opts: ChannelOptions, server: Server) {
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
    server.on('connection', (s) => this.accept(s));
    this.ticker = setInterval(() => this.tick(), Math.max(50, Math.min(this.pingMs, 1000)));
    this.ticker.unref();
    // A built-in request every broker answers (id, incarnation, clock): health checks and tests of a live cluster.
    this.handlers.set(RPC.ping.name, () => RPC.ping.reply.encode({ id: this.cluster.id, incarnation: this.cluster.incarnation, at: Date.now() }));
    this.onMembership = () => this.checkMembership();
    this.cluster.on('membership', this.onMembership);
  }

  address(): AddressInfo {
    return this.server.address() as AddressInfo;
  }

  handle(method: string, fn: (from: number, body: Buffer) => Promise<Buffer> | Buffer): void {
    this.handlers.set(method, fn);
  }

  on(method: string, fn: (from: number, body: Buffer) => void): void {
    this.listeners.set(method, fn);
  }

  request(to: number, method: string, body: Buffer, timeoutMs?: number): Promise<Buffer> {
    if (this.closed) return Promise.reject(new FlowError('CLOSED', 'the cluster channel is closed'));
    if (body.length > this.maxFrame) return Promise.reject(new FlowError('LIMIT_EXCEEDED', `a ${method} request of ${body.length} bytes is over the channel's frame limit (${this.maxFrame})`));
    if (to === this.cluster.id) return this.local(method, body);
    const peer = this.peer(to);
    const id = this.nextId;
    this.nextId = this.nextId >= 0xffffffff ? 1 : this.nextId + 1;
    const ms = timeoutMs ?? this.requestTimeoutMs;
    return new Promise<Buffer>((resolve, reject) => {
      const timer = setTimeout(() => {
        if (!peer.pending.delete(id)) return;
        peer.figures.timeouts++;
        // Still waiting to be written (a peer that does not read): its body goes now, not when the peer drains.
        const i = peer.backlog.findIndex((f) => f.type === T.REQUEST && f.id === id);
        if (i >= 0) peer.backlogBytes -= HEADER + peer.backlog.splice(i, 1)[0].body.length;
        reject(new FlowError('UNAVAILABLE', `broker ${to} did not answer ${method} within ${ms} ms`));
      }, ms);
      peer.pending.set(id, { resolve, reject, timer });
      const c = peer.conn;
      // The common case, written at once: connected, nothing waiting before it, under the high-water mark.
      if (c && peer.backlog.length === 0 && c.queued < this.highWater) {
        c.write(T.REQUEST, id, method, body);
        return;
      }
      if (!c && !peer.connecting && Date.now() < peer.retryAt) {
        peer.pending.delete(id);
        clearTimeout(timer);
        reject(new FlowError('UNAVAILABLE', `broker ${to} cannot be reached (${peer.lastError}); retrying`));
        return;
      }
      peer.backlog.push({ type: T.REQUEST, id, method, body });
      peer.backlogBytes += HEADER + body.length;
      if (!c) void this.connect(peer).catch(() => undefined);
    });
  }

  send(to: number, method: string, body: Buffer): void {
    if (this.closed) return;
    if (to === this.cluster.id) {
      const fn = this.listeners.get(method);
      if (fn) setImmediate(() => this.deliver(fn, to, method, body));
      return;
    }
    const peer = this.peer(to);
    if (body.length > this.maxFrame) {
      peer.figures.dropped++;
      this.limiter.log('warn', `oversized|${method}`, { to, method, bytes: body.length, limit: this.maxFrame }, 'cluster channel: a one-way message over the frame limit was dropped');
      return;
    }
    if (peer.queued + body.length > this.maxQueued) {
      peer.figures.dropped++;
      return;
    }
    const c = peer.conn;
    if (c && peer.backlog.length === 0) {
      c.write(T.ONEWAY, 0, method, body);
      return;
    }
    if (!c && !peer.connecting && Date.now() < peer.retryAt) {
      // Unreachable for now: live traffic is dropped rather than kept for a peer that may never come back.
      peer.figures.dropped++;
      return;
    }
    // Behind requests waiting for the high-water mark, or for the connection: call order is kept per peer.
    peer.backlog.push({ type: T.ONEWAY, id: 0, method, body });
    peer.backlogBytes += HEADER + body.length;
    if (!c) void this.connect(peer).catch(() => undefined);
  }

  /**
   * Writes the backlog in call order: one-way messages at once, requests while the connection is under the
   * high-water mark (a request stops the queue behind it, so that the order of calls is the order on the wire).
   */
  private pump(peer: Peer): void {
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

  peerVersion(to: number): number | undefined {
    return to === this.cluster.id ? CHANNEL_VERSION : this.peers.get(to)?.version;
  }

  ready(to: number): Promise<void> {
    const peer = this.peers.get(to);
    if (!peer || peer.queued < this.highWater || this.closed) return Promise.resolve();
    return new Promise((resolve) => peer.readyWaiters.push(resolve));
  }

  connected(): number[] {
    const ids = new Set<number>();
    for (const p of this.peers.values()) if (p.conn) ids.add(p.id);
    for (const [id, set] of this.accepted) if (set.size > 0) ids.add(id);
    return [...ids].sort((a, b) => a - b);
  }

  unreachable(): number[] {
    const ids: number[] = [];
    for (const p of this.peers.values()) {
      if (p.conn === null && p.lastError !== '' && (this.accepted.get(p.id)?.size ?? 0) === 0) ids.push(p.id);
    }
    return ids.sort((a, b) => a - b);
  }

  figures(): Record<string, unknown> {
    const peers: Record<string, unknown> = {};
    const ids = new Set<number>([...this.peers.keys(), ...this.accepted.keys()]);
    for (const id of [...ids].sort((a, b) => a - b)) {
      const p = this.peers.get(id);
      const acc = this.accepted.get(id);
      const f = p?.figures ?? newFigures();
      peers[id] = {
        state: p?.conn ? 'connected' : p?.connecting ? 'connecting' : p && Date.now() < p.retryAt ? 'backoff' : 'idle',
        incarnation: p?.incarnation || undefined,
        inbound: acc?.size ?? 0,
        pending: p?.pending.size ?? 0,
        queuedBytes: p?.queued ?? 0,
        ...f,
        ...(p?.lastError ? { lastError: p.lastError } : {}),
      };
    }
    return { port: this.closed ? null : this.address().port, peers, refused: { ...this.refusals }, handshaking: this.handshaking.size };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.ticker);
    this.cluster.off('membership', this.onMembership);
    this.limiter.stop();
    const conns: Conn[] = [];
    for (const p of this.peers.values()) {
      if (p.retryTimer) clearTimeout(p.retryTimer);
      this.rejectAll(p, new FlowError('CLOSED', 'the cluster channel is closing'));
      p.backlog = [];
      p.backlogBytes = 0;
      for (const w of p.readyWaiters.splice(0)) w();
      if (p.conn) conns.push(p.conn);
    }
    for (const set of this.accepted.values()) conns.push(...set);
    for (const c of this.handshaking) c.close();
    for (const c of this.dialing) c.close();
    // What was queued (live messages, replies) still goes out; a peer that does not read is cut after a second.
    await Promise.all(
      conns.map(
        (c) =>
          new Promise<void>((resolve) => {
            const t = setTimeout(() => {
              c.socket.destroy();
            }, 1000);
            c.socket.once('close', () => {
              clearTimeout(t);
              resolve();
            });
            if (c.socket.destroyed) {
              clearTimeout(t);
              resolve();
            } else c.end();
          }),
      ),
    );
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  // --- outgoing side ---

  private peer(id: number): Peer {
    let p = this.peers.get(id);
    if (!p) {
      p = new Peer(id);
      this.peers.set(id, p);
    }
    return p;
  }

  /** The peer's authenticated connection, made now if needed. UNAVAILABLE while it cannot be reached. */
  private connect(peer: Peer): Promise<Conn> {
    if (peer.conn) return Promise.resolve(peer.conn);
    if (peer.connecting) return peer.connecting;
    if (this.closed) return Promise.reject(new FlowError('CLOSED', 'the cluster channel is closed'));
    if (Date.now() < peer.retryAt) {
      return Promise.reject(new FlowError('UNAVAILABLE', `broker ${peer.id} cannot be reached (${peer.lastError}); retrying`));
    }
    if (peer.retryTimer) {
      clearTimeout(peer.retryTimer);
      peer.retryTimer = null;
    }
    const failed = (err: unknown): never => {
      peer.connecting = null;
      peer.figures.connectFailures++;
      peer.lastError = (err as Error).message;
      peer.stale = true;
      peer.retryAt = Date.now() + reconnectDelay(++peer.failures);
      peer.figures.dropped += peer.backlog.filter((f) => f.type === T.ONEWAY).length;
      peer.backlog = [];
      peer.backlogBytes = 0;
      this.rejectAll(peer, new FlowError('UNAVAILABLE', `broker ${peer.id} cannot be reached: ${peer.lastError}`));
      for (const w of peer.readyWaiters.splice(0)) w();
      if (!this.closed) this.limiter.log('warn', `dial|${peer.id}`, { peer: peer.id, err: peer.lastError, retryInMs: reconnectDelay(peer.failures) }, 'cluster channel: cannot connect to a peer');
      this.scheduleRetry(peer);
      throw err instanceof FlowError ? err : new FlowError('UNAVAILABLE', `broker ${peer.id} cannot be reached: ${peer.lastError}`, { cause: err });
    };
    peer.connecting = this.dial(peer).then(
      (conn) => {
        if (this.closed) {
          conn.close();
          return failed(new FlowError('CLOSED', 'the cluster channel is closed'));
        }
        if (conn.closed) return failed(new FlowError('UNAVAILABLE', `broker ${peer.id} closed the connection`));
        peer.connecting = null;
        peer.stale = false;
        peer.seenAlive = false;
        peer.conn = conn;
        peer.failures = 0;
        peer.retryAt = 0;
        peer.lastError = '';
        peer.figures.connects++;
        this.pump(peer);
        this.logger.debug({ peer: peer.id, incarnation: conn.peerInc }, 'cluster channel: connected');
        return conn;
      },
      failed,
    );
    return peer.connecting;
  }

  /**
   * Reconnects in the background after a lost connection while the peer is alive in the view, so that its next
   * messages need no dial. A peer never reached (or refusing us) is only tried again on use, after the backoff.
   */
  private scheduleRetry(peer: Peer): void {
    if (this.closed || peer.retryTimer || peer.figures.connects === 0 || peer.gone) return;
    peer.retryTimer = setTimeout(() => {
      peer.retryTimer = null;
      if (!this.closed && !peer.conn && !peer.connecting && !peer.gone) void this.connect(peer).catch(() => undefined);
    }, Math.max(0, peer.retryAt - Date.now()));
    peer.retryTimer.unref();
  }

  /** The peer's registered state: the view, else the store (a broker that joined since the last heartbeat). */
  private async resolve(id: number, stale: boolean): Promise<BrokerState | undefined> {
    const b = this.cluster.broker(id);
    if (!stale && b && b.alive && b.endpoints.cluster) return b;
    const all = await this.cluster.store.brokers();
    return all.find((x) => x.id === id);
  }

  private async dial(peer: Peer): Promise<Conn> {
    const b = await this.resolve(peer.id, peer.stale);
    peer.gone = !b || !b.alive;
    if (!b) throw new FlowError('UNAVAILABLE', `broker ${peer.id} is not registered`);
    if (!b.alive) throw new FlowError('UNAVAILABLE', `broker ${peer.id} is dead (its membership lease expired)`);
    const ep = b.endpoints.cluster;
    if (!ep) throw new FlowError('UNAVAILABLE', `broker ${peer.id} advertises no cluster endpoint`);
    return new Promise<Conn>((resolve, reject) => {
      const socket = createConnection({ host: ep.host, port: ep.port });
      let settled = false;
      const fail = (why: string) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.dialing.delete(conn);
        conn.close();
        reject(new FlowError('UNAVAILABLE', why));
      };
      const timer = setTimeout(() => fail(`no handshake with broker ${peer.id} at ${ep.host}:${ep.port} within ${this.handshakeMs} ms`), this.handshakeMs);
      const me = { id: this.cluster.id, inc: this.cluster.incarnation, nonce: randomBytes(16).toString('hex') };
      let hello: Hello | null = null;
      const conn = new Conn(
        socket,
        this.maxFrame,
        (c, type, id, method, body) => {
          if (!settled) {
            // Handshake.
            if (type === T.HELLO && hello === null) {
              const h = parseJson<Hello>(body);
              if (!h || h.v !== PROTOCOL_VERSION || typeof h.id !== 'number' || typeof h.inc !== 'string' || typeof h.nonce !== 'string') return fail(`broker at ${ep.host}:${ep.port} sent a bad hello`);
              if (h.id !== peer.id) return fail(`${ep.host}:${ep.port} is broker ${h.id}, not broker ${peer.id} (a stale address)`);
              const version = negotiate(h.max);
              if (version === null) return fail(`broker ${h.id} speaks channel version ${String(h.max)}, older than ${MIN_CHANNEL_VERSION} (the oldest this broker accepts)`);
              peer.version = version;
              hello = h;
              const auth: Auth = { v: PROTOCOL_VERSION, max: CHANNEL_VERSION, ...me, to: h.id, toInc: h.inc, mac: mac(this.secret, 'dial', h, me).toString('hex') };
              c.write(T.AUTH, 0, null, Buffer.from(JSON.stringify(auth)));
              return;
            }
            if (type === T.WELCOME && hello !== null) {
              const w = parseJson<{ mac: string }>(body);
              if (!w || !sameMac(mac(this.secret, 'accept', hello, me), w.mac)) {
                this.refused('peer-secret', socket.remoteAddress, { peer: peer.id }, 'cluster channel: a peer failed to prove the shared secret (is its --cluster-secret different?)');
                return fail(`broker ${peer.id} does not know the cluster secret`);
              }
              settled = true;
              clearTimeout(timer);
              this.dialing.delete(c);
              c.authed = true;
              c.peer = peer.id;
              c.peerInc = hello.inc;
              c.figures = peer.figures;
              peer.incarnation = hello.inc;
              socket.on('drain', () => this.drained(peer));
              c.afterFlush = () => this.drained(peer);
              resolve(c);
              return;
            }
            if (type === T.REFUSE) {
              const r = parseJson<{ reason: string }>(body);
              const reason = typeof r?.reason === 'string' ? r.reason.slice(0, 200) : 'refused';
              this.refused('refused-by-peer', socket.remoteAddress, { peer: peer.id, reason }, 'cluster channel: a peer refused our connection');
              return fail(`broker ${peer.id} refused the connection: ${reason}`);
            }
            return fail(`broker ${peer.id} broke the handshake (frame type ${type})`);
          }
          this.outgoingFrame(peer, c, type, id, method, body);
        },
        (c, reason) => {
          if (!settled) return fail(reason);
          this.limiter.log('warn', `frame|${peer.id}`, { peer: peer.id, reason }, 'cluster channel: protocol error from a peer; closing');
          this.lose(peer, c, reason);
        },
      );
      this.dialing.add(conn);
      socket.on('error', (err) => {
        if (!settled) fail(`cannot connect to broker ${peer.id} at ${ep.host}:${ep.port}: ${err.message}`);
      });
      socket.on('close', () => {
        if (!settled) fail(`broker ${peer.id} closed the connection during the handshake`);
        else this.lose(peer, conn, 'connection closed');
      });
    });
  }

  /** A frame on a connection we dialed: replies and pongs. */
  private outgoingFrame(peer: Peer, c: Conn, type: number, id: number, _method: number, body: Buffer): void {
    if (type === T.REPLY || type === T.ERROR) {
      const p = peer.pending.get(id);
      if (!p) return; // timed out already
      peer.pending.delete(id);
      clearTimeout(p.timer);
      if (type === T.REPLY) p.resolve(body);
      else {
        const e = parseJson<{ code: ErrorCode; message: string }>(body);
        p.reject(new FlowError(e?.code ?? 'UNAVAILABLE', e?.message ?? `broker ${peer.id} sent an unreadable error`));
      }
      return;
    }
    if (type === T.PONG) return;
    this.limiter.log('warn', `frame|${peer.id}`, { peer: peer.id, type }, 'cluster channel: unexpected frame from a peer; closing');
    this.lose(peer, c, `unexpected frame type ${type}`);
  }

  /** The peer's connection is gone: every pending request fails now (UNAVAILABLE), and we reconnect with backoff. */
  private lose(peer: Peer, c: Conn, why: string): void {
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

  private rejectAll(peer: Peer, err: FlowError): number {
    const n = peer.pending.size;
    for (const p of peer.pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    peer.pending.clear();
    return n;
  }

  /** The connection wrote or drained: move the backlog on, wake ready() waiters once under the high-water mark. */
  private drained(peer: Peer): void {
    if (peer.backlog.length > 0) this.pump(peer);
    if (peer.readyWaiters.length === 0 || peer.queued >= this.highWater) return;
    for (const w of peer.readyWaiters.splice(0)) w();
  }

  // --- accepting side ---

  private accept(socket: Socket): void {
    if (this.closed || this.handshaking.size >= MAX_HANDSHAKES) {
      this.refused('busy', socket.remoteAddress, {}, 'cluster channel: too many connections in their handshake; closing one');
      socket.destroy();
      return;
    }
    const hello: Hello = { v: PROTOCOL_VERSION, max: CHANNEL_VERSION, id: this.cluster.id, inc: this.cluster.incarnation, nonce: randomBytes(16).toString('hex') };
    let state: 'hello' | 'checking' | 'open' = 'hello';
    const conn: Conn = new Conn(
      socket,
      this.maxFrame,
      (c, type, id, method, body) => {
        if (state === 'open') return this.acceptedFrame(c, type, id, method, body);
        if (state === 'checking') return; // frames before WELCOME: the dialer does not send any
        if (type !== T.AUTH) return refuse('handshake expected', 'bad-handshake');
        const a = parseJson<Auth>(body);
        if (!a || a.v !== PROTOCOL_VERSION || typeof a.id !== 'number' || typeof a.inc !== 'string' || typeof a.nonce !== 'string' || a.nonce.length < 16) {
          return refuse('malformed authentication', 'bad-handshake');
        }
        if (!sameMac(mac(this.secret, 'dial', hello, a), a.mac)) return refuse('wrong cluster secret', 'secret', { broker: a.id });
        if (a.to !== hello.id || a.toInc !== hello.inc) return refuse('authenticated for another broker', 'bad-handshake', { broker: a.id });
        const version = negotiate(a.max);
        if (version === null) return refuse(`broker ${a.id} speaks channel version ${String(a.max)}, older than ${MIN_CHANNEL_VERSION}`, 'version', { broker: a.id });
        state = 'checking';
        void this.known(a.id, a.inc).then(
          (ok) => {
            if (c.closed) return;
            if (!ok) return refuse(`broker ${a.id} (incarnation ${a.inc}) is not a live member of this cluster`, 'unknown', { broker: a.id });
            clearTimeout(timer);
            this.handshaking.delete(c);
            state = 'open';
            c.authed = true;
            c.peer = a.id;
            c.peerInc = a.inc;
            c.figures = this.peer(a.id).figures;
            this.peer(a.id).version = version;
            let set = this.accepted.get(a.id);
            if (!set) this.accepted.set(a.id, (set = new Set()));
            // A restarted peer's old connections are dead weight (their requests' callers are gone).
            for (const old of set) if (old.peerInc !== a.inc) old.close();
            set.add(c);
            socket.on('drain', () => this.resumeIfIdle(c));
            c.write(T.WELCOME, 0, null, Buffer.from(JSON.stringify({ mac: mac(this.secret, 'accept', hello, a).toString('hex') })));
          },
          (err: unknown) => refuse(`cannot check the broker's membership: ${(err as Error).message}`, 'membership-read'),
        );
      },
      (_c, reason) => {
        if (state !== 'open') refuse(reason, 'frame');
        else {
          this.limiter.log('warn', logKey('frame', socket.remoteAddress), { peer: conn.peer, reason }, 'cluster channel: protocol error from a peer; closing');
          conn.close();
        }
      },
    );
    const refuse = (reason: string, kind: string, fields: Record<string, unknown> = {}) => {
      if (conn.closed) return;
      clearTimeout(timer);
      this.handshaking.delete(conn);
      this.refused(kind, socket.remoteAddress, { ...fields, reason }, 'cluster channel: connection refused');
      conn.write(T.REFUSE, 0, null, Buffer.from(JSON.stringify({ reason })));
      conn.end();
      // A peer that does not read its refusal is not waited for.
      setTimeout(() => socket.destroy(), 1000).unref();
    };
    const timer = setTimeout(() => refuse(`no handshake within ${this.handshakeMs} ms`, 'timeout'), this.handshakeMs);
    this.handshaking.add(conn);
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      this.handshaking.delete(conn);
      conn.closed = true;
      if (conn.authed) {
        const set = this.accepted.get(conn.peer);
        set?.delete(conn);
        if (set && set.size === 0) this.accepted.delete(conn.peer);
      }
    });
    conn.write(T.HELLO, 0, null, Buffer.from(JSON.stringify(hello)));
  }

  /** Is `id` a live registered broker of incarnation `inc`? The view first, then the store (a newcomer). */
  private async known(id: number, inc: string): Promise<boolean> {
    const b = this.cluster.broker(id);
    if (b && b.incarnation === inc && b.alive) return true;
    const all = await this.cluster.store.brokers();
    const s = all.find((x) => x.id === id);
    return !!s && s.incarnation === inc && s.alive;
  }

  /** A frame on a connection a peer dialed: its requests, one-way messages, method definitions, pings. */
  private acceptedFrame(c: Conn, type: number, id: number, code: number, body: Buffer): void {
    switch (type) {
      case T.ONEWAY: {
        const method = c.methodsIn.get(code);
        const fn = method === undefined ? undefined : this.listeners.get(method);
        if (fn) this.deliver(fn, c.peer, method!, body);
        return;
      }
      case T.REQUEST: {
        const method = c.methodsIn.get(code);
        const fn = method === undefined ? undefined : this.handlers.get(method);
        if (!fn) {
          // Not (yet) served here: a broker still starting has not registered every handler. Retriable.
          c.write(T.ERROR, id, null, errorBody(new FlowError('UNAVAILABLE', `broker ${this.cluster.id} has no handler for ${method ?? `method #${code}`}`)));
          return;
        }
        c.inflight++;
        if (c.inflight >= this.maxInflight) this.pause(c);
        let result: Promise<Buffer> | Buffer;
        try {
          result = fn(c.peer, body);
        } catch (err) {
          this.replyError(c, id, method!, err);
          return;
        }
        if (result instanceof Promise) {
          result.then(
            (b) => this.reply(c, id, b),
            (err: unknown) => this.replyError(c, id, method!, err),
          );
        } else this.reply(c, id, result);
        return;
      }
      case T.DEFINE:
        c.methodsIn.set(id, body.toString('utf8'));
        return;
      case T.PING:
        c.write(T.PONG, id, null, Buffer.alloc(0));
        return;
      default:
        this.limiter.log('warn', `frame|${c.peer}`, { peer: c.peer, type }, 'cluster channel: unexpected frame from a peer; closing');
        c.close();
    }
  }

  private reply(c: Conn, id: number, body: Buffer): void {
    c.inflight--;
    if (body.length > this.maxFrame) {
      c.write(T.ERROR, id, null, errorBody(new FlowError('LIMIT_EXCEEDED', `the reply of ${body.length} bytes is over the channel's frame limit`)));
    } else c.write(T.REPLY, id, null, body);
    if (c.queued >= this.highWater) this.pause(c);
    else this.resumeIfIdle(c);
  }

  private replyError(c: Conn, id: number, method: string, err: unknown): void {
    c.inflight--;
    if (!(err instanceof FlowError)) {
      this.limiter.log('error', `handler|${method}`, { err, method, peer: c.peer }, 'cluster channel: a request handler failed');
    }
    c.write(T.ERROR, id, null, errorBody(err));
    this.resumeIfIdle(c);
  }

  /** The dialer's requests stop being read (TCP pushes back on it) while we cannot keep up with them. */
  private pause(c: Conn): void {
    if (c.paused) return;
    c.paused = true;
    c.socket.pause();
  }

  private resumeIfIdle(c: Conn): void {
    if (!c.paused || c.inflight >= this.maxInflight || c.queued >= this.highWater) return;
    c.paused = false;
    c.socket.resume();
  }

  private deliver(fn: (from: number, body: Buffer) => void, from: number, method: string, body: Buffer): void {
    try {
      fn(from, body);
    } catch (err) {
      this.limiter.log('error', `listener|${method}`, { err, method, peer: from }, 'cluster channel: a one-way message handler failed');
    }
  }

  private async local(method: string, body: Buffer): Promise<Buffer> {
    const fn = this.handlers.get(method);
    if (!fn) throw new FlowError('UNAVAILABLE', `broker ${this.cluster.id} has no handler for ${method}`);
    await new Promise((r) => setImmediate(r));
    return fn(this.cluster.id, body);
  }

  private refused(kind: string, address: string | undefined, fields: Record<string, unknown>, msg: string): void {
    this.refusals[kind] = (this.refusals[kind] ?? 0) + 1;
    this.limiter.log('warn', logKey(`refuse-${kind}`, address), { ...fields, remote: address, kind }, msg);
  }

  /**
   * A peer the view declares dead (its lease expired) or no longer lists (deregistered) after having listed it
   * alive: fail what waits on it now, so that callers look for the new owner instead of waiting for a timeout. A
   * peer the view has not listed yet (it joined after the last refresh) is left alone.
   */
  private checkMembership(): void {
    for (const p of this.peers.values()) {
      if (!p.conn) continue;
      const b = this.cluster.broker(p.id);
      if (b && b.alive && b.incarnation === p.conn.peerInc) p.seenAlive = true;
      else if (p.seenAlive && (!b || !b.alive)) {
        p.gone = true;
        this.lose(p, p.conn, `broker ${p.id} is dead (its membership lease expired or it left)`);
      }
    }
  }

  /** Pings idle connections, closes silent ones. */
  private tick(): void {
    this.checkMembership();
    const now = Date.now();
    for (const p of this.peers.values()) {
      const c = p.conn;
      if (!c) continue;
      const quiet = now - c.lastRx;
      if (quiet >= this.silentMs) this.lose(p, c, `nothing heard for ${quiet} ms`);
      else if (quiet >= this.pingMs) c.write(T.PING, 0, null, Buffer.alloc(0));
    }
    // Accepted connections hear the dialer's pings at least every pingIntervalMs.
    for (const set of this.accepted.values()) {
      for (const c of set) if (now - c.lastRx >= this.silentMs * 2 && !c.paused) c.close();
    }
  }
}

function errorBody(err: unknown): Buffer {
  const e = err instanceof FlowError ? { code: err.code, message: err.message } : { code: 'STORAGE_ERROR', message: `the request failed on the peer: ${(err as Error)?.message ?? String(err)}` };
  return Buffer.from(JSON.stringify(e));
}

function parseJson<X>(b: Buffer): X | null {
  try {
    const v = JSON.parse(b.toString('utf8')) as unknown;
    return v !== null && typeof v === 'object' ? (v as X) : null;
  } catch {
    return null;
  }
}

function logKey(event: string, address: string | undefined): string {
  return `${event}|${address ?? '?'}`;
}

/** Binds the channel's listener and returns the channel (peers are dialed on first use). */
export async function startChannel(opts: ChannelOptions): Promise<TcpChannel> {
  if (opts.secret.length === 0) throw new FlowError('CONFIG_ERROR', 'the cluster channel needs a shared secret (--cluster-secret)');
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => reject(new FlowError('CONFIG_ERROR', `cannot listen on ${opts.host}:${opts.port} for the cluster channel: ${err.message}`, { cause: err }));
    server.once('error', onError);
    server.listen(opts.port, opts.host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  server.on('error', (err) => opts.logger.error({ err }, 'cluster channel: listener error'));
  const ch = new Channel(opts, server);
  opts.logger.info({ address: `${opts.host}:${ch.address().port}` }, 'cluster channel: listening');
  return ch;
}
