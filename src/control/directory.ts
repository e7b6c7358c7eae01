/**
 * The directory: users, groups, API tokens, policies and namespaces, as every broker sees them.
 *
 * The source of truth is the ControlStore (the metastore); this class holds a copy in memory so that the data path
 * never waits on the metastore: a login looks its user up synchronously, a policy check reads the compiled
 * PolicySet. Changes made here are written through to the store first and applied to the copy once durable; changes
 * made by another broker sharing the store are picked up by `refresh()` (polled, see startPolling; in cluster mode at
 * once on the other broker's `control` notify, see refreshNow and announce, with a slow poll as a safety net). Each applied
 * change bumps `version`, which connections' Access objects compare to drop cached verdicts, so a policy changed
 * live takes effect on open connections at their next request.
 *
 * Credentials are derived here and only derived credentials are stored (users.ts): SCRAM keys per mechanism and a
 * scrypt hash; never a password. API tokens are stored as their SHA-256 (a token is 32 random bytes: a fast hash
 * suffices, there is nothing to brute-force).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Logger } from 'pino';
import { compactLinks, FlowError, type ExportConfig, type ImportConfig, type NamespaceLinksConfig } from '../core/index.js';
import { SCRAM_MECHANISMS, type ScramMechanism } from '../config/sasl-mechanisms.js';
import { PERMISSION_SOURCE, PolicySet, TOPIC_PERMISSION_SOURCE, validatePolicy, type DefaultPolicy, type PolicyDef, type Principal } from './policy.js';
import type { ControlRecord, ControlStore } from '../storage/metastore/control-store.js';
import { checkRabbitHash, rabbitHashOf, type RabbitHash } from './rabbit-hash.js';
import { validateUserNkey } from './nkeys.js';
import {
  DEFAULT_SCRAM_ITERATIONS,
  DUMMY_PASSWORD_HASH,
  deriveScramCredential,
  type PasswordHash,
  type ScramCredential,
  type UserRecord,
  type UserStore,
} from './users.js';

export const DEFAULT_NAMESPACE = 'default';

/** Computes the scrypt hash of a clear-text password (the PasswordVerifier's worker, off libuv's pool). */
export type PasswordHasher = (password: string) => Promise<PasswordHash>;

export interface Quotas {
  /** Open connections of the namespace, all protocols together. */
  maxConnections?: number;
  /** Messages published per second (produce: records). */
  publishRate?: number;
  /** Bytes received per second (publish/produce payloads). */
  bytesInRate?: number;
  /** Bytes sent per second (deliveries, fetches). */
  bytesOutRate?: number;
  /** Bytes stored in the namespace's streams (JetStream: the account's max_storage, see docs/jetstream.md). */
  maxStorageBytes?: number;
  /** JetStream account limits (nats-server's, per NATS account = namespace): streams of the account. */
  maxStreams?: number;
  /** Consumers per stream (nats-server's account max_consumers applies per stream). */
  maxConsumers?: number;
  /** Bytes of the account's memory-storage streams (max_memory). */
  maxMemoryBytes?: number;
  /** A stream's max_bytes may not exceed this (memory_max_stream_bytes and storage_max_stream_bytes). */
  maxStreamBytes?: number;
  /** A consumer's max_ack_pending may not exceed this (and is its default when lower than nats-server's 1000). */
  maxAckPending?: number;
  /** 1: every stream must set max_bytes (max_bytes_required); 0: not. */
  maxBytesRequired?: number;
  /** 0: the NATS account has no JetStream (its API answers 10039), as a nats-server account without `jetstream`. */
  jetstream?: number;
}

/** The quota keys a namespace may carry. */
export const QUOTA_KEYS: ReadonlyArray<keyof Quotas> = [
  'maxConnections',
  'publishRate',
  'bytesInRate',
  'bytesOutRate',
  'maxStorageBytes',
  'maxStreams',
  'maxConsumers',
  'maxMemoryBytes',
  'maxStreamBytes',
  'maxAckPending',
  'maxBytesRequired',
  'jetstream',
];

/** With its NATS account exports and imports (src/core/links-config.ts); absent: none. */
export interface NamespaceDef extends NamespaceLinksConfig {
  readonly name: string;
  readonly description?: string;
  readonly quotas: Quotas;
  readonly createdAt: number;
}

/** A namespace's exports and imports as stored (only the non-empty ones). */
const linksDoc = (n: { name: string; exports?: unknown; imports?: unknown }) => compactLinks(n, `namespace ${n.name}`);

export interface GroupDef {
  readonly name: string;
  readonly description?: string;
  readonly createdAt: number;
}

