/**
 * AMQP queues end to end (amqplib against bin/flowmq): a work queue with competing consumers and prefetch,
 * redelivery of a closed connection's unacked messages, dead-lettering (TTL, max-length, reject), basic.get,
 * purge, delete with basic.cancel to its consumers, and recover.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Channel, ChannelModel, ConsumeMessage } from 'amqplib';
import { eventually } from './harness.js';
import { amqpFixture, connectAmqp, take } from './amqp-helpers.js';

describe('e2e: AMQP queues', () => {
  const f = amqpFixture({ connect: true });

  it('work queue: 3 competing consumers with prefetch 2 share the messages, none holds more than 2 unacked', async () => {
    const setup = await f.conn.createChannel();
    await setup.assertQueue('work', { durable: false });
    const consumers: Array<{ conn: ChannelModel; ch: Channel; got: number; unacked: ConsumeMessage[]; maxUnacked: number }> = [];
    const total = 60;
    let received = 0;
    let resolveAll!: () => void;
    const allIn = new Promise<void>((r) => (resolveAll = r));
    for (let i = 0; i < 3; i++) {
      const c = await connectAmqp(f.broker);
      const ch = await c.createChannel();
      await ch.prefetch(2);
      const state = { conn: c, ch, got: 0, unacked: [] as ConsumeMessage[], maxUnacked: 0 };
      consumers.push(state);
      await ch.consume('work', (m) => {
        if (m === null) return;
        state.got++;
        state.unacked.push(m);
        state.maxUnacked = Math.max(state.maxUnacked, state.unacked.length);
        // Ack a little later, so the prefetch window is what limits the flow.
        setTimeout(() => {
          ch.ack(state.unacked.shift()!);
          if (++received === total) resolveAll();
        }, 2);
      });
    }
    for (let i = 0; i < total; i++) setup.sendToQueue('work', Buffer.from(String(i)));
    await allIn;
    assert.equal(
      consumers.reduce((n, c) => n + c.got, 0),
      total,
    );
    for (const c of consumers) {
      assert.ok(c.got > 0, 'every consumer got work');
      assert.ok(c.maxUnacked <= 2, `prefetch respected (max unacked ${c.maxUnacked})`);
    }
    // amqplib buffers each channel's frames separately and may send connection.close ahead of acks still queued on
    // a channel; closing the channel first (its close goes behind its acks) makes every ack reach the broker.
    for (const c of consumers) {
      await c.ch.close();
      await c.conn.close();
    }
    await setup.deleteQueue('work');
    await setup.close();
  });

  it('unacked messages of a closed connection are redelivered to another consumer with redelivered=true', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('redeliver', { durable: false });
    for (let i = 0; i < 3; i++) ch.sendToQueue('redeliver', Buffer.from(`m${i}`));
    const first = await connectAmqp(f.broker);
    const fch = await first.createChannel();
    const got = await take(fch, 'redeliver', 3, { ack: false });
    assert.deepEqual(
      got.map((m) => m.fields.redelivered),
      [false, false, false],
    );
    await first.close();
    const again = await take(ch, 'redeliver', 3);
    assert.deepEqual(
      again.map((m) => m.content.toString()),
      ['m0', 'm1', 'm2'],
    );
    assert.deepEqual(
      again.map((m) => m.fields.redelivered),
      [true, true, true],
    );
    await ch.deleteQueue('redeliver');
    await ch.close();
  });

  it('nack with requeue puts the message back (redelivered); recover requeues every unacked delivery', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('nackq', { exclusive: true });
    ch.sendToQueue('nackq', Buffer.from('a'));
    const m1 = await ch.get('nackq');
    assert.ok(m1);
    ch.nack(m1, false, true);
    let m2: Awaited<ReturnType<Channel['get']>> = false;
    await eventually(async () => (m2 = await ch.get('nackq')) !== false, 10_000, 'requeued message');
    assert.ok(m2);
    assert.equal((m2 as ConsumeMessage).fields.redelivered, true);
    await ch.recover();
    let m3: Awaited<ReturnType<Channel['get']>> = false;
    await eventually(async () => (m3 = await ch.get('nackq', { noAck: true })) !== false, 10_000, 'recovered message');
    assert.equal((m3 as unknown as ConsumeMessage).content.toString(), 'a');
    await ch.close();
  });

  it('dead-lettering: by per-queue TTL, by max-length (drop-head) and by reject, with x-death', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertExchange('dlx', 'direct', { durable: false });
    await ch.assertQueue('dead', { exclusive: true });
    await ch.bindQueue('dead', 'dlx', 'dead');
    await ch.assertQueue('ttl-q', {
      exclusive: true,
      arguments: { 'x-message-ttl': 50, 'x-dead-letter-exchange': 'dlx', 'x-dead-letter-routing-key': 'dead' },
    });
    await ch.assertQueue('len-q', { exclusive: true, arguments: { 'x-max-length': 1, 'x-dead-letter-exchange': 'dlx', 'x-dead-letter-routing-key': 'dead' } });
    await ch.assertQueue('rej-q', { exclusive: true, arguments: { 'x-dead-letter-exchange': 'dlx', 'x-dead-letter-routing-key': 'dead' } });
    ch.sendToQueue('ttl-q', Buffer.from('expired'));
    const [d1] = await take(ch, 'dead', 1);
    assert.equal(d1!.content.toString(), 'expired');
    const death1 = (d1!.properties.headers?.['x-death'] as unknown as Array<Record<string, unknown>>)[0]!;
    assert.equal(death1.reason, 'expired');
    assert.equal(death1.queue, 'ttl-q');
    assert.equal(d1!.properties.headers?.['x-first-death-reason'], 'expired');

    ch.sendToQueue('len-q', Buffer.from('oldest'));
    ch.sendToQueue('len-q', Buffer.from('newest'));
    const [d2] = await take(ch, 'dead', 1);
    assert.equal(d2!.content.toString(), 'oldest');
    assert.equal((d2!.properties.headers?.['x-death'] as unknown as Array<Record<string, unknown>>)[0]!.reason, 'maxlen');

    ch.sendToQueue('rej-q', Buffer.from('rejected'), { headers: { keep: 'me' } });
    const [r] = await take(ch, 'rej-q', 1, { ack: false });
    ch.reject(r!, false);
    const [d3] = await take(ch, 'dead', 1);
    assert.equal(d3!.content.toString(), 'rejected');
    assert.equal(d3!.properties.headers?.keep, 'me');
    assert.equal((d3!.properties.headers?.['x-death'] as unknown as Array<Record<string, unknown>>)[0]!.reason, 'rejected');
    await ch.close();
  });

  it('basic.get, purge, and delete: consumers of a deleted queue get basic.cancel', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('gpd', { durable: false });
    assert.equal(await ch.get('gpd'), false);
    for (let i = 0; i < 5; i++) ch.sendToQueue('gpd', Buffer.from(String(i)));
    let first: Awaited<ReturnType<Channel['get']>> = false;
    await eventually(async () => (first = await ch.get('gpd', { noAck: true })) !== false, 10_000, 'get');
    assert.equal((first as unknown as ConsumeMessage).content.toString(), '0');
    assert.equal((first as unknown as { fields: { messageCount: number } }).fields.messageCount, 4);
    const purged = await ch.purgeQueue('gpd');
    assert.equal(purged.messageCount, 4);
    const other = await f.conn.createChannel();
    other.on('error', () => undefined);
    const cancelled = new Promise<void>((resolve) => {
      void other.consume('gpd', (m: unknown) => {
        if (m === null) resolve();
      });
    });
    await eventually(async () => (await ch.checkQueue('gpd')).consumerCount === 1, 10_000, 'consumer registered');
    await ch.deleteQueue('gpd');
    await cancelled;
    await assert.rejects(other.checkQueue('gpd'), /404/);
    await ch.close();
  });

  it('prefetch with global=true bounds the channel: two consumers share a window of 3', async () => {
    const other = await connectAmqp(f.broker);
    const ch = await other.createChannel();
    await ch.prefetch(3, true);
    const held: ConsumeMessage[] = [];
    let third!: () => void;
    const full = new Promise<void>((r) => (third = r));
    const onMsg = (m: ConsumeMessage | null) => {
      if (m === null) return;
      held.push(m);
      if (held.length === 3) third();
    };
    await ch.assertQueue('shared-window-2', { exclusive: true });
    for (let i = 0; i < 10; i++) ch.sendToQueue('shared-window-2', Buffer.from(String(i)));
    await ch.consume('shared-window-2', onMsg);
    await ch.consume('shared-window-2', onMsg);
    await full;
    // Marker: an ack opens exactly one slot, so exactly one more delivery arrives (the 4th), after which the
    // window is full again; the queue then reports the rest ready.
    const fourth = new Promise<void>((r) => {
      const before = held.length;
      const t = setInterval(() => {
        if (held.length > before) {
          clearInterval(t);
          r();
        }
      }, 5);
    });
    ch.ack(held[0]!);
    await fourth;
    assert.equal(held.length, 4);
    const q = await ch.checkQueue('shared-window-2');
    assert.equal(q.messageCount, 6, 'three unacked in the window, six ready');
    await other.close();
  });

  it('acking an unknown delivery tag closes the channel with 406; an exclusive queue goes with its connection', async () => {
    const other = await connectAmqp(f.broker);
    const ch = await other.createChannel();
    await ch.assertQueue('mine-only', { exclusive: true });
    ch.sendToQueue('mine-only', Buffer.from('x'));
    const [m] = await take(ch, 'mine-only', 1, { ack: false });
    ch.ack(m!);
    const closed = new Promise<Error>((resolve) => ch.on('error', resolve));
    ch.ack(m!); // twice
    assert.match((await closed).message, /406 .*unknown delivery tag 1/);
    await other.close();
    await eventually(
      async () => {
        const probe = await f.conn.createChannel();
        probe.on('error', () => undefined);
        try {
          await probe.checkQueue('mine-only');
          await probe.close();
          return false;
        } catch {
          return true;
        }
      },
      10_000,
      'exclusive queue deleted',
    );
  });
});

describe('e2e: the queue memory window (--queue-window-messages)', () => {
  const small = amqpFixture({ connect: true, args: ['--queue-window-messages', '10'] });
  const usual = amqpFixture({ connect: true });

  /** Publishes 50 transient messages to a durable queue, reads them back in order; the queue store's bytes appended. */
  const run = async (f: typeof small): Promise<number> => {
    const ch = await f.conn.createConfirmChannel();
    await ch.assertQueue('windowed', { durable: true });
    for (let i = 0; i < 50; i++) ch.sendToQueue('windowed', Buffer.from(`m${i}`), { deliveryMode: 1 });
    await ch.waitForConfirms();
    const got = await take(ch, 'windowed', 50);
    assert.deepEqual(
      got.map((m) => m.content.toString()),
      [...Array(50).keys()].map((i) => `m${i}`),
    );
    await ch.close();
    const figures = await f.broker.api<{ storage: { queueStoreFigures: { bytesAppended: number } } }>('GET', '/api/v1/broker');
    return figures.storage.queueStoreFigures.bytesAppended;
  };

  it('past a window of 10, the messages of a durable queue go to its store (transient ones too) and come back in order', async () => {
    assert.ok((await run(small)) > 0, 'transient messages beyond the window were written to the store');
  });

  it('within the default window (20,000) transient messages stay in memory: nothing written', async () => {
    assert.equal(await run(usual), 0);
  });
});
