/**
 * The interest table: which broker has live subscribers for which filters, so that a publish travels only to the
 * brokers that want it (src/cluster/live.ts forwards).
 *
 * - LocalInterest: this broker's own live interest, counted per subscription and deduplicated per liveKey (rule,
 *   shared group, filter): a thousand MQTT clients subscribed to `a/#` are one entry. Only a change of the set
 *   (first subscription of a key, last one gone) becomes a delta; deltas are numbered (seq) so that a peer notices a
 *   missed one and asks for a snapshot.
 * - RemoteInterest: the other brokers' tables, one TopicTrie over all of them whose values name their broker, so a
 *   publish walks one trie whatever the number of brokers. A peer's table is replaced by a snapshot (a new peer, a new
 *   incarnation of one, a gap in its deltas) and dropped when the peer dies.
 *
 * Filters are parsed by their rule as the engine parses them (an MQTT filter, a NATS subject), and matched with the
 * same `$` rule, so a broker is sent exactly what its own engine would deliver to some subscription (before
 * authorization, which the receiving broker applies).
 *
 * Durable entries (channel version 4, issue 30): besides the deduplicated entries, a broker announces the QoS 1/2
 * subscriptions of the subscribers that store what they receive (MQTT persistent sessions), one entry per (session
 * key, filter), in the fields `d` (deltas) and `ds` (snapshot) that brokers of version 3 ignore. A publishing broker
 * matches them to know which sessions of which broker a QoS 1/2 publish must be stored by before it is acknowledged
 * (live-durable.ts). When a broker dies its durable entries are kept as orphans (its sessions still exist, their next
 * owner will serve them) until another broker announces the session or the session is known to be elsewhere or gone.
 */
import { isReservedTopic, liveKey, natsSubjectNamespace, parseBindingKey, TopicTrie, type Level } from '../core/index.js';

export type Rule = 'mqtt' | 'nats';

/** One entry as it travels: [rule ('m' | 'n'), filter, shared group or null]. */
export type WireEntry = [string, string, string | null];
/** A delta operation: [1 add | 0 remove, rule, filter, group]. */
export type WireOp = [0 | 1, string, string, string | null];

/**
 * A durable delta operation: [1 add | 0 remove | 2 moved, session key, MQTT filter]. `moved`: removed because the
 * session left this broker for another one (handed over, or lost with the lease); a peer keeps the entry as an orphan
 * until the session's next owner announces it, so that what is published meanwhile is held for it (brokers of
 * version 4 take it for a remove).
 */
export type DurableOp = [0 | 1 | 2, string, string];

/** Body of `live.interest` (deltas) and of `live.snapshot`'s reply (full). */
export interface InterestMessage {
  /** The sender's incarnation: a new one means a restarted broker whose old table is void. */
  i: string;
  /** Sequence number of the last delta included. */
  s: number;
  /** Deltas (live.interest). */
  o?: WireOp[];
  /** Every entry (snapshot). */
  e?: WireEntry[];
  /** Durable deltas (version 4). */
  d?: DurableOp[];
  /** Every durable entry, [session key, filter] (snapshot, version 4). */
  ds?: Array<[string, string]>;
}

interface LocalEntry {
  filter: string;
  rule: Rule;
  group: string | null;
  count: number;
}

export class LocalInterest {
  private readonly entries = new Map<string, LocalEntry>();
  private pending: WireOp[] = [];
  /** Durable entries by session key and filter (`key\0filter`), counted. */
  private readonly durables = new Map<string, { session: string; filter: string; count: number }>();
  private pendingDurable: DurableOp[] = [];
  /** Sequence number of the last delta taken. */
  seq = 0;

  /** The broker's incarnation: a broker registered again after losing its lease is a new one (Live keeps it current). */
  constructor(public incarnation: string) {}

  get size(): number {
    return this.entries.size;
  }

