/**
 * MQTT sessions in cluster mode (issue 17): a session is owned by one broker at a time ('session' kind, sticky), the
 * broker its client is connected to, or, offline, the broker that last had it (it keeps queueing there: its
 * subscriptions stay in that broker's engine, hence in the cluster's interest table).
 *
 * - CONNECT on broker B for a client id owned by live broker A: B asks A (`session.takeover` over the channel) to
 *   close its connection of that client ([MQTT-3.1.4-3]: v5 DISCONNECT 0x8E Session taken over, will as for any
 *   takeover) and hand the session over (everything it acknowledged made durable, then its owner row released);
 *   then B claims the row (epoch bumped), loads the session from the metastore (subscriptions, queued messages) and
 *   answers CONNACK with Session Present. A that does not answer (unreachable, or dying): B's claim succeeds by
 *   itself once A's lease has expired; until then the client is refused as unavailable (v5 0x88, 3.1.1 0x03) and
 *   tries again. B never forces a claim over a live holder it could not ask.
 * - A dead broker's sessions are orphans: their placement broker takes them (the Cluster's reconcile) and loads them
 *   offline, so they queue again; a session found attached is treated as cut by a crash (its will is scheduled).
 * - A session that ends (clean session closed, expiry, admin delete) has its record deleted and its owner row
 *   forgotten, so that rows do not pile up; clean-start sessions are still claimed while connected (a second CONNECT
 *   elsewhere must find and take them over) but have nothing to load.
 * - Every session write carries the epoch (SessionStore fence): a broker that lost a session (fenced, or its lease
 *   expired) can never write it again, and a refused write makes it drop the session (Cluster.fenced).
 *
 * QoS 1/2 MQTT publishes on another broker reaching a persistent session owned here are acknowledged once stored here,
 * and held by the publishing broker while the session has no reachable owner (src/cluster/live-durable.ts, with the
 * hub as the engine's DurableSubscribers). Not covered (docs/mqtt.md, "MQTT sessions in cluster mode"): QoS 0, shared
 * subscriptions, wills and other protocols' publishes published while a session has no owner are not queued for it.
 */
import type { Cluster, OwnershipHandler } from '../../cluster/index.js';
import { call, RPC, serve } from '../../cluster/index.js';
import { FlowError, isFlowError, type DurableSubscribers } from '../../core/index.js';
import { ReasonCode } from './codec/index.js';
import type { ClusterSession, MqttClusterHost } from './types.js';

// The channel messages (cluster/rpc.ts): session.takeover, the holder of a session closes its client's connection
// and hands the session over; session.delete, the holder ends it (the admin API's delete, on whichever broker).

/** Rounds of "ask the holder, then claim" before a CONNECT is refused as unavailable (the client retries). */
const CLAIM_ROUNDS = 4;

export interface MqttClusterStats {
  /** Takeover requests sent to other brokers, and how many of them failed (unreachable, timed out). */
  takeoversAsked: number;
  takeoversFailed: number;
  /** Takeover requests served (our client closed, our session handed over). */
  takeoversServed: number;
  /** Sessions loaded from the store when they came to be owned here (connect or orphan). */
  loaded: number;
  /** Sessions handed over (or dropped when lost). */
  handedOver: number;
  lost: number;
  /** Owner rows of ended sessions forgotten. */
  forgotten: number;
  /** CONNECTs refused because the session could not be owned here in time. */
  unavailable: number;
}

export class MqttClusterSessions<S extends ClusterSession> implements DurableSubscribers {
  readonly stats: MqttClusterStats = {
    takeoversAsked: 0,
    takeoversFailed: 0,
    takeoversServed: 0,
    loaded: 0,
    handedOver: 0,
    lost: 0,
    forgotten: 0,
    unavailable: 0,
  };
  /** Client ids being claimed by CONNECTs here (count): owning one with nothing stored is not the end of it. */
  private readonly claiming = new Map<string, number>();
  /** Per client id: a session end under way (its store delete, then its owner row forgotten). */
  private readonly ends = new Map<string, Promise<void>>();
  private closed = false;

  constructor(
    private readonly hub: MqttClusterHost<S>,
    readonly cluster: Cluster,
  ) {}

  /** Registers the ownership handler and the takeover request (the hub's start). */
  start(): void {
    const channel = this.cluster.channel;
    if (channel === null) throw new FlowError('CONFIG_ERROR', 'cluster mode: the internal channel must be open before MQTT starts');
    const handler: OwnershipHandler = {
      sticky: true,
      acquire: (name, epoch) => this.acquire(name, epoch),
      release: (name, lost) => this.release(name, lost),
    };
    this.cluster.register('session', handler);
    serve(channel, RPC.sessionTakeover, (from, { clientId }) => this.onTakeover(from, clientId));
    // Publishes of other brokers that wait for our persistent sessions ask us (src/cluster/live-durable.ts).
    this.hub.ctx.engine.durable = this;
    serve(channel, RPC.sessionDelete, async (_from, { clientId }) => {
      await this.settled(clientId);
      return { deleted: this.hub.deleteSession(clientId) };
    });
  }

