/**
 * The cluster QueueStore: queue messages in PostgreSQL (the metastore's database, tables of their own, migrated
 * under the same advisory lock), for brokers that keep nothing on their own disk.
 *
 * Group commit: one group in flight at a time; the calls made meanwhile (and those of the tick that starts a
 * group) wait in one lane per queue, and the next group is taken from the lanes by deficit round robin
 * (fair-groups.ts, as the embedded store does; issue 24): a queue with little waiting joins the very next group
 * beside at most one quantum of each busy queue, instead of waiting behind a flooding publisher's whole backlog.
 * A group runs as ONE transaction, so it costs one commit (one WAL flush on the server) however many calls it
 * holds; since that fixed cost (BEGIN, the statements and COMMIT as round trips, the flush) is higher than the
 * embedded store's, the quantum is larger than its 64 KiB. Within a group, consecutive appends, delivery counts and removals are each one
 * statement (appends as a multi-row INSERT with binary bytea parameters: an unnest of a bytea[] would ship the
 * bodies hex-encoded), in the order insert → update → delete, which gives the same result as the calls' own
 * order; a removal followed by an append of the same queue, and every open / read / purge / drop, start a new
 * run, so reads see exactly the calls made before them. A group of a single statement needs no BEGIN/COMMIT.
 *
 * Counters: each queue's count, bytes and highest id are a row of queue_counters, updated by the same statement
 * that inserts or deletes its messages (from what the statement itself inserted / deleted, RETURNING), so no
 * call counts a queue's rows and every call is O(log n) in the queue's length (primary key (queue, id)).
 *
 * Order and durability: one group in flight, and a queue's calls leave its lane in order, so calls naming a queue
 * take effect in the order they were made (calls of different queues may not); a call resolves
 * after its group's COMMIT (synchronous_commit on, forced per connection). Failures (the server down or
 * restarting, a statement timeout) reject the whole group's calls with STORAGE_ERROR (retriable; a failed COMMIT
 * may still have committed: an append retried with the same ids leaves the stored ones alone); the next group
 * runs on a new connection.
 */
import type pg from 'pg';
import { FlowError } from '../../core/index.js';
import type { QueueMark, StoredQueueMessage } from '../../core/index.js';
import { BatchedQueueStore, type CommonOp } from './batched-store.js';
import { FairGroups } from './fair-groups.js';
import { connectPool, migratePostgres, type PgMigration, type PgPool, type PostgresOptions } from '../postgres-util.js';

export const queueStoreMigrations: readonly PgMigration[] = [
  {
    version: 1,
    name: 'queue messages and counters',
    sql: `
      -- Per queue: the counters kept in step with its messages (no COUNT(*) to open or bound a queue).
      CREATE TABLE queue_counters (
        queue  text COLLATE "C" NOT NULL PRIMARY KEY,
        count  bigint NOT NULL,
        bytes  bigint NOT NULL,
        max_id bigint NOT NULL
      );

      CREATE TABLE queue_messages (
        queue      text COLLATE "C" NOT NULL,
        id         bigint  NOT NULL,
        deliveries integer NOT NULL,
        size       integer NOT NULL,
        data       bytea   NOT NULL,
        PRIMARY KEY (queue, id)
      );
    `,
  },
  {
    version: 2,
    name: 'forwarded publish marks',
    sql: `
      -- Cluster mode: per queue, the highest sequence stored of each forwarding broker's publishes ({"<src>": seq}),
      -- written in the transaction of their messages, so that the queue's next owner recognises a retry.
      ALTER TABLE queue_counters ADD COLUMN marks jsonb;
    `,
  },
];

/**
 * `maxId` of an append: set when messages were taken out of it before it was written (elide), so that the queue's
 * highest id still counts them.
 */
type Op = CommonOp | { k: 'append'; q: string; ids: number[]; bodies: Buffer[]; maxId?: number; mark?: QueueMark };

interface Call {
  op: Op;
  /** Cluster mode: the queue's owner epoch when the call was made (a write to fence), else undefined. */
  epoch?: number;
  result: unknown;
  resolve(v: unknown): void;
  reject(e: Error): void;
}

interface Step {
  text: string;
  values: unknown[];
  /** Takes the statement's rows (barrier ops set their call's result). */
  done?(rows: pg.QueryResultRow[]): void;
}

