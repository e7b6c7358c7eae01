/**
 * Topic administration and cluster description: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords,
 * DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, DescribeCluster, OffsetForLeaderEpoch.
 *
 * A topic is a stream (CreateTopics = engine.createStream, binding its own name), so topics created here are
 * seen by every protocol, and streams created elsewhere (CLI, admin API, other protocols) are topics here.
 * Every partition has one replica, its leader (durability comes from the write-ahead log): a replication factor
 * other than 1 (or -1, "the default", KIP-464) is refused, and so is an assignment naming a broker that is not one
 * of the cluster's (on a single broker: not this one). In a cluster, DescribeCluster names every live broker.
 */
import { isValidStreamName, type StreamDef, type StreamSettings } from '../../../core/index.js';
import {
  AlterConfigOp,
  ConfigResourceType,
  ConfigSource,
  ConfigType,
  KafkaErrorCode,
  ZERO_UUID,
  type Uuid,
  type AlterConfigsRequest,
  type AlterConfigsResponse,
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
  type DescribeConfigsRequest,
  type DescribeConfigsResponse,
  type DescribedConfig,
  type IncrementalAlterConfigsRequest,
  type IncrementalAlterConfigsResponse,
  type OffsetForLeaderEpochRequest,
  type OffsetForLeaderEpochResponse,
} from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import type { RequestContext } from '../route.js';
import { streamByTopicId, topicIdOf } from '../topic-ids.js';
import { LEADER_EPOCH, brokerList } from './metadata.js';
import { allowed, mayCreateTopic } from '../authz.js';
import type { KafkaCluster } from '../cluster.js';
import {
  TopicConfigError,
  applyTopicConfigs,
  checkTopicConfig,
  describeTopicConfigs,
  streamSettingsOf,
  topicConfigsOf,
} from '../topic-configs.js';

const TOPIC_DENIED = KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED;
const CLUSTER_DENIED = KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED;

const OPS_OMITTED = -2147483648;

/** A config error: the Kafka error code and a message for the client. */
class ConfigProblem extends Error {
  constructor(
    readonly errorCode: number,
    message: string,
  ) {
    super(message);
  }
}

function problem(err: unknown): { errorCode: number; errorMessage: string | null } {
  if (err instanceof ConfigProblem) return { errorCode: err.errorCode, errorMessage: err.message };
  return { errorCode: kafkaErrorCode(err), errorMessage: err instanceof Error ? err.message : null };
}

// ------------------------------------------------------------------------------------------------ topic configs

function brokerConfigs(ctx: RequestContext): Array<{ name: string; value: string; type: number; doc: string }> {
  const o = ctx.adapter.options;
  return [
    { name: 'broker.id', value: String(ctx.adapter.brokerId), type: ConfigType.INT, doc: 'This broker\'s id.' },
    { name: 'auto.create.topics.enable', value: String(o.autoCreateTopics), type: ConfigType.BOOLEAN, doc: '--kafka-auto-create-topics' },
    { name: 'num.partitions', value: String(o.defaultPartitions), type: ConfigType.INT, doc: '--kafka-default-partitions' },
    { name: 'default.replication.factor', value: '1', type: ConfigType.SHORT, doc: 'One replica: the write-ahead log.' },
    { name: 'offsets.topic.replication.factor', value: '1', type: ConfigType.SHORT, doc: 'Offsets are kept in the metastore.' },
    { name: 'min.insync.replicas', value: '1', type: ConfigType.INT, doc: 'One replica.' },
    { name: 'log.retention.ms', value: '-1', type: ConfigType.LONG, doc: 'Streams keep data forever unless given a retention.' },
    { name: 'log.retention.bytes', value: '-1', type: ConfigType.LONG, doc: 'No size bound unless a topic sets retention.bytes.' },
    { name: 'log.segment.bytes', value: String(o.logSegmentBytes), type: ConfigType.INT, doc: '--segment-bytes' },
    { name: 'log.roll.ms', value: String(o.logSegmentMs), type: ConfigType.LONG, doc: '--segment-ms' },
    { name: 'message.max.bytes', value: String(o.maxRequestBytes), type: ConfigType.INT, doc: 'The largest request.' },
    { name: 'group.min.session.timeout.ms', value: String(o.groupMinSessionTimeoutMs), type: ConfigType.INT, doc: 'Shortest session timeout accepted.' },
    { name: 'group.max.session.timeout.ms', value: String(o.groupMaxSessionTimeoutMs), type: ConfigType.INT, doc: 'Longest session timeout accepted.' },
    { name: 'group.initial.rebalance.delay.ms', value: String(o.groupInitialRebalanceDelayMs), type: ConfigType.INT, doc: 'Delay of the first rebalance of an empty group (KIP-134).' },
    { name: 'group.consumer.session.timeout.ms', value: String(o.consumerGroupSessionTimeoutMs), type: ConfigType.INT, doc: 'Consumer-protocol members (KIP-848) silent this long are removed.' },
    { name: 'group.consumer.heartbeat.interval.ms', value: String(o.consumerGroupHeartbeatIntervalMs), type: ConfigType.INT, doc: 'Heartbeat interval told to consumer-protocol members (KIP-848).' },
    { name: 'group.consumer.assignors', value: 'uniform,range', type: ConfigType.LIST, doc: 'Server-side assignors; the first is the default.' },
  ];
}

