/**
 * DescribeAcls, CreateAcls and DeleteAcls on the control plane's policies: Kafka's ACL tools (kafka-acls.sh,
 * KafkaJS admin.createAcls ...) manage the same policies as the admin API and the CLI.
 *
 * Mapping (one ACL binding ↔ one policy of one action, one resource, one principal):
 *   principal    User:alice ↔ user:alice, User:* ↔ everyone, Group:ops ↔ group:ops (FlowMQ's groups)
 *   resource     TOPIC ↔ stream:, GROUP ↔ group:, TRANSACTIONAL_ID ↔ transactional-id:, CLUSTER (kafka-cluster)
 *                ↔ cluster:*
 *   pattern      LITERAL name ↔ exact name (`*` ↔ every name), PREFIXED name ↔ `name*`
 *   operation    READ ↔ subscribe, WRITE and IDEMPOTENT_WRITE ↔ publish, CREATE, DELETE, ALTER, DESCRIBE ↔ the
 *                same, DESCRIBE_CONFIGS ↔ describe, ALTER_CONFIGS ↔ alter, ALL ↔ every action (`*`)
 *   permission   ALLOW / DENY ↔ the policy's effect; host must be `*` (host-based ACLs are not supported)
 * CreateAcls names the policy `kafka-acl-<16 hex of the SHA-1 of its content>` with source `kafka-acl`, so creating
 * the same ACL twice is one policy (Kafka treats it as a no-op too). DescribeAcls lists every policy that maps,
 * whoever made it (one ACL per principal × resource × action of a policy). DeleteAcls deletes the kafka-acl
 * policies it matches; a matching ACL that is part of a larger policy (made with the admin API) is reported with
 * an error instead of being cut out of it.
 *
 * DescribeAcls needs `describe cluster:*`, CreateAcls and DeleteAcls `alter cluster:*` (Kafka's own rules).
 *
 * A tenant's connection (a namespace other than default, docs/namespaces.md) manages its namespace's ACLs: the
 * policies scoped to it, whose resource names are the tenant's own; it needs `admin namespace:<ns>` (a namespace
 * administrator) and cannot name the cluster. A default connection sees and changes the unscoped policies only (a
 * scoped policy's `orders` is a tenant's, not default's).
 */
import { createHash } from 'node:crypto';
import type { PolicyDef } from '../../../control/index.js';
import {
  AclOperation,
  AclPatternType,
  AclPermissionType,
  AclResourceType,
  KafkaErrorCode,
  type CreateAclsRequest,
  type CreateAclsResponse,
  type DeleteAclsRequest,
  type DeleteAclsResponse,
  type DescribeAclsRequest,
  type DescribeAclsResponse,
} from '../codec/index.js';
import { allowed, CLUSTER_NAME } from '../authz.js';
import type { RequestContext } from '../route.js';

export interface AclBinding {
  resourceType: number;
  resourceName: string;
  patternType: number;
  principal: string;
  host: string;
  operation: number;
  permissionType: number;
}

export interface AclFilter {
  resourceTypeFilter: number;
  resourceNameFilter: string | null;
  patternTypeFilter: number;
  principalFilter: string | null;
  hostFilter: string | null;
  operation: number;
  permissionType: number;
}

class AclProblem extends Error {}

const ACTION_OF_OPERATION = new Map<number, string>([
  [AclOperation.ALL, '*'],
  [AclOperation.READ, 'subscribe'],
  [AclOperation.WRITE, 'publish'],
  [AclOperation.IDEMPOTENT_WRITE, 'publish'],
  [AclOperation.CREATE, 'create'],
  [AclOperation.DELETE, 'delete'],
  [AclOperation.ALTER, 'alter'],
  [AclOperation.ALTER_CONFIGS, 'alter'],
  [AclOperation.DESCRIBE, 'describe'],
  [AclOperation.DESCRIBE_CONFIGS, 'describe'],
]);

const OPERATION_OF_ACTION = new Map<string, number>([
  ['*', AclOperation.ALL],
  ['subscribe', AclOperation.READ],
  ['publish', AclOperation.WRITE],
  ['create', AclOperation.CREATE],
  ['delete', AclOperation.DELETE],
  ['alter', AclOperation.ALTER],
  ['describe', AclOperation.DESCRIBE],
]);

const KIND_OF_TYPE = new Map<number, string>([
  [AclResourceType.TOPIC, 'stream'],
  [AclResourceType.GROUP, 'group'],
  [AclResourceType.TRANSACTIONAL_ID, 'transactional-id'],
  [AclResourceType.CLUSTER, 'cluster'],
]);