  /** One more subscription of `key`; true when the key is new (a delta is pending). */
  add(key: string, filter: string, rule: Rule, group: string | undefined): boolean {
    const e = this.entries.get(key);
    if (e !== undefined) {
      e.count++;
      return false;
    }
    this.entries.set(key, { filter, rule, group: group ?? null, count: 1 });
    this.pending.push([1, rule === 'nats' ? 'n' : 'm', filter, group ?? null]);
    return true;
  }

  /** One subscription of `key` fewer; true when it was the last (a delta is pending). */
  remove(key: string): boolean {
    const e = this.entries.get(key);
    if (e === undefined) return false;
    if (--e.count > 0) return false;
    this.entries.delete(key);
    this.pending.push([0, e.rule === 'nats' ? 'n' : 'm', e.filter, e.group]);
    return true;
  }

  /** One more QoS 1/2 subscription of a storing subscriber (an MQTT persistent session); true when new. */
  addDurable(session: string, filter: string): boolean {
    const k = `${session}\u0000${filter}`;
    const e = this.durables.get(k);
    if (e !== undefined) {
      e.count++;
      return false;
    }
    this.durables.set(k, { session, filter, count: 1 });
    this.pendingDurable.push([1, session, filter]);
    return true;
  }

  /** One QoS 1/2 subscription of a storing subscriber less; `moved`: the session is leaving this broker (op 2). */
  removeDurable(session: string, filter: string, moved = false): boolean {
    const k = `${session}\u0000${filter}`;
    const e = this.durables.get(k);
    if (e === undefined) return false;
    if (--e.count > 0) return false;
    this.durables.delete(k);
    this.pendingDurable.push([moved ? 2 : 0, session, filter]);
    return true;
  }

  /** The filters of the durable entries of `session` here. */
  durableFilters(session: string): string[] {
    const out: string[] = [];
    for (const e of this.durables.values()) if (e.session === session) out.push(e.filter);
    return out;
  }

  get durableSize(): number {
    return this.durables.size;
  }

  /** This broker has subscriptions of `key` (a shared group's members, say). */
  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** The pending deltas as one numbered message, or null when there are none. */
  takeDelta(): InterestMessage | null {
    if (this.pending.length === 0 && this.pendingDurable.length === 0) return null;
    const o = this.pending;
    this.pending = [];
    const msg: InterestMessage = { i: this.incarnation, s: ++this.seq, o };
    if (this.pendingDurable.length > 0) {
      msg.d = this.pendingDurable;
      this.pendingDurable = [];
    }
    return msg;
  }

  /** Every entry, as of the last delta taken (pending ones are included: a peer that gets both applies them twice, harmlessly). */
  snapshot(): InterestMessage {
    const e: WireEntry[] = [];
    for (const x of this.entries.values()) e.push([x.rule === 'nats' ? 'n' : 'm', x.filter, x.group]);
    const msg: InterestMessage = { i: this.incarnation, s: this.seq, e };
    if (this.durables.size > 0) msg.ds = [...this.durables.values()].map((x) => [x.session, x.filter]);
    return msg;
  }
}

/** A filter another broker has live subscribers for. */
export interface RemoteEntry {
  readonly broker: number;
  readonly key: string;
  readonly filter: string;
  readonly nats: boolean;
  readonly group: string | null;
  readonly levels: readonly Level[];
}

/** A QoS 1/2 subscription of a storing subscriber (an MQTT persistent session) of another broker. */
export interface DurableEntry {
  /** The broker that announced it (for an orphan: the dead broker it was on). */
  readonly broker: number;
  readonly session: string;
  readonly filter: string;
  readonly levels: readonly Level[];
  /** Its broker is dead or restarted: the session waits for its next owner. */
  orphan: boolean;
}

interface Peer {
  incarnation: string;
  seq: number;
  entries: Map<string, RemoteEntry>;
  /** Durable entries by `session\0filter`. */
  durables: Map<string, DurableEntry>;
}

