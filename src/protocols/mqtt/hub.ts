/**
 * The MQTT hub, shared by every MQTT listener of a broker (TCP, TLS, WebSocket): the client-id registry for session
 * takeover, the session table (sessions live in the core's SessionStore; the table is a cache of it), one shared
 * 1-second tick for keep-alive, connect timeouts, session expiry and delayed wills (no timer per connection), the
 * write-through of persistent sessions' deliveries (batched per tick), the $SYS statistics publisher, and in
 * cluster mode the session ownership across brokers (cluster.ts).
 *
 * Cluster-readiness: everything needed to resume a session (subscriptions, pending will, QoS 2 ids, queued
 * messages) is written to the store keyed by client id; the in-memory table is a cache of it.
 */
import { readFileSync } from 'node:fs';
import type { Access } from '../../control/index.js';
import type { Message, QoS, QueuedEntry, SessionRecord, SessionStore, Subscription } from '../../core/index.js';
import { FlowError, isFlowError, ProducerIdAllocator } from '../../core/index.js';
import { LogLimiter } from '../../util/log-limit.js';
import type { AdapterContext } from '../types.js';
import { ReasonCode, type ProtocolLevel, type Will } from './codec/index.js';
import { EXPIRY_NEVER, type ResolvedMqttOptions } from './options.js';
import type { MqttClusterHost, SessionConnection, SessionMoveReason } from './types.js';
import { MqttClusterSessions } from './cluster.js';
import { publishSysTopics } from './sys.js';
import { persistKeys, restoreKeys } from './qos2.js';
import {
  MqttSession,
  NOTHING,
  afterWrite,
  decodeDelivery,
  encodeDelivery,
  newDelivery,
  ownList,
  splitShared,
  subscribeOptions,
  willFromJson,
  willMessage,
  willToJson,
  type Delivery,
  type PersistedState,
  type PersistedSub,
  type SubData,
} from './session.js';

function readVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../../../package.json', import.meta.url), 'utf8')) as { version?: string };
    return pkg.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

// ------------------------------------------------------------------ hub

/**
 * Why a message handed to a session never reached its client. Each is counted as dropped (engine
 * `stats.dropped`, `$SYS/broker/messages/dropped`) and taken out of the engine's `delivered`.
 */
/** The store writes of one flush that publishers' acknowledgements wait for (MqttHub.queueWrites). */
interface Round {
  done: Promise<void>;
  resolve: () => void;
  writes: Promise<unknown>[];
  /** A write refused FENCED (its session owned elsewhere now), and the acknowledgements' view of it. */
  fenced: unknown;
  checked: Promise<void> | null;
}

export interface MqttDropCounts {
  /** Online: the queue behind the in-flight window was full (`maxQueued`; QoS 0 evicted first). */
  queueFull: number;
  /** Online: QoS 0 while more than `writeHighWaterMark` bytes waited in the client's socket. */
  writeBuffer: number;
  /** Online: QoS 0 while the namespace's bytes-out quota was spent (a second's worth sent, the rest dropped). */
  quota: number;
  /** Larger than the client's v5 Maximum Packet Size [MQTT-3.1.2-24]. */
  tooLarge: number;
  /** Message Expiry Interval passed before it could be sent [MQTT-3.3.2-5]. */
  expired: number;
  /** Offline: QoS 0 (not queued unless `queueQos0Offline`), or the oldest beyond the offline queue limit. */
  offline: number;
  /** Waiting behind the window when its connection ended and the session did not keep it (clean session, QoS 0). */
  closed: number;
  /**
   * Stored for the session while its identity could receive it, no longer allowed when it was to be sent (a policy
   * changed meanwhile, or another user resumed the session).
   */
  notAuthorized: number;
}

export interface MqttHubStats {
  messagesReceived: number;
  /** PUBLISH packets written to clients (re-sends included); never counts a dropped message. */
  messagesSent: number;
  dropped: MqttDropCounts;
  connectionsRefused: number;
  /** Connections closed by the slow-consumer policy `disconnect`. */
  slowConsumerDisconnects: number;
  /** Connections closed because a packet they had started was not complete within `packetTimeoutMs`. */
  packetTimeouts: number;
  /** Connections closed because their unfinished packet would have taken `partialBytes` over `maxPartialBytes`. */
  partialBytesRefused: number;
  /** PUBLISH packets refused by authorization (v5 0x87; 3.1.1 acknowledged and dropped). */
  publishesDenied: number;
  /** Times a connection was held back by a namespace quota (reading paused). */
  throttled: number;
}

