/**
 * What the NATS port bound first thing in `flowmq start` (src/protocols/nats/prebound.ts) announces in the INFO it
 * sends at once, from the configuration, as the NATS module will once the broker is up (adapter.infoSettings and
 * the listener's TLS). One input is not configuration: with neither --allow-anonymous nor --anonymous-protocols
 * given, anonymous access is on exactly while no user exists (broker.ts openControlPlane), which the users file and
 * the embedded metastore tell (read here, before the broker opens them); a PostgreSQL metastore is not read this
 * early, and its connections then get INFO once the broker is up. TLS before INFO (handshake-first) sends no
 * early INFO either. The listener logs a warning if what it would send differs from what was sent early.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Config } from '../config/index.js';
import { parseYaml } from '../util/yaml.js';
import { natsServerName } from '../protocols/nats/info.js';
import type { EarlyInfo } from '../protocols/nats/prebound.js';
import { sqliteHasUsers } from '../storage/metastore/sqlite-peek.js';

export function earlyNatsInfo(c: Config): EarlyInfo | null {
  if (c.natsTlsHandshakeFirst) return null;
  const anonymous = anonymousNats(c);
  if (anonymous === null) return null;
  const operator = (c.natsOperator ?? '').split(',').some((x) => x.trim() !== '');
  return {
    settings: {
      serverName: natsServerName(c.brokerId),
      maxPayload: c.natsMaxPayload,
      authRequired: c.natsToken !== null || operator || !anonymous,
      jetstream: c.natsJetstream,
    },
    tls: c.natsTlsCert !== null ? { available: true, required: c.natsTlsRequired } : { available: false, required: false },
    authTimeoutMs: c.natsAuthTimeout,
  };
}

/** Whether NATS clients may come in without credentials (broker.ts openControlPlane's rule); null: cannot tell yet. */
function anonymousNats(c: Config): boolean | null {
  if (c.anonymousProtocols !== null) return c.anonymousProtocols.includes('nats');
  if (c.allowAnonymous !== null) return c.allowAnonymous;
  if (c.authWebhook !== null || c.oidcIssuer !== null) return false;
  if (c.usersFile !== null) {
    const listed = usersFileHasUsers(c.usersFile);
    if (listed === null) return null;
    if (listed) return false;
  }
  if (c.metastore.kind !== 'sqlite') return null;
  const stored = sqliteHasUsers(resolve(c.dataDir));
  return stored === null ? null : !stored;
}

/** A users file lists users (a list, or a mapping with `users`); null when it cannot be read (the start fails on it). */
function usersFileHasUsers(path: string): boolean | null {
  try {
    const doc = parseYaml(readFileSync(path, 'utf8'));
    const users = Array.isArray(doc) ? doc : doc !== null && typeof doc === 'object' ? (doc as { users?: unknown }).users : undefined;
    if (users === undefined || users === null) return false;
    return Array.isArray(users) ? users.length > 0 : null;
  } catch {
    return null;
  }
}