export class RemoteInterest {
  readonly trie = new TopicTrie<RemoteEntry>();
  /** Durable entries of every peer, and orphans of dead ones. */
  readonly durable = new TopicTrie<DurableEntry>();
  private readonly peers = new Map<number, Peer>();
  /** Live peers announcing each session (count of entries per broker). */
  private readonly sessions = new Map<string, Map<number, number>>();
  /** Orphaned durable entries by session key: sessions of dead brokers waiting for their next owner. */
  readonly orphans = new Map<string, DurableEntry[]>();

  /** Entries of every peer together: 0 means no other broker wants anything. */
  get size(): number {
    return this.trie.size;
  }

  peer(id: number): { incarnation: string; seq: number; size: number } | undefined {
    const p = this.peers.get(id);
    return p && { incarnation: p.incarnation, seq: p.seq, size: p.entries.size };
  }

  peerIds(): number[] {
    return [...this.peers.keys()];
  }

  /** Replaces a peer's table with a snapshot (the durable entries of an earlier incarnation become orphans). */
  replace(id: number, msg: InterestMessage): void {
    const old = this.peers.get(id);
    this.drop(id, old !== undefined && old.incarnation !== msg.i);
    const p: Peer = { incarnation: msg.i, seq: msg.s, entries: new Map(), durables: new Map() };
    this.peers.set(id, p);
    for (const [r, filter, group] of msg.e ?? []) this.add(id, p, r, filter, group);
    for (const [session, filter] of msg.ds ?? []) this.addDurable(id, p, session, filter);
  }

  /**
   * Applies a delta if it is the next one of the incarnation known; false when it is not (a gap, an unknown or new
   * incarnation): the caller asks for a snapshot. Deltas already applied (seq not above the known one) are ignored.
   */
  apply(id: number, msg: InterestMessage): boolean {
    const p = this.peers.get(id);
    if (p === undefined || p.incarnation !== msg.i) return false;
    if (msg.s <= p.seq) return true;
    if (msg.s !== p.seq + 1) return false;
    p.seq = msg.s;
    for (const [op, r, filter, group] of msg.o ?? []) {
      if (op === 1) this.add(id, p, r, filter, group);
      else this.remove(p, r, filter, group);
    }
    for (const [op, session, filter] of msg.d ?? []) {
      if (op === 1) this.addDurable(id, p, session, filter);
      else {
        this.removeDurable(id, p, session, filter);
        // Moved to another broker: held for its next owner until that one announces it.
        if (op === 2) this.addOrphan(id, session, filter);
      }
    }
    return true;
  }

  /**
   * Forgets a peer's table. `orphan` (it died, or restarted as a new incarnation): its durable entries stay, as
   * orphans, for the sessions' next owner.
   */
  drop(id: number, orphan = false): void {
    const p = this.peers.get(id);
    if (p === undefined) return;
    for (const e of p.entries.values()) this.trie.remove(e.levels, e);
    for (const e of p.durables.values()) {
      this.uncount(e.session, id);
      if (orphan && !this.sessions.has(e.session)) {
        e.orphan = true;
        const list = this.orphans.get(e.session);
        if (list === undefined) this.orphans.set(e.session, [e]);
        else list.push(e);
      } else this.durable.remove(e.levels, e);
    }
    this.peers.delete(id);
  }

  /** Live peers announcing durable entries of `session`. */
  brokersOf(session: string): ReadonlyMap<number, number> | undefined {
    return this.sessions.get(session);
  }

