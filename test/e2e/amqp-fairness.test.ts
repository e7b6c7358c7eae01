// test-runner: alone (scripts/test.mjs): the flooder's and the light client's shares of the store are measured
/**
 * Publishers share the queue store fairly (issue 24): one connection flooding a durable queue with persistent
 * messages without confirms must not starve another client's confirmed publishes. Each connection has a credit of
 * unsettled store writes (amqp maxPendingWrites: 400, maxPendingWriteBytes: 2 MiB, as RabbitMQ's credit_flow); past
 * it the connection is not read until half of them settled.
 *
 * Proved with order, not time: both publish into one queue, whose order is the order the broker took the messages
 * in. The other client publishes markers one at a time, each after the previous one's confirm; between two markers
 * the broker can only have taken what the flooder's credit let through while the marker's write waited in the store,
 * a few credits' worth — not the thousands a flooder with 10,000 writes in flight gets in ahead of every confirm.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { amqpFixture, defs, RawAmqp } from './amqp-helpers.js';
import { encodeFrame, FRAME_BODY } from '../../src/protocols/amqp/codec/index.js';

const bodyFrame = (ch: number, body: Buffer): Buffer => encodeFrame(FRAME_BODY, ch, body);

describe('e2e: AMQP publishers share the queue store', () => {
  const f = amqpFixture({ connect: true });

  it("a flooder without confirms gets at most its credit ahead of another client's confirmed publishes", async () => {
    const flood = 40_000;
    const markers = 20;
    const credit = 400;
    const ch = await f.conn.createConfirmChannel();
    await ch.assertQueue('shared', { durable: true });

    // The flooder: persistent 1 KiB messages, written as fast as the socket takes them; a basic.qos after them is
    // answered once the broker has taken them all.
    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    await raw.handshake();
    const parts: Buffer[] = [];
    for (let i = 0; i < flood; i++) {
      const body = Buffer.alloc(1024, 0x66);
      body.write(`f${i}`);
      parts.push(defs.encodeMethod(defs.BasicPublish as number, 1, { exchange: '', routingKey: 'shared', mandatory: false, immediate: false }));
      parts.push(defs.encodeProperties(60, 1, body.length, { deliveryMode: 2 }));
      parts.push(bodyFrame(1, body));
    }
    parts.push(defs.encodeMethod(defs.BasicQos as number, 1, { prefetchSize: 0, prefetchCount: 1, global: false }));
    raw.write(Buffer.concat(parts));

    // The other client: markers one at a time, each once the previous one is confirmed.
    for (let i = 0; i < markers; i++) {
      await new Promise<void>((resolve, reject) =>
        ch.sendToQueue('shared', Buffer.from(`m${i}`), { persistent: true }, (err: unknown) => (err ? reject(err) : resolve())),
      );
    }
    const m = await raw.method();
    assert.equal(m?.method, 'BasicQosOk', 'the flooder was taken whole');

    // The queue's order.
    const order: string[] = [];
    const consumer = await f.conn.createChannel();
    await consumer.prefetch(2000);
    await new Promise<void>((resolve, reject) => {
      consumer
        .consume(
          'shared',
          (msg) => {
            if (msg === null) return;
            const s = msg.content.subarray(0, 8).toString('latin1');
            order.push(s.startsWith('m') ? s.replace(/\0.*$/, '') : 'f');
            if (order.length === flood + markers) resolve();
          },
          { noAck: true },
        )
        .catch(reject);
    });
    const at = Array.from({ length: markers }, (_, i) => order.indexOf(`m${i}`));
    const gaps = at.slice(1).map((p, i) => p - at[i]! - 1);
    const after = order.length - 1 - at[markers - 1]!;
    const figures = (await f.broker.api<{ amqp: Record<string, number> }>('GET', '/api/v1/broker')).amqp;
    console.log(
      `flood messages between consecutive markers: max ${Math.max(...gaps)} (${gaps.join(' ')}); after the last: ${after}; peak writes in flight of one connection: ${figures.peakWritesInFlightPerConnection}, bytes ${figures.peakWriteBytesInFlightPerConnection}`,
    );
    assert.ok(
      at.every((p) => p >= 0),
      'every marker stored',
    );
    assert.ok(after > 0, 'the flood was still going when the last marker was confirmed');
    assert.ok(
      Math.max(...gaps) <= 5 * credit,
      `at most a few credits of the flooder between two confirmed publishes of the other client (gaps: ${gaps.join(' ')})`,
    );
    // The broker's writes in flight for one connection stay within its credit (plus the rest of the read that went
    // over it: a 64 KiB read holds ~60 of these publishes).
    assert.ok(
      figures.peakWritesInFlightPerConnection !== undefined && figures.peakWritesInFlightPerConnection <= credit + 100,
      `writes in flight of one connection: ${figures.peakWritesInFlightPerConnection}`,
    );
    assert.ok(figures.peakWriteBytesInFlightPerConnection! <= 2 * 1024 * 1024 + 128 * 1024);
    raw.close();
    await consumer.close();
    await ch.close();
  });
});
