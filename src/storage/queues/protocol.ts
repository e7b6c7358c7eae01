/**
 * The messages between SqliteQueueStore (main thread) and its worker (sqlite-worker.ts). Kept small and flat:
 * the structured clone of a batch is paid on the event loop, so a batch is a few arrays of numbers and strings
 * plus one ArrayBuffer holding every message body of the batch (transferred, not cloned).
 */

import type { CommonOp } from './batched-store.js';

/** One call, as the worker runs it (in a group of its choosing: see fair-groups.ts). Message bodies are [offset, length] ranges of the batch's buffer. */
export type WorkerOp =
  | CommonOp
  /**
   * `maxId`: set by the worker when it took out ids removed before they were written (sqlite-worker.ts), so that the
   * queue's highest id still counts them.
   */
  | { k: 'append'; q: string; ids: number[]; ranges: number[]; maxId?: number }
  /** Tests only: the worker dies as a crashed one would (process.exit inside a worker ends the thread). */
  | { k: 'crash' };

export interface WorkerBatch {
  seq: number;
  ops: WorkerOp[];
  buf: ArrayBuffer | null;
}

/** A read's rows: ids, delivery counts and body ranges of the reply's buffer, in id order. */
export interface ReadResult {
  ids: number[];
  deliveries: number[];
  ranges: number[];
}

export type OpResult = null | number | { count: number; bytes: number; maxId: number } | ReadResult;

export type WorkerReply =
  /**
   * One group committed: `done` names its calls as flattened [batch seq, index in the batch] pairs, and `results`
   * holds, per call in that order, a result or an error of that call alone (which changed nothing).
   */
  | { seq: 0; ok: true; done: number[]; results: Array<OpResult | OpError>; buf: ArrayBuffer | null; commits: number; elided: number }
  /** The group's transaction failed as a whole: none of its calls happened. */
  | { seq: 0; ok: false; done: number[]; code: 'STORAGE_ERROR' | 'STORAGE_FULL'; message: string }
  /** The database is open (seq -1, ok) or could not be opened (seq -1, not ok). */
  | { seq: -1; ok: true }
  | { seq: -1; ok: false; code: 'STORAGE_ERROR' | 'STORAGE_FULL'; message: string };

export interface OpError {
  error: 'INVALID_ARGUMENT';
  message: string;
}

/** Main → worker: a batch, or the request to close the database and end the thread. */
export type WorkerRequest = WorkerBatch | { close: true };

export interface WorkerInit {
  file: string;
}
