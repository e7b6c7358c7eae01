/**
 * nats.js against FlowMQ across a broker restart: what a durable JetStream consumer and a stream's duplicate window
 * remember (docs/nats.md, "What survives a restart").
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AckPolicy, connect, nanos, StringCodec, type JsMsg, type NatsConnection } from 'nats';
import { FlowmqProcess } from './harness.js';

const sc = StringCodec();

/** Fetches up to `max` messages (waiting up to 1.5 s for them): [payload, delivery count] each. */
async function fetch(nc: NatsConnection, stream: string, name: string, max: number): Promise<{ got: Array<[string, number]>; msgs: JsMsg[] }> {
  const c = await nc.jetstream().consumers.get(stream, name);
  const msgs: JsMsg[] = [];
  for await (const m of await c.fetch({ max_messages: max, expires: 1500 })) msgs.push(m);
  return { got: msgs.map((m) => [sc.decode(m.data), m.info.redeliveryCount]), msgs };
}

describe('e2e: a durable JetStream consumer over a restart', () => {
  let broker: FlowmqProcess;
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('counts deliveries on from where they were, and honours max_deliver across it', async () => {
    broker = await FlowmqProcess.start();
    let nc = await connect({ servers: broker.natsServer });
    const jsm = await nc.jetstreamManager();
    const js = nc.jetstream();
    await jsm.streams.add({ name: 'DR', subjects: ['dr.>'] });
    await jsm.consumers.add('DR', { durable_name: 'c', ack_policy: AckPolicy.Explicit, max_deliver: 3 });
    for (const m of ['m1', 'm2', 'm3']) await js.publish(`dr.${m}`, sc.encode(m));
    // m1 delivered 3 times (max_deliver), m2 twice, m3 once; none acked.
    const first = await fetch(nc, 'DR', 'c', 3);
    assert.deepEqual(first.got, [
      ['m1', 1],
      ['m2', 1],
      ['m3', 1],
    ]);
    first.msgs[0].nak();
    first.msgs[1].nak();
    const second = await fetch(nc, 'DR', 'c', 2);
    assert.deepEqual(second.got, [
      ['m1', 2],
      ['m2', 2],
    ]);
    second.msgs[0].nak();
    const third = await fetch(nc, 'DR', 'c', 1);
    assert.deepEqual(third.got, [['m1', 3]]);
    const before = await jsm.consumers.info('DR', 'c');
    assert.equal(before.num_redelivered, 2);
    await nc.close();

    broker = await broker.restart();
    nc = await connect({ servers: broker.natsServer });
    const info = await (await nc.jetstreamManager()).consumers.info('DR', 'c');
    assert.equal(info.num_redelivered, 2);
    await nc.jetstream().publish('dr.m4', sc.encode('m4'));
    // m1 had its 3 deliveries: not again; m2 and m3 counted on; m4 new.
    const after = await fetch(nc, 'DR', 'c', 3);
    assert.deepEqual(after.got, [
      ['m2', 3],
      ['m3', 2],
      ['m4', 1],
    ]);
    for (const m of after.msgs) await m.ackAck();
    const done = await (await nc.jetstreamManager()).consumers.info('DR', 'c');
    assert.deepEqual([done.num_ack_pending, done.num_redelivered, done.ack_floor.stream_seq], [0, 0, 4]);
    await nc.close();
  });
});

describe('e2e: a duplicate window over a restart', () => {
  let broker: FlowmqProcess;
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('keeps its length and its ids: a retried Nats-Msg-Id is still a duplicate, not stored twice', async () => {
    broker = await FlowmqProcess.start();
    let nc = await connect({ servers: broker.natsServer });
    const jsm = await nc.jetstreamManager();
    await jsm.streams.add({ name: 'DW', subjects: ['dw.>'], duplicate_window: nanos(60_000) });
    await jsm.streams.add({ name: 'DX', subjects: ['dx.>'], duplicate_window: nanos(400) });
    const js = nc.jetstream();
    const t0 = Date.now();
    const ack = (a: { seq: number; duplicate: boolean }) => [a.seq, a.duplicate];
    assert.deepEqual(ack(await js.publish('dx.1', sc.encode('x'), { msgID: 'x' })), [1, false]);
    assert.deepEqual(ack(await js.publish('dw.1', sc.encode('a'), { msgID: 'a' })), [1, false]);
    assert.deepEqual(ack(await js.publish('dw.2', sc.encode('b'), { msgID: 'b' })), [2, false]);
    assert.deepEqual(ack(await js.publish('dw.3', sc.encode('plain'))), [3, false]);
    assert.deepEqual(ack(await js.publish('dw.1', sc.encode('a'), { msgID: 'a' })), [1, true]);
    await nc.close();

    broker = await broker.restart();
    nc = await connect({ servers: broker.natsServer });
    const jsm2 = await nc.jetstreamManager();
    const js2 = nc.jetstream();
    assert.equal((await jsm2.streams.info('DW')).config.duplicate_window, nanos(60_000));
    assert.equal((await jsm2.streams.info('DX')).config.duplicate_window, nanos(400));
    assert.deepEqual(ack(await js2.publish('dw.1', sc.encode('a'), { msgID: 'a' })), [1, true]);
    assert.deepEqual(ack(await js2.publish('dw.2', sc.encode('b'), { msgID: 'b' })), [2, true]);
    assert.deepEqual(ack(await js2.publish('dw.4', sc.encode('c'), { msgID: 'c' })), [4, false]);
    // The last id is known again (Nats-Expected-Last-Msg-Id).
    assert.deepEqual(ack(await js2.publish('dw.5', sc.encode('d'), { msgID: 'd', expect: { lastMsgID: 'c' } })), [5, false]);
    assert.equal((await jsm2.streams.info('DW')).state.messages, 5);
    // An id leaves the window when its record's time is past it, restart or not.
    while (Date.now() - t0 < 600) await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(ack(await js2.publish('dx.1', sc.encode('x'), { msgID: 'x' })), [2, false]);
    await nc.close();
  });
});
