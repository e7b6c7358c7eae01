/**
 * A (re)starting broker's NATS port: bound first thing in `flowmq start` (src/protocols/nats/prebound.ts), before
 * the broker's modules load and storage recovers, and INFO sent at once from the configuration
 * (src/cli/early-nats-info.ts); the connection's CONNECT, PING and PUBs wait until the broker is up. Checked on
 * restarts over existing data:
 * - a raw socket accepted early gets INFO before the broker's NATS listener is up (its `listening` log line), the same
 *   INFO a client connecting late gets (but its own client id and nonce), and PONG once the broker is ready; a
 *   nats.js client dialled at that moment connects and works (pub/sub, a JetStream request reading the stream that
 *   was there); a nats.js client connected before the restart reconnects and gets a message published after it;
 * - with users stored in the metastore (added through the admin API): early INFO says auth_required, a bad
 *   password gets -ERR 'Authorization Violation' (raw) and nats.js's AUTHORIZATION_VIOLATION, an NKey user signs
 *   the nonce of the early INFO and logs in, a password user logs in and publishes;
 * - what an early client sends is read and kept in order, past the early buffer's bound (64 KiB: the rest waits in
 *   the socket): a SUB, 300 PUBs of 1000 bytes and a PING give 300 MSGs in order and PONG; an early client that
 *   sends nothing gets -ERR 'Authentication Timeout' and is closed before the broker is up;
 * - TLS required: early INFO says tls_required, a plain CONNECT sent early is refused (-ERR TLS required), nats.js
 *   over TLS dialled early connects and works.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { connect, nkeyAuthenticator, StringCodec, type NatsConnection } from 'nats';
import { createUser } from '@nats-io/jwt';
import { rmSync } from 'node:fs';
import { FlowmqProcess, freePort, makeTestCert, sleep } from './harness.js';
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

/** Stops `broker` and starts it again on its data; a raw client accepted as early as possible, and its INFO with the time it came. */
/** `first`: bytes written as soon as the connection is accepted (before INFO is read: the auth timeout runs from then). */
async function restartEarly(broker: FlowmqProcess, args: string[], first?: string) {
  await broker.stop();
  const spawnedAt = Date.now();
  const port = Number(args[args.indexOf('--nats-port') + 1]);
  const accepting = firstAccept(port, 60_000);
  const restarted = FlowmqProcess.start({ dataDir: broker.dataDir, args, startTimeoutMs: 60_000 });
  restarted.catch(() => undefined);
  const { socket, at } = await accepting;
  const raw = RawNats.wrap(socket);
  if (first !== undefined) raw.send(first);
  const info = await raw.info();
  return { spawnedAt, acceptedAt: at, infoAt: Date.now(), info, raw, restarted };
}

/** The broker's NATS listener up (its `listening` line): epoch ms. */
async function natsListeningAt(b: FlowmqProcess): Promise<number> {
  return Number((await b.waitForLog((l) => l.msg === 'listening' && l.protocol === 'nats')).time);
}

/** INFO without the fields that are the connection's own. */
function common(info: Record<string, unknown>): Record<string, unknown> {
  const { client_id: _id, nonce: _nonce, ...rest } = info;
  return rest;
}

