/**
 * PeerChannel between several brokers of one process (unit tests of cluster subsystems without sockets): the same
 * contract as the TCP channel (types.ts), delivered through the event loop. `LocalHub.channel(id)` makes broker
 * `id`'s end; `disconnect(id)` makes it unreachable (requests to it reject with UNAVAILABLE, sends are dropped);
 * `loseReply` makes a request's reply lost after its handler ran (the caller gets UNAVAILABLE, as when the peer died
 * or the connection broke before it answered), `breakInFlight` fails the caller while the handler still runs.
 */
import { FlowError } from '../core/index.js';
import type { PeerChannel } from './types.js';

interface Ends {
  handlers: Map<string, (from: number, body: Buffer) => Promise<Buffer> | Buffer>;
  listeners: Map<string, (from: number, body: Buffer) => void>;
  up: boolean;
}

export class LocalHub {
  private readonly ends = new Map<number, Ends>();
  /** Channel versions brokers are made to speak (a rolling upgrade in a test); unset, a peer's version is unknown (no check). */
  readonly versions = new Map<number, number>();
  /** Called once a request's handler has answered: true loses the reply (the caller's request fails with UNAVAILABLE). */
  loseReply: ((from: number, to: number, method: string) => boolean) | null = null;
  /**
   * Called when a request reaches its peer's handler: true fails the caller at once with UNAVAILABLE while the handler
   * runs on (the connection broke with the request in flight).
   */
  breakInFlight: ((from: number, to: number, method: string) => boolean) | null = null;

  channel(id: number): PeerChannel {
    const me: Ends = { handlers: new Map(), listeners: new Map(), up: true };
    this.ends.set(id, me);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the channel object returned below has methods of its own `this`
    const hub = this;
    let dropped = 0;
    return {
      handle(method, fn) {
        me.handlers.set(method, fn);
      },
      on(method, fn) {
        me.listeners.set(method, fn);
      },
      async request(to, method, body) {
        const peer = hub.ends.get(to);
        if (!peer || !peer.up || !me.up) throw new FlowError('UNAVAILABLE', `broker ${to} cannot be reached`);
        const fn = peer.handlers.get(method);
        if (!fn) throw new FlowError('INVALID_ARGUMENT', `broker ${to} has no handler for ${method}`);
        await new Promise((r) => setImmediate(r));
        const copy = Buffer.from(body);
        const running = Promise.resolve(fn(id, copy));
        if (hub.breakInFlight?.(id, to, method)) {
          running.catch(() => undefined);
          throw new FlowError('UNAVAILABLE', `the connection to broker ${to} broke with ${method} in flight`);
        }
        const reply = Buffer.from(await running);
        if (hub.loseReply?.(id, to, method)) throw new FlowError('UNAVAILABLE', `broker ${to}'s reply to ${method} was lost`);
        return reply;
      },
      send(to, method, body) {
        const peer = hub.ends.get(to);
        if (!peer || !peer.up || !me.up) {
          dropped++;
          return;
        }
        const copy = Buffer.from(body);
        setImmediate(() => peer.listeners.get(method)?.(id, copy));
      },
      async ready() {},
      peerVersion(to: number) {
        return hub.ends.has(to) ? hub.versions.get(to) : undefined;
      },
      connected() {
        return me.up ? [...hub.ends].filter(([k, e]) => k !== id && e.up).map(([k]) => k) : [];
      },
      unreachable() {
        return [...hub.ends].filter(([k, e]) => k !== id && !e.up).map(([k]) => k);
      },
      figures() {
        return { dropped };
      },
      async close() {
        me.up = false;
        hub.ends.delete(id);
      },
    };
  }

  disconnect(id: number): void {
    const e = this.ends.get(id);
    if (e) e.up = false;
  }

  reconnect(id: number): void {
    const e = this.ends.get(id);
    if (e) e.up = true;
  }
}
