/**
 * The coordinator of the consumer group protocol (KIP-848, Kafka's GroupMetadataManager for "consumer" groups): the
 * broker computes the assignment and hands it out incrementally through ConsumerGroupHeartbeat, with no global
 * barrier. It runs beside the classic coordinator (coordinator.ts), which owns the group-id namespace with it: a group
 * is of one type at a time, an empty group of one type is replaced by a group of the other on first use, and a group
 * with members refuses the other protocol.
 *
 * - The group epoch counts the changes of the group (a member joins or leaves, a subscription or the subscribed
 *   topics change). When it passes the assignment epoch, the target assignment is computed again by the group's
 *   server-side assignor (assignors.ts) and the assignment epoch catches up.
 * - Each member then reconciles towards its target at its own pace (reconcile.ts): it revokes what it must give up,
 *   keeping its epoch, and only after it stops reporting those partitions moves to the assignment epoch and gets
 *   partitions, each once no other member holds it. A partition is never held by two members at once.
 * - A member that does not revoke within its rebalance timeout is fenced (removed); one that does not heartbeat
 *   within the session timeout (group.consumer.session.timeout.ms) is removed. The heartbeat interval
 *   (group.consumer.heartbeat.interval.ms) is told to the members in every response.
 * - Members leave with epoch -1; a static member (with an instance id) may leave for a while with -2: it keeps its
 *   partitions, and a new incarnation joining with the same instance id within the session timeout takes them over,
 *   with no change for the other members. A second live member with the same instance id is refused
 *   UNRELEASED_INSTANCE_ID; requests of a replaced incarnation get FENCED_INSTANCE_ID.
 * - Subscriptions are topic names and/or an RE2/J regex (topic-regex.ts) matched against every topic's whole name.
 *
 * Membership lives in memory, as for classic groups: after a restart or a coordinator move a member's heartbeat gets
 * UNKNOWN_MEMBER_ID and it joins again (Kafka would reload the group from its log and answer GROUP_ID_NOT_FOUND only
 * for groups it never had, which librdkafka takes as fatal). Committed offsets are in the OffsetStore.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { KafkaErrorCode } from '../codec/index.js';
import { ASSIGNORS, selectAssignor, type AssignorTopic } from './assignors.js';
import { EMPTY_ASSIGNMENT, epochAcceptable, reconcile, sameAssignment, type Assignment, type MemberState, type OwnedPartitions } from './reconcile.js';
import { compileTopicRegex } from './topic-regex.js';

/** The topics the coordinator can assign: the streams, with their topic ids (32 hex digits). */
export interface TopicCatalog {
  byName(name: string): AssignorTopic | undefined;
  byId(id: string): AssignorTopic | undefined;
  all(): Iterable<AssignorTopic>;
}

export const EMPTY_CATALOG: TopicCatalog = { byName: () => undefined, byId: () => undefined, all: () => [] };

export interface ConsumerGroupOptions {
  /** group.consumer.session.timeout.ms. */
  sessionTimeoutMs: number;
  /** group.consumer.heartbeat.interval.ms. */
  heartbeatIntervalMs: number;
}

export const DEFAULT_CONSUMER_GROUP_OPTIONS: ConsumerGroupOptions = { sessionTimeoutMs: 45_000, heartbeatIntervalMs: 5000 };

/** Member epoch of a member leaving the group (-1), or of a static member leaving for now (-2). */
export const LEAVE_EPOCH = -1;
export const STATIC_LEAVE_EPOCH = -2;

export interface HeartbeatParams {
  apiVersion: number;
  groupId: string;
  memberId: string;
  memberEpoch: number;
  instanceId: string | null;
  rackId: string | null;
  rebalanceTimeoutMs: number;
  subscribedTopicNames: string[] | null;
  subscribedTopicRegex: string | null;
  serverAssignor: string | null;
  /** Owned partitions by topic id (hex); null: unchanged since the last heartbeat. */
  owned: OwnedPartitions;
  clientId: string;
  clientHost: string;
  /** Topics a regex may bring in: those the member may read (others are left out, as Kafka filters them). */
  mayRead: (topic: string) => boolean;
  /**
   * The name a regex is matched against: the member's client's name of a topic (its namespace's prefix gone); null
   * for a topic of another namespace, which no regex brings in.
   */
  nameOf: (topic: string) => string | null;
}

