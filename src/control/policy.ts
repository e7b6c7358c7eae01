/**
 * Authorization policies: who may do what to which resource, the same for every protocol.
 *
 * A policy has an effect (allow or deny), actions, resources and principals. A request is allowed when at least
 * one allow policy matches it and no deny policy does (deny wins). Members of the `admins` group are allowed
 * everything (Kafka's super users, RabbitMQ's administrator tag): they are how the first operator manages the rest.
 *
 * What no policy decides falls to the default: in mode `auto` (the default) everything is allowed while no policy
 * exists at all (zero setup, and the behaviour before policies existed) and denied once one does; `allow` and
 * `deny` fix it. This module is pure: no I/O, no protocol. The protocols map their requests onto it:
 *
 *   resource kind  names                                      actions checked
 *   topic          unified topic names (`a/b/c`); patterns    publish (MQTT, NATS, AMQP amq.topic publish),
 *                  are MQTT filters (`a/+/#`)                 subscribe (a live subscription's filter),
 *                                                             respond (NATS allow_responses: a request received on
 *                                                             the topic may be answered on its reply subject)
 *   stream         stream names (a Kafka topic, a JetStream   publish (produce), subscribe (fetch, consume), create,
 *                  stream)                                    delete, describe, alter
 *   queue          durable queue names                        publish (send to it), subscribe (consume), create, delete, ...
 *   exchange       AMQP exchange names                        publish, create, delete, describe, alter
 *   group          consumer group names (Kafka, JetStream     subscribe (join, commit), describe, delete, alter
 *                  durable consumers)
 *   transactional- Kafka transactional ids (a producer's      publish (InitProducerId, the transaction APIs,
 *   id             transactional.id)                          transactional produce), describe (Describe/ListTransactions)
 *   cluster        `*` (the broker itself)                    create (Kafka CreateTopics' cluster check), describe,
 *                                                             alter, admin (users, policies, namespaces, tokens)
 *   namespace      namespace names                            admin: administer that namespace only (its users,
 *                                                             policies, streams, queues... in the admin API)
 *   routing-key    `<exchange>:<routing key>` of an AMQP      publish (basic.publish to the exchange), subscribe
 *                  topic exchange (RabbitMQ's topic           (queue.bind/unbind, exchange.bind/unbind from it)
 *                  permissions); checked for denials only:
 *                  an allow of this kind grants nothing
 *
 * Resource patterns are `kind:pattern`. For topics the pattern is an MQTT filter (exact topic, `+`, `#`). For the
 * other kinds it is an exact name, a prefix ending in `*` (`orders-*`), `*` (every name), or a regular expression
 * after `~` (`queue:~^orders\.(eu|us)$`). A regular expression is matched as RabbitMQ matches its permission regexes
 * (Erlang's re:run: a search, not anchored unless the expression says so; the empty expression matches only the
 * empty name, as RabbitMQ's `""` = `^$`); the default exchange (`""`) is matched by the name `amq.default`, as
 * RabbitMQ checks it. RabbitMQ user permissions become such policies (src/control/rabbitmq/permissions.ts).
 * `!~` negates a regular expression: `queue:!~^tmp\.` names every queue whose name it does not match.
 * A `routing-key` pattern is `routing-key:<exchange>:<key pattern>`: the exchange named exactly (`%` and `:` in it
 * written `%25` and `%3A`), the key pattern any of the forms above; in its regular expressions `{username}` stands
 * for the asking user's name and `{vhost}` for `/` (a guest's namespace, see guestIn), as RabbitMQ expands its topic permissions. RabbitMQ topic
 * permissions become deny policies of this kind (a write regex W: deny publish on `routing-key:<x>:!~W`).
 * `*:*` is everything.
 * Principals are `user:NAME`, `group:NAME` or `everyone` (every client, anonymous ones included).
 *
 * A policy may be scoped to a namespace (`namespace: "t1"`, what a namespace administrator writes): it applies only
 * to principals of that namespace, names their resources as they see them, and never reaches the kinds `cluster` and
 * `namespace` (it cannot name them, and its `*:*` stops short of them), so nothing written inside a namespace grants
 * or takes away anything outside it. In mode `auto` the default of a namespace's principals turns to deny once a
 * policy applies to that namespace (an unscoped one, or one scoped to it): a tenant's first policy does not lock out
 * the other tenants.
 *
 * A principal may act in a namespace not its own as a guest (Principal.home; an AMQP connection opening a vhost its
 * user was given permissions in): allow policies scoped to that namespace naming its user are all it has, and every
 * deny reaching it holds (appliesToGuest).
 */