/** Rows per INSERT: 4 parameters a row, at most 65 535 parameters a statement. */
const ROWS_PER_INSERT = 4000;
/**
 * Fair groups, in cost units (body bytes plus PER_CALL per message or call). While a light queue waits, each busy
 * queue puts at most QUANTUM in a group: 128 KiB (about 120 rows of 1 KiB, one INSERT) keeps the light queue's wait
 * to a few milliseconds while the transaction's fixed cost stays small beside its rows. Busy queues alone share
 * GROUP_LIMIT (an append larger than that still goes, once its lane's deficit has grown over the rounds). For HOLD_MS after a light queue waited beside
 * busy ones the groups stay small: a confirming publisher's next call comes soon, and a group cannot be interrupted.
 * FLOWMQ_PG_FAIR_QUANTUM, _GROUP and _HOLD override them (benchmarks).
 */
const QUANTUM = Number(process.env.FLOWMQ_PG_FAIR_QUANTUM) || 128 * 1024;
const GROUP_LIMIT = Number(process.env.FLOWMQ_PG_FAIR_GROUP) || 1024 * 1024;
const HOLD_MS = Number(process.env.FLOWMQ_PG_FAIR_HOLD ?? 100);
const PER_CALL = 64;

function cost(op: Op): number {
  if (op.k === 'append') {
    let c = 0;
    for (const b of op.bodies) c += b.length + PER_CALL;
    return c;
  }
  if (op.k === 'remove') return PER_CALL + 16 * op.ids.length;
  return PER_CALL;
}

/** Calls a removal does not elide across (see elide). */
function isBarrier(op: Op): boolean {
  return op.k === 'open' || op.k === 'read' || op.k === 'purge' || op.k === 'drop' || op.k === 'dropPrefix';
}

const insertTexts = new Map<number, string>();
function insertText(n: number): string {
  let t = insertTexts.get(n);
  if (t !== undefined) return t;
  const rows: string[] = [];
  for (let i = 0; i < n; i++) rows.push(`($${4 * i + 1}::text, $${4 * i + 2}::bigint, $${4 * i + 3}::integer, $${4 * i + 4}::bytea)`);
  t = `WITH v (q, id, sz, d) AS (VALUES ${rows.join(', ')}),
    ins AS (INSERT INTO queue_messages (queue, id, deliveries, size, data) SELECT q, id, 0, sz, d FROM v
      ON CONFLICT (queue, id) DO NOTHING RETURNING queue, size),
    added AS (SELECT queue, count(*) AS n, sum(size) AS b FROM ins GROUP BY queue),
    mx AS (SELECT q, max(id) AS m FROM v GROUP BY q)
    INSERT INTO queue_counters AS c (queue, count, bytes, max_id)
      SELECT mx.q, COALESCE(added.n, 0), COALESCE(added.b, 0), mx.m FROM mx LEFT JOIN added ON added.queue = mx.q
    ON CONFLICT (queue) DO UPDATE SET count = c.count + excluded.count, bytes = c.bytes + excluded.bytes,
      max_id = GREATEST(c.max_id, excluded.max_id)`;
  if (insertTexts.size < 64) insertTexts.set(n, t);
  return t;
}

const REMOVE = `WITH d AS (DELETE FROM queue_messages m USING unnest($1::text[], $2::bigint[]) AS r(q, id)
    WHERE m.queue = r.q AND m.id = r.id RETURNING m.queue, m.size)
  UPDATE queue_counters c SET count = c.count - x.n, bytes = c.bytes - x.b
    FROM (SELECT queue, count(*) AS n, sum(size) AS b FROM d GROUP BY queue) x WHERE c.queue = x.queue`;
const DELIVERIES = `UPDATE queue_messages m SET deliveries = r.n FROM unnest($1::text[], $2::bigint[], $3::integer[]) AS r(q, id, n)
  WHERE m.queue = r.q AND m.id = r.id`;
const OPEN = `INSERT INTO queue_counters AS c (queue, count, bytes, max_id) VALUES ($1, 0, 0, 0)
  ON CONFLICT (queue) DO UPDATE SET queue = c.queue RETURNING count, bytes, max_id, marks`;
/** Forwarded publishes' marks ({src: seq} per queue), merged into the queue's counters row (appends are in order). */
const MARKS = `INSERT INTO queue_counters AS c (queue, count, bytes, max_id, marks) SELECT q, 0, 0, 0, m FROM unnest($1::text[], $2::jsonb[]) AS r(q, m)
  ON CONFLICT (queue) DO UPDATE SET marks = COALESCE(c.marks, '{}'::jsonb) || excluded.marks`;
