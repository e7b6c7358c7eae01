/**
 * One JetStream consumer (pull, or push through a standing request) over a FlowMQ stream: its position, the
 * deliveries waiting for an ack, and the pull requests waiting for messages. What follows is the single-partition
 * model; a stream of several partitions (last paragraph) keeps one such position per partition.
 *
 * Position (JetStream's model, stream sequence = offset + 1): `cursor` is the next stream sequence to look at;
 * every sequence below it was delivered, skipped by the filter, or acked before a restart. `pending` holds the
 * deliveries not acked yet (in first-delivery order, so its first key is the lowest), `acked` the sequences above
 * the ack floor acked out of order. The ack floor is derived: one below the lowest pending sequence, or one below
 * the cursor. What survives a restart is the ack floor, the out-of-order acks and the highest delivered sequence
 * (ConsumerStateStore), with the delivery counts above 1 of the deliveries not acked yet (`rdc`, carried in the
 * stored configuration under DELIVERIES_KEY as flat [seq, count, ...] pairs: the store keeps the config as opaque
 * JSON). At start the cursor goes back to the floor, and everything delivered but not acked is delivered again (at
 * least once), counted on from its stored count (2 for one delivered once); one that reached max_deliver is not
 * delivered again.
 *
 * Messages are not kept in memory while they wait for an ack: a redelivery reads the stream again.
 *
 * A stream of P > 1 partitions (docs/jetstream.md): the position is one cursor per partition (consumer-parts.ts), the
 * sequences are partition-seq.ts's, and what survives a restart is each partition's ack floor and highest delivered
 * offset (under PARTS_KEY in the stored configuration, with the partition count they were numbered with), the
 * scalar ack floor and delivered sequence being derived from them.
 */
import { dotsToUnified, makeMessage, type ConsumerRecord, type Engine, type Message } from '../../../core/index.js';
import { ackTopicPrefix, ownStream } from './names.js';
import type { ConsumerConfig } from './config.js';
import { fillPart, readAt, type Entry, type Part } from './consumer-parts.js';
import {
  consumedPartitions,
  continuationOf,
  DELIVERIES_KEY,
  locate,
  partFloors,
  PARTS_KEY,
  pendingOverParts,
  restoreState,
  SINCE_KEY,
  type ConsumerStart,
  type LastPerSubject,
} from './consumer-state.js';
import { finishRequest, idleHeartbeat, pullSize, SIZE_EXCEEDED, type PullRequest } from './consumer-pull.js';
import { floorSeq, seqOf } from './partition-seq.js';
import type { StreamView } from './stream-view.js';
import { subjectMatches } from './subjects.js';

/** What a consumer needs from the JetStream service. */
export interface ConsumerHost {
  readonly engine: Engine;
  /**
   * Publishes a delivery or a status to a pull request's inbox (the NATS adapter renders it). `to`: the broker the
   * request came from (cluster mode: a request forwarded by another broker), which publishes it to its client.
   */
  send(msg: Message, to?: number): void;
  /** The consumer's durable state changed: write it (coalesced). */
  changed(c: Consumer): void;
  /** A read failed or the stream vanished. */
  failed(c: Consumer, err: unknown): void;
  /** The stream's view of deletes, limits and rollups (stream-view.ts), or null: every message of the log is live. */
  viewOf(stream: string): StreamView | null;
  /** Publishes a JetStream advisory (`$JS.EVENT.ADVISORY.<what>`, body of nats-server's advisory `type`). */
  /** `stream`: the internal name of the stream it is about, whose namespace it is published in (names.ts). */
  advise(what: string, type: string, body: Record<string, unknown>, stream?: string): void;
  /** The consumer is done with `seq` (acked, terminated, delivered without acks): workqueue and interest streams. */
  consumed(c: Consumer, seq: number): void;
  /** Cluster mode (non-null): push flow control is off (an answer may reach another broker). */
  readonly cluster: object | null;
}

interface Pending {
  cseq: number;
  deliveries: number;
  /** ms; Infinity while queued for redelivery. */
  deadline: number;
  /** Record timestamp, ms. */
  ts: number;
}

/** Bytes read from the stream per step. */
const READ_BYTES = 256 * 1024;
/** Longest wait for new records before looking again. */
const WAIT_MS = 5000;
/**
 * Push flow control (flow_control: true): payload bytes a push consumer may have delivered and not confirmed by an
 * answered flow-control request. A request goes out at half of it; deliveries pause at all of it until answered.
 */