import { DEFAULT_NAMESPACE, FlowError } from '../core/index.js';

export const ACTIONS = ['publish', 'subscribe', 'create', 'delete', 'describe', 'alter', 'admin', 'respond'] as const;
export type Action = (typeof ACTIONS)[number];

export const RESOURCE_KINDS = ['topic', 'stream', 'queue', 'exchange', 'group', 'transactional-id', 'cluster', 'routing-key', 'namespace'] as const;
export type ResourceKind = (typeof RESOURCE_KINDS)[number];

/** Kinds a policy scoped to a namespace never reaches: what lies outside every namespace, or names them. */
export const GLOBAL_KINDS: readonly ResourceKind[] = ['cluster', 'namespace'];

/** The group whose members every policy check allows. */
export const ADMIN_GROUP = 'admins';

export type DefaultPolicy = 'auto' | 'allow' | 'deny';

export interface PolicyDef {
  readonly name: string;
  readonly effect: 'allow' | 'deny';
  /** Actions, or `*` for all of them. */
  readonly actions: readonly string[];
  /** `kind:pattern` strings (see the module comment). */
  readonly resources: readonly string[];
  /** `user:NAME`, `group:NAME`, `everyone`. */
  readonly principals: readonly string[];
  readonly description?: string;
  /** The namespace it is scoped to (see the module comment); absent: every namespace, and the broker itself. */
  readonly namespace?: string;
  /** Where it came from: `api` (admin API / CLI), `kafka-acl` (CreateAcls), `file` (seed file). */
  readonly source?: string;
  readonly createdAt: number;
}

/** Who is asking: the identity a connection authenticated as. */
export interface Principal {
  /** null: anonymous. */
  readonly user: string | null;
  readonly groups: readonly string[];
  /** The namespace the identity belongs to ("default" unless said otherwise). */
  readonly namespace: string;
  /**
   * The user was deleted while connected: nothing is allowed any more (not even what `user:NAME` policies still
   * name), so an open connection of a deleted user loses its rights at its next request, before anyone kicks it.
   */
  readonly removed?: boolean;
  /**
   * The connection's own policies, in place of the directory's (a NATS user JWT's permissions, as nats-server takes
   * them from the JWT alone): the identity is not a directory user, and what it may do travels with it.
   */
  readonly own?: PolicySet;
  /**
   * A token identity (an OIDC JWT, src/control/oidc.ts): no directory user, its groups and namespace are the token's
   * claims, kept as they logged in; ms since the epoch at which the token (its session) expires.
   */
  readonly expiresAt?: number;
  /** NATS allow_responses limits of this identity (a user JWT's `resp`); absent: the broker's defaults. */
  readonly responses?: { readonly max: number; readonly ttlMs: number };
  /**
   * Set when the identity acts as a guest in `namespace`, a namespace not its own (an AMQP virtual host it was
   * granted, RabbitMQ's per-vhost permissions): its own namespace. A guest is allowed only what allow policies scoped
   * to `namespace` grant its user by name (never `everyone` or a group, never the default), and every deny that
   * applies to it holds: unscoped ones and those scoped to `namespace` (see guestIn).
   */
  readonly home?: string;
}