export class MqttHub implements MqttClusterHost<MqttSession> {
  readonly sessions = new Map<string, MqttSession>();
  readonly store: SessionStore;
  /** Every open connection of every listener (keep-alive and connect-timeout checks run over it). */
  readonly connections = new Set<SessionConnection>();
  readonly stats: MqttHubStats = {
    messagesReceived: 0,
    messagesSent: 0,
    dropped: { queueFull: 0, writeBuffer: 0, quota: 0, tooLarge: 0, expired: 0, offline: 0, closed: 0, notAuthorized: 0 },
    connectionsRefused: 0,
    slowConsumerDisconnects: 0,
    packetTimeouts: 0,
    partialBytesRefused: 0,
    publishesDenied: 0,
    throttled: 0,
  };
  /**
   * Bytes every connection holds for packets it has not received completely (bounded by `maxPartialBytes`:
   * a stranger must not be able to pin memory with half-sent packets), and the highest value seen.
   */
  partialBytes = 0;
  partialBytesPeak = 0;
  /** Client-triggered log lines (protocol errors, timeouts, refused connects), keyed by remote address. */
  readonly logLimit: LogLimiter;
  readonly version = readVersion();
  private readonly started = Date.now();
  private connectedCount = 0;
  private tickTimer: NodeJS.Timeout | null = null;
  private sysTimer: NodeJS.Timeout | null = null;
  private flushScheduled = false;
  private readonly dirty = new Set<MqttSession>();
  /** Someone waits for the queue writes of the flush now scheduled (see queueWrites). */
  private round: Round | null = null;
  private closed = false;
  /** Cluster mode: session ownership and takeover across brokers; null on a single broker. */
  readonly cluster: MqttClusterSessions<MqttSession> | null;
  /** Producer ids of persistent sessions' QoS 2 publish keys (qos2.ts). */
  readonly producerIds: ProducerIdAllocator;

  constructor(
    readonly ctx: AdapterContext,
    readonly opts: ResolvedMqttOptions,
  ) {
    // Sessions live in the core's one store (the broker's metastore), keyed by client id.
    this.store = ctx.engine.store;
    this.producerIds = new ProducerIdAllocator(ctx.engine.store);
    this.logLimit = new LogLimiter(ctx.logger, opts.logLimit);
    this.cluster = opts.cluster !== null ? new MqttClusterSessions(this, opts.cluster) : null;
  }

  /**
   * A message handed to a session did not reach its client: counted as dropped under `cause`, and out of the
   * engine's `delivered` when the engine had counted it there (`counted`). `delivered` never goes below zero
   * (messages trimmed from the store may have been handed over before a restart).
   */
  dropped(cause: keyof MqttDropCounts, counted: boolean, n = 1): void {
    this.stats.dropped[cause] += n;
    const e = this.ctx.engine.stats;
    e.dropped += n;
    if (counted) e.delivered -= n < e.delivered ? n : e.delivered;
  }

  /** The engine counted a hand-off that was not for this session after all (No Local): not delivered. */
  notDelivered(): void {
    const e = this.ctx.engine.stats;
    if (e.delivered > 0) e.delivered--;
  }

  /** Figures for the admin API (`GET /api/v1/broker`, key `mqtt`). */
  figures(): Record<string, unknown> {
    return {
      connected: this.connectedCount,
      sessions: this.sessions.size,
      messagesReceived: this.stats.messagesReceived,
      messagesSent: this.stats.messagesSent,
      dropped: { ...this.stats.dropped },
      connectionsRefused: this.stats.connectionsRefused,
      slowConsumerPolicy: this.opts.slowConsumer,
      slowConsumerDisconnects: this.stats.slowConsumerDisconnects,
      packetTimeouts: this.stats.packetTimeouts,
      partialBytes: this.partialBytes,
      partialBytesPeak: this.partialBytesPeak,
      partialBytesRefused: this.stats.partialBytesRefused,
      publishesDenied: this.stats.publishesDenied,
      throttled: this.stats.throttled,
      logLinesSuppressed: this.logLimit.suppressedTotal,
      ...(this.cluster !== null ? { cluster: this.cluster.figures() } : {}),
    };
  }