export const FLOW_WINDOW_BYTES = 1024 * 1024;
let flowIds = 0;

export class Consumer {
  /** Partitions of the stream when the consumer was made (its sequences are numbered over this many). */
  readonly partitions: number;
  /** One per partition. */
  readonly parts: Part[] = [];
  cseq: number;
  readonly acked = new Set<number>();
  readonly pending = new Map<number, Pending>();
  /** Sequences due for redelivery, ascending. */
  readonly redeliver: number[] = [];
  /** Delivery counts above 1 of messages not acked yet (num_redelivered). */
  readonly rdc = new Map<number, number>();
  readonly waiting: PullRequest[] = [];
  lastActive = Date.now();
  /** No pending delivery's deadline is before this (the ticker skips the scan until then). */
  private earliest = Infinity;
  lastDelivered = 0;
  lastAcked = 0;
  /**
   * A consumer without acks (what ordered consumers are) of a multi-partition stream: the stream sequences it
   * delivered lately, in order (continuationFrom); null for the others.
   */
  private recent: number[] | null = null;
  /** deliver_policy last_per_subject, until the consumer is past the sequences it chose at creation. */
  lps: LastPerSubject | null = null;
  closed = false;
  /**
   * Interest streams: the stream's last sequence when the consumer was created. Only later messages wait for its
   * acks (a message is kept until every consumer that existed when it was stored is done with it).
   */
  since = 0;
  /** Cluster mode: the epoch under which this broker owns the consumer; its state writes are fenced by it. */
  epoch: number | undefined = undefined;
  private pumping = false;
  private again = false;
  /** Push flow control: payload bytes delivered and not confirmed yet. */
  private flowBytes = 0;
  /** The flow-control request waiting for its answer (`$JS.FC.<stream>.<consumer>.<id>`), and the bytes it confirms. */
  private flowOpen: { subject: string; bytes: number } | null = null;
  /** `$JS/ACK/<stream>/<consumer>/`, inside the stream's namespace and with its own name there (names.ts). */
  private readonly ackPrefix: string;

  constructor(
    private readonly host: ConsumerHost,
    readonly stream: string,
    readonly name: string,
    public config: ConsumerConfig,
    readonly created: number,
    readonly durable: boolean,
    state: ConsumerStart,
  ) {
    const def = host.engine.getAnyStream(stream)?.def;
    this.ackPrefix = ackTopicPrefix(stream, name, 'ACK');
    const n = def === undefined ? 1 : consumedPartitions(def);
    this.partitions = n;
    this.cseq = state.deliveredConsumerSeq;
    const r = restoreState(n, config, state);
    this.parts.push(...r.parts);
    for (const seq of r.acked) this.acked.add(seq);
    for (const [seq, count] of r.rdc) this.rdc.set(seq, count);
    this.since = r.since;
    config = r.config;
    this.setConfig(config);
  }

  /** The partition and local sequence (offset + 1) of stream sequence `seq`. */
  private locate(seq: number): { pt: Part; local: number } {
    return locate(this.parts, seq);
  }

  /** Offsets done in each partition (the per-partition ack floors, as local sequences). */
  floors(): number[] {
    return partFloors(this.parts, this.pending.keys());
  }

  /** Whether `seq` is at or below its partition's ack floor (`floors` from floors()). */
  private belowFloor(seq: number, floors: number[]): boolean {
    const { pt, local } = this.locate(seq);
    return pt === undefined || local <= floors[pt.index];
  }

  /**
   * (Re)applies the configuration: a push consumer (deliver_subject) has one standing request to its deliver
   * subject, served while someone listens there.
   */
  setConfig(config: ConsumerConfig): void {
    this.config = config;
    if (this.partitions > 1 && config.ack_policy === 'none') this.recent ??= [];
    else this.recent = null;
    const i = this.waiting.findIndex((r) => r.push === true);
    if (i >= 0) this.waiting.splice(i, 1);
    const subject = config.deliver_subject;
    if (subject === undefined) return;
    const hb = (config.idle_heartbeat ?? 0) / 1e6;
    this.waiting.unshift({
      reply: dotsToUnified(subject),
      batch: Infinity,
      bytesLeft: 0,
      maxBytes: 0,
      expiresAt: 0,
      noWait: false,
      heartbeatMs: hb,
      nextHeartbeat: Date.now() + hb,
      delivered: 0,
      push: true,
    });
  }

  get isPush(): boolean {
    return this.config.deliver_subject !== undefined;
  }

