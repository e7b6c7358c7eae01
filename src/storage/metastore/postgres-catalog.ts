/**
 * The queue catalog (queues, exchanges, bindings: QueueCatalog) and the control plane documents (ControlStore) in
 * the PostgreSQL metastore: functions over its PostgresState (postgres-state.ts).
 */
import { FlowError, type BindingDef, type ExchangeDef, type QueueDef } from '../../core/index.js';
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
import { bumpsVersion, checkControl, type ControlFence, type ControlKind, type ControlRecord } from './control-store.js';
import { CATALOG, CONTROL, type PostgresState } from './postgres-state.js';

interface ControlRow extends Record<string, unknown> {
  kind: ControlKind;
  name: string;
  data: string;
  updated_at: number;
}

function toControl(r: ControlRow): ControlRecord {
  return { kind: r.kind, name: r.name, data: JSON.parse(r.data) as Record<string, unknown>, updatedAt: Number(r.updated_at) };
}

// ---------------------------------------------------------------- queue catalog (QueueCatalog)

export async function putQueue(pg: PostgresState, def: QueueDef): Promise<void> {
  checkQueueDef(def);
  await pg.keyed(CATALOG, '', () =>
    pg.q(
      'putQueue',
      `INSERT INTO queue_defs (name, durable, exclusive_owner, auto_delete, arguments, raw_arguments, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (name) DO UPDATE SET durable = excluded.durable, exclusive_owner = excluded.exclusive_owner,
         auto_delete = excluded.auto_delete, arguments = excluded.arguments, raw_arguments = excluded.raw_arguments,
         created_at = excluded.created_at`,
      [def.name, def.durable, def.exclusiveOwner, def.autoDelete, toJson(def.arguments), toJson(def.rawArguments), def.createdAt],
    ),
  );
}

export async function deleteQueue(pg: PostgresState, name: string): Promise<void> {
  // With the bindings to it, in one statement.
  await pg.keyed(CATALOG, '', () =>
    pg.q(
      'deleteQueue',
      `WITH b AS (DELETE FROM binding_defs WHERE destination_kind = 'queue' AND destination = $1)
       DELETE FROM queue_defs WHERE name = $1`,
      [name],
    ),
  );
}

export async function listQueues(pg: PostgresState): Promise<QueueDef[]> {
  return pg.keyed(CATALOG, '', async () => {
    const r = await pg.q<QueueDefRow & Record<string, unknown>>('listQueues', 'SELECT * FROM queue_defs ORDER BY name');
    return r.rows.map(toQueueDef);
  });
}

export async function putExchange(pg: PostgresState, def: ExchangeDef): Promise<void> {
  checkExchangeDef(def);
  await pg.keyed(CATALOG, '', () =>
    pg.q(
      'putExchange',
      `INSERT INTO exchange_defs (name, type, durable, auto_delete, internal, alternate_exchange, raw_arguments, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
       ON CONFLICT (name) DO UPDATE SET type = excluded.type, durable = excluded.durable, auto_delete = excluded.auto_delete,
         internal = excluded.internal, alternate_exchange = excluded.alternate_exchange,
         raw_arguments = excluded.raw_arguments, created_at = excluded.created_at`,
      [def.name, def.type, def.durable, def.autoDelete, def.internal, def.alternateExchange ?? null, toJson(def.rawArguments), def.createdAt],
    ),
  );
}

export async function deleteExchange(pg: PostgresState, name: string): Promise<void> {
  await pg.keyed(CATALOG, '', () =>
    pg.q(
      'deleteExchange',
      `WITH b AS (DELETE FROM binding_defs WHERE source = $1 OR (destination_kind = 'exchange' AND destination = $1))
       DELETE FROM exchange_defs WHERE name = $1`,
      [name],
    ),
  );
}

export async function listExchanges(pg: PostgresState): Promise<ExchangeDef[]> {
  return pg.keyed(CATALOG, '', async () => {
    const r = await pg.q<ExchangeDefRow & Record<string, unknown>>('listExchanges', 'SELECT * FROM exchange_defs ORDER BY name');
    return r.rows.map(toExchangeDef);
  });
}

export async function putBinding(pg: PostgresState, b: BindingDef): Promise<void> {
  const values = bindingValues(b);
  await pg.keyed(CATALOG, '', () =>
    pg.q(
      'putBinding',
      `INSERT INTO binding_defs (binding_key, source, destination_kind, destination, key, rule, arguments)
       VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (binding_key) DO UPDATE SET rule = excluded.rule, arguments = excluded.arguments`,
      values,
    ),
  );
}

export async function deleteBinding(pg: PostgresState, b: BindingDef): Promise<void> {
  const [key] = bindingValues(b);
  await pg.keyed(CATALOG, '', () => pg.q('deleteBinding', 'DELETE FROM binding_defs WHERE binding_key = $1', [key]));
}

export async function listBindings(pg: PostgresState): Promise<BindingDef[]> {
  return pg.keyed(CATALOG, '', async () => {
    const r = await pg.q<BindingDefRow & Record<string, unknown>>(
      'listBindings',
      'SELECT * FROM binding_defs ORDER BY source, destination_kind, destination, key, binding_key',
    );
    return r.rows.map(toBindingDef);
  });
}

// ---------------------------------------------------------------- control plane documents (ControlStore)

export async function listControl(pg: PostgresState, kind: ControlKind): Promise<ControlRecord[]> {
  checkControl(kind, '-');
  return pg.afterAll(CONTROL, async () => {
    const r = await pg.q<ControlRow>('listControl', 'SELECT kind, name, data, updated_at FROM control_docs WHERE kind = $1 ORDER BY name', [kind]);
    return r.rows.map(toControl);
  });
}

