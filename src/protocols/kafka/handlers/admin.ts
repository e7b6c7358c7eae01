/**
 * Topic administration and cluster description: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords,
 * DescribeCluster, OffsetForLeaderEpoch (the config APIs are in configs.ts).
 *
 * A topic is a stream (CreateTopics = engine.createStream, binding its own name), so topics created here are
 * seen by every protocol, and streams created elsewhere (CLI, admin API, other protocols) are topics here.
 * Every partition has one replica, its leader (durability comes from the write-ahead log): a replication factor
 * other than 1 (or -1, "the default", KIP-464) is refused, and so is an assignment naming a broker that is not one
 * of the cluster's (on a single broker: not this one). In a cluster, DescribeCluster names every live broker.
 */
import { isQualifiedStream, isValidInternalStreamName, type StreamDef } from '../../../core/index.js';
import {
  KafkaErrorCode,
  ZERO_UUID,
  type Uuid,
  type CreatePartitionsRequest,
  type CreatePartitionsResponse,
  type CreateTopicsRequest,
  type CreateTopicsResponse,
  type DeleteRecordsRequest,
  type DeleteRecordsResponse,
  type DeleteTopicsRequest,
  type DeleteTopicsResponse,
  type DescribeClusterRequest,
  type DescribeClusterResponse,
  type OffsetForLeaderEpochRequest,
  type OffsetForLeaderEpochResponse,
} from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import type { RequestContext } from '../route.js';
import { streamByTopicId, topicIdOf } from '../topic-ids.js';
import { LEADER_EPOCH, brokerList } from './metadata.js';
import { allowed, mayCreateTopic } from '../authz.js';
import type { KafkaCluster } from '../cluster.js';
import { ConfigProblem, checkedConfigs, problem, settingsOf, topicConfigList } from './configs.js';
export { handleAlterConfigs, handleDescribeConfigs, handleIncrementalAlterConfigs } from './configs.js';

const TOPIC_DENIED = KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED;
const CLUSTER_DENIED = KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED;

const OPS_OMITTED = -2147483648;

// ------------------------------------------------------------------------------------------------ CreateTopics

export async function handleCreateTopics(ctx: RequestContext, req: CreateTopicsRequest): Promise<CreateTopicsResponse> {
  const { engine, options } = ctx.adapter;
  const counts = new Map<string, number>();
  for (const t of req.topics) counts.set(t.name, (counts.get(t.name) ?? 0) + 1);
  const topics = [];
  for (const t of req.topics) {
    const res = {
      name: t.name,
      topicId: ZERO_UUID as Uuid,
      errorCode: KafkaErrorCode.NONE,
      errorMessage: null as string | null,
      numPartitions: -1,
      replicationFactor: -1,
      configs: null as CreateTopicsResponse['topics'][number]['configs'],
    };
    topics.push(res);
    try {
      if ((counts.get(t.name) ?? 0) > 1) throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `topic "${t.name}" appears more than once`);
      if (!mayCreateTopic(ctx, t.name)) throw new ConfigProblem(TOPIC_DENIED, `not authorized to create topic "${t.name}"`);
      if (!isValidInternalStreamName(t.name)) {
        throw new ConfigProblem(KafkaErrorCode.INVALID_TOPIC_EXCEPTION, `invalid topic name "${t.name}": use 1-249 of [a-zA-Z0-9._-]`);
      }
      if (engine.getAnyStream(t.name)) throw new ConfigProblem(KafkaErrorCode.TOPIC_ALREADY_EXISTS, `topic "${t.name}" already exists`);
      let partitions: number;
      if (t.assignments.length > 0) {
        // Kafka: with a manual assignment, partitions and replication factor must be left at -1.
        if (t.numPartitions !== -1 || t.replicationFactor !== -1) {
          throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, 'give either an assignment or partitions and replication factor');
        }
        const indexes = t.assignments.map((a) => a.partitionIndex).sort((a, b) => a - b);
        if (indexes.some((p, i) => p !== i)) throw new ConfigProblem(KafkaErrorCode.INVALID_REPLICA_ASSIGNMENT, 'partitions must be numbered 0..n-1');
        checkAssignments(ctx, t.assignments);
        partitions = t.assignments.length;
      } else {
        partitions = t.numPartitions === -1 ? options.defaultPartitions : t.numPartitions;
        if (!Number.isInteger(partitions) || partitions < 1)
          throw new ConfigProblem(KafkaErrorCode.INVALID_PARTITIONS, `invalid number of partitions ${t.numPartitions}`);
        if (t.replicationFactor !== -1 && t.replicationFactor !== 1) {
          throw new ConfigProblem(
            KafkaErrorCode.INVALID_REPLICATION_FACTOR,
            `replication factor ${t.replicationFactor} is not possible: one broker, durability comes from the write-ahead log`,
          );
        }
      }
      const settings = settingsOf(checkedConfigs(t.configs, false));
      let def: StreamDef = { name: t.name, partitions, bindings: [], createdAt: Date.now(), ...settings };
      if (!req.validateOnly) {
        def = await engine.createStream({ name: t.name, partitions, ...settings, namespaced: isQualifiedStream(t.name) });
        res.topicId = topicIdOf(def);
        ctx.conn.log.info(
          { topic: t.name, partitions, configs: t.configs.length > 0 ? Object.fromEntries(t.configs.map((c) => [c.name, c.value])) : undefined },
          'topic created',
        );
      }
      res.numPartitions = partitions;
      res.replicationFactor = 1;
      res.configs = topicConfigList(def, ctx);
    } catch (err) {
      Object.assign(res, problem(err));
    }
  }
  return { throttleTimeMs: 0, topics };
}