  /** A push consumer has someone listening on its deliver subject. */
  get pushBound(): boolean {
    const r = this.waiting[0];
    return r?.push === true && this.host.engine.hasLiveSubscribers(r.reply);
  }

  /** Every stream sequence up to this one is done with (partition-seq.ts floorSeq over P > 1 partitions). */
  get ackFloor(): number {
    if (this.partitions === 1) {
      for (const k of this.pending.keys()) return k - 1;
      return this.parts[0].cursor - 1;
    }
    return floorSeq(this.floors());
  }

  /** Consumer sequence at the ack floor (derived: the store keeps no per-delivery consumer sequences). */
  get floorCseq(): number {
    for (const p of this.pending.values()) return Math.max(0, p.cseq - 1);
    return this.cseq;
  }

  /** Highest stream sequence handed out (survives restarts). */
  get deliveredSeq(): number {
    if (this.partitions === 1) return Math.max(this.parts[0].cursor - 1, this.parts[0].replayUpTo);
    let max = 0;
    for (const pt of this.parts) {
      const local = Math.max(pt.cursor - 1, pt.replayUpTo);
      if (local > 0) max = Math.max(max, seqOf(this.partitions, pt.index, local - 1));
    }
    return max;
  }

  /** Whether the consumer is done with stream sequence `seq` (acked, or passed without a pending delivery). */
  hasAcked(seq: number): boolean {
    if (this.partitions === 1) return seq <= this.ackFloor || this.acked.has(seq);
    return this.belowFloor(seq, this.floors()) || this.acked.has(seq);
  }

  acceptsTopic(topic: string): boolean {
    const f = this.config.filter_subject;
    return f === undefined || subjectMatches(f, topic);
  }

  record(): ConsumerRecord {
    const floors = this.floors();
    const floor = floorSeq(floors);
    const acked = [...this.acked].filter((s) => !this.belowFloor(s, floors)).sort((a, b) => a - b);
    const counts: number[] = [];
    for (const seq of [...this.rdc.keys()].sort((a, b) => a - b)) if (!this.belowFloor(seq, floors)) counts.push(seq, this.rdc.get(seq) as number);
    const extra: Record<string, unknown> = {};
    if (this.since > 0) extra[SINCE_KEY] = this.since;
    if (counts.length > 0) extra[DELIVERIES_KEY] = counts;
    if (this.partitions > 1) {
      extra[PARTS_KEY] = { n: this.partitions, floors, delivered: this.parts.map((pt) => Math.max(pt.cursor - 1, pt.replayUpTo)) };
    }
    return {
      stream: this.stream,
      name: this.name,
      // `since` and the delivery counts ride with the configuration (the store keeps it as opaque JSON); taken out
      // again when loaded.
      config: JSON.stringify({ ...this.config, ...extra }),
      createdAt: this.created,
      deliveredSeq: this.deliveredSeq,
      deliveredConsumerSeq: this.cseq,
      ackFloor: floor,
      acked,
    };
  }

  private get ackWaitMs(): number {
    return (this.config.ack_wait ?? 30e9) / 1e6;
  }

