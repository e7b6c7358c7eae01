/**
 * Partition operations that admin tools and UIs call: DescribeLogDirs, ElectLeaders, DescribeProducers.
 *
 * - DescribeLogDirs (`describe cluster:*`, Kafka's DESCRIBE on the cluster; refused: CLUSTER_AUTHORIZATION_FAILED at
 *   the top, v3+, and no log dir): one log dir, the data directory, with the partitions this broker holds (on a
 *   single broker every partition; in a cluster those it owns). A partition's size is the bytes its log holds: the
 *   hot tier (the write-ahead log's tail not yet sealed) plus its segment objects (local files or S3), i.e. every
 *   readable batch as stored (compressed as produced). Offset lag is 0 (there is no follower log catching up) and
 *   no log is a future one. v4 adds the data directory's volume size and the bytes usable on it (statfs).
 * - ElectLeaders (`alter cluster:*`, Kafka's ALTER on the cluster; refused: CLUSTER_AUTHORIZATION_FAILED for every
 *   partition, and at the top from v1): a partition has one replica, its leader, so there is nothing to elect
 *   while it has one. On a single broker every partition answers ELECTION_NOT_NEEDED; in a cluster the leader is
 *   the partition's owner: ELECTION_NOT_NEEDED while it has a live owner; without one, the broker placement gives
 *   it takes it (asked here when that is this broker: NONE once taken), else PREFERRED_LEADER_NOT_AVAILABLE
 *   (preferred) or ELIGIBLE_LEADERS_NOT_AVAILABLE (unclean) until it has. Every partition (topic_partitions null)
 *   reports only those that needed an election, as Kafka does.
 * - DescribeProducers (`subscribe stream:`, Kafka's READ on the topic): the idempotent producers with state in the
 *   partition's log (id, epoch, last sequence, last batch's timestamp); FlowMQ has no transactions, so the
 *   coordinator epoch is -1 and no transaction is open (current txn start offset -1). Served by the leader: in a
 *   cluster another broker's partition is NOT_LEADER_OR_FOLLOWER.
 *
 * Namespaces: a tenant's connection asks about its own topics only (route.ts qualifies the names it writes; every
 * topic, a null list, is every topic of its namespace). DescribeLogDirs and ElectLeaders are cluster operations in
 * `default`; for a tenant they need the cluster right (an unscoped policy) or, as a tenant's ACLs do, `admin
 * namespace:<ns>` (a namespace administrator), else CLUSTER_AUTHORIZATION_FAILED.
 */
import { statfs } from 'node:fs/promises';
import {
  ElectionType,
  KafkaErrorCode,
  type DescribeLogDirsRequest,
  type DescribeLogDirsResponse,
  type DescribeProducersRequest,
  type DescribeProducersResponse,
  type ElectLeadersRequest,
  type ElectLeadersResponse,
} from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import type { RequestContext } from '../route.js';
import { allowed, visible } from '../authz.js';
import { partitionKey } from '../cluster.js';

const CLUSTER_DENIED = KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED;

/** Kafka's rule (`action cluster:*`); for a tenant also its namespace administrator (as for its ACLs). */
function mayOperate(ctx: RequestContext, action: 'describe' | 'alter'): boolean {
  const n = ctx.conn.names;
  if (n.isDefault) return allowed(ctx, action, 'cluster', '*');
  return visible(ctx, action, 'cluster', '*') || allowed(ctx, 'admin', 'namespace', n.namespace);
}

/** Every topic the connection's namespace has (its core names). */
function ownStreams(ctx: RequestContext): Array<{ name: string; partitions: number }> {
  const n = ctx.conn.names;
  return ctx.adapter.engine.listAllStreams().filter((d) => n.kafkaOwnStream(d.name) !== null);
}

// ------------------------------------------------------------------------------------------------ DescribeLogDirs

