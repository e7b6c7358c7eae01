/**
 * The state of one NATS client connection (`NatsConnectionState`, the base of `NatsConnection`) and its life: the
 * input (the parser fed from the socket, the gate that parses only the CONNECT line while credentials are to be
 * checked), the output (one NatsWriter handed to the socket once per event-loop turn, the slow-consumer limits and
 * the reply backlog), read flow control, and the life cycle (the adapter's sweep: auth timeout, stale operations,
 * PINGs, write deadline; close and teardown). The operations are connection.ts (CONNECT, SUB, UNSUB, PING...),
 * publish.ts (PUB / HPUB), deliver.ts (MSG / HMSG out) and control.ts (the control plane), functions over it.
 */
import type { Duplex } from 'node:stream';
import { DEFAULT_NAMESPACE, namespaceNames, type Message, type NamespaceNames, type Subscriber, type Subscription } from '../../core/index.js';
import { ANONYMOUS, type Access, type ClientEntry, type QuotaLease } from '../../control/index.js';
import { logKey } from '../../util/log-limit.js';
import { NatsErrText, NatsProtocolError, NatsServerParser, NatsWriter, PING, encodeErr, type ConnectOptions, type NatsServerHandler } from './codec/index.js';
import type { NatsConnectionHost, NatsConnectionMeta, NatsListenerTls } from './types.js';
import { NatsErr } from './errors.js';
import { CloseSignal } from '../listener.js';
import type { WriteBarrier } from './write-barrier.js';

/** Publishes whose durable writes have not settled, per connection, before its socket stops being read. */
export const MAX_PENDING_WRITES = 10_000;
/** Bytes after a CONNECT line kept unparsed while its credentials are checked (the socket is paused meanwhile). */
export const MAX_HELD_BYTES = 1024 * 1024;
/** How long an ended socket may take to close before it is destroyed. */
export const CLOSE_GRACE_MS = 1000;
/**
 * The writer's first slab for replies (+OK, PONG, -ERR): small, so that an idle connection or one that answers a
 * PING now and then holds next to nothing (it was a 64 KiB slab per connection that had ever been answered).
 */
export const REPLY_SLAB = 1024;
/**
 * The writer's slab once a connection gets deliveries: one socket write's worth of small deliveries (it doubles
 * each time a batch straddles two, up to 1 MiB: NatsWriter). A writer that wrote nothing for a whole sweep period is
 * dropped (see sweep), so a connection that went quiet holds neither.
 */
export const WRITER_SLAB = 64 * 1024;
/** Reading paused for these reasons (pausedFor bits). */
export const PAUSE_AUTH = 1;
export const PAUSE_WRITES = 2;
export const PAUSE_QUOTA = 4;
export const PAUSE_OUTPUT = 8;

export const NO_RESPONDERS_BLOCK = Buffer.from('NATS/1.0 503\r\n\r\n', 'latin1');
export const EMPTY = Buffer.alloc(0);

export const enum St {
  Live,
  /** Ending: nothing more is read or delivered. */
  Closing,
  Done,
}

/** One SUB of the connection; it is the engine Subscription's `options.data`. */
export interface NatsSub {
  readonly sid: string;
  readonly subject: string;
  readonly queue: string | null;
  /** No wildcard token: every delivery names the subject itself. */
  readonly literal: boolean;
  /** UNSUB max (0: none) and deliveries so far. */
  max: number;
  delivered: number;
  sub: Subscription | null;
  /** The last topic a wildcard subscription delivered and its subject (publishers repeat their topics). */
  lastTopic: string;
  lastSubject: string;
}

/** The state and life of one NATS connection (see the file header); `NatsConnection` is its one subclass. */
export abstract class NatsConnectionState implements Subscriber, NatsServerHandler {
  readonly id: string;
  readonly clientId: number;
  readonly remoteAddress: string;
  /** Tells the listener (and whoever asks for `closed`) that the connection is gone. */
  readonly closeSignal = new CloseSignal();
  st = St.Live;
  private readonly parser: NatsServerParser;
  private w: NatsWriter | null = null;
  readonly subs = new Map<string, NatsSub>();

