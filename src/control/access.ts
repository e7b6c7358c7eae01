/**
 * What a protocol adapter asks the control plane: who is this (authentication), may they do this (authorization),
 * how fast may they go (quotas), and who is connected (the client registry). One object, `AccessControl`, is handed
 * to every protocol module, so every protocol applies the same identities and the same policies.
 *
 * Per connection an adapter holds an `Access` (from `accessFor`): its `can(...)` answers from a small cache that
 * is dropped whenever the directory changes (a policy or a user's groups changed, here or on another broker), so a
 * policy changed live applies to open connections at their next request, and a steady stream of publishes costs a
 * Map lookup per message (nothing at all while no policy exists and the default allows: `open`).
 */
import type { Logger } from 'pino';
import { DEFAULT_NAMESPACE, type NamespaceNames } from '../core/index.js';
import { LogLimiter, logKey } from '../util/log-limit.js';
import type { Directory } from './directory.js';
import type { PasswordGuard } from './password-guard.js';
import { ANONYMOUS, GLOBAL_KINDS, guestIn, type Action, type PolicySet, type Principal, type ResourceKind, type SubscriptionVerdict } from './policy.js';
import { QuotaManager } from './quotas.js';
import { RuntimeSettings } from './settings.js';
import { ClientRegistry } from './clients.js';
import { looksLikeJwt } from './jwt-shape.js';
import type { OidcVerifier } from './oidc.js';

/**
 * What feeds streams and queues (the routing engine, set by the broker): reading one is judged by the topic filters
 * whose messages it holds, so a stream or queue bound to a denied topic does not launder it.
 */
export interface TopicSources {
  /** Moves whenever bindings change (verdicts that depend on them are taken again). */
  readonly sourcesVersion: number;
  topicFiltersFeeding(kind: 'stream' | 'queue', name: string): readonly string[];
}

export type AuthOutcome = { verdict: 'ok'; principal: Principal } | { verdict: 'bad' | 'busy' };

/** An external check of a clear-text password (the webhook authenticator): answers groups/namespace on success. */
export interface ExternalAuthenticator {
  check(
    username: string,
    password: Buffer | string,
    ctx: { remoteAddress?: string; protocol: string },
  ): Promise<{ verdict: 'ok'; groups?: string[]; namespace?: string } | { verdict: 'bad' | 'busy' }>;
  close?(): void;
  /** Its figures (requests, answers, cache hits), for the admin API and /metrics. */
  readonly stats?: Readonly<Record<string, number>>;
}

export interface AccessControlOptions {
  directory: Directory;
  guard: PasswordGuard;
  /** Protocols ("mqtt", "kafka", "amqp", "nats", "http") that let clients in without credentials. */
  anonymous: ReadonlySet<string>;
  external?: ExternalAuthenticator | null;
  logger?: Logger;
  /** Runtime settings (user quotas, broker configs); default: an empty in-memory set. */
  settings?: RuntimeSettings;
  /** OIDC: JWTs accepted wherever a password or a token is (src/control/oidc.ts); null: none. */
  oidc?: OidcVerifier | null;
}

const CACHE_LIMIT = 4096;

export class AccessControl {
  readonly directory: Directory;
  readonly guard: PasswordGuard;
  readonly quotas: QuotaManager;
  /** Runtime settings shared by every broker: client quotas, broker configs set at run time. */
  readonly settings: RuntimeSettings;
  readonly clients = new ClientRegistry();
  private readonly anonymous: ReadonlySet<string>;
  private readonly external: ExternalAuthenticator | null;
  /** The OIDC token verifier, when --oidc-issuer is set. */
  readonly oidc: OidcVerifier | null;
  private readonly denials: LogLimiter | null;
  /** Principals of users the webhook let in (not in the directory), by username. */
  private readonly externalPrincipals = new Map<string, Principal>();
  /** Figures for /metrics and the admin API: checks decided by policies (not those skipped while `open`). */
  readonly stats = { allowed: 0, denied: 0 };
  /** What feeds streams and queues; null until the broker sets it (then only the policies decide). */
  sources: TopicSources | null = null;