// ------------------------------------------------------------------------------------------------ DeleteTopics

export async function handleDeleteTopics(ctx: RequestContext, req: DeleteTopicsRequest): Promise<DeleteTopicsResponse> {
  const v = ctx.header.apiVersion;
  const wanted = v >= 6 ? req.topics.map((t) => ({ name: t.name, topicId: t.topicId })) : req.topicNames.map((name) => ({ name, topicId: ZERO_UUID }));
  const responses = [];
  for (const t of wanted) {
    const res = { name: t.name, topicId: t.topicId, errorCode: KafkaErrorCode.NONE as number, errorMessage: null as string | null };
    responses.push(res);
    // v6+: a topic by its id (KIP-516), or by its name; not both.
    const byId = !t.topicId.equals(ZERO_UUID);
    if (byId && t.name !== null) {
      res.errorCode = KafkaErrorCode.INVALID_REQUEST;
      res.errorMessage = 'topic name and topic id can not both be specified';
      continue;
    }
    if (byId) {
      const entry = streamByTopicId(ctx.adapter.engine, t.topicId);
      if (entry === undefined) {
        res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_ID;
        continue;
      }
      // Ids are not secret, names are: a client that may not describe the topic is not told its name.
      if (!allowed(ctx, 'describe', 'stream', entry.def.name)) {
        res.errorCode = TOPIC_DENIED;
        continue;
      }
      res.name = entry.def.name;
    }
    if (res.name === null) {
      res.errorCode = KafkaErrorCode.INVALID_REQUEST;
      res.errorMessage = 'topic name or topic id required';
      continue;
    }
    t.name = res.name;
    if (!allowed(ctx, 'delete', 'stream', t.name)) {
      res.errorCode = TOPIC_DENIED;
      res.errorMessage = `not authorized to delete topic "${t.name}"`;
      continue;
    }
    try {
      const entryBefore = ctx.adapter.engine.getAnyStream(t.name);
      if (!entryBefore) {
        res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION;
        continue;
      }
      await ctx.adapter.engine.deleteStream(t.name);
      if (v >= 6) res.topicId = topicIdOf(entryBefore!.def);
      ctx.conn.log.info({ topic: t.name }, 'topic deleted');
    } catch (err) {
      Object.assign(res, problem(err));
    }
  }
  return { throttleTimeMs: 0, responses };
}

// ------------------------------------------------------------------------------------------------ CreatePartitions