export async function getControl(pg: PostgresState, kind: ControlKind, name: string): Promise<ControlRecord | null> {
  checkControl(kind, name);
  return pg.keyed(CONTROL, `${kind}\u0000${name}`, async () => {
    const r = await pg.q<ControlRow>('getControl', 'SELECT kind, name, data, updated_at FROM control_docs WHERE kind = $1 AND name = $2', [kind, name]);
    return r.rows.length > 0 ? toControl(r.rows[0]) : null;
  });
}

// Each change is one statement: the document's change and, in a data-modifying CTE of the same statement (so the
// same transaction), the version bump that other brokers poll. The bump happens only when a row changed.

/** The owner row a fenced write checks (a number: the row of the same kind and name); only the data-path kinds. */
function fencedBy(kind: ControlKind, name: string, fence: number | ControlFence | undefined): ControlFence | null {
  if (fence === undefined) return null;
  if (kind !== 'txn' && kind !== 'txn-aborted') throw new FlowError('INVALID_ARGUMENT', `a ${kind} document is not fenced by an owner row`);
  return typeof fence === 'number' ? { owner: kind, name, epoch: fence } : fence;
}

export async function putControl(
  pg: PostgresState,
  kind: ControlKind,
  name: string,
  data: Record<string, unknown>,
  fence?: number | ControlFence,
): Promise<void> {
  const json = checkControl(kind, name, data);
  if (fence !== undefined && kind !== 'txn' && kind !== 'txn-aborted')
    throw new FlowError('INVALID_ARGUMENT', `a ${kind} document is not fenced by an owner row`);
  const owner = fence === undefined ? null : typeof fence === 'number' ? { owner: kind, name, epoch: fence } : fence;
  await pg.keyed(CONTROL, `${kind}\u0000${name}`, () =>
    owner !== null
      ? // Cluster mode: the owner row (src/cluster/pg-store.ts: the transactional id's, or the partition's for its
        // aborted list) must still hold the writer's epoch; flowmq_owner_check raises FMF01 (FENCED) otherwise, and
        // its row lock makes a claim wait for this write.
        pg.q(
          'putControlFenced',
          `WITH fence AS (SELECT flowmq_owner_check($5, $6, $7))
           INSERT INTO control_docs (kind, name, data, updated_at) SELECT $1, $2, $3, $4 FROM fence
           ON CONFLICT (kind, name) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
          [kind, name, json, Date.now(), owner.owner, owner.name, owner.epoch],
        )
      : bumpsVersion(kind)
        ? pg.q(
            'putControl',
            `WITH d AS (INSERT INTO control_docs (kind, name, data, updated_at) VALUES ($1, $2, $3, $4)
                      ON CONFLICT (kind, name) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at)
           UPDATE control_version SET version = version + 1 WHERE id = 0`,
            [kind, name, json, Date.now()],
          )
        : pg.q(
            'putControlQuiet',
            `INSERT INTO control_docs (kind, name, data, updated_at) VALUES ($1, $2, $3, $4)
           ON CONFLICT (kind, name) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
            [kind, name, json, Date.now()],
          ),
  );
}

export async function putControlIfAbsent(pg: PostgresState, kind: ControlKind, name: string, data: Record<string, unknown>): Promise<boolean> {
  const json = checkControl(kind, name, data);
  // ON CONFLICT DO NOTHING decides atomically, also against another broker inserting the same name at once.
  return pg.keyed(CONTROL, `${kind}\u0000${name}`, async () => {
    const r = await pg.q<{ n: number }>(
      'putControlIfAbsent',
      `WITH d AS (INSERT INTO control_docs (kind, name, data, updated_at) VALUES ($1, $2, $3, $4)
                  ON CONFLICT (kind, name) DO NOTHING RETURNING 1),
            v AS (UPDATE control_version SET version = version + 1 WHERE id = 0 AND $5::boolean AND EXISTS (SELECT 1 FROM d))
       SELECT count(*)::int AS n FROM d`,
      [kind, name, json, Date.now(), bumpsVersion(kind)],
    );
    return r.rows[0].n > 0;
  });
}

export async function deleteControl(pg: PostgresState, kind: ControlKind, name: string, fence?: number | ControlFence): Promise<boolean> {
  checkControl(kind, name);
  const owner = fencedBy(kind, name, fence);
  return pg.keyed(CONTROL, `${kind}\u0000${name}`, async () => {
    const r =
      owner === null
        ? await pg.q<{ n: number }>(
            'deleteControl',
            `WITH d AS (DELETE FROM control_docs WHERE kind = $1 AND name = $2 RETURNING 1),
            v AS (UPDATE control_version SET version = version + 1 WHERE id = 0 AND $3::boolean AND EXISTS (SELECT 1 FROM d))
       SELECT count(*)::int AS n FROM d`,
            [kind, name, bumpsVersion(kind)],
          )
        : // The fenced kinds do not bump the version. The owner check runs first (it raises FENCED, see putControl).
          await pg.q<{ n: number }>(
            'deleteControlFenced',
            `WITH fence AS (SELECT flowmq_owner_check($3, $4, $5) AS ok),
            d AS (DELETE FROM control_docs WHERE kind = $1 AND name = $2 AND EXISTS (SELECT 1 FROM fence) RETURNING 1)
       SELECT count(*)::int AS n FROM d`,
            [kind, name, owner.owner, owner.name, owner.epoch],
          );
    return r.rows[0].n > 0;
  });
}

export async function controlVersion(pg: PostgresState): Promise<number> {
  return pg.afterAll(CONTROL, async () => {
    const r = await pg.q<{ version: number }>('controlVersion', 'SELECT version FROM control_version WHERE id = 0');
    return Number(r.rows[0].version);
  });
}
