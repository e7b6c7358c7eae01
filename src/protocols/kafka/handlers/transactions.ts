/**
 * The transactional producer's APIs (KIP-98): InitProducerId with a transactional id is in producer.ts; here
 * AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn, which the coordinator
 * (../transactions/coordinator.ts) answers, and the admin views DescribeTransactions and ListTransactions (KIP-664).
 *
 * An older epoch is PRODUCER_FENCED from the versions that know it (AddPartitionsToTxn and AddOffsetsToTxn v2,
 * EndTxn v2, TxnOffsetCommit v3; KIP-588), INVALID_PRODUCER_EPOCH before.
 *
 * Authorization (authz.ts): each request needs `publish transactional-id:<id>` first (Kafka's WRITE on the
 * TRANSACTIONAL_ID), else TRANSACTIONAL_ID_AUTHORIZATION_FAILED; DescribeTransactions answers that per id without
 * describe, ListTransactions leaves such ids out.
 *
 * In cluster mode every request naming a transactional id is served by the id's coordinator only (txnGated);
 * ListTransactions lists the ids this broker coordinates, as each Kafka broker does (admin clients ask them all).
 */
import {
  KafkaErrorCode,
  type AddOffsetsToTxnRequest,
  type AddOffsetsToTxnResponse,
  type AddPartitionsToTxnRequest,
  type AddPartitionsToTxnResponse,
  type DescribeTransactionsRequest,
  type DescribeTransactionsResponse,
  type EndTxnRequest,
  type EndTxnResponse,
  type ListTransactionsRequest,
  type ListTransactionsResponse,
  type TxnOffsetCommitRequest,
  type TxnOffsetCommitResponse,
} from '../codec/index.js';
import type { RequestContext } from '../route.js';
import { isFlowError } from '../../../core/index.js';
import { TXN_STATES } from '../transactions/coordinator.js';
import { mayUseGroup } from './groups.js';
import { allowed, mayDescribeTransactionalId, mayUseTransactionalId } from '../authz.js';
import type { GroupGate } from '../cluster.js';

const fenced = (ctx: RequestContext, from: number): number =>
  ctx.header.apiVersion >= from ? KafkaErrorCode.PRODUCER_FENCED : KafkaErrorCode.INVALID_PRODUCER_EPOCH;

/**
 * Runs `fn` if this broker coordinates the transactional id, else answers `refuse(errorCode)`. Cluster mode: the
 * id is owned like a consumer group (KafkaCluster.gate): NOT_COORDINATOR at a broker placement does not give it
 * (the client asks FindCoordinator again), COORDINATOR_LOAD_IN_PROGRESS while its previous coordinator still
 * holds it. A single broker coordinates every id.
 */
export function txnGated<T>(ctx: RequestContext, transactionalId: string, refuse: (errorCode: number) => T, fn: () => T | Promise<T>): T | Promise<T> {
  const kc = ctx.adapter.cluster;
  if (kc === null) return fn();
  // A write of the id's document refused FENCED: another broker coordinates it now (and this one let it go).
  const served = async (): Promise<T> => {
    try {
      return await fn();
    } catch (err) {
      if (isFlowError(err, 'FENCED')) return refuse(KafkaErrorCode.NOT_COORDINATOR);
      throw err;
    }
  };
  const decide = (g: GroupGate): T | Promise<T> => (g.errorCode !== KafkaErrorCode.NONE ? refuse(g.errorCode) : served());
  const g = kc.gate(transactionalId, 'txn');
  return g instanceof Promise ? g.then(decide) : decide(g);
}

