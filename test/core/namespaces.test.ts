/**
 * Namespaces as tenants (src/core/namespaces.ts): how names are qualified and stripped, and that no binding rule's
 * wildcard of one namespace reaches another namespace's topics in the engine (live MQTT and NATS subscriptions,
 * stream bindings, amq.topic bindings of queues).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  Engine,
  MemoryQueueStore,
  MemoryStore,
  isQualifiedStream,
  isReservedName,
  isReservedTopic,
  isValidInternalStreamName,
  makeMessage,
  namespaceNames,
  newPublishInfo,
  ruleAccepts,
  splitName,
  splitStreamName,
  splitTopic,
  streamOwnTopic,
  type Message,
  type Subscriber,
  type Subscription,
} from '../../src/core/index.js';
import { MemoryStreams } from '../helpers/memory-storage.js';

class Sink implements Subscriber {
  readonly got: Message[] = [];
  constructor(readonly id: string) {}
  deliver(msg: Message, _subs: Subscription[]): void {
    this.got.push(msg);
  }
}

describe('namespace names', () => {
  it('default keeps every name as it is; another namespace qualifies each kind with its own encoding', () => {
    const d = namespaceNames('default');
    assert.equal(d.isDefault, true);
    assert.equal(d.topic('orders/x'), 'orders/x');
    assert.equal(d.stream('orders'), 'orders');
    assert.equal(d.name('g'), 'g');
    const t = namespaceNames('t1');
    assert.equal(namespaceNames('t1'), t, 'one shared instance per namespace');
    assert.equal(t.topic('orders/x'), '$ns/t1/orders/x');
    assert.equal(t.topic('#'), '$ns/t1/#');
    assert.equal(t.stream('orders.eu'), 't1~orders.eu');
    assert.equal(t.name('g'), '$ns/t1/g');
    assert.equal(t.name('$ns/t2/g'), '$ns/t1/$ns/t2/g', 'a spelled-out name stays inside the namespace');
  });

  it("strips its own names and answers null for another namespace's", () => {
    const d = namespaceNames('default');
    const t1 = namespaceNames('t1');
    assert.equal(t1.ownTopic('$ns/t1/orders/x'), 'orders/x');
    assert.equal(t1.ownTopic('$ns/t10/orders/x'), null, 'a namespace whose name starts alike is another');
    assert.equal(t1.ownTopic('orders/x'), null);
    assert.equal(d.ownTopic('orders/x'), 'orders/x');
    assert.equal(d.ownTopic('$ns/t1/orders/x'), null);
    assert.equal(d.ownTopic('$SYS/broker/uptime'), '$SYS/broker/uptime');
    assert.equal(t1.outTopic('$queue/q'), '$queue/q', "a delivery under a subscription's own filter stays");
    assert.equal(t1.ownStream('t1~orders'), 'orders');
    assert.equal(t1.ownStream('t2~orders'), null);
    assert.equal(t1.ownStream('orders'), null);
    assert.equal(d.ownStream('orders'), 'orders');
    assert.equal(d.ownStream('t1~orders'), null);
    assert.equal(t1.ownName('$ns/t1/g'), 'g');
    assert.equal(d.ownName('$ns/t1/g'), null);
  });

  it('Kafka names: default escapes what spells another namespace; tenants qualify; the way back inverts both', () => {
    const d = namespaceNames('default');
    const t1 = namespaceNames('t1');
    assert.equal(d.kafkaStream('orders'), 'orders');
    assert.equal(d.kafkaStream('t1~orders'), '~t1~orders');
    assert.equal(isValidInternalStreamName(d.kafkaStream('t1~orders')), false, 'an escaped name stays invalid');
    assert.equal(d.kafkaOwnStream('~t1~orders'), 't1~orders');
    assert.equal(d.kafkaOwnStream('t1~orders'), null);
    assert.equal(t1.kafkaStream('orders'), 't1~orders');
    assert.equal(isValidInternalStreamName(t1.kafkaStream('t2~orders')), false);
    assert.equal(t1.kafkaOwnStream('t1~orders'), 'orders');
    assert.equal(t1.kafkaOwnStream('orders'), null);
    assert.equal(d.kafkaName('g'), 'g');
    assert.equal(d.kafkaName('$ns/t1/g'), '$ns//$ns/t1/g');
    assert.equal(d.kafkaOwnName('$ns//$ns/t1/g'), '$ns/t1/g');
    assert.equal(d.kafkaOwnName('$ns/t1/g'), null);
    assert.equal(t1.kafkaName('g'), '$ns/t1/g');
    assert.equal(t1.kafkaOwnName('$ns/t1/g'), 'g');
    assert.equal(t1.kafkaOwnName('$ns//g'), null);
    assert.equal(t1.kafkaOwnName('g'), null);
  });

  it('splits internal names into namespace and name', () => {
    assert.deepEqual(splitTopic('$ns/t1/a/b'), { namespace: 't1', topic: 'a/b' });
    assert.deepEqual(splitTopic('a/b'), { namespace: 'default', topic: 'a/b' });
    assert.deepEqual(splitStreamName('t1~orders'), { namespace: 't1', name: 'orders' });
    assert.deepEqual(splitStreamName('orders'), { namespace: 'default', name: 'orders' });
    assert.deepEqual(splitName('$ns/t1/c1'), { namespace: 't1', name: 'c1' });
  });

  it('reserves $ns and $ns/... (not $nsx, not $SYS) and the stream separator', () => {
    for (const t of ['$ns', '$ns/', '$ns/t1/x', '$ns/#']) assert.equal(isReservedTopic(t), true, t);
    for (const t of ['$nsx/a', '$SYS/x', 'ns/x', 'a/$ns/x', '']) assert.equal(isReservedTopic(t), false, t);
    assert.equal(isReservedName('$ns/t1/g'), true);
    assert.equal(isReservedName('g'), false);
    assert.equal(isQualifiedStream('t1~orders'), true);
    assert.equal(isQualifiedStream('orders'), false);
  });

  it('validates internal stream names: a Kafka name, optionally after a namespace name and `~`', () => {
    for (const n of ['orders', 't1~orders', 'a.b@c-d_e~x.y', 'default~x']) assert.equal(isValidInternalStreamName(n), true, n);
    for (const n of ['~orders', 't1~', 't1~a~b', 't/1~a', 't1~a/b', '.', 't1~..', 'x'.repeat(250)]) assert.equal(isValidInternalStreamName(n), false, n);
    assert.equal(streamOwnTopic('orders.eu'), 'orders/eu');
    assert.equal(streamOwnTopic('t1~orders.eu'), '$ns/t1/orders/eu');
  });

  it('ruleAccepts: MQTT keeps its $ rule; AMQP and NATS wildcards take $ topics but never $ns ones', () => {
    assert.equal(ruleAccepts('mqtt', '$SYS/x', true), false);
    assert.equal(ruleAccepts('nats', '$JS/API/INFO', true), true);
    assert.equal(ruleAccepts('amqp', '$x/y', true), true);
    for (const r of ['mqtt', 'nats', 'amqp'] as const) {
      assert.equal(ruleAccepts(r, '$ns/t1/x', true), false, r);
      assert.equal(ruleAccepts(r, '$ns/t1/x', false), true, `${r}: an exact level is the namespace's own adapter's`);
    }
  });
});

describe('Engine: no wildcard reaches another namespace', () => {
  it('live MQTT `#`/`+`, NATS `>`/`*`, stream bindings and amq.topic `#` bindings skip $ns/ topics; a namespace filter gets its own', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, new MemoryStore(), new MemoryQueueStore());
    const mqttAll = new Sink('m');
    const natsAll = new Sink('n');
    const natsOne = new Sink('n1');
    const t1 = new Sink('t1');
    engine.subscribe('#', mqttAll, { qos: 0 });
    engine.subscribe('+/t1/#', mqttAll, { qos: 0 });
    engine.subscribe('>', natsAll, { qos: 0, rule: 'nats' });
    engine.subscribe('*.t1.>', natsOne, { qos: 0, rule: 'nats' });
    engine.subscribe('$ns/t1/#', t1, { qos: 0 });
    await engine.createStream({ name: 'all', partitions: 1, bindings: ['#'] });
    await engine.declareQueue({ name: 'q', durable: true, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {} });
    await engine.bind({ source: 'amq.topic', destinationKind: 'queue', destination: 'q', key: '#', arguments: {} });
    await engine.bind({ source: 'amq.topic', destinationKind: 'queue', destination: 'q', key: '*.t1.#', arguments: {} });
    const info = newPublishInfo();
    await engine.publish(makeMessage('$ns/t1/orders/x', Buffer.from('t1'), { namespace: 't1' }), info);
    assert.deepEqual(info, { delivered: 1, captured: [], queued: 0 }, "only the namespace's own subscriber");
    assert.deepEqual(
      t1.got.map((x) => x.topic),
      ['$ns/t1/orders/x'],
    );
    assert.equal(mqttAll.got.length + natsAll.got.length + natsOne.got.length, 0);
    assert.equal(engine.hasLiveSubscribers('$ns/t2/x'), false);
    // The same wildcards still take default's topics (and NATS `>` still takes `$` ones).
    const info2 = newPublishInfo();
    await engine.publish(makeMessage('orders/x', Buffer.from('d')), info2);
    assert.equal(info2.delivered, 2);
    assert.equal(info2.captured.length, 1);
    assert.equal(info2.queued, 1);
    const info3 = newPublishInfo();
    await engine.publish(makeMessage('$JS/API/INFO', Buffer.from('')), info3);
    assert.equal(info3.delivered, 1);
  });

  it('a namespaced stream binds its own name inside the namespace; names outside the encoding are refused', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, new MemoryStore());
    await assert.rejects(engine.createStream({ name: 't1~orders', partitions: 1 }), { code: 'INVALID_ARGUMENT' }, 'only an isolating adapter makes one');
    const def = await engine.createStream({ name: 't1~orders', partitions: 1, namespaced: true });
    assert.deepEqual(def.bindings, ['$ns/t1/orders']);
    // Adapters that do not isolate namespaces (AMQP, JetStream) look streams up in default's names only.
    assert.equal(engine.getStream('t1~orders'), undefined);
    assert.equal(engine.getStreamById(def.id!), undefined);
    assert.equal(engine.getAnyStream('t1~orders')?.def.name, 't1~orders');
    assert.equal(engine.getAnyStreamById(def.id!)?.def.name, 't1~orders');
    assert.deepEqual(engine.topicFiltersFeeding('stream', 't1~orders'), ['$ns/t1/orders']);
    await engine.createStream({ name: 'orders', partitions: 1 });
    assert.deepEqual(
      engine.listStreams().map((d) => d.name),
      ['orders'],
    );
    assert.deepEqual(
      engine.listAllStreams().map((d) => d.name),
      ['orders', 't1~orders'],
    );
    const info = newPublishInfo();
    await engine.publish(makeMessage('$ns/t1/orders', Buffer.from('x'), { namespace: 't1' }), info);
    assert.deepEqual(
      info.captured.map((c) => c.stream),
      ['t1~orders'],
    );
    await assert.rejects(engine.createStream({ name: '~orders', partitions: 1, namespaced: true }), { code: 'INVALID_ARGUMENT' });
    await assert.rejects(engine.createStream({ name: 't1~a~b', partitions: 1, namespaced: true }), { code: 'INVALID_ARGUMENT' });
    // Bindings stay inside the stream's namespace.
    await assert.rejects(engine.createStream({ name: 'spy', partitions: 1, bindings: ['$ns/t1/#'] }), { code: 'INVALID_FILTER' });
    await assert.rejects(engine.createStream({ name: 't2~spy', partitions: 1, bindings: ['$ns/t1/#'], namespaced: true }), { code: 'INVALID_FILTER' });
    await assert.rejects(engine.setBindings('orders', ['$ns/t1/orders']), { code: 'INVALID_FILTER' });
  });

  it('adapters that do not isolate namespaces cannot spell $ns: NATS and amq.topic keys refused, publishes refused or unrouted', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, new MemoryStore(), new MemoryQueueStore());
    const s = new Sink('n');
    assert.throws(() => engine.subscribe('$ns.t1.>', s, { qos: 0, rule: 'nats' }), { code: 'INVALID_FILTER' });
    assert.throws(() => engine.subscribe('$ns', s, { qos: 0, rule: 'nats' }), { code: 'INVALID_FILTER' });
    await engine.declareQueue({ name: 'q', durable: true, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {} });
    await assert.rejects(engine.bind({ source: 'amq.topic', destinationKind: 'queue', destination: 'q', key: '$ns.t1.#', arguments: {} }), {
      code: 'INVALID_FILTER',
    });
    // A publish on a namespace's topic without that namespace (a NATS or AMQP client of default spelling it).
    const t1 = new Sink('t1');
    engine.subscribe('$ns/t1/#', t1, { qos: 0 });
    assert.throws(() => engine.publish(makeMessage('$ns/t1/x', Buffer.from('evil'))), { code: 'INVALID_TOPIC' });
    assert.throws(() => engine.publish(makeMessage('$ns/t1/x', Buffer.from('evil'), { namespace: 't2' })), { code: 'INVALID_TOPIC' });
    assert.equal(engine.publishTo('amq.topic', '$ns.t1.x', makeMessage('', Buffer.from('evil'))).routed, 0);
    await engine.publish(makeMessage('$ns/t1/x', Buffer.from('ok'), { namespace: 't1' }));
    assert.deepEqual(
      t1.got.map((x) => x.payload.toString()),
      ['ok'],
    );
  });

  it("an AMQP vhost's amq.topic keys: only a destination of namespace t1 binds $ns.t1., only t1's messages publish there", async () => {
    const engine = new Engine(new MemoryStreams(), new MemoryStore(), new MemoryQueueStore());
    const def = { durable: false, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {} };
    await engine.declareQueue({ name: '$ns/t1/q', ...def });
    await engine.declareQueue({ name: '$ns/t2/q', ...def });
    await engine.bind({ source: 'amq.topic', destinationKind: 'queue', destination: '$ns/t1/q', key: '$ns.t1.#', arguments: {} });
    // t2's queue cannot bind t1's keys, nor the bare namespace level.
    await assert.rejects(engine.bind({ source: 'amq.topic', destinationKind: 'queue', destination: '$ns/t2/q', key: '$ns.t1.#', arguments: {} }), {
      code: 'INVALID_FILTER',
    });
    await assert.rejects(engine.bind({ source: 'amq.topic', destinationKind: 'queue', destination: '$ns/t1/q', key: '$ns.#', arguments: {} }), {
      code: 'INVALID_FILTER',
    });
    assert.equal(engine.publishTo('amq.topic', '$ns.t1.x', makeMessage('', Buffer.from('evil'), { namespace: 't2' })).routed, 0);
    assert.equal(engine.publishTo('amq.topic', '$ns.t1.x', makeMessage('', Buffer.from('ok'), { namespace: 't1' })).routed, 1);
    // An MQTT publish of t1 reaches the queue too.
    engine.publish(makeMessage('$ns/t1/y', Buffer.from('mqtt'), { namespace: 't1' }));
    assert.equal(engine.getQueue('$ns/t1/q')!.stats().ready, 2);
    assert.equal(engine.getQueue('$ns/t2/q')!.stats().ready, 0);
  });
});
