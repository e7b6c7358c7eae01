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
import { isValidStreamName, type StreamDef } from '../../../core/index.js';
import {
  AlterConfigOp,
  ConfigResourceType,
  ConfigSource,
  ConfigType,
  KafkaErrorCode,
  ZERO_UUID,
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
import { LEADER_EPOCH, brokerList } from './metadata.js';
import { allowed, mayCreateTopic } from '../authz.js';
import type { KafkaCluster } from '../cluster.js';

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

interface TopicConfigSpec {
  name: string;
  type: number;
  doc: string;
  /** The value for a stream; null for an unset sensitive/undefined value. */
  value(def: StreamDef, ctx: RequestContext): string;
  /** Whether the stream sets it (else it is a default). */
  isSet?(def: StreamDef): boolean;
  readOnly: boolean;
  /** The value of a read-only config that does not depend on the broker's options. */
  fixed?: string;
}

/**
 * The topic configs FlowMQ reports. retention.ms is the stream's retention (-1 = forever, FlowMQ's default where
 * Kafka's is 7 days) and may be changed; cleanup.policy may only be "delete" (no compaction); the others describe
 * fixed behaviour, so that tools asking for them get true answers.
 */
const TOPIC_CONFIGS: TopicConfigSpec[] = [
  {
    name: 'retention.ms',
    type: ConfigType.LONG,
    doc: 'How long records are kept before whole segments are deleted; -1 keeps them forever.',
    value: (d) => String(d.retentionMs ?? -1),
    isSet: (d) => d.retentionMs !== null,
    readOnly: false,
  },
  { name: 'cleanup.policy', type: ConfigType.LIST, doc: 'Only "delete" (retention by time); compaction is not supported.', value: () => 'delete', readOnly: false, fixed: 'delete' },
  { name: 'retention.bytes', type: ConfigType.LONG, doc: 'Retention by size is not supported (-1: unlimited).', value: () => '-1', readOnly: true, fixed: '-1' },
  { name: 'compression.type', type: ConfigType.STRING, doc: 'Batches are stored as the producer compressed them.', value: () => 'producer', readOnly: true, fixed: 'producer' },
  { name: 'message.timestamp.type', type: ConfigType.STRING, doc: 'Record timestamps are those set by the producer.', value: () => 'CreateTime', readOnly: true, fixed: 'CreateTime' },
  {
    name: 'max.message.bytes',
    type: ConfigType.INT,
    doc: 'Largest record batch accepted (bounded by the largest request).',
    value: (_d, ctx) => String(ctx.adapter.options.maxRequestBytes),
    readOnly: true,
  },
  { name: 'min.insync.replicas', type: ConfigType.INT, doc: 'One replica (the write-ahead log) acknowledges every write.', value: () => '1', readOnly: true, fixed: '1' },
];

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
    { name: 'group.min.session.timeout.ms', value: String(o.groupMinSessionTimeoutMs), type: ConfigType.INT, doc: 'Shortest session timeout accepted.' },
    { name: 'group.max.session.timeout.ms', value: String(o.groupMaxSessionTimeoutMs), type: ConfigType.INT, doc: 'Longest session timeout accepted.' },
    { name: 'group.initial.rebalance.delay.ms', value: String(o.groupInitialRebalanceDelayMs), type: ConfigType.INT, doc: 'Delay of the first rebalance of an empty group (KIP-134).' },
  ];
}

/** Parses retention.ms: -1 (forever) or a positive integer number of milliseconds. */
function parseRetention(value: string | null): number | null {
  if (value === null) return null;
  const n = Number(value);
  if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n === 0 || n < -1) {
    throw new ConfigProblem(KafkaErrorCode.INVALID_CONFIG, `invalid retention.ms "${value}": use -1 or a positive number of ms`);
  }
  return n === -1 ? null : n;
}

/**
 * Validates topic configs (CreateTopics, AlterConfigs SET) and returns the retention they set (undefined: not
 * mentioned).
 */
function applyTopicConfigs(configs: Array<{ name: string; value: string | null }>): { retentionMs: number | null | undefined } {
  let retentionMs: number | null | undefined;
  for (const c of configs) {
    const spec = TOPIC_CONFIGS.find((s) => s.name === c.name);
    if (!spec) throw new ConfigProblem(KafkaErrorCode.INVALID_CONFIG, `unknown or unsupported topic config "${c.name}"`);
    if (c.name === 'retention.ms') retentionMs = parseRetention(c.value);
    else if (c.name === 'cleanup.policy') {
      if (c.value !== null && c.value.trim() !== 'delete') {
        throw new ConfigProblem(KafkaErrorCode.INVALID_CONFIG, `cleanup.policy "${c.value}" is not supported: only "delete" (no compaction)`);
      }
    } else if (c.value !== null && c.value !== spec.fixed) {
      // Setting a fixed config to the value it has anyway is harmless (tools pass defaults along).
      throw new ConfigProblem(KafkaErrorCode.INVALID_CONFIG, `topic config "${c.name}" is read-only in FlowMQ`);
    }
  }
  return { retentionMs };
}

