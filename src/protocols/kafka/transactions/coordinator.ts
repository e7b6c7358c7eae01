/**
 * The transaction coordinator (KIP-98, with the producer epochs of KIP-360 and KIP-588): one state per
 * transactional id, kept in the metastore (ControlStore kind `txn`, one document per id, both backends) so that a
 * restarted broker completes a transaction caught between its commit decision and its markers, and aborts one
 * that was open.
 *
 * States as Kafka names them (DescribeTransactions / ListTransactions show them): Empty, Ongoing, PrepareCommit,
 * PrepareAbort, CompleteCommit, CompleteAbort. EndTxn persists Prepare*, writes a marker (a control batch) into
 * every partition of the transaction, applies (commit) or drops (abort) the offsets sent with TxnOffsetCommit,
 * records an abort in each partition's aborted list, then persists Complete*.
 *
 * Fencing: InitProducerId for an id in use bumps its epoch (the same producer id, a new one when the epoch would
 * overflow) after aborting what the previous incarnation left open; any request naming an older epoch is then
 * PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before the versions that know it), and a produce of an older epoch
 * INVALID_PRODUCER_EPOCH. A transaction open longer than its timeout is aborted with an epoch bump, fencing the
 * producer that forgot it, as Kafka's coordinator does.
 *
 * One broker coordinates every transactional id (in cluster mode transactions are refused; see handlers).
 */
import type { Logger } from 'pino';
import { ATTR_CONTROL, ATTR_TRANSACTIONAL, encodeControlBatch, readBatchInfo, type Engine, type OffsetCommit } from '../../../core/index.js';
import { KafkaErrorCode } from '../codec/index.js';
import type { ControlRecord, ControlStore } from '../../../storage/metastore/control-store.js';
import type { AbortedTxn, TxnPartitions } from '../../../core/index.js';

/** The metastore document name of a partition's aborted list (a name may not hold NUL). */
export const abortedDocName = (stream: string, partition: number): string => `${partition}:${stream}`;

export type TxnStateName = 'Empty' | 'Ongoing' | 'PrepareCommit' | 'PrepareAbort' | 'CompleteCommit' | 'CompleteAbort';
export const TXN_STATES: readonly TxnStateName[] = ['Empty', 'Ongoing', 'PrepareCommit', 'PrepareAbort', 'CompleteCommit', 'CompleteAbort'];

export interface TxnPartition {
  stream: string;
  partition: number;
  /** High watermark when the partition joined: no record of the transaction is below it. */
  startOffset: number;
}

export interface PendingOffset extends OffsetCommit {
  group: string;
}

/** One transactional id's state, as stored (a JSON document). */
export interface TxnMeta {
  transactionalId: string;
  producerId: number;
  producerEpoch: number;
  timeoutMs: number;
  state: TxnStateName;
  partitions: TxnPartition[];
  groups: string[];
  offsets: PendingOffset[];
  /** When the current transaction started (ms), -1 when none is open. */
  startTimeMs: number;
  updatedAt: number;
}

/** The store role the coordinator needs: the metastore's control documents. */
export type TxnStore = Pick<ControlStore, 'getControl' | 'putControl' | 'listControl'>;

/** transaction.max.timeout.ms: a longer transaction.timeout.ms is INVALID_TRANSACTION_TIMEOUT. */
export const MAX_TRANSACTION_TIMEOUT_MS = 900_000;
const MAX_EPOCH = 32767;

export type TxnResult = { errorCode: number };
type Check = { errorCode: number; meta: TxnMeta | null };