/**
 * Policy sources that belong to one virtual host (RabbitMQ permissions and topic permissions). Those written for a
 * user's own vhost are unscoped (they were before vhosts had permissions), so they do not follow the user as a guest.
 */
export const PERMISSION_SOURCE = 'rabbitmq-permission';
export const TOPIC_PERMISSION_SOURCE = 'rabbitmq-topic-permission';
const VHOST_SOURCES: ReadonlySet<string> = new Set([PERMISSION_SOURCE, TOPIC_PERMISSION_SOURCE]);

/** `p` acting in namespace `ns` (a granted AMQP vhost): a guest there unless `ns` is its own. */
export function guestIn(p: Principal, ns: string): Principal {
  const home = p.home ?? p.namespace;
  if (ns === home) return p.home === undefined ? p : { ...p, namespace: home, home: undefined };
  return { ...p, namespace: ns, home };
}

export const ANONYMOUS: Principal = Object.freeze({ user: null, groups: Object.freeze([]) as readonly string[], namespace: 'default' });

/** A subscription request's verdict: allowed, refused, or allowed with each delivered topic checked. */
export type SubscriptionVerdict = 'allow' | 'deny' | 'filter';

// ------------------------------------------------------------------------------------------------ parsing

interface ResourcePattern {
  kind: ResourceKind | '*';
  /** Topics: the filter's levels. */
  levels?: string[];
  /** Other kinds: exact name, or prefix (when `prefix`), or any (`any`), or a regular expression (`regex`). */
  name: string;
  prefix: boolean;
  any: boolean;
  regex?: RegExp;
  /** `!~`: the name matches when the regular expression does not. */
  negate?: boolean;
  /** routing-key: the exchange part (escaped as written). */
  exchange?: string;
  /** routing-key: a regular expression with `{username}` / `{vhost}` in it, compiled per user (`regex` unset). */
  template?: string;
  perUser?: Map<string, RegExp>;
}

/** An exchange name as a `routing-key` resource writes it (`%` and `:` escaped). */
export function escapeExchange(exchange: string): string {
  return exchange.replace(/%/g, '%25').replace(/:/g, '%3A');
}

/** The name a routing-key check is asked about: `<escaped exchange>:<routing key>`. */
export function routingKeyName(exchange: string, key: string): string {
  return `${escapeExchange(exchange)}:${key}`;
}

/** RabbitMQ's topic-permission variables (rabbit_auth_backend_internal expands them before matching). */
const TOPIC_VARIABLES = /\{(username|vhost)\}/;

function expandTemplate(r: ResourcePattern, p: Principal): RegExp {
  const u = p.user ?? '';
  // `{vhost}`: `/` in the user's own namespace (what its clients open), the namespace's name where it is a guest.
  const vhost = p.home === undefined || p.namespace === DEFAULT_NAMESPACE ? '/' : p.namespace;
  const key = vhost === '/' ? u : `${u}\u0000${vhost}`;
  const cache = (r.perUser ??= new Map<string, RegExp>());
  let re = cache.get(key);
  if (re === undefined) {
    const source = r.template!.replace(/\{username\}/g, () => u).replace(/\{vhost\}/g, () => vhost);
    try {
      re = new RegExp(source === '' ? '^$' : source);
    } catch {
      // A user name that makes the expression invalid: nothing matches (a negated pattern then matches everything).
      re = /(?!)/;
    }
    if (cache.size >= 1024) cache.clear();
    cache.set(key, re);
  }
  return re;
}

/** Longest regular expression a policy may hold (they are an administrator's, but every check runs them). */
const MAX_REGEX = 1024;

interface CompiledPolicy {
  def: PolicyDef;
  allow: boolean;
  actions: Set<string> | null; // null: all
  resources: ResourcePattern[];
  everyone: boolean;
  users: Set<string>;
  groups: Set<string>;
  /** The namespace it is scoped to, or null. */
  namespace: string | null;
  /** A RabbitMQ permission or topic permission (VHOST_SOURCES). */
  perVhost: boolean;
}

