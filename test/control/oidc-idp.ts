/**
 * A test identity provider: key pairs made by jose, their public halves served as a JWKS by a node:http server
 * (counting the fetches), and tokens signed with them. Used by the verifier's unit tests and the OIDC e2e.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';

export interface IdpKey {
  kid: string;
  alg: 'RS256' | 'ES256';
  privateKey: CryptoKey;
  jwk: JWK;
}

export async function makeKey(kid: string, alg: 'RS256' | 'ES256'): Promise<IdpKey> {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true });
  const jwk = { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' };
  return { kid, alg, privateKey, jwk };
}

export class TestIdp {
  readonly issuer = 'https://idp.test.example/';
  readonly audience = 'flowmq';
  /** Keys published in the JWKS (a key may sign without being published: the unknown-kid case). */
  published: IdpKey[] = [];
  fetches = 0;
  private server: Server | null = null;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      if (req.url !== '/jwks.json') {
        res.writeHead(404).end();
        return;
      }
      this.fetches++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(this.jwks()));
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/jwks.json`;
    return this;
  }

  jwks(): { keys: JWK[] } {
    return { keys: this.published.map((k) => k.jwk) };
  }

  /**
   * A token signed by `key` with the IdP's issuer and audience, expiring in `ttlSec` (negative: already expired);
   * `claims` override or add (`iss: undefined` removes one).
   */
  async sign(key: IdpKey, claims: JWTPayload = {}, ttlSec = 300): Promise<string> {
    const now = Math.floor(Date.now() / 1000);
    const payload: JWTPayload = { iss: this.issuer, aud: this.audience, iat: now, exp: now + ttlSec, ...claims };
    for (const [k, v] of Object.entries(payload)) if (v === undefined) delete payload[k];
    return new SignJWT(payload).setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'JWT' }).sign(key.privateKey);
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.server = null;
  }
}
