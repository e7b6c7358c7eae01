/**
 * NKeys (src/control/nkeys.ts): keys decoded by nkeys.js (prefix, length and CRC checked), ed25519 signatures checked
 * by node:crypto, agreeing with nkeys.js's own verify on what NATS clients send (base64url, or standard base64).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createAccount, createUser, fromPublic } from 'nkeys.js';
import { decodeSignature, parsePublicNkey, validateUserNkey, verifySignature } from '../../src/control/nkeys.js';

describe('NKeys', () => {
  it('parses public keys of the asked kind only, with their checksum', () => {
    const u = createUser().getPublicKey();
    assert.equal(parsePublicNkey(u, 'user')?.text, u);
    assert.equal(parsePublicNkey(u, 'account'), null);
    assert.equal(parsePublicNkey(createAccount().getPublicKey(), 'account')?.kind, 'account');
    // One letter changed: the CRC16 no longer matches.
    const bad = u.slice(0, 20) + (u[20] === 'A' ? 'B' : 'A') + u.slice(21);
    assert.equal(parsePublicNkey(bad, 'user'), null);
    assert.equal(parsePublicNkey(`${u}A`, 'user'), null);
    assert.throws(() => validateUserNkey(bad), /user public NKey/);
  });

  it("verifies what nkeys.js verifies: the key's signature of the data, base64url or standard base64", () => {
    const kp = createUser();
    const other = createUser();
    const key = parsePublicNkey(kp.getPublicKey(), 'user')!;
    for (let i = 0; i < 20; i++) {
      const data = Buffer.from(`nonce-${i}-${'x'.repeat(i)}`);
      const sig = kp.sign(data);
      assert.equal(verifySignature(key, data, Buffer.from(sig).toString('base64url')), true);
      assert.equal(verifySignature(key, data, Buffer.from(sig).toString('base64')), true);
      assert.equal(fromPublic(kp.getPublicKey()).verify(data, sig), true);
      assert.equal(verifySignature(key, Buffer.from(`${data.toString()}!`), sig), false);
      assert.equal(verifySignature(key, data, other.sign(data)), false);
    }
    assert.equal(verifySignature(key, Buffer.from('x'), undefined), false);
    assert.equal(decodeSignature('abc'), null);
    assert.equal(decodeSignature('!'.repeat(86)), null);
  });
});
