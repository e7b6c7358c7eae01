/**
 * SASL OAUTHBEARER (RFC 7628) and KIP-368 re-authentication on a Kafka listener, byte level, over the control
 * plane with an OIDC verifier and a local JWKS endpoint: the GS2 message, the session lifetime answered, the RFC 7628
 * error challenge for a refused token, malformed messages, re-authentication as the same user (accepted) or another
 * (refused and closed), PLAIN sessions that cannot re-authenticate, and a session closed once it outlives its token.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Engine } from '../../../src/core/index.js';
import { AccessControl, Directory, PasswordGuard } from '../../../src/control/index.js';
import { OidcVerifier } from '../../../src/control/oidc.js';
import { MemoryControlStore } from '../../../src/storage/metastore/control-store.js';
import { createKafkaAdapter, startKafkaListener } from '../../../src/protocols/kafka/index.js';
import { accessSaslProvider } from '../../../src/protocols/kafka/auth.js';
import { KafkaErrorCode as E, MetadataApi, SaslAuthenticateApi, SaslHandshakeApi } from '../../../src/protocols/kafka/codec/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { makeKey, TestIdp, type IdpKey } from '../../control/oidc-idp.js';
import { RawClient, captureLogger, metadataRequest as md, type CapturedLog } from './helpers.js';

const bearer = (jwt: string, authzid = '') => Buffer.from(`n,${authzid === '' ? '' : `a=${authzid}`},\x01auth=Bearer ${jwt}\x01\x01`, 'utf8');

describe('kafka SASL OAUTHBEARER and KIP-368', () => {
  let idp: TestIdp;
  let key: IdpKey;
  let log: CapturedLog;
  let guard: PasswordGuard;
  let access: AccessControl;
  let listener: ProtocolListener;

  before(async () => {
    idp = await new TestIdp().start();
    key = await makeKey('k1', 'ES256');
    idp.published = [key];
    const store = new MemoryControlStore();
    const directory = await Directory.open({ store, hasher: (p) => guard.verifier.hash(p) });
    guard = new PasswordGuard(directory, { verifier: { scrypt: { N: 1024, r: 8, p: 1 } } });
    await directory.addUser({ username: 'pat', password: 'pat-pw' });
    const oidc = new OidcVerifier({ issuer: idp.issuer, audience: idp.audience, jwksUrl: idp.url, jwksFile: null, clockSkewMs: 0 });
    access = new AccessControl({ directory, guard, anonymous: new Set(), oidc });
    const m = new MemoryStreams();
    log = captureLogger();
    const ctx = { engine: new Engine(m, m), logger: log.logger, brokerId: 1 };
    const adapter = createKafkaAdapter(ctx, { sasl: accessSaslProvider(access, ['PLAIN']), access, anonymous: false });
    listener = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0, sasl: true }, {}, adapter);
  });

  after(async () => {
    await listener.close();
    await guard.close();
    access.close();
    await idp.stop();
  });

  async function login(jwt: string, authzid = ''): Promise<{ c: RawClient; lifetime: bigint | number; errorCode: number; authBytes: Buffer }> {
    const c = await RawClient.connect(listener.address().port);
    const hs = await c.call(SaslHandshakeApi, 1, { mechanism: 'OAUTHBEARER' });
    assert.equal(hs.errorCode, E.NONE);
    assert.ok(hs.mechanisms.includes('OAUTHBEARER') && hs.mechanisms.includes('PLAIN'), hs.mechanisms.join());
    const r = await c.call(SaslAuthenticateApi, 1, { authBytes: bearer(jwt, authzid) });
    return { c, lifetime: r.sessionLifetimeMs, errorCode: r.errorCode, authBytes: r.authBytes };
  }

  it('logs in with a token; the session lifetime is the time to its expiry', async () => {
    const { c, lifetime, errorCode } = await login(await idp.sign(key, { sub: 'quinn' }, 60), 'quinn');
    try {
      assert.equal(errorCode, E.NONE);
      const ms = Number(lifetime);
      assert.ok(ms > 55_000 && ms <= 60_000, `session_lifetime_ms ${ms}`);
      const meta = await c.call(MetadataApi, 9, md([]));
      assert.ok(Array.isArray(meta.brokers));
    } finally {
      c.close();
    }
  });

  it('answers a refused token with the RFC 7628 error challenge, then fails the exchange and closes', async () => {
    const { c, errorCode, authBytes } = await login(await idp.sign(key, { sub: 'quinn', aud: 'other' }));
    assert.equal(errorCode, E.NONE);
    assert.deepEqual(JSON.parse(authBytes.toString()), { status: 'invalid_token' });
    const r = await c.call(SaslAuthenticateApi, 1, { authBytes: Buffer.from('\x01') });
    assert.equal(r.errorCode, E.SASL_AUTHENTICATION_FAILED);
    assert.equal(await c.closesWithin(2000), true);
    assert.ok(!log.lines.some((l) => l.includes('eyJ')), 'no token text in the logs');
  });

  it('fails a malformed message at once; an authorization id that is not the token user gets the error challenge', async () => {
    const good = await idp.sign(key, { sub: 'quinn' });
    for (const authBytes of [Buffer.from(`n,,auth=Bearer ${good}`), Buffer.from(`n,,\x01auth=Basic xyz\x01\x01`), Buffer.from('n,,\x01\x01')]) {
      const c = await RawClient.connect(listener.address().port);
      await c.call(SaslHandshakeApi, 1, { mechanism: 'OAUTHBEARER' });
      const r = await c.call(SaslAuthenticateApi, 1, { authBytes });
      assert.equal(r.errorCode, E.SASL_AUTHENTICATION_FAILED, authBytes.toString());
      assert.equal(await c.closesWithin(2000), true);
    }
    const { c, errorCode, authBytes } = await login(good, 'someone-else');
    assert.equal(errorCode, E.NONE);
    assert.deepEqual(JSON.parse(authBytes.toString()), { status: 'invalid_token' });
    c.close();
  });

  it('re-authenticates the same user on the live connection, and refuses becoming another', async () => {
    const { c, errorCode } = await login(await idp.sign(key, { sub: 'quinn' }, 30));
    try {
      assert.equal(errorCode, E.NONE);
      assert.equal((await c.call(SaslHandshakeApi, 1, { mechanism: 'OAUTHBEARER' })).errorCode, E.NONE);
      const again = await c.call(SaslAuthenticateApi, 1, { authBytes: bearer(await idp.sign(key, { sub: 'quinn' }, 120)) });
      assert.equal(again.errorCode, E.NONE);
      assert.ok(Number(again.sessionLifetimeMs) > 100_000, 'the new token sets the new lifetime');
      assert.ok(Array.isArray((await c.call(MetadataApi, 9, md([]))).brokers));
      // Another user's token on the same connection: refused, closed.
      assert.equal((await c.call(SaslHandshakeApi, 1, { mechanism: 'OAUTHBEARER' })).errorCode, E.NONE);
      const other = await c.call(SaslAuthenticateApi, 1, { authBytes: bearer(await idp.sign(key, { sub: 'mallory' }, 120)) });
      assert.equal(other.errorCode, E.SASL_AUTHENTICATION_FAILED);
      assert.equal(await c.closesWithin(2000), true);
    } finally {
      c.close();
    }
  });

  it('a PLAIN session has no lifetime and cannot re-authenticate', async () => {
    const c = await RawClient.connect(listener.address().port);
    try {
      await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
      const r = await c.call(SaslAuthenticateApi, 1, { authBytes: Buffer.from('\0pat\0pat-pw') });
      assert.equal(r.errorCode, E.NONE);
      assert.equal(Number(r.sessionLifetimeMs), 0);
      assert.equal((await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' })).errorCode, E.ILLEGAL_SASL_STATE);
    } finally {
      c.close();
    }
  });

  it('PLAIN with a token as the password logs in as the token user, never as the username typed beside it', async () => {
    const c = await RawClient.connect(listener.address().port);
    try {
      await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
      // "pat" is a directory user: the token of quinn must not make the connection pat.
      const jwt = await idp.sign(key, { sub: 'quinn' }, 60);
      const r = await c.call(SaslAuthenticateApi, 1, { authBytes: Buffer.from(`\0pat\0${jwt}`) });
      assert.equal(r.errorCode, E.NONE);
      assert.ok(Number(r.sessionLifetimeMs) > 50_000, 'the token gives the session its lifetime');
      const line = log.entries('SASL authentication succeeded').at(-1);
      assert.equal(line?.principal, 'quinn');
      assert.equal(line?.mechanism, 'PLAIN');
    } finally {
      c.close();
    }
  });

  it('closes a session that outlives its token without re-authenticating', async () => {
    // exp is in whole seconds: this token lives at most 2 s, and at least 1 s.
    const { c, errorCode, lifetime } = await login(await idp.sign(key, { sub: 'quinn' }, 2));
    assert.equal(errorCode, E.NONE);
    assert.ok(Number(lifetime) <= 2000);
    assert.equal(await c.closesWithin(Number(lifetime) + 3000), true);
    assert.ok(log.entries('SASL session expired without re-authentication: closing connection').length >= 1);
  });
});