export interface HeartbeatResult {
  errorCode: number;
  errorMessage: string | null;
  memberId: string | null;
  memberEpoch: number;
  heartbeatIntervalMs: number;
  /** Partitions by topic id; null when there is nothing new to tell. */
  assignment: Assignment | null;
}

export type ConsumerGroupState = 'Empty' | 'Assigning' | 'Reconciling' | 'Stable';

export interface ConsumerMemberDescription {
  memberId: string;
  instanceId: string | null;
  rackId: string | null;
  memberEpoch: number;
  clientId: string;
  clientHost: string;
  subscribedTopicNames: string[];
  subscribedTopicRegex: string | null;
  assignment: Assignment;
  targetAssignment: Assignment;
}

export interface ConsumerGroupDescription {
  groupId: string;
  state: ConsumerGroupState;
  groupEpoch: number;
  assignmentEpoch: number;
  assignorName: string;
  createdAt: number;
  members: ConsumerMemberDescription[];
}

interface Member {
  memberId: string;
  instanceId: string | null;
  rackId: string | null;
  clientId: string;
  clientHost: string;
  rebalanceTimeoutMs: number;
  names: string[];
  regexSource: string | null;
  regex: RegExp | null;
  serverAssignor: string | null;
  mayRead: (topic: string) => boolean;
  nameOf: (topic: string) => string | null;
  /** Topic ids the subscription resolves to (names and regex), as of the last metadata refresh. */
  topics: Set<string>;
  state: MemberState;
  memberEpoch: number;
  previousMemberEpoch: number;
  assigned: Assignment;
  pendingRevocation: Assignment;
  sessionTimer: NodeJS.Timeout | null;
  revocationTimer: NodeJS.Timeout | null;
}

class Group {
  groupEpoch = 0;
  assignmentEpoch = 0;
  readonly members = new Map<string, Member>();
  /** Member id of each static member, by instance id. */
  readonly statics = new Map<string, string>();
  target = new Map<string, Assignment>();
  /** Holder (member id) of every assigned or revoking partition, by "topicId:partition". */
  readonly owners = new Map<string, string>();
  /** The subscribed topics as of the last refresh, and their signature (ids, names, partition counts). */
  subscribed = new Map<string, AssignorTopic>();
  signature = '';
  checkedAt = 0;
  assignor: string = selectAssignor([]);
  readonly createdAt = Date.now();
  constructor(readonly groupId: string) {}
}

/** Whether the member's regex brings in the topic: its client's name of it matches, and the member may read it. */
function regexTakes(m: Member, topic: string): boolean {
  const name = m.nameOf(topic);
  return name !== null && m.regex !== null && m.regex.test(name) && m.mayRead(topic);
}

/** How often a group's subscribed topics are looked at again (new topics matching a regex, added partitions). */
const METADATA_REFRESH_MS = 1000;

const pkey = (topicId: string, p: number): string => `${topicId}:${p}`;

function keys(a: Assignment): string[] {
  const out: string[] = [];
  for (const [t, ps] of a) for (const p of ps) out.push(pkey(t, p));
  return out;
}

function sameNames(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  const s = new Set(a);
  return b.every((x) => s.has(x));
}

export class ConsumerGroupCoordinator {
  private readonly groups = new Map<string, Group>();
  private closed = false;

  constructor(
    private readonly catalog: TopicCatalog,
    private readonly logger: Logger,
    readonly options: ConsumerGroupOptions,
    /** The classic side of the namespace: whether a classic group holds the id, and forgetting an empty one. */
    private readonly classic: { kind(groupId: string): 'none' | 'empty' | 'busy'; forget(groupId: string): void },
  ) {}

  has(groupId: string): boolean {
    return this.groups.has(groupId);
  }

  /** Whether a consumer group of this id exists and has no member (an empty group gives way to a classic one). */
  isEmpty(groupId: string): boolean {
    const g = this.groups.get(groupId);
    return g !== undefined && g.members.size === 0;
  }

