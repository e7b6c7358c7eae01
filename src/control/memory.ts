/**
 * The process's memory: the figures `GET /api/v1/broker` reports under `process`, and the release of what a flood
 * of connections leaves behind.
 *
 * Measured with `npm run bench -- flood-memory` (7,000 MQTT connections opened and closed; docs/benchmarks.md,
 * "Connection floods and memory"):
 * every byte of JavaScript state a connection had is garbage once it closes (after a full collection the heap was
 * back at its size before the flood), but the broker starts V8's old generation at 128 MiB (bin/flowmq, for the
 * Kafka latency tail), so nothing pushes V8 to collect it: a flood left the heap holding ~50–90 MB of dead sockets,
 * streams and closures, and the native memory those own (libuv handles, read buffers) until the old generation
 * filled up, flood after flood. FloodCollector runs one full collection once a flood's connections have gone, which
 * gives that back (V8 shrinks its heap and unmaps the pages).
 *
 * When: at most once per `intervalMs`, when at least `minClosed` connections closed since the last collection and
 * no fewer than are still open. The pause of a full collection grows with the live heap, not with the garbage, so
 * the second condition keeps it proportionate: a broker with 100,000 live connections and steady churn is left to
 * V8's own incremental collector; a broker whose 7,000 flood connections have just gone pays one collection, once
 * (16–182 ms measured on a shared 2-core VM, most of it freeing the connections' native objects, which V8 would
 * otherwise do whenever it next collected, possibly under load).
 *
 * The collection itself needs `gc`, which Node.js offers only with `--expose-gc`; bin/flowmq passes it. Without it
 * (`node bin/flowmq`, FLOWMQ_NODE_FLAGS without it, a broker inside tests) nothing is collected early.
 */
import { getHeapSpaceStatistics } from 'node:v8';
import type { Logger } from 'pino';

/** The process's memory as Node.js sees it, in bytes. */
export interface ProcessMemory {
  /** Resident set size. */
  rss: number;
  /** V8's heap: reserved and in use (live objects plus garbage not collected yet). */
  heapTotal: number;
  heapUsed: number;
  /** Memory outside the heap owned by JavaScript objects, of which `arrayBuffers` is Buffers. */
  external: number;
  arrayBuffers: number;
  /** The old generation, where a connection's state ends up (and its garbage stays until a full collection). */
  oldSpaceSize: number;
  oldSpaceUsed: number;
}

export function processMemory(): ProcessMemory {
  const m = process.memoryUsage();
  const old = getHeapSpaceStatistics().find((s) => s.space_name === 'old_space');
  return {
    rss: m.rss,
    heapTotal: m.heapTotal,
    heapUsed: m.heapUsed,
    external: m.external,
    arrayBuffers: m.arrayBuffers,
    oldSpaceSize: old?.space_size ?? 0,
    oldSpaceUsed: old?.space_used_size ?? 0,
  };
}

export interface FloodCollectorOptions {
  /** Connections opened and closed so far, over every listener of the process. */
  totals: { readonly opened: number; readonly closed: number };
  /** Runs a full garbage collection; default `globalThis.gc` (node --expose-gc), or nothing without it. */
  collect?: (() => void) | null;
  /** Closed connections since the last collection that make one worth it. Default 1,000. */
  minClosed?: number;
  /** How often the counts are looked at, and so the least time between two collections, ms. Default 10 s. */
  intervalMs?: number;
  logger?: Logger;
}

export interface FloodCollectorStats {
  /** Whether collections can run at all (`gc` is available). */
  enabled: boolean;
  collections: number;
  /** The last collection: connections closed since the one before, heap before and after (bytes), pause (ms). */
  last: { at: string; closed: number; heapUsedBefore: number; heapUsedAfter: number; pauseMs: number } | null;
}

export class FloodCollector {
  private readonly totals: { readonly opened: number; readonly closed: number };
  private readonly collect: (() => void) | null;
  private readonly minClosed: number;
  private readonly intervalMs: number;
  private readonly logger: Logger | undefined;
  private closedAtLast: number;
  private timer: NodeJS.Timeout | null = null;
  collections = 0;
  private last: FloodCollectorStats['last'] = null;

  constructor(opts: FloodCollectorOptions) {
    this.totals = opts.totals;
    const gc = (globalThis as { gc?: unknown }).gc;
    this.collect = opts.collect !== undefined ? opts.collect : typeof gc === 'function' ? () => (gc as () => void)() : null;
    this.minClosed = opts.minClosed ?? 1000;
    this.intervalMs = opts.intervalMs ?? 10_000;
    this.logger = opts.logger;
    this.closedAtLast = this.totals.closed;
  }

  /** Starts looking every `intervalMs` (the timer does not keep the process alive). Nothing to do without `gc`. */
  start(): void {
    if (this.collect === null || this.timer !== null) return;
    this.timer = setInterval(() => this.check(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** Collects if enough connections have gone since the last collection; returns whether it did. */
  check(): boolean {
    if (this.collect === null) return false;
    const closed = this.totals.closed - this.closedAtLast;
    const open = this.totals.opened - this.totals.closed;
    if (closed < this.minClosed || closed < open) return false;
    this.closedAtLast = this.totals.closed;
    const before = process.memoryUsage().heapUsed;
    const t0 = performance.now();
    this.collect();
    const pauseMs = performance.now() - t0;
    const after = process.memoryUsage().heapUsed;
    this.collections++;
    this.last = { at: new Date().toISOString(), closed, heapUsedBefore: before, heapUsedAfter: after, pauseMs };
    this.logger?.info(
      { closed, open, heapUsedMB: +(before / 1048576).toFixed(1), heapUsedAfterMB: +(after / 1048576).toFixed(1), pauseMs: +pauseMs.toFixed(1) },
      'memory of closed connections collected',
    );
    return true;
  }

  stats(): FloodCollectorStats {
    return { enabled: this.collect !== null, collections: this.collections, last: this.last };
  }
}