const READ = 'SELECT id, deliveries, data FROM queue_messages WHERE queue = $1 AND id >= $2 ORDER BY id LIMIT $3';
const PURGE = `WITH d AS (DELETE FROM queue_messages WHERE queue = $1)
  UPDATE queue_counters c SET count = 0, bytes = 0 FROM (SELECT count AS old FROM queue_counters WHERE queue = $1) o
  WHERE c.queue = $1 RETURNING o.old`;
const DROP = 'WITH d AS (DELETE FROM queue_messages WHERE queue = $1) DELETE FROM queue_counters WHERE queue = $1';
/** dropQueues: the counters rows name every queue with messages (an append upserts its row). */
const DROP_PREFIX = `WITH k AS (DELETE FROM queue_counters WHERE left(queue, char_length($1)) = $1 RETURNING queue),
    d AS (DELETE FROM queue_messages m USING k WHERE m.queue = k.queue)
  SELECT queue FROM k`;
/** The highest ids of appends whose messages were all (or the last ones) taken out before they were written. */
const MAX_IDS = `INSERT INTO queue_counters AS c (queue, count, bytes, max_id) SELECT q, 0, 0, m FROM unnest($1::text[], $2::bigint[]) AS r(q, m)
  ON CONFLICT (queue) DO UPDATE SET max_id = GREATEST(c.max_id, excluded.max_id)`;
/** Cluster mode: every fenced queue a group writes, checked (and its owner row locked FOR SHARE) before its writes. */
const FENCE = "SELECT flowmq_owner_check('queue', f.q, f.e) FROM unnest($1::text[], $2::bigint[]) AS f(q, e)";

/** A run of appends, delivery counts and removals that can be applied as (at most) three statements. */
class Run {
  appends: Array<{ q: string; id: number; body: Buffer }> = [];
  deliveries = new Map<string, { q: string; id: number; n: number }>();
  removes: Array<{ q: string; id: number }> = [];
  removedFrom = new Set<string>();
  /** Per queue, the highest id of its appends here whose messages were taken out (elided) and not inserted. */
  maxIds = new Map<string, number>();
  /** Per queue, the forwarded publishes' marks of its appends here (also of appends elided whole). */
  marks = new Map<string, Record<string, number>>();

  steps(out: Step[]): void {
    if (this.maxIds.size > 0) {
      out.push({ text: MAX_IDS, values: [[...this.maxIds.keys()], [...this.maxIds.values()]] });
    }
    for (let i = 0; i < this.appends.length; i += ROWS_PER_INSERT) {
      const part = this.appends.slice(i, i + ROWS_PER_INSERT);
      const values: unknown[] = [];
      for (const a of part) values.push(a.q, a.id, a.body.length, a.body);
      out.push({ text: insertText(part.length), values });
    }
    if (this.marks.size > 0) {
      out.push({ text: MARKS, values: [[...this.marks.keys()], [...this.marks.values()].map((m) => JSON.stringify(m))] });
    }
    if (this.deliveries.size > 0) {
      const d = [...this.deliveries.values()];
      out.push({ text: DELIVERIES, values: [d.map((x) => x.q), d.map((x) => x.id), d.map((x) => x.n)] });
    }
    if (this.removes.length > 0) out.push({ text: REMOVE, values: [this.removes.map((x) => x.q), this.removes.map((x) => x.id)] });
  }
}

export class PostgresQueueStore extends BatchedQueueStore {
  readonly kind = 'postgres';
  /** Calls waiting for a group, one lane per queue. */
  private readonly waiting = new FairGroups<Call>(QUANTUM, GROUP_LIMIT, HOLD_MS);
  private running: Promise<void> | null = null;
  private scheduled = false;
  /** elided: messages removed before their append was written, so neither was (see elide). */
  private stats = { calls: 0, commits: 0, statements: 0, failedGroups: 0, fenced: 0, elided: 0 };
  /** Cluster mode: queues whose writes are fenced by their owner epoch (see QueueStore.fence). */
  private readonly fences = new Map<string, number>();
  private idleWaiters: Array<() => void> = [];

  private constructor(private readonly db: PgPool) {
    super();
  }

  /** Connects and brings the queue tables up to date (once, under the advisory lock shared with the metastore). */
  static async open(opts: PostgresOptions): Promise<PostgresQueueStore> {
    // One group in flight at a time: a second connection only for the moment a lost one is being replaced.
    const db = await connectPool({ ...opts, poolSize: opts.poolSize === undefined ? 2 : Math.min(opts.poolSize, 2) }, 'queues');
    try {
      await migratePostgres(db, queueStoreMigrations, 'flowmq_queue_schema_migrations', 'queue store');
      return new PostgresQueueStore(db);
    } catch (err) {
      await db.end().catch(() => undefined);
      throw err;
    }
  }

