/**
 * AmqpConnection over an in-memory Duplex: a publisher whose writes do not settle stops being read after
 * maxPendingWrites publishes, and is read again once they settle. The router is a stand-in whose durable promises
 * the test settles (a real store settles them too fast to see the limit).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Duplex } from 'node:stream';
import { createRequire } from 'node:module';
import pino from 'pino';
import { AmqpAdapter } from '../../../src/protocols/amqp/adapter.js';
import { AmqpConnection } from '../../../src/protocols/amqp/connection.js';
import { resolveAmqpOptions } from '../../../src/protocols/amqp/options.js';
import type { Engine, Message, RouteResult } from '../../../src/core/index.js';
import { testControl } from './access-helpers.js';
import { encodeFrame, FRAME_BODY } from '../../../src/protocols/amqp/codec/index.js';

const require = createRequire(import.meta.url);
// eslint-disable-next-line @typescript-eslint/no-require-imports
const defs = require('amqplib/lib/defs') as Record<string, number> & {
  encodeMethod(id: number, ch: number, f: object): Buffer;
  encodeProperties(id: number, ch: number, size: number, f: object): Buffer;
};

const bodyFrame = (ch: number, body: Buffer): Buffer => encodeFrame(FRAME_BODY, ch, body);

const tick = () => new Promise<void>((r) => setImmediate(r));

describe('AmqpConnection', () => {
  it('stops reading a publisher with maxPendingWrites unsettled writes, and reads again as they settle', async () => {
    const settle: Array<() => void> = [];
    let published = 0;
    const router = {
      getExchange: () => ({ name: 'x' }),
      getQueue: () => undefined,
      dropExclusive: () => Promise.resolve(),
      publishTo(_x: string, _k: string, _m: Message): RouteResult {
        published++;
        return { routed: 1, durable: new Promise<void>((r) => settle.push(r)), rejected: false };
      },
    };
    const ctx = { engine: router as unknown as Engine, logger: pino({ level: 'silent' }), brokerId: 0 };
    const control = await testControl();
    const adapter = new AmqpAdapter(ctx, resolveAmqpOptions({ maxPendingWrites: 8, memoryHighWatermark: 0 }), control.access);
    const sent: Buffer[] = [];
    const stream = new Duplex({
      read() {},
      write(chunk: Buffer, _enc, cb) {
        sent.push(chunk);
        cb();
      },
    });
    const conn = new AmqpConnection(stream, adapter, { id: 't1' });
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
    const body = Buffer.from('m');
    const publishes: Buffer[] = [];
    for (let i = 0; i < 20; i++) {
      publishes.push(defs.encodeMethod(defs.BasicPublish!, 1, { exchange: 'x', routingKey: 'k', mandatory: false, immediate: false }));
      publishes.push(defs.encodeProperties(60, 1, body.length, {}));
      publishes.push(bodyFrame(1, body));
    }
    // One publish per chunk, as a socket would deliver them over time.
    for (let i = 0; i < 20; i++) stream.push(Buffer.concat(publishes.slice(i * 3, i * 3 + 3)));
    await tick();
    await tick();
    assert.equal(published, 8, 'reading stops at 8 unsettled writes');
    // Settling half of them lets the connection read on.
    for (const s of settle.splice(0, 4)) s();
    for (let i = 0; i < 5; i++) await tick();
    assert.ok(published > 8, `reading resumed (${published})`);
    while (published < 20) {
      for (const s of settle.splice(0)) s();
      await tick();
    }
    assert.equal(published, 20);
    stream.destroy();
    await conn.closed;
    await control.close();
  });
});
