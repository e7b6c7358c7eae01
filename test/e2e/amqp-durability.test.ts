/**
 * AMQP durability end to end: definitions (durable exchanges, queues, bindings) and confirmed persistent
 * messages survive a restart and `kill -9`; transient messages and exclusive queues do not outlive the broker.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connectAmqp, startAmqpBroker, take } from './amqp-helpers.js';

describe('e2e: AMQP durability', () => {
  it('confirmed persistent messages in a durable queue survive kill -9; redelivered after recovery', async () => {
    let broker = await startAmqpBroker();
    try {
      let conn = await connectAmqp(broker);
      conn.on('error', () => undefined); // the kill -9 below
      let ch = await conn.createConfirmChannel();
      ch.on('error', () => undefined);
      await ch.assertExchange('orders', 'topic', { durable: true });
      await ch.assertQueue('orders.eu', { durable: true });
      await ch.bindQueue('orders.eu', 'orders', 'eu.#');
      const n = 200;
      for (let i = 0; i < n; i++) ch.publish('orders', `eu.de.${i}`, Buffer.from(`order ${i}`), { persistent: true, messageId: `o${i}` });
      ch.publish('orders', 'eu.transient', Buffer.from('transient'), { persistent: false });
      await ch.waitForConfirms();
      // One delivered but not acked: it comes back after the crash, marked redelivered.
      const [first] = await take(ch, 'orders.eu', 1, { ack: false });
      assert.equal(first!.content.toString(), 'order 0');
      await broker.stop('SIGKILL');
      broker = await broker.restart();
      conn = await connectAmqp(broker);
      ch = await conn.createConfirmChannel();
      const q = await ch.checkQueue('orders.eu');
      assert.equal(q.messageCount, n, 'every confirmed persistent message, and no transient one');
      // The binding survived too: a new publish is routed.
      ch.publish('orders', 'eu.fr.x', Buffer.from('after restart'), { persistent: true });
      await ch.waitForConfirms();
      const got = await take(ch, 'orders.eu', n + 1);
      assert.deepEqual(
        got.slice(0, n).map((m) => m.properties.messageId),
        [...Array(n).keys()].map((i) => `o${i}`),
      );
      assert.equal(got[0]!.fields.redelivered, true);
      assert.equal(got[n]!.content.toString(), 'after restart');
      await conn.close();
    } finally {
      await broker.stop();
      broker.cleanup();
    }
  });
});
