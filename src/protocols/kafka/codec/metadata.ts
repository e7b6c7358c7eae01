/**
 * Metadata (key 3), versions 0-13; v9+ flexible. Version notes (from the protocol's message definitions):
 * v1 adds racks, controller id, is_internal and makes a null topic list mean "all topics" (in v0 an empty list
 * does); v2 cluster id; v3 throttle time; v4 allow_auto_topic_creation; v5 offline replicas; v7 leader epoch;
 * v8 authorized operations; v10 topic ids (KIP-516); v11 drops cluster authorized operations (KIP-700);
 * v12 allows a null topic name (lookup by id) in responses too; v13 a top-level error code (KIP-1102).
 */
import { ApiKey, type ApiCodec } from './api.js';
import { ZERO_UUID, type Reader, type Uuid, type Writer } from './primitives.js';

export interface MetadataRequestTopic {
  /** v10+; ZERO_UUID otherwise. */
  topicId: Uuid;
  /** Null only in v10+ (lookup by id). */
  name: string | null;
}

export interface MetadataRequest {
  /** Null means every topic (v0 encodes that as an empty list). */
  topics: MetadataRequestTopic[] | null;
  /** v4+; true in earlier versions. */
  allowAutoTopicCreation: boolean;
  /** v8-10. */
  includeClusterAuthorizedOperations: boolean;
  /** v8+. */
  includeTopicAuthorizedOperations: boolean;
}

export interface MetadataBroker {
  nodeId: number;
  host: string;
  port: number;
  rack: string | null;
}

export interface MetadataPartition {
  errorCode: number;
  partitionIndex: number;
  leaderId: number;
  /** v7+. */
  leaderEpoch: number;
  replicaNodes: number[];
  isrNodes: number[];
  /** v5+. */
  offlineReplicas: number[];
}

export interface MetadataTopic {
  errorCode: number;
  /** Null only in v12+. */
  name: string | null;
  /** v10+. */
  topicId: Uuid;
  isInternal: boolean;
  partitions: MetadataPartition[];
  /** v8+; INT32_MIN means "not requested". */
  topicAuthorizedOperations: number;
}

export interface MetadataResponse {
  throttleTimeMs: number;
  brokers: MetadataBroker[];
  clusterId: string | null;
  controllerId: number;
  topics: MetadataTopic[];
  /** v8-10. */
  clusterAuthorizedOperations: number;
  /** v13+: an error of the whole request (REBOOTSTRAP_REQUIRED, KIP-1102); 0 otherwise. */
  errorCode?: number;
}

/** "Authorized operations not requested" (the protocol's default for the authorized-operations bitfields). */
export const AUTHORIZED_OPERATIONS_OMITTED = -2147483648;

const int32 = (w: Writer, v: number): void => {
  w.int32(v);
};
const readInt32 = (r: Reader): number => r.int32();

