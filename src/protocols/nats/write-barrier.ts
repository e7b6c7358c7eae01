/**
 * A NATS connection's barrier of pending writes: what it answers after its earlier publishes into streams are
 * durable (a PONG, a JetStream API request) waits until those writes settled, as nats-server, which handles a
 * connection's operations in order, has stored a PUB before it answers the PING after it (nats.js's `flush()`, then
 * a stream's `state.messages`). A stream counts up to its durable end, which moves when the write group commits, a
 * few ms after the PUB: without the barrier a PUB + flush + STREAM.INFO read 0.
 *
 * Writes are counted per epoch (a run of publishes between two waiting actions); an action waits for its epoch and
 * every earlier one, actions run in the order they came (PONGs answer PINGs in order), and a publish after a waiting
 * action opens a new epoch (the action never waits for later writes). Only this connection's writes count: other
 * connections are not held back. A write not settled within `boundMs` does not hold its actions longer: they run
 * then (a stuck disk cannot pin a PONG). While nothing waits, a publish costs one counter and no allocation.
 */

/** How long an action may wait for earlier writes before it runs anyway. */
export const BARRIER_BOUND_MS = 2000;

interface Waiting {
  run: () => void;
  at: number;
}

class Epoch {
  pending = 0;
  waiting: Waiting[] | null = null;
  readonly settled: [() => void, (err: unknown) => void];
  constructor(barrier: WriteBarrier) {
    const ok = (): void => {
      this.pending--;
      barrier.onSettled(this);
    };
    this.settled = [
      ok,
      (err: unknown): void => {
        ok();
        barrier.onFailed(err);
      },
    ];
  }
}

export class WriteBarrier {
  /** Oldest first; the last is the one new writes join (never one with waiting actions). */
  private readonly epochs: Epoch[] = [];
  /** Writes not settled, in every epoch. */
  pending = 0;
  private waitingCount = 0;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;

  /**
   * `settledOne`: after every settled write (the connection's read flow control); `failed`: a write that failed.
   */
  constructor(
    private readonly settledOne: () => void,
    private readonly failed: (err: unknown) => void,
    private readonly boundMs = BARRIER_BOUND_MS,
  ) {}

  /** Something would wait: a write not settled, or an action waiting. */
  get busy(): boolean {
    return this.pending > 0 || this.waitingCount > 0;
  }

  /** Counts a write: the callbacks to hand to its promise's then(). */
  write(): [() => void, (err: unknown) => void] {
    let e = this.epochs.length === 0 ? null : this.epochs[this.epochs.length - 1];
    if (e === null || e.waiting !== null) {
      e = new Epoch(this);
      this.epochs.push(e);
    }
    e.pending++;
    this.pending++;
    return e.settled;
  }

  /** Runs `run` now when no earlier write or action is pending, else once they are (or after the bound). */
  after(run: () => void): void {
    if (this.closed) return;
    if (!this.busy) return run();
    const e = this.epochs[this.epochs.length - 1];
    (e.waiting ??= []).push({ run, at: Date.now() });
    this.waitingCount++;
    if (this.timer === null) this.arm(this.boundMs);
  }

  /** The connection is gone: nothing waiting runs. */
  close(): void {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    for (const e of this.epochs) e.waiting = null;
    this.waitingCount = 0;
  }

  /** @internal */
  onSettled(e: Epoch): void {
    this.pending--;
    if (e.pending === 0 && e === this.epochs[0]) this.drain();
    this.settledOne();
  }

  /** @internal */
  onFailed(err: unknown): void {
    this.failed(err);
  }

  /** Runs the actions of the settled epochs at the head, oldest first; drops those epochs (but the last). */
  private drain(): void {
    while (this.epochs.length > 0) {
      const e = this.epochs[0];
      if (e.pending > 0) break;
      const w = e.waiting;
      e.waiting = null;
      if (w !== null) {
        this.runAll(w);
        if (this.closed) return;
      }
      // The last one stays: new writes join it (an action run above may have joined it already).
      if (this.epochs.length === 1) break;
      this.epochs.shift();
    }
    if (this.waitingCount === 0 && this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  private runAll(w: Waiting[]): void {
    this.waitingCount -= w.length;
    for (const a of w) if (!this.closed) a.run();
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => this.expire(), Math.max(1, ms));
    this.timer.unref();
  }

  /** The bound: the actions that waited boundMs run (in order: those before them too); the timer follows the next. */
  private expire(): void {
    this.timer = null;
    const limit = Date.now() - this.boundMs;
    for (const e of this.epochs) {
      const w = e.waiting;
      if (w === null) continue;
      if (w[w.length - 1].at > limit) {
        // Part of this epoch's actions are due: those, in order; the rest keeps waiting.
        let n = 0;
        while (n < w.length && w[n].at <= limit) n++;
        if (n > 0) this.runAll(w.splice(0, n));
        if (!this.closed) this.arm(w[0].at - limit);
        return;
      }
      e.waiting = null;
      this.runAll(w);
      if (this.closed) return;
    }
    // Epochs whose writes settled and whose actions ran: dropped at the next settle (drain), or now.
    this.drain();
  }
}
