/**
 * Server-side partition assignors of the consumer group protocol (KIP-848): the coordinator computes every member's
 * target assignment itself; a member names the one it wants with ConsumerGroupHeartbeat's ServerAssignor
 * (group.remote.assignor), the group uses the one most members name, `uniform` when none does (Kafka's default
 * group.consumer.assignors = uniform, range). Pure functions: members and topics in, assignment by member out.
 *
 * - uniform: balanced and sticky. Every member keeps what it had as long as that stays balanced; the rest is handed
 *   to the least loaded members that subscribe to the topic, then partitions move from the most to the least loaded
 *   members until no member has two more than another member that could take one of its partitions. With identical
 *   subscriptions every member ends with floor or ceil of partitions / members.
 * - range: Kafka's range assignor: per topic, contiguous ranges to the subscribed members in order (static members
 *   first by instance id, then the others by member id), so that members subscribed to the same co-partitioned
 *   topics get the same partition numbers of each. Not sticky, as in Kafka.
 */
import type { Assignment } from './reconcile.js';

export interface AssignorMember {
  memberId: string;
  instanceId: string | null;
  /** Topic ids the member subscribes to (resolved from names and regexes), existing topics only. */
  topics: ReadonlySet<string>;
}

export interface AssignorTopic {
  id: string;
  name: string;
  partitions: number;
}

export interface AssignorInput {
  members: readonly AssignorMember[];
  /** Subscribed topics by id. */
  topics: ReadonlyMap<string, AssignorTopic>;
  /** The previous target assignment, by member id (stickiness). */
  previous: ReadonlyMap<string, Assignment>;
}

export type Assignor = (input: AssignorInput) => Map<string, Assignment>;

const key = (topicId: string, p: number): string => `${topicId}:${p}`;

