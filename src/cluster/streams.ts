/**
 * Stream partitions in cluster mode: the core's StreamStorage over every broker's LogManager.
 *
 * - Ownership: partitions are a placed kind ('partition', names `<stream>/<partition>` of every stream in the
 *   catalog). The broker placement gives a partition acquires it in its LogManager (a new epoch fencing the previous
 *   owner, the WAL entries it left read back, the producer state loaded) and releases it on a handover (appends
 *   stop, those in flight become durable, the memory goes; the data stays in PostgreSQL and S3). Nothing is copied.
 * - Local partitions go straight to the LogManager: the single-broker path, no added cost.
 * - Remote partitions: appends are forwarded to the owner (`stream.append`), gathered per owner into one request per
 *   tick, and settle only once the owner's WAL made them durable: the caller acknowledges its client after that.
 *   The owner checks idempotent producers' sequences as it does for its own clients, so a retried idempotent batch
 *   is a duplicate there. A forwarded append has no synchronous offset: `AppendResult.baseOffset` is -1 and
 *   `AppendResult.offset` resolves with the owner's. Reads, offsets, waits, timestamps and DeleteRecords are asked
 *   of the owner (`stream.read`, `stream.offsets`, `stream.wait`, `stream.time`, `stream.trim`). An answer
 *   NOT_OWNER, FENCED (the owner lost it: nothing was written) or UNAVAILABLE makes the broker look the owner up
 *   again and retry, for up to three membership leases (ownership moves within about one), then UNAVAILABLE
 *   (retriable for clients). Appends keep their order per partition across a change of owner: one ordered pipeline
 *   per partition, with numbers the owner checks (stream-appends.ts, which holds the write path of both ends). A
 *   forwarded append whose reply was lost (the owner died or the channel broke mid-request) is retried too, and
 *   recognised by the owner as a duplicate: the forwarder stamps each batch without a producer id with a producer id
 *   of its own (allocated at start, like a Kafka producer's) and a sequence per partition, the owner checks it with
 *   the partition's producer state, which moves with the partition (idempotent Kafka producers' batches are checked
 *   as theirs). Owners of channel version 4 or older get unstamped batches: at least once with them.
 * - offsets() is synchronous: for a remote partition it answers the last figures its owner sent: every owner tells
 *   the other brokers the offsets of its partitions that moved, every OFFSETS_PUSH_MS (`stream.hw`, one-way, all
 *   of them now and then for a broker that missed some), and every reply carries them too; figures older than
 *   OFFSETS_STALE_MS are asked for in the background. fetchOffsets() asks the owner and waits.
 * - The catalog: a stream created, redefined or deleted on one broker is announced (`streams` notify); every broker
 *   reads the catalog again, applies it to its engine (Engine.syncStreams) and reconciles ownership, so new
 *   partitions are placed and a deleted stream's partitions are dropped and forgotten.
 */
import type { Logger } from 'pino';
import {
  CoalescingTask,
  FlowError,
  isFlowError,
  sameStreamDef,
  type AppendResult,
  type PartitionLocation,
  type PartitionOffsets,
  type ProducerIdStore,
  type ProducerSnapshot,
  type ReadLease,
  type StreamCatalog,
  type StreamDef,
  type StreamDefaults,
  type StreamStorage,
  type TxnPartitions,
} from '../core/index.js';
import type { LogManager } from '../storage/log/index.js';
import { backoffDelay } from '../util/backoff.js';
import type { Cluster } from './cluster.js';
import type { OwnershipHandler, PeerChannel } from './types.js';
import { call, castAll, listen, RPC, serve, WithTail } from './rpc.js';
import { MOVING, partitionName, StreamAppends } from './stream-appends.js';
import { packBuffers, unpackBuffers } from './wire.js';

