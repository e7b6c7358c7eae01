/**
 * What a hostile Kafka client can make the broker hold, byte level: memory announced by a size prefix and never
 * sent, oversized requests before SASL completes, a failed allocation, half-sent requests, idle and
 * never-authenticated connections, and the rate of the log lines all of these cause.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Engine, decodeBatch, encodeBatch } from '../../../src/core/index.js';
import { MemoryUserStore, PasswordGuard, saslProvider } from '../../../src/control/index.js';
import { createKafkaAdapter, startKafkaListener, type KafkaAdapter, type KafkaOptions } from '../../../src/protocols/kafka/index.js';
import {
  FetchApi,
  KafkaErrorCode as E,
  MetadataApi,
  ProduceApi,
  SaslAuthenticateApi,
  SaslHandshakeApi,
  decodeResponse,
  type FetchRequest,
  type ProduceRequest,
} from '../../../src/protocols/kafka/codec/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { GatedStreams, MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger, metadataRequest as md, type CapturedLog } from './helpers.js';

const produce = (topic: string, records: Buffer): ProduceRequest => ({
  transactionalId: null,
  acks: -1,
  timeoutMs: 5000,
  topics: [{ name: topic, partitions: [{ index: 0, records }] }],
});

const fetchReq = (topic: string, maxWaitMs: number): FetchRequest => ({
  replicaId: -1,
  maxWaitMs,
  minBytes: 1,
  maxBytes: 1 << 20,
  isolationLevel: 0,
  sessionId: 0,
  sessionEpoch: -1,
  topics: [
    { topic, partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 0, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 1 << 20 }] },
  ],
  forgottenTopics: [],
  rackId: '',
  clusterId: null,
});

/** A batch of `n` records of `size` bytes each. */
const batch = (n: number, size: number) =>
  encodeBatch(Array.from({ length: n }, (_, i) => ({ key: null, value: Buffer.alloc(size, 97 + (i % 26)), headers: [], timestamp: Date.now() })));

const plainToken = (user: string, pw: string) => Buffer.from(`\0${user}\0${pw}`, 'utf8');

/** A size prefix announcing `size` bytes, followed by `sent` of them. */
function announce(size: number, sent: number): Buffer {
  const b = Buffer.alloc(4 + sent, 1);
  b.writeInt32BE(size, 0);
  return b;
}

async function until(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

interface Setup {
  engine: Engine;
  adapter: KafkaAdapter;
  listener: ProtocolListener;
  port: number;
  log: CapturedLog;
  close(): Promise<void>;
}

async function setup(opts: KafkaOptions = {}, sasl = false): Promise<Setup> {
  const m = new MemoryStreams();
  const engine = new Engine(m, m);
  const log = captureLogger();
  const ctx = { engine, logger: log.logger, brokerId: 1 };
  const users = sasl ? await MemoryUserStore.fromPasswords([{ username: 'alice', password: 'wonderland' }]) : null;
  const guard = users ? new PasswordGuard(users) : null;
  const adapter = createKafkaAdapter(ctx, { ...opts, ...(guard ? { sasl: saslProvider(guard, ['PLAIN']) } : {}) });
  const listener = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0, sasl }, {}, adapter);
  const close = async () => {
    await listener.close();
    await guard?.close();
  };
  return { engine, adapter, listener, port: listener.address().port, log, close };
}