export async function handleDescribeLogDirs(ctx: RequestContext, req: DescribeLogDirsRequest): Promise<DescribeLogDirsResponse> {
  if (!mayOperate(ctx, 'describe')) return { throttleTimeMs: 0, errorCode: CLUSTER_DENIED, results: [] };
  const { engine, options } = ctx.adapter;
  const kc = ctx.adapter.cluster;
  const wanted = req.topics === null ? ownStreams(ctx).map((d) => ({ topic: d.name, partitions: null as number[] | null })) : req.topics;
  const topics: DescribeLogDirsResponse['results'][number]['topics'] = [];
  for (const t of wanted) {
    const entry = engine.getAnyStream(t.topic);
    // Topics and partitions this log dir does not hold are left out, as Kafka does.
    if (!entry) continue;
    const indexes = t.partitions ?? Array.from({ length: entry.def.partitions }, (_, i) => i);
    const partitions = [];
    for (const p of new Set(indexes)) {
      if (p < 0 || p >= entry.def.partitions) continue;
      // In a cluster a broker's log dir holds the partitions it leads (owns) now.
      if (kc !== null && kc.leads(t.topic, p) === null) continue;
      const size = engine.partitionSize(t.topic, p);
      if (size === null) continue;
      partitions.push({ partitionIndex: p, partitionSize: size, offsetLag: 0, isFutureKey: false });
    }
    if (partitions.length > 0) topics.push({ name: t.topic, partitions });
  }
  let totalBytes = -1;
  let usableBytes = -1;
  if (ctx.header.apiVersion >= 4) {
    try {
      const s = await statfs(options.logDir);
      totalBytes = s.blocks * s.bsize;
      usableBytes = s.bavail * s.bsize;
    } catch (err) {
      // No data directory (a broker without one, as in tests): the volume is unknown, -1 as Kafka's default.
      ctx.conn.limitedLog('debug', { err, dir: options.logDir }, 'DescribeLogDirs: cannot statfs the data directory');
    }
  }
  return {
    throttleTimeMs: 0,
    errorCode: KafkaErrorCode.NONE,
    results: [{ errorCode: KafkaErrorCode.NONE, logDir: options.logDir, topics, totalBytes, usableBytes }],
  };
}

// ------------------------------------------------------------------------------------------------ ElectLeaders

type ElectResult = { partitionId: number; errorCode: number; errorMessage: string | null };

export async function handleElectLeaders(ctx: RequestContext, req: ElectLeadersRequest): Promise<ElectLeadersResponse> {
  const { engine } = ctx.adapter;
  const all = req.topicPartitions === null;
  const asked = all ? ownStreams(ctx).map((d) => ({ topic: d.name, partitions: Array.from({ length: d.partitions }, (_, i) => i) })) : req.topicPartitions!;
  if (!mayOperate(ctx, 'alter')) {
    return {
      throttleTimeMs: 0,
      errorCode: CLUSTER_DENIED,
      // Every partition asked for, refused; none listed when the request asked for all of them.
      replicaElectionResults: all
        ? []
        : asked.map((t) => ({
            topic: t.topic,
            partitionResult: t.partitions.map((p) => ({ partitionId: p, errorCode: CLUSTER_DENIED, errorMessage: 'not authorized to elect leaders' })),
          })),
    };
  }
  if (req.electionType !== ElectionType.PREFERRED && req.electionType !== ElectionType.UNCLEAN) {
    return { throttleTimeMs: 0, errorCode: KafkaErrorCode.INVALID_REQUEST, replicaElectionResults: [] };
  }
  const results: ElectLeadersResponse['replicaElectionResults'] = [];
  for (const t of asked) {
    const entry = engine.getAnyStream(t.topic);
    const partitionResult: ElectResult[] = [];
    for (const p of t.partitions) {
      const r = entry === undefined || p < 0 || p >= entry.def.partitions ? unknown(t.topic, p) : await elect(ctx, t.topic, p, req.electionType);
      if (all && r.errorCode === KafkaErrorCode.ELECTION_NOT_NEEDED) continue;
      partitionResult.push(r);
    }
    if (!all || partitionResult.length > 0) results.push({ topic: t.topic, partitionResult });
  }
  return { throttleTimeMs: 0, errorCode: KafkaErrorCode.NONE, replicaElectionResults: results };
}

