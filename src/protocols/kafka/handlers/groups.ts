/**
 * Consumer-group APIs: translation between the wire messages and the group coordinator. On a single broker this
 * broker coordinates every group, so FindCoordinator always names it. In a cluster a group's coordinator is its
 * placement broker (../cluster.ts): FindCoordinator names it, the others answer the group APIs NOT_COORDINATOR, and
 * offset commits carry the group's ownership epoch, refused by the metastore once the group has moved.
 */
import {
  KafkaErrorCode,
  ZERO_UUID,
  type Uuid,
  type DeleteGroupsRequest,
  type DeleteGroupsResponse,
  type DescribeGroupsRequest,
  type DescribeGroupsResponse,
  type DescribedGroup,
  type FindCoordinatorRequest,
  type FindCoordinatorResponse,
  type HeartbeatRequest,
  type HeartbeatResponse,
  type JoinGroupRequest,
  type JoinGroupResponse,
  type LeaveGroupRequest,
  type LeaveGroupResponse,
  type ListGroupsRequest,
  type ListGroupsResponse,
  type OffsetCommitRequest,
  type OffsetCommitResponse,
  type OffsetFetchPartitionResponse,
  type OffsetFetchRequest,
  type OffsetFetchResponse,
  type SyncGroupRequest,
  type SyncGroupResponse,
} from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import { storageRefusal } from '../../storage-refusal.js';
import type { RequestContext } from '../route.js';
import { advertisedAddress } from './metadata.js';
import type { GroupGate } from '../cluster.js';
import { isFlowError, type OffsetCommit } from '../../../core/index.js';
import { allowed, mayDescribeTransactionalId, visible } from '../authz.js';
import { streamByTopicId, topicIdOf } from '../topic-ids.js';

const GROUP_DENIED = KafkaErrorCode.GROUP_AUTHORIZATION_FAILED;
const TOPIC_DENIED = KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED;

/** Joining, syncing, heartbeats, leaving, committing and fetching offsets: `subscribe group:<id>`. */
export function mayUseGroup(ctx: RequestContext, groupId: string): boolean {
  return allowed(ctx, 'subscribe', 'group', groupId);
}

/** offset.metadata.max.bytes: larger commit metadata is refused with OFFSET_METADATA_TOO_LARGE. */
export const MAX_OFFSET_METADATA_BYTES = 4096;

const OPS_OMITTED = -2147483648;

/** Coordinator key types of FindCoordinator v1+. */
const KEY_TYPE_GROUP = 0;
const KEY_TYPE_TRANSACTION = 1;

export function handleFindCoordinator(ctx: RequestContext, req: FindCoordinatorRequest): FindCoordinatorResponse {
  const self = advertisedAddress(ctx);
  const { host, port } = self;
  const kc = ctx.adapter.cluster;
  const nodes = kc === null ? null : kc.nodes(ctx.conn.listener.name, self);
  const v = ctx.header.apiVersion;
  const keys = v >= 4 ? req.coordinatorKeys : [req.key];
  const coordinators = keys.map((key) => {
    // Any other key type is not one the protocol defines.
    const valid = req.keyType === KEY_TYPE_GROUP || req.keyType === KEY_TYPE_TRANSACTION;
    // A group's coordinator is found by those who may use the group, or describe it (admin tools).
    const denied = valid && req.keyType === KEY_TYPE_GROUP && !visible(ctx, 'describe', 'group', key) && !mayUseGroup(ctx, key);
    // A transaction's, by those who may describe its transactional id (Kafka's DESCRIBE, implied by WRITE).
    const txnDenied = valid && req.keyType === KEY_TYPE_TRANSACTION && !mayDescribeTransactionalId(ctx, key);
    const errorCode = !valid
      ? KafkaErrorCode.INVALID_REQUEST
      : txnDenied
        ? KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        : denied
          ? GROUP_DENIED
          : ctx.adapter.groups.isClosed()
            ? KafkaErrorCode.COORDINATOR_NOT_AVAILABLE
            : KafkaErrorCode.NONE;
    const ok = errorCode === KafkaErrorCode.NONE;
    if (ok && kc !== null && nodes !== null) {
      // A group's or a transactional id's coordinator is its placement broker.
      const id = kc.coordinator(key, req.keyType === KEY_TYPE_GROUP ? 'group' : 'txn');
      const node = nodes.find((n) => n.nodeId === id);
      if (!node) return { key, nodeId: -1, host: '', port: -1, errorCode: KafkaErrorCode.COORDINATOR_NOT_AVAILABLE, errorMessage: null };
      return { key, nodeId: node.nodeId, host: node.host, port: node.port, errorCode, errorMessage: null };
    }
    return { key, nodeId: ok ? ctx.adapter.brokerId : -1, host: ok ? host : '', port: ok ? port : -1, errorCode, errorMessage: null };
  });
  const first = coordinators[0] ?? { nodeId: -1, host: '', port: -1, errorCode: KafkaErrorCode.INVALID_REQUEST };
  return {
    throttleTimeMs: 0,
    errorCode: first.errorCode,
    errorMessage: null,
    nodeId: first.nodeId,
    host: first.host,
    port: first.port,
    coordinators,
  };
}

