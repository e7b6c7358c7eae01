/**
 * SASL servers over the user store: SCRAM-SHA-256 against the RFC 7677 section 3 example exchange, SCRAM-SHA-512
 * against values computed here step by step from RFC 5802 section 3, PLAIN (RFC 4616), the failure branches,
 * and the users file.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, createHmac, pbkdf2Sync } from 'node:crypto';
import {
  DUMMY_PASSWORD_HASH,
  MemoryUserStore,
  PasswordGuard,
  deriveScramCredential,
  passwordAuthenticator,
  saslProvider,
  startSaslExchange,
  type SaslStepResult,
  type ScramCredential,
  type ScramMechanism,
  type UserStore,
} from '../../src/control/index.js';

/** A store holding one user whose SCRAM credential has a fixed salt (to replay published exchanges). */
async function fixedStore(mechanism: ScramMechanism, username: string, password: string, salt: Buffer, iterations: number): Promise<UserStore> {
  const cred: ScramCredential = await deriveScramCredential(mechanism, password, salt, iterations);
  return {
    size: 1,
    lookup: (u) => (u === username ? { username, scram: (m) => (m === mechanism ? cred : undefined), passwordHash: DUMMY_PASSWORD_HASH } : undefined),
  };
}

function challenge(r: SaslStepResult): string {
  assert.notEqual(r.state, 'failed', JSON.stringify(r));
  return r.state === 'failed' ? '' : r.challenge.toString('utf8');
}

const b = (s: string) => Buffer.from(s, 'utf8');

/** Every password check goes through a guard; their worker threads are ended after the file's tests. */
const guards: PasswordGuard[] = [];
function guarded(store: UserStore): PasswordGuard {
  const g = new PasswordGuard(store);
  guards.push(g);
  return g;
}
after(() => Promise.all(guards.map((g) => g.close())));

