/**
 * Live pub/sub across brokers: the engine's LiveHook in cluster mode.
 *
 * - Interest: every broker tells every other which filters it has live subscribers for (interest.ts): numbered
 *   deltas (`live.interest`, one-way, at most one per tick), a snapshot on request (`live.snapshot`) when a peer is
 *   new, restarted or a delta went missing, and a small `live.sync` beat ({incarnation, seq}) every second by which a
 *   peer notices what it missed. A dead broker's table is dropped as soon as the membership view says so.
 * - Forwarding: a message published through this broker is delivered here by the engine and, when some other broker
 *   wants its topic, queued once per such broker: encoded once, sent as one `live.publish` per peer per tick holding
 *   every message of that tick (split past BATCH_BYTES). The receiving broker delivers it to its live subscribers
 *   only (Engine.deliverForwarded): no capture by streams or queues, no retain, no forwarding again, so no loop.
 *   While no other broker has interest the engine does not call in at all (`remote === 0`).
 * - Shared groups (MQTT `$share/g/f`, NATS queue groups) spanning brokers: the publishing broker picks, per message
 *   and group, one broker among those with members (itself included), round robin over the brokers; the message
 *   carries the groups the receiving broker serves, and the other brokers' members skip it. Each message reaches
 *   one member cluster-wide.
 * - Ordering: interest deltas and messages to a peer leave in one flush, deltas first, on one ordered channel: a
 *   NATS requester's inbox subscription reaches the responder's broker before its request does.
 * - Retained messages: once a retained publish is in the store, the `retained` notify carries it (or its deletion)
 *   to every broker's index; one too big for a notify payload is fetched from the publishing broker (`live.retained`).
 * - Users and policies: the `control` notify after a change made here; the others refresh their directory at once
 *   (wired in src/broker.ts; see Directory.announce / refreshNow).
 *
 * - Persistent sessions (live-durable.ts, issue 30): a QoS 1/2 publish whose publisher waits (Engine.publish `acked`,
 *   the MQTT adapter) and that reaches persistent sessions of other brokers (durable interest entries) is sent in a
 *   `live.store` request, the tick's whole batch to that peer (so the order of the batch is kept), and acknowledged
 *   once those sessions stored it; what their owner cannot take now is held here for the session's next owner.
 *
 * Other one-way messages are best effort (types.ts: dropped while a peer cannot be reached), as live delivery is on a
 * single broker to a subscriber whose connection drops.
 */
import type { Logger } from 'pino';
import { FlowError, isReservedTopic, type Engine, type LiveHook, type Message } from '../core/index.js';
import type { Cluster } from './cluster.js';
import { LocalInterest, RemoteInterest, type DurableEntry, type InterestMessage, type RemoteEntry, type Rule } from './interest.js';
import type { PeerChannel } from './types.js';
import { call, cast, castAll, RPC, serve, type LivePublishHead, type LiveStoreHead } from './rpc.js';
import { DurableForwarding, extrasOf, Wait, type Item } from './live-durable.js';
import { eachForwarded } from './live-batch.js';
import { decodeMessage, encodeMessage, packBuffers, unpackBuffers } from './wire.js';

/** Messages for one peer are sent at the latest once their encoded size passes this (then again next tick). */
const BATCH_BYTES = 1 << 20;
/** How often each broker tells the others its interest sequence number (and checks the membership view). */
const SYNC_MS = 1000;
/** NOTIFY payloads must stay under ~8000 bytes; a retained message bigger than this is fetched instead. */
const NOTIFY_MAX = 7000;

/** One peer's outgoing messages of this tick. */
interface Outgoing {
  msgs: Buffer[];
  /** [index in msgs, group keys] for messages this peer serves shared groups for. */
  groups: Array<[number, string[]]>;
  extras: Array<[number, string | null, string | null, string | null]>;
  bytes: number;
  /** Messages to be stored by sessions there (the batch goes as a live.store request), with their items. */
  stores: LiveStoreHead['s'];
  items: Item[][];
}

const SYS_PREFIX = '$SYS/';

export interface LiveOptions {
  cluster: Cluster;
  channel: PeerChannel;
  engine: Engine;
  logger: Logger;
  /** Interval of the `live.sync` beat (tests shorten it). */
  syncMs?: number;
}