/**
 * Runs `fn` if this broker coordinates the group (cluster mode: with the group's ownership epoch, which fences its
 * offset commits), else answers `refuse(errorCode)` (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS). Synchronous
 * when the group is served here already, and always on a single broker.
 */
export function gated<T>(
  ctx: RequestContext,
  groupId: string,
  refuse: (errorCode: number) => T,
  fn: (epoch: number | undefined) => T | Promise<T>,
): T | Promise<T> {
  const kc = ctx.adapter.cluster;
  // A single broker coordinates every group: no epoch, nothing to fence.
  if (kc === null) return fn(undefined);
  const decide = (g: GroupGate): T | Promise<T> => (g.errorCode !== KafkaErrorCode.NONE ? refuse(g.errorCode) : fn(g.epoch));
  const g = kc.gate(groupId);
  return g instanceof Promise ? g.then(decide) : decide(g);
}

export function clientHost(ctx: RequestContext): string {
  return `/${ctx.conn.remoteAddress ?? 'unknown'}`;
}

export async function handleJoinGroup(ctx: RequestContext, req: JoinGroupRequest): Promise<JoinGroupResponse> {
  if (!mayUseGroup(ctx, req.groupId)) {
    return {
      throttleTimeMs: 0,
      errorCode: GROUP_DENIED,
      generationId: -1,
      protocolType: null,
      protocolName: null,
      leader: '',
      skipAssignment: false,
      memberId: req.memberId,
      members: [],
    };
  }
  const gate = await gated(
    ctx,
    req.groupId,
    (errorCode) => errorCode,
    () => KafkaErrorCode.NONE as number,
  );
  if (gate !== KafkaErrorCode.NONE) {
    return {
      throttleTimeMs: 0,
      errorCode: gate,
      generationId: -1,
      protocolType: null,
      protocolName: null,
      leader: '',
      skipAssignment: false,
      memberId: req.memberId,
      members: [],
    };
  }
  const r = await ctx.adapter.groups.join({
    groupId: req.groupId,
    memberId: req.memberId,
    groupInstanceId: req.groupInstanceId,
    clientId: ctx.header.clientId ?? '',
    clientHost: clientHost(ctx),
    sessionTimeoutMs: req.sessionTimeoutMs,
    rebalanceTimeoutMs: req.rebalanceTimeoutMs,
    protocolType: req.protocolType,
    protocols: req.protocols,
    requireKnownMemberId: ctx.header.apiVersion >= 4,
    supportsSkipAssignment: ctx.header.apiVersion >= 9,
  });
  return {
    throttleTimeMs: 0,
    errorCode: r.errorCode,
    generationId: r.generationId,
    protocolType: r.protocolType,
    protocolName: r.protocolName,
    leader: r.leader,
    skipAssignment: r.skipAssignment ?? false,
    memberId: r.memberId,
    members: r.members,
  };
}

