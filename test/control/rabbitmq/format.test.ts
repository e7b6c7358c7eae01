/**
 * The RabbitMQ management API's JSON helpers: rates over two samples, binding properties keys, message_stats from a
 * queue's counters (counted by the core queue itself, checked here through a real Queue).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue, makeMessage, type QueueConsumer, type QueueDelivery } from '../../../src/core/index.js';
import { Rates, bindingJson, messageStats, partitionQueues, propertiesKey, queueJson, streamQueueJson } from '../../../src/control/rabbitmq/format.js';
import type { AmqpStreamQueueView } from '../../../src/control/index.js';

describe('RabbitMQ management format', () => {
  it('reports a rate as the change per second between the last two samples, 0.0 before', () => {
    let v = 0;
    const r = new Rates((put) => put('x', v));
    r.sample(1000);
    assert.deepEqual(r.details('x'), { rate: 0 });
    v = 50;
    r.sample(6000);
    assert.deepEqual(r.details('x'), { rate: 10 });
    r.sample(11_000);
    assert.deepEqual(r.details('x'), { rate: 0 });
    assert.deepEqual(r.details('unknown'), { rate: 0 });
  });

  it('names bindings as RabbitMQ does without arguments, and by a stable hash with them', () => {
    assert.equal(propertiesKey('', {}), '~');
    assert.equal(propertiesKey('a.b', {}), 'a.b');
    assert.equal(propertiesKey('a b~c', undefined), 'a%20b%7Ec');
    const k = propertiesKey('k', { 'x-match': 'all', h: '1' });
    assert.match(k, /^k~[A-Za-z0-9_-]{8}$/);
    assert.equal(propertiesKey('k', { 'x-match': 'all', h: '1' }), k);
    assert.notEqual(propertiesKey('k', { 'x-match': 'any', h: '1' }), k);
  });

  it("counts a queue's publishes, deliveries, gets, redeliveries and acks into message_stats", async () => {
    const q = new Queue({ name: 'q', durable: false, autoDelete: false, exclusiveOwner: null, arguments: {}, rawArguments: {}, createdAt: 0 }, null, {
      deadLetter: () => null,
      expire: () => undefined,
    });
    await q.open();
    for (let i = 0; i < 3; i++) q.enqueue(makeMessage('q', Buffer.from(`m${i}`)));
    const got: QueueDelivery[] = [];
    const c: QueueConsumer = { tag: 't', owner: 'o', noAck: false, hasCredit: () => got.length < 1, deliver: (d) => got.push(d) };
    q.consume(c);
    assert.equal(got.length, 1);
    await q.nack(got[0].id, true); // requeued: its next delivery is a redelivery
    q.cancel(c);
    const g = await q.get('o2', false);
    assert.ok(g);
    await q.ack(g.id);
    await q.get('o2', true);
    await q.get('o2', true);
    assert.equal(await q.get('o2', true), null);
    const stats = messageStats(q.counters);
    assert.deepEqual(stats, { publish: 3, deliver: 1, deliver_no_ack: 0, get: 1, get_no_ack: 2, get_empty: 1, deliver_get: 4, redeliver: 1, ack: 1 });
    const json = queueJson(q.def, q, 'rabbit@n', new Rates(() => undefined));
    assert.equal(json.messages, 0);
    assert.equal((json.message_stats as Record<string, number>).ack, 1);
    q.close();
  });
  it('shows a super-stream partition binding destined to its partition queue, without FlowMQ arguments', () => {
    const part = (partition: number, key: string): AmqpStreamQueueView => ({
      name: `ss-${key}`,
      stream: 'ss',
      partition,
      superStream: 'ss',
      key,
      arguments: { 'x-queue-type': 'stream' },
      messages: 4,
    });
    const pq = partitionQueues([part(0, 'a'), part(1, 'b')]);
    const b = (p: number | undefined, key: string) => ({
      source: 'ss',
      destinationKind: 'stream' as const,
      destination: 'ss',
      key,
      rule: 'amqp' as const,
      arguments: p === undefined ? {} : { 'x-stream-partition-order': p, 'x-flowmq-partition-queue': `ss-${key}` },
    });
    const j = bindingJson(b(1, 'b'), pq);
    assert.equal(j.destination, 'ss-b');
    assert.equal(j.destination_type, 'queue');
    assert.deepEqual(j.arguments, { 'x-stream-partition-order': 1 });
    assert.equal(j.properties_key, propertiesKey('b', { 'x-stream-partition-order': 1 }));
    // A binding to a stream that pins no partition, or one with no partition queue, keeps the stream as destination.
    assert.equal(bindingJson(b(undefined, 'k'), pq).destination, 'ss');
    assert.equal(bindingJson(b(7, 'z'), pq).destination, 'ss');
    const q = streamQueueJson(part(1, 'b'), 2, 'rabbit@n', new Rates(() => undefined));
    assert.equal(q.type, 'stream');
    assert.equal(q.messages, 4);
    assert.equal(q.messages_ready, 4);
    assert.equal(q.messages_unacknowledged, 0);
    assert.deepEqual(q.readers, { 'rabbit@n': 2 });
    assert.equal(q.consumers, 2);
  });
});