export async function handleCreatePartitions(ctx: RequestContext, req: CreatePartitionsRequest): Promise<CreatePartitionsResponse> {
  const { engine } = ctx.adapter;
  const counts = new Map<string, number>();
  for (const t of req.topics) counts.set(t.name, (counts.get(t.name) ?? 0) + 1);
  const results = [];
  for (const t of req.topics) {
    const res = { name: t.name, errorCode: KafkaErrorCode.NONE as number, errorMessage: null as string | null };
    results.push(res);
    try {
      if ((counts.get(t.name) ?? 0) > 1) throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `topic "${t.name}" appears more than once`);
      if (!allowed(ctx, 'alter', 'stream', t.name)) throw new ConfigProblem(TOPIC_DENIED, `not authorized to alter topic "${t.name}"`);
      const entry = engine.getAnyStream(t.name);
      if (!entry) throw new ConfigProblem(KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, `topic "${t.name}" does not exist`);
      const current = entry.def.partitions;
      if (t.count <= current) {
        throw new ConfigProblem(KafkaErrorCode.INVALID_PARTITIONS, `topic "${t.name}" has ${current} partitions; the count can only grow`);
      }
      if (t.assignments !== null) {
        if (t.assignments.length !== t.count - current) {
          throw new ConfigProblem(KafkaErrorCode.INVALID_REPLICA_ASSIGNMENT, `give an assignment for each of the ${t.count - current} new partitions`);
        }
        checkAssignments(ctx, t.assignments);
      }
      if (!req.validateOnly) {
        await engine.addPartitions(t.name, t.count);
        ctx.conn.log.info({ topic: t.name, from: current, to: t.count }, 'partitions added');
      }
    } catch (err) {
      const p = problem(err);
      // The engine refuses counts beyond its maximum as invalid arguments: that is INVALID_PARTITIONS here.
      Object.assign(
        res,
        p.errorCode === KafkaErrorCode.INVALID_REQUEST && !(err instanceof ConfigProblem) ? { ...p, errorCode: KafkaErrorCode.INVALID_PARTITIONS } : p,
      );
    }
  }
  return { throttleTimeMs: 0, results };
}

// ------------------------------------------------------------------------------------------------ DeleteRecords

export async function handleDeleteRecords(ctx: RequestContext, req: DeleteRecordsRequest): Promise<DeleteRecordsResponse> {
  const { engine } = ctx.adapter;
  const topics = [];
  for (const t of req.topics) {
    const entry = engine.getAnyStream(t.name);
    const partitions = [];
    const authorized = allowed(ctx, 'delete', 'stream', t.name);
    for (const p of t.partitions) {
      const res = { partitionIndex: p.partitionIndex, lowWatermark: -1, errorCode: KafkaErrorCode.NONE as number };
      partitions.push(res);
      if (!authorized) {
        res.errorCode = TOPIC_DENIED;
        continue;
      }
      if (!entry || p.partitionIndex < 0 || p.partitionIndex >= entry.def.partitions) {
        res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION;
        continue;
      }
      // Cluster mode: sent to the partition's leader, as in Kafka.
      if (ctx.adapter.cluster !== null && ctx.adapter.cluster.leads(t.name, p.partitionIndex) === null) {
        res.errorCode = KafkaErrorCode.NOT_LEADER_OR_FOLLOWER;
        continue;
      }
      try {
        const { highWatermark } = engine.offsets(t.name, p.partitionIndex);
        // -1 means "up to the high watermark" (DeleteRecordsRequest.HIGH_WATERMARK).
        const offset = p.offset === -1 ? highWatermark : p.offset;
        if (offset < 0 || offset > highWatermark) {
          res.errorCode = KafkaErrorCode.OFFSET_OUT_OF_RANGE;
          continue;
        }
        res.lowWatermark = await engine.deleteRecords(t.name, p.partitionIndex, offset);
      } catch (err) {
        ctx.conn.log.warn({ err, topic: t.name, partition: p.partitionIndex }, 'delete records failed');
        res.errorCode = kafkaErrorCode(err);
      }
    }
    topics.push({ name: t.name, partitions });
  }
  return { throttleTimeMs: 0, topics };
}

// ------------------------------------------------------------------------------------------------ cluster

function describedBrokers(ctx: RequestContext): Pick<DescribeClusterResponse, 'controllerId' | 'brokers'> {
  const { brokers, controllerId } = brokerList(ctx);
  return { controllerId, brokers: brokers.map((b) => ({ brokerId: b.nodeId, host: b.host, port: b.port, rack: b.rack })) };
}

/**
 * A manual replica assignment (CreateTopics, CreatePartitions): one replica per partition (durability comes from
 * the write-ahead log), on a broker of the cluster. On a single broker that is this one. In a cluster any live
 * broker is accepted, but the assignment does not bind: placement (rendezvous hashing over the live brokers)
 * decides each partition's leader, and moves it when brokers join or die.
 */
function checkAssignments(ctx: RequestContext, assignments: Array<{ brokerIds: number[] }>): void {
  const { brokerId, cluster } = ctx.adapter;
  if (cluster === null) {
    if (assignments.some((a) => a.brokerIds.length !== 1 || a.brokerIds[0] !== brokerId)) {
      throw new ConfigProblem(KafkaErrorCode.INVALID_REPLICA_ASSIGNMENT, `this cluster has one broker (${brokerId}), the only replica of every partition`);
    }
    return;
  }
  const live = new Set(brokerList(ctx).brokers.map((b) => b.nodeId));
  for (const a of assignments) {
    if (a.brokerIds.length !== 1) {
      throw new ConfigProblem(
        KafkaErrorCode.INVALID_REPLICA_ASSIGNMENT,
        'one replica per partition: durability comes from the write-ahead log in shared storage',
      );
    }
    if (!live.has(a.brokerIds[0])) {
      throw new ConfigProblem(
        KafkaErrorCode.INVALID_REPLICA_ASSIGNMENT,
        `broker ${a.brokerIds[0]} is not a live broker of this cluster (${[...live].join(', ')})`,
      );
    }
  }
}