export const MetadataApi: ApiCodec<MetadataRequest, MetadataResponse> = {
  apiKey: ApiKey.Metadata,
  name: 'Metadata',
  minVersion: 0,
  maxVersion: 13,
  firstFlexibleVersion: 9,

  decodeRequest(r: Reader, version: number): MetadataRequest {
    const readTopic = (r: Reader): MetadataRequestTopic => {
      const topicId = version >= 10 ? r.uuid() : ZERO_UUID;
      const name = version >= 10 ? r.nullableString() : r.string();
      r.taggedFields();
      return { topicId, name };
    };
    let topics: MetadataRequestTopic[] | null;
    if (version === 0) {
      topics = r.array(readTopic);
      if (topics.length === 0) topics = null;
    } else topics = r.nullableArray(readTopic);
    const allowAutoTopicCreation = version >= 4 ? r.bool() : true;
    const includeClusterAuthorizedOperations = version >= 8 && version <= 10 ? r.bool() : false;
    const includeTopicAuthorizedOperations = version >= 8 ? r.bool() : false;
    r.taggedFields();
    return { topics, allowAutoTopicCreation, includeClusterAuthorizedOperations, includeTopicAuthorizedOperations };
  },

  encodeRequest(w: Writer, version: number, req: MetadataRequest): void {
    const writeTopic = (w: Writer, t: MetadataRequestTopic): void => {
      if (version >= 10) w.uuid(t.topicId).nullableString(t.name);
      else w.string(t.name ?? '');
      w.taggedFields();
    };
    if (version === 0) w.array(req.topics ?? [], writeTopic);
    else w.nullableArray(req.topics, writeTopic);
    if (version >= 4) w.bool(req.allowAutoTopicCreation);
    if (version >= 8 && version <= 10) w.bool(req.includeClusterAuthorizedOperations);
    if (version >= 8) w.bool(req.includeTopicAuthorizedOperations);
    w.taggedFields();
  },

  encodeResponse(w: Writer, version: number, res: MetadataResponse): void {
    if (version >= 3) w.int32(res.throttleTimeMs);
    w.array(res.brokers, (w, b) => {
      w.int32(b.nodeId).string(b.host).int32(b.port);
      if (version >= 1) w.nullableString(b.rack);
      w.taggedFields();
    });
    if (version >= 2) w.nullableString(res.clusterId);
    if (version >= 1) w.int32(res.controllerId);
    w.array(res.topics, (w, t) => {
      w.int16(t.errorCode);
      if (version >= 12) w.nullableString(t.name);
      else w.string(t.name ?? '');
      if (version >= 10) w.uuid(t.topicId);
      if (version >= 1) w.bool(t.isInternal);
      w.array(t.partitions, (w, p) => {
        w.int16(p.errorCode).int32(p.partitionIndex).int32(p.leaderId);
        if (version >= 7) w.int32(p.leaderEpoch);
        w.array(p.replicaNodes, int32);
        w.array(p.isrNodes, int32);
        if (version >= 5) w.array(p.offlineReplicas, int32);
        w.taggedFields();
      });
      if (version >= 8) w.int32(t.topicAuthorizedOperations);
      w.taggedFields();
    });
    if (version >= 8 && version <= 10) w.int32(res.clusterAuthorizedOperations);
    if (version >= 13) w.int16(res.errorCode ?? 0);
    w.taggedFields();
  },

  decodeResponse(r: Reader, version: number): MetadataResponse {
    const throttleTimeMs = version >= 3 ? r.int32() : 0;
    const brokers = r.array((r): MetadataBroker => {
      const nodeId = r.int32();
      const host = r.string();
      const port = r.int32();
      const rack = version >= 1 ? r.nullableString() : null;
      r.taggedFields();
      return { nodeId, host, port, rack };
    });
    const clusterId = version >= 2 ? r.nullableString() : null;
    const controllerId = version >= 1 ? r.int32() : -1;
    const topics = r.array((r): MetadataTopic => {
      const errorCode = r.int16();
      const name = version >= 12 ? r.nullableString() : r.string();
      const topicId = version >= 10 ? r.uuid() : ZERO_UUID;
      const isInternal = version >= 1 ? r.bool() : false;
      const partitions = r.array((r): MetadataPartition => {
        const errorCode = r.int16();
        const partitionIndex = r.int32();
        const leaderId = r.int32();
        const leaderEpoch = version >= 7 ? r.int32() : -1;
        const replicaNodes = r.array(readInt32);
        const isrNodes = r.array(readInt32);
        const offlineReplicas = version >= 5 ? r.array(readInt32) : [];
        r.taggedFields();
        return { errorCode, partitionIndex, leaderId, leaderEpoch, replicaNodes, isrNodes, offlineReplicas };
      });
      const topicAuthorizedOperations = version >= 8 ? r.int32() : AUTHORIZED_OPERATIONS_OMITTED;
      r.taggedFields();
      return { errorCode, name, topicId, isInternal, partitions, topicAuthorizedOperations };
    });
    const clusterAuthorizedOperations = version >= 8 && version <= 10 ? r.int32() : AUTHORIZED_OPERATIONS_OMITTED;
    const errorCode = version >= 13 ? r.int16() : 0;
    r.taggedFields();
    return { throttleTimeMs, brokers, clusterId, controllerId, topics, clusterAuthorizedOperations, ...(version >= 13 ? { errorCode } : {}) };
  },
};
