/**
 * The PostgreSQL WAL over several databases, each on its own server (`--wal-shard`), so that the write capacity of
 * the hot tier grows with PostgreSQL servers: each shard is a whole PostgresWal (its own pool, group commit, epochs
 * and fences), and every key (a stream partition, `<stream>@<createdAt>/<partition>`) lives on exactly one shard,
 * picked by a stable hash of the key over the shard list (shardOf). Everything the WriteAheadLog contract asks per
 * key (order, fencing by epoch, resuming after a failure, replayKey) is then the shard's own, unchanged; a group
 * commit holds only the keys of its shard, so the shards commit in parallel.
 *
 * Calls over every key (replay, trim, sharedKeys, size) visit every shard. A shard that fails fails only the
 * appends of its own keys: the others keep acknowledging.
 *
 * The list itself (which databases, in which order) is recorded in the metastore's database and checked at every
 * start (shard-list.ts): a key's shard depends on the list, so every broker of a cluster must use the same one.
 */
import { FlowError, LatencyHistogram } from '../../core/index.js';
import type { PostgresWal } from './postgres-wal.js';
import type { WalEntry, WriteAheadLog } from './types.js';

/**
 * 32-bit FNV-1a over the key's UTF-8 bytes. Stable across versions, processes and machines (it is part of where
 * data lives: never change it), cheap, and spreads the short, similar keys of one stream's partitions well.
 */
export function keyHash(key: string): number {
  const bytes = Buffer.from(key, 'utf8');
  let h = 0x811c9dc5;
  for (const b of bytes) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** The shard (index into the configured list) that holds `key`'s entries and fences. */
export function shardOf(key: string, shards: number): number {
  return shards <= 1 ? 0 : keyHash(key) % shards;
}

export class ShardedWal implements WriteAheadLog {
  /** Every shard records its group commits here: /metrics shows one histogram for the WAL. */
  readonly commitLatency: LatencyHistogram;
  /** The shard of each key seen, so that the hash runs once per key. */
  private readonly placed = new Map<string, PostgresWal>();

  /** `shards` in the configured order; `commitLatency` the histogram they were opened with. */
  constructor(
    readonly shards: readonly PostgresWal[],
    commitLatency: LatencyHistogram,
  ) {
    if (shards.length < 2) throw new FlowError('INVALID_ARGUMENT', 'a sharded WAL needs at least two shards');
    this.commitLatency = commitLatency;
  }

  /** The shard of `key`. */
  shardFor(key: string): PostgresWal {
    let s = this.placed.get(key);
    if (s === undefined) {
      s = this.shards[shardOf(key, this.shards.length)];
      if (this.placed.size >= 100_000) this.placed.clear();
      this.placed.set(key, s);
    }
    return s;
  }

  fence(key: string, epoch: number): Promise<void> {
    return this.shardFor(key).fence(key, epoch);
  }

  append(entry: WalEntry): Promise<void> {
    return this.shardFor(entry.key).append(entry);
  }

  async replay(fn: (entry: WalEntry) => void): Promise<void> {
    // A key is on one shard: each shard's replay keeps its keys' order, which is all the contract asks.
    for (const s of this.shards) await s.replay(fn);
  }

  replayKey(key: string, fn: (entry: WalEntry) => void, after?: number): Promise<void> {
    return this.shardFor(key).replayKey(key, fn, after);
  }

  async trim(flushedUpTo: (key: string) => number): Promise<number> {
    const released = await Promise.all(this.shards.map((s) => s.trim(flushedUpTo)));
    return released.reduce((a, b) => a + b, 0);
  }

  async sharedKeys(): Promise<string[]> {
    const lists = await Promise.all(this.shards.map((s) => s.sharedKeys()));
    return lists.flat();
  }

  async dropKeys(keys: string[]): Promise<number> {
    const byShard = new Map<PostgresWal, string[]>();
    for (const key of keys) {
      const s = this.shardFor(key);
      const l = byShard.get(s);
      if (l) l.push(key);
      else byShard.set(s, [key]);
    }
    let released = 0;
    for (const [s, l] of byShard) released += await s.dropKeys(l);
    for (const key of keys) this.placed.delete(key);
    return released;
  }

  size(): number {
    let n = 0;
    for (const s of this.shards) n += s.size();
    return n;
  }

  /** The shards' counters summed, and each shard's own (its endpoint, commits, held bytes, pool). */
  figures(): Record<string, unknown> {
    const each: Array<Record<string, unknown>> = this.shards.map((s) => ({ endpoint: s.endpoint, ...s.figures() }));
    const sum = (k: string): number =>
      each.reduce((a, f) => {
        const v = f[k];
        return a + (typeof v === 'number' ? v : 0);
      }, 0);
    const commits = sum('commits');
    const entries = sum('entries');
    return {
      shardCount: this.shards.length,
      commits,
      entries,
      bytes: sum('bytes'),
      meanGroupSize: commits > 0 ? entries / commits : 0,
      failedGroups: sum('failedGroups'),
      heldBytes: sum('heldBytes'),
      queued: sum('queued'),
      shards: each,
    };
  }

  /** Closes every shard (each finishes the appends it accepted). */
  async close(): Promise<void> {
    const results = await Promise.allSettled(this.shards.map((s) => s.close()));
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
  }
}
