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
  /**
   * CRC-32C (seed 0) of `data` from byte `from` to its end, when the caller already holds it (a Kafka record
   * batch carries one over everything after its first 21 bytes, checked when it was produced): the WAL's frame
   * checksum then covers those bytes by combining it instead of reading them again. A wrong value makes the entry
   * unreadable after a restart, so only a verified CRC may be given.
   */
  dataCrc?: { from: number; crc: number };
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