/** Validates a policy definition, throwing INVALID_ARGUMENT naming the bad part; returns it normalised. */
export function validatePolicy(def: PolicyDef): PolicyDef {
  if (typeof def.name !== 'string' || !/^[A-Za-z0-9._:@-]{1,128}$/.test(def.name)) {
    throw new FlowError('INVALID_ARGUMENT', 'policy name must be 1-128 characters of letters, digits and . _ : @ -');
  }
  if (def.effect !== 'allow' && def.effect !== 'deny') throw new FlowError('INVALID_ARGUMENT', 'policy effect must be "allow" or "deny"');
  for (const [field, list] of [
    ['actions', def.actions],
    ['resources', def.resources],
    ['principals', def.principals],
  ] as const) {
    if (!Array.isArray(list) || list.length === 0 || !list.every((x) => typeof x === 'string')) {
      throw new FlowError('INVALID_ARGUMENT', `policy ${field} must be a non-empty list of strings`);
    }
  }
  for (const a of def.actions) {
    if (a !== '*' && !(ACTIONS as readonly string[]).includes(a)) {
      throw new FlowError('INVALID_ARGUMENT', `unknown action "${a}" (one of ${ACTIONS.join(', ')} or *)`);
    }
  }
  for (const r of def.resources) parseResource(r);
  for (const p of def.principals) parsePrincipal(p);
  if (def.namespace !== undefined) {
    if (typeof def.namespace !== 'string' || !/^[A-Za-z0-9._@-]{1,64}$/.test(def.namespace)) {
      throw new FlowError('INVALID_ARGUMENT', 'policy namespace must be a namespace name');
    }
    for (const r of def.resources) {
      const kind = r.slice(0, r.indexOf(':'));
      if ((GLOBAL_KINDS as readonly string[]).includes(kind)) {
        throw new FlowError('INVALID_ARGUMENT', `resource "${r}": a policy scoped to a namespace cannot name the kinds ${GLOBAL_KINDS.join(' and ')}`);
      }
    }
  }
  return def;
}

function parseResource(text: string): ResourcePattern {
  const colon = text.indexOf(':');
  if (colon <= 0) throw new FlowError('INVALID_ARGUMENT', `resource "${text}" must be kind:pattern (kinds: ${RESOURCE_KINDS.join(', ')}, or *)`);
  const kind = text.slice(0, colon);
  const pattern = text.slice(colon + 1);
  if (kind !== '*' && !(RESOURCE_KINDS as readonly string[]).includes(kind)) {
    throw new FlowError('INVALID_ARGUMENT', `resource "${text}": unknown kind "${kind}" (one of ${RESOURCE_KINDS.join(', ')}, or *)`);
  }
  if (pattern === '') throw new FlowError('INVALID_ARGUMENT', `resource "${text}": empty pattern`);
  if (kind === '*' && pattern !== '*') throw new FlowError('INVALID_ARGUMENT', `resource "${text}": kind * takes only the pattern * (everything)`);
  if (kind === 'routing-key') {
    const sep = pattern.indexOf(':');
    if (sep < 0) {
      if (pattern !== '*') throw new FlowError('INVALID_ARGUMENT', `resource "${text}": a routing-key pattern is <exchange>:<key pattern> (or *)`);
      return { kind, name: pattern, prefix: false, any: true };
    }
    const exchange = pattern.slice(0, sep);
    const key = pattern.slice(sep + 1);
    if (key === '') throw new FlowError('INVALID_ARGUMENT', `resource "${text}": empty routing-key pattern`);
    const r = parseNamePattern(kind, key, text);
    r.exchange = exchange;
    const source = r.regex !== undefined ? key.slice(key.indexOf('~') + 1) : null;
    if (source !== null && TOPIC_VARIABLES.test(source)) {
      r.template = source;
      r.regex = undefined;
    }
    return r;
  }
  return parseNamePattern(kind as ResourceKind | '*', pattern, text);
}

