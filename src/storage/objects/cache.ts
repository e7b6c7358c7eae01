/**
 * A bounded block cache in front of an object store, for cold segment reads (`--object-cache-bytes`; the log's
 * `--read-cache-bytes` keeps recently sealed batches in memory, this keeps what was read back from objects).
 *
 * The log reads a segment through ranged GETs: its footer and index at the end, then batches from some position
 * on, usually onwards to the end. Against a remote store each GET costs a round trip, so:
 * - objects are read in fixed, aligned blocks (1 MiB by default), kept in an LRU bounded by `maxBytes`; a range is
 *   served from the blocks it covers;
 * - concurrent reads of one block share one GET (many consumers of one partition catching up together);
 * - consecutive blocks missing together (a read, a read-ahead) are fetched by one GET per run of up to
 *   `maxBlocksPerGet` blocks: against s3rver, 1 MiB GETs capped cold replay at ~75 MB/s on the bench machine
 *   whatever their number in flight, 4 MiB runs gave 260 MB/s;
 * - a read that continues where the previous read of the same object ended (or starts at its beginning) marks a
 *   sequential reader: the next `readAheadBlocks` blocks are fetched at once, overlapping, so the reader finds them
 *   ready. A single stream of sequential 1 MiB GETs from s3rver runs at ~150 MB/s on the bench machine; cold
 *   replay must reach 100 MB/s with the broker's own work on top, which only overlapping requests give.
 * The size of an object need not be known: a block shorter than the block size (or empty) is the last.
 *
 * put, adopt and delete of a key drop its blocks, and blocks fetched while a key is being written are not kept, so
 * a read never mixes blocks of two versions of an object (segment objects are written once, but the ObjectStore
 * contract allows overwrites). Whole-object reads go straight to the inner store.
 */
import { FlowError } from '../../core/index.js';
import { checkRange, type ObjectInfo, type ObjectStore, type PutOptions } from './types.js';

/** Scan positions remembered per object (see KeyState.scans). */
const MAX_SCANS = 4;

export interface CachedObjectStoreOptions {
  /** Bytes of blocks kept at most. At least one block. */
  maxBytes: number;
  /** Default 1 MiB. */
  blockBytes?: number;
  /** Blocks fetched ahead of a sequential reader. Default 8 (at most half the cache). */
  readAheadBlocks?: number;
  /**
   * Consecutive blocks missing from the cache are fetched together, up to this many in one ranged GET (then kept as
   * blocks). Default 4: each request costs the service and the SDK a fixed amount of work (s3rver on the 2-core
   * bench machine: ~80 MB/s of 1 MiB GETs however many in parallel, ~200 MB/s of 4 MiB GETs four at a time).
   */
  maxBlocksPerGet?: number;
}

interface Block {
  key: string;
  index: number;
  data: Buffer;
  /** Fetched ahead and not read yet. */
  ahead: boolean;
}

/** What the cache knows of one object. Kept while it has blocks cached or in flight, or a write is running. */
interface KeyState {
  /** Bumped by every write: a fetch started under an older generation is not kept. */
  gen: number;
  /** Writes (put, adopt, delete) running now: nothing fetched meanwhile is kept. */
  writing: number;
  blocks: Set<number>;
  inflight: Map<number, Promise<Buffer>>;
  /** The object's size, once a short block showed where it ends. */
  size: number | undefined;
  /**
   * Scans under way: for each, the block after the last one it read. A read starting there (or in the block
   * before) continues that scan. A few at once: consumers of one partition at different positions (two groups
   * replaying it) each keep their read-ahead.
   */
  scans: number[];
}

export class CachedObjectStore implements ObjectStore {
  readonly kind: string;
  /** Present when the inner store has it (the log checks for it). */
  readonly adopt?: (key: string, path: string) => Promise<void>;
  private readonly blockBytes: number;
  private readonly readAhead: number;
  private readonly maxBytes: number;
  private readonly blocksPerGet: number;
  /** Blocks by `<index>\0<key>`, least recently used first. */
  private readonly lru = new Map<string, Block>();
  private readonly keys = new Map<string, KeyState>();
  private bytes = 0;
  private readonly stats = {
    /** Blocks a read found cached. */
    hits: 0,
    /** Blocks a read had to fetch. */
    misses: 0,
    /** Blocks a read found being fetched (by another read or a read-ahead) and waited for. */
    shared: 0,
    /** Blocks fetched ahead of a sequential reader, and those of them a read then used. */
    readAhead: 0,
    readAheadUsed: 0,
    evictions: 0,
    /** Whole-object reads, passed to the inner store. */
    bypassed: 0,
    /** Reads that overlapped a write of their key and were served by the inner store instead. */
    retried: 0,
    /** Ranged GETs made to the inner store (a run of up to maxBlocksPerGet blocks each). */
    gets: 0,
  };

