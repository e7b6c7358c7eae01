import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  encodeBatch,
  Engine,
  FlowError,
  makeMessage,
  MemoryStore,
  messageToRecord,
  type BindingDef,
  type DeathRecord,
  MemoryQueueStore,
  queueFactory,
  type QueueDelivery,
  type Message,
  type QueueDef,
  type QueueFactory,
  type QueueHooks,
  type QueueRuntime,
  type QueueStore,
  type Subscriber,
  type Subscription,
} from '../../src/core/index.js';
import { MemoryStreams } from '../helpers/memory-storage.js';

/**
 * A minimal QueueRuntime: keeps what it is given, so the tests see what the router routed. The real runtime
 * (src/core/queue.ts) is tested in queue.test.ts; these tests are about routing and lifecycle.
 */
class FakeQueue implements QueueRuntime {
  readonly msgs: Message[] = [];
  consumers = 0;
  touched = 0;
  destroyed = false;
  opened = false;
  constructor(
    readonly def: QueueDef,
    readonly store: QueueStore | null,
    readonly hooks: QueueHooks,
  ) {}
  stats() {
    return { ready: this.msgs.length, unacked: 0, bytes: 0, consumers: this.consumers };
  }
  consume(): void {
    this.consumers++;
  }
  cancel(): void {
    this.consumers--;
  }
  resume(): void {}
  touch(): void {
    this.touched++;
  }
  async get() {
    return null;
  }
  async ack(): Promise<void> {}
  async nack(): Promise<void> {}
  release(): void {}
  /** Set by a test to hold open() until it resolves. */
  static gate: Promise<void> | null = null;
  async open(): Promise<void> {
    if (FakeQueue.gate) await FakeQueue.gate;
    this.opened = true;
  }
  enqueue(msg: Message) {
    const max = this.def.arguments.maxLength;
    if (max !== undefined && this.msgs.length >= max && this.def.arguments.overflow === 'reject-publish') {
      return { durable: null, rejected: true };
    }
    this.msgs.push(msg);
    return { durable: this.def.durable && msg.persistent !== false ? Promise.resolve() : null, rejected: false };
  }
  async purge(): Promise<number> {
    return this.msgs.splice(0).length;
  }
  async destroy(): Promise<number> {
    this.destroyed = true;
    return this.msgs.length;
  }
  close(): void {}
  /** What the real runtime does when a message dies: a death record, the dead-letter routing key, the hook. */
  kill(i: number, reason: DeathRecord['reason']): Promise<void> | null {
    const [m] = this.msgs.splice(i, 1);
    const death: DeathRecord = { queue: this.def.name, reason, exchange: m.exchange ?? '', routingKeys: [m.routingKey ?? ''], count: 1, time: Date.now() };
    const rk = this.def.arguments.deadLetterRoutingKey ?? m.routingKey;
    return this.hooks.deadLetter(this.def, { ...m, routingKey: rk, deaths: [death, ...(m.deaths ?? [])] }, reason);
  }
}

class Sink implements Subscriber {
  readonly got: Message[] = [];
  constructor(readonly id: string) {}
  deliver(msg: Message, _subs: Subscription[]): void {
    this.got.push(msg);
  }
}

function setup(store = new MemoryStore()) {
  const made = new Map<string, FakeQueue>();
  const factory: QueueFactory = (def, qs, hooks) => {
    const q = new FakeQueue(def, qs, hooks);
    made.set(def.name, q);
    return q;
  };
  const m = new MemoryStreams();
  const engine = new Engine(m, store, undefined, factory);
  const q = (name: string) => made.get(name)!;
  return { engine, store, made, q, streams: m };
}

function qdef(name: string, over: Partial<QueueDef> = {}): Omit<QueueDef, 'createdAt'> {
  return { name, durable: true, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {}, ...over };
}

function xdef(name: string, type: 'direct' | 'fanout' | 'topic' | 'headers', over: Record<string, unknown> = {}) {
  return { name, type, durable: true, autoDelete: false, internal: false, rawArguments: {}, ...over };
}

function qb(source: string, queue: string, key = '', over: Partial<BindingDef> = {}): BindingDef {
  return { source, destinationKind: 'queue', destination: queue, key, arguments: {}, ...over };
}

const msg = (body = 'x', init: Partial<Message> = {}) => makeMessage('', Buffer.from(body), init);
const bodies = (q: FakeQueue) => q.msgs.map((m) => m.payload.toString());