export class Live implements LiveHook {
  readonly local: LocalInterest;
  readonly remoteInterest = new RemoteInterest();
  skip: ReadonlySet<string> | null = null;
  readonly stats = {
    forwardedMessages: 0,
    forwardedBatches: 0,
    receivedMessages: 0,
    receivedBatches: 0,
    deltasSent: 0,
    snapshotsRequested: 0,
    snapshotsServed: 0,
    snapshotFailures: 0,
    retainedNotified: 0,
    retainedApplied: 0,
  };
  private readonly cluster: Cluster;
  private readonly channel: PeerChannel;
  private readonly engine: Engine;
  private readonly logger: Logger;
  readonly durable: DurableForwarding;
  private readonly out = new Map<number, Outgoing>();
  /** The wait of the current acked forward, and its message's encoding (reused by divert). */
  private wait: Wait | null = null;
  private curMsg: Message | null = null;
  private curEncoded: Buffer | null = null;
  private curSeq = 0;
  private readonly diverted: string[] = [];
  /** Persistent sessions of this broker being handed over or lost (moving()). */
  private readonly leaving = new Set<string>();
  private flushScheduled = false;
  private interestDirty = false;
  /** Peers whose snapshot is being fetched, with the deltas that arrived meanwhile. */
  private readonly syncing = new Map<number, InterestMessage[]>();
  /** Round-robin position per shared group (liveKey). */
  private readonly rr = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  /**
   * Peers the channel is connected to, as of the last beat (null before the first): shared-group picks skip the
   * others. A killed broker is dropped here within a beat, long before its lease expires.
   */
  /** Peers the channel failed to reach at the last beat (see PeerChannel.unreachable). */
  private unreachable: Set<number> | null = null;

  private constructor(opts: LiveOptions) {
    this.cluster = opts.cluster;
    this.channel = opts.channel;
    this.engine = opts.engine;
    this.logger = opts.logger;
    this.local = new LocalInterest(opts.cluster.incarnation);
    this.durable = new DurableForwarding(opts.cluster, opts.channel, opts.engine, this.remoteInterest, opts.logger);
    this.timer = setInterval(() => this.sync(), opts.syncMs ?? SYNC_MS);
    this.timer.unref();
  }

  /**
   * Installs the hook on the engine (before its first subscription) and registers the channel methods and notify
   * topics. Another part reaches it through `engine.live`.
   */
  static async start(opts: LiveOptions): Promise<Live> {
    if (opts.engine.live !== null) throw new Error('live: the engine already has a live hook');
    const live = new Live(opts);
    const ch = opts.channel;
    // Decoded (and checked) by each handler: a bad interest delta asks for a snapshot rather than being dropped.
    ch.on(RPC.livePublish.name, (from, body) => live.onPublish(from, body));
    ch.on(RPC.liveInterest.name, (from, body) => live.onInterest(from, body));
    ch.on(RPC.liveSync.name, (from, body) => live.onSync(from, body));
    serve(ch, RPC.liveSnapshot, () => {
      live.stats.snapshotsServed++;
      live.local.incarnation = live.cluster.incarnation;
      return live.local.snapshot();
    });
    serve(ch, RPC.liveRetained, (_from, topic) => {
      const m = live.engine.retained.get(topic.toString('utf8'));
      return m === undefined ? Buffer.alloc(0) : encodeMessage(m);
    });
    await opts.cluster.store.listen('retained', (payload) => live.onRetainedNotify(payload));
    opts.cluster.on('membership', () => live.sync());
    opts.engine.live = live;
    live.sync();
    return live;
  }

  // ---------------------------------------------------------------- LiveHook

  get remote(): number {
    return this.remoteInterest.size + this.remoteInterest.durable.size + this.durable.heldSessions;
  }

  subscribed(key: string, filter: string, rule: Rule, group: string | undefined, durable?: string): void {
    let changed = this.local.add(key, filter, rule, group);
    if (durable !== undefined && group === undefined && rule === 'mqtt' && this.local.addDurable(durable, filter)) changed = true;
    if (changed) this.interestChanged();
  }

  unsubscribed(key: string, filter: string, rule: Rule, group: string | undefined, durable?: string): void {
    let changed = this.local.remove(key);
    if (durable !== undefined && group === undefined && rule === 'mqtt' && this.local.removeDurable(durable, filter, this.leaving.has(durable))) changed = true;
    if (changed) this.interestChanged();
  }