  constructor(opts: AccessControlOptions) {
    this.directory = opts.directory;
    this.guard = opts.guard;
    this.anonymous = opts.anonymous;
    this.external = opts.external ?? null;
    this.oidc = opts.oidc ?? null;
    this.settings = opts.settings ?? new RuntimeSettings();
    this.quotas = new QuotaManager(opts.directory, Date.now, this.settings);
    this.denials = opts.logger ? new LogLimiter(opts.logger) : null;
  }

  /** The external authenticator's figures (the webhook's requests, answers, cache hits); null without one. */
  get externalStats(): Readonly<Record<string, number>> | null {
    return this.external?.stats ?? null;
  }

  /** Whether `protocol` lets clients in without credentials. */
  anonymousAllowed(protocol: string): boolean {
    return this.anonymous.has(protocol);
  }

  /** True when some protocol needs credentials, or users exist: adapters then offer/require authentication. */
  get hasUsers(): boolean {
    return this.directory.size > 0 || this.external !== null || this.oidc !== null;
  }

  /**
   * Checks a clear-text password (MQTT CONNECT, SASL PLAIN, AMQP PLAIN, NATS user/pass, HTTP Basic): the guard
   * first (throttled, scrypt on its worker); a username the directory does not know goes to the external
   * authenticator when one is configured.
   */
  async password(username: string, password: Buffer | string | null, remoteAddress: string | undefined, protocol: string): Promise<AuthOutcome> {
    // A JWT as the password (MQTT, AMQP PLAIN, NATS user/pass, Kafka PLAIN, HTTP Basic): the token alone says who the
    // client is; the username sent beside it is not looked at (clients must send one, any will do).
    if (this.oidc !== null && password !== null && looksLikeJwt(password)) {
      return this.bearer(typeof password === 'string' ? password : password.toString('latin1'), remoteAddress, protocol);
    }
    if (this.external !== null && this.directory.lookup(username) === undefined && password !== null && password.length > 0) {
      if (!(await this.guard.admit(username, remoteAddress, protocol))) return { verdict: 'busy' };
      const r = await this.external.check(username, password, { remoteAddress, protocol });
      if (r.verdict === 'ok') {
        this.guard.succeeded(username, remoteAddress);
        const p: Principal = { user: username, groups: r.groups ?? [], namespace: r.namespace ?? 'default' };
        this.externalPrincipals.set(username, p);
        return { verdict: 'ok', principal: p };
      }
      if (r.verdict === 'bad') this.guard.failed(username, remoteAddress, protocol);
      return { verdict: r.verdict };
    }
    const v = await this.guard.check(username, password, remoteAddress, protocol);
    return v === 'ok' ? { verdict: 'ok', principal: this.principal(username) } : { verdict: v };
  }

  /** Checks an API token (HTTP Bearer, NATS auth_token); failures are throttled like passwords. */
  async token(token: string, remoteAddress: string | undefined, protocol: string): Promise<AuthOutcome> {
    if (this.oidc !== null && looksLikeJwt(token)) return this.bearer(token, remoteAddress, protocol);
    if (!(await this.guard.admit('(token)', remoteAddress, protocol))) return { verdict: 'busy' };
    const t = this.directory.verifyToken(token);
    if (t === null) {
      this.guard.failed('(token)', remoteAddress, protocol);
      return { verdict: 'bad' };
    }
    this.guard.succeeded('(token)', remoteAddress);
    return { verdict: 'ok', principal: this.principal(t.user) };
  }

  /**
   * Checks an OIDC JWT (Kafka OAUTHBEARER, and what `password` and `token` recognise as one): throttled like a
   * password (failures slow the address down), refusals logged rate-limited with the reason and never the token.
   * The principal carries the token's claims and its expiry; a namespace the directory does not know is refused.
   */
  async bearer(token: string, remoteAddress: string | undefined, protocol: string): Promise<AuthOutcome> {
    const oidc = this.oidc;
    if (oidc === null) return { verdict: 'bad' };
    // Throttled under the user the token claims (unverified; "(jwt)" when it names none), like a password under its
    // username: failures slow down that user and the address, not every token user.
    const who = `(jwt)${oidc.claimedUser(token) ?? ''}`;
    if (!(await this.guard.admit(who, remoteAddress, protocol))) return { verdict: 'busy' };
    const v = await oidc.verify(token, (ns) => this.directory.namespace(ns) !== undefined);
    if (v.verdict === 'ok') {
      const id = v.identity;
      this.guard.succeeded(who, remoteAddress);
      return { verdict: 'ok', principal: { user: id.user, groups: id.groups, namespace: id.namespace, expiresAt: id.expiresAt } };
    }
    if (v.verdict === 'bad') this.guard.failed(who, remoteAddress, protocol);
    this.logTokenRefusal(protocol, remoteAddress, v.reason);
    return { verdict: v.verdict };
  }