  // CONNECT
  protected connectSeen = false;
  /** Credentials accepted (or none needed): operations other than CONNECT are served. */
  protected authed: boolean;
  /** Only the first line is parsed (credentials to check): see the file comment. */
  protected gate: boolean;
  private gateLine: Buffer | null = null;
  private held: Buffer | null = null;
  verbose = false;
  pedantic = false;
  echo = true;
  headers = false;
  noResponders = false;
  /** CONNECT's name, lang and version (the monitoring port's /connz shows them). */
  name: string | undefined;
  lang: string | undefined;
  version: string | undefined;
  user: string | null = null;

  // monitoring (/connz, /subsz: monitor.ts)
  /** PUB/HPUB taken and MSG/HMSG written, and their bytes (headers and payload, as nats-server counts them). */
  inMsgs = 0;
  inBytes = 0;
  outMsgs = 0;
  outBytes = 0;
  /** When the client last published or changed its subscriptions (nats-server's last_activity), ms. */
  lastActivity: number;
  /** Round trip of the last PING the monitor sent (ns; 0: not measured yet), and when that PING left (hrtime ns). */
  rttNs = 0;
  rttPingAt = 0n;

  // control plane
  /** What this connection may do (policies, re-read live); the anonymous principal until CONNECT says otherwise. */
  access: Access;
  /**
   * The namespace (NATS account) the connection's subjects live in, set at login (login in control.ts): `default`'s
   * are the subjects themselves, another's are qualified on the way in and stripped on the way out (namespaces.ts).
   */
  names: NamespaceNames = namespaceNames(DEFAULT_NAMESPACE);
  /** The namespace's quotas, held from login to close (null before login, or when refused). */
  lease: QuotaLease | null = null;
  /** The client registry's entry (admin API list and kick, /metrics). */
  entry: ClientEntry | null = null;
  /** Reading paused by a rate quota until then (ms since the epoch), and its timer. */
  quotaUntil = 0;
  quotaTimer: NodeJS.Timeout | null = null;
  /**
   * The bytes-out quota is spent until then (0: not): the writer is not flushed meanwhile, deliveries wait in it
   * as behind a slow link, and past maxPending the client is a slow consumer (control.ts holdOutput).
   */
  outHeldUntil = 0;
  outHoldTimer: NodeJS.Timeout | null = null;
  /** Per-delivery policy check of every subscription of this connection (made at the first SUB). */
  admitFn: ((topic: string) => boolean) | null = null;
  /** allow_responses: reply topics of requests delivered here, with replies left and until when (responses.ts). */
  replies: Map<string, { left: number; until: number }> | null = null;
  /** When the login's credentials expire (a user JWT's exp, ms; 0: never): -ERR 'User Authentication Expired'. */
  expiresAt = 0;
  /** When the account JWT of a JWT login expires (ms; 0: never): -ERR 'Account Authentication Expired'. */
  accountExpiresAt = 0;

  // output
  flushScheduled = false;
  /** Writer bytes past which a delivery flushes at once: a quarter of maxPending, at most 1 MiB. */
  readonly flushAt: number;
  /** Messages written since the last flush, and per flush not yet taken by the socket (maxPendingMsgs). */
  batchMsgs = 0;
  pendingMsgs = 0;
  private inFlight: number[] | null = null;
  /** Bytes handed to the stream so far; less its writableLength: bytes the socket took (write progress). */
  private handedOut = 0;
  /** Flushes so far, and at the last sweep (a writer idle for a sweep period is dropped). */
  private flushes = 0;
  private flushesSeen = 0;
  /** Reading paused for unsent bytes (PAUSE_OUTPUT): when the socket last took some, and how much it had taken. */
  private outProgressAt = 0;
  private outTaken = 0;
  private drainListener: (() => void) | null = null;

  // input
  private pausedFor = 0; // PAUSE_* bits
  /** This connection's publishes into streams not yet durable, and what waits for them (publish.ts). */
  barrier: WriteBarrier | null = null;
  /** The last publish subject and its topic (publishers repeat subjects; the parser hands the same string). */
  lastPubSubject = '';
  lastPubTopic = '';
  /** lastPubTopic inside the connection's namespace (the core's topic; the same in `default`). */
  lastPubInternal = '';
  /** When the chunk being parsed was read: the timestamp of the messages in it. */
  now = 0;