function describeTopicConfig(spec: TopicConfigSpec, def: StreamDef, ctx: RequestContext, synonyms: boolean, docs: boolean): DescribedConfig {
  const set = spec.isSet?.(def) ?? false;
  const value = spec.value(def, ctx);
  const source = set ? ConfigSource.DYNAMIC_TOPIC_CONFIG : ConfigSource.DEFAULT_CONFIG;
  return {
    name: spec.name,
    value,
    readOnly: spec.readOnly,
    isDefault: !set,
    configSource: source,
    isSensitive: false,
    synonyms: synonyms ? [{ name: spec.name, value, source }] : [],
    configType: spec.type,
    documentation: docs ? spec.doc : null,
  };
}

function topicConfigList(def: StreamDef, ctx: RequestContext): Array<{ name: string; value: string | null; readOnly: boolean; configSource: number; isSensitive: boolean }> {
  return TOPIC_CONFIGS.map((s) => {
    const d = describeTopicConfig(s, def, ctx, false, false);
    return { name: d.name, value: d.value, readOnly: d.readOnly, configSource: d.configSource, isSensitive: false };
  });
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
      topicId: ZERO_UUID,
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
      const { retentionMs } = applyTopicConfigs(t.configs);
      const def: StreamDef = { name: t.name, partitions, bindings: [], retentionMs: retentionMs ?? null, createdAt: Date.now() };
      if (!req.validateOnly) {
        const created = await engine.createStream({ name: t.name, partitions, retentionMs: retentionMs ?? null });
        ctx.conn.log.info({ topic: t.name, partitions }, 'topic created');
        def.createdAt = created.createdAt;
        def.bindings = created.bindings;
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
    // FlowMQ streams have no topic ids yet (Metadata reports the zero id), so a deletion by id cannot match.
    if (t.name === null) {
      res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_ID;
      continue;
    }
    if (!allowed(ctx, 'delete', 'stream', t.name)) {
      res.errorCode = TOPIC_DENIED;
      res.errorMessage = `not authorized to delete topic "${t.name}"`;
      continue;
    }
    try {
      if (!ctx.adapter.engine.getStream(t.name)) {
        res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION;
        continue;
      }
      await ctx.adapter.engine.deleteStream(t.name);
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
    const wanted = (name: string): boolean => r.configurationKeys === null || r.configurationKeys.includes(name);
    if (r.resourceType === ConfigResourceType.TOPIC) {
      if (!allowed(ctx, 'describe', 'stream', r.resourceName)) return { ...base, errorCode: TOPIC_DENIED, errorMessage: `not authorized to describe topic "${r.resourceName}"` };
      const entry = ctx.adapter.engine.getStream(r.resourceName);
      if (!entry) return { ...base, errorCode: KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION, errorMessage: `topic "${r.resourceName}" does not exist` };
      base.configs = TOPIC_CONFIGS.filter((s) => wanted(s.name)).map((s) => describeTopicConfig(s, entry.def, ctx, req.includeSynonyms, req.includeDocumentation));
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

async function alterTopic(ctx: RequestContext, r: { resourceType: number; resourceName: string }, validateOnly: boolean, compute: (def: StreamDef) => number | null | undefined): Promise<AlterResult> {
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
    const retentionMs = compute(entry.def);
    if (!validateOnly && retentionMs !== undefined && retentionMs !== entry.def.retentionMs) {
      await ctx.adapter.engine.setRetention(r.resourceName, retentionMs);
      ctx.conn.log.info({ topic: r.resourceName, retentionMs }, 'topic retention changed');
    }
  } catch (err) {
    Object.assign(res, problem(err));
  }
  return res;
}

/** AlterConfigs replaces the topic's whole dynamic config: retention not mentioned goes back to the default. */
export async function handleAlterConfigs(ctx: RequestContext, req: AlterConfigsRequest): Promise<AlterConfigsResponse> {
  const responses = [];
  for (const r of req.resources) {
    responses.push(await alterTopic(ctx, r, req.validateOnly, () => applyTopicConfigs(r.configs).retentionMs ?? null));
  }
  return { throttleTimeMs: 0, responses };
}

/** IncrementalAlterConfigs (KIP-339): SET and DELETE per config; APPEND/SUBTRACT only apply to list configs. */
export async function handleIncrementalAlterConfigs(ctx: RequestContext, req: IncrementalAlterConfigsRequest): Promise<IncrementalAlterConfigsResponse> {
  const responses = [];
  for (const r of req.resources) {
    responses.push(
      await alterTopic(ctx, r, req.validateOnly, () => {
        let retention: number | null | undefined;
        for (const c of r.configs) {
          if (c.configOperation === AlterConfigOp.SET) {
            const out = applyTopicConfigs([{ name: c.name, value: c.value }]);
            if (out.retentionMs !== undefined) retention = out.retentionMs;
          } else if (c.configOperation === AlterConfigOp.DELETE) {
            applyTopicConfigs([{ name: c.name, value: null }]);
            if (c.name === 'retention.ms') retention = null;
          } else if (c.configOperation === AlterConfigOp.APPEND || c.configOperation === AlterConfigOp.SUBTRACT) {
            // cleanup.policy is a list in Kafka, but its only possible value here is "delete".
            if (c.name !== 'cleanup.policy' || (c.value ?? '').trim() !== 'delete') {
              throw new ConfigProblem(KafkaErrorCode.INVALID_CONFIG, `cannot append to or subtract from "${c.name}"`);
            }
          } else {
            throw new ConfigProblem(KafkaErrorCode.INVALID_REQUEST, `unknown config operation ${c.configOperation}`);
          }
        }
        return retention;
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
