/**
 * Fetch (key 1), versions 4-12; v12 flexible. v4 is the first version whose responses may carry RecordBatch v2
 * (FlowMQ's storage format, served without re-encoding), with isolation level and last stable offset; v5 adds
 * log start offsets; v7 fetch sessions (KIP-227); v9 current leader epoch (KIP-320); v11 rack id and preferred
 * read replica (KIP-392); v12 last fetched epoch and the cluster id tag (KIP-595). v13 replaces topic names by
 * topic ids and is not offered.
 */
import { ApiKey, type ApiCodec } from './api.js';
import { readTag, Writer, type Reader, type TaggedField } from './primitives.js';

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
}

export interface FetchTopic {
  topic: string;
  partitions: FetchPartition[];
}

export interface ForgottenTopic {
  topic: string;
  partitions: number[];
}

export interface FetchRequest {
  /** -1 for consumers. */
  replicaId: number;
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
  /** Record batches as chunks (attached to the response without copying); null for none. */
  records: Buffer[] | null;
}

export interface FetchTopicResponse {
  topic: string;
  partitions: FetchPartitionResponse[];
}

export interface FetchResponse {
  throttleTimeMs: number;
  /** v7+: top-level error (fetch session errors). */
  errorCode: number;
  /** v7+: 0 = no session. */
  sessionId: number;
  responses: FetchTopicResponse[];
}

const TAG_CLUSTER_ID = 0;

export const FetchApi: ApiCodec<FetchRequest, FetchResponse> = {
  apiKey: ApiKey.Fetch,
  name: 'Fetch',
  minVersion: 4,
  maxVersion: 12,
  firstFlexibleVersion: 12,

  decodeRequest(r: Reader, version: number): FetchRequest {
    const replicaId = r.int32();
    const maxWaitMs = r.int32();
    const minBytes = r.int32();
    const maxBytes = r.int32();
    const isolationLevel = r.int8();
    const sessionId = version >= 7 ? r.int32() : 0;
    const sessionEpoch = version >= 7 ? r.int32() : -1;
    const topics = r.array((r): FetchTopic => {
      const topic = r.string();
      const partitions = r.array((r): FetchPartition => {
        const partition = r.int32();
        const currentLeaderEpoch = version >= 9 ? r.int32() : -1;
        const fetchOffset = r.int64();
        const lastFetchedEpoch = version >= 12 ? r.int32() : -1;
        const logStartOffset = version >= 5 ? r.int64() : -1;
        const partitionMaxBytes = r.int32();
        r.taggedFields();
        return { partition, currentLeaderEpoch, fetchOffset, lastFetchedEpoch, logStartOffset, partitionMaxBytes };
      });
      r.taggedFields();
      return { topic, partitions };
    });
    const forgottenTopics =
      version >= 7
        ? r.array((r): ForgottenTopic => {
            const topic = r.string();
            const partitions = r.array((r) => r.int32());
            r.taggedFields();
            return { topic, partitions };
          })
        : [];
    const rackId = version >= 11 ? r.string() : '';
    const tags = r.taggedFields();
    const clusterId = readTag(tags, TAG_CLUSTER_ID, true, (r) => r.compactNullableString()) ?? null;
    return {
      replicaId,
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
    w.int32(req.replicaId).int32(req.maxWaitMs).int32(req.minBytes).int32(req.maxBytes).int8(req.isolationLevel);
    if (version >= 7) w.int32(req.sessionId).int32(req.sessionEpoch);
    w.array(req.topics, (w, t) => {
      w.string(t.topic);
      w.array(t.partitions, (w, p) => {
        w.int32(p.partition);
        if (version >= 9) w.int32(p.currentLeaderEpoch);
        w.int64(p.fetchOffset);
        if (version >= 12) w.int32(p.lastFetchedEpoch);
        if (version >= 5) w.int64(p.logStartOffset);
        w.int32(p.partitionMaxBytes);
        w.taggedFields();
      });
      w.taggedFields();
    });
    if (version >= 7) {
      w.array(req.forgottenTopics, (w, t) => {
        w.string(t.topic);
        w.array(t.partitions, (w, p) => {
          w.int32(p);
        });
        w.taggedFields();
      });
    }
    if (version >= 11) w.string(req.rackId);
    const tags: TaggedField[] = [];
    if (version >= 12 && req.clusterId !== null) {
      tags.push({ tag: TAG_CLUSTER_ID, value: new Writer(64).compactNullableString(req.clusterId).toBuffer() });
    }
    w.taggedFields(tags);
  },

  encodeResponse(w: Writer, version: number, res: FetchResponse): void {
    w.int32(res.throttleTimeMs);
    if (version >= 7) w.int16(res.errorCode).int32(res.sessionId);
    w.array(res.responses, (w, t) => {
      w.string(t.topic);
      w.array(t.partitions, (w, p) => {
        w.int32(p.partitionIndex).int16(p.errorCode).int64(p.highWatermark).int64(p.lastStableOffset);
        if (version >= 5) w.int64(p.logStartOffset);
        w.nullableArray(p.abortedTransactions, (w, a) => {
          w.int64(a.producerId).int64(a.firstOffset);
          w.taggedFields();
        });
        if (version >= 11) w.int32(p.preferredReadReplica);
        w.records(p.records);
        // v12 tags (diverging epoch, current leader, snapshot id) only concern followers and leader changes.
        w.taggedFields();
      });
      w.taggedFields();
    });
    w.taggedFields();
  },

  decodeResponse(r: Reader, version: number): FetchResponse {
    const throttleTimeMs = r.int32();
    const errorCode = version >= 7 ? r.int16() : 0;
    const sessionId = version >= 7 ? r.int32() : 0;
    const responses = r.array((r): FetchTopicResponse => {
      const topic = r.string();
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
        r.taggedFields();
        return {
          partitionIndex,
          errorCode,
          highWatermark,
          lastStableOffset,
          logStartOffset,
          abortedTransactions,
          preferredReadReplica,
          records: raw === null ? null : [raw],
        };
      });
      r.taggedFields();
      return { topic, partitions };
    });
    r.taggedFields();
    return { throttleTimeMs, errorCode, sessionId, responses };
  },
};
