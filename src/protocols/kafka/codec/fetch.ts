/**
 * Fetch (key 1), versions 4-18; v12+ flexible. Version notes (from the protocol's message definitions): v4 is the
 * first version whose responses may carry RecordBatch v2 (FlowMQ's storage format, served without re-encoding),
 * with isolation level and last stable offset; v5 log start offsets; v7 fetch sessions (KIP-227); v9 current
 * leader epoch (KIP-320); v11 rack id and preferred read replica (KIP-392); v12 last fetched epoch, the cluster id
 * tag and the diverging-epoch / current-leader / snapshot-id response tags (KIP-595); v13 topic ids instead of
 * names (KIP-516); v14 adds no field (OFFSET_MOVED_TO_TIERED_STORAGE may be answered); v15 the replica-state tag
 * replacing the replica id (KIP-903); v16 the node-endpoints response tag (KIP-951); v17 the replica-directory-id
 * partition tag (KIP-853); v18 the high-watermark partition tag (KIP-1166).
 */
import { ApiKey, type ApiCodec } from './api.js';
import { readTag, Writer, ZERO_UUID, type Reader, type TaggedField, type Uuid } from './primitives.js';

export interface FetchPartition {
  partition: number;
  /** v9+; -1 otherwise. */
  currentLeaderEpoch: number;
  fetchOffset: number;
  /** v12+; -1 otherwise. */
  lastFetchedEpoch: number;
  /** v5+ (followers only); -1 otherwise. */
  logStartOffset: number;
  partitionMaxBytes: number;
  /** v17+ tag 0 (followers' log directory); ZERO_UUID otherwise. */
  replicaDirectoryId?: Uuid;
  /** v18+ tag 1 (followers' high watermark); INT64 max ("unknown") otherwise. */
  highWatermark?: bigint;
}

export interface FetchTopic {
  /** v0-12; "" in v13+. */
  topic: string;
  /** v13+; ZERO_UUID before. */
  topicId?: Uuid;
  partitions: FetchPartition[];
}

export interface ForgottenTopic {
  /** v7-12; "" in v13+. */
  topic: string;
  /** v13+. */
  topicId?: Uuid;
  partitions: number[];
}

/** v15+ tag 1: who sends the fetch (a follower replica's id and broker epoch; -1 for consumers). */
export interface ReplicaState {
  replicaId: number;
  replicaEpoch: number;
}

export interface FetchRequest {
  /** v0-14 field, v15+ ReplicaState's (tag 1); -1 for consumers. */
  replicaId: number;
  /** v15+ tag 1; -1 when absent (consumers). */
  replicaEpoch?: number;
  maxWaitMs: number;
  minBytes: number;
  maxBytes: number;
  /** 0 READ_UNCOMMITTED, 1 READ_COMMITTED. */
  isolationLevel: number;
  /** v7+ (KIP-227): 0 and epoch -1 (or 0) for a full, sessionless fetch. */
  sessionId: number;
  sessionEpoch: number;
  topics: FetchTopic[];
  /** v7+. */
  forgottenTopics: ForgottenTopic[];
  /** v11+. */
  rackId: string;
  /** v12+ tag 0. */
  clusterId: string | null;
}

export interface AbortedTransaction {
  producerId: bigint;
  firstOffset: number;
}

export interface FetchPartitionResponse {
  partitionIndex: number;
  errorCode: number;
  highWatermark: number;
  lastStableOffset: number;
  logStartOffset: number;
  /** Null when the isolation level is READ_UNCOMMITTED. */
  abortedTransactions: AbortedTransaction[] | null;
  /** v11+; -1 = none. */
  preferredReadReplica: number;
  /** v12+ tag 1 (KIP-951): the partition's leader as this broker knows it, sent with a leader error; null: none. */
  currentLeader?: LeaderIdAndEpoch | null;
  /** v12+ tag 0 (followers' log divergence): null, never sent by FlowMQ (it has no followers). */
  divergingEpoch?: { epoch: number; endOffset: number } | null;
  /** Record batches as chunks (attached to the response without copying); null for none. */
  records: Buffer[] | null;
}

export interface LeaderIdAndEpoch {
  leaderId: number;
  leaderEpoch: number;
}

