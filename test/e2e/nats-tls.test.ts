/**
 * NATS over TLS as nats-server serves it: on the NATS port itself, the client upgrading after INFO (tls_available:
 * plain and TLS clients side by side; tls_required: plain clients refused), and TLS first (handshake_first: INFO
 * only once the handshake is done). Driven with the `nats` npm client and with raw sockets for the wire details.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { connect, StringCodec, type NatsConnection } from 'nats';
import { FlowmqProcess, makeTestCert, run, FLOWMQ_BIN, type TestCert } from './harness.js';
import { RawNats } from './nats-wire.js';

const sc = StringCodec();

/** True when the client's transport is a TLS socket (the nats client keeps it internal). */
function encrypted(nc: NatsConnection): boolean {
  const t = (nc as unknown as { protocol: { transport: { isEncrypted(): boolean } } }).protocol.transport;
  return t.isEncrypted();
}

/** One message from `sub` on `subject` via `pub`, proving both clients work (the subscription is registered first). */
async function roundTrip(pub: NatsConnection, sub: NatsConnection, subject: string, text: string): Promise<string> {
  const s = sub.subscribe(subject, { max: 1 });
  await sub.flush();
  pub.publish(subject, sc.encode(text));
  for await (const m of s) return sc.decode(m.data);
  throw new Error('subscription ended without a message');
}

