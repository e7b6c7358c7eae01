/**
 * NATS over WebSocket (--nats-ws-port), the transport of browser clients: the nats.js WebSocket client
 * (@nats-io/nats-core's wsconnect, here on the `ws` package's WebSocket since Node 20 has none built in) talks to a
 * TCP client of the `nats` package through the same broker; INFO is the first frame; the connection limit counts
 * WebSocket and TCP clients together.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { wsconnect, headers as wsHeaders, type NatsConnection as WsNatsConnection } from '@nats-io/nats-core';
import { connect, headers, StringCodec } from 'nats';
import WebSocket from 'ws';
import { FlowmqProcess, makeTestCert } from './harness.js';

const sc = StringCodec();
const enc = new TextEncoder();
const dec = new TextDecoder();

function wsClient(port: number, name = 'ws'): Promise<WsNatsConnection> {
  return wsconnect({
    servers: `ws://127.0.0.1:${port}`,
    name,
    reconnect: false,
    // Node 20 has no global WebSocket: the client takes the `ws` package's, which has the browser API it uses.
    wsFactory: (url: string) => Promise.resolve({ socket: new WebSocket(url) as unknown as globalThis.WebSocket, encrypted: false }),
  });
}

/** The first WebSocket message a raw client receives, as text, and the socket. */
function firstFrame(port: number): Promise<{ ws: WebSocket; text: string; closed: Promise<number> }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}/`);
    const closed = new Promise<number>((r) => ws.once('close', (code) => r(code)));
    ws.once('error', reject);
    ws.once('message', (data: Buffer) => resolve({ ws, text: data.toString('latin1'), closed }));
  });
}

describe('e2e: NATS over WebSocket', () => {
  let broker: FlowmqProcess;
  before(async () => {
    broker = await FlowmqProcess.start({ args: ['--nats-ws-port', '0'] });
  });
  after(async () => {
    await broker.stop();
    broker.cleanup();
  });

  it('a WebSocket client and a TCP client exchange messages both ways, headers included', async () => {
    const wsPort = broker.ports['nats-ws'];
    assert.ok(wsPort, 'the nats-ws listener is up');
    const ws = await wsClient(wsPort);
    const tcp = await connect({ servers: broker.natsServer });
    try {
      // TCP -> WebSocket, with a wildcard subscription on the WebSocket side.
      const wsSub = ws.subscribe('web.>', { max: 1 });
      await ws.flush();
      const h = headers();
      h.append('X-From', 'tcp');
      tcp.publish('web.in.1', sc.encode('to the browser'), { headers: h });
      for await (const m of wsSub) {
        assert.equal(m.subject, 'web.in.1');
        assert.equal(dec.decode(m.data), 'to the browser');
        assert.equal(m.headers?.get('X-From'), 'tcp');
      }
      // WebSocket -> TCP.
      const tcpSub = tcp.subscribe('app.*', { max: 1 });
      await tcp.flush();
      const wh = wsHeaders();
      wh.append('X-From', 'browser');
      ws.publish('app.out', enc.encode('from the browser'), { headers: wh });
      for await (const m of tcpSub) {
        assert.equal(m.subject, 'app.out');
        assert.equal(sc.decode(m.data), 'from the browser');
        assert.equal(m.headers?.get('X-From'), 'browser');
      }
      // The client registry lists the WebSocket client on its listener, with the socket's byte counts.
      const clients = await broker.api<{ items: Array<{ listener: string; clientId: string; bytesIn: number; bytesOut: number; messagesIn: number }> }>(
        'GET',
        '/api/v1/clients?protocol=nats',
      );
      const me = clients.items.find((c) => c.listener === 'nats-ws' && c.clientId === 'ws');
      assert.ok(me, JSON.stringify(clients.items));
      assert.ok(me.bytesIn > 0 && me.bytesOut > 0);
      assert.equal(me.messagesIn, 1);
    } finally {
      await ws.close();
      await tcp.close();
    }
  });

  it('request/reply: a WebSocket requester, a TCP responder', async () => {
    const ws = await wsClient(broker.ports['nats-ws']);
    const tcp = await connect({ servers: broker.natsServer });
    try {
      const sub = tcp.subscribe('svc.echo');
      void (async () => {
        for await (const m of sub) m.respond(sc.encode(`echo:${sc.decode(m.data)}`));
      })();
      await tcp.flush();
      const r = await ws.request('svc.echo', enc.encode('ping'), { timeout: 5000 });
      assert.equal(dec.decode(r.data), 'echo:ping');
    } finally {
      await ws.close();
      await tcp.close();
    }
  });

  it('INFO is the first frame, as a text line; a plain HTTP request gets 426', async () => {
    const { ws, text } = await firstFrame(broker.ports['nats-ws']);
    try {
      assert.match(text, /^INFO \{.*\}\r\n$/);
      const info = JSON.parse(text.slice(5)) as Record<string, unknown>;
      assert.equal(info.proto, 1);
      assert.equal(info.headers, true);
      assert.equal(info.tls_required, undefined);
    } finally {
      ws.terminate();
    }
    const res = await fetch(`http://127.0.0.1:${broker.ports['nats-ws']}/`);
    assert.equal(res.status, 426);
  });
});

