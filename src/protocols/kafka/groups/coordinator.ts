/**
 * The group coordinator of the classic Kafka consumer-group protocol (KIP-62 rebalance protocol; member ids
 * required on first join, KIP-394; static membership, KIP-345), for every group: this broker is the coordinator
 * of every group in embedded mode.
 *
 * States (as in Kafka's GroupCoordinator): Empty -> PreparingRebalance -> CompletingRebalance -> Stable, back to
 * PreparingRebalance whenever a member joins, leaves, changes its protocols or misses its session timeout.
 * - PreparingRebalance waits until every known member has sent JoinGroup again (or the largest rebalance timeout
 *   passes, and the members that did not rejoin are dropped); the first rebalance of an empty group also waits
 *   `initialRebalanceDelayMs` so that members starting together land in one generation
 *   (group.initial.rebalance.delay.ms, KIP-134).
 * - The generation then moves on; the leader gets every member's metadata, computes the assignment on the client
 *   side (range, round-robin, sticky: the broker never looks inside) and hands it back in SyncGroup, which every
 *   member waits for.
 * - Requests from an older generation are fenced with ILLEGAL_GENERATION, from unknown members with
 *   UNKNOWN_MEMBER_ID, and heartbeats during a rebalance answer REBALANCE_IN_PROGRESS so members rejoin.
 *
 * Static members (KIP-345, group.instance.id): a static member that restarts joins with a new member id and takes
 * the place of its previous incarnation (whose later requests get FENCED_INSTANCE_ID), with its assignment: in a
 * Stable group whose selected protocol stays the same, nothing rebalances (the other members see no new
 * generation). A static member that is away is not dropped by a rebalance; only its session timeout removes it.
 *
 * Groups of the consumer group protocol (KIP-848) share the group ids with these (consumer-coordinator.ts): an empty
 * group of either type gives way to the other, a JoinGroup to a consumer group with members is refused
 * INCONSISTENT_GROUP_PROTOCOL, and the admin views (describe, list, delete, offset commits) cover both.
 *
 * Membership lives in memory only: after a restart every group is unknown, members get UNKNOWN_MEMBER_ID or
 * ILLEGAL_GENERATION and rejoin, exactly as after a coordinator change in Kafka. Committed offsets are durable in
 * the core's OffsetStore (the metastore), so the rejoined group resumes where it committed.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { OffsetStore } from '../../../core/index.js';
import { KafkaErrorCode } from '../codec/index.js';
import {
  ConsumerGroupCoordinator,
  DEFAULT_CONSUMER_GROUP_OPTIONS,
  EMPTY_CATALOG,
  type ConsumerGroupOptions,
  type TopicCatalog,
} from './consumer-coordinator.js';
import { consumerAsClassic } from './classic-view.js';

/** Classic states, and the consumer protocol's Assigning and Reconciling (KIP-848). */
export type GroupState = 'Empty' | 'PreparingRebalance' | 'CompletingRebalance' | 'Stable' | 'Dead' | 'Assigning' | 'Reconciling';

/** ListGroups v5's group type (KIP-848). */
export type GroupType = 'classic' | 'consumer';

export interface GroupOptions {
  /** group.min.session.timeout.ms: shorter session timeouts are refused (INVALID_SESSION_TIMEOUT). */
  minSessionTimeoutMs: number;
  /** group.max.session.timeout.ms. */
  maxSessionTimeoutMs: number;
  /** group.initial.rebalance.delay.ms (KIP-134). */
  initialRebalanceDelayMs: number;
}

export const DEFAULT_GROUP_OPTIONS: GroupOptions = {
  minSessionTimeoutMs: 6000,
  maxSessionTimeoutMs: 1_800_000,
  initialRebalanceDelayMs: 3000,
};

export interface ProtocolOffer {
  name: string;
  metadata: Buffer;
}

export interface JoinParams {
  groupId: string;
  memberId: string;
  groupInstanceId: string | null;
  clientId: string;
  clientHost: string;
  sessionTimeoutMs: number;
  /** -1: not given (JoinGroup v0), the session timeout then also bounds the rebalance. */
  rebalanceTimeoutMs: number;
  protocolType: string;
  protocols: ProtocolOffer[];
  /** JoinGroup v4+: a new member first gets its id with MEMBER_ID_REQUIRED and joins again with it (KIP-394). */
  requireKnownMemberId: boolean;
  /** JoinGroup v9+: a leader may be told to skip computing the assignment (a static leader's rejoin). */
  supportsSkipAssignment?: boolean;
}

