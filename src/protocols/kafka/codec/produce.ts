/**
 * Produce (key 0), versions 0-9; v9 flexible. v1 adds the throttle time, v2 the log append time, v3 the
 * transactional id and RecordBatch v2 (magic 2). Versions 0-2 are decoded because librdkafka decides from them
 * whether a broker takes gzip and snappy at all (its feature table requires Produce v0 for those codecs); their
 * old message sets (magic 0/1) are refused with UNSUPPORTED_FOR_MESSAGE_FORMAT. v5 adds log_start_offset to the
 * response, v8 per-batch record errors and an error message (KIP-467), v9 is flexible, v10 adds the
 * current-leader partition tag and the node-endpoints tag (KIP-951), v11 and v12 add no field (TRANSACTION_ABORTABLE,
 * KIP-890), v13 names topics by id instead of name (KIP-516).
 */
import { ApiKey, type ApiCodec } from './api.js';
import { readTag, ZERO_UUID, type Reader, type TaggedField, type Uuid, type Writer } from './primitives.js';
import {
  readLeaderIdAndEpoch,
  readNodeEndpoints,
  tagValue,
  writeLeaderIdAndEpoch,
  writeNodeEndpoints,
  type LeaderIdAndEpoch,
  type NodeEndpoint,
} from './fetch.js';

const TAG_CURRENT_LEADER = 0;
const TAG_NODE_ENDPOINTS = 0;

export interface ProducePartitionData {
  index: number;
  /** Concatenated record batches, undecoded. */
  records: Buffer | null;
}

export interface ProduceTopicData {
  /** v0-12; "" in v13+. */
  name: string;
  /** v13+; ZERO_UUID before. */
  topicId?: Uuid;
  partitions: ProducePartitionData[];
}

export interface ProduceRequest {
  transactionalId: string | null;
  /** 0: no response; 1: leader; -1: all in-sync replicas. */
  acks: number;
  timeoutMs: number;
  topics: ProduceTopicData[];
}

export interface ProduceRecordError {
  batchIndex: number;
  message: string | null;
}

export interface ProducePartitionResponse {
  index: number;
  errorCode: number;
  baseOffset: number;
  /** -1 unless the topic uses LogAppendTime. */
  logAppendTimeMs: number;
  /** v5+. */
  logStartOffset: number;
  /** v8+. */
  recordErrors: ProduceRecordError[];
  /** v8+. */
  errorMessage: string | null;
  /** v10+ tag 0: the partition's leader, sent with NOT_LEADER_OR_FOLLOWER (KIP-951); null: none. */
  currentLeader?: LeaderIdAndEpoch | null;
}

export interface ProduceTopicResponse {
  /** v0-12. */
  name: string;
  /** v13+. */
  topicId?: Uuid;
  partitions: ProducePartitionResponse[];
}

export interface ProduceResponse {
  topics: ProduceTopicResponse[];
  throttleTimeMs: number;
  /** v10+ tag 0: the brokers the current-leader tags name. */
  nodeEndpoints?: NodeEndpoint[];
}

