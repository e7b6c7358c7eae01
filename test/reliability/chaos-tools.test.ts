/**
 * The chaos runner's tools (bench/reliability/chaos.ts): the fault-injecting TCP proxy (test/helpers/fault-proxy.ts)
 * passes, stalls (bytes held, then delivered in order), cuts (connections reset, new ones refused) and tears (half
 * of a write passed on, the answer held back, the connection closed when the tear ends); the nemesis's schedule is a
 * function of its seed.
 */
import assert from 'node:assert/strict';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { FaultProxy } from '../helpers/fault-proxy.js';
import { DEFAULT_FAULT_KINDS, defaultFaultKinds, FAULT_KINDS, faultSchedule, NETNS_KINDS } from '../../bench/reliability/chaos-nemesis.js';

/** An echo server on a free port. */
async function echoServer(): Promise<{ server: Server; port: number }> {
  const server = createServer((s) => {
    s.on('error', () => undefined); // the proxy resets it on a cut
    s.pipe(s);
  });
  const port = await new Promise<number>((r) => server.listen(0, '127.0.0.1', () => r((server.address() as { port: number }).port)));
  return { server, port };
}

function connect(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = createConnection({ host: '127.0.0.1', port }, () => resolve(s));
    s.once('error', reject);
  });
}

/** Everything `s` receives, as a string so far. */
function collect(s: Socket): { text: () => string; closed: Promise<void> } {
  let got = '';
  s.on('data', (d: Buffer) => (got += d.toString()));
  const closed = new Promise<void>((r) => s.once('close', () => r()));
  s.on('error', () => undefined);
  return { text: () => got, closed };
}

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(pred: () => boolean, ms = 2000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error('condition not met');
    await wait(10);
  }
}

describe('fault proxy', () => {
  let echo: { server: Server; port: number };
  let proxy: FaultProxy;
  // A proxy and an echo server per test.
  beforeEach(async () => {
    echo = await echoServer();
    proxy = await FaultProxy.start({ port: echo.port });
  });
  afterEach(() => {
    void proxy.close();
    echo.server.close();
    echo.server.unref();
  });

  it('passes bytes both ways', async () => {
    const s = await connect(proxy.port);
    const c = collect(s);
    s.write('hello');
    await until(() => c.text() === 'hello');
    s.destroy();
  });

  it('stall holds bytes (open and new connections) and delivers them in order on pass', async () => {
    const a = await connect(proxy.port);
    const ca = collect(a);
    a.write('1');
    await until(() => ca.text() === '1');
    proxy.set('stall');
    a.write('2');
    const b = await connect(proxy.port); // accepted, not connected onward
    const cb = collect(b);
    b.write('x');
    await wait(300);
    assert.equal(ca.text(), '1');
    assert.equal(cb.text(), '');
    proxy.set('pass');
    await until(() => ca.text() === '12' && cb.text() === 'x');
    a.destroy();
    b.destroy();
  });

  it('cut resets open connections and refuses new ones until pass', async () => {
    const a = await connect(proxy.port);
    const ca = collect(a);
    proxy.set('cut');
    await ca.closed;
    // A new connection is reset at once: refused while connecting, or closed right after.
    const refused = await connect(proxy.port).then(
      (b) => collect(b).closed.then(() => true),
      () => true,
    );
    assert.ok(refused);
    proxy.set('pass');
    const d = await connect(proxy.port);
    const cd = collect(d);
    d.write('again');
    await until(() => cd.text() === 'again');
    d.destroy();
  });
});