  /**
   * A persistent session of this broker is leaving it (handed over to the broker its client connected to, or lost):
   * between the moment it stops storing here and the moment its next owner's subscriptions are announced, a QoS 1/2
   * publish would reach nobody for it and still be acknowledged (the chaos runner's pg-partition: a window of the
   * publisher's messages lost at the takeover that followed the partition). From now on its entries are orphans here
   * (the acked messages reaching it are held for its next owner, live-durable.ts, and not delivered to it here: the
   * divert), and its removal goes out as `moved`, so that the peers hold theirs too.
   */
  moving(key: string, on: boolean): void {
    if (!on) {
      this.leaving.delete(key);
      return;
    }
    this.leaving.add(key);
    for (const filter of this.local.durableFilters(key)) this.remoteInterest.addOrphan(this.cluster.id, key, filter);
  }

  divert(key: string, msg: Message): boolean {
    if (!this.durable.isHeld(key) || msg !== this.curMsg) return false;
    // Held for it once (a session with several matching subscriptions is asked once per subscription).
    if (this.diverted.includes(key)) return true;
    this.diverted.push(key);
    const w = (this.wait ??= new Wait());
    w.left++;
    this.durable.hold({ session: key, body: (this.curEncoded ??= encodeMessage(msg)), x: extrasOf(msg), wait: w, seq: this.curSeq });
    return true;
  }

  takeAcked(): Promise<void> | null {
    const w = this.wait;
    this.wait = null;
    this.curMsg = null;
    this.curEncoded = null;
    return w === null || w.left === 0 ? null : w.promise;
  }

  wants(topic: string): boolean {
    return this.remoteInterest.wants(topic);
  }

  // The match of one forward, in fields reused from message to message (no closure or array per publish).
  private mDollar = false;
  private mReserved = false;
  private readonly mPlain: number[] = [];
  private mGroups: Map<string, number[]> | null = null;
  private readonly onMatch = (e: RemoteEntry, firstWild: boolean): void => {
    // [MQTT-4.7.2-1] as the engine applies it: MQTT filters' first-level wildcards do not match `$` topics.
    // The `$ns` rule (core namespaces.ts) for NATS entries too.
    if (firstWild && this.mDollar && (!e.nats || this.mReserved)) return;
    if (e.group === null) {
      if (!this.mPlain.includes(e.broker)) this.mPlain.push(e.broker);
      return;
    }
    const groups = (this.mGroups ??= new Map<string, number[]>());
    const list = groups.get(e.key);
    if (list === undefined) groups.set(e.key, [e.broker]);
    else if (!list.includes(e.broker)) list.push(e.broker);
  };

  /** Sessions matched by an acked forward: the durable entry chosen for each (a live broker's before an orphan). */
  private readonly mSessions = new Map<string, DurableEntry>();
  /** Other live brokers listing a matched session (a stale table: its old owner's removal not arrived yet). */
  private readonly mOthers: DurableEntry[] = [];
  private readonly onDurable = (e: DurableEntry, firstWild: boolean): void => {
    if (firstWild && this.mDollar) return;
    const had = this.mSessions.get(e.session);
    if (had === undefined || (had.orphan && !e.orphan)) {
      this.mSessions.set(e.session, e);
      return;
    }
    if (e.orphan || had.broker === e.broker) return;
    // Listed by two live brokers: the one the channel reaches is asked, the other told to skip it.
    const down = this.unreachable;
    if (down !== null && down.has(had.broker) && !down.has(e.broker)) {
      this.mSessions.set(e.session, e);
      this.mOthers.push(had);
    } else this.mOthers.push(e);
  };