  private result(errorCode: number, errorMessage: string | null = null): HeartbeatResult {
    return {
      errorCode,
      errorMessage,
      memberId: null,
      memberEpoch: -1,
      heartbeatIntervalMs: errorCode === KafkaErrorCode.NONE ? this.options.heartbeatIntervalMs : 0,
      assignment: null,
    };
  }

  /** Kafka's request checks, in its order; null when the request is well formed. */
  private invalid(p: HeartbeatParams): HeartbeatResult | null {
    const bad = (msg: string): HeartbeatResult => this.result(KafkaErrorCode.INVALID_REQUEST, msg);
    if (p.groupId === '') return bad("GroupId can't be empty.");
    if (p.instanceId === '') return bad("InstanceId can't be empty.");
    if (p.rackId === '') return bad("RackId can't be empty.");
    // v1+ (KIP-1082): the client makes its member id, on every request.
    if (p.apiVersion >= 1 && p.memberId === '') return bad("MemberId can't be empty.");
    if (p.memberEpoch > 0 || p.memberEpoch === LEAVE_EPOCH) {
      if (p.memberId === '') return bad("MemberId can't be empty.");
    } else if (p.memberEpoch === 0) {
      if (p.rebalanceTimeoutMs === -1) return bad('RebalanceTimeoutMs must be provided in first request.');
      if (p.owned === null || p.owned.length > 0) return bad('TopicPartitions must be empty when (re-)joining.');
      if (p.subscribedTopicNames === null && p.subscribedTopicRegex === null) {
        return bad('SubscribedTopicNames or SubscribedTopicRegex must be set in first request.');
      }
    } else if (p.memberEpoch === STATIC_LEAVE_EPOCH) {
      if (p.memberId === '') return bad("MemberId can't be empty.");
      if (p.instanceId === null) return bad("InstanceId can't be null.");
    } else {
      return bad('MemberEpoch is invalid.');
    }
    if (p.serverAssignor !== null && !ASSIGNORS.has(p.serverAssignor)) {
      return this.result(
        KafkaErrorCode.UNSUPPORTED_ASSIGNOR,
        `ServerAssignor ${p.serverAssignor} is not supported. Supported assignors: ${[...ASSIGNORS.keys()].join(', ')}.`,
      );
    }
    if (p.subscribedTopicRegex !== null && p.subscribedTopicRegex !== '') {
      const r = compileTopicRegex(p.subscribedTopicRegex);
      if (!r.ok)
        return this.result(
          KafkaErrorCode.INVALID_REGULAR_EXPRESSION,
          `SubscribedTopicRegex \`${p.subscribedTopicRegex}\` is not a valid regular expression: ${r.reason}.`,
        );
    }
    return null;
  }

