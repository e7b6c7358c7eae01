/**
 * Fetch: stored batches are served as they are (they are RecordBatch v2 with their real base offsets), attached
 * to the response without copying.
 *
 * - Offsets outside [logStartOffset, highWatermark] answer OFFSET_OUT_OF_RANGE; fetchOffset == highWatermark is
 *   valid and returns no records (the consumer is caught up).
 * - Long polling: while fewer than min_bytes are available and max_wait_ms has not passed, wait for any of the
 *   requested partitions to grow, then read again.
 * - max_bytes bounds the response roughly, as in Kafka (KIP-74): the first batch is always returned even if it
 *   is larger, so a consumer can always make progress.
 * - Fetch sessions (KIP-227): every fetch is treated as a full fetch and answered with session id 0, which tells
 *   the client no session was created, so it keeps sending full fetches. An incremental fetch naming a session
 *   (which this broker never handed out) gets FETCH_SESSION_ID_NOT_FOUND.
 * - Transactions are not supported, so the last stable offset is the high watermark and nothing is aborted.
 * - In a cluster only the partition's leader (its owner) serves it: NOT_LEADER_OR_FOLLOWER elsewhere, and a
 *   current_leader_epoch other than the leader's is FENCED_LEADER_EPOCH (older) or UNKNOWN_LEADER_EPOCH (newer).
 */
import {
  KafkaErrorCode,
  type FetchPartitionResponse,
  type FetchRequest,
  type FetchResponse,
} from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import type { RequestContext } from '../route.js';
import { readBatchInfo } from '../../../core/index.js';
import { allowed } from '../authz.js';

const READ_COMMITTED = 1;

interface Waitable {
  stream: string;
  partition: number;
  /** Wake up when the high watermark passes this offset (the high watermark seen at the last read). */
  offset: number;
}

interface ReadResult {
  responses: FetchResponse['responses'];
  bytes: number;
  waitables: Waitable[];
  /** A partition answered with an error: respond at once, as Kafka does, so the client can react. */
  errors: boolean;
}

function partitionResponse(partitionIndex: number, errorCode: number, readCommitted: boolean): FetchPartitionResponse {
  return {
    partitionIndex,
    errorCode,
    highWatermark: -1,
    lastStableOffset: -1,
    logStartOffset: -1,
    // Kafka sends null for READ_UNCOMMITTED and a (here always empty) list for READ_COMMITTED.
    abortedTransactions: readCommitted ? [] : null,
    preferredReadReplica: -1,
    records: [],
  };
}

async function readAll(ctx: RequestContext, req: FetchRequest): Promise<ReadResult> {
  const { engine, cluster: kc } = ctx.adapter;
  const readCommitted = req.isolationLevel === READ_COMMITTED;
  const maxBytes = req.maxBytes > 0 ? req.maxBytes : 1;
  let bytes = 0;
  const waitables: Waitable[] = [];
  const responses: FetchResponse['responses'] = [];
  for (const t of req.topics) {
    const entry = engine.getStream(t.topic);
    const partitions: FetchPartitionResponse[] = [];
    responses.push({ topic: t.topic, partitions });
    const authorized = allowed(ctx, 'subscribe', 'stream', t.topic);
    for (const p of t.partitions) {
      const res = partitionResponse(p.partition, KafkaErrorCode.NONE, readCommitted);
      partitions.push(res);
      if (!authorized) {
        res.errorCode = KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED;
        continue;
      }
      if (!entry || p.partition < 0 || p.partition >= entry.def.partitions) {
        res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION;
        continue;
      }
      // Cluster mode: only the leader serves a partition, under the leader epoch the client knows.
      if (kc !== null) {
        const served = kc.serve(t.topic, p.partition, p.currentLeaderEpoch);
        if (served.errorCode !== KafkaErrorCode.NONE) {
          res.errorCode = served.errorCode;
          continue;
        }
      }
      try {
        const { logStartOffset, highWatermark } = engine.offsets(t.topic, p.partition);
        res.highWatermark = highWatermark;
        res.lastStableOffset = highWatermark;
        res.logStartOffset = logStartOffset;
        if (p.fetchOffset < logStartOffset || p.fetchOffset > highWatermark) {
          res.errorCode = KafkaErrorCode.OFFSET_OUT_OF_RANGE;
          continue;
        }
        waitables.push({ stream: t.topic, partition: p.partition, offset: highWatermark });
        // Caught up, or the response is already full: nothing more from this partition this time.
        if (p.fetchOffset === highWatermark || bytes >= maxBytes) continue;
        const limit = Math.max(1, Math.min(p.partitionMaxBytes, maxBytes - bytes));
        const batches = await engine.read(t.topic, p.partition, p.fetchOffset, limit, ctx.lease);
        for (const b of batches) bytes += b.length;
        res.records = batches;
      } catch (err) {
        ctx.conn.log.warn({ err, topic: t.topic, partition: p.partition }, 'fetch read failed');
        res.errorCode = kafkaErrorCode(err);
        res.records = [];
      }
    }
  }
  const errors = responses.some((t) => t.partitions.some((p) => p.errorCode !== KafkaErrorCode.NONE));
  return { responses, bytes, waitables, errors };
}

/** Resolves when one of the partitions grows, `ms` pass, or the connection closes. */
function waitForData(ctx: RequestContext, waitables: Waitable[], ms: number): Promise<void> {
  return new Promise<void>((resolve) => {
    let done = false;
    let unsubscribe: (() => void) | null = null;
    const finish = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      unsubscribe?.();
      resolve();
    };
    const timer = setTimeout(finish, ms);
    unsubscribe = ctx.conn.onClose(finish);
    if (done) return;
    for (const w of waitables) {
      try {
        ctx.adapter.engine.waitFor(w.stream, w.partition, w.offset, ms).then(finish, finish);
      } catch {
        // The stream disappeared: reading again reports it.
        finish();
      }
    }
  });
}

export async function handleFetch(ctx: RequestContext, req: FetchRequest): Promise<FetchResponse> {
  if (req.sessionId !== 0) {
    return { throttleTimeMs: 0, errorCode: KafkaErrorCode.FETCH_SESSION_ID_NOT_FOUND, sessionId: 0, responses: [] };
  }
  const deadline = Date.now() + Math.max(0, req.maxWaitMs);
  let result = await readAll(ctx, req);
  while (result.bytes < req.minBytes && !result.errors && result.waitables.length > 0 && !ctx.conn.isClosed()) {
    const left = deadline - Date.now();
    if (left <= 0) break;
    await waitForData(ctx, result.waitables, left);
    if (ctx.conn.isClosed()) break;
    result = await readAll(ctx, req);
  }
  // The namespace's bytes-out rate: the response says how long the client is throttled, and the connection is muted
  // for that long (KIP-219).
  let throttleTimeMs = 0;
  if (result.bytes > 0) {
    if (ctx.conn.client) ctx.conn.client.messagesOut += countRecords(result.responses);
    throttleTimeMs = ctx.conn.quota?.chargeOut(result.bytes) ?? 0;
    ctx.conn.throttle(throttleTimeMs);
  }
  return { throttleTimeMs, errorCode: KafkaErrorCode.NONE, sessionId: 0, responses: result.responses };
}

/** Records in a response's batches (the client registry's messagesOut): batch headers only. */
function countRecords(responses: FetchResponse['responses']): number {
  let n = 0;
  for (const t of responses) {
    for (const p of t.partitions) {
      for (const b of p.records ?? []) {
        try {
          n += readBatchInfo(b).recordCount;
        } catch {
          // Not a whole batch header: not counted.
        }
      }
    }
  }
  return n;
}