  forward(msg: Message, acked = false): number {
    this.skip = null;
    this.wait = null;
    this.curMsg = null;
    this.curEncoded = null;
    this.diverted.length = 0;
    // Each broker publishes its own statistics under $SYS/broker/ (the same names everywhere): a subscriber sees its
    // broker's, not a mix of all of them.
    if (msg.topic.startsWith(SYS_PREFIX)) return 0;
    // Brokers with plain interest, and shared groups with their remote candidates.
    this.mDollar = msg.topic.charCodeAt(0) === 0x24;
    this.mReserved = this.mDollar && isReservedTopic(msg.topic);
    this.mPlain.length = 0;
    this.mGroups = null;
    this.remoteInterest.trie.match(msg.topic, this.onMatch);
    const groups = this.mGroups as Map<string, number[]> | null;
    const targets = this.mPlain.length > 0 ? this.mPlain : null;
    // An acked QoS 1/2 publish: the persistent sessions of other brokers it reaches store it before it is acknowledged.
    let stores: Map<number, string[]> | null = null;
    let skips: Map<number, string[]> | null = null;
    if (acked && msg.qos > 0) {
      this.curMsg = msg;
      this.curSeq = this.durable.nextSeq();
      if (this.remoteInterest.durable.size > 0) {
        this.mSessions.clear();
        this.mOthers.length = 0;
        this.remoteInterest.durable.match(msg.topic, this.onDurable);
        for (const e of this.mOthers) skips = addTo(skips, e.broker, e.session);
        for (const [session, e] of this.mSessions) {
          if (e.orphan && this.durable.ownedHere(session)) {
            // Its next owner is this broker: the local subscription has it.
            this.remoteInterest.dropOrphans(session);
            continue;
          }
          if (this.durable.isHeld(session) || e.orphan) {
            // Earlier messages wait for its owner (or its broker died): this one joins them, in order.
            this.holdFor(session, msg);
            if (!e.orphan) skips = addTo(skips, e.broker, session);
            continue;
          }
          if (this.durable.tooOld(e.broker)) continue;
          stores = addTo(stores, e.broker, session);
        }
        this.mSessions.clear();
      }
    }
    if (targets === null && groups === null && stores === null) return 0;
    let served: Map<number, string[]> | null = null;
    if (groups !== null) {
      let skip: Set<string> | null = null;
      for (const [key, found] of groups) {
        // Candidates in a stable order (every broker of the group, this one included when it has members), without
        // the brokers the channel cannot reach now (killed: their lease has not run out yet), whose share would be lost.
        // When none is left, the message still goes to one of them (it may be reachable by now).
        let brokers = found;
        const here = this.local.has(key);
        // A broker merely not connected yet (just started, or never talked to) is not skipped: only failures count.
        const down = this.unreachable;
        if (down !== null && down.size > 0 && brokers.some((b) => down.has(b))) {
          const ok = brokers.filter((b) => !down.has(b));
          if (ok.length > 0 || here) brokers = ok;
        }
        if (here) brokers.push(this.cluster.id);
        brokers.sort((a, b) => a - b);
        const n = this.rr.get(key) ?? 0;
        this.rr.set(key, n + 1);
        const pick = brokers[n % brokers.length];
        if (pick === this.cluster.id) continue;
        (skip ??= new Set()).add(key);
        served ??= new Map();
        const s = served.get(pick);
        if (s === undefined) served.set(pick, [key]);
        else s.push(key);
      }
      this.skip = skip;
    }
    let count = 0;
    const sent = this.sentTo;
    sent.length = 0;
    const st = stores as Map<number, string[]> | null;
    const sk = skips as Map<number, string[]> | null;
    const sv = served as Map<number, string[]> | null;
    const send = (b: number) => {
      if (sent.includes(b)) return;
      sent.push(b);
      this.enqueue(b, (this.curEncoded ??= encodeMessage(msg)), sv?.get(b) ?? null, msg, st?.get(b) ?? null, sk?.get(b) ?? null);
      count++;
    };
    if (targets !== null) for (const b of targets) send(b);
    if (sv !== null) for (const b of sv.keys()) send(b);
    if (st !== null) for (const b of st.keys()) send(b);
    return count;
  }

  private readonly sentTo: number[] = [];

  /** Holds the current acked message for `session` (its earlier messages wait for its owner). */
  private holdFor(session: string, msg: Message): void {
    // Once: a subscription of it here (a session leaving this broker) is diverted, not held a second time.
    if (this.diverted.includes(session)) return;
    this.diverted.push(session);
    const w = (this.wait ??= new Wait());
    w.left++;
    this.durable.hold({ session, body: (this.curEncoded ??= encodeMessage(msg)), x: extrasOf(msg), wait: w, seq: this.curSeq });
  }

