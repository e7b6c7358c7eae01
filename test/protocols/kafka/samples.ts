/**
 * One request and one response for every API described with the message schema, every field set to a value
 * other than its default, so that round trips at every version exercise every field the version has.
 */
import {
  AlterConfigsApi,
  CreatePartitionsApi,
  CreateTopicsApi,
  DeleteGroupsApi,
  DeleteRecordsApi,
  DeleteTopicsApi,
  DescribeClusterApi,
  DescribeConfigsApi,
  DescribeGroupsApi,
  FindCoordinatorApi,
  HeartbeatApi,
  IncrementalAlterConfigsApi,
  InitProducerIdApi,
  JoinGroupApi,
  LeaveGroupApi,
  ListGroupsApi,
  OffsetCommitApi,
  OffsetFetchApi,
  ConsumerGroupHeartbeatApi,
  ConsumerGroupDescribeApi,
  type ConsumerGroupHeartbeatRequest,
  type ConsumerGroupHeartbeatResponse,
  type ConsumerGroupDescribeRequest,
  type ConsumerGroupDescribeResponse,
  OffsetForLeaderEpochApi,
  SaslAuthenticateApi,
  SaslHandshakeApi,
  SyncGroupApi,
  type AlterConfigsRequest,
  type AlterConfigsResponse,
  type AnyApiCodec,
  type CreatePartitionsRequest,
  type CreatePartitionsResponse,
  type CreateTopicsRequest,
  type CreateTopicsResponse,
  type DeleteGroupsRequest,
  type DeleteGroupsResponse,
  type DeleteRecordsRequest,
  type DeleteRecordsResponse,
  type DeleteTopicsRequest,
  type DeleteTopicsResponse,
  type DescribeClusterRequest,
  type DescribeClusterResponse,
  type DescribeConfigsRequest,
  type DescribeConfigsResponse,
  type DescribeGroupsRequest,
  type DescribeGroupsResponse,
  type FindCoordinatorRequest,
  type FindCoordinatorResponse,
  type HeartbeatRequest,
  type HeartbeatResponse,
  type IncrementalAlterConfigsRequest,
  type InitProducerIdRequest,
  type InitProducerIdResponse,
  type JoinGroupRequest,
  type JoinGroupResponse,
  type LeaveGroupRequest,
  type LeaveGroupResponse,
  type ListGroupsRequest,
  type ListGroupsResponse,
  type OffsetCommitRequest,
  type OffsetCommitResponse,
  type OffsetFetchRequest,
  type OffsetFetchResponse,
  type OffsetForLeaderEpochRequest,
  type OffsetForLeaderEpochResponse,
  type SaslAuthenticateRequest,
  type SaslAuthenticateResponse,
  type SaslHandshakeRequest,
  type SaslHandshakeResponse,
  type SyncGroupRequest,
  type SyncGroupResponse,
  CreateAclsApi,
  DeleteAclsApi,
  DescribeAclsApi,
  type CreateAclsRequest,
  type CreateAclsResponse,
  type DeleteAclsRequest,
  type DeleteAclsResponse,
  type DescribeAclsRequest,
  type DescribeAclsResponse,
  DescribeLogDirsApi,
  ElectLeadersApi,
  OffsetDeleteApi,
  DescribeProducersApi,
  DescribeClientQuotasApi,
  AlterClientQuotasApi,
  DescribeUserScramCredentialsApi,
  AlterUserScramCredentialsApi,
  type DescribeLogDirsRequest,
  type DescribeLogDirsResponse,
  type ElectLeadersRequest,
  type ElectLeadersResponse,
  type OffsetDeleteRequest,
  type OffsetDeleteResponse,
  type DescribeProducersRequest,
  type DescribeProducersResponse,
  type DescribeClientQuotasRequest,
  type DescribeClientQuotasResponse,
  type AlterClientQuotasRequest,
  type AlterClientQuotasResponse,
  type DescribeUserScramCredentialsRequest,
  type DescribeUserScramCredentialsResponse,
  type AlterUserScramCredentialsRequest,
  type AlterUserScramCredentialsResponse,
  AddPartitionsToTxnApi,
  AddOffsetsToTxnApi,
  EndTxnApi,
  TxnOffsetCommitApi,
  DescribeTransactionsApi,
  ListTransactionsApi,
  type AddPartitionsToTxnRequest,
  type AddPartitionsToTxnResponse,
  type AddOffsetsToTxnRequest,
  type AddOffsetsToTxnResponse,
  type EndTxnRequest,
  type EndTxnResponse,
  type TxnOffsetCommitRequest,
  type TxnOffsetCommitResponse,
  type DescribeTransactionsRequest,
  type DescribeTransactionsResponse,
  type ListTransactionsRequest,
  type ListTransactionsResponse,
} from '../../../src/protocols/kafka/codec/index.js';

