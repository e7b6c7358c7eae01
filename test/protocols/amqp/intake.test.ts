/**
 * Memory for input that has not fully arrived (src/protocols/amqp/intake.ts) and the limits around it, over
 * in-memory Duplexes: bodies and frames are assembled from what arrived only; a connection over its own cap of
 * partly received bodies is closed with 506; over the broker's budget it is not read until bodies complete (or, if
 * nobody could complete one, closed with 506); a client that does not read what is sent to it is not read either,
 * and is closed when nothing moves for sendTimeoutMs; writes in flight are bounded per connection.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Duplex } from 'node:stream';
import { createRequire } from 'node:module';
import pino from 'pino';
import { AmqpAdapter } from '../../../src/protocols/amqp/adapter.js';
import { AmqpConnection } from '../../../src/protocols/amqp/connection.js';
import { Gather, PartialBody } from '../../../src/protocols/amqp/intake.js';
import { PublishCredit } from '../../../src/protocols/amqp/credit.js';
import { resolveAmqpOptions, type AmqpOptions } from '../../../src/protocols/amqp/options.js';
import type { Engine, Message, RouteResult } from '../../../src/core/index.js';
import { prng } from '../../helpers/prng.js';
import { testControl, type TestControl } from './access-helpers.js';
import { encodeFrame, FRAME_BODY } from '../../../src/protocols/amqp/codec/index.js';

const require = createRequire(import.meta.url);
// eslint-disable-next-line @typescript-eslint/no-require-imports
const defs = require('amqplib/lib/defs') as Record<string, number> & {
  encodeMethod(id: number, ch: number, f: object): Buffer;
  encodeProperties(id: number, ch: number, size: number, f: object): Buffer;
};

const bodyFrame = (ch: number, body: Buffer): Buffer => encodeFrame(FRAME_BODY, ch, body);

const tick = () => new Promise<void>((r) => setImmediate(r));

function randomBody(rnd: () => number, n: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = Math.floor(rnd() * 256);
  return b;
}

describe('PartialBody', () => {
  it('joins frames of any sizes into the body, holding at most about 2.5 times what arrived', () => {
    const rnd = prng(7);
    for (let round = 0; round < 200; round++) {
      const size = 1 + Math.floor(rnd() * 300_000);
      const body = randomBody(rnd, size);
      const p = new PartialBody(size);
      let at = 0;
      while (at < size) {
        // Mostly small frames (the costly case), some large, owned or views.
        const n = Math.min(size - at, rnd() < 0.7 ? 1 + Math.floor(rnd() * 200) : 1 + Math.floor(rnd() * 20_000));
        const view = body.subarray(at, at + n);
        p.add(rnd() < 0.5 ? view : Buffer.from(view), rnd() < 0.5);
        at += n;
        assert.equal(p.have, at);
        assert.ok(p.held <= 2.5 * at + 64, `held ${p.held} for ${at} arrived`);
      }
      assert.ok(p.complete);
      assert.ok(p.body().equals(body), `round ${round}: body of ${size} bytes intact`);
    }
  });

  it('a 1-byte frame of a body announced as 1 MiB holds 1 byte', () => {
    const p = new PartialBody(1024 * 1024);
    assert.equal(p.add(Buffer.from([1]), false), 1);
    assert.equal(p.held, 1);
  });
});

describe('Gather', () => {
  it('grows a frame with the bytes that arrive, within twice what arrived', () => {
    const rnd = prng(11);
    for (let round = 0; round < 100; round++) {
      const size = 8 + Math.floor(rnd() * 140_000);
      const frame = randomBody(rnd, size);
      let at = 1 + Math.floor(rnd() * Math.min(size - 1, 100));
      const g = new Gather(size, frame.subarray(0, at));
      let done = at === size;
      while (!done) {
        const n = Math.min(size - at, 1 + Math.floor(rnd() * (rnd() < 0.5 ? 50 : 70_000)));
        done = g.add(frame.subarray(at, at + n));
        at += n;
        assert.ok(g.frame.length <= Math.max(2 * at, 256), `${g.frame.length} bytes for ${at} arrived`);
      }
      assert.ok(g.frame.equals(frame));
    }
  });
});

describe('PublishCredit', () => {
  it('runs out at maxWrites or maxBytes and is back at half', () => {
    const c = new PublishCredit(4, 1000);
    assert.equal(c.started(10), false);
    assert.equal(c.started(10), false);
    assert.equal(c.started(10), false);
    assert.equal(c.started(10), true, 'four writes');
    assert.equal(c.settled(), false);
    assert.equal(c.settled(), true, 'two left');
    assert.equal(c.settled(), true);
    assert.equal(c.settled(), true);
    assert.equal(c.bytes, 0);
    assert.equal(c.started(2000), true, 'one write over the bytes');
    assert.equal(c.settled(), true);
    for (let i = 0; i < 100; i++) c.started(i);
    assert.equal(c.writes, 100);
    assert.equal(c.bytes, 4950);
    for (let i = 0; i < 100; i++) c.settled();
    assert.equal(c.bytes, 0);
  });
});

/** An adapter (router stand-in that stores nothing), and connections over Duplexes that record what is sent. */
async function setup(options: AmqpOptions) {
  const settle: Array<() => void> = [];
  const published: Message[] = [];
  const router = {
    getExchange: () => ({ name: 'x' }),
    getQueue: () => undefined,
    dropExclusive: () => Promise.resolve(),
    writeRefusal: () => null,
    publishTo(_x: string, _k: string, m: Message): RouteResult {
      published.push(m);
      return { routed: 1, durable: new Promise<void>((r) => settle.push(r)), rejected: false };
    },
  };
  const control: TestControl = await testControl();
  const ctx = { engine: router as unknown as Engine, logger: pino({ level: 'silent' }), brokerId: 0 };
  const adapter = new AmqpAdapter(ctx, resolveAmqpOptions({ memoryHighWatermark: 0, ...options }), control.access);
  let seq = 0;
  async function open(opts: { reads?: boolean } = {}) {
    const sent: Buffer[] = [];
    const held: Array<() => void> = [];
    const stream = new Duplex({
      read() {},
      write(chunk: Buffer, _enc, cb) {
        sent.push(chunk);
        // A client that reads nothing: the writes never complete.
        if (opts.reads === false) held.push(cb);
        else cb();
      },
      writev(chunks, cb) {
        for (const c of chunks) sent.push(c.chunk as Buffer);
        if (opts.reads === false) held.push(cb);
        else cb();
      },
    });
    const conn = new AmqpConnection(stream, adapter, { id: `t${++seq}` });
    stream.push(Buffer.from('AMQP\x00\x00\x09\x01', 'latin1'));
    await tick();
    stream.push(defs.encodeMethod(defs.ConnectionStartOk!, 0, { clientProperties: {}, mechanism: 'PLAIN', response: Buffer.from('\0u\0p'), locale: 'en_US' }));
    await tick();
    await tick();
    stream.push(defs.encodeMethod(defs.ConnectionTuneOk!, 0, { channelMax: 0, frameMax: 131072, heartbeat: 0 }));
    stream.push(defs.encodeMethod(defs.ConnectionOpen!, 0, { virtualHost: '/', capabilities: '', insist: false }));
    stream.push(defs.encodeMethod(defs.ChannelOpen!, 1, { outOfBand: '' }));
    await tick();
    assert.ok(conn.isOpen);
    /** The reply code of the connection.close the broker sent, or null. */
    const closeCode = (): number | null => {
      const all = Buffer.concat(sent);
      for (let at = 0; at + 8 <= all.length;) {
        const size = all.readUInt32BE(at + 3);
        if (all[at] === 1 && all.readUInt16BE(at + 1) === 0 && all.readUInt32BE(at + 7) === (10 << 16) + 50) return all.readUInt16BE(at + 11);
        at += size + 8;
      }
      return null;
    };
    const startPublish = (size: number, ch = 1) =>
      Buffer.concat([
        defs.encodeMethod(defs.BasicPublish!, ch, { exchange: 'x', routingKey: 'k', mandatory: false, immediate: false }),
        defs.encodeProperties(60, ch, size, {}),
      ]);
    return { stream, conn, sent, held, closeCode, startPublish };
  }
  return { adapter, open, published, settle, close: () => control.close() };
}

