/**
 * Security against a real `flowmq start` process: one users file for Kafka SASL (PLAIN, SCRAM-SHA-256,
 * SCRAM-SHA-512 with KafkaJS; SCRAM-SHA-512 with kcat/librdkafka), SASL over TLS (SASL_SSL), and MQTT
 * username/password (MQTT.js, 3.1.1 and 5.0); then a broker without users whose TLS listener serves kcat with
 * security.protocol=SSL and advertises its own port.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mqtt from 'mqtt';
import kafkajsPkg, { type SASLOptions } from 'kafkajs';
import { FlowmqProcess, kcatConsume, makeTestCert, run } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

const FAST = ['-X', 'fetch.wait.max.ms=50'];

function kafka(broker: string, sasl?: SASLOptions, ca?: string) {
  return new Kafka({
    clientId: 'sec-e2e',
    brokers: [broker],
    sasl,
    ssl: ca === undefined ? undefined : { ca: [ca] },
    logLevel: logLevel.NOTHING,
    retry: { retries: 0 },
    connectionTimeout: 3000,
  });
}

/** MQTT.js connect: 'connected', or the CONNACK return/reason code it was refused with. */
function mqttConnect(url: string, protocolVersion: 4 | 5, username?: string, password?: string): Promise<'connected' | number> {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(url, {
      protocolVersion,
      username,
      password,
      reconnectPeriod: 0,
      connectTimeout: 5000,
      clientId: `sec-${Math.random().toString(16).slice(2)}`,
    });
    c.once('connect', () => {
      c.end(true);
      resolve('connected');
    });
    c.once('error', (err: Error & { code?: number }) => {
      c.end(true);
      if (typeof err.code === 'number') resolve(err.code);
      else reject(err);
    });
  });
}

