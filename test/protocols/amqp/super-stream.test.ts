/**
 * The super-stream mapping of src/protocols/amqp/super-stream.ts: which queue names are partitions of which stream,
 * the index a new partition queue gets, the derived view of a FlowMQ stream of several partitions.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Engine, MemoryStore } from '../../../src/core/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import {
  isSuperStreamExchange,
  newPartitionIndex,
  partitionBinding,
  partitionQueue,
  partitionTarget,
  streamOfExchange,
  superStreamPartitions,
} from '../../../src/protocols/amqp/super-stream.js';

function ctx() {
  const engine = new Engine(new MemoryStreams(), new MemoryStore());
  return { engine, router: engine };
}

const superX = (name: string, args: Record<string, unknown> = { 'x-super-stream': true }) => ({
  name,
  type: 'direct' as const,
  durable: true,
  autoDelete: false,
  internal: false,
  rawArguments: args,
});

describe('AMQP super streams: the mapping', () => {
  it('newPartitionIndex: a whole-number key is its own index when free, else the lowest free index', () => {
    assert.equal(newPartitionIndex('0', new Set(), 10), 0);
    assert.equal(newPartitionIndex('2', new Set([0]), 10), 2);
    assert.equal(newPartitionIndex('2', new Set([2]), 10), 0);
    assert.equal(newPartitionIndex('amer', new Set([0, 1]), 10), 2);
    assert.equal(newPartitionIndex('01', new Set(), 10), 0, 'not a canonical number: next free');
    assert.equal(newPartitionIndex('12', new Set([0]), 10), 1, 'beyond the maximum: next free');
  });

  it('isSuperStreamExchange reads x-super-stream as RabbitMQ writes it', () => {
    assert.equal(isSuperStreamExchange({ ...superX('a'), createdAt: 0 }), true);
    assert.equal(isSuperStreamExchange({ ...superX('a', {}), createdAt: 0 }), false);
    assert.equal(isSuperStreamExchange({ ...superX('a', { 'x-super-stream': false }), createdAt: 0 }), false);
    assert.equal(isSuperStreamExchange(undefined), false);
  });

  it('a declared super stream: partitions from its bindings; queue names <stream>-<key>, keys and names with dashes', async () => {
    const c = ctx();
    await c.engine.declareExchange(superX('my-ss'));
    assert.deepEqual(superStreamPartitions(c, 'my-ss'), []);
    assert.deepEqual(partitionTarget(c, 'my-ss-us-east'), { stream: 'my-ss', key: 'us-east' }, 'no exchange my-ss-us: the longest prefix that is one');
    await c.engine.createStream({ name: 'my-ss', partitions: 2 });
    await c.engine.bind(partitionBinding('my-ss', 'us-east', 0));
    await c.engine.bind(partitionBinding('my-ss', 'eu', 1));
    // Another exchange's binding to the stream names no partition queue; nor does another key of the same exchange
    // without the queue it stands for (a client's extra binding).
    await c.engine.bind({ ...partitionBinding('my-ss', 'zz', 1), source: 'amq.direct' });
    await c.engine.bind({ ...partitionBinding('my-ss', 'extra', 1), arguments: { 'x-stream-partition-order': 1 } });
    await c.engine.bind({ ...partitionBinding('my-ss', 'forged', 1), arguments: { 'x-stream-partition-order': 1, 'x-flowmq-partition-queue': 'my-ss-eu' } });
    assert.deepEqual(
      superStreamPartitions(c, 'my-ss')!.map((p) => [p.partition, p.key, p.bound]),
      [
        [0, 'us-east', true],
        [1, 'eu', true],
      ],
    );
    assert.deepEqual(partitionQueue(c, 'my-ss-us-east'), { stream: 'my-ss', exchange: 'my-ss', partition: 0, key: 'us-east', bound: true });
    assert.equal(partitionQueue(c, 'my-ss-eu')?.partition, 1);
    assert.equal(partitionQueue(c, 'my-ss-zz'), null);
    assert.equal(partitionQueue(c, 'my-ss-extra'), null);
    assert.equal(partitionQueue(c, 'my-ss-forged'), null);
    assert.equal(partitionQueue(c, 'my-ss-'), null);
    assert.equal(partitionQueue(c, 'my-ss'), null);
    assert.deepEqual(partitionTarget(c, 'my-ss-apac'), { stream: 'my-ss', key: 'apac' });
    assert.equal(partitionTarget(c, 'other-0'), null);
  });

  it('the longest super-stream prefix wins', async () => {
    const c = ctx();
    await c.engine.declareExchange(superX('a'));
    await c.engine.declareExchange(superX('a-b'));
    assert.deepEqual(partitionTarget(c, 'a-b-c'), { stream: 'a-b', key: 'c' });
    assert.deepEqual(partitionTarget(c, 'a-x'), { stream: 'a', key: 'x' });
  });

  it('a FlowMQ stream of several partitions with no exchange of its name: the derived view, keys 0..N-1', async () => {
    const c = ctx();
    await c.engine.createStream({ name: 'orders', partitions: 3 });
    await c.engine.createStream({ name: 'single', partitions: 1 });
    assert.deepEqual(
      superStreamPartitions(c, 'orders')!.map((p) => [p.partition, p.key, p.bound]),
      [
        [0, '0', false],
        [1, '1', false],
        [2, '2', false],
      ],
    );
    assert.equal(partitionQueue(c, 'orders-2')?.partition, 2);
    assert.equal(partitionQueue(c, 'orders-3'), null);
    assert.equal(superStreamPartitions(c, 'single'), null, 'one partition: a plain stream queue');
    assert.equal(partitionQueue(c, 'single-0'), null);
    // An exchange of the stream's name that is no super stream hides the view; a super-stream one replaces it.
    await c.engine.declareExchange(superX('orders', {}));
    assert.equal(superStreamPartitions(c, 'orders'), null);
    assert.equal(partitionQueue(c, 'orders-1'), null);
  });

  it("a vhost's super-stream exchange is its namespace's stream; its partition bindings name that stream", () => {
    assert.equal(streamOfExchange('orders'), 'orders');
    assert.equal(streamOfExchange('$ns/t1/orders'), 't1~orders');
    assert.equal(partitionBinding('$ns/t1/orders', 'a', 2).destination, 't1~orders');
    assert.equal(partitionBinding('$ns/t1/orders', 'a', 2).arguments['x-flowmq-partition-queue'], '$ns/t1/orders-a');
  });
});