  figures(): Record<string, unknown> {
    return {
      ...this.stats,
      meanGroupCalls: this.stats.commits > 0 ? this.stats.calls / this.stats.commits : 0,
      queued: this.waiting.size,
      ...this.db.poolFigures(),
    };
  }

  fence(queue: string, epoch: number | null): void {
    if (epoch === null) this.fences.delete(queue);
    else this.fences.set(queue, epoch);
  }

  protected call<T>(op: Op): Promise<T> {
    if (this.closed) return Promise.reject(new FlowError('CLOSED', 'queue store is closed'));
    // The epoch in force when the call is made: a write issued before a handover is checked against its own epoch.
    const epoch = this.fences.size > 0 && op.k !== 'open' && op.k !== 'read' ? this.fences.get(op.q) : undefined;
    if (op.k === 'remove') this.elide(op, epoch);
    return new Promise<T>((resolve, reject) => {
      this.waiting.push(op.q, { op, epoch, result: null, resolve: resolve as (v: unknown) => void, reject }, cost(op));
      this.stats.calls++;
      // The first call of a tick waits for the rest of the tick, so they share a group.
      if (!this.running && !this.scheduled) {
        this.scheduled = true;
        setImmediate(() => {
          this.scheduled = false;
          this.kick();
        });
      }
    });
  }

  /**
   * A removal of messages whose append still waits for its group (a consumer acked them before their write was due:
   * the core delivers a message before its append is durable, as RabbitMQ does) takes them out of that append, so
   * neither is written, as the embedded store does (sqlite-worker.ts) and as RabbitMQ's message store skips writing a
   * persistent message acked before its write. Both calls still resolve with their groups: the publisher's confirm
   * waits for the append's group as before, and the message it confirms has by then been delivered and acked. Only
   * appends after the lane's last waiting open / read / purge / drop are looked at (a read made before the removal
   * must still see the message), and only those made under the same owner epoch (cluster mode: a write fenced as a
   * whole stays fenced as a whole). The removal keeps the ids not found: written already, or in a group under way.
   */
  private elide(remove: { q: string; ids: number[] }, epoch: number | undefined): void {
    let barriers = 0;
    this.waiting.forWaiting(remove.q, (c) => {
      if (isBarrier(c.op)) barriers++;
      return 0;
    });
    const gone = new Set(remove.ids);
    let seen = 0;
    let elided = 0;
    this.waiting.forWaiting(remove.q, (c) => {
      const op = c.op;
      if (isBarrier(op)) seen++;
      if (seen < barriers || op.k !== 'append' || c.epoch !== epoch || gone.size === 0) return 0;
      let less = 0;
      let w = 0;
      for (let i = 0; i < op.ids.length; i++) {
        const id = op.ids[i];
        const body = op.bodies[i];
        if (gone.delete(id)) {
          less += body.length + PER_CALL;
          if (op.maxId === undefined || id > op.maxId) op.maxId = id;
          elided++;
          continue;
        }
        op.ids[w] = id;
        op.bodies[w] = body;
        w++;
      }
      op.ids.length = w;
      op.bodies.length = w;
      return less;
    });
    if (elided > 0) {
      this.stats.elided += elided;
      remove.ids = remove.ids.filter((id) => gone.has(id));
    }
  }

  private kick(): void {
    if (this.running || this.waiting.size === 0) return;
    this.running = this.runGroups().finally(() => {
      this.running = null;
      if (this.waiting.size > 0) this.kick();
      else {
        const w = this.idleWaiters;
        this.idleWaiters = [];
        for (const f of w) f();
      }
    });
  }

  private async runGroups(): Promise<void> {
    // Each group is taken when the previous one has committed, from the calls waiting then (those made meanwhile
    // included), so a queue that had little waiting is in the very next group.
    while (this.waiting.size > 0) await this.runGroup(this.waiting.next());
  }

