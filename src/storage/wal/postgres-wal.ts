/**
 * The hot tier in PostgreSQL: a broker with no durable disk of its own acknowledges an append once a PostgreSQL
 * transaction holding it has committed (synchronous_commit on, forced per connection).
 *
 * Group commit: one transaction is in flight at a time; the appends that arrive meanwhile form the next group,
 * written as one multi-row INSERT with the rows' data as binary bytea parameters (an unnest of a bytea[] would
 * ship the data hex-encoded inside an array literal, twice its size, built as one big string on the event loop),
 * so a group costs one commit (one WAL flush on the server) however many entries it holds. Usually the whole
 * group is a single statement (groupText: one round trip, its own transaction); a group of more rows than one
 * statement takes, or one resuming a key after a failure, runs as an explicit transaction. Each append resolves
 * after COMMIT. fence() is ordered after the appends issued before it.
 *
 * Fencing: each key's highest epoch is a row of wal_epochs. A group first locks its keys' rows and reads their
 * epochs (flowmq_wal_lock), then inserts only the entries whose epoch is not lower, in the same transaction; a
 * fence() is an upsert of the same row, so it waits for a group holding the lock, and a group after it sees the
 * raised epoch. A fenced writer can never slip an entry in after a fence.
 *
 * Failures (the server down or restarting, a statement timeout): the group's entries reject with STORAGE_ERROR,
 * and so do the entries of its keys queued behind it; each such key then accepts only an entry starting at or
 * below its lowest failed offset (KeyFences), as the WriteAheadLog contract says. A failed COMMIT may still have
 * committed (the reply was lost): the resumed entry then deletes, in its own transaction, what the key holds
 * from its base offset on, so the key's entries never overlap.
 *
 * A single broker replays and trims every key in the table. In cluster mode every broker writes the same table: a
 * broker reads back only the keys of the partitions it takes (replayKey), and trims only the keys its log names
 * (trim's `flushedUpTo` returns 0 for any other, see LogManager), so no broker ever deletes another's entries.
 */
import { FlowError, LatencyHistogram } from '../../core/index.js';
import type pg from 'pg';
import { connectPool, migratePostgres, pgError, type PgPool, type PostgresOptions } from '../postgres-util.js';
import { PgKeyedWal, type PendingAppend } from './pg-keyed-wal.js';
import { walMigrations } from './postgres-migrations.js';
import type { WalEntry, WriteAheadLog } from './types.js';

export interface PostgresWalOptions extends PostgresOptions {
  /** Largest group, in data bytes (default 8 MiB); a single larger entry still goes alone. */
  maxGroupBytes?: number;
  /** Where to record each group's commit time (the shards of a sharded WAL share one, for /metrics). */
  commitLatency?: LatencyHistogram;
}

type Pending = PendingAppend;

/** Rows per INSERT statement: 6 parameters a row, PostgreSQL takes at most 65 535 per statement. */
const ROWS_PER_INSERT = 2000;
/** Rows per replay page: bounded memory however large the log. */
const REPLAY_PAGE = 256;

/**
 * The VALUES rows of `n` entries, 6 parameters each (key, base, end, epoch, bytes, data) numbered after `$before`;
 * with `ordinal`, each row ends with its position, so that an INSERT ... SELECT can keep the given order.
 */
function entryRows(n: number, before: number, ordinal: boolean): string {
  const rows: string[] = [];
  for (let i = 0; i < n; i++) {
    const b = before + i * 6;
    rows.push(`($${b + 1}::text, $${b + 2}::bigint, $${b + 3}::bigint, $${b + 4}::bigint, $${b + 5}::integer, $${b + 6}::bytea${ordinal ? `, ${i}` : ''})`);
  }
  return rows.join(', ');
}

/** A statement text per row count, built once: most groups are small, so the same few counts recur. */
function cachedText(cache: Map<number, string>, n: number, build: (n: number) => string): string {
  let t = cache.get(n);
  if (t === undefined) {
    t = build(n);
    if (cache.size < 64) cache.set(n, t);
  }
  return t;
}

/** The parameterised multi-row INSERT for `n` rows. */
const insertTexts = new Map<number, string>();
const insertText = (n: number): string =>
  cachedText(insertTexts, n, () => `INSERT INTO wal_entries (key, base_offset, end_offset, epoch, bytes, data) VALUES ${entryRows(n, 0, false)}`);

/**
 * A whole group as one statement: the epochs locked and read by flowmq_wal_lock (a MATERIALIZED CTE, run once),
 * the rows as binary parameters ($3 on, 6 per row), inserted in their order when their epoch is not below the
 * key's. Returns the keys' epochs as they were, from which the caller tells which entries were fenced.
 */
