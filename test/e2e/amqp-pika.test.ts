/**
 * pika (Debian's python3-pika 1.2, RabbitMQ's Python client) against bin/flowmq: publisher confirms, topic
 * routing, mandatory returns, consuming with prefetch, headers and properties, tx, a passive declare's 404 and
 * basic.recover with requeue=false.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, run } from './harness.js';
import { amqpFixture } from './amqp-helpers.js';

const CLIENT = join(ROOT, 'test/e2e/amqp-pika-client.py');
// Debian's interpreter, where python3-pika is installed (a python3 earlier in PATH may be another one).
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

describe('e2e: pika against the AMQP listener', () => {
  const f = amqpFixture();

  it('confirms, routing, returns, consuming, properties, tx and errors', async () => {
    const r = await run(PYTHON, [CLIENT, String(f.broker.ports.amqp)], { timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as Record<string, unknown>;
    assert.equal(out.unroutable, 'returned');
    assert.equal(out.consumed, 50);
    assert.deepEqual(out.first, { body: 'body 0', rk: 'a.b.0', headers: { i: 1, s: 'str', l: [1, 'a'], d: { x: 1 } }, cid: 'c', reply_to: 'r.q', mode: 2 });
    assert.equal(out.tx, 'tx1');
    assert.equal(out.passive, 404);
    // basic.recover(requeue=false) with another consumer on the queue: the same consumer gets the three again,
    // redelivered, under new tags.
    const first = out.recover_first as Array<[string, number, boolean, string]>;
    const again = out.recover_again as Array<[string, number, boolean, string]>;
    assert.deepEqual(
      first.map(([, , r, b]) => [r, b]),
      [
        [false, 'r0'],
        [false, 'r1'],
        [false, 'r2'],
      ],
    );
    assert.deepEqual(
      again.map(([c, , r, b]) => [c, r, b]),
      first.map(([c, , , b]) => [c, true, b]),
    );
    assert.ok(Math.min(...again.map(([, t]) => t)) > Math.max(...first.map(([, t]) => t)), 'new delivery tags');
    // The queue's other consumer got none of them: the marker published after is the first it sees.
    assert.deepEqual(out.recover_other, ['marker']);
    // A basic.get delivery goes back to its queue: the next get has it, redelivered.
    assert.deepEqual(out.recover_get, ['g', false, 'g', true]);
  });
});