  heartbeat(p: HeartbeatParams): HeartbeatResult {
    if (this.closed) return this.result(KafkaErrorCode.NOT_COORDINATOR);
    const bad = this.invalid(p);
    if (bad) return bad;
    if (p.memberEpoch === LEAVE_EPOCH || p.memberEpoch === STATIC_LEAVE_EPOCH) return this.leave(p);

    let g = this.groups.get(p.groupId);
    if (!g) {
      const classic = this.classic.kind(p.groupId);
      if (classic === 'busy') return this.result(KafkaErrorCode.GROUP_ID_NOT_FOUND, `Group ${p.groupId} is not a consumer group.`);
      // An unknown member of an unknown group: this coordinator restarted or took the group over; it joins again.
      if (p.memberEpoch !== 0) return this.result(KafkaErrorCode.UNKNOWN_MEMBER_ID, `Member ${p.memberId} is not a member of group ${p.groupId}.`);
      if (classic === 'empty') this.classic.forget(p.groupId);
      g = new Group(p.groupId);
      this.groups.set(p.groupId, g);
      this.logger.info({ group: p.groupId }, 'consumer group created');
    }
    const memberId = p.memberId !== '' ? p.memberId : randomUUID();

    // The member: found, replacing a static member that left for now, or new.
    let m: Member | undefined;
    let joined = false;
    if (p.instanceId !== null) {
      const current = g.statics.get(p.instanceId);
      if (p.memberEpoch === 0) {
        if (current !== undefined && current !== memberId) {
          const old = g.members.get(current) as Member;
          if (old.memberEpoch !== STATIC_LEAVE_EPOCH) {
            return this.result(
              KafkaErrorCode.UNRELEASED_INSTANCE_ID,
              `Static member ${memberId} with instance id ${p.instanceId} cannot join the group because the instance id is owned by ${current} member.`,
            );
          }
          m = this.replaceStatic(g, old, memberId);
        } else {
          m = g.members.get(memberId);
        }
      } else {
        if (current === undefined) return this.result(KafkaErrorCode.UNKNOWN_MEMBER_ID, `Instance id ${p.instanceId} is unknown.`);
        if (current !== memberId)
          return this.result(KafkaErrorCode.FENCED_INSTANCE_ID, `Static member ${memberId} with instance id ${p.instanceId} was fenced by member ${current}.`);
        m = g.members.get(memberId);
      }
    } else {
      m = g.members.get(memberId);
    }
    if (!m) {
      if (p.memberEpoch !== 0) return this.result(KafkaErrorCode.UNKNOWN_MEMBER_ID, `Member ${memberId} is not a member of group ${p.groupId}.`);
      m = this.newMember(memberId, p);
      g.members.set(memberId, m);
      joined = true;
      this.logger.info({ group: g.groupId, member: memberId, instance: p.instanceId }, 'member joins the consumer group');
    } else if (p.memberEpoch === 0) {
      // A member joining again (it lost its epoch): it owns nothing now, whatever it was revoking is released.
      this.setPartitions(g, m, m.assigned, EMPTY_ASSIGNMENT);
      m.state = 'stable';
      m.memberEpoch = 0;
      m.previousMemberEpoch = 0;
    } else if (!epochAcceptable(m, p.memberEpoch, p.owned)) {
      return this.result(
        KafkaErrorCode.FENCED_MEMBER_EPOCH,
        `The consumer group member has a ${p.memberEpoch > m.memberEpoch ? 'greater' : 'smaller'} member epoch (${p.memberEpoch}) than the one known by the group coordinator (${m.memberEpoch}). The member must abandon all its partitions and rejoin.`,
      );
    }

    // The member's declarations; a change of subscription or assignor is a new group epoch.
    const before = m.assigned;
    let changed = joined;
    if (p.instanceId !== null && (joined || m.instanceId !== p.instanceId)) {
      if (m.instanceId !== null && g.statics.get(m.instanceId) === memberId) g.statics.delete(m.instanceId);
      m.instanceId = p.instanceId;
      g.statics.set(p.instanceId, memberId);
    }
    if (p.rackId !== null) m.rackId = p.rackId;
    if (p.rebalanceTimeoutMs !== -1) m.rebalanceTimeoutMs = p.rebalanceTimeoutMs;
    m.clientId = p.clientId;
    m.clientHost = p.clientHost;
    m.mayRead = p.mayRead;
    m.nameOf = p.nameOf;
    if (p.serverAssignor !== null && p.serverAssignor !== m.serverAssignor) {
      m.serverAssignor = p.serverAssignor;
      changed = true;
    }
    if (p.subscribedTopicNames !== null && !sameNames(p.subscribedTopicNames, m.names)) {
      m.names = [...new Set(p.subscribedTopicNames)];
      changed = true;
    }
    if (p.subscribedTopicRegex !== null) {
      const source = p.subscribedTopicRegex === '' ? null : p.subscribedTopicRegex;
      if (source !== m.regexSource) {
        m.regexSource = source;
        m.regex = source === null ? null : (compileTopicRegex(source) as { regex: RegExp }).regex;
        changed = true;
      }
    }
    if (changed) this.bump(g, joined ? `member ${memberId} joined` : `member ${memberId} changed its subscription`);
    this.refresh(g, changed);
    if (g.groupEpoch > g.assignmentEpoch) this.assign(g);

    this.reconcileMember(g, m, p.owned);
    this.touch(g, m);
    const full =
      p.memberEpoch === 0 || (p.rebalanceTimeoutMs !== -1 && (p.subscribedTopicNames !== null || p.subscribedTopicRegex !== null) && p.owned !== null);
    return {
      errorCode: KafkaErrorCode.NONE,
      errorMessage: null,
      memberId,
      memberEpoch: m.memberEpoch,
      heartbeatIntervalMs: this.options.heartbeatIntervalMs,
      assignment: full || !sameAssignment(before, m.assigned) ? m.assigned : null,
    };
  }