const groupTexts = new Map<number, string>();
const groupText = (n: number): string =>
  cachedText(
    groupTexts,
    n,
    () => `WITH lk AS MATERIALIZED (SELECT out_key, out_epoch FROM flowmq_wal_lock($1::text[], $2::bigint[])),
      v (k, b, e, ep, n, d, ord) AS (VALUES ${entryRows(n, 2, true)}),
      ins AS (INSERT INTO wal_entries (key, base_offset, end_offset, epoch, bytes, data)
        SELECT v.k, v.b, v.e, v.ep, v.n, v.d FROM v JOIN lk ON lk.out_key = v.k WHERE v.ep >= lk.out_epoch ORDER BY v.ord)
      SELECT out_key, out_epoch FROM lk`,
  );

export class PostgresWal extends PgKeyedWal implements WriteAheadLog {
  private readonly maxGroupBytes: number;
  private commits = 0;
  /** Duration of each group's transaction (ms), for /metrics. */
  readonly commitLatency: LatencyHistogram;
  /**
   * The database's own identity (wal_shard_identity, made by its first migration to it): a sharded WAL records its
   * shards' ids in the metastore, so that a broker given another list, or the same database twice, is refused.
   */
  shardId = '';
  private entries = 0;
  private bytesWritten = 0;
  private failedGroups = 0;

  private constructor(db: PgPool, opts: PostgresWalOptions) {
    super(db);
    this.maxGroupBytes = opts.maxGroupBytes ?? 8 * 1024 * 1024;
    this.commitLatency = opts.commitLatency ?? new LatencyHistogram();
  }

  /** host:port of the database (every host of a multi-host URL), for messages. */
  get endpoint(): string {
    return this.db.endpoint;
  }

  /** Connects, migrates (once, under an advisory lock) and reads how many bytes the log holds. */
  static async open(opts: PostgresWalOptions): Promise<PostgresWal> {
    // Group commit keeps one transaction in flight; the rest of the pool serves fence, replay and trim.
    const db = await connectPool({ ...opts, poolSize: opts.poolSize ?? 4 }, 'wal');
    try {
      await migratePostgres(db, walMigrations, 'flowmq_wal_schema_migrations', 'WAL');
      const wal = new PostgresWal(db, opts);
      const id = await db.query<{ id: string }>('WAL open', 'SELECT id::text AS id FROM wal_shard_identity');
      wal.shardId = id.rows[0].id;
      const r = await db.query<{ key: string; bytes: number }>('WAL open', 'SELECT key, sum(bytes)::bigint AS bytes FROM wal_entries GROUP BY key');
      for (const row of r.rows) wal.addBytes(row.key, row.bytes);
      return wal;
    } catch (err) {
      await db.end().catch(() => undefined);
      throw err;
    }
  }

  /** Commits, entries, bytes and the mean group size, with the pool's figures. */
  figures(): Record<string, unknown> {
    return {
      commits: this.commits,
      entries: this.entries,
      bytes: this.bytesWritten,
      meanGroupSize: this.commits > 0 ? this.entries / this.commits : 0,
      failedGroups: this.failedGroups,
      heldBytes: this.totalBytes,
      queued: this.queue.length,
      ...this.db.poolFigures(),
    };
  }

  protected async flushLoop(): Promise<void> {
    // Let the appends made in the same tick join the first group.
    await Promise.resolve();
    while (this.queue.length > 0) {
      let bytes = 0;
      let n = 0;
      while (n < this.queue.length && (n === 0 || bytes + this.queue[n].entry.data.length <= this.maxGroupBytes)) {
        bytes += this.queue[n].entry.data.length;
        n++;
      }
      const group = this.queue.splice(0, n);
      try {
        await this.commitGroup(group);
      } catch (err) {
        // commitGroup settles its entries itself; this is for a bug in it, so the loop never stops for good.
        const e = err instanceof FlowError ? err : new FlowError('STORAGE_ERROR', 'WAL append failed', { cause: err });
        for (const p of group) p.reject(e);
      }
      this.settled(group.length);
    }
    this.flushing = null;
  }

