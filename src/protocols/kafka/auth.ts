/**
 * Kafka's SASL mechanisms over the control plane (`AccessControl`): PLAIN checks the password with
 * `access.password`, so a user the directory does not know goes to the webhook authenticator like on every other
 * protocol; SCRAM-SHA-256/512 run the control plane's SCRAM server over the directory (SCRAM cannot go to a
 * webhook: the proof needs stored keys, never the password).
 *
 * The exchange answers the username as its principal; the connection turns it into a `Principal` (groups,
 * namespace) with `access.principal`, which also knows the principals the webhook let in.
 */
import { isSaslMechanism, startSaslExchange, type AccessControl, type SaslMechanism } from '../../control/index.js';
import type { KafkaSaslExchange, KafkaSaslOptions, KafkaSaslStep } from './sasl.js';

/** RFC 4616: one message `[authzid] NUL authcid NUL passwd` checked through `access.password`. */
class AccessPlainExchange implements KafkaSaslExchange {
  private used = false;

  constructor(
    private readonly access: AccessControl,
    private readonly remoteAddress: string | undefined,
  ) {}

  async step(token: Buffer): Promise<KafkaSaslStep> {
    if (this.used) return { state: 'failed', reason: 'PLAIN takes a single message' };
    this.used = true;
    const first = token.indexOf(0);
    const second = first < 0 ? -1 : token.indexOf(0, first + 1);
    if (second < 0 || token.indexOf(0, second + 1) >= 0) return { state: 'failed', reason: 'malformed PLAIN message' };
    const authzid = token.subarray(0, first).toString('utf8');
    const username = token.subarray(first + 1, second).toString('utf8');
    const password = token.subarray(second + 1);
    if (username === '' || password.length === 0) return { state: 'failed', reason: 'empty PLAIN username or password', username };
    // Acting as another identity is not offered: the authorization id must be empty or the user's own (as Kafka).
    if (authzid !== '' && authzid !== username) return { state: 'failed', reason: 'authorization id differs from the username', username };
    const r = await this.access.password(username, password, this.remoteAddress, 'kafka');
    if (r.verdict === 'busy') return { state: 'failed', reason: 'server busy: password not checked', username, busy: true };
    if (r.verdict !== 'ok') return { state: 'failed', reason: 'invalid username or password', username };
    return { state: 'done', challenge: Buffer.alloc(0), principal: username };
  }
}

/** The mechanisms of `mechanisms` that FlowMQ implements, served over the control plane. */
export function accessSaslProvider(access: AccessControl, mechanisms: readonly string[]): KafkaSaslOptions {
  const offered = mechanisms.filter(isSaslMechanism);
  return {
    mechanisms: offered,
    start(mechanism, remoteAddress) {
      if (!isSaslMechanism(mechanism) || !offered.includes(mechanism)) {
        return { step: () => ({ state: 'failed', reason: `mechanism ${mechanism} not offered` }) };
      }
      if (mechanism === 'PLAIN') return new AccessPlainExchange(access, remoteAddress);
      return startSaslExchange(access.guard, mechanism as SaslMechanism, remoteAddress);
    },
  };
}