  retainedChanged(topic: string, msg: Message | null): void {
    let payload: string;
    if (msg === null) payload = JSON.stringify({ i: this.cluster.incarnation, t: topic, m: null });
    else {
      const data = encodeMessage(msg).toString('base64');
      payload = JSON.stringify({ i: this.cluster.incarnation, t: topic, m: data });
      // Too big for a notification: the others fetch it from this broker's index.
      if (payload.length > NOTIFY_MAX) payload = JSON.stringify({ i: this.cluster.incarnation, b: this.cluster.id, t: topic, big: true });
      if (payload.length > NOTIFY_MAX) payload = '*';
    }
    this.stats.retainedNotified++;
    this.cluster.store
      .notify('retained', payload)
      .catch((err: unknown) => this.logger.warn({ err, topic }, 'live: cannot announce a retained message to the other brokers'));
  }

  // ---------------------------------------------------------------- outgoing

  private enqueue(to: number, encoded: Buffer, groups: string[] | null, msg: Message, stores: string[] | null, skips: string[] | null): void {
    let o = this.out.get(to);
    if (o === undefined) {
      o = { msgs: [], groups: [], extras: [], bytes: 0, stores: [], items: [] };
      this.out.set(to, o);
    }
    if (groups !== null) o.groups.push([o.msgs.length, groups]);
    if (stores !== null || skips !== null) {
      o.stores.push([o.msgs.length, stores ?? [], skips ?? [], 0]);
      const items: Item[] = [];
      if (stores !== null) {
        const w = (this.wait ??= new Wait());
        const x = extrasOf(msg);
        for (const session of stores) {
          w.left++;
          items.push({ session, body: encoded, x, wait: w, seq: this.curSeq });
        }
      }
      o.items.push(items);
    }
    if (msg.deliverTopic !== undefined || msg.status !== undefined || msg.guardTopic !== undefined) {
      o.extras.push([o.msgs.length, msg.deliverTopic ?? null, msg.status ?? null, msg.guardTopic ?? null]);
    }
    o.msgs.push(encoded);
    o.bytes += encoded.length + 4;
    this.stats.forwardedMessages++;
    if (o.bytes >= BATCH_BYTES) {
      // Interest first (the peer must know what this broker wants before answers come back).
      this.flushInterest();
      this.sendBatch(to, o);
      this.out.delete(to);
      return;
    }
    this.schedule();
  }

  private interestChanged(): void {
    this.interestDirty = true;
    this.schedule();
  }

  private schedule(): void {
    if (this.flushScheduled || this.closed) return;
    this.flushScheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.flushScheduled = false;
    this.flushInterest();
    if (this.out.size === 0) return;
    for (const [to, o] of this.out) this.sendBatch(to, o);
    this.out.clear();
  }

  private sendBatch(to: number, o: Outgoing): void {
    this.stats.forwardedBatches++;
    if (o.stores.length > 0) {
      // Some messages are to be stored by sessions there: the batch goes as a request, answered once they are.
      const head: LiveStoreHead = { g: o.groups, s: o.stores };
      if (o.extras.length > 0) head.x = o.extras;
      const items = o.items;
      const stores = o.stores;
      this.durable.stats.storeRequests++;
      call(this.channel, to, RPC.liveStore, head, { tail: packBuffers(o.msgs) }).then(
        ({ head: reply }) => {
          const missing = new Map(reply.m);
          const ok: Item[] = [];
          const again: Item[] = [];
          for (let k = 0; k < stores.length; k++) {
            const m = missing.get(stores[k][0]);
            for (const it of items[k]) (m !== undefined && m.includes(it.session) ? again : ok).push(it);
          }
          this.durable.storedFirst(ok);
          if (again.length > 0) this.durable.failed(to, again);
        },
        (err: unknown) => {
          this.logger.debug({ err, broker: to }, 'live: a batch for persistent sessions was not stored; holding it for their owners');
          this.durable.failed(to, items.flat());
        },
      );
      return;
    }
    const head: LivePublishHead = o.extras.length > 0 ? { g: o.groups, x: o.extras } : { g: o.groups };
    cast(this.channel, to, RPC.livePublish, head, packBuffers(o.msgs));
  }

  private flushInterest(): void {
    if (!this.interestDirty) return;
    this.interestDirty = false;
    this.local.incarnation = this.cluster.incarnation;
    const delta = this.local.takeDelta();
    if (delta === null) return;
    castAll(this.channel, this.peers(), RPC.liveInterest, delta);
    this.stats.deltasSent++;
  }