  constructor(
    private readonly inner: ObjectStore,
    opts: CachedObjectStoreOptions,
  ) {
    this.kind = inner.kind;
    this.blockBytes = opts.blockBytes ?? 1024 * 1024;
    this.maxBytes = opts.maxBytes;
    if (!Number.isSafeInteger(this.blockBytes) || this.blockBytes < 1) {
      throw new FlowError('CONFIG_ERROR', `object cache block size must be a positive integer, not ${this.blockBytes}`);
    }
    if (!Number.isSafeInteger(this.maxBytes) || this.maxBytes < this.blockBytes) {
      throw new FlowError('CONFIG_ERROR', `object cache of ${this.maxBytes} bytes cannot hold one ${this.blockBytes}-byte block`);
    }
    // Blocks read ahead must not push out the ones being read: at most half the cache.
    const blocks = Math.floor(this.maxBytes / this.blockBytes);
    this.readAhead = Math.max(0, Math.min(opts.readAheadBlocks ?? 8, Math.floor(blocks / 2)));
    const perGet = opts.maxBlocksPerGet ?? 4;
    if (!Number.isSafeInteger(perGet) || perGet < 1) {
      throw new FlowError('CONFIG_ERROR', `object cache blocks per GET must be a positive integer, not ${perGet}`);
    }
    // A run is kept in the cache whole: no more than half of it.
    this.blocksPerGet = Math.max(1, Math.min(perGet, Math.floor(blocks / 2)));
    if (inner.adopt !== undefined) {
      const adopt = inner.adopt.bind(inner);
      this.adopt = (key, path) => this.writing(key, () => adopt(key, path));
    }
  }

  // ------------------------------------------------------------------ writes: pass through, invalidate

  put(key: string, data: Buffer | readonly Buffer[], options?: PutOptions): Promise<void> {
    return this.writing(key, () => this.inner.put(key, data, options));
  }

  delete(key: string): Promise<void> {
    return this.writing(key, () => this.inner.delete(key));
  }

  private async writing(key: string, fn: () => Promise<void>): Promise<void> {
    const st = this.state(key);
    st.writing++;
    this.invalidate(st, key);
    try {
      await fn();
    } finally {
      st.writing--;
      // Blocks of the old version may have been fetched meanwhile by reads that started before: not kept (gen).
      this.invalidate(st, key);
      this.maybeDrop(key, st);
    }
  }

  evict(key: string): void {
    const st = this.keys.get(key);
    if (st === undefined) return;
    this.invalidate(st, key);
    this.maybeDrop(key, st);
  }

  private invalidate(st: KeyState, key: string): void {
    st.gen++;
    for (const index of st.blocks) {
      const b = this.lru.get(blockId(key, index));
      if (b !== undefined) {
        this.lru.delete(blockId(key, index));
        this.bytes -= b.data.length;
      }
    }
    st.blocks.clear();
    // Fetches in flight finish for whoever waits on them, but new reads start their own.
    st.inflight = new Map();
    st.size = undefined;
  }

  // ------------------------------------------------------------------ reads

  list(prefix: string): Promise<ObjectInfo[]> {
    return this.inner.list(prefix);
  }

