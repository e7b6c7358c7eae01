/**
 * The Kafka protocol's view of a cluster (--cluster; src/cluster): which brokers exist, who leads a partition and
 * who coordinates a group. On a single broker the adapter has none (KafkaAdapter.cluster is null) and every handler
 * answers as before, with no cost.
 *
 * - Brokers: every live broker that registered an endpoint for the listener the client came through ("kafka" or
 *   "kafka-tls"), by its --broker-id (the Kafka node id). The controller is the lowest live id (FlowMQ has no
 *   controller; clients only use it to send admin requests somewhere).
 * - Partition leaders: the partition's owner ('partition' kind, "<stream>/<p>", taken by the streams part) with the
 *   owner row's epoch as leader epoch, so a change of owner is a change of leader epoch (KIP-320). A partition
 *   with no live owner (its owner just died, or it was just created) names the broker placement gives it, which
 *   takes it within a reconcile: a client sent there meanwhile gets NOT_LEADER_OR_FOLLOWER and asks again. Naming
 *   leader -1 (LEADER_NOT_AVAILABLE) would be Kafka's answer, but KafkaJS 2.2.4 maps partitions to leaders without
 *   looking at the partition's error and then retries "broker -1 not found" without refreshing its metadata.
 * - Requests for a partition's data (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords) are served
 *   by its leader only, as in Kafka: elsewhere they answer NOT_LEADER_OR_FOLLOWER and clients refresh their
 *   metadata. Nothing is forwarded: Kafka clients route by leader themselves.
 * - Groups: a group's coordinator is its placement broker ('group' kind, rendezvous over the live brokers), which
 *   takes the group on first use (Cluster.ensure). Group state is membership in memory plus committed offsets in
 *   the shared metastore, so acquiring loads nothing and releasing drops the membership (members rejoin at the new
 *   coordinator, as after a coordinator change in Kafka) once the commits in flight are done. Every offset commit
 *   carries the group's epoch and is refused by the metastore (FENCED) once the group has moved.
 * - Transactions: a transactional id's coordinator is placed, taken and moved exactly like a group ('txn' kind, the
 *   same gate): FindCoordinator(TRANSACTION) names its placement broker, which takes the id at its first request
 *   and loads its document (TransactionCoordinator.acquire, which completes a commit or abort a dead predecessor
 *   left in flight); a dead coordinator's ids are orphans its successors take at their next reconcile. Markers go
 *   to each partition's leader (kafka.txnMarker), which appends them and keeps the partition's LSO and aborted
 *   list; a broker taking a partition over loads them before serving it (TransactionCoordinator.loadPartition).
 */
import type { Logger } from 'pino';
import { call, RPC, serve, type Cluster, type Endpoint, type ResourceKind } from '../../cluster/index.js';
import { FlowError, isFlowError } from '../../core/index.js';
import { KafkaErrorCode } from './codec/index.js';
import type { GroupCoordinator } from './groups/coordinator.js';
import type { MarkerTask, TransactionCoordinator } from './transactions/coordinator.js';

export interface KafkaNode {
  nodeId: number;
  host: string;
  port: number;
  rack: string | null;
}

/** Name of a partition's owner row (the streams part's 'partition' kind). */
export function partitionKey(stream: string, partition: number): string {
  return `${stream}/${partition}`;
}

/** A partition's leader as Metadata names it. */
export interface PartitionLeader {
  id: number;
  /** The owner row's epoch; -1 when no live broker owns it yet (the leader named is its placement). */
  epoch: number;
}

/** Whether a group request may be served here, and under which ownership epoch. */
export type GroupGate = { errorCode: 0; epoch: number } | { errorCode: number; epoch: -1 };

export class KafkaCluster {
  /** Offset commits in flight per group: a handover waits for them. */
  private readonly commits = new Map<string, Set<Promise<unknown>>>();

