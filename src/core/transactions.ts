/**
 * What a partition's readers need to know of Kafka transactions (KIP-98), kept by the engine for every protocol that
 * reads streams: the first offset of every open transaction
 * that wrote to it (the last stable offset, LSO, is the smallest of them, else the high watermark) and the
 * aborted transactions (producer id, first offset, offset of the abort marker), which Fetch hands read_committed
 * consumers so that they drop those records.
 *
 * Kept beside the log rather than in it: open transactions are tracked as Kafka's produce appends their batches
 * (the base offset is known synchronously), and the aborted list is stored in the metastore by the Kafka
 * transaction coordinator when it writes an abort marker (src/protocols/kafka/transactions), loaded at start.
 */
import { ATTR_TRANSACTIONAL, type BatchInfo } from './record-batch.js';

export interface AbortedTxn {
  producerId: number;
  firstOffset: number;
  /** Offset of the abort marker. */
  lastOffset: number;
}

const key = (stream: string, partition: number): string => `${stream}\u0000${partition}`;

export class TxnPartitions {
  /** Per partition: producer id -> first offset of its open transaction there. */
  private readonly open = new Map<string, Map<number, number>>();
  private readonly aborted = new Map<string, AbortedTxn[]>();
  /**
   * Stores a partition's aborted list after the log cleaner shortened it (dropAborted); set by whoever stores the
   * list (the Kafka transaction coordinator's metastore documents). Without it the change stays in memory.
   */
  persistAborted: ((stream: string, partition: number, list: AbortedTxn[]) => Promise<void>) | null = null;
  /**
   * The aborted lists are loaded and what a previous run left open is ended (the Kafka transaction coordinator
   * started): until then the log cleaner leaves partitions holding transactional batches alone, since it could not
   * tell aborted or open records from committed ones. A single broker sets it once; in cluster mode it stays false
   * and each partition is marked by itself (setLoaded) once its leader loaded its state.
   */
  loaded = false;
  /** Cluster mode: the partitions whose transaction state this broker, their leader, has loaded. */
  private readonly ready = new Set<string>();
  /**
   * Newest epoch seen per transactional producer id at this broker (its markers and batches), for a partition leader
   * that does not coordinate the producer's transactional id (cluster mode): an older epoch is a fenced zombie.
   */
  private readonly epochs = new Map<number, number>();

  /** Whether `epoch` is not older than the producer's newest one seen here; remembers it. */
  admitEpoch(producerId: number, epoch: number): boolean {
    const known = this.epochs.get(producerId);
    if (known !== undefined && epoch < known) return false;
    if (known === undefined || epoch > known) this.epochs.set(producerId, epoch);
    return true;
  }

  /**
   * Deletes the stored transaction state of a deleted stream's partitions (their aborted lists); set by whoever
   * stores it (the Kafka transaction coordinator's metastore documents).
   */
  removeStored: ((stream: string, partitions: number) => Promise<void>) | null = null;
  /**
   * Deletes the transactional ids `match` selects (a namespace is deleted, src/control/namespace-removal.ts), in
   * memory and in the store; answers their names. Set by the Kafka transaction coordinator (null: Kafka not running).
   */
  removeIds: ((match: (transactionalId: string) => boolean) => Promise<string[]>) | null = null;

  /**
   * A stream was deleted: its partitions' open transactions and aborted lists go, here and in the store, so that a
   * stream made again under the same name inherits none (a read_committed reader would skip its records at the
   * offsets of the old aborts, or stop at an old open transaction's first offset).
   */
  async streamDeleted(stream: string, partitions: number): Promise<void> {
    for (let p = 0; p < partitions; p++) this.reset(stream, p);
    await this.removeStored?.(stream, partitions);
  }

  /** Forgets what is known of a partition (it moved to another broker; the next owner loads it from the metastore). */
  reset(stream: string, partition: number): void {
    const k = key(stream, partition);
    this.open.delete(k);
    this.aborted.delete(k);
    this.ready.delete(k);
  }