export interface TokenInfo {
  /** The token's id (shown in lists, used to delete it); the secret is shown once, at creation. */
  readonly id: string;
  readonly user: string;
  readonly description?: string;
  readonly createdAt: number;
  /** ms since the epoch; null: does not expire. */
  readonly expiresAt: number | null;
}

/** What the directory keeps of a user (no secrets leave through it). */
export interface UserInfo {
  readonly username: string;
  readonly groups: readonly string[];
  readonly namespace: string;
  readonly mechanisms: readonly string[];
  readonly createdAt: number;
  /** Where the user came from: `api`, `file` (the users file seeded it), `webhook`. */
  readonly source: string;
  /** The user's public NKey (`U...`): a NATS client proving it holds the key logs in as this user. */
  readonly nkey?: string;
}

class DirectoryUser implements UserRecord {
  constructor(
    readonly info: UserInfo,
    private readonly creds: ReadonlyMap<ScramMechanism, ScramCredential>,
    readonly passwordHash: PasswordHash,
    readonly passwordSource: string,
    /** Its RabbitMQ password hash, when it came through the RabbitMQ management API (rabbit-hash.ts). */
    readonly rabbitHash?: RabbitHash,
    /** The RabbitMQ hash is all it has (imported with password_hash): logins are checked against it. */
    readonly rabbitOnly?: RabbitHash,
  ) {}
  get username(): string {
    return this.info.username;
  }
  scram(mechanism: ScramMechanism): ScramCredential | undefined {
    return this.creds.get(mechanism);
  }
}

interface StoredToken extends TokenInfo {
  readonly hash: Buffer;
}

/** The token format: a recognisable prefix, the id, and the secret (RFC 6750 bearer token characters). */
export const TOKEN_PREFIX = 'fmq_';

const NAME = /^[A-Za-z0-9._@-]{1,128}$/;

export function validateName(what: string, name: unknown): string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new FlowError('INVALID_ARGUMENT', `${what} name must be 1-128 characters of letters, digits and . _ @ -`);
  }
  return name;
}

/** Usernames may hold more (e-mail addresses, spaces), but no control characters and no ':' (HTTP Basic). */
export function validateUsername(name: unknown): string {
  // eslint-disable-next-line no-control-regex
  if (typeof name !== 'string' || name === '' || name.length > 256 || /[\u0000-\u001f\u007f:]/.test(name)) {
    throw new FlowError('INVALID_ARGUMENT', 'username must be 1-256 characters without control characters or ":"');
  }
  return name;
}

export function validatePassword(password: unknown): string {
  if (typeof password !== 'string' || password.length < 1 || password.length > 1024) {
    throw new FlowError('INVALID_ARGUMENT', 'password must be 1-1024 characters');
  }
  return password;
}

const b64 = (b: Buffer) => b.toString('base64');
const unb64 = (s: unknown) => Buffer.from(String(s ?? ''), 'base64');

export interface DirectoryOptions {
  store: ControlStore;
  defaultPolicy?: DefaultPolicy;
  hasher: PasswordHasher;
  logger?: Logger;
  scramIterations?: number;
  /** Clock (token expiry); tests pass their own. */
  now?: () => number;
}

export class Directory implements UserStore {
  private users = new Map<string, DirectoryUser>();
  /** Usernames by public NKey (NATS NKey logins name no user). */
  private nkeys = new Map<string, string>();
  private groupDefs = new Map<string, GroupDef>();
  private namespaceDefs = new Map<string, NamespaceDef>();
  private tokens = new Map<string, StoredToken>();
  private policySet: PolicySet;
  private storeVersion = -1;
  private readonly listeners = new Set<() => void>();
  private poller: NodeJS.Timeout | null = null;
  private refreshing: Promise<void> | null = null;
  /**
   * The reload under way: reloads run one after the other, so that a slow one that read the store before a change
   * cannot apply its older copy after the reload of that change (a refresh racing a local write).
   */
  private reloading: Promise<void> = Promise.resolve();
  /** Bumped on every change applied to this copy (local or picked up from the store). */
  version = 0;

  private constructor(private readonly opts: DirectoryOptions) {
    this.policySet = new PolicySet([], opts.defaultPolicy ?? 'auto');
  }

  static async open(opts: DirectoryOptions): Promise<Directory> {
    const d = new Directory(opts);
    await d.reload();
    return d;
  }

  get store(): ControlStore {
    return this.opts.store;
  }

  private now(): number {
    return (this.opts.now ?? Date.now)();
  }

  // -------------------------------------------------------------------------------------------- reading

  lookup(username: string): UserRecord | undefined {
    return this.users.get(username);
  }

