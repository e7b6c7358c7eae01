/**
 * NATS decentralized authentication (nats-server's operator mode with a preloaded resolver): an operator JWT, the
 * account JWTs it signed, and user JWTs that clients present in CONNECT (`jwt`, with `sig`: their NKey's signature
 * of the nonce INFO sent them; what nats.js's `jwtAuthenticator` and `credsAuthenticator` send from a .creds file).
 *
 * The chain is checked as nats-server checks it: the operator JWT is self-signed (or by one of its signing keys);
 * each account JWT is signed by the operator or one of the operator's signing keys (checked once, at start); a user
 * JWT is signed by its account or one of the account's signing keys (`issuer_account` names the account then), not
 * expired (`exp`), valid already (`nbf`), not revoked by its account (`revocations`: a user key, or `*`, with a time
 * at or after the JWT's `iat`), of an allowed connection type, from an allowed address (`src`); and the nonce
 * signature is the user key's (unless the JWT is a bearer token its account allows). JWT signatures are ed25519
 * over `header.payload` by the issuer's NKey (nkeys.js verifies them); nats' v1 JWTs (header alg `ed25519`, the
 * claim's `type` at its top level), which nats-server 2.9 still accepts, sign the payload alone.
 *
 * What the user may do is its JWT's permissions (a scoped signing key's template instead, when a scoped key signed
 * it; the account's `default_permissions` when the user has none), turned into FlowMQ policies that this
 * connection alone carries (`Principal.own`): pub/sub allow lists are allow policies (none: everything), deny lists
 * deny policies (deny wins), `resp` the `respond` action with its max and ttl (and, as nats-server does, no
 * blanket publish allow). The account is the FlowMQ namespace of its name (quotas and figures follow it).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { FlowError } from '../../core/index.js';
import { PolicySet, parsePublicNkey, validateName, verifySignature, type PolicyDef, type Principal } from '../../control/index.js';
import { addressFilter } from '../../util/address.js';
import type { ConnectOptions } from './codec/index.js';
import { natsPermissionTopic } from './connection-state.js';

/** The largest JWT read (a CONNECT line is bounded by max_control_line anyway; files are read at start). */
const MAX_JWT = 64 * 1024;
const JWT_RE = /eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/g;

export interface Claims {
  iss: string;
  sub: string;
  iat?: number;
  exp?: number;
  nbf?: number;
  name?: string;
  /** nats' v1 claims: the type at the top level (v2 moved it into `nats`, beside `version: 2`). */
  type?: string;
  nats?: Record<string, unknown>;
}

/**
 * A claim's type as nats-server reads it: v2 claims (`nats.version` 2 or more) carry it as `nats.type`, v1 claims
 * (no version) as `type` at the top level; the rest of the claim (permissions, signing keys, limits, revocations)
 * is under `nats` in both.
 */
function claimType(c: Claims): string | undefined {
  const v = c.nats?.version;
  const inner = typeof c.nats?.type === 'string' ? c.nats.type : undefined;
  if (typeof v === 'number' && v >= 2) return inner;
  return typeof c.type === 'string' ? c.type : inner;
}

interface Permission {
  allow?: string[];
  deny?: string[];
}
interface Permissions {
  pub?: Permission;
  sub?: Permission;
  resp?: { max?: number; ttl?: number } | null;
}

interface Account {
  readonly key: string;
  readonly name: string;
  /** The FlowMQ namespace (the account's name when it is a valid namespace name, else its key). */
  readonly namespace: string;
  readonly claims: Claims;
  /** Signing keys, each with its scoped template (null: an unscoped key). */
  readonly signingKeys: ReadonlyMap<string, Permissions | null>;
}

/** A verified user JWT: who the connection is and until when. */
export interface JwtLogin {
  readonly principal: Principal;
  /** ms since the epoch; null: no expiry. */
  readonly expiresAt: number | null;
  /** The account JWT's exp (ms since the epoch; null: none): its clients are closed then, as nats-server does. */
  readonly accountExpiresAt: number | null;
  readonly account: string;
}

