/**
 * connection.update-secret (class 10, method 70; RabbitMQ's extension for credentials that expire, such as OAuth 2
 * tokens): an open connection hands a new secret for the user it logged in as. The secret is checked as a login
 * would be, by the same path (the directory's users through the guard and its throttle, then the webhook), for the
 * username the connection logged in with; it must name the same user and namespace. Accepted: update-secret-ok (71),
 * and the connection acts with the principal the check returned (its groups as they are now). Refused: the connection
 * is closed with 530 NOT_ALLOWED "New secret was refused by one of the backends", as RabbitMQ's rabbit_reader does; a
 * check that cannot run now (throttled) is 530 "Secret update failed", RabbitMQ's text for a backend error.
 *
 * Only an open connection may ask (before connection.open-ok it is 503 COMMAND_INVALID and nothing is checked, so a
 * stranger gets no password oracle out of it). One check at a time: the socket is not read while it runs, so the
 * methods that follow act with the outcome. A connection that logged in with a client certificate (EXTERNAL) has
 * no secret to renew: refused. FlowMQ keeps no secret after a check and re-checks none later: the policies in
 * force are looked up per method (a user removed or changed loses the rights at once), so the new secret
 * matters only in that it must be valid now.
 */
import type { Logger } from 'pino';
import type { AmqpAdapter, AuthOutcome } from './adapter.js';
import type { Principal } from '../../control/index.js';
import { AmqpError } from './errors.js';
import type { AmqpMethod } from './wire.js';

/** What update-secret needs of its connection (AmqpConnection). */
export interface SecretHolder {
  readonly adapter: AmqpAdapter;
  readonly remoteAddress: string | undefined;
  readonly principal: Principal;
  /** The username given at login ('' for anonymous), and the mechanism used. */
  readonly loginUsername: string;
  readonly loginMechanism: string;
  /** Set while a check runs. */
  secretChecking: boolean;
  readonly isOpen: boolean;
  pauseForSecret(paused: boolean): void;
  /** The check said yes: act as `p` from now on. */
  renewed(p: Principal): void;
  closeWith(code: number, text: string, classId?: number, methodId?: number): void;
  sendMethod(channel: number, m: AmqpMethod): void;
  readonly log: Logger;
}

const REFUSED = 'New secret was refused by one of the backends';

export function updateSecret(c: SecretHolder, newSecret: unknown, reason: string): void {
  if (!c.isOpen) throw new AmqpError(503, 'connection.update-secret before connection.open', 10, 70);
  if (c.secretChecking) throw new AmqpError(503, 'connection.update-secret while another one is being checked', 10, 70);
  const secret = Buffer.isBuffer(newSecret) ? newSecret : Buffer.from(String(newSecret ?? ''), 'utf8');
  if (c.loginMechanism === 'EXTERNAL') {
    c.log.info({ user: c.principal.user, reason }, 'amqp: secret update refused (client certificate login)');
    throw new AmqpError(530, REFUSED, 10, 70);
  }
  c.secretChecking = true;
  c.pauseForSecret(true);
  c.adapter.authenticate(c.loginUsername, secret, c.remoteAddress).then(
    (r) => checked(c, r, reason),
    (err: unknown) => {
      c.secretChecking = false;
      c.log.error({ err }, 'amqp: secret update check failed');
      c.closeWith(530, 'Secret update failed', 10, 70);
      c.pauseForSecret(false);
    },
  );
}

function checked(c: SecretHolder, r: AuthOutcome, reason: string): void {
  c.secretChecking = false;
  if (!c.isOpen) return c.pauseForSecret(false);
  const was = c.principal;
  if (r.ok && r.principal.user === was.user && r.principal.namespace === (was.home ?? was.namespace)) {
    c.renewed(r.principal);
    c.adapter.stats.secretUpdates++;
    c.log.info({ user: was.user, reason }, 'amqp: secret updated');
    c.pauseForSecret(false);
    // RabbitMQ answers on channel 0 once the backends accepted the secret.
    c.sendMethod(0, { name: 'connection.update-secret-ok' } as AmqpMethod);
    return;
  }
  c.adapter.stats.secretRefusals++;
  const why = r.ok ? 'the secret names another user or namespace' : r.reason;
  c.log.info({ user: was.user, reason, why }, 'amqp: secret update refused');
  c.closeWith(530, !r.ok && r.busy ? 'Secret update failed' : REFUSED, 10, 70);
  c.pauseForSecret(false);
}