  get size(): number {
    return this.users.size;
  }

  user(username: string): UserInfo | undefined {
    return this.users.get(username)?.info;
  }

  /** Users with a public NKey (NATS INFO then carries a nonce to sign). */
  get nkeyUsers(): number {
    return this.nkeys.size;
  }

  /** The user whose public NKey this is, or undefined. */
  userByNkey(nkey: string): string | undefined {
    return this.nkeys.get(nkey);
  }

  listUsers(): UserInfo[] {
    return [...this.users.values()].map((u) => u.info).sort((a, b) => cmp(a.username, b.username));
  }

  listGroups(): Array<GroupDef & { members: string[] }> {
    const members = new Map<string, string[]>();
    for (const u of this.users.values()) for (const g of u.info.groups) (members.get(g) ?? members.set(g, []).get(g)!).push(u.info.username);
    const names = new Set([...this.groupDefs.keys(), ...members.keys()]);
    return [...names].sort(cmp).map((name) => ({ ...(this.groupDefs.get(name) ?? { name, createdAt: 0 }), members: (members.get(name) ?? []).sort(cmp) }));
  }

  listNamespaces(): NamespaceDef[] {
    const all = new Map(this.namespaceDefs);
    if (!all.has(DEFAULT_NAMESPACE)) all.set(DEFAULT_NAMESPACE, { name: DEFAULT_NAMESPACE, quotas: {}, createdAt: 0 });
    return [...all.values()].sort((a, b) => cmp(a.name, b.name));
  }

  namespace(name: string): NamespaceDef | undefined {
    return this.namespaceDefs.get(name) ?? (name === DEFAULT_NAMESPACE ? { name, quotas: {}, createdAt: 0 } : undefined);
  }

  listTokens(user?: string): TokenInfo[] {
    return [...this.tokens.values()]
      .filter((t) => user === undefined || t.user === user)
      .map(tokenInfo)
      .sort((a, b) => cmp(a.id, b.id));
  }

  get policies(): PolicySet {
    return this.policySet;
  }

  /** The identity a connection authenticated as `username` acts as (`removed`, allowed nothing, if the user is gone). */
  principal(username: string | null): Principal {
    if (username === null) return { user: null, groups: [], namespace: DEFAULT_NAMESPACE };
    const u = this.users.get(username)?.info;
    if (u === undefined) return { user: username, groups: [], namespace: DEFAULT_NAMESPACE, removed: true };
    return { user: username, groups: u.groups, namespace: u.namespace };
  }

  /** The user a bearer token belongs to, or null (unknown, expired, or its user deleted). Constant-time compare. */
  verifyToken(token: string): { user: string; id: string } | null {
    if (!token.startsWith(TOKEN_PREFIX)) return null;
    const dot = token.indexOf('.', TOKEN_PREFIX.length);
    if (dot < 0) return null;
    const id = token.slice(TOKEN_PREFIX.length, dot);
    const t = this.tokens.get(id);
    const hash = createHash('sha256').update(token).digest();
    // A stored hash of another length (a damaged document) would make timingSafeEqual throw.
    if (!t || t.hash.length !== hash.length || !timingSafeEqual(hash, t.hash)) return null;
    if (t.expiresAt !== null && t.expiresAt <= this.now()) return null;
    if (!this.users.has(t.user)) return null;
    return { user: t.user, id };
  }

  /** Called after every applied change (local or from another broker). */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  // -------------------------------------------------------------------------------------------- writing

  /**
   * Adds a user with a password, a public NKey (NATS NKey login), or both. A user with an NKey and no password gets
   * a random one nobody knows (every user has the same credential documents; its password logins simply fail).
   */
  async addUser(u: { username: string; password?: string; nkey?: string; groups?: string[]; namespace?: string; source?: string }): Promise<UserInfo> {
    const username = validateUsername(u.username);
    if (u.password === undefined && u.nkey === undefined) throw new FlowError('INVALID_ARGUMENT', 'a user needs a password or an nkey');
    const nkey = u.nkey === undefined ? undefined : this.freeNkey(validateUserNkey(u.nkey), username);
    const password = u.password === undefined ? randomBytes(32).toString('base64url') : validatePassword(u.password);
    const groups = (u.groups ?? []).map((g) => validateName('group', g));
    const namespace = u.namespace === undefined ? DEFAULT_NAMESPACE : validateName('namespace', u.namespace);
    if (!this.namespace(namespace)) throw new FlowError('NOT_FOUND', `namespace "${namespace}" does not exist`);
    const data = await this.credentialDoc(password);
    const source = u.source ?? 'api';
    // passwordSource: who set the password last (see setPassword and the users file's refresh in seed.ts).
    const doc = { ...data, groups, namespace, createdAt: this.now(), source, passwordSource: source, ...(nkey === undefined ? {} : { nkey }) };
    if (!(await this.opts.store.putControlIfAbsent('user', username, doc))) throw new FlowError('ALREADY_EXISTS', `user "${username}" already exists`);
    await this.changed();
    return this.user(username)!;
  }