/** Remote offsets older than this are refreshed (in the background) when asked for. */
const OFFSETS_STALE_MS = 1000;
/** How often an owner tells the other brokers the offsets of its partitions that moved (all of them every FULL_PUSH_EVERY). */
const OFFSETS_PUSH_MS = 100;
const FULL_PUSH_EVERY = 20;
/** Request timeout of the forwarding calls (a wait adds its own timeout). */
const REQUEST_TIMEOUT_MS = 15_000;
/** How long an owner may take to seal its tails (object store uploads) and run a cleaner pass for the admin API. */
const MAINTAIN_TIMEOUT_MS = 60_000;
/** First pause before looking an owner up again, doubled up to MAX_RETRY_PAUSE_MS. */
const FIRST_RETRY_PAUSE_MS = 25;
const MAX_RETRY_PAUSE_MS = 500;

/**
 * How often each broker collects what deleted streams left where no broker held them (storage/log/garbage.ts), with
 * up to a tenth more at random so that the brokers spread out; the broker that deletes a stream also collects once
 * its partitions' last owners are gone for sure (two leases and a second after).
 */
const COLLECT_EVERY_MS = 15 * 60_000;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());

function parseName(name: string): { stream: string; partition: number } {
  const i = name.lastIndexOf('/');
  const partition = Number(name.slice(i + 1));
  if (i <= 0 || !Number.isInteger(partition) || partition < 0) throw new FlowError('INVALID_ARGUMENT', `bad partition name "${name}"`);
  return { stream: name.slice(0, i), partition };
}

function sameDef(a: StreamDef | undefined, b: StreamDef): boolean {
  return a !== undefined && sameStreamDef(a, b);
}

export interface ClusterStreamsOptions {
  log: LogManager;
  cluster: Cluster;
  /** The stream definitions every broker shares (the metastore). */
  catalog: StreamCatalog;
  logger: Logger;
  /** Where this broker's forwarder producer id comes from (default: the catalog, when it allocates producer ids). */
  producerIds?: ProducerIdStore;
}

export class ClusterStreams implements StreamStorage {
  private readonly log: LogManager;
  private readonly cluster: Cluster;
  private readonly catalog: StreamCatalog;
  private readonly logger: Logger;
  private readonly channel: PeerChannel;
  /** Every stream of the catalog as this broker knows it. */
  private readonly defs = new Map<string, StreamDef>();
  /** Streams deleted by another broker, being dropped here (dropStream must not announce them again). */
  private readonly remoteDrops = new Set<string>();
  /** Remote partitions' offsets as last heard from their owner, with when. */
  private readonly remoteOffsets = new Map<string, { offsets: PartitionOffsets; at: number; refreshing: boolean }>();
  /** The write path: appends forwarded from here, and those other brokers forward here. */
  private readonly appends: StreamAppends;
  private readonly reload = new CoalescingTask(() => this.reloadCatalog());
  private onCatalog: ((defs: StreamDef[]) => Promise<void>) | null = null;
  /** Offsets of the partitions held here as last pushed to the other brokers. */
  private readonly pushed = new Map<string, string>();
  private pushTimer: NodeJS.Timeout | null = null;
  private collectTimer: NodeJS.Timeout | null = null;
  private collectSoon: NodeJS.Timeout | null = null;
  private readonly collector = new CoalescingTask(() => this.collect());
  private pushes = 0;
  /** What each other broker last said of the stored bytes of the partitions it holds (`stream.sizes`). */
  private readonly peerSizes = new Map<number, Array<[string, number, number]>>();
  private closed = false;
  /** The engine's Kafka transaction state (useTransactions), handed to the log's cleaner. */
  private txns: TxnPartitions | null = null;
  readonly stats = {
    forwardedAppends: 0,
    forwardRequests: 0,
    forwardRetries: 0,
    forwardFailures: 0,
    servedAppends: 0,
    remoteReads: 0,
    servedReads: 0,
    catalogReloads: 0,
    /** Passes of the collector of deleted streams' leftovers (its figures are the log's deletedStream*). */
    collections: 0,
  };

