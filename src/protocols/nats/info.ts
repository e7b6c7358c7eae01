/**
 * The INFO a NATS connection gets first: built from settings that come from the broker's configuration alone, so
 * that the NATS port bound at the start of `flowmq start` (prebound.ts) sends the same INFO at once, long before
 * the adapter exists, as the adapter sends later (adapter.info). The server id and the client id counter are one
 * `NatsIdentity`, made by whichever comes first and handed to the adapter, so that early and late connections have
 * the server id of the same run and client ids that do not repeat. This module imports only node: modules, so that
 * the early listener pays no module loading for it.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { NatsConnectionMeta, NatsListenerTls } from './types.js';

/** The nats-server release whose client protocol (and JetStream API subset) FlowMQ implements: clients switch
 * features on by it (headers from 2.2, the 2.9 consumer-create subjects). */
export const NATS_SERVER_VERSION = '2.9.10';

const FLOWMQ_VERSION = ((): string => {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../../../package.json', import.meta.url), 'utf8')) as { version?: string };
    return pkg.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
})();

/** Base32 (RFC 4648) letters: a server id looks like nats-server's (an nkey: 'N' and 55 of these). */
const B32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

/** The server id (generated per start, as nats-server does) and the last client id given out. */
export interface NatsIdentity {
  readonly serverId: string;
  lastClientId: number;
}

export function newNatsIdentity(): NatsIdentity {
  const r = randomBytes(55);
  let s = 'N';
  for (let i = 0; i < 55; i++) s += B32[r[i]! & 31];
  return { serverId: s, lastClientId: 0 };
}

/** What INFO says besides the connection's own fields (client id, address, nonce) and the listener's TLS. */
export interface NatsInfoSettings {
  serverName: string;
  maxPayload: number;
  authRequired: boolean;
  jetstream: boolean;
}

/** `flowmq-<broker id>`: INFO's server_name. */
export const natsServerName = (brokerId: number | string): string => `flowmq-${brokerId}`;

/**
 * The INFO object for a new connection: `meta` gets its client id and nonce here (kept by the connection: an NKey
 * or JWT login verifies the signature of the nonce INFO carried). A nonce goes to every connection (as nats-server's
 * `always_enable_nonce`): whether a directory user has an NKey is stored state, not configuration, and a client
 * that does not sign ignores it.
 */
export function natsInfo(id: NatsIdentity, s: NatsInfoSettings, meta: NatsConnectionMeta, tls: NatsListenerTls): Record<string, unknown> {
  meta.clientId ??= ++id.lastClientId;
  const o: Record<string, unknown> = {
    server_id: id.serverId,
    server_name: s.serverName,
    version: NATS_SERVER_VERSION,
    proto: 1,
    headers: true,
    max_payload: s.maxPayload,
    client_id: meta.clientId,
    client_ip: meta.remoteAddress,
    flowmq_version: FLOWMQ_VERSION,
  };
  if (s.authRequired) o.auth_required = true;
  o.nonce = meta.nonce ??= randomBytes(11).toString('base64url');
  if (tls.required) o.tls_required = true;
  else if (tls.available) o.tls_available = true;
  if (s.jetstream) o.jetstream = true;
  return o;
}

/** The INFO line. */
export function natsInfoLine(info: Record<string, unknown>): string {
  return `INFO ${JSON.stringify(info)}\r\n`;
}