function byName(topics: ReadonlyMap<string, AssignorTopic>): AssignorTopic[] {
  return [...topics.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

function put(out: Map<string, Map<string, Set<number>>>, memberId: string, topicId: string, p: number): void {
  const m = out.get(memberId) as Map<string, Set<number>>;
  let s = m.get(topicId);
  if (!s) m.set(topicId, (s = new Set()));
  s.add(p);
}

function removeFrom(out: Map<string, Map<string, Set<number>>>, memberId: string, topicId: string, p: number): void {
  const m = out.get(memberId) as Map<string, Set<number>>;
  const s = m.get(topicId);
  s?.delete(p);
  if (s && s.size === 0) m.delete(topicId);
}

export const uniform: Assignor = ({ members, topics, previous }) => {
  const out = new Map<string, Map<string, Set<number>>>();
  const count = new Map<string, number>();
  const sorted = [...members].sort((a, b) => (a.memberId < b.memberId ? -1 : a.memberId > b.memberId ? 1 : 0));
  for (const m of sorted) {
    out.set(m.memberId, new Map());
    count.set(m.memberId, 0);
  }
  const owner = new Map<string, string>();
  // 1. What each member had and may still have (its topic still subscribed and the partition still there).
  for (const m of sorted) {
    for (const [t, ps] of previous.get(m.memberId) ?? []) {
      const topic = topics.get(t);
      if (!topic || !m.topics.has(t)) continue;
      for (const p of [...ps].sort((a, b) => a - b)) {
        if (p >= topic.partitions || owner.has(key(t, p))) continue;
        owner.set(key(t, p), m.memberId);
        put(out, m.memberId, t, p);
        count.set(m.memberId, (count.get(m.memberId) as number) + 1);
      }
    }
  }
  const eligible = (t: string): AssignorMember[] => sorted.filter((m) => m.topics.has(t));
  const leastLoaded = (cands: AssignorMember[]): AssignorMember | undefined => {
    let best: AssignorMember | undefined;
    for (const c of cands) if (!best || (count.get(c.memberId) as number) < (count.get(best.memberId) as number)) best = c;
    return best;
  };
  // 2. The rest, each to the least loaded member that subscribes to its topic.
  for (const topic of byName(topics)) {
    const cands = eligible(topic.id);
    if (cands.length === 0) continue;
    for (let p = 0; p < topic.partitions; p++) {
      if (owner.has(key(topic.id, p))) continue;
      const m = leastLoaded(cands) as AssignorMember;
      owner.set(key(topic.id, p), m.memberId);
      put(out, m.memberId, topic.id, p);
      count.set(m.memberId, (count.get(m.memberId) as number) + 1);
    }
  }
  // 3. Balance: move a partition from a member to an eligible one holding at least two fewer. Every move lowers the
  // sum of the squared counts, so this ends.
  const ordered = byName(topics);
  for (let moved = true; moved;) {
    moved = false;
    for (const from of [...sorted].sort((a, b) => (count.get(b.memberId) as number) - (count.get(a.memberId) as number))) {
      for (const topic of ordered) {
        const mine = out.get(from.memberId)?.get(topic.id);
        if (!mine || mine.size === 0) continue;
        const to = leastLoaded(eligible(topic.id));
        if (!to || (count.get(to.memberId) as number) + 1 >= (count.get(from.memberId) as number)) continue;
        // The highest partition moves, so that what stays is the start of the member's range.
        const p = Math.max(...mine);
        removeFrom(out, from.memberId, topic.id, p);
        put(out, to.memberId, topic.id, p);
        owner.set(key(topic.id, p), to.memberId);
        count.set(from.memberId, (count.get(from.memberId) as number) - 1);
        count.set(to.memberId, (count.get(to.memberId) as number) + 1);
        moved = true;
        break;
      }
      if (moved) break;
    }
  }
  return out;
};

/** Kafka's order for range: static members by instance id first, then the others by member id. */
function rangeOrder(a: AssignorMember, b: AssignorMember): number {
  if (a.instanceId !== null && b.instanceId !== null) return a.instanceId < b.instanceId ? -1 : a.instanceId > b.instanceId ? 1 : 0;
  if (a.instanceId !== null) return -1;
  if (b.instanceId !== null) return 1;
  return a.memberId < b.memberId ? -1 : a.memberId > b.memberId ? 1 : 0;
}

export const range: Assignor = ({ members, topics }) => {
  const out = new Map<string, Map<string, Set<number>>>();
  const sorted = [...members].sort(rangeOrder);
  for (const m of sorted) out.set(m.memberId, new Map());
  for (const topic of byName(topics)) {
    const subs = sorted.filter((m) => m.topics.has(topic.id));
    if (subs.length === 0) continue;
    const quota = Math.floor(topic.partitions / subs.length);
    const extra = topic.partitions % subs.length;
    let next = 0;
    subs.forEach((m, i) => {
      const n = quota + (i < extra ? 1 : 0);
      for (let k = 0; k < n; k++) put(out, m.memberId, topic.id, next++);
    });
  }
  return out;
};

export const ASSIGNORS: ReadonlyMap<string, Assignor> = new Map([
  ['uniform', uniform],
  ['range', range],
]);

/** group.consumer.assignors' first entry: the assignor of a group whose members name none. */
export const DEFAULT_ASSIGNOR = 'uniform';

/** The assignor the most members name (ties: the first in ASSIGNORS order), else the default. */
export function selectAssignor(preferences: Iterable<string | null>): string {
  const votes = new Map<string, number>();
  for (const p of preferences) if (p !== null && ASSIGNORS.has(p)) votes.set(p, (votes.get(p) ?? 0) + 1);
  let best: string | null = null;
  for (const name of ASSIGNORS.keys()) {
    const v = votes.get(name) ?? 0;
    if (v > 0 && (best === null || v > (votes.get(best) ?? 0))) best = name;
  }
  return best ?? DEFAULT_ASSIGNOR;
}
