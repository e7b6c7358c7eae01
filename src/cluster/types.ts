/**
 * Cluster mode: several stateless brokers over one PostgreSQL metastore (with the WAL) and one S3 bucket.
 *
 * - Membership: every broker registers a row with a lease it renews by heartbeat (ClusterStore). A broker whose
 *   lease expired is dead, whatever it believes: its work moves, and its late writes are fenced.
 * - Ownership: exactly one live broker at a time writes a stream partition, a queue, a consumer group, a JetStream
 *   consumer, an MQTT session or a Kafka transactional id. It holds an owner row with an epoch, bumped at every change of hands; every write
 *   to shared storage carries the epoch and one with an older epoch is refused (FENCED). Partitions are fenced by
 *   the metastore's partition epoch and the WAL's (Metastore.openPartition, WriteAheadLog.fence); the other kinds
 *   by the owner row itself (`flowmq_owner_check` in SQL, see pg-store.ts).
 * - Placement: who should own a resource is rendezvous hashing (highest random weight) of its kind and name over
 *   the live brokers not leaving, so every broker computes the same answer from the same membership, a join moves
 *   only the resources the new broker wins (about 1/N of them) and a death only the dead broker's.
 */

/** The kinds of resources with a single owner. */
export type ResourceKind = 'partition' | 'queue' | 'group' | 'consumer' | 'session' | 'txn';

/** `txn`: a Kafka transactional id, placed and owned like a group (its transaction coordinator). */
export const RESOURCE_KINDS: readonly ResourceKind[] = ['partition', 'queue', 'group', 'consumer', 'session', 'txn'];

/** A host and port a client or another broker connects to. */
export interface Endpoint {
  host: string;
  port: number;
}

/** What a broker registers about itself. */
export interface BrokerInfo {
  /** The broker id (--broker-id; the Kafka node id). Unique among live brokers. */
  id: number;
  /** Random per process start: owner rows name it, so a restarted broker with the same id is a new owner. */
  incarnation: string;
  version: string;
  /** ms since epoch. */
  startedAt: number;
  /**
   * Advertised address per listener: "cluster" (the internal channel), "http" (admin API), "mqtt", "kafka", "amqp",
   * "nats", and the TLS/WebSocket listeners under their listener names.
   */
  endpoints: Record<string, Endpoint>;
}

/** A registered broker as the store sees it now. */
export interface BrokerState extends BrokerInfo {
  /** Its lease has not expired (by the database's clock). */
  alive: boolean;
  /** It announced a graceful shutdown: it hands its work over and placement no longer picks it. */
  leaving: boolean;
  /** ms until its lease expires (negative: expired that long ago), by the database's clock. */
  leaseRemainingMs: number;
}

/** Who owns one resource. */
export interface OwnerRecord {
  kind: ResourceKind;
  name: string;
  /** null: released (its last owner handed it over), free to claim. */
  owner: number | null;
  /** The owner's incarnation (null when released). */
  incarnation: string | null;
  /** Bumped at every claim that changed hands; 0 never happens for a stored row. */
  epoch: number;
  /** ms since epoch of the last change of hands. */
  since: number;
}

/**
 * The shared membership and ownership tables (PostgreSQL in a cluster; memory for tests). Clock-based decisions
 * (is a lease expired?) use the store's clock, never a broker's, so brokers with skewed clocks agree.
 */
export interface ClusterStore {
  readonly kind: string;
  /**
   * Registers (or re-registers) a broker with a lease of `leaseMs`. Throws CONFIG_ERROR when another incarnation
   * with a live lease holds the id.
   */
  register(info: BrokerInfo, leaseMs: number): Promise<void>;
  /**
   * Renews the lease. False when it had already expired or another incarnation took the id: the caller is dead to
   * the cluster and must drop everything it owns (its writes are fenced anyway) and register again.
   */
  heartbeat(id: number, incarnation: string, leaseMs: number): Promise<boolean>;
  /** Marks the broker as leaving (placement skips it; it is still alive and still owns what it owns). */
  setLeaving(id: number, incarnation: string): Promise<void>;
  /** Removes the broker's row (a graceful shutdown, after it released everything). */
  deregister(id: number, incarnation: string): Promise<void>;
  /** Every registered broker, dead ones included (rows of brokers dead for long are pruned by register). */
  brokers(): Promise<BrokerState[]>;