  private async runGroup(group: Call[]): Promise<void> {
    const steps: Step[] = [];
    const fenced = new Map<string, number>();
    for (const c of group) if (c.epoch !== undefined && !fenced.has(c.op.q)) fenced.set(c.op.q, c.epoch);
    if (fenced.size > 0) steps.push({ text: FENCE, values: [[...fenced.keys()], [...fenced.values()]] });
    let run = new Run();
    const barrier = (): void => {
      run.steps(steps);
      run = new Run();
    };
    for (const c of group) {
      const op = c.op;
      switch (op.k) {
        case 'append': {
          if (run.removedFrom.has(op.q)) barrier();
          for (let i = 0; i < op.ids.length; i++) run.appends.push({ q: op.q, id: op.ids[i], body: op.bodies[i] });
          // Elided messages above the last one inserted: the insert's own maximum would not count them.
          const last = op.ids.length > 0 ? op.ids[op.ids.length - 1] : 0;
          if (op.maxId !== undefined && op.maxId > last && op.maxId > (run.maxIds.get(op.q) ?? 0)) run.maxIds.set(op.q, op.maxId);
          if (op.mark !== undefined) {
            let m = run.marks.get(op.q);
            if (m === undefined) run.marks.set(op.q, (m = {}));
            m[op.mark.src] = op.mark.seq;
          }
          break;
        }
        case 'deliveries':
          run.deliveries.set(`${op.id}\u0000${op.q}`, { q: op.q, id: op.id, n: op.n });
          break;
        case 'remove':
          // Empty when every message it named was elided (never written).
          if (op.ids.length === 0) break;
          for (const id of op.ids) run.removes.push({ q: op.q, id });
          run.removedFrom.add(op.q);
          break;
        case 'open':
          barrier();
          steps.push({
            text: OPEN,
            values: [op.q],
            done: (rows) =>
              void (c.result = {
                count: rows[0].count as unknown,
                bytes: rows[0].bytes as unknown,
                maxId: rows[0].max_id as unknown,
                ...(rows[0].marks ? { marks: rows[0].marks as Record<string, number> } : {}),
              }),
          });
          break;
        case 'read':
          barrier();
          steps.push({
            text: READ,
            values: [op.q, op.from, op.limit],
            done: (rows) =>
              void (c.result = rows.map((r): StoredQueueMessage => ({ id: r.id as number, deliveries: r.deliveries as number, data: r.data as Buffer }))),
          });
          break;
        case 'purge':
          barrier();
          steps.push({ text: PURGE, values: [op.q], done: (rows) => void (c.result = rows.length > 0 ? (rows[0].old as number) : 0) });
          break;
        case 'drop':
          barrier();
          steps.push({ text: DROP, values: [op.q] });
          break;
        case 'dropPrefix':
          barrier();
          steps.push({ text: DROP_PREFIX, values: [op.q], done: (rows) => void (c.result = rows.length) });
          break;
      }
    }
    barrier();
    try {
      // A fence check runs in the transaction of the writes it guards (at least two statements then).
      if (steps.length === 1) {
        // One statement is its own transaction: no BEGIN / COMMIT round trips.
        const r = await this.db.query('queue store', steps[0].text, steps[0].values);
        steps[0].done?.(r.rows);
      } else if (steps.length > 1) {
        await this.db.transaction('queue store', async (client) => {
          for (const s of steps) {
            const r = await client.query<pg.QueryResultRow>(s.text, s.values);
            s.done?.(r.rows);
          }
        });
      }
      this.stats.commits++;
      this.stats.statements += steps.length;
      for (const c of group) c.resolve(c.result);
    } catch (err) {
      this.stats.failedGroups++;
      const e =
        err instanceof FlowError ? err : new FlowError('STORAGE_ERROR', `queue store: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      if (e.code === 'FENCED') {
        this.stats.fenced++;
        // Only the fenced queue's calls fail: the transaction changed nothing, the others' run again without them.
        const q = [...fenced.keys()].find((name) => e.message.includes(`queue ${name} `));
        if (q !== undefined) {
          const rest: Call[] = [];
          for (const c of group) {
            if (c.op.q === q) c.reject(e);
            else rest.push(c);
          }
          if (rest.length > 0) await this.runGroup(rest);
          return;
        }
      }
      for (const c of group) c.reject(e);
    }
  }

  protected callAppend(queue: string, ids: number[], bodies: Buffer[], mark?: QueueMark): Promise<void> {
    return this.call(mark === undefined ? { k: 'append', q: queue, ids, bodies } : { k: 'append', q: queue, ids, bodies, mark });
  }

  /** Finishes the calls already made, then closes the pool. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.waiting.size > 0 || this.running) {
      const idle = new Promise<void>((resolve) => this.idleWaiters.push(resolve));
      this.kick();
      await idle;
    }
    await this.db.end();
  }
}