  async get(key: string, range?: { start: number; end: number }): Promise<Buffer> {
    if (range === undefined) {
      this.stats.bypassed++;
      return this.inner.get(key);
    }
    const { start } = range;
    let { end } = range;
    checkRange(key, range);
    // An empty range still says whether the object exists: the inner store answers that.
    if (end === start) return this.inner.get(key, range);
    const st = this.state(key);
    const gen = st.gen;
    if (st.size !== undefined) {
      end = Math.min(end, st.size);
      if (start >= end) return Buffer.alloc(0);
    }
    const B = this.blockBytes;
    const first = Math.floor(start / B);
    const last = Math.floor((end - 1) / B);
    const scan = st.scans.findIndex((next) => first === next || first === next - 1);
    const sequential = scan >= 0 || first === 0;
    if (scan >= 0) st.scans[scan] = last + 1;
    else {
      // A new scan position; the least recently continued one goes.
      st.scans.push(last + 1);
      if (st.scans.length > MAX_SCANS) st.scans.shift();
    }
    if (scan > 0) st.scans.push(st.scans.splice(scan, 1)[0]);
    const waits = this.blocks(key, st, first, last);
    // Where the object ends is known (the log reads a segment's footer first): read ahead at once. Otherwise the
    // blocks read now may show that it ends here (a segment smaller than a block), so read ahead after them.
    const knownSize = st.size !== undefined;
    if (sequential && knownSize) this.readAheadFrom(key, st, last + 1);
    let blocks: Buffer[];
    try {
      blocks = await Promise.all(waits);
      if (sequential && !knownSize && st.gen === gen) this.readAheadFrom(key, st, last + 1);
    } finally {
      this.maybeDrop(key, st);
    }
    if (st.gen !== gen) {
      // A write of this key ran meanwhile: the blocks may belong to different versions. The inner store reads
      // ranges atomically.
      this.stats.retried++;
      return this.inner.get(key, range);
    }
    return assemble(blocks, first * B, start, end, B);
  }

  /**
   * Blocks first..last: cached, being fetched, or fetched now, consecutive missing ones together (runs of up to
   * blocksPerGet blocks, one GET each).
   */
  private blocks(key: string, st: KeyState, first: number, last: number): Array<Promise<Buffer>> {
    const out: Array<Promise<Buffer>> = [];
    let runFrom = -1;
    const flush = (to: number): void => {
      if (runFrom < 0) return;
      this.stats.misses += to - runFrom;
      out.push(...this.fetch(key, st, runFrom, to - runFrom, false));
      runFrom = -1;
    };
    for (let i = first; i <= last; i++) {
      const have = this.held(key, st, i);
      if (have !== undefined) {
        flush(i);
        out.push(have);
      } else {
        if (runFrom < 0) runFrom = i;
        if (i + 1 - runFrom >= this.blocksPerGet) flush(i + 1);
      }
    }
    flush(last + 1);
    return out;
  }

  /** A block cached or being fetched (counted as a hit or a shared read), or undefined. */
  private held(key: string, st: KeyState, index: number): Promise<Buffer> | undefined {
    const id = blockId(key, index);
    const cached = this.lru.get(id);
    if (cached !== undefined) {
      this.stats.hits++;
      if (cached.ahead) {
        cached.ahead = false;
        this.stats.readAheadUsed++;
      }
      // Most recently used now.
      this.lru.delete(id);
      this.lru.set(id, cached);
      return Promise.resolve(cached.data);
    }
    const running = st.inflight.get(index);
    if (running !== undefined) this.stats.shared++;
    return running;
  }

  private readAheadFrom(key: string, st: KeyState, from: number): void {
    let runFrom = -1;
    const flush = (to: number): void => {
      if (runFrom < 0) return;
      this.stats.readAhead += to - runFrom;
      void this.fetch(key, st, runFrom, to - runFrom, true);
      runFrom = -1;
    };
    let i = from;
    let atEnd = false;
    for (; i < from + this.readAhead; i++) {
      if (st.size !== undefined && i * this.blockBytes >= st.size) {
        atEnd = true;
        break;
      }
      if (this.lru.has(blockId(key, i)) || st.inflight.has(i)) {
        flush(i);
        continue;
      }
      if (runFrom < 0) runFrom = i;
      if (i + 1 - runFrom >= this.blocksPerGet) flush(i + 1);
    }
    // The window moves on by a read's worth at a time: its newest few blocks wait until they make a whole run
    // (blocks nearer the reader are being fetched already), rather than going one small GET each.
    if (!atEnd && runFrom > from && i - runFrom < this.blocksPerGet) return;
    flush(i);
  }

