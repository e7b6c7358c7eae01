import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createConnection, createServer, type AddressInfo, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import pino from 'pino';
import { Cluster, MemoryClusterStore, startChannel, type ChannelOptions, type TcpChannel } from '../../src/cluster/index.js';
import { FlowError } from '../../src/core/index.js';
import { prng } from '../helpers/prng.js';

const logger = pino({ level: 'silent' });
const SECRET = 'test-secret-0123456789';

interface Node {
  cluster: Cluster;
  channel: TcpChannel;
  close(): Promise<void>;
}

/** A broker's cluster membership and real TCP channel on 127.0.0.1, its address advertised like the broker does. */
async function node(store: MemoryClusterStore, id: number, extra: Partial<ChannelOptions> = {}): Promise<Node> {
  const cluster = await Cluster.start({ store, info: { id, version: 'test', endpoints: {} }, leaseMs: 60_000, logger });
  const channel = await startChannel({ cluster, host: '127.0.0.1', port: 0, secret: SECRET, logger, ...extra });
  cluster.channel = channel;
  await cluster.advertise({ cluster: { host: '127.0.0.1', port: channel.address().port } });
  return {
    cluster,
    channel,
    async close() {
      await cluster.close();
      await channel.close();
    },
  };
}

async function rejects(p: Promise<unknown>, code: string, re?: RegExp): Promise<FlowError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof FlowError, `a FlowError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    if (re) assert.match(err.message, re);
    return err;
  }
  assert.fail(`expected a ${code} rejection`);
}

function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const start = Date.now();
  return new Promise((resolve, reject) => {
    const t = setInterval(() => {
      if (cond()) {
        clearInterval(t);
        resolve();
      } else if (Date.now() - start > ms) {
        clearInterval(t);
        reject(new Error(`timed out waiting for ${what}`));
      }
    }, 5);
  });
}

describe('cluster channel over TCP', () => {
  it('requests and replies both ways between three brokers, remote FlowErrors keep their code', async () => {
    const store = new MemoryClusterStore();
    const [a, b, c] = [await node(store, 1), await node(store, 2), await node(store, 3)];
    try {
      assert.deepEqual(a.channel.unreachable(), [], 'a peer never dialed is not unreachable');
      for (const n of [a, b, c]) {
        n.channel.handle('test.echo', (from, body) => Buffer.concat([Buffer.from(`${n.cluster.id}<-${from}:`), body]));
        n.channel.handle('test.fail', () => {
          throw new FlowError('NOT_OWNER', `broker ${n.cluster.id} does not own it`);
        });
        n.channel.handle('test.async', async (_from, body) => {
          await new Promise((r) => setTimeout(r, 5));
          return Buffer.from(body.toString().toUpperCase());
        });
      }
      // b and c learned each other's address from the store (their views predate the others' advertise).
      assert.equal((await a.channel.request(2, 'test.echo', Buffer.from('hi'))).toString(), '2<-1:hi');
      assert.equal((await b.channel.request(1, 'test.echo', Buffer.from('yo'))).toString(), '1<-2:yo');
      assert.equal((await c.channel.request(2, 'test.async', Buffer.from('abc'))).toString(), 'ABC');
      assert.equal((await a.channel.request(1, 'test.echo', Buffer.from('self'))).toString(), '1<-1:self', 'a request to itself is served locally');
      await rejects(b.channel.request(3, 'test.fail', Buffer.alloc(0)), 'NOT_OWNER', /broker 3 does not own it/);
      await rejects(a.channel.request(3, 'test.nothing', Buffer.alloc(0)), 'UNAVAILABLE', /no handler for test\.nothing/);
      // Many concurrent requests on one connection, replies matched by id; an empty body and a large one.
      const many = await Promise.all(Array.from({ length: 500 }, (_, i) => a.channel.request(3, 'test.echo', Buffer.from(String(i)))));
      many.forEach((r, i) => assert.equal(r.toString(), `3<-1:${i}`));
      assert.equal((await a.channel.request(2, 'test.echo', Buffer.alloc(0))).toString(), '2<-1:');
      const big = Buffer.alloc(3 * 1024 * 1024 + 7, 0x5a);
      const back = await b.channel.request(3, 'test.echo', big);
      assert.equal(back.length, big.length + '3<-2:'.length);
      assert.ok(back.subarray(5).equals(big));
      assert.deepEqual(a.channel.connected(), [2, 3]);
      assert.deepEqual(a.channel.unreachable(), []);
      const f = a.channel.figures() as { peers: Record<string, { sentFrames: number; receivedFrames: number; pending: number; state: string }> };
      assert.equal(f.peers['3'].state, 'connected');
      assert.ok(f.peers['3'].sentFrames >= 501 && f.peers['3'].receivedFrames >= 501, JSON.stringify(f.peers['3']));
      assert.equal(f.peers['3'].pending, 0);
    } finally {
      await Promise.all([a.close(), b.close(), c.close()]);
    }
  });

  it('one-way messages arrive in order, batched into few writes', async () => {
    const store = new MemoryClusterStore();
    const [a, b] = [await node(store, 1), await node(store, 2)];
    try {
      const got: string[] = [];
      const froms = new Set<number>();
      b.channel.on('test.note', (from, body) => {
        froms.add(from);
        got.push(body.toString());
      });
      const n = 5000;
      for (let i = 0; i < n; i++) a.channel.send(2, 'test.note', Buffer.from(`m${i}`));
      await until(() => got.length === n, 'every one-way message');
      assert.deepEqual(
        got,
        Array.from({ length: n }, (_, i) => `m${i}`),
        'in order',
      );
      assert.deepEqual([...froms], [1]);
      const f = a.channel.figures() as { peers: Record<string, { dropped: number; sentFrames: number }> };
      assert.equal(f.peers['2'].dropped, 0);
      // A one-way message to itself is delivered locally.
      const self: string[] = [];
      a.channel.on('test.self', (from, body) => self.push(`${from}:${body}`));
      a.channel.send(1, 'test.self', Buffer.from('x'));
      await until(() => self.length === 1, 'the local one-way message');
      assert.deepEqual(self, ['1:x']);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

// --- helpers for the hardening tests ---

/**
 * A TCP proxy in front of a broker's channel (advertised instead of it): cut() drops every connection through it
 * (a network blip), hold() stops forwarding towards the broker (a peer that does not read), release() resumes.
 */
async function proxy(target: () => number): Promise<{ port: number; cut(): void; hold(): void; release(): void; close(): Promise<void> }> {
  const pairs = new Set<[Socket, Socket]>();
  let held = false;
  const server = createServer((client) => {
    const upstream = createConnection({ host: '127.0.0.1', port: target() });
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    client.pipe(upstream);
    upstream.pipe(client);
    if (held) client.pause();
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    cut() {
      for (const [c, u] of pairs) {
        c.destroy();
        u.destroy();
      }
      pairs.clear();
    },
    hold() {
      held = true;
      for (const [c] of pairs) {
        c.unpipe();
        c.pause();
      }
    },
    release() {
      held = false;
      for (const [c, u] of pairs) {
        c.pipe(u);
        c.resume();
      }
    },
    close: () =>
      new Promise<void>((r) => {
        for (const [c, u] of pairs) {
          c.destroy();
          u.destroy();
        }
        server.close(() => r());
      }),
  };
}

/** A raw frame as the channel writes it: [u32 length][u8 type][u32 id][u16 method][body]. */
function frame(type: number, body: Buffer, id = 0, method = 0): Buffer {
  const h = Buffer.alloc(11);
  h.writeUInt32BE(7 + body.length, 0);
  h[4] = type;
  h.writeUInt32BE(id, 5);
  h.writeUInt16BE(method, 9);
  return Buffer.concat([h, body]);
}

/** Frames read from a raw socket until it closes: [type, body]. */
function rawClient(port: number): { socket: Socket; frames: Array<[number, Buffer]>; closed: Promise<void> } {
  const socket = createConnection({ host: '127.0.0.1', port });
  const frames: Array<[number, Buffer]> = [];
  let buf = Buffer.alloc(0);
  socket.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32BE(0)) {
      const n = buf.readUInt32BE(0);
      frames.push([buf[4], buf.subarray(11, 4 + n)]);
      buf = buf.subarray(4 + n);
    }
  });
  socket.on('error', () => undefined);
  const closed = new Promise<void>((r) => socket.on('close', () => r()));
  return { socket, frames, closed };
}

const HELLO = 10;
const AUTH = 11;
const WELCOME = 12;
const REFUSE = 13;

function refusal(frames: Array<[number, Buffer]>): string {
  const r = frames.find(([t]) => t === REFUSE);
  assert.ok(r, `a REFUSE frame (got types ${frames.map(([t]) => t).join(',')})`);
  return (JSON.parse(r[1].toString()) as { reason: string }).reason;
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

describe('cluster channel: framing', () => {
  it('frames of random sizes (empty to 300 KiB, split anywhere across socket reads) arrive intact', async () => {
    const store = new MemoryClusterStore();
    const [a, b] = [await node(store, 1), await node(store, 2)];
    try {
      const rnd = prng(17);
      const bodies: Buffer[] = [];
      for (let i = 0; i < 400; i++) {
        const r = rnd();
        const size = r < 0.05 ? 0 : r < 0.7 ? Math.floor(rnd() * 200) : r < 0.95 ? Math.floor(rnd() * 20_000) : Math.floor(rnd() * 300_000);
        const body = Buffer.allocUnsafe(size);
        for (let j = 0; j < size; j++) body[j] = (i * 31 + j) & 0xff;
        bodies.push(body);
      }
      const got: Buffer[] = [];
      b.channel.on('test.frame', (_f, body) => got.push(Buffer.from(body)));
      b.channel.handle('test.sum', (_f, body) => Buffer.from(String(body.reduce((x, y) => x + y, 0))));
      const sums: Array<Promise<Buffer>> = [];
      bodies.forEach((body, i) => {
        a.channel.send(2, 'test.frame', body);
        if (i % 7 === 0) sums.push(a.channel.request(2, 'test.sum', body));
      });
      const answers = await Promise.all(sums);
      answers.forEach((r, k) => assert.equal(r.toString(), String(bodies[k * 7].reduce((x, y) => x + y, 0))));
      await until(() => got.length === bodies.length, 'every frame');
      got.forEach((g, i) => assert.ok(g.equals(bodies[i]), `frame ${i} (${bodies[i].length} bytes) intact`));
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

describe('cluster channel: order', () => {
  it('requests and one-way messages to a peer arrive in call order, while connecting and once connected', async () => {
    const store = new MemoryClusterStore();
    const [a, b] = [await node(store, 1), await node(store, 2)];
    try {
      const log: string[] = [];
      b.channel.on('test.note', (_f, body) => log.push(`n${body}`));
      b.channel.handle('test.req', (_f, body) => (log.push(`r${body}`), body));
      const calls: Array<Promise<Buffer>> = [];
      const expected: string[] = [];
      for (let round = 0; round < 2; round++) {
        // Round 0 starts while the connection is being made; round 1 on the open connection.
        for (let i = 0; i < 50; i++) {
          const k = `${round}.${i}`;
          if (i % 3 === 0) {
            calls.push(a.channel.request(2, 'test.req', Buffer.from(k)));
            expected.push(`r${k}`);
          } else {
            a.channel.send(2, 'test.note', Buffer.from(k));
            expected.push(`n${k}`);
          }
        }
        await Promise.all(calls);
        await until(() => log.length === expected.length, 'every call');
      }
      assert.deepEqual(log, expected);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

describe('cluster channel: memory', () => {
  it('a small request body kept by its handler does not pin the socket chunk it arrived in', async () => {
    const store = new MemoryClusterStore();
    const [a, b] = [await node(store, 1), await node(store, 2)];
    try {
      const kept: Buffer[] = [];
      b.channel.handle('test.keep', (_f, body) => (kept.push(body), Buffer.alloc(0)));
      await a.channel.request(2, 'test.keep', Buffer.alloc(100, 1));
      // Many small requests in one turn arrive in large chunks.
      await Promise.all(Array.from({ length: 400 }, () => a.channel.request(2, 'test.keep', Buffer.alloc(100, 2))));
      const largest = Math.max(...kept.map((k) => k.buffer.byteLength));
      assert.ok(largest <= Buffer.poolSize, `each kept body holds at most a pool slab, not a socket chunk (${largest} bytes)`);
      assert.ok(kept.every((k) => k.length === 100));
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

describe('cluster channel: authentication and refusals', () => {
  it('a broker with another secret is refused, whichever side dials; neither serves the other', async () => {
    const store = new MemoryClusterStore();
    const a = await node(store, 1);
    const b = await node(store, 2, { secret: 'another-secret-0123456789' });
    try {
      let served = 0;
      a.channel.handle('test.echo', (_f, body) => (served++, body));
      b.channel.handle('test.echo', (_f, body) => (served++, body));
      await rejects(b.channel.request(1, 'test.echo', Buffer.from('x')), 'UNAVAILABLE', /refused the connection: wrong cluster secret/);
      await rejects(a.channel.request(2, 'test.echo', Buffer.from('x')), 'UNAVAILABLE', /refused the connection: wrong cluster secret/);
      assert.equal(served, 0);
      assert.deepEqual(a.channel.connected(), []);
      assert.deepEqual(b.channel.connected(), []);
      // Tried and failed: unreachable, on both sides.
      assert.deepEqual(a.channel.unreachable(), [2]);
      assert.deepEqual(b.channel.unreachable(), [1]);
      assert.equal((a.channel.figures() as { refused: Record<string, number> }).refused.secret, 1);
      assert.equal((b.channel.figures() as { refused: Record<string, number> }).refused.secret, 1);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('an acceptor that cannot prove the secret gets nothing from the dialer', async () => {
    const store = new MemoryClusterStore();
    const a = await node(store, 1);
    // An impostor registered as broker 2 (e.g. a stale row pointing at another service): says hello, then welcomes
    // the dialer with a MAC it could not compute.
    const got: number[] = [];
    const impostor = createServer((s) => {
      s.on('error', () => undefined);
      s.write(frame(HELLO, Buffer.from(JSON.stringify({ v: 1, id: 2, inc: 'fake', nonce: '00'.repeat(16) }))));
      let buf = Buffer.alloc(0);
      s.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32BE(0)) {
          const type = buf[4];
          got.push(type);
          buf = buf.subarray(4 + buf.readUInt32BE(0));
          if (type === AUTH) s.write(frame(WELCOME, Buffer.from(JSON.stringify({ mac: 'ab'.repeat(32) }))));
        }
      });
    });
    await new Promise<void>((r) => impostor.listen(0, '127.0.0.1', () => r()));
    try {
      await store.register(
        {
          id: 2,
          incarnation: 'fake',
          version: 'x',
          startedAt: Date.now(),
          endpoints: { cluster: { host: '127.0.0.1', port: (impostor.address() as AddressInfo).port } },
        },
        60_000,
      );
      await rejects(a.channel.request(2, 'test.echo', Buffer.from('secret data')), 'UNAVAILABLE', /does not know the cluster secret/);
      a.channel.send(2, 'test.note', Buffer.from('live data'));
      assert.deepEqual(got, [AUTH], 'the impostor saw the authentication only, never a request or a one-way message');
      assert.equal((a.channel.figures() as { refused: Record<string, number> }).refused['peer-secret'], 1);
    } finally {
      await a.close();
      await new Promise<void>((r) => impostor.close(() => r()));
    }
  });

  it('refuses an unregistered broker and a dead one, even with the right secret', async () => {
    const store = new MemoryClusterStore();
    const a = await node(store, 1);
    // Broker 9 lives in another cluster's store that points broker 1's id at a's channel: a knows nothing of 9.
    const other = new MemoryClusterStore();
    await other.register(
      { id: 1, incarnation: 'whatever', version: 'x', startedAt: Date.now(), endpoints: { cluster: { host: '127.0.0.1', port: a.channel.address().port } } },
      60_000,
    );
    const stranger = await node(other, 9);
    try {
      await rejects(stranger.channel.request(1, 'test.echo', Buffer.alloc(0)), 'UNAVAILABLE', /broker 9 .* is not a live member/);
      // Broker 9 now registered in a's store, but its lease is over: still refused.
      await store.register({ ...stranger.cluster.self, endpoints: {} }, -1);
      await until(() => (stranger.channel.figures() as { peers: Record<string, { state: string }> }).peers['1'].state === 'idle', 'the backoff to pass');
      await rejects(stranger.channel.request(1, 'test.echo', Buffer.alloc(0)), 'UNAVAILABLE', /is not a live member/);
      assert.equal((a.channel.figures() as { refused: Record<string, number> }).refused.unknown, 2);
      // The dialing side: an unregistered id, a dead broker.
      await rejects(a.channel.request(7, 'test.echo', Buffer.alloc(0)), 'UNAVAILABLE', /broker 7 is not registered/);
      await rejects(a.channel.request(9, 'test.echo', Buffer.alloc(0)), 'UNAVAILABLE', /broker 9 is dead/);
    } finally {
      await Promise.all([a.close(), stranger.close()]);
    }
  });

  it('a connection without a handshake is closed after the timeout; garbage and oversized pre-auth frames are refused; refusals are logged rate-limited', async () => {
    const store = new MemoryClusterStore();
    const { logger: log, lines } = capture();
    const a = await node(store, 1, { handshakeTimeoutMs: 200, logger: log });
    try {
      const port = a.channel.address().port;
      const silent = rawClient(port);
      await silent.closed;
      assert.equal(silent.frames[0][0], HELLO);
      assert.match(refusal(silent.frames), /no handshake within 200 ms/);

      const huge = rawClient(port);
      const len = Buffer.alloc(4);
      len.writeUInt32BE(1 << 20);
      huge.socket.write(len);
      await huge.closed;
      assert.match(refusal(huge.frames), /over the limit/);

      // Twenty clients with a wrong MAC: twenty refusals, at most five log lines for them (one address).
      for (let i = 0; i < 20; i++) {
        const c = rawClient(port);
        await until(() => c.frames.length > 0, 'hello');
        const hello = JSON.parse(c.frames[0][1].toString()) as { id: number; inc: string };
        c.socket.write(
          frame(AUTH, Buffer.from(JSON.stringify({ v: 1, id: 5, inc: 'x', nonce: '11'.repeat(16), to: hello.id, toInc: hello.inc, mac: '22'.repeat(32) }))),
        );
        await c.closed;
        assert.equal(refusal(c.frames), 'wrong cluster secret');
      }
      const f = a.channel.figures() as { refused: Record<string, number> };
      assert.deepEqual(f.refused, { timeout: 1, frame: 1, secret: 20 });
      const logged = lines.filter((l) => l.msg === 'cluster channel: connection refused' && l.kind === 'secret');
      assert.ok(logged.length >= 1 && logged.length <= 5, `refusals are rate-limited in the log (${logged.length} lines)`);
      assert.ok(!JSON.stringify(lines).includes(SECRET), 'the secret is never logged');
    } finally {
      await a.close();
    }
  });

  it('close() aborts a connection still in its handshake and fails what waits on it', { timeout: 20_000 }, async () => {
    const store = new MemoryClusterStore();
    const a = await node(store, 1, { handshakeTimeoutMs: 120_000 });
    const sockets = new Set<Socket>();
    const mute = createServer((s) => {
      sockets.add(s);
      s.on('error', () => undefined);
    });
    await new Promise<void>((r) => mute.listen(0, '127.0.0.1', () => r()));
    try {
      await store.register(
        {
          id: 2,
          incarnation: 'mute',
          version: 'x',
          startedAt: Date.now(),
          endpoints: { cluster: { host: '127.0.0.1', port: (mute.address() as AddressInfo).port } },
        },
        60_000,
      );
      const p = a.channel.request(2, 'test.echo', Buffer.alloc(0), 120_000).then(
        () => null,
        (e: unknown) => e,
      );
      await until(() => sockets.size === 1, 'the dial');
      await a.close();
      const e = await p;
      assert.ok(e instanceof FlowError && (e.code === 'CLOSED' || e.code === 'UNAVAILABLE'), String(e));
      await until(() => [...sockets].every((s) => s.destroyed || s.readableEnded), 'the dialed socket to be closed');
    } finally {
      await a.close();
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => mute.close(() => r()));
    }
  });

  it('a dialer gives up on a peer that never says hello', async () => {
    const store = new MemoryClusterStore();
    const a = await node(store, 1, { handshakeTimeoutMs: 200 });
    const sockets = new Set<Socket>();
    const mute = createServer((s) => {
      sockets.add(s);
      s.on('error', () => undefined);
    });
    await new Promise<void>((r) => mute.listen(0, '127.0.0.1', () => r()));
    try {
      await store.register(
        {
          id: 2,
          incarnation: 'mute',
          version: 'x',
          startedAt: Date.now(),
          endpoints: { cluster: { host: '127.0.0.1', port: (mute.address() as AddressInfo).port } },
        },
        60_000,
      );
      await rejects(a.channel.request(2, 'test.echo', Buffer.alloc(0), 60_000), 'UNAVAILABLE', /no handshake with broker 2/);
    } finally {
      await a.close();
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => mute.close(() => r()));
    }
  });
});

describe('cluster channel: failures and back-pressure', () => {
  it(
    'a request not answered in time is UNAVAILABLE; a lost connection fails every pending request at once; the link comes back by itself',
    { timeout: 60_000 },
    async () => {
      const store = new MemoryClusterStore();
      const [a, b] = [await node(store, 1), await node(store, 2)];
      const px = await proxy(() => b.channel.address().port);
      await b.cluster.advertise({ cluster: { host: '127.0.0.1', port: px.port } });
      const hanging: Array<() => void> = [];
      b.channel.handle('test.hang', () => new Promise<Buffer>((r) => hanging.push(() => r(Buffer.from('late')))));
      b.channel.handle('test.echo', (_f, body) => body);
      try {
        await rejects(a.channel.request(2, 'test.hang', Buffer.alloc(0), 100), 'UNAVAILABLE', /did not answer test\.hang within 100 ms/);
        let f = (a.channel.figures() as { peers: Record<string, { timeouts: number; pending: number; connects: number; rejectedOnLoss: number }> }).peers['2'];
        assert.equal(f.timeouts, 1);
        assert.equal(f.pending, 0);
        hanging.splice(0).forEach((r) => r()); // a late reply to a timed-out request is ignored
        // 50 requests waiting on the peer; the connection breaks: all fail now, long before their 2-minute timeout.
        const pend = Array.from({ length: 50 }, () =>
          a.channel.request(2, 'test.hang', Buffer.alloc(0), 120_000).then(
            () => null,
            (e: unknown) => e,
          ),
        );
        await until(() => hanging.length === 50, 'the peer to hold 50 requests');
        px.cut();
        const results = await Promise.all(pend);
        for (const e of results) {
          assert.ok(e instanceof FlowError && e.code === 'UNAVAILABLE', String(e));
          assert.match(e.message, /connection to broker 2 was lost/);
        }
        f = (a.channel.figures() as { peers: Record<string, typeof f> }).peers['2'];
        assert.equal(f.rejectedOnLoss, 50);
        // Reconnected in the background (with backoff), no request needed: at least once more (on a loaded machine a
        // first redial may fail its handshake and be retried), within 20 s.
        await until(() => (a.channel.figures() as { peers: Record<string, typeof f> }).peers['2'].connects >= 2, 'a reconnection', 20_000);
        assert.equal((await a.channel.request(2, 'test.echo', Buffer.from('again'))).toString(), 'again');
        hanging.splice(0).forEach((r) => r());
      } finally {
        await Promise.all([a.close(), b.close()]);
        await px.close();
      }
    },
  );

  it('fails requests to a peer at once when the membership view declares it dead', { timeout: 60_000 }, async () => {
    const store = new MemoryClusterStore();
    const [a, b] = [await node(store, 1), await node(store, 2)];
    a.cluster.begin();
    b.channel.handle('test.hang', () => new Promise<Buffer>(() => undefined));
    try {
      a.cluster.kick();
      await until(() => a.cluster.isAlive(2), 'a to see b');
      const p = a.channel.request(2, 'test.hang', Buffer.alloc(0), 120_000);
      await until(
        () => (b.channel.figures() as { peers: Record<string, { receivedFrames: number }> }).peers['1']?.receivedFrames >= 2,
        'the request to reach b',
      );
      await b.cluster.close(); // deregistered; its channel still holds the connection
      a.cluster.kick();
      await rejects(p, 'UNAVAILABLE', /broker 2 is dead/);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('reaches a restarted peer (a new incarnation, another port)', { timeout: 60_000 }, async () => {
    const store = new MemoryClusterStore();
    const a = await node(store, 1);
    let b = await node(store, 2);
    const serve = (n: Node) => n.channel.handle('test.who', () => Buffer.from(n.cluster.incarnation));
    serve(b);
    try {
      const first = (await a.channel.request(2, 'test.who', Buffer.alloc(0))).toString();
      await b.close();
      b = await node(store, 2);
      serve(b);
      assert.notEqual(b.cluster.incarnation, first);
      // Callers retry UNAVAILABLE (bounded); the channel finds the new address in the store.
      let answer = '';
      for (let i = 0; i < 200 && answer === ''; i++) {
        try {
          answer = (await a.channel.request(2, 'test.who', Buffer.alloc(0))).toString();
        } catch (err) {
          assert.ok(err instanceof FlowError && err.code === 'UNAVAILABLE', String(err));
          await new Promise((r) => setTimeout(r, 25));
        }
      }
      assert.equal(answer, b.cluster.incarnation);
      const f = (a.channel.figures() as { peers: Record<string, { incarnation: string; connects: number }> }).peers['2'];
      assert.equal(f.incarnation, b.cluster.incarnation);
      assert.equal(f.connects, 2);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it(
    'a peer that stops reading: ready() waits, requests wait, one-way messages past the cap are dropped and counted, memory stays bounded',
    { timeout: 60_000 },
    async () => {
      const store = new MemoryClusterStore();
      const highWaterBytes = 256 * 1024;
      const maxQueuedBytes = 1024 * 1024;
      const a = await node(store, 1, { highWaterBytes, maxQueuedBytes });
      const b = await node(store, 2);
      const px = await proxy(() => b.channel.address().port);
      await b.cluster.advertise({ cluster: { host: '127.0.0.1', port: px.port } });
      const seen: number[] = [];
      b.channel.on('test.bulk', (_f, body) => seen.push(body.readUInt32BE(0)));
      b.channel.handle('test.echo', (_f, body) => body);
      type Fig = { peers: Record<string, { dropped: number; queuedBytes: number; sentFrames: number }> };
      const fig = () => (a.channel.figures() as Fig).peers['2'];
      try {
        await a.channel.request(2, 'test.echo', Buffer.from('up'));
        px.hold();
        const msg = 16 * 1024;
        let sent = 0;
        let maxQueued = 0;
        while (fig().dropped === 0) {
          assert.ok(sent < 8000, 'one-way messages are dropped once the peer stops reading');
          const body = Buffer.alloc(msg);
          body.writeUInt32BE(sent, 0);
          a.channel.send(2, 'test.bulk', body);
          sent++;
          maxQueued = Math.max(maxQueued, fig().queuedBytes);
          if (sent % 8 === 0) await new Promise((r) => setImmediate(r));
        }
        for (let i = 0; i < 100; i++) {
          const body = Buffer.alloc(msg);
          body.writeUInt32BE(sent++, 0);
          a.channel.send(2, 'test.bulk', body);
          maxQueued = Math.max(maxQueued, fig().queuedBytes);
        }
        assert.ok(maxQueued <= maxQueuedBytes, `queued bytes stay under the cap (${maxQueued})`);
        assert.ok(fig().queuedBytes >= highWaterBytes, 'over the high-water mark');
        let readyDone = false;
        const ready = a.channel.ready(2).then(() => (readyDone = true));
        const req = a.channel.request(2, 'test.echo', Buffer.from('after'), 120_000);
        assert.equal(readyDone, false);
        px.release();
        await ready;
        assert.equal((await req).toString(), 'after', 'the waiting request went through');
        const dropped = fig().dropped;
        await until(() => seen.length === sent - dropped, `every message not dropped (${sent} sent, ${dropped} dropped)`);
        for (let i = 1; i < seen.length; i++) assert.ok(seen[i] > seen[i - 1], 'in order, drops are gaps');
      } finally {
        px.release();
        await Promise.all([a.close(), b.close()]);
        await px.close();
      }
    },
  );

  it('frames over the limit: refused by the sender, and a receiver closes a connection that sends one', { timeout: 60_000 }, async () => {
    const store = new MemoryClusterStore();
    const a = await node(store, 1);
    const b = await node(store, 2, { maxFrameBytes: 1024 });
    a.channel.handle('test.echo', (_f, body) => body);
    a.channel.handle('test.big', () => Buffer.alloc(4096));
    b.channel.handle('test.echo', (_f, body) => body);
    try {
      await rejects(b.channel.request(1, 'test.echo', Buffer.alloc(2048)), 'LIMIT_EXCEEDED', /over the channel's frame limit/);
      b.channel.send(1, 'test.note', Buffer.alloc(2048));
      assert.equal((b.channel.figures() as { peers: Record<string, { dropped: number }> }).peers['1'].dropped, 1);
      assert.equal((await b.channel.request(1, 'test.echo', Buffer.alloc(1000))).length, 1000, 'a frame under the limit goes');
      // b reads frames of at most 1 KiB: a reply of 4 KiB is a protocol error, the connection closes, the request fails.
      await rejects(b.channel.request(1, 'test.big', Buffer.alloc(0)), 'UNAVAILABLE', /lost/);
      // a's 2 KiB request to b: b closes the connection.
      await rejects(a.channel.request(2, 'test.echo', Buffer.alloc(2048)), 'UNAVAILABLE', /lost/);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
