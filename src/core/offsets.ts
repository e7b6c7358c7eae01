/**
 * Consumer-group offsets and producer ids, as the core sees them: storage interfaces implemented by the
 * metastore backends (and in memory here, for tests and storage-less brokers). Protocol adapters reach the
 * metastore only through these.
 */
import { FlowError } from './errors.js';

export interface CommittedOffset {
  group: string;
  stream: string;
  partition: number;
  /** Next offset the group will read; -1 means "no position". */
  offset: number;
  metadata: string | null;
  committedAt: number;
}

export type OffsetCommit = Omit<CommittedOffset, 'group' | 'committedAt'>;

export interface OffsetStore {
  /**
   * Stores several offsets of one group atomically (all or none); NOT_FOUND if a stream does not exist.
   * `fence` (cluster mode): the group's ownership epoch; the write is refused with FENCED unless the group's owner
   * row still holds it (a coordinator whose group moved can no longer commit). Stores outside a cluster ignore it.
   */
  commitOffsets(group: string, offsets: OffsetCommit[], fence?: number): Promise<void>;
  fetchOffset(group: string, stream: string, partition: number): Promise<CommittedOffset | null>;
  /** Every committed offset of a group, ordered by stream and partition. */
  listOffsets(group: string): Promise<CommittedOffset[]>;
  /** Groups holding at least one committed offset, ordered. */
  listGroups(): Promise<string[]>;
  /** Removes every offset of the group; no error when there is none. */
  deleteGroup(group: string): Promise<void>;
  /**
   * Removes the group's offsets of these partitions (Kafka OffsetDelete), atomically; no error for a partition
   * without one. `fence` as in commitOffsets.
   */
  deleteOffsets(group: string, partitions: ReadonlyArray<{ stream: string; partition: number }>, fence?: number): Promise<void>;
}

export interface ProducerIdStore {
  /**
   * Reserves `count` consecutive producer ids that were never handed out before, even across restarts, and
   * returns the first.
   */
  allocateProducerIds(count: number): Promise<number>;
}

/** In-memory offsets and producer ids (lost at exit): for tests and brokers without a metastore. */
export class MemoryOffsetStore implements OffsetStore, ProducerIdStore {
  private readonly offsets = new Map<string, Map<string, CommittedOffset>>();
  private nextProducerId = 0;

  /** Streams a commit may name; unset: any. */
  constructor(private readonly streamExists?: (stream: string) => boolean) {}

  async commitOffsets(group: string, offsets: OffsetCommit[], _fence?: number): Promise<void> {
    for (const o of offsets) {
      if (this.streamExists && !this.streamExists(o.stream)) throw new FlowError('NOT_FOUND', `stream "${o.stream}" not found`);
    }
    let g = this.offsets.get(group);
    if (!g) this.offsets.set(group, (g = new Map<string, CommittedOffset>()));
    const now = Date.now();
    for (const o of offsets) g.set(`${o.stream}\u0000${o.partition}`, { ...o, group, committedAt: now });
  }

  async fetchOffset(group: string, stream: string, partition: number): Promise<CommittedOffset | null> {
    return this.offsets.get(group)?.get(`${stream}\u0000${partition}`) ?? null;
  }

  async listOffsets(group: string): Promise<CommittedOffset[]> {
    return [...(this.offsets.get(group)?.values() ?? [])].sort((a, b) => (a.stream === b.stream ? a.partition - b.partition : a.stream < b.stream ? -1 : 1));
  }

  async listGroups(): Promise<string[]> {
    return [...this.offsets.keys()].filter((g) => (this.offsets.get(g)?.size ?? 0) > 0).sort();
  }

  async deleteGroup(group: string): Promise<void> {
    this.offsets.delete(group);
  }

  async deleteOffsets(group: string, partitions: ReadonlyArray<{ stream: string; partition: number }>, _fence?: number): Promise<void> {
    const g = this.offsets.get(group);
    if (!g) return;
    for (const p of partitions) g.delete(`${p.stream}\u0000${p.partition}`);
    if (g.size === 0) this.offsets.delete(group);
  }

  async allocateProducerIds(count: number): Promise<number> {
    const first = this.nextProducerId;
    this.nextProducerId += count;
    return first;
  }
}