  /** Live brokers other than this one. */
  private peers(): number[] {
    const me = this.cluster.id;
    return this.cluster
      .brokers()
      .filter((b) => b.alive && b.id !== me)
      .map((b) => b.id);
  }

  // ---------------------------------------------------------------- incoming

  private onPublish(from: number, body: Buffer): void {
    let head: LivePublishHead;
    let msgs: Buffer[];
    try {
      const d = RPC.livePublish.message.decode(body, `live.publish from broker ${from}`);
      head = d.head;
      msgs = unpackBuffers(d.tail);
    } catch (err) {
      this.logger.warn({ err, from }, 'live: a forwarded batch cannot be decoded; dropped');
      return;
    }
    this.stats.receivedBatches++;
    eachForwarded(
      msgs,
      head,
      (err) => this.logger.warn({ err, from }, 'live: a forwarded message cannot be decoded; dropped'),
      (_i, msg, groups) => {
        this.stats.receivedMessages++;
        this.engine.deliverForwarded(msg, groups);
      },
    );
  }

  private onInterest(from: number, body: Buffer): void {
    let msg: InterestMessage;
    try {
      msg = RPC.liveInterest.message.decode(body, `live.interest from broker ${from}`).head;
    } catch (err) {
      this.logger.warn({ err, from }, 'live: an interest delta cannot be decoded; asking for a snapshot');
      this.fetchSnapshot(from);
      return;
    }
    const waiting = this.syncing.get(from);
    if (waiting !== undefined) {
      waiting.push(msg);
      return;
    }
    if (!this.remoteInterest.apply(from, msg)) this.fetchSnapshot(from);
  }

  private onSync(from: number, body: Buffer): void {
    let msg: InterestMessage;
    try {
      msg = RPC.liveSync.message.decode(body, `live.sync from broker ${from}`).head;
    } catch {
      return;
    }
    if (this.syncing.has(from)) return;
    const p = this.remoteInterest.peer(from);
    if (p === undefined || p.incarnation !== msg.i || p.seq !== msg.s) this.fetchSnapshot(from);
  }

  /** Replaces a peer's table with its snapshot, then applies the deltas that arrived meanwhile. */
  private fetchSnapshot(id: number): void {
    if (this.syncing.has(id) || this.closed) return;
    this.syncing.set(id, []);
    this.stats.snapshotsRequested++;
    call(this.channel, id, RPC.liveSnapshot, null)
      .then(({ head: snap }) => {
        const b = this.cluster.broker(id);
        // A snapshot of an incarnation the view knows to be gone is void.
        if (b !== undefined && (!b.alive || b.incarnation !== snap.i)) {
          this.remoteInterest.drop(id, true);
          return;
        }
        this.remoteInterest.replace(id, snap);
        for (const d of this.syncing.get(id) ?? []) if (!this.remoteInterest.apply(id, d)) break;
      })
      .catch((err: unknown) => {
        // A broker starting (its live side not up yet) or going away: the next beat asks again.
        this.stats.snapshotFailures++;
        this.logger.debug(
          { err, broker: id, code: err instanceof FlowError ? err.code : undefined },
          "live: cannot fetch a broker's interest yet; retried at the next beat",
        );
      })
      .finally(() => this.syncing.delete(id));
  }

  /**
   * The beat: drops the tables of brokers that died or restarted, fetches those of brokers not known yet, and tells
   * every live broker this broker's sequence number.
   */
  private sync(): void {
    if (this.closed) return;
    for (const id of this.remoteInterest.peerIds()) {
      const b = this.cluster.broker(id);
      const p = this.remoteInterest.peer(id)!;
      // Its persistent sessions' entries stay as orphans: they wait for their next owner (live-durable.ts).
      if (b === undefined || !b.alive || b.incarnation !== p.incarnation) this.remoteInterest.drop(id, true);
    }
    this.durable.beat();
    const peers = this.peers();
    this.unreachable = new Set(this.channel.unreachable());
    for (const id of peers) if (this.remoteInterest.peer(id) === undefined) this.fetchSnapshot(id);
    this.flushInterest();
    // Registered again after a lost lease: a new incarnation, whose table the others fetch when they see it.
    this.local.incarnation = this.cluster.incarnation;
    castAll(this.channel, peers, RPC.liveSync, { i: this.local.incarnation, s: this.local.seq });
  }

