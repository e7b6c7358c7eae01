/**
 * The NATS adapter: the state every NATS connection of the broker shares (options, authentication, the
 * connection count, the one timer that drives auth timeouts and PINGs, rate-limited logs, figures) and the mapping
 * between NATS messages and the core's.
 *
 * Mapping (issue 15, design "Message mapping"):
 * - subject ↔ unified topic by the separator swap of src/core/topic.ts (`a.b.c` ↔ `a/b/c`; a `/` inside a token
 *   is a `.` inside a level and back). A publish subject holding `+`, `#` or NUL cannot be a unified topic: refused
 *   with `-ERR 'Invalid Publish Subject'`.
 * - reply subject ↔ `responseTopic` (swapped). Headers ↔ `headers` (one entry per value, key as sent, values
 *   UTF-8); `Nats-Msg-Id` also sets `messageId`. A status line of an HPUB is kept in `status`.
 * - out to NATS: every header entry (a null value is empty); `contentType`, `correlationData` (UTF-8, or base64
 *   when it is not valid UTF-8) and `messageId` become `Content-Type`, `Correlation-Id` and `Nats-Msg-Id` unless
 *   a header of that name is there already (names compared without case); `status` is the status of the `NATS/1.0`
 *   line. A key NATS cannot carry (not printable ASCII, or holding ':') is left out; CR/LF in a value become
 *   spaces. A message with none of these is sent as MSG, else as HMSG to a client that announced headers (MSG
 *   without them to one that did not; a bare status message is not sent to such a client).
 */
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { newPublishInfo, type Engine, type Message, type PublishInfo } from '../../core/index.js';
import { certificateLogin, type CertUserField } from '../../control/certs.js';
import { ANONYMOUS, TOKEN_PREFIX, looksLikeJwt, type Access, type AccessControl, type AuthOutcome } from '../../control/index.js';
import { LogLimiter, logKey } from '../../util/log-limit.js';
import type { AdapterContext } from '../types.js';
import { PayloadBudget, type ConnectOptions } from './codec/index.js';
import { NatsConnection } from './connection.js';
import { DEFAULT_RESPONSES, type NatsOperators } from './auth-jwt.js';
import { nkeyLogin } from './auth-nkey.js';
import { NatsErr } from './errors.js';
import { natsInfo, natsServerName, newNatsIdentity, type NatsIdentity, type NatsInfoSettings } from './info.js';
import type { ResolvedNatsOptions } from './options.js';
import { newNatsStats, type NatsAuthOutcome, type NatsConnectionHost, type NatsConnectionMeta, type NatsListenerTls, type NatsPublisher } from './types.js';

export { NATS_SERVER_VERSION } from './info.js';

/** The default NatsPublisher: a plain engine.publish; a failed durable write is logged (rate limited). */
export class EnginePublisher implements NatsPublisher {
  constructor(
    private readonly engine: Engine,
    private readonly onWriteFailed: (err: unknown) => void,
  ) {}

  publish(msg: Message, _reply: string): PublishInfo {
    const info = newPublishInfo();
    const durable = this.engine.publish(msg, info);
    if (durable !== null) durable.catch(this.onWriteFailed);
    return info;
  }
}

/** How NATS clients authenticate: the broker's control plane, and the optional shared `--nats-token`. */
export interface NatsAuth {
  access: AccessControl;
  /** `--nats-token`: a CONNECT with this auth_token is let in as the anonymous principal (policies for `everyone`). */
  token: string | null;
  /** mTLS: which field of a verified client certificate names the user (null: certificates are not looked at). */
  certUser?: CertUserField | null;
  /** nats-server's no_auth_user: the directory user a CONNECT without any credentials logs in as (null: none). */
  noAuthUser?: string | null;
  /** Operator mode (--nats-operator, --nats-accounts): user JWTs of these accounts log in. */
  operators?: NatsOperators | null;
  /** allow_responses limits of directory users (--nats-response-max, --nats-response-ttl); default 1 within 2 min. */
  responses?: { max: number; ttlMs: number };
}