  /**
   * Loads persistent sessions from the store and starts the shared tick and the $SYS publisher. In cluster mode
   * nothing is loaded here: a broker loads only the sessions it comes to own (a client connecting, or a dead
   * broker's sessions placed here: MqttClusterSessions).
   */
  async start(): Promise<void> {
    if (this.cluster === null) {
      const now = Date.now();
      for (const rec of await this.store.listSessions('mqtt')) this.load(rec, now, undefined);
    } else this.cluster.start();
    this.tickTimer = setInterval(() => this.tick(), this.opts.tickMs);
    this.tickTimer.unref();
    if (this.opts.sysIntervalMs > 0) {
      this.publishSys();
      this.sysTimer = setInterval(() => this.publishSys(), this.opts.sysIntervalMs);
      this.sysTimer.unref();
    }
  }

  /**
   * A stored session, offline: re-subscribed so that it queues from now on. One found attached was cut by a crash
   * (of this broker, or in cluster mode of its previous owner): its connection ended abnormally now, will included.
   * null when unreadable (dropped) or expired (ended).
   */
  load(rec: SessionRecord, now: number, epoch: number | undefined): MqttSession | null {
    let state: PersistedState;
    try {
      state = JSON.parse(rec.state) as PersistedState;
    } catch {
      this.ctx.logger.warn({ clientId: rec.clientId }, 'mqtt session record is unreadable, dropping it');
      void this.store.deleteSession(rec.clientId, epoch).catch((err: unknown) => this.storeFailed('deleteSession', err, rec.clientId));
      return null;
    }
    const s = this.restoreSession(rec.clientId, state, rec.marks);
    s.epoch = epoch;
    if (rec.expiresAt === null) {
      s.expiresAt = state.expiry === EXPIRY_NEVER ? null : now + state.expiry * 1000;
      if (state.will && state.will.at === undefined) {
        const w = willFromJson(state.will);
        const delay = w.properties?.willDelayInterval ?? 0;
        s.pendingWill = { will: w, at: now + delay * 1000 };
      }
    } else {
      s.expiresAt = rec.expiresAt;
    }
    if (s.expiresAt !== null && s.expiresAt <= now) {
      this.endSession(s, 'expired');
      return null;
    }
    this.persist(s);
    return s;
  }

  /** A session from its stored state, subscribed and in the table (offline). */
  private restoreSession(clientId: string, st: PersistedState, marks?: Record<string, number>): MqttSession {
    const s = new MqttSession(clientId, this);
    s.level = st.level;
    s.expiry = st.expiry;
    restoreKeys(s, st, marks);
    const ac = this.opts.access;
    if (ac !== null) {
      // Until a connection resumes it, the session follows the policies of the user it was last connected as.
      s.user = st.u ?? null;
      const principal = ac.principal(s.user);
      s.access = s.names.isDefault ? ac.accessFor(principal, 'mqtt') : ac.namespacedAccessFor(principal, s.names, 'mqtt');
    }
    for (const p of st.subs) {
      const data: SubData = {
        filter: p.f,
        noLocal: p.nl === 1,
        retainAsPublished: p.rap === 1,
        retainHandling: p.rh ?? 0,
        subscriptionId: p.id,
      };
      const { group, filter } = splitShared(p.f);
      try {
        s.subs.set(p.f, this.ctx.engine.subscribe(s.names.topic(filter), s, subscribeOptions(s, p.q, group, data, this.opts.access !== null)));
      } catch (err) {
        this.ctx.logger.warn({ clientId, filter: p.f, err: String(err) }, 'mqtt stored subscription refused, dropping it');
      }
    }
    if (st.will?.at !== undefined) s.pendingWill = { will: willFromJson(st.will), at: st.will.at };
    this.sessions.set(clientId, s);
    return s;
  }

  get connected(): number {
    return this.connectedCount;
  }

  /** The connection currently attached to a client id (session takeover, tests). */
  get(clientId: string): SessionConnection | undefined {
    return this.sessions.get(clientId)?.conn ?? undefined;
  }

  get size(): number {
    return this.connectedCount;
  }

  /** A connection may be accepted under the connection limit. */
  hasRoom(): boolean {
    return this.connectedCount < this.opts.maxConnections;
  }