function kafkaPrincipal(p: string): string | null {
  if (p === 'everyone' || p === '*') return 'User:*';
  if (p.startsWith('user:')) return `User:${p.slice(5)}`;
  if (p.startsWith('group:')) return `Group:${p.slice(6)}`;
  return null;
}

/** The Kafka resources a policy resource maps to (none for topic filters, queues, exchanges). */
function kafkaResources(r: string): Array<{ resourceType: number; resourceName: string; patternType: number }> {
  const colon = r.indexOf(':');
  const kind = r.slice(0, colon);
  const pattern = r.slice(colon + 1);
  const named = (resourceType: number) =>
    pattern === '*' || !pattern.endsWith('*')
      ? { resourceType, resourceName: pattern, patternType: AclPatternType.LITERAL }
      : { resourceType, resourceName: pattern.slice(0, -1), patternType: AclPatternType.PREFIXED };
  const cluster = { resourceType: AclResourceType.CLUSTER, resourceName: CLUSTER_NAME, patternType: AclPatternType.LITERAL };
  if (kind === 'stream') return [named(AclResourceType.TOPIC)];
  if (kind === 'group') return [named(AclResourceType.GROUP)];
  if (kind === 'transactional-id') return [named(AclResourceType.TRANSACTIONAL_ID)];
  if (kind === 'cluster') return [cluster];
  if (kind === '*') return [named(AclResourceType.TOPIC), named(AclResourceType.GROUP), named(AclResourceType.TRANSACTIONAL_ID), cluster];
  return [];
}

/** The ACL bindings a policy stands for (principal × resource × action), in a stable order. */
export function policyBindings(def: PolicyDef): AclBinding[] {
  const out: AclBinding[] = [];
  const permissionType = def.effect === 'allow' ? AclPermissionType.ALLOW : AclPermissionType.DENY;
  for (const p of def.principals) {
    const principal = kafkaPrincipal(p);
    if (principal === null) continue;
    for (const r of def.resources) {
      for (const res of kafkaResources(r)) {
        for (const a of def.actions) {
          const operation = OPERATION_OF_ACTION.get(a);
          if (operation === undefined) continue; // admin: no Kafka operation
          out.push({ ...res, principal, host: '*', operation, permissionType });
        }
      }
    }
  }
  return out;
}

/**
 * The policy one CreateAcls binding becomes, scoped to `namespace` when given (a tenant's ACL); throws AclProblem
 * (INVALID_REQUEST) for what cannot map.
 */
export function bindingPolicy(b: AclBinding, namespace?: string): Omit<PolicyDef, 'createdAt'> {
  const kind = KIND_OF_TYPE.get(b.resourceType);
  if (kind === undefined) throw new AclProblem(`resource type ${b.resourceType} is not supported (TOPIC, GROUP, TRANSACTIONAL_ID or CLUSTER)`);
  let resource: string;
  if (kind === 'cluster' && namespace !== undefined) {
    throw new AclProblem(`an ACL of namespace "${namespace}" cannot name the cluster: only the broker's administrators grant that`);
  } else if (kind === 'cluster') {
    if (b.resourceName !== CLUSTER_NAME || b.patternType !== AclPatternType.LITERAL)
      throw new AclProblem(`the cluster resource is the literal "${CLUSTER_NAME}"`);
    resource = 'cluster:*';
  } else if (b.patternType === AclPatternType.LITERAL) {
    if (b.resourceName === '' || (b.resourceName.includes('*') && b.resourceName !== '*'))
      throw new AclProblem(`invalid literal resource name "${b.resourceName}"`);
    resource = `${kind}:${b.resourceName}`;
  } else if (b.patternType === AclPatternType.PREFIXED) {
    if (b.resourceName === '' || b.resourceName.includes('*')) throw new AclProblem(`invalid resource name prefix "${b.resourceName}"`);
    resource = `${kind}:${b.resourceName}*`;
  } else {
    throw new AclProblem(`pattern type ${b.patternType} cannot be created (LITERAL or PREFIXED)`);
  }
  const m = /^(User|Group):(.+)$/.exec(b.principal);
  if (!m) throw new AclProblem(`principal "${b.principal}" must be User:NAME, User:* or Group:NAME`);
  const principal = m[1] === 'User' ? (m[2] === '*' ? 'everyone' : `user:${m[2]}`) : `group:${m[2]}`;
  if (b.host !== '*') throw new AclProblem('host-based ACLs are not supported: the host must be *');
  const action = ACTION_OF_OPERATION.get(b.operation);
  if (action === undefined) throw new AclProblem(`operation ${b.operation} is not supported`);
  if (b.permissionType !== AclPermissionType.ALLOW && b.permissionType !== AclPermissionType.DENY) {
    throw new AclProblem(`permission type ${b.permissionType} must be ALLOW or DENY`);
  }
  const effect = b.permissionType === AclPermissionType.ALLOW ? 'allow' : 'deny';
  const content = { effect, actions: [action], resources: [resource], principals: [principal] } as const;
  // Policy names are one space for the broker: the namespace is part of what the name digests.
  const digest = createHash('sha1')
    .update(JSON.stringify(namespace === undefined ? content : { ...content, namespace }))
    .digest('hex')
    .slice(0, 16);
  return {
    name: `kafka-acl-${digest}`,
    ...content,
    ...(namespace === undefined ? {} : { namespace }),
    source: 'kafka-acl',
    description: `Kafka ACL${namespace === undefined ? '' : ` of namespace ${namespace}`}: ${b.principal} ${effect} ${action} on ${resource}`,
  };
}

