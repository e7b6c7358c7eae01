/**
 * The worker thread of SqliteQueueStore: owns the queue database (its own SQLite file, `queues.db`) and runs the
 * batches the main thread sends, so that SQL and above all the fsync of every commit never run on the broker's
 * event loop.
 *
 * Group commit: every batch that has arrived while the previous transaction was committing is taken at once
 * (receiveMessageOnPort) and its calls queued by queue (fair-groups.ts); each transaction runs one fair group of them
 * (deficit round robin over the queues with calls waiting), so under load one fsync covers the calls of many ticks,
 * and a queue's calls never wait behind more than one quantum of each other queue's (issue 24: one publisher
 * flooding a queue made another client's confirms wait behind its whole backlog). Calls of one queue keep their order.
 * synchronous=FULL: each COMMIT fsyncs the -wal file before it returns, so a reply means the change survives a
 * power loss, not only a crash of the process (what RabbitMQ's publisher confirms promise).
 *
 * Layout: `queues` holds one row per queue with its counters (count, bytes, max_id), updated once per batch in
 * the same transaction as the messages, so openQueue and the length limits never count rows; `messages` is a
 * rowid table keyed (qkey, id) by its primary-key index, the bodies in the table's leaves: an append, a removal
 * or a lookup is O(log n) in the number of stored messages, and a read is an index range scan. (A WITHOUT ROWID
 * table would save the index but keeps whole rows, bodies included, in its interior pages: SQLite advises it only
 * for rows under ~1/20 of a page, and queue messages are usually larger.)
 */
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { isNoSpace } from '../fs-util.js';
import { migrate } from '../metastore/sqlite-migrate.js';
import type { Migration } from '../metastore/migrations.js';
import { FairGroups } from './fair-groups.js';
import type { OpError, OpResult, ReadResult, WorkerBatch, WorkerInit, WorkerOp, WorkerReply, WorkerRequest } from './protocol.js';

/** Schema of the queue database; same rules as the metastore's list (append only, versions from 1). */
export const queueMigrations: readonly Migration[] = [
  {
    version: 1,
    name: 'queue messages and counters',
    sql: `
      -- One row per queue: the counters kept in step with its messages (no COUNT(*) to open or bound a queue).
      CREATE TABLE queues (
        qkey   INTEGER PRIMARY KEY,
        name   TEXT    NOT NULL UNIQUE,
        count  INTEGER NOT NULL,
        bytes  INTEGER NOT NULL,
        max_id INTEGER NOT NULL
      ) STRICT;

      CREATE TABLE messages (
        qkey       INTEGER NOT NULL,
        id         INTEGER NOT NULL,
        deliveries INTEGER NOT NULL,
        size       INTEGER NOT NULL,
        data       BLOB    NOT NULL,
        PRIMARY KEY (qkey, id)
      ) STRICT;
    `,
  },
];

interface QState {
  qkey: number;
  count: number;
  bytes: number;
  maxId: number;
  dirty: boolean;
}

const port = parentPort!;
const { file } = workerData as WorkerInit;

function errorCode(err: unknown): 'STORAGE_ERROR' | 'STORAGE_FULL' {
  const code = err instanceof Error && 'code' in err ? (err as { code: unknown }).code : undefined;
  return code === 'SQLITE_FULL' || isNoSpace(err) ? 'STORAGE_FULL' : 'STORAGE_ERROR';
}

let db: Database.Database;
try {
  db = new Database(file);
  db.pragma('journal_mode = WAL');
  // Every commit fsyncs the -wal file: a resolved call survives a power loss (see the top of this file).
  db.pragma('synchronous = FULL');
  db.pragma('busy_timeout = 5000');
  migrate(db, queueMigrations);
} catch (err) {
  port.postMessage({
    seq: -1,
    ok: false,
    code: errorCode(err),
    message: `cannot open queue store ${file}: ${err instanceof Error ? err.message : String(err)}`,
  } satisfies WorkerReply);
  process.exit(1);
}

const s = {
  getQueue: db.prepare('SELECT qkey, count, bytes, max_id FROM queues WHERE name = ?'),
  insertQueue: db.prepare('INSERT INTO queues (name, count, bytes, max_id) VALUES (?, 0, 0, 0) RETURNING qkey'),
  putCounters: db.prepare('UPDATE queues SET count = ?, bytes = ?, max_id = ? WHERE qkey = ?'),
  deleteQueue: db.prepare('DELETE FROM queues WHERE qkey = ?'),
  // An id already present is left alone: a retried append whose first attempt committed (its reply lost).
  insert: db.prepare('INSERT INTO messages (qkey, id, deliveries, size, data) VALUES (?, ?, 0, ?, ?) ON CONFLICT DO NOTHING'),
  remove: db.prepare('DELETE FROM messages WHERE qkey = ? AND id = ? RETURNING size'),
  deliveries: db.prepare('UPDATE messages SET deliveries = ? WHERE qkey = ? AND id = ?'),
  read: db.prepare('SELECT id, deliveries, data FROM messages WHERE qkey = ? AND id >= ? ORDER BY id LIMIT ?'),
  clear: db.prepare('DELETE FROM messages WHERE qkey = ?'),
  // A scan of the queues table (one row per queue), not of the messages.
  withPrefix: db.prepare('SELECT qkey, name FROM queues WHERE substr(name, 1, length(?)) = ?'),
};