/** A config error of one topic or resource (the protocol has no per-config error): INVALID_CONFIG and why. */
function configProblem(err: unknown): never {
  if (err instanceof TopicConfigError) throw new ConfigProblem(err.errorCode, err.message);
  throw err;
}

/**
 * Checks the configs of a CreateTopics topic or an AlterConfigs resource (every entry: unknown names and invalid
 * values refuse the topic or resource, as in Kafka) and returns them by name. A null value is refused at creation
 * (Kafka: "Null value not supported for topic configs"); in AlterConfigs it leaves the config at its default.
 */
function checkedConfigs(configs: Array<{ name: string; value: string | null }>, nullAllowed: boolean): Map<string, string | null> {
  const out = new Map<string, string | null>();
  try {
    for (const c of configs) {
      if (c.value === null && !nullAllowed) throw new TopicConfigError(`null value for topic config "${c.name}"`);
      out.set(c.name, checkTopicConfig(c.name, c.value));
    }
  } catch (err) {
    configProblem(err);
  }
  return out;
}

/** Stream settings from configs given whole (CreateTopics, AlterConfigs): what is not named is at its default. */
function settingsOf(configs: Map<string, string | null>): StreamSettings {
  return streamSettingsOf(applyTopicConfigs(new Map(), configs));
}

function topicConfigList(def: StreamDef, ctx: RequestContext): Array<{ name: string; value: string | null; readOnly: boolean; configSource: number; isSensitive: boolean }> {
  return describeTopicConfigs(def, ctx.adapter.options, null, false, false).map((d) => ({
    name: d.name,
    value: d.value,
    readOnly: d.readOnly,
    configSource: d.configSource,
    isSensitive: d.isSensitive,
  }));
}

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
      if (!isValidStreamName(t.name)) {
        throw new ConfigProblem(KafkaErrorCode.INVALID_TOPIC_EXCEPTION, `invalid topic name "${t.name}": use 1-249 of [a-zA-Z0-9._-]`);
      }
      if (engine.getStream(t.name)) throw new ConfigProblem(KafkaErrorCode.TOPIC_ALREADY_EXISTS, `topic "${t.name}" already exists`);
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
        if (!Number.isInteger(partitions) || partitions < 1) throw new ConfigProblem(KafkaErrorCode.INVALID_PARTITIONS, `invalid number of partitions ${t.numPartitions}`);
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
        def = await engine.createStream({ name: t.name, partitions, ...settings });
        res.topicId = topicIdOf(def);
        ctx.conn.log.info({ topic: t.name, partitions, configs: t.configs.length > 0 ? Object.fromEntries(t.configs.map((c) => [c.name, c.value])) : undefined }, 'topic created');
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
      const entryBefore = ctx.adapter.engine.getStream(t.name);
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
      const entry = engine.getStream(t.name);
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
      Object.assign(res, p.errorCode === KafkaErrorCode.INVALID_REQUEST && !(err instanceof ConfigProblem) ? { ...p, errorCode: KafkaErrorCode.INVALID_PARTITIONS } : p);
    }
  }
  return { throttleTimeMs: 0, results };
}

