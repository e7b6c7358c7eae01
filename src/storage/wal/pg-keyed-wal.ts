/**
 * What the two WALs indexed in PostgreSQL share (postgres-wal.ts: the bytes in a table; object-wal.ts: the bytes in
 * objects, an index in a table): the appends' queue and their admission (epochs known here, KeyFences after a failed
 * group), fence() as an upsert of the key's wal_epochs row ordered after the appends issued before it, the count of
 * settled appends that fence() waits on, the bytes held per key, and what a failed group leaves (its keys refused
 * from the failed offset on, then resuming). Each subclass writes its groups in its own flush loop.
 */
import { FlowError } from '../../core/index.js';
import type { PgPool } from '../postgres-util.js';
import { appendRefusal, KeyFences } from './frame.js';
import type { WalEntry } from './types.js';

export interface PendingAppend {
  entry: WalEntry;
  resolve(): void;
  reject(err: Error): void;
}

export abstract class PgKeyedWal {
  protected closed = false;
  protected queue: PendingAppend[] = [];
  protected flushing: Promise<void> | null = null;
  protected readonly fences = new KeyFences();
  /** Keys whose next accepted entry follows a failed group: it replaces what the key holds from its base on. */
  protected readonly resuming = new Set<string>();
  /** Highest epoch seen per key (appends, fences): stale appends are refused without a round trip. */
  protected readonly epochs = new Map<string, number>();
  /** Appends accepted into the queue, and those written or failed since (fence() waits for the ones before it). */
  private issued = 0;
  private completed = 0;
  private settledWaiters: Array<{ upTo: number; resolve: () => void }> = [];
  /** Bytes held per key, and in total. */
  protected readonly keyBytes = new Map<string, number>();
  protected totalBytes = 0;

  protected constructor(protected readonly db: PgPool) {}

  /** Writes the queue's appends, group after group, until it is empty (then sets `flushing` back to null). */
  protected abstract flushLoop(): Promise<void>;

  /** Called with each append accepted into the queue. */
  protected queued(_entry: WalEntry): void {}

  protected addBytes(key: string, n: number): void {
    const v = (this.keyBytes.get(key) ?? 0) + n;
    if (v === 0) this.keyBytes.delete(key);
    else this.keyBytes.set(key, v);
    this.totalBytes += n;
  }

  protected setBytes(key: string, n: number): void {
    this.totalBytes += n - (this.keyBytes.get(key) ?? 0);
    if (n === 0) this.keyBytes.delete(key);
    else this.keyBytes.set(key, n);
  }

  protected checkOpen(): void {
    if (this.closed) throw new FlowError('CLOSED', 'WAL is closed');
  }

  async fence(key: string, epoch: number): Promise<void> {
    this.checkOpen();
    if (!Number.isSafeInteger(epoch) || epoch < 0) throw new FlowError('INVALID_ARGUMENT', `bad epoch ${epoch}`);
    // Per-key order: appends of the key issued after this call are held to the new epoch at once, and those issued
    // before it are written (or fail) before the fence is.
    if (epoch > (this.epochs.get(key) ?? -1)) this.epochs.set(key, epoch);
    await this.appendsSettled();
    // Waits for a group holding the key's lock; groups after it see the raised epoch.
    const r = await this.db.query<{ epoch: number }>(
      'WAL fence',
      {
        name: 'fmwal_fence',
        text: `INSERT INTO wal_epochs AS w (key, epoch) VALUES ($1, $2)
        ON CONFLICT (key) DO UPDATE SET epoch = GREATEST(w.epoch, excluded.epoch) RETURNING w.epoch`,
      },
      [key, epoch],
    );
    this.raiseEpoch(key, r.rows[0].epoch);
  }

  append(entry: WalEntry): Promise<void> {
    if (!this.closed && (!Number.isSafeInteger(entry.epoch) || entry.epoch < 0)) {
      return Promise.reject(new FlowError('INVALID_ARGUMENT', `bad WAL entry epoch ${entry.epoch} for ${entry.key}`));
    }
    const refused = appendRefusal(this.closed, entry) ?? this.epochRefusal(entry) ?? this.fences.check(entry);
    if (refused) return Promise.reject(refused);
    this.epochs.set(entry.key, entry.epoch);
    this.issued++;
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ entry, resolve, reject });
      this.queued(entry);
      this.flushing ??= this.flushLoop();
    });
  }

  /** Resolves once every append issued before the call has been written or has failed (groups go in order). */
  private appendsSettled(): Promise<void> {
    if (this.completed >= this.issued) return Promise.resolve();
    return new Promise<void>((resolve) => this.settledWaiters.push({ upTo: this.issued, resolve }));
  }

  /** `n` more appends written or failed: fences waiting for them go on. */
  protected settled(n: number): void {
    this.completed += n;
    if (this.settledWaiters.length === 0) return;
    const ready = this.settledWaiters.filter((w) => w.upTo <= this.completed);
    this.settledWaiters = this.settledWaiters.filter((w) => w.upTo > this.completed);
    for (const w of ready) w.resolve();
  }

  private epochRefusal(entry: WalEntry): FlowError | null {
    const known = this.epochs.get(entry.key);
    if (known === undefined || entry.epoch >= known) return null;
    return new FlowError('FENCED', `WAL: ${entry.key} is owned by epoch ${known}: epoch ${entry.epoch} is fenced`);
  }

  protected raiseEpoch(key: string, epoch: number): void {
    if (epoch > (this.epochs.get(key) ?? -1)) this.epochs.set(key, epoch);
  }

  /** An append found fenced by the group's lock: the key's epoch raised to the stored one, the append refused. */
  protected refuseFenced(p: PendingAppend, stored: number): void {
    this.raiseEpoch(p.entry.key, stored);
    p.reject(new FlowError('FENCED', `WAL: ${p.entry.key} is owned by epoch ${stored}: epoch ${p.entry.epoch} is fenced`));
  }

  /** A group that failed: its entries fail, and so do those of its keys queued behind it; the keys then resume. */
  protected failGroup(live: PendingAppend[], e: FlowError): void {
    for (const p of live) {
      this.fences.refuse(p.entry.key, p.entry.baseOffset, e);
      this.resuming.add(p.entry.key);
    }
    for (const p of live) p.reject(e);
  }

  /** A key taken over (replayKey, after fence()): a failure while this broker wrote it before no longer applies. */
  protected forgetFailures(key: string): void {
    this.fences.forget(key);
    this.resuming.delete(key);
  }

  /** The keys held here that `flushedUpTo` says are flushed past 0, with those offsets (trim's parameters). */
  protected flushedKeys(flushedUpTo: (key: string) => number): { keys: string[]; upTo: number[] } {
    const keys: string[] = [];
    const upTo: number[] = [];
    for (const key of this.keyBytes.keys()) {
      const f = flushedUpTo(key);
      if (f > 0) {
        keys.push(key);
        upTo.push(f);
      }
    }
    return { keys, upTo };
  }

  /** Rows of a trim or a drop (bytes deleted per key) taken off the held bytes; returns their sum. */
  protected release(rows: ReadonlyArray<{ key: string; bytes: number }>): number {
    let released = 0;
    for (const row of rows) {
      this.addBytes(row.key, -row.bytes);
      released += row.bytes;
    }
    return released;
  }

  size(): number {
    return this.totalBytes;
  }
}
