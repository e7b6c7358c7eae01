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
 * - Fetch sessions (KIP-227, ../fetch-sessions.ts): a full fetch with epoch 0 makes a session when the cache admits
 *   one; incremental fetches then name only what changed, and are answered with only the partitions that have
 *   something new.
 * - Topic ids (v13+, KIP-516): topics are named by their stream's id. An id no stream has (deleted, or never made)
 *   is UNKNOWN_TOPIC_ID for each of its partitions; a session partition whose topic was deleted and created again
 *   under the same name (a new id) is INCONSISTENT_TOPIC_ID, as Kafka answers for a log whose id moved.
 * - A leader error (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH) carries the partition's current leader and, from
 *   v16, that broker's endpoint (KIP-951), so the client need not ask Metadata first.
 * - A follower's fetch (replica id >= 0) is answered as a Kafka leader answers a replica it does not know: FlowMQ
 *   has no follower replicas.
 * - Transactions (KIP-98): every answer carries the last stable offset (the first offset of the oldest open
 *   transaction, else the high watermark). A read_committed fetch returns no batch at or past it, and names the
 *   aborted transactions overlapping what it returns (producer id, first offset), so that the client drops their
 *   records; read_uncommitted returns everything up to the high watermark. Markers (control batches) are returned
 *   as they are stored, as Kafka does: clients skip them.
 * - In a cluster only the partition's leader (its owner) serves it: NOT_LEADER_OR_FOLLOWER elsewhere, and a
 *   current_leader_epoch other than the leader's is FENCED_LEADER_EPOCH (older) or UNKNOWN_LEADER_EPOCH (newer).
 */
import {
  KafkaErrorCode,
  ZERO_UUID,
  type FetchPartitionResponse,
  type FetchRequest,
  type FetchResponse,
  type FetchTopicResponse,
  type NodeEndpoint,
  type Uuid,
} from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import type { RequestContext } from '../route.js';
import { readBatchInfo } from '../../../core/index.js';
import { allowed } from '../authz.js';
import { FetchSession, MAX_SESSION_PARTITIONS, mustRespond, partitionKey, type SessionPartition } from '../fetch-sessions.js';
import { brokerList } from './metadata.js';
import { topicIdHex } from '../topic-ids.js';

const READ_COMMITTED = 1;

interface Waitable {
  stream: string;
  partition: number;
  /** Wake up when the high watermark passes this offset (the high watermark seen at the last read). */
  offset: number;
}

interface ReadResult {
  /** One per work item, in its order. */
  partitions: FetchPartitionResponse[];
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
    currentLeader: null,
    divergingEpoch: null,
    records: [],
  };
}

/** One partition this fetch reads: from the request (sessionless or full) or from the session. */
interface Work {
  /** Session partition (its position and limits), or the request's. */
  part: SessionPartition;
  /** The topic as the response names it. */
  topic: string;
  topicId: Uuid;
  /** The stream to read, or null with the error to answer. */
  stream: string | null;
  errorCode: number;
}

/** The stream a partition names: by name (v12-) or by topic id (v13+). */
function resolveWork(ctx: RequestContext, part: SessionPartition, byId: boolean): Work {
  const { engine } = ctx.adapter;
  if (!byId) {
    const entry = engine.getAnyStream(part.topic);
    const known = entry !== undefined && part.partition >= 0 && part.partition < entry.def.partitions;
    return {
      part,
      topic: part.topic,
      topicId: ZERO_UUID,
      stream: known ? part.topic : null,
      errorCode: known ? KafkaErrorCode.NONE : KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    };
  }
  const topicId = Buffer.from(part.topicId, 'hex');
  const entry = part.topicId === ZERO_HEX ? undefined : engine.getAnyStreamById(part.topicId);
  if (entry === undefined) {
    // Known by name when it joined the session, and that name is another stream now: the topic was re-created.
    const moved = part.topic !== '' && engine.getAnyStream(part.topic) !== undefined;
    return { part, topic: '', topicId, stream: null, errorCode: moved ? KafkaErrorCode.INCONSISTENT_TOPIC_ID : KafkaErrorCode.UNKNOWN_TOPIC_ID };
  }
  if (part.partition < 0 || part.partition >= entry.def.partitions) {
    return { part, topic: '', topicId, stream: null, errorCode: KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION };
  }
  return { part, topic: '', topicId, stream: entry.def.name, errorCode: KafkaErrorCode.NONE };
}

