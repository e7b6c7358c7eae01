/**
 * nats.js against FlowMQ across a broker restart: what a durable JetStream consumer and a stream's duplicate window
 * remember (docs/nats.md, "What survives a restart").
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AckPolicy, connect, StringCodec, type JsMsg, type NatsConnection } from 'nats';
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
