/** Pieces shared by the WAL backends: 64-bit integers, frame checksums, the group-commit loop. */
import { crc32 } from 'node:zlib';
import { crc32c, crc32cCombine, FlowError } from '../../core/index.js';
import { writeError } from '../fs-util.js';
import type { WalEntry } from './types.js';

/** A frame starts with u32 body length | u32 crc. */
export const FRAME_HEADER = 8;
const TWO32 = 0x1_0000_0000;

/** Below this much data a frame's CRC is computed over it even when a CRC of it is given (as fast, and simpler). */
const COMBINE_MIN_BYTES = 64 * 1024;

/**
 * The frame CRC: over the body (head's part after the 8-byte frame header, then the data). A known CRC-32C of the
 * data's tail stands for those bytes (see WalEntry.dataCrc). A null seed means the oldest format (zlib CRC-32).
 */
export function frameCrc(seed: number | null, head: Buffer, data: Buffer, known?: { from: number; crc: number }): number {
  if (seed === null) return crc32(data, crc32(head.subarray(FRAME_HEADER)));
  const headCrc = crc32c(head, FRAME_HEADER, head.length, seed);
  if (known === undefined || data.length < COMBINE_MIN_BYTES || known.from < 0 || known.from > data.length) {
    return crc32c(data, 0, data.length, headCrc);
  }
  return crc32cCombine(crc32c(data, 0, known.from, headCrc), known.crc, data.length - known.from);
}

export function isSafeOffset(n: number): boolean {
  return Number.isSafeInteger(n) && n >= 0;
}

/** Why a WAL refuses an append now: it is closed, or the entry is bad (see entryProblem); or null. */
export function appendRefusal(closed: boolean, entry: WalEntry): FlowError | null {
  if (closed) return new FlowError('CLOSED', 'WAL is closed');
  return entryProblem(entry);
}

/**
 * Keeps each key's durable entries free of holes after a failed write (see WriteAheadLog.append). When a group
 * fails, its entries and those queued behind it (appended before anyone could know) are refused; every key among
 * them is fenced at its lowest refused offset: an append of that key beyond the fence would leave a hole below it
 * and is refused too, until the caller resumes with an entry starting at or below the fence (where its durable
 * entries end), which lifts it.
 */
export class KeyFences {
  private readonly fences = new Map<string, { at: number; cause: FlowError }>();

  /** Records a refused entry. */
  refuse(key: string, baseOffset: number, cause: FlowError): void {
    const f = this.fences.get(key);
    if (f === undefined || baseOffset < f.at) this.fences.set(key, { at: baseOffset, cause });
  }

  /** Why `entry` must be refused (it would follow a hole), or null; an entry at or below the fence lifts it. */
  check(entry: WalEntry): FlowError | null {
    const f = this.fences.get(entry.key);
    if (f === undefined) return null;
    if (entry.baseOffset <= f.at) {
      this.fences.delete(entry.key);
      return null;
    }
    return new FlowError(f.cause.code, `WAL: ${entry.key} resumes only at offset ${f.at} or below after a failed write (got ${entry.baseOffset})`, {
      cause: f.cause,
    });
  }

  /** Forgets a key (nothing will be appended to it again). */
  forget(key: string): void {
    this.fences.delete(key);
  }
}

/** Why an entry cannot be appended to any WAL (an empty key, offsets that are not a range), or null. */
export function entryProblem(entry: WalEntry): FlowError | null {
  const { key, baseOffset, endOffset } = entry;
  if (key.length === 0) return new FlowError('INVALID_ARGUMENT', 'WAL key is empty');
  if (!isSafeOffset(baseOffset) || !isSafeOffset(endOffset) || endOffset < baseOffset) {
    return new FlowError('INVALID_ARGUMENT', `bad WAL entry offsets [${baseOffset}, ${endOffset}) for ${key}`);
  }
  if (!isSafeOffset(entry.epoch)) return new FlowError('INVALID_ARGUMENT', `bad WAL entry epoch ${entry.epoch} for ${key}`);
  return null;
}

/**
 * The ownership epochs of a local WAL's keys (WriteAheadLog.fence): the highest epoch given for each key since the
 * log was opened, by an append or by fence(). Kept in memory only: a local WAL has one writer process (the data
 * directory's lock), whose partitions all take a new epoch from the metastore when it opens them and fence the
 * log with it before reading it, so nothing older than what memory holds can reach it. A WAL shared between
 * brokers (PostgreSQL) stores its epochs instead.
 */
export class EpochFences {
  private readonly epochs = new Map<string, number>();

  /** Raises the key's epoch (never lowers it). */
  raise(key: string, epoch: number): void {
    const e = this.epochs.get(key);
    if (e === undefined || epoch > e) this.epochs.set(key, epoch);
  }

  /** FENCED when `entry` carries an epoch below its key's; else raises the key's epoch to the entry's. */
  check(entry: WalEntry): FlowError | null {
    const e = this.epochs.get(entry.key);
    if (e !== undefined && entry.epoch < e) {
      return new FlowError('FENCED', `WAL: ${entry.key} is owned by epoch ${e}; an append of epoch ${entry.epoch} is refused`);
    }
    if (e === undefined || entry.epoch > e) this.epochs.set(entry.key, entry.epoch);
    return null;
  }
}

/** Checks fence() arguments the way appends are checked. */
export function fenceProblem(key: string, epoch: number): FlowError | null {
  if (key.length === 0) return new FlowError('INVALID_ARGUMENT', 'WAL key is empty');
  if (!isSafeOffset(epoch)) return new FlowError('INVALID_ARGUMENT', `bad WAL epoch ${epoch} for ${key}`);
  return null;
}

/** u64 big-endian as two u32 halves (covers every safe integer). */
export function writeU64(buf: Buffer, n: number, at: number): void {
  buf.writeUInt32BE(Math.floor(n / TWO32), at);
  buf.writeUInt32BE(n >>> 0, at + 4);
}

export function readU64(buf: Buffer, at: number): number {
  return buf.readUInt32BE(at) * TWO32 + buf.readUInt32BE(at + 4);
}

/** A group commit: the appends that share one durable write, and their common outcome. */
export interface GroupCommit {
  promise: Promise<void>;
  resolve(): void;
  reject(err: Error): void;
}

/** The outcome part of a new group. */
export function groupCommit(): GroupCommit {
  let resolve!: () => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/**
 * Writes groups one at a time while `next()` hands one out (a group that arrives while one is written is written
 * next, as one); each group's appends are resolved or rejected together. A failed group is rejected with a
 * STORAGE_FULL or STORAGE_ERROR FlowError and handed to `failed` (which refuses what was queued behind it).
 * Returning takes a step of its own, in which appends may start a new group: the caller must look for one in the
 * same step in which it declares itself idle.
 */
export async function writeGroups<G extends GroupCommit>(
  next: () => G | null,
  write: (g: G) => Promise<void>,
  failed: (g: G, err: FlowError) => void,
): Promise<void> {
  for (let g = next(); g !== null; g = next()) {
    try {
      await write(g);
      g.resolve();
    } catch (err) {
      const e = writeError('WAL write failed', err);
      g.reject(e);
      failed(g, e);
    }
  }
}
