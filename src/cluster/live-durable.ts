/**
 * Acknowledged forwarding to persistent sessions of other brokers (issue 30): the part of live.ts that makes a QoS 1/2
 * publish wait until every persistent MQTT session it reaches on another broker has stored it, and holds it for a
 * session whose owner cannot be reached until the session's next owner takes it.
 *
 * - Which sessions: the durable entries of the interest table (interest.ts): one per (session key, filter) of the
 *   QoS 1/2 subscriptions of storing subscribers (Engine.durable, the MQTT adapter's persistent sessions), announced
 *   by their broker. A dead broker's durable entries stay as orphans until its sessions have a new owner, and so do
 *   those of a session its broker lets go while the others still reach it (a takeover, the lease lost to a partition
 *   from PostgreSQL: removed as `moved`, live.ts moving()).
 * - First attempt: the publishing broker's batch to a peer (live.ts, one per tick) goes as a `live.store` request
 *   instead of a one-way `live.publish` when one of its messages is to be stored there; each message names the
 *   sessions it must be stored by, and the receiver delivers the batch as a one-way one (every live subscriber), then
 *   answers once the sessions' store writes have settled, naming the sessions it does not own (any more).
 * - Held: a session whose store failed (the peer unreachable, a timeout, "not owned here") or whose broker is dead (an
 *   orphan) gets a queue here, in publish order (a sequence number per message). Every later message for it joins the
 *   queue (and the peer that still lists it is told to skip it), also one that reaches it on this broker (LiveHook
 *   divert: the session moved here), so its order is kept. One loop per queue retries at the session's owner: a live
 *   broker announcing it, else the owner row (Cluster store); nobody alive yet (the lease of the dead owner runs, the
 *   takeover is under way): it waits, 50 ms doubling to 500 ms. The owner gets the held messages for that session alone
 *   (`only`: the live subscribers had them on the first attempt). No owner row: the session ended, the wait ends too.
 * - Memory: what is held is what publishers wait for; an MQTT publisher stops being read past its pending
 *   acknowledgements (maxPendingAcks), so held messages are bounded by the publishers' own windows.
 * - Order: per session, in the order this broker forwarded the messages. Duplicates are possible (QoS 1): a broker
 *   that stored a message but could not answer (killed, frozen, cut off) gets it again through the next owner.
 * - Versions: a peer of channel version 3 announces no durable entries, so nothing waits for it; a session whose
 *   owner speaks version 3 is not waited for (counted in `unstored`).
 */
import type { Logger } from 'pino';
import { FlowError, type Engine, type ForwardedDurable, type Message } from '../core/index.js';
import type { Cluster } from './cluster.js';
import type { DurableEntry, RemoteInterest } from './interest.js';
import type { PeerChannel } from './types.js';
import { call, RPC, serve, type LiveStoreHead } from './rpc.js';
import { eachForwarded } from './live-batch.js';
import { packBuffers, unpackBuffers } from './wire.js';

/** Held messages sent to a session's owner per request. */
const RETRY_BATCH = 64;
const RETRY_MIN_MS = 50;
const RETRY_MAX_MS = 500;
/** Orphaned sessions checked against the owner rows per beat. */
const ORPHAN_CHECKS = 32;
const STORE_VERSION = RPC.liveStore.since;
/**
 * (message, session) pairs held at most, all sessions together. Publishers' windows bound them; this is the backstop
 * against clients that reconnect to publish again while the owner is still unreachable: past it a publish is refused
 * as not stored (MQTT v5 PUBACK 0x80, 3.1.1 a close: the client sends it again later).
 */
const MAX_HELD = 100_000;

/** The delivery-only properties of a forwarded message (live.publish's `x`). */
export type Extras = [string | null, string | null, string | null] | null;

export function extrasOf(msg: Message): Extras {
  return msg.deliverTopic !== undefined || msg.status !== undefined || msg.guardTopic !== undefined
    ? [msg.deliverTopic ?? null, msg.status ?? null, msg.guardTopic ?? null]
    : null;
}

