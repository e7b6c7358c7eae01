/**
 * Sessions and their message queues (SessionStore), retained messages (RetainedStore) in the SQLite metastore:
 * functions over its SqliteState (sqlite-state.ts).
 */
import { FlowError } from '../../core/index.js';
import type { QueueChanges, QueuedEntry, RetainedEntry, SessionRecord } from '../../core/index.js';
import { checkInt, toSession, type SessionRow } from './rows.js';
import type { SqliteState } from './sqlite-state.js';

export async function getSession(m: SqliteState, clientId: string): Promise<SessionRecord | null> {
  return m.run('getSession', () => {
    const r = m.s.sessionGet.get(clientId) as SessionRow | undefined;
    return r ? toSession(r) : null;
  });
}

export async function putSession(m: SqliteState, rec: SessionRecord): Promise<void> {
  if (typeof rec.clientId !== 'string') throw new FlowError('INVALID_ARGUMENT', 'session client id must be a string');
  if (rec.expiresAt !== null) checkInt('expiresAt', rec.expiresAt);
  await m.write('putSession', () => m.s.sessionPut.run(rec.clientId, rec.protocol, rec.state, rec.expiresAt, rec.updatedAt));
}

export async function deleteSession(m: SqliteState, clientId: string): Promise<void> {
  await m.write('deleteSession', () => m.txDeleteSession(clientId));
}

export async function listSessions(m: SqliteState, protocol: string): Promise<SessionRecord[]> {
  return m.run('listSessions', () => (m.s.sessionList.all(protocol) as SessionRow[]).map(toSession));
}

export async function readQueue(m: SqliteState, clientId: string, limit: number): Promise<QueuedEntry[]> {
  checkInt('limit', limit);
  return m.run('readQueue', () => m.s.queueRead.all(clientId, limit) as QueuedEntry[]);
}

export async function ackQueue(m: SqliteState, clientId: string, upTo: number): Promise<void> {
  m.committed('ackQueue', () => m.txAckQueue(clientId, upTo));
}

export async function updateQueue(m: SqliteState, clientId: string, changes: QueueChanges, maxLength: number): Promise<{ seqs: number[]; dropped: number }> {
  checkInt('maxLength', maxLength, 1);
  return m.committed('updateQueue', () => m.txUpdateQueue(clientId, changes, maxLength));
}

// ---------------------------------------------------------------- retained messages (RetainedStore)

export async function putRetained(m: SqliteState, topic: string, data: Buffer): Promise<void> {
  await m.write('putRetained', () => m.s.retainedPut.run(topic, data, Date.now()));
}

export async function deleteRetained(m: SqliteState, topic: string): Promise<void> {
  await m.write('deleteRetained', () => m.s.retainedDelete.run(topic));
}

export async function listRetained(m: SqliteState): Promise<RetainedEntry[]> {
  return m.run('listRetained', () => m.s.retainedList.all() as RetainedEntry[]);
}