  /**
   * Cluster mode: whether this broker holds the partition's transaction state now: set once its leader loaded it
   * (TransactionCoordinator.loadPartition), unset as soon as the partition is being taken or let go (ClusterStreams),
   * so that the cleaner never judges a partition by another leadership's state.
   */
  setLoaded(stream: string, partition: number, loaded: boolean): void {
    if (loaded) this.ready.add(key(stream, partition));
    else this.ready.delete(key(stream, partition));
  }

  /** Whether the log cleaner may judge the partition's transactional batches (see `loaded`). */
  isLoaded(stream: string, partition: number): boolean {
    return this.loaded || this.ready.has(key(stream, partition));
  }

  /** A transactional batch was appended at `offset`: the first one of its transaction here holds the LSO. */
  onAppend(stream: string, partition: number, producerId: number, offset: number): void {
    const k = key(stream, partition);
    let m = this.open.get(k);
    if (!m) this.open.set(k, (m = new Map<number, number>()));
    if (!m.has(producerId)) m.set(producerId, offset);
  }

  /** First offset of the producer's open transaction in the partition, if it wrote there. */
  firstOffset(stream: string, partition: number, producerId: number): number | undefined {
    return this.open.get(key(stream, partition))?.get(producerId);
  }

  /** The transaction ended (its marker is written): it no longer holds the LSO. */
  close(stream: string, partition: number, producerId: number): void {
    const k = key(stream, partition);
    const m = this.open.get(k);
    if (!m) return;
    m.delete(producerId);
    if (m.size === 0) this.open.delete(k);
  }

  /**
   * Adds an aborted transaction; those wholly below `logStartOffset` go (no fetch can return their records any more),
   * so the list, stored whole at each abort, stays as long as the partition's retained aborts.
   */
  addAborted(stream: string, partition: number, txn: AbortedTxn, logStartOffset: number): AbortedTxn[] {
    const k = key(stream, partition);
    const l = (this.aborted.get(k) ?? []).filter((a) => a.lastOffset >= logStartOffset);
    l.push(txn);
    this.aborted.set(k, l);
    return l;
  }

  /** Loads a partition's aborted list (from the metastore at start). */
  setAborted(stream: string, partition: number, list: AbortedTxn[]): void {
    this.aborted.set(key(stream, partition), list);
  }

  /**
   * The log cleaner removed every record of these aborted transactions (src/storage/log/compaction.ts): they leave
   * the list, stored before the cleaner may remove their markers, so that no fetch names an aborted transaction whose
   * abort marker is gone (a read_committed consumer would skip that producer's later records).
   */
  async dropAborted(stream: string, partition: number, drop: (a: AbortedTxn) => boolean): Promise<void> {
    const k = key(stream, partition);
    const l = this.aborted.get(k);
    if (!l) return;
    const kept = l.filter((a) => !drop(a));
    if (kept.length === l.length) return;
    this.aborted.set(k, kept);
    await this.persistAborted?.(stream, partition, kept);
  }

  /** The last stable offset: the first offset of the oldest open transaction, else the high watermark. */
  lso(stream: string, partition: number, highWatermark: number): number {
    const m = this.open.get(key(stream, partition));
    if (!m) return highWatermark;
    let lso = highWatermark;
    for (const o of m.values()) if (o < lso) lso = o;
    return lso;
  }

  /** Whether a stored batch belongs to a transaction that was aborted (its records are skipped by every reader). */
  isAborted(stream: string, partition: number, batch: BatchInfo): boolean {
    if ((batch.attributes & ATTR_TRANSACTIONAL) === 0) return false;
    const l = this.aborted.get(key(stream, partition));
    if (l === undefined) return false;
    const producerId = Number(batch.producerId);
    const offset = batch.baseOffset;
    return l.some((a) => a.producerId === producerId && a.firstOffset <= offset && offset < a.lastOffset);
  }

  /** Aborted transactions overlapping offsets [from, to) (what a fetch returning those offsets must name). */
  abortedIn(stream: string, partition: number, from: number, to: number): AbortedTxn[] {
    const l = this.aborted.get(key(stream, partition));
    if (!l) return [];
    return l.filter((a) => a.lastOffset >= from && a.firstOffset < to);
  }
}
