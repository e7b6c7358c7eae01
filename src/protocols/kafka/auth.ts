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
import type { KafkaSaslOptions } from './sasl.js';

/** The mechanisms of `mechanisms` that FlowMQ implements, served over the control plane. */
export function accessSaslProvider(access: AccessControl, mechanisms: readonly string[]): KafkaSaslOptions {
  const offered = mechanisms.filter(isSaslMechanism);
  return {
    mechanisms: offered,
    start(mechanism, remoteAddress) {
      if (!isSaslMechanism(mechanism) || !offered.includes(mechanism)) {
        return { step: () => ({ state: 'failed', reason: `mechanism ${mechanism} not offered` }) };
      }
      // PLAIN's password goes through access.password, so users only the webhook knows can log in too.
      return startSaslExchange(access.guard, mechanism as SaslMechanism, remoteAddress, {
        protocol: 'kafka',
        checkPassword: (u, p, r) => access.password(u, p, r, 'kafka').then((x) => x.verdict),
      });
    },
  };
}