describe('e2e: NATS over TLS', () => {
  let cert: TestCert;
  before(() => {
    cert = makeTestCert('flowmq-nats-tls-');
  });
  after(() => rmSync(cert.dir, { recursive: true, force: true }));

  describe('TLS available (tls_available)', () => {
    let broker: FlowmqProcess;
    before(async () => {
      broker = await FlowmqProcess.start({ args: ['--nats-tls-cert', cert.certPath, '--nats-tls-key', cert.keyPath] });
    });
    after(async () => {
      await broker.stop();
      broker.cleanup();
    });

    it('logs the listener with its TLS mode', async () => {
      const l = await broker.waitForLog((x) => x.msg === 'listening' && x.protocol === 'nats');
      assert.equal(l.tls, 'available');
    });

    it('serves a TLS client (verifying the broker certificate) and a plain client on the same port, and they talk', async () => {
      const secure = await connect({ servers: broker.natsServer, tls: { ca: cert.cert } });
      const plain = await connect({ servers: broker.natsServer, tls: null });
      try {
        assert.equal(secure.info?.tls_available, true);
        assert.equal(secure.info?.tls_required, undefined);
        assert.equal(encrypted(secure), true, 'the TLS client upgraded');
        assert.equal(encrypted(plain), false, 'the plain client stayed plain');
        assert.equal(await roundTrip(plain, secure, 'tls.a', 'plain to tls'), 'plain to tls');
        assert.equal(await roundTrip(secure, plain, 'tls.b', 'tls to plain'), 'tls to plain');
      } finally {
        await secure.close();
        await plain.close();
      }
    });

    it('on the wire: INFO in the clear, then the TLS handshake, then CONNECT and PING answered over TLS without a second INFO', async () => {
      const raw = await RawNats.connect(broker.natsPort);
      try {
        const info = await raw.info();
        assert.equal(info.tls_available, true);
        const secure = await raw.upgrade({ ca: cert.cert, servername: 'localhost' });
        secure.send('CONNECT {"verbose":false,"pedantic":false,"tls_required":true}\r\nPING\r\n');
        assert.equal(await secure.line(), 'PONG', 'the first line over TLS is the PONG, not another INFO');
      } finally {
        raw.destroy();
      }
    });

    it('a plain raw client gets served after INFO (its first bytes are not lost)', async () => {
      const raw = await RawNats.connect(broker.natsPort);
      try {
        await raw.info();
        raw.send('CONNECT {"verbose":true}\r\nPING\r\n');
        assert.equal(await raw.line(), '+OK');
        assert.equal(await raw.line(), 'PONG');
      } finally {
        raw.destroy();
      }
    });

    it('a client that does not trust the certificate fails its handshake; the broker stays up for others', async () => {
      await assert.rejects(connect({ servers: broker.natsServer, tls: {}, reconnect: false }), /self.signed|certificate/i);
      const ok = await connect({ servers: broker.natsServer, tls: { ca: cert.cert } });
      await ok.flush();
      await ok.close();
    });
  });

  describe('TLS required (tls_required)', () => {
    let broker: FlowmqProcess;
    before(async () => {
      broker = await FlowmqProcess.start({ args: ['--nats-tls-cert', cert.certPath, '--nats-tls-key', cert.keyPath, '--nats-tls-required', 'true'] });
    });
    after(async () => {
      await broker.stop();
      broker.cleanup();
    });

    it('a TLS client works', async () => {
      const a = await connect({ servers: broker.natsServer, tls: { ca: cert.cert } });
      const b = await connect({ servers: broker.natsServer, tls: { ca: cert.cert } });
      try {
        assert.equal(a.info?.tls_required, true);
        assert.equal(encrypted(a), true);
        assert.equal(await roundTrip(a, b, 'req.x', 'secret'), 'secret');
      } finally {
        await a.close();
        await b.close();
      }
    });

    it("a plain CONNECT gets -ERR 'Secure Connection - TLS Required' and the connection closes", async () => {
      const raw = await RawNats.connect(broker.natsPort);
      try {
        const info = await raw.info();
        assert.equal(info.tls_required, true);
        raw.send('CONNECT {"verbose":false}\r\nPING\r\n');
        assert.equal(await raw.line(), "-ERR 'Secure Connection - TLS Required'");
        await raw.ended();
        assert.equal(raw.rest(), '', 'nothing after the -ERR (no PONG)');
      } finally {
        raw.destroy();
      }
    });
  });

  describe('TLS first (handshake_first)', () => {
    let broker: FlowmqProcess;
    before(async () => {
      broker = await FlowmqProcess.start({ args: ['--nats-tls-cert', cert.certPath, '--nats-tls-key', cert.keyPath, '--nats-tls-handshake-first', 'true'] });
    });
    after(async () => {
      await broker.stop();
      broker.cleanup();
    });

    it('the nats client with tls.handshakeFirst connects and talks', async () => {
      const a = await connect({ servers: broker.natsServer, tls: { ca: cert.cert, handshakeFirst: true } });
      const b = await connect({ servers: broker.natsServer, tls: { ca: cert.cert, handshakeFirst: true } });
      try {
        assert.equal(encrypted(a), true);
        assert.equal(a.info?.tls_required, true);
        assert.equal(await roundTrip(a, b, 'first.x', 'hello'), 'hello');
      } finally {
        await a.close();
        await b.close();
      }
    });

    it('INFO comes over TLS, after the handshake; a plain client gets no INFO in the clear and is closed', async () => {
      const secure = await RawNats.connectTls(broker.natsPort, { ca: cert.cert, servername: 'localhost' });
      try {
        const info = await secure.info();
        assert.equal(info.tls_required, true);
        secure.send('CONNECT {}\r\nPING\r\n');
        assert.equal(await secure.line(), 'PONG');
      } finally {
        secure.destroy();
      }
      const plain = await RawNats.connect(broker.natsPort);
      try {
        plain.send('CONNECT {}\r\nPING\r\n');
        await plain.ended();
        assert.doesNotMatch(plain.rest(), /INFO|PONG/, 'nothing in the clear');
      } finally {
        plain.destroy();
      }
    });
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
        '--nats-tls-cert',
        cert.certPath,
      ],
      { timeoutMs: 30_000 },
    );
    assert.notEqual(r.code, 0);
    assert.match(r.stderr + r.stdout, /NATS over TLS needs both nats-tls-cert and nats-tls-key/);
  });
});