/** Decodes a JWT: its claims, the signed part and the signature (checked by the caller). */
function decode(token: string): { claims: Claims; signed: Buffer; sig: Buffer } | null {
  if (token.length > MAX_JWT) return null;
  const parts = token.split('.');
  if (parts.length !== 3) return null;
  try {
    const header = JSON.parse(Buffer.from(parts[0]!, 'base64url').toString('utf8')) as { typ?: string; alg?: string };
    if (String(header.typ).toUpperCase() !== 'JWT' || (header.alg !== 'ed25519-nkey' && header.alg !== 'ed25519')) return null;
    const claims = JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8')) as Claims;
    if (typeof claims !== 'object' || claims === null || typeof claims.iss !== 'string' || typeof claims.sub !== 'string') return null;
    // v1 tokens (alg `ed25519`) are signed over the claims part alone, v2 (`ed25519-nkey`) over `header.claims`.
    const signed = header.alg === 'ed25519' ? parts[1]! : `${parts[0]}.${parts[1]}`;
    return { claims, signed: Buffer.from(signed, 'utf8'), sig: Buffer.from(parts[2]!, 'base64url') };
  } catch {
    return null;
  }
}

/** The claims when `token` is signed by its issuer, of the type, and the issuer is one `trusted` accepts; else null. */
function verified(token: string, type: string, subjectKind: 'operator' | 'account' | 'user', trusted: (iss: string, c: Claims) => boolean): Claims | null {
  const d = decode(token);
  if (d === null || claimType(d.claims) !== type || parsePublicNkey(d.claims.sub, subjectKind) === null) return null;
  const issuer = parsePublicNkey(d.claims.iss, subjectKind === 'user' ? 'account' : 'operator');
  if (issuer === null || !trusted(d.claims.iss, d.claims)) return null;
  return verifySignature(issuer, d.signed, d.sig) ? d.claims : null;
}

/**
 * An activation JWT (a private export's grant, carried by the import as `token`): its claims when it is signed by
 * the exporting account (`trusted` says which keys are its own: its key and signing keys), names an account as its
 * subject and is valid now; null otherwise.
 */
export function verifiedActivation(token: string, trusted: (iss: string) => boolean, nowSec = Math.floor(Date.now() / 1000)): Claims | null {
  const d = decode(token);
  if (d === null || claimType(d.claims) !== 'activation' || parsePublicNkey(d.claims.sub, 'account') === null) return null;
  const issuer = parsePublicNkey(d.claims.iss, 'account');
  if (issuer === null || !trusted(d.claims.iss) || !current(d.claims, nowSec)) return null;
  return verifySignature(issuer, d.signed, d.sig) ? d.claims : null;
}

/** Whether the claims are valid at `nowSec` (exp, nbf). */
function current(c: Claims, nowSec: number): boolean {
  if (typeof c.exp === 'number' && c.exp > 0 && c.exp <= nowSec) return false;
  if (typeof c.nbf === 'number' && c.nbf > 0 && c.nbf > nowSec) return false;
  return true;
}

/** The JWTs in a file's text (a bare JWT, a .jwt file, or a file holding several, one per line). */
function jwtsIn(text: string): string[] {
  return text.match(JWT_RE) ?? [];
}

function signingKeys(list: unknown): Map<string, Permissions | null> {
  const out = new Map<string, Permissions | null>();
  if (!Array.isArray(list)) return out;
  for (const k of list) {
    if (typeof k === 'string') out.set(k, null);
    else if (typeof k === 'object' && k !== null && typeof (k as { key?: unknown }).key === 'string') {
      const sk = k as { key: string; kind?: string; template?: Permissions };
      out.set(sk.key, sk.kind === 'user_scope' ? (sk.template ?? {}) : null);
    }
  }
  return out;
}

/** Operator mode: the trusted operators and the accounts they signed. */
export class NatsOperators {
  private readonly operators = new Map<string, Set<string>>();
  private readonly accounts = new Map<string, Account>();

