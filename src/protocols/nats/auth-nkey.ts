/**
 * NKey and JWT logins of NATS clients (nats-server's nonce handshake): INFO carried a nonce (adapter.info); the
 * client answers CONNECT with `nkey` (its public key) or `jwt` (a user JWT, operator mode) and `sig`, its ed25519
 * signature of the nonce in base64url. An NKey names a directory user (`nkey` in the users file, the admin API or
 * `flowmq user set-nkey`); a JWT is checked against the operator and accounts (auth-jwt.ts). Failures are
 * throttled by the password guard like wrong passwords (per address and key), and answered with
 * `-ERR 'Authorization Violation'` by the connection.
 */
import { parsePublicNkey, verifySignature, type AccessControl } from '../../control/index.js';
import { logKey, type LogLimiter } from '../../util/log-limit.js';
import type { ConnectOptions } from './codec/index.js';
import type { NatsAuthOutcome, NatsConnectionMeta, NatsStats } from './types.js';
import type { NatsOperators } from './auth-jwt.js';

/** What a login uses of the adapter. */
export interface NkeyLoginHost {
  readonly access: AccessControl;
  readonly stats: NatsStats;
  readonly logLimit: LogLimiter;
  readonly operators: NatsOperators | null;
}

export async function nkeyLogin(adapter: NkeyLoginHost, o: ConnectOptions, meta: NatsConnectionMeta): Promise<NatsAuthOutcome> {
  const a = adapter.access;
  const remote = meta.remoteAddress;
  const jwt = o.jwt !== undefined && o.jwt !== '';
  const user = jwt ? undefined : a.directory.userByNkey(o.nkey!);
  // The throttle's key: the user an NKey names (its failures count with its password's), else the key itself.
  const key = jwt ? '(nats-jwt)' : (user ?? `(nkey) ${o.nkey!.slice(0, 56)}`);
  if (!(await a.guard.admit(key, remote, 'nats'))) return { ok: false, busy: true };
  const refuse = (reason: string): NatsAuthOutcome => {
    adapter.stats.authFailures++;
    a.guard.failed(key, remote, 'nats');
    adapter.logLimit.log(
      'info',
      logKey('nats nkey login refused', remote),
      { remote, nkey: o.nkey?.slice(0, 56), jwt, reason },
      'nats: nkey/JWT login refused',
    );
    return { ok: false, busy: false };
  };
  if (jwt) {
    if (adapter.operators === null) return refuse('a user JWT, and no operator is configured');
    const r = adapter.operators.login(o, meta.nonce, remote, meta.websocket === true);
    if ('refused' in r) return refuse(r.refused);
    a.guard.succeeded(key, remote);
    return { ok: true, principal: r.principal, expiresAt: r.expiresAt, accountExpiresAt: r.accountExpiresAt };
  }
  const pub = parsePublicNkey(o.nkey, 'user');
  if (user === undefined || pub === null) return refuse('unknown nkey');
  if (meta.nonce === undefined || !verifySignature(pub, Buffer.from(meta.nonce, 'utf8'), o.sig)) return refuse('nonce signature');
  a.guard.succeeded(key, remote);
  return { ok: true, principal: a.principal(user) };
}