export interface FetchTopicResponse {
  /** v0-12. */
  topic: string;
  /** v13+. */
  topicId?: Uuid;
  partitions: FetchPartitionResponse[];
}

/** A broker named by a response's node-endpoints tag (Produce v10+, Fetch v16+; KIP-951). */
export interface NodeEndpoint {
  nodeId: number;
  host: string;
  port: number;
  rack: string | null;
}

export interface FetchResponse {
  throttleTimeMs: number;
  /** v7+: top-level error (fetch session errors). */
  errorCode: number;
  /** v7+: 0 = no session. */
  sessionId: number;
  responses: FetchTopicResponse[];
  /** v16+ tag 0: the brokers named by the partitions' current leaders. */
  nodeEndpoints?: NodeEndpoint[];
}

/** INT64 max: the HighWatermark tag's default ("not known"). */
export const HIGH_WATERMARK_UNKNOWN = 0x7fffffffffffffffn;

const TAG_CLUSTER_ID = 0;
const TAG_REPLICA_STATE = 1;
const TAG_REPLICA_DIRECTORY_ID = 0;
const TAG_HIGH_WATERMARK = 1;
const TAG_DIVERGING_EPOCH = 0;
const TAG_CURRENT_LEADER = 1;
const TAG_NODE_ENDPOINTS = 0;

/** A tagged field's value, written by `write` in the flexible encodings. */
export function tagValue(tag: number, write: (w: Writer) => void): TaggedField {
  const w = new Writer(64);
  w.flexible = true;
  write(w);
  return { tag, value: w.toBuffer() };
}

export function writeNodeEndpoints(w: Writer, nodes: readonly NodeEndpoint[]): void {
  w.array(nodes, (w, n) => {
    w.int32(n.nodeId).string(n.host).int32(n.port).nullableString(n.rack);
    w.taggedFields();
  });
}

export function readNodeEndpoints(r: Reader): NodeEndpoint[] {
  return r.array((r): NodeEndpoint => {
    const n = { nodeId: r.int32(), host: r.string(), port: r.int32(), rack: r.nullableString() };
    r.taggedFields();
    return n;
  });
}

export function writeLeaderIdAndEpoch(w: Writer, l: LeaderIdAndEpoch): void {
  w.int32(l.leaderId).int32(l.leaderEpoch);
  w.taggedFields();
}

export function readLeaderIdAndEpoch(r: Reader): LeaderIdAndEpoch {
  const l = { leaderId: r.int32(), leaderEpoch: r.int32() };
  r.taggedFields();
  return l;
}