  /**
   * Attaches an accepted connection to the session of its client id: takes over a connected one, discards
   * (clean start) or resumes an existing one. Returns the session and whether it was present.
   */
  async attach(
    conn: SessionConnection,
    clientId: string,
    cleanStart: boolean,
    expiry: number,
    level: ProtocolLevel,
    /** The connection's authorization (control plane), which the session follows from now on; null: none. */
    access: Access | null = null,
  ): Promise<{ session: MqttSession; present: boolean }> {
    // Cluster mode: own the session first (taking it over from the broker that holds it, which closes its
    // connection of this client and hands the session over); owning it loaded it here if it is stored.
    const epoch = this.cluster !== null ? await this.cluster.own(clientId) : undefined;
    let s = this.sessions.get(clientId);
    if (s === undefined && !cleanStart && this.cluster === null) {
      // Not in this broker's table: another broker may have left it in the store.
      const rec = await this.store.getSession(clientId);
      if (rec !== null && !this.sessions.has(clientId)) {
        try {
          s = this.restoreSession(clientId, JSON.parse(rec.state) as PersistedState, rec.marks);
        } catch {
          s = undefined;
        }
      }
      s ??= this.sessions.get(clientId);
    }
    if (s?.conn) {
      // [MQTT-3.1.4-3] the existing connection with this client id is closed first (v5 reason 0x8E).
      this.ctx.logger.info({ clientId, remote: s.conn.remote }, 'mqtt session taken over');
      s.conn.takenOver();
    }
    let present = false;
    if (s !== undefined && !s.ended && cleanStart) {
      // [MQTT-3.1.2-4] Clean Start discards the existing session.
      this.endSession(s, 'clean start');
      s = undefined;
    }
    if (s !== undefined && !s.ended) {
      present = true;
      // [MQTT-3.1.3-9] a new connection to the session before the will delay has passed cancels the will.
      s.pendingWill = null;
    } else {
      s = new MqttSession(clientId, this);
      this.sessions.set(clientId, s);
    }
    if (this.cluster !== null) {
      // Taken from us again while we were attaching (a CONNECT for the same client id on another broker): the
      // client is refused as unavailable and tries again.
      if (this.cluster.epochOf(clientId) !== epoch) throw new FlowError('UNAVAILABLE', `the session of ${clientId} moved to another broker while connecting`);
      s.epoch = epoch;
    }
    s.conn = conn;
    if (access !== null) {
      // Before anything is delivered through the session: what matches from now on is admitted for this identity.
      s.access = access;
      s.user = access.principal.user;
    }
    s.level = level;
    s.expiry = expiry;
    s.expiresAt = null;
    this.connectedCount++;
    // A resumed session that is now to end with its connection keeps its record until then: its stored
    // queue is read first, and endSession() removes both.
    if (s.persistent) this.persist(s);
    return { session: s, present };
  }

  /**
   * A connection left its session. `unacked` are its in-flight and queued deliveries, oldest first; `will` is
   * the will to publish (now or after its delay), null after a normal DISCONNECT.
   */
  detach(s: MqttSession, conn: SessionConnection, unacked: Delivery[], will: Will | null): void {
    if (s.conn !== conn) return;
    s.conn = null;
    this.connectedCount--;
    for (const d of unacked) {
      // A member of a shared group went away: its messages go to another member (v5 section 4.8.2).
      if (d.shared !== null && !d.released && this.ctx.engine.redeliverShared(d.shared, d.msg)) {
        // The engine counted the hand-off to the other member: one delivery, not two.
        if (d.counted) this.notDelivered();
        this.untrack(s, d);
        continue;
      }
      // QoS 1/2 deliveries of a persistent session are in the store already (written through when they
      // entered the connection, with their packet ids); QoS 0 ones are kept only when configured.
      if (d.qos === 0 && this.opts.queueQos0Offline && s.persistent) this.track(s, d);
      // Never sent and not kept by the session (it ends now, or QoS 0): dropped.
      if (d.packetId === 0 && d.stored === 'none') this.dropped('closed', d.counted);
    }
    if (!s.persistent) {
      if (will) this.publishWill(s, will);
      this.endSession(s, 'connection closed');
      return;
    }
    s.expiresAt = s.expiry === EXPIRY_NEVER ? null : Date.now() + s.expiry * 1000;
    if (will) {
      const delay = will.properties?.willDelayInterval ?? 0;
      if (delay === 0) this.publishWill(s, will);
      else s.pendingWill = { will, at: Date.now() + Math.min(delay, s.expiry) * 1000 };
    }
    this.persist(s);
  }

