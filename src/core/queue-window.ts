/**
 * The in-memory window of a queue (src/core/queue.ts): its bounds and the entries it holds, ready ones in a min-heap
 * by id so that requeued messages (lower ids) come out ahead of newer ones.
 */
import type { Message } from './message.js';
import type { QueueStore } from './queues.js';

/** Bounds of the in-memory window of ready messages of a queue (durable, or paging: see QueuePages). */
export interface QueueWindowOptions {
  /** Ready messages kept in memory at most (requeued ones may exceed it by the unacked count). */
  maxMessages: number;
  /** Payload bytes of ready messages kept in memory at most (one read batch may exceed it). */
  maxBytes: number;
  /** Messages read from the store per refill. */
  readBatch: number;
}

/**
 * Where the queues without a durable store (non-durable and exclusive ones) page the messages beyond their window:
 * the broker's local queue store, under keys starting with `prefix`. The prefix names this broker (cluster mode:
 * several brokers share one store) and starts with "amq.", which no declared queue name can (the router refuses it,
 * except for its own "amq.gen-" names), so a page never meets a durable queue's messages. Nothing there outlives the
 * process: the broker drops every key under its prefix at start (QueueStore.dropQueues), before any queue opens.
 */
export interface QueuePages {
  store: QueueStore;
  prefix: string;
}

/** One runtime's pages: the store and its key there. */
export interface QueuePaging {
  store: QueueStore;
  key: string;
}

export const DEFAULT_QUEUE_WINDOW: QueueWindowOptions = { maxMessages: 20_000, maxBytes: 64 * 1024 * 1024, readBatch: 1000 };

/** One message the runtime holds in memory (ready in the heap, or unacked). */
export interface Entry {
  id: number;
  msg: Message;
  bytes: number;
  /** Deliveries so far. */
  deliveries: number;
  /** Delivered before (requeued), or recovered after a restart. */
  redelivered: boolean;
  /** Absolute expiry (per-message or queue TTL); Infinity when none. */
  expiresAt: number;
  /** In the store: must be removed from it when acked / dropped. */
  stored: boolean;
  /** Owner of the unacked delivery; null when ready. */
  owner: string | null;
}

/** Binary min-heap of entries by id. */
export class IdHeap {
  readonly a: Entry[] = [];
  get size(): number {
    return this.a.length;
  }
  peek(): Entry | undefined {
    return this.a[0];
  }
  push(e: Entry): void {
    const a = this.a;
    let i = a.length;
    a.push(e);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p].id <= e.id) break;
      a[i] = a[p];
      i = p;
    }
    a[i] = e;
  }
  pop(): Entry | undefined {
    const a = this.a;
    const top = a[0];
    const last = a.pop();
    if (a.length === 0 || last === undefined) return top;
    let i = 0;
    const n = a.length;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && a[r].id < a[l].id ? r : l;
      if (a[c].id >= last.id) break;
      a[i] = a[c];
      i = c;
    }
    a[i] = last;
    return top;
  }
  clear(): Entry[] {
    return this.a.splice(0, this.a.length);
  }
}
