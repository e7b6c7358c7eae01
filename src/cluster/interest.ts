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
 */
import { isReservedTopic, liveKey, natsSubjectNamespace, parseBindingKey, TopicTrie, type Level } from '../core/index.js';

export type Rule = 'mqtt' | 'nats';

/** One entry as it travels: [rule ('m' | 'n'), filter, shared group or null]. */
export type WireEntry = [string, string, string | null];
/** A delta operation: [1 add | 0 remove, rule, filter, group]. */
export type WireOp = [0 | 1, string, string, string | null];

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

  /** This broker has subscriptions of `key` (a shared group's members, say). */
  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** The pending deltas as one numbered message, or null when there are none. */
  takeDelta(): InterestMessage | null {
    if (this.pending.length === 0) return null;
    const o = this.pending;
    this.pending = [];
    return { i: this.incarnation, s: ++this.seq, o };
  }

  /** Every entry, as of the last delta taken (pending ones are included: a peer that gets both applies them twice, harmlessly). */
  snapshot(): InterestMessage {
    const e: WireEntry[] = [];
    for (const x of this.entries.values()) e.push([x.rule === 'nats' ? 'n' : 'm', x.filter, x.group]);
    return { i: this.incarnation, s: this.seq, e };
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

interface Peer {
  incarnation: string;
  seq: number;
  entries: Map<string, RemoteEntry>;
}

export class RemoteInterest {
  readonly trie = new TopicTrie<RemoteEntry>();
  private readonly peers = new Map<number, Peer>();

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

  /** Replaces a peer's table with a snapshot. */
  replace(id: number, msg: InterestMessage): void {
    this.drop(id);
    const p: Peer = { incarnation: msg.i, seq: msg.s, entries: new Map() };
    this.peers.set(id, p);
    for (const [r, filter, group] of msg.e ?? []) this.add(id, p, r, filter, group);
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
    return true;
  }

  /** Forgets a peer's table (it died, or restarted as a new incarnation). */
  drop(id: number): void {
    const p = this.peers.get(id);
    if (p === undefined) return;
    for (const e of p.entries.values()) this.trie.remove(e.levels, e);
    this.peers.delete(id);
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