describe('e2e: NATS connection limit over TCP and WebSocket', () => {
  let broker: FlowmqProcess;
  before(async () => {
    broker = await FlowmqProcess.start({ args: ['--nats-ws-port', '0', '--nats-max-connections', '1'] });
  });
  after(async () => {
    await broker.stop();
    broker.cleanup();
  });

  it("with the only slot taken by a TCP client, a WebSocket client gets INFO and -ERR 'maximum connections exceeded'", async () => {
    const tcp = await connect({ servers: broker.natsServer });
    try {
      await tcp.flush();
      const { ws, text, closed } = await firstFrame(broker.ports['nats-ws']);
      try {
        // INFO and the -ERR may come as one frame or two.
        let all = text;
        if (!all.includes('-ERR')) all += await new Promise<string>((r) => ws.once('message', (d: Buffer) => r(d.toString('latin1'))));
        assert.match(all, /^INFO \{.*\}\r\n-ERR 'maximum connections exceeded'\r\n$/);
        await closed;
      } finally {
        ws.terminate();
      }
      await assert.rejects(wsClient(broker.ports['nats-ws']), /maximum connections exceeded/i);
    } finally {
      await tcp.close();
    }
  });
});

describe('e2e: NATS over secure WebSocket (--nats-ws-tls)', () => {
  it('a wss:// client verifying the broker certificate talks to a TCP client; INFO says tls_required', async () => {
    const cert = makeTestCert('flowmq-nats-wss-');
    const broker = await FlowmqProcess.start({
      args: ['--nats-ws-port', '0', '--nats-ws-tls', 'true', '--nats-tls-cert', cert.certPath, '--nats-tls-key', cert.keyPath],
    });
    try {
      const l = await broker.waitForLog((x) => x.msg === 'listening' && x.protocol === 'nats-ws');
      assert.equal(l.tls, 'wss');
      const ws = await wsconnect({
        servers: `wss://127.0.0.1:${broker.ports['nats-ws']}`,
        reconnect: false,
        wsFactory: (url: string) => Promise.resolve({ socket: new WebSocket(url, { ca: cert.cert }) as unknown as globalThis.WebSocket, encrypted: true }),
      });
      const tcp = await connect({ servers: broker.natsServer, tls: null });
      try {
        assert.equal(ws.info?.tls_required, true);
        const sub = tcp.subscribe('secure.web', { max: 1 });
        await tcp.flush();
        ws.publish('secure.web', enc.encode('over wss'));
        for await (const m of sub) assert.equal(sc.decode(m.data), 'over wss');
      } finally {
        await ws.close();
        await tcp.close();
      }
      // A client that does not trust the certificate never gets to speak NATS.
      await assert.rejects(
        wsconnect({
          servers: `wss://127.0.0.1:${broker.ports['nats-ws']}`,
          reconnect: false,
          wsFactory: (url: string) => Promise.resolve({ socket: new WebSocket(url) as unknown as globalThis.WebSocket, encrypted: true }),
        }),
      );
    } finally {
      await broker.stop();
      broker.cleanup();
      rmSync(cert.dir, { recursive: true, force: true });
    }
  });
});