  private constructor(opts: ClusterStreamsOptions) {
    this.log = opts.log;
    this.cluster = opts.cluster;
    this.catalog = opts.catalog;
    this.logger = opts.logger;
    if (opts.cluster.channel === null) throw new FlowError('CONFIG_ERROR', 'cluster streams need the internal channel');
    this.channel = opts.cluster.channel;
    this.appends = new StreamAppends({
      log: this.log,
      cluster: this.cluster,
      channel: this.channel,
      stats: this.stats,
      patienceMs: () => this.patienceMs,
      noteOffsets: (name, offsets) => this.noteOffsets(name, offsets),
      closed: () => this.closed,
    });
  }

  /**
   * Loads the catalog, registers partition ownership and the channel's handlers, and listens for catalog changes.
   * Before Cluster.begin() (the broker calls it once every module registered).
   */
  static async start(opts: ClusterStreamsOptions): Promise<ClusterStreams> {
    const cs = new ClusterStreams(opts);
    const ids = opts.producerIds ?? (opts.catalog as Partial<ProducerIdStore>);
    // One producer id per broker life: a restarted broker's sequences cannot meet what owners remember of its last one.
    if (typeof ids.allocateProducerIds === 'function') cs.appends.producerId = await ids.allocateProducerIds.call(ids, 1);
    for (const def of await cs.catalog.listStreams()) {
      cs.defs.set(def.name, def);
      await cs.log.openStream(def);
    }
    cs.log.onFenced = (stream, partition) => cs.cluster.fenced('partition', partitionName(stream, partition));
    cs.cluster.register('partition', cs.ownership());
    cs.serve();
    cs.pushTimer = setInterval(() => cs.pushOffsets(), OFFSETS_PUSH_MS);
    cs.pushTimer.unref();
    cs.collectTimer = setInterval(() => void cs.collectNow(), COLLECT_EVERY_MS * (1 + Math.random() / 10));
    cs.collectTimer.unref();
    await cs.cluster.store.listen('streams', () => {
      if (!cs.closed) cs.reload.run().catch((err: unknown) => cs.logger.warn({ err }, 'cluster streams: catalog reload failed; retried at the next change'));
    });
    return cs;
  }

  /**
   * How long a forwarded call keeps looking for its partition's owner: a dead owner's partitions move once its
   * lease has run out and the next heartbeat of their new owner reconciled, so three leases (at least 5 s).
   */
  private get patienceMs(): number {
    return Math.max(3 * this.cluster.leaseMs, 5000);
  }

  /** Where catalog changes made by other brokers are applied (the broker passes Engine.syncStreams). */
  attach(onCatalog: (defs: StreamDef[]) => Promise<void>): void {
    this.onCatalog = onCatalog;
  }

  /** Reads the catalog again now (a change may have been missed); resolves once applied. */
  refresh(): Promise<void> {
    return this.reload.run();
  }

  figures(): Record<string, unknown> {
    return { ...this.stats, ownedPartitions: this.log.held().length, streams: this.defs.size };
  }

  close(): void {
    this.closed = true;
    if (this.pushTimer) clearInterval(this.pushTimer);
    if (this.collectTimer) clearInterval(this.collectTimer);
    if (this.collectSoon) clearTimeout(this.collectSoon);
  }

  /** Collects what deleted streams left in the WAL and the object store (storage/log/garbage.ts); never throws. */
  collectNow(): Promise<void> {
    return this.collector
      .run()
      .catch((err: unknown) => this.logger.warn({ err }, 'cluster streams: collecting what deleted streams left failed; retried later'));
  }

  private async collect(): Promise<void> {
    if (this.closed) return;
    this.stats.collections++;
    await this.log.collectDeleted();
  }