  private newMember(memberId: string, p: HeartbeatParams): Member {
    return {
      memberId,
      instanceId: p.instanceId,
      rackId: p.rackId,
      clientId: p.clientId,
      clientHost: p.clientHost,
      rebalanceTimeoutMs: p.rebalanceTimeoutMs,
      names: [],
      regexSource: null,
      regex: null,
      serverAssignor: null,
      mayRead: p.mayRead,
      nameOf: p.nameOf,
      topics: new Set(),
      state: 'stable',
      memberEpoch: 0,
      previousMemberEpoch: 0,
      assigned: EMPTY_ASSIGNMENT,
      pendingRevocation: EMPTY_ASSIGNMENT,
      sessionTimer: null,
      revocationTimer: null,
    };
  }

  /**
   * A static member comes back under a new member id while its previous incarnation is away (-2): the new one takes
   * its place, its partitions and its target, at epoch 0 (it reconciles to the assignment epoch at once); nothing
   * changes for the other members.
   */
  private replaceStatic(g: Group, old: Member, memberId: string): Member {
    this.clearTimers(old);
    g.members.delete(old.memberId);
    const m: Member = {
      ...old,
      memberId,
      memberEpoch: 0,
      previousMemberEpoch: 0,
      state: 'stable',
      pendingRevocation: EMPTY_ASSIGNMENT,
      sessionTimer: null,
      revocationTimer: null,
    };
    g.members.set(memberId, m);
    for (const k of keys(old.assigned)) g.owners.set(k, memberId);
    for (const k of keys(old.pendingRevocation)) if (g.owners.get(k) === old.memberId) g.owners.delete(k);
    const target = g.target.get(old.memberId);
    g.target.delete(old.memberId);
    if (target) g.target.set(memberId, target);
    g.statics.set(old.instanceId as string, memberId);
    this.logger.info(
      { group: g.groupId, member: memberId, replaced: old.memberId, instance: old.instanceId },
      'static member rejoined: it takes over its partitions',
    );
    return m;
  }

  private bump(g: Group, reason: string): void {
    g.groupEpoch++;
    this.logger.debug({ group: g.groupId, epoch: g.groupEpoch, reason }, 'consumer group epoch bumped');
  }

  /** Resolves every member's subscription against the topics now; a change of the topics is a new group epoch. */
  private refresh(g: Group, force: boolean): void {
    const now = Date.now();
    if (!force && now - g.checkedAt < METADATA_REFRESH_MS) return;
    g.checkedAt = now;
    const subscribed = new Map<string, AssignorTopic>();
    const all = [...g.members.values()].some((m) => m.regex !== null) ? [...this.catalog.all()] : [];
    for (const m of g.members.values()) {
      const ids = new Set<string>();
      for (const name of m.names) {
        const t = this.catalog.byName(name);
        if (t) {
          ids.add(t.id);
          subscribed.set(t.id, t);
        }
      }
      if (m.regex) {
        for (const t of all) {
          if (!ids.has(t.id) && regexTakes(m, t.name)) {
            ids.add(t.id);
            subscribed.set(t.id, t);
          }
        }
      }
      m.topics = ids;
    }
    const signature = [...subscribed.values()]
      .map((t) => `${t.id}:${t.name}:${t.partitions}`)
      .sort()
      .join(',');
    // Which member subscribes to what is part of it too (a regex now matching a topic another member had).
    const bySubscriber = [...g.members.values()]
      .map((m) => `${m.memberId}=${[...m.topics].sort().join('+')}`)
      .sort()
      .join(';');
    const sig = `${signature}|${bySubscriber}`;
    g.subscribed = subscribed;
    if (sig !== g.signature) {
      // Forced: the caller moved the group epoch already (the change is its own doing).
      if (!force) this.bump(g, 'subscribed topics changed');
      g.signature = sig;
    }
  }