  /**
   * Reads the operator JWT files (each holds one operator JWT) and the account JWTs (files, or every file of a
   * directory, as nats-server's resolver directory keeps `<account>.jwt`). A JWT that does not verify is a
   * configuration error naming the file: the broker does not start with a trust chain it cannot check.
   */
  static load(operatorFiles: readonly string[], accountPaths: readonly string[], nowSec = Math.floor(Date.now() / 1000)): NatsOperators {
    const n = new NatsOperators();
    for (const f of operatorFiles) {
      const jwts = jwtsIn(readText(f));
      if (jwts.length === 0) throw new FlowError('CONFIG_ERROR', `nats operator ${f}: no JWT in the file`);
      for (const t of jwts) {
        const c = verified(t, 'operator', 'operator', (iss, cl) => iss === cl.sub || signingKeys(cl.nats?.signing_keys).has(iss));
        if (c === null) throw new FlowError('CONFIG_ERROR', `nats operator ${f}: not an operator JWT signed by its operator`);
        if (!current(c, nowSec)) throw new FlowError('CONFIG_ERROR', `nats operator ${f}: the operator JWT has expired`);
        n.operators.set(c.sub, new Set([c.sub, ...signingKeys(c.nats?.signing_keys).keys()]));
      }
    }
    for (const p of accountPaths) {
      const files = statSync(p).isDirectory()
        ? readdirSync(p)
            .filter((x) => !x.startsWith('.'))
            .map((x) => join(p, x))
            .filter((x) => statSync(x).isFile())
        : [p];
      for (const f of files) for (const t of jwtsIn(readText(f))) n.addAccount(t, f);
    }
    return n;
  }

  private addAccount(token: string, where: string): void {
    const c = verified(token, 'account', 'account', (iss) => [...this.operators.values()].some((keys) => keys.has(iss)));
    if (c === null) throw new FlowError('CONFIG_ERROR', `nats account JWT in ${where}: not an account JWT signed by a configured operator or its signing keys`);
    const name = typeof c.name === 'string' && c.name !== '' ? c.name : c.sub;
    let namespace = c.sub;
    try {
      namespace = validateName('namespace', name);
    } catch {
      // A name FlowMQ cannot take as a namespace: the account's key is the namespace.
    }
    const prev = this.accounts.get(c.sub);
    // The newest JWT of an account wins (a resolver keeps the latest).
    if (prev !== undefined && (prev.claims.iat ?? 0) > (c.iat ?? 0)) return;
    this.accounts.set(c.sub, { key: c.sub, name, namespace, claims: c, signingKeys: signingKeys(c.nats?.signing_keys) });
  }

  get accountCount(): number {
    return this.accounts.size;
  }

  /** The preloaded accounts: key, namespace, claims and signing keys (their exports and imports: account-links.ts). */
  listAccounts(): ReadonlyArray<{ key: string; namespace: string; claims: Claims; signingKeys: ReadonlyMap<string, unknown> }> {
    return [...this.accounts.values()];
  }

  /** The claims of the account JWT whose namespace this is, or undefined. */
  claimsOfNamespace(namespace: string): Claims | undefined {
    for (const a of this.accounts.values()) if (a.namespace === namespace) return a.claims;
    return undefined;
  }

  /** The account JWT's namespace for a key, or undefined. */
  namespaceOf(account: string): string | undefined {
    return this.accounts.get(account)?.namespace;
  }

