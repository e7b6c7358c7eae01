/**
 * ACL APIs (KIP-140): DescribeAcls, CreateAcls, DeleteAcls, versions 0-3 (v1: resource pattern types, KIP-290;
 * v2: flexible; v3: the USER resource type, which FlowMQ does not map).
 */
import { ApiKey } from './api.js';
import { array, int16, int32, int8, messageApi, nullableString, string, struct, type ValueOf } from './schema.js';

/** org.apache.kafka.common.resource.ResourceType */
export const AclResourceType = { UNKNOWN: 0, ANY: 1, TOPIC: 2, GROUP: 3, CLUSTER: 4, TRANSACTIONAL_ID: 5, DELEGATION_TOKEN: 6, USER: 7 } as const;
/** org.apache.kafka.common.resource.PatternType */
export const AclPatternType = { UNKNOWN: 0, ANY: 1, MATCH: 2, LITERAL: 3, PREFIXED: 4 } as const;
/** org.apache.kafka.common.acl.AclOperation */
export const AclOperation = {
  UNKNOWN: 0,
  ANY: 1,
  ALL: 2,
  READ: 3,
  WRITE: 4,
  CREATE: 5,
  DELETE: 6,
  ALTER: 7,
  DESCRIBE: 8,
  CLUSTER_ACTION: 9,
  DESCRIBE_CONFIGS: 10,
  ALTER_CONFIGS: 11,
  IDEMPOTENT_WRITE: 12,
  CREATE_TOKENS: 13,
  DESCRIBE_TOKENS: 14,
} as const;
/** org.apache.kafka.common.acl.AclPermissionType */
export const AclPermissionType = { UNKNOWN: 0, ANY: 1, DENY: 2, ALLOW: 3 } as const;

/** Before v1 every resource pattern is LITERAL. */
const patternType = () => int8().v(1, Infinity, AclPatternType.LITERAL);

/** An ACL filter: DescribeAcls' request, and each of DeleteAcls' filters. */
const aclFilter = () => ({
  resourceTypeFilter: int8(),
  resourceNameFilter: nullableString(),
  patternTypeFilter: patternType(),
  principalFilter: nullableString(),
  hostFilter: nullableString(),
  operation: int8(),
  permissionType: int8(),
});

export const DescribeAclsApi = messageApi(
  { apiKey: ApiKey.DescribeAcls, name: 'DescribeAcls', minVersion: 0, maxVersion: 3, firstFlexibleVersion: 2 },
  aclFilter(),
  {
    throttleTimeMs: int32(),
    errorCode: int16(),
    errorMessage: nullableString(),
    resources: array(
      struct({
        resourceType: int8(),
        resourceName: string(),
        patternType: patternType(),
        acls: array(struct({ principal: string(), host: string(), operation: int8(), permissionType: int8() })),
      }),
    ),
  },
);
export type DescribeAclsRequest = ValueOf<typeof DescribeAclsApi.request>;
export type DescribeAclsResponse = ValueOf<typeof DescribeAclsApi.response>;

export const CreateAclsApi = messageApi(
  { apiKey: ApiKey.CreateAcls, name: 'CreateAcls', minVersion: 0, maxVersion: 3, firstFlexibleVersion: 2 },
  {
    creations: array(
      struct({
        resourceType: int8(),
        resourceName: string(),
        resourcePatternType: patternType(),
        principal: string(),
        host: string(),
        operation: int8(),
        permissionType: int8(),
      }),
    ),
  },
  { throttleTimeMs: int32(), results: array(struct({ errorCode: int16(), errorMessage: nullableString() })) },
);
export type CreateAclsRequest = ValueOf<typeof CreateAclsApi.request>;
export type CreateAclsResponse = ValueOf<typeof CreateAclsApi.response>;

export const DeleteAclsApi = messageApi(
  { apiKey: ApiKey.DeleteAcls, name: 'DeleteAcls', minVersion: 0, maxVersion: 3, firstFlexibleVersion: 2 },
  {
    filters: array(struct(aclFilter())),
  },
  {
    throttleTimeMs: int32(),
    filterResults: array(
      struct({
        errorCode: int16(),
        errorMessage: nullableString(),
        matchingAcls: array(
          struct({
            errorCode: int16(),
            errorMessage: nullableString(),
            resourceType: int8(),
            resourceName: string(),
            patternType: patternType(),
            principal: string(),
            host: string(),
            operation: int8(),
            permissionType: int8(),
          }),
        ),
      }),
    ),
  },
);
export type DeleteAclsRequest = ValueOf<typeof DeleteAclsApi.request>;
export type DeleteAclsResponse = ValueOf<typeof DeleteAclsApi.response>;