export async function handleAddPartitionsToTxn(ctx: RequestContext, req: AddPartitionsToTxnRequest): Promise<AddPartitionsToTxnResponse> {
  const parts = req.topics.flatMap((t) => t.partitions.map((partition) => ({ stream: t.name, partition })));
  let codes: number[];
  if (!mayUseTransactionalId(ctx, req.transactionalId)) codes = parts.map(() => KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
  else if (req.topics.some((t) => !allowed(ctx, 'publish', 'stream', t.name))) {
    codes = parts.map((p) =>
      allowed(ctx, 'publish', 'stream', p.stream) ? KafkaErrorCode.OPERATION_NOT_ATTEMPTED : KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED,
    );
  } else {
    codes = await txnGated(
      ctx,
      req.transactionalId,
      (code) => parts.map(() => code),
      () => ctx.adapter.transactions.addPartitions(req.transactionalId, req.producerId, req.producerEpoch, parts, fenced(ctx, 2)),
    );
  }
  let i = 0;
  return {
    throttleTimeMs: 0,
    results: req.topics.map((t) => ({ name: t.name, results: t.partitions.map((partitionIndex) => ({ partitionIndex, errorCode: codes[i++] })) })),
  };
}

export async function handleAddOffsetsToTxn(ctx: RequestContext, req: AddOffsetsToTxnRequest): Promise<AddOffsetsToTxnResponse> {
  if (!mayUseTransactionalId(ctx, req.transactionalId)) return { throttleTimeMs: 0, errorCode: KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED };
  if (!mayUseGroup(ctx, req.groupId)) return { throttleTimeMs: 0, errorCode: KafkaErrorCode.GROUP_AUTHORIZATION_FAILED };
  const errorCode = await txnGated(
    ctx,
    req.transactionalId,
    (code) => code,
    () => ctx.adapter.transactions.addOffsets(req.transactionalId, req.producerId, req.producerEpoch, req.groupId, fenced(ctx, 2)),
  );
  return { throttleTimeMs: 0, errorCode };
}

export async function handleTxnOffsetCommit(ctx: RequestContext, req: TxnOffsetCommitRequest): Promise<TxnOffsetCommitResponse> {
  const answer = (code: (topic: string) => number): TxnOffsetCommitResponse => ({
    throttleTimeMs: 0,
    topics: req.topics.map((t) => ({ name: t.name, partitions: t.partitions.map((p) => ({ partitionIndex: p.partitionIndex, errorCode: code(t.name) })) })),
  });
  if (!mayUseTransactionalId(ctx, req.transactionalId)) return answer(() => KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
  if (!mayUseGroup(ctx, req.groupId)) return answer(() => KafkaErrorCode.GROUP_AUTHORIZATION_FAILED);
  const unknown = (name: string): boolean => ctx.adapter.engine.getAnyStream(name) === undefined;
  if (req.topics.some((t) => unknown(t.name))) {
    return answer((name) => (unknown(name) ? KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION : KafkaErrorCode.OPERATION_NOT_ATTEMPTED));
  }
  const offsets = req.topics.flatMap((t) =>
    t.partitions.map((p) => ({ stream: t.name, partition: p.partitionIndex, offset: p.committedOffset, metadata: p.committedMetadata })),
  );
  const errorCode = await txnGated(
    ctx,
    req.transactionalId,
    (code) => code,
    () => ctx.adapter.transactions.txnOffsetCommit(req.transactionalId, req.producerId, req.producerEpoch, req.groupId, offsets, fenced(ctx, 3)),
  );
  return answer(() => errorCode);
}

export async function handleEndTxn(ctx: RequestContext, req: EndTxnRequest): Promise<EndTxnResponse> {
  if (!mayUseTransactionalId(ctx, req.transactionalId)) return { throttleTimeMs: 0, errorCode: KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED };
  try {
    const errorCode = await txnGated(
      ctx,
      req.transactionalId,
      (code) => code,
      () => ctx.adapter.transactions.endTxn(req.transactionalId, req.producerId, req.producerEpoch, req.committed, fenced(ctx, 2)),
    );
    return { throttleTimeMs: 0, errorCode };
  } catch (err) {
    // The markers could not be written (storage): the state stays Prepare*, completed on the next try or at start.
    ctx.conn.log.warn({ err, transactionalId: req.transactionalId }, 'ending a transaction failed');
    return { throttleTimeMs: 0, errorCode: KafkaErrorCode.COORDINATOR_NOT_AVAILABLE };
  }
}

export async function handleDescribeTransactions(ctx: RequestContext, req: DescribeTransactionsRequest): Promise<DescribeTransactionsResponse> {
  // Cluster mode: each id is described by its coordinator (NOT_COORDINATOR elsewhere, as Kafka answers).
  const gates = await Promise.all(
    req.transactionalIds.map((id) =>
      txnGated(
        ctx,
        id,
        (code) => code,
        () => KafkaErrorCode.NONE,
      ),
    ),
  );
  return {
    throttleTimeMs: 0,
    transactionStates: req.transactionalIds.map((id, i) => {
      const denied = !mayDescribeTransactionalId(ctx, id);
      const m = denied ? undefined : ctx.adapter.transactions.get(id);
      if (denied || m === undefined || gates[i] !== KafkaErrorCode.NONE) {
        return {
          errorCode: denied
            ? KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            : gates[i] !== KafkaErrorCode.NONE
              ? gates[i]
              : KafkaErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
          transactionalId: id,
          transactionState: '',
          transactionTimeoutMs: 0,
          transactionStartTimeMs: -1,
          producerId: -1,
          producerEpoch: -1,
          topics: [],
        };
      }
      const topics = new Map<string, number[]>();
      for (const p of m.partitions) {
        let l = topics.get(p.stream);
        if (!l) topics.set(p.stream, (l = []));
        l.push(p.partition);
      }
      return {
        errorCode: KafkaErrorCode.NONE,
        transactionalId: id,
        transactionState: m.state,
        transactionTimeoutMs: m.timeoutMs,
        transactionStartTimeMs: m.startTimeMs,
        producerId: m.producerId,
        producerEpoch: m.producerEpoch,
        topics: [...topics].map(([topic, partitions]) => ({ topic, partitions })),
      };
    }),
  };
}

export function handleListTransactions(ctx: RequestContext, req: ListTransactionsRequest): ListTransactionsResponse {
  const known = new Set<string>(TXN_STATES);
  const now = Date.now();
  const durationFilter = req.durationFilter;
  const states = ctx.adapter.transactions
    .list()
    .filter((m) => mayDescribeTransactionalId(ctx, m.transactionalId, true))
    .filter((m) => req.stateFilters.length === 0 || req.stateFilters.includes(m.state))
    .filter((m) => req.producerIdFilters.length === 0 || req.producerIdFilters.includes(m.producerId))
    // v1 (KIP-994): only transactions running longer than this many ms.
    .filter((m) => durationFilter < 0 || (m.startTimeMs >= 0 && now - m.startTimeMs > durationFilter))
    .sort((a, b) => (a.transactionalId < b.transactionalId ? -1 : a.transactionalId > b.transactionalId ? 1 : 0))
    .map((m) => ({ transactionalId: m.transactionalId, producerId: m.producerId, transactionState: m.state }));
  return { throttleTimeMs: 0, errorCode: KafkaErrorCode.NONE, unknownStateFilters: req.stateFilters.filter((s) => !known.has(s)), transactionStates: states };
}