  // sweep
  readonly openedAt = Date.now();
  private inCount = 0;
  private seenIn = 0;
  private lastPingAt: number;
  protected pingsOut = 0;
  private destroyTimer: NodeJS.Timeout | null = null;
  /** A partial operation (parser.partials when first seen) and since when (0: none), for opTimeoutMs. */
  private partialSeen = 0;
  private partialSince = 0;

  constructor(
    readonly stream: Duplex,
    readonly adapter: NatsConnectionHost,
    readonly meta: NatsConnectionMeta,
    readonly tls: NatsListenerTls,
  ) {
    this.clientId = meta.clientId ?? 0;
    this.id = `nats:${this.clientId}`;
    this.remoteAddress = meta.remoteAddress;
    this.parser = new NatsServerParser({ maxControlLine: adapter.options.maxControlLine, maxPayload: adapter.options.maxPayload, budget: adapter.payloads });
    this.flushAt = Math.max(1, Math.min(1024 * 1024, adapter.options.maxPending >> 2));
    this.gate = adapter.credentialsChecked;
    this.authed = !this.gate;
    this.access = adapter.access.accessFor(ANONYMOUS, 'nats', meta.remoteAddress);
    this.lastPingAt = this.openedAt;
    this.lastActivity = this.openedAt;
  }

  /** Bytes written for the client and not yet taken by its socket (nats-server's pending_bytes). */
  get pendingBytes(): number {
    return (this.w?.length ?? 0) + this.stream.writableLength;
  }

  /**
   * The monitor asks for the round trip: a PING whose PONG measures it (nats-server's getRTT sends one the same way
   * when it has none). Only for a logged-in client that said which library it is, as nats-server does.
   */
  measureRtt(): void {
    if (this.st !== St.Live || !this.authed || this.rttPingAt !== 0n || this.lang === undefined || this.lang === '') return;
    this.rttPingAt = process.hrtime.bigint();
    this.send(PING);
  }

  /** Resolves once the connection is gone (made when first asked for: the adapter hears of it from teardown). */
  get closed(): Promise<void> {
    return this.closeSignal.closed;
  }

  /** Subscriptions open on this connection. */
  get subscriptionCount(): number {
    return this.subs.size;
  }

  // ---------------------------------------------------------------------------------------------- input

  protected receive(chunk: Buffer): void {
    if (this.st !== St.Live) return;
    this.inCount++;
    // The messages of one read arrived together: one clock read for all of them.
    this.now = Date.now();
    if (this.gate) return this.gateReceive(chunk);
    this.feed(chunk);
  }

  private feed(chunk: Buffer): void {
    const p = this.parser;
    try {
      p.push(chunk, this);
    } catch (err) {
      this.parseError(err);
    }
    // The deadline of a half-sent operation: its clock starts when a new one is left partial.
    if (!p.midOperation) this.partialSince = 0;
    else if (p.partials !== this.partialSeen || this.partialSince === 0) {
      this.partialSeen = p.partials;
      this.partialSince = this.now;
    }
  }

  /**
   * Before the CONNECT is accepted, when there are credentials to check: the first line only (bounded by
   * maxControlLine), which must be CONNECT when authentication is required; the rest is held until the check ends.
   */
  private gateReceive(chunk: Buffer): void {
    if (this.connectSeen) {
      // The CONNECT is being checked: keep the bytes (the socket is paused; this is what was in flight).
      this.hold(chunk);
      return;
    }
    const line = this.gateLine === null ? chunk : Buffer.concat([this.gateLine, chunk]);
    const lf = line.indexOf(0x0a);
    if (lf < 0) {
      if (line.length > this.adapter.options.maxControlLine + 2) return this.fatal(NatsErrText.MAX_CONTROL_LINE, 'nats protocol error');
      this.gateLine = Buffer.from(line);
      return;
    }
    this.gateLine = null;
    if (!startsWithConnect(line)) {
      if (this.adapter.authRequired) {
        this.adapter.stats.authFailures++;
        return this.fatal(NatsErr.AUTH_VIOLATION, 'nats operation before CONNECT');
      }
      // Anonymous clients are let in: serve everything from here as nats-server does.
      this.gate = false;
      this.authed = true;
      return this.feed(line);
    }
    const rest = line.subarray(lf + 1);
    if (rest.length > 0) this.held = Buffer.from(rest);
    this.feed(line.subarray(0, lf + 1));
  }

