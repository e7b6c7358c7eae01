/**
 * TLS on the cluster channel (src/cluster/channel-tls.ts): requests and one-way messages over TLS-PSK and mutual
 * TLS, the bytes between two channels unreadable (a relay in the middle records them), and every mismatch refused
 * at once with a logged reason on both sides: a plaintext peer against a TLS one (either way), another secret in
 * PSK mode, a certificate from another CA (either way), psk against cert.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import { Writable } from 'node:stream';
import pino from 'pino';
import { Cluster, MemoryClusterStore, startChannel, type ChannelOptions, type TcpChannel } from '../../src/cluster/index.js';
import { FlowError } from '../../src/core/index.js';
import { makeBrokerCa } from '../helpers/broker-certs.js';

const SECRET = 'tls-test-secret-0123456789';

interface Node {
  cluster: Cluster;
  channel: TcpChannel;
  lines: Array<Record<string, unknown>>;
  close(): Promise<void>;
}

/** A pino logger whose lines are collected. */
function capture(): { logger: pino.Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n')) if (l) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  return { logger: pino({ level: 'info' }, stream), lines };
}

/** A broker's membership and channel; `port` overrides the advertised cluster port (a relay in front of it). */
async function node(store: MemoryClusterStore, id: number, extra: Partial<ChannelOptions> = {}, advertise?: (own: number) => Promise<number>): Promise<Node> {
  const { logger, lines } = capture();
  const cluster = await Cluster.start({ store, info: { id, version: 'test', endpoints: {} }, leaseMs: 60_000, logger });
  const channel = await startChannel({ cluster, host: '127.0.0.1', port: 0, secret: SECRET, logger, handshakeTimeoutMs: 3000, ...extra });
  cluster.channel = channel;
  const own = channel.address().port;
  await cluster.advertise({ cluster: { host: '127.0.0.1', port: advertise ? await advertise(own) : own } });
  return {
    cluster,
    channel,
    lines,
    async close() {
      await cluster.close();
      await channel.close();
    },
  };
}

