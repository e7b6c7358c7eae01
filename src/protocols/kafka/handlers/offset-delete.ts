/**
 * OffsetDelete (KIP-496): deletes a consumer group's committed offsets of some partitions, as Kafka's group
 * coordinator does (OffsetMetadataManager.deleteOffsets, ClassicGroup.validateOffsetDelete):
 *
 * - `delete group:<id>` (Kafka's DELETE on the group), else GROUP_AUTHORIZATION_FAILED for the whole request;
 *   per topic `subscribe stream:` (Kafka's READ), else TOPIC_AUTHORIZATION_FAILED; a topic or partition that does not
 *   exist is UNKNOWN_TOPIC_OR_PARTITION.
 * - The group must exist (members, or committed offsets): else GROUP_ID_NOT_FOUND. A group with members deletes
 *   offsets only if it uses the consumer protocol (NON_EMPTY_GROUP otherwise), and never those of a topic one of its
 *   members subscribes to (GROUP_SUBSCRIBED_TO_TOPIC for every partition of that topic). The subscriptions are read
 *   from the members' consumer-protocol metadata (its version-0 prefix, as Kafka does); while they cannot be known
 *   (no protocol chosen yet, unreadable metadata) every topic counts as subscribed. A group of the consumer protocol
 *   (KIP-848; Kafka's ConsumerGroup, whose validateOffsetDelete accepts every state) has its members' subscriptions
 *   itself: the topic names, and every topic their regex matches (Kafka counts a regex's resolved topics in the
 *   group's subscribedTopicNames). An empty consumer group (its members gone) deletes any of its offsets.
 * - In a cluster the group's coordinator answers (NOT_COORDINATOR elsewhere), and the deletion is fenced by the
 *   group's ownership epoch like an offset commit.
 * - A partition without a committed offset is no error.
 */
import { isFlowError } from '../../../core/index.js';
import { KafkaErrorCode, type OffsetDeleteRequest, type OffsetDeleteResponse } from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import type { RequestContext } from '../route.js';
import { allowed } from '../authz.js';

/** The topics of a ConsumerProtocolSubscription (its v0 prefix: version, topics), or null when unreadable. */
export function subscribedTopics(metadata: Buffer): string[] | null {
  try {
    if (metadata.length < 6) return null;
    let pos = 2;
    const n = metadata.readInt32BE(pos);
    pos += 4;
    if (n < 0) return null;
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      const len = metadata.readInt16BE(pos);
      pos += 2;
      if (len < 0 || pos + len > metadata.length) return null;
      out.push(metadata.toString('utf8', pos, pos + len));
      pos += len;
    }
    return out;
  } catch {
    return null;
  }
}

function fail(errorCode: number): OffsetDeleteResponse {
  return { errorCode, throttleTimeMs: 0, topics: [] };
}

export async function handleOffsetDelete(ctx: RequestContext, req: OffsetDeleteRequest): Promise<OffsetDeleteResponse> {
  const { groups, engine, cluster: kc } = ctx.adapter;
  const groupId = req.groupId;
  if (!allowed(ctx, 'delete', 'group', groupId)) return fail(KafkaErrorCode.GROUP_AUTHORIZATION_FAILED);
  if (groupId === '') return fail(KafkaErrorCode.INVALID_GROUP_ID);
  let fence: number | undefined;
  if (kc !== null) {
    const g = await kc.gate(groupId);
    if (g.errorCode !== KafkaErrorCode.NONE) return fail(g.errorCode);
    fence = g.epoch;
  }
  if (groups.isClosed()) return fail(KafkaErrorCode.NOT_COORDINATOR);

  const d = groups.describe(groupId);
  let stored: number;
  try {
    stored = (await groups.store.listOffsets(groupId)).length;
  } catch (err) {
    ctx.conn.log.warn({ err, group: groupId }, "OffsetDelete: cannot read the group's offsets");
    return fail(KafkaErrorCode.COORDINATOR_NOT_AVAILABLE);
  }
  if ((d === null || d.state === 'Dead') && stored === 0) return fail(KafkaErrorCode.GROUP_ID_NOT_FOUND);
  const members = d?.members ?? [];
  const consumer = d?.protocolType === 'consumer';
  if (members.length > 0 && !consumer) return fail(KafkaErrorCode.NON_EMPTY_GROUP);

  // The topics the members subscribe to; null: unknown (every topic counts as subscribed). A consumer-protocol group
  // (KIP-848) knows them itself, names and regex matches alike; a classic group's come from the members' metadata.
  let subscribed: Set<string> | null = groups.consumerSubscriptions(groupId);
  if (subscribed === null) {
    subscribed = new Set();
    for (const m of members) {
      const topics = subscribedTopics(m.metadata);
      if (topics === null) {
        subscribed = null;
        break;
      }
      for (const t of topics) subscribed.add(t);
    }
  }
  const isSubscribed = (topic: string): boolean => members.length > 0 && (subscribed === null || subscribed.has(topic));

  const doomed: Array<{ stream: string; partition: number }> = [];
  const pending: Array<{ errorCode: number }> = [];
  const topics = req.topics.map((t) => {
    const authorized = allowed(ctx, 'subscribe', 'stream', t.name);
    const entry = engine.getAnyStream(t.name);
    const taken = isSubscribed(t.name);
    return {
      name: t.name,
      partitions: t.partitions.map((p) => {
        const res = { partitionIndex: p.partitionIndex, errorCode: KafkaErrorCode.NONE as number };
        if (!authorized) res.errorCode = KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED;
        else if (!entry || p.partitionIndex < 0 || p.partitionIndex >= entry.def.partitions) res.errorCode = KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION;
        else if (taken) res.errorCode = KafkaErrorCode.GROUP_SUBSCRIBED_TO_TOPIC;
        else {
          doomed.push({ stream: t.name, partition: p.partitionIndex });
          pending.push(res);
        }
        return res;
      }),
    };
  });
  if (doomed.length > 0) {
    try {
      const del = groups.store.deleteOffsets(groupId, doomed, fence);
      await (kc === null ? del : kc.track(groupId, del));
      ctx.conn.log.info(
        { group: groupId, partitions: doomed.map((x) => `${x.stream}/${x.partition}`), by: ctx.conn.access?.principal.user ?? null },
        'committed offsets deleted',
      );
    } catch (err) {
      if (kc !== null && isFlowError(err, 'FENCED')) {
        kc.fenced(groupId);
        return fail(KafkaErrorCode.NOT_COORDINATOR);
      }
      ctx.conn.log.warn({ err, group: groupId }, 'OffsetDelete failed');
      const code = kafkaErrorCode(err);
      for (const r of pending) r.errorCode = code;
    }
  }
  return { errorCode: KafkaErrorCode.NONE, throttleTimeMs: 0, topics };
}