export interface JoinResult {
  errorCode: number;
  generationId: number;
  protocolType: string | null;
  protocolName: string | null;
  leader: string;
  memberId: string;
  /** Filled for the leader only. */
  members: Array<{ memberId: string; groupInstanceId: string | null; metadata: Buffer }>;
  /** The leader must not assign (it gets the members only to know them): JoinGroup v9+. */
  skipAssignment?: boolean;
}

export interface SyncParams {
  groupId: string;
  generationId: number;
  memberId: string;
  groupInstanceId: string | null;
  /** SyncGroup v5+; null when not given. */
  protocolType: string | null;
  protocolName: string | null;
  assignments: Array<{ memberId: string; assignment: Buffer }>;
}

export interface SyncResult {
  errorCode: number;
  protocolType: string | null;
  protocolName: string | null;
  assignment: Buffer;
}

export interface MemberDescription {
  memberId: string;
  groupInstanceId: string | null;
  clientId: string;
  clientHost: string;
  metadata: Buffer;
  assignment: Buffer;
}

export interface GroupDescription {
  groupId: string;
  state: GroupState;
  protocolType: string;
  /** The selected protocol (assignor) once the group is stable, else "". */
  protocolData: string;
  members: MemberDescription[];
}

/** A member: what it declared in its latest JoinGroup, and its state in the group. */
interface Member extends Omit<JoinParams, 'groupId' | 'requireKnownMemberId' | 'supportsSkipAssignment'> {
  assignment: Buffer;
  joinWaiter: ((r: JoinResult) => void) | null;
  syncWaiter: ((r: SyncResult) => void) | null;
  sessionTimer: NodeJS.Timeout | null;
}

class Group {
  state: GroupState = 'Empty';
  generationId = 0;
  protocolType: string | null = null;
  protocolName: string | null = null;
  leaderId: string | null = null;
  readonly members = new Map<string, Member>();
  /** Member ids handed out with MEMBER_ID_REQUIRED and not yet used, with their expiry timers. */
  readonly pending = new Map<string, NodeJS.Timeout>();
  rebalanceTimer: NodeJS.Timeout | null = null;
  /** True while the initial rebalance delay of an empty group runs: the join is not completed before it. */
  delaying = false;
  constructor(readonly groupId: string) {}
}

const EMPTY = Buffer.alloc(0);

function joinError(errorCode: number, memberId = ''): JoinResult {
  return { errorCode, generationId: -1, protocolType: null, protocolName: null, leader: '', memberId, members: [] };
}

function syncError(errorCode: number): SyncResult {
  return { errorCode, protocolType: null, protocolName: null, assignment: EMPTY };
}

function sameProtocols(a: ProtocolOffer[], b: ProtocolOffer[]): boolean {
  return a.length === b.length && a.every((p, i) => p.name === b[i].name && p.metadata.equals(b[i].metadata));
}

export class GroupCoordinator {
  private readonly groups = new Map<string, Group>();
  private closed = false;
  /** The groups of the consumer group protocol (KIP-848), in the same namespace. */
  readonly consumer: ConsumerGroupCoordinator;

  constructor(
    private readonly offsets: OffsetStore,
    private readonly logger: Logger,
    readonly options: GroupOptions = DEFAULT_GROUP_OPTIONS,
    private readonly catalog: TopicCatalog = EMPTY_CATALOG,
    consumerOptions: ConsumerGroupOptions = DEFAULT_CONSUMER_GROUP_OPTIONS,
  ) {
    this.consumer = new ConsumerGroupCoordinator(catalog, logger, consumerOptions, {
      kind: (groupId) => {
        const g = this.groups.get(groupId);
        if (!g || g.state === 'Dead') return 'none';
        return g.members.size === 0 && g.pending.size === 0 ? 'empty' : 'busy';
      },
      forget: (groupId) => {
        const g = this.groups.get(groupId);
        if (!g) return;
        this.abandon(g);
        this.groups.delete(groupId);
      },
    });
  }

  /**
   * The member a request names (Kafka's ClassicGroup.validateMember): with an instance id, the static member holding
   * it, which must be this member id (FENCED_INSTANCE_ID: a newer incarnation replaced it); else by member id.
   */
  private member(g: Group, memberId: string, groupInstanceId: string | null): Member | number {
    if (groupInstanceId !== null) {
      const s = this.staticMember(g, groupInstanceId);
      if (!s) return KafkaErrorCode.UNKNOWN_MEMBER_ID;
      return s.memberId === memberId ? s : KafkaErrorCode.FENCED_INSTANCE_ID;
    }
    return g.members.get(memberId) ?? KafkaErrorCode.UNKNOWN_MEMBER_ID;
  }

  private staticMember(g: Group, groupInstanceId: string): Member | undefined {
    for (const m of g.members.values()) if (m.groupInstanceId === groupInstanceId) return m;
    return undefined;
  }

