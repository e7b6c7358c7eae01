import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  decodeBatch,
  encodeBatch,
  Engine,
  makeMessage,
  newPublishInfo,
  partitionFor,
  recordToMessage,
  type Message,
  type Subscriber,
  type Subscription,
} from '../../src/core/index.js';
import kafkajsPkg from 'kafkajs';
import { MemoryStreams } from '../helpers/memory-storage.js';

const { Partitioners } = kafkajsPkg;

class Sink implements Subscriber {
  readonly got: Array<{ msg: Message; subs: Subscription[] }> = [];
  constructor(readonly id: string) {}
  deliver(msg: Message, subs: Subscription[]): void {
    this.got.push({ msg, subs });
  }
}

function setup() {
  const m = new MemoryStreams();
  return { m, engine: new Engine(m, m) };
}

describe('Engine', () => {
  it('delivers to matching live subscribers once each, with all matched subscriptions', () => {
    const { engine } = setup();
    const a = new Sink('a');
    const b = new Sink('b');
    engine.subscribe('x/#', a, { qos: 1 });
    engine.subscribe('x/+', a, { qos: 0 });
    engine.subscribe('y/#', b, { qos: 0 });
    assert.equal(engine.publish(makeMessage('x/1', Buffer.from('p'))), null, 'nothing durable to wait for');
    assert.equal(a.got.length, 1);
    assert.deepEqual(a.got[0].subs.map((s) => s.filter).sort(), ['x/#', 'x/+']);
    assert.equal(b.got.length, 0);
  });
  it('spreads a shared group round-robin and rebalances when a member leaves', () => {
    const { engine } = setup();
    const sinks = [new Sink('1'), new Sink('2'), new Sink('3')];
    const subs = sinks.map((s) => engine.subscribe('jobs/#', s, { qos: 0, group: 'g' }));
    for (let i = 0; i < 9; i++) engine.publish(makeMessage('jobs/a', Buffer.from(String(i))));
    assert.deepEqual(
      sinks.map((s) => s.got.length),
      [3, 3, 3],
    );
    engine.unsubscribe(subs[0]);
    for (let i = 0; i < 4; i++) engine.publish(makeMessage('jobs/a', Buffer.from(String(i))));
    assert.equal(sinks[0].got.length, 3);
    assert.equal(sinks[1].got.length + sinks[2].got.length, 10);
    engine.unsubscribe(subs[1]);
    engine.unsubscribe(subs[2]);
    assert.ok(!engine.hasLiveSubscribers('jobs/a'));
  });
  it('captures publishes into bound streams, by topic hash, in order', async () => {
    const { engine } = setup();
    await engine.createStream({ name: 'telemetry', partitions: 3, bindings: ['factory/+/+/telemetry'] });
    const msgs = Array.from({ length: 30 }, (_, i) => makeMessage(`factory/l1/d${i % 5}/telemetry`, Buffer.from(String(i))));
    for (const m of msgs) {
      const d = engine.publish(m);
      assert.ok(d, 'a captured publish returns a durability promise');
      await d;
    }
    assert.equal(engine.publish(makeMessage('factory/l1/d1/other', Buffer.from('x'))), null);
    let total = 0;
    for (let p = 0; p < 3; p++) {
      const recs = (await engine.read('telemetry', p, 0, 1 << 20)).flatMap((b) => decodeBatch(b));
      total += recs.length;
      const perDevice = new Map<string, number[]>();
      for (const r of recs) {
        const msg = recordToMessage(r, 'telemetry');
        assert.equal(partitionFor(msg, 3), p);
        const list = perDevice.get(msg.topic) ?? [];
        list.push(Number(msg.payload.toString()));
        perDevice.set(msg.topic, list);
      }
      for (const list of perDevice.values())
        assert.deepEqual(
          list,
          [...list].sort((x, y) => x - y),
        );
    }
    assert.equal(total, 30);
  });
  it('routes a Kafka produce to live subscribers and other bound streams', async () => {
    const { engine } = setup();
    await engine.createStream({ name: 'alerts.fire', partitions: 1 });
    await engine.createStream({ name: 'all-alerts', partitions: 2, bindings: ['alerts/#'] });
    const sink = new Sink('s');
    engine.subscribe('alerts/#', sink, { qos: 1 });
    const r = engine.produce('alerts.fire', 0, encodeBatch([{ key: Buffer.from('k'), value: Buffer.from('hot'), headers: [], timestamp: 1 }]));
    await r.durable;
    assert.equal(sink.got.length, 1);
    assert.equal(sink.got[0].msg.topic, 'alerts/fire');
    assert.equal(sink.got[0].msg.payload.toString(), 'hot');
    const copies = (await engine.read('all-alerts', partitionFor(sink.got[0].msg, 2), 0, 1 << 20)).flatMap((b) => decodeBatch(b));
    assert.equal(copies.length, 1);
    assert.equal(copies[0].key?.toString(), 'k');
    // ...but not back into the stream it was produced to.
    assert.equal(engine.offsets('alerts.fire', 0).highWatermark, 1);
    // And an MQTT-style publish to alerts/fire lands in the Kafka topic, which binds its own name.
    await engine.publish(makeMessage('alerts/fire', Buffer.from('again')));
    assert.equal(engine.offsets('alerts.fire', 0).highWatermark, 2);
  });
  it('lets a produced record claim only a topic its stream binds (flowmq.topic header)', async () => {
    const { engine } = setup();
    await engine.createStream({ name: 'alerts.fire', partitions: 1 });
    await engine.createStream({ name: 'telemetry', partitions: 1, bindings: ['factory/+/+/telemetry'] });
    const sink = new Sink('s');
    engine.subscribe('#', sink, { qos: 0 });
    const withTopic = (t: string) =>
      encodeBatch([{ key: null, value: Buffer.from(t), headers: [{ key: 'flowmq.topic', value: Buffer.from(t) }], timestamp: 1 }]);
    await engine.produce('alerts.fire', 0, withTopic('secret/cmd')).durable;
    await engine.produce('telemetry', 0, withTopic('factory/l1/d7/telemetry')).durable;
    await engine.produce('telemetry', 0, withTopic('factory/+/bad')).durable;
    assert.deepEqual(
      sink.got.map((g) => g.msg.topic),
      ['alerts/fire', 'factory/l1/d7/telemetry', 'telemetry'],
    );
  });

  it('captures topics whose levels hold dots, which have no Kafka name of their own', async () => {
    const { engine } = setup();
    await engine.createStream({ name: 'versions', partitions: 2, bindings: ['fw/#'] });
    await engine.publish(makeMessage('fw/v1.2/esp32', Buffer.from('x')));
    const recs = (await Promise.all([0, 1].map((p) => engine.read('versions', p, 0, 1 << 20)))).flat().flatMap((b) => decodeBatch(b));
    assert.equal(recs.length, 1);
    assert.equal(recordToMessage(recs[0], 'versions').topic, 'fw/v1.2/esp32');
  });

  it('rejects bad stream definitions with clear errors', async () => {
    const { engine } = setup();
    await assert.rejects(engine.createStream({ name: 'a/b', partitions: 1 }), { code: 'INVALID_ARGUMENT' });
    await assert.rejects(engine.createStream({ name: 'ok', partitions: 0 }), { code: 'INVALID_ARGUMENT' });
    await assert.rejects(engine.createStream({ name: 'ok', partitions: 1, bindings: ['a/#/b'] }), { code: 'INVALID_FILTER' });
    await engine.createStream({ name: 'ok', partitions: 1 });
    await assert.rejects(engine.createStream({ name: 'ok', partitions: 1 }), { code: 'ALREADY_EXISTS' });
    assert.throws(() => engine.produce('nope', 0, encodeBatch([{ key: null, value: null, headers: [], timestamp: 0 }])), { code: 'NOT_FOUND' });
    assert.throws(() => engine.offsets('ok', 1), { code: 'NOT_FOUND' });
  });
  it("keeps a stream's settings, replaces them whole, and refuses bad ones", async () => {
    const { engine, m } = setup();
    const def = await engine.createStream({ name: 'set', partitions: 1, retentionMs: 1000, segmentBytes: 1 << 20, configs: { b: '2', a: '1' } });
    assert.deepEqual([def.retentionMs, def.segmentBytes, def.configs], [1000, 1 << 20, { a: '1', b: '2' }]);
    assert.ok(!('retentionBytes' in def) && !('segmentMs' in def), 'unset settings are left out of the definition');
    const next = await engine.setSettings('set', { retentionBytes: 0, segmentMs: 5000 });
    assert.deepEqual(
      [next.retentionMs, next.retentionBytes, next.segmentBytes, next.segmentMs, next.configs, next.createdAt],
      [null, 0, undefined, 5000, undefined, def.createdAt],
    );
    assert.deepEqual(
      (await m.listStreams()).find((d) => d.name === 'set'),
      next,
    );
    await assert.rejects(engine.setSettings('set', { segmentBytes: 0 }), { code: 'INVALID_ARGUMENT' });
    await assert.rejects(engine.setSettings('set', { retentionBytes: 1.5 }), { code: 'INVALID_ARGUMENT' });
    await assert.rejects(engine.setSettings('nope', {}), { code: 'NOT_FOUND' });
    assert.equal(engine.getStream('set')?.def, next);
  });

  it("partitions by key exactly as Kafka's default partitioner (murmur2), here checked against KafkaJS", () => {
    const meta = Array.from({ length: 7 }, (_, i) => ({ partitionId: i, leader: 0, partitionErrorCode: 0, replicas: [0], isr: [0] }));
    const kafkajs = Partitioners.DefaultPartitioner();
    for (let i = 0; i < 500; i++) {
      const key = `device-${i * 7919}`;
      const expected = kafkajs({ topic: 't', partitionMetadata: meta, message: { key, value: null } });
      assert.equal(partitionFor(makeMessage('t', Buffer.alloc(0), { key: Buffer.from(key) }), 7), expected, key);
    }
    assert.equal(partitionFor(makeMessage('t', Buffer.alloc(0), { key: Buffer.from('k') }), 1), 0);
  });

  it('hands topics under a reserved prefix (Engine.direct) to its handler only: no subscriber, stream or retain sees them', async () => {
    const { engine } = setup();
    const taken: string[] = [];
    engine.direct = { prefix: 'amq/rabbitmq/reply-to/', deliver: (msg) => (taken.push(msg.topic), msg.topic.endsWith('/known')) };
    const all = new Sink('all');
    engine.subscribe('#', all, { qos: 0 });
    engine.subscribe('amq/rabbitmq/reply-to/#', all, { qos: 0 });
    engine.subscribe('+/+/+/+', all, { qos: 0, rule: 'nats' });
    await engine.createStream({ name: 'everything', partitions: 1, bindings: ['#'] });
    const info = newPublishInfo();
    assert.equal(engine.publish(makeMessage('amq/rabbitmq/reply-to/known', Buffer.from('r'), { retain: true }), info), null);
    assert.equal(info.delivered, 1, 'counted as delivered when the handler took it');
    assert.equal(engine.publish(makeMessage('amq/rabbitmq/reply-to/gone', Buffer.from('r'))), null);
    assert.deepEqual(taken, ['amq/rabbitmq/reply-to/known', 'amq/rabbitmq/reply-to/gone']);
    assert.equal(engine.retained.size, 0);
    // Everything else goes on as before: the marker reaches the subscriber and the stream, and is all they have.
    await engine.publish(makeMessage('marker', Buffer.from('m')));
    assert.deepEqual(
      all.got.map((g) => g.msg.topic),
      ['marker'],
    );
    assert.equal(engine.offsets('everything', 0).highWatermark, 1);
  });
});