  /**
   * An administrator deletes the session of `clientId` (admin API): a connection still attached is kicked first
   * (v5 DISCONNECT 0x98), then the session ends as when it expires (a pending will goes out; subscriptions, queued
   * messages and the stored record go). Answers whether this broker held it in memory.
   */
  deleteSession(clientId: string): boolean {
    const s = this.sessions.get(clientId);
    if (s === undefined) return false;
    s.conn?.kick('session deleted by an administrator');
    this.endSession(s, 'deleted by an administrator');
    return true;
  }

  /** Ends a session: its will (if one is pending) goes out, subscriptions and stored state are removed. */
  endSession(s: MqttSession, why: string): void {
    if (s.ended) return;
    s.ended = true;
    if (s.pendingWill) {
      this.publishWill(s, s.pendingWill.will);
      s.pendingWill = null;
    }
    this.forgetSession(s);
    this.ctx.logger.debug({ clientId: s.clientId, why }, 'mqtt session ended');
    // Not awaited: a session taking the client id next (a clean start) writes its record with persist() at once,
    // and that putSession must land after this delete. The store's per-key order guarantees it (calls naming one
    // client id take effect in the order issued, awaited or not: src/storage/metastore/types.ts, SessionStore).
    const deleted = this.store.deleteSession(s.clientId, s.epoch).catch((err: unknown) => this.storeFailed('deleteSession', err, s.clientId));
    // Cluster mode: the ended session's owner row goes too, once the delete is done (unless a session of the same
    // client id replaced it here: a clean start).
    this.cluster?.ended(s.clientId, deleted);
  }

  /**
   * Cluster mode: the session leaves this broker without ending (handed over, or lost to another broker): out of the
   * engine and the table, and nothing more written (its stored state is its next owner's). An attached connection
   * is closed with `reason` (v5; default 0x8B), without a will from here.
   */
  dropSession(s: MqttSession, reason: SessionMoveReason | null): void {
    if (s.ended) return;
    s.ended = true;
    s.conn?.sessionMoved(reason ?? ReasonCode.SERVER_SHUTTING_DOWN);
    s.pendingWill = null;
    this.forgetSession(s);
  }

  /** Takes an ended or departing session out of the engine and this hub, with no write left pending for it. */
  private forgetSession(s: MqttSession): void {
    for (const sub of s.subs.values()) this.ctx.engine.unsubscribe(sub);
    s.subs.clear();
    s.toAppend = NOTHING;
    s.toRewrite = NOTHING;
    s.toRemove = NOTHING;
    if (this.sessions.get(s.clientId) === s) this.sessions.delete(s.clientId);
    this.dirty.delete(s);
  }

  /** Issues the session's pending store writes and resolves once every write issued for it so far has settled. */
  async drainSession(s: MqttSession): Promise<void> {
    this.flushSession(s);
    // A read sees every write issued before it on its key (the store's per-key order), so it waits for them.
    await this.store.getSession(s.clientId);
  }

  /** Writes the session record (subscriptions, expiry, pending will) through to the store. */
  persist(s: MqttSession): void {
    void this.persisted(s)?.catch((err: unknown) => this.storeFailed('putSession', err, s.clientId));
  }

  /** As persist(), and the write to wait for (rejects when it failed); null when nothing is written. */
  persisted(s: MqttSession): Promise<void> | null {
    if (!s.persistent || s.ended) return null;
    const state: PersistedState = {
      level: s.level,
      expiry: s.expiry,
      subs: [...s.subs.values()].map((sub) => {
        const d = sub.options.data as SubData;
        const p: PersistedSub = { f: d.filter, q: sub.options.qos };
        if (d.noLocal) p.nl = 1;
        if (d.retainAsPublished) p.rap = 1;
        if (d.retainHandling !== 0) p.rh = d.retainHandling;
        if (d.subscriptionId !== undefined) p.id = d.subscriptionId;
        return p;
      }),
      rel: [...s.awaitingRel].filter((id) => !s.relNotDurable.has(id) && !s.relSeq.has(id)),
    };
    persistKeys(s, state);
    if (s.user !== null) state.u = s.user;
    if (s.pendingWill) state.will = willToJson(s.pendingWill.will, s.pendingWill.at);
    else if (s.conn?.currentWill) state.will = willToJson(s.conn.currentWill);
    const expiresAt = s.conn !== null ? null : s.expiresAt === null ? null : Math.floor(s.expiresAt);
    // Not awaited: records of one client id land in the order written (the store's per-key order, see
    // src/storage/metastore/types.ts), so the latest persist() wins, also over an endSession() delete issued before.
    return this.store.putSession({ clientId: s.clientId, protocol: 'mqtt', state: JSON.stringify(state), expiresAt, updatedAt: Date.now() }, s.epoch);
  }