  /**
   * The admin API deletes a session: ended by the broker that holds it (its client kicked there, its record and
   * owner row removed), here or over the channel. Answers whether a broker held it in memory.
   */
  async delete(clientId: string): Promise<boolean> {
    await this.settled(clientId);
    if (this.hub.sessions.has(clientId)) return this.hub.deleteSession(clientId);
    const holder = await this.cluster.lookup('session', clientId);
    if (holder === null || holder.broker === this.cluster.id || this.cluster.channel === null) return false;
    return (await call(this.cluster.channel, holder.broker, RPC.sessionDelete, { clientId })).head.deleted;
  }

  /** The epoch under which the session of `clientId` is owned and served here now, else undefined. */
  epochOf(clientId: string): number | undefined {
    return this.cluster.owns('session', clientId) ?? undefined;
  }

  /**
   * Owns the session of `clientId` here, taking it over from the broker that holds it, and returns the epoch. Once
   * it resolves the session is in the hub's table if it is stored. UNAVAILABLE when a live broker holds it and does
   * not hand it over (the client retries).
   */
  async own(clientId: string): Promise<number> {
    await this.settled(clientId);
    const mine = this.cluster.owns('session', clientId);
    if (mine !== null) return mine;
    this.claiming.set(clientId, (this.claiming.get(clientId) ?? 0) + 1);
    try {
      let lastHolder: number | null = null;
      for (let round = 0; round < CLAIM_ROUNDS; round++) {
        const holder = await this.cluster.lookup('session', clientId);
        let answered = false;
        if (holder !== null && holder.broker !== this.cluster.id) {
          answered = await this.askTakeover(holder.broker, clientId);
          lastHolder = holder.broker;
        }
        try {
          // Forced only over a holder that answered, and only after it had a fair chance to release on its own (it
          // answers after releasing; a row still naming it is a release that did not reach the store).
          return await this.cluster.claim('session', clientId, { force: answered && round >= 2 });
        } catch (err) {
          if (!isFlowError(err, 'NOT_OWNER')) throw err;
          // A holder that did not answer (paused, cut off) is not asked again and again: the client retries.
          if (holder !== null && !answered) break;
        }
      }
      this.stats.unavailable++;
      throw new FlowError('UNAVAILABLE', `the session of ${clientId} is held by broker ${lastHolder ?? '?'}, which did not hand it over; try again`);
    } finally {
      const n = (this.claiming.get(clientId) ?? 1) - 1;
      if (n > 0) this.claiming.set(clientId, n);
      else this.claiming.delete(clientId);
    }
  }

  /**
   * The hub ended a session (its record is being deleted by `deleted`): once that is done its owner row goes too,
   * unless the client id has a session here again (a clean start replaced it) or is being claimed.
   */
  ended(clientId: string, deleted: Promise<unknown>): void {
    const prev = this.ends.get(clientId);
    const p: Promise<void> = (async () => {
      if (prev) await prev;
      await deleted;
      if (this.closed || this.hub.sessions.has(clientId) || this.claiming.has(clientId)) return;
      if (this.cluster.owns('session', clientId) === null) return;
      try {
        await this.cluster.forget('session', clientId);
        this.stats.forgotten++;
      } catch (err) {
        this.hub.ctx.logger.warn({ clientId, err: String(err) }, 'mqtt: the owner row of an ended session could not be removed');
      }
    })().finally(() => {
      if (this.ends.get(clientId) === p) this.ends.delete(clientId);
    });
    this.ends.set(clientId, p);
  }

  // ---------------------------------------------------------------- storing subscribers (DurableSubscribers)

  /** Whether this broker owns and serves the persistent session `key` now. */
  holds(key: string): { state: 'owned'; token: unknown } | { state: 'elsewhere' | 'nothing' } {
    const epoch = this.epochOf(key);
    if (epoch === undefined) return { state: 'elsewhere' };
    const s = this.hub.sessions.get(key);
    if (s === undefined || s.ended || !s.persistent) return { state: 'nothing' };
    if (s.epoch !== epoch) return { state: 'elsewhere' };
    return { state: 'owned', token: { s, epoch, failed: s.failedWrites } };
  }

