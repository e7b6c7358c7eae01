/**
 * The cluster channel's handshake (see channel.ts for the design): dialing a peer (its address from the membership
 * view, else the store) and accepting a peer's connection, with the mutual HMAC-SHA256 challenge-response (HELLO,
 * AUTH, WELCOME; REFUSE with the reason), the check that the dialer is a live registered broker of that incarnation,
 * and the negotiation of the channel version both ends speak. Once open, a connection's frames go to
 * channel-requests.ts.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createConnection, type Socket } from 'node:net';
import { FlowError } from '../core/index.js';
import { CHANNEL_VERSION, MIN_CHANNEL_VERSION } from './rpc.js';
import type { BrokerState } from './types.js';
import { Conn, T } from './channel-conn.js';
import { ChannelState, logKey, parseJson, Peer } from './channel-state.js';
import { acceptedFrame, outgoingFrame, resumeIfIdle } from './channel-requests.js';

/** The handshake's format, part of its MAC (what messages a peer knows is the channel version of rpc.ts). */
const PROTOCOL_VERSION = 1;

/** The version both ends speak, given the peer's newest (absent: 1); null when the peer is too old to let in. */
function negotiate(peerMax: unknown): number | null {
  const v = typeof peerMax === 'number' && Number.isSafeInteger(peerMax) && peerMax >= 1 ? peerMax : 1;
  return v < MIN_CHANNEL_VERSION ? null : Math.min(v, CHANNEL_VERSION);
}
/** Connections still in their handshake at once (more are closed at accept). */
const MAX_HANDSHAKES = 256;

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

export async function dial(chan: ChannelState, peer: Peer): Promise<Conn> {
  const b = await resolve(chan, peer.id, peer.stale);
  peer.gone = !b || !b.alive;
  if (!b) throw new FlowError('UNAVAILABLE', `broker ${peer.id} is not registered`);
  if (!b.alive) throw new FlowError('UNAVAILABLE', `broker ${peer.id} is dead (its membership lease expired)`);
  const ep = b.endpoints.cluster;
  if (!ep) throw new FlowError('UNAVAILABLE', `broker ${peer.id} advertises no cluster endpoint`);
  return new Promise<Conn>((resolve, reject) => {
    const socket = chan.tls ? chan.tls.connect(ep.host, ep.port) : createConnection({ host: ep.host, port: ep.port });
    let settled = false;
    const fail = (why: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      chan.dialing.delete(conn);
      conn.close();
      reject(new FlowError('UNAVAILABLE', why));
    };
    const timer = setTimeout(() => fail(`no handshake with broker ${peer.id} at ${ep.host}:${ep.port} within ${chan.handshakeMs} ms`), chan.handshakeMs);
    const me = { id: chan.cluster.id, inc: chan.cluster.incarnation, nonce: randomBytes(16).toString('hex') };
    let hello: Hello | null = null;
    const conn = new Conn(
      socket,
      chan.maxFrame,
      (c, type, id, method, body) => {
        if (!settled) {
          // Handshake.
          if (type === T.HELLO && hello === null) {
            const h = parseJson<Hello>(body);
            if (!h || h.v !== PROTOCOL_VERSION || typeof h.id !== 'number' || typeof h.inc !== 'string' || typeof h.nonce !== 'string')
              return fail(`broker at ${ep.host}:${ep.port} sent a bad hello`);
            if (h.id !== peer.id) return fail(`${ep.host}:${ep.port} is broker ${h.id}, not broker ${peer.id} (a stale address)`);
            const version = negotiate(h.max);
            if (version === null)
              return fail(`broker ${h.id} speaks channel version ${String(h.max)}, older than ${MIN_CHANNEL_VERSION} (the oldest chan broker accepts)`);
            peer.version = version;
            hello = h;
            const auth: Auth = {
              v: PROTOCOL_VERSION,
              max: CHANNEL_VERSION,
              ...me,
              to: h.id,
              toInc: h.inc,
              mac: mac(chan.secret, 'dial', h, me).toString('hex'),
            };
            c.write(T.AUTH, 0, null, Buffer.from(JSON.stringify(auth)));
            return;
          }
          if (type === T.WELCOME && hello !== null) {
            const w = parseJson<{ mac: string }>(body);
            if (!w || !sameMac(mac(chan.secret, 'accept', hello, me), w.mac)) {
              chan.refused(
                'peer-secret',
                socket.remoteAddress,
                { peer: peer.id },
                'cluster channel: a peer failed to prove the shared secret (is its --cluster-secret different?)',
              );
              return fail(`broker ${peer.id} does not know the cluster secret`);
            }
            settled = true;
            clearTimeout(timer);
            chan.dialing.delete(c);
            c.authed = true;
            c.peer = peer.id;
            c.peerInc = hello.inc;
            c.figures = peer.figures;
            peer.incarnation = hello.inc;
            socket.on('drain', () => chan.drained(peer));
            c.afterFlush = () => chan.drained(peer);
            resolve(c);
            return;
          }
          if (type === T.REFUSE) {
            const r = parseJson<{ reason: string }>(body);
            const reason = typeof r?.reason === 'string' ? r.reason.slice(0, 200) : 'refused';
            chan.refused('refused-by-peer', socket.remoteAddress, { peer: peer.id, reason }, 'cluster channel: a peer refused our connection');
            return fail(`broker ${peer.id} refused the connection: ${reason}`);
          }
          return fail(`broker ${peer.id} broke the handshake (frame type ${type})`);
        }
        outgoingFrame(chan, peer, c, type, id, method, body);
      },
      (c, reason) => {
        if (!settled) return fail(reason);
        chan.limiter.log('warn', `frame|${peer.id}`, { peer: peer.id, reason }, 'cluster channel: protocol error from a peer; closing');
        chan.lose(peer, c, reason);
      },
    );
    chan.dialing.add(conn);
    socket.on('error', (err: Error) => {
      if (!settled) fail(`cannot connect to broker ${peer.id} at ${ep.host}:${ep.port}: ${chan.tls ? chan.tls.explainDialing(err) : err.message}`);
    });
    socket.on('close', () => {
      if (!settled) fail(`broker ${peer.id} closed the connection during the handshake`);
      else chan.lose(peer, conn, 'connection closed');
    });
  });
}

