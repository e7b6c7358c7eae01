/**
 * JetStream durable consumers as consumer groups for the admin API (RunningProtocol.groups): list and describe
 * with offsets and lag, reset refused, delete refused while a pull request waits and done once idle.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isFlowError } from '../../../../src/core/index.js';
import { ns, setup } from './harness.js';

const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const c of closers) await c();
});

describe('JetStream consumer groups (admin API)', () => {
  it('lists durable consumers by name over streams, with committed offsets and lag; reset is refused; delete once idle', async () => {
    const e = await setup();
    closers.push(() => e.js.close());
    const { c } = e;
    await c.api('$JS.API.STREAM.CREATE.A', { name: 'A', subjects: ['a.>'] });
    await c.api('$JS.API.STREAM.CREATE.B', { name: 'B', subjects: ['b.>'] });
    for (let i = 0; i < 3; i++) await c.publish(`a.${i}`, `m${i}`);
    await c.publish('b.x', 'bx');
    await c.api('$JS.API.CONSUMER.DURABLE.CREATE.A.worker', { stream_name: 'A', config: { durable_name: 'worker', ack_policy: 'explicit' } });
    await c.api('$JS.API.CONSUMER.DURABLE.CREATE.B.worker', { stream_name: 'B', config: { durable_name: 'worker', ack_policy: 'explicit' } });
    await c.api('$JS.API.CONSUMER.CREATE.A', { stream_name: 'A', config: { ack_policy: 'explicit' } }); // ephemeral: not a group
    const [m] = await c.fetch('A', 'worker', { batch: 1, expires: ns(5000) }, 1);
    await c.ackSync(m!);
    const g = e.js.groupAdmin();
    assert.deepEqual(await g.list(), [{ name: 'worker', protocol: 'jetstream', state: 'idle', members: 0, lag: 3 }]);
    const d = await g.describe('worker');
    assert.ok(d);
    assert.deepEqual(
      d.offsets.map((o) => [o.stream, o.committed, o.end, o.lag]),
      [
        ['A', 1, 3, 2],
        ['B', 0, 1, 1],
      ],
    );
    assert.equal(await g.describe('nobody'), null);
    await assert.rejects(g.resetOffsets('worker', 'A', { to: 'earliest' }), (err) => isFlowError(err) && err.code === 'INVALID_ARGUMENT');
    // A waiting pull request is a member: the group is active and cannot be deleted.
    const waiting = c.pull('A', 'worker', { batch: 5, expires: ns(30_000) });
    await waiting.waitFor(2); // the two messages left
    const active = await g.list();
    assert.equal(active[0]!.state, 'active');
    await assert.rejects(g.delete('worker'), (err) => isFlowError(err) && err.code === 'INVALID_ARGUMENT');
    e.engine.unsubscribe(waiting.sub);
    await assert.rejects(g.delete('nobody'), (err) => isFlowError(err) && err.code === 'NOT_FOUND');
  });

  it('deletes an idle group: its consumers on every stream are gone', async () => {
    const e = await setup();
    closers.push(() => e.js.close());
    const { c } = e;
    await c.api('$JS.API.STREAM.CREATE.A', { name: 'A', subjects: ['a.>'] });
    await c.api('$JS.API.CONSUMER.DURABLE.CREATE.A.w', { stream_name: 'A', config: { durable_name: 'w', ack_policy: 'explicit' } });
    const g = e.js.groupAdmin();
    await g.delete('w');
    assert.deepEqual(await g.list(), []);
    assert.equal((await c.api('$JS.API.CONSUMER.INFO.A.w')).error.err_code, 10014);
  });
});
