/**
 * AMQP over TLS (amqps) with amqplib: the TLS listener speaks the same protocol as the plain one, and a half
 * configuration (a certificate without its key) stops the start before any listener opens.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import amqp from 'amqplib';
import { FlowmqProcess, makeTestCert, run, FLOWMQ_BIN, type TestCert } from './harness.js';
import { startAmqpBroker } from './amqp-helpers.js';

describe('e2e: AMQP over TLS', () => {
  let cert: TestCert;
  let broker: FlowmqProcess;
  before(async () => {
    cert = makeTestCert('flowmq-amqps-');
    broker = await startAmqpBroker(['--amqps-port', '0', '--amqp-tls-cert', cert.certPath, '--amqp-tls-key', cert.keyPath]);
  });
  after(async () => {
    await broker.stop();
    broker.cleanup();
    rmSync(cert.dir, { recursive: true, force: true });
  });

  it('amqplib publishes and consumes over amqps, verifying the broker certificate', async () => {
    assert.ok(broker.ports.amqps, 'the amqps listener is up');
    const conn = await amqp.connect(`amqps://guest:guest@127.0.0.1:${broker.ports.amqps}`, { ca: [cert.cert], servername: 'localhost' });
    try {
      const ch = await conn.createConfirmChannel();
      await ch.assertQueue('over-tls', { durable: true });
      await new Promise<void>((resolve, reject) =>
        ch.sendToQueue('over-tls', Buffer.from('secret'), { persistent: true }, (err: unknown) => (err ? reject(err) : resolve())),
      );
      const m = await ch.get('over-tls', { noAck: true });
      assert.ok(m !== false);
      assert.equal(m.content.toString(), 'secret');
    } finally {
      await conn.close();
    }
  });

  it('a client that does not trust the certificate is refused by its TLS handshake', async () => {
    await assert.rejects(amqp.connect(`amqps://guest:guest@127.0.0.1:${broker.ports.amqps}`), /self.signed|certificate/i);
  });

  it('a certificate without its key stops the start with one line', async () => {
    const r = await run(
      FLOWMQ_BIN,
      [
        'start',
        '--data-dir',
        cert.dir + '/data',
        '--host',
        '127.0.0.1',
        '--mqtt-port',
        '0',
        '--mqtt-ws-port',
        '0',
        '--kafka-port',
        '0',
        '--amqp-port',
        '0',
        '--nats-port',
        '0',
        '--http-port',
        '0',
        '--amqp-tls-cert',
        cert.certPath,
      ],
      { timeoutMs: 30_000 },
    );
    assert.notEqual(r.code, 0);
    assert.match(r.stderr + r.stdout, /AMQP over TLS needs both amqp-tls-cert and amqp-tls-key/);
  });
});
