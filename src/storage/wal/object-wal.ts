/**
 * The hot tier on object storage (`--wal object`, "diskless"): appends are gathered for a short window (time and
 * size bounded), written as one object holding every partition's entries of the window, and only then indexed in
 * PostgreSQL: one small row per object and key (partition) saying which byte range of the object holds which
 * entries. An append is acknowledged once that index transaction has committed, so PostgreSQL carries a row per
 * object and partition instead of the bytes, and the write path scales with the object store.
 *
 * Order and fencing are the PostgreSQL WAL's (postgres-wal.ts), on the same tables: one window in flight at a time
 * (the next gathers meanwhile), its keys' epochs locked and read by flowmq_wal_lock in the index transaction, the
 * ranges of fenced keys left out (their bytes in the object are garbage). A failed window (the object store or
 * PostgreSQL down) fails its entries and those of their keys queued behind it (KeyFences); the key's next entry
 * replaces whatever a commit whose reply was lost may have indexed from its offset on.
 *
 * Objects are `wal-objects/<writer>/<sequence>` (a writer is this process: a random id). An object is listed in
 * wal_objects by the transaction that indexes it; one written by a writer that died before indexing it is not, and
 * open() deletes such objects once they are older than `orphanAgeMs` (another broker may be between its PUT and its
 * commit). Trim deletes a key's ranges that are flushed (sealed into segments elsewhere), then the objects that no
 * range names any more.
 *
 * Reads (replay at start, replayKey at a takeover) fetch each range with a ranged GET and split it into its entries.
 */
import { randomBytes } from 'node:crypto';
import { FlowError, LatencyHistogram } from '../../core/index.js';
import type { ObjectStore } from '../objects/types.js';
import { connectPool, migratePostgres, pgError, type PgPool, type PostgresOptions } from '../postgres-util.js';
import { PgKeyedWal, type PendingAppend } from './pg-keyed-wal.js';
import { objectWalMigrations, walMigrations } from './postgres-migrations.js';
import type { WalEntry, WriteAheadLog } from './types.js';

export interface ObjectWalOptions extends PostgresOptions {
  /** Where the entries go. */
  objects: ObjectStore;
  /** How long appends are gathered into one object after the first of a window arrived, ms (default 100). */
  windowMs?: number;
  /** A window is written at once when it holds this many bytes (default 8 MiB). */
  maxObjectBytes?: number;
  /** Objects no index names are deleted at open once older than this, ms (default 10 min): see the module comment. */
  orphanAgeMs?: number;
}

type Pending = PendingAppend;

/** The entries of one key in one window: a row of wal_object_ranges. */
interface Range {
  key: string;
  entries: Pending[];
  position: number;
  bytes: number;
  epoch: number;
}

export const WAL_OBJECT_PREFIX = 'wal-objects/';
const REPLAY_PAGE = 256;
/** Range rows per INSERT: 10 parameters a row (and the object's key), at most 65 535 per statement. */
const RANGES_PER_INSERT = 5000;

/** The INSERT of `n` range rows of the object `$1`, built once per row count. */
const rangesTexts = new Map<number, string>();
function rangesInsert(n: number): string {
  let t = rangesTexts.get(n);
  if (t === undefined) {
    const rows: string[] = [];
    for (let i = 0; i < n; i++) {
      const b = 1 + i * 10;
      rows.push(
        `($${b + 1}::text, $${b + 2}::bigint, $${b + 3}::bigint, $${b + 4}::bigint, $1::text, $${b + 5}::bigint, $${b + 6}::integer, ` +
          `$${b + 7}::bigint[], $${b + 8}::bigint[], $${b + 9}::integer[], $${b + 10}::bigint[])`,
      );
    }
    t = `INSERT INTO wal_object_ranges (key, base_offset, end_offset, epoch, object_key, position, bytes, bases, ends, sizes, epochs) VALUES ${rows.join(', ')}`;
    if (rangesTexts.size < 64) rangesTexts.set(n, t);
  }
  return t;
}