  /** The in-memory group, if any member ever joined it since start. */
  private group(groupId: string): Group | undefined {
    return this.groups.get(groupId);
  }

  // ------------------------------------------------------------------------------------------- JoinGroup

  join(p: JoinParams): Promise<JoinResult> {
    if (this.closed) return Promise.resolve(joinError(KafkaErrorCode.NOT_COORDINATOR));
    if (p.groupId === '') return Promise.resolve(joinError(KafkaErrorCode.INVALID_GROUP_ID));
    const o = this.options;
    if (p.sessionTimeoutMs < o.minSessionTimeoutMs || p.sessionTimeoutMs > o.maxSessionTimeoutMs) {
      return Promise.resolve(joinError(KafkaErrorCode.INVALID_SESSION_TIMEOUT, p.memberId));
    }
    if (this.consumer.has(p.groupId)) {
      // A consumer-protocol group: an empty one gives way (as Kafka converts it), one with members refuses classic
      // members (FlowMQ runs no mixed groups).
      if (!this.consumer.isEmpty(p.groupId)) return Promise.resolve(joinError(KafkaErrorCode.INCONSISTENT_GROUP_PROTOCOL, p.memberId));
      this.consumer.delete(p.groupId);
    }
    let g = this.group(p.groupId);
    if (!g) {
      if (p.memberId !== '') return Promise.resolve(joinError(KafkaErrorCode.UNKNOWN_MEMBER_ID, p.memberId));
      g = new Group(p.groupId);
      this.groups.set(p.groupId, g);
    }
    if (!this.protocolsCompatible(g, p)) return Promise.resolve(joinError(KafkaErrorCode.INCONSISTENT_GROUP_PROTOCOL, p.memberId));

    if (p.memberId === '') {
      // KIP-345: a static member coming back takes the place of its previous incarnation, which is fenced.
      if (p.groupInstanceId !== null) {
        const old = this.staticMember(g, p.groupInstanceId);
        if (old) return this.rejoinStatic(g, old, p);
      }
      const memberId = `${p.clientId || 'member'}-${randomUUID()}`;
      if (p.requireKnownMemberId && p.groupInstanceId === null) {
        // KIP-394: the id is only remembered for one session timeout, so clients that never come back cost
        // nothing.
        const t = setTimeout(() => g.pending.delete(memberId), p.sessionTimeoutMs);
        t.unref();
        g.pending.set(memberId, t);
        return Promise.resolve(joinError(KafkaErrorCode.MEMBER_ID_REQUIRED, memberId));
      }
      return this.addMemberAndRebalance(g, memberId, p);
    }

    const m = this.member(g, p.memberId, p.groupInstanceId);
    if (typeof m === 'number') {
      const t = g.pending.get(p.memberId);
      if (m !== KafkaErrorCode.UNKNOWN_MEMBER_ID || p.groupInstanceId !== null || t === undefined) return Promise.resolve(joinError(m, p.memberId));
      clearTimeout(t);
      g.pending.delete(p.memberId);
      return this.addMemberAndRebalance(g, p.memberId, p);
    }
    const changed = !sameProtocols(m.protocols, p.protocols);
    m.protocols = p.protocols;
    m.protocolType = p.protocolType;
    m.sessionTimeoutMs = p.sessionTimeoutMs;
    m.rebalanceTimeoutMs = p.rebalanceTimeoutMs < 0 ? p.sessionTimeoutMs : p.rebalanceTimeoutMs;
    m.clientId = p.clientId;
    m.clientHost = p.clientHost;
    // A follower rejoining with unchanged protocols outside a rebalance gets the current generation back
    // (it missed our JoinGroup response, e.g. after a timeout); the leader or a changed member rebalances.
    if (!changed && (g.state === 'CompletingRebalance' || (g.state === 'Stable' && m.memberId !== g.leaderId))) {
      this.touch(g, m);
      return Promise.resolve(this.joinResponse(g, m));
    }
    return new Promise((resolve) => {
      this.waitJoin(m, resolve);
      if (g.state !== 'PreparingRebalance') this.prepareRebalance(g, `member ${m.memberId} rejoined`);
      else this.tryCompleteJoin(g);
    });
  }

  private protocolsCompatible(g: Group, p: JoinParams): boolean {
    if (p.protocolType === '' || p.protocols.length === 0) return false;
    if (g.members.size === 0) return true;
    if (g.protocolType !== null && g.protocolType !== p.protocolType) return false;
    const others = [...g.members.values()].filter((m) => m.memberId !== p.memberId);
    if (others.length === 0) return true;
    return p.protocols.some((x) => others.every((m) => m.protocols.some((y) => y.name === x.name)));
  }