  // ---------------------------------------------------------------- offline queue

  /** Engine delivery for a session without a connection. */
  queueOffline(s: MqttSession, msg: Message, subs: Subscription[]): void {
    if (s.ended) return;
    let granted = 0;
    let retain = false;
    let ids: number[] | null = null;
    let any = false;
    for (const sub of subs) {
      const d = sub.options.data as SubData;
      // [MQTT-3.8.3-3] No Local: never back to the publishing session.
      if (d.noLocal && msg.origin === s.id) continue;
      any = true;
      if (sub.options.qos > granted) granted = sub.options.qos;
      if (d.retainAsPublished && msg.retain) retain = true;
      if (d.subscriptionId !== undefined) (ids ??= []).push(d.subscriptionId);
    }
    if (!any) {
      this.notDelivered();
      return;
    }
    const qos = (msg.qos < granted ? msg.qos : granted) as QoS;
    if (msg.expiresAt !== undefined && msg.expiresAt <= Date.now()) {
      this.dropped('expired', true);
      return;
    }
    if (qos === 0 && !this.opts.queueQos0Offline) {
      this.dropped('offline', true);
      return;
    }
    this.track(s, newDelivery(msg, qos, retain, ids, null, true));
  }

  // ---------------------------------------------------------------- write-through of deliveries
  //
  // Every QoS 1/2 delivery to a persistent session is in the store from the tick it reaches the session until
  // it is acknowledged, whether the session is offline (the queue) or connected (in flight, or waiting behind
  // the window), so a broker killed with SIGKILL loses none (v5 section 4.1.1, storing Session State): the resumed session re-sends them
  // (DUP, same packet ids [MQTT-4.4.0-1]). The writes of one tick go in one store transaction per session,
  // issued on process.nextTick, i.e. before the client can have received, let alone acknowledged, the PUBLISH.

  /** Adds a delivery of a persistent session to the store (appended at the next flush). */
  track(s: MqttSession, d: Delivery): void {
    if (!s.persistent || s.ended || d.stored !== 'none') return;
    d.stored = 'queued';
    (s.toAppend = ownList(s.toAppend)).push(d);
    this.markDirty(s);
  }

  /** Its packet id or QoS 2 state changed: its entry is rewritten. */
  touch(s: MqttSession, d: Delivery): void {
    if (d.stored === 'stored') {
      if (!d.changed) {
        d.changed = true;
        (s.toRewrite = ownList(s.toRewrite)).push(d);
        this.markDirty(s);
      }
    } else if (d.stored === 'writing') d.changed = true; // rewritten once its seq is known
    // 'queued': encoded at the flush, with the current state.
  }

  /** Acknowledged or dropped: its entry is removed (or never written). */
  untrack(s: MqttSession, d: Delivery): void {
    const was = d.stored;
    if (was === 'none' || was === 'gone') return;
    d.stored = 'gone';
    if (was === 'stored') {
      (s.toRemove = ownList(s.toRemove)).push(d.seq);
      this.markDirty(s);
    }
    // 'writing': removed when its seq is known; 'queued': skipped by the flush.
  }

