/**
 * Appends to stream partitions in cluster mode, both ends (streams.ts describes the whole; this is its write path).
 *
 * The forwarding broker keeps, per partition, one ordered pipeline (a lane) of the appends made here that are not
 * settled yet, in the order they were made:
 * - While the lane's appends all go to one place (the owner known now, or this broker's own log when it holds the
 *   partition) they are sent at once, pipelined: gathered per owner into one request per tick, several requests in
 *   flight. No added round trip.
 * - Once one of them comes back NOT_OWNER, FENCED, UNAVAILABLE or CLOSED, or the owner known now is another broker
 *   than the one the appends in flight went to, the lane is held: nothing newer is sent (a write to this broker's
 *   own log included) until every append in flight was answered; then the owner is looked up (with a growing
 *   pause while nobody live owns it) and every append not taken yet goes to it again, in the order made, before
 *   anything newer. An append made here past its patience (three leases) fails with UNAVAILABLE.
 * - So that an owner cannot refuse an earlier append and take a later one (it became the owner between two requests,
 *   or lost the partition and took it again), each forwarded append carries a sequence number of this broker and the
 *   number of the append sent just before it to that owner (-1 when nothing earlier of the lane is in flight). The
 *   owner takes an append only if it took that previous one from this broker during its current ownership of the
 *   partition (or there is none); otherwise it answers UNAVAILABLE and the lane is held as above. An owner of the
 *   previous channel version (2) knows nothing of the numbers: appends to it are sent as before, without that check.
 * - So that a retry of an append the owner made durable before it died (or whose reply was lost) is not stored twice,
 *   each batch without a producer id is stamped here, when it is made, with this broker's forwarder producer id (one
 *   per broker life, from the same allocator as Kafka's producer ids), epoch 0 and a sequence of its own per
 *   partition, and marked as stamped in the request: the owner checks it like an idempotent producer's batch
 *   (ProducerState.checkForwarded, gaps allowed) and answers a retry with the first append's offset. The stamp is in
 *   the stored batch, so the next owner rebuilds it with the producer state (from the WAL and the segment
 *   snapshots). An owner of channel version 4 or older gets the batch unstamped (at-least-once, as before).
 *   Batches with a producer id of their own (idempotent and transactional Kafka producers) are checked as theirs.
 * - A partition this broker holds, with nothing of it pending here, is written straight to the log (the
 *   single-broker path). An append written here and refused because the partition was lost meanwhile (FENCED) is
 *   failed to its caller, not retried, unless it went through a lane.
 */
import { randomInt } from 'node:crypto';
import { FlowError, isFlowError, readBatchInfo, setProducer, type AppendResult, type PartitionOffsets } from '../core/index.js';
import type { LogManager } from '../storage/log/index.js';
import { backoffDelay } from '../util/backoff.js';
import type { Cluster } from './cluster.js';
import type { PeerChannel } from './types.js';
import { call, RPC, type AppendAnswer, type AppendHead } from './rpc.js';
import { packBuffers, unpackBuffers } from './wire.js';

/** Largest forwarded append request, in batch bytes (a single larger batch still goes alone). */
const MAX_FORWARD_BYTES = 4 * 1024 * 1024;
/** Request timeout of the forwarding calls. */
const REQUEST_TIMEOUT_MS = 15_000;
/** First pause before looking an owner up again, doubled up to MAX_RETRY_PAUSE_MS. */
const FIRST_RETRY_PAUSE_MS = 25;
const MAX_RETRY_PAUSE_MS = 500;
/** The channel version whose owners check the order of forwarded appends (the 4-element head). */
const CHAINED_SINCE = 3;
/** The channel version whose owners check batches stamped with the forwarder's producer id (the 5-element head). */
const STAMPED_SINCE = 5;
const SEQ_SPACE = 0x80000000;

/** Codes after which a forwarded call is retried at the (new) owner. */
export const MOVING = new Set(['NOT_OWNER', 'FENCED', 'UNAVAILABLE']);

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());

export function partitionName(stream: string, partition: number): string {
  return `${stream}/${partition}`;
}

/** One append made here, waiting in its partition's lane until it is settled. */
interface Forward {
  lane: Lane;
  /** The log's own copy (the caller's buffer is only borrowed). */
  batch: Buffer;
  /** The copy was stamped with this broker's forwarder producer id and a sequence (not when it had a producer id). */
  stamped: boolean;
  deadline: number;
  tries: number;
  /** This broker's number for it (the owner checks the chain of these). */
  seq: number;
  /** Sent and not answered yet. */
  sent: boolean;
  /** The number of the append sent before it to the same owner, -1 when none was in flight then. */
  prev: number;
  /** Why the last attempt failed (the cause of a final UNAVAILABLE). */
  why?: unknown;
  resolve(offset: number): void;
  reject(err: unknown): void;
}