  /** The store writes of what was delivered so far (the hub's queueWrites). */
  written(): Promise<void> | null {
    return this.hub.queueWrites();
  }

  /** Still served here as when `holds` answered, with no failed write since. */
  stored(key: string, token: unknown): boolean {
    const t = token as { s: S; epoch: number; failed: number };
    return this.hub.sessions.get(key) === t.s && !t.s.ended && t.s.failedWrites === t.failed && this.epochOf(key) === t.epoch;
  }

  /** A session write was refused FENCED: another broker owns it now. */
  fenced(clientId: string): void {
    this.cluster.fenced('session', clientId);
  }

  figures(): Record<string, unknown> {
    return { ...this.stats, owned: this.cluster.ownedNames('session').length };
  }

  close(): void {
    this.closed = true;
  }

  // ---------------------------------------------------------------- internals

  private async settled(clientId: string): Promise<void> {
    for (let p = this.ends.get(clientId); p !== undefined; p = this.ends.get(clientId)) await p;
  }

  private async askTakeover(to: number, clientId: string): Promise<boolean> {
    const channel = this.cluster.channel;
    if (channel === null) return false;
    this.stats.takeoversAsked++;
    try {
      // The holder closes a connection and makes its writes durable: a few store round trips.
      await call(channel, to, RPC.sessionTakeover, { clientId }, { timeoutMs: Math.max(5000, this.cluster.leaseMs) });
      return true;
    } catch (err) {
      this.stats.takeoversFailed++;
      this.hub.ctx.logger.info(
        { clientId, broker: to, err: err instanceof Error ? err.message : String(err) },
        'mqtt session takeover: the holder did not answer',
      );
      return false;
    }
  }

  /** Another broker's CONNECT for a client id held here: close our connection of it and hand the session over. */
  private async onTakeover(from: number, clientId: string): Promise<{ ok: boolean }> {
    await this.settled(clientId);
    const s = this.hub.sessions.get(clientId);
    if (s?.conn) {
      this.hub.ctx.logger.info({ clientId, remote: s.conn.remote, broker: from }, 'mqtt session taken over by another broker');
      // [MQTT-3.1.4-3] v5 DISCONNECT 0x8E; the will as for a takeover on one broker; the session detaches (stored).
      s.conn.takenOver();
    }
    // A session that ends with its connection (clean) is deleted, and its row forgotten, before we answer.
    await this.settled(clientId);
    await this.cluster.release('session', clientId);
    this.stats.takeoversServed++;
    return { ok: true };
  }

  /** Owned here now (a CONNECT's claim, or a dead broker's session placed here): load what is stored. */
  private async acquire(clientId: string, epoch: number): Promise<void> {
    const rec = await this.hub.store.getSession(clientId);
    const s = this.hub.sessions.get(clientId);
    if (s !== undefined) {
      // Still in the table (a release that left it): it is ours again, under the new epoch.
      s.epoch = epoch;
      return;
    }
    if (rec === null || rec.protocol !== 'mqtt') {
      // Nothing stored: a clean session's row (its broker died), or a client connecting for the first time.
      if (!this.claiming.has(clientId)) this.ended(clientId, new Promise((r) => setImmediate(r)));
      return;
    }
    if (this.hub.load(rec, Date.now(), epoch) !== null) this.stats.loaded++;
    // Expired (or unreadable): ended while still being acquired, so its row goes once it is owned.
    else if (!this.claiming.has(clientId)) this.ended(clientId, new Promise((r) => setImmediate(r)));
  }

  /**
   * Stop serving the session. A handover (`lost` false: a takeover request, or this broker leaving): its connection
   * is closed (0x8B), what it had is written and awaited, then it leaves the engine and the table. Lost (another
   * broker owns it, or our lease expired): nothing may be written; the connection is closed (0x8E) and the session
   * dropped, its stored state is the next owner's.
   */
  private async release(clientId: string, lost: boolean): Promise<void> {
    const s = this.hub.sessions.get(clientId);
    if (s === undefined) return;
    // From here until its next owner announces it, the acked messages reaching it are held for that owner (by this
    // broker and by the others), not stored here where they could be lost with the session (cluster/live.ts moving).
    const live = s.persistent ? this.hub.ctx.engine.live : null;
    live?.moving?.(clientId, true);
    try {
      if (lost) {
        this.stats.lost++;
        this.hub.dropSession(s, ReasonCode.SESSION_TAKEN_OVER);
        return;
      }
      s.conn?.sessionMoved(ReasonCode.SERVER_SHUTTING_DOWN);
      await this.hub.drainSession(s);
      this.hub.dropSession(s, null);
      this.stats.handedOver++;
    } finally {
      live?.moving?.(clientId, false);
    }
  }
}