  private addMemberAndRebalance(g: Group, memberId: string, p: JoinParams): Promise<JoinResult> {
    const m: Member = {
      memberId,
      groupInstanceId: p.groupInstanceId,
      clientId: p.clientId,
      clientHost: p.clientHost,
      sessionTimeoutMs: p.sessionTimeoutMs,
      rebalanceTimeoutMs: p.rebalanceTimeoutMs < 0 ? p.sessionTimeoutMs : p.rebalanceTimeoutMs,
      protocolType: p.protocolType,
      protocols: p.protocols,
      assignment: EMPTY,
      joinWaiter: null,
      syncWaiter: null,
      sessionTimer: null,
    };
    // The first member of an empty group sets its protocol type, whatever the type the group had (Kafka's
    // ClassicGroup.add); the others were checked against it (protocolsCompatible).
    if (g.members.size === 0) g.protocolType = p.protocolType;
    g.members.set(memberId, m);
    return new Promise((resolve) => {
      this.waitJoin(m, resolve);
      if (g.state !== 'PreparingRebalance') this.prepareRebalance(g, `member ${memberId} joined`);
      else this.tryCompleteJoin(g);
    });
  }

  /**
   * KIP-345: a static member joining with no member id while its instance id is in the group (it restarted): it gets
   * a new member id and the place of its previous incarnation, whose waiting requests are answered
   * FENCED_INSTANCE_ID, and keeps its assignment. As Kafka's updateStaticMemberThenRebalanceOrCompleteJoin:
   * - Stable, and the protocol the group would select stays the same: no rebalance. The member gets the current
   *   generation back; a leader at JoinGroup v9+ gets the members with skipAssignment, an older one is named as a
   *   follower (the leader field keeps the old member id), so that nobody assigns again. It then syncs and gets its
   *   assignment.
   * - CompletingRebalance: rebalance again (the leader may be assigning to the old member id).
   * - PreparingRebalance: it joins the rebalance under way.
   */
  private rejoinStatic(g: Group, old: Member, p: JoinParams): Promise<JoinResult> {
    const memberId = `${p.clientId || 'member'}-${randomUUID()}`;
    const oldLeader = g.leaderId;
    if (old.sessionTimer) clearTimeout(old.sessionTimer);
    old.joinWaiter?.(joinError(KafkaErrorCode.FENCED_INSTANCE_ID, old.memberId));
    old.syncWaiter?.(syncError(KafkaErrorCode.FENCED_INSTANCE_ID));
    g.members.delete(old.memberId);
    const m: Member = {
      ...old,
      memberId,
      clientId: p.clientId,
      clientHost: p.clientHost,
      sessionTimeoutMs: p.sessionTimeoutMs,
      rebalanceTimeoutMs: p.rebalanceTimeoutMs < 0 ? p.sessionTimeoutMs : p.rebalanceTimeoutMs,
      protocolType: p.protocolType,
      protocols: p.protocols,
      joinWaiter: null,
      syncWaiter: null,
      sessionTimer: null,
    };
    g.members.set(memberId, m);
    if (g.leaderId === old.memberId) g.leaderId = memberId;
    this.logger.info({ group: g.groupId, member: memberId, replaced: old.memberId, instance: p.groupInstanceId, state: g.state }, 'static member rejoined');
    if (g.state === 'Stable' && this.selectProtocol(g) === g.protocolName) {
      this.touch(g, m);
      const isLeader = g.leaderId === memberId;
      if (p.supportsSkipAssignment) return Promise.resolve({ ...this.joinResponse(g, m), skipAssignment: isLeader });
      return Promise.resolve({ ...this.joinResponse(g, m), leader: oldLeader ?? '', members: [], skipAssignment: false });
    }
    return new Promise((resolve) => {
      this.waitJoin(m, resolve);
      if (g.state === 'PreparingRebalance') this.tryCompleteJoin(g);
      else this.prepareRebalance(g, `static member ${memberId} (instance ${p.groupInstanceId}) rejoined`);
    });
  }

  private waitJoin(m: Member, resolve: (r: JoinResult) => void): void {
    // A second JoinGroup of the same member replaces the first, which is told to rejoin.
    m.joinWaiter?.(joinError(KafkaErrorCode.REBALANCE_IN_PROGRESS, m.memberId));
    m.joinWaiter = resolve;
    // While it waits for the rebalance the member is bounded by the rebalance timeout, not its session.
    if (m.sessionTimer) clearTimeout(m.sessionTimer);
    m.sessionTimer = null;
  }