export async function handleSyncGroup(ctx: RequestContext, req: SyncGroupRequest): Promise<SyncGroupResponse> {
  if (!mayUseGroup(ctx, req.groupId))
    return { throttleTimeMs: 0, errorCode: GROUP_DENIED, protocolType: null, protocolName: null, assignment: Buffer.alloc(0) };
  const gate = await gated(
    ctx,
    req.groupId,
    (errorCode) => errorCode,
    () => KafkaErrorCode.NONE as number,
  );
  if (gate !== KafkaErrorCode.NONE) return { throttleTimeMs: 0, errorCode: gate, protocolType: null, protocolName: null, assignment: Buffer.alloc(0) };
  const r = await ctx.adapter.groups.sync({
    groupId: req.groupId,
    generationId: req.generationId,
    memberId: req.memberId,
    groupInstanceId: req.groupInstanceId,
    protocolType: req.protocolType,
    protocolName: req.protocolName,
    assignments: req.assignments,
  });
  return { throttleTimeMs: 0, ...r };
}

export function handleHeartbeat(ctx: RequestContext, req: HeartbeatRequest): HeartbeatResponse | Promise<HeartbeatResponse> {
  if (!mayUseGroup(ctx, req.groupId)) return { throttleTimeMs: 0, errorCode: GROUP_DENIED };
  return gated(
    ctx,
    req.groupId,
    (errorCode) => ({ throttleTimeMs: 0, errorCode }),
    () => ({ throttleTimeMs: 0, errorCode: ctx.adapter.groups.heartbeat(req.groupId, req.generationId, req.memberId, req.groupInstanceId) }),
  );
}

export function handleLeaveGroup(ctx: RequestContext, req: LeaveGroupRequest): LeaveGroupResponse | Promise<LeaveGroupResponse> {
  if (!mayUseGroup(ctx, req.groupId)) return { throttleTimeMs: 0, errorCode: GROUP_DENIED, members: [] };
  return gated(
    ctx,
    req.groupId,
    (errorCode) => ({ throttleTimeMs: 0, errorCode, members: [] }),
    () => leaveGroup(ctx, req),
  );
}

function leaveGroup(ctx: RequestContext, req: LeaveGroupRequest): LeaveGroupResponse {
  const batched = ctx.header.apiVersion >= 3;
  const members = batched
    ? req.members.map((m) => ({ memberId: m.memberId, groupInstanceId: m.groupInstanceId }))
    : [{ memberId: req.memberId, groupInstanceId: null }];
  const r = ctx.adapter.groups.leave(req.groupId, members);
  // v3+ carries per-member errors; the top-level error is then only for the group as a whole.
  const unknownGroup = r.members.length > 0 && !ctx.adapter.groups.describe(req.groupId);
  return {
    throttleTimeMs: 0,
    errorCode: batched ? (unknownGroup ? KafkaErrorCode.UNKNOWN_MEMBER_ID : KafkaErrorCode.NONE) : r.errorCode,
    members: r.members,
  };
}