describe('SCRAM-SHA-256 (RFC 7677 section 3)', () => {
  const salt = Buffer.from('W22ZaJ0SNY7soEsUEjb6gQ==', 'base64');
  const snonce = '%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0';
  const first = 'n,,n=user,r=rOprNGfwEbeRWgbNEkqO';
  const serverFirst = 'r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096';
  const final = 'c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=';

  it('answers the example exchange byte for byte', async () => {
    const store = await fixedStore('SCRAM-SHA-256', 'user', 'pencil', salt, 4096);
    const ex = startSaslExchange(guarded(store), 'SCRAM-SHA-256', undefined, { nonce: () => snonce });
    assert.equal(challenge(await ex.step(b(first))), serverFirst);
    const done = await ex.step(b(final));
    assert.equal(done.state, 'done');
    assert.equal(challenge(done), 'v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=');
    assert.equal(done.state === 'done' && done.principal, 'user');
    assert.equal((await ex.step(b(final))).state, 'failed', 'no step after the end');
  });

  it('refuses a wrong proof, a changed nonce, channel binding and a malformed first message', async () => {
    const store = await fixedStore('SCRAM-SHA-256', 'user', 'pencil', salt, 4096);
    const wrongProof = startSaslExchange(guarded(store), 'SCRAM-SHA-256', undefined, { nonce: () => snonce });
    challenge(await wrongProof.step(b(first)));
    const bad = await wrongProof.step(b(final.replace('p=dHzb', 'p=dHzc')));
    assert.deepEqual(bad.state === 'failed' && [bad.reason, bad.username], ['invalid username or password', 'user']);

    const otherNonce = startSaslExchange(guarded(store), 'SCRAM-SHA-256', undefined, { nonce: () => snonce });
    challenge(await otherNonce.step(b(first)));
    const n = await otherNonce.step(b(final.replace('NEkqO%', 'NEkqX%')));
    assert.equal(n.state === 'failed' && n.reason, 'SCRAM nonce mismatch');

    const cb = startSaslExchange(guarded(store), 'SCRAM-SHA-256');
    const r = await cb.step(b('p=tls-unique,,n=user,r=abc'));
    assert.equal(r.state === 'failed' && r.reason, 'SCRAM channel binding is not supported');

    const gs2 = startSaslExchange(guarded(store), 'SCRAM-SHA-256', undefined, { nonce: () => snonce });
    challenge(await gs2.step(b(first)));
    // c= must be base64("n,,") = "biws"; another header is a downgrade attempt.
    const c = await gs2.step(b(final.replace('c=biws', 'c=eSws')));
    assert.equal(c.state === 'failed' && c.reason, 'SCRAM channel binding mismatch');

    for (const msg of ['n,,r=abc,n=user', 'x,,n=user,r=abc', 'n,,n=us=er,r=abc', 'n,,n=user,r=a,b']) {
      const ex = startSaslExchange(guarded(store), 'SCRAM-SHA-256');
      assert.equal((await ex.step(b(msg))).state, 'failed', msg);
    }
  });

  it('an unknown user gets a stable fake salt and fails only at the proof', async () => {
    const store = await fixedStore('SCRAM-SHA-256', 'user', 'pencil', salt, 4096);
    const secret = Buffer.alloc(32, 7);
    const s1 = challenge(
      await startSaslExchange(guarded(store), 'SCRAM-SHA-256', undefined, { fakeSaltSecret: secret, nonce: () => 'x' }).step(b('n,,n=ghost,r=abc')),
    );
    const s2 = challenge(
      await startSaslExchange(guarded(store), 'SCRAM-SHA-256', undefined, { fakeSaltSecret: secret, nonce: () => 'x' }).step(b('n,,n=ghost,r=abc')),
    );
    assert.equal(s1, s2);
    assert.match(s1, /^r=abcx,s=[A-Za-z0-9+/=]+,i=4096$/);
    const ex = startSaslExchange(guarded(store), 'SCRAM-SHA-256', undefined, { fakeSaltSecret: secret, nonce: () => 'x' });
    challenge(await ex.step(b('n,,n=ghost,r=abc')));
    const r = await ex.step(b('c=biws,r=abcx,p=' + Buffer.alloc(32).toString('base64')));
    assert.equal(r.state === 'failed' && r.reason, 'unknown user');
  });

  it('counts a wrong proof in the guard (per address and user), for known and unknown users, with no scrypt or PBKDF2', async () => {
    const store = await fixedStore('SCRAM-SHA-256', 'user', 'pencil', salt, 4096);
    const g = guarded(store);
    for (const name of ['user', 'ghost']) {
      const ex = startSaslExchange(g, 'SCRAM-SHA-256', '10.9.9.9', { nonce: () => 'x' });
      challenge(await ex.step(b(`n,,n=${name},r=abc`)));
      assert.equal((await ex.step(b('c=biws,r=abcx,p=' + Buffer.alloc(32).toString('base64')))).state, 'failed');
    }
    assert.equal(g.throttle.failures('address', '10.9.9.9'), 2);
    assert.equal(g.throttle.failures('user', 'user'), 1);
    assert.equal(g.throttle.failures('user', 'ghost'), 1);
    // The proof check is HMACs over keys derived at load: the guard's scrypt thread never started.
    assert.equal(g.verifier.stats.workersStarted, 0);
    const ok = startSaslExchange(g, 'SCRAM-SHA-256', '10.9.9.9', { nonce: () => snonce });
    challenge(await ok.step(b(first)));
    assert.equal((await ok.step(b(final))).state, 'done');
    assert.equal(g.throttle.failures('address', '10.9.9.9'), 0, 'a success resets the address');
  });
});

