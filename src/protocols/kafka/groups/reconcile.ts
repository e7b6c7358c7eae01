/**
 * Reconciliation of one member of a consumer-protocol group (KIP-848) towards its target assignment: pure
 * functions over a member's state, the target and the owners of the partitions, in the manner of Kafka's
 * CurrentAssignmentBuilder.
 *
 * The invariant they keep: a partition is owned by at most one member at a time. A member is only given a
 * partition once no other member holds it (assigned or still waiting to revoke it); a member that must give up
 * partitions keeps its epoch and is told its reduced assignment, and only once it stops reporting them as owned
 * (it revoked them) does it move on to the target epoch and receive new partitions.
 *
 * States (Kafka's MemberState):
 * - stable: the member has its whole target (at the target epoch), or nothing more can be done;
 * - unrevoked_partitions: it must revoke `pendingRevocation` first; it stays at its epoch meanwhile;
 * - unreleased_partitions: it is at the target epoch, but some target partitions are still held by others and are
 *   given once released.
 */

/** Partitions by topic id (32 hex digits). */
export type Assignment = ReadonlyMap<string, ReadonlySet<number>>;

export type MemberState = 'stable' | 'unrevoked_partitions' | 'unreleased_partitions';

export interface ReconcileState {
  state: MemberState;
  memberEpoch: number;
  previousMemberEpoch: number;
  /** Partitions the member may use now (what the heartbeat response tells it). */
  assigned: Assignment;
  /** Partitions it must revoke before it moves on. */
  pendingRevocation: Assignment;
}

/** The partitions a member reports owning in its heartbeat (null: not reported, unchanged since its last one). */
export type OwnedPartitions = ReadonlyArray<{ topicId: string; partitions: readonly number[] }> | null;

export const EMPTY_ASSIGNMENT: Assignment = new Map();

export function countPartitions(a: Assignment): number {
  let n = 0;
  for (const s of a.values()) n += s.size;
  return n;
}

export function sameAssignment(a: Assignment, b: Assignment): boolean {
  if (countPartitions(a) !== countPartitions(b)) return false;
  for (const [t, ps] of a) {
    if (ps.size === 0) continue;
    const other = b.get(t);
    if (!other) return false;
    for (const p of ps) if (!other.has(p)) return false;
  }
  return true;
}

/** `a` keyed by topic, with only non-empty sets. */
function compact(a: Map<string, Set<number>>): Assignment {
  for (const [t, s] of a) if (s.size === 0) a.delete(t);
  return a;
}

/** Whether the member still reports owning any of `revoking` (a member that does not report is assumed to). */
function ownsAny(owned: OwnedPartitions, revoking: Assignment): boolean {
  if (owned === null) return true;
  for (const o of owned) {
    const r = revoking.get(o.topicId);
    if (r && o.partitions.some((p) => r.has(p))) return true;
  }
  return false;
}

/** Whether every reported partition is in `assigned` (a member not reporting is not a subset). */
export function isSubset(owned: OwnedPartitions, assigned: Assignment): boolean {
  if (owned === null) return false;
  for (const o of owned) {
    const a = assigned.get(o.topicId);
    if (o.partitions.length > 0 && !a) return false;
    if (a && !o.partitions.every((p) => a.has(p))) return false;
  }
  return true;
}

/**
 * The member epoch a heartbeat carries is acceptable: the member's current epoch, or its previous one if it owns
 * only partitions it is still assigned (the response that moved it to the new epoch may have been lost). Anything
 * else is FENCED_MEMBER_EPOCH: the member must give up its partitions and join again.
 */
export function epochAcceptable(
  m: Pick<ReconcileState, 'memberEpoch' | 'previousMemberEpoch' | 'assigned'>,
  received: number,
  owned: OwnedPartitions,
): boolean {
  if (received === m.memberEpoch) return true;
  if (received > m.memberEpoch) return false;
  return received === m.previousMemberEpoch && isSubset(owned, m.assigned);
}

function withEpoch(m: ReconcileState, epoch: number): Pick<ReconcileState, 'memberEpoch' | 'previousMemberEpoch'> {
  return epoch === m.memberEpoch
    ? { memberEpoch: m.memberEpoch, previousMemberEpoch: m.previousMemberEpoch }
    : { memberEpoch: epoch, previousMemberEpoch: m.memberEpoch };
}

/**
 * The member's next state.
 * @param ownerEpoch the epoch of the member holding a partition (assigned or pending revocation), -1 when free.
 *   The member's own partitions count as held.
 * @param owned what the member reports owning in this heartbeat.
 */
export function reconcile(
  m: ReconcileState,
  targetEpoch: number,
  target: Assignment,
  ownerEpoch: (topicId: string, partition: number) => number,
  owned: OwnedPartitions,
): ReconcileState {
  switch (m.state) {
    case 'stable':
      return m.memberEpoch === targetEpoch ? m : next(m, m.memberEpoch, targetEpoch, target, ownerEpoch, owned);
    case 'unrevoked_partitions':
      // Nothing moves until the member stops reporting the partitions it was asked to revoke.
      if (ownsAny(owned, m.pendingRevocation)) return m;
      return next({ ...m, pendingRevocation: EMPTY_ASSIGNMENT }, m.memberEpoch + 1, targetEpoch, target, ownerEpoch, owned);
    case 'unreleased_partitions':
      return next(m, m.memberEpoch, targetEpoch, target, ownerEpoch, owned);
  }
}

function next(
  m: ReconcileState,
  epoch: number,
  targetEpoch: number,
  target: Assignment,
  ownerEpoch: (topicId: string, partition: number) => number,
  owned: OwnedPartitions,
): ReconcileState {
  const assigned = new Map<string, Set<number>>();
  const revoke = new Map<string, Set<number>>();
  const add = new Map<string, Set<number>>();
  let unreleased = false;
  const topics = new Set([...target.keys(), ...m.assigned.keys()]);
  for (const t of topics) {
    const want = target.get(t) ?? new Set<number>();
    const have = m.assigned.get(t) ?? new Set<number>();
    const keep = new Set([...have].filter((p) => want.has(p)));
    const gone = new Set([...have].filter((p) => !want.has(p)));
    const fresh = new Set<number>();
    for (const p of want) {
      if (keep.has(p)) continue;
      if (ownerEpoch(t, p) !== -1) unreleased = true;
      else fresh.add(p);
    }
    assigned.set(t, keep);
    revoke.set(t, gone);
    add.set(t, fresh);
  }
  compact(assigned);
  compact(revoke);
  compact(add);
  if (revoke.size > 0 && ownsAny(owned, revoke)) {
    // Revoke first, at the current epoch; the partitions to revoke stay held by this member until it does.
    return { state: 'unrevoked_partitions', ...withEpoch(m, epoch), assigned, pendingRevocation: revoke };
  }
  for (const [t, ps] of add) {
    let s = assigned.get(t) as Set<number> | undefined;
    if (!s) assigned.set(t, (s = new Set()));
    for (const p of ps) s.add(p);
  }
  return {
    state: unreleased ? 'unreleased_partitions' : 'stable',
    ...withEpoch(m, targetEpoch),
    assigned,
    pendingRevocation: EMPTY_ASSIGNMENT,
  };
}
