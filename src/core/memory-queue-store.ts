/**
 * QueueStore in memory: for tests and memory-only brokers. Same contract as the durable backends (per-queue order,
 * ids increasing per queue, O(log n) reads), but "durable" means only that the call has taken effect: nothing
 * survives the process, only the store object (tests reopen queues on the same store to simulate a restart).
 */
import { FlowError } from './errors.js';
import type { QueueStore, StoredQueueMessage } from './queues.js';

interface StoredRow {
  data: Buffer;
  deliveries: number;
}

class MemQueue {
  /** Live rows by id. */
  readonly rows = new Map<number, StoredRow>();
  /**
   * Every appended id in increasing order, removed ones included until the next compaction: a read finds its
   * start by binary search and skips ids no longer in `rows`. Compacted when more than half are gone, so the
   * array costs O(1) amortized per removal and stays within twice the live count.
   */
  ids: number[] = [];
  /** Index of the first id that may still be live (removals at the head are the common case). */
  start = 0;
  bytes = 0;
  maxId = 0;

  compact(): void {
    const live = this.rows.size;
    const dead = this.ids.length - this.start - live;
    if (this.start > 1024 && this.start > this.ids.length / 2) {
      this.ids = this.ids.slice(this.start);
      this.start = 0;
    }
    if (dead > 1024 && dead > live) {
      const next: number[] = [];
      for (let i = this.start; i < this.ids.length; i++) if (this.rows.has(this.ids[i])) next.push(this.ids[i]);
      this.ids = next;
      this.start = 0;
    }
  }
}

export class MemoryQueueStore implements QueueStore {
  readonly kind = 'memory';
  private readonly queues = new Map<string, MemQueue>();
  private closed = false;

  private q(queue: string): MemQueue {
    if (this.closed) throw new FlowError('CLOSED', 'queue store is closed');
    let q = this.queues.get(queue);
    if (!q) {
      q = new MemQueue();
      this.queues.set(queue, q);
    }
    return q;
  }

  async openQueue(queue: string): Promise<{ count: number; bytes: number; maxId: number }> {
    const q = this.q(queue);
    return { count: q.rows.size, bytes: q.bytes, maxId: q.maxId };
  }

  async append(queue: string, messages: Array<{ id: number; data: Buffer }>): Promise<void> {
    const q = this.q(queue);
    for (const m of messages) {
      if (!Number.isSafeInteger(m.id) || m.id <= q.maxId) {
        throw new FlowError('INVALID_ARGUMENT', `queue ${queue}: id ${m.id} is not above ${q.maxId}`);
      }
      q.maxId = m.id;
      q.rows.set(m.id, { data: m.data, deliveries: 0 });
      q.ids.push(m.id);
      q.bytes += m.data.length;
    }
  }

  async remove(queue: string, ids: number[]): Promise<void> {
    const q = this.q(queue);
    for (const id of ids) {
      const row = q.rows.get(id);
      if (!row) continue;
      q.rows.delete(id);
      q.bytes -= row.data.length;
    }
    while (q.start < q.ids.length && !q.rows.has(q.ids[q.start])) q.start++;
    q.compact();
  }

  async setDeliveries(queue: string, id: number, deliveries: number): Promise<void> {
    const row = this.q(queue).rows.get(id);
    if (row) row.deliveries = deliveries;
  }

  async read(queue: string, fromId: number, limit: number): Promise<StoredQueueMessage[]> {
    const q = this.q(queue);
    const ids = q.ids;
    let lo = q.start;
    let hi = ids.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (ids[mid] < fromId) lo = mid + 1;
      else hi = mid;
    }
    const out: StoredQueueMessage[] = [];
    for (let i = lo; i < ids.length && out.length < limit; i++) {
      const row = q.rows.get(ids[i]);
      if (row) out.push({ id: ids[i], data: row.data, deliveries: row.deliveries });
    }
    return out;
  }

  async purge(queue: string): Promise<number> {
    const q = this.q(queue);
    const n = q.rows.size;
    q.rows.clear();
    q.ids = [];
    q.start = 0;
    q.bytes = 0;
    return n;
  }

  async dropQueue(queue: string): Promise<void> {
    if (this.closed) throw new FlowError('CLOSED', 'queue store is closed');
    this.queues.delete(queue);
  }

  async dropQueues(prefix: string): Promise<number> {
    if (this.closed) throw new FlowError('CLOSED', 'queue store is closed');
    let n = 0;
    for (const name of [...this.queues.keys()]) {
      if (!name.startsWith(prefix)) continue;
      this.queues.delete(name);
      n++;
    }
    return n;
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  figures(): Record<string, unknown> {
    let messages = 0;
    for (const q of this.queues.values()) messages += q.rows.size;
    return { queues: this.queues.size, messages };
  }
}
