/**
 * One NATS client connection over any Duplex (TCP, TLS, a WebSocket stream, a test pair), as nats-server 2.9.10
 * serves a client:
 *
 * - INFO first (unless the listener sent it on the TLS upgrade path), then CONNECT: verbose (+OK after CONNECT, PUB,
 *   HPUB, SUB, UNSUB), pedantic (publish subjects checked with NATS's rules), echo (off: the connection's own
 *   publishes are not delivered to it), headers, no_responders (needs headers), user/pass (PasswordGuard) or
 *   auth_token (--nats-token). Bad credentials, or too many attempts from the address (the password guard busy):
 *   `-ERR 'Authorization Violation'` and close, as nats-server answers every refused login; a client that sends
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
 *
 * Files: connection-state.ts (the state, input, output, flow, life cycle), connection.ts (NatsConnection: CONNECT,
 * SUB, UNSUB, PING and the other operations the parser calls), publish.ts (PUB / HPUB), deliver.ts (MSG / HMSG out),
 * control.ts (registry, login, permissions, quotas).
 */
import { NS_ROOT, type Message, type SubscribeOptions, type Subscription } from '../../core/index.js';
import { ANONYMOUS } from '../../control/index.js';
import { logKey } from '../../util/log-limit.js';
import { OK, PONG, encodeErr, encodeInfo, isValidQueueName, isValidSubject, type ConnectOptions } from './codec/index.js';
import type { NatsAuthOutcome } from './types.js';
import { NatsErr, natsErrTextOf } from './errors.js';
import { hasWildcardToken, NatsConnectionState, natsFilterToUnified, natsQueueTopic, type NatsSub, PAUSE_AUTH, quote, St } from './connection-state.js';
import { login, permissionViolation, register } from './control.js';
import { admit, publish } from './publish.js';
import { deliver, removeSub } from './deliver.js';

export { natsFilterToUnified, natsMatch } from './connection-state.js';