export async function handleOffsetCommit(ctx: RequestContext, req: OffsetCommitRequest): Promise<OffsetCommitResponse> {
  const { groups, engine, cluster: kc } = ctx.adapter;
  let fence: number | undefined;
  let groupError: number = GROUP_DENIED;
  if (mayUseGroup(ctx, req.groupId)) {
    groupError = await gated(
      ctx,
      req.groupId,
      (errorCode) => errorCode,
      (epoch) => {
        fence = epoch;
        return groups.checkCommit(req.groupId, req.generationId, req.memberId, req.groupInstanceId, ctx.header.apiVersion);
      },
    );
  }
  const valid: OffsetCommit[] = [];
  const pending: Array<{ errorCode: number }> = [];
  // v10+ (KIP-848): topics by id; an id no stream has is UNKNOWN_TOPIC_ID.
  const byId = ctx.header.apiVersion >= 10;
  const topics = req.topics.map((t) => {
    const entry = byId ? streamByTopicId(engine, t.topicId ?? ZERO_UUID) : engine.getAnyStream(t.name);
    const name = byId ? (entry?.def.name ?? '') : t.name;
    return {
      name: byId ? '' : t.name,
      topicId: t.topicId ?? ZERO_UUID,
      partitions: t.partitions.map((p) => {
        const res = { partitionIndex: p.partitionIndex, errorCode: groupError };
        if (groupError !== KafkaErrorCode.NONE) return res;
        if (byId && entry === undefined) res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_ID;
        else if (!allowed(ctx, 'subscribe', 'stream', name)) res.errorCode = TOPIC_DENIED;
        else if (!entry || p.partitionIndex < 0 || p.partitionIndex >= entry.def.partitions) {
          res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION;
        } else if (p.committedMetadata !== null && Buffer.byteLength(p.committedMetadata) > MAX_OFFSET_METADATA_BYTES) {
          res.errorCode = KafkaErrorCode.OFFSET_METADATA_TOO_LARGE;
        } else if (p.committedOffset < -1) {
          res.errorCode = KafkaErrorCode.INVALID_REQUEST;
        } else {
          valid.push({ stream: name, partition: p.partitionIndex, offset: p.committedOffset, metadata: p.committedMetadata });
          pending.push(res);
        }
        return res;
      }),
    };
  });
  if (valid.length > 0) {
    try {
      const commit = groups.store.commitOffsets(req.groupId, valid, fence);
      // A handover of the group waits for the commits in flight (cluster.ts).
      await (kc === null ? commit : kc.track(req.groupId, commit));
    } catch (err) {
      let code = kafkaErrorCode(err);
      if (kc !== null && isFlowError(err, 'FENCED')) {
        // The group moved to another coordinator meanwhile: this broker stops serving it, the member finds the new one.
        code = KafkaErrorCode.NOT_COORDINATOR;
        kc.fenced(req.groupId);
        ctx.conn.limitedLog('info', { group: req.groupId }, 'offset commit fenced: the group has another coordinator now');
      } else if (storageRefusal(err) !== null) {
        // The metastore could not take it (a full disk): KAFKA_STORAGE_ERROR is no OffsetCommit error; Kafka's own
        // coordinator answers a failed write of its offsets log with a coordinator error, which clients retry.
        code = KafkaErrorCode.COORDINATOR_NOT_AVAILABLE;
        ctx.conn.limitedLog('warn', { group: req.groupId, err: (err as Error).message }, 'offset commit refused: storage cannot take it now');
      } else ctx.conn.log.warn({ err, group: req.groupId }, 'offset commit failed');
      for (const r of pending) r.errorCode = code;
    }
  }
  return { throttleTimeMs: 0, topics };
}

const noOffset = (partitionIndex: number): OffsetFetchPartitionResponse => ({
  partitionIndex,
  committedOffset: -1,
  committedLeaderEpoch: -1,
  // Kafka answers "" (OffsetFetchResponse.NO_METADATA) for partitions without a committed offset.
  metadata: '',
  errorCode: KafkaErrorCode.NONE,
});

type FetchedTopic = { name: string; topicId: Uuid; partitions: OffsetFetchPartitionResponse[] };

