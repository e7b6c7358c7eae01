/**
 * Produce (key 0), versions 0-9; v9 flexible. v1 adds the throttle time, v2 the log append time, v3 the
 * transactional id and RecordBatch v2 (magic 2). Versions 0-2 are decoded because librdkafka decides from them
 * whether a broker takes gzip and snappy at all (its feature table requires Produce v0 for those codecs); their
 * old message sets (magic 0/1) are refused with UNSUPPORTED_FOR_MESSAGE_FORMAT. v5 adds log_start_offset to the
 * response, v8 per-batch record errors and an error message (KIP-467).
 */
import { ApiKey, type ApiCodec } from './api.js';
import type { Reader, Writer } from './primitives.js';

export interface ProducePartitionData {
  index: number;
  /** Concatenated record batches, undecoded. */
  records: Buffer | null;
}

export interface ProduceTopicData {
  name: string;
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
}

export interface ProduceTopicResponse {
  name: string;
  partitions: ProducePartitionResponse[];
}

export interface ProduceResponse {
  topics: ProduceTopicResponse[];
  throttleTimeMs: number;
}

export const ProduceApi: ApiCodec<ProduceRequest, ProduceResponse> = {
  apiKey: ApiKey.Produce,
  name: 'Produce',
  minVersion: 0,
  maxVersion: 9,
  firstFlexibleVersion: 9,

  decodeRequest(r: Reader, version: number): ProduceRequest {
    const transactionalId = version >= 3 ? r.nullableString() : null;
    const acks = r.int16();
    const timeoutMs = r.int32();
    const topics = r.array((r): ProduceTopicData => {
      const name = r.string();
      const partitions = r.array((r): ProducePartitionData => {
        const index = r.int32();
        const records = r.nullableBytes();
        r.taggedFields();
        return { index, records };
      });
      r.taggedFields();
      return { name, partitions };
    });
    r.taggedFields();
    return { transactionalId, acks, timeoutMs, topics };
  },

  encodeRequest(w: Writer, version: number, req: ProduceRequest): void {
    if (version >= 3) w.nullableString(req.transactionalId);
    w.int16(req.acks).int32(req.timeoutMs);
    w.array(req.topics, (w, t) => {
      w.string(t.name);
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
      w.string(t.name);
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
        w.taggedFields();
      });
      w.taggedFields();
    });
    if (version >= 1) w.int32(res.throttleTimeMs);
    w.taggedFields();
  },

  decodeResponse(r: Reader, version: number): ProduceResponse {
    const topics = r.array((r): ProduceTopicResponse => {
      const name = r.string();
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
        r.taggedFields();
        return { index, errorCode, baseOffset, logAppendTimeMs, logStartOffset, recordErrors, errorMessage };
      });
      r.taggedFields();
      return { name, partitions };
    });
    const throttleTimeMs = version >= 1 ? r.int32() : 0;
    r.taggedFields();
    return { topics, throttleTimeMs };
  },
};
