/**
 * Frames on an open cluster-channel connection (see channel.ts for the design): on a connection this broker dialed,
 * the replies to its requests (and pongs); on one a peer dialed, the peer's requests (run by their handler, answered
 * in REPLY or ERROR frames; the connection stops being read while too many are in flight or its replies are not
 * drained), one-way messages (to their listener), method definitions and pings.
 */
import { FlowError, type ErrorCode } from '../core/index.js';
import { Conn, T } from './channel-conn.js';
import { ChannelState, parseJson, Peer } from './channel-state.js';

/** A frame on a connection we dialed: replies and pongs. */
export function outgoingFrame(chan: ChannelState, peer: Peer, c: Conn, type: number, id: number, _method: number, body: Buffer): void {
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
  chan.limiter.log('warn', `frame|${peer.id}`, { peer: peer.id, type }, 'cluster channel: unexpected frame from a peer; closing');
  chan.lose(peer, c, `unexpected frame type ${type}`);
}

/** A frame on a connection a peer dialed: its requests, one-way messages, method definitions, pings. */
export function acceptedFrame(chan: ChannelState, c: Conn, type: number, id: number, code: number, body: Buffer): void {
  switch (type) {
    case T.ONEWAY: {
      const method = c.methodsIn.get(code);
      const fn = method === undefined ? undefined : chan.listeners.get(method);
      if (fn) deliver(chan, fn, c.peer, method!, body);
      return;
    }
    case T.REQUEST: {
      const method = c.methodsIn.get(code);
      const fn = method === undefined ? undefined : chan.handlers.get(method);
      if (!fn) {
        // Not (yet) served here: a broker still starting has not registered every handler. Retriable.
        c.write(T.ERROR, id, null, errorBody(new FlowError('UNAVAILABLE', `broker ${chan.cluster.id} has no handler for ${method ?? `method #${code}`}`)));
        return;
      }
      c.inflight++;
      if (c.inflight >= chan.maxInflight) pause(c);
      let result: Promise<Buffer> | Buffer;
      try {
        result = fn(c.peer, body);
      } catch (err) {
        replyError(chan, c, id, method!, err);
        return;
      }
      if (result instanceof Promise) {
        result.then(
          (b) => reply(chan, c, id, b),
          (err: unknown) => replyError(chan, c, id, method!, err),
        );
      } else reply(chan, c, id, result);
      return;
    }
    case T.DEFINE:
      c.methodsIn.set(id, body.toString('utf8'));
      return;
    case T.PING:
      c.write(T.PONG, id, null, Buffer.alloc(0));
      return;
    default:
      chan.limiter.log('warn', `frame|${c.peer}`, { peer: c.peer, type }, 'cluster channel: unexpected frame from a peer; closing');
      c.close();
  }
}

export function reply(chan: ChannelState, c: Conn, id: number, body: Buffer): void {
  c.inflight--;
  if (body.length > chan.maxFrame) {
    c.write(T.ERROR, id, null, errorBody(new FlowError('LIMIT_EXCEEDED', `the reply of ${body.length} bytes is over the channel's frame limit`)));
  } else c.write(T.REPLY, id, null, body);
  if (c.queued >= chan.highWater) pause(c);
  else resumeIfIdle(chan, c);
}

export function replyError(chan: ChannelState, c: Conn, id: number, method: string, err: unknown): void {
  c.inflight--;
  if (!(err instanceof FlowError)) {
    chan.limiter.log('error', `handler|${method}`, { err, method, peer: c.peer }, 'cluster channel: a request handler failed');
  }
  c.write(T.ERROR, id, null, errorBody(err));
  resumeIfIdle(chan, c);
}

/** The dialer's requests stop being read (TCP pushes back on it) while we cannot keep up with them. */
export function pause(c: Conn): void {
  if (c.paused) return;
  c.paused = true;
  c.socket.pause();
}

export function resumeIfIdle(chan: ChannelState, c: Conn): void {
  if (!c.paused || c.inflight >= chan.maxInflight || c.queued >= chan.highWater) return;
  c.paused = false;
  c.socket.resume();
}

export function deliver(chan: ChannelState, fn: (from: number, body: Buffer) => void, from: number, method: string, body: Buffer): void {
  try {
    fn(from, body);
  } catch (err) {
    chan.limiter.log('error', `listener|${method}`, { err, method, peer: from }, 'cluster channel: a one-way message handler failed');
  }
}

export async function local(chan: ChannelState, method: string, body: Buffer): Promise<Buffer> {
  const fn = chan.handlers.get(method);
  if (!fn) throw new FlowError('UNAVAILABLE', `broker ${chan.cluster.id} has no handler for ${method}`);
  await new Promise((r) => setImmediate(r));
  return fn(chan.cluster.id, body);
}

function errorBody(err: unknown): Buffer {
  const e =
    err instanceof FlowError
      ? { code: err.code, message: err.message }
      : { code: 'STORAGE_ERROR', message: `the request failed on the peer: ${(err as Error)?.message ?? String(err)}` };
  return Buffer.from(JSON.stringify(e));
}
