/**
 * What a namespace administrator may do to users (routes-users.ts): only users of its namespaces (others are absent:
 * 404), never a user who administers more than it does (a global administrator, or another namespace's: changing
 * its password or deleting it would reach outside), and never give a group that carries rights outside its
 * namespaces (`admins`, or a group some policy not scoped to its namespaces names): no escalation.
 */
import type { FastifyRequest } from 'fastify';
import { ADMIN_GROUP } from '../policy.js';
import type { AccessControl } from '../access.js';
import { HttpError, adminScope, authorizeAdminOf } from './common.js';

export function userScopeGuard(access: AccessControl) {
  const dir = access.directory;
  return {
    /** Throws unless the caller may manage user `name` (404 for a namespace administrator when it may not see it). */
    target(req: FastifyRequest, name: string, change = false): void {
      const u = dir.user(name);
      // No user: a namespace administrator is told so as for another namespace's user; a plain user gets the 403.
      authorizeAdminOf(access, req, u?.namespace ?? '', 'user', name);
      const scope = adminScope(access, req);
      if (!change || scope === 'all' || u === undefined) return;
      const p = access.principal(name);
      if (access.allows(p, 'admin', 'cluster', '*')) throw new HttpError(403, 'FORBIDDEN', `user "${name}" is a broker administrator`);
      for (const n of dir.listNamespaces()) {
        if (!scope.has(n.name) && access.allows(p, 'admin', 'namespace', n.name)) {
          throw new HttpError(403, 'FORBIDDEN', `user "${name}" administers a namespace you do not`);
        }
      }
    },
    /** Throws unless the caller may give these groups (those the user has already are kept as they are). */
    groups(req: FastifyRequest, groups: readonly string[], had: readonly string[]): void {
      const scope = adminScope(access, req);
      if (scope === 'all') return;
      for (const g of groups) {
        if (had.includes(g)) continue;
        if (g === ADMIN_GROUP) throw new HttpError(403, 'FORBIDDEN', `only a broker administrator gives the group "${ADMIN_GROUP}"`);
        const outside = dir.policies.defs().some((p) => (p.namespace === undefined || !scope.has(p.namespace)) && p.principals.includes(`group:${g}`));
        if (outside) throw new HttpError(403, 'FORBIDDEN', `group "${g}" is named by policies outside your namespaces`);
      }
    },
  };
}
