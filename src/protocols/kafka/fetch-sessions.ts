/**
 * Incremental fetch sessions (KIP-227), as a Kafka broker keeps them.
 *
 * - A full fetch (epoch 0) names every partition; the broker answers all of them and, when its cache admits a
 *   session, returns a new session id. Epoch -1 is a full fetch that asks for no session. Either closes the
 *   session the request names, if any.
 * - An incremental fetch (epoch >= 1) names the session and its next epoch, and only the partitions whose fetch
 *   position (or limits) changed, plus the ones to forget. The broker reads every partition of the session and
 *   answers only those with something new: records, an error, or a moved high watermark, last stable offset or
 *   log start offset. An unknown session is FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH;
 *   a session made with topic names used with topic ids (Fetch v13+) or the reverse is FETCH_SESSION_TOPIC_ID_ERROR.
 * - Partitions that returned records move to the end of the session, so that a full response gives the next ones
 *   their turn (KIP-227's round robin).
 * - The cache is bounded (Kafka's max.incremental.fetch.session.cache.slots): when it is full a new session takes
 *   the slot of one idle for longer than `evictionMs`, else of the smallest session if that one is smaller than the
 *   new one (Kafka's eviction rules), else no session is made (the client keeps sending full fetches). A session
 *   belongs to the connection that made it: another connection cannot use it, and it goes when that connection
 *   closes, so a stranger cannot pin memory beyond its own connections.
 * - Two bounds Kafka does not have, so that one connection cannot hold the whole cache's memory: a connection keeps
 *   at most `MAX_SESSIONS_PER_CONNECTION` sessions (a new one drops its oldest; clients hold one per broker), and a
 *   session at most `MAX_SESSION_PARTITIONS` partitions (a larger full fetch gets no session; an incremental fetch
 *   growing one past it closes it with FETCH_SESSION_ID_NOT_FOUND, after which the client does full fetches, as
 *   the protocol lets a broker decline sessions).
 */
import { randomInt } from 'node:crypto';

/** A partition of a session: what the client last said about it, and what the broker last answered. */
export interface SessionPartition {
  /** Topic name (v12-); with topic ids, the name the id had when the partition joined ("" if none). */
  topic: string;
  /** Topic id as hex (v13+); "" for sessions by name. */
  topicId: string;
  partition: number;
  fetchOffset: number;
  partitionMaxBytes: number;
  currentLeaderEpoch: number;
  lastFetchedEpoch: number;
  /** Last values sent to the client; -2 (never an offset) until the first response. */
  highWatermark: number;
  lastStableOffset: number;
  logStartOffset: number;
}

export class FetchSession {
  /** Partitions in fetch order, by `partitionKey`. */
  readonly partitions = new Map<string, SessionPartition>();
  /** The epoch the next incremental fetch must carry. */
  epoch = 1;
  lastUsedMs: number;

  constructor(
    readonly id: number,
    /** Connection that made it. */
    readonly owner: string,
    /** Made by a Fetch v13+ (topics by id). */
    readonly usesTopicIds: boolean,
    now: number,
  ) {
    this.lastUsedMs = now;
  }

  /** The epoch after `e` (wraps to 1, never 0 or -1). */
  static nextEpoch(e: number): number {
    return e >= 0x7fffffff ? 1 : e + 1;
  }
}

/** Sessions one connection may hold; making another drops its oldest. */
export const MAX_SESSIONS_PER_CONNECTION = 8;
/** Partitions one session may hold. */
export const MAX_SESSION_PARTITIONS = 100_000;

export function partitionKey(topicOrId: string, partition: number): string {
  return `${topicOrId}\u0000${partition}`;
}

/** Whether a partition's response must be in an incremental response; records the values sent if so. */
export function mustRespond(
  cached: SessionPartition,
  res: { errorCode: number; highWatermark: number; lastStableOffset: number; logStartOffset: number; records: Buffer[] | null; preferredReadReplica: number },
): boolean {
  let respond = res.errorCode !== 0 || (res.records !== null && res.records.some((b) => b.length > 0)) || res.preferredReadReplica !== -1;
  if (cached.highWatermark !== res.highWatermark) respond = true;
  if (cached.lastStableOffset !== res.lastStableOffset) respond = true;
  if (cached.logStartOffset !== res.logStartOffset) respond = true;
  cached.highWatermark = res.highWatermark;
  cached.lastStableOffset = res.lastStableOffset;
  cached.logStartOffset = res.logStartOffset;
  return respond;
}

