/**
 * What the NATS port bound at the start of `flowmq start` announces before the broker is up (early-nats-info.ts):
 * auth_required by the same rule as the broker's (anonymous settings, token, operator, users file, users stored in the
 * embedded metastore), TLS as the listener's, and no early INFO where it cannot be told (PostgreSQL metastore with no
 * anonymous setting, TLS handshake first). The e2e test (nats-early-listen) checks the INFO on the wire.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/config/index.js';
import { earlyNatsInfo } from '../../src/cli/early-nats-info.js';
import { SqliteMetastore } from '../../src/storage/metastore/sqlite.js';
import { SQLITE_METASTORE_FILE, sqliteHasUsers } from '../../src/storage/metastore/sqlite-peek.js';

describe('early NATS INFO from the configuration', () => {
  let dir: string;
  let empty: string;
  let withUser: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-early-info-'));
    empty = join(dir, 'empty');
    withUser = join(dir, 'with-user');
    // A metastore that exists but holds no user, and one with a user, written as the broker writes them.
    const a = SqliteMetastore.open(join(empty, SQLITE_METASTORE_FILE));
    await a.putControl('policy', 'p', { effect: 'allow' });
    await a.close();
    const b = SqliteMetastore.open(join(withUser, SQLITE_METASTORE_FILE));
    await b.putControl('user', 'alice', { groups: [] });
    await b.close();
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const info = (flags: Record<string, string>) => earlyNatsInfo(loadConfig({ flags, env: {} }));
  const authRequired = (flags: Record<string, string>) => info(flags)?.settings.authRequired;

  it('the metastore peek: no file, no user, a user', () => {
    assert.equal(sqliteHasUsers(join(dir, 'none')), false);
    assert.equal(sqliteHasUsers(empty), false);
    assert.equal(sqliteHasUsers(withUser), true);
  });

  it('anonymous while no user is stored (the default), auth_required once one is', () => {
    assert.equal(authRequired({ 'data-dir': join(dir, 'none') }), false);
    assert.equal(authRequired({ 'data-dir': empty }), false);
    assert.equal(authRequired({ 'data-dir': withUser }), true);
  });

  it('the anonymous settings, a token, an operator and an external authenticator decide before stored users', () => {
    assert.equal(authRequired({ 'data-dir': withUser, 'allow-anonymous': 'true' }), false);
    assert.equal(authRequired({ 'data-dir': empty, 'allow-anonymous': 'false' }), true);
    assert.equal(authRequired({ 'data-dir': withUser, 'anonymous-protocols': 'nats' }), false);
    assert.equal(authRequired({ 'data-dir': empty, 'anonymous-protocols': 'mqtt' }), true);
    assert.equal(authRequired({ 'data-dir': empty, 'allow-anonymous': 'true', 'nats-token': 'secret' }), true);
    assert.equal(authRequired({ 'data-dir': empty, 'auth-webhook': 'http://127.0.0.1:1/auth' }), true);
  });

  it('a users file with users requires auth; an empty one does not', () => {
    const listed = join(dir, 'users.yaml');
    writeFileSync(listed, 'users:\n  - username: bob\n    password: bob-pw\n');
    const none = join(dir, 'none.yaml');
    writeFileSync(none, 'users: []\n');
    assert.equal(authRequired({ 'data-dir': empty, 'users-file': listed }), true);
    assert.equal(authRequired({ 'data-dir': empty, 'users-file': none }), false);
  });

  it('TLS as the listener announces it; the other fields from the configuration', () => {
    const base = { 'data-dir': empty, 'nats-tls-cert': join(dir, 'c.pem'), 'nats-tls-key': join(dir, 'k.pem') };
    assert.deepEqual(info(base)?.tls, { available: true, required: false });
    assert.deepEqual(info({ ...base, 'nats-tls-required': 'true' })?.tls, { available: true, required: true });
    const plain = info({ 'data-dir': empty, 'broker-id': '7', 'nats-max-payload': '65536', 'nats-jetstream': 'false', 'nats-auth-timeout': '3s' });
    assert.deepEqual(plain, {
      settings: { serverName: 'flowmq-7', maxPayload: 65536, authRequired: false, jetstream: false },
      tls: { available: false, required: false },
      authTimeoutMs: 3000,
    });
  });

  it('no early INFO where it cannot be told: TLS handshake first, a PostgreSQL metastore without an anonymous setting', () => {
    const tls = { 'data-dir': empty, 'nats-tls-cert': join(dir, 'c.pem'), 'nats-tls-key': join(dir, 'k.pem') };
    assert.equal(info({ ...tls, 'nats-tls-handshake-first': 'true' }), null);
    assert.equal(info({ metastore: 'postgres://u:p@127.0.0.1:1/db' }), null);
    assert.equal(authRequired({ metastore: 'postgres://u:p@127.0.0.1:1/db', 'allow-anonymous': 'false' }), true);
  });
});
