/**
 * Body of the PasswordVerifier's worker thread: computes scrypt synchronously, one request at a time.
 *
 * Synchronous on purpose: node:crypto's async scrypt runs on libuv's thread pool (4 threads), which also carries
 * the WAL's file writes; a flood of wrong passwords once held all four threads and pushed Kafka acks=all latency
 * from 0.2 ms to 11.5 s (issue 12). Here the work stays on this thread, whatever arrives.
 *
 * On Linux the thread lowers its own CPU priority (nice, `workerData.nice`) so that on a busy machine the event
 * loop and storage get the CPU first: /proc/thread-self names this thread's id, and setpriority(2) on a thread id
 * changes only that thread.
 */
import { scryptSync } from 'node:crypto';
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';

export interface WorkerRequest {
  id: number;
  password: Buffer;
  salt: Buffer;
}

export interface WorkerReply {
  id: number;
  hash: Buffer;
}

export interface WorkerInit {
  nice: number;
  N: number;
  r: number;
  p: number;
  keylen: number;
}

const init = workerData as WorkerInit;
let niceApplied = false;
if (init.nice > 0 && process.platform === 'linux') {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (Number.isInteger(tid) && tid > 0) {
      setPriority(tid, Math.min(19, init.nice));
      niceApplied = true;
    }
  } catch {
    // No /proc, or not allowed: the thread keeps the process's priority.
  }
}
parentPort!.postMessage({ ready: true, niceApplied });

const opts = { N: init.N, r: init.r, p: init.p, maxmem: 256 * init.N * init.r * init.p };
parentPort!.on('message', (m: WorkerRequest) => {
  const hash = scryptSync(Buffer.from(m.password), Buffer.from(m.salt), init.keylen, opts);
  parentPort!.postMessage({ id: m.id, hash } satisfies WorkerReply);
});