export interface FetchSessionCacheOptions {
  /** Sessions kept at most (max.incremental.fetch.session.cache.slots); 0: no sessions at all. */
  maxSlots: number;
  /** A session idle this long may be evicted for a new one (Kafka: 120 s). */
  evictionMs: number;
  now?: () => number;
}

export class FetchSessionCache {
  private readonly sessions = new Map<number, FetchSession>();
  private readonly byOwner = new Map<string, Set<number>>();
  private readonly now: () => number;
  /** Counters for tests and metrics. */
  readonly stats = { created: 0, evicted: 0, refused: 0 };

  constructor(private readonly opts: FetchSessionCacheOptions) {
    this.now = opts.now ?? Date.now;
  }

  get size(): number {
    return this.sessions.size;
  }

  /** The session of that id if `owner` made it. */
  get(id: number, owner: string): FetchSession | undefined {
    const s = this.sessions.get(id);
    return s !== undefined && s.owner === owner ? s : undefined;
  }

  touch(s: FetchSession): void {
    s.lastUsedMs = this.now();
  }

  remove(id: number, owner: string): boolean {
    const s = this.get(id, owner);
    if (s === undefined) return false;
    this.drop(s);
    return true;
  }

  /** Every session of a connection that closed. */
  removeOwner(owner: string): void {
    const ids = this.byOwner.get(owner);
    if (ids === undefined) return;
    for (const id of [...ids]) {
      const s = this.sessions.get(id);
      if (s !== undefined) this.drop(s);
    }
    this.byOwner.delete(owner);
  }

  /**
   * A new session for `partitions` partitions, or null when the cache admits none (full, and no session may be
   * evicted for it). The caller fills its partitions.
   */
  create(owner: string, usesTopicIds: boolean, partitions: number): FetchSession | null {
    if (this.opts.maxSlots <= 0 || partitions === 0 || partitions > MAX_SESSION_PARTITIONS) return null;
    const mine = this.byOwner.get(owner);
    if (mine !== undefined && mine.size >= MAX_SESSIONS_PER_CONNECTION) {
      // The connection's oldest session (sets keep insertion order) makes room.
      const oldest = this.sessions.get(mine.values().next().value!);
      if (oldest !== undefined) this.drop(oldest);
    }
    if (this.sessions.size >= this.opts.maxSlots && !this.evictFor(partitions)) {
      this.stats.refused++;
      return null;
    }
    let id = 0;
    do id = randomInt(1, 0x7fffffff);
    while (this.sessions.has(id));
    const s = new FetchSession(id, owner, usesTopicIds, this.now());
    this.sessions.set(id, s);
    let ids = this.byOwner.get(owner);
    if (ids === undefined) this.byOwner.set(owner, (ids = new Set()));
    ids.add(id);
    this.stats.created++;
    return s;
  }

  /** Frees a slot: the least recently used session if it is stale, else the smallest if smaller than `size`. */
  private evictFor(size: number): boolean {
    const now = this.now();
    let lru: FetchSession | undefined;
    let smallest: FetchSession | undefined;
    for (const s of this.sessions.values()) {
      if (lru === undefined || s.lastUsedMs < lru.lastUsedMs) lru = s;
      if (smallest === undefined || s.partitions.size < smallest.partitions.size) smallest = s;
    }
    let victim: FetchSession | undefined;
    if (lru !== undefined && now - lru.lastUsedMs > this.opts.evictionMs) victim = lru;
    else if (smallest !== undefined && smallest.partitions.size < size) victim = smallest;
    if (victim === undefined) return false;
    this.drop(victim);
    this.stats.evicted++;
    return true;
  }

  private drop(s: FetchSession): void {
    this.sessions.delete(s.id);
    const ids = this.byOwner.get(s.owner);
    ids?.delete(s.id);
    if (ids !== undefined && ids.size === 0) this.byOwner.delete(s.owner);
  }
}
