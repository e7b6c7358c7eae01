/**
 * Authorization of Kafka requests against the control plane's policies (the mapping is in docs/kafka.md's table):
 * Produce → `publish stream:`, Fetch/ListOffsets/OffsetForLeaderEpoch → `subscribe stream:`, Metadata and
 * DescribeConfigs → `describe stream:`, topic creation → `create stream:` (or `create cluster:*`, Kafka's cluster
 * CREATE), DeleteTopics/DeleteRecords → `delete stream:`, CreatePartitions/AlterConfigs → `alter stream:`, the
 * group APIs → `subscribe group:` (DescribeGroups/ListGroups/ConsumerGroupDescribe `describe group:`, DeleteGroups
 * `delete group:`; ConsumerGroupHeartbeat also `describe stream:` per subscribed topic name),
 * DescribeCluster/DescribeAcls/DescribeLogDirs, broker configs, client quotas and SCRAM credentials described →
 * `describe cluster:*`; CreateAcls/DeleteAcls, ElectLeaders, broker configs, client quotas and SCRAM credentials
 * altered → `alter cluster:*`; OffsetDelete → `delete group:` (and `subscribe stream:` per topic),
 * DescribeProducers → `subscribe stream:`; a transactional id (Kafka's TRANSACTIONAL_ID resource) → `publish
 * transactional-id:` for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn and a
 * transactional Produce, `describe transactional-id:` (or publish, which implies it as Kafka's WRITE implies
 * DESCRIBE) for FindCoordinator of a transaction, DescribeTransactions and ListTransactions' filter. A refusal is
 * the protocol's own error code: TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
 *
 * Checks go through the connection's Access, whose verdicts are cached per directory version: a policy changed
 * live applies to the next request of an open connection. Without access control everything is allowed.
 */
import type { Action, ResourceKind } from '../../control/index.js';
import { kafkaToUnified } from '../../core/index.js';
import type { RequestContext } from './route.js';

/** May this connection do `action` on the resource? A denial is logged (rate-limited) by the control plane. */
export function allowed(ctx: RequestContext, action: Action, kind: ResourceKind, name: string): boolean {
  const a = ctx.conn.access;
  return a === null || a.can(action, kind, policyName(ctx, kind, name));
}

/**
 * Handlers name streams, groups and transactional ids as the core knows them (route.ts qualified them); a
 * namespace's policies name them as its clients do (core namespaces.ts).
 */
function policyName(ctx: RequestContext, kind: ResourceKind, name: string): string {
  const n = ctx.conn.names;
  if (n.isDefault) return name;
  if (kind === 'stream') return n.kafkaOwnStream(name) ?? name;
  if (kind === 'group' || kind === 'transactional-id') return n.kafkaOwnName(name) ?? name;
  return name;
}

/**
 * The same question for filtering a list (Metadata of all topics, ListGroups, OffsetFetch of all topics): what is
 * left out is not a request the client made, so it is not logged as a denial.
 */
export function visible(ctx: RequestContext, action: Action, kind: ResourceKind, name: string): boolean {
  const a = ctx.conn.access;
  if (a === null || a.open) return true;
  const ac = ctx.adapter.options.access;
  return ac === undefined || ac.allows(a.principal, action, kind, policyName(ctx, kind, name), a.names);
}

/**
 * Creating a topic: `create stream:<name>`, or `create cluster:*` (Kafka's CREATE on the cluster); and, since the
 * stream binds its own topic (it captures what MQTT, AMQP and NATS publish there), no subscribe deny on that topic
 * (Access.mayCapture): a principal denied `topic:secret/#` cannot make a stream `secret.x` collect it, while Kafka
 * ACLs, which name topics as `stream:`, need no `topic:` policy.
 */
export function mayCreateTopic(ctx: RequestContext, name: string): boolean {
  if (!(visible(ctx, 'create', 'cluster', '*') || allowed(ctx, 'create', 'stream', name))) return false;
  const a = ctx.conn.access;
  return a === null || a.mayCapture(kafkaToUnified(policyName(ctx, 'stream', name)));
}

/** Kafka's cluster resource name (ACLs, DescribeConfigs of the cluster). */
export const CLUSTER_NAME = 'kafka-cluster';

/** May this connection use the transactional id (Kafka's WRITE on TRANSACTIONAL_ID)? */
export function mayUseTransactionalId(ctx: RequestContext, id: string): boolean {
  return allowed(ctx, 'publish', 'transactional-id', id);
}

/**
 * May it describe the transactional id (Kafka's DESCRIBE, implied by WRITE)? `quiet`: for filtering a list, where
 * what is left out is no denial.
 */
export function mayDescribeTransactionalId(ctx: RequestContext, id: string, quiet = false): boolean {
  if (visible(ctx, 'describe', 'transactional-id', id) || visible(ctx, 'publish', 'transactional-id', id)) return true;
  return !quiet && allowed(ctx, 'describe', 'transactional-id', id);
}