  constructor(
    readonly cluster: Cluster,
    private readonly groups: GroupCoordinator,
    private readonly logger: Logger,
    private readonly txns: TransactionCoordinator,
  ) {
    cluster.register('txn', {
      acquire: (id, epoch) => this.txns.acquire(id, epoch),
      release: async (id, lost) => {
        await this.txns.release(id, lost);
        this.logger.debug({ transactionalId: id, lost }, 'transaction coordination moved away');
      },
    });
    // A partition's transaction state, loaded before this broker serves it as leader.
    cluster.onAcquire('partition', async (name) => {
      const slash = name.lastIndexOf('/');
      await this.txns.loadPartition(name.slice(0, slash), Number(name.slice(slash + 1)));
    });
    txns.markers = (t) => this.writeMarker(t);
    // A partition's aborted list is written by its leader under the partition's owner epoch (fenced).
    txns.partitionEpoch = (stream, partition) => this.leads(stream, partition);
    txns.onPartitionFenced = (stream, partition) => this.cluster.fenced('partition', partitionKey(stream, partition));
    // The id's document writes carry the owner epoch: one refused means the id moved; stop coordinating it here.
    txns.onFenced = (id) => this.cluster.fenced('txn', id);
    cluster.register('group', {
      // Nothing to load: committed offsets are read from the metastore when asked for, and membership starts empty
      // (members rejoin). What an earlier ownership of this broker left in memory is stale.
      acquire: async (groupId) => {
        this.groups.drop(groupId);
      },
      release: async (groupId, lost) => {
        this.groups.drop(groupId);
        // A handover: what was acknowledged must be in the metastore before the next coordinator reads it. Lost:
        // these commits are refused (FENCED) anyway.
        const inFlight = this.commits.get(groupId);
        if (!lost && inFlight) await Promise.allSettled([...inFlight]);
        this.logger.debug({ group: groupId, lost }, 'group coordination moved away');
      },
    });
  }

  get id(): number {
    return this.cluster.id;
  }

  /** Serves kafka.txnMarker (the broker opens the internal channel before clients are let in; tests may have none). */
  start(): void {
    const channel = this.cluster.channel;
    if (channel === null) return;
    serve(channel, RPC.kafkaTxnMarker, async (_from, h) => {
      // Only the leader writes the partition; the coordinator finds the new one and asks again.
      if (this.leads(h.s, h.p) === null) throw new FlowError('NOT_OWNER', `broker ${this.id} does not lead ${partitionKey(h.s, h.p)}`);
      const o = await this.txns.writeMarker({ stream: h.s, partition: h.p, producerId: h.pid, producerEpoch: h.e, commit: h.c, startOffset: h.o });
      return { o };
    });
  }