describe('Router: exchanges', () => {
  it('predeclares the default and amq.* exchanges, which cannot be deleted, bound to from the default, or redeclared differently', async () => {
    const { engine } = setup();
    assert.deepEqual(
      engine.listExchanges().map((x) => `${x.name}:${x.type}`),
      [':direct', 'amq.direct:direct', 'amq.fanout:fanout', 'amq.headers:headers', 'amq.match:headers', 'amq.topic:topic'],
    );
    await assert.rejects(engine.deleteExchange('amq.direct'), { code: 'ACCESS_REFUSED' });
    await assert.rejects(engine.declareExchange(xdef('', 'direct')), { code: 'ACCESS_REFUSED' });
    await assert.rejects(engine.declareExchange(xdef('amq.mine', 'direct')), { code: 'ACCESS_REFUSED' });
    assert.equal((await engine.declareExchange(xdef('amq.topic', 'topic'))).name, 'amq.topic', 'an equivalent redeclare is fine');
    await assert.rejects(engine.declareExchange(xdef('amq.topic', 'fanout')), { code: 'PRECONDITION_FAILED' });
    await engine.declareQueue(qdef('q'));
    await assert.rejects(engine.bind(qb('', 'q', 'q')), { code: 'ACCESS_REFUSED' });
    await assert.rejects(engine.bind(qb('nope', 'q')), { code: 'NOT_FOUND' });
    await assert.rejects(engine.bind(qb('amq.direct', 'nope')), { code: 'NOT_FOUND' });
  });

  it('declares, checks equivalence, passive-declares and deletes (if-unused) exchanges', async () => {
    const { engine } = setup();
    await engine.declareExchange(xdef('x', 'direct'));
    await engine.declareExchange(xdef('x', 'direct'));
    await assert.rejects(engine.declareExchange(xdef('x', 'direct', { durable: false })), { code: 'PRECONDITION_FAILED' });
    await assert.rejects(engine.declareExchange(xdef('x', 'direct', { alternateExchange: 'ae' })), { code: 'PRECONDITION_FAILED' });
    await assert.rejects(engine.declareExchange(xdef('y', 'direct'), { passive: true }), { code: 'NOT_FOUND' });
    await assert.rejects(engine.declareExchange(xdef('y', 'bogus' as 'direct')), { code: 'INVALID_ARGUMENT' });
    await engine.declareQueue(qdef('q'));
    await engine.bind(qb('x', 'q', 'k'));
    await assert.rejects(engine.deleteExchange('x', { ifUnused: true }), { code: 'PRECONDITION_FAILED' });
    await engine.deleteExchange('x');
    assert.equal(engine.getExchange('x'), undefined);
    assert.deepEqual(engine.listBindings(), []);
    await engine.deleteExchange('x'); // absent: no error, as RabbitMQ
    await engine.unbind(qb('amq.direct', 'q', 'never bound')); // absent binding: no error, as RabbitMQ
    await assert.rejects(engine.unbind(qb('amq.direct', 'nope', 'k')), { code: 'NOT_FOUND' });
  });

  it('routes by the default exchange, direct, fanout and topic exchanges, once per queue', async () => {
    const { engine, q } = setup();
    for (const n of ['a', 'b', 'c']) await engine.declareQueue(qdef(n));
    assert.equal(engine.publishTo('', 'a', msg('d1')).routed, 1);
    assert.equal(engine.publishTo('', 'zz', msg('d2')).routed, 0);
    await engine.bind(qb('amq.direct', 'b', 'k1'));
    await engine.bind(qb('amq.direct', 'b', 'k2'));
    await engine.bind(qb('amq.direct', 'c', 'k1'));
    assert.equal(engine.publishTo('amq.direct', 'k1', msg('d3')).routed, 2);
    assert.equal(engine.publishTo('amq.direct', 'k3', msg('d4')).routed, 0);
    await engine.bind(qb('amq.fanout', 'a'));
    await engine.bind(qb('amq.fanout', 'a', 'other key'));
    assert.equal(engine.publishTo('amq.fanout', 'whatever', msg('f')).routed, 1, 'a queue bound twice gets a message once');
    assert.deepEqual(bodies(q('a')), ['d1', 'f']);
    assert.deepEqual(bodies(q('b')), ['d3']);
    const m = q('a').msgs[1];
    assert.equal(m.exchange, 'amq.fanout');
    assert.equal(m.routingKey, 'whatever');
  });

  it('matches AMQP topic patterns: * one word, # zero or more words anywhere, the empty key as zero words', async () => {
    const { engine, q } = setup();
    await engine.declareExchange(xdef('t', 'topic'));
    const patterns = ['a.*', 'a.#', '#.z', 'a.#.z', '*', '#', '', 'a.*.#.z'];
    for (const [i, p] of patterns.entries()) {
      await engine.declareQueue(qdef(`q${i}`));
      await engine.bind(qb('t', `q${i}`, p));
    }
    const hit = (rk: string) => {
      for (const [i] of patterns.entries()) q(`q${i}`).msgs.length = 0;
      engine.publishTo('t', rk, msg());
      return patterns.filter((_, i) => q(`q${i}`).msgs.length > 0);
    };
    assert.deepEqual(hit('a'), ['a.#', '*', '#']);
    assert.deepEqual(hit('a.b'), ['a.*', 'a.#', '#']);
    assert.deepEqual(hit('a.z'), ['a.*', 'a.#', '#.z', 'a.#.z', '#']);
    assert.deepEqual(hit('a.b.c.z'), ['a.#', '#.z', 'a.#.z', '#', 'a.*.#.z']);
    assert.deepEqual(hit(''), ['#', '']);
    assert.deepEqual(hit('z'), ['#.z', '*', '#']);
  });

  it('matches headers bindings: all, any, all-with-x, any-with-x; x- arguments ignored by all/any; void means presence', async () => {
    const { engine, q } = setup();
    const cases: Array<[string, Record<string, unknown>]> = [
      ['all', { 'x-match': 'all', a: '1', b: 2 }],
      ['any', { 'x-match': 'any', a: '1', b: 2 }],
      ['default-all', { a: '1' }],
      ['all-ignores-x', { 'x-match': 'all', a: '1', 'x-tag': 't' }],
      ['all-with-x', { 'x-match': 'all-with-x', a: '1', 'x-tag': 't' }],
      ['any-with-x', { 'x-match': 'any-with-x', 'x-tag': 't' }],
      ['presence', { 'x-match': 'all', c: null }],
      ['tagged', { 'x-match': { type: 'S', value: 'any' }, b: { type: 'l', value: 2 } }],
    ];
    for (const [n, args] of cases) {
      await engine.declareQueue(qdef(n));
      await engine.bind(qb('amq.headers', n, '', { arguments: args }));
    }
    await assert.rejects(engine.bind(qb('amq.headers', 'all', '', { arguments: { 'x-match': 'some' } })), { code: 'INVALID_ARGUMENT' });
    const hit = (h: Record<string, string | null>) => {
      for (const [n] of cases) q(n).msgs.length = 0;
      engine.publishTo('amq.headers', '', msg('h', { headers: Object.entries(h).map(([key, v]) => ({ key, value: v === null ? null : Buffer.from(v) })) }));
      return cases.map(([n]) => n).filter((n) => q(n).msgs.length > 0);
    };
    assert.deepEqual(hit({ a: '1', b: '2' }), ['all', 'any', 'default-all', 'all-ignores-x', 'tagged']);
    assert.deepEqual(hit({ a: '1' }), ['any', 'default-all', 'all-ignores-x']);
    assert.deepEqual(hit({ a: '1', 'x-tag': 't' }), ['any', 'default-all', 'all-ignores-x', 'all-with-x', 'any-with-x']);
    assert.deepEqual(hit({ c: 'anything' }), ['presence']);
    assert.deepEqual(hit({ a: '2' }), []);
  });

  it('follows exchange-to-exchange bindings (cycles route once), alternate exchanges, and refuses internal exchanges', async () => {
    const { engine, q } = setup();
    await engine.declareExchange(xdef('e1', 'fanout'));
    await engine.declareExchange(xdef('e2', 'direct', { internal: true }));
    await engine.declareExchange(xdef('ae', 'fanout'));
    await engine.declareExchange(xdef('withae', 'direct', { alternateExchange: 'ae' }));
    for (const n of ['q2', 'qae', 'qk']) await engine.declareQueue(qdef(n));
    await engine.bind({ source: 'e1', destinationKind: 'exchange', destination: 'e2', key: '', arguments: {} });
    await engine.bind({ source: 'e2', destinationKind: 'exchange', destination: 'e1', key: 'k', arguments: {} });
    await engine.bind(qb('e2', 'q2', 'k'));
    await engine.bind(qb('ae', 'qae'));
    await engine.bind(qb('withae', 'qk', 'k'));
    assert.equal(engine.publishTo('e1', 'k', msg('loop')).routed, 1, 'e1 -> e2 -> (q2, e1 again: skipped)');
    assert.deepEqual(bodies(q('q2')), ['loop']);
    assert.throws(() => engine.publishTo('e2', 'k', msg()), { code: 'ACCESS_REFUSED' });
    assert.throws(() => engine.publishTo('nope', 'k', msg()), { code: 'NOT_FOUND' });
    assert.equal(engine.publishTo('withae', 'k', msg('own')).routed, 1);
    assert.equal(engine.publishTo('withae', 'other', msg('alt')).routed, 1);
    assert.deepEqual(bodies(q('qk')), ['own']);
    assert.deepEqual(bodies(q('qae')), ['alt'], 'only what the exchange could not route goes to its alternate');
  });

  it('deletes an auto-delete exchange when its last binding goes', async () => {
    const { engine } = setup();
    await engine.declareExchange(xdef('auto', 'fanout', { autoDelete: true }));
    await engine.declareQueue(qdef('q1'));
    await engine.declareQueue(qdef('q2'));
    await engine.bind(qb('auto', 'q1'));
    await engine.bind(qb('auto', 'q2'));
    await engine.unbind(qb('auto', 'q1'));
    assert.ok(engine.getExchange('auto'));
    await engine.deleteQueue('q2');
    assert.equal(engine.getExchange('auto'), undefined);
  });

  it('reports durable and rejected for publisher confirms', async () => {
    const { engine } = setup();
    await engine.declareQueue(qdef('d'));
    await engine.declareQueue(qdef('full', { arguments: { maxLength: 0, overflow: 'reject-publish' } }));
    const r1 = engine.publishTo('', 'd', msg());
    assert.ok(r1.durable);
    await r1.durable;
    assert.equal(engine.publishTo('', 'd', msg('t', { persistent: false })).durable, null);
    const r2 = engine.publishTo('', 'full', msg());
    assert.equal(r2.rejected, true);
    assert.equal(r2.routed, 1);
  });
});