/** A TCP relay to `port` that records every byte both ways. */
async function relay(port: number): Promise<{ port: number; bytes(): Buffer; sockets: Socket[]; close(): Promise<void> }> {
  const seen: Buffer[] = [];
  const sockets: Socket[] = [];
  const server: Server = createServer((a) => {
    const b = createConnection({ host: '127.0.0.1', port });
    sockets.push(a, b);
    for (const [from, to] of [
      [a, b],
      [b, a],
    ] as const) {
      from.on('data', (d: Buffer) => {
        seen.push(Buffer.from(d));
        to.write(d);
      });
      from.on('end', () => to.end());
      from.on('error', () => to.destroy());
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    bytes: () => Buffer.concat(seen),
    sockets,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

async function rejects(p: Promise<unknown>, code: string, re: RegExp): Promise<void> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof FlowError, `a FlowError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    assert.match(err.message, re);
    return;
  }
  assert.fail(`expected a ${code} rejection`);
}

async function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The log line of a refusal of `kind` (the channel's rate-limited warning), with its reason. */
function refusalLine(lines: Array<Record<string, unknown>>, kind: string): Record<string, unknown> | undefined {
  return lines.find((l) => l.kind === kind && l.msg === 'cluster channel: connection refused') ?? lines.find((l) => l.kind === kind);
}

const ca = makeBrokerCa('flowmq-chantls-ca1-');
const other = makeBrokerCa('flowmq-chantls-ca2-');
after(() => {
  rmSync(ca.dir, { recursive: true, force: true });
  rmSync(other.dir, { recursive: true, force: true });
});

function certTls(signedBy = ca, trusts = ca): ChannelOptions['tls'] {
  const c = signedBy.issue('broker');
  return { mode: 'cert', cert: c.cert, key: c.key, ca: trusts.ca };
}

/** Requests both ways, a large body, one-way messages in order, over the given TLS settings. */
async function exchange(a: Node, b: Node): Promise<void> {
  for (const n of [a, b]) n.channel.handle('test.echo', (from, body) => Buffer.concat([Buffer.from(`${n.cluster.id}<-${from}:`), body]));
  assert.equal((await a.channel.request(2, 'test.echo', Buffer.from('hi'))).toString(), '2<-1:hi');
  assert.equal((await b.channel.request(1, 'test.echo', Buffer.from('yo'))).toString(), '1<-2:yo');
  const many = await Promise.all(Array.from({ length: 300 }, (_, i) => a.channel.request(2, 'test.echo', Buffer.from(String(i)))));
  many.forEach((r, i) => assert.equal(r.toString(), `2<-1:${i}`));
  const big = Buffer.alloc(3 * 1024 * 1024 + 7, 0x5a);
  const back = await b.channel.request(1, 'test.echo', big);
  assert.ok(back.subarray('1<-2:'.length).equals(big) && back.length === big.length + 5);
  const got: string[] = [];
  b.channel.on('test.note', (_from, body) => got.push(body.toString()));
  for (let i = 0; i < 2000; i++) a.channel.send(2, 'test.note', Buffer.from(`m${i}`));
  await until(() => got.length === 2000, 'every one-way message');
  assert.deepEqual(
    got,
    Array.from({ length: 2000 }, (_, i) => `m${i}`),
  );
}

describe('cluster channel over TLS', () => {
  it('psk: requests, large bodies and one-way messages both ways; the connection is TLS 1.3', async () => {
    const store = new MemoryClusterStore();
    const [a, b] = [await node(store, 1, { tls: { mode: 'psk' } }), await node(store, 2, { tls: { mode: 'psk' } })];
    try {
      await exchange(a, b);
      assert.deepEqual(a.channel.connected(), [2]);
      assert.deepEqual(b.channel.connected(), [1]);
      assert.ok(
        a.lines.some((l) => l.msg === 'cluster channel: listening' && l.tls === 'psk'),
        'the mode is logged at start',
      );
      assert.equal((a.channel.figures() as { tls: string }).tls, 'psk', 'and shown in the figures');
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('cert: mutual TLS with the cluster CA; requests, large bodies and one-way messages both ways', async () => {
    const store = new MemoryClusterStore();
    const [a, b] = [await node(store, 1, { tls: certTls() }), await node(store, 2, { tls: certTls() })];
    try {
      await exchange(a, b);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  for (const mode of ['off', 'psk', 'cert'] as const) {
    it(`${mode}: what a relay between the channels sees ${mode === 'off' ? 'includes' : 'never includes'} the payload`, async () => {
      const store = new MemoryClusterStore();
      const tls = (): ChannelOptions['tls'] => (mode === 'cert' ? certTls() : { mode });
      const a = await node(store, 1, { tls: tls() });
      let r: Awaited<ReturnType<typeof relay>> | null = null;
      const b = await node(store, 2, { tls: tls() }, async (own) => (r = await relay(own)).port);
      try {
        const marker = 'MARKER-plaintext-visible-7f3a9c';
        b.channel.handle('test.echo', (_f, body) => Buffer.concat([Buffer.from('echo:'), body]));
        assert.equal((await a.channel.request(2, 'test.echo', Buffer.from(marker))).toString(), `echo:${marker}`);
        const got: string[] = [];
        b.channel.on('test.note', (_f, body) => got.push(body.toString()));
        a.channel.send(2, 'test.note', Buffer.from(`${marker}-oneway`));
        await until(() => got.length === 1, 'the one-way message');
        const wire = r!.bytes();
        assert.ok(wire.length > 100, `the relay carried the connection (${wire.length} bytes)`);
        if (mode === 'off') {
          assert.ok(wire.includes(marker), 'plaintext: the marker is on the wire');
          assert.ok(wire.includes('test.echo'), 'plaintext: the method name is on the wire');
        } else {
          assert.ok(!wire.includes(marker), 'TLS: the marker is not on the wire');
          assert.ok(!wire.includes('test.echo') && !wire.includes('test.note'), 'TLS: no method name on the wire');
          assert.ok(!wire.includes('"nonce"'), 'TLS: not even the handshake is readable');
          assert.equal(wire[0], 0x16, 'the first byte is a TLS handshake record');
        }
      } finally {
        await Promise.all([a.close(), b.close()]);
        await r!.close();
      }
    });
  }

  it('a plaintext dialer against a TLS acceptor is refused at once, with the reason logged on both sides', async () => {
    const store = new MemoryClusterStore();
    const a = await node(store, 1, { tls: { mode: 'off' } });
    const b = await node(store, 2, { tls: { mode: 'psk' } });
    try {
      let served = 0;
      b.channel.handle('test.echo', (_f, body) => (served++, body));
      const t0 = Date.now();
      await rejects(
        a.channel.request(2, 'test.echo', Buffer.from('x')),
        'UNAVAILABLE',
        /refused the connection: its cluster channel is encrypted \(--cluster-tls psk\)/,
      );
      assert.ok(Date.now() - t0 < 3000, `refused before the dialer's own handshake timeout (${Date.now() - t0} ms)`);
      assert.equal(served, 0);
      const refused = refusalLine(b.lines, 'tls-plaintext');
      assert.ok(refused, `the acceptor logged the refusal: ${JSON.stringify(b.lines)}`);
      assert.match(String(refused.reason), /--cluster-tls off/);
      const dialLog = a.lines.find((l) => l.msg === 'cluster channel: a peer refused our connection');
      assert.ok(dialLog, `the dialer logged the refusal: ${JSON.stringify(a.lines)}`);
      assert.match(String(dialLog.reason), /encrypted/);
      assert.equal((b.channel.figures() as { refused: Record<string, number> }).refused['tls-plaintext'], 1);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a TLS dialer against a plaintext acceptor is refused at once, with the reason logged on both sides', async () => {
    const store = new MemoryClusterStore();
    const a = await node(store, 1, { tls: { mode: 'psk' } });
    const b = await node(store, 2, { tls: { mode: 'off' } });
    try {
      const t0 = Date.now();
      await rejects(a.channel.request(2, 'test.echo', Buffer.from('x')), 'UNAVAILABLE', /does not speak TLS on the cluster channel/);
      assert.ok(Date.now() - t0 < 2000, `at once (${Date.now() - t0} ms)`);
      await until(() => !!refusalLine(b.lines, 'tls-dialer'), 'the acceptor log');
      assert.match(String(refusalLine(b.lines, 'tls-dialer')!.reason), /started a TLS handshake.*--cluster-tls off/);
      const dialLog = a.lines.find((l) => l.msg === 'cluster channel: cannot connect to a peer');
      assert.ok(dialLog, 'the dialer logged it');
      assert.match(String(dialLog.err), /does not speak TLS/);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('psk: a broker with another secret fails the TLS handshake, whichever side dials; the reason is logged', async () => {
    const store = new MemoryClusterStore();
    const a = await node(store, 1, { tls: { mode: 'psk' } });
    const b = await node(store, 2, { tls: { mode: 'psk' }, secret: 'another-secret-0123456789' });
    try {
      let served = 0;
      a.channel.handle('test.echo', (_f, body) => (served++, body));
      b.channel.handle('test.echo', (_f, body) => (served++, body));
      await rejects(a.channel.request(2, 'test.echo', Buffer.from('x')), 'UNAVAILABLE', /refused our TLS pre-shared key: its --cluster-secret is not ours/);
      await rejects(b.channel.request(1, 'test.echo', Buffer.from('x')), 'UNAVAILABLE', /refused our TLS pre-shared key/);
      assert.equal(served, 0);
      for (const n of [a, b]) {
        await until(() => !!refusalLine(n.lines, 'tls'), 'the acceptor log');
        assert.match(String(refusalLine(n.lines, 'tls')!.reason), /pre-shared key differs: its --cluster-secret is not ours/);
      }
      assert.deepEqual(a.channel.connected(), []);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("cert: a peer whose certificate another CA signed is refused, whichever side doesn't trust whom", async () => {
    const store = new MemoryClusterStore();
    // a's certificate is from the other CA but a trusts the cluster CA; b is the cluster CA's all through.
    const a = await node(store, 1, { tls: certTls(other, ca) });
    const b = await node(store, 2, { tls: certTls(ca, ca) });
    // c trusts the other CA only: b's certificate is a stranger to it.
    const c = await node(store, 3, { tls: certTls(ca, other) });
    try {
      let served = 0;
      for (const n of [a, b, c]) n.channel.handle('test.echo', (_f, body) => (served++, body));
      // a dials b: a trusts b, b does not trust a: b refuses with the reason, over TLS.
      await rejects(
        a.channel.request(2, 'test.echo', Buffer.from('x')),
        'UNAVAILABLE',
        /refused the connection: your certificate is not signed by its --cluster-tls-ca/,
      );
      const bLog = refusalLine(b.lines, 'tls-cert');
      assert.ok(bLog, JSON.stringify(b.lines));
      assert.match(String(bLog.reason), /not signed by this broker's --cluster-tls-ca/);
      // c dials b: b's certificate is not signed by c's CA: c gives up before sending anything.
      await rejects(c.channel.request(2, 'test.echo', Buffer.from('x')), 'UNAVAILABLE', /its certificate is not signed by our --cluster-tls-ca/);
      const cLog = c.lines.find((l) => l.msg === 'cluster channel: cannot connect to a peer');
      assert.ok(cLog);
      assert.match(String(cLog.err), /not signed by our --cluster-tls-ca/);
      assert.equal(served, 0);
      // The certificates that do match still work: b dials c? c's own certificate is the cluster CA's and b trusts it,
      // but c does not trust b's: refused by c.
      await rejects(b.channel.request(3, 'test.echo', Buffer.from('x')), 'UNAVAILABLE', /your certificate is not signed/);
    } finally {
      await Promise.all([a.close(), b.close(), c.close()]);
    }
  });

  it('psk against cert is refused with a reason, either way', async () => {
    const store = new MemoryClusterStore();
    const a = await node(store, 1, { tls: { mode: 'psk' } });
    const b = await node(store, 2, { tls: certTls() });
    try {
      await rejects(a.channel.request(2, 'test.echo', Buffer.from('x')), 'UNAVAILABLE', /its --cluster-tls is cert, ours psk/);
      await rejects(b.channel.request(1, 'test.echo', Buffer.from('x')), 'UNAVAILABLE', /refused our TLS handshake/);
      await until(() => !!refusalLine(a.lines, 'tls'), 'the psk acceptor log');
      assert.match(String(refusalLine(a.lines, 'tls')!.reason), /offered no pre-shared key/);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a TLS acceptor closes a connection that never finishes its TLS handshake, and close() drops those in progress', async () => {
    const store = new MemoryClusterStore();
    const b = await node(store, 2, { tls: { mode: 'psk' }, handshakeTimeoutMs: 500 });
    try {
      const port = b.channel.address().port;
      // A TLS record header and then nothing: the TLS server's own handshake timeout.
      const s = createConnection({ host: '127.0.0.1', port });
      s.on('error', () => undefined);
      s.write(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x40]));
      await new Promise<void>((r) => s.once('close', () => r()));
      await until(() => !!refusalLine(b.lines, 'tls'), 'the timeout log');
      assert.match(String(refusalLine(b.lines, 'tls')!.reason), /no TLS handshake within 500 ms/);
      // A connection in its TLS handshake when the channel closes is closed with it.
      const t = createConnection({ host: '127.0.0.1', port });
      t.on('error', () => undefined);
      t.write(Buffer.from([0x16, 0x03, 0x01]));
      await new Promise((r) => setTimeout(r, 50));
      const closed = new Promise<void>((r) => t.once('close', () => r()));
      await b.close();
      await closed;
    } finally {
      await b.close();
    }
  });

  it('bad certificate files are a CONFIG_ERROR at start', async () => {
    const store = new MemoryClusterStore();
    const cluster = await Cluster.start({ store, info: { id: 1, version: 'test', endpoints: {} }, leaseMs: 60_000, logger: pino({ level: 'silent' }) });
    try {
      await rejects(
        startChannel({
          cluster,
          host: '127.0.0.1',
          port: 0,
          secret: SECRET,
          logger: pino({ level: 'silent' }),
          tls: { mode: 'cert', cert: 'nope', key: 'nope', ca: ca.ca },
        }),
        'CONFIG_ERROR',
        /cannot use the certificate, key or CA/,
      );
    } finally {
      await cluster.close();
    }
  });

  it('a TLS socket carries the accepted connection (not a plaintext one)', async () => {
    const store = new MemoryClusterStore();
    const [a, b] = [await node(store, 1, { tls: { mode: 'psk' } }), await node(store, 2, { tls: { mode: 'psk' } })];
    try {
      b.channel.handle('test.echo', (_f, body) => body);
      await a.channel.request(2, 'test.echo', Buffer.from('x'));
      const conn = (a.channel as unknown as { peers: Map<number, { conn: { socket: unknown } | null }> }).peers.get(2)!.conn!;
      assert.ok(conn.socket instanceof TLSSocket);
      assert.equal((conn.socket as TLSSocket).getProtocol(), 'TLSv1.3');
      assert.equal((conn.socket as TLSSocket).getCipher().name, 'TLS_AES_128_GCM_SHA256');
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
