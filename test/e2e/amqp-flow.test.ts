/**
 * AMQP flow control end to end: a consumer that stops reading its socket stops getting deliveries (the messages
 * stay ready in the queue instead of piling up in the broker's socket buffer) and gets the rest once it reads
 * again; a memory alarm tells clients connection.blocked; heartbeats are sent, and a silent peer is dropped.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { amqpFixture, RawAmqp, connectAmqp, startAmqpBroker } from './amqp-helpers.js';

describe('e2e: AMQP flow control', () => {
  const f = amqpFixture();

  it('a consumer that does not read its socket stops getting deliveries; the rest wait in the queue', async () => {
    const pub = await connectAmqp(f.broker);
    const ch = await pub.createConfirmChannel();
    await ch.assertQueue('slow', { durable: false });
    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    await raw.handshake();
    raw.send('BasicConsume', 1, { queue: 'slow', consumerTag: 'slow-1', noLocal: false, noAck: true, exclusive: false, nowait: false, arguments: {} });
    assert.equal((await raw.method())?.method, 'BasicConsumeOk');
    raw.socket.pause();
    // 400 x 100 KiB = 40 MB: far more than the broker's per-socket allowance (1 MiB) plus the kernel's buffers.
    const n = 400;
    const body = Buffer.alloc(100 * 1024, 7);
    for (let i = 0; i < n; i++) ch.sendToQueue('slow', body);
    await ch.waitForConfirms();
    // Deliveries to a consumer with credit happen as a message is enqueued, before its confirm: what is still ready
    // now was held back by the consumer's socket.
    const ready = (await ch.checkQueue('slow')).messageCount;
    assert.ok(ready >= n / 2, `most messages wait in the queue (${ready} of ${n} ready)`);
    raw.socket.resume();
    let delivered = 0;
    while (delivered < n) {
      const m = await raw.method();
      assert.ok(m, 'the consumer connection stays open');
      if (m.method === 'BasicDeliver') delivered++;
    }
    assert.equal((await ch.checkQueue('slow')).messageCount, 0);
    raw.close();
    await pub.close();
  });

  it('heartbeats: the broker sends them to a quiet client and drops a client that sends none', async () => {
    const hb = await startAmqpBroker(['--amqp-heartbeat', '1s']);
    try {
      const raw = await RawAmqp.open(hb.ports.amqp!);
      raw.write(Buffer.from('AMQP\x00\x00\x09\x01', 'latin1'));
      await raw.method();
      raw.send('ConnectionStartOk', 0, { clientProperties: {}, mechanism: 'PLAIN', response: Buffer.from('\0guest\0guest'), locale: 'en_US' });
      const tune = await raw.method();
      assert.equal(tune?.fields.heartbeat, 1);
      raw.send('ConnectionTuneOk', 0, { channelMax: 0, frameMax: 131072, heartbeat: 1 });
      raw.send('ConnectionOpen', 0, { virtualHost: '/', capabilities: '', insist: false });
      assert.equal((await raw.method())?.method, 'ConnectionOpenOk');
      // The broker's heartbeat frame (type 8, channel 0) arrives; then, as we send nothing, it closes the socket.
      const f = await raw.frame();
      assert.equal(f?.type, 8);
      assert.equal(f?.channel, 0);
      for (;;) {
        const next = await raw.frame();
        if (next === null) break;
      }
      assert.equal(raw.closed, true);
    } finally {
      await hb.stop();
      hb.cleanup();
    }
  });

  it('a memory alarm blocks publishers: connection.blocked with the reason', async () => {
    const low = await startAmqpBroker(['--amqp-memory-high-watermark', '1MiB']);
    try {
      const conn = await connectAmqp(low);
      const reason = await new Promise<string>((resolve) => conn.on('blocked', resolve));
      assert.equal(reason, 'low on memory');
      await conn.close();
      const figures = await low.api<{ amqp: { blocked: string | null; blockedEvents: number } }>('GET', '/api/v1/broker');
      assert.equal(figures.amqp.blocked, 'low on memory');
    } finally {
      await low.stop();
      low.cleanup();
    }
  });
});

describe('e2e: AMQP disk alarm', () => {
  it('below the free-space reserve, clients are told connection.blocked before any write fails, and may still declare', async () => {
    // A free-space reserve larger than any disk: durable writes are refused (STORAGE_FULL) from the start, and the
    // adapter sees it through the broker's reserve, not only through a failed publish.
    const full = await startAmqpBroker(['--min-free-disk', '1000000GiB']);
    try {
      const conn = await connectAmqp(full);
      const blocked = new Promise<string>((resolve) => conn.on('blocked', resolve));
      assert.equal(await blocked, 'low on disk');
      // A blocked connection stops being read only when it publishes (RabbitMQ): declarations still work.
      const ch = await conn.createChannel();
      const ok = await ch.assertQueue('disk-classic', { durable: true });
      assert.equal(ok.queue, 'disk-classic');
      // Persistent publishes to durable queues are refused meanwhile: see test/core/router.test.ts; the alarm
      // clearing once the disk has room again: test/protocols/amqp/adapter.test.ts.
      await conn.close();
    } finally {
      await full.stop();
      full.cleanup();
    }
  });
});