/** One message's wait for the sessions of other brokers it is to be stored by. */
export class Wait {
  left = 0;
  readonly promise: Promise<void>;
  private resolve!: () => void;
  private reject!: (err: Error) => void;
  constructor() {
    this.promise = new Promise((res, rej) => {
      this.resolve = res;
      this.reject = rej;
    });
    // Observed by the publisher (Engine.publish); never an unhandled rejection if it is not.
    this.promise.catch(() => undefined);
  }
  done(): void {
    if (--this.left === 0) this.resolve();
  }
  /** Not stored by some session: the publisher gets its protocol's retriable storage error. */
  fail(err: Error): void {
    this.left = -1;
    this.reject(err);
  }
}

/** A message to be stored by one session. */
export interface Item {
  session: string;
  body: Buffer;
  x: Extras;
  wait: Wait;
  /** Forwarding order on this broker. */
  seq: number;
}

interface Held {
  items: Item[];
  /** The broker the last attempt failed at (not asked again before the owner row). */
  failed: number | null;
}

export class DurableForwarding {
  readonly stats = {
    /** live.store requests sent (first attempts and retries), and those answered. */
    storeRequests: 0,
    storeRetries: 0,
    /** (message, session) pairs stored at the first attempt / after being held. */
    stored: 0,
    storedAfterHold: 0,
    /** Pairs held at some point, and held now. */
    heldTotal: 0,
    /** Pairs whose session ended meanwhile, or whose owner speaks an older channel version: not waited for. */
    gone: 0,
    unstored: 0,
    /** Pairs refused because too many were held already (MAX_HELD), or held when the broker stopped. */
    refused: 0,
    /** live.store requests served, and sessions answered as not owned here. */
    served: 0,
    notOwned: 0,
  };
  private readonly held = new Map<string, Held>();
  private heldItems = 0;
  private seq = 0;
  private closed = false;
  /** Orphaned sessions whose owner row named another live broker at the last beat. */
  private readonly movedSeen = new Set<string>();
  private checking = false;

  constructor(
    private readonly cluster: Cluster,
    private readonly channel: PeerChannel,
    private readonly engine: Engine,
    private readonly interest: RemoteInterest,
    private readonly logger: Logger,
  ) {
    serve(channel, RPC.liveStore, (from, head, tail) => this.serveStore(from, head, tail));
  }

  /** Sessions with held messages (the LiveHook's `remote` counts them: a forward must look). */
  get heldSessions(): number {
    return this.held.size;
  }

  isHeld(session: string): boolean {
    return this.held.size > 0 && this.held.has(session);
  }

  nextSeq(): number {
    return ++this.seq;
  }

  /** The peer's channel version is too old for live.store (unknown: assumed new enough). */
  tooOld(broker: number): boolean {
    const v = this.channel.peerVersion(broker);
    return v !== undefined && v < STORE_VERSION;
  }

  /** This broker owns `session` now: orphans of it elsewhere are void (its local subscription serves it). */
  ownedHere(session: string): boolean {
    return this.cluster.owns('session', session) !== null;
  }

  /** Queues an item for its session (in forwarding order), starting its retry loop if the session was not held. */
  hold(item: Item): void {
    if (this.closed) {
      item.wait.fail(new FlowError('STORAGE_ERROR', 'the broker is shutting down'));
      return;
    }
    if (this.heldItems >= MAX_HELD) {
      this.stats.refused++;
      item.wait.fail(
        new FlowError('STORAGE_ERROR', `the persistent session ${item.session} cannot be reached now and ${this.heldItems} messages wait already; try again`),
      );
      return;
    }
    this.stats.heldTotal++;
    this.heldItems++;
    let h = this.held.get(item.session);
    if (h === undefined) {
      h = { items: [item], failed: null };
      this.held.set(item.session, h);
      void this.pump(item.session, h);
      return;
    }
    const items = h.items;
    let k = items.length;
    while (k > 0 && items[k - 1].seq > item.seq) k--;
    items.splice(k, 0, item);
  }