  /**
   * An orphaned entry of `session` (last on `broker`, possibly this broker: a session it is handing over), unless a
   * live peer announces the session already or the entry is there.
   */
  addOrphan(broker: number, session: string, filter: string): void {
    if (this.sessions.has(session)) return;
    const list = this.orphans.get(session);
    if (list !== undefined && list.some((e) => e.filter === filter)) return;
    let levels: Level[];
    try {
      levels = parseBindingKey(filter, 'mqtt', false, null);
    } catch {
      return;
    }
    const e: DurableEntry = { broker, session, filter, levels, orphan: true };
    this.durable.add(levels, e);
    if (list === undefined) this.orphans.set(session, [e]);
    else list.push(e);
  }

  /** Forgets the orphaned entries of `session` (its next owner announced it, or it is known to be gone). */
  dropOrphans(session: string): void {
    const list = this.orphans.get(session);
    if (list === undefined) return;
    for (const e of list) this.durable.remove(e.levels, e);
    this.orphans.delete(session);
  }

  private addDurable(id: number, p: Peer, session: string, filter: string): void {
    const k = `${session}\u0000${filter}`;
    if (p.durables.has(k)) return;
    let levels: Level[];
    try {
      levels = parseBindingKey(filter, 'mqtt', false, null);
    } catch {
      return;
    }
    const e: DurableEntry = { broker: id, session, filter, levels, orphan: false };
    p.durables.set(k, e);
    this.durable.add(levels, e);
    let m = this.sessions.get(session);
    if (m === undefined) this.sessions.set(session, (m = new Map<number, number>()));
    m.set(id, (m.get(id) ?? 0) + 1);
    // Announced by a live broker: the session has its owner again.
    this.dropOrphans(session);
  }

  private removeDurable(id: number, p: Peer, session: string, filter: string): void {
    const k = `${session}\u0000${filter}`;
    const e = p.durables.get(k);
    if (e === undefined) return;
    p.durables.delete(k);
    this.durable.remove(e.levels, e);
    this.uncount(session, id);
  }

  private uncount(session: string, id: number): void {
    const m = this.sessions.get(session);
    if (m === undefined) return;
    const n = (m.get(id) ?? 0) - 1;
    if (n > 0) m.set(id, n);
    else m.delete(id);
    if (m.size === 0) this.sessions.delete(session);
  }

  private add(id: number, p: Peer, r: string, filter: string, group: string | null): void {
    const nats = r === 'n';
    const key = liveKey(nats ? 'nats' : 'mqtt', group ?? undefined, filter);
    if (p.entries.has(key)) return;
    let levels: Level[];
    try {
      // A tenant's NATS subscription is announced qualified (`$ns.<ns>.<subject>`): its namespace is in its filter.
      levels = parseBindingKey(filter, nats ? 'nats' : 'mqtt', nats, nats ? natsSubjectNamespace(filter) : null);
    } catch {
      return; // not a filter this broker's rules accept (a newer peer's?): nothing of ours can match it anyway
    }
    const e: RemoteEntry = { broker: id, key, filter, nats, group, levels };
    p.entries.set(key, e);
    this.trie.add(levels, e);
  }

  private remove(p: Peer, r: string, filter: string, group: string | null): void {
    const key = liveKey(r === 'n' ? 'nats' : 'mqtt', group ?? undefined, filter);
    const e = p.entries.get(key);
    if (e === undefined) return;
    p.entries.delete(key);
    this.trie.remove(e.levels, e);
  }

  /** Calls `fn` for every entry matching `topic`, with the MQTT `$` rule applied as the engine applies it. */
  match(topic: string, fn: (e: RemoteEntry) => void): void {
    const dollar = topic.charCodeAt(0) === 0x24;
    const reserved = dollar && isReservedTopic(topic);
    this.trie.match(topic, (e, firstWild) => {
      if (firstWild && dollar && (!e.nats || reserved)) return;
      fn(e);
    });
  }

  wants(topic: string): boolean {
    const dollar = topic.charCodeAt(0) === 0x24;
    const reserved = dollar && isReservedTopic(topic);
    return this.trie.hasMatch(topic, (e, firstWild) => !(firstWild && dollar && (!e.nats || reserved)));
  }
}