export class NatsConnection extends NatsConnectionState {
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
    register(this);
    if (this.meta.infoSent !== true) this.sendRaw(encodeInfo(this.adapter.info(this.meta, this.tls)));
    // Nothing to check: the client is anonymous from the start, and takes its namespace's lease now.
    if (!this.gate && !login(this, ANONYMOUS)) return;
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
    this.lang = o.lang;
    this.version = o.version;
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
    const r = this.adapter.authenticate(o, this.meta);
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
      this.adapter.logLimit.log(
        'info',
        logKey('nats login refused', this.remoteAddress),
        { remote: this.remoteAddress, user: o.user, token: o.auth_token !== undefined, busy: r.busy },
        'nats: login refused',
      );
      // A busy guard (too many attempts from this address) answers as a wrong password does: NATS has no "try later"
      // error, and a client closed without an -ERR cannot tell a refused login from a network failure. The
      // throttle's delay already came before this answer.
      return this.fatal(NatsErr.AUTH_VIOLATION, null);
    }
    if (!login(this, r.principal)) return;
    // A user JWT's exp (operator mode), or an OIDC token's: -ERR 'User Authentication Expired' then (the sweep).
    const exp = r.expiresAt ?? r.principal.expiresAt;
    if (exp != null) this.expiresAt = exp;
    // Its account JWT's exp: -ERR 'Account Authentication Expired' then.
    if (r.accountExpiresAt != null) this.accountExpiresAt = r.accountExpiresAt;
    this.authed = true;
    if (this.verbose) this.send(OK);
    this.resumeReading(PAUSE_AUTH);
    this.openGate();
  }

  onPub(subject: string, reply: string | null, payload: Buffer): void {
    if (!this.ready()) return;
    publish(this, subject, reply, null, payload);
  }

  onHpub(subject: string, reply: string | null, headers: Buffer, payload: Buffer): void {
    if (!this.ready()) return;
    if (!this.headers) return this.fatal(NatsErr.HEADERS_NOT_SUPPORTED, 'nats HPUB without headers in CONNECT');
    publish(this, subject, reply, headers, payload);
  }

  onSub(subject: string, queue: string | null, sid: string): void {
    if (!this.ready()) return;
    if (!isValidSubject(subject, { wildcards: true }) || (queue !== null && !isValidQueueName(queue))) {
      return this.invalid(NatsErr.INVALID_SUBJECT, subject);
    }
    // `$ns` is no client's subject in any namespace (namespaces.ts; the core refuses it in `default` too).
    if (!this.names.isDefault && (subject === NS_ROOT || subject.startsWith(`${NS_ROOT}.`))) return this.invalid(NatsErr.INVALID_SUBJECT, subject);
    // nats-server keeps the first subscription of a repeated sid.
    if (this.subs.has(sid)) return this.ok();
    const max = this.adapter.options.maxSubscriptions;
    if (max > 0 && this.subs.size >= max) {
      this.adapter.logLimit.log(
        'info',
        logKey('nats max subscriptions', this.remoteAddress),
        { remote: this.remoteAddress, client: this.clientId, max },
        'nats: maximum subscriptions exceeded',
      );
      this.send(encodeErr(NatsErr.MAX_SUBS));
      return;
    }
    const { refused, queueAdmit } = this.subscribeVerdict(subject, queue);
    if (refused) {
      const what = queue === null ? `Subscription to ${quote(subject)}` : `Subscription to ${quote(subject)} using queue ${quote(queue)}`;
      return permissionViolation(this, what, 'subscribe', subject);
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
      // A tenant's subject is qualified into its namespace (`$ns.<ns>.<subject>`), which the subscription names.
      const names = this.names;
      const o: SubscribeOptions =
        queue === null
          ? { qos: 0, rule: 'nats', data: ns, admit: admit(this) }
          : { qos: 0, rule: 'nats', group: queue, data: ns, admit: queueAdmit ?? admit(this) };
      if (!names.isDefault) o.namespace = names.namespace;
      ns.sub = this.adapter.engine.subscribe(names.natsSubject(subject), this, o);
    } catch (err) {
      const text = natsErrTextOf(err);
      if (text !== null) return this.invalid(text, subject);
      this.adapter.logger.error({ err, client: this.clientId, subject }, 'nats: subscribe failed');
      return this.shutdown(true);
    }
    this.subs.set(sid, ns);
    this.adapter.stats.subInserts++;
    this.adapter.publisher.subscribed?.();
    this.lastActivity = this.now;
    this.ok();
  }

  /**
   * May this connection subscribe to `subject` (in `queue`)? A queue subscription has its queue-group permissions
   * too (natsQueueTopic): allowed by the subject's topic or the queue's, refused by a deny reaching into the queue's;
   * allowed by the queue's alone, its deliveries then pass the subject's topic or the queue's (queueAdmit).
   */
  private subscribeVerdict(subject: string, queue: string | null): { refused: boolean; queueAdmit: ((topic: string) => boolean) | null } {
    if (this.access.open) return { refused: false, queueAdmit: null };
    const plain = this.access.subscription(natsFilterToUnified(subject));
    if (queue === null) return { refused: plain === 'deny', queueAdmit: null };
    const qt = natsQueueTopic(queue, subject);
    if (!this.access.mayCapture(qt)) return { refused: true, queueAdmit: null };
    if (plain !== 'deny') return { refused: false, queueAdmit: null };
    const prefix = qt.slice(0, qt.length - natsFilterToUnified(subject).length);
    const names = this.names;
    return {
      refused: this.access.subscription(qt) === 'deny',
      queueAdmit: (internal) => {
        const topic = names.outTopic(internal);
        return this.access.admits(topic) || this.access.admits(prefix + topic);
      },
    };
  }

  /**
   * After a configuration reload (SIGHUP): each subscription the permissions no longer allow ends with nats-server's
   * Permissions Violation (the connection stays), as nats-server does on reload. Answers how many ended.
   */
  recheckSubscriptions(): number {
    if (!this.authed || this.st !== St.Live || this.access.open) return 0;
    let ended = 0;
    for (const ns of [...this.subs.values()]) {
      if (!this.subscribeVerdict(ns.subject, ns.queue).refused) continue;
      const what = ns.queue === null ? `Subscription to ${quote(ns.subject)}` : `Subscription to ${quote(ns.subject)} using queue ${quote(ns.queue)}`;
      removeSub(this, ns);
      permissionViolation(this, what, 'subscribe', ns.subject);
      ended++;
    }
    return ended;
  }

  onUnsub(sid: string, max: number | null): void {
    if (!this.ready()) return;
    const ns = this.subs.get(sid);
    if (ns !== undefined) {
      this.lastActivity = this.now;
      if (max !== null && max > 0 && ns.delivered < max) ns.max = max;
      else removeSub(this, ns);
    }
    this.ok();
  }

  /** A PONG sent later (after the barrier). */
  private readonly pong = (): void => this.send(PONG);

  onPing(): void {
    if (this.st !== St.Live) return;
    if (!this.authed) return this.beforeConnect();
    // After this connection's earlier publishes into streams are durable (write-barrier.ts), as nats-server answers
    // a PING once the PUBs before it are processed.
    const b = this.barrier;
    if (b !== null && b.busy) return b.after(this.pong);
    this.send(PONG);
  }

  onPong(): void {
    this.pingsOut = 0;
    if (this.rttPingAt !== 0n) {
      this.rttNs = Number(process.hrtime.bigint() - this.rttPingAt);
      this.rttPingAt = 0n;
    }
  }

  onOk(): void {
    // nats-server ignores a client's +OK.
  }

  onErr(text: string): void {
    // nats-server closes a client connection that sends -ERR.
    this.adapter.logLimit.log(
      'info',
      logKey('nats client error', this.remoteAddress),
      { remote: this.remoteAddress, client: this.clientId, err: text },
      'nats: client sent -ERR, closing',
    );
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

  /** The engine's delivery: one MSG/HMSG per matching subscription of this connection. Never throws. */
  deliver(msg: Message, subs: Subscription[]): void {
    deliver(this, msg, subs);
  }
}