export class TransactionCoordinator {
  private readonly txns = new Map<string, TxnMeta>();
  /** Transactional id by producer id (produce validation). */
  private readonly byProducer = new Map<number, string>();
  /** Per transactional id: the chain its operations run on, one at a time. */
  private readonly chains = new Map<string, Promise<unknown>>();
  /** The partitions' transaction state: the engine's, which every protocol reading streams consults. */
  readonly partitions: TxnPartitions;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private readonly engine: Engine,
    private readonly store: TxnStore,
    private readonly allocate: () => Promise<number>,
    private readonly logger: Logger,
  ) {
    this.partitions = engine.transactions;
  }

  /** Loads the stored state; completes (PrepareCommit) or aborts (Ongoing, PrepareAbort) what was in flight. */
  async start(expiryCheckMs = 1000): Promise<void> {
    for (const r of await this.store.listControl('txn-aborted')) {
      const { stream, partition, aborted } = r.data as { stream: string; partition: number; aborted: AbortedTxn[] };
      this.partitions.setAborted(stream, partition, aborted);
    }
    const docs: ControlRecord[] = await this.store.listControl('txn');
    for (const r of docs) {
      const m = r.data as unknown as TxnMeta;
      this.txns.set(m.transactionalId, m);
      this.byProducer.set(m.producerId, m.transactionalId);
    }
    for (const m of this.txns.values()) {
      if (m.state === 'Ongoing' || m.state === 'PrepareAbort' || m.state === 'PrepareCommit') {
        const commit = m.state === 'PrepareCommit';
        this.logger.info(
          { transactionalId: m.transactionalId, state: m.state },
          commit ? 'completing a transaction left in flight' : 'aborting a transaction left open',
        );
        await this.run(m.transactionalId, () => this.complete(m, commit));
      }
    }
    if (expiryCheckMs > 0) {
      this.timer = setInterval(() => this.expire(), expiryCheckMs);
      this.timer.unref();
    }
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  get(transactionalId: string): TxnMeta | undefined {
    return this.txns.get(transactionalId);
  }

  /** The transactional id of a producer id, if a transactional producer has it. */
  idOf(producerId: number): string | undefined {
    return this.byProducer.get(producerId);
  }

  list(): TxnMeta[] {
    return [...this.txns.values()];
  }

  /** Runs `fn` after every earlier operation on the same id. */
  private run<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.chains.get(id) ?? Promise.resolve();
    const p = prev.then(fn, fn);
    const tail = p.catch(() => undefined);
    this.chains.set(id, tail);
    void tail.then(() => {
      if (this.chains.get(id) === tail) this.chains.delete(id);
    });
    return p;
  }

  private async persist(m: TxnMeta): Promise<void> {
    m.updatedAt = Date.now();
    await this.store.putControl('txn', m.transactionalId, m as unknown as Record<string, unknown>);
  }

  /**
   * InitProducerId with a transactional id. `current` (v3+, KIP-360) is the id and epoch the producer holds when it
   * re-initializes after an abortable error: it must be the current ones (or the state's), else it is fenced.
   */
  initProducerId(
    transactionalId: string,
    timeoutMs: number,
    current: { producerId: number; producerEpoch: number },
    version: number,
  ): Promise<{ errorCode: number; producerId: number; producerEpoch: number }> {
    const fail = (errorCode: number) => ({ errorCode, producerId: -1, producerEpoch: -1 });
    if (timeoutMs <= 0 || timeoutMs > MAX_TRANSACTION_TIMEOUT_MS) return Promise.resolve(fail(KafkaErrorCode.INVALID_TRANSACTION_TIMEOUT));
    return this.run(transactionalId, async () => {
      let m = this.txns.get(transactionalId);
      if (m && current.producerId >= 0 && (current.producerId !== m.producerId || current.producerEpoch !== m.producerEpoch)) {
        // KIP-360: a producer that is not the current incarnation may not bump the epoch.
        return fail(version >= 4 ? KafkaErrorCode.PRODUCER_FENCED : KafkaErrorCode.INVALID_PRODUCER_EPOCH);
      }
      if (m && (m.state === 'Ongoing' || m.state === 'PrepareAbort' || m.state === 'PrepareCommit')) {
        // The previous incarnation's transaction: aborted (a decided commit completed) under the new epoch, so
        // that its zombie's writes are fenced from here on.
        await this.bump(m);
        await this.complete(m, m.state === 'PrepareCommit');
      }
      if (!m) {
        m = {
          transactionalId,
          producerId: await this.allocate(),
          producerEpoch: 0,
          timeoutMs,
          state: 'Empty',
          partitions: [],
          groups: [],
          offsets: [],
          startTimeMs: -1,
          updatedAt: 0,
        };
        this.txns.set(transactionalId, m);
        this.byProducer.set(m.producerId, transactionalId);
      } else {
        await this.bump(m);
        m.state = 'Empty';
      }
      m.timeoutMs = timeoutMs;
      await this.persist(m);
      this.logger.debug({ transactionalId, producerId: m.producerId, producerEpoch: m.producerEpoch }, 'transactional producer initialized');
      return { errorCode: KafkaErrorCode.NONE, producerId: m.producerId, producerEpoch: m.producerEpoch };
    });
  }

  /** The next epoch; a new producer id when the epoch is exhausted (KIP-360). Not persisted here. */
  private async bump(m: TxnMeta): Promise<void> {
    if (m.producerEpoch >= MAX_EPOCH - 1) {
      this.byProducer.delete(m.producerId);
      m.producerId = await this.allocate();
      m.producerEpoch = 0;
      this.byProducer.set(m.producerId, m.transactionalId);
    } else m.producerEpoch++;
  }

  /** The checks every request of a transactional producer passes (Kafka's TransactionCoordinator order). */
  private check(transactionalId: string, producerId: number, producerEpoch: number, fencedCode: number): Check {
    const meta = this.txns.get(transactionalId) ?? null;
    if (meta === null || meta.producerId !== producerId) return { errorCode: KafkaErrorCode.INVALID_PRODUCER_ID_MAPPING, meta };
    if (producerEpoch !== meta.producerEpoch) return { errorCode: fencedCode, meta };
    if (meta.state === 'PrepareCommit' || meta.state === 'PrepareAbort') return { errorCode: KafkaErrorCode.CONCURRENT_TRANSACTIONS, meta };
    return { errorCode: KafkaErrorCode.NONE, meta };
  }

  private begin(m: TxnMeta): void {
    if (m.state !== 'Ongoing') {
      m.state = 'Ongoing';
      m.startTimeMs = Date.now();
      m.partitions = [];
      m.groups = [];
      m.offsets = [];
    }
  }

  /** AddPartitionsToTxn: answers one error code per partition (all the same unless a partition is unknown). */
  addPartitions(
    transactionalId: string,
    producerId: number,
    producerEpoch: number,
    parts: Array<{ stream: string; partition: number }>,
    fencedCode: number,
  ): Promise<number[]> {
    return this.run(transactionalId, async () => {
      const c = this.check(transactionalId, producerId, producerEpoch, fencedCode);
      if (c.errorCode !== KafkaErrorCode.NONE || c.meta === null) return parts.map(() => c.errorCode);
      const m = c.meta;
      const unknown = parts.map((p) => {
        const e = this.engine.getStream(p.stream);
        return e === undefined || p.partition < 0 || p.partition >= e.def.partitions;
      });
      if (unknown.some((u) => u)) {
        // As Kafka: the unknown partitions fail, the others are not attempted.
        return unknown.map((u) => (u ? KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION : KafkaErrorCode.OPERATION_NOT_ATTEMPTED));
      }
      this.begin(m);
      let added = false;
      for (const p of parts) {
        if (m.partitions.some((q) => q.stream === p.stream && q.partition === p.partition)) continue;
        m.partitions.push({ ...p, startOffset: this.engine.offsets(p.stream, p.partition).highWatermark });
        added = true;
      }
      if (added || m.partitions.length === 0) await this.persist(m);
      return parts.map(() => KafkaErrorCode.NONE);
    });
  }

  addOffsets(transactionalId: string, producerId: number, producerEpoch: number, group: string, fencedCode: number): Promise<number> {
    return this.run(transactionalId, async () => {
      const c = this.check(transactionalId, producerId, producerEpoch, fencedCode);
      if (c.errorCode !== KafkaErrorCode.NONE || c.meta === null) return c.errorCode;
      this.begin(c.meta);
      if (!c.meta.groups.includes(group)) {
        c.meta.groups.push(group);
        await this.persist(c.meta);
      }
      return KafkaErrorCode.NONE;
    });
  }

  /** TxnOffsetCommit: the offsets are kept with the transaction and committed to the group at its commit only. */
  txnOffsetCommit(
    transactionalId: string,
    producerId: number,
    producerEpoch: number,
    group: string,
    offsets: OffsetCommit[],
    fencedCode: number,
  ): Promise<number> {
    return this.run(transactionalId, async () => {
      const c = this.check(transactionalId, producerId, producerEpoch, fencedCode);
      if (c.errorCode !== KafkaErrorCode.NONE || c.meta === null) return c.errorCode;
      const m = c.meta;
      // AddOffsetsToTxn must have named the group first.
      if (m.state !== 'Ongoing' || !m.groups.includes(group)) return KafkaErrorCode.INVALID_TXN_STATE;
      for (const o of offsets) {
        m.offsets = m.offsets.filter((x) => !(x.group === group && x.stream === o.stream && x.partition === o.partition));
        m.offsets.push({ ...o, group });
      }
      await this.persist(m);
      return KafkaErrorCode.NONE;
    });
  }

  endTxn(transactionalId: string, producerId: number, producerEpoch: number, commit: boolean, fencedCode: number): Promise<number> {
    return this.run(transactionalId, async () => {
      const c = this.check(transactionalId, producerId, producerEpoch, fencedCode);
      if (c.errorCode !== KafkaErrorCode.NONE || c.meta === null) return c.errorCode;
      const m = c.meta;
      // A retried EndTxn whose first attempt completed is answered as it was (Kafka does the same).
      if (m.state === 'CompleteCommit' && commit) return KafkaErrorCode.NONE;
      if (m.state === 'CompleteAbort' && !commit) return KafkaErrorCode.NONE;
      if (m.state !== 'Ongoing') return KafkaErrorCode.INVALID_TXN_STATE;
      await this.complete(m, commit);
      return KafkaErrorCode.NONE;
    });
  }

  /** Whether a transactional produce by this producer to this partition may be appended (an error code if not). */
  checkProduce(producerId: number, producerEpoch: number, stream: string, partition: number): number {
    const id = this.byProducer.get(producerId);
    const m = id === undefined ? undefined : this.txns.get(id);
    if (m === undefined || m.producerId !== producerId) return KafkaErrorCode.INVALID_PRODUCER_ID_MAPPING;
    if (producerEpoch !== m.producerEpoch) return KafkaErrorCode.INVALID_PRODUCER_EPOCH;
    if (m.state !== 'Ongoing' || !m.partitions.some((p) => p.stream === stream && p.partition === partition)) return KafkaErrorCode.INVALID_TXN_STATE;
    return KafkaErrorCode.NONE;
  }

  /**
   * Writes the markers and finishes the transaction: Prepare* is stored first, so that a broker dying between two
   * markers finishes the same way after its restart.
   */
  private async complete(m: TxnMeta, commit: boolean): Promise<void> {
    m.state = commit ? 'PrepareCommit' : 'PrepareAbort';
    await this.persist(m);
    const now = Date.now();
    const durables: Promise<void>[] = [];
    const committed: Array<{ stream: string; from: number; to: number; partition: number }> = [];
    for (const p of m.partitions) {
      if (this.engine.getStream(p.stream) === undefined) continue; // deleted meanwhile: nothing to mark
      const first = this.partitions.firstOffset(p.stream, p.partition, m.producerId) ?? p.startOffset;
      const res = this.engine.appendControl(p.stream, p.partition, encodeControlBatch(m.producerId, m.producerEpoch, commit, 0, now));
      durables.push(res.durable);
      if (commit) committed.push({ stream: p.stream, partition: p.partition, from: first, to: res.baseOffset });
      if (!commit) {
        const list = this.partitions.addAborted(
          p.stream,
          p.partition,
          { producerId: m.producerId, firstOffset: first, lastOffset: res.baseOffset },
          this.engine.offsets(p.stream, p.partition).logStartOffset,
        );
        durables.push(this.store.putControl('txn-aborted', abortedDocName(p.stream, p.partition), { stream: p.stream, partition: p.partition, aborted: list }));
      }
      // The marker is in the log: readers may pass the transaction's records (commit) or skip them (abort).
      this.partitions.close(p.stream, p.partition, m.producerId);
    }
    await Promise.all(durables);
    // The records become visible to the other protocols now (Engine.produce held them back).
    for (const c of committed) await this.routeCommitted(c.stream, c.partition, m.producerId, c.from, c.to);
    if (commit && m.offsets.length > 0) {
      const byGroup = new Map<string, OffsetCommit[]>();
      for (const o of m.offsets) {
        let l = byGroup.get(o.group);
        if (!l) byGroup.set(o.group, (l = []));
        l.push({ stream: o.stream, partition: o.partition, offset: o.offset, metadata: o.metadata });
      }
      for (const [group, offsets] of byGroup) await this.engine.store.commitOffsets(group, offsets);
    }
    m.state = commit ? 'CompleteCommit' : 'CompleteAbort';
    m.partitions = [];
    m.groups = [];
    m.offsets = [];
    m.startTimeMs = -1;
    await this.persist(m);
    this.logger.debug({ transactionalId: m.transactionalId, commit }, 'transaction completed');
  }

  /**
   * Routes the producer's transactional batches in [from, to) of a partition to subscribers, queues and streams of
   * other protocols: read back from the log (a commit is rare next to produce, and the records are in the hot tail
   * most of the time), so that nothing is kept in memory per open transaction.
   */
  private async routeCommitted(stream: string, partition: number, producerId: number, from: number, to: number): Promise<void> {
    let offset = from;
    const copies: Promise<void>[] = [];
    while (offset < to) {
      const batches = await this.engine.read(stream, partition, offset, 1 << 20);
      if (batches.length === 0) break;
      let next = offset;
      for (const b of batches) {
        const info = readBatchInfo(b);
        if (info.baseOffset >= to) {
          next = to;
          break;
        }
        next = info.baseOffset + info.lastOffsetDelta + 1;
        const ours = Number(info.producerId) === producerId && (info.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL)) === ATTR_TRANSACTIONAL;
        if (!ours || info.baseOffset < from) continue;
        const d = this.engine.routeCommitted(stream, b);
        if (d) copies.push(d);
      }
      if (next <= offset) break;
      offset = next;
    }
    await Promise.all(copies);
  }

  /** Aborts the transactions open longer than their timeout, bumping the epoch (the producer is fenced). */
  private expire(): void {
    if (this.closed) return;
    const now = Date.now();
    for (const m of this.txns.values()) {
      if (m.state !== 'Ongoing' || m.startTimeMs < 0 || now - m.startTimeMs <= m.timeoutMs) continue;
      void this.run(m.transactionalId, async () => {
        if (m.state !== 'Ongoing' || Date.now() - m.startTimeMs <= m.timeoutMs) return;
        this.logger.info({ transactionalId: m.transactionalId, timeoutMs: m.timeoutMs }, 'transaction timed out: aborting');
        await this.bump(m);
        await this.complete(m, false);
      }).catch((err: unknown) => this.logger.warn({ err, transactionalId: m.transactionalId }, 'aborting a timed-out transaction failed'));
    }
  }
}
