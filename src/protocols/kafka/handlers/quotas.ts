/**
 * DescribeClientQuotas and AlterClientQuotas (KIP-546) on FlowMQ's user quotas (RuntimeSettings, enforced by the
 * QuotaManager beside the namespaces' quotas).
 *
 * What FlowMQ enforces, and so accepts: the `user` entity (a user name, or null: the default user, Kafka's
 * `<default>`, which applies to every user without their own and to anonymous clients) with producer_byte_rate and
 * consumer_byte_rate (bytes per second, per user, per broker, as Kafka). Refused per entry with INVALID_REQUEST and a
 * message: client-id and ip entities (FlowMQ has no quota per client id or address), request_percentage and
 * controller_mutation_rate (no request-time or mutation quotas), and whatever Kafka itself refuses (an empty
 * entity, an unknown entity type, an empty name, an ip combined with another type, a key named twice, an entity
 * named twice, a key that is not a quota key of the entity, a value <= 0 or fractional for an integral key).
 *
 * Authorization as Kafka's: describing is `describe cluster:*` (DESCRIBE_CONFIGS on the cluster), altering
 * `alter cluster:*` (ALTER_CONFIGS), else CLUSTER_AUTHORIZATION_FAILED (at the top for Describe, per entry for Alter).
 * validate_only checks everything and changes nothing. Quotas are kept in the metastore: they survive restarts and
 * apply on every broker of a cluster.
 */
import type { QuotaChange, QuotaEntity } from '../../../control/index.js';
import {
  KafkaErrorCode,
  QuotaMatchType,
  type AlterClientQuotasRequest,
  type AlterClientQuotasResponse,
  type DescribeClientQuotasRequest,
  type DescribeClientQuotasResponse,
} from '../codec/index.js';
import type { RequestContext } from '../route.js';
import { kafkaErrorCode } from '../errors.js';
import { allowed } from '../authz.js';

const USER = 'user';
const CLIENT_ID = 'client-id';
const IP = 'ip';
const ENTITY_TYPES = new Set([USER, CLIENT_ID, IP]);

/** Kafka's quota keys of user and client-id entities, with whether they are integral (LONG) and whether FlowMQ enforces them. */
const USER_KEYS: ReadonlyMap<string, { integral: boolean; enforced: boolean }> = new Map([
  ['producer_byte_rate', { integral: true, enforced: true }],
  ['consumer_byte_rate', { integral: true, enforced: true }],
  ['request_percentage', { integral: false, enforced: false }],
  ['controller_mutation_rate', { integral: false, enforced: false }],
]);
/** Long.MAX_VALUE as a double, 2^63: what Kafka compares a quota value (a double) against. */
const LONG_MAX = 2 ** 63;

class QuotaRefusal extends Error {}

// ------------------------------------------------------------------------------------------------ describe

export function handleDescribeClientQuotas(ctx: RequestContext, req: DescribeClientQuotasRequest): DescribeClientQuotasResponse {
  const refuse = (errorCode: number, errorMessage: string): DescribeClientQuotasResponse => ({ throttleTimeMs: 0, errorCode, errorMessage, entries: null });
  if (!allowed(ctx, 'describe', 'cluster', '*')) return refuse(KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, 'not authorized to describe client quotas');
  const exact = new Map<string, string | null>();
  const anyName = new Set<string>();
  for (const c of req.components) {
    if (c.entityType === '') return refuse(KafkaErrorCode.INVALID_REQUEST, 'invalid empty entity type');
    if (exact.has(c.entityType) || anyName.has(c.entityType))
      return refuse(KafkaErrorCode.INVALID_REQUEST, `entity type ${c.entityType} cannot appear more than once in the filter`);
    if (!ENTITY_TYPES.has(c.entityType)) return refuse(KafkaErrorCode.UNSUPPORTED_VERSION, `unsupported entity type ${c.entityType}`);
    if (c.matchType === QuotaMatchType.EXACT) {
      if (c.match === null) return refuse(KafkaErrorCode.INVALID_REQUEST, 'match type EXACT needs a match string');
      exact.set(c.entityType, c.match);
    } else if (c.matchType === QuotaMatchType.DEFAULT) {
      if (c.match !== null) return refuse(KafkaErrorCode.INVALID_REQUEST, 'match type DEFAULT takes no match string');
      exact.set(c.entityType, null);
    } else if (c.matchType === QuotaMatchType.SPECIFIED) {
      if (c.match !== null) return refuse(KafkaErrorCode.INVALID_REQUEST, 'match type SPECIFIED takes no match string');
      anyName.add(c.entityType);
    } else return refuse(KafkaErrorCode.INVALID_REQUEST, `unknown match type ${c.matchType}`);
  }
  const usesIp = exact.has(IP) || anyName.has(IP);
  if (usesIp && (exact.has(USER) || anyName.has(USER) || exact.has(CLIENT_ID) || anyName.has(CLIENT_ID))) {
    return refuse(KafkaErrorCode.INVALID_REQUEST, 'an ip filter component cannot be combined with user or client-id');
  }
  const entries: NonNullable<DescribeClientQuotasResponse['entries']> = [];
  for (const q of ctx.adapter.settings.listQuotas()) {
    const types = Object.keys(q.entity);
    if (req.strict && types.length !== exact.size + anyName.size) continue;
    if ([...exact].some(([t, name]) => !(t in q.entity) || q.entity[t] !== name)) continue;
    if ([...anyName].some((t) => !(t in q.entity))) continue;
    entries.push({
      entity: types.sort().map((t) => ({ entityType: t, entityName: q.entity[t] })),
      values: Object.entries(q.values).map(([key, value]) => ({ key, value })),
    });
  }
  return { throttleTimeMs: 0, errorCode: KafkaErrorCode.NONE, errorMessage: null, entries };
}

