/**
 * The indexes of the segment objects read lately (read.ts loadIndex), kept so that the next read of a segment does
 * not fetch its footer and index again. Bounded by how many indexes and by how many index entries (one per batch)
 * they hold together, the least recently used going first: a segment of one-record batches has an entry per batch
 * (~200,000 for 16 MiB of 80-byte batches, each entry an object of five numbers), so a bound by segments alone let
 * the cache hold hundreds of MiB (docs/reliability.md, the soak). The newest index is kept whatever its size.
 */
import type { SegmentIndex } from './segment.js';

export class IndexCache {
  private readonly map = new Map<string, SegmentIndex>();
  private held = 0;

  constructor(
    private readonly maxIndexes: number,
    private readonly maxEntries: number,
  ) {}

  /** Indexes held. */
  get size(): number {
    return this.map.size;
  }

  /** Index entries (batches) of the indexes held. */
  get entries(): number {
    return this.held;
  }

  /** The index of segment object `key`, now the most recently used; undefined when not held. */
  get(key: string): SegmentIndex | undefined {
    const index = this.map.get(key);
    if (index !== undefined) {
      this.map.delete(key);
      this.map.set(key, index);
    }
    return index;
  }

  set(key: string, index: SegmentIndex): void {
    this.delete(key);
    this.map.set(key, index);
    this.held += index.entries.length;
    while (this.map.size > 1 && (this.map.size > this.maxIndexes || this.held > this.maxEntries)) {
      this.delete(this.map.keys().next().value as string);
    }
  }

  /** Forgets the index of `key` (its object replaced or deleted). */
  delete(key: string): boolean {
    const index = this.map.get(key);
    if (index === undefined) return false;
    this.map.delete(key);
    this.held -= index.entries.length;
    return true;
  }
}
