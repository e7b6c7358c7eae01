/**
 * AMQP publishing end to end (amqplib against bin/flowmq): publisher confirms (acks in order, nacks for a queue
 * refusing at its length limit), transactions (commit, rollback) and bodies larger than frame-max.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import type { Channel } from 'amqplib';
import { amqpFixture, take } from './amqp-helpers.js';

const require = createRequire(import.meta.url);
// eslint-disable-next-line @typescript-eslint/no-require-imports
const defs = require('amqplib/lib/defs') as Record<string, number>;

/** amqplib has no tx API: the methods go through its channel's rpc. */
function tx(ch: Channel, op: 'Select' | 'Commit' | 'Rollback'): Promise<unknown> {
  return (ch as unknown as { rpc(m: number, f: object, e: number): Promise<unknown> }).rpc(defs[`Tx${op}`]!, {}, defs[`Tx${op}Ok`]!);
}

describe('e2e: AMQP publishing', () => {
  const f = amqpFixture({ connect: true });

  it('publisher confirms: every publish is acked, in order', async () => {
    const ch = await f.conn.createConfirmChannel();
    await ch.assertQueue('confirmed', { exclusive: true });
    const acked: number[] = [];
    const n = 500;
    const all: Promise<void>[] = [];
    for (let i = 0; i < n; i++) {
      all.push(
        new Promise<void>((resolve, reject) => {
          ch.sendToQueue('confirmed', Buffer.from(String(i)), { persistent: true }, (err: unknown) => {
            if (err) reject(err);
            else {
              acked.push(i);
              resolve();
            }
          });
        }),
      );
    }
    // Unroutable publishes are confirmed too.
    all.push(
      new Promise<void>((resolve, reject) => ch.publish('amq.direct', 'nowhere', Buffer.from('x'), {}, (err: unknown) => (err ? reject(err) : resolve()))),
    );
    await Promise.all(all);
    assert.deepEqual(acked, [...Array(n).keys()]);
    const got = await take(ch, 'confirmed', n, { noAck: true });
    assert.equal(got.length, n);
    await ch.close();
  });

  it('a queue refusing at its limit (x-overflow reject-publish) gets the publish nacked', async () => {
    const ch = await f.conn.createConfirmChannel();
    await ch.assertQueue('bounded', { exclusive: true, arguments: { 'x-max-length': 2, 'x-overflow': 'reject-publish' } });
    const outcome = (i: number) =>
      new Promise<string>((resolve) => ch.sendToQueue('bounded', Buffer.from(String(i)), {}, (err: unknown) => resolve(err ? 'nack' : 'ack')));
    const results = await Promise.all([outcome(0), outcome(1), outcome(2), outcome(3)]);
    assert.deepEqual(results, ['ack', 'ack', 'nack', 'nack']);
    await ch.close();
  });

  it('tx: published messages appear at commit, not before; rollback drops them', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('txq', { exclusive: true });
    await tx(ch, 'Select');
    ch.sendToQueue('txq', Buffer.from('t1'));
    ch.sendToQueue('txq', Buffer.from('t2'));
    // A round trip on the same channel: the publishes before it have been taken, not routed.
    assert.equal((await ch.checkQueue('txq')).messageCount, 0);
    await tx(ch, 'Commit');
    assert.equal((await ch.checkQueue('txq')).messageCount, 2);
    ch.sendToQueue('txq', Buffer.from('dropped'));
    await tx(ch, 'Rollback');
    assert.equal((await ch.checkQueue('txq')).messageCount, 2);
    // Acks in a transaction take effect at commit.
    const m = await ch.get('txq');
    assert.ok(m);
    ch.ack(m);
    await tx(ch, 'Rollback');
    await ch.recover();
    await tx(ch, 'Commit');
    const left = await ch.checkQueue('txq');
    assert.equal(left.messageCount, 2);
    await ch.close();
  });

  it('a body larger than frame-max travels in several frames both ways', async () => {
    const ch = await f.conn.createChannel();
    await ch.assertQueue('big', { exclusive: true });
    // Below and above the size the broker assembles in one buffer taken at the content header (1 MiB).
    for (const size of [600_000, 1_600_000]) {
      const body = Buffer.alloc(size);
      for (let i = 0; i < body.length; i++) body[i] = i % 251;
      ch.sendToQueue('big', body);
      const [m] = await take(ch, 'big', 1);
      assert.equal(m!.content.length, body.length);
      assert.ok(m!.content.equals(body));
    }
    await ch.close();
  });
});