  /** Tells the other brokers the offsets of the partitions held here that moved (all of them now and then). */
  private pushOffsets(): void {
    // Every live broker, connected or not yet (a send connects): one that never talked to this one still needs them.
    const peers = this.cluster
      .brokers()
      .filter((b) => b.alive && b.id !== this.cluster.id)
      .map((b) => b.id);
    const full = this.pushes++ % FULL_PUSH_EVERY === 0;
    const list: Array<[string, number, number, number]> = [];
    const held = new Set<string>();
    for (const name of this.log.held()) {
      held.add(name);
      const { stream, partition } = parseName(name);
      if (!this.log.holds(stream, partition)) continue;
      const o = this.log.offsets(stream, partition);
      const sig = `${o.logStartOffset}/${o.highWatermark}`;
      if (!full && this.pushed.get(name) === sig) continue;
      this.pushed.set(name, sig);
      list.push([stream, partition, o.logStartOffset, o.highWatermark]);
    }
    for (const name of this.pushed.keys()) if (!held.has(name)) this.pushed.delete(name);
    if (peers.length === 0) return;
    if (full) {
      const sizes: Array<[string, number, number]> = [];
      for (const [stream, z] of this.log.streamSizes()) sizes.push([stream, z.hot, z.objects]);
      castAll(this.channel, peers, RPC.streamSizes, sizes);
    }
    if (list.length > 0) castAll(this.channel, peers, RPC.streamHw, list);
  }

  // ---------------------------------------------------------------- ownership

  private ownership(): OwnershipHandler {
    return {
      names: () => {
        const out: string[] = [];
        for (const def of this.defs.values()) for (let i = 0; i < def.partitions; i++) out.push(partitionName(def.name, i));
        return out;
      },
      acquire: async (name) => {
        const { stream, partition } = parseName(name);
        const def = this.defs.get(stream);
        if (def === undefined || partition >= def.partitions) throw new FlowError('NOT_FOUND', `stream "${stream}" has no partition ${partition}`);
        // What an earlier leadership here loaded is stale: the cleaner waits for this one's (loadPartition).
        this.txns?.setLoaded(stream, partition, false);
        this.appends.forget(name);
        await this.log.acquirePartition(def, partition);
        this.remoteOffsets.delete(name);
      },
      release: async (name, lost) => {
        const { stream, partition } = parseName(name);
        this.txns?.setLoaded(stream, partition, false);
        await this.log.releasePartition(stream, partition, lost);
        this.appends.forget(name);
      },
    };
  }

  locate(stream: string, partition: number): PartitionLocation {
    const name = partitionName(stream, partition);
    const local = this.log.holds(stream, partition);
    const owner = this.cluster.owner('partition', name);
    if (owner !== null) return { local: local && owner.broker === this.cluster.id, broker: owner.broker, epoch: owner.epoch };
    return { local: false, broker: null, epoch: 0 };
  }

  /**
   * The engine's transaction state goes to the log, whose cleaner removes aborted transactions' records from the
   * compacted partitions led here, each once its leader loaded the partition's state (TxnPartitions.setLoaded, by the
   * Kafka adapter's partition loader; Cluster.onAcquire runs it after acquire below).
   */
  useTransactions(txns: TxnPartitions): void {
    this.txns = txns;
    this.log.useTransactions(txns);
  }

  /** Broker-wide stream defaults apply to the partitions this broker writes (every broker is given the same). */
  setDefaults(d: StreamDefaults): void {
    this.log.setDefaults(d);
  }

  /** Size of a partition this broker holds (DescribeLogDirs is asked of every broker for its own); null elsewhere. */
  partitionSize(stream: string, partition: number): number | null {
    return this.log.holds(stream, partition) ? this.log.partitionSize(stream, partition) : null;
  }