// ------------------------------------------------------------------------------------------------ alter

type Entry = AlterClientQuotasRequest['entries'][number];

/** Checks one entry as Kafka does, then refuses what FlowMQ does not enforce; returns the change to make. */
function check(e: Entry): QuotaChange {
  if (e.entity.length === 0) throw new QuotaRefusal('invalid empty client quota entity');
  const entity: Record<string, string | null> = {};
  for (const x of e.entity) {
    if (x.entityType in entity) throw new QuotaRefusal(`invalid client quota entity: entity type ${x.entityType} appears twice`);
    if (!ENTITY_TYPES.has(x.entityType)) throw new QuotaRefusal(`unhandled client quota entity type: ${x.entityType}`);
    if (x.entityName === '') throw new QuotaRefusal(`empty ${x.entityType} not supported`);
    entity[x.entityType] = x.entityName;
  }
  if (IP in entity && (USER in entity || CLIENT_ID in entity))
    throw new QuotaRefusal('invalid quota entity combination: ip is not combined with user or client-id');
  const set: Record<string, number | null> = {};
  for (const op of e.ops) {
    if (op.key in set) throw new QuotaRefusal(`duplicate quota key ${op.key}`);
    set[op.key] = op.remove ? null : op.value;
  }
  // What Kafka would accept, FlowMQ may still not enforce.
  if (IP in entity) {
    for (const k of Object.keys(set)) if (k !== 'connection_creation_rate') throw new QuotaRefusal(`invalid configuration key ${k}`);
    throw new QuotaRefusal('FlowMQ has no quotas per client address (ip entity): use a namespace quota (maxConnections) or a per-user quota');
  }
  for (const [k, v] of Object.entries(set)) {
    const key = USER_KEYS.get(k);
    if (key === undefined) throw new QuotaRefusal(`invalid configuration key ${k}`);
    if (v === null) continue;
    if (!(v > 0)) throw new QuotaRefusal(`quota ${k} must be greater than 0`);
    if (key.integral && (v > LONG_MAX || Math.abs(v % 1) > 1e-6))
      throw new QuotaRefusal(v > LONG_MAX ? `proposed value for ${k} is too large for a LONG` : `${k} cannot be a fractional value`);
  }
  if (CLIENT_ID in entity) throw new QuotaRefusal('FlowMQ enforces quotas per user, not per client id: use the user entity alone');
  for (const k of Object.keys(set)) {
    if (!USER_KEYS.get(k)!.enforced) throw new QuotaRefusal(`FlowMQ does not enforce ${k}: only producer_byte_rate and consumer_byte_rate (per user)`);
  }
  return { entity: entity as QuotaEntity, set };
}

function entityKey(e: Entry): string {
  return JSON.stringify(e.entity.map((x) => [x.entityType, x.entityName]).sort());
}

export async function handleAlterClientQuotas(ctx: RequestContext, req: AlterClientQuotasRequest): Promise<AlterClientQuotasResponse> {
  const authorized = allowed(ctx, 'alter', 'cluster', '*');
  const seen = new Map<string, number>();
  for (const e of req.entries) seen.set(entityKey(e), (seen.get(entityKey(e)) ?? 0) + 1);
  const entries: AlterClientQuotasResponse['entries'] = [];
  const changes: QuotaChange[] = [];
  const pending: Array<{ errorCode: number; errorMessage: string | null }> = [];
  for (const e of req.entries) {
    const res = { errorCode: KafkaErrorCode.NONE as number, errorMessage: null as string | null, entity: e.entity };
    entries.push(res);
    if (!authorized) {
      res.errorCode = KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED;
      res.errorMessage = 'not authorized to alter client quotas';
      continue;
    }
    try {
      if ((seen.get(entityKey(e)) ?? 0) > 1) throw new QuotaRefusal('the same entity appears more than once in the request');
      changes.push(check(e));
      pending.push(res);
    } catch (err) {
      if (!(err instanceof QuotaRefusal)) throw err;
      res.errorCode = KafkaErrorCode.INVALID_REQUEST;
      res.errorMessage = err.message;
    }
  }
  if (!req.validateOnly && changes.length > 0) {
    try {
      await ctx.adapter.settings.alterQuotas(changes);
      ctx.conn.log.info({ quotas: changes, by: ctx.conn.access?.principal.user ?? null }, 'client quotas changed');
    } catch (err) {
      ctx.conn.log.warn({ err }, 'client quotas: cannot store the change');
      for (const r of pending) Object.assign(r, { errorCode: kafkaErrorCode(err), errorMessage: err instanceof Error ? err.message : null });
    }
  }
  return { throttleTimeMs: 0, entries };
}