describe('Router: amq.topic is the unified topic space', () => {
  it('AMQP publishes on amq.topic reach MQTT subscribers, streams and queues; separators swap', async () => {
    const { engine, q, streams } = setup();
    const s = new Sink('mqtt');
    engine.subscribe('x.y/z', s, { qos: 0 });
    engine.subscribe('a/+', s, { qos: 0 });
    await engine.createStream({ name: 'cap', partitions: 1, bindings: ['a/#'] });
    await engine.declareQueue(qdef('q'));
    await engine.bind(qb('amq.topic', 'q', 'x/y.*'));
    const r = engine.publishTo('amq.topic', 'x/y.z', msg('swap'));
    assert.equal(r.routed, 2, 'one live subscriber and one queue');
    assert.equal(s.got[0].topic, 'x.y/z', 'AMQP key x/y.z is unified topic x.y/z');
    assert.deepEqual(bodies(q('q')), ['swap']);
    const r2 = engine.publishTo('amq.topic', 'a.b', msg('ab'));
    assert.equal(r2.routed, 2, 'the MQTT subscriber and the stream');
    assert.ok(r2.durable);
    await r2.durable;
    assert.equal(streams.offsets('cap', 0).highWatermark, 1);
  });

  it('MQTT publishes and Kafka produces reach queues bound on amq.topic, with exchange and routing key set', async () => {
    const { engine, q } = setup();
    await engine.declareQueue(qdef('q'));
    await engine.bind(qb('amq.topic', 'q', 'sensors.#'));
    await engine.createStream({ name: 'sensors.k', partitions: 1 });
    const payload = Buffer.from('mqtt');
    const d = engine.publish(makeMessage('sensors/t1', payload, { qos: 1 }));
    assert.ok(d, 'the durable queue is waited for');
    await d;
    payload.fill(0);
    engine.produce('sensors.k', 0, encodeBatch([messageToRecord(makeMessage('sensors/k', Buffer.from('kafka')), 'sensors/k')]));
    assert.deepEqual(bodies(q('q')), ['mqtt', 'kafka'], 'the queue has its own copy of the MQTT payload');
    assert.equal(q('q').msgs[0].exchange, 'amq.topic');
    assert.equal(q('q').msgs[0].routingKey, 'sensors.t1');
    assert.equal(q('q').msgs[1].routingKey, 'sensors.k');
    assert.equal(engine.publish(makeMessage('other/t', Buffer.from('no'))), null);
  });

  it('applies the $ rule to MQTT-rule bindings only; AMQP # on amq.topic also sees $ topics (RabbitMQ has no such rule)', async () => {
    const { engine, q } = setup();
    const s = new Sink('mqtt');
    engine.subscribe('#', s, { qos: 0 });
    await engine.declareQueue(qdef('amqp'));
    await engine.declareQueue(qdef('mqttrule'));
    await engine.declareQueue(qdef('sys'));
    await engine.bind(qb('amq.topic', 'amqp', '#'));
    await engine.bind(qb('amq.topic', 'mqttrule', '#', { rule: 'mqtt' }));
    await engine.bind(qb('amq.topic', 'sys', '$SYS/#', { rule: 'mqtt' }));
    await assert.rejects(engine.bind(qb('amq.topic', 'sys', 'a/#/b', { rule: 'mqtt' })), { code: 'INVALID_FILTER' });
    engine.publish(makeMessage('$SYS/broker/uptime', Buffer.from('s')));
    engine.publish(makeMessage('plain/t', Buffer.from('p')));
    assert.deepEqual(
      s.got.map((m) => m.topic),
      ['plain/t'],
    );
    assert.deepEqual(bodies(q('amqp')), ['s', 'p']);
    assert.deepEqual(bodies(q('mqttrule')), ['p']);
    assert.deepEqual(bodies(q('sys')), ['s']);
    assert.equal(engine.hasLiveSubscribers('$SYS/x'), false);
    assert.equal(engine.hasLiveSubscribers('y'), true);
  });

  it('routing keys with wildcard characters or the empty key reach AMQP bindings only, literally', async () => {
    const { engine, q } = setup();
    const s = new Sink('mqtt');
    engine.subscribe('#', s, { qos: 0 });
    await engine.declareQueue(qdef('star'));
    await engine.declareQueue(qdef('lit'));
    await engine.declareQueue(qdef('mq'));
    await engine.bind(qb('amq.topic', 'star', 'a.*'));
    await engine.bind(qb('amq.topic', 'lit', 'a.+'));
    await engine.bind(qb('amq.topic', 'mq', '#', { rule: 'mqtt' }));
    assert.equal(engine.publishTo('amq.topic', 'a.+', msg('plus')).routed, 2);
    assert.equal(engine.publishTo('amq.topic', 'a.#', msg('hash')).routed, 1);
    assert.equal(engine.publishTo('amq.topic', 'a.b', msg('b')).routed, 3, 'star, the MQTT subscriber and the MQTT-rule queue');
    assert.equal(engine.publishTo('amq.topic', '', msg('empty')).routed, 0);
    assert.deepEqual(bodies(q('star')), ['plus', 'hash', 'b']);
    assert.deepEqual(bodies(q('lit')), ['plus']);
    assert.deepEqual(bodies(q('mq')), ['b']);
    assert.deepEqual(
      s.got.map((m) => m.topic),
      ['a/b'],
    );
  });

  it('empty words are levels: a..b is a//b for AMQP patterns and MQTT filters alike', async () => {
    const { engine, q } = setup();
    const s = new Sink('mqtt');
    engine.subscribe('a/+/b', s, { qos: 0 });
    await engine.declareQueue(qdef('e'));
    await engine.bind(qb('amq.topic', 'e', 'a.*.b'));
    assert.equal(engine.publishTo('amq.topic', 'a..b', msg('ab')).routed, 2);
    engine.publish(makeMessage('a//b', Buffer.from('m')));
    assert.deepEqual(
      s.got.map((m) => m.topic),
      ['a//b', 'a//b'],
    );
    assert.deepEqual(bodies(q('e')), ['ab', 'm']);
    assert.equal(q('e').msgs[1].routingKey, 'a..b');
  });

  it('NATS-rule bindings: a.> matches a.b and a.b.c, not a', async () => {
    const { engine, q } = setup();
    await engine.declareQueue(qdef('n'));
    await engine.bind(qb('amq.topic', 'n', 'a.>', { rule: 'nats' }));
    await assert.rejects(engine.bind(qb('amq.topic', 'n', 'a.>.b', { rule: 'nats' })), { code: 'INVALID_FILTER' });
    for (const t of ['a', 'a/b', 'a/b/c']) engine.publish(makeMessage(t, Buffer.from(t)));
    assert.deepEqual(bodies(q('n')), ['a/b', 'a/b/c']);
  });
});