export class ObjectWal extends PgKeyedWal implements WriteAheadLog {
  private queuedBytes = 0;
  private windowTimer: NodeJS.Timeout | null = null;
  private windowOpen: (() => void) | null = null;
  private readonly windowMs: number;
  private readonly maxObjectBytes: number;
  private readonly writer = randomBytes(8).toString('hex');
  private sequence = 0;
  readonly commitLatency = new LatencyHistogram();
  private commits = 0;
  private entries = 0;
  private bytesWritten = 0;
  private failedWindows = 0;
  private objectsDeleted = 0;

  private constructor(
    db: PgPool,
    private readonly objects: ObjectStore,
    opts: ObjectWalOptions,
  ) {
    super(db);
    this.windowMs = opts.windowMs ?? 100;
    this.maxObjectBytes = opts.maxObjectBytes ?? 8 * 1024 * 1024;
  }

  /** Connects, migrates, reads how many bytes the log holds per key, and deletes orphaned objects. */
  static async open(opts: ObjectWalOptions): Promise<ObjectWal> {
    const db = await connectPool({ ...opts, poolSize: opts.poolSize ?? 4 }, 'wal');
    try {
      // The epochs and their lock function are the PostgreSQL WAL's: a key is fenced the same way in both.
      await migratePostgres(db, walMigrations, 'flowmq_wal_schema_migrations', 'WAL');
      await migratePostgres(db, objectWalMigrations, 'flowmq_object_wal_schema_migrations', 'object WAL');
      const wal = new ObjectWal(db, opts.objects, opts);
      const r = await db.query<{ key: string; bytes: number }>('WAL open', 'SELECT key, sum(bytes)::bigint AS bytes FROM wal_object_ranges GROUP BY key');
      for (const row of r.rows) wal.addBytes(row.key, row.bytes);
      await wal.sweep(opts.orphanAgeMs ?? 10 * 60_000);
      return wal;
    } catch (err) {
      await db.end().catch(() => undefined);
      throw err;
    }
  }

  /** Deletes objects under the prefix that no index names and that are older than `ageMs` (their writer died). */
  private async sweep(ageMs: number): Promise<void> {
    const listed = await this.objects.list(WAL_OBJECT_PREFIX);
    if (listed.length === 0) return;
    const known = await this.db.query<{ object_key: string }>('WAL objects', 'SELECT object_key FROM wal_objects WHERE object_key = ANY($1::text[])', [
      listed.map((o) => o.key),
    ]);
    const indexed = new Set(known.rows.map((r) => r.object_key));
    const cutoff = Date.now() - ageMs;
    for (const o of listed) {
      if (indexed.has(o.key)) continue;
      // The writer's clock is in the name (see objectKey): an object too recent may still be committed.
      const at = Number.parseInt(o.key.slice(o.key.lastIndexOf('/') + 1).split('-')[0] ?? '', 36);
      if (!Number.isFinite(at) || at > cutoff) continue;
      await this.objects.delete(o.key);
      this.objectsDeleted++;
    }
  }

  figures(): Record<string, unknown> {
    return {
      commits: this.commits,
      entries: this.entries,
      bytes: this.bytesWritten,
      meanObjectBytes: this.commits > 0 ? this.bytesWritten / this.commits : 0,
      failedWindows: this.failedWindows,
      objectsDeleted: this.objectsDeleted,
      heldBytes: this.totalBytes,
      queued: this.queue.length,
      windowMs: this.windowMs,
      ...this.db.poolFigures(),
    };
  }

  protected override queued(entry: WalEntry): void {
    this.queuedBytes += entry.data.length;
    if (this.queuedBytes >= this.maxObjectBytes) this.windowOpen?.();
  }