describe('kafka and mqtt security with a users file', () => {
  let dir = '';
  let cert = '';
  let broker: FlowmqProcess;

  before(async () => {
    ({ dir, cert } = makeTestCert('flowmq-sec-'));
    writeFileSync(join(dir, 'users.yaml'), '- username: alice\n  password: "wonder:land"\n- username: bob\n  password: builder\n');
    broker = await FlowmqProcess.start({
      args: [
        '--users-file',
        join(dir, 'users.yaml'),
        '--kafka-tls-port',
        '0',
        '--kafka-tls-cert',
        join(dir, 'cert.pem'),
        '--kafka-tls-key',
        join(dir, 'key.pem'),
      ],
    });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('KafkaJS authenticates with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, and produces and reads back', async () => {
    const mechanisms = ['plain', 'scram-sha-256', 'scram-sha-512'] as const;
    for (const mechanism of mechanisms) {
      const k = kafka(broker.kafka, { mechanism, username: 'alice', password: 'wonder:land' } as SASLOptions);
      const p = k.producer();
      await p.connect();
      await p.send({ topic: 'sec.t', messages: [{ value: mechanism }] });
      await p.disconnect();
    }
    const admin = kafka(broker.kafka, { mechanism: 'scram-sha-512', username: 'bob', password: 'builder' }).admin();
    await admin.connect();
    const offsets = await admin.fetchTopicOffsets('sec.t');
    await admin.disconnect();
    assert.deepEqual(
      offsets.map((o) => o.high),
      ['3'],
    );
    assert.ok(broker.logs.some((l) => l.msg === 'SASL authentication succeeded' && l.principal === 'bob' && l.mechanism === 'SCRAM-SHA-512'));
  });

  it('KafkaJS with a wrong password or an unknown user gets an authentication failure', async () => {
    const cases: SASLOptions[] = [
      { mechanism: 'plain', username: 'alice', password: 'wrong' },
      { mechanism: 'scram-sha-256', username: 'alice', password: 'wrong' },
      { mechanism: 'scram-sha-512', username: 'mallory', password: 'builder' },
    ];
    for (const sasl of cases) {
      const p = kafka(broker.kafka, sasl).producer();
      await assert.rejects(
        p.connect(),
        (e: Error) => /SASL .*authentication failed/i.test(e.message) && e.name === 'KafkaJSSASLAuthenticationError',
        sasl.mechanism,
      );
      await p.disconnect();
    }
    const noAuth = kafka(broker.kafka).admin();
    await assert.rejects(
      noAuth.connect().then(() => noAuth.listTopics()),
      'without SASL the broker closes the connection',
    );
    await noAuth.disconnect();
    await broker.waitForLog((l) => l.msg === 'request before SASL authentication: closing connection');
    assert.ok(!JSON.stringify(broker.logs).includes('wonder:land'), 'passwords are never logged');
  });

  it('kcat (librdkafka) with SASL_PLAINTEXT and SCRAM-SHA-512 produces and consumes', async () => {
    const sasl = ['-X', 'security.protocol=SASL_PLAINTEXT', '-X', 'sasl.mechanisms=SCRAM-SHA-512', '-X', 'sasl.username=bob', '-X', 'sasl.password=builder'];
    const r = await run('kcat', ['-b', broker.kafka, '-P', '-t', 'sec.kcat', '-K', ':', ...sasl, ...FAST], { input: 'k1:one\nk2:two\n', timeoutMs: 20_000 });
    assert.equal(r.code, 0, r.stderr);
    const msgs = await kcatConsume(broker.kafka, 'sec.kcat', [...sasl, ...FAST]);
    assert.deepEqual(
      msgs.map((m) => [m.key, m.payload]),
      [
        ['k1', 'one'],
        ['k2', 'two'],
      ],
    );
  });

  it("KafkaJS over TLS with SCRAM (SASL_SSL) is told the TLS listener's port", async () => {
    const tlsPort = broker.ports['kafka-tls'];
    assert.ok(tlsPort > 0 && tlsPort !== broker.ports.kafka);
    const admin = kafka(`127.0.0.1:${tlsPort}`, { mechanism: 'scram-sha-256', username: 'alice', password: 'wonder:land' }, cert).admin();
    await admin.connect();
    const cluster = await admin.describeCluster();
    assert.deepEqual(
      cluster.brokers.map((b) => [b.host, b.port]),
      [['127.0.0.1', tlsPort]],
    );
    assert.ok((await admin.listTopics()).includes('sec.t'));
    await admin.disconnect();
  });

  it('MQTT checks username and password against the same users file', async () => {
    assert.equal(await mqttConnect(broker.mqttUrl, 4, 'alice', 'wonder:land'), 'connected');
    assert.equal(await mqttConnect(broker.mqttUrl, 5, 'bob', 'builder'), 'connected');
    assert.equal(await mqttConnect(broker.mqttUrl, 4, 'alice', 'nope'), 0x04, '3.1.1: bad user name or password');
    assert.equal(await mqttConnect(broker.mqttUrl, 5, 'alice', 'nope'), 0x86, '5.0: bad user name or password');
    assert.equal(await mqttConnect(broker.mqttUrl, 4), 0x05, 'anonymous is refused when users are configured');
  });
});

describe('kafka TLS without users (security.protocol=SSL)', () => {
  let dir = '';
  let broker: FlowmqProcess;
  before(async () => {
    ({ dir } = makeTestCert('flowmq-ssl-'));
    broker = await FlowmqProcess.start({ args: ['--kafka-tls-port', '0', '--kafka-tls-cert', join(dir, 'cert.pem'), '--kafka-tls-key', join(dir, 'key.pem')] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('kcat produces, lists and consumes over TLS; Metadata advertises the TLS port', async () => {
    const tlsBroker = `127.0.0.1:${broker.ports['kafka-tls']}`;
    const ssl = ['-X', 'security.protocol=SSL', '-X', `ssl.ca.location=${join(dir, 'cert.pem')}`];
    const p = await run('kcat', ['-b', tlsBroker, '-P', '-t', 'ssl.t', ...ssl, ...FAST], { input: 'a\nb\n', timeoutMs: 20_000 });
    assert.equal(p.code, 0, p.stderr);
    const md = await run('kcat', ['-b', tlsBroker, '-L', '-J', ...ssl], { timeoutMs: 15_000 });
    assert.equal(md.code, 0, md.stderr);
    const meta = JSON.parse(md.stdout) as { brokers: Array<{ name: string }> };
    assert.deepEqual(
      meta.brokers.map((b) => b.name),
      [tlsBroker],
    );
    const msgs = await kcatConsume(tlsBroker, 'ssl.t', [...ssl, ...FAST]);
    assert.deepEqual(
      msgs.map((m) => m.payload),
      ['a', 'b'],
    );
    // The plaintext listener still advertises itself to plaintext clients.
    const plain = await run('kcat', ['-b', broker.kafka, '-L', '-J'], { timeoutMs: 15_000 });
    assert.deepEqual(
      (JSON.parse(plain.stdout) as { brokers: Array<{ name: string }> }).brokers.map((b) => b.name),
      [broker.kafka],
    );
  });
});