  private logTokenRefusal(protocol: string, remote: string | undefined, reason: string, user?: string): void {
    this.denials?.log('info', logKey('token refused', remote), { protocol, remote, reason, user }, 'OIDC token refused');
  }

  /** The principal of a user authenticated by other means (SCRAM, a client certificate). */
  principal(username: string | null): Principal {
    if (username === null) return ANONYMOUS;
    if (this.directory.lookup(username) === undefined) {
      const ext = this.externalPrincipals.get(username);
      if (ext) return ext;
    }
    return this.directory.principal(username);
  }

  /**
   * The decision for one request, unlogged and uncached (Access.can is the cached, logged form). Reading a stream
   * or queue (`subscribe`) also needs that no deny policy of the principal reaches a topic filter feeding it
   * (TopicSources): "deny bob topic:secret/#" then holds for a stream or queue bound to `secret/#`, or to `#`, on
   * every protocol, while the data path stays free of per-message checks (the verdict is taken when a consumer,
   * fetch or subscription is set up, and again when policies or bindings change). Writing a stream (`publish`) is
   * judged the same way by the publish denies: a Kafka produce is delivered live on the stream's topic.
   */
  allows(p: Principal, action: Action, kind: ResourceKind, name: string, names: NamespaceNames | null = null): boolean {
    const set = p.own ?? this.directory.policies;
    if (!set.allows(p, action, kind, name)) return false;
    if (this.sources === null) return true;
    // Reading a stream or queue reads what its topics carried; writing a stream (a Kafka produce) publishes on its
    // topic and on the topics its bindings let a record claim: a deny on those topics holds for the stream as well.
    const judged = (action === 'subscribe' && (kind === 'stream' || kind === 'queue')) || (action === 'publish' && kind === 'stream');
    if (!judged) return true;
    // No deny of this principal names a topic (the usual case): nothing that feeds the destination can matter.
    if (!set.deniesTopics(p, action)) return true;
    // A namespaced connection (core namespaces.ts) names the stream or queue as its tenant sees it; the engine knows
    // it by its qualified name, and its feeding filters are judged as the tenant's policies name them (unqualified).
    if (names === null || names.isDefault) {
      for (const f of this.sources.topicFiltersFeeding(kind as 'stream' | 'queue', name)) if (set.deniesWithin(p, action, f)) return false;
      return true;
    }
    const internal = kind === 'stream' ? names.stream(name) : names.name(name);
    for (const f of this.sources.topicFiltersFeeding(kind as 'stream' | 'queue', internal)) {
      if (set.deniesWithin(p, action, names.ownTopic(f) ?? f)) return false;
    }
    return true;
  }

  /** Moves when a verdict of `allows` may change: policies, users, groups, or what feeds streams and queues. */
  get version(): number {
    const d = this.directory.version;
    const s = this.sources?.sourcesVersion ?? 0;
    if (d !== this.seenDirectory || s !== this.seenSources) {
      this.seenDirectory = d;
      this.seenSources = s;
      this.epoch++;
    }
    return this.epoch;
  }
  private seenDirectory = -1;
  private seenSources = -1;
  private epoch = 0;

  /** A connection's authorization handle. */
  accessFor(principal: Principal, protocol: string, remoteAddress?: string): Access {
    return new Access(this, principal, protocol, remoteAddress);
  }

