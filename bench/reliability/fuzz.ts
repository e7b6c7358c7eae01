/**
 * The fuzz loop behind `npm run fuzz` and test/reliability/fuzz.test.ts.
 *
 * Input `i` of a target is a pure function of (seed, target name, i): its own mulberry32 stream picks a valid
 * seed input and mutates it (bit flips, random bytes, length and count fields set to extreme values, truncation,
 * insertion, deletion, splicing two seeds, duplicated ranges), or draws pure random bytes. A failure is reported
 * with its index and hex, and `--target NAME --from I --iterations 1` replays it.
 *
 * Pass criteria for every input: the decoder returns or throws its own protocol error type (anything else is a
 * failure); no single allocation above the target's limit (alloc-guard.ts); no input takes longer than the
 * watchdog allows. Decoders are synchronous, so the loop runs in a worker thread and the caller's thread is the
 * watchdog (runFuzz): the worker publishes the input it is decoding in shared memory before each call, and
 * a worker whose counter stops moving is terminated and its input reported as a hang.
 */
import { allocGuard } from './alloc-guard.js';
import { fuzzTargets, reframe, type FuzzTarget } from './fuzz-targets.js';
import { prng } from '../../test/helpers/prng.js';

export interface FuzzFailure {
  target: string;
  index: number;
  kind: 'exception' | 'allocation' | 'hang';
  detail: string;
  hex: string;
}

export interface TargetResult {
  target: string;
  inputs: number;
  /** Inputs decoded without error. */
  accepted: number;
  /** Inputs refused with the decoder's own error. */
  refused: number;
  /** Largest single allocation seen. */
  largestAlloc: number;
  ms: number;
  failures: FuzzFailure[];
}