export function handleDescribeCluster(ctx: RequestContext, req: DescribeClusterRequest): DescribeClusterResponse {
  if (!allowed(ctx, 'describe', 'cluster', '*')) {
    return {
      throttleTimeMs: 0,
      errorCode: CLUSTER_DENIED,
      errorMessage: 'not authorized to describe the cluster',
      endpointType: req.endpointType,
      clusterId: '',
      controllerId: -1,
      brokers: [],
      clusterAuthorizedOperations: OPS_OMITTED,
    };
  }
  return {
    throttleTimeMs: 0,
    errorCode: KafkaErrorCode.NONE,
    errorMessage: null,
    endpointType: req.endpointType,
    clusterId: ctx.adapter.options.clusterId,
    // Every live broker in a cluster (the same list as Metadata).
    ...describedBrokers(ctx),
    clusterAuthorizedOperations: OPS_OMITTED,
  };
}

/**
 * OffsetForLeaderEpoch (KIP-101, KIP-320): the leader epoch never changes on a single broker (LEADER_EPOCH), so
 * the end offset of that epoch is the high watermark; a client that knows a newer epoch is ahead of us
 * (UNKNOWN_LEADER_EPOCH), and an epoch before ours has no offsets (-1, -1, as Kafka's UNDEFINED_EPOCH_OFFSET).
 *
 * In a cluster the leader epoch is the partition's ownership epoch, and the leader answers (see clusterEpochEnd).
 */
export function handleOffsetForLeaderEpoch(ctx: RequestContext, req: OffsetForLeaderEpochRequest): OffsetForLeaderEpochResponse {
  const { engine } = ctx.adapter;
  const kc = ctx.adapter.cluster;
  return {
    throttleTimeMs: 0,
    topics: req.topics.map((t) => {
      const entry = engine.getAnyStream(t.topic);
      const authorized = allowed(ctx, 'subscribe', 'stream', t.topic);
      return {
        topic: t.topic,
        partitions: t.partitions.map((p) => {
          const res = { errorCode: KafkaErrorCode.NONE as number, partition: p.partition, leaderEpoch: -1, endOffset: -1 };
          if (!authorized) res.errorCode = TOPIC_DENIED;
          else if (!entry || p.partition < 0 || p.partition >= entry.def.partitions) res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION;
          else if (kc !== null) clusterEpochEnd(ctx, kc, t.topic, p, res);
          else if (p.currentLeaderEpoch > LEADER_EPOCH) res.errorCode = KafkaErrorCode.UNKNOWN_LEADER_EPOCH;
          else if (p.leaderEpoch >= LEADER_EPOCH) {
            res.leaderEpoch = LEADER_EPOCH;
            res.endOffset = engine.offsets(t.topic, p.partition).highWatermark;
          }
          return res;
        }),
      };
    }),
  };
}

/**
 * OffsetForLeaderEpoch in a cluster. A change of leader moves the partition without copying or truncating
 * anything (the log is in shared storage and only acknowledged records were ever readable), so every epoch's
 * records are a prefix of the current log: the end offset of any epoch up to ours is answered with the high
 * watermark (an epoch past ours: ours, the last one), and a client validating its position after a leader change
 * (KIP-320) never sees a truncation. A stale or future currentLeaderEpoch is refused as in Fetch.
 */
function clusterEpochEnd(
  ctx: RequestContext,
  kc: KafkaCluster,
  topic: string,
  p: { partition: number; currentLeaderEpoch: number; leaderEpoch: number },
  res: { errorCode: number; leaderEpoch: number; endOffset: number },
): void {
  const served = kc.serve(topic, p.partition, p.currentLeaderEpoch);
  if (served.errorCode !== KafkaErrorCode.NONE) res.errorCode = served.errorCode;
  else if (p.leaderEpoch >= 0) {
    try {
      res.endOffset = ctx.adapter.engine.offsets(topic, p.partition).highWatermark;
      res.leaderEpoch = Math.min(p.leaderEpoch, served.epoch);
    } catch (err) {
      res.errorCode = kafkaErrorCode(err);
    }
  }
}
