/**
 * The core's NATS matching rule for live subscriptions and the PublishInfo a publish reports (src/core/engine.ts).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Engine, makeMessage, newPublishInfo, type Message, type Subscriber, type Subscription } from '../../src/core/index.js';
import { MemoryStreams } from '../helpers/memory-storage.js';

class Sink implements Subscriber {
  readonly got: Message[] = [];
  constructor(readonly id: string) {}
  deliver(msg: Message, _subs: Subscription[]): void {
    this.got.push(msg);
  }
}

function setup() {
  const m = new MemoryStreams();
  return { m, engine: new Engine(m, m) };
}

const topics = (s: Sink) => s.got.map((m) => m.topic);

describe('Engine: NATS subscriptions', () => {
  it('matches NATS subjects against unified topics: `*` one token, `>` one or more (a.> does not match a)', () => {
    const { engine } = setup();
    const rest = new Sink('rest');
    const one = new Sink('one');
    const exact = new Sink('exact');
    engine.subscribe('a.>', rest, { qos: 0, rule: 'nats' });
    engine.subscribe('a.*', one, { qos: 0, rule: 'nats' });
    engine.subscribe('a.b', exact, { qos: 0, rule: 'nats' });
    for (const t of ['a', 'a/b', 'a/b/c', 'b/a']) engine.publish(makeMessage(t, Buffer.alloc(0)));
    assert.deepEqual(topics(rest), ['a/b', 'a/b/c']);
    assert.deepEqual(topics(one), ['a/b']);
    assert.deepEqual(topics(exact), ['a/b']);
  });

  it('a `/` inside a subject token is a `.` inside a unified level', () => {
    const { engine } = setup();
    const s = new Sink('s');
    engine.subscribe('x/y.*', s, { qos: 0, rule: 'nats' });
    engine.publish(makeMessage('x.y/z', Buffer.alloc(0)));
    engine.publish(makeMessage('x/y/z', Buffer.alloc(0)));
    assert.deepEqual(topics(s), ['x.y/z']);
  });

  it('has no MQTT `$` rule: `>` matches $JS/API topics, while an MQTT `#` does not', () => {
    const { engine } = setup();
    const nats = new Sink('n');
    const mqtt = new Sink('m');
    engine.subscribe('>', nats, { qos: 0, rule: 'nats' });
    engine.subscribe('#', mqtt, { qos: 0 });
    engine.publish(makeMessage('$JS/API/INFO', Buffer.alloc(0)));
    assert.deepEqual(topics(nats), ['$JS/API/INFO']);
    assert.deepEqual(topics(mqtt), []);
    assert.equal(engine.hasLiveSubscribers('$JS/API/INFO'), true);
  });

  it('refuses invalid subjects and unsubscribes by the subject it was given', () => {
    const { engine } = setup();
    const s = new Sink('s');
    assert.throws(() => engine.subscribe('a.>.b', s, { qos: 0, rule: 'nats' }), { code: 'INVALID_FILTER' });
    assert.throws(() => engine.subscribe('a..b', s, { qos: 0, rule: 'nats' }), { code: 'INVALID_FILTER' });
    const sub = engine.subscribe('a.>', s, { qos: 0, rule: 'nats' });
    engine.unsubscribe(sub);
    engine.publish(makeMessage('a/b', Buffer.alloc(0)));
    assert.equal(s.got.length, 0);
    assert.equal(engine.hasLiveSubscribers('a/b'), false);
  });

  it('a NATS queue group is its own shared group, apart from an MQTT group of the same name', () => {
    const { engine } = setup();
    const n = [new Sink('n1'), new Sink('n2')];
    const m = new Sink('m1');
    const subs = n.map((s) => engine.subscribe('jobs.*', s, { qos: 0, rule: 'nats', group: 'g' }));
    engine.subscribe('jobs/+', m, { qos: 0, group: 'g' });
    for (let i = 0; i < 4; i++) engine.publish(makeMessage('jobs/x', Buffer.from(String(i))));
    assert.deepEqual(
      n.map((s) => s.got.length),
      [2, 2],
    );
    assert.equal(m.got.length, 4, 'the MQTT group gets every message once');
    for (const s of subs) engine.unsubscribe(s);
    engine.publish(makeMessage('jobs/x', Buffer.from('after')));
    assert.deepEqual(
      n.map((s) => s.got.length),
      [2, 2],
    );
  });
});

describe('Engine: PublishInfo', () => {
  it('reports live deliveries and stream appends with their offsets', async () => {
    const { engine } = setup();
    await engine.createStream({ name: 'tele', partitions: 1, bindings: ['dev/+/t'] });
    const s = new Sink('s');
    engine.subscribe('dev.*.t', s, { qos: 0, rule: 'nats' });
    const first = newPublishInfo();
    await engine.publish(makeMessage('dev/1/t', Buffer.from('a')), first);
    const second = newPublishInfo();
    await engine.publish(makeMessage('dev/2/t', Buffer.from('b')), second);
    assert.deepEqual(first, { delivered: 1, captured: [{ stream: 'tele', partition: 0, offset: 0 }], queued: 0 });
    assert.deepEqual(second.captured, [{ stream: 'tele', partition: 0, offset: 1 }]);
    const none = newPublishInfo();
    assert.equal(engine.publish(makeMessage('nobody/here', Buffer.alloc(0)), none), null);
    assert.deepEqual(none, { delivered: 0, captured: [], queued: 0 });
  });
});
