/**
 * A (re)starting broker's NATS port: bound first thing in `flowmq start` (src/protocols/nats/prebound.ts), before
 * the broker's modules load and storage recovers, so a client connecting meanwhile is accepted (not refused, which
 * costs nats.js a reconnect wait or its first connect) and gets INFO once the broker is up. Checked on a restart
 * over existing data: a raw socket accepted before the `storage ready` log line gets INFO, then PONG; a nats.js
 * client dialled at that moment connects and reads the stream that was there; a nats.js client connected before the
 * restart reconnects and gets a message published after it.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { connect, StringCodec, type NatsConnection } from 'nats';
import { FlowmqProcess, freePort, sleep } from './harness.js';
import { RawNats } from './nats-wire.js';

const sc = StringCodec();

/** Dials 127.0.0.1:port every few ms until a connection is accepted; the socket and when (Date.now()). */
async function firstAccept(port: number, deadlineMs: number): Promise<{ socket: net.Socket; at: number }> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const r = await new Promise<net.Socket | null>((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => resolve(s));
      s.once('error', () => resolve(null));
    });
    if (r !== null) return { socket: r, at: Date.now() };
    if (Date.now() > end) throw new Error(`port ${port} not accepting within ${deadlineMs} ms`);
    await sleep(3);
  }
}

describe('e2e: NATS port open early in a (re)start', () => {
  it('accepts before storage recovery; INFO and PONG once ready; nats.js connects and reconnects', async () => {
    const port = await freePort();
    const args = ['--nats-port', String(port)];
    let broker = await FlowmqProcess.start({ args });
    let watcher: NatsConnection | null = null;
    let nc: NatsConnection | null = null;
    try {
      // Data to recover: a stream with messages.
      const setup = await connect({ servers: `127.0.0.1:${port}` });
      const jsm = await setup.jetstreamManager();
      await jsm.streams.add({ name: 'EARLY', subjects: ['early.>'] });
      const js = setup.jetstream();
      for (let i = 0; i < 200; i++) await js.publish('early.x', sc.encode(String(i)));
      await setup.close();

      // A client that stays across the restart (nats.js retries every 250 ms, without end).
      watcher = await connect({ servers: `127.0.0.1:${port}`, reconnectTimeWait: 250, maxReconnectAttempts: -1 });
      const seen: string[] = [];
      watcher.subscribe('after.restart', { callback: (_e, m) => seen.push(sc.decode(m.data)) });
      let reconnects = 0;
      void (async () => {
        for await (const s of watcher.status()) if (s.type === 'reconnect') reconnects++;
      })();
      await watcher.flush();

      await broker.stop();
      const spawnedAt = Date.now();
      const accepting = firstAccept(port, 30_000);
      const restarted = FlowmqProcess.start({ dataDir: broker.dataDir, args, startTimeoutMs: 60_000 });
      const { socket, at } = await accepting;
      const raw = RawNats.wrap(socket);
      // The raw client answers INFO at once (as a client library does, within the auth timeout).
      const handshake = (async () => {
        const info = await raw.info();
        raw.send('CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n');
        return { info, reply: await raw.line() };
      })();
      // nats.js dialled at the same moment: its dial waits for INFO (up to its 20 s timeout).
      const dialled = connect({ servers: `127.0.0.1:${port}`, reconnect: false });
      broker = await restarted;
      const storageReady = await broker.waitForLog((l) => l.msg.startsWith('storage ready'));
      const natsListening = await broker.waitForLog((l) => l.msg === 'listening' && l.protocol === 'nats');
      console.log(
        `accepted ${at - spawnedAt} ms after spawn; storage ready at ${Number(storageReady.time) - spawnedAt} ms, nats listening at ${Number(natsListening.time) - spawnedAt} ms`,
      );
      assert.ok(at < Number(storageReady.time), `accepted at ${at}, storage ready at ${String(storageReady.time)}`);

      const { info, reply } = await handshake;
      assert.equal(info.proto, 1);
      assert.equal(info.jetstream, true);
      assert.equal(reply, 'PONG');
      raw.destroy();

      nc = await dialled;
      const si = await (await nc.jetstreamManager()).streams.info('EARLY');
      assert.equal(si.state.messages, 200);

      // The client connected before the restart is back, its subscription with it.
      const deadline = Date.now() + 20_000;
      while (reconnects === 0 && Date.now() < deadline) await sleep(20);
      assert.equal(reconnects, 1);
      await watcher.flush();
      nc.publish('after.restart', sc.encode('hello'));
      await nc.flush();
      await watcher.flush();
      while (seen.length === 0 && Date.now() < deadline) await sleep(10);
      assert.deepEqual(seen, ['hello']);
    } finally {
      await nc?.close();
      await watcher?.close();
      await broker.stop();
      broker.cleanup();
    }
  });
});