  /**
   * Checks a CONNECT carrying a user JWT against the nonce INFO sent; answers the login or why not (for the log).
   * `websocket`: the connection type (STANDARD or WEBSOCKET) the JWT must allow.
   */
  login(o: ConnectOptions, nonce: string | undefined, remoteAddress: string, websocket: boolean, nowMs = Date.now()): JwtLogin | { refused: string } {
    const nowSec = Math.floor(nowMs / 1000);
    const d = decode(o.jwt ?? '');
    if (d === null || claimType(d.claims) !== 'user' || parsePublicNkey(d.claims.sub, 'user') === null) return { refused: 'not a user JWT' };
    const c = d.claims;
    const nats = c.nats ?? {};
    const accountKey = typeof nats.issuer_account === 'string' && nats.issuer_account !== '' ? nats.issuer_account : c.iss;
    const acc = this.accounts.get(accountKey);
    if (acc === undefined) return { refused: `account ${accountKey} unknown` };
    if (c.iss !== acc.key && !acc.signingKeys.has(c.iss)) return { refused: 'user JWT not signed by its account or a signing key of it' };
    const issuer = parsePublicNkey(c.iss, 'account');
    if (issuer === null || !verifySignature(issuer, d.signed, d.sig)) return { refused: 'user JWT signature' };
    if (!current(c, nowSec)) return { refused: 'user JWT expired or not yet valid' };
    if (!current(acc.claims, nowSec)) return { refused: 'account JWT expired' };
    const revocations = (acc.claims.nats?.revocations ?? {}) as Record<string, number>;
    const iat = c.iat ?? 0;
    if ((revocations[c.sub] !== undefined && revocations[c.sub]! >= iat) || (revocations['*'] !== undefined && revocations['*'] >= iat)) {
      return { refused: 'user JWT revoked' };
    }
    if (o.nkey !== undefined && o.nkey !== '' && o.nkey !== c.sub) return { refused: 'nkey is not the user JWT subject' };
    const bearer = nats.bearer_token === true && acc.claims.nats?.disallow_bearer !== true;
    if (!bearer) {
      const user = parsePublicNkey(c.sub, 'user')!;
      if (nonce === undefined || !verifySignature(user, Buffer.from(nonce, 'utf8'), o.sig)) return { refused: 'nonce signature' };
    }
    const types = nats.allowed_connection_types;
    if (Array.isArray(types) && types.length > 0 && !types.includes(websocket ? 'WEBSOCKET' : 'STANDARD')) return { refused: 'connection type not allowed' };
    const src = typeof nats.src === 'string' ? nats.src.split(',') : Array.isArray(nats.src) ? (nats.src as string[]) : [];
    if (src.filter((s) => s.trim() !== '').length > 0) {
      let allowed: ((a: string | undefined) => boolean) | null;
      try {
        allowed = addressFilter(src.map((s) => s.trim()).filter((s) => s !== ''));
      } catch {
        return { refused: 'src not readable' };
      }
      if (allowed !== null && !allowed(remoteAddress)) return { refused: 'address not allowed by src' };
    }
    // Time-of-day limits are not enforced: refused rather than ignored.
    if (Array.isArray(nats.times) && nats.times.length > 0) return { refused: 'times limits are not supported' };
    const scoped = acc.signingKeys.get(c.iss);
    let perms: Permissions;
    if (scoped !== undefined && scoped !== null) perms = scoped;
    else if (nats.pub !== undefined || nats.sub !== undefined || nats.resp !== undefined) perms = nats as Permissions;
    else perms = (acc.claims.nats?.default_permissions ?? {}) as Permissions;
    let policies: { own: PolicySet; responses?: { max: number; ttlMs: number } };
    try {
      policies = permissionPolicies(perms);
    } catch {
      return { refused: 'permissions not readable' };
    }
    const principal: Principal = { user: c.sub, groups: [], namespace: acc.namespace, ...policies };
    const expMs = (x: Claims) => (typeof x.exp === 'number' && x.exp > 0 ? x.exp * 1000 : null);
    return { principal, expiresAt: expMs(c), accountExpiresAt: expMs(acc.claims), account: acc.key };
  }
}

function readText(path: string): string {
  try {
    const st = statSync(path);
    if (st.size > 16 * 1024 * 1024) throw new Error('larger than 16 MiB');
    return readFileSync(path, 'utf8');
  } catch (e) {
    throw new FlowError('CONFIG_ERROR', `nats JWT file ${path}: ${(e as Error).message}`);
  }
}