function parseNamePattern(kind: ResourceKind | '*', pattern: string, text: string): ResourcePattern {
  if (kind === 'topic') {
    const levels = pattern.split('/');
    levels.forEach((l, i) => {
      if ((l.includes('#') && (l !== '#' || i !== levels.length - 1)) || (l.includes('+') && l !== '+')) {
        throw new FlowError('INVALID_ARGUMENT', `resource "${text}": a topic pattern is an MQTT filter ("+" a whole level, "#" the last)`);
      }
    });
    return { kind, levels, name: pattern, prefix: false, any: pattern === '#' };
  }
  const negate = pattern.startsWith('!~');
  if (negate) pattern = pattern.slice(1);
  if (pattern.startsWith('~')) {
    const source = pattern.slice(1);
    if (source.length > MAX_REGEX)
      throw new FlowError('INVALID_ARGUMENT', `resource "${kind}:~...": a regular expression holds at most ${MAX_REGEX} characters`);
    let regex: RegExp;
    try {
      // RabbitMQ's "" means ^$ (nothing but the empty name); JavaScript's empty expression would match everything.
      regex = new RegExp(source === '' ? '^$' : source);
    } catch (e) {
      throw new FlowError('INVALID_ARGUMENT', `resource "${text}": invalid regular expression: ${(e as Error).message}`);
    }
    return { kind: kind as ResourceKind | '*', name: pattern, prefix: false, any: false, regex, ...(negate ? { negate } : {}) };
  }
  const star = pattern.indexOf('*');
  if (star >= 0 && star !== pattern.length - 1) throw new FlowError('INVALID_ARGUMENT', `resource "${text}": "*" may only end a pattern (a prefix)`);
  return {
    kind: kind as ResourceKind | '*',
    name: star >= 0 ? pattern.slice(0, -1) : pattern,
    prefix: star >= 0 && pattern !== '*',
    any: pattern === '*',
  };
}

function parsePrincipal(text: string): { everyone: true } | { user: string } | { group: string } {
  if (text === 'everyone' || text === '*') return { everyone: true };
  const m = /^(user|group):(.+)$/.exec(text);
  if (!m) throw new FlowError('INVALID_ARGUMENT', `principal "${text}" must be user:NAME, group:NAME or everyone`);
  return m[1] === 'user' ? { user: m[2] } : { group: m[2] };
}

function compile(def: PolicyDef): CompiledPolicy {
  const c: CompiledPolicy = {
    def,
    allow: def.effect === 'allow',
    actions: def.actions.includes('*') ? null : new Set(def.actions),
    resources: def.resources.map(parseResource),
    everyone: false,
    users: new Set(),
    groups: new Set(),
    namespace: def.namespace ?? null,
    perVhost: def.source !== undefined && VHOST_SOURCES.has(def.source),
  };
  for (const p of def.principals) {
    const x = parsePrincipal(p);
    if ('everyone' in x) c.everyone = true;
    else if ('user' in x) c.users.add(x.user);
    else c.groups.add(x.group);
  }
  return c;
}

// ------------------------------------------------------------------------------------------------ topic filters

/** Does the filter (levels) match the topic (levels)? MQTT rules, with `$` topics outside first-level wildcards. */
function filterMatches(f: readonly string[], t: readonly string[]): boolean {
  if (t.length > 0 && t[0].startsWith('$') && (f[0] === '+' || f[0] === '#')) return false;
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '#') return true;
    if (i >= t.length) return false;
    if (f[i] !== '+' && f[i] !== t[i]) return false;
  }
  return f.length === t.length;
}