describe('AmqpConnection limits', () => {
  it('closes a connection whose partly received bodies pass maxPartialBodyBytes with 506', async () => {
    const s = await setup({ maxPartialBodyBytes: 10_000 });
    const c = await s.open();
    c.stream.push(c.startPublish(50_000));
    for (let i = 0; i < 4 && c.closeCode() === null; i++) {
      c.stream.push(bodyFrame(1, Buffer.alloc(4096, i)));
      await tick();
    }
    assert.equal(c.closeCode(), 506);
    assert.equal(s.adapter.input.partialBytes, 0, 'its bodies gave their memory back');
    assert.equal(s.adapter.input.refusals, 1);
    c.stream.destroy();
    await c.conn.closed;
    await s.close();
  });

  it('over the broker budget a connection is not read until another completes its body; bodies stay intact', async () => {
    const s = await setup({ partialBodyBudget: 20_000 });
    const a = await s.open();
    const b = await s.open();
    const bodyA = Buffer.alloc(30_000, 0xaa);
    const bodyB = Buffer.alloc(16_000, 0xbb);
    b.stream.push(Buffer.concat([b.startPublish(bodyB.length), bodyFrame(1, bodyB.subarray(0, 15_000))]));
    await tick();
    a.stream.push(Buffer.concat([a.startPublish(bodyA.length), bodyFrame(1, bodyA.subarray(0, 8000))]));
    await tick();
    assert.ok(a.stream.isPaused(), 'a is over the budget (23,000 > 20,000): not read');
    assert.equal(s.adapter.input.waiting, 1);
    a.stream.push(bodyFrame(1, bodyA.subarray(8000)));
    await tick();
    assert.equal(s.published.length, 0, 'what a sent meanwhile waits');
    // b finishes its body: the budget has room again and a is read on.
    b.stream.push(bodyFrame(1, bodyB.subarray(15_000)));
    for (let i = 0; i < 5; i++) await tick();
    assert.ok(!a.stream.isPaused());
    assert.equal(s.published.length, 2);
    assert.ok(s.published[0]!.payload.equals(bodyB));
    assert.ok(s.published[1]!.payload.equals(bodyA));
    assert.equal(s.adapter.input.partialBytes, 0);
    assert.equal(a.closeCode(), null);
    a.stream.destroy();
    b.stream.destroy();
    await Promise.all([a.conn.closed, b.conn.closed]);
    await s.close();
  });

  it('when no holder of partly received bodies could finish one, the one that would wait is closed (506)', async () => {
    const s = await setup({ partialBodyBudget: 20_000 });
    const a = await s.open();
    a.stream.push(Buffer.concat([a.startPublish(30_000), bodyFrame(1, Buffer.alloc(25_000))]));
    await tick();
    assert.equal(a.closeCode(), 506);
    assert.equal(s.adapter.input.partialBytes, 0);
    a.stream.destroy();
    await a.conn.closed;
    await s.close();
  });

  it('a frame spanning reads grows with its bytes once the ahead budget is used up', async () => {
    const s = await setup({ frameAheadBudget: 0 });
    const a = await s.open();
    const body = randomBody(prng(3), 100_000);
    const frames = Buffer.concat([a.startPublish(body.length), bodyFrame(1, body)]);
    for (let at = 0; at < frames.length; at += 777) a.stream.push(frames.subarray(at, at + 777));
    await tick();
    assert.equal(s.published.length, 1);
    assert.ok(s.published[0]!.payload.equals(body));
    assert.ok(s.adapter.input.gathered >= 1);
    assert.equal(s.adapter.input.aheadBytes, 0);
    a.stream.destroy();
    await a.conn.closed;
    await s.close();
  });

  it('a client that reads nothing is not read past socketHighWater, and closed after sendTimeoutMs without progress', async () => {
    const s = await setup({ socketHighWater: 32 * 1024, sendTimeoutMs: 1000 });
    const a = await s.open({ reads: false });
    const qos = defs.encodeMethod(defs.BasicQos!, 1, { prefetchSize: 0, prefetchCount: 1, global: false });
    let pushed = 0;
    while (!a.stream.isPaused() && pushed < 100_000) {
      a.stream.push(Buffer.concat(Array.from({ length: 100 }, () => qos)));
      pushed += 100;
      await tick();
    }
    assert.ok(a.stream.isPaused(), 'not read any more');
    const unsent = a.stream.writableLength;
    assert.ok(unsent < 64 * 1024, `${unsent} bytes queued for it`);
    assert.ok(s.adapter.stats.outputPauses >= 1);
    const now = Date.now();
    a.conn.sweep(now + 500);
    assert.ok(!a.stream.destroyed);
    a.conn.sweep(now + 1500);
    assert.ok(a.stream.destroyed, 'closed: nothing went out for sendTimeoutMs');
    assert.equal(s.adapter.stats.sendTimeouts, 1);
    await a.conn.closed;
    await s.close();
  });

  it('a client that reads nothing is read again once its socket drains', async () => {
    const s = await setup({ socketHighWater: 32 * 1024 });
    const a = await s.open({ reads: false });
    const qos = defs.encodeMethod(defs.BasicQos!, 1, { prefetchSize: 0, prefetchCount: 1, global: false });
    while (!a.stream.isPaused()) {
      a.stream.push(Buffer.concat(Array.from({ length: 100 }, () => qos)));
      await tick();
    }
    // The client reads: every write completes, 'drain' comes.
    while (a.held.length > 0) {
      for (const cb of a.held.splice(0)) cb();
      await tick();
    }
    assert.ok(!a.stream.isPaused(), 'read again');
    a.stream.destroy();
    await a.conn.closed;
    await s.close();
  });
});