describe('Router: stream destinations', () => {
  it('appends to a stream bound to an exchange and drops the binding (also from the catalog) with the stream', async () => {
    const { engine, streams, store } = setup();
    await engine.createStream({ name: 'audit', partitions: 1 });
    await assert.rejects(engine.bind({ source: 'amq.fanout', destinationKind: 'stream', destination: 'nope', key: '', arguments: {} }), { code: 'NOT_FOUND' });
    await engine.bind({ source: 'amq.fanout', destinationKind: 'stream', destination: 'audit', key: '', arguments: {} });
    const r = engine.publishTo('amq.fanout', 'k', msg('s'));
    assert.equal(r.routed, 1);
    await r.durable;
    assert.equal(streams.offsets('audit', 0).highWatermark, 1);
    await engine.deleteStream('audit');
    assert.deepEqual(engine.listBindings(), []);
    assert.deepEqual(await store.listBindings(), []);
  });

  it('a binding with x-stream-partition-order appends to that partition; one out of range or not a number picks by key', async () => {
    const { engine, streams } = setup();
    await engine.createStream({ name: 'ss', partitions: 3 });
    await engine.declareExchange(xdef('ss', 'direct'));
    const sb = (key: string, order: unknown): BindingDef => ({
      source: 'ss',
      destinationKind: 'stream',
      destination: 'ss',
      key,
      arguments: { 'x-stream-partition-order': order },
    });
    await engine.bind(sb('a', 2));
    await engine.bind(sb('b', '1'));
    await engine.bind(sb('c', 7));
    await engine.bind(sb('d', 'x'));
    // Two bindings reaching the same partition append once; two partitions of one stream get one copy each.
    await engine.bind(sb('two', 0));
    await engine.bind({ ...sb('two', 0), arguments: { 'x-stream-partition-order': 0, other: 1 } });
    await engine.bind(sb('two', 1));
    for (let i = 0; i < 4; i++) await engine.publishTo('ss', 'a', msg(`a${i}`)).durable;
    await engine.publishTo('ss', 'b', msg('b')).durable;
    assert.deepEqual(
      [0, 1, 2].map((p) => streams.offsets('ss', p).highWatermark),
      [0, 1, 4],
    );
    const r = engine.publishTo('ss', 'two', msg('t'));
    assert.equal(r.routed, 2);
    await r.durable;
    assert.deepEqual(
      [0, 1, 2].map((p) => streams.offsets('ss', p).highWatermark),
      [1, 2, 4],
    );
    // Unpinned (out of range, not a number): one append, by key (no key: by topic), as a plain stream binding.
    const m = msg('k', { key: Buffer.from('same') });
    await engine.publishTo('ss', 'c', m).durable;
    await engine.publishTo('ss', 'd', msg('k', { key: Buffer.from('same') })).durable;
    const total = [0, 1, 2].map((p) => streams.offsets('ss', p).highWatermark);
    assert.equal(
      total.reduce((a, b) => a + b),
      9,
    );
  });
});

