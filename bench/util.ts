/**
 * Small helpers shared by the benchmark modules: sockets, timing, statistics, formatting.
 */
import { connect, type Socket } from 'node:net';

export const HOST = '127.0.0.1';

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Seconds since an arbitrary origin, sub-microsecond resolution, monotonic, and the same clock in every thread of
 * the process (the latency benchmark's consumer runs in a worker and compares its reading with the producer's).
 */
export function nowS(): number {
  return Number(process.hrtime.bigint()) / 1e9;
}

/** A TCP port that is free on 127.0.0.1, outside the kernel's ephemeral range (test/helpers/ports.ts). */
export { freePort } from '../test/helpers/ports.js';

/** Connects to 127.0.0.1:port (Nagle off); rejects on error or after `timeoutMs`. */
export function open(port: number, timeoutMs = 10_000): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: HOST, noDelay: true });
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`connect to ${HOST}:${port} timed out`));
    }, timeoutMs);
    s.once('connect', () => {
      clearTimeout(timer);
      s.removeListener('error', reject);
      resolve(s);
    });
    s.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

export async function waitPort(port: number, timeoutMs = 20_000, alive?: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const s = await open(port, 1000);
      s.destroy();
      return;
    } catch {
      if (alive && !alive()) throw new Error(`process exited before port ${port} opened`);
      if (Date.now() > deadline) throw new Error(`port ${port} did not open within ${timeoutMs} ms`);
      await sleep(50);
    }
  }
}

/** Polls `fn` every 5 ms until it is true; throws `what` after `timeoutMs`. */
export async function until(fn: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

/** Waits until `value()` has not changed for `quietMs` (or `maxMs` passed); returns whether it settled. */
export async function settle(value: () => number, quietMs: number, maxMs: number): Promise<boolean> {
  const deadline = Date.now() + maxMs;
  let last = value();
  let since = Date.now();
  while (Date.now() < deadline) {
    await sleep(25);
    const v = value();
    if (v !== last) {
      last = v;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) return true;
  }
  return false;
}

/** Runs `fn` over 0..n-1 with at most `concurrency` calls in flight; results in index order. */
export async function mapLimit<T>(n: number, concurrency: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      out[i] = await fn(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, worker));
  return out;
}

export interface Percentiles {
  count: number;
  p50: number;
  p99: number;
  max: number;
}

/** Nearest-rank percentiles of `samples` (sorted in place). */
export function percentiles(samples: number[]): Percentiles {
  if (samples.length === 0) return { count: 0, p50: NaN, p99: NaN, max: NaN };
  const s = Float64Array.from(samples).sort();
  const at = (q: number) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
  return { count: s.length, p50: at(0.5), p99: at(0.99), max: s[s.length - 1] };
}

export function fmt(n: number, digits = 0): string {
  if (!Number.isFinite(n)) return '-';
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

export function ratio(a: number, b: number): string {
  return Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${fmt(a / b, 2)}×` : '-';
}

/** Rounds every number in a JSON-bound value to `digits` decimals, so the results file stays readable. */
export function roundDeep<T>(v: T, digits = 3): T {
  const f = 10 ** digits;
  const walk = (x: unknown): unknown => {
    if (typeof x === 'number') return Number.isFinite(x) ? Math.round(x * f) / f : null;
    if (Array.isArray(x)) return x.map(walk);
    if (x && typeof x === 'object') return Object.fromEntries(Object.entries(x).map(([k, y]) => [k, walk(y)]));
    return x;
  };
  return walk(v) as T;
}

/** A markdown table with padded columns. */
export function table(header: string[], rows: string[][]): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) => '| ' + r.map((c, j) => (c ?? '').padEnd(widths[j])).join(' | ') + ' |';
  return [line(header), '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|', ...rows.map(line)].join('\n');
}