  /** A new target assignment for the group epoch. */
  private assign(g: Group): void {
    g.assignor = selectAssignor([...g.members.values()].map((m) => m.serverAssignor));
    const assignor = ASSIGNORS.get(g.assignor) as NonNullable<ReturnType<typeof ASSIGNORS.get>>;
    g.target = assignor({
      members: [...g.members.values()].map((m) => ({ memberId: m.memberId, instanceId: m.instanceId, topics: m.topics })),
      topics: g.subscribed,
      previous: g.target,
    });
    g.assignmentEpoch = g.groupEpoch;
    this.logger.info(
      { group: g.groupId, epoch: g.assignmentEpoch, members: g.members.size, assignor: g.assignor },
      'consumer group target assignment computed',
    );
  }

  private reconcileMember(g: Group, m: Member, owned: OwnedPartitions): void {
    if (m.memberEpoch === STATIC_LEAVE_EPOCH) return;
    const ownerEpoch = (t: string, p: number): number => {
      const holder = g.owners.get(pkey(t, p));
      if (holder === undefined || holder === m.memberId) return -1;
      return g.members.get(holder)?.memberEpoch ?? -1;
    };
    const next = reconcile(m, g.assignmentEpoch, g.target.get(m.memberId) ?? EMPTY_ASSIGNMENT, ownerEpoch, owned);
    if (next === m) return;
    const wasRevoking = m.state === 'unrevoked_partitions' ? m.pendingRevocation : null;
    this.setPartitions(g, m, next.assigned, next.pendingRevocation);
    m.state = next.state;
    m.memberEpoch = next.memberEpoch;
    m.previousMemberEpoch = next.previousMemberEpoch;
    if (m.state === 'unrevoked_partitions') {
      // KIP-848: a member that does not revoke within its rebalance timeout is fenced.
      if (wasRevoking === null || !sameAssignment(wasRevoking, m.pendingRevocation)) this.armRevocationTimer(g, m);
    } else if (m.revocationTimer) {
      clearTimeout(m.revocationTimer);
      m.revocationTimer = null;
    }
  }

  /** Sets what the member holds, keeping the owner index; a partition another member holds is never taken. */
  private setPartitions(g: Group, m: Member, assigned: Assignment, pending: Assignment): void {
    for (const k of [...keys(m.assigned), ...keys(m.pendingRevocation)]) if (g.owners.get(k) === m.memberId) g.owners.delete(k);
    for (const k of [...keys(assigned), ...keys(pending)]) {
      const holder = g.owners.get(k);
      if (holder !== undefined && holder !== m.memberId) {
        this.logger.error(
          { group: g.groupId, partition: k, holder, member: m.memberId },
          'consumer group invariant broken: a partition was about to have two owners',
        );
      }
      g.owners.set(k, m.memberId);
    }
    m.assigned = assigned;
    m.pendingRevocation = pending;
  }

  private armRevocationTimer(g: Group, m: Member): void {
    if (m.revocationTimer) clearTimeout(m.revocationTimer);
    m.revocationTimer = setTimeout(
      () => {
        m.revocationTimer = null;
        if (g.members.get(m.memberId) !== m || m.state !== 'unrevoked_partitions') return;
        this.logger.info(
          { group: g.groupId, member: m.memberId, rebalanceTimeoutMs: m.rebalanceTimeoutMs },
          'member did not revoke its partitions within its rebalance timeout: fenced',
        );
        this.remove(g, m, 'rebalance timeout');
      },
      Math.max(1, m.rebalanceTimeoutMs),
    );
    m.revocationTimer.unref();
  }

  /** Restarts the session timer: a member silent for group.consumer.session.timeout.ms is removed. */
  private touch(g: Group, m: Member): void {
    if (m.sessionTimer) clearTimeout(m.sessionTimer);
    m.sessionTimer = setTimeout(() => {
      m.sessionTimer = null;
      if (g.members.get(m.memberId) !== m) return;
      this.logger.info({ group: g.groupId, member: m.memberId, sessionTimeoutMs: this.options.sessionTimeoutMs }, 'consumer group member session expired');
      this.remove(g, m, 'session expired');
    }, this.options.sessionTimeoutMs);
    m.sessionTimer.unref();
  }

