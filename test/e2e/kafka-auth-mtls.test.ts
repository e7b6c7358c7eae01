/**
 * Client certificates (mTLS) on the Kafka TLS listener, with real clients: a certificate signed by
 * --tls-client-ca logs kcat and KafkaJS in as the user its CN names (security.protocol=SSL, no SASL) and the
 * policies apply to that user; a certificate naming no known user is refused; a client without a certificate
 * still authenticates with SASL (--tls-client-auth request).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import kafkajsPkg from 'kafkajs';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { makeTestCa, makeTestCert, run, type TestCa, type TestCert } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

describe('kafka mTLS: client certificates name users', () => {
  let dir = '';
  let server: TestCert;
  let ca: TestCa;
  let broker: Broker;
  let tlsAddr = '';

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-kafka-mtls-'));
    server = makeTestCert('flowmq-kafka-mtls-server-');
    ca = makeTestCa('flowmq-kafka-mtls-ca-');
    writeFileSync(join(dir, 'users.yaml'), '- username: alice\n  password: alice-pw\n');
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'kafka',
      'kafka-port': '0',
      'kafka-tls-port': '0',
      'kafka-tls-cert': server.certPath,
      'kafka-tls-key': server.keyPath,
      'tls-client-ca': ca.certPath,
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    tlsAddr = `127.0.0.1:${broker.listeners.get('kafka-tls')!.address().port}`;
    await broker.engine.createStream({ name: 'secret', partitions: 1 });
    await broker.access.directory.putPolicy({
      name: 'alice-orders',
      effect: 'allow',
      actions: ['publish', 'subscribe', 'describe', 'create'],
      resources: ['stream:orders*'],
      principals: ['user:alice'],
    });
  });
  after(async () => {
    await broker?.close();
    for (const d of [dir, server?.dir, ca?.dir]) if (d) rmSync(d, { recursive: true, force: true });
  });

  const kcatSsl = (client: TestCert) => [
    '-X',
    'security.protocol=SSL',
    '-X',
    `ssl.ca.location=${server.certPath}`,
    '-X',
    `ssl.certificate.location=${client.certPath}`,
    '-X',
    `ssl.key.location=${client.keyPath}`,
  ];

  it('kcat with a certificate for alice produces where alice may, and is refused where she may not', async () => {
    const alice = ca.issue({ cn: 'alice' });
    const ok = await run('kcat', ['-b', tlsAddr, '-P', '-t', 'orders.m', ...kcatSsl(alice)], { input: 'one\n', timeoutMs: 20_000 });
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(broker.engine.offsets('orders.m', 0).highWatermark, 1);
    const denied = await run('kcat', ['-b', tlsAddr, '-P', '-t', 'secret', ...kcatSsl(alice)], { input: 'leak\n', timeoutMs: 20_000 });
    assert.match(denied.stderr, /authoriz/i, denied.stderr);
    assert.equal(broker.engine.offsets('secret', 0).highWatermark, 0);
  });

  it('KafkaJS with a certificate sees only what alice may describe; a certificate for an unknown user is refused', async () => {
    const alice = ca.issue({ cn: 'alice' });
    const k = new Kafka({
      brokers: [tlsAddr],
      ssl: { ca: [server.cert], cert: alice.cert, key: readKey(alice) },
      logLevel: logLevel.NOTHING,
      retry: { retries: 0 },
    });
    const admin = k.admin();
    await admin.connect();
    const topics = await admin.listTopics();
    assert.ok(
      broker.access.clients.list().some((c) => c.reg.listener === 'kafka-tls' && c.user === 'alice'),
      'registered as alice',
    );
    await admin.disconnect();
    assert.ok(topics.includes('orders.m') && !topics.includes('secret'), topics.join(','));

    const ghost = ca.issue({ cn: 'ghost' });
    const g = new Kafka({
      brokers: [tlsAddr],
      ssl: { ca: [server.cert], cert: ghost.cert, key: readKey(ghost) },
      logLevel: logLevel.NOTHING,
      retry: { retries: 0 },
      connectionTimeout: 5000,
    }).admin();
    await assert.rejects(g.connect().then(() => g.listTopics()));
    await g.disconnect();
  });

  it('a client without a certificate still logs in with SASL over TLS', async () => {
    const k = new Kafka({
      brokers: [tlsAddr],
      ssl: { ca: [server.cert] },
      sasl: { mechanism: 'plain', username: 'alice', password: 'alice-pw' },
      logLevel: logLevel.NOTHING,
      retry: { retries: 0 },
    });
    const p = k.producer();
    await p.connect();
    await p.send({ topic: 'orders.m', messages: [{ value: 'sasl' }] });
    await p.disconnect();
    const noAuth = new Kafka({
      brokers: [tlsAddr],
      ssl: { ca: [server.cert] },
      logLevel: logLevel.NOTHING,
      retry: { retries: 0 },
      connectionTimeout: 5000,
    }).admin();
    await assert.rejects(noAuth.connect().then(() => noAuth.listTopics()));
    await noAuth.disconnect();
  });
});

const readKey = (c: TestCert): string => readFileSync(c.keyPath, 'utf8');
