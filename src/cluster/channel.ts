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
 * Encryption (channel-tls.ts): with TLS on (`--cluster-tls psk`, TLS 1.3 under a key derived from the secret, or
 * `cert`, mutual TLS with the cluster's CA), the connection is a TLS socket and everything here, the handshake
 * included, runs inside it unchanged. A peer with another setting is refused at once with the reason on both sides.
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
 *
 * Files: channel.ts (this one: the PeerChannel API over the parts), channel-conn.ts (a connection's framing and
 * batched writer), channel-state.ts (peers, pending requests, backlogs, reconnection), channel-handshake.ts (dialing,
 * accepting, authentication), channel-requests.ts (frames on an open connection: replies, requests, one-way),
 * channel-tls.ts (TLS: psk or cert, the acceptor's sniffing of plaintext dialers).
 */
import { createServer, type AddressInfo, type Server } from 'node:net';
import { FlowError } from '../core/index.js';
import { CHANNEL_VERSION, RPC } from './rpc.js';
import type { PeerChannel } from './types.js';
import { Conn, HEADER, newFigures, T } from './channel-conn.js';
import { type ChannelOptions, ChannelState, Peer, reconnectDelay } from './channel-state.js';
import { accept, dial } from './channel-handshake.js';
import { ChannelTls } from './channel-tls.js';
import { deliver, local } from './channel-requests.js';

export type { ChannelOptions } from './channel-state.js';

export interface TcpChannel extends PeerChannel {
  address(): AddressInfo;
}

class Channel extends ChannelState implements TcpChannel {
  private readonly ticker: NodeJS.Timeout;
  private readonly onMembership: () => void;

  constructor(opts: ChannelOptions, server: Server) {
    super(opts, server);
    const mode = opts.tls?.mode ?? 'off';
    if (mode !== 'off') this.tls = new ChannelTls(opts.tls!, opts.secret, this, (s) => accept(this, s));
    server.on('connection', (s) => (this.tls ? this.tls.accept(s) : accept(this, s)));
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
    if (body.length > this.maxFrame)
      return Promise.reject(
        new FlowError('LIMIT_EXCEEDED', `a ${method} request of ${body.length} bytes is over the channel's frame limit (${this.maxFrame})`),
      );
    if (to === this.cluster.id) return local(this, method, body);
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
      if (fn) setImmediate(() => deliver(this, fn, to, method, body));
      return;
    }
    const peer = this.peer(to);
    if (body.length > this.maxFrame) {
      peer.figures.dropped++;
      this.limiter.log(
        'warn',
        `oversized|${method}`,
        { to, method, bytes: body.length, limit: this.maxFrame },
        'cluster channel: a one-way message over the frame limit was dropped',
      );
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
    return {
      port: this.closed ? null : this.address().port,
      tls: this.tls?.mode ?? 'off',
      peers,
      refused: { ...this.refusals },
      handshaking: this.handshaking.size + (this.tls?.pending.size ?? 0),
    };
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
    this.tls?.close();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** The peer's authenticated connection, made now if needed. UNAVAILABLE while it cannot be reached. */
  connect(peer: Peer): Promise<Conn> {
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
      if (!this.closed)
        this.limiter.log(
          'warn',
          `dial|${peer.id}`,
          { peer: peer.id, err: peer.lastError, retryInMs: reconnectDelay(peer.failures) },
          'cluster channel: cannot connect to a peer',
        );
      this.scheduleRetry(peer);
      throw err instanceof FlowError ? err : new FlowError('UNAVAILABLE', `broker ${peer.id} cannot be reached: ${peer.lastError}`, { cause: err });
    };
    peer.connecting = dial(this, peer).then((conn) => {
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
    }, failed);
    return peer.connecting;
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

/** Binds the channel's listener and returns the channel (peers are dialed on first use). */
export async function startChannel(opts: ChannelOptions): Promise<TcpChannel> {
  if (opts.secret.length === 0) throw new FlowError('CONFIG_ERROR', 'the cluster channel needs a shared secret (--cluster-secret)');
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) =>
      reject(new FlowError('CONFIG_ERROR', `cannot listen on ${opts.host}:${opts.port} for the cluster channel: ${err.message}`, { cause: err }));
    server.once('error', onError);
    server.listen(opts.port, opts.host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  server.on('error', (err) => opts.logger.error({ err }, 'cluster channel: listener error'));
  let ch: Channel;
  try {
    ch = new Channel(opts, server);
  } catch (err) {
    server.close();
    throw err;
  }
  opts.logger.info({ address: `${opts.host}:${ch.address().port}`, tls: opts.tls?.mode ?? 'off' }, 'cluster channel: listening');
  return ch;
}