  private async commitGroup(group: Pending[]): Promise<void> {
    // Entries of a key refused after a failure earlier in this loop (queued before anyone knew) are refused here.
    const live: Pending[] = [];
    for (const p of group) {
      const refused = this.fences.check(p.entry);
      if (refused) p.reject(refused);
      else live.push(p);
    }
    if (live.length === 0) return;
    // Highest epoch per key in the group (the in-memory check made epochs non-decreasing per key).
    const maxEpoch = new Map<string, number>();
    for (const p of live) {
      const e = maxEpoch.get(p.entry.key);
      if (e === undefined || p.entry.epoch > e) maxEpoch.set(p.entry.key, p.entry.epoch);
    }
    const resumed = [...maxEpoch.keys()].filter((k) => this.resuming.has(k));
    let accepted: Pending[] = [];
    const fenced: Array<{ p: Pending; stored: number }> = [];
    let resumedBytes: Array<{ key: string; bytes: number }> = [];
    const split = (stored: Map<string, number>): void => {
      accepted = [];
      fenced.length = 0;
      for (const p of live) {
        const s = stored.get(p.entry.key) ?? 0;
        if (p.entry.epoch < s) fenced.push({ p, stored: s });
        else accepted.push(p);
      }
    };
    const t0 = performance.now();
    try {
      if (resumed.length === 0 && live.length <= ROWS_PER_INSERT) {
        // The common case in one statement (one round trip, its own transaction): lock and read the epochs, insert
        // the entries not fenced. The comparison in the statement is the one split() makes.
        const keys = [...maxEpoch.keys()];
        const values: unknown[] = [keys, keys.map((k) => maxEpoch.get(k))];
        for (const { entry: e } of live) values.push(e.key, e.baseOffset, e.endOffset, e.epoch, e.data.length, e.data);
        const r = await this.db.query<{ out_key: string; out_epoch: number }>('WAL append', { text: groupText(live.length), values });
        split(new Map(r.rows.map((x) => [x.out_key, x.out_epoch])));
      } else
        await this.db.transaction('WAL append', async (c: pg.PoolClient) => {
          this.db.stats.queries++;
          const keys = [...maxEpoch.keys()];
          const locked = await c.query<{ out_key: string; out_epoch: number }>({
            name: 'fmwal_lock',
            text: 'SELECT out_key, out_epoch FROM flowmq_wal_lock($1::text[], $2::bigint[])',
            values: [keys, keys.map((k) => maxEpoch.get(k))],
          });
          split(new Map(locked.rows.map((x) => [x.out_key, x.out_epoch])));
          // A key resuming after a failed group: a commit whose reply was lost may have stored entries from the
          // failed offset on; the resumed entry replaces them.
          for (const key of resumed) {
            const first = accepted.find((p) => p.entry.key === key);
            if (first === undefined) continue;
            this.db.stats.queries++;
            await c.query({
              name: 'fmwal_cut',
              text: 'DELETE FROM wal_entries WHERE key = $1 AND end_offset > $2',
              values: [key, first.entry.baseOffset],
            });
          }
          for (let i = 0; i < accepted.length; i += ROWS_PER_INSERT) {
            const chunk = accepted.slice(i, i + ROWS_PER_INSERT);
            const values: unknown[] = [];
            for (const { entry: e } of chunk) values.push(e.key, e.baseOffset, e.endOffset, e.epoch, e.data.length, e.data);
            this.db.stats.queries++;
            await c.query({ text: insertText(chunk.length), values });
          }
          if (resumed.length > 0) {
            this.db.stats.queries++;
            const r = await c.query<{ key: string; bytes: number }>(
              'SELECT key, COALESCE(sum(bytes), 0)::bigint AS bytes FROM wal_entries WHERE key = ANY($1::text[]) GROUP BY key',
              [resumed],
            );
            resumedBytes = resumed.map((key) => ({ key, bytes: r.rows.find((x) => x.key === key)?.bytes ?? 0 }));
          }
        });
    } catch (err) {
      this.failedGroups++;
      const e = err instanceof FlowError ? err : pgError('WAL append', err, this.db.endpoint);
      // Every entry of the group fails, and so do those of its keys already queued behind it.
      this.failGroup(live, e);
      return;
    }
    this.commits++;
    this.commitLatency.record(performance.now() - t0);
    for (const key of resumed) this.resuming.delete(key);
    const resumedSet = new Set(resumedBytes.map((r) => r.key));
    for (const r of resumedBytes) this.setBytes(r.key, r.bytes);
    for (const p of accepted) {
      this.entries++;
      this.bytesWritten += p.entry.data.length;
      if (!resumedSet.has(p.entry.key)) this.addBytes(p.entry.key, p.entry.data.length);
    }
    for (const { p, stored } of fenced) this.refuseFenced(p, stored);
    for (const p of accepted) p.resolve();
  }