  /** Owner rows of a kind (every row: placed kinds have a row per resource ever owned). */
  owners(kind: ResourceKind): Promise<OwnerRecord[]>;
  /** Owner rows whose owner is released, not registered, dead or of another incarnation (work to take over). */
  orphans(kind: ResourceKind, limit: number): Promise<OwnerRecord[]>;
  owner(kind: ResourceKind, name: string): Promise<OwnerRecord | null>;
  /**
   * Takes the resource for `id` when it is free: no row, released, or its owner dead, unregistered or of another
   * incarnation; the epoch is bumped. Already owned by this very incarnation: unchanged. Owned by another live
   * broker: unchanged (unless `force`, for a handover the holder agreed to). Returns the row as it is afterwards:
   * the claim won iff `owner === id && incarnation === incarnation`.
   */
  claim(kind: ResourceKind, name: string, id: number, incarnation: string, opts?: { force?: boolean }): Promise<OwnerRecord>;
  /** Releases the resource if this incarnation still holds it at `epoch`; true when it did. */
  release(kind: ResourceKind, name: string, id: number, incarnation: string, epoch: number): Promise<boolean>;
  /** Forgets a deleted resource's row (its epoch starts again at 1 if a resource of that name is created later). */
  forget(kind: ResourceKind, name: string): Promise<void>;

  /** Publishes `payload` to every broker's listen(`topic`) (PostgreSQL NOTIFY; at most ~7900 bytes). */
  notify(topic: string, payload: string): Promise<void>;
  /** Calls `fn` for every notify on `topic` by any broker, this one included. */
  listen(topic: string, fn: (payload: string) => void): Promise<void>;
  close(): Promise<void>;
}

/**
 * The brokers' internal channel (src/cluster/channel.ts over TCP; LocalHub in one process for tests): requests with
 * a reply, and one-way messages, between brokers by id. Bodies are opaque bytes (see wire.ts for the encodings).
 *
 * - Requests: the handler's resolved Buffer is the reply; a thrown FlowError arrives at the caller as a FlowError
 *   with the same code and message. An unreachable peer, or one that does not answer in `timeoutMs`, rejects with
 *   UNAVAILABLE.
 * - One-way messages are batched per peer (one write per tick) and kept in order per peer. They are dropped (and
 *   counted) while the peer cannot be reached: they are for live traffic and hints, never for acknowledged data.
 * - Back-pressure: `send` buffers; `ready(to)` resolves once the peer's outgoing buffer is below its high-water
 *   mark, and requests wait for it themselves.
 */
export interface PeerChannel {
  handle(method: string, fn: (from: number, body: Buffer) => Promise<Buffer> | Buffer): void;
  on(method: string, fn: (from: number, body: Buffer) => void): void;
  request(to: number, method: string, body: Buffer, timeoutMs?: number): Promise<Buffer>;
  send(to: number, method: string, body: Buffer): void;
  ready(to: number): Promise<void>;
  /**
   * The channel version (cluster/rpc.ts) this broker and peer `to` both speak, once a connection was made;
   * undefined before (a call then goes ahead, and a peer without the message answers UNAVAILABLE).
   */
  peerVersion(to: number): number | undefined;
  /** Ids of the peers currently connected and authenticated. */
  connected(): number[];
  /**
   * Ids of the peers this broker tried and failed to reach, or lost and has not reached again (a killed broker whose
   * lease has not expired yet). A peer never dialed is not in it: not being connected yet is no failure.
   */
  unreachable(): number[];
  figures(): Record<string, unknown>;
  close(): Promise<void>;
}

/** How a subsystem takes part in ownership (Cluster.register). */
export interface OwnershipHandler {
  /**
   * Placed kinds (partitions, queues): every resource name that should have an owner, from the shared catalog.
   * Placement picks one live broker for each and that broker claims it. Kinds without names() (groups, JetStream
   * consumers: placed lazily, claimed by `Cluster.ensure` at first use; sessions: sticky, claimed by `Cluster.claim`
   * where the client connects) are still reclaimed from dead brokers (orphans) by their placement broker, and
   * groups and consumers move to their placement when brokers join (`sticky: false`).
   */
  names?(): string[];
  /** Sessions stay where their client is: never moved by a join, only from dead or leaving brokers. */
  sticky?: boolean;
  /** This broker now owns `name` with `epoch`: load its state and start serving. A throw gives it back. */
  acquire(name: string, epoch: number): Promise<void>;
  /**
   * Stop serving `name` and let go of its state. `lost`: ownership was already lost (our lease expired, or a write
   * was fenced): nothing can be written any more. Otherwise (a handover) resolve once everything acknowledged is
   * durable in shared storage, so that the next owner finds it.
   */
  release(name: string, lost: boolean): Promise<void>;
}
