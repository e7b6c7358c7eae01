/**
 * What the two QueueStore backends share: the checks of a call's arguments and its translation into one operation
 * of a group commit. Each backend sends the operations its own way (a worker thread's batch, a PostgreSQL
 * transaction) through `call` and `callAppend`.
 */
import { FlowError } from '../../core/index.js';
import type { QueueMark, QueueStore, StoredQueueMessage } from '../../core/index.js';

/** The operations every backend runs, as both encode them. */
export type CommonOp =
  | { k: 'open'; q: string }
  | { k: 'remove'; q: string; ids: number[] }
  | { k: 'deliveries'; q: string; id: number; n: number }
  | { k: 'read'; q: string; from: number; limit: number }
  | { k: 'purge'; q: string }
  | { k: 'drop'; q: string }
  /** Every queue whose name starts with `q` (dropQueues). */
  | { k: 'dropPrefix'; q: string };

export function checkId(what: string, n: number): void {
  if (!Number.isSafeInteger(n) || n < 0) throw new FlowError('INVALID_ARGUMENT', `${what} must be a non-negative integer, not ${n}`);
}

export abstract class BatchedQueueStore implements QueueStore {
  abstract readonly kind: string;
  protected closed = false;

  /** Queues one operation into the backend's next group; rejects with CLOSED once the store is closed. */
  protected abstract call<T>(op: CommonOp): Promise<T>;
  /** Queues an append of checked ids and their bodies. */
  protected abstract callAppend(queue: string, ids: number[], bodies: Buffer[], mark?: QueueMark): Promise<void>;
  abstract close(): Promise<void>;

  openQueue(queue: string): Promise<{ count: number; bytes: number; maxId: number; marks?: Record<string, number> }> {
    return this.call({ k: 'open', q: queue });
  }

  append(queue: string, messages: Array<{ id: number; data: Buffer }>, mark?: QueueMark): Promise<void> {
    if (messages.length === 0) return this.idle();
    const ids: number[] = [];
    const bodies: Buffer[] = [];
    try {
      for (const m of messages) {
        checkId('message id', m.id);
        ids.push(m.id);
        bodies.push(m.data);
      }
    } catch (err) {
      return Promise.reject(err);
    }
    return this.callAppend(queue, ids, bodies, mark);
  }

  remove(queue: string, ids: number[]): Promise<void> {
    if (ids.length === 0) return this.idle();
    return this.call({ k: 'remove', q: queue, ids: ids.slice() });
  }

  setDeliveries(queue: string, id: number, deliveries: number): Promise<void> {
    try {
      checkId('message id', id);
      checkId('deliveries', deliveries);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.call({ k: 'deliveries', q: queue, id, n: deliveries });
  }

  read(queue: string, fromId: number, limit: number): Promise<StoredQueueMessage[]> {
    try {
      checkId('fromId', fromId);
      checkId('limit', limit);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.call({ k: 'read', q: queue, from: fromId, limit });
  }

  purge(queue: string): Promise<number> {
    return this.call({ k: 'purge', q: queue });
  }

  dropQueue(queue: string): Promise<void> {
    return this.call({ k: 'drop', q: queue });
  }

  dropQueues(prefix: string): Promise<number> {
    if (prefix === '') return Promise.reject(new FlowError('INVALID_ARGUMENT', 'dropQueues needs a prefix'));
    return this.call({ k: 'dropPrefix', q: prefix });
  }

  /** A call with nothing to do: resolves at once, or rejects with CLOSED as every call does once closed. */
  private idle(): Promise<void> {
    return this.closed ? Promise.reject(new FlowError('CLOSED', 'queue store is closed')) : Promise.resolve();
  }
}