  /**
   * Messages not delivered yet. Without a view, an upper bound for a filtered consumer (the filter is applied when
   * read); with one, the live messages the consumer will deliver (those the view has not seen yet counted as such).
   */
  numPending(): number {
    if (this.partitions > 1) return this.numPendingParts();
    const cursor = this.parts[0].cursor;
    const { highWatermark } = this.host.engine.offsets(this.stream, 0);
    const view = this.host.viewOf(this.stream);
    if (view === null) return Math.max(0, highWatermark - (cursor - 1));
    const f = this.config.filter_subject;
    const unseen = Math.max(0, highWatermark - Math.max(view.scanned, cursor - 1));
    const lps = this.lps;
    if (lps !== null && cursor <= lps.until) {
      // Those chosen at creation and not passed yet (one deleted meanwhile is still counted until passed).
      let lo = 0;
      let hi = lps.sorted.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (lps.sorted[mid] < cursor) lo = mid + 1;
        else hi = mid;
      }
      return lps.sorted.length - lo + view.countFrom(lps.until + 1, f) + unseen;
    }
    return view.countFrom(cursor, f) + unseen;
  }

  /**
   * num_pending over P > 1 partitions (no view: consumer-api.ts refuses those streams): what each partition holds
   * past its cursor (an upper bound for a filtered consumer), deliver last_per_subject's choice while not passed.
   */
  private numPendingParts(): number {
    return pendingOverParts(this.host.engine, this.stream, this.parts, this.lps);
  }

  // ------------------------------------------------------------ pull requests

  addRequest(req: PullRequest): void {
    this.lastActive = Date.now();
    this.waiting.push(req);
    this.pump();
  }

  /** Ends a request with a status (the client's fetch completes on it). */
  private finish(req: PullRequest, status: string, withPending: boolean): void {
    finishRequest((m, to) => this.host.send(m, to), this.waiting, req, status, withPending);
  }

  /**
   * Whether a pull request can no longer take messages, checked before each delivery as nats-server does: past its
   * expiry (the ticker may not have ended it yet; ended now with 408), or nobody listens on its reply subject any more
   * (dropped without a word). A client's fetch gives up on its own clock (nats.js: 5% after `expires`), so without
   * this a message arriving in the ticker's lag went to a request its client had left, and waited for ack_wait.
   * Interest is only known for certain here for a client of this broker; a forwarded request (cluster mode) is
   * trusted until it expires.
   */
  private lapsed(req: PullRequest): boolean {
    if (req.expiresAt > 0 && Date.now() >= req.expiresAt) {
      this.finish(req, '408 Request Timeout', true);
      return true;
    }
    if (req.origin !== undefined || this.host.engine.hasLiveSubscribers(req.reply)) return false;
    const i = this.waiting.indexOf(req);
    if (i >= 0) this.waiting.splice(i, 1);
    return true;
  }

  /** Timers: request expiry, idle heartbeats, ack deadlines. Called by the service's ticker. */
  tick(now: number): void {
    for (const req of this.waiting.slice()) {
      if (req.push === true) {
        // Deliveries wait for interest on the deliver subject; look again now and then. Nothing is in flight to
        // nobody: flow control starts over with the next listener.
        if (!this.host.engine.hasLiveSubscribers(req.reply)) {
          this.flowBytes = 0;
          this.flowOpen = null;
          continue;
        }
        this.lastActive = now;
        this.pump();
      }
      if (req.expiresAt > 0 && now >= req.expiresAt) {
        this.finish(req, '408 Request Timeout', true);
      } else if (req.heartbeatMs > 0 && now >= req.nextHeartbeat) {
        req.nextHeartbeat = now + req.heartbeatMs;
        // A flow-control request not answered (lost, or sent before the client listened): named again.
        const stalled = req.push === true && this.flowOpen !== null ? this.flowOpen.subject : undefined;
        this.host.send(idleHeartbeat(req, this.cseq, this.lastDelivered, stalled), req.origin);
      }
    }
    if (this.waiting.length > 0 && !this.isPush) this.lastActive = now;
    if (now < this.earliest) return;
    let due = false;
    let earliest = Infinity;
    for (const [seq, p] of this.pending) {
      if (p.deadline > now) {
        if (p.deadline < earliest) earliest = p.deadline;
        continue;
      }
      const max = this.config.max_deliver;
      if (max > 0 && p.deliveries >= max) {
        // Delivered as often as allowed: it leaves the pending set (nats-server drops it the same way).
        this.advisory('MAX_DELIVERIES', 'max_deliver', { stream_seq: seq, deliveries: p.deliveries });
        this.pending.delete(seq);
        this.rdc.delete(seq);
        this.acked.add(seq);
        this.host.changed(this);
        this.host.consumed(this, seq);
        continue;
      }
      p.deadline = Infinity;
      insertSorted(this.redeliver, seq);
      due = true;
    }
    this.earliest = earliest;
    if (due) this.pump();
  }

  // ------------------------------------------------------------ acks

  /** An ack on `$JS.ACK...` naming stream sequence `seq`. Returns false for an unknown kind. */
  ack(seq: number, body: string): { ok: boolean; next?: string } {
    this.lastActive = Date.now();
    const kind = body.length >= 4 ? body.slice(0, 4) : body;
    if (body.length === 0 || kind === '+ACK') {
      this.acknowledge(seq);
      return { ok: true };
    }
    if (kind === '+NXT') {
      this.acknowledge(seq);
      return { ok: true, next: body.slice(4).trim() };
    }
    if (kind === '-NAK') {
      const p = this.pending.get(seq);
      if (p !== undefined && p.deadline !== Infinity) {
        let delayMs = 0;
        const rest = body.slice(4).trim();
        if (rest.length > 0) {
          try {
            const d = (JSON.parse(rest) as { delay?: unknown }).delay;
            if (typeof d === 'number' && d > 0) delayMs = d / 1e6;
          } catch {
            // nats-server ignores a malformed delay and redelivers at once.
          }
        }
        if (delayMs > 0) this.setDeadline(p, Date.now() + delayMs);
        else {
          p.deadline = Infinity;
          insertSorted(this.redeliver, seq);
          this.pump();
        }
      }
      return { ok: true };
    }
    if (kind === '+WPI') {
      const p = this.pending.get(seq);
      if (p !== undefined && p.deadline !== Infinity) this.setDeadline(p, Date.now() + this.ackWaitMs);
      return { ok: true };
    }
    if (kind === '+TER') {
      const p = this.pending.get(seq);
      if (p !== undefined) {
        this.advisory('MSG_TERMINATED', 'terminated', { consumer_seq: p.cseq, stream_seq: seq, deliveries: p.deliveries });
      }
      this.acknowledge(seq);
      return { ok: true };
    }
    return { ok: false };
  }

  private setDeadline(p: Pending, at: number): void {
    p.deadline = at;
    if (at < this.earliest) this.earliest = at;
  }

  private acknowledge(seq: number): void {
    if (this.config.ack_policy === 'none') return;
    const before = this.partitions === 1 ? this.ackFloor : 0;
    let any = false;
    if (this.config.ack_policy === 'all' && this.partitions === 1) {
      for (const s of [...this.pending.keys()]) if (s <= seq) any = this.drop(s) || any;
    } else if (this.config.ack_policy === 'all') {
      // Over partitions, "all up to this one" is in delivery order: every pending delivery with a lower consumer seq.
      const upTo = this.pending.get(seq)?.cseq ?? 0;
      for (const [s, p] of [...this.pending]) if (p.cseq <= upTo) any = this.drop(s) || any;
    } else any = this.drop(seq);
    if (!any) return;
    this.lastAcked = Date.now();
    if (this.partitions > 1) {
      // Pruned now and then: finding each partition's floor walks the pending deliveries, and an ack below its floor
      // left in the set changes nothing (record() leaves such acks out).
      if (this.acked.size > ACKED_PRUNE) {
        const floors = this.floors();
        for (const s of this.acked) if (this.belowFloor(s, floors)) this.acked.delete(s);
      }
    } else {
      const floor = this.ackFloor;
      if (floor !== before) for (const s of this.acked) if (s <= floor) this.acked.delete(s);
    }
    this.host.changed(this);
    // max_ack_pending may have held deliveries back.
    if (this.waiting.length > 0) this.pump();
  }

  private drop(seq: number): boolean {
    const p = this.pending.get(seq);
    if (p === undefined) return false;
    this.pending.delete(seq);
    this.rdc.delete(seq);
    if (p.deadline === Infinity) {
      const i = this.redeliver.indexOf(seq);
      if (i >= 0) this.redeliver.splice(i, 1);
    }
    this.acked.add(seq);
    this.host.consumed(this, seq);
    return true;
  }

  // ------------------------------------------------------------ delivery

  /** Delivers to waiting requests while there are messages (one loop at a time per consumer). */
  pump(): void {
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = true;
    void this.loop()
      .catch((err: unknown) => this.host.failed(this, err))
      .finally(() => {
        this.pumping = false;
        // A wake-up that came after the loop's last look but before it ended.
        if (this.again && !this.closed) this.pump();
      });
  }

  /**
   * A subscription was made somewhere: a push consumer whose loop stopped for want of interest (it is not waiting for
   * data, nor delivering, nor held by flow control) delivers now if someone listens on its deliver subject, as
   * nats-server's consumer does when interest appears, instead of at the next tick (up to 100 ms later: long enough for
   * a KV watcher's first update to be replaced by the next put under history 1, and never seen).
   */
  interestMaybe(): void {
    if (this.closed || this.pumping || this.waiting[0]?.push !== true || this.flowStalled) return;
    if (this.parts.some((pt) => pt.waiting)) return;
    if (this.pushBound) this.pump();
  }

  private async loop(): Promise<void> {
    let burst = 0;
    do {
      this.again = false;
      while (this.waiting.length > 0 && !this.closed) {
        // A push consumer without acks has no window: let sockets write between bursts.
        if (++burst % 256 === 0) await new Promise<void>((r) => setImmediate(r));
        const next = await this.peek();
        if (this.closed) return;
        if (next === null) break;
        const req = this.waiting[0];
        if (req === undefined) break;
        // A push consumer nobody listens to keeps its messages (the ticker looks for interest again).
        if (req.push === true && !this.host.engine.hasLiveSubscribers(req.reply)) break;
        if (req.push === true && this.flowStalled) break;
        if (req.push !== true && this.lapsed(req)) continue;
        this.deliver(req, next.seq, next.msg, next.redelivery);
      }
      if (this.closed) return;
      // Nothing more to deliver now: no_wait requests end here (nats-server 2.9: 404 when nothing was delivered,
      // else 408 with what is left).
      for (const req of this.waiting.slice()) {
        if (!req.noWait) continue;
        if (req.delivered === 0) this.finish(req, '404 No Messages', false);
        else this.finish(req, '408 Request Timeout', true);
      }
      if (this.waiting.length > 0 && !this.again && !(this.waiting[0].push === true && (!this.pushBound || this.flowStalled))) this.waitForData();
    } while (this.again && !this.closed);
  }

  private waitForData(): void {
    if (this.redeliver.length > 0) return;
    if (this.ackPendingFull) return;
    // One wait per partition at a time: whichever partition grows first wakes the consumer.
    for (const pt of this.parts) {
      if (pt.waiting) continue;
      pt.waiting = true;
      // Held at an open Kafka transaction (the last stable offset is below the high watermark): wait for the log to
      // grow (its marker), not for what is already there.
      const { highWatermark } = this.host.engine.offsets(this.stream, pt.index);
      const held = pt.cursor - 1 >= this.host.engine.transactions.lso(this.stream, pt.index, highWatermark);
      void this.host.engine
        .waitFor(this.stream, pt.index, held ? Math.max(pt.cursor - 1, highWatermark) : pt.cursor - 1, WAIT_MS)
        .catch(() => undefined)
        .then(() => {
          pt.waiting = false;
          if (!this.closed && this.waiting.length > 0) this.pump();
        });
    }
  }

  /** The next message to hand out (a redelivery first), without taking it. */
  private async peek(): Promise<{ seq: number; msg: Message; redelivery: boolean } | null> {
    for (;;) {
      if (this.redeliver.length > 0) {
        const seq = this.redeliver[0];
        const msg = await this.readOne(seq);
        if (this.closed) return null;
        if (this.redeliver[0] !== seq) continue;
        if (msg === null) {
          // Gone from the stream (retention, purge): nothing to redeliver.
          this.redeliver.shift();
          this.drop(seq);
          this.host.changed(this);
          continue;
        }
        return { seq, msg, redelivery: true };
      }
      if (this.ackPendingFull) return null;
      // The lowest stream sequence among the partitions' next messages (consumer-parts.ts).
      let best: Entry | null = null;
      for (const pt of this.parts) {
        const head = await this.headOf(pt);
        if (this.closed) return null;
        if (head !== null && (best === null || head.seq < best.seq)) best = head;
      }
      if (best === null) return null;
      return { seq: best.seq, msg: best.msg, redelivery: false };
    }
  }

  /** The next message of partition `pt` this consumer delivers, read if need be, or null when it has none now. */
  private async headOf(pt: Part): Promise<Entry | null> {
    const bytes = this.partitions === 1 ? READ_BYTES : Math.max(Math.floor(READ_BYTES / this.partitions), 32 * 1024);
    for (;;) {
      while (pt.bufAt < pt.buffer.length && pt.buffer[pt.bufAt].local < pt.cursor) pt.bufAt++;
      if (pt.bufAt >= pt.buffer.length) {
        if (!(await fillPart(this.host, this.stream, this.partitions, pt, bytes, () => this.closed))) return null;
        continue;
      }
      const head = pt.buffer[pt.bufAt];
      if (head.local > pt.cursor) pt.cursor = head.local;
      if (this.acked.has(head.seq) || !this.accepts(head.msg) || this.skips(head.seq, pt, head.local) || this.exhausted(head.seq, pt, head.local)) {
        pt.cursor = head.local + 1;
        pt.bufAt++;
        this.rdc.delete(head.seq);
        this.host.changed(this);
        continue;
      }
      return head;
    }
  }

  /**
   * A delivery of a previous run (before a restart) that reached max_deliver: done with, as when its ack wait ends
   * (the advisory then, and the consumer passes it).
   */
  private exhausted(seq: number, pt: Part, local: number): boolean {
    const max = this.config.max_deliver;
    if (!(max > 0) || local > pt.replayUpTo || this.pending.has(seq)) return false;
    const deliveries = this.rdc.get(seq) ?? 1;
    if (deliveries < max) return false;
    this.advisory('MAX_DELIVERIES', 'max_deliver', { stream_seq: seq, deliveries });
    this.acked.add(seq);
    this.host.consumed(this, seq);
    return true;
  }

  /** Not to be delivered: deleted (stream-view.ts), or not a subject's last while deliver last_per_subject. */
  private skips(seq: number, pt: Part, local: number): boolean {
    const lps = this.lps;
    if (lps !== null) {
      const untils = lps.untils;
      if (untils === undefined) {
        if (seq > lps.until) this.lps = null;
        else if (!lps.seqs.has(seq)) return true;
      } else if (local <= (untils[pt.index] ?? 0) && !lps.seqs.has(seq)) return true;
    }
    return this.host.viewOf(this.stream)?.isDeleted(seq) ?? false;
  }

  accepts(msg: Message): boolean {
    const f = this.config.filter_subject;
    return f === undefined || subjectMatches(f, msg.topic);
  }

  private readOne(seq: number): Promise<Message | null> {
    const { pt, local } = this.locate(seq);
    return readAt(this.host.engine, this.stream, pt.index, local - 1);
  }

  private deliver(req: PullRequest, seq: number, stored: Message, redelivery: boolean): void {
    const now = Date.now();
    let p = this.pending.get(seq);
    const { pt, local } = this.locate(seq);
    // Acks may have run between the read and now: what was taken meanwhile is not delivered.
    if (redelivery ? p === undefined || !this.redeliver.includes(seq) : local < pt.cursor || p !== undefined) return;
    // After a restart: counted on from the stored count (1 when none was stored: delivered once).
    const deliveries = p !== undefined ? p.deliveries + 1 : local <= pt.replayUpTo ? (this.rdc.get(seq) ?? 1) + 1 : 1;
    // What is left once this one is delivered (the message itself is still counted now).
    const pendingAfter = redelivery ? 0 : Math.max(0, this.numPending() - 1);
    const ack = `${this.ackPrefix}${deliveries}/${seq}/${this.cseq + 1}/${stored.timestamp}000000/${pendingAfter}`;
    const size = pullSize(stored, ack);
    // Not taken: the request ends (consumer-pull.ts), the message waits for the next one.
    if (req.maxBytes > 0 && size > req.bytesLeft) return this.finish(req, SIZE_EXCEEDED, true);
    if (redelivery) this.redeliver.splice(this.redeliver.indexOf(seq), 1);
    else {
      pt.cursor = local + 1;
      if (pt.buffer[pt.bufAt]?.seq === seq) pt.bufAt++;
    }
    this.cseq++;
    if (p !== undefined) {
      p.deliveries = deliveries;
      p.cseq = this.cseq;
    } else {
      p = { cseq: this.cseq, deliveries, deadline: 0, ts: stored.timestamp };
      if (this.config.ack_policy !== 'none') this.pending.set(seq, p);
      // Without acks a delivered message is done with (nats-server: interest and workqueue streams drop it).
      else this.host.consumed(this, seq);
    }
    if (deliveries > 1) this.rdc.set(seq, deliveries);
    const backoff = this.config.backoff;
    const waitMs = backoff !== undefined ? backoff[Math.min(deliveries - 1, backoff.length - 1)] / 1e6 : this.ackWaitMs;
    this.setDeadline(p, now + waitMs);
    this.lastDelivered = seq;
    if (this.recent !== null) {
      this.recent.push(seq);
      if (this.recent.length > 2 * RECENT) this.recent.splice(0, this.recent.length - RECENT);
    }
    const { topic: _t, retain: _r, deliverTopic: _d, guardTopic: _g, status: _s, origin: _o, ...rest } = stored;
    // The inbox is a topic like any other: only receivers allowed to read the stored message's own topic get it.
    const out: Message = { ...rest, topic: req.reply, deliverTopic: stored.topic, guardTopic: stored.topic, responseTopic: ack, retain: false, qos: 0 };
    if (this.config.headers_only === true) {
      out.payload = Buffer.alloc(0);
      out.headers = [...stored.headers, { key: 'Nats-Msg-Size', value: Buffer.from(String(stored.payload.length)) }];
      // The block is rendered from the headers then (with Nats-Msg-Size), not passed on as published.
      delete out.natsHeaders;
    }
    req.delivered++;
    if (req.maxBytes > 0) req.bytesLeft -= size;
    if (req.heartbeatMs > 0) req.nextHeartbeat = now + req.heartbeatMs;
    if (req.delivered >= req.batch || (req.maxBytes > 0 && req.bytesLeft === 0)) {
      const i = this.waiting.indexOf(req);
      if (i >= 0) this.waiting.splice(i, 1);
    }
    this.lastActive = now;
    this.host.send(out, req.origin);
    if (req.push === true && this.flowControlled) this.flowCount(req, stored.payload.length);
    this.host.changed(this);
  }

  /** max_ack_pending deliveries wait for an ack (a negative one, which nats-server accepts, limits nothing). */
  private get ackPendingFull(): boolean {
    const max = this.config.max_ack_pending ?? -1;
    return this.config.ack_policy !== 'none' && max > 0 && this.pending.size >= max;
  }

  private get flowControlled(): boolean {
    return this.config.flow_control === true && this.host.cluster === null;
  }

  /** Push flow control: deliveries wait for the open request's answer. */
  private get flowStalled(): boolean {
    return this.flowOpen !== null && this.flowBytes >= FLOW_WINDOW_BYTES;
  }

  /** After a push delivery of `bytes`: a flow-control request once half the window is used (nats-server's). */
  private flowCount(req: PullRequest, bytes: number): void {
    this.flowBytes += bytes;
    if (this.flowOpen !== null || this.flowBytes < FLOW_WINDOW_BYTES / 2) return;
    const id = (++flowIds).toString(36);
    const subject = `$JS.FC.${this.stream}.${this.name}.${id}`;
    this.flowOpen = { subject, bytes: this.flowBytes };
    // Answered on the stream's namespace's `$JS.FC.<stream>.<consumer>.<id>` (service.ts qualifies the stream again).
    this.host.send(
      makeMessage(req.reply, Buffer.alloc(0), { status: '100 FlowControl Request', responseTopic: ackTopicPrefix(this.stream, this.name, 'FC') + id }),
    );
  }

  /** A message on `$JS.FC.<stream>.<consumer>.<id>`: the open request answered, deliveries go on. */
  flowAnswer(subject: string): void {
    const open = this.flowOpen;
    if (open === null || open.subject !== subject) return;
    this.flowOpen = null;
    this.flowBytes = Math.max(0, this.flowBytes - open.bytes);
    this.lastActive = Date.now();
    this.pump();
  }

  /** `$JS.EVENT.ADVISORY.CONSUMER.<what>.<stream>.<consumer>`, in the stream's namespace and its names (names.ts). */
  private advisory(what: string, type: string, body: Record<string, unknown>): void {
    const own = ownStream(this.stream);
    this.host.advise(`CONSUMER.${what}.${own}.${this.name}`, type, { stream: own, consumer: this.name, ...body }, this.stream);
  }

  /** The consumer is deleted (or its stream): waiting requests are told, as nats-server does. */
  close(notify: boolean): void {
    if (this.closed) return;
    this.closed = true;
    if (notify) for (const req of this.waiting.slice()) if (req.push !== true) this.finish(req, '409 Consumer Deleted', false);
    this.waiting.length = 0;
    for (const pt of this.parts) {
      pt.buffer = [];
      pt.bufAt = 0;
    }
  }

  /**
   * Where a consumer continuing this one after stream sequence `seq - 1` starts (an ordered consumer's reset: a new
   * consumer from its last stream sequence + 1): the offsets done in each partition right after this consumer
   * delivered `seq - 1`, or null when it did not deliver it lately. A multi-partition stream's delivery order is not
   * its sequence order for records arriving in a partition behind the others (docs/jetstream.md), so "every record from
   * seq on" would skip or repeat some; this is exactly what the client had not seen yet.
   */
  continuationFrom(seq: number): number[] | null {
    return this.recent === null ? null : continuationOf(this.parts, this.recent, seq);
  }
}

/** Multi-partition consumers: acks kept before those below their partition's floor are dropped from the set. */
const ACKED_PRUNE = 1024;
/** Deliveries a consumer without acks of a multi-partition stream remembers for continuationFrom(). */
const RECENT = 4096;

export { consumedPartitions, DELIVERIES_KEY, PARTS_KEY, SINCE_KEY, type ConsumerStart, type LastPerSubject, type PullRequest };

function insertSorted(a: number[], v: number): void {
  let i = a.length;
  while (i > 0 && a[i - 1] > v) i--;
  if (a[i - 1] !== v) a.splice(i, 0, v);
}
