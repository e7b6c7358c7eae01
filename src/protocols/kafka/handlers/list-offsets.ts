/**
 * ListOffsets: EARLIEST (-2) is the log start offset, LATEST (-1) the high watermark (for READ_COMMITTED the
 * last stable offset: the first offset of the oldest open transaction, KIP-98), MAX_TIMESTAMP (-3, v7, KIP-734) the record
 * with the largest timestamp, and any other timestamp the first record whose timestamp is at least that. As in
 * Kafka, a timestamp past every record answers offset -1 and timestamp -1, and the special queries answer
 * timestamp -1. FlowMQ keeps no tiered storage apart from its log, so EARLIEST_LOCAL (-4, v8+) is the log start offset
 * and LATEST_TIERED (-5, v9+) and EARLIEST_PENDING_UPLOAD (-6, v11+) answer offset -1, as a Kafka broker without
 * remote storage does. A special timestamp of a version that does not have it is INVALID_REQUEST. In a cluster the partition's leader answers, with its leader epoch (see fetch.ts for the errors).
 */
import { decodeBatch, readBatchInfo, type Engine } from '../../../core/index.js';
import {
  EARLIEST_LOCAL_TIMESTAMP,
  EARLIEST_PENDING_UPLOAD_TIMESTAMP,
  EARLIEST_TIMESTAMP,
  KafkaErrorCode,
  LATEST_TIERED_TIMESTAMP,
  LATEST_TIMESTAMP,
  MAX_TIMESTAMP,
  type ListOffsetsPartitionResponse,
  type ListOffsetsRequest,
  type ListOffsetsResponse,
} from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import type { RequestContext } from '../route.js';
import { LEADER_EPOCH } from './metadata.js';
import { allowed } from '../authz.js';

/** Timestamp of the record at `offset`, -1 when it cannot be read. */
async function timestampAt(engine: Engine, stream: string, partition: number, offset: number): Promise<number> {
  const [batch] = await engine.read(stream, partition, offset, 1);
  if (!batch) return -1;
  try {
    for (const r of decodeBatch(batch)) if (r.offset >= offset) return r.timestamp;
  } catch {
    // A codec this broker cannot decompress: the offset is still right, only the timestamp is unknown.
  }
  return -1;
}

/**
 * The record with the largest timestamp (the first of equals). Batch headers carry their max timestamp, so only
 * headers are scanned and a single batch is decoded; still a full scan of the partition, as this query is rare
 * (admin tools).
 */
async function maxTimestamp(engine: Engine, stream: string, partition: number): Promise<{ offset: number; timestamp: number }> {
  const { logStartOffset, highWatermark } = engine.offsets(stream, partition);
  let best: Buffer | null = null;
  let bestTs = -1;
  let pos = logStartOffset;
  while (pos < highWatermark) {
    const batches = await engine.read(stream, partition, pos, 1 << 20);
    if (batches.length === 0) break;
    const before = pos;
    for (const b of batches) {
      const info = readBatchInfo(b);
      if (info.maxTimestamp > bestTs) {
        bestTs = info.maxTimestamp;
        best = b;
      }
      pos = Math.max(pos, info.baseOffset + info.lastOffsetDelta + 1);
    }
    if (pos <= before) break;
  }
  if (best === null) return { offset: -1, timestamp: -1 };
  const info = readBatchInfo(best);
  try {
    for (const r of decodeBatch(best)) if (r.timestamp === bestTs) return { offset: r.offset, timestamp: bestTs };
  } catch {
    // Undecodable codec: the batch's last offset is the best answer available.
  }
  return { offset: info.baseOffset + info.lastOffsetDelta, timestamp: bestTs };
}

async function listPartition(
  ctx: RequestContext,
  topic: string,
  partitionIndex: number,
  timestamp: number,
  version: number,
  currentLeaderEpoch: number,
  readCommitted: boolean,
): Promise<ListOffsetsPartitionResponse> {
  const res: ListOffsetsPartitionResponse = {
    partitionIndex,
    errorCode: KafkaErrorCode.NONE,
    timestamp: -1,
    offset: -1,
    leaderEpoch: -1,
  };
  const { engine } = ctx.adapter;
  const entry = engine.getAnyStream(topic);
  if (!entry || partitionIndex < 0 || partitionIndex >= entry.def.partitions) {
    res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION;
    return res;
  }
  let leaderEpoch = LEADER_EPOCH;
  // Cluster mode: the partition's leader answers, under the leader epoch the client knows.
  const kc = ctx.adapter.cluster;
  if (kc !== null) {
    const served = kc.serve(topic, partitionIndex, currentLeaderEpoch);
    if (served.errorCode !== KafkaErrorCode.NONE) {
      res.errorCode = served.errorCode;
      return res;
    }
    leaderEpoch = served.epoch;
  }
  try {
    const { logStartOffset, highWatermark } = engine.offsets(topic, partitionIndex);
    res.leaderEpoch = leaderEpoch;
    if (timestamp === LATEST_TIMESTAMP)
      res.offset = readCommitted ? ctx.adapter.transactions.partitions.lso(topic, partitionIndex, highWatermark) : highWatermark;
    else if (timestamp === EARLIEST_TIMESTAMP) res.offset = logStartOffset;
    else if (timestamp === MAX_TIMESTAMP && version >= 7) Object.assign(res, await maxTimestamp(engine, topic, partitionIndex));
    else if (timestamp === EARLIEST_LOCAL_TIMESTAMP && version >= 8) res.offset = logStartOffset;
    else if ((timestamp === LATEST_TIERED_TIMESTAMP && version >= 9) || (timestamp === EARLIEST_PENDING_UPLOAD_TIMESTAMP && version >= 11)) {
      // Nothing is tiered: no such offset, and no epoch for it.
      res.offset = -1;
      res.leaderEpoch = -1;
    } else if (timestamp < 0) res.errorCode = KafkaErrorCode.INVALID_REQUEST;
    else {
      const offset = await engine.offsetForTimestamp(topic, partitionIndex, timestamp);
      if (offset < highWatermark) {
        res.offset = offset;
        res.timestamp = await timestampAt(engine, topic, partitionIndex, offset);
      }
    }
  } catch (err) {
    ctx.conn.log.warn({ err, topic, partition: partitionIndex }, 'list offsets failed');
    res.errorCode = kafkaErrorCode(err);
    res.offset = -1;
    res.timestamp = -1;
  }
  return res;
}

export async function handleListOffsets(ctx: RequestContext, req: ListOffsetsRequest): Promise<ListOffsetsResponse> {
  const version = ctx.header.apiVersion;
  const topics = await Promise.all(
    req.topics.map(async (t) => {
      if (!allowed(ctx, 'subscribe', 'stream', t.name)) {
        return {
          name: t.name,
          partitions: t.partitions.map((p) => ({
            partitionIndex: p.partitionIndex,
            errorCode: KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED,
            timestamp: -1,
            offset: -1,
            leaderEpoch: -1,
          })),
        };
      }
      return {
        name: t.name,
        partitions: await Promise.all(
          t.partitions.map((p) => listPartition(ctx, t.name, p.partitionIndex, p.timestamp, version, p.currentLeaderEpoch, req.isolationLevel === 1)),
        ),
      };
    }),
  );
  return { throttleTimeMs: 0, topics };
}