  /**
   * Stored bytes per stream, cluster-wide: the partitions held here, plus what every other live broker last said of
   * the partitions it holds (`stream.sizes`, every 2 s). The namespace usage and storage quota of every broker read it.
   */
  streamSizes(): Map<string, { hot: number; objects: number }> {
    const out = this.log.streamSizes();
    const alive = new Set(
      this.cluster
        .brokers()
        .filter((b) => b.alive)
        .map((b) => b.id),
    );
    for (const [id, sizes] of this.peerSizes) {
      if (!alive.has(id)) {
        this.peerSizes.delete(id);
        continue;
      }
      for (const [stream, hot, objects] of sizes) {
        const z = out.get(stream);
        if (z === undefined) out.set(stream, { hot, objects });
        else {
          z.hot += hot;
          z.objects += objects;
        }
      }
    }
    return out;
  }

  /** Producers of a partition this broker leads (DescribeProducers goes to the leader); null elsewhere. */
  producers(stream: string, partition: number): ProducerSnapshot[] | null {
    return this.log.holds(stream, partition) ? this.log.producers(stream, partition) : null;
  }

  // ---------------------------------------------------------------- catalog

  async openStream(def: StreamDef): Promise<void> {
    const known = this.defs.get(def.name);
    this.defs.set(def.name, def);
    await this.log.openStream(def);
    if (sameDef(known, def)) return;
    // Created or redefined here: every broker reads the catalog again, and ownership places new partitions.
    await this.cluster.store
      .notify('streams', def.name)
      .catch((err: unknown) => this.logger.warn({ err, stream: def.name }, 'cluster streams: cannot announce a stream change'));
    this.cluster.kick();
  }

  async dropStream(name: string): Promise<void> {
    const def = this.defs.get(name);
    const remote = this.remoteDrops.delete(name);
    if (remote) return; // dropped by reloadCatalog already
    this.defs.delete(name);
    await this.dropLocal(name);
    if (def === undefined) return;
    // Deleted here: the owner rows go (a stream created later under this name starts at epoch 1), and every broker
    // drops what it holds of it.
    for (let i = 0; i < def.partitions; i++) await this.cluster.forget('partition', partitionName(name, i)).catch(() => undefined);
    await this.cluster.store
      .notify('streams', name)
      .catch((err: unknown) => this.logger.warn({ err, stream: name }, 'cluster streams: cannot announce a stream deletion'));
    // A partition whose owner was dead or paused is dropped by no one: collected once that owner is gone for sure.
    if (this.collectSoon === null && !this.closed) {
      this.collectSoon = setTimeout(
        () => {
          this.collectSoon = null;
          void this.collectNow();
        },
        2 * this.cluster.leaseMs + 1000,
      );
      this.collectSoon.unref();
    }
  }

  /** Lets go of what this broker holds of a deleted stream: its partitions' memory and segment objects. */
  private async dropLocal(name: string): Promise<void> {
    const prefix = `${name}/`;
    for (const held of this.log.held()) {
      if (held.startsWith(prefix) && !held.slice(prefix.length).includes('/')) await this.cluster.forget('partition', held).catch(() => undefined);
    }
    for (const key of [...this.remoteOffsets.keys()]) if (key.startsWith(prefix)) this.remoteOffsets.delete(key);
    await this.log.dropStream(name);
  }

  private async reloadCatalog(): Promise<void> {
    this.stats.catalogReloads++;
    const list = await this.catalog.listStreams();
    const next = new Map(list.map((d) => [d.name, d]));
    let changed = false;
    for (const [name, old] of [...this.defs]) {
      const d = next.get(name);
      if (d !== undefined && d.createdAt === old.createdAt) continue;
      changed = true;
      this.defs.delete(name);
      this.remoteDrops.add(name);
      await this.dropLocal(name);
    }
    for (const def of list) {
      if (sameDef(this.defs.get(def.name), def)) continue;
      changed = true;
      this.defs.set(def.name, def);
      await this.log.openStream(def);
    }
    if (!changed) return;
    this.logger.info({ streams: list.length }, 'cluster streams: catalog changed on another broker');
    // The engine drops (dropStream: already done, see remoteDrops) and opens (openStream: same definitions, nothing
    // announced) what changed.
    if (this.onCatalog) await this.onCatalog(list);
    for (const name of this.remoteDrops) if (!next.has(name) || this.defs.has(name)) this.remoteDrops.delete(name);
    this.cluster.kick();
  }

