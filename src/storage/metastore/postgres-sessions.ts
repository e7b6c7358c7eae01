/**
 * Sessions and their message queues (SessionStore), retained messages (RetainedStore) in the PostgreSQL metastore:
 * functions over its PostgresState (postgres-state.ts).
 */
import { FlowError } from '../../core/index.js';
import type { QueueChanges, QueuedEntry, RetainedEntry, SessionRecord } from '../../core/index.js';
import { checkInt, toSession, type SessionRow } from './rows.js';
import { CLIENT, TOPIC, type PostgresState } from './postgres-state.js';

/**
 * A session write fenced by the session's owner epoch (cluster mode): the writes as data-modifying CTEs (`ctes`,
 * "name AS (...)" each) and the owner check (`flowmq_owner_check`, src/cluster/pg-store.ts: FENCED unless the
 * 'session' row of $1 holds the epoch in `$<epochParam>`) as the statement's own result, so all run in one statement,
 * one transaction: a refused check rolls the writes back. Whichever runs first, the check's FOR SHARE lock either
 * makes a concurrent claim wait for these writes to commit (the new owner then loads them) or, the claim committed,
 * sees the new epoch and refuses.
 */
function sessionFenced(ctes: string[], epochParam: number): string {
  return `WITH ${ctes.join(',\n     ')}\n SELECT flowmq_owner_check('session', $1, $${epochParam})`;
}

export async function getSession(pg: PostgresState, clientId: string): Promise<SessionRecord | null> {
  return pg.keyed(CLIENT, clientId, async () => {
    const r = await pg.q<SessionRow & Record<string, unknown>>(
      'getSession',
      'SELECT c.*, m.marks FROM client_sessions c LEFT JOIN session_marks m ON m.client_id = c.client_id WHERE c.client_id = $1',
      [clientId],
    );
    return r.rows.length > 0 ? toSession(r.rows[0]) : null;
  });
}

export async function putSession(pg: PostgresState, rec: SessionRecord, fence?: number): Promise<void> {
  if (typeof rec.clientId !== 'string') throw new FlowError('INVALID_ARGUMENT', 'session client id must be a string');
  if (rec.expiresAt !== null) checkInt('expiresAt', rec.expiresAt);
  checkInt('updatedAt', rec.updatedAt);
  if (fence !== undefined) checkInt('fence', fence, 1);
  const upsert = `INSERT INTO client_sessions (client_id, protocol, state, expires_at, updated_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (client_id) DO UPDATE SET protocol = excluded.protocol, state = excluded.state,
         expires_at = excluded.expires_at, updated_at = excluded.updated_at`;
  const values: unknown[] = [rec.clientId, rec.protocol, rec.state, rec.expiresAt, rec.updatedAt];
  await pg.keyed(CLIENT, rec.clientId, () =>
    fence === undefined ? pg.q('putSession', upsert, values) : pg.q('putSession', sessionFenced([`w AS (${upsert})`], 6), [...values, fence]),
  );
}

export async function deleteSession(pg: PostgresState, clientId: string, fence?: number): Promise<void> {
  if (fence !== undefined) checkInt('fence', fence, 1);
  // The record, its queue and its queue counter in one statement (data-modifying CTEs share one transaction).
  const q = 'q AS (DELETE FROM session_queue WHERE client_id = $1)';
  const m = 'm AS (DELETE FROM session_queue_meta WHERE client_id = $1)';
  const k = 'k AS (DELETE FROM session_marks WHERE client_id = $1)';
  const c = 'DELETE FROM client_sessions WHERE client_id = $1';
  await pg.keyed(CLIENT, clientId, () =>
    fence === undefined
      ? pg.q('deleteSession', `WITH ${q}, ${m}, ${k} ${c}`, [clientId])
      : pg.q('deleteSession', sessionFenced([q, m, k, `c AS (${c})`], 2), [clientId, fence]),
  );
}

export async function listSessions(pg: PostgresState, protocol: string): Promise<SessionRecord[]> {
  return pg.afterAll(CLIENT, async () => {
    const r = await pg.q<SessionRow & Record<string, unknown>>(
      'listSessions',
      'SELECT c.*, m.marks FROM client_sessions c LEFT JOIN session_marks m ON m.client_id = c.client_id WHERE c.protocol = $1 ORDER BY c.client_id',
      [protocol],
    );
    return r.rows.map(toSession);
  });
}

