/**
 * Checks clear-text passwords against scrypt hashes on dedicated worker threads, with bounded concurrency and a
 * bounded queue.
 *
 * Why not node:crypto's async scrypt: it runs on libuv's thread pool (4 threads), which the WAL's file writes use
 * too. A flood of wrong-password CONNECTs (about 80 a second from 300 sockets) occupied the pool and pushed Kafka
 * acks=all latency from 0.2 ms to p50 11.5 s (issue 12). Here each check runs synchronously inside one of
 * `threads` worker threads (password-worker.ts), so the pool stays free for storage, and at most `threads` cores
 * are ever spent on passwords. Checks beyond the threads wait in a queue of at most `maxQueue`; past that a check
 * is answered 'busy' at once, costing nothing, instead of queueing without limit (a queue of wrong passwords only
 * delays the right ones behind it). A `priority` check (the guard gives it to clients whose address has not failed
 * lately) goes ahead of the others and, when the queue is full, takes the place of the newest ordinary one, which
 * is answered 'busy': during a flood a well-behaved client still gets in after at most one queue of priority checks.
 *
 * The threads start with the first check (a broker without password traffic starts none), are unref'ed (they
 * never keep the process alive) and end with close().
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import { SCRYPT, SCRYPT_KEYLEN, type PasswordHash } from './users.js';
import type { WorkerInit, WorkerReply, WorkerRequest } from './password-worker.js';

export type VerifyResult = 'ok' | 'bad' | 'busy';

export interface PasswordVerifierOptions {
  /** Worker threads, i.e. checks computed at once. Default 1. */
  threads?: number;
  /** Checks waiting for a thread; beyond this a check is answered 'busy'. Default 32. */
  maxQueue?: number;
  /** Linux nice value of the worker threads (0 = same priority as the event loop). Default 10. */
  nice?: number;
  /** scrypt cost, default users.ts's SCRYPT (tests use a cheaper one). */
  scrypt?: { N: number; r: number; p: number };
}

interface Job {
  id: number;
  priority: boolean;
  password: Buffer;
  expected: Buffer;
  salt: Buffer;
  resolve(r: VerifyResult): void;
  reject(e: Error): void;
  /** A hash job (a new password): gets the computed hash instead of a verdict. */
  hashed?: (h: Buffer) => void;
}

interface Slot {
  worker: Worker;
  job: Job | null;
}

export class PasswordVerifier {
  readonly threads: number;
  readonly maxQueue: number;
  private readonly nice: number;
  private readonly cost: { N: number; r: number; p: number };
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private nextId = 1;
  private closed = false;
  /** Figures for the admin API and tests. */
  readonly stats = { checked: 0, busy: 0, workersStarted: 0, niceApplied: false };

  constructor(opts: PasswordVerifierOptions = {}) {
    this.threads = Math.max(1, opts.threads ?? 1);
    this.maxQueue = Math.max(0, opts.maxQueue ?? 32);
    this.nice = opts.nice ?? 10;
    this.cost = opts.scrypt ?? SCRYPT;
  }

  /** Checks waiting for a thread. */
  get queued(): number {
    return this.queue.length;
  }

  /** Checks being computed. */
  get running(): number {
    return this.slots.reduce((n, s) => n + (s.job ? 1 : 0), 0);
  }

  /**
   * 'ok' when `password` hashes to `stored`, 'bad' when not, 'busy' (at once, nothing computed) when every thread
   * is working and the queue is full, or the verifier is closed.
   */
  verify(password: Buffer | string, stored: PasswordHash, priority = false): Promise<VerifyResult> {
    if (this.closed) return this.busy();
    if (this.queue.length >= this.maxQueue + this.idleSlots()) {
      // Full: an ordinary check is refused; a priority one takes the place of the newest ordinary one, if any.
      let victim = -1;
      if (priority) for (let i = this.queue.length - 1; i >= 0 && victim < 0; i--) if (!this.queue[i].priority) victim = i;
      if (victim < 0) return this.busy();
      this.stats.busy++;
      this.queue.splice(victim, 1)[0].resolve('busy');
    }
    const pw = typeof password === 'string' ? Buffer.from(password, 'utf8') : Buffer.from(password);
    return new Promise<VerifyResult>((resolve, reject) => {
      const job: Job = { id: this.nextId++, priority, password: pw, expected: stored.hash, salt: stored.salt, resolve, reject };
      if (priority) {
        // Behind the priority checks already waiting, ahead of every ordinary one.
        let i = 0;
        while (i < this.queue.length && this.queue[i].priority) i++;
        this.queue.splice(i, 0, job);
      } else this.queue.push(job);
      this.pump();
    });
  }