describe('Router: queues', () => {
  it('declares, redeclares equivalently, names server-side, locks exclusive queues and drops them with their owner', async () => {
    const { engine, made } = setup();
    const h = await engine.declareQueue(qdef('q', { arguments: { messageTtlMs: 10 } }));
    assert.equal(h.def.name, 'q');
    assert.equal(made.get('q')!.opened, true);
    assert.equal(await engine.declareQueue(qdef('q', { arguments: { messageTtlMs: 10 } })), h);
    assert.equal(made.get('q')!.touched, 1, 'a re-declaration is a use (x-expires)');
    await assert.rejects(engine.declareQueue(qdef('q')), { code: 'PRECONDITION_FAILED' });
    await assert.rejects(engine.declareQueue(qdef('q', { durable: false, arguments: { messageTtlMs: 10 } })), { code: 'PRECONDITION_FAILED' });
    assert.equal(await engine.declareQueue(qdef('q'), { passive: true }), h);
    await assert.rejects(engine.declareQueue(qdef('none'), { passive: true }), { code: 'NOT_FOUND' });
    await assert.rejects(engine.declareQueue(qdef('amq.mine')), { code: 'ACCESS_REFUSED' });
    const gen = await engine.declareQueue(qdef('', { exclusiveOwner: 'c1', durable: false }), { owner: 'c1' });
    assert.match(gen.def.name, /^amq\.gen-[A-Za-z0-9_-]{22}$/);
    await assert.rejects(engine.declareQueue(qdef(gen.def.name, { exclusiveOwner: 'c2', durable: false }), { owner: 'c2' }), { code: 'RESOURCE_LOCKED' });
    await assert.rejects(engine.declareQueue(qdef(gen.def.name), { passive: true, owner: 'c2' }), { code: 'RESOURCE_LOCKED' });
    await engine.dropExclusive('c1');
    assert.equal(engine.getQueue(gen.def.name), undefined);
    assert.equal(made.get(gen.def.name)!.destroyed, true);
  });

  it('makes a queue routable only once it is open; a concurrent declare waits for the first', async () => {
    const { engine, q } = setup();
    let release!: () => void;
    FakeQueue.gate = new Promise((r) => (release = r));
    const first = engine.declareQueue(qdef('slow'));
    const second = engine.declareQueue(qdef('slow'));
    await new Promise((r) => setImmediate(r));
    assert.equal(engine.publishTo('', 'slow', msg('early')).routed, 0);
    FakeQueue.gate = null;
    release();
    assert.equal(await first, await second);
    assert.equal(engine.publishTo('', 'slow', msg('late')).routed, 1);
    assert.deepEqual(bodies(q('slow')), ['late']);
  });

  it('gives durable queues the queue store and the others none', async () => {
    const store = { kind: 'fake' } as unknown as QueueStore;
    const made = new Map<string, FakeQueue>();
    const m = new MemoryStreams();
    const engine = new Engine(m, new MemoryStore(), store, (def, qs, hooks) => {
      const q = new FakeQueue(def, qs, hooks);
      made.set(def.name, q);
      return q;
    });
    await engine.declareQueue(qdef('d'));
    await engine.declareQueue(qdef('t', { durable: false }));
    await engine.declareQueue(qdef('x', { exclusiveOwner: 'c' }), { owner: 'c' });
    assert.equal(made.get('d')!.store, store);
    assert.equal(made.get('t')!.store, null);
    assert.equal(made.get('x')!.store, null, 'exclusive queues never touch storage');
  });

  it('deletes queues (if-unused, if-empty), with their bindings; purges; expires through the hook', async () => {
    const { engine, q } = setup();
    await engine.declareQueue(qdef('q'));
    await engine.bind(qb('amq.direct', 'q', 'k'));
    engine.publishTo('', 'q', msg());
    await assert.rejects(engine.deleteQueue('q', { ifEmpty: true }), { code: 'PRECONDITION_FAILED' });
    q('q').consumers = 1;
    await assert.rejects(engine.deleteQueue('q', { ifUnused: true }), { code: 'PRECONDITION_FAILED' });
    q('q').consumers = 0;
    assert.equal(await engine.purgeQueue('q'), 1);
    await assert.rejects(engine.purgeQueue('none'), { code: 'NOT_FOUND' });
    engine.publishTo('', 'q', msg());
    assert.equal(await engine.deleteQueue('q'), 1);
    assert.deepEqual(engine.listBindings(), []);
    assert.equal(engine.publishTo('amq.direct', 'k', msg()).routed, 0);
    assert.equal(await engine.deleteQueue('q'), 0, 'deleting an absent queue succeeds, as RabbitMQ');
    await engine.declareQueue(qdef('e', { arguments: { expiresMs: 5 } }));
    q('e').hooks.expire(q('e').def, 'expires');
    for (let i = 0; i < 100 && !q('e').destroyed; i++) await new Promise((r) => setImmediate(r));
    assert.equal(engine.getQueue('e'), undefined);
    assert.equal(q('e').destroyed, true);
  });

  it('persists durable definitions and reloads them; transient and exclusive ones are not kept', async () => {
    const store = new MemoryStore();
    const a = setup(store);
    await a.engine.declareExchange(xdef('dx', 'topic', { alternateExchange: 'amq.fanout' }));
    await a.engine.declareExchange(xdef('tx', 'fanout', { durable: false }));
    await a.engine.declareQueue(qdef('dq', { arguments: { deadLetterExchange: 'dx' } }));
    await a.engine.declareQueue(qdef('tq', { durable: false }));
    await a.engine.declareQueue(qdef('xq', { exclusiveOwner: 'c' }), { owner: 'c' });
    await a.engine.bind(qb('dx', 'dq', 'a.#'));
    await a.engine.bind(qb('amq.topic', 'dq', 'b/+', { rule: 'mqtt' }));
    await a.engine.bind(qb('dx', 'tq', 'a.#'));
    await a.engine.bind(qb('tx', 'dq'));
    await a.engine.bind(qb('dx', 'xq', 'x'));
    await a.engine.bind({ source: 'dx', destinationKind: 'exchange', destination: 'amq.direct', key: 'k', arguments: {} });
    await store.putBinding(qb('amq.topic', 'dq', 'a/#/b', { rule: 'mqtt' })); // refused by the MQTT rule
    const b = setup(store);
    await b.engine.load();
    assert.deepEqual(
      b.engine.listQueues().map((d) => d.name),
      ['dq'],
    );
    assert.equal(b.q('dq').opened, true);
    assert.equal(b.engine.getExchange('dx')?.alternateExchange, 'amq.fanout');
    assert.equal(b.engine.getExchange('tx'), undefined);
    assert.deepEqual(
      b.engine
        .listBindings()
        .map((x) => `${x.source}>${x.destination}:${x.key}`)
        .sort(),
      ['amq.topic>dq:b/+', 'dx>amq.direct:k', 'dx>dq:a.#'],
    );
    b.engine.publish(makeMessage('b/1', Buffer.from('m')));
    b.engine.publishTo('dx', 'a.1', msg('a'));
    assert.deepEqual(bodies(b.q('dq')), ['m', 'a']);
    await b.engine.deleteQueue('dq');
    const c = setup(store);
    await c.engine.load();
    assert.deepEqual(c.engine.listQueues(), []);
    assert.deepEqual(
      c.engine.listBindings().map((x) => x.destination),
      ['amq.direct'],
    );
  });
});