/** A partition's appends made here and not settled, in the order made. */
interface Lane {
  name: string;
  stream: string;
  partition: number;
  items: Forward[];
  /** Where the appends in flight went: a broker id (this broker's own for its log). */
  target: number | null;
  inflight: number;
  /** Number of the append last sent to `target` (the next one's previous). */
  last: number;
  /** Something failed or the owner changed: nothing is sent until everything in flight is answered. */
  held: boolean;
  resolving: boolean;
  /** Look-ups in a row without an append taken (the pause grows with it). */
  tries: number;
}

export interface AppendStats {
  forwardedAppends: number;
  forwardRequests: number;
  forwardRetries: number;
  forwardFailures: number;
  servedAppends: number;
}

export interface StreamAppendsOptions {
  log: LogManager;
  cluster: Cluster;
  channel: PeerChannel;
  stats: AppendStats;
  /** How long an append keeps looking for its partition's owner. */
  patienceMs(): number;
  /** An owner's reply carried the partition's offsets. */
  noteOffsets(name: string, offsets: PartitionOffsets): void;
  closed(): boolean;
}

export class StreamAppends {
  private readonly lanes = new Map<string, Lane>();
  /** Forwarded appends gathered per owner until the end of the tick. */
  private readonly outbox = new Map<number, Forward[]>();
  private flushScheduled = false;
  /** Numbers start anywhere: a restarted broker's cannot meet what an owner remembers of its previous life. */
  private seq = randomInt(0, 2 ** 47);
  /** This broker's forwarder producer id (null until allocated: batches then go unstamped). */
  producerId: number | null = null;
  /** Per partition, the forwarder sequence of the next stamped batch (kept while lanes come and go). */
  private readonly stampSeq = new Map<string, number>();
  /** The owner's side: per partition held here, per forwarding broker, the number of the last append taken from it. */
  private readonly taken = new Map<string, Map<number, number>>();

  constructor(private readonly o: StreamAppendsOptions) {}

  /** True when an append to the partition goes straight to the log: held here, and nothing of it pending here. */
  direct(stream: string, partition: number): boolean {
    if (!this.o.log.holds(stream, partition)) return false;
    if (this.lanes.size === 0) return true;
    const lane = this.lanes.get(partitionName(stream, partition));
    // Not held: everything in it was sent; to this broker's log, the order is the log's.
    return lane === undefined || (!lane.held && lane.target === this.o.cluster.id);
  }

  /** An append that goes through the partition's lane (forwarded, or waiting behind earlier ones). */
  append(stream: string, partition: number, batch: Buffer, stamped = false): AppendResult {
    let resolve!: (o: number) => void;
    let reject!: (e: unknown) => void;
    const offset = new Promise<number>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // Whoever waits only for `durable` must not leave `offset`'s rejection unhandled (and the other way round).
    offset.catch(() => undefined);
    const durable = offset.then(() => undefined);
    this.o.stats.forwardedAppends++;
    const name = partitionName(stream, partition);
    let lane = this.lanes.get(name);
    if (lane === undefined) {
      lane = { name, stream, partition, items: [], target: null, inflight: 0, last: -1, held: false, resolving: false, tries: 0 };
      this.lanes.set(name, lane);
    }
    const copy = Buffer.from(batch);
    const f: Forward = {
      lane,
      batch: copy,
      // An MQTT QoS 2 publish's batch comes stamped with its session's key (Message.pubKey): checked likewise.
      stamped: stamped || this.stamp(name, copy),
      deadline: Date.now() + this.o.patienceMs(),
      tries: 0,
      seq: this.seq++,
      sent: false,
      prev: -1,
      resolve,
      reject,
    };
    lane.items.push(f);
    if (!lane.held) this.send(lane, f);
    return { baseOffset: -1, offset, durable };
  }

  /** Stamps a batch without a producer id (in place) with this broker's and the partition's next sequence. */
  private stamp(name: string, batch: Buffer): boolean {
    if (this.producerId === null) return false;
    const info = readBatchInfo(batch);
    if (info.producerId >= 0n || info.baseSequence >= 0 || info.recordCount === 0) return false;
    const seq = this.stampSeq.get(name) ?? 0;
    this.stampSeq.set(name, (seq + info.lastOffsetDelta + 1) % SEQ_SPACE);
    setProducer(batch, this.producerId, 0, seq);
    return true;
  }

  /** The owner's side: the partition was acquired or let go here; what was taken from other brokers is forgotten. */
  forget(name: string): void {
    this.taken.delete(name);
  }