  /** Seeds a user unless one of that name exists (the users file): answers whether it was added. */
  async seedUser(u: { username: string; password?: string; nkey?: string; groups?: string[]; namespace?: string }): Promise<boolean> {
    if (this.users.has(u.username)) return false;
    try {
      await this.addUser({ ...u, source: 'file' });
      return true;
    } catch (e) {
      if ((e as FlowError).code === 'ALREADY_EXISTS') return false;
      throw e;
    }
  }

  /**
   * Replaces a user's password. `source` records who set it (`api` by default, `file` for the users file's
   * refresh): a password set through the API or the CLI is not overwritten by the users file at the next start.
   */
  /** Seeds a namespace unless one of that name exists (the users file): answers whether it was added. */
  async seedNamespace(n: { name: string; description?: string; quotas?: Quotas; exports?: ExportConfig[]; imports?: ImportConfig[] }): Promise<boolean> {
    const name = validateName('namespace', n.name);
    const links = linksDoc(n);
    const doc = { description: n.description ?? null, quotas: validateQuotas(n.quotas ?? {}), createdAt: this.now(), source: 'file', ...links };
    if (await this.seed('namespace', name, doc)) return true;
    // Exports and imports are the file's to say for a namespace the file made (an operator edits them there): set
    // again when they changed. A namespace made through the API keeps its own.
    const rec = await this.opts.store.getControl('namespace', name);
    if (rec === null || rec.data.source !== 'file') return false;
    const { exports: e, imports: i, ...kept } = rec.data;
    if (JSON.stringify([e ?? null, i ?? null]) === JSON.stringify([links.exports ?? null, links.imports ?? null])) return false;
    await this.opts.store.putControl('namespace', name, { ...kept, ...links });
    await this.changed();
    return false;
  }

  /** Seeds a group unless one of that name exists (the users file). */
  async seedGroup(g: { name: string; description?: string }): Promise<boolean> {
    const name = validateName('group', g.name);
    return this.seed('group', name, { description: g.description ?? null, createdAt: this.now(), source: 'file' });
  }

  /** Seeds a policy unless one of that name exists (the users file). */
  async seedPolicy(def: Omit<PolicyDef, 'createdAt'>): Promise<boolean> {
    const p = validatePolicy({ ...def, source: def.source ?? 'file', createdAt: this.now() });
    return this.seed('policy', p.name, { ...p });
  }

  private async seed(kind: 'namespace' | 'group' | 'policy', name: string, doc: Record<string, unknown>): Promise<boolean> {
    // Atomic in the store: two brokers starting with the same file create it once.
    if (!(await this.opts.store.putControlIfAbsent(kind, name, doc))) return false;
    await this.changed();
    return true;
  }

  async setPassword(username: string, password: string, opts: { source?: string } = {}): Promise<void> {
    const rec = await this.mustGet('user', username, 'user');
    const data = await this.credentialDoc(validatePassword(password));
    // A RabbitMQ hash of the old password would be stale: it goes (rabbitmq/users.ts sets a new one when it sets it).
    const { rabbitHash: _stale, ...kept } = rec.data;
    await this.opts.store.putControl('user', username, { ...kept, ...data, passwordSource: opts.source ?? 'api' });
    await this.changed();
  }

  /**
   * Sets or removes SCRAM credentials of an existing user (Kafka's AlterUserScramCredentials: the client derives the
   * salted password; only the derived keys are stored, users.ts). The other mechanisms and the clear-text password's
   * hash (PLAIN, MQTT, AMQP, NATS, HTTP) stay as they are: FlowMQ never sees the new password itself. NOT_FOUND for an
   * unknown user.
   */
  async setScram(username: string, changes: ReadonlyArray<{ mechanism: ScramMechanism; credential: ScramCredential | null }>): Promise<void> {
    const rec = await this.mustGet('user', username, 'user');
    const scram = { ...((rec.data.scram ?? {}) as Record<string, unknown>) };
    for (const c of changes) {
      if (c.credential === null) delete scram[c.mechanism];
      else
        scram[c.mechanism] = {
          salt: b64(c.credential.salt),
          iterations: c.credential.iterations,
          storedKey: b64(c.credential.storedKey),
          serverKey: b64(c.credential.serverKey),
        };
    }
    await this.opts.store.putControl('user', username, { ...rec.data, scram });
    await this.changed();
  }

