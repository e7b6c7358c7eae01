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
 * Expiration (transactional.id.expiration.ms, as Kafka): an id with no transaction activity for that long (its state
 * Empty or Complete*, unchanged since) is removed from the store by its coordinator, at the same check as the
 * timeouts; its next InitProducerId starts afresh with a new producer id. In cluster mode only the id's owner does it
 * (the delete is fenced by the id's owner epoch); every stored id has an owner row, taken by a live broker even
 * after its coordinator died (orphans are taken at a reconcile), so each one expires somewhere.
 *
 * On a single broker it coordinates every transactional id. In cluster mode (../cluster.ts) each transactional id
 * is owned like a consumer group (its placement broker, fenced by the owner row's epoch): that broker loads the
 * id's document when it takes it (acquire) and completes a commit or abort its predecessor left in flight; the
 * markers are written by each partition's leader (kafka.txnMarker), which also keeps the partition's LSO and
 * aborted list (loadPartition when it takes a partition over).
 */
import type { Logger } from 'pino';
import {
  ATTR_CONTROL,
  ATTR_TRANSACTIONAL,
  encodeControlBatch,
  FlowError,
  isFlowError,
  readBatchInfo,
  type Engine,
  type OffsetCommit,
} from '../../../core/index.js';
import { KafkaErrorCode } from '../codec/index.js';
import type { ControlFence, ControlRecord, ControlStore } from '../../../storage/metastore/control-store.js';
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
export type TxnStore = Pick<ControlStore, 'getControl' | 'putControl' | 'listControl' | 'deleteControl'>;

/** transaction.max.timeout.ms: a longer transaction.timeout.ms is INVALID_TRANSACTION_TIMEOUT. */
export const MAX_TRANSACTION_TIMEOUT_MS = 900_000;
const MAX_EPOCH = 32767;

export type TxnResult = { errorCode: number };

/** One marker to write: into a partition, for a producer's transaction, commit or abort. */
export interface MarkerTask {
  stream: string;
  partition: number;
  producerId: number;
  producerEpoch: number;
  commit: boolean;
  /** The partition's offset when it joined the transaction (used when its leader saw none of its records). */
  startOffset: number;
}
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
  /**
   * Cluster mode: writes a marker at the partition's leader, wherever it is (../cluster.ts); null: here
   * (writeMarker), every partition being local on a single broker.
   */
  markers: ((t: MarkerTask) => Promise<number>) | null = null;
  /** Cluster mode: the owner epoch of each transactional id coordinated here, which fences its document's writes. */
  private readonly fences = new Map<string, number>();
  /** Cluster mode: a write was fenced (another broker coordinates the id now): stop serving it here. */
  onFenced: ((transactionalId: string) => void) | null = null;
  /**
   * transactional.id.expiration.ms: an id whose state has not changed for this long, with no transaction open or
   * being completed, is removed from the store (expireIds).
   */
  idExpirationMs = 604_800_000;
  /**
   * Cluster mode: the owner epoch under which this broker leads a partition (null: it does not lead it), which fences
   * the writes of the partition's aborted list (storeAborted): a deposed leader overwrites nothing.
   */
  partitionEpoch: ((stream: string, partition: number) => number | null) | null = null;
  /** Cluster mode: a write of a partition's aborted list was fenced (another broker leads it now): stop leading it. */
  onPartitionFenced: ((stream: string, partition: number) => void) | null = null;

  constructor(
    private readonly engine: Engine,
    private readonly store: TxnStore,
    private readonly allocate: () => Promise<number>,
    private readonly logger: Logger,
  ) {
    this.partitions = engine.transactions;
  }

  /**
   * Loads the stored state; completes (PrepareCommit) or aborts (Ongoing, PrepareAbort) what was in flight. In cluster
   * mode (`cluster`) nothing is loaded here: a transactional id's state when this broker takes its ownership
   * (acquire), a partition's when it takes the partition's leadership (loadPartition).
   */
  async start(expiryCheckMs = 1000, cluster = false): Promise<void> {
    if (!cluster) {
      for (const r of await this.store.listControl('txn-aborted')) {
        const { stream, partition, aborted } = r.data as { stream: string; partition: number; aborted: AbortedTxn[] };
        // Left by a stream deleted before its lists went with it: removed.
        if (this.engine.getStream(stream) === undefined) {
          await this.store.deleteControl('txn-aborted', r.name);
          continue;
        }
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
    }
    if (expiryCheckMs > 0) {
      this.timer = setInterval(() => this.expire(), expiryCheckMs);
      this.timer.unref();
    }
  }

  /**
   * Cluster mode: this broker now coordinates `transactionalId` (its 'txn' owner row). Loads its state; a commit or
   * abort its previous coordinator decided (Prepare*, durable) but did not finish is completed, first on the id's
   * chain, so that every request after the takeover sees it done. An open transaction stays open: its partitions
   * and offsets are in the document, and its producer goes on with this coordinator (or it times out here).
   */
  async acquire(transactionalId: string, epoch: number): Promise<void> {
    this.forget(transactionalId);
    this.fences.set(transactionalId, epoch);
    const r = await this.store.getControl('txn', transactionalId);
    if (r === null) return;
    const m = r.data as unknown as TxnMeta;
    this.txns.set(transactionalId, m);
    this.byProducer.set(m.producerId, transactionalId);
    if (m.state === 'PrepareCommit' || m.state === 'PrepareAbort') {
      const commit = m.state === 'PrepareCommit';
      this.logger.info({ transactionalId, state: m.state }, 'completing a transaction its previous coordinator left in flight');
      void this.run(transactionalId, () => this.complete(m, commit)).catch((err: unknown) => {
        this.logger.warn({ err, transactionalId }, 'completing a taken-over transaction failed; trying again');
        this.retryLater(m);
      });
    }
  }

  /** Cluster mode: another broker coordinates the id now. A handover waits for the operation under way. */
  async release(transactionalId: string, lost: boolean): Promise<void> {
    const chain = this.chains.get(transactionalId);
    if (!lost && chain) await chain;
    this.forget(transactionalId);
  }

  private forget(transactionalId: string): void {
    const m = this.txns.get(transactionalId);
    if (m && this.byProducer.get(m.producerId) === transactionalId) this.byProducer.delete(m.producerId);
    this.txns.delete(transactionalId);
    this.fences.delete(transactionalId);
  }

  /**
   * Cluster mode: this broker now leads the partition. Loads its aborted list and the first offsets of the open
   * transactions that added it, found in the log (firstInLog) from the offset their coordinators' documents say the
   * partition was at when it joined, so that the last stable offset and read_committed stay right across a change
   * of leader. A transaction with no record here yet holds nothing (its first append will).
   */
  async loadPartition(stream: string, partition: number): Promise<void> {
    this.partitions.reset(stream, partition);
    const r = await this.store.getControl('txn-aborted', abortedDocName(stream, partition));
    if (r !== null) this.partitions.setAborted(stream, partition, (r.data as { aborted: AbortedTxn[] }).aborted);
    for (const d of await this.openTxnDocs()) {
      const m = d.data as unknown as TxnMeta;
      if (m.state !== 'Ongoing' && m.state !== 'PrepareCommit' && m.state !== 'PrepareAbort') continue;
      const p = m.partitions.find((q) => q.stream === stream && q.partition === partition);
      const first = p ? await this.firstInLog(stream, partition, m.producerId, p.startOffset) : null;
      if (first !== null) this.partitions.onAppend(stream, partition, m.producerId, first);
    }
    // The log cleaner may judge the partition's transactional batches from now on.
    this.partitions.setLoaded(stream, partition, true);
  }

  /**
   * Stores a partition's aborted list (after an abort marker, or the log cleaner's dropAborted). In cluster mode the
   * write carries the partition's owner epoch (ControlFence on its 'partition' owner row), as the coordinator's own
   * writes carry the transactional id's: once another broker took the partition, FENCED, and this one lets it go.
   */
  async storeAborted(stream: string, partition: number, aborted: AbortedTxn[]): Promise<void> {
    let fence: ControlFence | undefined;
    if (this.partitionEpoch !== null) {
      const epoch = this.partitionEpoch(stream, partition);
      if (epoch === null) throw new FlowError('NOT_OWNER', `this broker does not lead ${stream}/${partition}`);
      fence = { owner: 'partition', name: `${stream}/${partition}`, epoch };
    }
    try {
      await this.store.putControl('txn-aborted', abortedDocName(stream, partition), { stream, partition, aborted }, fence);
    } catch (err) {
      if (isFlowError(err, 'FENCED')) this.onPartitionFenced?.(stream, partition);
      throw err;
    }
  }

  /**
   * The offset of the producer's open transaction's first record in the partition, read from the log: its first
   * transactional batch after its last marker, at or after `from`; null when it wrote nothing there. `from` is the
   * partition's high watermark as the coordinator saw it when the partition joined: exact on one broker, but in
   * cluster mode the coordinator's view of a partition led elsewhere may be old (or 0), so the producer's earlier,
   * completed transactions can lie above it. Taking `from` itself as the first offset put them inside the abort's
   * range: a read_committed consumer skipped committed records (the eos-cluster crash test lost 320 of 40,000).
   */
  private async firstInLog(stream: string, partition: number, producerId: number, from: number): Promise<number | null> {
    const { logStartOffset, highWatermark } = this.engine.offsets(stream, partition);
    let offset = Math.max(from, logStartOffset);
    let first: number | null = null;
    while (offset < highWatermark) {
      const batches = await this.engine.read(stream, partition, offset, 1 << 20);
      let next = offset;
      for (const b of batches) {
        const info = readBatchInfo(b);
        next = Math.max(next, info.baseOffset + info.lastOffsetDelta + 1);
        if (Number(info.producerId) !== producerId || (info.attributes & ATTR_TRANSACTIONAL) === 0) continue;
        // A marker (control batches are transactional too) ends the producer's earlier transaction.
        if ((info.attributes & ATTR_CONTROL) !== 0) first = null;
        else first ??= info.baseOffset;
      }
      if (next <= offset) break;
      offset = next;
    }
    return first;
  }

  /** The txn documents, read once for the partitions a failover moves here together (within a second). */
  private txnDocs: { at: number; docs: Promise<ControlRecord[]> } | null = null;
  private openTxnDocs(): Promise<ControlRecord[]> {
    const now = Date.now();
    if (this.txnDocs === null || now - this.txnDocs.at > 1000) this.txnDocs = { at: now, docs: this.store.listControl('txn') };
    const docs = this.txnDocs.docs;
    docs.catch(() => {
      if (this.txnDocs?.docs === docs) this.txnDocs = null;
    });
    return docs;
  }

  /** Closed (the broker stops): what is still to be done goes to the ids' and partitions' next owners. */
  get isClosed(): boolean {
    return this.closed;
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
    const id = m.transactionalId;
    try {
      await this.store.putControl('txn', id, m as unknown as Record<string, unknown>, this.fences.get(id));
    } catch (err) {
      if (isFlowError(err, 'FENCED')) this.onFenced?.(id);
      throw err;
    }
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
        const e = this.engine.getAnyStream(p.stream);
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
      try {
        await this.complete(m, commit);
      } catch (err) {
        this.retryLater(m);
        throw err;
      }
      return KafkaErrorCode.NONE;
    });
  }

  /**
   * A decided transaction (Prepare*) whose markers could not all be written (storage, or a partition without a
   * reachable leader): completed again in a few seconds, on the id's chain, until it is done or the id moves away
   * (its next coordinator completes it at its takeover).
   */
  private retryLater(m: TxnMeta, delayMs = 5000): void {
    if (this.closed) return;
    const t = setTimeout(() => {
      if (this.closed || this.txns.get(m.transactionalId) !== m) return;
      void this.run(m.transactionalId, async () => {
        if (this.txns.get(m.transactionalId) !== m || (m.state !== 'PrepareCommit' && m.state !== 'PrepareAbort')) return;
        await this.complete(m, m.state === 'PrepareCommit');
      }).catch((err: unknown) => {
        this.logger.warn({ err, transactionalId: m.transactionalId }, 'completing a transaction failed again; trying again');
        this.retryLater(m, delayMs);
      });
    }, delayMs);
    t.unref();
  }

  /** Whether a transactional produce by this producer to this partition may be appended (an error code if not). */
  checkProduce(producerId: number, producerEpoch: number, stream: string, partition: number): number {
    const id = this.byProducer.get(producerId);
    const m = id === undefined ? undefined : this.txns.get(id);
    if (m === undefined && this.markers !== null) {
      // Cluster mode, the producer's coordinator is another broker: as a Kafka partition leader, refuse only an epoch
      // older than one seen here (a marker of a newer epoch fenced it); its coordinator checked the rest.
      return this.partitions.admitEpoch(producerId, producerEpoch) ? KafkaErrorCode.NONE : KafkaErrorCode.INVALID_PRODUCER_EPOCH;
    }
    if (m === undefined || m.producerId !== producerId) return KafkaErrorCode.INVALID_PRODUCER_ID_MAPPING;
    if (producerEpoch !== m.producerEpoch) return KafkaErrorCode.INVALID_PRODUCER_EPOCH;
    this.partitions.admitEpoch(producerId, producerEpoch);
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
    const write = this.markers ?? ((t: MarkerTask) => this.writeMarker(t));
    await Promise.all(
      m.partitions.map((p) =>
        write({ stream: p.stream, partition: p.partition, producerId: m.producerId, producerEpoch: m.producerEpoch, commit, startOffset: p.startOffset }),
      ),
    );
    if (commit && m.offsets.length > 0) {
      const byGroup = new Map<string, OffsetCommit[]>();
      for (const o of m.offsets) {
        let l = byGroup.get(o.group);
        if (!l) byGroup.set(o.group, (l = []));
        l.push({ stream: o.stream, partition: o.partition, offset: o.offset, metadata: o.metadata });
      }
      // The shared metastore in cluster mode: the group's coordinator reads committed offsets from there.
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
   * At the partition's leader (this broker, or the receiver of kafka.txnMarker in cluster mode): appends the marker,
   * records an abort in the partition's aborted list (stored), closes the transaction there (the LSO moves on)
   * and, at a commit, routes its records to the other protocols. Answers the marker's offset.
   */
  async writeMarker(t: MarkerTask): Promise<number> {
    const { stream, partition, producerId } = t;
    if (this.engine.getAnyStream(stream) === undefined) return -1; // deleted meanwhile: nothing to mark
    this.partitions.admitEpoch(producerId, t.producerEpoch);
    // Not known here (a restart, or no record of the transaction since this broker took the partition): from the
    // log, before the marker is appended; nothing of it in the log: the range starts at the marker (as Kafka's does).
    const known = this.partitions.firstOffset(stream, partition, producerId) ?? (await this.firstInLog(stream, partition, producerId, t.startOffset));
    const res = this.engine.appendControl(stream, partition, encodeControlBatch(producerId, t.producerEpoch, t.commit, 0, Date.now()));
    const first = known ?? res.baseOffset;
    const durables: Promise<void>[] = [res.durable];
    if (!t.commit) {
      const list = this.partitions.addAborted(
        stream,
        partition,
        { producerId, firstOffset: first, lastOffset: res.baseOffset },
        this.engine.offsets(stream, partition).logStartOffset,
      );
      durables.push(this.storeAborted(stream, partition, list));
    }
    // The marker is in the log: readers may pass the transaction's records (commit) or skip them (abort).
    this.partitions.close(stream, partition, producerId);
    await Promise.all(durables);
    // The records become visible to the other protocols now (Engine.produce held them back).
    if (t.commit) await this.routeCommitted(stream, partition, producerId, first, res.baseOffset);
    return res.baseOffset;
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

  /**
   * A stream was deleted (TxnPartitions.streamDeleted, which dropped their memory): its partitions' aborted lists leave
   * the store. Not fenced: the stream is gone whoever led its partitions.
   */
  async deleteAborted(stream: string, partitions: number): Promise<void> {
    for (let p = 0; p < partitions; p++) await this.store.deleteControl('txn-aborted', abortedDocName(stream, p));
  }

  /**
   * Deletes the transactional ids `match` selects (their namespace is deleted; its streams went before), each on its
   * chain: memory and stored document. A request queued behind finds no state and starts afresh. Answers their names.
   */
  async removeIds(match: (transactionalId: string) => boolean): Promise<string[]> {
    const ids = [...this.txns.keys()].filter(match);
    for (const id of ids) {
      await this.run(id, async () => {
        const m = this.txns.get(id);
        if (m === undefined) return;
        await this.store.deleteControl('txn', id, this.fences.get(id));
        this.txns.delete(id);
        if (this.byProducer.get(m.producerId) === id) this.byProducer.delete(m.producerId);
      });
    }
    return ids;
  }

  /**
   * Removes the transactional ids idle past transactional.id.expiration.ms (see the header), on each id's chain: a
   * request queued behind the expiry finds no state and starts afresh. In cluster mode the id stays owned here (its
   * owner row and fence kept), so such a request's writes stay fenced.
   */
  private expireIds(now: number): void {
    const idle = (m: TxnMeta, at: number) =>
      (m.state === 'Empty' || m.state === 'CompleteCommit' || m.state === 'CompleteAbort') && at - m.updatedAt > this.idExpirationMs;
    for (const m of this.txns.values()) {
      if (!idle(m, now)) continue;
      const id = m.transactionalId;
      void this.run(id, async () => {
        if (this.closed || this.txns.get(id) !== m || !idle(m, Date.now())) return;
        try {
          await this.store.deleteControl('txn', id, this.fences.get(id));
        } catch (err) {
          if (isFlowError(err, 'FENCED')) this.onFenced?.(id);
          throw err;
        }
        this.txns.delete(id);
        if (this.byProducer.get(m.producerId) === id) this.byProducer.delete(m.producerId);
        this.logger.info({ transactionalId: id, producerId: m.producerId, idleMs: Date.now() - m.updatedAt }, 'transactional id expired');
      }).catch((err: unknown) => this.logger.warn({ err, transactionalId: id }, 'expiring a transactional id failed; trying again'));
    }
  }

  /**
   * Aborts the transactions open longer than their timeout, bumping the epoch (the producer is fenced); expires the
   * idle transactional ids.
   */
  private expire(): void {
    if (this.closed) return;
    const now = Date.now();
    this.expireIds(now);
    for (const m of this.txns.values()) {
      if (m.state !== 'Ongoing' || m.startTimeMs < 0 || now - m.startTimeMs <= m.timeoutMs) continue;
      void this.run(m.transactionalId, async () => {
        if (m.state !== 'Ongoing' || Date.now() - m.startTimeMs <= m.timeoutMs) return;
        this.logger.info({ transactionalId: m.transactionalId, timeoutMs: m.timeoutMs }, 'transaction timed out: aborting');
        await this.bump(m);
        await this.complete(m, false);
      }).catch((err: unknown) => {
        this.logger.warn({ err, transactionalId: m.transactionalId }, 'aborting a timed-out transaction failed');
        if (m.state === 'PrepareAbort') this.retryLater(m);
      });
    }
  }
}
