/**
 * Object storage: where sealed stream segments live. Embedded backend: a directory; cluster backend: any
 * S3-compatible service (s3-store.ts), usually behind a block cache (cache.ts). Keys are `/`-separated paths
 * without a leading slash.
 */
import { FlowError } from '../../core/index.js';

export interface ObjectInfo {
  key: string;
  size: number;
}

export interface PutOptions {
  /**
   * The writer keeps up with its input, so this write may yield the disk to latency-sensitive I/O (the WAL's
   * group commits, which acks=all producers wait for): a local store then writes and flushes it in small steps.
   * False (the default) when throughput matters more, e.g. a log catching up with a backlog.
   */
  yieldToLatency?: boolean;
}

export interface ObjectStore {
  readonly kind: string;
  /** Writes the object atomically: readers see the old object, nothing, or the whole new one. */
  /**
   * `data` may be given as parts, concatenated in order: a segment is written straight from the batches it
   * holds, without first copying them into one buffer (which blocked the event loop for tens of ms).
   */
  put(key: string, data: Buffer | readonly Buffer[], options?: PutOptions): Promise<void>;
  /**
   * Optional: makes the complete local file at `path` the object `key`, atomically, leaving the file where it is
   * (a local store links it: no byte is copied; a remote one uploads it). The caller deletes the file once it no
   * longer needs it, so that a crash in between leaves the data in the file. The file is not written to after the
   * call. Throws when it cannot (another filesystem, say): the caller then writes the data with put. Durable when
   * it resolves.
   */
  adopt?(key: string, path: string): Promise<void>;
  /** Reads the whole object, or bytes [start, end) of it. Throws FlowError NOT_FOUND when absent. */
  get(key: string, range?: { start: number; end: number }): Promise<Buffer>;
  /**
   * Optional: forgets whatever is kept in memory of the object (a cache's blocks), so that the next read fetches it
   * again. The log calls it when a read of the object failed its checksum.
   */
  evict?(key: string): void;
  /** Objects whose key starts with `prefix`, in key order. */
  list(prefix: string): Promise<ObjectInfo[]>;
  /** Deletes the object; deleting an absent object is not an error. */
  delete(key: string): Promise<void>;
  close(): Promise<void>;
  /** Optional: the store's own counters (requests, bytes, errors by operation; cache hits), for the admin API. */
  figures?(): Record<string, unknown>;
}

/** The range check every backend makes in get(): whole safe integers, start <= end. */
export function checkRange(key: string, range: { start: number; end: number }): void {
  const { start, end } = range;
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end < start) {
    throw new FlowError('INVALID_ARGUMENT', `bad range [${start}, ${end}) for object "${key}"`);
  }
}