  /** Sets (or with null removes) a user's public NKey; another user's key is refused. */
  async setNkey(username: string, nkey: string | null): Promise<void> {
    const rec = await this.mustGet('user', username, 'user');
    const next: Record<string, unknown> = { ...rec.data };
    if (nkey === null) delete next.nkey;
    else next.nkey = this.freeNkey(validateUserNkey(nkey), username);
    await this.opts.store.putControl('user', username, next);
    await this.changed();
  }

  /** The key, unless another user has it (one key names one user). */
  private freeNkey(nkey: string, username: string): string {
    const owner = this.nkeys.get(nkey);
    if (owner !== undefined && owner !== username) throw new FlowError('ALREADY_EXISTS', `user "${owner}" already has this nkey`);
    return nkey;
  }

  /** A user's SCRAM credentials by mechanism (iterations only: what Kafka's DescribeUserScramCredentials shows). */
  scramIterations(username: string): Array<{ mechanism: ScramMechanism; iterations: number }> {
    const u = this.users.get(username);
    if (!u) return [];
    const out: Array<{ mechanism: ScramMechanism; iterations: number }> = [];
    for (const m of SCRAM_MECHANISMS) {
      const c = u.scram(m);
      if (c) out.push({ mechanism: m, iterations: c.iterations });
    }
    return out;
  }

  /** Who set a user's password last (`api`, `file`), for the users file's refresh. */
  passwordSource(username: string): string | undefined {
    return this.users.get(username)?.passwordSource;
  }

  /** A user's RabbitMQ password hash (rabbit-hash.ts), if it has one. */
  rabbitHash(username: string): RabbitHash | undefined {
    return this.users.get(username)?.rabbitHash;
  }

  /**
   * Creates or replaces a user as RabbitMQ's `PUT /api/users/{name}` does (and a definitions import): with a clear
   * password (FlowMQ's credentials and a RabbitMQ hash of it), with a RabbitMQ hash only (logins checked against
   * it), or with neither (a new user then has no password login; an existing one keeps its password). Groups replace
   * the user's. Answers whether the user was created.
   */
  async putRabbitUser(u: { username: string; password?: string; hash?: RabbitHash; groups: string[] }): Promise<boolean> {
    const username = validateUsername(u.username);
    const groups = u.groups.map((g) => validateName('group', g));
    const rec = await this.opts.store.getControl('user', username);
    let cred: Record<string, unknown>;
    if (u.password !== undefined) {
      cred = { ...(await this.credentialDoc(validatePassword(u.password))), rabbitHash: rabbitHashOf(u.password), passwordSource: 'api' };
    } else if (u.hash !== undefined) {
      cred = { scram: {}, scrypt: null, rabbitHash: checkRabbitHash(u.hash), passwordSource: 'api' };
    } else if (rec === null) {
      cred = { scram: {}, scrypt: null, rabbitHash: { algorithm: 'rabbit_password_hashing_sha256', hash: '' }, passwordSource: 'api' };
    } else cred = {};
    if (rec === null) {
      const doc = { ...cred, groups, namespace: DEFAULT_NAMESPACE, createdAt: this.now(), source: 'rabbitmq' };
      if (await this.opts.store.putControlIfAbsent('user', username, doc)) {
        await this.changed();
        return true;
      }
      return this.putRabbitUser(u);
    }
    await this.opts.store.putControl('user', username, { ...rec.data, ...cred, groups });
    await this.changed();
    return false;
  }

  async updateUser(username: string, changes: { groups?: string[]; namespace?: string }): Promise<UserInfo> {
    const rec = await this.mustGet('user', username, 'user');
    const next = { ...rec.data };
    if (changes.groups !== undefined) next.groups = changes.groups.map((g) => validateName('group', g));
    if (changes.namespace !== undefined) {
      validateName('namespace', changes.namespace);
      if (!this.namespace(changes.namespace)) throw new FlowError('NOT_FOUND', `namespace "${changes.namespace}" does not exist`);
      next.namespace = changes.namespace;
    }
    await this.opts.store.putControl('user', username, next);
    await this.changed();
    return this.user(username)!;
  }