/** The namespace whose ACLs the connection manages (undefined: default's, the unscoped policies). */
function aclNamespace(ctx: RequestContext): string | undefined {
  return ctx.conn.names.isDefault ? undefined : ctx.conn.names.namespace;
}

/** Whether a policy is one of the ACLs the connection manages. */
function inScope(def: PolicyDef, ns: string | undefined): boolean {
  return def.namespace === ns;
}

/** Kafka's rule (describe or alter cluster:*) for default; a namespace administrator for a tenant. */
function mayManage(ctx: RequestContext, action: 'describe' | 'alter'): boolean {
  const ns = aclNamespace(ctx);
  return ns === undefined ? allowed(ctx, action, 'cluster', '*') : allowed(ctx, 'admin', 'namespace', ns);
}

/** Throws AclProblem for a filter with UNKNOWN values (Kafka refuses those as INVALID_REQUEST). */
function checkFilter(f: AclFilter): void {
  if (f.resourceTypeFilter === AclResourceType.UNKNOWN) throw new AclProblem('unknown resource type filter');
  if (f.patternTypeFilter === AclPatternType.UNKNOWN) throw new AclProblem('unknown pattern type filter');
  if (f.operation === AclOperation.UNKNOWN) throw new AclProblem('unknown operation filter');
  if (f.permissionType === AclPermissionType.UNKNOWN) throw new AclProblem('unknown permission type filter');
}

export function filterMatches(f: AclFilter, b: AclBinding): boolean {
  if (f.resourceTypeFilter !== AclResourceType.ANY && f.resourceTypeFilter !== b.resourceType) return false;
  if (f.patternTypeFilter === AclPatternType.MATCH) {
    // Every binding that applies to the named resource: its literal, the literal *, and prefixes of it.
    const n = f.resourceNameFilter;
    if (n !== null) {
      const hit =
        (b.patternType === AclPatternType.LITERAL && (b.resourceName === n || b.resourceName === '*')) ||
        (b.patternType === AclPatternType.PREFIXED && n.startsWith(b.resourceName));
      if (!hit) return false;
    }
  } else {
    if (f.patternTypeFilter !== AclPatternType.ANY && f.patternTypeFilter !== b.patternType) return false;
    if (f.resourceNameFilter !== null && f.resourceNameFilter !== b.resourceName) return false;
  }
  if (f.principalFilter !== null && f.principalFilter !== b.principal) return false;
  if (f.hostFilter !== null && f.hostFilter !== b.host) return false;
  if (f.operation !== AclOperation.ANY && f.operation !== b.operation) return false;
  if (f.permissionType !== AclPermissionType.ANY && f.permissionType !== b.permissionType) return false;
  return true;
}

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

export function handleDescribeAcls(ctx: RequestContext, req: DescribeAclsRequest): DescribeAclsResponse {
  const fail = (errorCode: number, errorMessage: string): DescribeAclsResponse => ({ throttleTimeMs: 0, errorCode, errorMessage, resources: [] });
  const ac = ctx.adapter.options.access;
  if (!ac) return fail(KafkaErrorCode.SECURITY_DISABLED, 'no access control: policies are not enabled on this listener');
  if (!mayManage(ctx, 'describe')) return fail(KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, 'not authorized to describe ACLs');
  const ns = aclNamespace(ctx);
  try {
    checkFilter(req);
  } catch (err) {
    return fail(KafkaErrorCode.INVALID_REQUEST, message(err));
  }
  const byResource = new Map<string, DescribeAclsResponse['resources'][number]>();
  const seen = new Set<string>();
  for (const def of ac.directory.policies.defs()) {
    if (!inScope(def, ns)) continue;
    for (const b of policyBindings(def)) {
      if (!filterMatches(req, b)) continue;
      const key = `${b.resourceType}\u0000${b.patternType}\u0000${b.resourceName}`;
      const acl = { principal: b.principal, host: b.host, operation: b.operation, permissionType: b.permissionType };
      const aclKey = `${key}\u0000${JSON.stringify(acl)}`;
      if (seen.has(aclKey)) continue; // two policies saying the same thing are one ACL
      seen.add(aclKey);
      let r = byResource.get(key);
      if (!r) byResource.set(key, (r = { resourceType: b.resourceType, resourceName: b.resourceName, patternType: b.patternType, acls: [] }));
      r.acls.push(acl);
    }
  }
  return { throttleTimeMs: 0, errorCode: KafkaErrorCode.NONE, errorMessage: null, resources: [...byResource.values()] };
}