describe('Router: dead-lettering', () => {
  it('routes dead letters through the dead-letter exchange with the dead-letter routing key', async () => {
    const { engine, q } = setup();
    await engine.declareExchange(xdef('dlx', 'direct'));
    await engine.declareQueue(qdef('work', { arguments: { deadLetterExchange: 'dlx', deadLetterRoutingKey: 'dead' } }));
    await engine.declareQueue(qdef('dead'));
    await engine.declareQueue(qdef('nodlx'));
    await engine.bind(qb('dlx', 'dead', 'dead'));
    engine.publishTo('', 'work', msg('m1'));
    engine.publishTo('', 'nodlx', msg('m2'));
    const d = q('work').kill(0, 'rejected');
    assert.ok(d, 'durable in the dead-letter queue');
    await d;
    assert.deepEqual(bodies(q('dead')), ['m1']);
    assert.equal(q('dead').msgs[0].exchange, 'dlx');
    assert.equal(q('dead').msgs[0].routingKey, 'dead');
    assert.equal(q('dead').msgs[0].deaths![0].queue, 'work');
    assert.equal(q('nodlx').kill(0, 'expired'), null, 'no dead-letter exchange: dropped');
  });

  it('drops a message dead-lettered around a cycle without rejections, delivers it when the cycle had one (RabbitMQ)', async () => {
    const { engine, q } = setup();
    // a -> (dlx "") -> b -> (dlx "") -> a, routing keys naming the next queue.
    await engine.declareQueue(qdef('a', { arguments: { deadLetterExchange: '', deadLetterRoutingKey: 'b' } }));
    await engine.declareQueue(qdef('b', { arguments: { deadLetterExchange: '', deadLetterRoutingKey: 'a' } }));
    await engine.declareQueue(qdef('self', { arguments: { deadLetterExchange: '' } }));
    engine.publishTo('', 'a', msg('m'));
    q('a').kill(0, 'expired');
    assert.deepEqual(bodies(q('b')), ['m']);
    q('b').kill(0, 'expired');
    assert.deepEqual(bodies(q('a')), [], 'a -> b -> a by expiry only: dropped');
    engine.publishTo('', 'a', msg('r'));
    q('a').kill(0, 'expired');
    q('b').kill(0, 'rejected');
    assert.deepEqual(bodies(q('a')), ['r'], 'a rejection in the cycle: delivered');
    engine.publishTo('', 'self', msg('s'));
    q('self').kill(0, 'expired');
    assert.deepEqual(bodies(q('self')), [], 'expired back into itself: dropped');
    engine.publishTo('', 'self', msg('s2'));
    q('self').kill(0, 'rejected');
    assert.deepEqual(bodies(q('self')), ['s2'], 'rejected back into itself: delivered');
  });
});