  async deleteUser(username: string): Promise<void> {
    if (!(await this.opts.store.deleteControl('user', username))) throw new FlowError('NOT_FOUND', `user "${username}" does not exist`);
    // The user's tokens as the store has them, not this copy: one made through another broker since the last
    // refresh would otherwise survive and be valid again for a new user of the same name.
    for (const t of await this.opts.store.listControl('token')) if (t.data.user === username) await this.opts.store.deleteControl('token', t.name);
    // Its RabbitMQ permissions and topic permissions (in every vhost) go with it, as in RabbitMQ (a new user of the same name does not inherit them).
    for (const p of this.policySet.defs()) {
      if ((p.source === PERMISSION_SOURCE || p.source === TOPIC_PERMISSION_SOURCE) && p.principals.length === 1 && p.principals[0] === `user:${username}`)
        await this.opts.store.deleteControl('policy', p.name);
    }
    await this.changed();
  }

  async putGroup(g: { name: string; description?: string }): Promise<GroupDef> {
    const name = validateName('group', g.name);
    const prev = this.groupDefs.get(name);
    await this.opts.store.putControl('group', name, { description: g.description ?? prev?.description ?? null, createdAt: prev?.createdAt ?? Date.now() });
    await this.changed();
    return this.groupDefs.get(name)!;
  }

  async deleteGroup(name: string): Promise<void> {
    const used = [...this.users.values()].filter((u) => u.info.groups.includes(name)).length;
    if (used > 0) throw new FlowError('INVALID_ARGUMENT', `group "${name}" still has ${used} member(s)`);
    if (!(await this.opts.store.deleteControl('group', name))) throw new FlowError('NOT_FOUND', `group "${name}" does not exist`);
    await this.changed();
  }

  async putPolicy(def: Omit<PolicyDef, 'createdAt'> & { createdAt?: number }): Promise<PolicyDef> {
    const p = validatePolicy({ ...def, createdAt: def.createdAt ?? Date.now() });
    await this.opts.store.putControl('policy', p.name, { ...p });
    await this.changed();
    return p;
  }

  async deletePolicy(name: string): Promise<void> {
    if (!(await this.opts.store.deleteControl('policy', name))) throw new FlowError('NOT_FOUND', `policy "${name}" does not exist`);
    await this.changed();
  }

  /** `exports` / `imports` given replace the namespace's (an empty list removes them); absent: kept. */
  async putNamespace(n: { name: string; description?: string; quotas?: Quotas; exports?: ExportConfig[]; imports?: ImportConfig[] }): Promise<NamespaceDef> {
    const name = validateName('namespace', n.name);
    const quotas = validateQuotas(n.quotas ?? {});
    const prev = this.namespaceDefs.get(name);
    const links = linksDoc({ name, exports: n.exports ?? prev?.exports, imports: n.imports ?? prev?.imports });
    await this.opts.store.putControl('namespace', name, {
      description: n.description ?? prev?.description ?? null,
      quotas,
      createdAt: prev?.createdAt ?? Date.now(),
      ...links,
    });
    await this.changed();
    return this.namespace(name)!;
  }

  async deleteNamespace(name: string): Promise<void> {
    if (name === DEFAULT_NAMESPACE) throw new FlowError('INVALID_ARGUMENT', 'the default namespace cannot be deleted');
    const used = [...this.users.values()].filter((u) => u.info.namespace === name).length;
    if (used > 0) throw new FlowError('INVALID_ARGUMENT', `namespace "${name}" still has ${used} user(s)`);
    const scoped = this.policies.defs().filter((p) => p.namespace === name).length;
    if (scoped > 0) throw new FlowError('INVALID_ARGUMENT', `namespace "${name}" still has ${scoped} policy(ies) scoped to it`);
    if (!(await this.opts.store.deleteControl('namespace', name))) throw new FlowError('NOT_FOUND', `namespace "${name}" does not exist`);
    await this.changed();
  }

  /** Creates an API token for a user; the secret is in the answer only. */
  async createToken(t: { user: string; description?: string; ttlMs?: number }): Promise<{ token: string; info: TokenInfo }> {
    if (!this.users.has(t.user)) throw new FlowError('NOT_FOUND', `user "${t.user}" does not exist`);
    if (t.ttlMs !== undefined && (typeof t.ttlMs !== 'number' || !Number.isSafeInteger(t.ttlMs) || t.ttlMs <= 0)) {
      throw new FlowError('INVALID_ARGUMENT', 'token ttl must be a positive whole number of milliseconds');
    }
    const id = randomBytes(6).toString('hex');
    const now = this.now();
    const token = `${TOKEN_PREFIX}${id}.${randomBytes(32).toString('base64url')}`;
    const doc = {
      user: t.user,
      description: t.description ?? null,
      createdAt: now,
      expiresAt: t.ttlMs === undefined ? null : now + t.ttlMs,
      hash: b64(createHash('sha256').update(token).digest()),
    };
    await this.opts.store.putControl('token', id, doc);
    await this.changed();
    return { token, info: tokenInfo(this.tokens.get(id)!) };
  }