  // ---------------------------------------------------------------- appends

  append(stream: string, partition: number, batch: Buffer, stamped = false): AppendResult {
    if (this.appends.direct(stream, partition)) return this.log.append(stream, partition, batch, stamped);
    const def = this.defs.get(stream);
    if (def === undefined) throw new FlowError('NOT_FOUND', `stream "${stream}" does not exist`);
    if (!Number.isInteger(partition) || partition < 0 || partition >= def.partitions)
      throw new FlowError('NOT_FOUND', `stream "${stream}" has no partition ${partition}`);
    return this.appends.append(stream, partition, batch, stamped);
  }

  // ---------------------------------------------------------------- the owner's side

  private serve(): void {
    listen(this.channel, RPC.streamSizes, (from, sizes) => {
      this.peerSizes.set(from, sizes);
    });
    listen(this.channel, RPC.streamHw, (_from, list) => {
      for (const [s, p, l, h] of list) {
        if (!this.log.holds(s, p)) this.noteOffsets(partitionName(s, p), { logStartOffset: l, highWatermark: h });
      }
    });
    serve(this.channel, RPC.streamAppend, (from, head, tail) => this.appends.serve(from, head, tail));
    serve(this.channel, RPC.streamRead, async (_from, head) => {
      this.check(head.s, head.p);
      this.stats.servedReads++;
      const batches = await this.log.read(head.s, head.p, head.o, head.m);
      return new WithTail(this.log.offsets(head.s, head.p), packBuffers(batches));
    });
    serve(this.channel, RPC.streamOffsets, (_from, head) => {
      this.check(head.s, head.p);
      return this.log.offsets(head.s, head.p);
    });
    serve(this.channel, RPC.streamWait, async (_from, head) => {
      this.check(head.s, head.p);
      await this.log.waitFor(head.s, head.p, head.o, Math.min(Math.max(0, head.t), REQUEST_TIMEOUT_MS));
      return this.log.holds(head.s, head.p) ? this.log.offsets(head.s, head.p) : null;
    });
    serve(this.channel, RPC.streamTime, async (_from, head) => {
      this.check(head.s, head.p);
      return this.log.offsetForTimestamp(head.s, head.p, head.t);
    });
    serve(this.channel, RPC.streamTrim, async (_from, head) => {
      this.check(head.s, head.p);
      return this.log.deleteRecordsBefore(head.s, head.p, head.o);
    });
    serve(this.channel, RPC.streamMaintain, async (_from, head) => {
      this.check(head.s, head.p);
      await this.maintainHere(head.s, head.c);
      return 0;
    });
  }

  /** NOT_OWNER unless this broker serves the partition (the caller looks the owner up again). */
  private check(stream: string, partition: number): void {
    if (!this.log.holds(stream, partition)) throw new FlowError('NOT_OWNER', `partition ${stream}/${partition} is not served by broker ${this.cluster.id}`);
  }

  // ---------------------------------------------------------------- reads and the rest, at the owner

