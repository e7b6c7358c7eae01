/**
 * The AMQP adapter's resource alarms (connection.blocked / unblocked): the disk alarm follows the broker's
 * free-space reserve (engine.writeRefusal) and a refused write, and clears once neither has been seen for a while.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { FlowError } from '../../../src/core/index.js';
import { AmqpAdapter } from '../../../src/protocols/amqp/adapter.js';
import { resolveAmqpOptions } from '../../../src/protocols/amqp/options.js';
import type { AdapterContext } from '../../../src/protocols/types.js';
import { testControl, type TestControl } from './access-helpers.js';

let control: TestControl;
before(async () => {
  control = await testControl();
});
after(() => control.close());

function adapter(refusal: () => FlowError | null) {
  const ctx = { engine: { writeRefusal: refusal }, logger: pino({ level: 'silent' }), brokerId: 1 } as unknown as AdapterContext;
  const a = new AmqpAdapter(ctx, resolveAmqpOptions({ memoryHighWatermark: 0, diskBlockMs: 1000 }), control.access, () => 0);
  const seen: Array<string | null> = [];
  a.admit({ alarm: (reason: string | null) => void seen.push(reason) } as Parameters<AmqpAdapter['admit']>[0]);
  return { a, seen };
}

describe('AMQP disk alarm', () => {
  it('holds while the free-space reserve refuses writes and clears after it stops', () => {
    let full: FlowError | null = new FlowError('STORAGE_FULL', 'free space below the reserve');
    const { a, seen } = adapter(() => full);
    const t0 = 1_000_000;
    a.check(t0);
    assert.deepEqual(seen, ['low on disk']);
    a.check(t0 + 5000);
    assert.deepEqual(seen, ['low on disk'], 'still refused: still blocked, no new event');
    full = null;
    a.check(t0 + 5500);
    assert.deepEqual(seen, ['low on disk'], 'cleared less than diskBlockMs ago');
    a.check(t0 + 6001);
    assert.deepEqual(seen, ['low on disk', null]);
    assert.equal(a.blocked, null);
    a.release();
  });

  it('a refused write raises it too, and it clears diskBlockMs later', () => {
    const { a, seen } = adapter(() => null);
    a.writeFailed(new FlowError('STORAGE_FULL', 'disk full'));
    assert.deepEqual(seen, ['low on disk']);
    a.writeFailed(new FlowError('STORAGE_ERROR', 'an I/O error is no alarm'));
    a.check(Date.now() + 1001);
    assert.deepEqual(seen, ['low on disk', null]);
    a.release();
  });
});