  private clearTimers(m: Member): void {
    if (m.sessionTimer) clearTimeout(m.sessionTimer);
    if (m.revocationTimer) clearTimeout(m.revocationTimer);
    m.sessionTimer = null;
    m.revocationTimer = null;
  }

  /** Removes (fences) a member: its partitions are free, the group epoch moves on. */
  private remove(g: Group, m: Member, reason: string): void {
    this.clearTimers(m);
    this.setPartitions(g, m, EMPTY_ASSIGNMENT, EMPTY_ASSIGNMENT);
    g.members.delete(m.memberId);
    g.target.delete(m.memberId);
    if (m.instanceId !== null && g.statics.get(m.instanceId) === m.memberId) g.statics.delete(m.instanceId);
    this.bump(g, `member ${m.memberId} removed: ${reason}`);
    if (g.members.size === 0) {
      // Nothing to assign to: the empty target is the group epoch's.
      g.target = new Map();
      g.assignmentEpoch = g.groupEpoch;
      g.subscribed = new Map();
      g.signature = '';
      return;
    }
    this.refresh(g, true);
  }

  private leave(p: HeartbeatParams): HeartbeatResult {
    const g = this.groups.get(p.groupId);
    // Unknown here: its members are gone already (a restart, a coordinator move); nothing to leave.
    if (!g) return this.result(KafkaErrorCode.UNKNOWN_MEMBER_ID, `Member ${p.memberId} is not a member of group ${p.groupId}.`);
    let m: Member | undefined;
    if (p.instanceId !== null) {
      const current = g.statics.get(p.instanceId);
      if (current === undefined) return this.result(KafkaErrorCode.UNKNOWN_MEMBER_ID, `Instance id ${p.instanceId} is unknown.`);
      if (current !== p.memberId)
        return this.result(KafkaErrorCode.FENCED_INSTANCE_ID, `Static member ${p.memberId} with instance id ${p.instanceId} was fenced by member ${current}.`);
      m = g.members.get(current);
    } else {
      m = g.members.get(p.memberId);
    }
    if (!m) return this.result(KafkaErrorCode.UNKNOWN_MEMBER_ID, `Member ${p.memberId} is not a member of group ${p.groupId}.`);
    const out = { ...this.result(KafkaErrorCode.NONE), memberId: m.memberId, memberEpoch: p.memberEpoch, heartbeatIntervalMs: 0 };
    if (p.memberEpoch === STATIC_LEAVE_EPOCH) {
      // KIP-848 static leave: the member keeps its partitions until it comes back or its session expires.
      this.setPartitions(g, m, m.assigned, EMPTY_ASSIGNMENT);
      if (m.revocationTimer) clearTimeout(m.revocationTimer);
      m.revocationTimer = null;
      m.state = 'stable';
      m.previousMemberEpoch = m.memberEpoch;
      m.memberEpoch = STATIC_LEAVE_EPOCH;
      this.touch(g, m);
      this.logger.info({ group: g.groupId, member: m.memberId, instance: m.instanceId }, 'static member left the consumer group for now');
      return out;
    }
    this.logger.info({ group: g.groupId, member: m.memberId }, 'member left the consumer group');
    this.remove(g, m, 'left');
    return out;
  }

  // ------------------------------------------------------------------------------------------- offsets

  /**
   * OffsetCommit of a consumer group (Kafka's ConsumerGroup.validateOffsetCommit): outside the group (epoch -1) only
   * while it has no member; else the member must exist, use OffsetCommit v9+, and commit with its current epoch
   * (FENCED_MEMBER_EPOCH ahead of it, STALE_MEMBER_EPOCH behind).
   */
  checkCommit(groupId: string, memberEpoch: number, memberId: string, apiVersion: number): number {
    if (this.closed) return KafkaErrorCode.NOT_COORDINATOR;
    const g = this.groups.get(groupId);
    if (!g) return KafkaErrorCode.NONE;
    if (memberEpoch < 0 && g.members.size === 0) return KafkaErrorCode.NONE;
    const m = g.members.get(memberId);
    if (!m) return KafkaErrorCode.UNKNOWN_MEMBER_ID;
    if (apiVersion < 9) return KafkaErrorCode.UNSUPPORTED_VERSION;
    if (memberEpoch > m.memberEpoch) return KafkaErrorCode.FENCED_MEMBER_EPOCH;
    if (memberEpoch < m.memberEpoch) return KafkaErrorCode.STALE_MEMBER_EPOCH;
    return KafkaErrorCode.NONE;
  }