// ------------------------------------------------------------------------------------------------ DeleteRecords

export async function handleDeleteRecords(ctx: RequestContext, req: DeleteRecordsRequest): Promise<DeleteRecordsResponse> {
  const { engine } = ctx.adapter;
  const topics = [];
  for (const t of req.topics) {
    const entry = engine.getStream(t.name);
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

// ------------------------------------------------------------------------------------------------ configs

export function handleDescribeConfigs(ctx: RequestContext, req: DescribeConfigsRequest): DescribeConfigsResponse {
  const results = req.resources.map((r) => {
    const base = { errorCode: KafkaErrorCode.NONE, errorMessage: null as string | null, resourceType: r.resourceType, resourceName: r.resourceName, configs: [] as DescribedConfig[] };
    // Null or empty: every config (Kafka's ConfigHelper).
    const wanted = (name: string): boolean => r.configurationKeys === null || r.configurationKeys.length === 0 || r.configurationKeys.includes(name);
    if (r.resourceType === ConfigResourceType.TOPIC) {
      if (!allowed(ctx, 'describe', 'stream', r.resourceName)) return { ...base, errorCode: TOPIC_DENIED, errorMessage: `not authorized to describe topic "${r.resourceName}"` };
      const entry = ctx.adapter.engine.getStream(r.resourceName);
      if (!entry) return { ...base, errorCode: KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, errorMessage: `topic "${r.resourceName}" does not exist` };
      base.configs = describeTopicConfigs(entry.def, ctx.adapter.options, r.configurationKeys, req.includeSynonyms, req.includeDocumentation);
      return base;
    }
    if (r.resourceType === ConfigResourceType.BROKER) {
      if (!allowed(ctx, 'describe', 'cluster', '*')) return { ...base, errorCode: CLUSTER_DENIED, errorMessage: 'not authorized to describe the cluster' };
      // "" is the cluster-wide default resource; otherwise it must name this broker.
      if (r.resourceName !== '' && r.resourceName !== String(ctx.adapter.brokerId)) {
        return { ...base, errorCode: KafkaErrorCode.INVALID_REQUEST, errorMessage: `broker ${r.resourceName} is not this broker` };
      }
      base.configs = brokerConfigs(ctx)
        .filter((c) => wanted(c.name))
        .map((c) => ({
          name: c.name,
          value: c.value,
          readOnly: true,
          isDefault: false,
          configSource: ConfigSource.STATIC_BROKER_CONFIG,
          isSensitive: false,
          synonyms: req.includeSynonyms ? [{ name: c.name, value: c.value, source: ConfigSource.STATIC_BROKER_CONFIG }] : [],
          configType: c.type,
          documentation: req.includeDocumentation ? c.doc : null,
        }));
      return base;
    }
    return { ...base, errorCode: KafkaErrorCode.INVALID_REQUEST, errorMessage: `config resource type ${r.resourceType} is not supported` };
  });
  return { throttleTimeMs: 0, results };
}

type AlterResult = AlterConfigsResponse['responses'][number];

/**
 * Alters one resource's configs: `compute` gets the topic's configs in force (by name) and returns the new full set
 * (throwing ConfigProblem to refuse the resource). Nothing is applied unless all of it is valid, and nothing at all
 * with validate_only.
 */
async function alterTopic(
  ctx: RequestContext,
  r: { resourceType: number; resourceName: string },
  validateOnly: boolean,
  compute: (current: Map<string, string>) => Map<string, string>,
): Promise<AlterResult> {
  const res: AlterResult = { errorCode: KafkaErrorCode.NONE, errorMessage: null, resourceType: r.resourceType, resourceName: r.resourceName };
  try {
    if (r.resourceType === ConfigResourceType.BROKER) {
      if (!allowed(ctx, 'alter', 'cluster', '*')) throw new ConfigProblem(CLUSTER_DENIED, 'not authorized to alter the cluster');
      throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, 'broker configs are static: set them in flowmq.yaml or with flags');
    }
    if (r.resourceType !== ConfigResourceType.TOPIC) throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `config resource type ${r.resourceType} is not supported`);
    if (!allowed(ctx, 'alter', 'stream', r.resourceName)) throw new ConfigProblem(TOPIC_DENIED, `not authorized to alter topic "${r.resourceName}"`);
    const entry = ctx.adapter.engine.getStream(r.resourceName);
    if (!entry) throw new ConfigProblem(KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, `topic "${r.resourceName}" does not exist`);
    const current = topicConfigsOf(entry.def);
    const next = compute(current);
    const changed = next.size !== current.size || [...next].some(([k, v]) => current.get(k) !== v);
    if (!validateOnly && changed) {
      await ctx.adapter.engine.setSettings(r.resourceName, streamSettingsOf(next));
      ctx.conn.log.info({ topic: r.resourceName, configs: Object.fromEntries(next) }, 'topic configs changed');
    }
  } catch (err) {
    Object.assign(res, problem(err));
  }
  return res;
}