describe('Router with the real queue runtime', () => {
  it('MQTT publish -> durable queue on amq.topic -> consumer; rejected and expired messages dead-lettered through the DLX', async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, new MemoryStore(), new MemoryQueueStore());
    await engine.declareExchange(xdef('dlx', 'fanout'));
    const work = await engine.declareQueue(qdef('work', { arguments: { deadLetterExchange: 'dlx' } }));
    const ttl = await engine.declareQueue(qdef('ttl', { arguments: { deadLetterExchange: 'dlx', messageTtlMs: 1 } }));
    const dead = await engine.declareQueue(qdef('dead'));
    await engine.bind(qb('dlx', 'dead'));
    await engine.bind(qb('amq.topic', 'work', 'jobs.*'));
    await engine.bind(qb('amq.topic', 'ttl', 'slow.#'));
    const got: QueueDelivery[] = [];
    work.consume({ tag: 'c1', owner: 'ch1', noAck: false, hasCredit: () => true, deliver: (d) => got.push(d) });
    const d = engine.publish(makeMessage('jobs/1', Buffer.from('job'), { qos: 1 }));
    assert.ok(d);
    await d;
    assert.equal(got.length, 1);
    assert.equal(got[0].msg.routingKey, 'jobs.1');
    assert.equal(got[0].msg.exchange, 'amq.topic');
    await work.nack(got[0].id, false);
    engine.publish(makeMessage('slow/x', Buffer.from('late'), { qos: 1 }));
    const deliveries: QueueDelivery[] = [];
    for (let i = 0; i < 500 && deliveries.length < 2; i++) {
      const g = await dead.get('me', true);
      if (g) deliveries.push(g);
      else await new Promise((r) => setTimeout(r, 5));
    }
    assert.deepEqual(
      deliveries.map((x) => x.msg.payload.toString()),
      ['job', 'late'],
    );
    assert.deepEqual(
      deliveries.map((x) => [x.msg.deaths![0].queue, x.msg.deaths![0].reason, x.msg.exchange]),
      [
        ['work', 'rejected', 'dlx'],
        ['ttl', 'expired', 'dlx'],
      ],
    );
    assert.equal(ttl.stats().ready, 0);
    engine.close();
  });

  it('deletes queues the runtime expires: x-expires unused, auto-delete after the last consumer', async () => {
    const m = new MemoryStreams();
    const store = new MemoryStore();
    const engine = new Engine(m, store, new MemoryQueueStore());
    await engine.declareQueue(qdef('exp', { arguments: { expiresMs: 20 } }));
    const auto = await engine.declareQueue(qdef('auto', { autoDelete: true }));
    await engine.bind(qb('amq.fanout', 'exp'));
    const c = { tag: 'c', owner: 'o', noAck: true, hasCredit: () => true, deliver: () => undefined };
    auto.consume(c);
    auto.cancel(c);
    for (let i = 0; i < 500 && (engine.getQueue('exp') || engine.getQueue('auto')); i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(engine.getQueue('exp'), undefined);
    assert.equal(engine.getQueue('auto'), undefined);
    assert.deepEqual(engine.listBindings(), []);
    for (let i = 0; i < 100 && (await store.listQueues()).length > 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(await store.listQueues(), []);
  });
});

describe('Router: the free-space reserve', () => {
  it('refuses persistent messages to durable queues while writes are refused, and takes them again after', async () => {
    const { engine, q } = setup();
    await engine.declareQueue(qdef('durable'));
    await engine.declareQueue(qdef('memory', { durable: false }));
    let full = true;
    engine.writeRefusal = () => (full ? new FlowError('STORAGE_FULL', 'free space below the reserve') : null);
    const r = engine.publishTo('amq.fanout', '', msg('p'));
    assert.equal(r.routed, 0, 'amq.fanout has no bindings yet');
    await engine.bind(qb('amq.fanout', 'durable'));
    await engine.bind(qb('amq.fanout', 'memory'));
    const refused = engine.publishTo('amq.fanout', '', msg('persistent'));
    assert.equal(refused.routed, 2);
    await assert.rejects(refused.durable!, (e: unknown) => e instanceof FlowError && e.code === 'STORAGE_FULL');
    // A transient message is not written, so it is taken; the non-durable queue takes everything.
    const transient = engine.publishTo('amq.fanout', '', msg('transient', { persistent: false }));
    assert.equal(transient.durable, null);
    assert.deepEqual(bodies(q('durable')), ['transient']);
    assert.deepEqual(bodies(q('memory')), ['persistent', 'transient']);
    full = false;
    const ok = engine.publishTo('amq.fanout', '', msg('later'));
    await ok.durable;
    assert.deepEqual(bodies(q('durable')), ['transient', 'later']);
  });
});