export const FetchApi: ApiCodec<FetchRequest, FetchResponse> = {
  apiKey: ApiKey.Fetch,
  name: 'Fetch',
  minVersion: 4,
  maxVersion: 18,
  firstFlexibleVersion: 12,

  decodeRequest(r: Reader, version: number): FetchRequest {
    let replicaId = version <= 14 ? r.int32() : -1;
    const maxWaitMs = r.int32();
    const minBytes = r.int32();
    const maxBytes = r.int32();
    const isolationLevel = r.int8();
    const sessionId = version >= 7 ? r.int32() : 0;
    const sessionEpoch = version >= 7 ? r.int32() : -1;
    const topics = r.array((r): FetchTopic => {
      const topic = version <= 12 ? r.string() : '';
      const topicId = version >= 13 ? r.uuid() : ZERO_UUID;
      const partitions = r.array((r): FetchPartition => {
        const partition = r.int32();
        const currentLeaderEpoch = version >= 9 ? r.int32() : -1;
        const fetchOffset = r.int64();
        const lastFetchedEpoch = version >= 12 ? r.int32() : -1;
        const logStartOffset = version >= 5 ? r.int64() : -1;
        const partitionMaxBytes = r.int32();
        const tags = r.taggedFields();
        const replicaDirectoryId = (version >= 17 ? readTag(tags, TAG_REPLICA_DIRECTORY_ID, true, (r) => r.uuid()) : undefined) ?? ZERO_UUID;
        const highWatermark = (version >= 18 ? readTag(tags, TAG_HIGH_WATERMARK, true, (r) => r.bigint64()) : undefined) ?? HIGH_WATERMARK_UNKNOWN;
        const p: FetchPartition = { partition, currentLeaderEpoch, fetchOffset, lastFetchedEpoch, logStartOffset, partitionMaxBytes };
        if (version >= 17) p.replicaDirectoryId = replicaDirectoryId;
        if (version >= 18) p.highWatermark = highWatermark;
        return p;
      });
      r.taggedFields();
      return version >= 13 ? { topic, topicId, partitions } : { topic, partitions };
    });
    const forgottenTopics =
      version >= 7
        ? r.array((r): ForgottenTopic => {
            const topic = version <= 12 ? r.string() : '';
            const topicId = version >= 13 ? r.uuid() : ZERO_UUID;
            const partitions = r.array((r) => r.int32());
            r.taggedFields();
            return version >= 13 ? { topic, topicId, partitions } : { topic, partitions };
          })
        : [];
    const rackId = version >= 11 ? r.string() : '';
    const tags = r.taggedFields();
    const clusterId = readTag(tags, TAG_CLUSTER_ID, true, (r) => r.compactNullableString()) ?? null;
    let replicaEpoch = -1;
    if (version >= 15) {
      const state = readTag(tags, TAG_REPLICA_STATE, true, (r): ReplicaState => {
        const s = { replicaId: r.int32(), replicaEpoch: r.int64() };
        r.taggedFields();
        return s;
      });
      if (state) ({ replicaId, replicaEpoch } = state);
    }
    return {
      replicaId,
      ...(version >= 15 ? { replicaEpoch } : {}),
      maxWaitMs,
      minBytes,
      maxBytes,
      isolationLevel,
      sessionId,
      sessionEpoch,
      topics,
      forgottenTopics,
      rackId,
      clusterId,
    };
  },

  encodeRequest(w: Writer, version: number, req: FetchRequest): void {
    if (version <= 14) w.int32(req.replicaId);
    w.int32(req.maxWaitMs).int32(req.minBytes).int32(req.maxBytes).int8(req.isolationLevel);
    if (version >= 7) w.int32(req.sessionId).int32(req.sessionEpoch);
    w.array(req.topics, (w, t) => {
      if (version <= 12) w.string(t.topic);
      else w.uuid(t.topicId ?? ZERO_UUID);
      w.array(t.partitions, (w, p) => {
        w.int32(p.partition);
        if (version >= 9) w.int32(p.currentLeaderEpoch);
        w.int64(p.fetchOffset);
        if (version >= 12) w.int32(p.lastFetchedEpoch);
        if (version >= 5) w.int64(p.logStartOffset);
        w.int32(p.partitionMaxBytes);
        const tags: TaggedField[] = [];
        const dir = p.replicaDirectoryId;
        if (version >= 17 && dir !== undefined && !dir.equals(ZERO_UUID)) tags.push(tagValue(TAG_REPLICA_DIRECTORY_ID, (w) => w.uuid(dir)));
        const hw = p.highWatermark;
        if (version >= 18 && hw !== undefined && hw !== HIGH_WATERMARK_UNKNOWN) tags.push(tagValue(TAG_HIGH_WATERMARK, (w) => w.int64(hw)));
        w.taggedFields(tags);
      });
      w.taggedFields();
    });
    if (version >= 7) {
      w.array(req.forgottenTopics, (w, t) => {
        if (version <= 12) w.string(t.topic);
        else w.uuid(t.topicId ?? ZERO_UUID);
        w.array(t.partitions, (w, p) => {
          w.int32(p);
        });
        w.taggedFields();
      });
    }
    if (version >= 11) w.string(req.rackId);
    const tags: TaggedField[] = [];
    if (version >= 12 && req.clusterId !== null) tags.push(tagValue(TAG_CLUSTER_ID, (w) => w.compactNullableString(req.clusterId)));
    const replicaEpoch = req.replicaEpoch ?? -1;
    if (version >= 15 && (req.replicaId !== -1 || replicaEpoch !== -1)) {
      tags.push(tagValue(TAG_REPLICA_STATE, (w) => w.int32(req.replicaId).int64(replicaEpoch).taggedFields()));
    }
    w.taggedFields(tags);
  },

  encodeResponse(w: Writer, version: number, res: FetchResponse): void {
    w.int32(res.throttleTimeMs);
    if (version >= 7) w.int16(res.errorCode).int32(res.sessionId);
    w.array(res.responses, (w, t) => {
      if (version <= 12) w.string(t.topic);
      else w.uuid(t.topicId ?? ZERO_UUID);
      w.array(t.partitions, (w, p) => {
        w.int32(p.partitionIndex).int16(p.errorCode).int64(p.highWatermark).int64(p.lastStableOffset);
        if (version >= 5) w.int64(p.logStartOffset);
        w.nullableArray(p.abortedTransactions, (w, a) => {
          w.int64(a.producerId).int64(a.firstOffset);
          w.taggedFields();
        });
        if (version >= 11) w.int32(p.preferredReadReplica);
        w.records(p.records);
        const tags: TaggedField[] = [];
        const d = p.divergingEpoch;
        if (version >= 12 && d != null) tags.push(tagValue(TAG_DIVERGING_EPOCH, (w) => w.int32(d.epoch).int64(d.endOffset).taggedFields()));
        const l = p.currentLeader;
        if (version >= 12 && l != null) tags.push(tagValue(TAG_CURRENT_LEADER, (w) => writeLeaderIdAndEpoch(w, l)));
        // The snapshot-id tag (2) only concerns KRaft followers.
        w.taggedFields(tags);
      });
      w.taggedFields();
    });
    const tags: TaggedField[] = [];
    const nodes = res.nodeEndpoints ?? [];
    if (version >= 16 && nodes.length > 0) tags.push(tagValue(TAG_NODE_ENDPOINTS, (w) => writeNodeEndpoints(w, nodes)));
    w.taggedFields(tags);
  },

  decodeResponse(r: Reader, version: number): FetchResponse {
    const throttleTimeMs = r.int32();
    const errorCode = version >= 7 ? r.int16() : 0;
    const sessionId = version >= 7 ? r.int32() : 0;
    const responses = r.array((r): FetchTopicResponse => {
      const topic = version <= 12 ? r.string() : '';
      const topicId = version >= 13 ? r.uuid() : ZERO_UUID;
      const partitions = r.array((r): FetchPartitionResponse => {
        const partitionIndex = r.int32();
        const errorCode = r.int16();
        const highWatermark = r.int64();
        const lastStableOffset = r.int64();
        const logStartOffset = version >= 5 ? r.int64() : -1;
        const abortedTransactions = r.nullableArray((r): AbortedTransaction => {
          const a = { producerId: r.bigint64(), firstOffset: r.int64() };
          r.taggedFields();
          return a;
        });
        const preferredReadReplica = version >= 11 ? r.int32() : -1;
        const raw = r.nullableBytes();
        const tags = r.taggedFields();
        const divergingEpoch =
          readTag(tags, TAG_DIVERGING_EPOCH, true, (r) => {
            const d = { epoch: r.int32(), endOffset: r.int64() };
            r.taggedFields();
            return d;
          }) ?? null;
        const currentLeader = readTag(tags, TAG_CURRENT_LEADER, true, readLeaderIdAndEpoch) ?? null;
        const p: FetchPartitionResponse = {
          partitionIndex,
          errorCode,
          highWatermark,
          lastStableOffset,
          logStartOffset,
          abortedTransactions,
          preferredReadReplica,
          records: raw === null ? null : [raw],
        };
        // Tags are set only when sent.
        if (currentLeader !== null) p.currentLeader = currentLeader;
        if (divergingEpoch !== null) p.divergingEpoch = divergingEpoch;
        return p;
      });
      r.taggedFields();
      return version >= 13 ? { topic, topicId, partitions } : { topic, partitions };
    });
    const tags = r.taggedFields();
    const nodeEndpoints = version >= 16 ? readTag(tags, TAG_NODE_ENDPOINTS, true, readNodeEndpoints) : undefined;
    return { throttleTimeMs, errorCode, sessionId, responses, ...(nodeEndpoints !== undefined ? { nodeEndpoints } : {}) };
  },
};