  private hold(chunk: Buffer): void {
    this.held = this.held === null ? Buffer.from(chunk) : Buffer.concat([this.held, chunk]);
    if (this.held.length > MAX_HELD_BYTES) this.fatal(NatsErr.AUTH_VIOLATION, 'nats too much data before CONNECT was accepted');
  }

  /** The CONNECT was accepted: parse what waited behind it. */
  protected openGate(): void {
    this.gate = false;
    const h = this.held;
    this.held = null;
    this.now = Date.now();
    if (h !== null) this.feed(h);
  }

  parseError(err: unknown): void {
    if (this.st !== St.Live) return;
    if (err instanceof NatsProtocolError) {
      this.adapter.stats.protocolErrors++;
      this.adapter.logLimit.log(
        'info',
        logKey('nats protocol error', this.remoteAddress),
        { remote: this.remoteAddress, client: this.clientId, err: err.message },
        'nats: protocol error',
      );
      if (err.errText !== null) this.fatal(err.errText, null);
      else this.shutdown(true);
      return;
    }
    this.adapter.logger.error({ err, client: this.clientId }, 'nats: internal error');
    this.shutdown(true);
  }

  // ---------------------------------------------------------------------------------------------- operations

  // ---------------------------------------------------------------------------------------------- control plane

  // ---------------------------------------------------------------------------------------------- publish

  // ---------------------------------------------------------------------------------------------- deliveries

  /** `reason`: what gave it away (maxPending, maxPendingMsgs, or writeDeadline: nothing taken by the socket in time). */
  slowConsumer(reason = 'maxPending'): void {
    const o = this.adapter.options;
    this.adapter.stats.slowConsumers++;
    this.adapter.logLimit.log(
      'warn',
      logKey('nats slow consumer', this.remoteAddress),
      {
        remote: this.remoteAddress,
        client: this.clientId,
        name: this.name,
        reason,
        pendingBytes: (this.w?.length ?? 0) + this.stream.writableLength,
        maxPending: o.maxPending,
        pendingMsgs: this.pendingMsgs + this.batchMsgs,
        maxPendingMsgs: o.maxPendingMsgs,
        ...(reason === 'writeDeadline' ? { writeDeadlineMs: o.writeDeadlineMs } : {}),
      },
      'Slow Consumer Detected',
    );
    // nats-server closes a slow consumer without a word; what was not sent is dropped.
    this.w?.clear();
    this.destroy();
  }

  // ---------------------------------------------------------------------------------------------- output

  /** The writer, for replies (made with a small slab). */
  writer(): NatsWriter {
    return (this.w ??= new NatsWriter(REPLY_SLAB));
  }

  /** The writer, for deliveries (made with, or raised to, a delivery slab). */
  deliveryWriter(): NatsWriter {
    const w = this.w;
    if (w === null) return (this.w = new NatsWriter(WRITER_SLAB));
    w.minSlab(WRITER_SLAB);
    return w;
  }

  /**
   * A control reply (PONG, +OK, -ERR), in order with the deliveries, and counted with them: past maxPending the
   * client is a slow consumer, past flushAt its socket is not read until the bytes go (see the file comment).
   */
  send(b: Buffer): void {
    if (this.st !== St.Live) return;
    const w = this.writer();
    w.writeBytes(b);
    this.scheduleFlush();
    const pending = w.length + this.stream.writableLength;
    if (pending > this.flushAt) this.outputFull(pending);
  }

  protected sendRaw(b: Buffer): void {
    this.handedOut += b.length;
    this.stream.write(b);
  }

  scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(this.flusher());
  }

  /** The scheduled flush (one function per connection, made at its first write). */
  private flushFn: (() => void) | null = null;

  flusher(): () => void {
    return (this.flushFn ??= (): void => {
      this.flushScheduled = false;
      this.flushNow();
    });
  }

  /**
   * Replies are waiting beyond flushAt: the client is not reading them (or not as fast as it asks). Its socket is
   * not read until they fall to half of that ('drain', a flush, or the sweep sees it); past maxPending it is a slow
   * consumer at once.
   */
  private outputFull(pending: number): void {
    if (pending > this.adapter.options.maxPending) return this.slowConsumer();
    if ((this.pausedFor & PAUSE_OUTPUT) !== 0) return;
    this.pauseReading(PAUSE_OUTPUT);
    this.outProgressAt = Date.now();
    this.outTaken = this.handedOut - this.stream.writableLength;
    this.stream.on('drain', (this.drainListener ??= () => this.outputMoved()));
  }

  /** Resumes reading once the unsent bytes of a client paused by outputFull are down to half of flushAt. */
  private outputMoved(): void {
    if ((this.pausedFor & PAUSE_OUTPUT) === 0 || this.st !== St.Live) return;
    if ((this.w?.length ?? 0) + this.stream.writableLength > this.flushAt >> 1) return;
    if (this.drainListener !== null) this.stream.off('drain', this.drainListener);
    this.resumeReading(PAUSE_OUTPUT);
  }

  /** Hands what the writer holds to the socket (the scheduled flush, or a delivery past flushAt bytes). */
  flushNow(): void {
    if (this.st === St.Done || this.w === null || this.outHeldUntil !== 0) return;
    const b = this.w.take();
    if (b === null) return;
    this.handedOut += b.length;
    this.flushes++;
    if (this.adapter.options.maxPendingMsgs > 0) {
      (this.inFlight ??= []).push(this.batchMsgs);
      this.pendingMsgs += this.batchMsgs;
      this.batchMsgs = 0;
      this.stream.write(b, (this.writtenFn ??= () => this.written()));
    } else {
      this.batchMsgs = 0;
      this.stream.write(b);
    }
    if ((this.pausedFor & PAUSE_OUTPUT) !== 0) this.outputMoved();
  }

  private writtenFn: (() => void) | null = null;

  /** A flushed batch left the socket's buffer (writes complete in order). */
  private written(): void {
    this.pendingMsgs -= this.inFlight?.shift() ?? 0;
  }

  // ---------------------------------------------------------------------------------------------- flow

  pauseReading(bit: number): void {
    if (this.pausedFor === 0) this.stream.pause();
    this.pausedFor |= bit;
  }

  resumeReading(bit: number): void {
    if ((this.pausedFor & bit) === 0) return;
    this.pausedFor &= ~bit;
    if (this.pausedFor === 0 && this.st === St.Live) {
      // The rest of a partial operation waited in the socket while it was not read: its clock starts again.
      if (this.partialSince !== 0) this.partialSince = Date.now();
      this.stream.resume();
    }
  }

  // ---------------------------------------------------------------------------------------------- life cycle

  /**
   * The adapter's periodic check: the CONNECT deadline, a half-sent operation's deadline, a client not reading
   * its replies, the server's PINGs, and an idle writer's memory.
   */
  sweep(now: number): void {
    if (this.st !== St.Live) return;
    const o = this.adapter.options;
    if (this.partialSince !== 0 && this.pausedFor === 0 && o.opTimeoutMs > 0 && now - this.partialSince >= o.opTimeoutMs) {
      this.adapter.stats.opTimeouts++;
      return this.fatal(NatsErr.STALE, 'nats: operation not received whole in time');
    }
    if ((this.pausedFor & PAUSE_OUTPUT) !== 0) {
      // Paused for replies it does not read: closed once the socket took none of them for writeDeadlineMs.
      const taken = this.handedOut - this.stream.writableLength;
      if (taken > this.outTaken) {
        this.outTaken = taken;
        this.outProgressAt = now;
        this.outputMoved();
      } else if (o.writeDeadlineMs > 0 && now - this.outProgressAt >= o.writeDeadlineMs) {
        return this.slowConsumer('writeDeadline');
      }
      // Its PONGs wait unread in the socket meanwhile: not a reason to call it stale.
      return;
    }
    // Nothing written for a whole sweep period: the writer's slab goes (an idle connection holds none).
    const w = this.w;
    if (w !== null && this.flushes === this.flushesSeen && w.length === 0 && !this.flushScheduled && this.stream.writableLength === 0) this.w = null;
    this.flushesSeen = this.flushes;
    if (!this.authed || !this.connectSeen) {
      if (o.authTimeoutMs > 0 && now - this.openedAt > o.authTimeoutMs) {
        this.adapter.stats.authTimeouts++;
        this.fatal(NatsErr.AUTH_TIMEOUT, 'nats: no CONNECT in time');
      }
      if (!this.authed) return;
    }
    if (this.expiresAt !== 0 && now >= this.expiresAt) return this.fatal(NatsErr.AUTH_EXPIRED, 'nats: user JWT expired');
    if (this.accountExpiresAt !== 0 && now >= this.accountExpiresAt) return this.fatal(NatsErr.ACCOUNT_EXPIRED, 'nats: account JWT expired');
    if (o.pingIntervalMs <= 0 || now - this.lastPingAt < o.pingIntervalMs) return;
    this.lastPingAt = now;
    // nats-server skips the PING when the client was heard from in the interval (and a silent client is pinged).
    if (this.inCount !== this.seenIn && this.pingsOut === 0) {
      this.seenIn = this.inCount;
      return;
    }
    this.seenIn = this.inCount;
    if (this.pingsOut >= o.maxPingsOut) {
      this.adapter.stats.staleConnections++;
      return this.fatal(NatsErr.STALE, 'nats: stale connection');
    }
    this.pingsOut++;
    this.send(PING);
  }

  /**
   * Sends `-ERR '<text>'` after what is already queued and closes (logged rate limited under `event` when given).
   */
  fatal(text: string, event: string | null): void {
    if (this.st !== St.Live) return;
    if (event !== null)
      this.adapter.logLimit.log('info', logKey(event, this.remoteAddress), { remote: this.remoteAddress, client: this.clientId, err: text }, event);
    this.writer().writeBytes(encodeErr(text));
    this.shutdown(false);
  }

  /**
   * Stops reading and delivering and ends the socket after what is queued (`now`: without it). The socket is
   * destroyed if the peer does not close within a second.
   */
  shutdown(now: boolean): void {
    if (this.st !== St.Live) return;
    this.st = St.Closing;
    this.parser.stop();
    this.dropSubs();
    if (now) {
      this.destroy();
      return;
    }
    const b = this.w?.take() ?? null;
    if (b !== null) this.stream.end(b);
    else this.stream.end();
    this.destroyLater();
  }

  protected destroyLater(): void {
    if (this.destroyTimer !== null) return;
    this.destroyTimer = setTimeout(() => this.destroy(), CLOSE_GRACE_MS);
    this.destroyTimer.unref();
  }

  /** Broker shutdown: what is queued is flushed, then the socket closed. */
  close(): Promise<void> {
    if (this.st === St.Live) this.shutdown(false);
    return this.closed;
  }

  destroy(): void {
    if (this.st === St.Done) return;
    this.st = St.Done;
    this.parser.stop();
    this.dropSubs();
    this.stream.destroy();
  }

  private dropSubs(): void {
    this.adapter.stats.subRemoves += this.subs.size;
    for (const ns of this.subs.values()) {
      if (ns.sub !== null) this.adapter.engine.unsubscribe(ns.sub);
      ns.sub = null;
    }
    this.subs.clear();
  }

  private tornDown = false;

  protected teardown(): void {
    if (this.tornDown) return;
    this.tornDown = true;
    this.st = St.Done;
    this.parser.stop();
    this.dropSubs();
    if (this.destroyTimer !== null) clearTimeout(this.destroyTimer);
    if (this.quotaTimer !== null) clearTimeout(this.quotaTimer);
    if (this.outHoldTimer !== null) clearTimeout(this.outHoldTimer);
    this.barrier?.close();
    this.lease?.release();
    this.lease = null;
    this.entry?.close();
    this.adapter.left(this);
    this.closeSignal.fire(this);
  }

  /** A subject refused: -ERR, the connection stays open (nats-server's behaviour for subjects). */
  invalid(text: string, subject: string): void {
    this.adapter.stats.invalidSubjects++;
    this.adapter.logLimit.log(
      'info',
      logKey('nats invalid subject', this.remoteAddress),
      { remote: this.remoteAddress, client: this.clientId, subject: subject.slice(0, 256), err: text },
      'nats: invalid subject',
    );
    this.send(encodeErr(text));
  }

  // ---------------------------------------------------------------------------------------------- connection.ts

  abstract onConnect(o: ConnectOptions): void;
  abstract onPub(subject: string, reply: string | null, payload: Buffer): void;
  abstract onHpub(subject: string, reply: string | null, headers: Buffer, payload: Buffer): void;
  abstract onSub(subject: string, queue: string | null, sid: string): void;
  abstract onUnsub(sid: string, max: number | null): void;
  abstract onPing(): void;
  abstract onPong(): void;
  abstract onOk(): void;
  abstract onErr(text: string): void;
  abstract deliver(msg: Message, subs: Subscription[]): void;
}

