/**
 * Identities from an OpenID Connect provider: a client presents a signed JWT (an access or ID token the company's
 * IdP issued) where another client would present a password, and this module verifies it with `jose`:
 * - the signature against the IdP's JWKS, fetched from `jwksUrl` (cached; fetched again when a token names a `kid`
 *   the cached set lacks, at most once per `refreshCooldownMs`, so random kids from a stranger cannot make the
 *   broker hammer the IdP) or read from `jwksFile` (read again on an unknown kid, with the same rate limit);
 * - only asymmetric algorithms (RS*, PS*, ES*, EdDSA) unless a shared secret is configured, which then also accepts
 *   HS256/384/512; `none` never (jose's jwtVerify refuses unsecured tokens);
 * - `iss` (exactly the configured issuer), `aud` (contains the configured audience), `exp` (required) and `nbf`,
 *   with `clockSkewMs` of tolerance.
 * The verified claims become a principal: the username from `usernameClaim`, groups from `groupsClaim` (an array,
 * or a space- or comma-separated string), the namespace from `namespaceClaim` (absent: `default`); the caller
 * refuses a namespace the directory does not know. Claim groups listed in `adminGroups` add FlowMQ's `admins` group.
 *
 * Nothing here logs: the callers log refusals through their rate limiters, with the reason and never the token.
 */
import { readFile } from 'node:fs/promises';
import {
  createLocalJWKSet,
  createRemoteJWKSet,
  decodeJwt,
  errors as joseErrors,
  jwtVerify,
  type JSONWebKeySet,
  type JWTPayload,
  type JWTVerifyGetKey,
  type CompactJWSHeaderParameters,
  type FlattenedJWSInput,
} from 'jose';
import { ADMIN_GROUP } from './policy.js';
import { looksLikeJwt } from './jwt-shape.js';

export { looksLikeJwt };

export interface OidcOptions {
  issuer: string;
  audience: string | null;
  jwksUrl: string | null;
  jwksFile: string | null;
  /** A shared secret for HS256/384/512 tokens; null: HMAC tokens are refused. */
  hmacSecret?: string | null;
  usernameClaim?: string;
  groupsClaim?: string | null;
  namespaceClaim?: string | null;
  /** Claim groups whose members are FlowMQ administrators (get the `admins` group). */
  adminGroups?: readonly string[];
  clockSkewMs?: number;
  /** Longest a token session lasts whatever its `exp` says (Kafka session_lifetime_ms, AMQP, MQTT, NATS), ms. */
  maxSessionMs?: number;
  /** Shortest time between two JWKS fetches caused by unknown kids, ms. */
  refreshCooldownMs?: number;
  /** How long a fetched JWKS is used before it is fetched again, ms. */
  cacheMaxAgeMs?: number;
  fetchTimeoutMs?: number;
  now?: () => number;
}

/** A verified token's identity. `expiresAt`: ms since the epoch (its `exp`, capped by maxSessionMs). */
export interface TokenIdentity {
  user: string;
  groups: string[];
  namespace: string;
  expiresAt: number;
}

export type TokenVerdict = { verdict: 'ok'; identity: TokenIdentity } | { verdict: 'bad'; reason: string } | { verdict: 'busy'; reason: string };

const ASYMMETRIC = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];
const HMAC = ['HS256', 'HS384', 'HS512'];

export class OidcVerifier {
  private readonly opts: OidcOptions;
  private readonly algorithms: string[];
  private readonly secret: Uint8Array | null;
  private remote: JWTVerifyGetKey | null = null;
  private local: JWTVerifyGetKey | null = null;
  private fileReadAt = 0;
  private fileLoading: Promise<void> | null = null;
  /** Figures for the admin API and /metrics. */
  readonly stats = { verified: 0, refused: 0, jwksErrors: 0 };

  constructor(opts: OidcOptions) {
    if (!opts.issuer) throw new Error('oidc: an issuer is required');
    if (!opts.jwksUrl && !opts.jwksFile && !opts.hmacSecret) throw new Error('oidc: a JWKS URL, a JWKS file or a shared secret is required');
    this.opts = opts;
    this.secret = opts.hmacSecret ? new TextEncoder().encode(opts.hmacSecret) : null;
    this.algorithms = this.secret !== null ? [...ASYMMETRIC, ...HMAC] : [...ASYMMETRIC];
    if (opts.jwksUrl) {
      this.remote = createRemoteJWKSet(new URL(opts.jwksUrl), {
        cooldownDuration: opts.refreshCooldownMs ?? 30_000,
        cacheMaxAge: opts.cacheMaxAgeMs ?? 600_000,
        timeoutDuration: opts.fetchTimeoutMs ?? 5000,
      });
    }
  }

  private now(): number {
    return (this.opts.now ?? Date.now)();
  }

  /** Reads the JWKS file (first use, and again on an unknown kid at most once per cooldown). */
  private async loadFile(force: boolean): Promise<void> {
    const file = this.opts.jwksFile;
    if (!file) return;
    if (this.local !== null && (!force || this.now() - this.fileReadAt < (this.opts.refreshCooldownMs ?? 30_000))) return;
    this.fileLoading ??= (async () => {
      try {
        const jwks = JSON.parse(await readFile(file, 'utf8')) as JSONWebKeySet;
        this.local = createLocalJWKSet(jwks);
      } finally {
        this.fileReadAt = this.now();
        this.fileLoading = null;
      }
    })();
    await this.fileLoading;
  }