describe('fault proxy tear', () => {
  it('passes half of the next write on, holds the answer back, and closes the connection when the tear ends', async () => {
    const got: string[] = [];
    const closed: Array<Promise<void>> = [];
    // A server that records what arrives and answers "ok" to each chunk.
    const server = createServer((s) => {
      s.on('error', () => undefined);
      closed.push(new Promise((r) => s.once('close', () => r())));
      s.on('data', (d: Buffer) => {
        got.push(d.toString());
        s.write('ok');
      });
    });
    const port = await new Promise<number>((r) => server.listen(0, '127.0.0.1', () => r((server.address() as { port: number }).port)));
    const proxy = await FaultProxy.start({ port });
    try {
      const a = await connect(proxy.port);
      const ca = collect(a);
      a.write('first');
      await until(() => ca.text() === 'ok');
      proxy.set('tear');
      a.write('abcdefgh');
      await until(() => got.join('') === 'firstabcd');
      await wait(200);
      assert.equal(ca.text(), 'ok', 'the torn write is not answered');
      assert.equal(proxy.tornWrites, 1);
      proxy.set('pass');
      await ca.closed;
      await closed[0];
      assert.equal(got.join(''), 'firstabcd', 'the second half never arrived');
      // New connections pass again.
      const b = await connect(proxy.port);
      const cb = collect(b);
      b.write('x');
      await until(() => cb.text() === 'ok');
      b.destroy();
    } finally {
      await proxy.close();
      server.close();
      server.unref();
    }
  });
});

describe('nemesis schedule', () => {
  it('is a function of the seed: every kind in turn, the same victims and durations for the same seed', () => {
    const take = (seed: number) => {
      const next = faultSchedule(seed, 2000, [1, 2, 3]);
      return Array.from({ length: 2 * DEFAULT_FAULT_KINDS.length }, () => next());
    };
    const a = take(5);
    assert.deepEqual(take(5), a);
    assert.notDeepEqual(take(6), a);
    assert.deepEqual(
      a.map((f) => f.kind),
      [...DEFAULT_FAULT_KINDS, ...DEFAULT_FAULT_KINDS],
    );
    assert.ok(!DEFAULT_FAULT_KINDS.includes('pg-failover'), 'pg-failover needs --pg-ha');
    assert.ok(!DEFAULT_FAULT_KINDS.some((k) => NETNS_KINDS.includes(k)), 'the net-* kinds need --netns');
    for (const f of a) {
      if (f.kind === 'pause' || f.kind === 'pg-partition') assert.ok(f.durationMs > 2000, `${f.kind} outlasts the lease`);
      // Faults of every broker at once, or of a broker of their own (join-leave's spare): no victim drawn.
      if (['s3-stall', 's3-cut', 's3-slow', 'pg-slow', 'bit-flip', 'join-leave'].includes(f.kind)) assert.equal(f.broker, null);
      else assert.ok([1, 2, 3].includes(f.broker!), `${f.kind}: victim ${f.broker}`);
      if (f.kind === 'torn-write') assert.ok(f.durationMs >= 200 && f.pick >= 0 && f.pick < 1);
      if (f.kind === 'pg-slow' || f.kind === 's3-slow') assert.ok(f.delayMs! > 0 && f.durationMs > 0, `${f.kind} slows for a while`);
    }
  });

  it('takes the kinds it is given, in their order', () => {
    const next = faultSchedule(1, 2000, [1, 2, 3], [1000, 2000], ['bit-flip', 'pg-failover']);
    assert.deepEqual(
      Array.from({ length: 4 }, () => next().kind),
      ['bit-flip', 'pg-failover', 'bit-flip', 'pg-failover'],
    );
    assert.equal(FAULT_KINDS.length, DEFAULT_FAULT_KINDS.length + 1 + NETNS_KINDS.length);
  });

  it('with --netns: the network kinds instead of the proxy in front of the cluster ports; with --pg-ha: the failover', () => {
    const netns = defaultFaultKinds({ netns: true });
    assert.ok(NETNS_KINDS.every((k) => netns.includes(k)));
    assert.ok(!netns.includes('peer-partition') && !netns.includes('pg-failover'));
    assert.deepEqual(defaultFaultKinds({}), DEFAULT_FAULT_KINDS);
    assert.deepEqual(
      defaultFaultKinds({ netns: true, pgHa: true }),
      FAULT_KINDS.filter((k) => k !== 'peer-partition'),
    );
    const next = faultSchedule(3, 2000, [1, 2, 3], [1000, 2000], ['net-loss', 'net-pg']);
    const loss = next();
    assert.ok(loss.lossPercent! >= 10 && loss.lossPercent! <= 40 && [1, 2, 3].includes(loss.broker!));
    assert.ok(next().durationMs > 2000, 'net-pg outlasts the lease');
  });
});