export async function handleCreateAcls(ctx: RequestContext, req: CreateAclsRequest): Promise<CreateAclsResponse> {
  const ac = ctx.adapter.options.access;
  const results: CreateAclsResponse['results'] = [];
  const authorized = ac !== undefined && mayManage(ctx, 'alter');
  const ns = aclNamespace(ctx);
  for (const c of req.creations) {
    if (!ac) {
      results.push({ errorCode: KafkaErrorCode.SECURITY_DISABLED, errorMessage: 'no access control: policies are not enabled on this listener' });
      continue;
    }
    if (!authorized) {
      results.push({ errorCode: KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, errorMessage: 'not authorized to create ACLs' });
      continue;
    }
    try {
      const def = bindingPolicy({ ...c, patternType: c.resourcePatternType }, ns);
      await ac.directory.putPolicy(def);
      ctx.conn.log.info({ policy: def.name, acl: def.description }, 'ACL created');
      results.push({ errorCode: KafkaErrorCode.NONE, errorMessage: null });
    } catch (err) {
      results.push({
        errorCode: err instanceof AclProblem ? KafkaErrorCode.INVALID_REQUEST : KafkaErrorCode.UNKNOWN_SERVER_ERROR,
        errorMessage: message(err),
      });
    }
  }
  return { throttleTimeMs: 0, results };
}

export async function handleDeleteAcls(ctx: RequestContext, req: DeleteAclsRequest): Promise<DeleteAclsResponse> {
  const ac = ctx.adapter.options.access;
  const filterResults: DeleteAclsResponse['filterResults'] = [];
  const authorized = ac !== undefined && mayManage(ctx, 'alter');
  const ns = aclNamespace(ctx);
  // Policies deleted by an earlier filter of this request are not matched again.
  const deleted = new Set<string>();
  for (const f of req.filters) {
    if (!ac) {
      filterResults.push({
        errorCode: KafkaErrorCode.SECURITY_DISABLED,
        errorMessage: 'no access control: policies are not enabled on this listener',
        matchingAcls: [],
      });
      continue;
    }
    if (!authorized) {
      filterResults.push({ errorCode: KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, errorMessage: 'not authorized to delete ACLs', matchingAcls: [] });
      continue;
    }
    try {
      checkFilter(f);
    } catch (err) {
      filterResults.push({ errorCode: KafkaErrorCode.INVALID_REQUEST, errorMessage: message(err), matchingAcls: [] });
      continue;
    }
    const matchingAcls: DeleteAclsResponse['filterResults'][number]['matchingAcls'] = [];
    for (const def of ac.directory.policies.defs()) {
      if (deleted.has(def.name) || !inScope(def, ns)) continue;
      const bindings = policyBindings(def);
      const hits = bindings.filter((b) => filterMatches(f, b));
      if (hits.length === 0) continue;
      let errorCode: number = KafkaErrorCode.NONE;
      let errorMessage: string | null = null;
      if (def.source === 'kafka-acl' && bindings.length === 1) {
        try {
          await ac.directory.deletePolicy(def.name);
          deleted.add(def.name);
          ctx.conn.log.info({ policy: def.name }, 'ACL deleted');
        } catch (err) {
          errorCode = KafkaErrorCode.UNKNOWN_SERVER_ERROR;
          errorMessage = message(err);
        }
      } else {
        errorCode = KafkaErrorCode.INVALID_REQUEST;
        errorMessage = `policy "${def.name}" covers more than this ACL: change it with the admin API or \`flowmq policy\``;
      }
      for (const b of hits) matchingAcls.push({ errorCode, errorMessage, ...b });
    }
    filterResults.push({ errorCode: KafkaErrorCode.NONE, errorMessage: null, matchingAcls });
  }
  return { throttleTimeMs: 0, filterResults };
}
