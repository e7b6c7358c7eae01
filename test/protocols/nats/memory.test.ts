/**
 * What a NATS client can make one connection hold (issue 24), with short limits: a half-sent operation is closed
 * after opTimeoutMs (a trickle too); replies the client does not read stop its reading past flushAt and close it as
 * a slow consumer when nothing moves for writeDeadlineMs; a client that does read them late is resumed and keeps
 * everything; the payload budget is back to zero when connections go.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { RawClient, serverSockets, startNats, until, type NatsTestServer } from './helpers.js';

const servers: NatsTestServer[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
});

async function server(opts: Parameters<typeof startNats>[0]): Promise<NatsTestServer> {
  const s = await startNats(opts);
  servers.push(s);
  return s;
}

async function client(s: NatsTestServer, connect: Record<string, unknown> = {}): Promise<RawClient> {
  const c = await RawClient.connect(s.port);
  await c.waitFor((o) => o.op === 'info');
  c.send(`CONNECT ${JSON.stringify({ verbose: false, pedantic: false, ...connect })}\r\n`);
  await c.flush();
  return c;
}

/** Resolves when the broker has closed `c`; fails after a safety net (a broker that never closes it). */
async function closedWithin(c: RawClient, ms = 10_000): Promise<void> {
  let t: NodeJS.Timeout | undefined;
  await Promise.race([c.closed, new Promise((_, reject) => (t = setTimeout(() => reject(new Error(`still open after ${ms} ms`)), ms)))]);
  clearTimeout(t);
}

/** The broker's socket of the latest connection. */
const lastServerSocket = () => [...serverSockets].at(-1)!;

describe('NATS connection: half-sent operations', () => {
  test('a payload not received whole within opTimeoutMs: -ERR Stale Connection and close; the budget is given back', async () => {
    const s = await server({ opTimeoutMs: 300 });
    const c = await client(s);
    c.send('PUB x 100\r\nabc');
    await until(() => s.adapter.payloads.aheadBytes > 0, 5000, 'the payload taken');
    await closedWithin(c);
    assert.deepEqual(c.errors(), ['Stale Connection']);
    assert.equal(s.adapter.stats.opTimeouts, 1);
    assert.equal(s.adapter.payloads.aheadBytes, 0);
    assert.ok(s.logs.some((l) => l.msg === 'nats: operation not received whole in time'));
  });

  test('a payload trickled a byte at a time (never silent long) is closed too, gathered or not', async () => {
    const s = await server({ opTimeoutMs: 400 });
    const c = await client(s);
    c.send('PUB x 1000000\r\n');
    const t = setInterval(() => c.send('a'), 50);
    try {
      await until(() => s.adapter.payloads.gathering === 1, 5000, 'gathering');
      await closedWithin(c);
    } finally {
      clearInterval(t);
    }
    assert.deepEqual(c.errors(), ['Stale Connection']);
    assert.equal(s.adapter.payloads.gathering, 0);
  });

  test('a half-sent control line is closed the same way; whole operations keep a connection open', async () => {
    const s = await server({ opTimeoutMs: 300 });
    const busy = await client(s);
    const c = await client(s);
    c.send('SUB a.b');
    // Meanwhile a client sending whole operations (each chunk ends where an operation ends) stays.
    const t0 = Date.now();
    while (!c.isClosed && Date.now() - t0 < 5000) {
      busy.send('PUB y 2\r\nhi\r\n');
      await new Promise((r) => setTimeout(r, 50));
    }
    await closedWithin(c);
    assert.deepEqual(c.errors(), ['Stale Connection']);
    await busy.flush();
    assert.equal(busy.isClosed, false);
    busy.close();
  });
});

describe('NATS connection: replies the client does not read', () => {
  /**
   * Writes `op` over and over without reading, until `until()`, the socket closes, or 64 MiB went out (a broker
   * that reads everything and never pushes back); returns the ops written.
   */
  async function flood(c: RawClient, op: string, until: () => boolean): Promise<number> {
    const chunk = Buffer.from(op.repeat(Math.floor(16384 / op.length)));
    const cap = Math.floor((64 * 1024 * 1024) / op.length);
    let n = 0;
    while (!c.isClosed && !until() && n < cap) {
      const ok = c.socket.write(chunk);
      n += chunk.length / op.length;
      if (!ok) await new Promise((r) => setTimeout(r, 5));
    }
    return n;
  }

  test('a verbose publisher that never reads its +OKs: reading stops, then it is closed as a slow consumer', async () => {
    const s = await server({ maxPending: 256 * 1024, writeDeadlineMs: 500 });
    const other = await client(s);
    const c = await client(s, { verbose: true });
    c.socket.pause();
    const sock = lastServerSocket();
    // It keeps publishing (what the kernel does not take waits in its own socket) until the broker closes it.
    let paused = false;
    let maxUnsent = 0;
    const writing = flood(c, 'PUB x 0\r\n\r\n', () => {
      paused ||= sock.isPaused();
      maxUnsent = Math.max(maxUnsent, sock.writableLength);
      return c.socket.writableLength > 32 * 1024 * 1024;
    });
    await other.flush();
    await closedWithin(c);
    await writing;
    assert.ok(paused, 'the broker stopped reading it');
    // Its unsent replies stayed near flushAt (a quarter of maxPending), not the bytes it sent.
    assert.ok(maxUnsent <= 256 * 1024, `writableLength ${maxUnsent}`);
    assert.equal(s.adapter.stats.slowConsumers, 1);
    const line = s.logs.find((l) => l.msg === 'Slow Consumer Detected');
    assert.equal(line?.reason, 'writeDeadline');
    await other.flush();
    other.close();
  });

  test('a PING flood whose PONGs are read late: paused, resumed, every PONG answered, not closed', async () => {
    const s = await server({ maxPending: 256 * 1024, writeDeadlineMs: 5000 });
    const c = await client(s);
    c.socket.pause();
    const sock = lastServerSocket();
    const pings = await flood(c, 'PING\r\n', () => sock.isPaused() || c.socket.writableLength > 32 * 1024 * 1024);
    assert.ok(sock.isPaused(), 'the broker stopped reading it once its PONGs were waiting');
    // Now it reads: everything it asked for is answered and it goes on.
    const before = c.ops.filter((o) => o.op === 'pong').length;
    c.socket.resume();
    await until(() => c.ops.filter((o) => o.op === 'pong').length - before >= pings, 10_000, 'every PONG');
    await c.flush();
    assert.equal(c.isClosed, false);
    assert.equal(sock.isPaused(), false);
    assert.equal(s.adapter.stats.slowConsumers, 0);
    c.close();
  });

  test('over maxPending at once (replies to one read larger than it): closed as a slow consumer', async () => {
    const s = await server({ maxPending: 4096, maxPayload: 1024, writeDeadlineMs: 60_000 });
    const c = await client(s, { verbose: true });
    c.socket.pause();
    // One write of 8,000 +OKs' worth of PUBs: its replies are over maxPending before the broker can stop reading.
    c.send('PUB x 0\r\n\r\n'.repeat(8000));
    await closedWithin(c);
    assert.equal(s.adapter.stats.slowConsumers, 1);
    assert.equal(s.logs.find((l) => l.msg === 'Slow Consumer Detected')?.reason, 'maxPending');
  });
});
