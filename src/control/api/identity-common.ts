/** What the identity route modules share (routes-identity.ts lists them): views, body schemas, helpers. */
import type { FastifyRequest } from 'fastify';
import { FlowError } from '../../core/index.js';
import { parseDuration } from '../../util/units.js';
import { QUOTA_KEYS, type GroupDef, type TokenInfo, type UserInfo } from '../directory.js';
import type { PolicyDef } from '../policy.js';
import { authOf } from './common.js';

export const iso = (ms: number | null | undefined) => (ms === null || ms === undefined || ms === 0 ? null : new Date(ms).toISOString());

export const userView = (u: UserInfo) => ({
  username: u.username,
  groups: u.groups,
  namespace: u.namespace,
  mechanisms: u.mechanisms,
  nkey: u.nkey ?? null,
  source: u.source,
  createdAt: iso(u.createdAt),
});
export const groupView = (g: GroupDef & { members?: string[] }) => ({
  name: g.name,
  description: g.description ?? null,
  members: g.members ?? [],
  createdAt: iso(g.createdAt),
});
export const policyView = (p: PolicyDef) => ({
  name: p.name,
  effect: p.effect,
  actions: p.actions,
  resources: p.resources,
  principals: p.principals,
  namespace: p.namespace ?? null,
  description: p.description ?? null,
  source: p.source ?? 'api',
  createdAt: iso(p.createdAt),
});
export const tokenView = (t: TokenInfo) => ({
  id: t.id,
  user: t.user,
  description: t.description ?? null,
  createdAt: iso(t.createdAt),
  expiresAt: iso(t.expiresAt),
});

export const STRINGS = { type: 'array', items: { type: 'string', minLength: 1, maxLength: 1024 }, maxItems: 1000 } as const;
export const QUOTAS = {
  type: 'object',
  additionalProperties: false,
  properties: Object.fromEntries(QUOTA_KEYS.map((k) => [k, { type: ['number', 'null'], minimum: 0 }])),
} as const;
export const POLICY_BODY = {
  effect: { type: 'string', enum: ['allow', 'deny'] },
  actions: { ...STRINGS, minItems: 1, description: 'publish, subscribe, create, delete, describe, alter, admin, respond or *' },
  resources: {
    ...STRINGS,
    minItems: 1,
    description: 'kind:pattern (topic:a/+/#, stream:orders-*, queue:q, exchange:x, group:g, cluster:*, namespace:t1, *:*)',
  },
  principals: { ...STRINGS, minItems: 1, description: 'user:NAME, group:NAME or everyone' },
  namespace: {
    type: ['string', 'null'],
    maxLength: 256,
    description: 'scope it to this namespace: it applies to its principals only, never to the kinds cluster and namespace',
  },
  description: { type: 'string', maxLength: 1024 },
} as const;

export function isSelf(req: FastifyRequest, username: string): boolean {
  const a = authOf(req);
  return a.via !== 'bootstrap' && a.via !== 'anonymous' && a.principal.user === username;
}

export function ttlMs(ttl: string | number | undefined): number | undefined {
  if (ttl === undefined) return undefined;
  const ms = parseDuration(ttl);
  if (ms === null || ms <= 0) throw new FlowError('INVALID_ARGUMENT', '"ttl" must be a duration such as 30d, 12h or a number of ms');
  return ms;
}