  private prepareRebalance(g: Group, reason: string): void {
    if (this.closed) return;
    // Members waiting for their assignment of the generation being replaced rejoin instead.
    if (g.state === 'CompletingRebalance') {
      for (const m of g.members.values()) {
        m.syncWaiter?.(syncError(KafkaErrorCode.REBALANCE_IN_PROGRESS));
        m.syncWaiter = null;
      }
    }
    const initial = g.state === 'Empty';
    g.state = 'PreparingRebalance';
    this.logger.debug({ group: g.groupId, reason, generation: g.generationId }, 'group rebalancing');
    if (g.rebalanceTimer) clearTimeout(g.rebalanceTimer);
    let timeout = 0;
    for (const m of g.members.values()) timeout = Math.max(timeout, m.rebalanceTimeoutMs);
    if (initial && this.options.initialRebalanceDelayMs > 0) {
      g.delaying = true;
      const delay = Math.min(this.options.initialRebalanceDelayMs, Math.max(timeout, 1));
      g.rebalanceTimer = setTimeout(() => {
        g.delaying = false;
        g.rebalanceTimer = setTimeout(() => this.completeJoin(g), Math.max(0, timeout - delay));
        this.tryCompleteJoin(g);
      }, delay);
      return;
    }
    g.delaying = false;
    g.rebalanceTimer = setTimeout(() => this.completeJoin(g), timeout);
    this.tryCompleteJoin(g);
  }

  private tryCompleteJoin(g: Group): void {
    if (g.state !== 'PreparingRebalance' || g.delaying) return;
    for (const m of g.members.values()) if (m.joinWaiter === null) return;
    this.completeJoin(g);
  }

  /** Ends PreparingRebalance: members that did not rejoin are dropped and the next generation starts. */
  private completeJoin(g: Group): void {
    if (g.state !== 'PreparingRebalance') return;
    if (g.rebalanceTimer) clearTimeout(g.rebalanceTimer);
    g.rebalanceTimer = null;
    g.delaying = false;
    for (const m of [...g.members.values()]) {
      // A static member away is kept (with its assignment): only its session timeout removes it (KIP-345).
      if (m.joinWaiter === null && m.groupInstanceId === null) {
        this.logger.info({ group: g.groupId, member: m.memberId }, 'member did not rejoin in time: removed');
        this.removeMember(g, m, KafkaErrorCode.UNKNOWN_MEMBER_ID);
      }
    }
    const joined = [...g.members.values()].filter((m) => m.joinWaiter !== null);
    if (g.members.size > 0 && joined.length === 0) {
      // Only static members that are away: wait for them to come back or for their sessions to expire.
      let timeout = 0;
      for (const m of g.members.values()) timeout = Math.max(timeout, m.rebalanceTimeoutMs);
      g.rebalanceTimer = setTimeout(() => this.completeJoin(g), timeout);
      return;
    }
    // The leader must be among those who joined (a static leader that is away is replaced).
    if (g.leaderId !== null && g.members.get(g.leaderId)?.joinWaiter === null) g.leaderId = joined[0].memberId;
    g.generationId++;
    if (g.members.size === 0) {
      g.state = 'Empty';
      g.protocolName = null;
      // The protocol type stays: an Empty group is still a "consumer" group in ListGroups and DescribeGroups, as
      // Kafka's ClassicGroup.initNextGeneration keeps it (admin tools and librdkafka take a group without one for
      // a simple, offsets-only group). The next first member sets it again.
      g.leaderId = null;
      this.logger.info({ group: g.groupId, generation: g.generationId }, 'group is empty');
      return;
    }
    g.protocolName = this.selectProtocol(g);
    if (g.leaderId === null || !g.members.has(g.leaderId)) g.leaderId = g.members.keys().next().value as string;
    g.state = 'CompletingRebalance';
    this.logger.info({ group: g.groupId, generation: g.generationId, members: g.members.size, protocol: g.protocolName }, 'group rebalanced');
    for (const m of g.members.values()) {
      m.assignment = EMPTY;
      const w = m.joinWaiter;
      m.joinWaiter = null;
      // Every member's session starts again, those away included (as Kafka reschedules them all).
      this.touch(g, m);
      w?.(this.joinResponse(g, m));
    }
  }

  /** The protocol every member supports that most members list first among those (Kafka's vote). */
  private selectProtocol(g: Group): string {
    const members = [...g.members.values()];
    const candidates = members[0].protocols.map((p) => p.name).filter((name) => members.every((m) => m.protocols.some((p) => p.name === name)));
    const votes = new Map<string, number>();
    for (const m of members) {
      const pick = m.protocols.find((p) => candidates.includes(p.name));
      if (pick) votes.set(pick.name, (votes.get(pick.name) ?? 0) + 1);
    }
    let best = candidates[0];
    for (const c of candidates) if ((votes.get(c) ?? 0) > (votes.get(best) ?? 0)) best = c;
    return best;
  }