  /** Waits out the window (from its first append), unless it fills first or the log closes. */
  private windowElapsed(): Promise<void> {
    if (this.closed || this.queuedBytes >= this.maxObjectBytes || this.windowMs <= 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = (): void => {
        if (this.windowTimer) clearTimeout(this.windowTimer);
        this.windowTimer = null;
        this.windowOpen = null;
        resolve();
      };
      this.windowOpen = done;
      this.windowTimer = setTimeout(done, this.windowMs);
    });
  }

  protected async flushLoop(): Promise<void> {
    while (this.queue.length > 0) {
      await this.windowElapsed();
      let bytes = 0;
      let n = 0;
      while (n < this.queue.length && (n === 0 || bytes + this.queue[n].entry.data.length <= this.maxObjectBytes)) {
        bytes += this.queue[n].entry.data.length;
        n++;
      }
      const group = this.queue.splice(0, n);
      this.queuedBytes -= bytes;
      try {
        await this.commitWindow(group);
      } catch (err) {
        const e = err instanceof FlowError ? err : new FlowError('STORAGE_ERROR', 'WAL append failed', { cause: err });
        for (const p of group) p.reject(e);
      }
      this.settled(group.length);
    }
    this.flushing = null;
  }

  /** `wal-objects/<writer>/<ms since epoch, base 36>-<sequence>`: unique, and dated for the orphan sweep. */
  private objectKey(): string {
    return `${WAL_OBJECT_PREFIX}${this.writer}/${Date.now().toString(36)}-${String(this.sequence++).padStart(10, '0')}`;
  }

  private async commitWindow(group: Pending[]): Promise<void> {
    const live: Pending[] = [];
    for (const p of group) {
      const refused = this.fences.check(p.entry);
      if (refused) p.reject(refused);
      else live.push(p);
    }
    if (live.length === 0) return;
    // One range per key, in the order of its entries; the object is the ranges one after the other.
    const ranges = new Map<string, Range>();
    for (const p of live) {
      let r = ranges.get(p.entry.key);
      if (!r) ranges.set(p.entry.key, (r = { key: p.entry.key, entries: [], position: 0, bytes: 0, epoch: 0 }));
      r.entries.push(p);
      r.bytes += p.entry.data.length;
      r.epoch = Math.max(r.epoch, p.entry.epoch);
    }
    const parts: Buffer[] = [];
    let at = 0;
    for (const r of ranges.values()) {
      r.position = at;
      for (const p of r.entries) parts.push(p.entry.data);
      at += r.bytes;
    }
    const key = this.objectKey();
    const resumed = [...ranges.keys()].filter((k) => this.resuming.has(k));
    const fenced: Array<{ r: Range; stored: number }> = [];
    const accepted: Range[] = [];
    let resumedBytes: Array<{ key: string; bytes: number }> = [];
    const t0 = performance.now();
    try {
      await this.objects.put(key, parts);
      await this.db.transaction('WAL append', async (c) => {
        this.db.stats.queries++;
        const keys = [...ranges.keys()];
        const locked = await c.query<{ out_key: string; out_epoch: number }>({
          name: 'fmowal_lock',
          text: 'SELECT out_key, out_epoch FROM flowmq_wal_lock($1::text[], $2::bigint[])',
          values: [keys, keys.map((k) => ranges.get(k)!.epoch)],
        });
        const stored = new Map(locked.rows.map((x) => [x.out_key, x.out_epoch]));
        for (const r of ranges.values()) {
          const s = stored.get(r.key) ?? 0;
          // Epochs only rise within a key's entries: the range goes in whole or, its first entry fenced, not at all.
          if (r.entries[0]!.entry.epoch < s) fenced.push({ r, stored: s });
          else accepted.push(r);
        }
        for (const k of resumed) {
          const r = ranges.get(k);
          if (!r || !accepted.includes(r)) continue;
          this.db.stats.queries++;
          await c.query({
            name: 'fmowal_cut',
            text: 'DELETE FROM wal_object_ranges WHERE key = $1 AND end_offset > $2',
            values: [k, r.entries[0]!.entry.baseOffset],
          });
        }
        if (accepted.length === 0) return;
        this.db.stats.queries++;
        await c.query({ name: 'fmowal_object', text: 'INSERT INTO wal_objects (object_key, bytes) VALUES ($1, $2)', values: [key, at] });
        for (let i = 0; i < accepted.length; i += RANGES_PER_INSERT) {
          const chunk = accepted.slice(i, i + RANGES_PER_INSERT);
          const values: unknown[] = [key];
          for (const r of chunk) {
            values.push(
              r.key,
              r.entries[0]!.entry.baseOffset,
              r.entries.at(-1)!.entry.endOffset,
              r.epoch,
              r.position,
              r.bytes,
              r.entries.map((p) => p.entry.baseOffset),
              r.entries.map((p) => p.entry.endOffset),
              r.entries.map((p) => p.entry.data.length),
              r.entries.map((p) => p.entry.epoch),
            );
          }
          this.db.stats.queries++;
          await c.query({ text: rangesInsert(chunk.length), values });
        }
        if (resumed.length > 0) {
          this.db.stats.queries++;
          const b = await c.query<{ key: string; bytes: number }>(
            'SELECT key, COALESCE(sum(bytes), 0)::bigint AS bytes FROM wal_object_ranges WHERE key = ANY($1::text[]) GROUP BY key',
            [resumed],
          );
          resumedBytes = resumed.map((k) => ({ key: k, bytes: b.rows.find((x) => x.key === k)?.bytes ?? 0 }));
        }
      });
    } catch (err) {
      this.failedWindows++;
      const e = err instanceof FlowError ? err : pgError('WAL append', err, this.db.endpoint);
      this.failGroup(live, e);
      return;
    }
    if (accepted.length === 0) await this.objects.delete(key).catch(() => undefined);
    this.commits++;
    this.commitLatency.record(performance.now() - t0);
    for (const k of resumed) this.resuming.delete(k);
    const resumedSet = new Set(resumedBytes.map((r) => r.key));
    for (const r of resumedBytes) this.setBytes(r.key, r.bytes);
    for (const r of accepted) {
      this.entries += r.entries.length;
      this.bytesWritten += r.bytes;
      if (!resumedSet.has(r.key)) this.addBytes(r.key, r.bytes);
    }
    for (const { r, stored } of fenced) for (const p of r.entries) this.refuseFenced(p, stored);
    for (const r of accepted) for (const p of r.entries) p.resolve();
  }

  /** The entries of a range row, read from its object. */
  private async readRange(
    row: { key: string; object_key: string; position: number; bytes: number; bases: number[]; ends: number[]; sizes: number[]; epochs: number[] },
    fn: (entry: WalEntry) => void,
    after = -1,
  ): Promise<void> {
    const data = await this.objects.get(row.object_key, { start: Number(row.position), end: Number(row.position) + row.bytes });
    if (data.length !== row.bytes) throw new FlowError('STORAGE_ERROR', `WAL object ${row.object_key}: ${data.length} bytes where ${row.bytes} were indexed`);
    let at = 0;
    for (let i = 0; i < row.bases.length; i++) {
      const size = row.sizes[i]!;
      const entry = {
        key: row.key,
        baseOffset: Number(row.bases[i]),
        endOffset: Number(row.ends[i]),
        epoch: Number(row.epochs[i]),
        data: data.subarray(at, at + size),
      };
      at += size;
      if (entry.endOffset > after) fn(entry);
    }
  }

  async replay(fn: (entry: WalEntry) => void): Promise<void> {
    this.checkOpen();
    let after = 0;
    for (;;) {
      const r = await this.db.query<RangeRow & { id: number }>(
        'WAL replay',
        {
          name: 'fmowal_replay',
          text: `SELECT id, key, object_key, position, bytes, bases, ends, sizes, epochs FROM wal_object_ranges WHERE id > $1 ORDER BY id LIMIT $2`,
        },
        [after, REPLAY_PAGE],
      );
      for (const row of r.rows) {
        await this.readRange(row, fn);
        after = row.id;
      }
      if (r.rows.length < REPLAY_PAGE) return;
    }
  }

  async replayKey(key: string, fn: (entry: WalEntry) => void, after = 0): Promise<void> {
    this.checkOpen();
    this.forgetFailures(key);
    let from = after;
    for (;;) {
      const r = await this.db.query<RangeRow & { end_offset: number }>(
        'WAL replay key',
        {
          name: 'fmowal_replay_key',
          text: `SELECT key, end_offset, object_key, position, bytes, bases, ends, sizes, epochs FROM wal_object_ranges
                 WHERE key = $1 AND end_offset > $2 ORDER BY end_offset LIMIT $3`,
        },
        [key, from, REPLAY_PAGE],
      );
      for (const row of r.rows) {
        await this.readRange(row, fn, after);
        from = Number(row.end_offset);
      }
      if (r.rows.length < REPLAY_PAGE) break;
    }
    const r = await this.db.query<{ bytes: number }>(
      'WAL key size',
      { name: 'fmowal_key_bytes', text: 'SELECT COALESCE(sum(bytes), 0)::bigint AS bytes FROM wal_object_ranges WHERE key = $1' },
      [key],
    );
    this.setBytes(key, r.rows[0].bytes);
  }

  async trim(flushedUpTo: (key: string) => number): Promise<number> {
    this.checkOpen();
    const { keys, upTo } = this.flushedKeys(flushedUpTo);
    if (keys.length === 0) return 0;
    const r = await this.db.query<{ key: string; bytes: number; objects: string[] }>(
      'WAL trim',
      {
        name: 'fmowal_trim',
        text: `WITH d AS (
                 DELETE FROM wal_object_ranges w USING unnest($1::text[], $2::bigint[]) AS f(k, o)
                 WHERE w.key = f.k AND w.end_offset <= f.o RETURNING w.key, w.bytes, w.object_key)
               SELECT key, sum(bytes)::bigint AS bytes, array_agg(DISTINCT object_key) AS objects FROM d GROUP BY key`,
      },
      [keys, upTo],
    );
    const released = this.release(r.rows);
    const touched = new Set(r.rows.flatMap((row) => row.objects));
    await this.dropUnreferenced([...touched]);
    return released;
  }

  /** Deletes the objects among `keys` that no range names any more: the index row first, then the object. */
  private async dropUnreferenced(keys: string[]): Promise<void> {
    if (keys.length === 0) return;
    const gone = await this.db.query<{ object_key: string }>(
      'WAL objects trim',
      {
        name: 'fmowal_drop_objects',
        text: `DELETE FROM wal_objects o WHERE o.object_key = ANY($1::text[])
                 AND NOT EXISTS (SELECT 1 FROM wal_object_ranges r WHERE r.object_key = o.object_key) RETURNING o.object_key`,
      },
      [keys],
    );
    // An object whose row is gone but whose delete failed is an orphan: open() sweeps it.
    for (const row of gone.rows) {
      await this.objects.delete(row.object_key).catch(() => undefined);
      this.objectsDeleted++;
    }
  }

  async sharedKeys(): Promise<string[]> {
    this.checkOpen();
    const r = await this.db.query<{ key: string }>('WAL keys', {
      name: 'fmowal_keys',
      text: 'SELECT key FROM wal_epochs UNION SELECT DISTINCT key FROM wal_object_ranges',
    });
    return r.rows.map((row) => row.key);
  }

  async dropKeys(keys: string[]): Promise<number> {
    this.checkOpen();
    if (keys.length === 0) return 0;
    const r = await this.db.query<{ key: string; bytes: number; objects: string[] }>(
      'WAL drop keys',
      {
        name: 'fmowal_drop_keys',
        text: `WITH d AS (DELETE FROM wal_object_ranges WHERE key = ANY($1::text[]) RETURNING key, bytes, object_key),
                    f AS (DELETE FROM wal_epochs WHERE key = ANY($1::text[]))
               SELECT key, sum(bytes)::bigint AS bytes, array_agg(DISTINCT object_key) AS objects FROM d GROUP BY key`,
      },
      [keys],
    );
    const released = this.release(r.rows);
    const touched = new Set(r.rows.flatMap((row) => row.objects));
    for (const key of keys) this.epochs.delete(key);
    await this.dropUnreferenced([...touched]);
    return released;
  }

  /** Writes what is gathered at once, finishes the windows already accepted, then closes the pool. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.windowOpen?.();
    while (this.flushing) await this.flushing;
    await this.db.end();
  }
}

interface RangeRow {
  key: string;
  object_key: string;
  position: number;
  bytes: number;
  bases: number[];
  ends: number[];
  sizes: number[];
  epochs: number[];
}
