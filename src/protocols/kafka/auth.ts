/**
 * Kafka's SASL mechanisms over the control plane (`AccessControl`): PLAIN checks the password with
 * `access.password`, so a user the directory does not know goes to the webhook authenticator like on every other
 * protocol; SCRAM-SHA-256/512 run the control plane's SCRAM server over the directory (SCRAM cannot go to a
 * webhook: the proof needs stored keys, never the password).
 *
 * The exchange answers the username as its principal; the connection turns it into a `Principal` (groups,
 * namespace) with `access.principal`, which also knows the principals the webhook let in.
 */
import { isSaslMechanism, startSaslExchange, type AccessControl, type Principal, type SaslMechanism } from '../../control/index.js';
import type { KafkaSaslExchange, KafkaSaslOptions, KafkaSaslStep } from './sasl.js';

export const OAUTHBEARER = 'OAUTHBEARER';

/**
 * The mechanisms of `mechanisms` that FlowMQ implements, served over the control plane; with OIDC configured also
 * OAUTHBEARER (RFC 7628), whose token is an OIDC JWT.
 */
export function accessSaslProvider(access: AccessControl, mechanisms: readonly string[]): KafkaSaslOptions {
  const offered: string[] = mechanisms.filter(isSaslMechanism);
  if (access.oidc !== null) offered.push(OAUTHBEARER);
  return {
    mechanisms: offered,
    start(mechanism, remoteAddress) {
      if (mechanism === OAUTHBEARER && access.oidc !== null) return new OAuthBearerExchange(access, remoteAddress);
      if (!isSaslMechanism(mechanism) || !offered.includes(mechanism)) {
        return { step: () => ({ state: 'failed', reason: `mechanism ${mechanism} not offered` }) };
      }
      // PLAIN's password goes through access.password, so users only the webhook knows can log in too. An OIDC
      // token as the password names its own user and claims: the exchange then answers the token's principal, never
      // the username typed beside it (which access.password does not look at for a token).
      let identity: Principal | null = null;
      const inner = startSaslExchange(access.guard, mechanism as SaslMechanism, remoteAddress, {
        protocol: 'kafka',
        checkPassword: (u, p, r) =>
          access.password(u, p, r, 'kafka').then((x) => {
            if (x.verdict === 'ok' && x.principal.expiresAt !== undefined) identity = x.principal;
            return x.verdict;
          }),
      });
      return {
        async step(token: Buffer): Promise<KafkaSaslStep> {
          const r = await inner.step(token);
          const id = identity as Principal | null;
          if (r.state !== 'done' || id === null || id.user === null) return r;
          return { state: 'done', challenge: r.challenge, principal: id.user, identity: id, expiresAt: id.expiresAt };
        },
      };
    },
  };
}

/**
 * RFC 7628 OAUTHBEARER on the server, as Kafka's OAuthBearerSaslServer answers it. The client's one message is
 * `gs2-header %x01 *(key "=" value %x01) %x01`, e.g. `n,,\x01auth=Bearer <jwt>\x01\x01` (Kafka clients may add SASL
 * extensions as more key=value pairs; they are ignored). A token that fails verification is answered with the
 * RFC 7628 section 3.2.2 error challenge `{"status":"invalid_token"}`; the client then sends a lone %x01 and the
 * exchange fails (SASL_AUTHENTICATION_FAILED), so librdkafka reports the reason. A malformed message fails at once.
 */
class OAuthBearerExchange implements KafkaSaslExchange {
  private state: 'initial' | 'error-sent' | 'done' = 'initial';
  private reason = '';
  private username: string | undefined;

  constructor(
    private readonly access: AccessControl,
    private readonly remoteAddress: string | undefined,
  ) {}

  async step(token: Buffer): Promise<KafkaSaslStep> {
    if (this.state === 'error-sent') {
      this.state = 'done';
      // The client acknowledges the error with %x01 (RFC 7628 section 3.2.3); anything else fails the same way.
      return { state: 'failed', reason: this.reason, username: this.username };
    }
    if (this.state === 'done') return { state: 'failed', reason: 'OAUTHBEARER exchange already finished' };
    this.state = 'done';
    const msg = token.toString('utf8');
    // eslint-disable-next-line no-control-regex -- %x01 is RFC 7628's separator
    const m = /^([nyp])(?:=[^,]*)?,(?:a=([^,]*))?,\x01(.*)$/s.exec(msg);
    if (!m || !m[3].endsWith('\x01\x01')) return { state: 'failed', reason: 'malformed OAUTHBEARER message' };
    if (m[1] === 'p') return { state: 'failed', reason: 'channel binding is not supported' };
    let bearer: string | null = null;
    for (const kv of m[3].slice(0, -2).split('\x01')) {
      const eq = kv.indexOf('=');
      if (eq <= 0) return { state: 'failed', reason: 'malformed OAUTHBEARER key/value pair' };
      if (kv.slice(0, eq) === 'auth') {
        const b = /^bearer +(\S+)$/i.exec(kv.slice(eq + 1));
        if (!b) return { state: 'failed', reason: 'OAUTHBEARER auth is not a Bearer token' };
        bearer = b[1];
      }
    }
    if (bearer === null) return { state: 'failed', reason: 'OAUTHBEARER message without auth' };
    const r = await this.access.bearer(bearer, this.remoteAddress, 'kafka');
    if (r.verdict === 'busy') return { state: 'failed', reason: 'server busy: token not checked', busy: true };
    if (r.verdict === 'ok' && r.principal.user !== null) {
      const user = r.principal.user;
      // Acting as another identity is not offered: the authorization id must be empty or the token's own user.
      const authzid = m[2] === undefined || m[2] === '' ? null : m[2].replace(/=2C/g, ',').replace(/=3D/g, '=');
      if (authzid === null || authzid === user) {
        return { state: 'done', challenge: Buffer.alloc(0), principal: user, identity: r.principal, expiresAt: r.principal.expiresAt };
      }
      this.username = user;
      this.reason = "authorization id differs from the token's user";
    } else this.reason = 'invalid token';
    this.state = 'error-sent';
    return { state: 'continue', challenge: Buffer.from('{"status":"invalid_token"}', 'utf8') };
  }
}