async function authenticate(c: RawClient): Promise<void> {
  assert.equal((await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' })).errorCode, E.NONE);
  assert.equal((await c.call(SaslAuthenticateApi, 2, { authBytes: plainToken('alice', 'wonderland') })).errorCode, E.NONE);
}

describe('kafka connection limits', () => {
  it('does not allocate frames announced by a size prefix beyond its budget: they grow with the bytes that arrive', async () => {
    const s = await setup({ frameReserveBytes: 4 << 20 });
    const clients: RawClient[] = [];
    try {
      const before = process.memoryUsage().arrayBuffers;
      // One request of 1 MiB, half sent: its frame is taken whole (the budget has room) and counts what is missing.
      const ok = await RawClient.connect(s.port);
      clients.push(ok);
      ok.send(announce(1 << 20, 512 * 1024));
      await until(() => s.adapter.frames.aheadBytes === 512 * 1024, 'the half-sent frame to be reserved');
      // Twenty strangers announce 16 MiB each and send 1000 bytes: nothing of that fits the budget, they are gathered.
      for (let i = 0; i < 20; i++) {
        const c = await RawClient.connect(s.port);
        clients.push(c);
        c.send(announce(16 << 20, 1000));
      }
      await until(() => s.adapter.frames.gathering === 20, 'twenty frames being gathered');
      const grown = process.memoryUsage().arrayBuffers - before;
      assert.ok(grown < 16 << 20, `array buffers grew by ${grown} bytes for 20 x 16 MiB announced`);
      assert.equal(s.adapter.frames.aheadBytes, 512 * 1024);
      assert.ok(s.adapter.frames.stats().aheadBytes <= s.adapter.frames.stats().aheadLimit);
      // The rest of the half-sent request arrives: the budget comes back.
      ok.send(Buffer.alloc(512 * 1024));
      await until(() => s.adapter.frames.aheadBytes === 0, 'the reservation to be given back');
      // Closing the strangers gives back what they held.
      for (const c of clients) c.close();
      await until(() => s.adapter.frames.gathering === 0 && s.listener.connections() === 0, 'the connections to close');
      // A producer still gets its frames from the pool, and a request gathered in pieces arrives intact.
      await s.engine.createStream({ name: 'fast', partitions: 1 });
      const p = await RawClient.connect(s.port);
      clients.push(p);
      const allocated = s.adapter.frames.allocated;
      const reused = s.adapter.frames.reused;
      const r = await p.call(ProduceApi, 7, produce('fast', batch(100, 1000)));
      assert.equal(r.topics[0].partitions[0].errorCode, E.NONE);
      assert.equal(s.adapter.frames.allocated + s.adapter.frames.reused, allocated + reused + 1, 'taken from the pool');
      const big = batch(6, 1 << 20);
      const frame = p.frame(ProduceApi, 7, produce('fast', big));
      assert.ok(frame.length - 4 > 4 << 20);
      const gathered = s.adapter.frames.gathered;
      p.send(frame);
      const r2 = decodeResponse(ProduceApi, 7, await p.next(10_000)).body;
      assert.equal(r2.topics[0].partitions[0].errorCode, E.NONE);
      assert.equal(s.adapter.frames.gathered, gathered + 1, 'over the budget: gathered');
      const stored = await s.engine.read('fast', 0, 100, 1 << 30);
      const recs = decodeBatch(stored[0]);
      assert.equal(recs.length, 6);
      recs.forEach((r, i) => assert.ok(r.value!.equals(Buffer.alloc(1 << 20, 97 + i)), `record ${i} stored as sent`));
    } finally {
      for (const c of clients) c.close();
      await s.close();
    }
  });

  it('joins a request trickling in byte by byte into few pieces, and reads it intact', async () => {
    const s = await setup({ frameReserveBytes: 0 });
    try {
      const c = await RawClient.connect(s.port);
      const f = c.frame(MetadataApi, 4, md(['a.topic']));
      for (let i = 0; i < f.length; i++) {
        c.send(f.subarray(i, i + 1));
        await new Promise((r) => setImmediate(r));
      }
      const res = decodeResponse(MetadataApi, 4, await c.next());
      assert.equal(res.body.topics[0].name, 'a.topic');
      assert.equal(s.adapter.frames.gathered, 1);
      c.close();
    } finally {
      await s.close();
    }
  });

  it('closes a connection whose frame cannot be allocated, and the process and other clients go on', async () => {
    const s = await setup();
    await s.engine.createStream({ name: 'alloc', partitions: 1 });
    const other = await RawClient.connect(s.port);
    const victim = await RawClient.connect(s.port);
    try {
      s.adapter.frames.allocate = () => {
        throw new RangeError('Array buffer allocation failed');
      };
      victim.send(victim.frame(ProduceApi, 7, produce('alloc', batch(100, 1000))));
      assert.ok(await victim.closesWithin(5000), 'the connection is closed');
      assert.equal(s.adapter.frames.allocationFailures, 1);
      const e = s.log.entries('frame allocation failed').at(-1);
      assert.ok(e, 'logged');
      assert.equal(e.level, 50);
      // Small requests need no pooled frame: the other client is served while allocations still fail...
      assert.ok((await other.call(MetadataApi, 4, md(null))).topics.length > 0);
      // ...and produces again once memory is there.
      s.adapter.frames.allocate = (n) => Buffer.allocUnsafeSlow(n);
      const r = await other.call(ProduceApi, 7, produce('alloc', batch(100, 1000)));
      assert.equal(r.topics[0].partitions[0].errorCode, E.NONE);
    } finally {
      other.close();
      victim.close();
      await s.close();
    }
  });

  it('closes a connection whose large request gathered in pieces cannot be joined', async () => {
    const s = await setup({ frameReserveBytes: 0 });
    await s.engine.createStream({ name: 'alloc', partitions: 1 });
    const victim = await RawClient.connect(s.port);
    try {
      s.adapter.frames.allocate = () => {
        throw new RangeError('Array buffer allocation failed');
      };
      victim.send(victim.frame(ProduceApi, 7, produce('alloc', batch(100, 1000))));
      assert.ok(await victim.closesWithin(5000));
      assert.equal(s.adapter.frames.allocationFailures, 1);
      assert.equal(s.adapter.frames.gathering, 0);
    } finally {
      victim.close();
      await s.close();
    }
  });

  it('refuses requests above sasl.server.max.receive.size before SASL completes, and not after', async () => {
    const s = await setup({ saslMaxReceiveBytes: 512 * 1024 }, true);
    await s.engine.createStream({ name: 'after.auth', partitions: 1 });
    const clients: RawClient[] = [];
    try {
      // 100 KiB during the exchange is read and answered (a wrong password here, then the close that follows it).
      const a = await RawClient.connect(s.port);
      clients.push(a);
      assert.equal((await a.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' })).errorCode, E.NONE);
      const r = await a.call(SaslAuthenticateApi, 2, { authBytes: plainToken('alice', 'x'.repeat(100 * 1024)) });
      assert.equal(r.errorCode, E.SASL_AUTHENTICATION_FAILED);
      // 600 KiB during the exchange is not read: closed, no answer.
      const b = await RawClient.connect(s.port);
      clients.push(b);
      assert.equal((await b.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' })).errorCode, E.NONE);
      b.send(b.frame(SaslAuthenticateApi, 2, { authBytes: plainToken('alice', 'x'.repeat(600 * 1024)) }));
      await assert.rejects(b.next(5000), /connection closed/);
      // Below the limit, a stranger's request is gathered as it arrives: strangers do not use up the reserve of
      // memory ahead of arrival that authenticated producers take their frames from.
      const e = await RawClient.connect(s.port);
      clients.push(e);
      e.send(announce(400 * 1024, 10));
      await until(() => s.adapter.frames.gathering === 1, "the stranger's frame to be gathered");
      assert.equal(s.adapter.frames.aheadBytes, 0);
      // Before any SASL request: a size prefix alone above the limit closes.
      const c = await RawClient.connect(s.port);
      clients.push(c);
      c.send(announce(100 << 20, 0));
      assert.ok(await c.closesWithin(5000));
      const lines = s.log.entries('request too large before SASL authentication');
      assert.equal(lines.length, 2);
      assert.deepEqual([lines[1].size, lines[1].max], [100 << 20, 512 * 1024]);
      // Authenticated, the same size is fine.
      const d = await RawClient.connect(s.port);
      clients.push(d);
      await authenticate(d);
      const p = await d.call(ProduceApi, 7, produce('after.auth', batch(6, 100 * 1024)));
      assert.equal(p.topics[0].partitions[0].errorCode, E.NONE);
    } finally {
      for (const c of clients) c.close();
      await s.close();
    }
  });

  it('applies the SASL receive limit during an optional exchange on a listener without required SASL', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    const log = captureLogger();
    const ctx = { engine, logger: log.logger, brokerId: 1 };
    const users = await MemoryUserStore.fromPasswords([{ username: 'alice', password: 'wonderland' }]);
    const guard = new PasswordGuard(users);
    const adapter = createKafkaAdapter(ctx, { sasl: saslProvider(guard, ['PLAIN']), saslMaxReceiveBytes: 1024 });
    const listener = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0 }, {}, adapter);
    try {
      const plain = await RawClient.connect(listener.address().port);
      // No SASL on this connection: the usual limit.
      assert.equal((await plain.call(MetadataApi, 4, md(['x'.repeat(2000)]))).topics.length, 1);
      plain.close();
      const c = await RawClient.connect(listener.address().port);
      assert.equal((await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' })).errorCode, E.NONE);
      c.send(c.frame(SaslAuthenticateApi, 2, { authBytes: plainToken('alice', 'x'.repeat(2000)) }));
      await assert.rejects(c.next(5000), /connection closed/);
      assert.equal(log.entries('request too large before SASL authentication').length, 1);
    } finally {
      await listener.close();
      await guard.close();
    }
  });

  it('closes a connection whose request does not arrive whole in time; one sending whole requests stays', async () => {
    const s = await setup({ requestReceiveTimeoutMs: 300 });
    const good = await RawClient.connect(s.port);
    const slow = await RawClient.connect(s.port);
    try {
      const f = slow.frame(MetadataApi, 4, md(['half.sent']));
      slow.send(f.subarray(0, 10));
      assert.ok(await slow.closesWithin(10_000), 'the half-sent request is closed');
      const e = s.log.entries('request not received whole in time').at(-1);
      assert.ok(e);
      assert.equal(e.size, f.length - 4);
      // A size prefix cut in the middle counts too.
      const cut = await RawClient.connect(s.port);
      cut.send(Buffer.from([0, 0]));
      assert.ok(await cut.closesWithin(10_000));
      // The other connection, opened at the same time, still answers.
      assert.ok((await good.call(MetadataApi, 4, md(null))).brokers.length === 1);
    } finally {
      good.close();
      slow.close();
      await s.close();
    }
  });

  it('does not time out a request the broker stops reading (backpressure)', async () => {
    const m = new GatedStreams();
    const engine = new Engine(m, m);
    const log = captureLogger();
    const ctx = { engine, logger: log.logger, brokerId: 1 };
    const adapter = createKafkaAdapter(ctx, { requestReceiveTimeoutMs: 300, maxInFlightRequests: 1 });
    const listener = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0 }, {}, adapter);
    await engine.createStream({ name: 'held', partitions: 1 });
    const c = await RawClient.connect(listener.address().port);
    try {
      m.hold = true;
      // The first request waits for durability (one in flight: the connection stops reading) while the second has
      // only begun to arrive.
      const second = c.frame(ProduceApi, 7, produce('held', batch(1, 10)), 2);
      c.send(c.frame(ProduceApi, 7, produce('held', batch(1, 10)), 1), second.subarray(0, 10));
      await until(() => m.held === 1, 'the first append');
      // Another connection's half-sent request, started after, times out: the limit has passed for the first one too.
      const marker = await RawClient.connect(listener.address().port);
      marker.send(announce(100, 10));
      assert.ok(await marker.closesWithin(10_000));
      m.hold = false;
      m.release();
      c.send(second.subarray(10));
      const ids = [(await c.next()).readInt32BE(0), (await c.next()).readInt32BE(0)];
      assert.deepEqual(ids, [1, 2]);
    } finally {
      c.close();
      await listener.close();
    }
  });

  it('closes an idle connection (connections.max.idle.ms), but not one waiting for a response', async () => {
    const s = await setup({ connectionsMaxIdleMs: 300 });
    await s.engine.createStream({ name: 'quiet', partitions: 1 });
    const c = await RawClient.connect(s.port);
    try {
      // A long poll of 1.5 s (five times the idle limit) is answered: a request in flight is not idleness.
      const res = await c.call(FetchApi, 4, fetchReq('quiet', 1500));
      assert.equal(res.responses[0].partitions[0].errorCode, E.NONE);
      assert.ok(await c.closesWithin(10_000), 'closed once idle');
      assert.ok(s.log.entries('idle connection').length >= 1);
    } finally {
      c.close();
      await s.close();
    }
  });

  it('closes a connection that does not authenticate in time on a SASL listener; an authenticated one stays', async () => {
    // Long enough for a login on a loaded machine (the first one starts the password thread), short for a test.
    const s = await setup({ authTimeoutMs: 2000 }, true);
    const authed = await RawClient.connect(s.port);
    const stranger = await RawClient.connect(s.port);
    try {
      await authenticate(authed);
      // The stranger started an exchange but never finishes it.
      assert.equal((await stranger.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' })).errorCode, E.NONE);
      assert.ok(await stranger.closesWithin(10_000), 'the unauthenticated connection is closed');
      assert.equal(s.log.entries('no SASL authentication in time').length, 1);
      // Opened at the same time, authenticated: still served.
      assert.ok((await authed.call(MetadataApi, 4, md(null))).brokers.length === 1);
    } finally {
      authed.close();
      stranger.close();
      await s.close();
    }
  });

  it('logs what one address causes at a bounded rate, with the count of what was suppressed', async () => {
    const s = await setup({}, true);
    try {
      for (let i = 0; i < 8; i++) {
        const c = await RawClient.connect(s.port);
        c.send(announce(-1, 0));
        assert.ok(await c.closesWithin(5000));
      }
      for (let i = 0; i < 8; i++) {
        const c = await RawClient.connect(s.port);
        c.send(c.frame(MetadataApi, 4, md(null)));
        assert.ok(await c.closesWithin(5000));
      }
      // The limiter's default: five lines per event and address in 10 s.
      assert.equal(s.log.entries('invalid request size').length, 5);
      assert.equal(s.log.entries('request before SASL authentication').length, 5);
      assert.equal(s.adapter.logLimit.suppressedTotal, 6);
    } finally {
      await s.close();
    }
  });
});