/** FNV-1a of a string, to derive per-target streams from one seed. */
function hashName(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** The input with index `i` of target `t` for run seed `seed`. */
export function fuzzInput(t: FuzzTarget, seed: number, i: number): Buffer {
  const rnd = prng((Math.imul(seed ^ hashName(t.name), 0x9e3779b1) + Math.imul(i, 0x85ebca6b)) >>> 0);
  const int = (n: number): number => Math.floor(rnd() * n);
  if (rnd() < 0.08) {
    // Pure random bytes, mostly short, sometimes a few KiB.
    const out = Buffer.allocUnsafe(rnd() < 0.9 ? int(96) : int(4096));
    for (let k = 0; k < out.length; k++) out[k] = int(256);
    return out;
  }
  const seeds = t.seeds;
  let buf = Buffer.from(seeds[int(seeds.length)]);
  const batchBody = t.reframe === true && buf.length > 61 && rnd() < 0.7;
  // Record batches: most mutations go to the body behind the 61-byte header, so that the records and the
  // compressed data are what gets fuzzed rather than the header checks in front of them.
  let head = Buffer.alloc(0);
  if (batchBody) {
    head = buf.subarray(0, 61);
    buf = Buffer.from(buf.subarray(61));
  }
  const ops = 1 + int(rnd() < 0.8 ? 3 : 8);
  for (let k = 0; k < ops; k++) {
    const at = int(buf.length + 1);
    switch (int(10)) {
      case 0: // bit flips
        if (buf.length > 0) buf[int(buf.length)] ^= 1 << int(8);
        break;
      case 1: // random byte
        if (buf.length > 0) buf[int(buf.length)] = int(256);
        break;
      case 2: // truncation
        buf = buf.subarray(0, int(buf.length + 1));
        break;
      case 3: {
        // insertion of random bytes
        const extra = Buffer.allocUnsafe(1 + int(8));
        for (let j = 0; j < extra.length; j++) extra[j] = int(256);
        buf = Buffer.concat([buf.subarray(0, at), extra, buf.subarray(at)]);
        break;
      }
      case 4: // deletion of a range
        buf = Buffer.concat([buf.subarray(0, at), buf.subarray(Math.min(buf.length, at + 1 + int(8)))]);
        break;
      case 5:
      case 6: {
        // A length or count field set to an extreme value: int16, int32 (huge, negative, -1, max) or a varint.
        const v = [0x7fffffff, 0x80000000, 0xffffffff, 0x0fffffff, 0x00ffffff, 0x7fff, 0xffff, 0x8000, 0x10000, 0x1000000][int(10)];
        const width = [1, 2, 4, 5][int(4)];
        if (at + width > buf.length) break;
        if (width === 1) buf[at] = [0xff, 0x80, 0x7f, 0xfe][int(4)];
        else if (width === 2) buf.writeUInt16BE(v & 0xffff, at);
        else if (width === 4) buf.writeUInt32BE(v >>> 0, at);
        else buf.set([0xff, 0xff, 0xff, 0xff, int(2) ? 0x7f : 0x0f], at); // the longest (unsigned) varint
        break;
      }
      case 7: {
        // splice: head of this input, tail of another seed
        const other = seeds[int(seeds.length)];
        const from = batchBody ? Math.min(61, other.length) : 0;
        buf = Buffer.concat([buf.subarray(0, at), other.subarray(from + int(Math.max(1, other.length - from)))]);
        break;
      }
      case 8: {
        // a range repeated (loops, repeated fields)
        const len = 1 + int(16);
        const piece = buf.subarray(at, at + len);
        buf = Buffer.concat([buf.subarray(0, at), piece, piece, buf.subarray(at)]);
        break;
      }
      default: // a whole other seed appended (pipelined frames, concatenated batches)
        buf = Buffer.concat([buf, seeds[int(seeds.length)]]);
    }
  }
  if (batchBody) return reframe(Buffer.concat([head, buf]));
  if (t.reframe === true && rnd() < 0.5) return reframe(buf);
  return buf;
}

/** Decodes one input under the allocation guard; returns a failure or null, and whether it decoded. */
export function fuzzOne(t: FuzzTarget, input: Buffer, index: number): { ok: boolean; failure: FuzzFailure | null; largest: number } {
  allocGuard.reset(t.allocLimit(input.length));
  let ok = true;
  let thrown: unknown;
  let threw = false;
  try {
    t.decode(input);
  } catch (e) {
    threw = true;
    thrown = e;
    ok = false;
  }
  const violation = allocGuard.violation;
  const stack = allocGuard.stack;
  const largest = allocGuard.largest;
  allocGuard.reset(Infinity);
  const hex = input.toString('hex');
  if (violation > 0) {
    return {
      ok,
      largest,
      failure: {
        target: t.name,
        index,
        kind: 'allocation',
        detail: `allocated ${violation} bytes for a ${input.length}-byte input (limit ${t.allocLimit(input.length)})\n${stack}`,
        hex,
      },
    };
  }
  if (threw && !t.isOwnError(thrown)) {
    const e = thrown as Error;
    return { ok, largest, failure: { target: t.name, index, kind: 'exception', detail: `${e?.name}: ${e?.message}\n${e?.stack ?? ''}`, hex } };
  }
  return { ok, largest, failure: null };
}

export interface FuzzOptions {
  iterations: number;
  seed: number;
  /** Substring of target names to run (all when empty). */
  filter?: string;
  /** First input index (to replay one failure). */
  from?: number;
  /** An input still running after this long is a hang. */
  hangMs?: number;
  /** Failures kept per target before it moves on. */
  maxFailures?: number;
  onProgress?: (r: TargetResult) => void;
}

export function selectTargets(filter = ''): FuzzTarget[] {
  return fuzzTargets().filter((t) => filter === '' || filter.split(',').some((f) => t.name.includes(f)));
}

/** Runs inputs [from, from + count) of one target in this thread (no watchdog: see runFuzz). */
export function fuzzRange(
  t: FuzzTarget,
  seed: number,
  from: number,
  count: number,
  maxFailures: number,
  beat?: (i: number, input: Buffer) => void,
): TargetResult {
  const start = performance.now();
  const res: TargetResult = { target: t.name, inputs: 0, accepted: 0, refused: 0, largestAlloc: 0, ms: 0, failures: [] };
  for (let i = from; i < from + count; i++) {
    const input = fuzzInput(t, seed, i);
    beat?.(i, input);
    const r = fuzzOne(t, input, i);
    res.inputs++;
    if (r.ok) res.accepted++;
    else res.refused++;
    if (r.largest > res.largestAlloc) res.largestAlloc = r.largest;
    if (r.failure) {
      res.failures.push(r.failure);
      if (res.failures.length >= maxFailures) break;
    }
  }
  res.ms = performance.now() - start;
  return res;
}

// ------------------------------------------------------------------------------------------------ the watchdog

/** Shared between the worker and the watchdog: [beats, target number, input index, input length] + input bytes. */
const SLOTS = 4;
const MAX_SHARED_INPUT = 256 * 1024;

export interface WorkerJob {
  targets: string[];
  seed: number;
  /** Inputs [from, to) of every target... */
  from: number;
  to: number;
  /** ...except the first, which starts here (after a hang, the input after it). */
  resumeAt: number;
  maxFailures: number;
  shared: SharedArrayBuffer;
}

/** Worker side: runs the job, publishing each input before decoding it, and posts one TargetResult per target. */
export function workerMain(job: WorkerJob, post: (r: TargetResult) => void): void {
  const meta = new Int32Array(job.shared, 0, SLOTS);
  const bytes = new Uint8Array(job.shared, SLOTS * 4);
  const all = selectTargets();
  job.targets.forEach((name, n) => {
    const t = all.find((x) => x.name === name);
    if (!t) throw new Error(`no fuzz target ${name}`);
    const from = n === 0 ? job.resumeAt : job.from;
    const beat = (i: number, input: Buffer): void => {
      const len = Math.min(input.length, MAX_SHARED_INPUT);
      bytes.set(input.subarray(0, len));
      meta[1] = n;
      meta[2] = i;
      meta[3] = input.length;
      Atomics.add(meta, 0, 1);
    };
    post(fuzzRange(t, job.seed, from, job.to - from, job.maxFailures, beat));
  });
}

/**
 * Runs the fuzz in a worker thread with this thread as the watchdog: an input that runs longer than `hangMs` is
 * reported as a hang (with its bytes), the worker is replaced, and the run goes on with the next input.
 */
export async function runFuzz(opts: FuzzOptions): Promise<TargetResult[]> {
  const { Worker } = await import('node:worker_threads');
  const targets = selectTargets(opts.filter).map((t) => t.name);
  if (targets.length === 0) throw new Error(`no fuzz target matches ${JSON.stringify(opts.filter)}`);
  const from = opts.from ?? 0;
  const to = from + opts.iterations;
  const hangMs = opts.hangMs ?? 5000;
  const maxFailures = opts.maxFailures ?? 5;
  const results = new Map<string, TargetResult>();
  const merge = (r: TargetResult): void => {
    const prev = results.get(r.target);
    if (!prev) results.set(r.target, r);
    else {
      prev.inputs += r.inputs;
      prev.accepted += r.accepted;
      prev.refused += r.refused;
      prev.ms += r.ms;
      prev.largestAlloc = Math.max(prev.largestAlloc, r.largestAlloc);
      prev.failures.push(...r.failures);
    }
  };
  let pending = targets;
  let resumeAt = from;
  const workerUrl = new URL('./fuzz-worker.js', import.meta.url);
  while (pending.length > 0) {
    const shared = new SharedArrayBuffer(SLOTS * 4 + MAX_SHARED_INPUT);
    const meta = new Int32Array(shared, 0, SLOTS);
    const job: WorkerJob = { targets: pending, seed: opts.seed, from, to, resumeAt, maxFailures, shared };
    const worker = new Worker(workerUrl, { workerData: job });
    let done = 0;
    const outcome = await new Promise<{ hang: boolean; error?: unknown }>((resolve) => {
      let lastBeat = -1;
      let lastChange = Date.now();
      const timer = setInterval(
        () => {
          const beats = Atomics.load(meta, 0);
          // Until its first input the worker is loading (seeds, modules): not a hang, and no input to blame.
          if (beats === 0) lastChange = Date.now();
          else if (beats !== lastBeat) {
            lastBeat = beats;
            lastChange = Date.now();
          } else if (Date.now() - lastChange > hangMs) {
            clearInterval(timer);
            resolve({ hang: true });
          }
        },
        Math.min(250, hangMs / 4),
      );
      worker.on('message', (r: TargetResult) => {
        merge(r);
        done++;
        // Each target's watch starts with its first input.
        lastChange = Date.now();
        opts.onProgress?.(results.get(r.target)!);
      });
      worker.on('error', (error) => {
        clearInterval(timer);
        resolve({ hang: false, error });
      });
      worker.on('exit', () => {
        clearInterval(timer);
        resolve({ hang: false });
      });
    });
    if (outcome.hang) {
      const n = Atomics.load(meta, 1);
      const index = Atomics.load(meta, 2);
      const len = Atomics.load(meta, 3);
      const hex = Buffer.from(new Uint8Array(shared, SLOTS * 4, Math.min(len, MAX_SHARED_INPUT))).toString('hex');
      await worker.terminate();
      const target = pending[n];
      // The target's inputs before the hang were counted by beats only: count them as refused-or-accepted unknown.
      merge({
        target,
        inputs: index - (n === 0 ? resumeAt : from) + 1,
        accepted: 0,
        refused: 0,
        largestAlloc: 0,
        ms: hangMs,
        failures: [{ target, index, kind: 'hang', detail: `no progress for ${hangMs} ms`, hex }],
      });
      pending = pending.slice(n);
      resumeAt = index + 1;
      if (resumeAt >= to) {
        pending = pending.slice(1);
        resumeAt = from;
      }
      continue;
    }
    if (outcome.error) throw outcome.error;
    pending = pending.slice(done);
    resumeAt = from;
    if (pending.length > 0) throw new Error(`fuzz worker exited after ${done} targets`);
  }
  return targets.map((t) => results.get(t)!);
}