describe('e2e: NATS port open and INFO early in a (re)start', () => {
  it('INFO before the broker is up, the same as later; PONG once ready; nats.js connects, works and reconnects', async () => {
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

      const early = await restartEarly(broker, args);
      // The raw client answers INFO at once (as a client library does); its CONNECT and PING wait in the socket.
      early.raw.send('CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n');
      // nats.js dialled now: it gets INFO at once too, and its CONNECT/PING wait (its dial waits up to 20 s for PONG).
      const dialled = connect({ servers: `127.0.0.1:${port}`, reconnect: false });
      broker = await early.restarted;
      const storageReady = Number((await broker.waitForLog((l) => l.msg.startsWith('storage ready'))).time);
      const listening = await natsListeningAt(broker);
      console.log(
        `accepted ${early.acceptedAt - early.spawnedAt} ms after spawn, INFO at ${early.infoAt - early.spawnedAt} ms; storage ready at ${storageReady - early.spawnedAt} ms, nats listening at ${listening - early.spawnedAt} ms`,
      );
      assert.ok(early.infoAt < listening, `INFO at ${early.infoAt}, NATS listener up at ${listening}`);
      assert.equal(early.info.proto, 1);
      assert.equal(early.info.jetstream, true);
      assert.equal(typeof early.info.nonce, 'string');
      assert.equal(await early.raw.line(), 'PONG');
      early.raw.destroy();

      // A client connecting now gets the same INFO (its own client id and nonce).
      const late = await RawNats.connect(port);
      const lateInfo = await late.info();
      late.destroy();
      assert.deepEqual(common(lateInfo), common(early.info));
      assert.notEqual(lateInfo.client_id, early.info.client_id);
      assert.equal(
        broker.logs.find((l) => l.msg.includes('differs')),
        undefined,
      );

      nc = await dialled;
      assert.equal(nc.info?.server_id, early.info.server_id);
      // It works: pub/sub on itself, a JetStream request.
      const got: string[] = [];
      const sub = nc.subscribe('check.early', { callback: (_e, m) => got.push(sc.decode(m.data)) });
      nc.publish('check.early', sc.encode('one'));
      await nc.flush();
      assert.deepEqual(got, ['one']);
      sub.unsubscribe();
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

  it('stored users: early INFO says auth_required; a bad password is refused, an NKey signs the early nonce', async () => {
    const port = await freePort();
    // The logins are checked while the rest of the broker starts (scrypt on its worker threads): on a loaded machine
    // that took over the default 2 s auth timeout, which is not what this test is about.
    const args = ['--nats-port', String(port), '--nats-auth-timeout', '10s'];
    let broker = await FlowmqProcess.start({ args });
    const nk = createUser();
    const conns: NatsConnection[] = [];
    try {
      await broker.api('POST', '/api/v1/users', { username: 'alice', password: 'alice-pw', groups: ['admins'] });
      broker.credentials = { username: 'alice', password: 'alice-pw' };
      await broker.api('POST', '/api/v1/users', { username: 'nk', nkey: nk.getPublicKey() });

      const early = await restartEarly(broker, args);
      early.raw.send('CONNECT {"verbose":false,"pedantic":false,"user":"alice","pass":"wrong"}\r\nPING\r\n');
      const bad = connect({ servers: `127.0.0.1:${port}`, user: 'alice', pass: 'wrong', reconnect: false });
      bad.catch(() => undefined);
      const nkey = connect({ servers: `127.0.0.1:${port}`, authenticator: nkeyAuthenticator(nk.getSeed()), reconnect: false });
      const good = connect({ servers: `127.0.0.1:${port}`, user: 'alice', pass: 'alice-pw', reconnect: false });
      broker = await early.restarted;
      broker.credentials = { username: 'alice', password: 'alice-pw' };
      const listening = await natsListeningAt(broker);
      assert.ok(early.infoAt < listening, `INFO at ${early.infoAt}, NATS listener up at ${listening}`);
      assert.equal(early.info.auth_required, true);
      assert.equal(typeof early.info.nonce, 'string');

      assert.equal(await early.raw.line(), "-ERR 'Authorization Violation'");
      await early.raw.ended();
      await assert.rejects(bad, (e: Error & { code?: string }) => e.code === 'AUTHORIZATION_VIOLATION');

      const n = await nkey;
      console.log(`nkey in ${Date.now() - listening} ms after nats listening`);
      conns.push(n);
      await n.flush();
      const g = await good;
      console.log(`password in ${Date.now() - listening} ms after nats listening`);
      conns.push(g);
      const got: string[] = [];
      g.subscribe('auth.check', { callback: (_e, m) => got.push(sc.decode(m.data)) });
      g.publish('auth.check', sc.encode('in'));
      await g.flush();
      assert.deepEqual(got, ['in']);

      const late = await RawNats.connect(port);
      const lateInfo = await late.info();
      late.destroy();
      assert.deepEqual(common(lateInfo), common(early.info));
    } finally {
      for (const c of conns) await c.close();
      await broker.stop();
      broker.cleanup();
    }
  });

  it('early bytes are kept in order past the early buffer; a silent early connection times out before the broker is up', async () => {
    const port = await freePort();
    const args = ['--nats-port', String(port), '--nats-auth-timeout', '100ms'];
    let broker = await FlowmqProcess.start({ args });
    try {
      // The early client's CONNECT goes at once: with a 100 ms auth timeout, a busy test process could miss it.
      const early = await restartEarly(broker, args, 'CONNECT {"verbose":false,"pedantic":false}\r\nSUB ord 1\r\n');
      const silent = await RawNats.connect(port);
      const silentInfo = await silent.info();
      let errAt = 0;
      const silentEnd = (async () => {
        const l = await silent.line();
        errAt = Date.now();
        await silent.ended();
        return l;
      })();
      const N = 300;
      let out = '';
      for (let i = 0; i < N; i++) out += `PUB ord 1000\r\n${String(i).padEnd(1000, 'x')}\r\n`;
      early.raw.send(out + 'PING\r\n');
      broker = await early.restarted;
      const listening = await natsListeningAt(broker);
      assert.equal(silentInfo.server_id, early.info.server_id);
      assert.equal(await silentEnd, "-ERR 'Authentication Timeout'");
      assert.ok(errAt < listening, `timed out at ${errAt}, NATS listener up at ${listening}`);

      for (let i = 0; i < N; i++) {
        assert.equal(await early.raw.line(), 'MSG ord 1 1000');
        assert.equal(await early.raw.line(), String(i).padEnd(1000, 'x'));
      }
      assert.equal(await early.raw.line(), 'PONG');
      early.raw.destroy();
    } finally {
      await broker.stop();
      broker.cleanup();
    }
  });

  it('TLS required: early INFO says so, a plain CONNECT sent early is refused, nats.js over TLS dialled early works', async () => {
    const cert = makeTestCert('flowmq-nats-early-tls-');
    const port = await freePort();
    const args = ['--nats-port', String(port), '--nats-tls-cert', cert.certPath, '--nats-tls-key', cert.keyPath, '--nats-tls-required', 'true'];
    let broker = await FlowmqProcess.start({ args });
    let nc: NatsConnection | null = null;
    try {
      const early = await restartEarly(broker, args);
      assert.equal(early.info.tls_required, true);
      early.raw.send('CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n');
      const dialled = connect({ servers: `127.0.0.1:${port}`, tls: { ca: cert.cert }, reconnect: false });
      broker = await early.restarted;
      assert.equal(await early.raw.line(), "-ERR 'Secure Connection - TLS Required'");
      await early.raw.ended();

      nc = await dialled;
      assert.equal(nc.info?.server_id, early.info.server_id);
      assert.equal(nc.info?.tls_required, true);
      const got: string[] = [];
      nc.subscribe('tls.early', { callback: (_e, m) => got.push(sc.decode(m.data)) });
      nc.publish('tls.early', sc.encode('secure'));
      await nc.flush();
      assert.deepEqual(got, ['secure']);

      const late = await RawNats.connect(port);
      const lateInfo = await late.info();
      late.destroy();
      assert.deepEqual(common(lateInfo), common(early.info));
    } finally {
      await nc?.close();
      await broker.stop();
      broker.cleanup();
      rmSync(cert.dir, { recursive: true, force: true });
    }
  });
});
