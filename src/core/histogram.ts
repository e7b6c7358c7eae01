/**
 * A fixed-bucket latency histogram: constant memory and O(1) recording, so it can sit on a hot path. Buckets grow
 * by 2^(1/4) (±9% resolution) from 10 µs to about 2.5 minutes; a snapshot can be diffed against an earlier
 * one, so a caller can look at just the interval it measured.
 */
const MIN_MS = 0.01;
const STEP = Math.SQRT2 ** 0.5;
const BUCKETS = 96;
const LOG_STEP = Math.log(STEP);

/** Upper bound (ms) of every bucket; the last one also takes everything above it. */
export const HISTOGRAM_BOUNDS_MS: readonly number[] = Array.from({ length: BUCKETS }, (_, i) => MIN_MS * STEP ** (i + 1));

export interface HistogramSnapshot {
  count: number;
  /** Sum of every recorded value (ms): what Prometheus's `_sum` needs for a mean. */
  sumMs: number;
  /** Count per bucket of HISTOGRAM_BOUNDS_MS. */
  buckets: number[];
}

export class LatencyHistogram {
  private readonly counts = new Array<number>(BUCKETS).fill(0);
  private total = 0;
  private sum = 0;

  record(ms: number): void {
    this.sum += ms;
    const i = ms <= MIN_MS ? 0 : Math.min(BUCKETS - 1, Math.floor(Math.log(ms / MIN_MS) / LOG_STEP));
    this.counts[i]++;
    this.total++;
  }

  snapshot(): HistogramSnapshot {
    return { count: this.total, sumMs: this.sum, buckets: this.counts.slice() };
  }
}

/** The p-quantile (0..1) of `now` minus `before` (an earlier snapshot of the same histogram), as a bucket bound. */
export function histogramQuantile(p: number, now: HistogramSnapshot, before?: HistogramSnapshot): number | null {
  const counts = now.buckets.map((c, i) => c - (before?.buckets[i] ?? 0));
  const n = counts.reduce((a, b) => a + b, 0);
  if (n === 0) return null;
  const rank = Math.max(1, Math.ceil(p * n));
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i];
    if (seen >= rank) return HISTOGRAM_BOUNDS_MS[i];
  }
  return HISTOGRAM_BOUNDS_MS[BUCKETS - 1];
}