describe('Router: authorization follows the data', () => {
  it('names the topic filters feeding a queue: amq.topic bindings, exchanges bound in between, alternate exchanges, dead letters', async () => {
    const { engine } = setup();
    await engine.declareQueue(qdef('direct'));
    await engine.bind(qb('amq.topic', 'direct', 'secret.#'));
    await engine.bind(qb('amq.topic', 'direct', 'a.*.c'));
    await engine.bind(qb('amq.topic', 'direct', 'x.#.y'));
    assert.deepEqual(engine.topicFiltersFeeding('queue', 'direct').sort(), ['a/+/c', 'secret/#', 'x/#']);
    // amq.topic → fanout exchange → queue; an exchange whose alternate exchange is that fanout; a queue dead-lettering into it.
    await engine.declareExchange(xdef('fan', 'fanout'));
    await engine.declareQueue(qdef('behind'));
    await engine.bind(qb('fan', 'behind'));
    assert.deepEqual(engine.topicFiltersFeeding('queue', 'behind'), []);
    await engine.bind({ source: 'amq.topic', destinationKind: 'exchange', destination: 'fan', key: 'via.exchange', arguments: {} });
    assert.deepEqual(engine.topicFiltersFeeding('queue', 'behind'), ['via/exchange']);
    await engine.declareExchange(xdef('alt-src', 'direct', { alternateExchange: 'fan' }));
    await engine.bind({ source: 'amq.topic', destinationKind: 'exchange', destination: 'alt-src', key: 'alt.#', arguments: {} });
    await engine.declareQueue(qdef('dying', { arguments: { deadLetterExchange: 'fan' } }));
    await engine.bind(qb('amq.topic', 'dying', 'dead.*'));
    assert.deepEqual(engine.topicFiltersFeeding('queue', 'behind').sort(), ['alt/#', 'dead/+', 'via/exchange']);
    // A stream: its own topic, its bindings, and exchange bindings into it.
    await engine.createStream({ name: 'orders.eu', partitions: 1, bindings: ['shop/+/orders'] });
    await engine.bind({ source: 'amq.topic', destinationKind: 'stream', destination: 'orders.eu', key: 'legacy.orders', arguments: {} });
    assert.deepEqual(engine.topicFiltersFeeding('stream', 'orders.eu').sort(), ['legacy/orders', 'orders/eu', 'shop/+/orders']);
  });

  it('moves its version when what feeds a destination changes', async () => {
    const { engine } = setup();
    const v0 = engine.sourcesVersion;
    await engine.declareQueue(qdef('q'));
    const v1 = engine.sourcesVersion;
    assert.notEqual(v1, v0);
    await engine.bind(qb('amq.topic', 'q', 'a.b'));
    assert.notEqual(engine.sourcesVersion, v1);
    const v2 = engine.sourcesVersion;
    await engine.createStream({ name: 's', partitions: 1, bindings: ['x/#'] });
    assert.notEqual(engine.sourcesVersion, v2);
    const v3 = engine.sourcesVersion;
    await engine.setBindings('s', ['x/#', 'y']);
    assert.notEqual(engine.sourcesVersion, v3);
  });

  it('routes stored data re-published to an inbox only where the bindings reach its own topic too (Message.guardTopic)', async () => {
    const { engine, q, streams } = setup();
    await engine.declareQueue(qdef('inboxes'));
    await engine.bind(qb('amq.topic', 'inboxes', '_INBOX.#'));
    await engine.declareQueue(qdef('everything'));
    await engine.bind(qb('amq.topic', 'everything', '#'));
    await engine.createStream({ name: 'inbox-log', partitions: 1, bindings: ['_INBOX/#'] });
    await engine.createStream({ name: 'all-log', partitions: 1, bindings: ['#'] });
    const open = new Sink('open');
    const filtered = new Sink('filtered');
    engine.subscribe('_INBOX/#', open, { qos: 0 });
    engine.subscribe('_INBOX/#', filtered, { qos: 0, admit: (t) => !t.startsWith('secret/') });
    engine.publish(makeMessage('_INBOX/alice/1', Buffer.from('secret data'), { guardTopic: 'secret/plans' }));
    engine.publish(makeMessage('_INBOX/alice/2', Buffer.from('public data'), { guardTopic: 'news/today' }));
    engine.publish(makeMessage('_INBOX/alice/3', Buffer.from('plain reply')));
    assert.deepEqual(
      open.got.map((m) => m.payload.toString()),
      ['secret data', 'public data', 'plain reply'],
      'no admit predicate: no policy applies',
    );
    assert.deepEqual(
      filtered.got.map((m) => m.payload.toString()),
      ['public data', 'plain reply'],
      'the guard topic is admitted like the topic',
    );
    assert.deepEqual(bodies(q('inboxes')), ['plain reply'], 'a queue bound to _INBOX.# never collects stored data of another topic');
    assert.deepEqual(bodies(q('everything')), ['secret data', 'public data', 'plain reply'], '# reaches the guard topics too');
    assert.equal(streams.offsets('inbox-log', 0).highWatermark, 1, 'a stream bound to _INBOX/# captured only the plain reply');
    assert.equal(streams.offsets('all-log', 0).highWatermark, 3);
  });
});

describe('Router: queue policy (Engine.setQueuePolicy)', () => {
  it('gives queues the policy arguments as they open and at once when it changes; a redeclare compares the declared ones', async () => {
    const store = new MemoryStore();
    const m = new MemoryStreams();
    const engine = new Engine(m, store, undefined, queueFactory());
    engine.setQueuePolicy((d) => (d.name.startsWith('lim-') ? { ...d.arguments, maxLength: Math.min(d.arguments.maxLength ?? Infinity, 2) } : null));
    const h = await engine.declareQueue(qdef('lim-a', { arguments: { maxLength: 5 }, rawArguments: { 'x-max-length': 5 } }));
    assert.deepEqual(h.def.arguments, { maxLength: 2 });
    assert.deepEqual(h.def.declaredArguments, { maxLength: 5 });
    await engine.declareQueue(qdef('lim-a', { arguments: { maxLength: 5 }, rawArguments: { 'x-max-length': 5 } }));
    await assert.rejects(engine.declareQueue(qdef('lim-a', { arguments: { maxLength: 2 } })), { code: 'PRECONDITION_FAILED' });
    const other = await engine.declareQueue(qdef('free'));
    for (let i = 0; i < 4; i++) {
      engine.publishTo('', 'lim-a', msg(`a${i}`));
      engine.publishTo('', 'free', msg(`f${i}`));
    }
    assert.equal(h.stats().ready, 2);
    assert.equal(other.stats().ready, 4);
    // A policy now matching `free` trims it at once; removing every policy gives the declared arguments back.
    engine.setQueuePolicy((d) => ({ ...d.arguments, maxLength: 1 }));
    assert.equal(other.stats().ready, 1);
    engine.setQueuePolicy(null);
    assert.deepEqual(h.def.arguments, { maxLength: 5 });
    assert.equal(h.def.declaredArguments, undefined);
    for (let i = 0; i < 3; i++) engine.publishTo('', 'lim-a', msg(`b${i}`));
    assert.equal(h.stats().ready, 4);
  });
});
