/**
 * The embedded QueueStore: queue messages in their own SQLite file (`queues.db` in the data directory), run by a
 * worker thread (sqlite-worker.ts), so that neither SQL nor the fsync of a commit ever blocks the event loop.
 *
 * Cost on the event loop: a call pushes one small op and returns a promise; the calls of one tick go to the
 * worker as ONE postMessage (flushed from setImmediate), their message bodies copied once into one fresh
 * ArrayBuffer that is transferred, not cloned (a Buffer handed to postMessage clones its whole backing store,
 * which for pooled or sliced Buffers is far more than the message). Read replies come back the same way, and the
 * messages returned are views of that one buffer.
 *
 * Order and durability: one worker runs the calls; it queues them by queue and commits them in fair groups (a queue's
 * calls never wait behind more than a quantum of each other queue's: see fair-groups.ts), so calls naming a queue
 * take effect in the order they were made, and calls of different queues may not; a call resolves once the
 * transaction holding it has committed with synchronous=FULL.
 *
 * Failures: if the worker dies (a crash, an out-of-memory), every call sent to it and not yet answered rejects
 * with FlowError STORAGE_ERROR (retriable: whether it committed is unknown; a retried append of the same ids is
 * a no-op for those already stored) and the next call starts a new worker on the same file. What a call that
 * resolved wrote was committed and fsync'd: nothing acknowledged is lost. close() ends the worker.
 */
import type { Worker } from 'node:worker_threads';
import { FlowError } from '../../core/index.js';
import type { StoredQueueMessage } from '../../core/index.js';
import { BatchedQueueStore } from './batched-store.js';
import { bootQueueWorker, takeQueueWorker } from './sqlite-worker-boot.js';
import type { OpError, OpResult, ReadResult, WorkerBatch, WorkerOp, WorkerReply, WorkerRequest } from './protocol.js';

interface Call {
  resolve(v: unknown): void;
  reject(e: Error): void;
}

/** A batch sent to the worker: its calls (null once answered) and how many are still unanswered. */
interface Sent {
  calls: Array<Call | null>;
  left: number;
}

export class SqliteQueueStore extends BatchedQueueStore {
  readonly kind = 'sqlite';
  private worker: Worker | null = null;
  /** The current tick's calls, not yet sent. */
  private ops: WorkerOp[] = [];
  private calls: Call[] = [];
  private bodies: Buffer[] = [];
  private bodyBytes = 0;
  private scheduled = false;
  private seq = 0;
  /** Elided messages counted by workers before the current one. */
  private elidedBefore = 0;
  private readonly sent = new Map<number, Sent>();
  private idleWaiters: Array<() => void> = [];
  private stats = { calls: 0, batches: 0, commits: 0, workerRestarts: 0, workerFailures: 0, bytesAppended: 0, elided: 0 };

  private constructor(private readonly file: string) {
    super();
  }

  /** Opens (creating if needed) the queue database in a worker thread; fails if the file cannot be opened. */
  static async open(file: string): Promise<SqliteQueueStore> {
    const { store, ready } = SqliteQueueStore.start(file);
    await ready;
    return store;
  }

  /**
   * Starts the worker and returns at once, so that a broker's start goes on while the thread boots (~60 ms of a
   * restart were spent waiting for it): calls made meanwhile wait in the worker's message queue. `ready` settles
   * once the worker has opened the file and rejects when it cannot (its rejection is left for the caller to see).
   */
  static start(file: string): { store: SqliteQueueStore; ready: Promise<void> } {
    const store = new SqliteQueueStore(file);
    const ready = store.startWorker();
    ready.catch(() => undefined);
    return { store, ready };
  }

