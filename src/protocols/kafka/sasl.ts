/**
 * SASL authentication of Kafka connections.
 *
 * The adapter does not know users or mechanisms: it is given a `KafkaSaslOptions` (the control plane's SASL
 * servers over its user store, wired by the broker) and carries tokens between the client and an exchange:
 * - SaslHandshake v1 picks the mechanism; the tokens then travel in SaslAuthenticate requests (KIP-152).
 * - SaslHandshake v0 picks the mechanism; the tokens then travel as bare size-prefixed frames with no Kafka
 *   header, as before KIP-152 (clients fall back to it when a broker does not list SaslAuthenticate).
 * Failures are answered (SaslHandshake: UNSUPPORTED_SASL_MECHANISM / ILLEGAL_SASL_STATE; SaslAuthenticate:
 * SASL_AUTHENTICATION_FAILED / ILLEGAL_SASL_STATE) and the connection is then closed, as Kafka does; with raw
 * v0 tokens there is no way to answer, so the connection is just closed. Re-authentication (KIP-368) is offered
 * to sessions whose credential expires (OAUTHBEARER with an OIDC token): SaslAuthenticate v1+ reports the session
 * lifetime (the token's expiry, capped by --oidc-max-session), the client renews it with SaslHandshake v1 and
 * SaslAuthenticate on the same connection, and a session that outlives it is closed (connection.ts). PLAIN and
 * SCRAM sessions have no lifetime (0), as in Kafka without connections.max.reauth.ms.
 *
 * When the control plane's password guard cannot check a token now (its queue is full, or the client's address has
 * failed so often that its next check is booked too far ahead), the connection is closed without an answer. That
 * is deliberate: KIP-152 made SASL_AUTHENTICATION_FAILED a non-retriable error in clients (KAFKA-5854: producers
 * and consumers stop retrying), while a disconnection during authentication is treated as transient and retried
 * after the reconnect backoff, which is what "server busy, try again" should cause. Failures are logged through a
 * LogLimiter (per address and overall), so a flood of wrong passwords writes a bounded number of lines.
 */
import {
  KafkaErrorCode,
  type SaslAuthenticateRequest,
  type SaslAuthenticateResponse,
  type SaslHandshakeRequest,
  type SaslHandshakeResponse,
} from './codec/index.js';
import { CLOSE_CONNECTION, thenClose, type HandlerResult, type RequestContext } from './route.js';

export { SaslSession, type KafkaSaslExchange, type KafkaSaslOptions, type KafkaSaslStep } from './sasl-session.js';

export function handleSaslHandshake(ctx: RequestContext, req: SaslHandshakeRequest): HandlerResult<SaslHandshakeResponse> {
  const sasl = ctx.adapter.options.sasl ?? null;
  const mechanisms = sasl ? [...sasl.mechanisms] : [];
  const err = ctx.conn.sasl.handshake(sasl, req.mechanism, ctx.header.apiVersion, ctx.conn.remoteAddress);
  if (err === null) return { errorCode: KafkaErrorCode.NONE, mechanisms };
  ctx.conn.limitedLog(
    'warn',
    { mechanism: req.mechanism, errorCode: err },
    err === KafkaErrorCode.UNSUPPORTED_SASL_MECHANISM
      ? 'SASL mechanism not offered: closing connection'
      : 'SaslHandshake in the wrong state: closing connection',
  );
  return thenClose({ errorCode: err, mechanisms });
}

export async function handleSaslAuthenticate(ctx: RequestContext, req: SaslAuthenticateRequest): Promise<HandlerResult<SaslAuthenticateResponse>> {
  const { conn } = ctx;
  const reauth = conn.sasl.reauthenticating;
  const r = await conn.sasl.step(req.authBytes);
  if (r === 'illegal') {
    conn.limitedLog('warn', {}, 'SaslAuthenticate without a pending SASL exchange: closing connection');
    return thenClose({
      errorCode: KafkaErrorCode.ILLEGAL_SASL_STATE,
      errorMessage: 'unexpected SaslAuthenticate request',
      authBytes: Buffer.alloc(0),
      sessionLifetimeMs: 0,
    });
  }
  if (r.state === 'failed') {
    logFailure(ctx, r);
    if (r.busy) return CLOSE_CONNECTION;
    return thenClose({
      errorCode: KafkaErrorCode.SASL_AUTHENTICATION_FAILED,
      // The same words for every cause: a client must not learn whether the user exists.
      errorMessage: `Authentication failed during authentication due to invalid credentials with SASL mechanism ${conn.sasl.mechanism ?? ''}`,
      authBytes: Buffer.alloc(0),
      sessionLifetimeMs: 0,
    });
  }
  let sessionLifetimeMs = 0;
  if (r.state === 'done') {
    const renewed = reauth;
    conn.log.info({ principal: r.principal, mechanism: conn.sasl.mechanism, reauthentication: renewed || undefined }, 'SASL authentication succeeded');
    if (renewed) conn.reauthenticated();
    // The principal's session (access, quota lease); a full namespace closes the connection after the SASL step.
    else if (!conn.authenticated()) return CLOSE_CONNECTION;
    // KIP-368: a credential that expires (an OIDC token) gives the session a lifetime; the client re-authenticates
    // before it ends, or the connection is closed. At least 1 ms: 0 would mean "no lifetime".
    if (r.expiresAt !== undefined) sessionLifetimeMs = Math.max(1, r.expiresAt - Date.now());
  }
  return { errorCode: KafkaErrorCode.NONE, errorMessage: null, authBytes: r.challenge, sessionLifetimeMs };
}

/**
 * A raw token after SaslHandshake v0: the answer is a bare size-prefixed token; a failure can only close the
 * connection (null).
 */
export async function stepRawToken(ctx: Pick<RequestContext, 'conn'>, token: Buffer): Promise<Buffer | null> {
  const r = await ctx.conn.sasl.step(token);
  if (r === 'illegal') {
    ctx.conn.limitedLog('warn', {}, 'raw SASL token out of sequence: closing connection');
    return null;
  }
  if (r.state === 'failed') {
    logFailure(ctx, r);
    return null;
  }
  if (r.state === 'done') {
    ctx.conn.log.info({ principal: r.principal, mechanism: ctx.conn.sasl.mechanism, handshake: 0 }, 'SASL authentication succeeded');
    if (!ctx.conn.authenticated()) return null;
  }
  const frame = Buffer.allocUnsafe(4 + r.challenge.length);
  frame.writeInt32BE(r.challenge.length, 0);
  r.challenge.copy(frame, 4);
  return frame;
}

function logFailure(ctx: Pick<RequestContext, 'conn'>, r: { reason: string; username?: string }): void {
  const { conn } = ctx;
  // Through the adapter's limiter (its listeners share it), keyed by the client's address.
  conn.limitedLog('warn', { mechanism: conn.sasl.mechanism, username: r.username, reason: r.reason }, 'SASL authentication failed: closing connection');
}