export class NatsAdapter implements NatsConnectionHost {
  readonly logger: Logger;
  readonly logLimit: LogLimiter;
  readonly engine: Engine;
  readonly publisher: NatsPublisher;
  /** The server id (generated per start, as nats-server does) and the client id counter, shared with the port bound early. */
  readonly identity: NatsIdentity;
  readonly serverName: string;
  private readonly conns = new Set<NatsConnection>();
  private timer: NodeJS.Timeout | null = null;
  private readonly tokenBytes: Buffer | null;
  private readonly jetstream: boolean;
  readonly jsDomainApi: string | null;
  readonly access: AccessControl;
  /** `--nats-token`, or null. */
  readonly token: string | null;
  readonly certUser: CertUserField | null;
  readonly noAuthUser: string | null;
  /** Operator mode's trust chain; replaced by a reload (SIGHUP) that reads the JWT files again. */
  operators: NatsOperators | null;
  readonly responses: { readonly max: number; readonly ttlMs: number };
  /** Open connections by client id (JetStream finds the Access of a request's origin here). */
  private readonly byClientId = new Map<number, NatsConnection>();
  /** Payload memory all connections together may take ahead of its bytes (see codec/parser-base.ts, "Payload memory"). */
  readonly payloads: PayloadBudget;
  readonly stats = newNatsStats();
  /** When the adapter started (the monitoring port's /varz start). */
  readonly startedAt = Date.now();

  constructor(
    readonly ctx: AdapterContext,
    readonly options: ResolvedNatsOptions,
    auth: NatsAuth,
    publisher?: NatsPublisher,
    identity?: NatsIdentity,
  ) {
    this.identity = identity ?? newNatsIdentity();
    this.access = auth.access;
    this.token = auth.token;
    this.certUser = auth.certUser ?? null;
    this.noAuthUser = auth.noAuthUser ?? null;
    this.operators = auth.operators ?? null;
    this.responses = auth.responses ?? DEFAULT_RESPONSES;
    this.logger = ctx.logger;
    this.engine = ctx.engine;
    this.logLimit = new LogLimiter(ctx.logger);
    this.serverName = natsServerName(ctx.brokerId);
    this.tokenBytes = auth.token === null ? null : Buffer.from(auth.token, 'utf8');
    this.jetstream = publisher !== undefined;
    this.jsDomainApi = publisher?.domain ? `$JS/${publisher.domain}/API/` : null;
    this.payloads = new PayloadBudget(options.payloadReserveBytes);
    this.publisher = publisher ?? new EnginePublisher(ctx.engine, (err) => this.writeFailed(err));
  }

  /** Generated per start, as nats-server does. */
  get serverId(): string {
    return this.identity.serverId;
  }

  /** What INFO says (besides each connection's own fields): the port bound early (prebound.ts) predicts the same. */
  get infoSettings(): NatsInfoSettings {
    return { serverName: this.serverName, maxPayload: this.options.maxPayload, authRequired: this.authRequired, jetstream: this.jetstream };
  }

  /** The JetStream API answers on this broker (it checks its own requests: see NatsConnection.mayPublish). */
  get hasJetStream(): boolean {
    return this.jetstream;
  }

  /** Whether a CONNECT must carry credentials: a token is configured, or anonymous NATS clients are not allowed. */
  get authRequired(): boolean {
    return this.token !== null || this.operators !== null || !this.access.anonymousAllowed('nats');
  }

  /**
   * Whether a new connection has credentials to check before it is served (users exist, a webhook, a token, or
   * anonymous clients are refused): read per connection, so users added live are checked from the next client on.
   */
  get credentialsChecked(): boolean {
    return this.authRequired || this.access.hasUsers;
  }

  /**
   * The Access of a message's origin, for JetStream API requests: a NATS connection of this broker (`nats:<id>`)
   * answers its Access, or `'gone'` when it has closed (its requests are refused: nobody can be asked); any other
   * origin (another protocol, which checked the publish on its topic, or the broker itself) answers null.
   */
  accessOf(origin: string | undefined): Access | 'gone' | null {
    if (origin === undefined || !origin.startsWith('nats:')) return null;
    const id = Number(origin.slice(5));
    if (!Number.isSafeInteger(id)) return null;
    const c = this.byClientId.get(id);
    return c?.access ?? 'gone';
  }