  /** Takes the worker `flowmq start` booted early for this file (sqlite-worker-boot.ts), else boots one. */
  private startWorker(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let ready = false;
      const attach = (w: Worker): void => {
        this.worker = w;
        w.unref();
        w.on('message', (m: WorkerReply) => {
          if (m.seq === -1) {
            ready = true;
            if (m.ok) resolve();
            else reject(new FlowError(m.code, m.message));
            return;
          }
          this.onReply(m as WorkerReply & { seq: 0 });
        });
        const fail = (why: string, cause?: unknown): void => {
          if (this.worker !== w) return;
          this.worker = null;
          this.stats.workerFailures++;
          const err = new FlowError('STORAGE_ERROR', `queue store worker ${why}; the calls it had not answered failed (retriable)`, { cause });
          if (!ready) reject(err);
          this.failSent(err);
        };
        w.on('error', (err) => fail(`failed: ${err.message}`, err));
        w.on('messageerror', (err) => fail(`could not read a message: ${err.message}`, err));
        w.on('exit', (code) => fail(`exited (code ${code})`));
      };
      if (!takeQueueWorker(this.file, attach)) attach(bootQueueWorker(this.file));
    });
  }

  private failSent(err: FlowError): void {
    const sent = [...this.sent.values()];
    this.sent.clear();
    for (const s of sent) for (const c of s.calls) c?.reject(err);
    this.settleIdle();
  }

  /** A group's answer: the worker takes a batch's calls into groups of its choosing (fair-groups.ts). */
  private onReply(m: WorkerReply & { seq: 0 }): void {
    const err = m.ok ? null : new FlowError(m.code, `queue store: ${m.message}`);
    const results = m.ok ? m.results : [];
    const buf = m.ok ? m.buf : null;
    if (m.ok) {
      this.stats.commits = m.commits;
      // Messages removed before their append was written (sqlite-worker.ts: elide), counted by the current worker.
      this.stats.elided = this.elidedBefore + m.elided;
    }
    const done = m.done;
    for (let k = 0; k < done.length; k += 2) {
      const s = this.sent.get(done[k]!);
      const c = s?.calls[done[k + 1]!];
      if (!s || !c) continue;
      s.calls[done[k + 1]!] = null;
      if (--s.left === 0) this.sent.delete(done[k]!);
      if (err) {
        c.reject(err);
        continue;
      }
      const r = results[k >> 1]!;
      if (r !== null && typeof r === 'object' && 'error' in r) c.reject(new FlowError(r.error, r.message));
      else c.resolve(r !== null && typeof r === 'object' && 'ids' in r ? toMessages(r, buf) : r);
    }
    this.settleIdle();
  }

  private settleIdle(): void {
    if (this.sent.size === 0) {
      this.worker?.unref();
      const w = this.idleWaiters;
      this.idleWaiters = [];
      for (const f of w) f();
    }
  }

  protected call<T>(op: WorkerOp, body?: Buffer[]): Promise<T> {
    if (this.closed) return Promise.reject(new FlowError('CLOSED', 'queue store is closed'));
    return new Promise<T>((resolve, reject) => {
      if (body) {
        // Appends carry their bodies as [offset, length] ranges of the batch's buffer, laid out at flush.
        const ranges = (op as { ranges: number[] }).ranges;
        for (const b of body) {
          ranges.push(this.bodyBytes, b.length);
          this.bodies.push(b);
          this.bodyBytes += b.length;
        }
      }
      this.ops.push(op);
      this.calls.push({ resolve: resolve as (v: unknown) => void, reject });
      this.stats.calls++;
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /** Sends the tick's calls as one batch (starting a new worker if the last one died). */
  private flush(): void {
    this.scheduled = false;
    if (this.ops.length === 0) return;
    const ops = this.ops;
    const calls = this.calls;
    let buf: ArrayBuffer | null = null;
    if (this.bodies.length > 0) {
      buf = new ArrayBuffer(this.bodyBytes);
      const u8 = new Uint8Array(buf);
      let off = 0;
      for (const b of this.bodies) {
        u8.set(b, off);
        off += b.length;
      }
      this.stats.bytesAppended += this.bodyBytes;
    }
    this.ops = [];
    this.calls = [];
    this.bodies = [];
    this.bodyBytes = 0;
    if (!this.worker) {
      this.stats.workerRestarts++;
      this.elidedBefore = this.stats.elided;
      // Failures of the new worker (the file unreadable now) reach the calls through its 'exit'.
      this.startWorker().catch(() => undefined);
    }
    const seq = ++this.seq;
    this.sent.set(seq, { calls, left: calls.length });
    this.stats.batches++;
    const batch: WorkerBatch = { seq, ops, buf };
    this.worker!.ref();
    this.worker!.postMessage(batch satisfies WorkerRequest, buf ? [buf] : []);
  }

  protected callAppend(queue: string, ids: number[], bodies: Buffer[]): Promise<void> {
    return this.call({ k: 'append', q: queue, ids, ranges: [] }, bodies);
  }

  /** Tests only: makes the worker die as a crash would, with the calls made before this one sent to it. */
  crashWorkerForTest(): Promise<void> {
    return this.call({ k: 'crash' });
  }

  figures(): Record<string, unknown> {
    return {
      ...this.stats,
      meanBatchCalls: this.stats.batches > 0 ? this.stats.calls / this.stats.batches : 0,
      batchesInFlight: this.sent.size,
      workerRunning: this.worker !== null,
    };
  }

  /** Finishes the calls already made, then closes the database and ends the worker. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.scheduled) this.flush();
    if (this.sent.size > 0) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    const w = this.worker;
    this.worker = null;
    if (!w) return;
    const exited = new Promise<void>((resolve) => w.once('exit', () => resolve()));
    w.postMessage({ close: true } satisfies WorkerRequest);
    // A worker that does not end by itself (stuck in a checkpoint of a dead disk) is ended; SQLite's journal
    // keeps the database consistent either way.
    const timer = setTimeout(() => void w.terminate(), 5000);
    await exited;
    clearTimeout(timer);
  }
}

function toMessages(r: ReadResult, buf: ArrayBuffer | null): StoredQueueMessage[] {
  const out = new Array<StoredQueueMessage>(r.ids.length);
  for (let i = 0; i < r.ids.length; i++) {
    out[i] = { id: r.ids[i], deliveries: r.deliveries[i], data: Buffer.from(buf!, r.ranges[2 * i], r.ranges[2 * i + 1]) };
  }
  return out;
}

export type { OpError, OpResult };
