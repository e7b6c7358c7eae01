/**
 * A NATS connection and the control plane: the client registry entry (kick: -ERR and close), login (its
 * authorization and its namespace's quota lease), publish and subscribe permissions (nats-server's Permissions
 * Violation -ERR, the connection stays), and the quota's hold-back (reading paused).
 */
import type { Principal } from '../../control/index.js';
import { namespaceNames } from '../../core/index.js';
import { logKey } from '../../util/log-limit.js';
import { encodeErr } from './codec/index.js';
import { NatsErr } from './errors.js';
import { NatsConnectionState, PAUSE_QUOTA } from './connection-state.js';

/** Registers the connection with the client registry (the admin API lists and kicks it there). */
export function register(conn: NatsConnectionState): void {
  const s = (conn.meta.byteCounter ?? conn.stream) as { bytesRead?: number; bytesWritten?: number };
  conn.entry = conn.adapter.access.clients.register({
    protocol: 'nats',
    listener: conn.meta.websocket === true ? 'nats-ws' : 'nats',
    remoteAddress: conn.remoteAddress,
    remotePort: conn.meta.remotePort,
    ...(typeof s.bytesRead === 'number' ? { socket: s as { bytesRead: number; bytesWritten: number } } : {}),
    kick: (reason) => kick(conn, reason),
  });
}

/**
 * The client is who it said it is: its Access and its namespace's quota lease. Over the namespace's connection
 * quota the client gets nats-server's account-limit error and is closed (false).
 */
export function login(conn: NatsConnectionState, principal: Principal): boolean {
  const ac = conn.adapter.access;
  const lease = ac.quotas.connect(principal);
  if ('refused' in lease) {
    conn.adapter.stats.quotaRefusals++;
    conn.adapter.logLimit.log(
      'info',
      logKey('nats quota refused', conn.remoteAddress),
      { remote: conn.remoteAddress, user: principal.user, namespace: principal.namespace, reason: lease.refused },
      'nats: connection refused by its namespace quota',
    );
    conn.fatal(NatsErr.MAX_ACCOUNT_CONNECTIONS, null);
    return false;
  }
  conn.lease = lease;
  conn.user = principal.user;
  conn.access = ac.accessFor(principal, 'nats', conn.remoteAddress);
  // The NATS account is the user's namespace: its subjects are that namespace's (isolated from every other's).
  conn.names = namespaceNames(principal.namespace);
  if (conn.entry !== null) {
    conn.entry.user = principal.user;
    conn.entry.namespace = principal.namespace;
  }
  return true;
}

/** An administrator kicked the client (admin API): closed at once; NATS has no word for it (clients reconnect). */
export function kick(conn: NatsConnectionState, reason: string): void {
  conn.adapter.logger.info({ client: conn.clientId, remote: conn.remoteAddress, user: conn.user, reason }, 'nats: client kicked');
  conn.shutdown(true);
}

/**
 * May this connection publish on `topic`? JetStream API, ack and flow-control subjects are not topics a policy names: with
 * JetStream on, the service checks each request against the stream and consumer it acts on (`subscribe
 * stream:`, `create stream:`, ...), so they pass here; except for a user JWT, whose subject permissions cover them.
 */
export function mayPublish(conn: NatsConnectionState, topic: string): boolean {
  if (
    conn.adapter.hasJetStream &&
    topic.charCodeAt(0) === 0x24 &&
    (topic.startsWith('$JS/API/') ||
      topic.startsWith('$JS/ACK/') ||
      topic.startsWith('$JS/FC/') ||
      (conn.adapter.jsDomainApi !== null && topic.startsWith(conn.adapter.jsDomainApi)))
  ) {
    // A user JWT's permissions name subjects, the JetStream API's too (as nats-server checks them): checked as topics.
    return conn.access.principal.own === undefined || conn.access.can('publish', 'topic', topic);
  }
  return conn.access.can('publish', 'topic', topic);
}

/** A PUB or SUB a policy refuses: nats-server's -ERR, the connection stays (as nats-server keeps it). */
export function permissionViolation(conn: NatsConnectionState, what: string, op: 'publish' | 'subscribe', subject: string): void {
  conn.adapter.stats.permissionViolations++;
  conn.adapter.logLimit.log(
    'info',
    logKey('nats permissions violation', conn.remoteAddress),
    { remote: conn.remoteAddress, client: conn.clientId, user: conn.user, op, subject: subject.slice(0, 256) },
    'nats: permissions violation',
  );
  conn.send(encodeErr(`Permissions Violation for ${what}`));
}

/** A rate quota asks to hold the client back `ms`: its socket is not read until then (TCP pushes back). */
export function quotaWait(conn: NatsConnectionState, ms: number): void {
  const until = Date.now() + ms;
  if (until <= conn.quotaUntil) return;
  conn.quotaUntil = until;
  if (conn.quotaTimer !== null) clearTimeout(conn.quotaTimer);
  else {
    conn.adapter.stats.quotaPauses++;
    conn.pauseReading(PAUSE_QUOTA);
  }
  conn.quotaTimer = setTimeout(() => {
    conn.quotaTimer = null;
    conn.quotaUntil = 0;
    conn.resumeReading(PAUSE_QUOTA);
  }, ms);
  conn.quotaTimer.unref();
}

/**
 * The namespace's bytes-out quota is spent for `ms`: what is written to the client waits in its writer until then
 * (flushNow holds it), as behind a link of the quota's speed, so a client that only subscribes is slowed too (holding
 * its socket's reading, quotaWait, slows only what it sends). Deliveries go on piling up meanwhile; past maxPending
 * (or maxPendingMsgs) the client is a slow consumer and closed, as nats-server closes one that cannot keep up.
 */
export function holdOutput(conn: NatsConnectionState, ms: number): void {
  const until = Date.now() + ms;
  if (until <= conn.outHeldUntil) return;
  conn.outHeldUntil = until;
  if (conn.outHoldTimer !== null) clearTimeout(conn.outHoldTimer);
  conn.outHoldTimer = setTimeout(() => {
    conn.outHoldTimer = null;
    conn.outHeldUntil = 0;
    conn.flushNow();
  }, ms);
  conn.outHoldTimer.unref();
}
