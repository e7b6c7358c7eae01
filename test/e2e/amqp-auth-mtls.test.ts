/**
 * AMQP over TLS with client certificates (--tls-client-ca): a verified certificate lets an amqplib client log in
 * with SASL EXTERNAL as the directory user its CN names (offered only when such a certificate was verified); a
 * certificate naming no user is refused like a wrong password; credentials sent with PLAIN win over it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqp from 'amqplib';
import { makeTestCa, makeTestCert, type FlowmqProcess, type TestCa, type TestCert } from './harness.js';
import { startAmqpBroker } from './amqp-helpers.js';

describe('e2e: AMQP EXTERNAL with client certificates', { timeout: 60_000 }, () => {
  let server: TestCert;
  let ca: TestCa;
  let dir: string;
  let broker: FlowmqProcess;
  before(async () => {
    server = makeTestCert('flowmq-amqps-mtls-');
    ca = makeTestCa('flowmq-amqps-ca-');
    dir = mkdtempSync(join(tmpdir(), 'flowmq-amqp-mtls-'));
    writeFileSync(join(dir, 'users.yaml'), 'users:\n  - {username: root, password: root-pw, groups: [admins]}\n  - {username: device-1, password: d1-pw}\n');
    broker = await startAmqpBroker([
      '--users-file',
      join(dir, 'users.yaml'),
      '--amqps-port',
      '0',
      '--amqp-tls-cert',
      server.certPath,
      '--amqp-tls-key',
      server.keyPath,
      '--tls-client-ca',
      ca.certPath,
    ]);
    broker.credentials = { username: 'root', password: 'root-pw' };
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    for (const d of [server.dir, ca.dir, dir]) rmSync(d, { recursive: true, force: true });
  });

  const tlsOpts = (c?: TestCert) => ({
    ca: [server.cert],
    servername: 'localhost',
    ...(c ? { cert: readFileSync(c.certPath), key: readFileSync(c.keyPath) } : {}),
  });
  const url = (creds = '') => `amqps://${creds}127.0.0.1:${broker.ports.amqps}?heartbeat=0`;

  it('logs a client in with EXTERNAL as the user its certificate names', async () => {
    const conn = await amqp.connect(url(), {
      ...tlsOpts(ca.issue({ cn: 'device-1' })),
      credentials: amqp.credentials.external(),
      clientProperties: { connection_name: 'by-cert' },
    });
    try {
      const ch = await conn.createChannel();
      await ch.assertQueue('mtls-q');
      const list = await broker.api<{ items: Array<{ user: string; clientId: string; listener: string }> }>('GET', '/api/v1/clients?protocol=amqp');
      const c = list.items.find((x) => x.clientId === 'by-cert');
      assert.deepEqual([c?.user, c?.listener], ['device-1', 'amqps']);
    } finally {
      await conn.close();
    }
  });

  it('refuses EXTERNAL for a certificate that names no user (403)', async () => {
    await assert.rejects(
      amqp.connect(url(), { ...tlsOpts(ca.issue({ cn: 'ghost' })), credentials: amqp.credentials.external() }),
      /ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL/,
    );
  });

  it('does not offer EXTERNAL without a verified certificate', async () => {
    await assert.rejects(
      amqp.connect(url(), { ...tlsOpts(), credentials: amqp.credentials.external() }),
      /SASL mechanism EXTERNAL is not provided by the server/,
    );
  });

  it('lets credentials sent with PLAIN win over the certificate', async () => {
    const conn = await amqp.connect(url('root:root-pw@'), {
      ...tlsOpts(ca.issue({ cn: 'device-1' })),
      clientProperties: { connection_name: 'plain-over-cert' },
    });
    try {
      const list = await broker.api<{ items: Array<{ user: string; clientId: string }> }>('GET', '/api/v1/clients?protocol=amqp');
      assert.equal(list.items.find((x) => x.clientId === 'plain-over-cert')?.user, 'root');
    } finally {
      await conn.close();
    }
  });
});