export async function readQueue(pg: PostgresState, clientId: string, limit: number): Promise<QueuedEntry[]> {
  checkInt('limit', limit);
  return pg.keyed(CLIENT, clientId, async () => {
    const r = await pg.q<{ seq: number; data: Buffer }>('readQueue', 'SELECT seq, data FROM session_queue WHERE client_id = $1 ORDER BY seq LIMIT $2', [
      clientId,
      limit,
    ]);
    return r.rows.map((x) => ({ seq: x.seq, data: x.data }));
  });
}

export async function ackQueue(pg: PostgresState, clientId: string, upTo: number, fence?: number): Promise<void> {
  if (fence !== undefined) checkInt('fence', fence, 1);
  const d = 'd AS (DELETE FROM session_queue WHERE client_id = $1 AND seq <= $2 RETURNING 1)';
  const u = 'UPDATE session_queue_meta SET length = length - (SELECT count(*) FROM d) WHERE client_id = $1';
  await pg.keyed(CLIENT, clientId, () =>
    fence === undefined
      ? pg.q('ackQueue', `WITH ${d} ${u}`, [clientId, upTo])
      : pg.q('ackQueue', sessionFenced([d, `u AS (${u})`], 3), [clientId, upTo, fence]),
  );
}

export async function updateQueue(
  pg: PostgresState,
  clientId: string,
  changes: QueueChanges,
  maxLength: number,
  fence?: number,
): Promise<{ seqs: number[]; dropped: number }> {
  checkInt('maxLength', maxLength, 1);
  if (fence !== undefined) checkInt('fence', fence, 1);
  const replace = changes.replace ?? [];
  const remove = changes.remove ?? [];
  const append = changes.append ?? [];
  const values: unknown[] = [clientId, replace.map((e) => e.seq), replace.map((e) => e.data), remove, append, maxLength];
  // Publish keys of the appended messages: merged into the session's marks by the same statement (one transaction).
  const marks = changes.marks;
  const mk =
    marks === undefined
      ? ''
      : `WITH mk AS (INSERT INTO session_marks AS s (client_id, marks) VALUES ($1, $${fence === undefined ? 7 : 8}::jsonb)
           ON CONFLICT (client_id) DO UPDATE SET marks = s.marks || excluded.marks) `;
  const params = fence === undefined ? values : [...values, fence];
  return pg.keyed(CLIENT, clientId, async () => {
    const r = await pg.q<{ first_seq: number | null; dropped: number }>(
      // A named statement per text (a connection keeps each name's plan).
      marks === undefined ? 'updateQueue' : 'updateQueueMarks',
      mk +
        (fence === undefined
          ? 'SELECT first_seq, dropped FROM flowmq_queue_update($1, $2::bigint[], $3::bytea[], $4::bigint[], $5::bytea[], $6)'
          : // The function yields one row, so the check in the select list runs exactly once, in the same statement.
            `SELECT first_seq, dropped, flowmq_owner_check('session', $1, $7) FROM flowmq_queue_update($1, $2::bigint[], $3::bytea[], $4::bigint[], $5::bytea[], $6)`),
      marks === undefined ? params : [...params, JSON.stringify(marks)],
    );
    const { first_seq: first, dropped } = r.rows[0];
    const seqs = first === null ? [] : append.map((_, i) => first + i);
    return { seqs, dropped };
  });
}

// ---------------------------------------------------------------- retained messages (RetainedStore)

export async function putRetained(pg: PostgresState, topic: string, data: Buffer): Promise<void> {
  await pg.keyed(TOPIC, topic, () =>
    pg.q(
      'putRetained',
      `INSERT INTO retained_messages (topic, data, updated_at) VALUES ($1, $2, $3)
       ON CONFLICT (topic) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
      [topic, data, Date.now()],
    ),
  );
}

export async function deleteRetained(pg: PostgresState, topic: string): Promise<void> {
  await pg.keyed(TOPIC, topic, () => pg.q('deleteRetained', 'DELETE FROM retained_messages WHERE topic = $1', [topic]));
}

export async function listRetained(pg: PostgresState): Promise<RetainedEntry[]> {
  return pg.afterAll(TOPIC, async () => {
    const r = await pg.q<{ topic: string; data: Buffer }>('listRetained', 'SELECT topic, data FROM retained_messages ORDER BY topic');
    return r.rows.map((x) => ({ topic: x.topic, data: x.data }));
  });
}
