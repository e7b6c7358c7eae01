/**
 * The queue catalog (queues, exchanges, bindings: QueueCatalog) and the control plane documents (ControlStore) in
 * the SQLite metastore: functions over its SqliteState (sqlite-state.ts).
 */
import type { BindingDef, ExchangeDef, QueueDef } from '../../core/index.js';
import {
  bindingValues,
  checkExchangeDef,
  checkQueueDef,
  toBindingDef,
  toExchangeDef,
  toJson,
  toQueueDef,
  type BindingDefRow,
  type ExchangeDefRow,
  type QueueDefRow,
} from './rows.js';
import { checkControl, type ControlKind, type ControlRecord } from './control-store.js';
import type { SqliteState } from './sqlite-state.js';

interface ControlRow {
  kind: ControlKind;
  name: string;
  data: string;
  updated_at: number;
}

function toControl(r: ControlRow): ControlRecord {
  return { kind: r.kind, name: r.name, data: JSON.parse(r.data) as Record<string, unknown>, updatedAt: r.updated_at };
}

// ---------------------------------------------------------------- queue catalog (QueueCatalog)

export async function putQueue(m: SqliteState, def: QueueDef): Promise<void> {
  checkQueueDef(def);
  await m.write('putQueue', () =>
    m.s.queueDefPut.run(
      def.name,
      def.durable ? 1 : 0,
      def.exclusiveOwner,
      def.autoDelete ? 1 : 0,
      toJson(def.arguments),
      toJson(def.rawArguments),
      def.createdAt,
    ),
  );
}

export async function deleteQueue(m: SqliteState, name: string): Promise<void> {
  // The bindings to it go in the same transaction: a restart never finds a binding to a queue that is gone.
  await m.write('deleteQueue', () =>
    m.db.transaction(() => {
      m.s.bindingsDeleteTo.run('queue', name);
      m.s.queueDefDelete.run(name);
    })(),
  );
}

export async function listQueues(m: SqliteState): Promise<QueueDef[]> {
  return m.run('listQueues', () => (m.s.queueDefList.all() as QueueDefRow[]).map(toQueueDef));
}

export async function putExchange(m: SqliteState, def: ExchangeDef): Promise<void> {
  checkExchangeDef(def);
  await m.write('putExchange', () =>
    m.s.exchangeDefPut.run(
      def.name,
      def.type,
      def.durable ? 1 : 0,
      def.autoDelete ? 1 : 0,
      def.internal ? 1 : 0,
      def.alternateExchange ?? null,
      toJson(def.rawArguments),
      def.createdAt,
    ),
  );
}

export async function deleteExchange(m: SqliteState, name: string): Promise<void> {
  await m.write('deleteExchange', () =>
    m.db.transaction(() => {
      m.s.bindingsDeleteFrom.run(name);
      m.s.bindingsDeleteTo.run('exchange', name);
      m.s.exchangeDefDelete.run(name);
    })(),
  );
}

export async function listExchanges(m: SqliteState): Promise<ExchangeDef[]> {
  return m.run('listExchanges', () => (m.s.exchangeDefList.all() as ExchangeDefRow[]).map(toExchangeDef));
}

export async function putBinding(m: SqliteState, b: BindingDef): Promise<void> {
  const values = bindingValues(b);
  await m.write('putBinding', () => m.s.bindingPut.run(...values));
}

export async function deleteBinding(m: SqliteState, b: BindingDef): Promise<void> {
  const [key] = bindingValues(b);
  await m.write('deleteBinding', () => m.s.bindingDelete.run(key));
}

export async function listBindings(m: SqliteState): Promise<BindingDef[]> {
  return m.run('listBindings', () => (m.s.bindingList.all() as BindingDefRow[]).map(toBindingDef));
}

// ---------------------------------------------------------------- control plane documents (ControlStore)

export async function listControl(m: SqliteState, kind: ControlKind): Promise<ControlRecord[]> {
  checkControl(kind, '-');
  return m.run('listControl', () => (m.s.controlList.all(kind) as ControlRow[]).map(toControl));
}

export async function getControl(m: SqliteState, kind: ControlKind, name: string): Promise<ControlRecord | null> {
  checkControl(kind, name);
  const row = m.run('getControl', () => m.s.controlGet.get(kind, name) as ControlRow | undefined);
  return row ? toControl(row) : null;
}

export async function putControl(m: SqliteState, kind: ControlKind, name: string, data: Record<string, unknown>): Promise<void> {
  const json = checkControl(kind, name, data);
  await m.write('putControl', () => m.txControl('put', kind, name, json));
}

export async function putControlIfAbsent(m: SqliteState, kind: ControlKind, name: string, data: Record<string, unknown>): Promise<boolean> {
  const json = checkControl(kind, name, data);
  // INSERT ... ON CONFLICT DO NOTHING decides under SQLite's write lock: two processes seeding one name cannot
  // both create it.
  return m.write('putControlIfAbsent', () => m.txControl('insert', kind, name, json));
}

export async function deleteControl(m: SqliteState, kind: ControlKind, name: string): Promise<boolean> {
  checkControl(kind, name);
  return m.write('deleteControl', () => m.txControl('delete', kind, name, ''));
}

export async function controlVersion(m: SqliteState): Promise<number> {
  return m.run('controlVersion', () => (m.s.controlVersion.get() as { version: number }).version);
}