  /**
   * Runs `local` when the partition is served here, else `remote` at its owner; NOT_OWNER, FENCED and UNAVAILABLE
   * look the owner up again and retry, for up to three leases.
   */
  private async atOwner<T>(stream: string, partition: number, local: () => Promise<T>, remote: (broker: number) => Promise<T>): Promise<T> {
    const name = partitionName(stream, partition);
    const deadline = Date.now() + this.patienceMs;
    let last: unknown = null;
    for (let tries = 0; ; tries++) {
      if (tries > 0) {
        const pause = backoffDelay(tries, FIRST_RETRY_PAUSE_MS, MAX_RETRY_PAUSE_MS);
        if (Date.now() + pause > deadline || this.closed)
          throw new FlowError('UNAVAILABLE', `partition ${name} has no reachable owner now; retry`, { cause: last });
        await sleep(pause);
      }
      if (this.log.holds(stream, partition)) {
        try {
          return await local();
        } catch (err) {
          if (!(isFlowError(err) && MOVING.has(err.code))) throw err;
          last = err;
          continue;
        }
      }
      const owner =
        tries === 0 ? (this.cluster.owner('partition', name) ?? (await this.cluster.lookup('partition', name))) : await this.cluster.lookup('partition', name);
      if (owner === null || owner.broker === this.cluster.id) {
        this.cluster.kick();
        last = new FlowError('UNAVAILABLE', `partition ${name} has no live owner`);
        continue;
      }
      try {
        return await remote(owner.broker);
      } catch (err) {
        if (!(isFlowError(err) && MOVING.has(err.code))) throw err;
        last = err;
      }
    }
  }

  /** The partition must exist (NOT_FOUND otherwise, as on a single broker). */
  private known(stream: string, partition: number): void {
    const def = this.defs.get(stream);
    if (def === undefined || !Number.isInteger(partition) || partition < 0 || partition >= def.partitions) {
      throw new FlowError('NOT_FOUND', `stream "${stream}" has no partition ${partition}`);
    }
  }

  async read(stream: string, partition: number, offset: number, maxBytes: number, lease?: ReadLease): Promise<Buffer[]> {
    if (this.log.holds(stream, partition)) return this.log.read(stream, partition, offset, maxBytes, lease);
    this.known(stream, partition);
    return this.atOwner(
      stream,
      partition,
      () => this.log.read(stream, partition, offset, maxBytes, lease),
      async (broker) => {
        this.stats.remoteReads++;
        const { head, tail } = await call(
          this.channel,
          broker,
          RPC.streamRead,
          { s: stream, p: partition, o: offset, m: maxBytes },
          { timeoutMs: REQUEST_TIMEOUT_MS },
        );
        this.noteOffsets(partitionName(stream, partition), head);
        return unpackBuffers(tail);
      },
    );
  }

  offsets(stream: string, partition: number): PartitionOffsets {
    if (this.log.holds(stream, partition)) return this.log.offsets(stream, partition);
    this.known(stream, partition);
    const name = partitionName(stream, partition);
    const cached = this.remoteOffsets.get(name);
    if (cached === undefined || (Date.now() - cached.at > OFFSETS_STALE_MS && !cached.refreshing)) {
      if (cached) cached.refreshing = true;
      this.fetchOffsets(stream, partition)
        .catch(() => undefined)
        .finally(() => {
          const c = this.remoteOffsets.get(name);
          if (c) c.refreshing = false;
        });
    }
    return cached?.offsets ?? { logStartOffset: 0, highWatermark: 0 };
  }

  /** The partition's offsets as its owner has them now (offsets() answers from a cache for remote partitions). */
  async fetchOffsets(stream: string, partition: number): Promise<PartitionOffsets> {
    if (this.log.holds(stream, partition)) return this.log.offsets(stream, partition);
    this.known(stream, partition);
    return this.atOwner(
      stream,
      partition,
      async () => this.log.offsets(stream, partition),
      async (broker) => {
        const off = (await call(this.channel, broker, RPC.streamOffsets, { s: stream, p: partition }, { timeoutMs: REQUEST_TIMEOUT_MS })).head;
        this.noteOffsets(partitionName(stream, partition), off);
        return off;
      },
    );
  }

  private noteOffsets(name: string, offsets: PartitionOffsets): void {
    const c = this.remoteOffsets.get(name);
    // Offsets only move forward; a stale reply must not move the cache back.
    if (c !== undefined && c.offsets.highWatermark > offsets.highWatermark) return;
    this.remoteOffsets.set(name, { offsets, at: Date.now(), refreshing: c?.refreshing ?? false });
  }