  /**
   * Writes a transaction marker at the partition's leader: here, or over the channel. While the partition has no
   * live leader (its broker died and its lease has not expired, or the new one is loading it) the call is tried
   * again, for up to three leases and at least 30 s; then it fails and the transaction stays Prepare*, completed
   * again a few seconds later (TransactionCoordinator.retryLater) or by the id's next coordinator.
   */
  private async writeMarker(t: MarkerTask): Promise<number> {
    const deadline = Date.now() + Math.max(30_000, 3 * this.cluster.leaseMs);
    let delay = 50;
    for (;;) {
      try {
        if (this.leads(t.stream, t.partition) !== null) return await this.txns.writeMarker(t);
        const leader = this.cluster.owner('partition', partitionKey(t.stream, t.partition));
        const channel = this.cluster.channel;
        if (leader === null || leader.broker === this.id || channel === null) {
          throw new FlowError('NOT_OWNER', `${partitionKey(t.stream, t.partition)} has no live leader`);
        }
        const head = { s: t.stream, p: t.partition, pid: t.producerId, e: t.producerEpoch, c: t.commit, o: t.startOffset };
        return (await call(channel, leader.broker, RPC.kafkaTxnMarker, head, { timeoutMs: 15_000 })).head.o;
      } catch (err) {
        if (Date.now() >= deadline || this.txns.isClosed || !(isFlowError(err, 'NOT_OWNER') || isFlowError(err, 'UNAVAILABLE') || isFlowError(err, 'FENCED')))
          throw err;
        this.logger.debug({ err, stream: t.stream, partition: t.partition }, 'transaction marker: leader not reachable yet, trying again');
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 1000);
        // The owner rows move with reconciles; look the partition's up again.
        await this.cluster.lookup('partition', partitionKey(t.stream, t.partition)).catch(() => null);
      }
    }
  }

  /** Live brokers with an endpoint for `listener`, by id; this broker with `self` if it registered none yet. */
  nodes(listener: string, self: Endpoint): KafkaNode[] {
    const out: KafkaNode[] = [];
    let sawSelf = false;
    for (const b of this.cluster.brokers()) {
      if (b.id === this.cluster.id) {
        // Our own row may be a heartbeat old: our endpoints are the ones we advertise now.
        sawSelf = true;
        const ep = this.cluster.self.endpoints[listener] ?? self;
        out.push({ nodeId: b.id, host: ep.host, port: ep.port, rack: null });
        continue;
      }
      if (!b.alive) continue;
      const ep = b.endpoints[listener];
      if (ep) out.push({ nodeId: b.id, host: ep.host, port: ep.port, rack: null });
    }
    if (!sawSelf) {
      const ep = this.cluster.self.endpoints[listener] ?? self;
      out.push({ nodeId: this.cluster.id, host: ep.host, port: ep.port, rack: null });
    }
    return out.sort((a, b) => a.nodeId - b.nodeId);
  }

  /** The epoch under which this broker leads the partition now (owns it and serves it), or null. */
  leads(stream: string, partition: number): number | null {
    return this.cluster.owns('partition', partitionKey(stream, partition));
  }

  /**
   * Whether this broker serves the partition's data now, for a client that believes the leader epoch is
   * `currentLeaderEpoch` (-1: it does not say): NOT_LEADER_OR_FOLLOWER when another broker leads it (or nobody
   * yet); FENCED_LEADER_EPOCH when the client's epoch is older than ours (its metadata is stale),
   * UNKNOWN_LEADER_EPOCH when it is newer (ours is: we are about to lose it), as Kafka answers (KIP-320).
   */
  serve(stream: string, partition: number, currentLeaderEpoch = -1): { errorCode: number; epoch: number } {
    const epoch = this.leads(stream, partition);
    if (epoch === null) return { errorCode: KafkaErrorCode.NOT_LEADER_OR_FOLLOWER, epoch: -1 };
    if (currentLeaderEpoch >= 0 && currentLeaderEpoch !== epoch) {
      return { errorCode: currentLeaderEpoch < epoch ? KafkaErrorCode.FENCED_LEADER_EPOCH : KafkaErrorCode.UNKNOWN_LEADER_EPOCH, epoch };
    }
    return { errorCode: KafkaErrorCode.NONE, epoch };
  }

  /** The partition's leader for Metadata: its live owner, else the broker placement gives it. */
  leader(stream: string, partition: number): PartitionLeader | null {
    const key = partitionKey(stream, partition);
    const o = this.cluster.owner('partition', key);
    if (o) return { id: o.broker, epoch: o.epoch };
    const p = this.cluster.placement('partition', key);
    return p === null ? null : { id: p, epoch: -1 };
  }

  /** The broker that coordinates the group (or transactional id, kind 'txn'): its placement. */
  coordinator(groupId: string, kind: 'group' | 'txn' = 'group'): number | null {
    return this.cluster.placement(kind, groupId);
  }

  /**
   * Serves a group request here? NOT_COORDINATOR when placement gives the group to another broker (the client
   * asks FindCoordinator again); COORDINATOR_LOAD_IN_PROGRESS while the previous coordinator still holds it (it
   * hands it over at its next reconcile; the client retries here). Synchronous when the group is owned already.
   */
  gate(groupId: string, kind: ResourceKind & ('group' | 'txn') = 'group'): GroupGate | Promise<GroupGate> {
    const epoch = this.cluster.owns(kind, groupId);
    if (epoch !== null) return { errorCode: 0, epoch };
    if (this.cluster.placement(kind, groupId) !== this.cluster.id) return { errorCode: KafkaErrorCode.NOT_COORDINATOR, epoch: -1 };
    return this.cluster.ensure(kind, groupId).then(
      (e): GroupGate => ({ errorCode: 0, epoch: e }),
      (err: unknown): GroupGate => {
        if (isFlowError(err, 'NOT_OWNER')) return { errorCode: KafkaErrorCode.COORDINATOR_LOAD_IN_PROGRESS, epoch: -1 };
        this.logger.warn({ err, [kind === 'txn' ? 'transactionalId' : 'group']: groupId }, `cannot take the ${kind}'s coordination`);
        return { errorCode: KafkaErrorCode.COORDINATOR_NOT_AVAILABLE, epoch: -1 };
      },
    );
  }

  /**
   * For requests that only read (DescribeGroups, OffsetFetch): served here when this broker coordinates the group or
   * placement gives it here, without taking it (describing a group that does not exist must not create an owner
   * row); NOT_COORDINATOR elsewhere.
   */
  reads(groupId: string): number {
    if (this.cluster.owns('group', groupId) !== null || this.cluster.placement('group', groupId) === this.cluster.id) return KafkaErrorCode.NONE;
    return KafkaErrorCode.NOT_COORDINATOR;
  }

  /** The group was deleted: its owner row goes too (a group of that name later starts again at epoch 1). */
  async deleted(groupId: string): Promise<void> {
    await this.cluster
      .forget('group', groupId)
      .catch((err: unknown) => this.logger.warn({ err, group: groupId }, "cannot forget the deleted group's owner row"));
  }

  /** Runs an offset commit of the group, so that a handover of the group waits for it. */
  track<T>(groupId: string, p: Promise<T>): Promise<T> {
    let set = this.commits.get(groupId);
    if (!set) this.commits.set(groupId, (set = new Set()));
    const s = set;
    s.add(p);
    const done = () => {
      s.delete(p);
      if (s.size === 0 && this.commits.get(groupId) === s) this.commits.delete(groupId);
    };
    p.then(done, done);
    return p;
  }

  /** A commit of the group was refused FENCED: another broker coordinates it now; stop serving it here. */
  fenced(groupId: string): void {
    this.cluster.fenced('group', groupId);
  }
}