describe('SCRAM-SHA-512 (computed from RFC 5802 section 3)', () => {
  it('verifies a client proof and returns the server signature', async () => {
    const salt = Buffer.from('0123456789abcdef');
    const password = 'secret-512';
    const store = await fixedStore('SCRAM-SHA-512', 'al=ice,x', password, salt, 4096);
    // The client side, written out independently of the server code.
    const salted = pbkdf2Sync(password, salt, 4096, 64, 'sha512');
    const clientKey = createHmac('sha512', salted).update('Client Key').digest();
    const storedKey = createHash('sha512').update(clientKey).digest();
    const serverKey = createHmac('sha512', salted).update('Server Key').digest();
    // ',' and '=' in a username travel as =2C and =3D (RFC 5802 section 5.1).
    const bare = 'n=al=3Dice=2Cx,r=clientNONCE';
    const ex = startSaslExchange(guarded(store), 'SCRAM-SHA-512', undefined, { nonce: () => 'serverNONCE' });
    const sf = challenge(await ex.step(b(`n,,${bare}`)));
    assert.equal(sf, `r=clientNONCEserverNONCE,s=${salt.toString('base64')},i=4096`);
    const withoutProof = 'c=biws,r=clientNONCEserverNONCE';
    const authMessage = `${bare},${sf},${withoutProof}`;
    const sig = createHmac('sha512', storedKey).update(authMessage).digest();
    const proof = Buffer.from(clientKey.map((x, i) => x ^ sig[i]));
    const done = await ex.step(b(`${withoutProof},p=${proof.toString('base64')}`));
    assert.equal(done.state, 'done');
    assert.equal(done.state === 'done' && done.principal, 'al=ice,x');
    const expected = createHmac('sha512', serverKey).update(authMessage).digest().toString('base64');
    assert.equal(challenge(done), `v=${expected}`);
  });
});

describe('PLAIN (RFC 4616) and password checks over a MemoryUserStore', () => {
  it('accepts the right password, refuses everything else', async () => {
    const store = await MemoryUserStore.fromPasswords([{ username: 'alice', password: 'wonderland' }]);
    const plain = async (msg: string) => startSaslExchange(guarded(store), 'PLAIN').step(b(msg));
    const ok = await plain('\0alice\0wonderland');
    assert.deepEqual(ok.state === 'done' && [ok.principal, ok.challenge.length], ['alice', 0]);
    assert.equal((await plain('alice\0alice\0wonderland')).state, 'done', 'authzid = own name is fine');
    for (const msg of ['\0alice\0wrong', '\0bob\0wonderland', 'bob\0alice\0wonderland', 'alice wonderland', '\0alice\0wonder\0land', '\0\0x']) {
      assert.equal((await plain(msg)).state, 'failed', JSON.stringify(msg));
    }
    const check = passwordAuthenticator(guarded(store), false);
    assert.equal(await check('c', 'alice', b('wonderland')), 'ok');
    assert.equal(await check('c', 'alice', b('nope')), 'bad-credentials');
    assert.equal(await check('c', 'alice', null), 'bad-credentials');
    assert.equal(await check('c', 'mallory', b('wonderland')), 'bad-credentials');
    assert.equal(await check('c', null, null), 'not-authorized');
    assert.equal(await passwordAuthenticator(guarded(store), true)('c', null, null), 'ok');
  });

  it('keeps no password: the record holds salts and derived keys only', async () => {
    const store = await MemoryUserStore.fromPasswords([{ username: 'alice', password: 'wonderland-pw' }]);
    const seen = JSON.stringify(store, (_k, v: unknown) => (v instanceof Map ? [...v.entries()] : v));
    assert.ok(!seen.includes('wonderland-pw'), 'the clear-text password must not be stored');
    const cred = store.lookup('alice')?.scram('SCRAM-SHA-512');
    assert.equal(cred?.iterations, 4096);
    assert.equal(cred?.storedKey.length, 64);
  });

  it('saslProvider offers only the configured mechanisms', async () => {
    const store = await MemoryUserStore.fromPasswords([{ username: 'a', password: 'b' }]);
    const p = saslProvider(guarded(store), ['SCRAM-SHA-512']);
    assert.deepEqual(p.mechanisms, ['SCRAM-SHA-512']);
    assert.equal((await p.start('PLAIN').step(b('\0a\0b'))).state, 'failed');
  });
});