  /** OffsetFetch v9+ naming a member (epoch >= 0): it must be a member at that epoch. */
  checkFetch(groupId: string, memberId: string | null, memberEpoch: number): number {
    if (memberEpoch < 0 || memberId === null) return KafkaErrorCode.NONE;
    const g = this.groups.get(groupId);
    if (!g) return KafkaErrorCode.NONE;
    const m = g.members.get(memberId);
    if (!m) return KafkaErrorCode.UNKNOWN_MEMBER_ID;
    if (memberEpoch !== m.memberEpoch) return KafkaErrorCode.STALE_MEMBER_EPOCH;
    return KafkaErrorCode.NONE;
  }

  // ------------------------------------------------------------------------------------------- admin

  private state(g: Group): ConsumerGroupState {
    if (g.members.size === 0) return 'Empty';
    if (g.groupEpoch > g.assignmentEpoch) return 'Assigning';
    for (const m of g.members.values()) if (m.state !== 'stable' || m.memberEpoch !== g.assignmentEpoch) return 'Reconciling';
    return 'Stable';
  }

  describe(groupId: string): ConsumerGroupDescription | null {
    const g = this.groups.get(groupId);
    if (!g) return null;
    return {
      groupId,
      state: this.state(g),
      groupEpoch: g.groupEpoch,
      assignmentEpoch: g.assignmentEpoch,
      assignorName: g.assignor,
      createdAt: g.createdAt,
      members: [...g.members.values()].map((m) => ({
        memberId: m.memberId,
        instanceId: m.instanceId,
        rackId: m.rackId,
        memberEpoch: m.memberEpoch,
        clientId: m.clientId,
        clientHost: m.clientHost,
        subscribedTopicNames: [...m.names],
        subscribedTopicRegex: m.regexSource,
        assignment: m.assigned,
        targetAssignment: g.target.get(m.memberId) ?? EMPTY_ASSIGNMENT,
      })),
    };
  }

  /**
   * The topic names the group's members subscribe to, by name or through their regex (Kafka's subscribedTopicNames,
   * which counts a regex's resolved topics too): what OffsetDelete must leave alone (GROUP_SUBSCRIBED_TO_TOPIC).
   * A regex is matched against the topics now, so a topic created since the last metadata refresh counts already.
   * Null when the group is unknown.
   */
  subscribedTopicNames(groupId: string): Set<string> | null {
    const g = this.groups.get(groupId);
    if (!g) return null;
    const out = new Set<string>();
    const all = [...g.members.values()].some((m) => m.regex !== null) ? [...this.catalog.all()] : [];
    for (const m of g.members.values()) {
      for (const name of m.names) out.add(name);
      if (m.regex) for (const t of all) if (regexTakes(m, t.name)) out.add(t.name);
    }
    return out;
  }

  list(): Array<{ groupId: string; state: ConsumerGroupState }> {
    return [...this.groups.values()].map((g) => ({ groupId: g.groupId, state: this.state(g) }));
  }

  /** Forgets an empty group (DeleteGroups, or a classic group taking the id); false if it has members. */
  delete(groupId: string): boolean {
    const g = this.groups.get(groupId);
    if (!g) return true;
    if (g.members.size > 0) return false;
    this.groups.delete(groupId);
    return true;
  }

  /** Forgets a group whose coordination moved away (cluster mode): its members join again at the new coordinator. */
  drop(groupId: string): void {
    const g = this.groups.get(groupId);
    if (!g) return;
    for (const m of g.members.values()) this.clearTimers(m);
    this.groups.delete(groupId);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const g of this.groups.values()) for (const m of g.members.values()) this.clearTimers(m);
    this.groups.clear();
  }
}
