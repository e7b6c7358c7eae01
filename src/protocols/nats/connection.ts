/**
 * One NATS client connection over any Duplex (TCP, TLS, a WebSocket stream, a test pair), as nats-server 2.9.10
 * serves a client:
 *
 * - INFO first (unless the listener sent it on the TLS upgrade path), then CONNECT: verbose (+OK after CONNECT, PUB,
 *   HPUB, SUB, UNSUB), pedantic (publish subjects checked with NATS's rules), echo (off: the connection's own
 *   publishes are not delivered to it), headers, no_responders (needs headers), user/pass (PasswordGuard) or
 *   auth_token (--nats-token). Bad credentials: `-ERR 'Authorization Violation'` and close; a client that sends
 *   no CONNECT within authTimeoutMs: `-ERR 'Authentication Timeout'` and close.
 * - Nothing large before CONNECT: when the broker has credentials to check (a users file or a token), only the
 *   first line is parsed (at most maxControlLine bytes) until its CONNECT is accepted, and it must be CONNECT when
 *   authentication is required (nats-server: any other operation first is an Authorization Violation). While a
 *   password is checked (scrypt on the guard's worker) the socket is not read; the bytes after the CONNECT line
 *   wait unparsed. Without any credentials configured, operations before CONNECT are served as nats-server does.
 * - PUB/HPUB → engine.publish, not awaited; a publish a stream captured counts as a pending write, and past
 *   MAX_PENDING_WRITES unsettled writes the socket is not read until half settled (storage sets the pace, memory
 *   stays bounded). A PUB with a reply subject goes through the adapter's NatsPublisher (JetStream PubAcks), and
 *   when it reached nobody (no subscriber, stream or queue) a client that asked for no_responders gets the
 *   `NATS/1.0 503` status on its own subscription for the reply subject.
 * - SUB (queue groups are the core's shared groups, rule 'nats'), UNSUB with max. Deliveries are MSG, or HMSG for
 *   a message with headers (adapter.ts maps them) to a client that announced headers.
 * - Output: every delivery and reply is appended to one NatsWriter and the writer is handed to the socket once per
 *   turn of the event loop (setImmediate), so a burst of deliveries leaves in one write. No closure or promise per
 *   message on the PUB → MSG path.
 * - Slow consumers: bytes waiting for the socket (the writer's and the socket's own buffer) above maxPending, or
 *   messages written and not yet taken by the socket above maxPendingMsgs: "Slow Consumer Detected" is logged
 *   (rate limited), counted, and the connection closed without a word, as nats-server does; what it had not sent
 *   is dropped (core NATS is at most once). Memory per connection stays bounded by maxPending.
 * - Replies count too: every byte written to the client (+OK, PONG, -ERR as well as deliveries) is in those
 *   figures. A client that sends requests and does not read their replies (a verbose publisher that never reads
 *   its +OKs, a PING flood whose PONGs nobody reads) had its replies buffered without limit (+260 MiB in 15 s,
 *   never closed). Now, once its unsent bytes pass flushAt after a reply, its socket is not read (it cannot send
 *   more requests; TCP holds it back) until they fall to half that; and if the socket takes none of them for
 *   writeDeadlineMs meanwhile (nats-server's write_deadline), it is a slow consumer and closed as above.
 * - A control line or payload whose first bytes arrived must arrive whole within opTimeoutMs (while the socket is
 *   read), or the connection is closed with -ERR 'Stale Connection': a half-sent operation must not hold its
 *   memory forever, and a client trickling a payload byte by byte is never silent long enough for the PINGs.
 * - PING every pingIntervalMs unless the client sent something since the last one; maxPingsOut unanswered PINGs:
 *   `-ERR 'Stale Connection'` and close. The adapter's one sweep timer drives these and the auth timeout.
 * - Protocol errors (the parser's, with nats-server's -ERR texts) close the connection; invalid subjects do not.
 *   Every client-triggered log line is rate limited by the adapter's LogLimiter.
 */