  async offsetForTimestamp(stream: string, partition: number, ts: number): Promise<number> {
    if (this.log.holds(stream, partition)) return this.log.offsetForTimestamp(stream, partition, ts);
    this.known(stream, partition);
    return this.atOwner(
      stream,
      partition,
      () => this.log.offsetForTimestamp(stream, partition, ts),
      async (broker) => (await call(this.channel, broker, RPC.streamTime, { s: stream, p: partition, t: ts }, { timeoutMs: REQUEST_TIMEOUT_MS })).head,
    );
  }

  async waitFor(stream: string, partition: number, offset: number, timeoutMs: number): Promise<void> {
    if (this.log.holds(stream, partition)) return this.log.waitFor(stream, partition, offset, timeoutMs);
    this.known(stream, partition);
    const name = partitionName(stream, partition);
    const cached = this.remoteOffsets.get(name);
    if (timeoutMs <= 0 || (cached !== undefined && cached.offsets.highWatermark > offset)) return;
    const until = Date.now() + timeoutMs;
    try {
      await this.atOwner(
        stream,
        partition,
        () => this.log.waitFor(stream, partition, offset, Math.max(0, until - Date.now())),
        async (broker) => {
          const left = Math.max(0, until - Date.now());
          const off = (
            await call(this.channel, broker, RPC.streamWait, { s: stream, p: partition, o: offset, t: left }, { timeoutMs: left + REQUEST_TIMEOUT_MS })
          ).head;
          if (off !== null) this.noteOffsets(name, off);
        },
      );
    } catch {
      // A wait ends without the offset when the owner cannot be reached: the caller looks at the offsets again.
      await sleep(Math.max(0, Math.min(until - Date.now(), MAX_RETRY_PAUSE_MS)));
    }
  }

  /**
   * The admin API's flush and compact for the partitions of `stream` held by other brokers: each owner seals every
   * tail it holds and, with `compact`, runs a cleaner pass over its partitions of the stream; one request per owner
   * (a partition whose owner changes meanwhile is asked of the next one).
   */
  async maintain(stream: string, partitions: number, compact: boolean): Promise<void> {
    const asked = new Map<number, Promise<number>>();
    const ask = (broker: number, partition: number): Promise<number> => {
      let a = asked.get(broker);
      if (a === undefined) {
        a = call(this.channel, broker, RPC.streamMaintain, { s: stream, p: partition, c: compact }, { timeoutMs: MAINTAIN_TIMEOUT_MS }).then((r) => r.head);
        const mine = a;
        // A refusal (no longer the owner, unreachable) is not kept: the partition's next try asks again.
        a.catch(() => asked.get(broker) === mine && asked.delete(broker));
        asked.set(broker, a);
      }
      return a;
    };
    const remote: Promise<number>[] = [];
    for (let p = 0; p < partitions; p++) {
      if (this.log.holds(stream, p)) continue;
      this.known(stream, p);
      const local = (): Promise<number> => this.maintainHere(stream, compact).then(() => 0);
      remote.push(this.atOwner(stream, p, local, (broker) => ask(broker, p)));
    }
    await Promise.all(remote);
  }

  private async maintainHere(stream: string, compact: boolean): Promise<void> {
    await this.log.flushAll();
    if (compact) await this.log.compact(stream);
  }

  async deleteRecordsBefore(stream: string, partition: number, offset: number): Promise<number> {
    if (this.log.holds(stream, partition)) return this.log.deleteRecordsBefore(stream, partition, offset);
    this.known(stream, partition);
    return this.atOwner(
      stream,
      partition,
      () => this.log.deleteRecordsBefore(stream, partition, offset),
      async (broker) => (await call(this.channel, broker, RPC.streamTrim, { s: stream, p: partition, o: offset }, { timeoutMs: REQUEST_TIMEOUT_MS })).head,
    );
  }
}