/** A subject or queue name as nats-server quotes it in its errors (Go's %q: JSON's escapes for what NATS allows). */
export function quote(s: string): string {
  return JSON.stringify(s);
}

/**
 * A NATS subscription subject as the unified MQTT-syntax filter policies are written in: `.` ↔ `/` swapped, `*` →
 * `+`, `>` → `#` (`#` also matches the parent, so the verdict can only be stricter than the subject needs). A token
 * holding `+` or `#` among other characters cannot be an MQTT filter level: it can match no unified topic, so `+`
 * stands for it (the verdict covers at least what it could match).
 */
export function natsFilterToUnified(subject: string): string {
  const tokens = subject.split('.');
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (t === '*' || t.includes('+') || t.includes('#')) tokens[i] = '+';
    else if (t === '>') tokens[i] = '#';
    else if (t.includes('/')) tokens[i] = t.replaceAll('/', '.');
  }
  return tokens.join('/');
}

/**
 * nats-server's queue-group permissions ("subject queue" entries of a subscribe allow or deny list: a subscription
 * to the subject in that queue group only) as FlowMQ topic resources: `topic:$nats-queue/<queue>/<subject>`. A
 * queue subscription is allowed when its subject is allowed, or when this topic of its queue and subject is; it is
 * refused when a deny reaches into this topic. `*` (or `>`) as the queue stands for every queue; a queue name
 * holding `+` or `#` is checked as `+` (what could match it).
 */