const b = (s: string): Buffer => Buffer.from(s);
const TOPIC_ID = Buffer.from('0123456789abcdef0123456789abcdef', 'hex');
const ID = Buffer.from('00112233445566778899aabbccddeeff', 'hex');

export interface ApiSample {
  codec: AnyApiCodec;
  request: unknown;
  response: unknown;
}

const fetchPartition = { partitionIndex: 1, committedOffset: 42, committedLeaderEpoch: 3, metadata: 'm', errorCode: 0 };

export const API_SAMPLES: ApiSample[] = [
  {
    codec: FindCoordinatorApi,
    request: { key: 'g1', keyType: 1, coordinatorKeys: ['g1', 'g2'] } satisfies FindCoordinatorRequest,
    response: {
      throttleTimeMs: 5,
      errorCode: 15,
      errorMessage: 'msg',
      nodeId: 7,
      host: 'h',
      port: 9092,
      coordinators: [{ key: 'g1', nodeId: 7, host: 'h', port: 9092, errorCode: 0, errorMessage: null }],
    } satisfies FindCoordinatorResponse,
  },
  {
    codec: JoinGroupApi,
    request: {
      groupId: 'g',
      sessionTimeoutMs: 30000,
      rebalanceTimeoutMs: 60000,
      memberId: 'm-1',
      groupInstanceId: 'i-1',
      protocolType: 'consumer',
      protocols: [
        { name: 'range', metadata: b('r') },
        { name: 'roundrobin', metadata: b('rr') },
      ],
      reason: 'why',
    } satisfies JoinGroupRequest,
    response: {
      throttleTimeMs: 1,
      errorCode: 0,
      generationId: 4,
      protocolType: 'consumer',
      protocolName: 'range',
      leader: 'm-1',
      skipAssignment: true,
      memberId: 'm-2',
      members: [{ memberId: 'm-1', groupInstanceId: 'i-1', metadata: b('meta') }],
    } satisfies JoinGroupResponse,
  },
  {
    codec: SyncGroupApi,
    request: {
      groupId: 'g',
      generationId: 4,
      memberId: 'm-1',
      groupInstanceId: 'i-1',
      protocolType: 'consumer',
      protocolName: 'range',
      assignments: [{ memberId: 'm-1', assignment: b('a') }],
    } satisfies SyncGroupRequest,
    response: { throttleTimeMs: 1, errorCode: 0, protocolType: 'consumer', protocolName: 'range', assignment: b('asg') } satisfies SyncGroupResponse,
  },
  {
    codec: HeartbeatApi,
    request: { groupId: 'g', generationId: 4, memberId: 'm', groupInstanceId: 'i' } satisfies HeartbeatRequest,
    response: { throttleTimeMs: 2, errorCode: 27 } satisfies HeartbeatResponse,
  },
  {
    codec: LeaveGroupApi,
    request: {
      groupId: 'g',
      memberId: 'm',
      members: [{ memberId: 'm', groupInstanceId: 'i', reason: 'bye' }],
    } satisfies LeaveGroupRequest,
    response: { throttleTimeMs: 3, errorCode: 0, members: [{ memberId: 'm', groupInstanceId: 'i', errorCode: 25 }] } satisfies LeaveGroupResponse,
  },
  {
    codec: OffsetCommitApi,
    request: {
      groupId: 'g',
      generationId: 4,
      memberId: 'm',
      groupInstanceId: 'i',
      retentionTimeMs: 1000,
      topics: [
        {
          name: 't',
          partitions: [{ partitionIndex: 1, committedOffset: 42, committedLeaderEpoch: 3, commitTimestamp: -1, committedMetadata: 'md' }],
        },
      ],
    } satisfies OffsetCommitRequest,
    response: { throttleTimeMs: 4, topics: [{ name: 't', partitions: [{ partitionIndex: 1, errorCode: 0 }] }] } satisfies OffsetCommitResponse,
  },
  {
    // v10+: topics by id (the name is not sent).
    codec: OffsetCommitApi,
    request: {
      groupId: 'g',
      generationId: 4,
      memberId: 'm',
      groupInstanceId: 'i',
      retentionTimeMs: -1,
      topics: [
        {
          name: '',
          topicId: TOPIC_ID,
          partitions: [{ partitionIndex: 1, committedOffset: 42, committedLeaderEpoch: 3, commitTimestamp: -1, committedMetadata: 'md' }],
        },
      ],
    } satisfies OffsetCommitRequest,
    response: {
      throttleTimeMs: 4,
      topics: [{ name: '', topicId: TOPIC_ID, partitions: [{ partitionIndex: 1, errorCode: 0 }] }],
    } satisfies OffsetCommitResponse,
  },
  {
    codec: OffsetFetchApi,
    request: {
      groupId: 'g',
      topics: [{ name: 't', partitionIndexes: [0, 1] }],
      groups: [{ groupId: 'g', memberId: 'm', memberEpoch: 3, topics: [{ name: 't', partitionIndexes: [1] }] }],
      requireStable: true,
    } satisfies OffsetFetchRequest,
    response: {
      throttleTimeMs: 5,
      topics: [{ name: 't', partitions: [fetchPartition] }],
      errorCode: 0,
      groups: [{ groupId: 'g', topics: [{ name: 't', partitions: [fetchPartition] }], errorCode: 0 }],
    } satisfies OffsetFetchResponse,
  },
  {
    // v10+: topics by id.
    codec: OffsetFetchApi,
    request: {
      groupId: '',
      topics: [],
      groups: [{ groupId: 'g', memberId: null, memberEpoch: -1, topics: [{ name: '', topicId: TOPIC_ID, partitionIndexes: [1] }] }],
      requireStable: true,
    } satisfies OffsetFetchRequest,
    response: {
      throttleTimeMs: 5,
      topics: [],
      errorCode: 0,
      groups: [{ groupId: 'g', topics: [{ name: '', topicId: TOPIC_ID, partitions: [fetchPartition] }], errorCode: 0 }],
    } satisfies OffsetFetchResponse,
  },
  {
    codec: DescribeGroupsApi,
    request: { groups: ['g1', 'g2'], includeAuthorizedOperations: true } satisfies DescribeGroupsRequest,
    response: {
      throttleTimeMs: 6,
      groups: [
        {
          errorCode: 0,
          errorMessage: 'msg',
          groupId: 'g1',
          groupState: 'Stable',
          protocolType: 'consumer',
          protocolData: 'range',
          members: [{ memberId: 'm', groupInstanceId: 'i', clientId: 'c', clientHost: '/127.0.0.1', memberMetadata: b('md'), memberAssignment: b('as') }],
          authorizedOperations: 8,
        },
      ],
    } satisfies DescribeGroupsResponse,
  },
  {
    codec: ListGroupsApi,
    request: { statesFilter: ['Stable'], typesFilter: ['classic'] } satisfies ListGroupsRequest,
    response: {
      throttleTimeMs: 7,
      errorCode: 0,
      groups: [{ groupId: 'g', protocolType: 'consumer', groupState: 'Stable', groupType: 'classic' }],
    } satisfies ListGroupsResponse,
  },
  {
    codec: DeleteGroupsApi,
    request: { groupsNames: ['g1', 'g2'] } satisfies DeleteGroupsRequest,
    response: { throttleTimeMs: 8, results: [{ groupId: 'g1', errorCode: 68 }] } satisfies DeleteGroupsResponse,
  },
  {
    codec: CreateTopicsApi,
    request: {
      topics: [
        {
          name: 't',
          numPartitions: 3,
          replicationFactor: 1,
          assignments: [{ partitionIndex: 0, brokerIds: [0] }],
          configs: [{ name: 'retention.ms', value: '1000' }],
        },
      ],
      timeoutMs: 5000,
      validateOnly: true,
    } satisfies CreateTopicsRequest,
    response: {
      throttleTimeMs: 9,
      topics: [
        {
          name: 't',
          topicId: ID,
          errorCode: 0,
          errorMessage: 'ok',
          numPartitions: 3,
          replicationFactor: 1,
          configs: [{ name: 'retention.ms', value: '1000', readOnly: false, configSource: 1, isSensitive: false }],
        },
      ],
    } satisfies CreateTopicsResponse,
  },
  {
    codec: DeleteTopicsApi,
    request: { topics: [{ name: 't', topicId: ID }], topicNames: ['t'], timeoutMs: 5000 } satisfies DeleteTopicsRequest,
    response: { throttleTimeMs: 1, responses: [{ name: 't', topicId: ID, errorCode: 3, errorMessage: 'no' }] } satisfies DeleteTopicsResponse,
  },
  {
    codec: CreatePartitionsApi,
    request: { topics: [{ name: 't', count: 4, assignments: [{ brokerIds: [0] }] }], timeoutMs: 5000, validateOnly: true } satisfies CreatePartitionsRequest,
    response: { throttleTimeMs: 1, results: [{ name: 't', errorCode: 37, errorMessage: 'fewer' }] } satisfies CreatePartitionsResponse,
  },
  {
    codec: DeleteRecordsApi,
    request: { topics: [{ name: 't', partitions: [{ partitionIndex: 0, offset: 10 }] }], timeoutMs: 5000 } satisfies DeleteRecordsRequest,
    response: {
      throttleTimeMs: 1,
      topics: [{ name: 't', partitions: [{ partitionIndex: 0, lowWatermark: 10, errorCode: 0 }] }],
    } satisfies DeleteRecordsResponse,
  },
  {
    codec: DescribeConfigsApi,
    request: {
      resources: [{ resourceType: 2, resourceName: 't', configurationKeys: ['retention.ms'] }],
      includeSynonyms: true,
      includeDocumentation: true,
    } satisfies DescribeConfigsRequest,
    response: {
      throttleTimeMs: 1,
      results: [
        {
          errorCode: 0,
          errorMessage: null,
          resourceType: 2,
          resourceName: 't',
          configs: [
            {
              name: 'retention.ms',
              value: '1000',
              readOnly: false,
              isDefault: false,
              configSource: 1,
              isSensitive: false,
              synonyms: [{ name: 'retention.ms', value: '1000', source: 1 }],
              configType: 5,
              documentation: 'doc',
            },
          ],
        },
      ],
    } satisfies DescribeConfigsResponse,
  },
  {
    codec: AlterConfigsApi,
    request: {
      resources: [{ resourceType: 2, resourceName: 't', configs: [{ name: 'retention.ms', value: '1000' }] }],
      validateOnly: true,
    } satisfies AlterConfigsRequest,
    response: { throttleTimeMs: 1, responses: [{ errorCode: 40, errorMessage: 'bad', resourceType: 2, resourceName: 't' }] } satisfies AlterConfigsResponse,
  },
  {
    codec: IncrementalAlterConfigsApi,
    request: {
      resources: [{ resourceType: 2, resourceName: 't', configs: [{ name: 'retention.ms', configOperation: 1, value: null }] }],
      validateOnly: false,
    } satisfies IncrementalAlterConfigsRequest,
    response: { throttleTimeMs: 1, responses: [{ errorCode: 0, errorMessage: null, resourceType: 2, resourceName: 't' }] },
  },
  {
    codec: InitProducerIdApi,
    request: { transactionalId: 'tx', transactionTimeoutMs: 60000, producerId: 5, producerEpoch: 2 } satisfies InitProducerIdRequest,
    response: { throttleTimeMs: 1, errorCode: 0, producerId: 2 ** 40, producerEpoch: 3 } satisfies InitProducerIdResponse,
  },
  {
    codec: SaslHandshakeApi,
    request: { mechanism: 'PLAIN' } satisfies SaslHandshakeRequest,
    response: { errorCode: 0, mechanisms: ['PLAIN', 'SCRAM-SHA-256'] } satisfies SaslHandshakeResponse,
  },
  {
    codec: SaslAuthenticateApi,
    request: { authBytes: b('\u0000u\u0000p') } satisfies SaslAuthenticateRequest,
    response: { errorCode: 58, errorMessage: 'nope', authBytes: b('x'), sessionLifetimeMs: 1000 } satisfies SaslAuthenticateResponse,
  },
  {
    codec: DescribeClusterApi,
    request: { includeClusterAuthorizedOperations: true, endpointType: 2, includeFencedBrokers: true } satisfies DescribeClusterRequest,
    response: {
      throttleTimeMs: 1,
      errorCode: 0,
      errorMessage: null,
      endpointType: 2,
      clusterId: 'flowmq',
      controllerId: 0,
      brokers: [{ brokerId: 0, host: 'h', port: 9092, rack: 'r', isFenced: true }],
      clusterAuthorizedOperations: 5,
    } satisfies DescribeClusterResponse,
  },
  {
    codec: OffsetForLeaderEpochApi,
    request: {
      replicaId: -1,
      topics: [{ topic: 't', partitions: [{ partition: 0, currentLeaderEpoch: 0, leaderEpoch: 0 }] }],
    } satisfies OffsetForLeaderEpochRequest,
    response: {
      throttleTimeMs: 1,
      topics: [{ topic: 't', partitions: [{ errorCode: 0, partition: 0, leaderEpoch: 0, endOffset: 99 }] }],
    } satisfies OffsetForLeaderEpochResponse,
  },
  {
    codec: DescribeAclsApi,
    request: {
      resourceTypeFilter: 2,
      resourceNameFilter: 'orders',
      patternTypeFilter: 4,
      principalFilter: 'User:alice',
      hostFilter: null,
      operation: 1,
      permissionType: 1,
    } satisfies DescribeAclsRequest,
    response: {
      throttleTimeMs: 3,
      errorCode: 0,
      errorMessage: null,
      resources: [
        { resourceType: 2, resourceName: 'orders-', patternType: 4, acls: [{ principal: 'User:alice', host: '*', operation: 3, permissionType: 3 }] },
      ],
    } satisfies DescribeAclsResponse,
  },
  {
    codec: CreateAclsApi,
    request: {
      creations: [
        { resourceType: 2, resourceName: 'orders', resourcePatternType: 3, principal: 'User:alice', host: '*', operation: 4, permissionType: 3 },
        { resourceType: 3, resourceName: 'app-', resourcePatternType: 4, principal: 'User:*', host: '*', operation: 3, permissionType: 2 },
      ],
    } satisfies CreateAclsRequest,
    response: {
      throttleTimeMs: 0,
      results: [
        { errorCode: 0, errorMessage: null },
        { errorCode: 42, errorMessage: 'host-based ACLs are not supported' },
      ],
    } satisfies CreateAclsResponse,
  },
  {
    codec: DeleteAclsApi,
    request: {
      filters: [
        {
          resourceTypeFilter: 1,
          resourceNameFilter: null,
          patternTypeFilter: 1,
          principalFilter: 'User:bob',
          hostFilter: '*',
          operation: 1,
          permissionType: 1,
        },
      ],
    } satisfies DeleteAclsRequest,
    response: {
      throttleTimeMs: 0,
      filterResults: [
        {
          errorCode: 0,
          errorMessage: null,
          matchingAcls: [
            {
              errorCode: 0,
              errorMessage: null,
              resourceType: 2,
              resourceName: 'orders',
              patternType: 3,
              principal: 'User:bob',
              host: '*',
              operation: 2,
              permissionType: 3,
            },
          ],
        },
      ],
    } satisfies DeleteAclsResponse,
  },
  {
    codec: ConsumerGroupHeartbeatApi,
    request: {
      groupId: 'g',
      memberId: 'm',
      memberEpoch: 3,
      instanceId: 'i',
      rackId: 'r',
      rebalanceTimeoutMs: 30000,
      subscribedTopicNames: ['t1', 't2'],
      subscribedTopicRegex: '(^t.*)',
      serverAssignor: 'range',
      topicPartitions: [{ topicId: TOPIC_ID, partitions: [0, 2] }],
    } satisfies ConsumerGroupHeartbeatRequest,
    response: {
      throttleTimeMs: 0,
      errorCode: 0,
      errorMessage: null,
      memberId: 'm',
      memberEpoch: 4,
      heartbeatIntervalMs: 5000,
      assignment: { topicPartitions: [{ topicId: TOPIC_ID, partitions: [1] }] },
    } satisfies ConsumerGroupHeartbeatResponse,
  },
  {
    codec: ConsumerGroupDescribeApi,
    request: { groupIds: ['g'], includeAuthorizedOperations: true } satisfies ConsumerGroupDescribeRequest,
    response: {
      throttleTimeMs: 0,
      groups: [
        {
          errorCode: 0,
          errorMessage: null,
          groupId: 'g',
          groupState: 'Stable',
          groupEpoch: 4,
          assignmentEpoch: 4,
          assignorName: 'uniform',
          members: [
            {
              memberId: 'm',
              instanceId: null,
              rackId: 'r',
              memberEpoch: 4,
              clientId: 'c',
              clientHost: '/127.0.0.1',
              subscribedTopicNames: ['t'],
              subscribedTopicRegex: null,
              assignment: { topicPartitions: [{ topicId: TOPIC_ID, topicName: 't', partitions: [0, 1] }] },
              targetAssignment: { topicPartitions: [{ topicId: TOPIC_ID, topicName: 't', partitions: [0] }] },
              memberType: 1,
            },
          ],
          authorizedOperations: 8,
        },
      ],
    } satisfies ConsumerGroupDescribeResponse,
  },
  {
    codec: DescribeLogDirsApi,
    request: { topics: [{ topic: 't', partitions: [0, 3] }] } satisfies DescribeLogDirsRequest,
    response: {
      throttleTimeMs: 2,
      errorCode: 31,
      results: [
        {
          errorCode: 0,
          logDir: '/var/lib/flowmq',
          topics: [{ name: 't', partitions: [{ partitionIndex: 3, partitionSize: 2 ** 33, offsetLag: 4, isFutureKey: true }] }],
          totalBytes: 2 ** 40,
          usableBytes: 2 ** 39,
        },
      ],
    } satisfies DescribeLogDirsResponse,
  },
  {
    codec: ElectLeadersApi,
    request: { electionType: 1, topicPartitions: [{ topic: 't', partitions: [1, 2] }], timeoutMs: 5000 } satisfies ElectLeadersRequest,
    response: {
      throttleTimeMs: 3,
      errorCode: 41,
      replicaElectionResults: [{ topic: 't', partitionResult: [{ partitionId: 1, errorCode: 84, errorMessage: 'none needed' }] }],
    } satisfies ElectLeadersResponse,
  },
  {
    codec: OffsetDeleteApi,
    request: { groupId: 'g', topics: [{ name: 't', partitions: [{ partitionIndex: 2 }] }] } satisfies OffsetDeleteRequest,
    response: {
      errorCode: 69,
      throttleTimeMs: 4,
      topics: [{ name: 't', partitions: [{ partitionIndex: 2, errorCode: 86 }] }],
    } satisfies OffsetDeleteResponse,
  },
  {
    codec: DescribeProducersApi,
    request: { topics: [{ name: 't', partitionIndexes: [0, 5] }] } satisfies DescribeProducersRequest,
    response: {
      throttleTimeMs: 5,
      topics: [
        {
          name: 't',
          partitions: [
            {
              partitionIndex: 5,
              errorCode: 3,
              errorMessage: 'm',
              activeProducers: [
                { producerId: 2 ** 40, producerEpoch: 7, lastSequence: 99, lastTimestamp: 1700000000000, coordinatorEpoch: 2, currentTxnStartOffset: 12 },
              ],
            },
          ],
        },
      ],
    } satisfies DescribeProducersResponse,
  },
  {
    codec: DescribeClientQuotasApi,
    request: { components: [{ entityType: 'user', matchType: 2, match: 'alice' }], strict: true } satisfies DescribeClientQuotasRequest,
    response: {
      throttleTimeMs: 6,
      errorCode: 0,
      errorMessage: 'm',
      entries: [{ entity: [{ entityType: 'user', entityName: 'alice' }], values: [{ key: 'producer_byte_rate', value: 1048576.5 }] }],
    } satisfies DescribeClientQuotasResponse,
  },
  {
    codec: AlterClientQuotasApi,
    request: {
      entries: [{ entity: [{ entityType: 'client-id', entityName: null }], ops: [{ key: 'consumer_byte_rate', value: 2.5, remove: true }] }],
      validateOnly: true,
    } satisfies AlterClientQuotasRequest,
    response: {
      throttleTimeMs: 7,
      entries: [{ errorCode: 42, errorMessage: 'bad key', entity: [{ entityType: 'client-id', entityName: null }] }],
    } satisfies AlterClientQuotasResponse,
  },
  {
    codec: DescribeUserScramCredentialsApi,
    request: { users: [{ name: 'alice' }, { name: 'bob' }] } satisfies DescribeUserScramCredentialsRequest,
    response: {
      throttleTimeMs: 8,
      errorCode: 0,
      errorMessage: 'm',
      results: [{ user: 'alice', errorCode: 91, errorMessage: 'none', credentialInfos: [{ mechanism: 2, iterations: 8192 }] }],
    } satisfies DescribeUserScramCredentialsResponse,
  },
  {
    codec: AlterUserScramCredentialsApi,
    request: {
      deletions: [{ name: 'bob', mechanism: 1 }],
      upsertions: [{ name: 'alice', mechanism: 2, iterations: 8192, salt: b('salt'), saltedPassword: b('salted') }],
    } satisfies AlterUserScramCredentialsRequest,
    response: { throttleTimeMs: 9, results: [{ user: 'alice', errorCode: 0, errorMessage: 'm' }] } satisfies AlterUserScramCredentialsResponse,
  },
  {
    codec: AddPartitionsToTxnApi,
    request: { transactionalId: 'tx', producerId: 2 ** 40, producerEpoch: 3, topics: [{ name: 't', partitions: [0, 7] }] } satisfies AddPartitionsToTxnRequest,
    response: { throttleTimeMs: 1, results: [{ name: 't', results: [{ partitionIndex: 7, errorCode: 48 }] }] } satisfies AddPartitionsToTxnResponse,
  },
  {
    codec: AddOffsetsToTxnApi,
    request: { transactionalId: 'tx', producerId: 9, producerEpoch: 2, groupId: 'g' } satisfies AddOffsetsToTxnRequest,
    response: { throttleTimeMs: 2, errorCode: 51 } satisfies AddOffsetsToTxnResponse,
  },
  {
    codec: EndTxnApi,
    request: { transactionalId: 'tx', producerId: 9, producerEpoch: 2, committed: true } satisfies EndTxnRequest,
    response: { throttleTimeMs: 3, errorCode: 90 } satisfies EndTxnResponse,
  },
  {
    codec: TxnOffsetCommitApi,
    request: {
      transactionalId: 'tx',
      groupId: 'g',
      producerId: 9,
      producerEpoch: 2,
      generationId: 4,
      memberId: 'm-1',
      groupInstanceId: 'i-1',
      topics: [{ name: 't', partitions: [{ partitionIndex: 1, committedOffset: 42, committedLeaderEpoch: 5, committedMetadata: 'md' }] }],
    } satisfies TxnOffsetCommitRequest,
    response: { throttleTimeMs: 4, topics: [{ name: 't', partitions: [{ partitionIndex: 1, errorCode: 47 }] }] } satisfies TxnOffsetCommitResponse,
  },
  {
    codec: DescribeTransactionsApi,
    request: { transactionalIds: ['tx', 'ty'] } satisfies DescribeTransactionsRequest,
    response: {
      throttleTimeMs: 5,
      transactionStates: [
        {
          errorCode: 0,
          transactionalId: 'tx',
          transactionState: 'Ongoing',
          transactionTimeoutMs: 60000,
          transactionStartTimeMs: 1700000000000,
          producerId: 2 ** 40,
          producerEpoch: 3,
          topics: [{ topic: 't', partitions: [0, 2] }],
        },
      ],
    } satisfies DescribeTransactionsResponse,
  },
  {
    codec: ListTransactionsApi,
    request: { stateFilters: ['Ongoing'], producerIdFilters: [2 ** 40], durationFilter: 1000 } satisfies ListTransactionsRequest,
    response: {
      throttleTimeMs: 6,
      errorCode: 0,
      unknownStateFilters: ['Bogus'],
      transactionStates: [{ transactionalId: 'tx', producerId: 2 ** 40, transactionState: 'CompleteCommit' }],
    } satisfies ListTransactionsResponse,
  },
];