  /** The INFO object for a new connection (the listener sends it itself on the TLS upgrade path). */
  info(meta: NatsConnectionMeta, tls: NatsListenerTls): Record<string, unknown> {
    return natsInfo(this.identity, this.infoSettings, meta, tls);
  }

  /**
   * Starts one client connection on the stream; the adapter owns it from here (closes it, logs, counts it). The
   * connection is returned for the listener to track (its `closed`), refused or not.
   */
  handle(stream: Duplex, meta: NatsConnectionMeta, tls: NatsListenerTls): NatsConnection {
    meta.clientId ??= ++this.identity.lastClientId;
    this.stats.connectionsTotal++;
    const c = new NatsConnection(stream, this, meta, tls);
    if (!this.accepting()) {
      this.stats.connectionsRefused++;
      this.logLimit.log(
        'warn',
        logKey('nats connection refused', meta.remoteAddress),
        { remote: meta.remoteAddress, max: this.options.maxConnections },
        'nats connection refused: nats-max-connections reached',
      );
      c.refuse(NatsErr.MAX_CONNECTIONS);
      return c;
    }
    this.conns.add(c);
    this.byClientId.set(c.clientId, c);
    if (this.timer === null) {
      this.timer = setInterval(() => this.sweep(), this.sweepMs());
      this.timer.unref();
    }
    c.start();
    return c;
  }

  /** The sweep period: a fraction of the shortest deadline it watches, within 10 ms .. 1 s. */
  private sweepMs(): number {
    const o = this.options;
    const shortest = Math.min(o.authTimeoutMs || 1000, o.pingIntervalMs || 1000, o.opTimeoutMs || 1000, o.writeDeadlineMs || 1000);
    return Math.max(10, Math.min(1000, Math.floor(shortest / 4)));
  }

  private sweep(): void {
    const now = Date.now();
    for (const c of this.conns) c.sweep(now);
  }

  /** A connection is gone (its teardown says so). */
  left(c: NatsConnection): void {
    this.conns.delete(c);
    if (this.byClientId.get(c.clientId) === c) this.byClientId.delete(c.clientId);
    if (this.conns.size === 0 && this.timer !== null) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }

  /** The open client connections (the monitoring port lists them). */
  openConnections(): IterableIterator<NatsConnection> {
    return this.conns.values();
  }

  /** An open connection by its client id (cid), or undefined. */
  connection(cid: number): NatsConnection | undefined {
    return this.byClientId.get(cid);
  }

  /** Open client connections. */
  connections(): number {
    return this.conns.size;
  }

  /** True while another connection may be accepted (maxConnections; 0: no limit). */
  accepting(): boolean {
    const max = this.options.maxConnections;
    return max === 0 || this.conns.size < max;
  }