import type { Duplex } from 'node:stream';
import type { Message, Subscriber, Subscription } from '../../core/index.js';
import { ANONYMOUS, type Access, type ClientEntry, type Principal, type QuotaLease } from '../../control/index.js';
import { logKey } from '../../util/log-limit.js';
import {
  NatsErrText,
  NatsProtocolError,
  NatsServerParser,
  NatsWriter,
  OK,
  PING,
  PONG,
  encodeErr,
  encodeInfo,
  isValidLiteralSubject,
  isValidQueueName,
  isValidSubject,
  parseHeaders,
  type ConnectOptions,
  type NatsServerHandler,
} from './codec/index.js';
import { applyNatsHeaders, natsHeaderBlock, subjectToTopic, topicToSubject } from './mapping.js';
import type { NatsAuthOutcome, NatsConnectionHost, NatsConnectionMeta, NatsListenerTls } from './types.js';
import { NatsErr, natsErrTextOf } from './errors.js';

/** Publishes whose durable writes have not settled, per connection, before its socket stops being read. */
const MAX_PENDING_WRITES = 10_000;
/** Bytes after a CONNECT line kept unparsed while its credentials are checked (the socket is paused meanwhile). */
const MAX_HELD_BYTES = 1024 * 1024;
/** How long an ended socket may take to close before it is destroyed. */
const CLOSE_GRACE_MS = 1000;
/**
 * The writer's first slab for replies (+OK, PONG, -ERR): small, so that an idle connection or one that answers a
 * PING now and then holds next to nothing (it was a 64 KiB slab per connection that had ever been answered).
 */
const REPLY_SLAB = 1024;
/**
 * The writer's slab once a connection gets deliveries: one socket write's worth of small deliveries (it doubles
 * each time a batch straddles two, up to 1 MiB: NatsWriter). A writer that wrote nothing for a whole sweep period is
 * dropped (see sweep), so a connection that went quiet holds neither.
 */
const WRITER_SLAB = 64 * 1024;
/** Reading paused for these reasons (pausedFor bits). */
const PAUSE_AUTH = 1;
const PAUSE_WRITES = 2;
const PAUSE_QUOTA = 4;
const PAUSE_OUTPUT = 8;

const NO_RESPONDERS_BLOCK = Buffer.from('NATS/1.0 503\r\n\r\n', 'latin1');
const EMPTY = Buffer.alloc(0);

const enum St {
  Live,
  /** Ending: nothing more is read or delivered. */
  Closing,
  Done,
}

/** One SUB of the connection; it is the engine Subscription's `options.data`. */
interface NatsSub {
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

export class NatsConnection implements Subscriber, NatsServerHandler {
  readonly id: string;
  readonly clientId: number;
  readonly remoteAddress: string;
  private closedP: Promise<void> | null = null;
  private resolveClosed: (() => void) | null = null;
  private st = St.Live;
  private readonly parser: NatsServerParser;
  private w: NatsWriter | null = null;
  private readonly subs = new Map<string, NatsSub>();

  // CONNECT
  private connectSeen = false;
  /** Credentials accepted (or none needed): operations other than CONNECT are served. */
  private authed: boolean;
  /** Only the first line is parsed (credentials to check): see the file comment. */
  private gate: boolean;
  private gateLine: Buffer | null = null;
  private held: Buffer | null = null;
  private verbose = false;
  private pedantic = false;
  private echo = true;
  private headers = false;
  private noResponders = false;
  private name: string | undefined;
  user: string | null = null;

  // control plane
  /** What this connection may do (policies, re-read live); the anonymous principal until CONNECT says otherwise. */
  access: Access;
  /** The namespace's quotas, held from login to close (null before login, or when refused). */
  private lease: QuotaLease | null = null;
  /** The client registry's entry (admin API list and kick, /metrics). */
  private entry: ClientEntry | null = null;
  /** Reading paused by a rate quota until then (ms since the epoch), and its timer. */
  private quotaUntil = 0;
  private quotaTimer: NodeJS.Timeout | null = null;
  /** Per-delivery policy check of every subscription of this connection (made at the first SUB). */
  private admitFn: ((topic: string) => boolean) | null = null;

  // output
  private flushScheduled = false;
  /** Writer bytes past which a delivery flushes at once: a quarter of maxPending, at most 1 MiB. */
  private readonly flushAt: number;
  /** Messages written since the last flush, and per flush not yet taken by the socket (maxPendingMsgs). */
  private batchMsgs = 0;
  private pendingMsgs = 0;
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
  private pendingWrites = 0;
  /** The last publish subject and its topic (publishers repeat subjects; the parser hands the same string). */
  private lastPubSubject = '';
  private lastPubTopic = '';
  /** When the chunk being parsed was read: the timestamp of the messages in it. */
  private now = 0;