  /** A first attempt's items at a broker that failed (or answered that it does not own some of their sessions). */
  failed(broker: number, items: Item[]): void {
    for (const it of items) {
      const h = this.held.get(it.session);
      if (h === undefined) {
        this.hold(it);
        this.held.get(it.session)!.failed = broker;
      } else this.hold(it);
    }
  }

  storedFirst(items: Item[]): void {
    this.stats.stored += items.length;
    for (const it of items) it.wait.done();
  }

  // ---------------------------------------------------------------- retries

  private async pump(session: string, h: Held): Promise<void> {
    let delay = RETRY_MIN_MS;
    const backoff = async () => {
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, RETRY_MAX_MS);
    };
    try {
      while (h.items.length > 0 && !this.closed) {
        let target: number | 'gone' | null;
        try {
          target = await this.target(session, h);
        } catch (err) {
          this.logger.debug({ err, session }, 'live: cannot read the owner of a session; retrying');
          target = null;
        }
        if (target === 'gone') {
          this.finish(h, h.items.length, 'gone');
          break;
        }
        if (target === null) {
          await backoff();
          continue;
        }
        if (target !== this.cluster.id && this.tooOld(target)) {
          this.logger.warn({ session, broker: target }, 'live: the owner of a session speaks an older channel version; its held messages are not waited for');
          this.finish(h, h.items.length, 'unstored');
          break;
        }
        const batch = h.items.slice(0, RETRY_BATCH);
        const head: LiveStoreHead = { g: [], s: batch.map((_, i) => [i, [session], [], 1]) };
        const x: NonNullable<LiveStoreHead['x']> = [];
        batch.forEach((it, i) => {
          if (it.x !== null) x.push([i, ...it.x]);
        });
        if (x.length > 0) head.x = x;
        this.stats.storeRequests++;
        this.stats.storeRetries++;
        let stored = 0;
        try {
          const { head: reply } = await call(this.channel, target, RPC.liveStore, head, { tail: packBuffers(batch.map((it) => it.body)) });
          const missing = new Set(reply.m.map(([i]) => i));
          while (stored < batch.length && !missing.has(stored)) stored++;
        } catch (err) {
          this.logger.debug({ err, session, broker: target }, 'live: held messages not stored yet; retrying');
        }
        // Items may have been inserted meanwhile (an earlier forward's late failure): take out exactly those stored.
        if (stored > 0) {
          const done = new Set(batch.slice(0, stored));
          h.items = h.items.filter((it) => !done.has(it));
          this.heldItems -= stored;
          this.stats.storedAfterHold += stored;
          for (const it of done) it.wait.done();
        }
        if (stored < batch.length) {
          h.failed = target;
          await backoff();
        } else {
          h.failed = null;
          delay = RETRY_MIN_MS;
        }
      }
    } finally {
      if (this.held.get(session) === h && h.items.length === 0) this.held.delete(session);
    }
  }

  private finish(h: Held, n: number, why: 'gone' | 'unstored'): void {
    const items = h.items.splice(0, n);
    this.heldItems -= items.length;
    this.stats[why] += items.length;
    for (const it of items) it.wait.done();
  }

  /** Where a held session's messages go now: a live broker announcing it, else its owner row's live owner. */
  private async target(session: string, h: Held): Promise<number | 'gone' | null> {
    if (this.cluster.owns('session', session) !== null) return this.cluster.id;
    const at = this.interest.brokersOf(session);
    if (at !== undefined) {
      for (const b of at.keys()) if (b !== h.failed && this.cluster.isAlive(b)) return b;
    }
    const row = await this.cluster.store.owner('session', session);
    if (row === null) return 'gone';
    if (row.owner === null || !this.cluster.isAlive(row.owner, row.incarnation)) return null;
    // Owned by this broker's incarnation, still being acquired: soon.
    if (row.owner === this.cluster.id) return null;
    return row.owner;
  }

  // ---------------------------------------------------------------- serving

  /** A peer's batch: delivered as live.publish's, then answered once the sessions named have stored it. */
  private async serveStore(from: number, head: LiveStoreHead, tail: Buffer): Promise<{ m: Array<[number, string[]]> }> {
    this.stats.served++;
    const msgs = unpackBuffers(tail);
    const host = this.engine.durable;
    const missing = new Map<number, string[]>();
    const checks: Array<[number, string, unknown]> = [];
    const s = head.s;
    let si = 0;
    eachForwarded(
      msgs,
      head,
      (err) => this.logger.warn({ err, from }, 'live: a forwarded message cannot be decoded; dropped'),
      (i, msg, groups) => {
        while (si < s.length && s[si][0] < i) si++;
        const entry = si < s.length && s[si][0] === i ? s[si] : null;
        if (entry === null) {
          this.engine.deliverForwarded(msg, groups);
          return;
        }
        const names = new Set<string>();
        let skip: Set<string> | null = entry[2].length > 0 ? new Set(entry[2]) : null;
        for (const name of entry[1]) {
          const st = host === null ? ({ state: 'elsewhere' } as const) : host.holds(name);
          if (st.state === 'owned') {
            names.add(name);
            checks.push([i, name, st.token]);
          } else if (st.state === 'nothing') names.add(name);
          else {
            (skip ??= new Set()).add(name);
            const m = missing.get(i);
            if (m === undefined) missing.set(i, [name]);
            else m.push(name);
          }
        }
        const durable: ForwardedDurable = { names, skip, only: entry[3] === 1 };
        this.engine.deliverForwarded(msg, groups, durable);
      },
    );
    if (host !== null && checks.length > 0) {
      const w = host.written();
      if (w !== null) await w;
      for (const [i, name, token] of checks) {
        if (host.stored(name, token)) continue;
        const m = missing.get(i);
        if (m === undefined) missing.set(i, [name]);
        else m.push(name);
      }
    }
    this.stats.notOwned += [...missing.values()].reduce((n, m) => n + m.length, 0);
    return { m: [...missing] };
  }

  // ---------------------------------------------------------------- orphans

  /**
   * The beat: orphaned sessions (their broker died) are forgotten once they have an owner again elsewhere (seen at
   * two beats in a row: its announcement is on its way) or here, or no owner row (ended).
   */
  beat(): void {
    if (this.checking || this.closed || this.interest.orphans.size === 0) return;
    const sessions = [...this.interest.orphans.keys()].slice(0, ORPHAN_CHECKS);
    this.checking = true;
    void (async () => {
      for (const session of sessions) {
        if (this.ownedHere(session)) {
          this.interest.dropOrphans(session);
          continue;
        }
        const list: DurableEntry[] | undefined = this.interest.orphans.get(session);
        if (list === undefined) continue;
        try {
          const row = await this.cluster.store.owner('session', session);
          if (row === null) this.interest.dropOrphans(session);
          else if (row.owner !== null && row.owner !== list[0].broker && this.cluster.isAlive(row.owner, row.incarnation)) {
            if (this.movedSeen.has(session)) {
              this.interest.dropOrphans(session);
              this.movedSeen.delete(session);
            } else this.movedSeen.add(session);
          }
        } catch {
          return;
        }
      }
      for (const s of this.movedSeen) if (!this.interest.orphans.has(s)) this.movedSeen.delete(s);
    })().finally(() => (this.checking = false));
  }

  figures(): Record<string, unknown> {
    return { ...this.stats, heldSessions: this.held.size, heldNow: this.heldItems, orphanedSessions: this.interest.orphans.size };
  }

  /**
   * Stops retrying: what is held is refused as not stored (its publishers, whose connections close with this broker,
   * get no acknowledgement for it, or a negative one: they send it again elsewhere).
   */
  close(): void {
    this.closed = true;
    const err = new FlowError('STORAGE_ERROR', 'the broker is shutting down before the persistent sessions it reaches stored it');
    for (const h of this.held.values()) {
      this.stats.refused += h.items.length;
      this.heldItems -= h.items.length;
      for (const it of h.items.splice(0)) it.wait.fail(err);
    }
    this.held.clear();
  }
}
