/**
 * The OIDC verifier (src/control/oidc.ts) against a local JWKS endpoint and file, with tokens signed by jose: what
 * it accepts (RS256, ES256, HS256 with a secret), what it refuses and why (issuer, audience, expiry, nbf, unknown
 * kid, bad signature, alg none, HMAC without a secret), the claims it maps, the rate limit on JWKS fetches, an IdP
 * that is down; and AccessControl.bearer on top (unknown namespace, throttle, password and token routing).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SignJWT, UnsecuredJWT } from 'jose';
import { OidcVerifier, looksLikeJwt, type OidcOptions } from '../../src/control/oidc.js';
import { makeKey, TestIdp, type IdpKey } from './oidc-idp.js';

let idp: TestIdp;
let rsa: IdpKey;
let ec: IdpKey;
let stranger: IdpKey;
let dir: string;

before(async () => {
  idp = await new TestIdp().start();
  rsa = await makeKey('rsa-1', 'RS256');
  ec = await makeKey('ec-1', 'ES256');
  stranger = await makeKey('rsa-1', 'RS256'); // same kid as the published key, another key: a bad signature
  idp.published = [rsa, ec];
  dir = mkdtempSync(join(tmpdir(), 'flowmq-oidc-'));
});
after(async () => {
  await idp.stop();
  rmSync(dir, { recursive: true, force: true });
});

function verifier(o: Partial<OidcOptions> = {}): OidcVerifier {
  return new OidcVerifier({
    issuer: idp.issuer,
    audience: idp.audience,
    jwksUrl: idp.url,
    jwksFile: null,
    groupsClaim: 'groups',
    namespaceClaim: 'flowmq_ns',
    ...o,
  });
}

async function reason(v: OidcVerifier, token: string): Promise<string> {
  const r = await v.verify(token);
  assert.equal(r.verdict, 'bad', `expected a refusal, got ${JSON.stringify(r)}`);
  return (r as { reason: string }).reason;
}

describe('OidcVerifier', () => {
  it('accepts RS256 and ES256 tokens and maps sub, groups, namespace and exp', async () => {
    const v = verifier();
    const t = await idp.sign(rsa, { sub: 'alice', groups: ['ops', 'devs'], flowmq_ns: 'team-a' }, 120);
    const r = await v.verify(t);
    assert.equal(r.verdict, 'ok');
    const id = (r as { identity: { user: string; groups: string[]; namespace: string; expiresAt: number } }).identity;
    assert.equal(id.user, 'alice');
    assert.deepEqual(id.groups, ['ops', 'devs']);
    assert.equal(id.namespace, 'team-a');
    assert.ok(Math.abs(id.expiresAt - (Date.now() + 120_000)) < 5000, `expiresAt ${id.expiresAt}`);
    const e = await v.verify(await idp.sign(ec, { sub: 'bob', groups: 'a b,c' }));
    assert.equal(e.verdict, 'ok');
    assert.deepEqual((e as { identity: { groups: string[]; namespace: string } }).identity.groups, ['a', 'b', 'c']);
    assert.equal((e as { identity: { namespace: string } }).identity.namespace, 'default');
  });

  it('refuses a wrong issuer, a wrong audience, an expired token and a token not yet valid', async () => {
    const v = verifier({ clockSkewMs: 5000 });
    assert.match(await reason(v, await idp.sign(rsa, { sub: 'a', iss: 'https://evil.example/' })), /iss/);
    assert.match(await reason(v, await idp.sign(rsa, { sub: 'a', aud: 'someone-else' })), /aud/);
    assert.match(await reason(v, await idp.sign(rsa, { sub: 'a' }, -60)), /expired/);
    // Within the clock skew an expired token still passes; beyond it, not.
    assert.equal((await v.verify(await idp.sign(rsa, { sub: 'a' }, -2))).verdict, 'ok');
    assert.match(await reason(v, await idp.sign(rsa, { sub: 'a', nbf: Math.floor(Date.now() / 1000) + 60 })), /nbf/);
    assert.match(await reason(v, await idp.sign(rsa, { sub: 'a', exp: undefined })), /exp/);
  });

  it('refuses a bad signature, an unknown kid, alg none and HMAC without a shared secret', async () => {
    const v = verifier();
    assert.equal(await reason(v, await idp.sign(stranger, { sub: 'a' })), 'bad signature');
    const unknown = await makeKey('rotated-later', 'RS256');
    assert.match(await reason(v, await idp.sign(unknown, { sub: 'a' })), /unknown kid/);
    const now = Math.floor(Date.now() / 1000);
    const none = new UnsecuredJWT({ sub: 'a', iss: idp.issuer, aud: idp.audience, exp: now + 60 }).encode();
    assert.equal(looksLikeJwt(none), true); // goes to the verifier (not to a password check), which refuses it
    assert.equal((await v.verify(none)).verdict, 'bad');
    const secret = new TextEncoder().encode('s3cret-s3cret-s3cret-s3cret-s3cret');
    const hs = await new SignJWT({ sub: 'a', iss: idp.issuer, aud: idp.audience, exp: now + 60 }).setProtectedHeader({ alg: 'HS256' }).sign(secret);
    assert.equal(await reason(v, hs), 'algorithm not accepted');
    const withSecret = verifier({ hmacSecret: 's3cret-s3cret-s3cret-s3cret-s3cret' });
    assert.equal((await withSecret.verify(hs)).verdict, 'ok');
    assert.equal(looksLikeJwt('not.a.jwt'), false);
    assert.equal(await reason(v, 'eyJhbGciOiJSUzI1NiJ9.e30.AAAA'), 'bad signature');
  });

  it('fetches the JWKS once, again for an unknown kid, and not again within the cooldown', async () => {
    const v = verifier({ refreshCooldownMs: 60_000 });
    const before = idp.fetches;
    assert.equal((await v.verify(await idp.sign(rsa, { sub: 'a' }))).verdict, 'ok');
    assert.equal((await v.verify(await idp.sign(ec, { sub: 'a' }))).verdict, 'ok');
    assert.equal(idp.fetches - before, 1, 'one fetch for two tokens of known kids');
    // Random kids from a stranger: each would be a refetch without the rate limit.
    for (let i = 0; i < 5; i++) {
      const k = await makeKey(`random-${i}`, 'ES256');
      assert.match(await reason(v, await idp.sign(k, { sub: 'x' })), /unknown kid/);
    }
    assert.ok(idp.fetches - before <= 2, `at most one refetch within the cooldown, saw ${idp.fetches - before - 1}`);
  });

  it('picks up a rotated key on an unknown kid once the cooldown has passed', async () => {
    const v = verifier({ refreshCooldownMs: 0 });
    assert.equal((await v.verify(await idp.sign(rsa, { sub: 'a' }))).verdict, 'ok');
    const next = await makeKey('rsa-2', 'RS256');
    idp.published = [rsa, ec, next];
    try {
      assert.equal((await v.verify(await idp.sign(next, { sub: 'a' }))).verdict, 'ok');
    } finally {
      idp.published = [rsa, ec];
    }
  });

  it('reads the JWKS from a file, and again on an unknown kid', async () => {
    const file = join(dir, 'jwks.json');
    writeFileSync(file, JSON.stringify({ keys: [rsa.jwk] }));
    const v = verifier({ jwksUrl: null, jwksFile: file, refreshCooldownMs: 0 });
    assert.equal((await v.verify(await idp.sign(rsa, { sub: 'a' }))).verdict, 'ok');
    assert.match(await reason(v, await idp.sign(ec, { sub: 'a' })), /unknown kid/);
    writeFileSync(file, JSON.stringify({ keys: [rsa.jwk, ec.jwk] }));
    assert.equal((await v.verify(await idp.sign(ec, { sub: 'a' }))).verdict, 'ok');
  });

  it('maps claims: another username claim, admin groups, a bad groups claim, and caps the session', async () => {
    const v = verifier({ usernameClaim: 'email', adminGroups: ['platform-admins'], maxSessionMs: 10_000 });
    const r = await v.verify(await idp.sign(rsa, { sub: 'x1', email: 'carol@example.com', groups: ['platform-admins'] }, 3600));
    assert.equal(r.verdict, 'ok');
    const id = (r as { identity: { user: string; groups: string[]; expiresAt: number } }).identity;
    assert.equal(id.user, 'carol@example.com');
    assert.deepEqual(id.groups, ['platform-admins', 'admins']);
    assert.ok(id.expiresAt <= Date.now() + 10_000, 'the session is capped by maxSessionMs');
    assert.match(await reason(v, await idp.sign(rsa, { sub: 'x1' })), /email/);
    assert.match(await reason(v, await idp.sign(rsa, { email: 'c@d', groups: [1, 2] })), /groups/);
  });

  it('answers busy, not bad, while the JWKS cannot be fetched', async () => {
    const down = new TestIdp();
    await down.start();
    const url = down.url;
    await down.stop();
    const v = verifier({ jwksUrl: url, fetchTimeoutMs: 1000 });
    const r = await v.verify(await idp.sign(rsa, { sub: 'a' }));
    assert.equal(r.verdict, 'busy');
    assert.equal(v.stats.jwksErrors, 1);
  });
});

describe('AccessControl with OIDC', () => {
  async function setup() {
    const { AccessControl, Directory, PasswordGuard } = await import('../../src/control/index.js');
    const { MemoryControlStore } = await import('../../src/storage/metastore/control-store.js');
    const store = new MemoryControlStore();
    let guard!: InstanceType<typeof PasswordGuard>;
    const directory = await Directory.open({ store, hasher: (p) => guard.verifier.hash(p) });
    guard = new PasswordGuard(directory, { verifier: { scrypt: { N: 1024, r: 8, p: 1 } } });
    const ac = new AccessControl({ directory, guard, anonymous: new Set(), oidc: verifier() });
    return { directory, guard, ac };
  }

  it('takes a JWT as a password or a token, with the claims as the principal; refuses an unknown namespace', async () => {
    const { directory, guard, ac } = await setup();
    try {
      assert.equal(ac.hasUsers, true, 'with OIDC, credentials are checked even while the directory is empty');
      await directory.putNamespace({ name: 'team-a' });
      const t = await idp.sign(rsa, { sub: 'dave', groups: ['ops'], flowmq_ns: 'team-a' });
      const p = await ac.password('anything', Buffer.from(t), '10.0.0.1', 'mqtt');
      assert.ok(p.verdict === 'ok');
      const principal = p.principal;
      assert.deepEqual([principal.user, principal.groups, principal.namespace], ['dave', ['ops'], 'team-a']);
      assert.ok(principal.expiresAt !== undefined);
      assert.equal((await ac.token(t, '10.0.0.1', 'nats')).verdict, 'ok');
      // The principal stays the token's on an open connection when the directory changes (no `removed` user).
      const access = ac.accessFor(principal, 'mqtt');
      await directory.addUser({ username: 'someone', password: 'pw' });
      assert.equal(access.principal.user, 'dave');
      assert.equal(access.principal.removed, undefined);
      assert.deepEqual(access.principal.groups, ['ops']);
      const other = await idp.sign(rsa, { sub: 'dave', flowmq_ns: 'team-zz' });
      assert.equal((await ac.bearer(other, '10.0.0.1', 'kafka')).verdict, 'bad');
      // A password that is no JWT still goes to the directory.
      assert.equal((await ac.password('someone', 'pw', '10.0.0.2', 'mqtt')).verdict, 'ok');
      // Refusals count in the password guard's throttle: per address, and per the user the token claims.
      const stale = await idp.sign(rsa, { sub: 'victim' }, -60);
      for (let i = 0; i < 2; i++) assert.equal((await ac.bearer(stale, '10.0.0.9', 'kafka')).verdict, 'bad');
      assert.equal(guard.throttle.failures('address', '10.0.0.9'), 2);
      assert.equal(guard.throttle.failures('user', '(jwt)victim'), 2);
      assert.equal(guard.throttle.failures('user', '(jwt)'), 0, 'not in a bucket every token user shares');
    } finally {
      await guard.close();
      ac.close();
    }
  });
});

describe('OIDC configuration', () => {
  it('reads the oidc-* options from flags and the environment, and refuses an issuer without keys', async () => {
    const { loadConfig } = await import('../../src/config/index.js');
    const c = loadConfig({
      flags: { 'oidc-issuer': 'https://idp.example/', 'oidc-jwks-url': 'https://idp.example/jwks', 'oidc-clock-skew': '0s' },
      env: { FLOWMQ_OIDC_NAMESPACE_CLAIM: 'tenant', FLOWMQ_OIDC_MAX_SESSION: '15m' },
    });
    assert.equal(c.oidcIssuer, 'https://idp.example/');
    assert.equal(c.oidcJwksUrl, 'https://idp.example/jwks');
    assert.equal(c.oidcUsernameClaim, 'sub');
    assert.equal(c.oidcGroupsClaim, 'groups');
    assert.equal(c.oidcNamespaceClaim, 'tenant');
    assert.equal(c.oidcClockSkew, 0);
    assert.equal(c.oidcMaxSession, 900_000);
    assert.equal(c.oidcJwksRefresh, 30_000);
    assert.throws(
      () => loadConfig({ flags: { 'oidc-issuer': 'https://idp.example/' } }),
      /oidc-issuer needs oidc-jwks-url, oidc-jwks-file or oidc-hmac-secret/,
    );
    assert.throws(() => loadConfig({ flags: { 'oidc-jwks-file': '/tmp/jwks.json' } }), /need oidc-issuer/);
    assert.throws(() => loadConfig({ flags: { 'oidc-issuer': 'x', 'oidc-jwks-url': 'ftp://idp/jwks' } }), /http/);
  });
});
