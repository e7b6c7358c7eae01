/**
 * The hot tier: a write-ahead log that acknowledges an append only once it is durable.
 * Embedded backend: local CRC-framed files with group-commit fsync; shared backend: PostgreSQL (one table for every
 * broker of a cluster: each reads and trims only the keys of the partitions it owns).
 */
import type { LatencyHistogram } from '../../core/index.js';

export interface WalEntry {
  /** The partition the data belongs to, e.g. "telemetry/0". */
  key: string;
  /** First offset of the data. */
  baseOffset: number;
  /** One past the last offset of the data. */
  endOffset: number;
  /**
   * The writer's ownership epoch of the partition (Metastore.openPartition). A WAL refuses, with FENCED, an entry
   * whose epoch is lower than the highest it has been given for the key (by an append or by fence()). A WAL shared
   * between brokers (PostgreSQL) stores it and replay returns it; a local one (the file WALs) has a single writer
   * process, the holder of the data directory's lock, so it keeps the epochs in memory since it was opened and
   * replay returns 0.
   */
  epoch: number;
  data: Buffer;
  /**
   * CRC-32C (seed 0) of `data` from byte `from` to its end, when the caller already holds it (a Kafka record
   * batch carries one over everything after its first 21 bytes, checked when it was produced): the WAL's frame
   * checksum then covers those bytes by combining it instead of reading them again. A wrong value makes the entry
   * unreadable after a restart, so only a verified CRC may be given.
   */
  dataCrc?: { from: number; crc: number };
  /**
   * The entry begins a new file of its key. A backend that keeps each key's entries in files of their own (see
   * SegmentFileSource) starts one here, so that the caller decides where its files end; others ignore it. On
   * replay such a backend sets it, true or false, on every entry (a file's first entry is true).
   */
  startsFile?: boolean;
}

/** Where the entries of a file handed over lie in it (see SegmentFileSource.takeFile). */
export interface FileLayout {
  /** Byte position of each entry's data in the file, in order. */
  positions: number[];
  /** Where the bytes returned by the caller's trailer function will start. */
  trailerPos: number;
}

/**
 * Optional capability of a WAL that keeps each key's entries in files of their own: a closed file can leave the
 * log whole, ended by a trailer the caller builds (a segment's index and footer), so the caller can move it into
 * the object store (a rename on the same filesystem) instead of writing its data a second time.
 */
export interface SegmentFileSource {
  /**
   * If `key` has a file holding exactly the durable entries [baseOffset, endOffset), closes it to appends, ends it
   * with `trailer(layout)` and makes it durable. Returns its path and size, and `release(moved)`, to be called
   * once the caller has made the file an object (a link or a copy: the file stays in place meanwhile) and committed
   * it (true: the log deletes the file and forgets it), or failed to (false: it stays an ordinary file of the log,
   * deleted by trim once flushed). Until then, and after a crash, the file keeps its entries (a restart replays them
   * and leaves the file's bytes as they are: it may be an object's too). Returns null when there is no such file.
   */
  takeFile(
    key: string,
    baseOffset: number,
    endOffset: number,
    trailer: (layout: FileLayout) => Buffer,
  ): Promise<{ path: string; size: number; release(moved: boolean): void } | null>;
}

export interface WriteAheadLog {
  /**
   * Raises the key's epoch to `epoch` (never lowers it): once this resolves, appends of the key carrying a lower
   * epoch are refused with FENCED. A writer calls it after taking the partition (Metastore.openPartition) and
   * before reading what the log holds for the key, so that a fenced writer cannot add to it afterwards.
   */
  fence(key: string, epoch: number): Promise<void>;
  /**
   * Resolves once the entry (and every entry appended before it) is durable. A failed write (a full disk, EIO)
   * rejects with STORAGE_FULL or STORAGE_ERROR and never leaves the log unusable: what it wrote is cut off, and
   * later appends are written once the disk takes them again. The entries of the key appended behind the failed
   * one fail with it, and the key then accepts only an entry starting at or below the lowest failed offset (the
   * caller resumes where its durable entries end), so a key's durable entries never have a hole.
   */
  append(entry: WalEntry): Promise<void>;
  /**
   * Calls `fn` for every durable entry still in the log, in append order per key (entries of different keys may
   * come in another order). A torn or corrupt final frame
   * (a crash mid-write) is dropped and truncated away; corruption before the tail is an error.
   */
  replay(fn: (entry: WalEntry) => void): Promise<void>;
  /**
   * Optional, required in cluster mode (a WAL shared by the brokers: PostgreSQL): calls `fn` for the durable
   * entries of one key ending past `after`, in append order. A broker taking a partition over (after fence())
   * reads back what the previous owner left, without reading the other brokers' keys.
   */
  replayKey?(key: string, fn: (entry: WalEntry) => void, after?: number): Promise<void>;
  /**
   * Drops whole log files whose every entry is flushed elsewhere: `flushedUpTo(key)` returns the offset below
   * which the partition no longer needs the WAL. Returns the number of bytes released.
   */
  trim(flushedUpTo: (key: string) => number): Promise<number>;
  /**
   * Optional, with dropKeys (a WAL the brokers share: PostgreSQL): every key with entries or a fence in the log,
   * whichever broker wrote them. The log's collector (storage/log/garbage.ts) finds those of deleted streams in it.
   */
  sharedKeys?(): Promise<string[]>;
  /** Optional, with sharedKeys(): deletes every entry and the fence of `keys`. Returns the number of bytes released. */
  dropKeys?(keys: string[]): Promise<number>;
  /** Bytes currently held. */
  size(): number;
  close(): Promise<void>;
  /** Optional: the backend's own counters (commits, group sizes, its connection pool), for the admin API. */
  figures?(): Record<string, unknown>;
  /**
   * Optional: how long each group commit's durable write took (an O_DSYNC write, or the PostgreSQL transaction),
   * one record per group, not per entry; /metrics exposes it as a histogram.
   */
  readonly commitLatency?: LatencyHistogram;
}