export const NATS_QUEUE_ROOT = '$nats-queue';
export function natsQueueTopic(queue: string, subject: string): string {
  const q = queue === '*' || queue === '>' || queue.includes('+') || queue.includes('#') ? '+' : queue.replaceAll('/', '.');
  return `${NATS_QUEUE_ROOT}/${q}/${natsFilterToUnified(subject)}`;
}

/** A permission entry "subject" or "subject queue" as a topic pattern (see natsQueueTopic). */
export function natsPermissionTopic(entry: string): string {
  const [subject = '', queue] = entry.trim().split(/\s+/);
  return queue === undefined ? natsFilterToUnified(subject) : natsQueueTopic(queue, subject);
}

/** The first line starts with CONNECT (any case) and a blank. */
export function startsWithConnect(b: Buffer): boolean {
  if (b.length < 8) return false;
  const w = 'connect';
  for (let i = 0; i < 7; i++) if ((b[i]! | 0x20) !== w.charCodeAt(i)) return false;
  return b[7] === 0x20 || b[7] === 0x09;
}

export function hasWildcardToken(subject: string): boolean {
  const t = subject.split('.');
  for (const x of t) if (x === '*' || x === '>') return true;
  return false;
}

/** NATS subject matching (`*` one token, `>` one or more trailing), for a connection's own subscriptions. */
export function natsMatch(filter: string, subject: string): boolean {
  const f = filter.split('.');
  const s = subject.split('.');
  for (let i = 0; i < f.length; i++) {
    const t = f[i];
    if (t === '>') return s.length > i;
    if (i >= s.length) return false;
    if (t !== '*' && t !== s[i]) return false;
  }
  return f.length === s.length;
}

/** A subject that can stand in a MSG/HMSG control line: no whitespace or control character. */
export function deliverableSubject(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) <= 0x20 || s.charCodeAt(i) === 0x7f) return false;
  return true;
}