  private joinResponse(g: Group, m: Member): JoinResult {
    const isLeader = m.memberId === g.leaderId;
    return {
      errorCode: KafkaErrorCode.NONE,
      generationId: g.generationId,
      protocolType: g.protocolType,
      protocolName: g.protocolName,
      leader: g.leaderId ?? '',
      memberId: m.memberId,
      members: isLeader
        ? [...g.members.values()].map((x) => ({
            memberId: x.memberId,
            groupInstanceId: x.groupInstanceId,
            metadata: x.protocols.find((p) => p.name === g.protocolName)?.metadata ?? EMPTY,
          }))
        : [],
    };
  }

  // ------------------------------------------------------------------------------------------- SyncGroup

  sync(p: SyncParams): Promise<SyncResult> {
    if (this.closed) return Promise.resolve(syncError(KafkaErrorCode.NOT_COORDINATOR));
    const g = this.group(p.groupId);
    if (!g) return Promise.resolve(syncError(KafkaErrorCode.UNKNOWN_MEMBER_ID));
    const m = this.member(g, p.memberId, p.groupInstanceId);
    if (typeof m === 'number') return Promise.resolve(syncError(m));
    if (p.generationId !== g.generationId) return Promise.resolve(syncError(KafkaErrorCode.ILLEGAL_GENERATION));
    // KIP-559: a member disagreeing on the selected protocol must not apply an assignment it cannot read.
    if ((p.protocolType !== null && p.protocolType !== g.protocolType) || (p.protocolName !== null && p.protocolName !== g.protocolName)) {
      return Promise.resolve(syncError(KafkaErrorCode.INCONSISTENT_GROUP_PROTOCOL));
    }
    switch (g.state) {
      case 'PreparingRebalance':
        return Promise.resolve(syncError(KafkaErrorCode.REBALANCE_IN_PROGRESS));
      case 'Stable':
        this.touch(g, m);
        return Promise.resolve(this.syncResponse(g, m));
      case 'CompletingRebalance':
        this.touch(g, m);
        return new Promise((resolve) => {
          m.syncWaiter?.(syncError(KafkaErrorCode.REBALANCE_IN_PROGRESS));
          m.syncWaiter = resolve;
          if (m.memberId !== g.leaderId) return;
          const byMember = new Map(p.assignments.map((a) => [a.memberId, a.assignment]));
          for (const x of g.members.values()) x.assignment = byMember.get(x.memberId) ?? EMPTY;
          g.state = 'Stable';
          for (const x of g.members.values()) {
            const w = x.syncWaiter;
            x.syncWaiter = null;
            w?.(this.syncResponse(g, x));
          }
        });
      default:
        return Promise.resolve(syncError(KafkaErrorCode.UNKNOWN_MEMBER_ID));
    }
  }

  private syncResponse(g: Group, m: Member): SyncResult {
    return { errorCode: KafkaErrorCode.NONE, protocolType: g.protocolType, protocolName: g.protocolName, assignment: m.assignment };
  }

  // ------------------------------------------------------------------------------------------- Heartbeat, LeaveGroup

  heartbeat(groupId: string, generationId: number, memberId: string, groupInstanceId: string | null): number {
    if (this.closed) return KafkaErrorCode.NOT_COORDINATOR;
    const g = this.group(groupId);
    if (!g) return KafkaErrorCode.UNKNOWN_MEMBER_ID;
    const m = this.member(g, memberId, groupInstanceId);
    if (typeof m === 'number') return m;
    if (generationId !== g.generationId) return KafkaErrorCode.ILLEGAL_GENERATION;
    if (g.state === 'PreparingRebalance') {
      // The member is still counted until the rebalance ends: keep it alive while it finds out.
      return KafkaErrorCode.REBALANCE_IN_PROGRESS;
    }
    if (g.state === 'Empty' || g.state === 'Dead') return KafkaErrorCode.UNKNOWN_MEMBER_ID;
    this.touch(g, m);
    return KafkaErrorCode.NONE;
  }