  private markDirty(s: MqttSession): void {
    this.dirty.add(s);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      process.nextTick(this.flushAll);
    }
  }

  private readonly flushAll = (): void => {
    this.flushScheduled = false;
    for (const s of this.dirty) this.flushSession(s);
    this.dirty.clear();
    const round = this.round;
    this.round = null;
    if (round !== null) void Promise.allSettled(round.writes).then(round.resolve);
  };

  /**
   * Settles once the store writes of the deliveries made so far (issued at the flush now scheduled) have settled.
   * A publisher's PUBACK / PUBREC waits for it: the message is then in the store queue of every persistent
   * session it reached, on a store whose writes commit after the call returns (PostgreSQL) as on SQLite, whose
   * writes are done at call time. A failed write is logged (storeFailed) and does not hold the acknowledgement.
   * null: no write is pending.
   */
  queueWrites(): Promise<void> | null {
    if (!this.flushScheduled) return null;
    if (this.round === null) {
      let resolve!: () => void;
      const done = new Promise<void>((r) => (resolve = r));
      this.round = { done, resolve, writes: [], fenced: undefined, checked: null };
    }
    return this.round.done;
  }

  /**
   * queueWrites for a publisher's acknowledgement: rejected (FENCED) when a write of the round was refused because
   * another broker owns its session now (cluster mode: this broker's lease lapsed, or the session moved), since a
   * message delivered to that session here is stored for nobody; the publisher gets no positive acknowledgement and
   * sends it again (publish-in.ts storeRefused). Other failed writes are logged and do not hold it (queueWrites).
   */
  queueWritesFenced(): Promise<void> | null {
    const done = this.queueWrites();
    if (done === null) return null;
    const round = this.round!;
    return (round.checked ??= done.then(() => {
      if (round.fenced !== undefined) throw round.fenced;
    }));
  }

  /** Issues one store transaction with a session's pending changes (also before anything reads its queue). */
  flushSession(s: MqttSession): void {
    this.dirty.delete(s);
    if (s.ended) return;
    const appended: Delivery[] = [];
    const append: Buffer[] = [];
    let marks: Record<string, number> | undefined;
    for (const d of s.toAppend) {
      if (d.stored !== 'queued') continue;
      d.stored = 'writing';
      appended.push(d);
      append.push(encodeDelivery(d));
      // The publish keys it carries are stored with it (one transaction): a publish routed again is known here.
      const k = d.msg.pubKey;
      if (k !== undefined) (marks ??= {})[k.producer] = Math.max(marks[k.producer] ?? -1, k.seq);
    }
    let replace: QueuedEntry[] | undefined;
    for (const d of s.toRewrite) {
      if (d.stored !== 'stored' || !d.changed) continue;
      d.changed = false;
      (replace ??= []).push({ seq: d.seq, data: encodeDelivery(d) });
    }
    const remove = s.toRemove;
    s.toAppend = NOTHING;
    s.toRewrite = NOTHING;
    s.toRemove = NOTHING;
    if (append.length === 0 && replace === undefined && remove.length === 0) return;
    // Offline, the queue is bounded by maxQueued (drop-oldest). Connected, the connection bounds what it holds
    // (window + maxQueued, plus what it resumed), so the store bound is only a backstop and never trims an
    // entry whose seq a delivery still holds.
    const max = s.conn === null ? this.opts.maxQueued : 2 * (this.opts.maxQueued + this.opts.maxInflight);
    // Not awaited, and the next flush may be issued before this one resolves: a session's queue changes apply in the
    // order issued (the store's per-key order on the client id, src/storage/metastore/types.ts), which is also why a
    // remove of a seq learnt from an earlier result can follow at once.
    const round = this.round;
    const written = this.store.updateQueue(s.clientId, { replace, remove, append, marks }, max, s.epoch).then(
      ({ seqs, dropped }) => {
        for (let k = 0; k < appended.length; k++) {
          const d = appended[k];
          d.seq = seqs[k];
          if (d.stored === 'writing') {
            d.stored = 'stored';
            if (d.changed) {
              d.changed = false;
              this.touch(s, d);
            }
          } else if (d.stored === 'gone' && !s.ended) {
            // Acknowledged while its write was under way.
            (s.toRemove = ownList(s.toRemove)).push(d.seq);
            this.markDirty(s);
          }
          // Its rewrite is in the flush scheduled now (outbound.ts releasedStored).
          if (d.afterWrite !== undefined) afterWrite(d, this.queueWrites());
        }
        if (dropped > 0) {
          this.dropped('offline', true, dropped);
          this.ctx.logger.debug({ clientId: s.clientId, dropped }, 'mqtt offline queue full, oldest messages dropped');
        }
      },
      (err: unknown) => {
        for (const d of appended) if (d.afterWrite !== undefined) afterWrite(d, null);
        if (round !== null && appended.length > 0 && isFlowError(err, 'FENCED')) round.fenced ??= err;
        this.storeFailed('updateQueue', err, s.clientId);
      },
    );
    // Flushed ahead of the scheduled round (a read of the queue) or in it: the round's waiters wait for it too.
    round?.writes.push(written);
  }

  /**
   * What the store holds for a resumed session, oldest first. A persistent session keeps the entries (each
   * delivery knows its seq and removes it when acknowledged); one that now ends with its connection has them
   * removed at once (its record goes with it anyway).
   */
  async takeQueue(s: MqttSession): Promise<Delivery[]> {
    // The flush's updateQueue is not awaited: the read below, issued after it on the same client id, sees it (the
    // store's per-key order: a read sees every write issued before it on its key, src/storage/metastore/types.ts).
    this.flushSession(s);
    // Everything the store may hold for it (its bound while connected, see flushSession): a connection closed
    // by the slow-consumer policy leaves a full window, a full queue and the message that found it full.
    const entries = await this.store.readQueue(s.clientId, 2 * (this.opts.maxQueued + this.opts.maxInflight));
    if (entries.length === 0) return [];
    const keep = s.persistent && !s.ended;
    if (!keep) await this.store.ackQueue(s.clientId, entries[entries.length - 1].seq, s.epoch);
    const out: Delivery[] = [];
    for (const e of entries) {
      try {
        const d = decodeDelivery(e.data);
        if (keep) {
          d.stored = 'stored';
          d.seq = e.seq;
        }
        out.push(d);
      } catch (err) {
        this.ctx.logger.warn({ clientId: s.clientId, err: String(err) }, 'mqtt queued message is unreadable, skipped');
        if (keep) {
          (s.toRemove = ownList(s.toRemove)).push(e.seq);
          this.markDirty(s);
        }
      }
    }
    return out;
  }

  // ---------------------------------------------------------------- wills, tick, $SYS

  publishWill(s: MqttSession, will: Will): void {
    // Checked at CONNECT, and again now: a policy changed since (or a delayed will) must not get around a deny.
    if (s.access !== null && !s.access.can('publish', 'topic', will.topic)) {
      this.ctx.logger.info({ clientId: s.clientId, topic: will.topic }, 'mqtt will not published: publishing to its topic is no longer allowed');
      return;
    }
    try {
      const durable = this.ctx.engine.publish(willMessage(will, s.id, s.names));
      if (durable !== null) {
        durable.then(undefined, (err: unknown) => this.ctx.logger.warn({ clientId: s.clientId, err: String(err) }, 'mqtt will could not be stored'));
      }
    } catch (err) {
      this.ctx.logger.warn({ clientId: s.clientId, err: String(err) }, 'mqtt will could not be published');
    }
  }

  /** Once a tick: keep-alive and connect timeouts of connections, expiry and delayed wills of sessions. */
  tick(): void {
    const now = Date.now();
    for (const c of this.connections) c.checkTimers(now);
    for (const s of this.sessions.values()) {
      if (s.conn !== null) continue;
      if (s.pendingWill && s.pendingWill.at <= now) {
        const w = s.pendingWill.will;
        s.pendingWill = null;
        this.publishWill(s, w);
        this.persist(s);
      }
      // [MQTT-3.1.2-23] the session ends when its expiry interval has passed after the connection closed.
      if (s.expiresAt !== null && s.expiresAt <= now) this.endSession(s, 'expired');
    }
  }

  /** Broker statistics under $SYS/broker/ (sys.ts). */
  publishSys(): void {
    publishSysTopics(this.ctx, this.logLimit, {
      version: this.version,
      started: this.started,
      connected: this.connectedCount,
      total: this.sessions.size,
      received: this.stats.messagesReceived,
      sent: this.stats.messagesSent,
    });
  }

  private storeFailed(op: string, err: unknown, clientId?: string): void {
    if (clientId !== undefined) {
      const s = this.sessions.get(clientId);
      if (s !== undefined) s.failedWrites++;
    }
    if (this.closed) return;
    // Cluster mode: another broker owns the session now (our epoch is fenced): stop serving it here.
    if (clientId !== undefined && this.cluster !== null && isFlowError(err, 'FENCED')) {
      this.cluster.fenced(clientId);
      return;
    }
    // Rate limited: a full disk fails every write of every session, and publishers (clients) drive them.
    this.logLimit.log(
      'error',
      `mqtt session store failed|${op}`,
      { op, err: err instanceof Error ? err.message : String(err) },
      'mqtt session store operation failed',
    );
  }

  /** Stops the tick; flushes offline queues. Connections must have been closed by their listeners. */
  close(): void {
    this.cluster?.close();
    if (this.tickTimer) clearInterval(this.tickTimer);
    if (this.sysTimer) clearInterval(this.sysTimer);
    this.logLimit.stop();
    this.tickTimer = this.sysTimer = null;
    this.flushAll();
    this.closed = true;
  }
}
