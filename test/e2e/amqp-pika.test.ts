/**
 * pika (Debian's python3-pika 1.2, RabbitMQ's Python client) against bin/flowmq: publisher confirms, topic
 * routing, mandatory returns, consuming with prefetch, headers and properties, tx and a passive declare's 404.
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
  });
});