/** Does every topic the filter `s` matches also match the pattern `p`? */
export function filterCovers(p: readonly string[], s: readonly string[]): boolean {
  // A pattern whose first level is a wildcard does not cover `$` topics; a subscription starting with `$` or a
  // literal covers only what its first level says.
  if ((p[0] === '+' || p[0] === '#') && s[0] !== undefined && s[0].startsWith('$')) return false;
  for (let i = 0; i < p.length; i++) {
    if (p[i] === '#') return true;
    if (i >= s.length) return false;
    if (s[i] === '#') return false; // s reaches deeper than p allows
    if (p[i] === '+') continue;
    if (s[i] === '+' || s[i] !== p[i]) return false;
  }
  return p.length === s.length;
}

/** Is there a topic both filters match? */
export function filtersIntersect(a: readonly string[], b: readonly string[]): boolean {
  const dollarA = a[0] !== undefined && a[0].startsWith('$');
  const dollarB = b[0] !== undefined && b[0].startsWith('$');
  if ((dollarA && (b[0] === '+' || b[0] === '#')) || (dollarB && (a[0] === '+' || a[0] === '#'))) return false;
  for (let i = 0; ; i++) {
    const x = a[i];
    const y = b[i];
    if (x === '#' || y === '#') return true;
    if (x === undefined || y === undefined) return x === y;
    if (x !== '+' && y !== '+' && x !== y) return false;
  }
}

// ------------------------------------------------------------------------------------------------ evaluation

function nameMatches(r: ResourcePattern, kind: ResourceKind, name: string, p: Principal): boolean {
  if (r.exchange !== undefined) {
    // routing-key: `<escaped exchange>:<key>`; the exchange part exactly, then the key.
    const sep = name.indexOf(':');
    if (sep < 0 || name.slice(0, sep) !== r.exchange) return false;
    name = name.slice(sep + 1);
    if (r.template !== undefined) return expandTemplate(r, p).test(name) !== (r.negate === true);
  }
  if (r.any) return true;
  if (r.regex !== undefined) return r.regex.test(kind === 'exchange' && name === '' ? 'amq.default' : name) !== (r.negate === true);
  return r.prefix ? name.startsWith(r.name) : name === r.name;
}

/**
 * An immutable, compiled set of policies. A new set replaces the old one on every change (the directory bumps its
 * version); connections hold an Access (access.ts) that caches verdicts per version.
 */
export class PolicySet {
  private readonly compiled: CompiledPolicy[];
  readonly defaultAllow: boolean;
  /** The resource kinds deny policies name (`*` for `*:*`): denies() of another kind is false without a scan. */
  private readonly denyKinds = new Set<string>();
  /** Policies scoped to no namespace, and the namespaces some policy is scoped to (mode `auto`'s default). */
  private readonly unscoped: number;
  private readonly scopedTo = new Set<string>();

  constructor(
    defs: readonly PolicyDef[],
    readonly mode: DefaultPolicy = 'auto',
  ) {
    this.compiled = defs.map(compile);
    for (const c of this.compiled) if (!c.allow) for (const r of c.resources) this.denyKinds.add(r.kind);
    this.defaultAllow = mode === 'allow' || (mode === 'auto' && defs.length === 0);
    this.unscoped = this.compiled.filter((c) => c.namespace === null).length;
    // A RabbitMQ permission scoped to a namespace is a guest's grant (guestIn): it leaves the namespace's own principals
    // their default (granting ann a vhost takes nothing from that vhost's users).
    for (const c of this.compiled) if (c.namespace !== null && !c.perVhost) this.scopedTo.add(c.namespace);
  }

  /** What no policy decides for `p`: in mode `auto`, allow while no policy applies to p's namespace. */
  private defaultFor(p: Principal): boolean {
    if (p.home !== undefined) return false; // a guest has what it was granted, nothing by default
    if (this.mode !== 'auto') return this.defaultAllow;
    return this.unscoped === 0 && !this.scopedTo.has(p.namespace);
  }

