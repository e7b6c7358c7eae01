/**
 * Kafka consumer groups for the admin API and the CLI (`RunningProtocol.groups`): list with lag, describe with
 * members, their assignments and per-partition committed offsets, reset offsets (only while the group has no
 * members, as kafka-consumer-groups.sh --reset-offsets), delete.
 *
 * Lag is the high watermark minus the committed offset, for the partitions the group has committed on (a group
 * that never committed on a partition has no lag figure for it, as Kafka's tools show "-").
 */
import { FlowError, type Engine } from '../../core/index.js';
import type { ConsumerGroupAdmin, GroupDetail, GroupSummary, OffsetResetTarget } from '../../control/index.js';
import { KafkaErrorCode } from './codec/index.js';
import type { GroupCoordinator } from './groups/coordinator.js';
import type { KafkaCluster } from './cluster.js';

type OffsetRow = GroupDetail['offsets'][number];

/**
 * The partitions of a consumer-protocol assignment (ConsumerProtocolAssignment: version int16, then an array of
 * topic string + int32 partitions, then user data); an empty list for anything else (another protocol type).
 */
export function decodeAssignment(buf: Buffer): Array<{ stream: string; partition: number }> {
  const out: Array<{ stream: string; partition: number }> = [];
  try {
    if (buf.length < 6) return out;
    let pos = 2;
    const topics = buf.readInt32BE(pos);
    pos += 4;
    for (let t = 0; t < topics; t++) {
      const len = buf.readInt16BE(pos);
      pos += 2;
      const stream = buf.toString('utf8', pos, pos + len);
      pos += len;
      const n = buf.readInt32BE(pos);
      pos += 4;
      for (let i = 0; i < n; i++, pos += 4) out.push({ stream, partition: buf.readInt32BE(pos) });
    }
  } catch {
    return [];
  }
  return out;
}

export class KafkaGroupAdmin implements ConsumerGroupAdmin {
  constructor(
    private readonly engine: Engine,
    private readonly groups: GroupCoordinator,
    /** Cluster mode: members are known to the group's coordinator only, so changes are made there (see `serve`). */
    private readonly cluster: KafkaCluster | null = null,
  ) {}

  /**
   * Cluster mode: the group's ownership epoch if this broker coordinates the group (taking it if placement gives it
   * here), so that a reset sees the group's members and its commits are fenced like the coordinator's; a group
   * coordinated by another broker is changed through that broker's admin API. Undefined on a single broker.
   */
  private async serve(name: string): Promise<number | undefined> {
    if (this.cluster === null) return undefined;
    const g = await this.cluster.gate(name);
    if (g.errorCode === KafkaErrorCode.NONE) return g.epoch;
    const at = this.cluster.coordinator(name);
    throw new FlowError('NOT_OWNER', `consumer group "${name}" is coordinated by broker ${at ?? '(none)'}: use that broker's admin API`);
  }

  private async offsets(name: string): Promise<OffsetRow[]> {
    const rows: OffsetRow[] = [];
    for (const o of await this.groups.store.listOffsets(name)) {
      let end = -1;
      try {
        end = this.engine.offsets(o.stream, o.partition).highWatermark;
      } catch {
        // The stream or partition is gone: no end, no lag.
      }
      rows.push({ stream: o.stream, partition: o.partition, committed: o.offset, end, lag: end >= 0 && o.offset >= 0 ? Math.max(0, end - o.offset) : null });
    }
    return rows.sort((a, b) => (a.stream < b.stream ? -1 : a.stream > b.stream ? 1 : a.partition - b.partition));
  }

  private static lagOf(rows: OffsetRow[]): number | null {
    let lag: number | null = null;
    for (const r of rows) if (r.lag !== null) lag = (lag ?? 0) + r.lag;
    return lag;
  }

  async list(): Promise<GroupSummary[]> {
    const out: GroupSummary[] = [];
    for (const g of await this.groups.list()) {
      const rows = await this.offsets(g.groupId);
      out.push({
        name: g.groupId,
        protocol: 'kafka',
        state: g.state,
        members: this.groups.describe(g.groupId)?.members.length ?? 0,
        lag: KafkaGroupAdmin.lagOf(rows),
      });
    }
    return out;
  }

  async describe(name: string): Promise<GroupDetail | null> {
    const d = this.groups.describe(name);
    const rows = await this.offsets(name);
    if (!d && rows.length === 0 && !(await this.groups.store.listGroups()).includes(name)) return null;
    return {
      name,
      protocol: 'kafka',
      state: d?.state ?? 'Empty',
      members: d?.members.length ?? 0,
      lag: KafkaGroupAdmin.lagOf(rows),
      memberDetails: (d?.members ?? []).map((m) => ({ id: m.memberId, clientId: m.clientId, host: m.clientHost, assignments: decodeAssignment(m.assignment) })),
      offsets: rows,
    };
  }

  async resetOffsets(name: string, stream: string, target: OffsetResetTarget, progress?: (done: number, total: number) => void): Promise<GroupDetail> {
    const fence = await this.serve(name);
    const d = this.groups.describe(name);
    if (d && d.members.length > 0) {
      throw new FlowError('INVALID_ARGUMENT', `group "${name}" has active members: stop its consumers before resetting offsets`);
    }
    const entry = this.engine.getAnyStream(stream);
    if (!entry) throw new FlowError('NOT_FOUND', `stream "${stream}" does not exist`);
    const total = entry.def.partitions;
    for (let partition = 0; partition < total; partition++) {
      const { logStartOffset, highWatermark } = this.engine.offsets(stream, partition);
      let offset: number;
      if (target.to === 'earliest') offset = logStartOffset;
      else if (target.to === 'latest') offset = highWatermark;
      else if (target.to === 'offset') {
        if (!Number.isSafeInteger(target.offset) || target.offset < 0) throw new FlowError('INVALID_ARGUMENT', 'offset must be a non-negative integer');
        // As kafka-consumer-groups.sh: an offset outside the log is moved to its nearest end.
        offset = Math.min(Math.max(target.offset, logStartOffset), highWatermark);
      } else {
        if (!Number.isFinite(target.timestamp)) throw new FlowError('INVALID_ARGUMENT', 'timestamp must be a number (ms since the epoch)');
        offset = Math.min(Math.max(await this.engine.offsetForTimestamp(stream, partition, target.timestamp), logStartOffset), highWatermark);
      }
      await this.groups.store.commitOffsets(name, [{ stream, partition, offset, metadata: null }], fence);
      progress?.(partition + 1, total);
    }
    return (await this.describe(name))!;
  }

  async delete(name: string, force = false): Promise<void> {
    await this.serve(name);
    const code = await this.groups.delete(name, force);
    if (code === KafkaErrorCode.NONE) {
      await this.cluster?.deleted(name);
      return;
    }
    if (code === KafkaErrorCode.GROUP_ID_NOT_FOUND) throw new FlowError('NOT_FOUND', `consumer group "${name}" does not exist`);
    if (code === KafkaErrorCode.NON_EMPTY_GROUP)
      throw new FlowError('INVALID_ARGUMENT', `group "${name}" has active members: stop its consumers before deleting it`);
    if (code === KafkaErrorCode.INVALID_GROUP_ID) throw new FlowError('INVALID_ARGUMENT', 'invalid group name');
    throw new FlowError('CLOSED', `the group coordinator cannot delete "${name}" now (Kafka error ${code})`);
  }
}
