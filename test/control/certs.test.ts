/**
 * Client certificates (src/control/certs.ts) over real TLS connections on loopback: a CA made with openssl, client
 * certificates it signed (CN, e-mail and DNS subjectAltNames), one it did not sign, none at all; request and
 * require modes; the mapping to directory users.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, createServer, type Server, type TLSSocket } from 'node:tls';
import { certificateLogin, certificateUser, subjectAltNames, tlsClientOptions, type CertUserField } from '../../src/control/certs.js';
import { ANONYMOUS, type Principal } from '../../src/control/policy.js';
import { isFlowError } from '../../src/core/index.js';
import { loadConfig } from '../../src/config/index.js';
import { makeTestCa, makeTestCert, type TestCa, type TestCert } from '../e2e/harness.js';

let ca: TestCa;
let other: TestCa;
let serverCert: TestCert;
let alice: TestCert;
let device: TestCert;
let stranger: TestCert;

before(() => {
  ca = makeTestCa();
  other = makeTestCa();
  serverCert = makeTestCert();
  alice = ca.issue({ cn: 'alice' });
  device = ca.issue({ cn: 'dev-17', email: 'dev17@plant.example', dns: 'dev17.plant.example' });
  stranger = other.issue({ cn: 'alice' }); // the right name from the wrong CA
});

after(() => {
  for (const d of [ca.dir, other.dir, serverCert.dir]) rmSync(d, { recursive: true, force: true });
});

interface Outcome {
  /** The server's view: the username per field, or the handshake error. */
  users?: Record<CertUserField, string | null>;
  authorized?: boolean;
  serverError?: string;
}

/** One TLS server with the given client-auth mode; each connect answers what the server made of the client. */
async function withServer(mode: 'request' | 'require', fn: (tryClient: (cert?: TestCert) => Promise<Outcome>) => Promise<void>): Promise<void> {
  const server: Server = createServer({
    cert: readFileSync(serverCert.certPath),
    key: readFileSync(serverCert.keyPath),
    ...tlsClientOptions({ tlsClientCa: ca.certPath, tlsClientAuth: mode, tlsCertUser: 'cn' }),
  });
  let pending: ((o: Outcome) => void) | null = null;
  server.on('secureConnection', (s: TLSSocket) => {
    pending?.({
      authorized: s.authorized,
      users: { cn: certificateUser(s, 'cn'), 'san-email': certificateUser(s, 'san-email'), 'san-dns': certificateUser(s, 'san-dns') },
    });
    s.end();
  });
  server.on('tlsClientError', (err) => pending?.({ serverError: err.message }));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as { port: number }).port;
  try {
    await fn(async (cert) => {
      const seen = new Promise<Outcome>((r) => (pending = r));
      const c = connect({
        host: '127.0.0.1',
        port,
        servername: 'localhost',
        ca: serverCert.cert,
        ...(cert ? { cert: readFileSync(cert.certPath), key: readFileSync(cert.keyPath) } : {}),
      });
      c.on('error', () => undefined); // a refused handshake: the server's side is what the test checks
      c.resume();
      const o = await seen;
      c.destroy();
      return o;
    });
  } finally {
    server.close();
  }
}

describe('client certificates', () => {
  it('request mode: a certificate signed by the CA names the user; none, or a foreign one, names nobody but connects', async () => {
    await withServer('request', async (tryClient) => {
      assert.deepEqual(await tryClient(alice), { authorized: true, users: { cn: 'alice', 'san-email': null, 'san-dns': null } });
      assert.deepEqual(await tryClient(device), {
        authorized: true,
        users: { cn: 'dev-17', 'san-email': 'dev17@plant.example', 'san-dns': 'dev17.plant.example' },
      });
      assert.deepEqual(await tryClient(), { authorized: false, users: { cn: null, 'san-email': null, 'san-dns': null } });
      assert.deepEqual(await tryClient(stranger), { authorized: false, users: { cn: null, 'san-email': null, 'san-dns': null } }, 'not verified: not trusted');
    });
  });

  it('require mode: the handshake fails without a certificate signed by the CA', async () => {
    await withServer('require', async (tryClient) => {
      assert.equal((await tryClient(alice)).users?.cn, 'alice');
      assert.ok((await tryClient()).serverError, 'no certificate: refused');
      assert.ok((await tryClient(stranger)).serverError, 'a foreign CA: refused');
    });
  });

  it('certificateLogin maps to an existing directory user, refuses an unknown one, and gives nothing without a certificate', async () => {
    const principal = (u: string): Principal => ({ user: u, groups: ['ops'], namespace: 'default' });
    const users = new Set(['alice']);
    const access = { directory: { lookup: (u: string) => (users.has(u) ? {} : undefined) }, principal };
    const fake = (authorized: boolean, cn: string) => ({ authorized, getPeerCertificate: () => ({ subject: { CN: cn } }) }) as unknown as TLSSocket;
    assert.deepEqual(certificateLogin(access, fake(true, 'alice'), 'cn'), { verdict: 'ok', user: 'alice', principal: principal('alice') });
    assert.deepEqual(certificateLogin(access, fake(true, 'mallory'), 'cn'), { verdict: 'bad', user: 'mallory' });
    assert.equal(certificateLogin(access, fake(false, 'alice'), 'cn'), null);
    assert.notEqual(ANONYMOUS.user, 'alice');
  });

  it('parses subjectAltName text as Node renders it, quoted values included', () => {
    const text = 'DNS:a.example, email:x@y.example, IP Address:10.0.0.1, DNS:"b, c.example", email:z@y.example';
    assert.deepEqual(subjectAltNames(text, 'DNS'), ['a.example', 'b, c.example']);
    assert.deepEqual(subjectAltNames(text, 'email'), ['x@y.example', 'z@y.example']);
    assert.deepEqual(subjectAltNames(undefined, 'DNS'), []);
  });

  it('options: nothing without a CA; a missing or non-PEM CA file is a config error; require needs a CA', () => {
    assert.deepEqual(tlsClientOptions({ tlsClientCa: null, tlsClientAuth: 'request', tlsCertUser: 'cn' }), {});
    const o = tlsClientOptions({ tlsClientCa: ca.certPath, tlsClientAuth: 'require', tlsCertUser: 'cn' });
    assert.deepEqual([o.requestCert, o.rejectUnauthorized, o.ca?.length], [true, true, readFileSync(ca.certPath).length]);
    assert.throws(
      () => tlsClientOptions({ tlsClientCa: join(ca.dir, 'missing.pem'), tlsClientAuth: 'request', tlsCertUser: 'cn' }),
      (e) => isFlowError(e, 'CONFIG_ERROR'),
    );
    const junk = join(ca.dir, 'junk.pem');
    writeFileSync(junk, 'not a certificate');
    assert.throws(() => tlsClientOptions({ tlsClientCa: junk, tlsClientAuth: 'request', tlsCertUser: 'cn' }), /no PEM certificate/);
    const cfg = loadConfig({ flags: { 'tls-client-ca': ca.certPath, 'tls-cert-user': 'san-email' }, env: {} });
    assert.deepEqual([cfg.tlsClientCa, cfg.tlsClientAuth, cfg.tlsCertUser], [ca.certPath, 'request', 'san-email']);
    assert.throws(() => loadConfig({ flags: { 'tls-client-auth': 'require' }, env: {} }), /tls-client-auth require needs tls-client-ca/);
    assert.throws(() => loadConfig({ flags: { 'tls-cert-user': 'uid' }, env: {} }), /expected cn, san-email or san-dns/);
  });
});