function unknown(topic: string, p: number): ElectResult {
  return { partitionId: p, errorCode: KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, errorMessage: `topic "${topic}" has no partition ${p}` };
}

async function elect(ctx: RequestContext, topic: string, p: number, type: number): Promise<ElectResult> {
  const kc = ctx.adapter.cluster;
  const notNeeded = (leader: number): ElectResult => ({
    partitionId: p,
    errorCode: KafkaErrorCode.ELECTION_NOT_NEEDED,
    errorMessage: `partition ${p} of "${topic}" is led by broker ${leader}, its one replica: no election needed`,
  });
  if (kc === null) return notNeeded(ctx.adapter.brokerId);
  const key = partitionKey(topic, p);
  const owner = kc.cluster.owner('partition', key);
  if (owner !== null) return notNeeded(owner.broker);
  const placement = kc.cluster.placement('partition', key);
  if (placement === kc.id) {
    try {
      await kc.cluster.ensure('partition', key);
      ctx.conn.log.info({ topic, partition: p }, 'ElectLeaders: took the partition placement gives this broker');
      return { partitionId: p, errorCode: KafkaErrorCode.NONE, errorMessage: null };
    } catch (err) {
      // Another broker still holds it (it hands it over at its next reconcile): not available yet.
      ctx.conn.limitedLog('info', { err, topic, partition: p }, 'ElectLeaders: cannot take the partition yet');
    }
  }
  return {
    partitionId: p,
    errorCode: type === ElectionType.UNCLEAN ? KafkaErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE : KafkaErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    errorMessage: `partition ${p} of "${topic}" has no live owner yet; broker ${placement ?? '(none)'} takes it at its next reconcile`,
  };
}

// ------------------------------------------------------------------------------------------------ DescribeProducers

export function handleDescribeProducers(ctx: RequestContext, req: DescribeProducersRequest): DescribeProducersResponse {
  const { engine } = ctx.adapter;
  const kc = ctx.adapter.cluster;
  return {
    throttleTimeMs: 0,
    topics: req.topics.map((t) => {
      const entry = engine.getAnyStream(t.name);
      const authorized = allowed(ctx, 'subscribe', 'stream', t.name);
      return {
        name: t.name,
        partitions: t.partitionIndexes.map((p) => {
          const res = {
            partitionIndex: p,
            errorCode: KafkaErrorCode.NONE as number,
            errorMessage: null as string | null,
            activeProducers: [] as DescribeProducersResponse['topics'][number]['partitions'][number]['activeProducers'],
          };
          if (!authorized) {
            res.errorCode = KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED;
            return res;
          }
          if (!entry || p < 0 || p >= entry.def.partitions) {
            res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION;
            return res;
          }
          if (kc !== null && kc.leads(t.name, p) === null) {
            res.errorCode = KafkaErrorCode.NOT_LEADER_OR_FOLLOWER;
            return res;
          }
          try {
            const producers = engine.producers(t.name, p);
            if (producers === null && kc !== null) {
              res.errorCode = KafkaErrorCode.NOT_LEADER_OR_FOLLOWER;
              return res;
            }
            res.activeProducers = (producers ?? []).map((s) => ({
              producerId: s.producerId,
              producerEpoch: s.producerEpoch,
              lastSequence: s.lastSequence,
              lastTimestamp: s.lastTimestamp,
              // The transaction coordinator's epoch is 0 (one coordinator); the first offset of the producer's open
              // transaction in this partition, -1 when none (KIP-664).
              coordinatorEpoch: ctx.adapter.transactions.get(ctx.adapter.transactions.idOf(s.producerId) ?? '') === undefined ? -1 : 0,
              currentTxnStartOffset: ctx.adapter.transactions.partitions.firstOffset(t.name, p, s.producerId) ?? -1,
            }));
          } catch (err) {
            res.errorCode = kafkaErrorCode(err);
            res.errorMessage = err instanceof Error ? err.message : null;
          }
          return res;
        }),
      };
    }),
  };
}
