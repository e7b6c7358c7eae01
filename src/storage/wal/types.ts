/**
 * The hot tier: a write-ahead log that acknowledges an append only once it is durable.
 * Embedded backend: local CRC-framed files with group-commit fsync; cluster backend: PostgreSQL (later).
 */
export interface WalEntry {
  /** The partition the data belongs to, e.g. "telemetry/0". */
  key: string;
  /** First offset of the data. */
  baseOffset: number;
  /** One past the last offset of the data. */
  endOffset: number;
  data: Buffer;
}

export interface WriteAheadLog {
  /** Resolves once the entry (and every entry appended before it) is durable. */
  append(entry: WalEntry): Promise<void>;
  /**
   * Calls `fn` for every durable entry still in the log, in append order. A torn or corrupt final frame
   * (a crash mid-write) is dropped and truncated away; corruption before the tail is an error.
   */
  replay(fn: (entry: WalEntry) => void): Promise<void>;
  /**
   * Drops whole log files whose every entry is flushed elsewhere: `flushedUpTo(key)` returns the offset below
   * which the partition no longer needs the WAL. Returns the number of bytes released.
   */
  trim(flushedUpTo: (key: string) => number): Promise<number>;
  /** Bytes currently held. */
  size(): number;
  close(): Promise<void>;
}
