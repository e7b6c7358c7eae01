/**
 * The SQLite queue store's worker thread, which `flowmq start` boots before it loads the broker's modules (~110 ms
 * of module loading): the thread takes ~30-50 ms to start and open its database, time a restarting broker otherwise
 * spent waiting for it before serving (issue 28: a restarted broker serves within 300 ms). Until SqliteQueueStore
 * takes the thread over, everything it emits (its ready message, an error, its exit) is kept and replayed then.
 * This module loads nothing but node:worker_threads, so the early boot costs the CLI nothing else.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { Worker } from 'node:worker_threads';

const WORKER_URL = new URL('./sqlite-worker.js', import.meta.url);
const EVENTS = ['message', 'error', 'messageerror', 'exit'] as const;

interface Early {
  worker: Worker;
  kept: Array<[(typeof EVENTS)[number], unknown]>;
  keep: Array<[(typeof EVENTS)[number], (v: unknown) => void]>;
}

const early = new Map<string, Early>();

/** A new worker thread for the queue database `file` (its directory is created). */
export function bootQueueWorker(file: string): Worker {
  mkdirSync(dirname(file), { recursive: true });
  return new Worker(WORKER_URL, { workerData: { file } });
}

/** Boots the worker for `file` now, for SqliteQueueStore to take later (once per file). */
export function prestartQueueWorker(file: string): void {
  if (early.has(file)) return;
  const worker = bootQueueWorker(file);
  // Not kept alive by itself: a start that fails before taking it exits as if it had never been started.
  worker.unref();
  const e: Early = { worker, kept: [], keep: [] };
  for (const name of EVENTS) {
    const f = (v: unknown): void => void e.kept.push([name, v]);
    e.keep.push([name, f]);
    worker.on(name, f);
  }
  early.set(file, e);
}

/**
 * The worker prestarted for `file`, after `attach` has put its listeners on it and what it emitted meanwhile has been
 * replayed to them, in order; null when none was prestarted (or it was taken already).
 */
export function takeQueueWorker(file: string, attach: (w: Worker) => void): Worker | null {
  const e = early.get(file);
  if (!e) return null;
  early.delete(file);
  for (const [name, f] of e.keep) e.worker.off(name, f);
  attach(e.worker);
  for (const [name, v] of e.kept) e.worker.emit(name, v);
  return e.worker;
}