async function fetchGroupOffsets(
  ctx: RequestContext,
  groupId: string,
  topics: Array<{ name: string; topicId?: Uuid; partitionIndexes: number[] }> | null,
  /** v10+: topics by id (KIP-848), answered by id. */
  byId = false,
  /** v9+: the member asking, checked against a consumer-protocol group (KIP-848). */
  member: { memberId: string | null; memberEpoch: number } = { memberId: null, memberEpoch: -1 },
): Promise<{ topics: FetchedTopic[]; errorCode: number }> {
  const store = ctx.adapter.groups.store;
  const engine = ctx.adapter.engine;
  const refuse = (errorCode: number) => ({
    topics: (topics ?? []).map((t) => ({
      name: t.name,
      topicId: t.topicId ?? ZERO_UUID,
      partitions: t.partitionIndexes.map((p) => ({ ...noOffset(p), errorCode })),
    })),
    errorCode,
  });
  if (!mayUseGroup(ctx, groupId)) return refuse(GROUP_DENIED);
  // Cluster mode: the group's coordinator answers (the offsets are in the shared metastore).
  const served = ctx.adapter.cluster?.reads(groupId) ?? KafkaErrorCode.NONE;
  if (served !== KafkaErrorCode.NONE) return refuse(served);
  // v9+: a consumer-protocol member fetches at its member epoch (KIP-848).
  const stale = ctx.adapter.groups.consumer.checkFetch(groupId, member.memberId, member.memberEpoch);
  if (stale !== KafkaErrorCode.NONE) return refuse(stale);
  try {
    if (topics === null) {
      // All committed offsets of the group (v2+), of the topics the client may read (as Kafka filters them).
      const byTopic = new Map<string, OffsetFetchPartitionResponse[]>();
      for (const o of await store.listOffsets(groupId)) {
        if (!visible(ctx, 'subscribe', 'stream', o.stream)) continue;
        let list = byTopic.get(o.stream);
        if (!list) byTopic.set(o.stream, (list = []));
        list.push({ ...noOffset(o.partition), committedOffset: o.offset, metadata: o.metadata });
      }
      const all = [...byTopic].map(([name, partitions]) => {
        const def = engine.getAnyStream(name)?.def;
        return { name: byId ? '' : name, topicId: def ? topicIdOf(def) : ZERO_UUID, partitions };
      });
      // By id, a topic without a stream any more (deleted meanwhile) cannot be named.
      return { topics: byId ? all.filter((t) => !t.topicId.equals(ZERO_UUID)) : all, errorCode: KafkaErrorCode.NONE };
    }
    const out: FetchedTopic[] = [];
    for (const t of topics) {
      const partitions: OffsetFetchPartitionResponse[] = [];
      const topicId = t.topicId ?? ZERO_UUID;
      const entry = byId ? streamByTopicId(engine, topicId) : undefined;
      if (byId && entry === undefined) {
        out.push({ name: '', topicId, partitions: t.partitionIndexes.map((p) => ({ ...noOffset(p), errorCode: KafkaErrorCode.UNKNOWN_TOPIC_ID })) });
        continue;
      }
      const name = entry !== undefined ? entry.def.name : t.name;
      if (!allowed(ctx, 'subscribe', 'stream', name)) {
        out.push({ name: t.name, topicId, partitions: t.partitionIndexes.map((p) => ({ ...noOffset(p), errorCode: TOPIC_DENIED })) });
        continue;
      }
      for (const p of t.partitionIndexes) {
        const o = await store.fetchOffset(groupId, name, p);
        partitions.push(o ? { ...noOffset(p), committedOffset: o.offset, metadata: o.metadata } : noOffset(p));
      }
      out.push({ name: t.name, topicId, partitions });
    }
    return { topics: out, errorCode: KafkaErrorCode.NONE };
  } catch (err) {
    ctx.conn.log.warn({ err, group: groupId }, 'offset fetch failed');
    const code = kafkaErrorCode(err);
    return {
      topics: (topics ?? []).map((t) => ({
        name: t.name,
        topicId: t.topicId ?? ZERO_UUID,
        partitions: t.partitionIndexes.map((p) => ({ ...noOffset(p), errorCode: code })),
      })),
      errorCode: code,
    };
  }
}

export async function handleOffsetFetch(ctx: RequestContext, req: OffsetFetchRequest): Promise<OffsetFetchResponse> {
  if (ctx.header.apiVersion >= 8) {
    const groups = [];
    // v9's member id and epoch concern KIP-848 consumer groups; a classic group's offsets are read without them, as
    // Kafka's classic groups do.
    for (const g of req.groups) {
      const r = await fetchGroupOffsets(ctx, g.groupId, g.topics, ctx.header.apiVersion >= 10, {
        memberId: g.memberId ?? null,
        memberEpoch: g.memberEpoch ?? -1,
      });
      groups.push({ groupId: g.groupId, topics: r.topics, errorCode: r.errorCode });
    }
    return { throttleTimeMs: 0, topics: [], errorCode: KafkaErrorCode.NONE, groups };
  }
  const r = await fetchGroupOffsets(ctx, req.groupId, req.topics);
  return { throttleTimeMs: 0, topics: r.topics, errorCode: r.errorCode, groups: [] };
}