  // ---------------------------------------------------------------- retained

  private onRetainedNotify(payload: string): void {
    if (payload === '*') {
      void this.reloadRetained();
      return;
    }
    let n: { i: string; t: string; m?: string | null; b?: number; big?: boolean };
    try {
      n = JSON.parse(payload) as typeof n;
    } catch {
      return;
    }
    if (n.i === this.cluster.incarnation) return;
    if (n.big === true && typeof n.b === 'number') {
      call(this.channel, n.b, RPC.liveRetained, Buffer.from(n.t))
        .then(({ head: reply }) => {
          this.engine.applyRetained(n.t, reply.length === 0 ? null : decodeMessage(reply));
          this.stats.retainedApplied++;
        })
        .catch((err: unknown) => this.logger.warn({ err, topic: n.t }, 'live: cannot fetch a retained message; reloading them all'))
        .catch(() => this.reloadRetained());
      return;
    }
    try {
      this.engine.applyRetained(n.t, n.m === null || n.m === undefined ? null : decodeMessage(Buffer.from(n.m, 'base64')));
      this.stats.retainedApplied++;
    } catch (err) {
      this.logger.warn({ err }, 'live: a retained notification cannot be decoded');
    }
  }

  /** Notifications may have been missed: the index becomes what the store holds. */
  private async reloadRetained(): Promise<void> {
    try {
      const rows = await this.engine.store.listRetained();
      const inStore = new Set(rows.map((r) => r.topic));
      const gone: string[] = [];
      this.engine.retained.match('#', (m) => {
        if (!inStore.has(m.topic)) gone.push(m.topic);
      });
      for (const t of gone) this.engine.applyRetained(t, null);
      for (const r of rows) this.engine.applyRetained(r.topic, decodeMessage(r.data));
    } catch (err) {
      this.logger.warn({ err }, 'live: cannot reload the retained messages');
    }
  }

  // ---------------------------------------------------------------- figures, close

  figures(): Record<string, unknown> {
    return {
      ...this.stats,
      localInterest: this.local.size,
      remoteInterest: this.remoteInterest.size,
      localDurable: this.local.durableSize,
      remoteDurable: this.remoteInterest.durable.size,
      durable: this.durable.figures(),
      peers: Object.fromEntries(this.remoteInterest.peerIds().map((id) => [id, this.remoteInterest.peer(id)!.size])),
    };
  }

  close(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    this.durable.close();
    clearInterval(this.timer);
    if (this.engine.live === this) this.engine.live = null;
  }
}

/** Adds `session` to the list of `broker` (once), making the map if needed. */
function addTo(map: Map<number, string[]> | null, broker: number, session: string): Map<number, string[]> {
  const m = map ?? new Map<number, string[]>();
  const list = m.get(broker);
  if (list === undefined) m.set(broker, [session]);
  else if (!list.includes(session)) list.push(session);
  return m;
}

/** The directory's side of the `control` notify (src/control/directory.ts), kept structural: cluster imports no control. */
export interface FollowedDirectory {
  announce: (() => void) | null;
  refreshNow(): Promise<void>;
  startPolling(intervalMs: number): void;
}

/** In cluster mode the directory is refreshed on notification; the poll stays as a safety net at least this slow. */
export const CONTROL_SAFETY_POLL_MS = 30_000;

/**
 * Users, groups, tokens and policies changed through any broker apply on every broker within a notification's delay:
 * a change made here is announced on the `control` topic once durable, and every broker refreshes its directory on
 * it ("*": notifications may have been missed, refresh too). The poll remains, slow, as a safety net.
 */
export async function followControl(cluster: Cluster, directory: FollowedDirectory, pollMs: number, logger: Logger): Promise<void> {
  await cluster.store.listen('control', (payload) => {
    if (payload === cluster.incarnation) return;
    directory.refreshNow().catch((err: unknown) => logger.warn({ err }, 'control-plane refresh failed; keeping the last directory'));
  });
  directory.announce = () => {
    cluster.store
      .notify('control', cluster.incarnation)
      .catch((err: unknown) => logger.warn({ err }, 'cannot announce a control-plane change to the other brokers; they pick it up at their next poll'));
  };
  directory.startPolling(Math.max(pollMs, CONTROL_SAFETY_POLL_MS));
}