  /**
   * Checks a CONNECT's credentials through the control plane. An auth_token is an API token (`fmq_...`: the token's
   * user) or the configured --nats-token (the anonymous principal); user/pass go to `access.password` (the guard,
   * which slows repeated failures per address and user, then the webhook for users the directory does not know);
   * without credentials the client is anonymous, if anonymous NATS clients are allowed. While no user exists at all
   * (and no webhook), a user/pass is let in under that name, as MQTT and AMQP do on a zero-setup broker.
   */
  authenticate(o: ConnectOptions, meta: NatsConnectionMeta): NatsAuthOutcome | Promise<NatsAuthOutcome> {
    const a = this.access;
    const { remoteAddress, tlsSocket } = meta;
    // A user JWT (operator mode) or an NKey: the client signed the nonce INFO sent it (auth-nkey.ts).
    if ((o.jwt !== undefined && o.jwt !== '') || (o.nkey !== undefined && o.nkey !== '')) return nkeyLogin(this, o, meta);
    // A verified client certificate logs in as the user it names, unless the client sent credentials (they win).
    const credentials = (o.auth_token !== undefined && o.auth_token !== '') || (o.user !== undefined && o.user !== '');
    if (!credentials && tlsSocket !== undefined && this.certUser !== null) {
      const c = certificateLogin(a, tlsSocket, this.certUser);
      if (c !== null) return c.verdict === 'ok' ? { ok: true, principal: c.principal } : this.refused();
    }
    if (o.auth_token !== undefined && o.auth_token !== '') {
      // An API token, or an OIDC JWT (access.token verifies either).
      if (o.auth_token.startsWith(TOKEN_PREFIX) || (a.oidc !== null && looksLikeJwt(o.auth_token)))
        return this.outcome(a.token(o.auth_token, remoteAddress, 'nats'));
      if (this.tokenBytes !== null) return this.checkToken(o.auth_token, remoteAddress);
    }
    if (o.user !== undefined && o.user !== '') {
      if (!a.hasUsers) return this.authRequired ? this.refused() : { ok: true, principal: a.principal(o.user) };
      return this.outcome(a.password(o.user, o.pass ?? null, remoteAddress, 'nats'));
    }
    // No credentials at all (a password alone counts as one): the no_auth_user, when it is a directory user.
    if (this.noAuthUser !== null && (o.pass === undefined || o.pass === '') && !credentials) {
      return a.directory.lookup(this.noAuthUser) === undefined ? this.refused() : { ok: true, principal: a.principal(this.noAuthUser) };
    }
    if (this.authRequired) return this.refused();
    return { ok: true, principal: ANONYMOUS };
  }

  private async outcome(p: Promise<AuthOutcome>): Promise<NatsAuthOutcome> {
    const v = await p;
    if (v.verdict === 'ok') return { ok: true, principal: v.principal };
    if (v.verdict === 'bad') this.stats.authFailures++;
    return { ok: false, busy: v.verdict === 'busy' };
  }

  private refused(): NatsAuthOutcome {
    this.stats.authFailures++;
    return { ok: false, busy: false };
  }

  /** The shared --nats-token, compared in constant time, failures throttled by the guard like passwords. */
  private async checkToken(given: string, remoteAddress: string): Promise<NatsAuthOutcome> {
    const user = '$nats-token';
    const guard = this.access.guard;
    if (!(await guard.admit(user, remoteAddress, 'nats'))) return { ok: false, busy: true };
    const g = Buffer.from(given, 'utf8');
    const want = this.tokenBytes!;
    // Constant time over the configured token's length (timingSafeEqual needs equal lengths).
    let diff = g.length ^ want.length;
    for (let i = 0; i < want.length; i++) diff |= want[i]! ^ (g[i] ?? 0);
    if (diff === 0) {
      guard.succeeded(user, remoteAddress);
      return { ok: true, principal: ANONYMOUS };
    }
    this.stats.authFailures++;
    guard.failed(user, remoteAddress, 'nats');
    return { ok: false, busy: false };
  }

  /** A durable write of a publish failed (storage full, outage): logged, rate limited, and counted. */
  writeFailed(err: unknown): void {
    this.stats.writeFailures++;
    this.logLimit.log('warn', 'nats publish write failed', { err: err instanceof Error ? err.message : String(err) }, 'nats: a publish could not be stored');
  }

  /** The protocol's figures for /api/v1/broker. */
  figures(): Record<string, unknown> {
    let subscriptions = 0;
    for (const c of this.conns) subscriptions += c.subscriptionCount;
    return { connections: this.conns.size, subscriptions, ...this.stats, payloads: this.payloads.figures(), logLinesSuppressed: this.logLimit.suppressedTotal };
  }

  /** Broker shutdown: closes every connection; resolves when all are gone. */
  /** After a reload: every connection's subscriptions checked again (recheckSubscriptions); answers how many ended. */
  recheckSubscriptions(): number {
    let n = 0;
    for (const c of this.conns) n += c.recheckSubscriptions();
    return n;
  }

  async closeAll(): Promise<void> {
    const all = [...this.conns];
    await Promise.all(all.map((c) => c.close()));
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.logLimit.stop();
  }
}