export async function handleDescribeGroups(ctx: RequestContext, req: DescribeGroupsRequest): Promise<DescribeGroupsResponse> {
  const { groups } = ctx.adapter;
  let withOffsets: Set<string> | null = null;
  const out: DescribedGroup[] = [];
  for (const groupId of req.groups) {
    const base: DescribedGroup = {
      errorCode: KafkaErrorCode.NONE,
      groupId,
      groupState: 'Dead',
      protocolType: '',
      protocolData: '',
      members: [],
      authorizedOperations: OPS_OMITTED,
    };
    if (groupId === '') {
      out.push({ ...base, errorCode: KafkaErrorCode.INVALID_GROUP_ID });
      continue;
    }
    if (!allowed(ctx, 'describe', 'group', groupId)) {
      out.push({ ...base, errorCode: GROUP_DENIED });
      continue;
    }
    const served = ctx.adapter.cluster?.reads(groupId) ?? KafkaErrorCode.NONE;
    if (served !== KafkaErrorCode.NONE) {
      out.push({ ...base, errorCode: served });
      continue;
    }
    const d = groups.describe(groupId);
    if (d) {
      out.push({
        ...base,
        groupState: d.state,
        protocolType: d.protocolType,
        protocolData: d.protocolData,
        members: d.members.map((m) => ({
          memberId: m.memberId,
          groupInstanceId: m.groupInstanceId,
          clientId: m.clientId,
          clientHost: m.clientHost,
          memberMetadata: m.metadata,
          memberAssignment: m.assignment,
        })),
      });
      continue;
    }
    // Not in memory (no member since start): a group with committed offsets is Empty, else it does not exist,
    // which Kafka reports as state Dead without an error.
    withOffsets ??= new Set(await groups.store.listGroups());
    if (withOffsets.has(groupId)) out.push({ ...base, groupState: 'Empty', protocolType: 'consumer' });
    // v6+ (KIP-1043): an unknown group is GROUP_ID_NOT_FOUND, with a message.
    else if (ctx.header.apiVersion >= 6) out.push({ ...base, errorCode: KafkaErrorCode.GROUP_ID_NOT_FOUND, errorMessage: `Group ${groupId} not found.` });
    else out.push(base);
  }
  return { throttleTimeMs: 0, groups: out };
}

export async function handleListGroups(ctx: RequestContext, req: ListGroupsRequest): Promise<ListGroupsResponse> {
  try {
    const filter = new Set(req.statesFilter.map((s) => s.toLowerCase()));
    // v5+ (KIP-848): "classic" or "consumer".
    const types = new Set((req.typesFilter ?? []).map((t) => t.toLowerCase()));
    // Cluster mode: each broker lists the groups it coordinates, as Kafka's brokers do (admin clients ask them all).
    const kc = ctx.adapter.cluster;
    const all = await ctx.adapter.groups.list(kc === null ? undefined : (g) => kc.coordinator(g) === kc.id);
    return {
      throttleTimeMs: 0,
      errorCode: KafkaErrorCode.NONE,
      groups: all
        .filter((g) => filter.size === 0 || filter.has(g.state.toLowerCase()))
        .filter((g) => types.size === 0 || types.has(g.groupType))
        // Groups the client may not describe are left out, as Kafka does.
        .filter((g) => visible(ctx, 'describe', 'group', g.groupId))
        .map((g) => ({ groupId: g.groupId, protocolType: g.protocolType, groupState: g.state, groupType: g.groupType })),
    };
  } catch (err) {
    ctx.conn.log.warn({ err }, 'list groups failed');
    return { throttleTimeMs: 0, errorCode: kafkaErrorCode(err), groups: [] };
  }
}

export async function handleDeleteGroups(ctx: RequestContext, req: DeleteGroupsRequest): Promise<DeleteGroupsResponse> {
  const results = [];
  for (const groupId of req.groupsNames) {
    let errorCode: number;
    if (!allowed(ctx, 'delete', 'group', groupId)) {
      results.push({ groupId, errorCode: GROUP_DENIED });
      continue;
    }
    const gate = await gated(
      ctx,
      groupId,
      (code) => code,
      () => KafkaErrorCode.NONE as number,
    );
    if (gate !== KafkaErrorCode.NONE) {
      results.push({ groupId, errorCode: gate });
      continue;
    }
    try {
      errorCode = await ctx.adapter.groups.delete(groupId);
      if (errorCode === KafkaErrorCode.NONE) await ctx.adapter.cluster?.deleted(groupId);
    } catch (err) {
      ctx.conn.log.warn({ err, group: groupId }, 'delete group failed');
      errorCode = kafkaErrorCode(err);
    }
    results.push({ groupId, errorCode });
  }
  return { throttleTimeMs: 0, results };
}
