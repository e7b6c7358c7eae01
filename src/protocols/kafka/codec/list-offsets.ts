/**
 * ListOffsets (key 2), versions 1-11; v6+ flexible. v0 (several "old style" offsets per partition) is not
 * offered. v2 adds isolation level and throttle time; v4 leader epochs (KIP-320); v7 the MAX_TIMESTAMP (-3)
 * query (KIP-734); v8 EARLIEST_LOCAL (-4, KIP-405); v9 LATEST_TIERED (-5, KIP-1005); v10 the request's timeout
 * for remote reads (KIP-1075); v11 EARLIEST_PENDING_UPLOAD (-6, KIP-1023).
 */
import { ApiKey, type ApiCodec } from './api.js';
import type { Reader, Writer } from './primitives.js';

/** Special timestamps of a ListOffsets query. */
export const LATEST_TIMESTAMP = -1;
export const EARLIEST_TIMESTAMP = -2;
/** v7+: the offset of the record with the largest timestamp (KIP-734). */
export const MAX_TIMESTAMP = -3;
/** v8+: the first offset still in the local log (KIP-405). */
export const EARLIEST_LOCAL_TIMESTAMP = -4;
/** v9+: the last offset in tiered (remote) storage (KIP-1005). */
export const LATEST_TIERED_TIMESTAMP = -5;
/** v11+: the first offset not yet uploaded to tiered storage (KIP-1023). */
export const EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6;

export interface ListOffsetsPartition {
  partitionIndex: number;
  /** v4+; -1 otherwise. */
  currentLeaderEpoch: number;
  timestamp: number;
}

export interface ListOffsetsTopic {
  name: string;
  partitions: ListOffsetsPartition[];
}

export interface ListOffsetsRequest {
  replicaId: number;
  /** v2+. */
  isolationLevel: number;
  topics: ListOffsetsTopic[];
  /** v10+: how long a read from remote storage may take; 0 before. */
  timeoutMs?: number;
}

export interface ListOffsetsPartitionResponse {
  partitionIndex: number;
  errorCode: number;
  timestamp: number;
  offset: number;
  /** v4+. */
  leaderEpoch: number;
}

export interface ListOffsetsTopicResponse {
  name: string;
  partitions: ListOffsetsPartitionResponse[];
}

export interface ListOffsetsResponse {
  /** v2+. */
  throttleTimeMs: number;
  topics: ListOffsetsTopicResponse[];
}

export const ListOffsetsApi: ApiCodec<ListOffsetsRequest, ListOffsetsResponse> = {
  apiKey: ApiKey.ListOffsets,
  name: 'ListOffsets',
  minVersion: 1,
  maxVersion: 11,
  firstFlexibleVersion: 6,

  decodeRequest(r: Reader, version: number): ListOffsetsRequest {
    const replicaId = r.int32();
    const isolationLevel = version >= 2 ? r.int8() : 0;
    const topics = r.array((r): ListOffsetsTopic => {
      const name = r.string();
      const partitions = r.array((r): ListOffsetsPartition => {
        const partitionIndex = r.int32();
        const currentLeaderEpoch = version >= 4 ? r.int32() : -1;
        const timestamp = r.int64();
        r.taggedFields();
        return { partitionIndex, currentLeaderEpoch, timestamp };
      });
      r.taggedFields();
      return { name, partitions };
    });
    const timeoutMs = version >= 10 ? r.int32() : 0;
    r.taggedFields();
    return { replicaId, isolationLevel, topics, ...(version >= 10 ? { timeoutMs } : {}) };
  },

  encodeRequest(w: Writer, version: number, req: ListOffsetsRequest): void {
    w.int32(req.replicaId);
    if (version >= 2) w.int8(req.isolationLevel);
    w.array(req.topics, (w, t) => {
      w.string(t.name);
      w.array(t.partitions, (w, p) => {
        w.int32(p.partitionIndex);
        if (version >= 4) w.int32(p.currentLeaderEpoch);
        w.int64(p.timestamp);
        w.taggedFields();
      });
      w.taggedFields();
    });
    if (version >= 10) w.int32(req.timeoutMs ?? 0);
    w.taggedFields();
  },

  encodeResponse(w: Writer, version: number, res: ListOffsetsResponse): void {
    if (version >= 2) w.int32(res.throttleTimeMs);
    w.array(res.topics, (w, t) => {
      w.string(t.name);
      w.array(t.partitions, (w, p) => {
        w.int32(p.partitionIndex).int16(p.errorCode).int64(p.timestamp).int64(p.offset);
        if (version >= 4) w.int32(p.leaderEpoch);
        w.taggedFields();
      });
      w.taggedFields();
    });
    w.taggedFields();
  },

  decodeResponse(r: Reader, version: number): ListOffsetsResponse {
    const throttleTimeMs = version >= 2 ? r.int32() : 0;
    const topics = r.array((r): ListOffsetsTopicResponse => {
      const name = r.string();
      const partitions = r.array((r): ListOffsetsPartitionResponse => {
        const partitionIndex = r.int32();
        const errorCode = r.int16();
        const timestamp = r.int64();
        const offset = r.int64();
        const leaderEpoch = version >= 4 ? r.int32() : -1;
        r.taggedFields();
        return { partitionIndex, errorCode, timestamp, offset, leaderEpoch };
      });
      r.taggedFields();
      return { name, partitions };
    });
    r.taggedFields();
    return { throttleTimeMs, topics };
  },
};