/** Queue states read so far; counters changed by a batch are written once at its end. Dropped on a rollback. */
const cache = new Map<string, QState>();
let commits = 0;

function state(name: string, create: boolean): QState | null {
  let st = cache.get(name);
  if (st) return st;
  const row = s.getQueue.get(name) as { qkey: number; count: number; bytes: number; max_id: number } | undefined;
  if (row) st = { qkey: row.qkey, count: row.count, bytes: row.bytes, maxId: row.max_id, dirty: false };
  else if (create) st = { qkey: (s.insertQueue.get(name) as { qkey: number }).qkey, count: 0, bytes: 0, maxId: 0, dirty: false };
  else return null;
  cache.set(name, st);
  return st;
}

/** Runs one op inside the batch transaction; read rows' bodies are pushed to `out`. */
function runOp(op: WorkerOp, buf: ArrayBuffer | null, out: Buffer[], outBytes: { n: number }): OpResult | OpError {
  switch (op.k) {
    case 'open': {
      const st = state(op.q, true)!;
      return { count: st.count, bytes: st.bytes, maxId: st.maxId };
    }
    case 'append': {
      const st = state(op.q, true)!;
      for (let i = 0; i < op.ids.length; i++) {
        const id = op.ids[i];
        const len = op.ranges[2 * i + 1];
        const data = Buffer.from(buf!, op.ranges[2 * i], len);
        if (s.insert.run(st.qkey, id, len, data).changes > 0) {
          st.count++;
          st.bytes += len;
        }
        if (id > st.maxId) st.maxId = id;
      }
      if (op.maxId !== undefined && op.maxId > st.maxId) st.maxId = op.maxId;
      st.dirty = true;
      return null;
    }
    case 'remove': {
      const st = state(op.q, false);
      if (!st) return null;
      for (const id of op.ids) {
        const row = s.remove.get(st.qkey, id) as { size: number } | undefined;
        if (row) {
          st.count--;
          st.bytes -= row.size;
          st.dirty = true;
        }
      }
      return null;
    }
    case 'deliveries': {
      const st = state(op.q, false);
      if (st) s.deliveries.run(op.n, st.qkey, op.id);
      return null;
    }
    case 'read': {
      const st = state(op.q, false);
      const r: ReadResult = { ids: [], deliveries: [], ranges: [] };
      if (!st || op.limit <= 0) return r;
      for (const row of s.read.iterate(st.qkey, op.from, op.limit) as IterableIterator<{ id: number; deliveries: number; data: Buffer }>) {
        r.ids.push(row.id);
        r.deliveries.push(row.deliveries);
        r.ranges.push(outBytes.n, row.data.length);
        out.push(row.data);
        outBytes.n += row.data.length;
      }
      return r;
    }
    case 'purge': {
      const st = state(op.q, false);
      if (!st) return 0;
      const n = st.count;
      if (n > 0) s.clear.run(st.qkey);
      st.count = 0;
      st.bytes = 0;
      st.dirty = true;
      return n;
    }
    case 'drop': {
      const st = state(op.q, false);
      if (!st) return null;
      s.clear.run(st.qkey);
      s.deleteQueue.run(st.qkey);
      cache.delete(op.q);
      return null;
    }
    case 'dropPrefix': {
      const rows = s.withPrefix.all(op.q, op.q) as Array<{ qkey: number; name: string }>;
      for (const r of rows) {
        s.clear.run(r.qkey);
        s.deleteQueue.run(r.qkey);
        cache.delete(r.name);
      }
      return rows.length;
    }
    case 'crash':
      process.exit(70);
  }
}

/** Copies read bodies into one fresh ArrayBuffer (never a pooled one: it is transferred). */
function pack(parts: Buffer[], total: number): ArrayBuffer | null {
  if (parts.length === 0) return null;
  const ab = new ArrayBuffer(total);
  const u8 = new Uint8Array(ab);
  let off = 0;
  for (const p of parts) {
    u8.set(p, off);
    off += p.length;
  }
  return ab;
}

/** One call waiting for its group: where it came from (batch and index, for the reply) and its batch's bodies. */
interface Pending {
  seq: number;
  idx: number;
  op: WorkerOp;
  buf: ArrayBuffer | null;
}

/**
 * What a queue may put in a group while a light queue waits, and what a group without light queues holds at most,
 * in cost units (body bytes plus PER_CALL per message or call). 64 KiB: a light queue's calls wait behind about
 * 64 KiB of each busy queue; 512 KiB keeps a lone publisher's groups as large as its connection's credit lets them be.
 */