  /**
   * As accessFor, for an adapter that isolates namespaces (core namespaces.ts): the connection names streams and
   * queues as its tenant sees them, and their feeding filters are judged unqualified.
   */
  namespacedAccessFor(principal: Principal, names: NamespaceNames, protocol: string, remoteAddress?: string): Access {
    const a = new Access(this, principal, protocol, remoteAddress);
    a.names = names;
    return a;
  }

  /** Logs a denial, rate-limited per address (a client can trigger it at will). */
  logDenial(a: Access, action: Action, kind: ResourceKind, name: string): void {
    this.stats.denied++;
    this.denials?.log(
      'info',
      logKey('access denied', a.remoteAddress),
      { protocol: a.protocol, user: a.principal.user, remote: a.remoteAddress, action, resource: `${kind}:${name}` },
      'access denied',
    );
  }

  close(): void {
    this.denials?.stop();
    this.external?.close?.();
  }
}

/** One connection's view of the policies: cached verdicts, dropped when the directory changes. */
export class Access {
  /**
   * can() verdicts by action, kind and name; made on the first verdict taken (an empty Map is ~220 bytes of heap,
   * held by every idle connection while no policy exists).
   */
  private cache: Map<string, boolean> | null = null;
  /** admits() verdicts by topic, made likewise. */
  private admitted: Map<string, boolean> | null = null;
  private version = -1;
  private directoryVersion = -1;
  private current: Principal;
  /** Set by namespacedAccessFor: the connection's namespace names (null: names are the core's own). */
  names: NamespaceNames | null = null;

  constructor(
    private readonly ac: AccessControl,
    principal: Principal,
    readonly protocol: string,
    readonly remoteAddress?: string,
  ) {
    this.current = principal;
  }

  /** The identity, re-read from the directory after a change (groups may have changed). */
  get principal(): Principal {
    this.sync();
    return this.current;
  }

  /** The policies that decide for this connection: its own (a NATS user JWT's), else the directory's. */
  private get set(): PolicySet {
    return this.current.own ?? this.ac.directory.policies;
  }

  /**
   * Nothing is ever denied right now (no policies, default allow): callers may skip per-message checks. Never for a
   * guest in another namespace (Principal.home), which has only what it was granted.
   */
  get open(): boolean {
    return this.set.open && this.current.home === undefined;
  }

  /**
   * `open` for a check of `kind`: never for the broker itself or a namespace asked by a tenant's connection, which
   * the default does not grant (PolicySet.allows).
   */
  private openFor(kind: ResourceKind): boolean {
    if (!this.open) return false;
    if (!(GLOBAL_KINDS as readonly string[]).includes(kind)) return true;
    this.sync();
    return this.current.namespace === DEFAULT_NAMESPACE;
  }

  /** May this connection do `action` on the resource? Denials are logged (rate-limited) and counted. */
  can(action: Action, kind: ResourceKind, name: string): boolean {
    if (this.openFor(kind)) return true;
    const v = this.verdict(action, kind, name);
    if (v) this.ac.stats.allowed++;
    else this.ac.logDenial(this, action, kind, name);
    return v;
  }

  /** `can` without logging or counting: a question the broker asks itself (NATS allow_responses), not a request. */
  permits(action: Action, kind: ResourceKind, name: string): boolean {
    return this.openFor(kind) || this.verdict(action, kind, name);
  }

  /**
   * Whether a deny policy refuses `action` on the resource (PolicySet.denies: what no allow names is not refused).
   * RabbitMQ topic permissions are checked so (kind `routing-key`). Refusals are logged and counted as denials.
   */
  refuses(action: Action, kind: ResourceKind, name: string): boolean {
    const set = this.set;
    if (this.open) return false;
    this.sync();
    // No deny names the kind (no topic permission at all, the usual case): nothing to look up per publish.
    if (this.current.removed !== true && !set.mayDeny(kind)) return false;
    const key = `!${action}\u0000${kind}\u0000${name}`;
    const cache = (this.cache ??= new Map<string, boolean>());
    let v = cache.get(key);
    if (v === undefined) {
      v = set.denies(this.current, action, kind, name);
      if (cache.size >= CACHE_LIMIT) cache.clear();
      cache.set(key, v);
    }
    if (v) this.ac.logDenial(this, action, kind, name);
    return v;
  }