  async deleteToken(id: string): Promise<void> {
    if (!(await this.opts.store.deleteControl('token', id))) throw new FlowError('NOT_FOUND', `token "${id}" does not exist`);
    await this.changed();
  }

  // -------------------------------------------------------------------------------------------- sync

  /**
   * Cluster mode: called once a change made through this broker is durable and applied here, so that the other
   * brokers refresh at once (the broker wires it to the `control` notify; see src/cluster/live.ts). Null elsewhere.
   */
  announce: (() => void) | null = null;
  private refreshAgain: Promise<void> | null = null;

  /** A local write: reload, then tell the other brokers (cluster mode). */
  private async changed(): Promise<void> {
    await this.reload();
    this.announce?.();
  }

  /**
   * Another broker announced a change: refresh now, and once more after a refresh already under way (it may have read
   * the store's version before the change was committed).
   */
  refreshNow(): Promise<void> {
    if (this.refreshing === null) return this.refresh();
    this.refreshAgain ??= this.refreshing
      .catch(() => undefined)
      .then(() => {
        this.refreshAgain = null;
        return this.refresh();
      });
    return this.refreshAgain;
  }

  /** Re-reads everything from the store when its version moved (another broker changed something). */
  refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        const v = await this.opts.store.controlVersion();
        if (v !== this.storeVersion) await this.reload();
      } finally {
        this.refreshing = null;
      }
    })();
    return this.refreshing;
  }

  /** Polls the store's version every `intervalMs` (cluster mode: changes made through another broker). */
  startPolling(intervalMs: number): void {
    if (this.poller !== null) return;
    this.poller = setInterval(() => {
      this.refresh().catch((err: unknown) => this.opts.logger?.warn({ err }, 'control-plane refresh failed; keeping the last directory'));
    }, intervalMs);
    this.poller.unref();
  }

  close(): void {
    if (this.poller !== null) clearInterval(this.poller);
    this.poller = null;
  }

  private reload(): Promise<void> {
    const next = this.reloading.then(() => this.load());
    // A failed reload fails its caller; the next one runs regardless.
    this.reloading = next.catch(() => undefined);
    return next;
  }

  private async load(): Promise<void> {
    const s = this.opts.store;
    const version = await s.controlVersion();
    const [users, groups, namespaces, tokens, policies] = await Promise.all([
      s.listControl('user'),
      s.listControl('group'),
      s.listControl('namespace'),
      s.listControl('token'),
      s.listControl('policy'),
    ]);
    const nextUsers = new Map<string, DirectoryUser>();
    for (const r of users) {
      const u = parseUser(r);
      if (u) nextUsers.set(r.name, u);
      else this.opts.logger?.warn({ user: r.name }, 'control store: user document unreadable; left out');
    }
    const nextPolicies: PolicyDef[] = [];
    for (const r of policies) {
      try {
        nextPolicies.push(validatePolicy({ ...(r.data as unknown as PolicyDef), name: r.name }));
      } catch (err) {
        this.opts.logger?.warn({ policy: r.name, err }, 'control store: policy document invalid; left out');
      }
    }
    this.users = nextUsers;
    this.nkeys = new Map();
    for (const u of nextUsers.values()) if (u.info.nkey !== undefined && !this.nkeys.has(u.info.nkey)) this.nkeys.set(u.info.nkey, u.info.username);
    this.groupDefs = new Map(
      groups.map((r) => [r.name, { name: r.name, description: (r.data.description as string | null) ?? undefined, createdAt: Number(r.data.createdAt ?? 0) }]),
    );
    this.namespaceDefs = new Map(
      namespaces.map((r) => {
        let quotas: Quotas = {};
        try {
          quotas = validateQuotas(r.data.quotas ?? {});
        } catch (err) {
          this.opts.logger?.warn({ namespace: r.name, err }, 'control store: namespace quotas invalid; none applied');
        }
        let links: ReturnType<typeof linksDoc> = {};
        try {
          links = linksDoc({ name: r.name, exports: r.data.exports, imports: r.data.imports });
        } catch (err) {
          this.opts.logger?.warn({ namespace: r.name, err }, 'control store: namespace exports or imports invalid; none applied');
        }
        return [
          r.name,
          { name: r.name, description: (r.data.description as string | null) ?? undefined, quotas, createdAt: Number(r.data.createdAt ?? 0), ...links },
        ];
      }),
    );
    this.tokens = new Map(
      tokens.map((r) => [
        r.name,
        {
          id: r.name,
          user: String(r.data.user),
          description: (r.data.description as string | null) ?? undefined,
          createdAt: Number(r.data.createdAt ?? 0),
          expiresAt: r.data.expiresAt === null || r.data.expiresAt === undefined ? null : Number(r.data.expiresAt),
          hash: unb64(r.data.hash),
        },
      ]),
    );
    this.policySet = new PolicySet(nextPolicies, this.opts.defaultPolicy ?? 'auto');
    this.storeVersion = version;
    this.version++;
    for (const l of this.listeners) {
      try {
        l();
      } catch (err) {
        this.opts.logger?.error({ err }, 'directory change listener failed');
      }
    }
  }

  private async mustGet(kind: 'user', name: string, what: string): Promise<ControlRecord> {
    const rec = await this.opts.store.getControl(kind, name);
    if (!rec) throw new FlowError('NOT_FOUND', `${what} "${name}" does not exist`);
    return rec;
  }

  private async credentialDoc(password: string): Promise<Record<string, unknown>> {
    const iterations = this.opts.scramIterations ?? DEFAULT_SCRAM_ITERATIONS;
    const scram: Record<string, unknown> = {};
    for (const m of SCRAM_MECHANISMS) {
      const c = await deriveScramCredential(m, password, randomBytes(24), iterations);
      scram[m] = { salt: b64(c.salt), iterations: c.iterations, storedKey: b64(c.storedKey), serverKey: b64(c.serverKey) };
    }
    const h = await this.opts.hasher(password);
    return { scram, scrypt: { salt: b64(h.salt), hash: b64(h.hash) } };
  }
}