/** NATS subjects (permissions) as topic patterns; a token holding `+` or `#` (no NATS wildcard) names nothing. */
function patterns(list: unknown): string[] {
  if (!Array.isArray(list)) return [];
  const out: string[] = [];
  for (const s of list) {
    if (typeof s !== 'string') continue;
    // A sub permission may be "subject queue": that queue group only (natsQueueTopic).
    const subject = s.trim().split(/\s+/)[0] ?? '';
    if (subject === '' || subject.split('.').some((t) => t !== '*' && t !== '>' && (t.includes('+') || t.includes('#')))) continue;
    out.push(`topic:${natsPermissionTopic(s)}`);
  }
  return out;
}

/** nats-server's allow_responses defaults: one reply, within 2 minutes. */
export const DEFAULT_RESPONSES = { max: 1, ttlMs: 120_000 } as const;

/**
 * A user's NATS permissions as a PolicySet of its own (see the file header). Unexpressible entries of an allow list
 * are dropped (they could name no topic); a deny list entry that cannot be read makes the whole set unreadable
 * (thrown by validatePolicy), so a deny is never lost.
 */
export function permissionPolicies(p: Permissions): { own: PolicySet; responses?: { max: number; ttlMs: number } } {
  const defs: PolicyDef[] = [];
  const def = (name: string, effect: 'allow' | 'deny', actions: string[], resources: string[]) => {
    if (resources.length > 0) defs.push({ name, effect, actions, resources, principals: ['everyone'], source: 'nats-jwt', createdAt: 0 });
  };
  // Streams, queues, consumer groups and the rest are NATS's JetStream and other protocols' names: not limited by
  // subject permissions (JetStream requests are checked as topics through their subjects elsewhere).
  def('jwt-other', 'allow', ['*'], ['stream:*', 'queue:*', 'group:*', 'exchange:*', 'transactional-id:*']);
  const resp = p.resp ?? null;
  const pubAllow = patterns(p.pub?.allow);
  // nats-server: response permissions without a publish allow list turn the blanket publish allow off.
  if (pubAllow.length > 0) def('jwt-pub-allow', 'allow', ['publish'], pubAllow);
  else if (p.pub?.allow === undefined || p.pub.allow.length === 0) {
    if (resp === null) def('jwt-pub-all', 'allow', ['publish'], ['*:*']);
  }
  def('jwt-pub-deny', 'deny', ['publish'], denyPatterns(p.pub?.deny));
  const subAllow = patterns(p.sub?.allow);
  if (subAllow.length > 0) def('jwt-sub-allow', 'allow', ['subscribe'], subAllow);
  else if (p.sub?.allow === undefined || p.sub.allow.length === 0) def('jwt-sub-all', 'allow', ['subscribe'], ['*:*']);
  def('jwt-sub-deny', 'deny', ['subscribe'], denyPatterns(p.sub?.deny));
  if (resp === null) return { own: new PolicySet(defs, 'deny') };
  def('jwt-resp', 'allow', ['respond'], ['*:*']);
  const max = typeof resp.max === 'number' && resp.max !== 0 ? resp.max : DEFAULT_RESPONSES.max;
  // The JWT's ttl is a Go duration in nanoseconds.
  const ttlMs = typeof resp.ttl === 'number' && resp.ttl !== 0 ? Math.max(1, Math.round(resp.ttl / 1e6)) : DEFAULT_RESPONSES.ttlMs;
  return { own: new PolicySet(defs, 'deny'), responses: { max, ttlMs: resp.ttl !== undefined && resp.ttl < 0 ? -1 : ttlMs } };
}

/** Deny entries: every one must be expressible (a wildcard-looking token denies the whole level, the safe side). */
function denyPatterns(list: unknown): string[] {
  if (!Array.isArray(list)) return [];
  return list.filter((s): s is string => typeof s === 'string' && s.trim() !== '').map((s) => `topic:${natsPermissionTopic(s)}`);
}