/** The peer's registered state: the view, else the store (a broker that joined since the last heartbeat). */
export async function resolve(chan: ChannelState, id: number, stale: boolean): Promise<BrokerState | undefined> {
  const b = chan.cluster.broker(id);
  if (!stale && b && b.alive && b.endpoints.cluster) return b;
  const all = await chan.cluster.store.brokers();
  return all.find((x) => x.id === id);
}

export function accept(chan: ChannelState, socket: Socket): void {
  if (chan.closed || chan.handshaking.size >= MAX_HANDSHAKES) {
    chan.refused('busy', socket.remoteAddress, {}, 'cluster channel: too many connections in their handshake; closing one');
    socket.destroy();
    return;
  }
  const hello: Hello = {
    v: PROTOCOL_VERSION,
    max: CHANNEL_VERSION,
    id: chan.cluster.id,
    inc: chan.cluster.incarnation,
    nonce: randomBytes(16).toString('hex'),
  };
  let state: 'hello' | 'checking' | 'open' = 'hello';
  // A plaintext channel reached by a TLS dialer (its ClientHello would read as an oversized frame): said as it is.
  let tlsDialer = false;
  if (!chan.tls) socket.once('data', (chunk: Buffer) => (tlsDialer = chunk[0] === 0x16 && chunk[1] === 0x03));
  const conn: Conn = new Conn(
    socket,
    chan.maxFrame,
    (c, type, id, method, body) => {
      if (state === 'open') return acceptedFrame(chan, c, type, id, method, body);
      if (state === 'checking') return; // frames before WELCOME: the dialer does not send any
      if (type !== T.AUTH) return refuse('handshake expected', 'bad-handshake');
      const a = parseJson<Auth>(body);
      if (!a || a.v !== PROTOCOL_VERSION || typeof a.id !== 'number' || typeof a.inc !== 'string' || typeof a.nonce !== 'string' || a.nonce.length < 16) {
        return refuse('malformed authentication', 'bad-handshake');
      }
      if (!sameMac(mac(chan.secret, 'dial', hello, a), a.mac)) return refuse('wrong cluster secret', 'secret', { broker: a.id });
      if (a.to !== hello.id || a.toInc !== hello.inc) return refuse('authenticated for another broker', 'bad-handshake', { broker: a.id });
      const version = negotiate(a.max);
      if (version === null)
        return refuse(`broker ${a.id} speaks channel version ${String(a.max)}, older than ${MIN_CHANNEL_VERSION}`, 'version', { broker: a.id });
      state = 'checking';
      void known(chan, a.id, a.inc).then(
        (ok) => {
          if (c.closed) return;
          if (!ok) return refuse(`broker ${a.id} (incarnation ${a.inc}) is not a live member of chan cluster`, 'unknown', { broker: a.id });
          clearTimeout(timer);
          chan.handshaking.delete(c);
          state = 'open';
          c.authed = true;
          c.peer = a.id;
          c.peerInc = a.inc;
          c.figures = chan.peer(a.id).figures;
          chan.peer(a.id).version = version;
          let set = chan.accepted.get(a.id);
          if (!set) chan.accepted.set(a.id, (set = new Set()));
          // A restarted peer's old connections are dead weight (their requests' callers are gone).
          for (const old of set) if (old.peerInc !== a.inc) old.close();
          set.add(c);
          socket.on('drain', () => resumeIfIdle(chan, c));
          c.write(T.WELCOME, 0, null, Buffer.from(JSON.stringify({ mac: mac(chan.secret, 'accept', hello, a).toString('hex') })));
        },
        (err: unknown) => refuse(`cannot check the broker's membership: ${(err as Error).message}`, 'membership-read'),
      );
    },
    (_c, reason) => {
      if (state === 'hello' && tlsDialer)
        refuse(
          "the dialer started a TLS handshake and this broker's cluster channel is plaintext (--cluster-tls off): every broker needs the same --cluster-tls",
          'tls-dialer',
        );
      else if (state !== 'open') refuse(reason, 'frame');
      else {
        chan.limiter.log('warn', logKey('frame', socket.remoteAddress), { peer: conn.peer, reason }, 'cluster channel: protocol error from a peer; closing');
        conn.close();
      }
    },
  );
  const refuse = (reason: string, kind: string, fields: Record<string, unknown> = {}) => {
    if (conn.closed) return;
    clearTimeout(timer);
    chan.handshaking.delete(conn);
    chan.refused(kind, socket.remoteAddress, { ...fields, reason }, 'cluster channel: connection refused');
    conn.write(T.REFUSE, 0, null, Buffer.from(JSON.stringify({ reason })));
    conn.end();
    // A peer that does not read its refusal is not waited for.
    setTimeout(() => socket.destroy(), 1000).unref();
  };
  const timer = setTimeout(() => refuse(`no handshake within ${chan.handshakeMs} ms`, 'timeout'), chan.handshakeMs);
  chan.handshaking.add(conn);
  socket.on('error', () => undefined);
  socket.on('close', () => {
    clearTimeout(timer);
    chan.handshaking.delete(conn);
    conn.closed = true;
    if (conn.authed) {
      const set = chan.accepted.get(conn.peer);
      set?.delete(conn);
      if (set && set.size === 0) chan.accepted.delete(conn.peer);
    }
  });
  conn.write(T.HELLO, 0, null, Buffer.from(JSON.stringify(hello)));
}

/** Is `id` a live registered broker of incarnation `inc`? The view first, then the store (a newcomer). */
export async function known(chan: ChannelState, id: number, inc: string): Promise<boolean> {
  const b = chan.cluster.broker(id);
  if (b && b.incarnation === inc && b.alive) return true;
  const all = await chan.cluster.store.brokers();
  const s = all.find((x) => x.id === id);
  return !!s && s.incarnation === inc && s.alive;
}
