/**
 * Metadata: every stream a topic. On a single broker: one broker (this one), leader and only replica of every
 * partition. In a cluster: every live broker with an endpoint for the client's listener, and each partition's owner
 * as its leader and only replica, with the ownership epoch as leader epoch (see ../cluster.ts). Unknown topics are
 * auto-created when both the listener and the client allow it (the client's allow_auto_topic_creation flag exists
 * from v4; earlier versions always allow it).
 */
import type { StreamDef } from '../../../core/index.js';
import {
  AUTHORIZED_OPERATIONS_OMITTED,
  KafkaErrorCode,
  ZERO_UUID,
  type MetadataPartition,
  type MetadataRequest,
  type MetadataResponse,
  type MetadataTopic,
} from '../codec/index.js';
import type { RequestContext } from '../route.js';
import { allowed, mayCreateTopic, visible } from '../authz.js';
import type { KafkaCluster, KafkaNode } from '../cluster.js';
import { streamByTopicId, topicIdOf } from '../topic-ids.js';

/**
 * Leader epoch reported for every partition. Ownership never moves in the single-broker skeleton, so the epoch
 * is constant; clients only use it to detect leader changes (KIP-320).
 */
export const LEADER_EPOCH = 0;

/**
 * The address clients should use: the configured one (the listener's own, then the adapter's), else the local
 * address this client reached. The port is the listener's own, so a client that came over TLS is sent back to the
 * TLS port (and a plaintext client to the plaintext one): each listener advertises itself, like a Kafka listener
 * name maps to one endpoint (advertised.listeners).
 */
export function advertisedAddress(ctx: RequestContext): { host: string; port: number } {
  const o = ctx.adapter.options;
  const l = ctx.conn.listener;
  let host = l.advertisedHost ?? o.advertisedHost ?? ctx.conn.localAddress ?? '127.0.0.1';
  // An IPv4 client on a dual-stack socket sees its local address as "::ffff:a.b.c.d"; advertise the IPv4 form.
  if (host.startsWith('::ffff:') && host.includes('.')) host = host.slice(7);
  const configured = l.advertisedPort ?? (l.tls ? undefined : o.advertisedPort);
  return { host, port: configured ?? ctx.conn.localPort ?? 9092 };
}

export function topicMetadata(brokerId: number, def: StreamDef): MetadataTopic {
  const self = { id: brokerId, epoch: LEADER_EPOCH };
  return topicWith(def, () => self);
}

/** A topic in a cluster: each partition led by its owner (`nodes`: the brokers this response names). */
export function clusterTopicMetadata(kc: KafkaCluster, nodes: ReadonlySet<number>, def: StreamDef): MetadataTopic {
  return topicWith(def, (i) => {
    const leader = kc.leader(def.name, i);
    // A leader the client cannot reach through its listener (no endpoint registered) is no leader for it.
    return leader !== null && nodes.has(leader.id) ? leader : null;
  });
}

/** A topic's metadata with each partition's one replica, its leader (null: LEADER_NOT_AVAILABLE). */
function topicWith(def: StreamDef, leaderOf: (partition: number) => { id: number; epoch: number } | null): MetadataTopic {
  const partitions: MetadataPartition[] = new Array<MetadataPartition>(def.partitions);
  for (let i = 0; i < def.partitions; i++) {
    const leader = leaderOf(i);
    partitions[i] = {
      errorCode: leader !== null ? KafkaErrorCode.NONE : KafkaErrorCode.LEADER_NOT_AVAILABLE,
      partitionIndex: i,
      leaderId: leader !== null ? leader.id : -1,
      leaderEpoch: leader !== null ? leader.epoch : -1,
      replicaNodes: leader !== null ? [leader.id] : [],
      isrNodes: leader !== null ? [leader.id] : [],
      offlineReplicas: [],
    };
  }
  return {
    errorCode: KafkaErrorCode.NONE,
    name: def.name,
    topicId: topicIdOf(def),
    isInternal: false,
    partitions,
    topicAuthorizedOperations: AUTHORIZED_OPERATIONS_OMITTED,
  };
}