  /** Sends an append of a lane that is not held to where the partition is now, or holds the lane. */
  private send(lane: Lane, f: Forward): void {
    const self = this.o.cluster.id;
    let to: number | null;
    if (this.o.log.holds(lane.stream, lane.partition)) to = self;
    else {
      const owner = this.o.cluster.owner('partition', lane.name);
      to = owner !== null && owner.broker !== self ? owner.broker : null;
    }
    if (to === null || (lane.inflight > 0 && lane.target !== to)) {
      // Unknown owner, or another one than the appends in flight went to: they are answered first.
      if (f.tries++ > 0) this.o.stats.forwardRetries++;
      this.hold(lane);
      return;
    }
    f.prev = lane.inflight > 0 ? lane.last : -1;
    lane.target = to;
    lane.inflight++;
    f.sent = true;
    if (to === self) {
      lane.last = -1;
      this.appendHere(f);
    } else {
      lane.last = f.seq;
      this.enqueue(to, f);
    }
  }

  private hold(lane: Lane): void {
    lane.held = true;
    if (lane.inflight > 0 || lane.resolving) return;
    lane.resolving = true;
    void this.resolveOwner(lane);
  }

  /** The append was taken (durable at its owner). */
  private done(f: Forward, offset: number): void {
    const lane = f.lane;
    this.settle(f);
    lane.tries = 0;
    f.resolve(offset);
  }

  /** The append was refused or lost: retried in its lane's order when the owner may have changed, else failed. */
  private failed(f: Forward, err: unknown): void {
    if (isFlowError(err) && (MOVING.has(err.code) || err.code === 'CLOSED')) {
      const lane = f.lane;
      f.sent = false;
      f.why = err;
      lane.inflight--;
      if (f.tries++ > 0) this.o.stats.forwardRetries++;
      this.hold(lane);
      return;
    }
    this.settle(f);
    f.reject(err);
  }

  /** The append is done with (taken, or failed for good): out of its lane. */
  private settle(f: Forward): void {
    const lane = f.lane;
    const i = lane.items.indexOf(f);
    if (i >= 0) lane.items.splice(i, 1);
    lane.inflight--;
    if (lane.held) this.hold(lane);
    else if (lane.items.length === 0 && this.lanes.get(lane.name) === lane) this.lanes.delete(lane.name);
  }

  /**
   * A held lane with nothing in flight: the owner is looked up in the store, again and again with a growing pause,
   * each append failing with UNAVAILABLE once past its deadline; once found, every append of the lane goes to it in
   * the order made.
   */
  private async resolveOwner(lane: Lane): Promise<void> {
    const self = this.o.cluster.id;
    for (;;) {
      if (lane.tries > 0) await sleep(backoffDelay(lane.tries, FIRST_RETRY_PAUSE_MS, MAX_RETRY_PAUSE_MS));
      lane.tries++;
      const now = Date.now();
      lane.items = lane.items.filter((f) => {
        if (f.deadline > now && !this.o.closed()) return true;
        this.o.stats.forwardFailures++;
        f.reject(new FlowError('UNAVAILABLE', `partition ${lane.name} has no reachable owner now; retry`, { cause: f.why }));
        return false;
      });
      if (lane.items.length === 0) break;
      let owner: { broker: number; epoch: number } | null = null;
      try {
        owner = await this.o.cluster.lookup('partition', lane.name);
      } catch (err) {
        for (const f of lane.items) f.why = err;
      }
      if (this.o.log.holds(lane.stream, lane.partition) || (owner !== null && owner.broker !== self)) {
        lane.resolving = false;
        lane.held = false;
        for (const f of [...lane.items]) {
          if (lane.held) return;
          if (!f.sent) this.send(lane, f);
        }
        return;
      }
      // Nobody live owns it (its owner died, or it is being handed over, or it is new): reconcile, wait, look again.
      this.o.cluster.kick();
    }
    lane.resolving = false;
    lane.held = false;
    if (this.lanes.get(lane.name) === lane) this.lanes.delete(lane.name);
  }

  /** The partition is this broker's: the append goes to its log, in the lane's order. */
  private appendHere(f: Forward): void {
    try {
      const r = this.o.log.append(f.lane.stream, f.lane.partition, f.batch, f.stamped);
      r.durable.then(
        () => this.done(f, r.baseOffset),
        (err: unknown) => this.failed(f, err),
      );
    } catch (err) {
      this.failed(f, err);
    }
  }