  // sweep
  private readonly openedAt = Date.now();
  private inCount = 0;
  private seenIn = 0;
  private lastPingAt: number;
  private pingsOut = 0;
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
  }

  /** Resolves once the connection is gone (made when first asked for: the adapter hears of it from teardown). */
  get closed(): Promise<void> {
    if (this.closedP === null) {
      this.closedP = this.tornDown
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            this.resolveClosed = resolve;
          });
    }
    return this.closedP;
  }

  /** Subscriptions open on this connection. */
  get subscriptionCount(): number {
    return this.subs.size;
  }

  /** Sends INFO (unless the listener did) and starts reading. */
  start(): void {
    const s = this.stream;
    // The client may have gone while the listener was busy with it (a TLS upgrade): no 'close' will come again.
    if (s.destroyed) {
      this.teardown();
      return;
    }
    s.on('error', (err: Error) => {
      this.adapter.logger.debug({ client: this.clientId, err: err.message }, 'nats connection error');
      this.destroy();
    });
    s.on('close', () => this.teardown());
    s.on('end', () => this.destroy());
    this.register();
    if (this.meta.infoSent !== true) this.sendRaw(encodeInfo(this.adapter.info(this.meta, this.tls)));
    // Nothing to check: the client is anonymous from the start, and takes its namespace's lease now.
    if (!this.gate && !this.login(ANONYMOUS)) return;
    s.on('data', (chunk: Buffer | string) => this.receive(typeof chunk === 'string' ? Buffer.from(chunk) : chunk));
    s.resume();
  }

  /** Over the connection limit: the -ERR, then close. */
  refuse(text: string): void {
    if (this.stream.destroyed) return this.teardown();
    this.stream.on('error', () => undefined);
    this.stream.on('close', () => this.teardown());
    this.st = St.Closing;
    this.stream.end(encodeErr(text));
    this.destroyLater();
  }

  // ---------------------------------------------------------------------------------------------- input

  private receive(chunk: Buffer): void {
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
  private openGate(): void {
    this.gate = false;
    const h = this.held;
    this.held = null;
    this.now = Date.now();
    if (h !== null) this.feed(h);
  }

  private parseError(err: unknown): void {
    if (this.st !== St.Live) return;
    if (err instanceof NatsProtocolError) {
      this.adapter.stats.protocolErrors++;
      this.adapter.logLimit.log('info', logKey('nats protocol error', this.remoteAddress), { remote: this.remoteAddress, client: this.clientId, err: err.message }, 'nats: protocol error');
      if (err.errText !== null) this.fatal(err.errText, null);
      else this.shutdown(true);
      return;
    }
    this.adapter.logger.error({ err, client: this.clientId }, 'nats: internal error');
    this.shutdown(true);
  }

  // ---------------------------------------------------------------------------------------------- operations

  onConnect(o: ConnectOptions): void {
    if (this.st !== St.Live) return;
    if (this.tls.required && !this.meta.tls) return this.fatal(NatsErr.TLS_REQUIRED, 'nats plain connection where TLS is required');
    if (o.no_responders === true && o.headers !== true) return this.fatal(NatsErr.NO_RESPONDERS_NEEDS_HEADERS, 'nats no_responders without headers');
    this.verbose = o.verbose === true;
    this.pedantic = o.pedantic === true;
    this.echo = o.echo !== false;
    this.headers = o.headers === true;
    this.noResponders = o.no_responders === true;
    this.name = o.name;
    if (this.entry !== null && o.name !== undefined && o.name !== '') this.entry.clientId = o.name;
    this.lastPubSubject = '';
    if (this.connectSeen) {
      // A second CONNECT changes options only; the credentials were checked once.
      if (this.verbose) this.send(OK);
      return;
    }
    this.connectSeen = true;
    if (!this.gate) {
      // No credentials configured: nothing to check.
      if (this.verbose) this.send(OK);
      return;
    }
    const r = this.adapter.authenticate(o, this.remoteAddress, this.meta.tlsSocket);
    if (r instanceof Promise) {
      this.pauseReading(PAUSE_AUTH);
      r.then(
        (v) => this.authenticated(v, o),
        (err: unknown) => {
          this.adapter.logger.error({ err, client: this.clientId }, 'nats: authentication failed');
          this.shutdown(true);
        },
      );
    } else this.authenticated(r, o);
  }

  private authenticated(r: NatsAuthOutcome, o: ConnectOptions): void {
    if (this.st !== St.Live) return;
    if (!r.ok) {
      this.adapter.logLimit.log('info', logKey('nats login refused', this.remoteAddress), { remote: this.remoteAddress, user: o.user, token: o.auth_token !== undefined, busy: r.busy }, 'nats: login refused');
      // A busy guard (too many attempts) is not a wrong password: close without the violation so clients retry.
      if (r.busy) return this.shutdown(true);
      return this.fatal(NatsErr.AUTH_VIOLATION, null);
    }
    if (!this.login(r.principal)) return;
    this.authed = true;
    if (this.verbose) this.send(OK);
    this.resumeReading(PAUSE_AUTH);
    this.openGate();
  }

  onPub(subject: string, reply: string | null, payload: Buffer): void {
    if (!this.ready()) return;
    this.publish(subject, reply, null, payload);
  }

  onHpub(subject: string, reply: string | null, headers: Buffer, payload: Buffer): void {
    if (!this.ready()) return;
    if (!this.headers) return this.fatal(NatsErr.HEADERS_NOT_SUPPORTED, 'nats HPUB without headers in CONNECT');
    this.publish(subject, reply, headers, payload);
  }

  onSub(subject: string, queue: string | null, sid: string): void {
    if (!this.ready()) return;
    if (!isValidSubject(subject, { wildcards: true }) || (queue !== null && !isValidQueueName(queue))) {
      return this.invalid(NatsErr.INVALID_SUBJECT, subject);
    }
    // nats-server keeps the first subscription of a repeated sid.
    if (this.subs.has(sid)) return this.ok();
    const max = this.adapter.options.maxSubscriptions;
    if (max > 0 && this.subs.size >= max) {
      this.adapter.logLimit.log('info', logKey('nats max subscriptions', this.remoteAddress), { remote: this.remoteAddress, client: this.clientId, max }, 'nats: maximum subscriptions exceeded');
      this.send(encodeErr(NatsErr.MAX_SUBS));
      return;
    }
    if (!this.access.open && this.access.subscription(natsFilterToUnified(subject)) === 'deny') {
      const what = queue === null ? `Subscription to ${quote(subject)}` : `Subscription to ${quote(subject)} using queue ${quote(queue)}`;
      return this.permissionViolation(what, 'subscribe', subject);
    }
    const ns: NatsSub = {
      sid,
      subject,
      queue,
      literal: !hasWildcardToken(subject),
      max: 0,
      delivered: 0,
      sub: null,
      lastTopic: '',
      lastSubject: '',
    };
    try {
      // Every subscription carries the admit check: a policy changed live stops deliveries it no longer allows, and a
      // wildcard that reaches into denied topics (or `>` into `$` topics) gets only what the policies let through.
      ns.sub = this.adapter.engine.subscribe(
        subject,
        this,
        queue === null ? { qos: 0, rule: 'nats', data: ns, admit: this.admit() } : { qos: 0, rule: 'nats', group: queue, data: ns, admit: this.admit() },
      );
    } catch (err) {
      const text = natsErrTextOf(err);
      if (text !== null) return this.invalid(text, subject);
      this.adapter.logger.error({ err, client: this.clientId, subject }, 'nats: subscribe failed');
      return this.shutdown(true);
    }
    this.subs.set(sid, ns);
    this.ok();
  }

  onUnsub(sid: string, max: number | null): void {
    if (!this.ready()) return;
    const ns = this.subs.get(sid);
    if (ns !== undefined) {
      if (max !== null && max > 0 && ns.delivered < max) ns.max = max;
      else this.removeSub(ns);
    }
    this.ok();
  }

  onPing(): void {
    if (this.st !== St.Live) return;
    if (!this.authed) return this.beforeConnect();
    this.send(PONG);
  }

  onPong(): void {
    this.pingsOut = 0;
  }

  onOk(): void {
    // nats-server ignores a client's +OK.
  }

  onErr(text: string): void {
    // nats-server closes a client connection that sends -ERR.
    this.adapter.logLimit.log('info', logKey('nats client error', this.remoteAddress), { remote: this.remoteAddress, client: this.clientId, err: text }, 'nats: client sent -ERR, closing');
    this.shutdown(true);
  }

  /** An operation other than CONNECT may be served. */
  private ready(): boolean {
    if (this.st !== St.Live) return false;
    if (!this.authed) {
      this.beforeConnect();
      return false;
    }
    return true;
  }

  private beforeConnect(): void {
    this.adapter.stats.authFailures++;
    this.fatal(NatsErr.AUTH_VIOLATION, 'nats operation before CONNECT');
  }

  private ok(): void {
    if (this.verbose) this.send(OK);
  }

  /** A subject refused: -ERR, the connection stays open (nats-server's behaviour for subjects). */
  private invalid(text: string, subject: string): void {
    this.adapter.stats.invalidSubjects++;
    this.adapter.logLimit.log('info', logKey('nats invalid subject', this.remoteAddress), { remote: this.remoteAddress, client: this.clientId, subject: subject.slice(0, 256), err: text }, 'nats: invalid subject');
    this.send(encodeErr(text));
  }

  // ---------------------------------------------------------------------------------------------- control plane

  /** Registers the connection with the client registry (the admin API lists and kicks it there). */
  private register(): void {
    const s = (this.meta.byteCounter ?? this.stream) as { bytesRead?: number; bytesWritten?: number };
    this.entry = this.adapter.access.clients.register({
      protocol: 'nats',
      listener: this.meta.websocket === true ? 'nats-ws' : 'nats',
      remoteAddress: this.remoteAddress,
      remotePort: this.meta.remotePort,
      ...(typeof s.bytesRead === 'number' ? { socket: s as { bytesRead: number; bytesWritten: number } } : {}),
      kick: (reason) => this.kick(reason),
    });
  }

  /**
   * The client is who it said it is: its Access and its namespace's quota lease. Over the namespace's connection
   * quota the client gets nats-server's account-limit error and is closed (false).
   */
  private login(principal: Principal): boolean {
    const ac = this.adapter.access;
    const lease = ac.quotas.connect(principal);
    if ('refused' in lease) {
      this.adapter.stats.quotaRefusals++;
      this.adapter.logLimit.log('info', logKey('nats quota refused', this.remoteAddress), { remote: this.remoteAddress, user: principal.user, namespace: principal.namespace, reason: lease.refused }, 'nats: connection refused by its namespace quota');
      this.fatal(NatsErr.MAX_ACCOUNT_CONNECTIONS, null);
      return false;
    }
    this.lease = lease;
    this.user = principal.user;
    this.access = ac.accessFor(principal, 'nats', this.remoteAddress);
    if (this.entry !== null) {
      this.entry.user = principal.user;
      this.entry.namespace = principal.namespace;
    }
    return true;
  }

  /** An administrator kicked the client (admin API): closed at once; NATS has no word for it (clients reconnect). */
  private kick(reason: string): void {
    this.adapter.logger.info({ client: this.clientId, remote: this.remoteAddress, user: this.user, reason }, 'nats: client kicked');
    this.shutdown(true);
  }

  /**
   * May this connection publish on `topic`? JetStream API and ack subjects are not topics a policy names: with
   * JetStream on, the service checks each request against the stream and consumer it acts on (`subscribe
   * stream:`, `create stream:`, ...), so they pass here.
   */
  private mayPublish(topic: string): boolean {
    if (this.adapter.hasJetStream && topic.charCodeAt(0) === 0x24 && (topic.startsWith('$JS/API/') || topic.startsWith('$JS/ACK/'))) return true;
    return this.access.can('publish', 'topic', topic);
  }

  /** A PUB or SUB a policy refuses: nats-server's -ERR, the connection stays (as nats-server keeps it). */
  private permissionViolation(what: string, op: 'publish' | 'subscribe', subject: string): void {
    this.adapter.stats.permissionViolations++;
    this.adapter.logLimit.log('info', logKey('nats permissions violation', this.remoteAddress), { remote: this.remoteAddress, client: this.clientId, user: this.user, op, subject: subject.slice(0, 256) }, 'nats: permissions violation');
    this.send(encodeErr(`Permissions Violation for ${what}`));
  }

  /** A rate quota asks to hold the client back `ms`: its socket is not read until then (TCP pushes back). */
  private quotaWait(ms: number): void {
    const until = Date.now() + ms;
    if (until <= this.quotaUntil) return;
    this.quotaUntil = until;
    if (this.quotaTimer !== null) clearTimeout(this.quotaTimer);
    else {
      this.adapter.stats.quotaPauses++;
      this.pauseReading(PAUSE_QUOTA);
    }
    this.quotaTimer = setTimeout(() => {
      this.quotaTimer = null;
      this.quotaUntil = 0;
      this.resumeReading(PAUSE_QUOTA);
    }, ms);
    this.quotaTimer.unref();
  }

  // ---------------------------------------------------------------------------------------------- publish

  private publish(subject: string, reply: string | null, hdr: Buffer | null, payload: Buffer): void {
    let topic: string;
    if (subject === this.lastPubSubject) topic = this.lastPubTopic;
    else {
      const t = this.pedantic && !isValidLiteralSubject(subject) ? null : subjectToTopic(subject);
      if (t === null) return this.invalid(NatsErr.INVALID_PUBLISH_SUBJECT, subject);
      topic = t;
      this.lastPubSubject = subject;
      this.lastPubTopic = t;
    }
    if (!this.access.open && !this.mayPublish(topic)) return this.permissionViolation(`Publish to ${quote(subject)}`, 'publish', subject);
    const stats = this.adapter.stats;
    stats.msgsIn++;
    stats.bytesIn += payload.length;
    if (this.entry !== null) this.entry.messagesIn++;
    if (this.lease !== null) {
      const wait = this.lease.chargeIn(1, payload.length + (hdr === null ? 0 : hdr.length));
      if (wait > 0) this.quotaWait(wait);
    }
    // The payload is a view into the chunk the stream emitted, which no one reuses (a 'data' chunk is the
    // stream's own): it may be kept as is. Whatever keeps a message beyond delivery copies it (retained messages,
    // stream records) as it must for every protocol.
    const msg: Message = { topic, payload, key: null, headers: [], timestamp: this.now, qos: 0, retain: false, origin: this.id };
    // An HPUB with a zero-length header block is a message without headers (nats.js sends `HPUB <subj> 0 <n>` for
    // an empty headers object: every js.publish without options); nats-server accepts it.
    if (hdr !== null && hdr.length > 0) {
      try {
        applyNatsHeaders(msg, parseHeaders(hdr));
      } catch (err) {
        // nats-server does not look inside headers; FlowMQ maps them, and a block it cannot read closes the
        // connection as any other malformed operation does (the parser's errText is null: no -ERR).
        return this.parseError(err);
      }
    }
    if (reply !== null) return this.request(msg, subject, reply);
    // nats-server acknowledges a verbose PUB before delivering it (a subscriber on the same connection sees +OK first).
    if (this.verbose) this.send(OK);
    let durable: Promise<void> | null;
    try {
      durable = this.adapter.engine.publish(msg);
    } catch (err) {
      return this.publishFailed(err, subject);
    }
    if (durable !== null) {
      if (++this.pendingWrites >= MAX_PENDING_WRITES) this.pauseReading(PAUSE_WRITES);
      void durable.then(...this.settlers());
    }
  }

  private request(msg: Message, subject: string, reply: string): void {
    const rt = subjectToTopic(reply);
    if (rt === null) return this.invalid(NatsErr.INVALID_PUBLISH_SUBJECT, reply);
    msg.responseTopic = rt;
    if (this.verbose) this.send(OK);
    let reached: number;
    try {
      const info = this.adapter.publisher.publish(msg, rt);
      reached = info.delivered + info.captured.length + info.queued;
    } catch (err) {
      return this.publishFailed(err, subject);
    }
    if (reached === 0 && this.noResponders && this.st === St.Live) this.sendNoResponders(reply);
  }

  /** The 503 status to this connection's own subscriptions matching the reply subject. */
  private sendNoResponders(reply: string): void {
    this.adapter.stats.noResponders++;
    for (const ns of this.subs.values()) {
      if (!natsMatch(ns.subject, reply)) continue;
      this.writer().writeHmsg(reply, ns.sid, null, NO_RESPONDERS_BLOCK, EMPTY);
      this.batchMsgs++;
      this.countDelivery(ns);
    }
    this.scheduleFlush();
  }

  private publishFailed(err: unknown, subject: string): void {
    const text = natsErrTextOf(err);
    if (text !== null) return this.invalid(text, subject);
    this.adapter.writeFailed(err);
  }

  /** The callbacks of a durable publish's settling (made at the first one: most connections never need them). */
  private settled: [() => void, (err: unknown) => void] | null = null;

  private settlers(): [() => void, (err: unknown) => void] {
    if (this.settled === null) {
      const ok = (): void => {
        if (--this.pendingWrites <= MAX_PENDING_WRITES >> 1) this.resumeReading(PAUSE_WRITES);
      };
      this.settled = [
        ok,
        (err: unknown): void => {
          ok();
          this.adapter.writeFailed(err);
        },
      ];
    }
    return this.settled;
  }

  /** The per-delivery policy check every subscription of this connection carries (cheap while nothing is denied). */
  private admit(): (topic: string) => boolean {
    return (this.admitFn ??= (topic: string): boolean => this.access.admits(topic));
  }

  // ---------------------------------------------------------------------------------------------- deliveries

  /** The engine's delivery: one MSG/HMSG per matching subscription of this connection. Never throws. */
  deliver(msg: Message, subs: Subscription[]): void {
    if (this.st !== St.Live) return;
    if (!this.echo && msg.origin === this.id) return this.notEchoed(msg, subs);
    let hdr: Buffer | null = null;
    if (this.headers) hdr = natsHeaderBlock(msg);
    else if (msg.status !== undefined) return; // a bare status means nothing to a client without headers
    const dt = msg.deliverTopic;
    const topic = dt ?? msg.topic;
    // A response topic that is no NATS subject (whitespace: MSG's arguments are space-separated) is left out.
    let reply = msg.responseTopic === undefined ? null : topicToSubject(msg.responseTopic);
    if (reply !== null && !deliverableSubject(reply)) reply = null;
    const payload = msg.payload;
    const w = this.deliveryWriter();
    const stats = this.adapter.stats;
    const before = stats.msgsOut;
    for (let i = 0; i < subs.length; i++) {
      const ns = subs[i]!.options.data as NatsSub;
      if (ns.sub === null) continue;
      let subject: string;
      if (ns.literal && dt === undefined) subject = ns.subject;
      else if (ns.lastTopic === topic) subject = ns.lastSubject;
      else {
        subject = topicToSubject(topic);
        // An MQTT topic may hold a space or a tab; as a MSG subject it would split the control line and corrupt
        // the client's protocol stream. nats-server never has such a subject: not delivered ('' = skip).
        if (!deliverableSubject(subject)) subject = '';
        ns.lastTopic = topic;
        ns.lastSubject = subject;
      }
      if (subject === '') continue;
      if (hdr === null) w.writeMsg(subject, ns.sid, reply, payload);
      else w.writeHmsg(subject, ns.sid, reply, hdr, payload);
      this.batchMsgs++;
      stats.msgsOut++;
      stats.bytesOut += payload.length;
      this.countDelivery(ns);
    }
    const sent = stats.msgsOut - before;
    if (sent > 0) {
      if (this.entry !== null) this.entry.messagesOut += sent;
      if (this.lease !== null) {
        const wait = this.lease.chargeOut(sent * payload.length);
        if (wait > 0) this.quotaWait(wait);
      }
    }
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(this.flusher());
    }
    // A burst (a publisher's reads of one loop turn) is handed to the socket in pieces of flushAt bytes; what the
    // socket could not pass on to the kernel at once stays in its buffer (writableLength): that, not the size of
    // a burst, is what makes a consumer slow.
    if (w.length >= this.flushAt) this.flushNow();
    const o = this.adapter.options;
    if (w.length + this.stream.writableLength > o.maxPending || (o.maxPendingMsgs > 0 && this.pendingMsgs + this.batchMsgs > o.maxPendingMsgs)) {
      this.slowConsumer();
    }
  }

  /**
   * A publish of this connection, which asked not to get its own messages: a queue group picked one of its
   * members here, so the message goes to another member (nats-server leaves a no-echo client's subscriptions out
   * of the match, and another member gets it).
   */
  private notEchoed(msg: Message, subs: Subscription[]): void {
    for (const s of subs) if (s.options.group !== undefined) this.adapter.engine.redeliverShared(s, msg);
  }

  private countDelivery(ns: NatsSub): void {
    ns.delivered++;
    if (ns.max > 0 && ns.delivered >= ns.max) this.removeSub(ns);
  }

  private removeSub(ns: NatsSub): void {
    if (ns.sub !== null) this.adapter.engine.unsubscribe(ns.sub);
    ns.sub = null;
    this.subs.delete(ns.sid);
  }

  /** `reason`: what gave it away (maxPending, maxPendingMsgs, or writeDeadline: nothing taken by the socket in time). */
  private slowConsumer(reason = 'maxPending'): void {
    const o = this.adapter.options;
    this.adapter.stats.slowConsumers++;
    this.adapter.logLimit.log(
      'warn',
      logKey('nats slow consumer', this.remoteAddress),
      { remote: this.remoteAddress, client: this.clientId, name: this.name, reason, pendingBytes: (this.w?.length ?? 0) + this.stream.writableLength, maxPending: o.maxPending, pendingMsgs: this.pendingMsgs + this.batchMsgs, maxPendingMsgs: o.maxPendingMsgs, ...(reason === 'writeDeadline' ? { writeDeadlineMs: o.writeDeadlineMs } : {}) },
      'Slow Consumer Detected',
    );
    // nats-server closes a slow consumer without a word; what was not sent is dropped.
    this.w?.clear();
    this.destroy();
  }

  // ---------------------------------------------------------------------------------------------- output

  /** The writer, for replies (made with a small slab). */
  private writer(): NatsWriter {
    return (this.w ??= new NatsWriter(REPLY_SLAB));
  }

  /** The writer, for deliveries (made with, or raised to, a delivery slab). */
  private deliveryWriter(): NatsWriter {
    const w = this.w;
    if (w === null) return (this.w = new NatsWriter(WRITER_SLAB));
    w.minSlab(WRITER_SLAB);
    return w;
  }

  /**
   * A control reply (PONG, +OK, -ERR), in order with the deliveries, and counted with them: past maxPending the
   * client is a slow consumer, past flushAt its socket is not read until the bytes go (see the file comment).
   */
  private send(b: Buffer): void {
    if (this.st !== St.Live) return;
    const w = this.writer();
    w.writeBytes(b);
    this.scheduleFlush();
    const pending = w.length + this.stream.writableLength;
    if (pending > this.flushAt) this.outputFull(pending);
  }

  private sendRaw(b: Buffer): void {
    this.handedOut += b.length;
    this.stream.write(b);
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(this.flusher());
  }

  /** The scheduled flush (one function per connection, made at its first write). */
  private flushFn: (() => void) | null = null;

  private flusher(): () => void {
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
  private flushNow(): void {
    if (this.st === St.Done || this.w === null) return;
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

  private pauseReading(bit: number): void {
    if (this.pausedFor === 0) this.stream.pause();
    this.pausedFor |= bit;
  }

  private resumeReading(bit: number): void {
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
  private fatal(text: string, event: string | null): void {
    if (this.st !== St.Live) return;
    if (event !== null) this.adapter.logLimit.log('info', logKey(event, this.remoteAddress), { remote: this.remoteAddress, client: this.clientId, err: text }, event);
    this.writer().writeBytes(encodeErr(text));
    this.shutdown(false);
  }

  /**
   * Stops reading and delivering and ends the socket after what is queued (`now`: without it). The socket is
   * destroyed if the peer does not close within a second.
   */
  private shutdown(now: boolean): void {
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

  private destroyLater(): void {
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
    for (const ns of this.subs.values()) {
      if (ns.sub !== null) this.adapter.engine.unsubscribe(ns.sub);
      ns.sub = null;
    }
    this.subs.clear();
  }

  private tornDown = false;

  private teardown(): void {
    if (this.tornDown) return;
    this.tornDown = true;
    this.st = St.Done;
    this.parser.stop();
    this.dropSubs();
    if (this.destroyTimer !== null) clearTimeout(this.destroyTimer);
    if (this.quotaTimer !== null) clearTimeout(this.quotaTimer);
    this.lease?.release();
    this.lease = null;
    this.entry?.close();
    this.adapter.left(this);
    this.resolveClosed?.();
  }
}

/** A subject or queue name as nats-server quotes it in its errors (Go's %q: JSON's escapes for what NATS allows). */
function quote(s: string): string {
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

/** The first line starts with CONNECT (any case) and a blank. */
function startsWithConnect(b: Buffer): boolean {
  if (b.length < 8) return false;
  const w = 'connect';
  for (let i = 0; i < 7; i++) if ((b[i]! | 0x20) !== w.charCodeAt(i)) return false;
  return b[7] === 0x20 || b[7] === 0x09;
}

function hasWildcardToken(subject: string): boolean {
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
function deliverableSubject(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) <= 0x20 || s.charCodeAt(i) === 0x7f) return false;
  return true;
}