  get size(): number {
    return this.compiled.length;
  }

  /** True when every request of every principal is allowed (no policies, default allow): checks can be skipped. */
  get open(): boolean {
    return this.compiled.length === 0 && this.defaultAllow;
  }

  private applies(c: CompiledPolicy, p: Principal, action: Action): boolean {
    if (c.actions !== null && !c.actions.has(action)) return false;
    if (p.home !== undefined) return this.appliesToGuest(c, p);
    if (c.namespace !== null && c.namespace !== p.namespace) return false;
    if (c.everyone) return true;
    if (p.user !== null && c.users.has(p.user)) return true;
    for (const g of p.groups) if (c.groups.has(g)) return true;
    return false;
  }

  /**
   * A guest (Principal.home) in namespace N: allows scoped to N that name its user; denies unscoped (but for the
   * permissions of its own vhost, which are unscoped) or scoped to N, naming its user, a group of it or everyone.
   */
  private appliesToGuest(c: CompiledPolicy, p: Principal): boolean {
    if (c.namespace === null ? c.allow || c.perVhost : c.namespace !== p.namespace) return false;
    if (p.user !== null && c.users.has(p.user)) return true;
    if (c.allow) return false;
    if (c.everyone) return true;
    for (const g of p.groups) if (c.groups.has(g)) return true;
    return false;
  }

  /**
   * Whether anything at all may be allowed to `p`: the default allows, or some allow policy names the principal (by
   * user, group or everyone), whatever its actions and resources. An AMQP connection.open is refused without it, as
   * RabbitMQ refuses a user with no permissions in the virtual host.
   */
  grantsAny(p: Principal): boolean {
    if (p.removed === true) return false;
    if (p.groups.includes(ADMIN_GROUP) || this.defaultFor(p)) return true;
    if (p.home !== undefined) return this.compiled.some((c) => c.allow && this.appliesToGuest(c, p));
    return this.compiled.some(
      (c) =>
        c.allow &&
        (c.namespace === null || c.namespace === p.namespace) &&
        (c.everyone || (p.user !== null && c.users.has(p.user)) || p.groups.some((g) => c.groups.has(g))),
    );
  }

  /** The decision for one request on one named resource (a topic name for kind topic). */
  allows(p: Principal, action: Action, kind: ResourceKind, name: string): boolean {
    if (p.removed === true) return false;
    if (p.groups.includes(ADMIN_GROUP)) return true;
    let allowed = false;
    let levels: string[] | undefined;
    const global = (GLOBAL_KINDS as readonly string[]).includes(kind);
    for (const c of this.compiled) {
      if (!this.applies(c, p, action)) continue;
      if (allowed && c.allow) continue;
      if (global && c.namespace !== null) continue;
      for (const r of c.resources) {
        if (r.kind !== '*' && r.kind !== kind) continue;
        let hit: boolean;
        if (r.kind === '*') hit = true;
        else if (kind === 'topic') hit = filterMatches(r.levels!, (levels ??= name.split('/')));
        else hit = nameMatches(r, kind, name, p);
        if (!hit) continue;
        if (!c.allow) return false; // deny wins
        allowed = true;
        break;
      }
    }
    // A matching deny returned above, so what is left is the allows or the default. The default never hands a
    // tenant (a principal of a namespace other than default) the broker itself or a namespace: in mode `auto` with
    // no policy yet, every tenant would otherwise administer the broker, list every tenant's users and ACLs and
    // change their credentials. An unscoped policy naming the principal grants those on purpose.
    if (allowed) return true;
    if (global && (p.namespace !== DEFAULT_NAMESPACE || p.home !== undefined)) return false;
    return this.defaultFor(p);
  }