  private enqueue(broker: number, f: Forward): void {
    let list = this.outbox.get(broker);
    if (!list) this.outbox.set(broker, (list = []));
    list.push(f);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    }
  }

  /** One request per owner for the appends gathered this tick (split past MAX_FORWARD_BYTES), in order. */
  private flush(): void {
    this.flushScheduled = false;
    for (const [broker, list] of this.outbox) {
      this.outbox.delete(broker);
      let start = 0;
      while (start < list.length) {
        let bytes = 0;
        let end = start;
        while (end < list.length && (end === start || bytes + list[end].batch.length <= MAX_FORWARD_BYTES)) bytes += list[end++].batch.length;
        void this.sendAppends(broker, list.slice(start, end));
        start = end;
      }
    }
  }

  private async sendAppends(broker: number, items: Forward[]): Promise<void> {
    this.o.stats.forwardRequests++;
    const version = this.o.channel.peerVersion(broker) ?? STAMPED_SINCE;
    const chained = version >= CHAINED_SINCE;
    const stamped = version >= STAMPED_SINCE;
    const head = items.map((f): AppendHead => {
      if (stamped) return [f.lane.stream, f.lane.partition, f.seq, f.prev, f.stamped ? 1 : 0];
      return chained ? [f.lane.stream, f.lane.partition, f.seq, f.prev] : [f.lane.stream, f.lane.partition];
    });
    // An owner of an older version would take the stamp for a Kafka producer's (strict sequences): it gets it unstamped.
    const bufs = items.map((f) => (stamped || !f.stamped ? f.batch : unstamped(f.batch)));
    let answers: AppendAnswer[];
    try {
      answers = (await call(this.o.channel, broker, RPC.streamAppend, head, { tail: packBuffers(bufs), timeoutMs: REQUEST_TIMEOUT_MS })).head;
      if (answers.length !== items.length) throw new FlowError('PROTOCOL_ERROR', 'stream.append reply does not match its request');
    } catch (err) {
      // The whole request failed (the owner is unreachable, or did not answer): each append looks for its owner again.
      for (const f of items) this.failed(f, err);
      return;
    }
    items.forEach((f, i) => {
      const a = answers[i];
      if ('o' in a) {
        this.o.noteOffsets(f.lane.name, { logStartOffset: a.l, highWatermark: a.h });
        this.done(f, a.o);
      } else this.failed(f, new FlowError(a.e as 'STORAGE_ERROR', a.m));
    });
  }

  // ---------------------------------------------------------------- the owner's side

  /**
   * Appends forwarded by broker `from`, answered once every one of them is durable here (or failed). In order,
   * synchronously: the batches of a partition get their offsets in the order they were sent; one whose previous
   * append was not taken here (during this ownership) is refused, so that nothing overtakes it.
   */
  async serve(from: number, head: AppendHead[], tail: Buffer): Promise<AppendAnswer[]> {
    const batches = unpackBuffers(tail);
    if (head.length !== batches.length) throw new FlowError('PROTOCOL_ERROR', 'stream.append: heads and batches differ in number');
    const log = this.o.log;
    const answers: Array<AppendAnswer | Promise<AppendAnswer>> = head.map(([s, p, seq, prev, stamped], i) => {
      if (!log.holds(s, p)) return { e: 'NOT_OWNER', m: `partition ${s}/${p} is not served by broker ${this.o.cluster.id}` };
      let chain: Map<number, number> | undefined;
      if (seq !== undefined) {
        const name = partitionName(s, p);
        chain = this.taken.get(name);
        if (chain === undefined) this.taken.set(name, (chain = new Map<number, number>()));
        if (prev !== undefined && prev !== -1 && chain.get(from) !== prev) {
          return { e: 'UNAVAILABLE', m: `an earlier append to ${name} from broker ${from} was not taken by broker ${this.o.cluster.id}; retry in order` };
        }
      }
      try {
        const r = log.append(s, p, batches[i], stamped === 1);
        if (seq !== undefined) chain!.set(from, seq);
        this.o.stats.servedAppends++;
        return r.durable.then(
          (): AppendAnswer => {
            const off = log.holds(s, p) ? log.offsets(s, p) : { logStartOffset: 0, highWatermark: 0 };
            return { o: r.baseOffset, ...(r.duplicate ? { d: 1 as const } : {}), h: off.highWatermark, l: off.logStartOffset };
          },
          (err: unknown): AppendAnswer => failure(err),
        );
      } catch (err) {
        // Refused for good (a bad batch, an idempotent producer's sequence): it is settled, the next may follow it.
        if (seq !== undefined && !(isFlowError(err) && (MOVING.has(err.code) || err.code === 'CLOSED'))) chain!.set(from, seq);
        return failure(err);
      }
    });
    return Promise.all(answers);
  }
}

function unstamped(batch: Buffer): Buffer {
  const b = Buffer.from(batch);
  setProducer(b, -1, -1, -1);
  return b;
}

export function failure(err: unknown): AppendAnswer {
  if (isFlowError(err)) return { e: err.code, m: err.message };
  return { e: 'STORAGE_ERROR', m: err instanceof Error ? err.message : String(err) };
}
