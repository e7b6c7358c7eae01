/**
 * The APIs this broker answers. ApiVersions advertises exactly these, with their codecs' version ranges; adding
 * an API is one codec module plus one handler registered here.
 */
import {
  AlterClientQuotasApi,
  AlterUserScramCredentialsApi,
  DescribeClientQuotasApi,
  DescribeLogDirsApi,
  DescribeProducersApi,
  DescribeUserScramCredentialsApi,
  ElectLeadersApi,
  OffsetDeleteApi,
  AlterConfigsApi,
  ApiVersionsApi,
  CreateAclsApi,
  DeleteAclsApi,
  DescribeAclsApi,
  CreatePartitionsApi,
  CreateTopicsApi,
  DeleteRecordsApi,
  DeleteTopicsApi,
  DescribeClusterApi,
  DescribeConfigsApi,
  IncrementalAlterConfigsApi,
  InitProducerIdApi,
  OffsetForLeaderEpochApi,
  DeleteGroupsApi,
  DescribeGroupsApi,
  FetchApi,
  FindCoordinatorApi,
  HeartbeatApi,
  JoinGroupApi,
  LeaveGroupApi,
  ListGroupsApi,
  ListOffsetsApi,
  MetadataApi,
  OffsetCommitApi,
  OffsetFetchApi,
  ProduceApi,
  SaslAuthenticateApi,
  SaslHandshakeApi,
  SyncGroupApi,
  ConsumerGroupHeartbeatApi,
  ConsumerGroupDescribeApi,
  AddPartitionsToTxnApi,
  AddOffsetsToTxnApi,
  EndTxnApi,
  TxnOffsetCommitApi,
  DescribeTransactionsApi,
  ListTransactionsApi,
} from './codec/index.js';
import {
  handleAlterConfigs,
  handleCreatePartitions,
  handleCreateTopics,
  handleDeleteRecords,
  handleDeleteTopics,
  handleDescribeCluster,
  handleDescribeConfigs,
  handleIncrementalAlterConfigs,
  handleOffsetForLeaderEpoch,
} from './handlers/admin.js';
import { handleApiVersions } from './handlers/api-versions.js';
import { handleDescribeLogDirs, handleDescribeProducers, handleElectLeaders } from './handlers/partition-ops.js';
import { handleOffsetDelete } from './handlers/offset-delete.js';
import { handleAlterClientQuotas, handleDescribeClientQuotas } from './handlers/quotas.js';
import { handleAlterUserScramCredentials, handleDescribeUserScramCredentials } from './handlers/scram.js';
import { handleCreateAcls, handleDeleteAcls, handleDescribeAcls } from './handlers/acls.js';
import { handleInitProducerId } from './handlers/producer.js';
import { handleFetch } from './handlers/fetch.js';
import {
  handleAddOffsetsToTxn,
  handleAddPartitionsToTxn,
  handleDescribeTransactions,
  handleEndTxn,
  handleListTransactions,
  handleTxnOffsetCommit,
} from './handlers/transactions.js';
import {
  handleDeleteGroups,
  handleDescribeGroups,
  handleFindCoordinator,
  handleHeartbeat,
  handleJoinGroup,
  handleLeaveGroup,
  handleListGroups,
  handleOffsetCommit,
  handleOffsetFetch,
  handleSyncGroup,
} from './handlers/groups.js';
import { handleConsumerGroupDescribe, handleConsumerGroupHeartbeat } from './handlers/consumer-groups.js';
import { handleListOffsets } from './handlers/list-offsets.js';
import { handleMetadata } from './handlers/metadata.js';
import { handleProduce } from './handlers/produce.js';
import { route, type Route } from './route.js';
import { handleSaslAuthenticate, handleSaslHandshake } from './sasl.js';

export const KAFKA_ROUTES: readonly Route[] = [
  route(ProduceApi, handleProduce),
  route(FetchApi, handleFetch),
  route(ListOffsetsApi, handleListOffsets),
  route(MetadataApi, handleMetadata),
  route(ApiVersionsApi, handleApiVersions),
  route(OffsetCommitApi, handleOffsetCommit),
  route(OffsetFetchApi, handleOffsetFetch),
  route(FindCoordinatorApi, handleFindCoordinator),
  route(JoinGroupApi, handleJoinGroup),
  route(HeartbeatApi, handleHeartbeat),
  route(LeaveGroupApi, handleLeaveGroup),
  route(SyncGroupApi, handleSyncGroup),
  route(DescribeGroupsApi, handleDescribeGroups),
  route(ListGroupsApi, handleListGroups),
  route(DeleteGroupsApi, handleDeleteGroups),
  route(ConsumerGroupHeartbeatApi, handleConsumerGroupHeartbeat),
  route(ConsumerGroupDescribeApi, handleConsumerGroupDescribe),
  route(CreateTopicsApi, handleCreateTopics),
  route(DeleteTopicsApi, handleDeleteTopics),
  route(DeleteRecordsApi, handleDeleteRecords),
  route(InitProducerIdApi, handleInitProducerId),
  route(OffsetForLeaderEpochApi, handleOffsetForLeaderEpoch),
  // Transactions (KIP-98) and their admin views (KIP-664).
  route(AddPartitionsToTxnApi, handleAddPartitionsToTxn),
  route(AddOffsetsToTxnApi, handleAddOffsetsToTxn),
  route(EndTxnApi, handleEndTxn),
  route(TxnOffsetCommitApi, handleTxnOffsetCommit),
  route(DescribeTransactionsApi, handleDescribeTransactions),
  route(ListTransactionsApi, handleListTransactions),
  route(DescribeConfigsApi, handleDescribeConfigs),
  route(AlterConfigsApi, handleAlterConfigs),
  route(CreatePartitionsApi, handleCreatePartitions),
  route(IncrementalAlterConfigsApi, handleIncrementalAlterConfigs),
  route(DescribeClusterApi, handleDescribeCluster),
  route(DescribeAclsApi, handleDescribeAcls),
  route(CreateAclsApi, handleCreateAcls),
  route(DeleteAclsApi, handleDeleteAcls),
  // Operations APIs of admin tools and UIs.
  route(DescribeLogDirsApi, handleDescribeLogDirs),
  route(ElectLeadersApi, handleElectLeaders),
  route(OffsetDeleteApi, handleOffsetDelete),
  route(DescribeProducersApi, handleDescribeProducers),
  // Advertised only with access control (a user directory, enforced quotas): see KafkaAdapter.
  route(DescribeClientQuotasApi, handleDescribeClientQuotas),
  route(AlterClientQuotasApi, handleAlterClientQuotas),
  route(DescribeUserScramCredentialsApi, handleDescribeUserScramCredentials),
  route(AlterUserScramCredentialsApi, handleAlterUserScramCredentials),
  // Advertised only when the adapter has SASL options (see KafkaAdapter).
  route(SaslHandshakeApi, handleSaslHandshake),
  route(SaslAuthenticateApi, handleSaslAuthenticate),
];
