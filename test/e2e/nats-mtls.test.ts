/**
 * Client certificates on the NATS TLS listener (mTLS) against `flowmq start` with the nats client: a certificate
 * signed by --tls-client-ca logs in as the directory user its CN names; a certificate naming nobody is refused as a
 * wrong password is; credentials sent with a certificate win; without a certificate the client is anonymous
 * (refused here).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { connect, type NatsConnection, type NatsError } from 'nats';
import { FlowmqProcess, makeTestCa, makeTestCert, type TestCa, type TestCert } from './harness.js';

describe('NATS mTLS with the nats client', () => {
  let broker: FlowmqProcess;
  let server: TestCert;
  let ca: TestCa;
  const conns: NatsConnection[] = [];

  before(async () => {
    server = makeTestCert();
    ca = makeTestCa();
    broker = await FlowmqProcess.start({
      args: [
        '--allow-anonymous',
        'false',
        '--nats-tls-cert',
        server.certPath,
        '--nats-tls-key',
        server.keyPath,
        '--nats-tls-required',
        'true',
        '--tls-client-ca',
        ca.certPath,
      ],
    });
    await broker.api('POST', '/api/v1/users', { username: 'admin', password: 'admin-pw', groups: ['admins'] });
    broker.credentials = { username: 'admin', password: 'admin-pw' };
    await broker.api('POST', '/api/v1/users', { username: 'alice', password: 'alice-pw' });
  });

  after(async () => {
    await Promise.allSettled(conns.map((c) => c.close()));
    await broker.stop();
    broker.cleanup();
    rmSync(server.dir, { recursive: true, force: true });
    rmSync(ca.dir, { recursive: true, force: true });
  });

  const tlsWith = (c?: TestCert) => ({ caFile: server.certPath, ...(c ? { certFile: c.certPath, keyFile: c.keyPath } : {}) });
  const users = async () =>
    (await broker.api<{ items: Array<{ user: string | null; clientId: string | null }> }>('GET', '/api/v1/clients?protocol=nats')).items;

  it('a certificate naming a directory user logs in as that user', async () => {
    const nc = await connect({ servers: broker.natsServer, tls: tlsWith(ca.issue({ cn: 'alice' })), name: 'cert-alice', reconnect: false });
    conns.push(nc);
    assert.ok((await users()).some((c) => c.clientId === 'cert-alice' && c.user === 'alice'));
  });

  it('a certificate naming nobody is refused; no certificate and no credentials is refused', async () => {
    await assert.rejects(
      connect({ servers: broker.natsServer, tls: tlsWith(ca.issue({ cn: 'mallory' })), reconnect: false }),
      (err: NatsError) => err.code === 'AUTHORIZATION_VIOLATION',
    );
    await assert.rejects(connect({ servers: broker.natsServer, tls: tlsWith(), reconnect: false }), (err: NatsError) => err.code === 'AUTHORIZATION_VIOLATION');
  });

  it('credentials sent with a certificate win', async () => {
    const nc = await connect({
      servers: broker.natsServer,
      tls: tlsWith(ca.issue({ cn: 'alice' })),
      user: 'admin',
      pass: 'admin-pw',
      name: 'cert-admin',
      reconnect: false,
    });
    conns.push(nc);
    assert.ok((await users()).some((c) => c.clientId === 'cert-admin' && c.user === 'admin'));
    await assert.rejects(
      connect({ servers: broker.natsServer, tls: tlsWith(ca.issue({ cn: 'alice' })), user: 'admin', pass: 'wrong', reconnect: false }),
      (err: NatsError) => err.code === 'AUTHORIZATION_VIOLATION',
    );
  });
});