export const ProduceApi: ApiCodec<ProduceRequest, ProduceResponse> = {
  apiKey: ApiKey.Produce,
  name: 'Produce',
  minVersion: 0,
  maxVersion: 13,
  firstFlexibleVersion: 9,

  decodeRequest(r: Reader, version: number): ProduceRequest {
    const transactionalId = version >= 3 ? r.nullableString() : null;
    const acks = r.int16();
    const timeoutMs = r.int32();
    const topics = r.array((r): ProduceTopicData => {
      const name = version <= 12 ? r.string() : '';
      const topicId = version >= 13 ? r.uuid() : ZERO_UUID;
      const partitions = r.array((r): ProducePartitionData => {
        const index = r.int32();
        const records = r.nullableBytes();
        r.taggedFields();
        return { index, records };
      });
      r.taggedFields();
      return version >= 13 ? { name, topicId, partitions } : { name, partitions };
    });
    r.taggedFields();
    return { transactionalId, acks, timeoutMs, topics };
  },

  encodeRequest(w: Writer, version: number, req: ProduceRequest): void {
    if (version >= 3) w.nullableString(req.transactionalId);
    w.int16(req.acks).int32(req.timeoutMs);
    w.array(req.topics, (w, t) => {
      if (version <= 12) w.string(t.name);
      else w.uuid(t.topicId ?? ZERO_UUID);
      w.array(t.partitions, (w, p) => {
        w.int32(p.index).nullableBytes(p.records);
        w.taggedFields();
      });
      w.taggedFields();
    });
    w.taggedFields();
  },

  encodeResponse(w: Writer, version: number, res: ProduceResponse): void {
    w.array(res.topics, (w, t) => {
      if (version <= 12) w.string(t.name);
      else w.uuid(t.topicId ?? ZERO_UUID);
      w.array(t.partitions, (w, p) => {
        w.int32(p.index).int16(p.errorCode).int64(p.baseOffset);
        if (version >= 2) w.int64(p.logAppendTimeMs);
        if (version >= 5) w.int64(p.logStartOffset);
        if (version >= 8) {
          w.array(p.recordErrors, (w, e) => {
            w.int32(e.batchIndex).nullableString(e.message);
            w.taggedFields();
          });
          w.nullableString(p.errorMessage);
        }
        const l = p.currentLeader;
        w.taggedFields(version >= 10 && l != null ? [tagValue(TAG_CURRENT_LEADER, (w) => writeLeaderIdAndEpoch(w, l))] : []);
      });
      w.taggedFields();
    });
    if (version >= 1) w.int32(res.throttleTimeMs);
    const nodes = res.nodeEndpoints ?? [];
    const tags: TaggedField[] = version >= 10 && nodes.length > 0 ? [tagValue(TAG_NODE_ENDPOINTS, (w) => writeNodeEndpoints(w, nodes))] : [];
    w.taggedFields(tags);
  },

  decodeResponse(r: Reader, version: number): ProduceResponse {
    const topics = r.array((r): ProduceTopicResponse => {
      const name = version <= 12 ? r.string() : '';
      const topicId = version >= 13 ? r.uuid() : ZERO_UUID;
      const partitions = r.array((r): ProducePartitionResponse => {
        const index = r.int32();
        const errorCode = r.int16();
        const baseOffset = r.int64();
        const logAppendTimeMs = version >= 2 ? r.int64() : -1;
        const logStartOffset = version >= 5 ? r.int64() : -1;
        let recordErrors: ProduceRecordError[] = [];
        let errorMessage: string | null = null;
        if (version >= 8) {
          recordErrors = r.array((r) => {
            const e = { batchIndex: r.int32(), message: r.nullableString() };
            r.taggedFields();
            return e;
          });
          errorMessage = r.nullableString();
        }
        const tags = r.taggedFields();
        const currentLeader = version >= 10 ? readTag(tags, TAG_CURRENT_LEADER, true, readLeaderIdAndEpoch) : undefined;
        const p: ProducePartitionResponse = { index, errorCode, baseOffset, logAppendTimeMs, logStartOffset, recordErrors, errorMessage };
        if (currentLeader !== undefined) p.currentLeader = currentLeader;
        return p;
      });
      r.taggedFields();
      return version >= 13 ? { name, topicId, partitions } : { name, partitions };
    });
    const throttleTimeMs = version >= 1 ? r.int32() : 0;
    const tags = r.taggedFields();
    const nodeEndpoints = version >= 10 ? readTag(tags, TAG_NODE_ENDPOINTS, true, readNodeEndpoints) : undefined;
    return { topics, throttleTimeMs, ...(nodeEndpoints !== undefined ? { nodeEndpoints } : {}) };
  },
};