const QUANTUM = Number(process.env.FLOWMQ_FAIR_QUANTUM) || 64 * 1024;
const GROUP_LIMIT = Number(process.env.FLOWMQ_FAIR_GROUP) || 512 * 1024;
/** How long groups stay small after a light queue waited beside a busy one (its publisher's next calls come soon). */
const HOLD_MS = Number(process.env.FLOWMQ_FAIR_HOLD ?? 100);
const PER_CALL = 64;

const waiting = new FairGroups<Pending>(QUANTUM, GROUP_LIMIT, HOLD_MS);

function cost(op: WorkerOp): number {
  if (op.k === 'append') {
    let c = 0;
    for (let i = 1; i < op.ranges.length; i += 2) c += op.ranges[i]! + PER_CALL;
    return c;
  }
  if (op.k === 'remove') return PER_CALL + 16 * op.ids.length;
  return PER_CALL;
}

/** Messages removed before their append was written, so neither was (since the worker started). */
let elided = 0;

/**
 * A removal of messages whose append still waits for its group (a consumer acked them before their write was due,
 * which happens under load: the core delivers a message before its append is durable, as RabbitMQ does) takes them
 * out of that append: neither is written, as RabbitMQ's message store skips writing a persistent message acked
 * before its write. Both calls still resolve with their group (the publisher's confirm waits for it, as before). The
 * ids left are those of messages written, or of appends already in a group.
 */
function elide(remove: Extract<WorkerOp, { k: 'remove' }>): void {
  // Only appends after the lane's last open / read / purge / drop: a read made before the removal must see the message.
  let barriers = 0;
  waiting.forWaiting(remove.q, (p) => {
    if (isBarrier(p.op)) barriers++;
    return 0;
  });
  let seen = 0;
  const gone = new Set(remove.ids);
  waiting.forWaiting(remove.q, (p) => {
    const op = p.op;
    if (isBarrier(op)) seen++;
    if (seen < barriers || op.k !== 'append' || gone.size === 0) return 0;
    let less = 0;
    let w = 0;
    for (let i = 0; i < op.ids.length; i++) {
      const id = op.ids[i]!;
      const len = op.ranges[2 * i + 1]!;
      if (gone.delete(id)) {
        less += len + PER_CALL;
        if (op.maxId === undefined || id > op.maxId) op.maxId = id;
        elided++;
        continue;
      }
      op.ids[w] = id;
      op.ranges[2 * w] = op.ranges[2 * i]!;
      op.ranges[2 * w + 1] = len;
      w++;
    }
    op.ids.length = w;
    op.ranges.length = 2 * w;
    return less;
  });
  if (gone.size < remove.ids.length) remove.ids = remove.ids.filter((id) => gone.has(id));
}

function isBarrier(op: WorkerOp): boolean {
  return op.k === 'open' || op.k === 'read' || op.k === 'purge' || op.k === 'drop' || op.k === 'dropPrefix';
}

function enqueue(b: WorkerBatch): void {
  for (let i = 0; i < b.ops.length; i++) {
    const op = b.ops[i]!;
    if (op.k === 'remove') elide(op);
    waiting.push(op.k === 'crash' ? '' : op.q, { seq: b.seq, idx: i, op, buf: b.buf }, cost(op));
  }
}

const runGroup = db.transaction((group: Pending[]) => {
  const parts: Buffer[] = [];
  const outBytes = { n: 0 };
  const results = group.map((p) => runOp(p.op, p.buf, parts, outBytes));
  for (const st of cache.values()) {
    if (st.dirty) {
      s.putCounters.run(st.count, st.bytes, st.maxId, st.qkey);
      st.dirty = false;
    }
  }
  return { results, parts, bytes: outBytes.n };
});

function closeAndExit(): void {
  db.close();
  port.close();
}

/** Queues the batches that arrived meanwhile; true when the main thread asked to close. */
function receiveAll(): boolean {
  for (;;) {
    const more = receiveMessageOnPort(port);
    if (!more) return false;
    const m = more.message as WorkerRequest;
    if ('close' in m) return true;
    enqueue(m);
  }
}

port.on('message', (first: WorkerRequest) => {
  if ('close' in first) return closeAndExit();
  enqueue(first);
  // Everything that queued up while the previous commit was running is queued too; then groups until none waits.
  let closing = receiveAll();
  while (waiting.size > 0) {
    const group = waiting.next();
    const done: number[] = [];
    for (const p of group) done.push(p.seq, p.idx);
    try {
      const r = runGroup(group);
      commits++;
      const buf = pack(r.parts, r.bytes);
      port.postMessage({ seq: 0, ok: true, done, results: r.results, buf, commits, elided } satisfies WorkerReply, buf ? [buf] : []);
    } catch (err) {
      cache.clear();
      const message = err instanceof Error ? err.message : String(err);
      port.postMessage({ seq: 0, ok: false, done, code: errorCode(err), message } satisfies WorkerReply);
    }
    if (receiveAll()) closing = true;
  }
  if (closing) closeAndExit();
});

port.postMessage({ seq: -1, ok: true } satisfies WorkerReply);
