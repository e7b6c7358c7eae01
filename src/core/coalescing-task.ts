/**
 * A task that runs one at a time, where a call made while it runs asks for exactly one more run after it: every
 * caller gets a promise for a run that started after its call (so "sync what was written before I asked" and
 * "trim what was flushed before I asked" hold), and any number of callers during one run share the next run.
 * Group commit in one object.
 */
export class CoalescingTask {
  private running: Promise<void> | null = null;
  private queued: Promise<void> | null = null;

  constructor(private readonly fn: () => Promise<void>) {}

  run(): Promise<void> {
    if (this.queued) return this.queued;
    if (this.running) {
      const q = this.running
        .catch(() => undefined)
        .then(() => {
          this.queued = null;
          return this.run();
        });
      this.queued = q;
      return q;
    }
    const r = this.fn().finally(() => {
      if (this.running === r) this.running = null;
    });
    this.running = r;
    return r;
  }

  /** Waits for the current and queued runs (their failures are the callers' to see). */
  async idle(): Promise<void> {
    while (this.queued || this.running) await (this.queued ?? this.running)?.catch(() => undefined);
  }
}
