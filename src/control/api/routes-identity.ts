/**
 * Identities: login sessions, users, groups, policies, namespaces and API tokens, one route module each; what they
 * share is in identity-common.ts. Managing identities is `admin cluster:*`, except what concerns the caller: reading
 * itself, changing its own password, its own tokens.
 */
import type { FastifyInstance } from 'fastify';
import { sessionRoutes } from './routes-session.js';
import { userRoutes } from './routes-users.js';
import { userGroupRoutes } from './routes-user-groups.js';
import { policyRoutes } from './routes-policies.js';
import { namespaceRoutes } from './routes-namespaces.js';
import { tokenRoutes } from './routes-tokens.js';
import type { ApiContext } from './types.js';

/** Registers every identity route module. */
export function identityRoutes(app: FastifyInstance, ctx: ApiContext): void {
  sessionRoutes(app, ctx);
  userRoutes(app, ctx);
  userGroupRoutes(app, ctx);
  policyRoutes(app, ctx);
  namespaceRoutes(app, ctx);
  tokenRoutes(app, ctx);
}