  /** Removes members; returns the group-level error and one error per member (LeaveGroup v3+). */
  leave(
    groupId: string,
    members: Array<{ memberId: string; groupInstanceId: string | null }>,
  ): { errorCode: number; members: Array<{ memberId: string; groupInstanceId: string | null; errorCode: number }> } {
    if (this.closed) return { errorCode: KafkaErrorCode.NOT_COORDINATOR, members: [] };
    const g = this.group(groupId);
    if (!g) {
      return {
        errorCode: KafkaErrorCode.UNKNOWN_MEMBER_ID,
        members: members.map((x) => ({ ...x, errorCode: KafkaErrorCode.UNKNOWN_MEMBER_ID })),
      };
    }
    const out = members.map((x) => {
      // A static member may leave by instance id alone (KIP-345, LeaveGroup v3+ batches).
      const m =
        x.memberId === '' && x.groupInstanceId !== null
          ? (this.staticMember(g, x.groupInstanceId) ?? KafkaErrorCode.UNKNOWN_MEMBER_ID)
          : this.member(g, x.memberId, x.groupInstanceId);
      if (typeof m === 'number') return { ...x, errorCode: m };
      this.logger.info({ group: groupId, member: m.memberId }, 'member left the group');
      this.removeMember(g, m, KafkaErrorCode.UNKNOWN_MEMBER_ID);
      return { ...x, errorCode: KafkaErrorCode.NONE };
    });
    if (out.some((x) => x.errorCode === KafkaErrorCode.NONE)) this.membershipChanged(g, 'member left');
    const single = out.length === 1 ? out[0].errorCode : KafkaErrorCode.NONE;
    return { errorCode: single, members: out };
  }

  private removeMember(g: Group, m: Member, waiterError: number): void {
    if (m.sessionTimer) clearTimeout(m.sessionTimer);
    m.sessionTimer = null;
    g.members.delete(m.memberId);
    m.joinWaiter?.(joinError(waiterError, m.memberId));
    m.joinWaiter = null;
    m.syncWaiter?.(syncError(waiterError));
    m.syncWaiter = null;
    if (g.leaderId === m.memberId) g.leaderId = null;
  }

  private membershipChanged(g: Group, reason: string): void {
    if (g.state === 'Stable' || g.state === 'CompletingRebalance') this.prepareRebalance(g, reason);
    else if (g.state === 'PreparingRebalance') this.tryCompleteJoin(g);
  }

  /** Restarts the member's session timer: it is expired, and the group rebalanced, if it stays silent. */
  private touch(g: Group, m: Member): void {
    if (m.sessionTimer) clearTimeout(m.sessionTimer);
    m.sessionTimer = setTimeout(() => {
      m.sessionTimer = null;
      if (g.members.get(m.memberId) !== m) return;
      this.logger.info({ group: g.groupId, member: m.memberId, sessionTimeoutMs: m.sessionTimeoutMs }, 'member session expired');
      this.removeMember(g, m, KafkaErrorCode.UNKNOWN_MEMBER_ID);
      this.membershipChanged(g, 'session expired');
    }, m.sessionTimeoutMs);
    m.sessionTimer.unref();
  }

  // ------------------------------------------------------------------------------------------- offsets

  /**
   * Whether a member may commit offsets for the group now (Kafka's rules): a commit outside any generation
   * (generation -1, as admin tools and standalone consumers send) only for a group without members; otherwise
   * the member must belong to the current generation and the group must not be waiting for its assignment.
   */
  checkCommit(groupId: string, generationId: number, memberId: string, groupInstanceId: string | null, apiVersion = Infinity): number {
    if (this.closed) return KafkaErrorCode.NOT_COORDINATOR;
    if (groupId === '') return KafkaErrorCode.INVALID_GROUP_ID;
    // A consumer-protocol group: the generation is the member epoch.
    if (this.consumer.has(groupId)) return this.consumer.checkCommit(groupId, generationId, memberId, apiVersion);
    const g = this.group(groupId);
    if (!g) return generationId < 0 ? KafkaErrorCode.NONE : KafkaErrorCode.ILLEGAL_GENERATION;
    if (generationId < 0 && g.state === 'Empty') return KafkaErrorCode.NONE;
    if (g.state === 'CompletingRebalance') return KafkaErrorCode.REBALANCE_IN_PROGRESS;
    const m = this.member(g, memberId, groupInstanceId);
    if (typeof m === 'number') return m;
    if (generationId !== g.generationId) return KafkaErrorCode.ILLEGAL_GENERATION;
    if (g.state === 'Stable') this.touch(g, m);
    return KafkaErrorCode.NONE;
  }

  isClosed(): boolean {
    return this.closed;
  }

  get store(): OffsetStore {
    return this.offsets;
  }

  // ------------------------------------------------------------------------------------------- admin

  describe(groupId: string): GroupDescription | null {
    const g = this.group(groupId);
    if (!g) {
      const c = this.consumer.describe(groupId);
      return c ? consumerAsClassic(c, this.catalog) : null;
    }
    return {
      groupId,
      state: g.state,
      protocolType: g.protocolType ?? '',
      protocolData: g.state === 'Stable' || g.state === 'CompletingRebalance' ? (g.protocolName ?? '') : '',
      members: [...g.members.values()].map((m) => ({
        memberId: m.memberId,
        groupInstanceId: m.groupInstanceId,
        clientId: m.clientId,
        clientHost: m.clientHost,
        metadata: m.protocols.find((p) => p.name === g.protocolName)?.metadata ?? EMPTY,
        assignment: g.state === 'Stable' ? m.assignment : EMPTY,
      })),
    };
  }

