/**
 * The `-ERR` texts the NATS connection sends beyond the codec's own (codec/errors.ts has the parser's), worded as
 * nats-server 2.9.10 sends them (checked against Debian's binary: `strings /usr/sbin/nats-server`), and which of
 * them close the connection. nats-server sends `-ERR '<text>'` and, for the fatal ones, closes right after.
 */
import { isFlowError } from '../../core/index.js';

export const NatsErr = {
  /** Bad credentials, or an operation before CONNECT when authentication is required. Fatal. */
  AUTH_VIOLATION: 'Authorization Violation',
  /** A user JWT expired while connected (nats-server closes at its exp). Fatal. */
  AUTH_EXPIRED: 'User Authentication Expired',
  /** The account JWT of a JWT user expired while connected (nats-server closes its clients). Fatal. */
  ACCOUNT_EXPIRED: 'Account Authentication Expired',
  /** No CONNECT within the auth timeout. Fatal. */
  AUTH_TIMEOUT: 'Authentication Timeout',
  /** Too many PINGs left unanswered. Fatal. */
  STALE: 'Stale Connection',
  /** SUB over the per-connection limit: the subscription is refused, the connection stays. */
  MAX_SUBS: 'Maximum Subscriptions Exceeded',
  /** A connection over the listener's limit. Fatal. */
  MAX_CONNECTIONS: 'maximum connections exceeded',
  /**
   * A connection over its namespace's connection quota (a namespace is what nats-server calls an account: this is
   * its ErrTooManyAccountConnections, sent after CONNECT). Fatal.
   */
  MAX_ACCOUNT_CONNECTIONS: 'maximum account active connections exceeded',
  /** A plain CONNECT where TLS is required. Fatal. */
  TLS_REQUIRED: 'Secure Connection - TLS Required',
  /** A publish subject (or reply subject) the unified topic space cannot hold, or invalid with pedantic. */
  INVALID_PUBLISH_SUBJECT: 'Invalid Publish Subject',
  /** SUB to a subject the NATS rules refuse. */
  INVALID_SUBJECT: 'Invalid Subject',
  /** CONNECT with no_responders but without headers. Fatal. */
  NO_RESPONDERS_NEEDS_HEADERS: 'no responders requires headers support',
  /** HPUB from a client that did not announce headers in CONNECT (nats-server's ErrMsgHeadersNotSupported). Fatal. */
  HEADERS_NOT_SUPPORTED: 'message headers not supported',
} as const;

/** The -ERR text for an error the core threw on a client's behalf (null: internal, logged, the connection closes). */
export function natsErrTextOf(err: unknown): string | null {
  if (isFlowError(err)) {
    switch (err.code) {
      case 'INVALID_TOPIC':
        return NatsErr.INVALID_PUBLISH_SUBJECT;
      case 'INVALID_FILTER':
        return NatsErr.INVALID_SUBJECT;
      case 'ACCESS_REFUSED':
        return 'Permissions Violation';
      default:
        return null;
    }
  }
  return null;
}