  async replay(fn: (entry: WalEntry) => void): Promise<void> {
    this.checkOpen();
    // Paged by id (the append order), so a large log is never held in memory at once.
    let after = 0;
    for (;;) {
      const r = await this.db.query<{ id: number; key: string; base_offset: number; end_offset: number; epoch: number; data: Buffer }>(
        'WAL replay',
        {
          name: 'fmwal_replay',
          text: 'SELECT id, key, base_offset, end_offset, epoch, data FROM wal_entries WHERE id > $1 ORDER BY id LIMIT $2',
        },
        [after, REPLAY_PAGE],
      );
      for (const row of r.rows) {
        fn({ key: row.key, baseOffset: row.base_offset, endOffset: row.end_offset, epoch: row.epoch, data: row.data });
        after = row.id;
      }
      if (r.rows.length < REPLAY_PAGE) return;
    }
  }

  async replayKey(key: string, fn: (entry: WalEntry) => void, after = 0): Promise<void> {
    this.checkOpen();
    // The caller fenced the key first (which waited for this WAL's appends of it to settle): what the table holds is
    // the whole truth, and the key resumes where it ends. A failure while this broker wrote the key before (it may
    // have changed hands since) no longer constrains where its next entry starts.
    this.forgetFailures(key);
    // Paged by end offset along the (key, end_offset) index: a key's entries are contiguous and never overlap (a
    // resumed key replaces what it held from the failed offset on; a fenced writer adds nothing), so this is the
    // append order.
    let from = after;
    for (;;) {
      const r = await this.db.query<{ base_offset: number; end_offset: number; epoch: number; data: Buffer }>(
        'WAL replay key',
        {
          name: 'fmwal_replay_key',
          text: 'SELECT base_offset, end_offset, epoch, data FROM wal_entries WHERE key = $1 AND end_offset > $2 ORDER BY end_offset LIMIT $3',
        },
        [key, from, REPLAY_PAGE],
      );
      for (const row of r.rows) {
        fn({ key, baseOffset: row.base_offset, endOffset: row.end_offset, epoch: row.epoch, data: row.data });
        from = row.end_offset;
      }
      if (r.rows.length < REPLAY_PAGE) break;
    }
    // The key is this broker's now: its bytes (those below `after` too: trim clears them) count in size(), and trim
    // names it.
    const r = await this.db.query<{ bytes: number }>(
      'WAL key size',
      { name: 'fmwal_key_bytes', text: 'SELECT COALESCE(sum(bytes), 0)::bigint AS bytes FROM wal_entries WHERE key = $1' },
      [key],
    );
    this.setBytes(key, r.rows[0].bytes);
  }

  async trim(flushedUpTo: (key: string) => number): Promise<number> {
    this.checkOpen();
    const { keys, upTo } = this.flushedKeys(flushedUpTo);
    if (keys.length === 0) return 0;
    const r = await this.db.query<{ key: string; bytes: number }>(
      'WAL trim',
      {
        name: 'fmwal_trim',
        text: `WITH d AS (
                 DELETE FROM wal_entries w USING unnest($1::text[], $2::bigint[]) AS f(k, o)
                 WHERE w.key = f.k AND w.end_offset <= f.o RETURNING w.key, w.bytes)
               SELECT key, sum(bytes)::bigint AS bytes FROM d GROUP BY key`,
      },
      [keys, upTo],
    );
    return this.release(r.rows);
  }

  async sharedKeys(): Promise<string[]> {
    this.checkOpen();
    const r = await this.db.query<{ key: string }>('WAL keys', {
      name: 'fmwal_keys',
      text: 'SELECT key FROM wal_epochs UNION SELECT DISTINCT key FROM wal_entries',
    });
    return r.rows.map((row) => row.key);
  }

  async dropKeys(keys: string[]): Promise<number> {
    this.checkOpen();
    if (keys.length === 0) return 0;
    const r = await this.db.query<{ key: string; bytes: number }>(
      'WAL drop keys',
      {
        name: 'fmwal_drop_keys',
        text: `WITH d AS (DELETE FROM wal_entries WHERE key = ANY($1::text[]) RETURNING key, bytes),
                    f AS (DELETE FROM wal_epochs WHERE key = ANY($1::text[]))
               SELECT key, sum(bytes)::bigint AS bytes FROM d GROUP BY key`,
      },
      [keys],
    );
    const released = this.release(r.rows);
    for (const key of keys) this.epochs.delete(key);
    return released;
  }

  /** Finishes the appends already accepted, then closes the pool. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    while (this.flushing) await this.flushing;
    await this.db.end();
  }
}
