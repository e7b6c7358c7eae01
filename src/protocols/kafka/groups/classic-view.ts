/**
 * A consumer-protocol group (KIP-848) as the classic group APIs show it (Kafka's ConsumerGroup.asDescribedGroup):
 * DescribeGroups, the admin API and the CLI see protocol type "consumer", the group's assignor as the protocol, and
 * each member's subscription and assignment in the consumer protocol's own encodings (ConsumerProtocolSubscription
 * and ConsumerProtocolAssignment, version 0), topics by name.
 */
import type { ConsumerGroupDescription, TopicCatalog } from './consumer-coordinator.js';
import type { Assignment } from './reconcile.js';

/** The classic description's shape (coordinator.ts's GroupDescription, restated to keep the imports one way). */
export interface ClassicView {
  groupId: string;
  state: ConsumerGroupDescription['state'];
  protocolType: string;
  protocolData: string;
  members: Array<{ memberId: string; groupInstanceId: string | null; clientId: string; clientHost: string; metadata: Buffer; assignment: Buffer }>;
}

function str16(s: string): Buffer {
  const b = Buffer.from(s, 'utf8');
  const out = Buffer.alloc(2 + b.length);
  out.writeInt16BE(b.length, 0);
  b.copy(out, 2);
  return out;
}

function int16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeInt16BE(n, 0);
  return b;
}

function int32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n, 0);
  return b;
}

/** ConsumerProtocolSubscription v0: version, topics, user data (null). */
export function encodeSubscription(topics: readonly string[]): Buffer {
  return Buffer.concat([int16(0), int32(topics.length), ...topics.map(str16), int32(-1)]);
}

/** ConsumerProtocolAssignment v0: version, (topic, partitions) pairs, user data (null). */
export function encodeAssignment(a: Assignment, catalog: TopicCatalog): Buffer {
  const parts: Buffer[] = [];
  let n = 0;
  for (const [id, ps] of a) {
    const name = catalog.byId(id)?.name;
    if (name === undefined || ps.size === 0) continue;
    n++;
    const sorted = [...ps].sort((x, y) => x - y);
    parts.push(str16(name), int32(sorted.length), ...sorted.map(int32));
  }
  return Buffer.concat([int16(0), int32(n), ...parts, int32(-1)]);
}

export function consumerAsClassic(d: ConsumerGroupDescription, catalog: TopicCatalog): ClassicView {
  return {
    groupId: d.groupId,
    state: d.state,
    protocolType: 'consumer',
    protocolData: d.members.length > 0 ? d.assignorName : '',
    members: d.members.map((m) => ({
      memberId: m.memberId,
      groupInstanceId: m.instanceId,
      clientId: m.clientId,
      clientHost: m.clientHost,
      metadata: encodeSubscription([...m.subscribedTopicNames].sort()),
      assignment: encodeAssignment(m.assignment, catalog),
    })),
  };
}