const ZERO_HEX = '0'.repeat(32);

async function readAll(ctx: RequestContext, req: FetchRequest, work: readonly Work[]): Promise<ReadResult> {
  const { engine, cluster: kc } = ctx.adapter;
  const readCommitted = req.isolationLevel === READ_COMMITTED;
  const maxBytes = req.maxBytes > 0 ? req.maxBytes : 1;
  let bytes = 0;
  const waitables: Waitable[] = [];
  const partitions: FetchPartitionResponse[] = [];
  let errors = false;
  for (const w of work) {
    const p = w.part;
    const res = partitionResponse(p.partition, w.errorCode, readCommitted);
    partitions.push(res);
    const stream = w.stream;
    if (stream === null) {
      errors = true;
      continue;
    }
    if (req.replicaId >= 0) {
      // A follower's fetch: FlowMQ's partitions have no follower replicas. As a Kafka leader answers a replica it
      // does not know: UNKNOWN_LEADER_EPOCH with a leader epoch (the follower retries), else NOT_LEADER_OR_FOLLOWER,
      // after the cluster authorization followers need (Kafka's CLUSTER_ACTION; here `alter cluster:*`).
      res.errorCode = !allowed(ctx, 'alter', 'cluster', '*')
        ? KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED
        : p.currentLeaderEpoch >= 0
          ? KafkaErrorCode.UNKNOWN_LEADER_EPOCH
          : KafkaErrorCode.NOT_LEADER_OR_FOLLOWER;
      errors = true;
      continue;
    }
    if (!allowed(ctx, 'subscribe', 'stream', stream)) {
      res.errorCode = KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED;
      errors = true;
      continue;
    }
    // Cluster mode: only the leader serves a partition, under the leader epoch the client knows.
    if (kc !== null) {
      const served = kc.serve(stream, p.partition, p.currentLeaderEpoch);
      if (served.errorCode !== KafkaErrorCode.NONE) {
        res.errorCode = served.errorCode;
        const leader = kc.leader(stream, p.partition);
        if (leader !== null) res.currentLeader = { leaderId: leader.id, leaderEpoch: leader.epoch };
        errors = true;
        continue;
      }
    }
    try {
      const { logStartOffset, highWatermark } = engine.offsets(stream, p.partition);
      const txns = ctx.adapter.transactions.partitions;
      const lso = txns.lso(stream, p.partition, highWatermark);
      res.highWatermark = highWatermark;
      res.lastStableOffset = lso;
      res.logStartOffset = logStartOffset;
      if (p.fetchOffset < logStartOffset || p.fetchOffset > highWatermark) {
        res.errorCode = KafkaErrorCode.OFFSET_OUT_OF_RANGE;
        errors = true;
        continue;
      }
      waitables.push({ stream, partition: p.partition, offset: highWatermark });
      // Caught up (read_committed: up to the last stable offset), or the response is already full: nothing more
      // from this partition this time.
      const end = readCommitted ? lso : highWatermark;
      if (p.fetchOffset >= end || bytes >= maxBytes) continue;
      const limit = Math.max(1, Math.min(p.partitionMaxBytes, maxBytes - bytes));
      let batches = await engine.read(stream, p.partition, p.fetchOffset, limit, ctx.lease);
      if (readCommitted) {
        // Nothing of a transaction still open: the response ends before the last stable offset.
        const keep = batches.findIndex((b) => readBatchInfo(b).baseOffset >= end);
        if (keep >= 0) batches = batches.slice(0, keep);
        if (batches.length > 0) {
          const last = readBatchInfo(batches[batches.length - 1]);
          const upTo = last.baseOffset + last.lastOffsetDelta + 1;
          res.abortedTransactions = txns
            .abortedIn(stream, p.partition, p.fetchOffset, upTo)
            .map((a) => ({ producerId: BigInt(a.producerId), firstOffset: a.firstOffset }));
        }
      }
      for (const b of batches) bytes += b.length;
      res.records = batches;
    } catch (err) {
      ctx.conn.log.warn({ err, topic: stream, partition: p.partition }, 'fetch read failed');
      res.errorCode = kafkaErrorCode(err);
      res.records = [];
      errors = true;
    }
  }
  return { partitions, bytes, waitables, errors };
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

/** A request partition as a session partition (nothing answered yet). */
function requestPartition(topic: string, topicId: string, p: FetchRequest['topics'][number]['partitions'][number]): SessionPartition {
  return {
    topic,
    topicId,
    partition: p.partition,
    fetchOffset: p.fetchOffset,
    partitionMaxBytes: p.partitionMaxBytes,
    currentLeaderEpoch: p.currentLeaderEpoch,
    lastFetchedEpoch: p.lastFetchedEpoch,
    highWatermark: -2,
    lastStableOffset: -2,
    logStartOffset: -2,
  };
}

/** The name a topic id has now ("" when none): what a session remembers of it. */
function nameOf(ctx: RequestContext, idHex: string): string {
  return ctx.adapter.engine.getAnyStreamById(idHex)?.def.name ?? '';
}

function sessionError(errorCode: number): FetchResponse {
  return { throttleTimeMs: 0, errorCode, sessionId: 0, responses: [], nodeEndpoints: [] };
}

export async function handleFetch(ctx: RequestContext, req: FetchRequest): Promise<FetchResponse> {
  const version = ctx.header.apiVersion;
  const byId = version >= 13;
  const cache = ctx.adapter.fetchSessions;
  const owner = ctx.conn.id;
  // Epoch 0 (a new session) and -1 (no session) are full fetches; both close the session they name.
  const full = version < 7 || req.sessionEpoch === 0 || req.sessionEpoch === -1;
  let session: FetchSession | null = null;
  let parts: SessionPartition[];
  if (full) {
    if (req.sessionId !== 0) cache.remove(req.sessionId, owner);
    parts = [];
    for (const t of req.topics) {
      const idHex = byId ? topicIdHex(t.topicId ?? ZERO_UUID) : '';
      const name = byId ? nameOf(ctx, idHex) : t.topic;
      for (const p of t.partitions) parts.push(requestPartition(name, idHex, p));
    }
  } else {
    const s = cache.get(req.sessionId, owner);
    if (s === undefined) return sessionError(KafkaErrorCode.FETCH_SESSION_ID_NOT_FOUND);
    if (s.epoch !== req.sessionEpoch) return sessionError(KafkaErrorCode.INVALID_FETCH_SESSION_EPOCH);
    if (s.usesTopicIds !== byId) return sessionError(KafkaErrorCode.FETCH_SESSION_TOPIC_ID_ERROR);
    session = s;
    for (const t of req.forgottenTopics) {
      const key = byId ? topicIdHex(t.topicId ?? ZERO_UUID) : t.topic;
      for (const p of t.partitions) s.partitions.delete(partitionKey(key, p));
    }
    for (const t of req.topics) {
      const idHex = byId ? topicIdHex(t.topicId ?? ZERO_UUID) : '';
      const key = byId ? idHex : t.topic;
      for (const p of t.partitions) {
        const k = partitionKey(key, p.partition);
        const cached = s.partitions.get(k);
        if (cached === undefined) {
          s.partitions.set(k, requestPartition(byId ? nameOf(ctx, idHex) : t.topic, idHex, p));
        } else {
          cached.fetchOffset = p.fetchOffset;
          cached.partitionMaxBytes = p.partitionMaxBytes;
          cached.currentLeaderEpoch = p.currentLeaderEpoch;
          cached.lastFetchedEpoch = p.lastFetchedEpoch;
        }
      }
    }
    if (s.partitions.size > MAX_SESSION_PARTITIONS) {
      // Grown past what a session may hold: closed; the client goes back to full fetches (which make no session).
      cache.remove(s.id, owner);
      return sessionError(KafkaErrorCode.FETCH_SESSION_ID_NOT_FOUND);
    }
    s.epoch = FetchSession.nextEpoch(s.epoch);
    cache.touch(s);
    parts = [...s.partitions.values()];
  }
  const work = parts.map((p) => resolveWork(ctx, p, byId));
  const deadline = Date.now() + Math.max(0, req.maxWaitMs);
  let result = await readAll(ctx, req, work);
  while (result.bytes < req.minBytes && !result.errors && result.waitables.length > 0 && !ctx.conn.isClosed()) {
    const left = deadline - Date.now();
    if (left <= 0) break;
    await waitForData(ctx, result.waitables, left);
    if (ctx.conn.isClosed()) break;
    result = await readAll(ctx, req, work);
  }

  // What the response names: every partition (full), or those with something new (incremental).
  let sessionId = 0;
  let included: number[];
  if (session === null) {
    included = work.map((_, i) => i);
    if (full && req.sessionEpoch === 0 && version >= 7) {
      const s = cache.create(owner, byId, work.length);
      if (s !== null) {
        sessionId = s.id;
        work.forEach((w, i) => {
          mustRespond(w.part, result.partitions[i]!);
          s.partitions.set(partitionKey(byId ? w.part.topicId : w.part.topic, w.part.partition), w.part);
        });
      }
    }
  } else {
    sessionId = session.id;
    included = [];
    work.forEach((w, i) => {
      if (mustRespond(w.part, result.partitions[i]!)) included.push(i);
    });
  }
  if (session !== null || sessionId !== 0) {
    // Round robin (KIP-227): partitions that returned records go to the end of the session's order.
    const s = session ?? cache.get(sessionId, owner)!;
    for (const [i, w] of work.entries()) {
      const recs = result.partitions[i]!.records;
      if (recs !== null && recs.length > 0) {
        const k = partitionKey(byId ? w.part.topicId : w.part.topic, w.part.partition);
        if (s.partitions.get(k) === w.part) {
          s.partitions.delete(k);
          s.partitions.set(k, w.part);
        }
      }
    }
  }

  // Consecutive partitions of one topic make one topic entry, as Kafka builds its responses.
  const responses: FetchTopicResponse[] = [];
  const leaders = new Set<number>();
  for (const i of included) {
    const w = work[i]!;
    const res = result.partitions[i]!;
    if (res.currentLeader) leaders.add(res.currentLeader.leaderId);
    const last = responses[responses.length - 1];
    const same = last !== undefined && (byId ? last.topicId!.equals(w.topicId) : last.topic === w.topic);
    if (same) last.partitions.push(res);
    else responses.push({ topic: w.topic, topicId: w.topicId, partitions: [res] });
  }
  const nodeEndpoints: NodeEndpoint[] = leaders.size > 0 && version >= 16 ? brokerList(ctx).brokers.filter((b) => leaders.has(b.nodeId)) : [];

  // The namespace's bytes-out rate: the response says how long the client is throttled, and the connection is muted
  // for that long (KIP-219).
  let throttleTimeMs = 0;
  if (result.bytes > 0) {
    if (ctx.conn.client) ctx.conn.client.messagesOut += countRecords(responses);
    throttleTimeMs = ctx.conn.quota?.chargeOut(result.bytes) ?? 0;
    ctx.conn.throttle(throttleTimeMs);
  }
  return { throttleTimeMs, errorCode: KafkaErrorCode.NONE, sessionId, responses, nodeEndpoints };
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