  /**
   * Whether a deny policy for `action` that applies to `p` matches the resource (what no policy allows is not
   * "denied" here). `routing-key` resources are checked this way: RabbitMQ's topic permissions only narrow.
   */
  denies(p: Principal, action: Action, kind: ResourceKind, name: string): boolean {
    if (p.removed === true) return true;
    if (!this.mayDeny(kind)) return false;
    if (p.groups.includes(ADMIN_GROUP)) return false;
    const global = (GLOBAL_KINDS as readonly string[]).includes(kind);
    for (const c of this.compiled) {
      if (c.allow || !this.applies(c, p, action)) continue;
      if (global && c.namespace !== null) continue;
      for (const r of c.resources) {
        if (r.kind === '*') return true;
        if (r.kind === kind && kind !== 'topic' && nameMatches(r, kind, name, p)) return true;
      }
    }
    return false;
  }

  /** Whether some deny policy names the kind (or everything): else denies() of that kind is false for everyone. */
  mayDeny(kind: ResourceKind): boolean {
    return this.denyKinds.has(kind) || this.denyKinds.has('*');
  }

  /**
   * The verdict for a live subscription to a topic filter (unified, MQTT syntax). `allow`: every topic the filter
   * matches may be received. `deny`: none may. `filter`: some may: the subscription is granted and each delivered
   * topic is checked with `allows(p, 'subscribe', 'topic', topic)`, so a wildcard never reaches a denied topic.
   */
  subscription(p: Principal, filter: string): SubscriptionVerdict {
    if (p.removed === true) return 'deny';
    if (p.groups.includes(ADMIN_GROUP)) return 'allow';
    const s = filter.split('/');
    let covered = this.defaultFor(p);
    let partial = false;
    let denyPartial = false;
    for (const c of this.compiled) {
      if (!this.applies(c, p, 'subscribe')) continue;
      for (const r of c.resources) {
        if (r.kind !== '*' && r.kind !== 'topic') continue;
        const levels = r.kind === '*' ? ['#'] : r.levels!;
        // `*:*` covers `$` topics too: it is "everything".
        const covers = r.kind === '*' || filterCovers(levels, s);
        const meets = covers || filtersIntersect(levels, s);
        if (!meets) continue;
        if (!c.allow) {
          if (covers) return 'deny';
          denyPartial = true;
        } else if (covers) covered = true;
        else partial = true;
      }
    }
    if (covered) return denyPartial ? 'filter' : 'allow';
    return partial ? 'filter' : 'deny';
  }

  /**
   * Whether a deny policy for `action` that applies to `p` reaches into the topic filter: it names a topic some topic
   * of the filter matches (or everything, `*:*`). What feeds a stream or queue is judged by this: data captured from
   * a denied topic is not readable through the stream or queue either (a prefix pattern of another kind never
   * denies a topic). What no policy allows is not "denied" here: the default decides the stream or queue itself.
   */
  /** Whether any deny policy for `action` that applies to `p` names topics (or everything): deniesWithin can be true. */
  deniesTopics(p: Principal, action: Action): boolean {
    if (p.removed === true) return true;
    if (p.groups.includes(ADMIN_GROUP)) return false;
    for (const c of this.compiled) {
      if (c.allow || !this.applies(c, p, action)) continue;
      if (c.resources.some((r) => r.kind === '*' || r.kind === 'topic')) return true;
    }
    return false;
  }

  deniesWithin(p: Principal, action: Action, filter: string): boolean {
    if (p.removed === true) return true;
    if (p.groups.includes(ADMIN_GROUP)) return false;
    const s = filter.split('/');
    for (const c of this.compiled) {
      if (c.allow || !this.applies(c, p, action)) continue;
      for (const r of c.resources) {
        if (r.kind === '*') return true;
        if (r.kind === 'topic' && filtersIntersect(r.levels!, s)) return true;
      }
    }
    return false;
  }

  /** The policies, as defined. */
  defs(): PolicyDef[] {
    return this.compiled.map((c) => c.def);
  }
}