/** The brokers a Metadata or DescribeCluster response names, and the controller id it reports. */
export function brokerList(ctx: RequestContext): { brokers: KafkaNode[]; controllerId: number } {
  const self = advertisedAddress(ctx);
  const kc = ctx.adapter.cluster;
  if (kc === null) return { brokers: [{ nodeId: ctx.adapter.brokerId, host: self.host, port: self.port, rack: null }], controllerId: ctx.adapter.brokerId };
  const brokers = kc.nodes(ctx.conn.listener.name, self);
  // FlowMQ has no controller; admin clients send their requests to it, any broker serves them: the lowest id, so
  // every broker names the same one.
  return { brokers, controllerId: brokers[0]?.nodeId ?? ctx.adapter.brokerId };
}

function errorTopic(name: string | null, errorCode: number, topicId = ZERO_UUID): MetadataTopic {
  return {
    errorCode,
    name,
    topicId,
    isInternal: false,
    partitions: [],
    topicAuthorizedOperations: AUTHORIZED_OPERATIONS_OMITTED,
  };
}

export async function handleMetadata(ctx: RequestContext, req: MetadataRequest): Promise<MetadataResponse> {
  const { adapter } = ctx;
  const brokerId = adapter.brokerId;
  const { brokers, controllerId } = brokerList(ctx);
  const kc = adapter.cluster;
  const nodes = kc === null ? null : new Set(brokers.map((b) => b.nodeId));
  const describe = (def: StreamDef): MetadataTopic => (kc === null ? topicMetadata(brokerId, def) : clusterTopicMetadata(kc, nodes!, def));
  let topics: MetadataTopic[];
  const version = ctx.header.apiVersion;
  // v10-11 carry topic ids and nullable names, but Kafka brokers serve neither: a request using one is answered as
  // an InvalidRequestException, INVALID_REQUEST for every topic of an otherwise empty response.
  if ((version === 10 || version === 11) && req.topics?.some((t) => t.name === null || !t.topicId.equals(ZERO_UUID))) {
    return {
      throttleTimeMs: 0,
      brokers: [],
      clusterId: null,
      controllerId: -1,
      topics: req.topics.map((t) => errorTopic(t.name ?? '', KafkaErrorCode.INVALID_REQUEST, t.topicId)),
      clusterAuthorizedOperations: AUTHORIZED_OPERATIONS_OMITTED,
      errorCode: KafkaErrorCode.NONE,
    };
  }
  // v12+ (KIP-516): topics by id. As Kafka, a request naming any id is answered for its ids alone, without
  // auto-creation; an id no stream has is UNKNOWN_TOPIC_ID, one the client may not describe
  // TOPIC_AUTHORIZATION_FAILED (ids are not secret; the name is not told).
  const ids = version >= 12 && req.topics !== null ? req.topics.filter((t) => !t.topicId.equals(ZERO_UUID)) : [];
  if (ids.length > 0) {
    topics = ids.map((t) => {
      const entry = streamByTopicId(adapter.engine, t.topicId);
      if (entry === undefined) return errorTopic(null, KafkaErrorCode.UNKNOWN_TOPIC_ID, t.topicId);
      if (!allowed(ctx, 'describe', 'stream', entry.def.name)) return errorTopic(null, KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED, t.topicId);
      return describe(entry.def);
    });
  } else if (req.topics === null) {
    // Topics the client may not describe are left out, as Kafka does.
    topics = adapter.engine
      .listAllStreams()
      .filter((def) => visible(ctx, 'describe', 'stream', def.name))
      .map(describe);
  } else {
    topics = await Promise.all(
      req.topics.map(async (t): Promise<MetadataTopic> => {
        // A null name without an id (v12+): nothing to look up.
        if (t.name === null) return errorTopic(null, KafkaErrorCode.INVALID_REQUEST, t.topicId);
        if (!allowed(ctx, 'describe', 'stream', t.name)) return errorTopic(t.name, KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED);
        const create = req.allowAutoTopicCreation && adapter.wouldCreate(t.name);
        // A topic Kafka would auto-create for a client not allowed to create it answers TOPIC_AUTHORIZATION_FAILED.
        if (create && !mayCreateTopic(ctx, t.name)) return errorTopic(t.name, KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED);
        const r = await adapter.resolve(t.name, req.allowAutoTopicCreation);
        return r.entry ? describe(r.entry.def) : errorTopic(t.name, r.errorCode);
      }),
    );
  }
  return {
    throttleTimeMs: 0,
    brokers,
    clusterId: adapter.options.clusterId,
    controllerId,
    topics,
    clusterAuthorizedOperations: AUTHORIZED_OPERATIONS_OMITTED,
    errorCode: KafkaErrorCode.NONE,
  };
}