function parseRabbitHash(v: unknown): RabbitHash | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const h = v as { algorithm?: unknown; hash?: unknown };
  if (typeof h.hash !== 'string' || typeof h.algorithm !== 'string') return undefined;
  return { algorithm: h.algorithm as RabbitHash['algorithm'], hash: h.hash };
}

function parseUser(r: ControlRecord): DirectoryUser | null {
  const d = r.data;
  const scryptDoc = d.scrypt as { salt?: string; hash?: string } | undefined;
  const rabbitHash = parseRabbitHash(d.rabbitHash);
  const hasScrypt = scryptDoc?.salt !== undefined && scryptDoc.hash !== undefined;
  if (!hasScrypt && rabbitHash === undefined) return null;
  const creds = new Map<ScramMechanism, ScramCredential>();
  const scram = (d.scram ?? {}) as Record<string, { salt: string; iterations: number; storedKey: string; serverKey: string }>;
  for (const m of SCRAM_MECHANISMS) {
    const c = scram[m];
    if (c) creds.set(m, { salt: unb64(c.salt), iterations: Number(c.iterations), storedKey: unb64(c.storedKey), serverKey: unb64(c.serverKey) });
  }
  const info: UserInfo = {
    username: r.name,
    groups: Array.isArray(d.groups) ? (d.groups as string[]) : [],
    namespace: typeof d.namespace === 'string' ? d.namespace : DEFAULT_NAMESPACE,
    mechanisms: [...(hasScrypt || (rabbitHash?.hash ?? '') !== '' ? ['PLAIN'] : []), ...creds.keys(), ...(typeof d.nkey === 'string' ? ['NKEY'] : [])],
    createdAt: Number(d.createdAt ?? r.updatedAt),
    source: typeof d.source === 'string' ? d.source : 'api',
    ...(typeof d.nkey === 'string' ? { nkey: d.nkey } : {}),
  };
  const passwordSource = typeof d.passwordSource === 'string' ? d.passwordSource : info.source;
  if (!hasScrypt) return new DirectoryUser(info, creds, DUMMY_PASSWORD_HASH, passwordSource, rabbitHash, rabbitHash);
  return new DirectoryUser(info, creds, { salt: unb64(scryptDoc!.salt!), hash: unb64(scryptDoc!.hash!) }, passwordSource, rabbitHash);
}

function tokenInfo(t: StoredToken): TokenInfo {
  return { id: t.id, user: t.user, description: t.description, createdAt: t.createdAt, expiresAt: t.expiresAt };
}

export function validateQuotas(q: unknown): Quotas {
  if (typeof q !== 'object' || q === null || Array.isArray(q)) throw new FlowError('INVALID_ARGUMENT', 'quotas must be an object');
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(q)) {
    if (!(QUOTA_KEYS as readonly string[]).includes(k)) {
      throw new FlowError('INVALID_ARGUMENT', `unknown quota "${k}" (${QUOTA_KEYS.join(', ')})`);
    }
    if (v === null || v === undefined) continue;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new FlowError('INVALID_ARGUMENT', `quota ${k} must be a number >= 0`);
    out[k] = v;
  }
  return out as Quotas;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