  /**
   * Fetches blocks first..first+count-1 with one ranged GET; one promise per block. Each block is kept as a copy
   * of its part of the answer, so that evicting it frees its memory whatever happens to its neighbours.
   */
  private fetch(key: string, st: KeyState, first: number, count: number, ahead: boolean): Array<Promise<Buffer>> {
    const B = this.blockBytes;
    const gen = st.gen;
    const inflight = st.inflight;
    const parts: Array<Promise<Buffer>> = [];
    this.stats.gets++;
    const all = this.inner.get(key, { start: first * B, end: (first + count) * B }).then(
      (data) => {
        const blocks: Buffer[] = [];
        for (let j = 0; j < count; j++) {
          const piece = data.subarray(Math.min(j * B, data.length), Math.min((j + 1) * B, data.length));
          blocks.push(count === 1 ? piece : Buffer.from(piece));
        }
        for (let j = 0; j < count; j++) if (inflight.get(first + j) === parts[j]) inflight.delete(first + j);
        if (st.gen === gen && st.writing === 0 && this.keys.get(key) === st) {
          // A short answer ends the object (an empty one: at or before its start).
          if (data.length < count * B) st.size = Math.min(st.size ?? Infinity, first * B + data.length);
          for (let j = 0; j < count; j++) {
            if (blocks[j].length > 0) this.insert({ key, index: first + j, data: blocks[j], ahead });
          }
        }
        this.maybeDrop(key, st);
        return blocks;
      },
      (err: unknown) => {
        for (let j = 0; j < count; j++) if (inflight.get(first + j) === parts[j]) inflight.delete(first + j);
        this.maybeDrop(key, st);
        throw err;
      },
    );
    for (let j = 0; j < count; j++) {
      const p = all.then((blocks) => blocks[j]);
      parts.push(p);
      inflight.set(first + j, p);
      // A read-ahead nobody waits for may fail (the next read tries again): that is no unhandled rejection.
      p.catch(() => undefined);
    }
    return parts;
  }

  private insert(b: Block): void {
    const id = blockId(b.key, b.index);
    const st = this.keys.get(b.key)!;
    const old = this.lru.get(id);
    if (old !== undefined) {
      this.lru.delete(id);
      this.bytes -= old.data.length;
    }
    this.lru.set(id, b);
    st.blocks.add(b.index);
    this.bytes += b.data.length;
    while (this.bytes > this.maxBytes) {
      const [oldId, victim] = this.lru.entries().next().value as [string, Block];
      this.lru.delete(oldId);
      this.bytes -= victim.data.length;
      this.stats.evictions++;
      const vs = this.keys.get(victim.key);
      if (vs !== undefined) {
        vs.blocks.delete(victim.index);
        if (vs !== st) this.maybeDrop(victim.key, vs);
      }
    }
  }

  private state(key: string): KeyState {
    let st = this.keys.get(key);
    if (st === undefined) {
      st = { gen: 0, writing: 0, blocks: new Set(), inflight: new Map(), size: undefined, scans: [] };
      this.keys.set(key, st);
    }
    return st;
  }

  /** Forgets an object the cache holds nothing of (its size and scan position go with it). */
  private maybeDrop(key: string, st: KeyState): void {
    if (st.blocks.size === 0 && st.inflight.size === 0 && st.writing === 0 && this.keys.get(key) === st) {
      this.keys.delete(key);
    }
  }

  async close(): Promise<void> {
    this.lru.clear();
    this.keys.clear();
    this.bytes = 0;
    await this.inner.close();
  }

  /** Hits, misses, shared and read-ahead blocks, evictions, bytes held, and the inner store's own figures. */
  figures(): Record<string, unknown> {
    return {
      ...this.stats,
      bytesHeld: this.bytes,
      blocksHeld: this.lru.size,
      maxBytes: this.maxBytes,
      blockBytes: this.blockBytes,
      readAheadBlocks: this.readAhead,
      maxBlocksPerGet: this.blocksPerGet,
      inner: this.inner.figures?.() ?? { kind: this.inner.kind },
    };
  }
}

const blockId = (key: string, index: number): string => `${index}\0${key}`;

/** Bytes [start, end) out of consecutive blocks, the first starting at `base`; a short block ends the object. */
function assemble(blocks: Buffer[], base: number, start: number, end: number, B: number): Buffer {
  const from = start - base;
  if (blocks.length === 1) {
    const b = blocks[0];
    return b.subarray(Math.min(from, b.length), Math.min(end - base, b.length));
  }
  const pieces: Buffer[] = [];
  let total = 0;
  for (let i = 0; i < blocks.length; i++) {
    const b = blocks[i];
    const lo = i === 0 ? Math.min(from, b.length) : 0;
    const hi = Math.min(end - base - i * B, b.length);
    if (hi > lo) {
      pieces.push(b.subarray(lo, hi));
      total += hi - lo;
    }
    if (b.length < B) break;
  }
  return pieces.length === 1 ? pieces[0] : Buffer.concat(pieces, total);
}