  /**
   * For a group of the consumer protocol (KIP-848), the topics its members subscribe to by name or regex; null for a
   * classic group or an unknown one (their subscriptions are read from the members' protocol metadata).
   */
  consumerSubscriptions(groupId: string): Set<string> | null {
    if (this.group(groupId)) return null;
    return this.consumer.subscribedTopicNames(groupId);
  }

  /**
   * Groups with members in memory, plus groups known only by their committed offsets (state Empty); of the latter
   * only those `stored` accepts (cluster mode: the groups this broker coordinates).
   */
  async list(stored?: (groupId: string) => boolean): Promise<Array<{ groupId: string; protocolType: string; state: GroupState; groupType: GroupType }>> {
    const out = new Map<string, { groupId: string; protocolType: string; state: GroupState; groupType: GroupType }>();
    for (const g of await this.offsets.listGroups()) {
      if (!stored || stored(g)) out.set(g, { groupId: g, protocolType: 'consumer', state: 'Empty', groupType: 'classic' });
    }
    for (const g of this.groups.values()) {
      out.set(g.groupId, { groupId: g.groupId, protocolType: g.protocolType ?? out.get(g.groupId)?.protocolType ?? '', state: g.state, groupType: 'classic' });
    }
    for (const g of this.consumer.list()) out.set(g.groupId, { groupId: g.groupId, protocolType: 'consumer', state: g.state, groupType: 'consumer' });
    return [...out.values()].sort((a, b) => (a.groupId < b.groupId ? -1 : a.groupId > b.groupId ? 1 : 0));
  }

  /**
   * DeleteGroups for one group: NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND when unknown. `force` (a
   * namespace deleted with its groups, namespace-removal.ts): members are dropped as when the coordinator moves away
   * (their next request is told NOT_COORDINATOR), not waited for: a kicked Kafka client stays a member until its
   * session times out.
   */
  async delete(groupId: string, force = false): Promise<number> {
    if (this.closed) return KafkaErrorCode.NOT_COORDINATOR;
    if (groupId === '') return KafkaErrorCode.INVALID_GROUP_ID;
    const g = this.group(groupId);
    if (g && g.members.size > 0 && !force) return KafkaErrorCode.NON_EMPTY_GROUP;
    const consumerGroup = this.consumer.has(groupId);
    if (force) this.consumer.drop(groupId);
    else if (!this.consumer.delete(groupId)) return KafkaErrorCode.NON_EMPTY_GROUP;
    const known = g !== undefined || consumerGroup || (await this.offsets.listGroups()).includes(groupId);
    if (!known) return KafkaErrorCode.GROUP_ID_NOT_FOUND;
    if (g) {
      this.abandon(g);
      this.groups.delete(groupId);
    }
    await this.offsets.deleteGroup(groupId);
    this.logger.info({ group: groupId }, 'group deleted');
    return KafkaErrorCode.NONE;
  }

  /** Stops every timer; members waiting for a rebalance are told to find the coordinator again. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const g of this.groups.values()) this.abandon(g);
    this.groups.clear();
    this.consumer.close();
  }

  /**
   * Forgets a group whose coordination moved to another broker (cluster mode): members waiting in a rebalance are
   * told NOT_COORDINATOR now, the others at their next request, and they all rejoin at the new coordinator, as
   * after a coordinator change in Kafka. Committed offsets are in the shared metastore: nothing to hand over.
   */
  drop(groupId: string): void {
    this.consumer.drop(groupId);
    const g = this.groups.get(groupId);
    if (!g) return;
    this.abandon(g);
    this.groups.delete(groupId);
  }

  private abandon(g: Group): void {
    if (g.rebalanceTimer) clearTimeout(g.rebalanceTimer);
    g.rebalanceTimer = null;
    for (const t of g.pending.values()) clearTimeout(t);
    g.pending.clear();
    for (const m of g.members.values()) {
      if (m.sessionTimer) clearTimeout(m.sessionTimer);
      m.sessionTimer = null;
      m.joinWaiter?.(joinError(KafkaErrorCode.NOT_COORDINATOR, m.memberId));
      m.syncWaiter?.(syncError(KafkaErrorCode.NOT_COORDINATOR));
      m.joinWaiter = null;
      m.syncWaiter = null;
    }
    g.state = 'Dead';
  }
}
