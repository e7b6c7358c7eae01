/**
 * The NATS listener's connection limit (--nats-max-connections), checked at accept as nats-server does: INFO, then
 * -ERR 'maximum connections exceeded', then close. Sockets the listener still holds (INFO sent, waiting for the
 * client's first byte to choose TLS or plain) count, so clients that never finish a handshake cannot go past it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { wsconnect } from '@nats-io/nats-core';
import { connect } from 'nats';
import WebSocket from 'ws';
import { FlowmqProcess, eventually, makeTestCert, type TestCert } from './harness.js';
import { RawNats } from './nats-wire.js';

/** A raw client over the limit: INFO, the -ERR, and the broker closes the socket. */
async function assertRefused(port: number): Promise<void> {
  const raw = await RawNats.connect(port);
  try {
    const info = await raw.info();
    assert.equal(info.proto, 1);
    assert.equal(await raw.line(), "-ERR 'maximum connections exceeded'");
    await raw.ended();
  } finally {
    raw.destroy();
  }
}

describe('e2e: NATS connection limit', () => {
  describe('plain listener', () => {
    let broker: FlowmqProcess;
    before(async () => {
      broker = await FlowmqProcess.start({ args: ['--nats-max-connections', '2'] });
    });
    after(async () => {
      await broker.stop();
      broker.cleanup();
    });

    it("refuses the client over the limit with nats-server's -ERR, and takes a new one once a slot is free", async () => {
      const a = await connect({ servers: broker.natsServer });
      const b = await connect({ servers: broker.natsServer });
      try {
        await Promise.all([a.flush(), b.flush()]);
        await assertRefused(broker.natsPort);
        await assert.rejects(connect({ servers: broker.natsServer, reconnect: false }), /maximum connections exceeded/i);
        const figures = (await broker.api<{ nats: { listener: { refusedMaxConnections: number } } }>('GET', '/api/v1/broker')).nats;
        assert.ok(figures.listener.refusedMaxConnections >= 2, JSON.stringify(figures));
      } finally {
        await a.close();
      }
      try {
        // The broker sees a's close a little after the client does: retry until the slot is free.
        let c: Awaited<ReturnType<typeof connect>> | null = null;
        await eventually(
          async () => {
            c = await connect({ servers: broker.natsServer, reconnect: false }).catch(() => null);
            return c !== null;
          },
          10_000,
          'a slot frees up',
        );
        await c!.close();
      } finally {
        await b.close();
      }
    });
  });

  describe('TLS-available listener', () => {
    let cert: TestCert;
    let broker: FlowmqProcess;
    before(async () => {
      cert = makeTestCert('flowmq-nats-limit-');
      broker = await FlowmqProcess.start({ args: ['--nats-tls-cert', cert.certPath, '--nats-tls-key', cert.keyPath, '--nats-max-connections', '1'] });
    });
    after(async () => {
      await broker.stop();
      broker.cleanup();
      rmSync(cert.dir, { recursive: true, force: true });
    });

    it('a client that got INFO but has not said TLS or plain yet holds a slot; it is served once it speaks', async () => {
      const waiting = await RawNats.connect(broker.natsPort);
      try {
        assert.equal((await waiting.info()).tls_available, true);
        // Not a connection of the adapter yet, but in the listener's hands: the next client is over the limit.
        await assertRefused(broker.natsPort);
        waiting.send('CONNECT {"verbose":false}\r\nPING\r\n');
        assert.equal(await waiting.line(), 'PONG');
      } finally {
        waiting.destroy();
      }
    });
  });

  it('a broker with plain, TLS and WebSocket clients connected, and a socket still choosing, stops cleanly and closes them all', async () => {
    const cert = makeTestCert('flowmq-nats-stop-');
    const broker = await FlowmqProcess.start({ args: ['--nats-tls-cert', cert.certPath, '--nats-tls-key', cert.keyPath, '--nats-ws-port', '0'] });
    try {
      const plain = await connect({ servers: broker.natsServer, tls: null, reconnect: false });
      const secure = await connect({ servers: broker.natsServer, tls: { ca: cert.cert }, reconnect: false });
      const ws = await wsconnect({
        servers: `ws://127.0.0.1:${broker.ports['nats-ws']}`,
        reconnect: false,
        wsFactory: (url: string) => Promise.resolve({ socket: new WebSocket(url) as unknown as globalThis.WebSocket, encrypted: false }),
      });
      for (const nc of [plain, secure, ws]) nc.subscribe('x.>');
      await Promise.all([plain.flush(), secure.flush(), ws.flush()]);
      const choosing = await RawNats.connect(broker.natsPort);
      await choosing.info();
      const exit = await broker.stop();
      assert.equal(exit.code, 0, broker.errorOutput);
      // Each client learns the broker is gone (closed() resolves once the client has given up).
      await Promise.all([plain.closed(), secure.closed(), ws.closed(), choosing.ended()]);
      assert.ok(broker.logs.some((l) => l.msg === 'stopped'));
    } finally {
      await broker.stop();
      broker.cleanup();
      rmSync(cert.dir, { recursive: true, force: true });
    }
  });

  it('the nats-* options reach every connection: max payload in INFO, control line, subscriptions, auth timeout, pings', async () => {
    const broker = await FlowmqProcess.start({
      args: [
        '--nats-max-payload',
        '2KiB',
        '--nats-max-control-line',
        '300',
        '--nats-max-subscriptions',
        '1',
        '--nats-auth-timeout',
        '300ms',
        '--nats-ping-interval',
        '200ms',
        '--nats-max-pings-out',
        '1',
      ],
    });
    try {
      const a = await RawNats.connect(broker.natsPort);
      try {
        assert.equal((await a.info()).max_payload, 2048);
        a.send('CONNECT {"verbose":false}\r\nSUB one 1\r\nSUB two 2\r\n');
        assert.equal(await a.line(), "-ERR 'Maximum Subscriptions Exceeded'");
        // The broker PINGs at the interval; unanswered past max pings out, the connection is stale.
        assert.equal(await a.line(), 'PING');
        assert.equal(await a.line(), "-ERR 'Stale Connection'");
        await a.ended();
      } finally {
        a.destroy();
      }
      const b = await RawNats.connect(broker.natsPort);
      try {
        await b.info();
        b.send(`CONNECT {}\r\nSUB ${'x'.repeat(300)} 1\r\n`);
        assert.equal(await b.line(), "-ERR 'maximum control line exceeded'");
        await b.ended();
      } finally {
        b.destroy();
      }
      const silent = await RawNats.connect(broker.natsPort);
      try {
        await silent.info();
        // The broker may PING before CONNECT (the interval is shorter than the auth timeout here).
        let l = await silent.line();
        while (l === 'PING') l = await silent.line();
        assert.equal(l, "-ERR 'Authentication Timeout'");
        await silent.ended();
      } finally {
        silent.destroy();
      }
    } finally {
      await broker.stop();
      broker.cleanup();
    }
  });
});