/** AlterConfigs replaces the topic's whole dynamic config: configs not mentioned go back to their defaults. */
export async function handleAlterConfigs(ctx: RequestContext, req: AlterConfigsRequest): Promise<AlterConfigsResponse> {
  const responses = [];
  for (const r of req.resources) {
    responses.push(
      await alterTopic(ctx, r, req.validateOnly, () => {
        const set = new Map<string, string>();
        for (const [k, v] of checkedConfigs(r.configs, true)) if (v !== null) set.set(k, v);
        return set;
      }),
    );
  }
  return { throttleTimeMs: 0, responses };
}

/** List configs take APPEND and SUBTRACT (KIP-339); the others refuse them, as Kafka does. */
const LIST_CONFIGS = new Set(['cleanup.policy', 'follower.replication.throttled.replicas', 'leader.replication.throttled.replicas']);

/** IncrementalAlterConfigs (KIP-339): SET, DELETE, and APPEND/SUBTRACT for list configs, all or nothing per resource. */
export async function handleIncrementalAlterConfigs(ctx: RequestContext, req: IncrementalAlterConfigsRequest): Promise<IncrementalAlterConfigsResponse> {
  const responses = [];
  for (const r of req.resources) {
    responses.push(
      await alterTopic(ctx, r, req.validateOnly, (current) => {
        const next = new Map(current);
        try {
          for (const c of r.configs) {
            if (c.configOperation === AlterConfigOp.SET) {
              if (c.value === null) throw new TopicConfigError(`null value for topic config "${c.name}"`);
              next.set(c.name, checkTopicConfig(c.name, c.value)!);
            } else if (c.configOperation === AlterConfigOp.DELETE) {
              checkTopicConfig(c.name, null);
              next.delete(c.name);
            } else if (c.configOperation === AlterConfigOp.APPEND || c.configOperation === AlterConfigOp.SUBTRACT) {
              checkTopicConfig(c.name, null);
              if (!LIST_CONFIGS.has(c.name)) throw new TopicConfigError(`cannot append to or subtract from "${c.name}": it is not a list`);
              const items = (next.get(c.name) ?? (c.name === 'cleanup.policy' ? 'delete' : '')).split(',').filter((x) => x !== '');
              const given = (c.value ?? '').split(',').map((x) => x.trim()).filter((x) => x !== '');
              const list = c.configOperation === AlterConfigOp.APPEND ? [...items, ...given.filter((x) => !items.includes(x))] : items.filter((x) => !given.includes(x));
              next.set(c.name, checkTopicConfig(c.name, list.join(','))!);
            } else {
              throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `unknown config operation ${c.configOperation}`);
            }
          }
        } catch (err) {
          configProblem(err);
        }
        return next;
      }),
    );
  }
  return { throttleTimeMs: 0, responses };
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
      throw new ConfigProblem(KafkaErrorCode.INVALID_REPLICA_ASSIGNMENT, 'one replica per partition: durability comes from the write-ahead log in shared storage');
    }
    if (!live.has(a.brokerIds[0])) {
      throw new ConfigProblem(KafkaErrorCode.INVALID_REPLICA_ASSIGNMENT, `broker ${a.brokerIds[0]} is not a live broker of this cluster (${[...live].join(', ')})`);
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
      const entry = engine.getStream(t.topic);
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