  /** Whether any allow policy (or the default) gives this connection anything (PolicySet.grantsAny). */
  grantsAny(): boolean {
    const set = this.set;
    if (this.open) return true;
    this.sync();
    return set.grantsAny(this.current);
  }

  /** Whether a deny policy of this connection names the topic (what no allow reaches is not "denied" here). */
  deniesTopic(action: Action, topic: string): boolean {
    const set = this.set;
    if (this.open) return false;
    this.sync();
    return set.deniesWithin(this.current, action, topic);
  }

  private verdict(action: Action, kind: ResourceKind, name: string): boolean {
    this.sync();
    const key = `${action}\u0000${kind}\u0000${name}`;
    const cache = (this.cache ??= new Map<string, boolean>());
    let v = cache.get(key);
    if (v === undefined) {
      v = this.ac.allows(this.current, action, kind, name, this.names);
      if (cache.size >= CACHE_LIMIT) cache.clear();
      cache.set(key, v);
    }
    return v;
  }

  /**
   * May a delivery on `topic` reach this connection (a filtered subscription)? Not logged: it is not a request.
   * Called for every delivery on every live subscription, so its verdicts are kept apart, keyed by the message's own
   * topic string (whose hash is computed once for all the subscribers it fans out to): several times cheaper than a
   * key built per check (measured by the MQTT part: 1000 sessions, 10M deliveries, 26-29 s → 9-12 s).
   */
  admits(topic: string): boolean {
    const set = this.set;
    if (this.open) return true;
    this.sync();
    const admitted = (this.admitted ??= new Map<string, boolean>());
    let v = admitted.get(topic);
    if (v === undefined) {
      v = set.allows(this.current, 'subscribe', 'topic', topic);
      if (admitted.size >= CACHE_LIMIT) admitted.clear();
      admitted.set(topic, v);
    }
    return v;
  }

  /**
   * May this connection bind the topic filter to a stream or queue (a stream's bindings, a JetStream stream's
   * subjects, an amq.topic binding)? Only when it may subscribe to every topic the filter matches: a binding is a
   * standing subscription whose readers nobody filters. Denials are logged.
   */
  mayBind(filter: string): boolean {
    const set = this.set;
    if (this.open) return true;
    this.sync();
    const v = set.subscription(this.current, filter);
    if (v === 'allow') return true;
    this.ac.logDenial(this, 'subscribe', 'topic', filter);
    return false;
  }

  /**
   * The weaker form of mayBind for a binding nobody chose: a Kafka topic binds its own name's topic. Refused only
   * when a subscribe deny of this connection reaches into the filter (Kafka-style policies that allow `stream:`
   * names and say nothing of topics keep creating topics). Denials are logged.
   */
  mayCapture(filter: string): boolean {
    const set = this.set;
    if (this.open) return true;
    this.sync();
    if (!set.deniesWithin(this.current, 'subscribe', filter)) return true;
    this.ac.logDenial(this, 'subscribe', 'topic', filter);
    return false;
  }

  /** The verdict for a live subscription to a unified MQTT-syntax filter (see PolicySet.subscription). */
  subscription(filter: string): SubscriptionVerdict {
    const set = this.set;
    if (this.open) return 'allow';
    this.sync();
    const v = set.subscription(this.current, filter);
    if (v === 'deny') this.ac.logDenial(this, 'subscribe', 'topic', filter);
    return v;
  }

  private sync(): void {
    const v = this.ac.version;
    if (this.version === v) return;
    this.version = v;
    this.cache?.clear();
    // Topic verdicts depend on the directory only, not on bindings (which move with every exclusive queue declared).
    const d = this.ac.directory.version;
    if (this.directoryVersion === d) return;
    this.directoryVersion = d;
    this.admitted?.clear();
    // An identity with its own policies (a NATS user JWT), or an OIDC token's, is no directory user: it stays as it
    // logged in.
    // A guest in another namespace stays one (the directory knows the user in its own namespace).
    if (this.current.user !== null && this.current.own === undefined && this.current.expiresAt === undefined) {
      const fresh = this.ac.principal(this.current.user);
      this.current = this.current.home === undefined ? fresh : guestIn(fresh, this.current.namespace);
    }
  }
}