  /**
   * The scrypt hash of a new password (a user added or a password changed through the admin API), computed on the
   * same threads as the checks, so that a burst of user changes cannot take libuv's pool from the WAL either.
   * Queued behind the checks waiting, never refused; rejected once the verifier is closed.
   */
  hash(password: string): Promise<PasswordHash> {
    if (this.closed) return Promise.reject(new Error('password verifier closed'));
    const salt = randomBytes(16);
    return new Promise<PasswordHash>((resolve, reject) => {
      const job: Job = {
        id: this.nextId++,
        priority: false,
        password: Buffer.from(password, 'utf8'),
        expected: Buffer.alloc(0),
        salt,
        resolve: (r) => r === 'busy' && reject(new Error('password verifier closed')),
        reject,
        hashed: (hash) => resolve({ salt, hash }),
      };
      this.queue.push(job);
      this.pump();
    });
  }

  private busy(): Promise<VerifyResult> {
    this.stats.busy++;
    return Promise.resolve('busy');
  }

  /** Ends the threads; checks still waiting are answered 'busy'. */
  async close(): Promise<void> {
    this.closed = true;
    for (const j of this.queue.splice(0)) j.resolve('busy');
    const slots = this.slots.splice(0);
    for (const s of slots) s.job?.resolve('busy');
    await Promise.all(slots.map((s) => s.worker.terminate()));
  }

  private idleSlots(): number {
    let idle = this.threads - this.slots.length;
    for (const s of this.slots) if (!s.job) idle++;
    return idle;
  }

  private pump(): void {
    while (this.queue.length > 0) {
      let slot = this.slots.find((s) => !s.job);
      if (!slot && this.slots.length < this.threads) slot = this.startWorker();
      if (!slot) return;
      const job = this.queue.shift()!;
      slot.job = job;
      // A thread keeps the process alive only while it computes (an idle one must not hold up exit).
      slot.worker.ref();
      slot.worker.postMessage({ id: job.id, password: job.password, salt: job.salt } satisfies WorkerRequest);
    }
  }

  private startWorker(): Slot {
    const init: WorkerInit = { nice: this.nice, ...this.cost, keylen: SCRYPT_KEYLEN };
    const worker = new Worker(new URL('./password-worker.js', import.meta.url), { workerData: init });
    this.stats.workersStarted++;
    const slot: Slot = { worker, job: null };
    worker.on('message', (m: WorkerReply | { ready: true; niceApplied: boolean }) => {
      if ('ready' in m) {
        this.stats.niceApplied = m.niceApplied;
        return;
      }
      const job = slot.job;
      if (!job || job.id !== m.id) return;
      slot.job = null;
      slot.worker.unref();
      this.stats.checked++;
      const hash = Buffer.from(m.hash);
      if (job.hashed) {
        job.hashed(hash);
        this.pump();
        return;
      }
      job.resolve(hash.length === job.expected.length && timingSafeEqual(hash, job.expected) ? 'ok' : 'bad');
      this.pump();
    });
    const fail = (err: Error) => {
      const i = this.slots.indexOf(slot);
      if (i < 0) return;
      // A dead thread fails its own check only; the next check starts a new thread.
      this.slots.splice(i, 1);
      slot.job?.reject(err);
      slot.job = null;
      if (!this.closed) this.pump();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`password worker exited (${code})`)));
    // Idle until pump() gives it a job; after the listeners, since adding a 'message' listener refs it again.
    worker.unref();
    this.slots.push(slot);
    return slot;
  }
}