  /** The key for one token: the shared secret for HS*, else the JWKS's key for the header's kid and alg. */
  private readonly key = async (header: CompactJWSHeaderParameters, token: FlattenedJWSInput) => {
    if (header.alg !== undefined && HMAC.includes(header.alg)) {
      if (this.secret === null) throw new joseErrors.JOSEAlgNotAllowed('HMAC tokens are not accepted');
      return this.secret;
    }
    if (this.remote !== null) return this.remote(header, token);
    await this.loadFile(false);
    if (this.local === null) throw new joseErrors.JWKSNoMatchingKey();
    try {
      return await this.local(header, token);
    } catch (err) {
      if (!(err instanceof joseErrors.JWKSNoMatchingKey)) throw err;
      // An unknown kid: the IdP may have rotated its keys into the file; read it again (rate-limited).
      await this.loadFile(true);
      return this.local(header, token);
    }
  };

  /**
   * The user a token claims to be, unverified: the key its failures are throttled under (as a password's are under
   * its username), so a stranger's bad tokens slow down the user they name, not every token user. Null when the
   * token names none.
   */
  claimedUser(token: string): string | null {
    try {
      const u = decodeJwt(token)[this.opts.usernameClaim ?? 'sub'];
      return typeof u === 'string' && u !== '' && u.length <= 256 ? u : null;
    } catch {
      return null;
    }
  }

  /**
   * Verifies a token and maps its claims; never throws. `namespaceExists`: the directory's answer, so that a token
   * naming a namespace it does not know is refused (and counted) here.
   */
  async verify(token: string, namespaceExists?: (name: string) => boolean): Promise<TokenVerdict> {
    if (!looksLikeJwt(token)) return this.refuse('not a JWT');
    let payload: JWTPayload;
    try {
      const r = await jwtVerify(token, this.key, {
        issuer: this.opts.issuer,
        audience: this.opts.audience ?? undefined,
        algorithms: this.algorithms,
        clockTolerance: Math.round((this.opts.clockSkewMs ?? 30_000) / 1000),
        requiredClaims: ['exp'],
        currentDate: new Date(this.now()),
      });
      payload = r.payload;
    } catch (err) {
      return this.failure(err);
    }
    const o = this.opts;
    const user = payload[o.usernameClaim ?? 'sub'];
    if (typeof user !== 'string' || user === '' || user.length > 256) return this.refuse(`claim ${o.usernameClaim ?? 'sub'} missing or not a string`);
    const groups = o.groupsClaim ? claimList(payload[o.groupsClaim]) : [];
    if (groups === null) return this.refuse(`claim ${o.groupsClaim} is not a list of strings`);
    if (o.adminGroups?.some((g) => groups.includes(g)) && !groups.includes(ADMIN_GROUP)) groups.push(ADMIN_GROUP);
    let namespace = 'default';
    if (o.namespaceClaim) {
      const ns = payload[o.namespaceClaim];
      if (ns !== undefined) {
        if (typeof ns !== 'string' || ns === '') return this.refuse(`claim ${o.namespaceClaim} is not a string`);
        namespace = ns;
      }
    }
    if (namespaceExists !== undefined && !namespaceExists(namespace)) return this.refuse(`unknown namespace ${namespace}`);
    let expiresAt = (payload.exp as number) * 1000;
    if (o.maxSessionMs !== undefined && o.maxSessionMs > 0) expiresAt = Math.min(expiresAt, this.now() + o.maxSessionMs);
    this.stats.verified++;
    return { verdict: 'ok', identity: { user, groups, namespace, expiresAt } };
  }

  private refuse(reason: string): TokenVerdict {
    this.stats.refused++;
    return { verdict: 'bad', reason };
  }

  /** jose's error as a verdict: the IdP unreachable is "busy" (try later), anything about the token is "bad". */
  private failure(err: unknown): TokenVerdict {
    if (
      err instanceof joseErrors.JWKSTimeout ||
      err instanceof joseErrors.JWKSInvalid ||
      (err instanceof joseErrors.JOSEError && err.code === 'ERR_JOSE_GENERIC')
    ) {
      this.stats.jwksErrors++;
      return { verdict: 'busy', reason: `JWKS unavailable: ${(err as Error).message}` };
    }
    if (err instanceof joseErrors.JOSEError) {
      const reason =
        err instanceof joseErrors.JWTExpired
          ? 'token expired'
          : err instanceof joseErrors.JWTClaimValidationFailed
            ? `claim ${err.claim} invalid: ${err.reason}`
            : err instanceof joseErrors.JWKSNoMatchingKey
              ? 'no key of the JWKS matches the token (unknown kid)'
              : err instanceof joseErrors.JWSSignatureVerificationFailed
                ? 'bad signature'
                : err instanceof joseErrors.JOSEAlgNotAllowed
                  ? 'algorithm not accepted'
                  : err.code;
      return this.refuse(reason);
    }
    // Not jose's: the JWKS could not be fetched or read (network, HTTP status, a broken file). Not the client's
    // fault: answered as "busy", so clients retry rather than give up.
    this.stats.jwksErrors++;
    return { verdict: 'busy', reason: `JWKS unavailable: ${err instanceof Error ? err.message : String(err)}` };
  }
}

/** A groups claim: an array of strings, or one string of names separated by spaces or commas. */
function claimList(v: unknown): string[] | null {
  if (v === undefined || v === null) return [];
  if (typeof v === 'string') return v.split(/[\s,]+/).filter((s) => s !== '');
  if (Array.isArray(v) && v.every((x) => typeof x === 'string')) return [...(v as string[])];
  return null;
}
